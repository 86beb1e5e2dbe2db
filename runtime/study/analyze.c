/*
 * The analysis of a study (ar_study_analyze): the rows of runs.csv that
 * gave a response go to the statistics (effects.c), whose results become
 * effects.csv, report.html (report.c) and a few sentences on the log.
 */
#define _GNU_SOURCE
#include "csv.h"
#include "design.h"
#include "report.h"
#include "store.h"

#include "accelrt/runtime.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- effects.csv --------------------------------------------------------- */

/* A number of effects.csv: six significant digits, empty when not finite. */
static void csv_num(char *buf, size_t cap, double v) {
  if (isfinite(v))
    snprintf(buf, cap, "%.6g", v);
  else
    buf[0] = '\0';
}

/* The line of term i: kind, names, order, the estimate with its interval,
 * verdict, alias, sentence, and on the log scale the ratios. */
static void effect_line(const ar_fx_design *d, const ar_fx_result *r, int i, int n_cols,
                        csv_buf *b) {
  const ar_fx_term *T = &r->terms[i];
  char name[512], letters[32], other[32], sentence[2048], nums[4][32], ratio[3][32], ord[8];
  ar_fx_term_name(r, d, i, false, name, sizeof name);
  ar_fx_term_name(r, d, i, true, letters, sizeof letters);
  other[0] = '\0';
  if (T->alias_of >= 0) {
    ar_fx_term_name(r, d, T->alias_of, true, other + (T->alias_sign < 0), sizeof other - 1);
    if (T->alias_sign < 0)
      other[0] = '-';
  } else if (T->alias_of == -2) {
    snprintf(other, sizeof other, "mean");
  }
  ar_fx_sentence(r, d, i, sentence, sizeof sentence);
  double v[4] = {T->effect, T->se, T->lo, T->hi};
  for (int j = 0; j < 4; j++)
    csv_num(nums[j], sizeof nums[j], v[j]);
  snprintf(ord, sizeof ord, "%d", T->order);
  double rv[3] = {T->effect, T->lo, T->hi};
  for (int j = 0; j < 3; j++)
    csv_num(ratio[j], sizeof ratio[j], isfinite(rv[j]) ? ar_fx_ratio(T, rv[j]) : NAN);
  const char *fields[] = {"effect", name,     letters, ord,      "",
                          nums[0],  nums[1],  nums[2], nums[3],  ar_fx_verdict_name(T->verdict),
                          other,    sentence, "log",   ratio[0], ratio[1],
                          ratio[2]};
  for (int j = 0; j < n_cols; j++)
    ar__csv_field(b, fields[j]);
  ar__csv_end_line(b);
}

/* The line of level l of factor f: its mean with interval (on the log
 * scale also as a geometric mean). */
static void level_line(const ar_study *s, const ar_fx_result *r, int f, int l, int n_cols,
                       csv_buf *b) {
  char letters[8], nums[3][32], ratio[3][32];
  int o = r->level_off[f] + l;
  double v[3] = {r->level_mean[o], r->level_lo[o], r->level_hi[o]};
  for (int j = 0; j < 3; j++) {
    csv_num(nums[j], sizeof nums[j], v[j]);
    csv_num(ratio[j], sizeof ratio[j], exp(v[j]));
  }
  snprintf(letters, sizeof letters, "%c", 'A' + f);
  const char *fields[] = {"level_mean", s->f[f].path, letters,  "1",      s->f[f].label[l],
                          nums[0],      "",           nums[1],  nums[2],  "",
                          "",           "",           "log",    ratio[0], ratio[1],
                          ratio[2]};
  for (int j = 0; j < n_cols; j++)
    ar__csv_field(b, fields[j]);
  ar__csv_end_line(b);
}

/* The lines of a split on a factor of several levels: each other term
 * within each level ("within", the level in the level column), then its
 * differences between levels ("across", "a vs b"), then the differences
 * of the level means. */
static void split_lines(const ar_fx_design *d, const ar_fx_result *whole, const ar_fx_split *x,
                        int n_cols, csv_buf *b) {
  const char *const *ln = d->level_names[x->factor];
  char name[512], letters[32], level[1024], nums[4][32], ratio[3][32], ord[8], sen[4096];
  for (int t = 0; t <= x->n_terms; t++) {
    bool means = t == x->n_terms; /* the last group: the level means */
    const ar_fx_split_term *T = means ? NULL : &x->terms[t];
    ar_fx_term rt = {.order = means ? 1 : T->order};
    if (means) {
      snprintf(name, sizeof name, "%s", d->names[x->factor]);
      snprintf(letters, sizeof letters, "%c", 'A' + x->factor);
      ar_fx_split_level_sentence(x, d, whole, sen, sizeof sen);
    } else {
      ar_fx_split_term_name(x, d, t, name, sizeof name);
      size_t len = 0;
      for (int f = 0; f < d->k; f++)
        if ((T->mask >> f) & 1u)
          len += (size_t)snprintf(letters + len, sizeof letters - len, "%c", 'A' + f);
      ar_fx_split_sentence(x, d, t, sen, sizeof sen);
    }
    snprintf(ord, sizeof ord, "%d", rt.order);
    for (int l = 0; !means && l < x->n_levels; l++) {
      const ar_fx_term *e = &T->in[l];
      double v[4] = {e->effect, e->se, e->lo, e->hi};
      for (int j = 0; j < 4; j++)
        csv_num(nums[j], sizeof nums[j], v[j]);
      for (int j = 0; j < 3; j++)
        csv_num(ratio[j], sizeof ratio[j],
                isfinite(v[j ? j + 1 : 0]) ? ar_fx_ratio(e, v[j ? j + 1 : 0]) : NAN);
      const char *fields[] = {"within", name, letters, ord, ln[l], nums[0], nums[1], nums[2],
                              nums[3], ar_fx_verdict_name(e->verdict), "", "", "log",
                              ratio[0], ratio[1], ratio[2]};
      for (int j = 0; j < n_cols; j++)
        ar__csv_field(b, fields[j]);
      ar__csv_end_line(b);
    }
    const ar_fx_pair *pairs = means ? x->level_pairs : T->pairs;
    for (int p = 0; p < x->n_pairs; p++) {
      const ar_fx_pair *q = &pairs[p];
      snprintf(level, sizeof level, "%s vs %s", ln[q->a], ln[q->b]);
      double v[3] = {q->diff, q->lo, q->hi};
      for (int j = 0; j < 3; j++) {
        csv_num(nums[j], sizeof nums[j], v[j]);
        csv_num(ratio[j], sizeof ratio[j], isfinite(v[j]) ? ar_fx_ratio(&rt, v[j]) : NAN);
      }
      const char *fields[] = {"across", name, letters, ord, level, nums[0], "", nums[1],
                              nums[2], !isfinite(q->lo) ? "no interval"
                                       : q->differs     ? "differs"
                                                        : "same",
                              "", p == 0 ? sen : "", "log", ratio[0], ratio[1],
                              ratio[2]};
      for (int j = 0; j < n_cols; j++)
        ar__csv_field(b, fields[j]);
      ar__csv_end_line(b);
    }
  }
}

static ar_status write_effects(const ar_study *s, const ar_fx_design *d, const ar_fx_result *r,
                               ar_fx_split *const *splits, ar_err *err) {
  /* A log study has four more columns: the scale and, from the ln-scale
   * estimate and interval, an effect's ratio (ar_fx_ratio) or a level's
   * geometric mean; a linear study's file stays as it always was. */
  static const char *const header[] = {
      "kind",    "term",    "letters", "order",   "level",           "estimate",
      "se",      "ci_low",  "ci_high", "verdict", "confounded_with", "sentence",
      "scale",   "ratio",   "ratio_ci_low",       "ratio_ci_high"};
  int n_cols = s->scale == AR_FX_LOG ? 16 : 12;
  csv_buf b = {0};
  for (int j = 0; j < n_cols; j++)
    ar__csv_field(&b, header[j]);
  ar__csv_end_line(&b);
  for (int i = 0; i < r->n_terms; i++)
    effect_line(d, r, i, n_cols, &b);
  for (int f = 0; f < s->k; f++)
    for (int l = 0; l < s->f[f].n_levels; l++)
      level_line(s, r, f, l, n_cols, &b);
  for (int f = 0; f < s->k; f++)
    if (splits[f])
      split_lines(d, r, splits[f], n_cols, &b);
  char *path = ar_path_join(s->out, "effects.csv");
  ar_status st = path && !b.oom ? ar_write_file_atomic(path, b.buf, b.len, err)
                                : ar_errf(err, AR_NOMEM, "out of memory");
  ar_free(path);
  ar_free(b.buf);
  return st;
}

/* ---- the summary on the log ---------------------------------------------- */

/* What the analysis found, in sentences: how many runs gave the response,
 * runs left out of a log-scale fit, each estimated term, the level means
 * of factors of more than two levels, and where the outputs are. */
static void print_summary(FILE *log, const ar_study *s, const study_row *rows, int n, int m,
                          const ar_fx_design *d, const ar_fx_result *r,
                          ar_fx_split *const *splits, const char *report) {
  bool logs = s->scale == AR_FX_LOG;
  fprintf(log, "\n%s: %d of %d runs gave %s", s->name, m, s->n_runs, s->resp_name);
  if (r->n_missing)
    fprintf(log, "; %d planned cell%s without a result", r->n_missing,
            r->n_missing > 1 ? "s" : "");
  fprintf(log, "%s\n", logs ? "; analysed on a log scale" : "");
  /* A response <= 0 has no logarithm: the run is named and left out. */
  int shown = 0;
  for (int i = 0; logs && i < n; i++)
    if (rows[i].status == RUN_OK && isfinite(rows[i].y) && rows[i].y <= 0)
      fprintf(log, "%s%s (%s %.6g)", shown++ ? ", " : "  not analysable on a log scale: ",
              rows[i].run, s->resp_name, rows[i].y);
  if (shown)
    fprintf(log, ": left out (a response <= 0 has no logarithm)\n");
  char sentence[2048];
  for (int i = 0; i < r->n_terms; i++) {
    if (r->terms[i].alias_of != -1 && r->terms[i].order > 1)
      continue;
    ar_fx_sentence(r, d, i, sentence, sizeof sentence);
    fprintf(log, "  %s\n", sentence);
  }
  char text[8192];
  for (int f = 0; f < s->k; f++) {
    if (!splits[f])
      continue;
    ar_fx_split_level_sentence(splits[f], d, r, text, sizeof text);
    fprintf(log, "  %s\n", text);
    for (int t = 0; t < splits[f]->n_terms; t++) {
      ar_fx_split_sentence(splits[f], d, t, text, sizeof text);
      fprintf(log, "  %s\n", text);
    }
  }
  for (int f = 0; f < s->k; f++) {
    if (s->f[f].n_levels == 2 || splits[f])
      continue;
    fprintf(log, "  %s: means", s->f[f].path);
    for (int l = 0; l < s->f[f].n_levels; l++) {
      double mean = r->level_mean[r->level_off[f] + l];
      fprintf(log, "%s %s %.4g", l ? "," : "", s->f[f].label[l], logs ? exp(mean) : mean);
    }
    fprintf(log, " (%sa factor of %d levels: only its main effect; interactions need two "
            "levels)\n", logs ? "geometric; " : "", s->f[f].n_levels);
  }
  fprintf(log, "report: %s  effects: %s/effects.csv  runs: %s/runs.csv\n", report, s->out,
          s->out);
}

/* ---- the analysis -------------------------------------------------------- */

ar_status ar_study_analyze(ar_study *s, const ar_study_opts *opts, ar_err *err) {
  FILE *log = opts && opts->log ? opts->log : stdout;
  study_row *rows = NULL;
  int n = 0, m = 0;
  AR_CHECK(ar__study_store_read(s, false, &rows, &n, err));
  /* The observations: the rows that gave a response. */
  int *cell = ar_malloc((size_t)(n ? n : 1) * sizeof *cell);
  double *y = ar_malloc((size_t)(n ? n : 1) * sizeof *y);
  char *report = ar_path_join(s->out, "report.html");
  ar_fx_result *r = NULL;
  ar_status st = cell && y && report ? AR_OK : ar_errf(err, AR_NOMEM, "out of memory");
  for (int i = 0; st == AR_OK && i < n; i++)
    if (rows[i].status == RUN_OK && isfinite(rows[i].y)) {
      cell[m] = rows[i].cell;
      y[m++] = rows[i].y;
    }
  int levels[AR_FX_MAX_FACTORS];
  const char *names[AR_FX_MAX_FACTORS];
  const char *const *ln[AR_FX_MAX_FACTORS];
  ar_fx_design d;
  ar__study_fx_design(s, &d, levels, names, ln);
  if (st == AR_OK)
    st = ar_fx_analyze(&d, cell, y, m, &r, err);
  /* Each factor of more than two levels (model families, datasets):
   * the others' effects within each of its levels. */
  ar_fx_split *splits[AR_FX_MAX_FACTORS] = {NULL};
  for (int f = 0; st == AR_OK && f < s->k && s->k > 1; f++)
    if (s->f[f].n_levels > 2)
      st = ar_fx_split_analyze(&d, r, f, cell, y, m, &splits[f], err);
  if (st == AR_OK)
    st = write_effects(s, &d, r, splits, err);
  if (st == AR_OK)
    st = ar__study_report(s, rows, n, &d, r, splits, report, err);
  if (st == AR_OK && !(opts && opts->quiet))
    print_summary(log, s, rows, n, m, &d, r, splits, report);
  for (int f = 0; f < s->k; f++)
    ar_fx_split_destroy(splits[f]);
  ar_free(cell);
  ar_free(y);
  ar_free(report);
  ar_fx_result_destroy(r);
  ar__study_rows_free(rows, n);
  return st;
}
