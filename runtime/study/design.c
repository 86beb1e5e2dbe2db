/*
 * The design of a study: cell names, the planned cells of a 2^(k-p)
 * fraction, the randomised run order, and the design as --dry-run prints
 * it (factors, the fraction's defining relation and aliases, the runs in
 * order).  See design.h.
 */
#include "design.h"
#include "launcher.h"

#include <stdio.h>
#include <string.h>

/* ---- cells --------------------------------------------------------------- */

int ar__study_level(const ar_study *s, int cell, int f) {
  for (int g = 0; g < f; g++)
    cell /= s->f[g].n_levels;
  return cell % s->f[f].n_levels;
}

const char *ar__study_base(const ar_study *s, int cell) {
  if (s->base_factor < 0)
    return s->base;
  return s->f[s->base_factor].file[ar__study_level(s, cell, s->base_factor)];
}

const char *ar__study_alongside(const ar_study *s, int cell) {
  if (s->alongside_factor < 0)
    return NULL;
  return s->f[s->alongside_factor].file[ar__study_level(s, cell, s->alongside_factor)];
}

void ar__study_cell_name(const ar_study *s, int cell, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int f = 0; f < s->k && len < cap; f++)
    len += (size_t)snprintf(buf + len, cap - len, "%c%d", 'A' + f, ar__study_level(s, cell, f));
}

ar_status ar__study_make_design(ar_study *s) {
  s->n_cells = 1;
  for (int f = 0; f < s->k; f++)
    s->n_cells *= s->f[f].n_levels;
  s->planned = ar_malloc((size_t)s->n_cells);
  if (!s->planned)
    return AR_NOMEM;
  s->n_planned = 0;
  for (int c = 0; c < s->n_cells; c++) {
    bool in = true;
    for (int g = 0; g < s->n_gens && in; g++) {
      int prod = s->gens[g].sign;
      for (int f = 0; f < s->k; f++)
        if ((s->gens[g].word >> f) & 1u)
          prod *= ar__study_level(s, c, f) ? 1 : -1;
      in = (ar__study_level(s, c, s->gens[g].target) ? 1 : -1) == prod;
    }
    s->planned[c] = in;
    s->n_planned += in;
  }
  s->n_runs = s->n_planned * s->replicates;
  s->run_cell = ar_malloc((size_t)s->n_runs * sizeof *s->run_cell);
  s->run_rep = ar_malloc((size_t)s->n_runs * sizeof *s->run_rep);
  if (!s->run_cell || !s->run_rep)
    return AR_NOMEM;
  int i = 0;
  for (int c = 0; c < s->n_cells; c++)
    for (int r = 0; s->planned[c] && r < s->replicates; r++) {
      s->run_cell[i] = c;
      s->run_rep[i++] = r;
    }
  ar_rng rng;
  ar_rng_seed(&rng, s->seed, 0x57d1);
  for (int j = s->n_runs - 1; j > 0; j--) {
    int p = (int)ar_rng_below(&rng, (uint64_t)j + 1);
    int tc = s->run_cell[j], tr = s->run_rep[j];
    s->run_cell[j] = s->run_cell[p];
    s->run_rep[j] = s->run_rep[p];
    s->run_cell[p] = tc;
    s->run_rep[p] = tr;
  }
  return AR_OK;
}

/* ---- the design, printed ------------------------------------------------- */

static const char *kind_text(const ar_study *s, char *buf, size_t cap) {
  char lt[2048];
  if (s->kind == STUDY_DIST)
    snprintf(buf, cap, "distributed job, %d ranks, each run under %s", s->ranks,
             ar__study_launcher_text(s, lt, sizeof lt));
  else
    snprintf(buf, cap, "%s", s->kind == STUDY_JOBS ? "jobs: file (lanes)" : "single job");
  return buf;
}

void ar__study_fx_design(const ar_study *s, ar_fx_design *d, int *levels, const char **names,
                         const char *const **lnames) {
  memset(d, 0, sizeof *d);
  for (int f = 0; f < s->k; f++) {
    levels[f] = s->f[f].n_levels;
    names[f] = s->f[f].path;
    lnames[f] = (const char *const *)s->f[f].label;
  }
  d->k = s->k;
  d->levels = levels;
  d->names = names;
  d->level_names = lnames;
  d->planned = s->planned;
  d->better = s->better;
  d->response = s->resp_name;
  d->unit = s->unit;
  d->confidence = 0.95;
  d->scale = s->scale;
}

static void word_text(unsigned w, int sign, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "%s", sign < 0 ? "-" : "");
  for (int f = 0; f < AR_FX_MAX_FACTORS && len < cap; f++)
    if ((w >> f) & 1u)
      len += (size_t)snprintf(buf + len, cap - len, "%c", 'A' + f);
}

/* The fraction's defining relation and the aliases of the effects up to
 * three factors, as lines ("I = ABCD", "AB = CD"). */
static void print_aliases(const ar_study *s, FILE *to) {
  if (!s->n_gens)
    return;
  int levels[AR_FX_MAX_FACTORS];
  const char *names[AR_FX_MAX_FACTORS];
  const char *const *ln[AR_FX_MAX_FACTORS];
  ar_fx_design d;
  ar__study_fx_design(s, &d, levels, names, ln);
  ar_fx_result *r = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_fx_analyze(&d, NULL, NULL, 0, &r, &err) != AR_OK)
    return;
  char w[64], g[64];
  int res = 99;
  fprintf(to, "fraction: 2^(%d-%d) = %d of %d cells, generators", s->k, s->n_gens,
          s->n_planned, s->n_cells);
  for (int i = 0; i < s->n_gens; i++)
    fprintf(to, " %s", s->gens[i].text);
  fprintf(to, "\ndefining relation: I");
  for (int i = 0; i < r->n_words; i++) {
    word_text(r->words[i], r->word_sign[i], w, sizeof w);
    fprintf(to, " = %s", w);
    int len = __builtin_popcount(r->words[i]);
    res = len < res ? len : res;
  }
  fprintf(to, " (resolution %d)\naliases (effects of up to three factors):\n", res);
  for (int t = 0; t < r->n_terms; t++) {
    const ar_fx_term *T = &r->terms[t];
    if (T->alias_of != -1)
      continue;
    /* "  AB = CD = -EF": the term and every term estimated with it. */
    char line[1024];
    size_t len = (size_t)snprintf(line, sizeof line, "  ");
    word_text(T->mask, 1, w, sizeof w);
    int shown = 0;
    for (int u = 0; u < r->n_terms && len < sizeof line; u++)
      if (r->terms[u].alias_of == t) {
        word_text(r->terms[u].mask, r->terms[u].alias_sign, g, sizeof g);
        len += (size_t)snprintf(line + len, sizeof line - len, "%s = %s", shown++ ? "" : w, g);
      }
    if (shown)
      fprintf(to, "%s\n", line);
  }
  for (int t = 0; t < r->n_terms; t++)
    if (r->terms[t].alias_of == -2) {
      word_text(r->terms[t].mask, 1, w, sizeof w);
      fprintf(to, "  %s is confounded with the mean: not estimable\n", w);
    }
  ar_fx_result_destroy(r);
}

void ar_study_print_design(const ar_study *s, FILE *to) {
  char kb[2200], cn[64];
  if (s->base_factor >= 0)
    fprintf(to, "study %s: base jobs of factor %c (%s)\n", s->name, 'A' + s->base_factor,
            kind_text(s, kb, sizeof kb));
  else
    fprintf(to, "study %s: base %s (%s)\n", s->name, s->base, kind_text(s, kb, sizeof kb));
  if (s->alongside_factor >= 0)
    fprintf(to, "factor %c: the job file of its level runs alongside each run on this machine, "
            "restarted until the run ends\n",
            'A' + s->alongside_factor);
  fprintf(to, "response: %s (%s is better), %d replicate%s, seed %llu%s%s\n", s->resp_name,
          s->better > 0 ? "higher" : "lower", s->replicates, s->replicates > 1 ? "s" : "",
          (unsigned long long)s->seed, s->vary_seed ? ", job seed varied per replicate" : "",
          s->scale == AR_FX_LOG ? ", analysed on a log scale (effects as ratios)" : "");
  for (int i = 0; i < s->n_sets; i++)
    fprintf(to, "every run: --set %s\n", s->sets[i]);
  if (s->eval)
    fprintf(to, "after each run: accelrt eval --points %ld --reps %ld on its checkpoint "
            "(eval.json in the run's folder)\n",
            s->eval_points, s->eval_reps);
  fprintf(to, "factors:\n");
  for (int f = 0; f < s->k; f++) {
    fprintf(to, "  %c  %-28s ", 'A' + f, s->f[f].path);
    for (int l = 0; l < s->f[f].n_levels; l++)
      fprintf(to, "%s%d=%s", l ? "  " : "", l, s->f[f].label[l]);
    fprintf(to, "\n");
  }
  print_aliases(s, to);
  fprintf(to, "cells: %d planned of %d\n", s->n_planned, s->n_cells);
  fprintf(to, "runs: %d in this order (output %s/runs/CELL-rREP):\n", s->n_runs, s->out);
  for (int i = 0; i < s->n_runs; i++) {
    ar__study_cell_name(s, s->run_cell[i], cn, sizeof cn);
    fprintf(to, "  %3d  %s-r%d ", i + 1, cn, s->run_rep[i] + 1);
    for (int f = 0; f < s->k; f++)
      fprintf(to, " %s", s->f[f].label[ar__study_level(s, s->run_cell[i], f)]);
    fprintf(to, "\n");
  }
}
