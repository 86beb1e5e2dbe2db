/*
 * The factors of a study file and the generators of its fraction (see
 * study_file.h): job keys, alone or linked with '+', each with a list of
 * levels passed to the job as --set overrides; "D=ABC" words over the
 * factor letters.
 */
#include "study_file.h"

#include <stdio.h>
#include <string.h>

/* ---- factors ------------------------------------------------------------- */

/* Splits a factor's name into the job keys it sets ("a+b": both take each
 * level) in keybuf; false when it names none or too many. */
static bool factor_keys(const ar_ynode *key, char *keybuf, size_t cap,
                        char *keys[STUDY_MAX_LINKED], int *nk) {
  *nk = 0;
  if (key->len >= cap)
    return false;
  snprintf(keybuf, cap, "%s", key->text);
  bool ok = true;
  for (char *p = keybuf, *plus = NULL; ok && p; p = plus ? plus + 1 : NULL) {
    plus = strchr(p, '+');
    if (plus)
      *plus = '\0';
    ok = *p && *nk < STUDY_MAX_LINKED;
    if (ok)
      keys[(*nk)++] = p;
  }
  return ok;
}

/* Level l's label, as written; a label already taken by an earlier level
 * is a located error. */
static void take_label(study_diags *c, study_factor *f, int l, const ar_ynode *x,
                       const char *lp) {
  char q[128];
  for (int m = 0; m < l; m++)
    if (f->label[m] && !strcmp(f->label[m], x->text))
      ar__study_diag(c, x->line, x->col, lp, "level '%s' is listed twice",
                     ar_ynode_quote(x, q, sizeof q));
  f->label[l] = ar__study_strdup(c, x->text);
}

/* The levels of factor f (the list v) for its nk keys. */
static void factor_levels(study_diags *c, study_factor *f, const ar_ynode *v, const char *path,
                          char *const *keys, int nk) {
  f->set = ar_calloc((size_t)v->n * (size_t)nk, sizeof *f->set);
  f->label = ar_calloc((size_t)v->n, sizeof *f->label);
  f->lline = ar_calloc((size_t)v->n, sizeof *f->lline);
  f->lcol = ar_calloc((size_t)v->n, sizeof *f->lcol);
  if (!f->set || !f->label || !f->lline || !f->lcol) {
    c->nomem = true;
    return;
  }
  for (int l = 0; l < v->n; l++) {
    const ar_ynode *x = v->vals[l];
    char lp[320];
    snprintf(lp, sizeof lp, "%s[%d]", path, l);
    if (x->kind != AR_YNODE_SCALAR) {
      ar__study_diag(c, x->line, x->col, lp,
                     "a level is a single value (a number, a word, a quoted string); vary "
                     "the keys inside a structure as factors of their own");
      continue;
    }
    take_label(c, f, l, x, lp);
    for (int j = 0; j < nk; j++)
      f->set[l * nk + j] = ar__study_override(c, keys[j], x);
    f->lline[l] = x->line;
    f->lcol[l] = x->col;
  }
  f->n_levels = v->n;
}

/* The levels of a base or alongside factor: job files relative to the
 * study file (alongside also none), each readable; their labels as
 * written. */
static void file_levels(study_diags *c, study_factor *f, const ar_study *s, const ar_ynode *v,
                        const char *path) {
  f->file = ar_calloc((size_t)v->n, sizeof *f->file);
  f->seed = ar_calloc((size_t)v->n, sizeof *f->seed);
  f->label = ar_calloc((size_t)v->n, sizeof *f->label);
  f->lline = ar_calloc((size_t)v->n, sizeof *f->lline);
  f->lcol = ar_calloc((size_t)v->n, sizeof *f->lcol);
  if (!f->file || !f->seed || !f->label || !f->lline || !f->lcol) {
    c->nomem = true;
    return;
  }
  f->n_levels = v->n;
  for (int l = 0; l < v->n; l++) {
    const ar_ynode *x = v->vals[l];
    char lp[320];
    snprintf(lp, sizeof lp, "%s[%d]", path, l);
    f->lline[l] = x->line;
    f->lcol[l] = x->col;
    if (x->kind != AR_YNODE_SCALAR || x->len == 0) {
      ar__study_diag(c, x->line, x->col, lp, "expected a job file, relative to the study file%s",
                     f->kind == FACTOR_ALONGSIDE ? ", or none" : "");
      continue;
    }
    take_label(c, f, l, x, lp);
    if (f->kind == FACTOR_ALONGSIDE && ar_ynode_is(x, "none"))
      continue;
    f->file[l] = ar__study_file_path(c, s, x, lp,
                                     f->kind == FACTOR_BASE ? "the base job" : "the job file");
  }
}

void ar__study_parse_factors(study_diags *c, ar_study *s, const ar_ynode *n) {
  if (n->kind != AR_YNODE_MAP || n->n == 0) {
    ar__study_diag(c, n->line, n->col, "factors",
                   "expected a mapping of job keys to lists of levels, e.g. "
                   "{train.batch: [64, 256], distributed.order: [random, tac]}");
    return;
  }
  if (n->n > AR_FX_MAX_FACTORS) {
    const ar_ynode *past = n->keys[AR_FX_MAX_FACTORS];
    ar__study_diag(c, past->line, past->col, "factors",
                   "at most %d factors; split the study or use a fraction of fewer factors",
                   AR_FX_MAX_FACTORS);
    return;
  }
  long cells = 1;
  for (int i = 0; i < n->n && !c->nomem; i++) {
    const ar_ynode *key = n->keys[i], *v = n->vals[i];
    char path[300], keybuf[300], q[128];
    char *keys[STUDY_MAX_LINKED];
    snprintf(path, sizeof path, "factors.%s", key->text);
    study_factor *f = &s->f[s->k++];
    f->path = ar__study_strdup(c, key->text);
    f->line = key->line;
    f->col = key->col;
    bool is_base = !strcmp(key->text, "base"), is_along = !strcmp(key->text, "alongside");
    if (is_base || is_along) {
      f->kind = is_base ? FACTOR_BASE : FACTOR_ALONGSIDE;
      int *which = is_base ? &s->base_factor : &s->alongside_factor;
      if (*which < 0)
        *which = s->k - 1;
      if (v->kind != AR_YNODE_SEQ || v->n < 2) {
        ar__study_diag(c, v->line, v->col, path,
                       is_base ? "expected a list of two or more job files, e.g. "
                                 "[../cluster.yaml, ../cluster-inception.yaml]"
                               : "expected a list of two or more levels, e.g. [none, "
                                 "../shared-device.yaml]");
        continue;
      }
      file_levels(c, f, s, v, path);
      cells *= v->n;
      continue;
    }
    if (!factor_keys(key, keybuf, sizeof keybuf, keys, &f->n_keys)) {
      ar__study_diag(c, key->line, key->col, path,
                     "'%s' is not a factor: name a job key, or up to %d keys joined by '+' "
                     "that take the same level (model.layers.out.dense+data.generate.labels)",
                     ar_ynode_quote(key, q, sizeof q), STUDY_MAX_LINKED);
      continue;
    }
    if (v->kind != AR_YNODE_SEQ || v->n < 2) {
      ar__study_diag(c, v->line, v->col, path,
                     "expected a list of two or more levels, e.g. [fifo, pack]");
      continue;
    }
    factor_levels(c, f, v, path, keys, f->n_keys);
    cells *= v->n;
    for (int g = 0; g < i; g++)
      if (s->f[g].path && f->path && !strcmp(s->f[g].path, f->path))
        ar__study_diag(c, key->line, key->col, path, "the factor is listed twice");
  }
  if (cells > AR_FX_MAX_CELLS)
    ar__study_diag(c, n->line, n->col, "factors",
                   "the full design has %ld cells, more than %d; use fewer levels or a "
                   "fraction",
                   cells, AR_FX_MAX_CELLS);
}

/* ---- the fraction -------------------------------------------------------- */

/* One generator "D=ABC" or "D=-ABC" over the factor letters into *g;
 * false when it is not one. */
static bool parse_generator(const ar_study *s, const char *t, size_t len, study_gen *g) {
  g->target = t[0] - 'A';
  g->sign = 1;
  g->word = 0;
  bool ok = len >= 3 && g->target >= 0 && g->target < s->k && t[1] == '=';
  const char *p = t + 2;
  if (ok && *p == '-') {
    g->sign = -1;
    p++;
  }
  ok = ok && *p;
  for (; ok && *p; p++) {
    int f = *p - 'A';
    ok = f >= 0 && f < s->k && f != g->target && !((g->word >> f) & 1u);
    if (ok)
      g->word |= 1u << f;
  }
  return ok;
}

void ar__study_parse_fraction(study_diags *c, ar_study *s, const ar_ynode *n) {
  if (n->kind != AR_YNODE_SEQ || n->n == 0) {
    ar__study_diag(c, n->line, n->col, "fraction",
                   "expected a list of generators such as [D=ABC] (factor letters in the "
                   "order the factors are listed: A is the first)");
    return;
  }
  unsigned targets = 0;
  for (int i = 0; i < n->n; i++) {
    const ar_ynode *g = n->vals[i];
    char path[64], q[128];
    snprintf(path, sizeof path, "fraction[%d]", i);
    study_gen x;
    if (!ar__study_scalar(c, g, path))
      continue;
    if (!parse_generator(s, g->text, g->len, &x)) {
      ar__study_diag(c, g->line, g->col, path,
                     "expected a generator X=WORD such as D=ABC or D=-ABC over the factor "
                     "letters A..%c, got '%s'",
                     'A' + s->k - 1, ar_ynode_quote(g, q, sizeof q));
      continue;
    }
    if ((targets >> x.target) & 1u) {
      ar__study_diag(c, g->line, g->col, path, "factor %c is generated twice", 'A' + x.target);
      continue;
    }
    targets |= 1u << x.target;
    x.text = ar__study_strdup(c, g->text);
    s->gens[s->n_gens++] = x;
  }
  for (int i = 0; i < s->n_gens; i++)
    if (s->gens[i].word & targets)
      ar__study_diag(c, n->line, n->col, "fraction",
                     "generator %s uses a generated factor; write every generator over the "
                     "base factors only",
                     s->gens[i].text ? s->gens[i].text : "?");
  for (int f = 0; f < s->k; f++)
    if (s->f[f].n_levels != 2 && s->f[f].n_levels != 0) {
      ar__study_diag(c, n->line, n->col, "fraction",
                     "a 2^(k-p) fraction needs every factor at two levels; %s has %d",
                     s->f[f].path, s->f[f].n_levels);
      break;
    }
}
