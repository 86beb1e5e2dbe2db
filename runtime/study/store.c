/*
 * OUT/design.txt and OUT/runs.csv: the durable record of a study (see
 * store.h for the rules).
 */
#define _GNU_SOURCE
#include "store.h"

#include "csv.h"

#include "accelrt/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- statuses and rows --------------------------------------------------- */

static const char *const status_names[] = {
#define STUDY__RUN_STATUS_NAME(name, text) text,
    STUDY_RUN_STATUS_MAP(STUDY__RUN_STATUS_NAME)
#undef STUDY__RUN_STATUS_NAME
};

const char *ar__study_status_name(run_status st) {
  return st >= 0 && st < RUN_STATUS_COUNT ? status_names[st] : "unknown";
}

bool ar__study_status_parse(const char *text, run_status *out) {
  for (int i = 0; i < RUN_STATUS_COUNT; i++)
    if (!strcmp(text, status_names[i])) {
      *out = (run_status)i;
      return true;
    }
  return false;
}

void ar__study_rows_free(study_row *rows, int n) {
  for (int i = 0; rows && i < n; i++) {
    ar_free(rows[i].run);
    ar_free(rows[i].note);
  }
  ar_free(rows);
}

/* ---- design.txt ---------------------------------------------------------- */

/* FNV-1a of a file's bytes; 0 when unreadable. */
static uint64_t file_hash(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  uint64_t h = 1469598103934665603ull;
  int ch;
  while ((ch = getc(f)) != EOF)
    h = (h ^ (unsigned char)ch) * 1099511628211ull;
  fclose(f);
  return h;
}

static char *design_text(const ar_study *s) {
  char *t = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&t, &len);
  if (!m)
    return NULL;
  char *real = realpath(s->base, NULL);
  if (s->base_factor < 0)
    fprintf(m, "accelrt study design 1\nbase: %s\nbase_fnv1a: %016llx\n", real ? real : s->base,
            (unsigned long long)file_hash(s->base));
  else
    fprintf(m, "accelrt study design 1\n");
  free(real);
  for (int i = 0; i < s->n_sets; i++)
    fprintf(m, "set: %s\n", s->sets[i]);
  for (int f = 0; f < s->k; f++) {
    fprintf(m, "factor %c: %s:", 'A' + f, s->f[f].path);
    /* A base or alongside level is a file: its real path and its bytes'
     * hash, so that a changed job is noticed as a changed base is. */
    for (int l = 0; s->f[f].kind != FACTOR_SET && l < s->f[f].n_levels; l++) {
      const char *file = s->f[f].file[l];
      char *rl = file ? realpath(file, NULL) : NULL;
      fprintf(m, " [%s %016llx]", file ? (rl ? rl : file) : "none",
              (unsigned long long)(file ? file_hash(file) : 0));
      free(rl);
    }
    for (int l = 0; l < s->f[f].n_levels; l++)
      for (int i = 0; i < s->f[f].n_keys; i++)
        fprintf(m, "%s%s%s", i ? " " : " [", s->f[f].set[l * s->f[f].n_keys + i],
                i + 1 == s->f[f].n_keys ? "]" : "");
    fprintf(m, "\n");
  }
  for (int g = 0; g < s->n_gens; g++)
    fprintf(m, "generator: %s\n", s->gens[g].text);
  fprintf(m, "response: %s\nreplicates: %d\nseed: %llu\nvary_seed: %d\nranks: %d\n",
          s->resp_name, s->replicates, (unsigned long long)s->seed, s->vary_seed, s->ranks);
  if (s->eval) /* only then, so that the designs of studies without eval stay as they were */
    fprintf(m, "eval: points %ld reps %ld\n", s->eval_points, s->eval_reps);
  fclose(m);
  return t;
}

ar_status ar__study_store_check_design(const ar_study *s, bool resume, ar_err *err) {
  char *want = design_text(s), *path = ar_path_join(s->out, "design.txt");
  ar_status st = AR_OK;
  if (!want || !path) {
    st = ar_errf(err, AR_NOMEM, "out of memory");
    goto done;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    if (resume)
      st = ar_errf(err, AR_STATE, "nothing to resume: %s has no design.txt (run the study "
                   "without --resume to start it)", s->out);
    else
      st = ar_write_file_atomic(path, want, strlen(want), err);
    goto done;
  }
  char have[65536];
  size_t n = fread(have, 1, sizeof have - 1, f);
  have[n] = '\0';
  fclose(f);
  if (strcmp(have, want) != 0) {
    const char *a = have, *b = want;
    int line = 1;
    while (*a && *a == *b) {
      line += *a == '\n';
      a++;
      b++;
    }
    while (a > have && a[-1] != '\n')
      a--, b--;
    st = ar_errf(err, AR_STATE,
                 "%s holds another study: its design.txt differs at line %d ('%.*s' there, "
                 "'%.*s' now; the base job file counts by its contents); use another output "
                 "folder (--out DIR) or move %s away",
                 s->out, line, (int)strcspn(a, "\n"), a, (int)strcspn(b, "\n"), b, s->out);
  }
done:
  free(want);
  ar_free(path);
  return st;
}

/* ---- runs.csv: reading --------------------------------------------------- */

/* The header of this study's runs.csv, appended to b as fields. */
static void header_fields(const ar_study *s, csv_buf *b) {
  const char *fixed[] = {"run", "cell", "replicate", "order"};
  for (int i = 0; i < 4; i++)
    ar__csv_field(b, fixed[i]);
  for (int f = 0; f < s->k; f++)
    ar__csv_field(b, s->f[f].path);
  ar__csv_field(b, s->resp_name);
  const char *tail[] = {"status", "wall_s", "started_unix", "note"};
  for (int i = 0; i < 4; i++)
    ar__csv_field(b, tail[i]);
}

/* The rest of a stream as one NUL-terminated buffer (free() it), its
 * length in *len; NULL when out of memory. */
static char *slurp(FILE *f, size_t *len) {
  char *t = NULL;
  *len = 0;
  FILE *m = open_memstream(&t, len);
  char chunk[16384];
  size_t got;
  while (m && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
    fwrite(chunk, 1, got, m);
  if (m)
    fclose(m);
  return t;
}

/* runs.csv's text in *data (free() it; NULL when there is no file), cut
 * after its last newline: a partial last line is a row a crash cut short.
 * With repair the file is truncated there too. */
static ar_status read_whole_lines(const char *path, bool repair, char **data, ar_err *err) {
  *data = NULL;
  FILE *f = fopen(path, "r+");
  if (!f)
    return AR_OK;
  size_t len = 0;
  *data = slurp(f, &len);
  if (!*data) {
    fclose(f);
    return ar_errf(err, AR_NOMEM, "out of memory reading runs.csv");
  }
  ar_status st = AR_OK;
  size_t keep = len;
  while (keep > 0 && (*data)[keep - 1] != '\n')
    keep--;
  if (keep < len) {
    fprintf(stderr, "accelrt study: %s: dropped a partial last line (a run stopped while its "
            "row was written); that run is redone\n", path);
    if (repair && (ftruncate(fileno(f), (off_t)keep) != 0 || fsync(fileno(f)) != 0))
      st = ar_errf(err, AR_IO, "cannot repair '%s': %s", path, strerror(errno));
    (*data)[keep] = '\0';
  }
  fclose(f);
  return st;
}

/* Parses one data line of runs.csv (split in place) into *r, whose strings
 * are new.  AR_CORRUPT names path:lineno. */
static ar_status parse_row(const ar_study *s, char *line, char **fl, const char *path,
                           int lineno, study_row *r, ar_err *err) {
  int ncol = 4 + s->k + 5;
  int nf = ar__csv_split(line, fl, ncol);
  if (nf != ncol)
    return ar_errf(err, AR_CORRUPT, "%s:%d: expected %d fields, found %d; the file was "
                   "edited by hand? fix or remove that line",
                   path, lineno, ncol, nf);
  int cell = -1, rep = atoi(fl[2]) - 1;
  for (int c = 0; c < s->n_cells && cell < 0; c++) {
    char cn[64];
    ar__study_cell_name(s, c, cn, sizeof cn);
    if (!strcmp(cn, fl[1]))
      cell = c;
  }
  if (cell < 0 || !s->planned[cell] || rep < 0 || rep >= s->replicates)
    return ar_errf(err, AR_CORRUPT, "%s:%d: run '%s' is not part of this design", path, lineno,
                   fl[0]);
  run_status status;
  if (!ar__study_status_parse(fl[5 + s->k], &status))
    return ar_errf(err, AR_CORRUPT, "%s:%d: run '%s' has the unknown status '%.40s'; a row's "
                   "status is ok, failed, timeout, skipped, no_response or not_reached",
                   path, lineno, fl[0], fl[5 + s->k]);
  memset(r, 0, sizeof *r);
  r->cell = cell;
  r->rep = rep;
  r->order = atoi(fl[3]);
  char *end = NULL;
  r->y = strtod(fl[4 + s->k], &end);
  if (end == fl[4 + s->k])
    r->y = NAN;
  r->status = status;
  r->wall_s = strtod(fl[6 + s->k], NULL);
  r->started = strtod(fl[7 + s->k], NULL);
  r->run = ar_strdup(fl[0]);
  r->note = ar_strdup(fl[8 + s->k]);
  if (r->run && r->note)
    return AR_OK;
  ar_free(r->run);
  ar_free(r->note);
  return ar_errf(err, AR_NOMEM, "out of memory");
}

/* Puts r into rows[0..*n): over the row of the same run (a later row of a
 * run replaces an earlier one), or appended.  Takes r's strings. */
static ar_status keep_row(study_row **rows, int *n, int *cap, study_row *r, ar_err *err) {
  int at = 0;
  while (at < *n && strcmp((*rows)[at].run, r->run))
    at++;
  if (at < *n) {
    ar_free((*rows)[at].run);
    ar_free((*rows)[at].note);
  } else if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 32;
    study_row *grown = ar_realloc(*rows, (size_t)nc * sizeof *grown);
    if (!grown) {
      ar_free(r->run);
      ar_free(r->note);
      return ar_errf(err, AR_NOMEM, "out of memory");
    }
    *rows = grown;
    *cap = nc;
  }
  (*rows)[at] = *r;
  *n += at == *n;
  return AR_OK;
}

ar_status ar__study_store_read(const ar_study *s, bool repair, study_row **out, int *n_out,
                               ar_err *err) {
  *out = NULL;
  *n_out = 0;
  char *path = ar_path_join(s->out, "runs.csv"), *data = NULL, *header = NULL;
  char **fl = ar_malloc((size_t)(4 + s->k + 5) * sizeof *fl);
  study_row *rows = NULL;
  int n = 0, cap = 0;
  ar_status st = path && fl ? read_whole_lines(path, repair, &data, err)
                            : ar_errf(err, AR_NOMEM, "out of memory");
  if (st != AR_OK || !data)
    goto done;
  csv_buf h = {0};
  header_fields(s, &h);
  header = h.buf;
  if (h.oom) {
    st = ar_errf(err, AR_NOMEM, "out of memory");
    goto done;
  }
  /* Line by line; empty lines are skipped but counted. */
  char *line = data;
  for (int lineno = 1; st == AR_OK && *line; lineno++) {
    char *nl = strchr(line, '\n');
    *nl = '\0'; /* every line ends with one (read_whole_lines) */
    if (lineno == 1 && strcmp(line, header) != 0)
      st = ar_errf(err, AR_STATE,
                   "%s was written by a different study (its header is '%.200s', this "
                   "study's is '%.200s'); use another output folder (--out DIR) or move it away",
                   path, line, header);
    else if (lineno > 1 && *line) {
      study_row r;
      st = parse_row(s, line, fl, path, lineno, &r, err);
      if (st == AR_OK)
        st = keep_row(&rows, &n, &cap, &r, err);
    }
    line = nl + 1;
  }
done:
  ar_free(fl);
  free(data);
  ar_free(header);
  ar_free(path);
  if (st != AR_OK) {
    ar__study_rows_free(rows, n);
    return st;
  }
  *out = rows;
  *n_out = n;
  return AR_OK;
}

/* ---- runs.csv: appending ------------------------------------------------- */

/* Writes all of buf to fd (one write per call, retried on short writes). */
static ar_status write_all(int fd, const char *buf, size_t len, const char *path, ar_err *err) {
  while (len > 0) {
    ssize_t w = write(fd, buf, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return ar_errf(err, AR_IO, "writing '%s' failed: %s", path, strerror(errno));
    buf += w;
    len -= (size_t)w;
  }
  return AR_OK;
}

/* r's line of runs.csv, appended to b. */
static void row_line(const ar_study *s, const study_row *r, csv_buf *b) {
  char num[64], cn[64];
  ar__study_cell_name(s, r->cell, cn, sizeof cn);
  ar__csv_field(b, r->run);
  ar__csv_field(b, cn);
  snprintf(num, sizeof num, "%d", r->rep + 1);
  ar__csv_field(b, num);
  snprintf(num, sizeof num, "%d", r->order);
  ar__csv_field(b, num);
  for (int f = 0; f < s->k; f++)
    ar__csv_field(b, s->f[f].label[ar__study_level(s, r->cell, f)]);
  if (isfinite(r->y))
    snprintf(num, sizeof num, "%.10g", r->y);
  else
    num[0] = '\0';
  ar__csv_field(b, num);
  ar__csv_field(b, ar__study_status_name(r->status));
  snprintf(num, sizeof num, "%.3f", r->wall_s);
  ar__csv_field(b, num);
  snprintf(num, sizeof num, "%.3f", r->started);
  ar__csv_field(b, num);
  ar__csv_field(b, r->note ? r->note : "");
  ar__csv_end_line(b);
}

ar_status ar__study_store_append(const ar_study *s, const study_row *r, ar_err *err) {
  char *path = ar_path_join(s->out, "runs.csv");
  if (!path)
    return ar_errf(err, AR_NOMEM, "out of memory");
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0666);
  if (fd < 0) {
    ar_status st = ar_errf(err, AR_IO, "cannot write '%s': %s", path, strerror(errno));
    ar_free(path);
    return st;
  }
  /* A new file gets the header first, in the same write as the row. */
  struct stat sb;
  csv_buf b = {0};
  if (fstat(fd, &sb) == 0 && sb.st_size == 0) {
    header_fields(s, &b);
    ar__csv_end_line(&b);
  }
  row_line(s, r, &b);
  ar_status st = b.oom ? ar_errf(err, AR_NOMEM, "out of memory")
                       : write_all(fd, b.buf, b.len, path, err);
  if (st == AR_OK && fsync(fd) != 0)
    st = ar_errf(err, AR_IO, "fsync of '%s' failed: %s", path, strerror(errno));
  close(fd);
  ar_free(b.buf);
  ar_free(path);
  return st;
}
