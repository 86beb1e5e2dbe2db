/*
 * The study file (the format is docs/study.md; see study_file.h).
 *
 * Its keys are declared in the spec module's schema language and checked by
 * the spec module, exactly as job files are; this file reads the values and
 * checks the parts with a grammar of their own (AR_SCHEMA_ANY): factors
 * (job keys, possibly linked with '+', with lists of levels), the response,
 * the fraction's generators, the fixed overrides and the eval: block's two
 * forms.  Then validate.c checks the study against its base job.
 */
#include "study_file.h"

#include "design.h"
#include "response.h"

#include "accelrt/fs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the keys ------------------------------------------------------------------ */

/* By position: better: 1 for higher, -1 for lower. */
static const char *const better_values[] = {"higher", "lower", NULL};
/* By position: ar_fx_scale. */
static const char *const scale_values[] = {"linear", "log", NULL};
/* By position: false, true. */
static const char *const bool_values[] = {"false", "true", NULL};

/* eval: as a mapping (it may also be true or false). */
static const ar_schema eval_keys[] = {
    {.key = "points",
     .type = AR_SCHEMA_INT,
     .imin = 0,
     .imax = 2147483647,
     .def = "0",
     .expect = "a whole number from 0 to 2147483647",
     .doc = "accelrt eval's --points: test points evaluated, 0 for all."},
    {.key = "reps",
     .type = AR_SCHEMA_INT,
     .imin = 1,
     .imax = 1000,
     .def = "3",
     .expect = "a whole number from 1 to 1000",
     .doc = "accelrt eval's --reps: timed passes, the fastest kept."},
    {0}};

static const ar_schema eval_map = {.key = "eval", .type = AR_SCHEMA_MAP, .kids = eval_keys};

/* In the order the old messages listed them ("allowed keys: ..."). */
static const ar_schema study_keys[] = {
    {.key = "name", .type = AR_SCHEMA_STRING, .def_doc = "the file's name without .yaml"},
    {.key = "base",
     .type = AR_SCHEMA_PATH,
     .required = true,
     .expect = "the base job file, relative to this file (base: ../quickstart.yaml)"},
    {.key = "set", .type = AR_SCHEMA_ANY, .doc = "Fixed overrides: {job.key: value}."},
    {.key = "factors",
     .type = AR_SCHEMA_ANY,
     .required = true,
     .expect = "the factors, e.g. factors: {train.batch: [64, 256]}"},
    {.key = "response",
     .type = AR_SCHEMA_ANY,
     .required = true,
     .expect = "what to measure, e.g. response: samples_per_s"},
    {.key = "better",
     .type = AR_SCHEMA_ENUM,
     .values = better_values,
     .def_doc = "per response",
     .expect = "higher or lower"},
    {.key = "replicates",
     .type = AR_SCHEMA_INT,
     .imin = 1,
     .imax = 1000,
     .def = "3",
     .expect = "a whole number from 1 to 1000"},
    {.key = "seed",
     .type = AR_SCHEMA_INT,
     .imin = 0,
     .imax = 2147483647,
     .def = "1",
     .expect = "a whole number from 0 to 2147483647"},
    {.key = "fraction", .type = AR_SCHEMA_ANY, .doc = "Generators of a 2^(k-p) fraction."},
    {.key = "ranks",
     .type = AR_SCHEMA_INT,
     .imin = 2,
     .imax = 4096,
     .expect = "a whole number from 2 to 4096"},
    {.key = "timeout_s",
     .type = AR_SCHEMA_FLOAT,
     .fmin = 0,
     .fmin_open = true,
     .fmax = 1e7,
     .fmax_open = true,
     .expect = "seconds above 0"},
    {.key = "output", .type = AR_SCHEMA_STRING, .def_doc = "runs/studies/NAME"},
    {.key = "vary_seed",
     .type = AR_SCHEMA_ENUM,
     .values = bool_values,
     .def = "false",
     .expect = "true or false"},
    {.key = "keep_checkpoints",
     .type = AR_SCHEMA_ENUM,
     .values = bool_values,
     .def = "false",
     .expect = "true or false"},
    {.key = "eval", .type = AR_SCHEMA_ANY, .doc = "true, false or {points: N, reps: N}."},
    {.key = "scale",
     .type = AR_SCHEMA_ENUM,
     .values = scale_values,
     .def = "linear",
     .expect = "linear or log"},
    {0}};

static const ar_schema study_file = {.key = "", .type = AR_SCHEMA_MAP, .kids = study_keys};

/* ---- helpers -------------------------------------------------------------------- */

void ar__study_diag(study_diags *c, int line, int col, const char *path, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (ar_diags_add(c->d, line, col, path, "%s", msg) != AR_OK)
    c->nomem = true;
}

/* For the parts the table leaves to this file: a single value, or false
 * after reporting. */
static bool scalar(study_diags *c, const ar_ynode *n, const char *key) {
  if (n->kind == AR_YNODE_SCALAR)
    return true;
  ar__study_diag(c, n->line, n->col, key, "expected a single value, got a %s",
                 n->kind == AR_YNODE_MAP ? "mapping" : "list");
  return false;
}

static char *dup_text(study_diags *c, const char *text) {
  char *s = ar_strdup(text);
  if (!s)
    c->nomem = true;
  return s;
}

/* The value of a level as --set receives it: plain scalars as written,
 * quoted ones quoted again so that YAML reads the same string. */
static char *level_set(study_diags *c, const char *path, const ar_ynode *n) {
  size_t cap = strlen(path) + 2 * n->len + 8;
  char *s = ar_malloc(cap);
  if (!s) {
    c->nomem = true;
    return NULL;
  }
  size_t len = (size_t)snprintf(s, cap, "%s=", path);
  if (n->plain) {
    memcpy(s + len, n->text, n->len + 1);
    return s;
  }
  s[len++] = '"';
  for (size_t i = 0; i < n->len; i++) {
    if (n->text[i] == '"' || n->text[i] == '\\')
      s[len++] = '\\';
    s[len++] = n->text[i];
  }
  s[len++] = '"';
  s[len] = '\0';
  return s;
}

/* ---- factors ---------------------------------------------------------------------- */

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
    char lp[320], q[128];
    snprintf(lp, sizeof lp, "%s[%d]", path, l);
    if (x->kind != AR_YNODE_SCALAR) {
      ar__study_diag(c, x->line, x->col, lp,
                     "a level is a single value (a number, a word, a quoted string); vary "
                     "the keys inside a structure as factors of their own");
      continue;
    }
    for (int m = 0; m < l; m++)
      if (f->label[m] && !strcmp(f->label[m], x->text))
        ar__study_diag(c, x->line, x->col, lp, "level '%s' is listed twice",
                       ar_ynode_quote(x, q, sizeof q));
    f->label[l] = dup_text(c, x->text);
    for (int j = 0; j < nk; j++)
      f->set[l * nk + j] = level_set(c, keys[j], x);
    f->lline[l] = x->line;
    f->lcol[l] = x->col;
  }
  f->n_levels = v->n;
}

static void parse_factors(study_diags *c, ar_study *s, const ar_ynode *n) {
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
    f->path = dup_text(c, key->text);
    f->line = key->line;
    f->col = key->col;
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

/* ---- the response ----------------------------------------------------------------- */

/* The argument of {time_to_p1: P}, {key: K} or {eval: K}: sets what it
 * decides and the column name in buf.  false after reporting. */
static bool response_arg(study_diags *c, ar_study *s, const ar_ynode *arg, char *buf,
                         size_t cap) {
  char q[128];
  if (s->resp == AR_RESP_TIME_TO_P1) {
    if (!scalar(c, arg, "response.time_to_p1"))
      return false;
    char *end = NULL;
    double x = strtod(arg->text, &end);
    if (!arg->len || *end || !(x > 0 && x <= 100)) {
      ar__study_diag(c, arg->line, arg->col, "response.time_to_p1",
                     "expected P@1 in percent, above 0 and at most 100, got '%s'",
                     ar_ynode_quote(arg, q, sizeof q));
      return false;
    }
    s->resp_x = x;
    snprintf(buf, cap, "time_to_p1_%g", x);
    return true;
  }
  if (s->resp == AR_RESP_KEY) {
    if (!scalar(c, arg, "response.key"))
      return false;
    bool ok = arg->len > 0 && arg->len < 100;
    for (size_t j = 0; j < arg->len && ok; j++)
      ok = (arg->text[j] >= 'a' && arg->text[j] <= 'z') || arg->text[j] == '_' ||
           (arg->text[j] >= '0' && arg->text[j] <= '9');
    if (!ok) {
      ar__study_diag(c, arg->line, arg->col, "response.key",
                     "expected a key of summary.json (lower case, digits, _), got '%s'",
                     ar_ynode_quote(arg, q, sizeof q));
      return false;
    }
    s->resp_key = dup_text(c, arg->text);
    snprintf(buf, cap, "%s", arg->text);
    return true;
  }
  /* AR_RESP_EVAL_KEY */
  if (!scalar(c, arg, "response.eval"))
    return false;
  const study_eval_key *k = ar__study_eval_key_named(arg);
  if (!k) {
    ar__study_diag(c, arg->line, arg->col, "response.eval",
                   "'%s' is not a number accelrt eval writes; one of p_at_1, p_at_3, p_at_5, "
                   "samples_per_s, loss, and for a sampled output layer lsh_p_at_1, "
                   "lsh_p_at_3, lsh_p_at_5, lsh_samples_per_s, lsh_candidates_mean",
                   ar_ynode_quote(arg, q, sizeof q));
    return false;
  }
  s->resp_key = dup_text(c, arg->text);
  s->better = k->better;
  s->unit = k->unit;
  snprintf(buf, cap, "eval.%s", k->key);
  return true;
}

static void parse_response(study_diags *c, ar_study *s, const ar_ynode *n) {
  const ar_ynode *name = n, *arg = NULL;
  if (n->kind == AR_YNODE_MAP && n->n == 1) {
    name = n->keys[0];
    arg = n->vals[0];
  } else if (n->kind != AR_YNODE_SCALAR) {
    ar__study_diag(c, n->line, n->col, "response",
                   "expected a response name or {time_to_p1: P}, {key: SUMMARY_KEY} or "
                   "{eval: EVAL_KEY}");
    return;
  }
  s->resp_line = arg ? arg->line : name->line;
  s->resp_col = arg ? arg->col : name->col;
  const study_response *r = ar__study_response_named(name);
  if (!r) {
    char q[128];
    ar__study_diag(c, name->line, name->col, "response",
                   "unknown response '%s'; one of samples_per_s, iteration_s, makespan_s, "
                   "jct_s, p_at_1, wall_s, {time_to_p1: P@1 in percent}, {key: SUMMARY_KEY}, "
                   "and with eval: inference_samples_per_s, inference_p_at_1, "
                   "{eval: EVAL_KEY}",
                   ar_ynode_quote(name, q, sizeof q));
    return;
  }
  s->resp = r->kind;
  s->better = r->better;
  s->unit = r->unit;
  bool needs = s->resp == AR_RESP_TIME_TO_P1 || s->resp == AR_RESP_KEY ||
               s->resp == AR_RESP_EVAL_KEY;
  if (needs != (arg != NULL)) {
    ar__study_diag(c, name->line, name->col, "response",
                   needs ? "%s needs an argument: {time_to_p1: 50} (P@1 in percent, as "
                           "summary.json has it), {key: SUMMARY_KEY} or {eval: EVAL_KEY}"
                         : "%s takes no argument",
                   r->name);
    return;
  }
  char buf[160]; /* the column name in runs.csv */
  snprintf(buf, sizeof buf, "%s", r->name);
  if (!arg || response_arg(c, s, arg, buf, sizeof buf))
    s->resp_name = dup_text(c, buf);
}

/* ---- fraction, eval, set ----------------------------------------------------------- */

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

static void parse_fraction(study_diags *c, ar_study *s, const ar_ynode *n) {
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
    if (!scalar(c, g, path))
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
    x.text = dup_text(c, g->text);
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

/* eval: true, or {points: N, reps: N} as accelrt eval's --points and --reps. */
static void parse_eval(study_diags *c, ar_study *s, const ar_ynode *n) {
  s->eval_line = n->line;
  s->eval_col = n->col;
  ar_schema_value v;
  s->eval_points = ar_schema_get(&eval_map, NULL, "points", &v) ? v.i : 0;
  s->eval_reps = ar_schema_get(&eval_map, NULL, "reps", &v) ? v.i : 0;
  if (ar_ynode_is(n, "true") || ar_ynode_is(n, "false")) {
    s->eval = ar_ynode_is(n, "true");
    return;
  }
  if (n->kind != AR_YNODE_MAP) {
    char q[128];
    bool seq = n->kind == AR_YNODE_SEQ;
    ar__study_diag(c, n->line, n->col, "eval",
                   "expected {points: N, reps: N} (accelrt eval's --points, 0 for every test "
                   "point, and --reps) or true, got %s%s%s",
                   seq ? "a list" : "'", seq ? "" : ar_ynode_quote(n, q, sizeof q),
                   seq ? "" : "'");
    return;
  }
  s->eval = true;
  if (ar_schema_check(&eval_map, n, "eval", c->d) != AR_OK)
    c->nomem = true;
  if (ar_schema_get(&eval_map, n, "points", &v))
    s->eval_points = v.i;
  if (ar_schema_get(&eval_map, n, "reps", &v))
    s->eval_reps = v.i;
}

static void parse_sets(study_diags *c, ar_study *s, const ar_ynode *n) {
  if (n->kind != AR_YNODE_MAP) {
    ar__study_diag(c, n->line, n->col, "set",
                   "expected a mapping of job keys to values, e.g. {train.iterations: 40}");
    return;
  }
  s->sets = ar_calloc((size_t)n->n + 1, sizeof *s->sets);
  s->set_line = ar_calloc((size_t)n->n + 1, sizeof *s->set_line);
  s->set_col = ar_calloc((size_t)n->n + 1, sizeof *s->set_col);
  if (!s->sets || !s->set_line || !s->set_col) {
    c->nomem = true;
    return;
  }
  for (int i = 0; i < n->n; i++) {
    char path[300];
    snprintf(path, sizeof path, "set.%s", n->keys[i]->text);
    if (!scalar(c, n->vals[i], path))
      continue;
    s->sets[s->n_sets] = level_set(c, n->keys[i]->text, n->vals[i]);
    s->set_line[s->n_sets] = n->vals[i]->line;
    s->set_col[s->n_sets++] = n->vals[i]->col;
  }
}

/* ---- the file ------------------------------------------------------------------------ */

static char *path_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return ar_strdup(".");
  size_t n = (size_t)(slash - path);
  char *d = ar_malloc(n + 2);
  if (d) {
    memcpy(d, path, n ? n : 1);
    d[n ? n : 1] = '\0';
  }
  return d;
}

/* base: resolved against the study file's folder, and readable. */
static void read_base(study_diags *c, ar_study *s, const ar_ynode *root) {
  ar_schema_value v;
  if (!ar_schema_get(&study_file, root, "base", &v))
    return; /* missing or not a path: reported */
  s->base_given = dup_text(c, v.s);
  char *dir = path_dir(s->file);
  s->base = v.s[0] == '/' || !dir ? dup_text(c, v.s) : ar_path_join(dir, v.s);
  ar_free(dir);
  if (!s->base) {
    c->nomem = true;
  } else if (access(s->base, R_OK) != 0) {
    const ar_ynode *n = ar_ynode_get(root, "base");
    char q[128];
    ar__study_diag(c, n->line, n->col, "base",
                   "cannot read the base job '%s' (%s: %s); the path is relative to the study "
                   "file",
                   ar_ynode_quote(n, q, sizeof q), s->base, strerror(errno));
    ar_free(s->base);
    s->base = NULL;
  }
}

/* The keys whose values the table checks and converts (or defaults). */
static void read_settings(study_diags *c, ar_study *s, const ar_ynode *root) {
  ar_schema_value v;
  if (ar_schema_get(&study_file, root, "name", &v))
    s->name = dup_text(c, v.s);
  if (ar_schema_get(&study_file, root, "output", &v))
    s->out = dup_text(c, v.s);
  if (ar_schema_get(&study_file, root, "better", &v))
    s->better = v.e == 0 ? 1 : -1;
  else if (!ar_ynode_get(root, "better") && s->resp == AR_RESP_KEY && s->resp_name)
    ar__study_diag(c, root->line, root->col, "better",
                   "missing: say whether a higher or a lower %s is better (better: higher)",
                   s->resp_name);
  if (ar_schema_get(&study_file, root, "scale", &v))
    s->scale = (ar_fx_scale)v.e;
  if (ar_schema_get(&study_file, root, "replicates", &v))
    s->replicates = (int)v.i;
  if (ar_schema_get(&study_file, root, "seed", &v))
    s->seed = (uint64_t)v.i;
  if (ar_schema_get(&study_file, root, "ranks", &v))
    s->ranks = (int)v.i;
  if (ar_schema_get(&study_file, root, "timeout_s", &v))
    s->timeout_s = v.f;
  if (ar_schema_get(&study_file, root, "vary_seed", &v))
    s->vary_seed = v.e == 1;
  if (ar_schema_get(&study_file, root, "keep_checkpoints", &v))
    s->keep_checkpoints = v.e == 1;
}

/* Everything the file says, into s; problems to c. */
static void read_study(study_diags *c, ar_study *s, const ar_ynode *root) {
  if (!root || root->kind != AR_YNODE_MAP) {
    ar__study_diag(c, root ? root->line : 0, root ? root->col : 0, NULL,
                   "a study file is a mapping with base, factors and response (see "
                   "docs/study.md)");
    return;
  }
  if (ar_schema_check(&study_file, root, NULL, c->d) != AR_OK)
    c->nomem = true;
  const ar_ynode *n;
  read_base(c, s, root);
  if ((n = ar_ynode_get(root, "set")))
    parse_sets(c, s, n);
  if ((n = ar_ynode_get(root, "factors")))
    parse_factors(c, s, n);
  if ((n = ar_ynode_get(root, "response")))
    parse_response(c, s, n);
  read_settings(c, s, root);
  if ((n = ar_ynode_get(root, "fraction")) && s->k > 0)
    parse_fraction(c, s, n);
  if ((n = ar_ynode_get(root, "eval")))
    parse_eval(c, s, n);
  if (s->resp_name && ar__study_resp_from_eval(s->resp) && !s->eval)
    ar__study_diag(c, s->resp_line, s->resp_col, "response",
                   "%s is read from eval.json, which accelrt eval writes after each run: add "
                   "eval: {points: 2000, reps: 3} (or eval: true for every test point)",
                   s->resp_name);
}

/* The study's name and output folder when the file gives none: the
 * file's name without its extension, runs/studies/NAME (or --out). */
static void name_and_output(study_diags *c, ar_study *s, const ar_study_opts *opts) {
  if (!s->name) {
    const char *b = strrchr(s->file, '/');
    s->name = dup_text(c, b ? b + 1 : s->file);
    char *dot = s->name ? strrchr(s->name, '.') : NULL;
    if (dot && dot != s->name)
      *dot = '\0';
  }
  if (opts && opts->out_dir) {
    ar_free(s->out);
    s->out = dup_text(c, opts->out_dir);
  } else if (!s->out && s->name) {
    size_t n = strlen(s->name) + 16;
    s->out = ar_malloc(n);
    if (s->out)
      snprintf(s->out, n, "runs/studies/%s", s->name);
  }
  if (!s->name || !s->out)
    c->nomem = true;
}

ar_status ar_study_load(const char *path, const ar_study_opts *opts, ar_study **out,
                        ar_diags *diags) {
  ar_diags local = {0, NULL};
  ar_diags *d = diags ? diags : &local;
  *d = (ar_diags){0, NULL};
  *out = NULL;
  study_diags c = {d, false};
  ar_ynode *root = NULL;
  ar_study *s = ar_calloc(1, sizeof *s);
  ar_status st = s && (s->file = ar_strdup(path)) ? ar_yaml_load(path, "study file", &root, d)
                                                  : AR_NOMEM;
  if (st != AR_OK || d->count)
    goto done; /* the file is unreadable, not YAML, or has duplicate keys */
  read_study(&c, s, root);
  name_and_output(&c, s, opts);
  if (c.nomem || d->count)
    goto done;
  if (ar__study_make_design(s) != AR_OK) {
    c.nomem = true;
    goto done;
  }
  const ar_ynode *b = ar_ynode_get(root, "base");
  ar__study_validate(&c, s, (ar_srcpos){b->line, b->col});
done:
  if (st == AR_OK)
    st = c.nomem ? AR_NOMEM : d->count ? AR_SPEC : AR_OK;
  ar_diags_sort(d);
  ar_ynode_destroy(root);
  if (st == AR_OK)
    *out = s;
  else
    ar_study_destroy(s);
  ar_diags_fini(&local);
  return st;
}

void ar_study_destroy(ar_study *s) {
  if (!s)
    return;
  ar_free(s->file);
  ar_free(s->name);
  ar_free(s->base);
  ar_free(s->base_given);
  for (int i = 0; i < s->n_sets; i++)
    ar_free(s->sets[i]);
  ar_free(s->sets);
  ar_free(s->set_line);
  ar_free(s->set_col);
  for (int f = 0; f < s->k; f++) {
    study_factor *x = &s->f[f];
    for (int l = 0; l < x->n_levels; l++) {
      for (int i = 0; x->set && i < x->n_keys; i++)
        ar_free(x->set[l * x->n_keys + i]);
      ar_free(x->label[l]);
    }
    ar_free(x->set);
    ar_free(x->label);
    ar_free(x->lline);
    ar_free(x->lcol);
    ar_free(x->path);
  }
  for (int g = 0; g < s->n_gens; g++)
    ar_free(s->gens[g].text);
  ar_free(s->resp_key);
  ar_free(s->resp_name);
  ar_free(s->out);
  ar_free(s->planned);
  ar_free(s->run_cell);
  ar_free(s->run_rep);
  ar_free(s);
}

const char *ar_study_out_dir(const ar_study *s) { return s->out; }
