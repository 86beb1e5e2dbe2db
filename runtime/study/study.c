/*
 * accelrt study: the study file, its design, the runner and the outputs
 * (see accelrt/study.h; the file format is docs/study.md).
 *
 * The runner's durability rule: a run counts as done only once its row is
 * in OUT/runs.csv, written with one write() of the whole line and an
 * fsync.  A row cut short by a crash is dropped on the next start (the
 * file is truncated to its last newline) and that run redone; a run that
 * was running when the study stopped has no row, so its folder is cleared
 * and it is redone.  OUT/design.txt holds the design the rows belong to,
 * so that a changed study file is never mixed with old rows.
 */
#define _GNU_SOURCE
#include "accelrt/device.h"
#include "accelrt/runtime.h"
#include "study_impl.h"
#include "yaml_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- names --------------------------------------------------------------- */

int ar__study_level(const ar_study *s, int cell, int f) {
  for (int g = 0; g < f; g++)
    cell /= s->f[g].n_levels;
  return cell % s->f[f].n_levels;
}

void ar__study_cell_name(const ar_study *s, int cell, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int f = 0; f < s->k && len < cap; f++)
    len += (size_t)snprintf(buf + len, cap - len, "%c%d", 'A' + f, ar__study_level(s, cell, f));
}

const char *ar_study_out_dir(const ar_study *s) { return s->out; }

static const struct {
  const char *name;
  ar_study_response_kind kind;
  int better;
  const char *unit;
} responses[] = {
    {"samples_per_s", AR_RESP_SAMPLES_PER_S, 1, "samples/s"},
    {"iteration_s", AR_RESP_ITERATION_S, -1, "s"},
    {"makespan_s", AR_RESP_MAKESPAN_S, -1, "s"},
    {"jct_s", AR_RESP_JCT_S, -1, "s"},
    {"time_to_p1", AR_RESP_TIME_TO_P1, -1, "s"},
    {"p_at_1", AR_RESP_P_AT_1, 1, "%"},
    {"wall_s", AR_RESP_WALL_S, -1, "s"},
    {"key", AR_RESP_KEY, 0, ""},
    {"eval", AR_RESP_EVAL_KEY, 0, ""},
    {"inference_samples_per_s", AR_RESP_INFERENCE_SAMPLES_PER_S, 1, "samples/s"},
    {"inference_p_at_1", AR_RESP_INFERENCE_P_AT_1, 1, "%"},
};
#define N_RESPONSES (sizeof responses / sizeof responses[0])

/* The numbers of eval.json a response may name ({eval: KEY}); the lsh_
 * ones are there only when the output layer ran sampled. */
static const struct {
  const char *key;
  int better;
  const char *unit;
} eval_keys[] = {
    {"p_at_1", 1, "%"},
    {"p_at_3", 1, "%"},
    {"p_at_5", 1, "%"},
    {"samples_per_s", 1, "samples/s"},
    {"loss", -1, ""},
    {"lsh_p_at_1", 1, "%"},
    {"lsh_p_at_3", 1, "%"},
    {"lsh_p_at_5", 1, "%"},
    {"lsh_samples_per_s", 1, "samples/s"},
    {"lsh_candidates_mean", -1, "candidates"},
};
#define N_EVAL_KEYS (sizeof eval_keys / sizeof eval_keys[0])

/* Whether the response is read from the run's eval.json. */
static bool resp_from_eval(ar_study_response_kind k) {
  return k == AR_RESP_EVAL_KEY || k == AR_RESP_INFERENCE_SAMPLES_PER_S ||
         k == AR_RESP_INFERENCE_P_AT_1;
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

/* ---- parsing ----------------------------------------------------------------- */

typedef struct pctx {
  ar_diags *d;
  bool nomem;
} pctx;

static void diag(pctx *c, int line, int col, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void diag(pctx *c, int line, int col, const char *path, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (ar_diags_add(c->d, line, col, path, "%s", msg) != AR_OK)
    c->nomem = true;
}

static void report_yaml(void *ud, int line, int col, const char *path, const char *msg) {
  pctx *c = ud;
  if (ar_diags_add(c->d, line, col, path, "%s", msg) != AR_OK)
    c->nomem = true;
}

static char *quoted(const ar_ynode *n, char *buf, size_t cap) {
  return ar__yquote(n->text, n->len, 60, buf, cap);
}

static bool scalar(pctx *c, const ar_ynode *n, const char *key) {
  if (n->kind == AR_YNODE_SCALAR)
    return true;
  diag(c, n->line, n->col, key, "expected a single value, got a %s",
       n->kind == AR_YNODE_MAP ? "mapping" : "list");
  return false;
}

/* An integer in [lo, hi]; false after reporting. */
static bool get_int(pctx *c, const ar_ynode *n, const char *key, long lo, long hi, long *out) {
  if (!scalar(c, n, key))
    return false;
  char *end = NULL;
  errno = 0;
  long v = strtol(n->text, &end, 10);
  if (!n->len || *end || errno || v < lo || v > hi) {
    char q[128];
    diag(c, n->line, n->col, key, "expected a whole number from %ld to %ld, got '%s'", lo, hi,
         quoted(n, q, sizeof q));
    return false;
  }
  *out = v;
  return true;
}

/* A scalar that is one of two words: *is_one tells which.  Anything else
 * is a diagnostic ("expected ONE or OTHER, got 'x'" and the hint). */
static bool get_choice(pctx *c, const ar_ynode *n, const char *key, const char *one,
                       const char *other, const char *hint, bool *is_one) {
  if (!scalar(c, n, key))
    return false;
  if (ar_ynode_is(n, one) || ar_ynode_is(n, other)) {
    *is_one = ar_ynode_is(n, one);
    return true;
  }
  char q[128];
  diag(c, n->line, n->col, key, "expected %s or %s, got '%s'%s", one, other,
       quoted(n, q, sizeof q), hint);
  return false;
}

static bool get_bool(pctx *c, const ar_ynode *n, const char *key, bool *out) {
  return get_choice(c, n, key, "true", "false", "", out);
}

static char *dup_text(pctx *c, const ar_ynode *n) {
  char *s = ar_strdup(n->text);
  if (!s)
    c->nomem = true;
  return s;
}

/* The value of a level as --set receives it: plain scalars as written,
 * quoted ones quoted again so that YAML reads the same string. */
static char *level_set(pctx *c, const char *path, const ar_ynode *n) {
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

static const char *const study_keys[] = {"name", "base", "set", "factors", "response",
                                         "better", "replicates", "seed", "fraction",
                                         "ranks", "timeout_s", "output", "vary_seed",
                                         "keep_checkpoints", "eval", "scale", NULL};

static void parse_factors(pctx *c, ar_study *s, const ar_ynode *n) {
  if (n->kind != AR_YNODE_MAP || n->n == 0) {
    diag(c, n->line, n->col, "factors",
         "expected a mapping of job keys to lists of levels, e.g. "
         "{train.batch: [64, 256], distributed.order: [random, tac]}");
    return;
  }
  if (n->n > AR_FX_MAX_FACTORS) {
    diag(c, n->keys[AR_FX_MAX_FACTORS]->line, n->keys[AR_FX_MAX_FACTORS]->col, "factors",
         "at most %d factors; split the study or use a fraction of fewer factors",
         AR_FX_MAX_FACTORS);
    return;
  }
  long cells = 1;
  for (int i = 0; i < n->n; i++) {
    const ar_ynode *key = n->keys[i], *v = n->vals[i];
    char path[300];
    snprintf(path, sizeof path, "factors.%s", key->text);
    study_factor *f = &s->f[s->k++];
    f->path = dup_text(c, key);
    f->line = key->line;
    f->col = key->col;
    /* "a+b": keys that take each level together. */
    char keybuf[300];
    char *keys[STUDY_MAX_LINKED];
    int nk = 0;
    bool keys_ok = key->len < sizeof keybuf;
    snprintf(keybuf, sizeof keybuf, "%s", key->text);
    for (char *p = keybuf, *plus = NULL; keys_ok && p; p = plus ? plus + 1 : NULL) {
      plus = strchr(p, '+');
      if (plus)
        *plus = '\0';
      keys_ok = *p && nk < STUDY_MAX_LINKED;
      if (keys_ok)
        keys[nk++] = p;
    }
    if (!keys_ok) {
      char q[128];
      diag(c, key->line, key->col, path,
           "'%s' is not a factor: name a job key, or up to %d keys joined by '+' that take "
           "the same level (model.layers.out.dense+data.generate.labels)",
           quoted(key, q, sizeof q), STUDY_MAX_LINKED);
      continue;
    }
    f->n_keys = nk;
    if (v->kind != AR_YNODE_SEQ || v->n < 2) {
      diag(c, v->line, v->col, path,
           "expected a list of two or more levels, e.g. [fifo, pack]");
      continue;
    }
    f->set = ar_calloc((size_t)v->n * (size_t)nk, sizeof *f->set);
    f->label = ar_calloc((size_t)v->n, sizeof *f->label);
    f->lline = ar_calloc((size_t)v->n, sizeof *f->lline);
    f->lcol = ar_calloc((size_t)v->n, sizeof *f->lcol);
    if (!f->set || !f->label || !f->lline || !f->lcol || !f->path) {
      c->nomem = true;
      return;
    }
    for (int l = 0; l < v->n; l++) {
      const ar_ynode *x = v->vals[l];
      char lp[320];
      snprintf(lp, sizeof lp, "%s[%d]", path, l);
      if (x->kind != AR_YNODE_SCALAR) {
        diag(c, x->line, x->col, lp,
             "a level is a single value (a number, a word, a quoted string); vary the keys "
             "inside a structure as factors of their own");
        continue;
      }
      for (int m = 0; m < l; m++)
        if (f->label[m] && !strcmp(f->label[m], x->text)) {
          char q[128];
          diag(c, x->line, x->col, lp, "level '%s' is listed twice", quoted(x, q, sizeof q));
        }
      f->label[l] = dup_text(c, x);
      for (int j = 0; j < nk; j++)
        f->set[l * nk + j] = level_set(c, keys[j], x);
      f->lline[l] = x->line;
      f->lcol[l] = x->col;
    }
    f->n_levels = v->n;
    cells *= v->n;
    for (int g = 0; g < i; g++)
      if (s->f[g].path && f->path && !strcmp(s->f[g].path, f->path))
        diag(c, key->line, key->col, path, "the factor is listed twice");
  }
  if (cells > AR_FX_MAX_CELLS)
    diag(c, n->line, n->col, "factors",
         "the full design has %ld cells, more than %d; use fewer levels or a fraction", cells,
         AR_FX_MAX_CELLS);
}

static void parse_response(pctx *c, ar_study *s, const ar_ynode *n) {
  const ar_ynode *name = n, *arg = NULL;
  if (n->kind == AR_YNODE_MAP && n->n == 1) {
    name = n->keys[0];
    arg = n->vals[0];
  } else if (n->kind != AR_YNODE_SCALAR) {
    diag(c, n->line, n->col, "response",
         "expected a response name or {time_to_p1: P}, {key: SUMMARY_KEY} or "
         "{eval: EVAL_KEY}");
    return;
  }
  s->resp_line = arg ? arg->line : name->line;
  s->resp_col = arg ? arg->col : name->col;
  size_t i = 0;
  while (i < N_RESPONSES && !ar_ynode_is(name, responses[i].name))
    i++;
  if (i == N_RESPONSES) {
    char q[128];
    diag(c, name->line, name->col, "response",
         "unknown response '%s'; one of samples_per_s, iteration_s, makespan_s, jct_s, "
         "p_at_1, wall_s, {time_to_p1: P@1 in percent}, {key: SUMMARY_KEY}, and with eval: "
         "inference_samples_per_s, inference_p_at_1, {eval: EVAL_KEY}",
         quoted(name, q, sizeof q));
    return;
  }
  s->resp = responses[i].kind;
  s->better = responses[i].better;
  s->unit = responses[i].unit;
  bool needs = s->resp == AR_RESP_TIME_TO_P1 || s->resp == AR_RESP_KEY ||
               s->resp == AR_RESP_EVAL_KEY;
  if (needs != (arg != NULL)) {
    diag(c, name->line, name->col, "response",
         needs ? "%s needs an argument: {time_to_p1: 50} (P@1 in percent, as summary.json "
                 "has it), {key: SUMMARY_KEY} or {eval: EVAL_KEY}"
               : "%s takes no argument",
         responses[i].name);
    return;
  }
  char buf[160];
  if (s->resp == AR_RESP_TIME_TO_P1) {
    if (!scalar(c, arg, "response.time_to_p1"))
      return;
    char *end = NULL;
    double x = strtod(arg->text, &end);
    if (!arg->len || *end || !(x > 0 && x <= 100)) {
      char q[128];
      diag(c, arg->line, arg->col, "response.time_to_p1",
           "expected P@1 in percent, above 0 and at most 100, got '%s'",
           quoted(arg, q, sizeof q));
      return;
    }
    s->resp_x = x;
    snprintf(buf, sizeof buf, "time_to_p1_%g", x);
  } else if (s->resp == AR_RESP_KEY) {
    if (!scalar(c, arg, "response.key"))
      return;
    bool ok = arg->len > 0 && arg->len < 100;
    for (size_t j = 0; j < arg->len && ok; j++)
      ok = (arg->text[j] >= 'a' && arg->text[j] <= 'z') || arg->text[j] == '_' ||
           (arg->text[j] >= '0' && arg->text[j] <= '9');
    if (!ok) {
      char q[128];
      diag(c, arg->line, arg->col, "response.key",
           "expected a key of summary.json (lower case, digits, _), got '%s'",
           quoted(arg, q, sizeof q));
      return;
    }
    s->resp_key = dup_text(c, arg);
    snprintf(buf, sizeof buf, "%s", arg->text);
  } else if (s->resp == AR_RESP_EVAL_KEY) {
    if (!scalar(c, arg, "response.eval"))
      return;
    size_t j = 0;
    while (j < N_EVAL_KEYS && !ar_ynode_is(arg, eval_keys[j].key))
      j++;
    if (j == N_EVAL_KEYS) {
      char q[128];
      diag(c, arg->line, arg->col, "response.eval",
           "'%s' is not a number accelrt eval writes; one of p_at_1, p_at_3, p_at_5, "
           "samples_per_s, loss, and for a sampled output layer lsh_p_at_1, lsh_p_at_3, "
           "lsh_p_at_5, lsh_samples_per_s, lsh_candidates_mean",
           quoted(arg, q, sizeof q));
      return;
    }
    s->resp_key = dup_text(c, arg);
    s->better = eval_keys[j].better;
    s->unit = eval_keys[j].unit;
    snprintf(buf, sizeof buf, "eval.%s", eval_keys[j].key);
  } else {
    snprintf(buf, sizeof buf, "%s", responses[i].name);
  }
  s->resp_name = ar_strdup(buf);
  if (!s->resp_name)
    c->nomem = true;
}

/* "D=ABC" or "D=-ABC": letters of factors. */
static void parse_fraction(pctx *c, ar_study *s, const ar_ynode *n) {
  if (n->kind != AR_YNODE_SEQ || n->n == 0) {
    diag(c, n->line, n->col, "fraction",
         "expected a list of generators such as [D=ABC] (factor letters in the order the "
         "factors are listed: A is the first)");
    return;
  }
  unsigned targets = 0;
  for (int i = 0; i < n->n; i++) {
    const ar_ynode *g = n->vals[i];
    char path[64], q[128];
    snprintf(path, sizeof path, "fraction[%d]", i);
    if (!scalar(c, g, path))
      continue;
    const char *t = g->text;
    int target = t[0] - 'A', sign = 1;
    unsigned word = 0;
    bool ok = g->len >= 3 && target >= 0 && target < s->k && t[1] == '=';
    const char *p = t + 2;
    if (ok && *p == '-') {
      sign = -1;
      p++;
    }
    ok = ok && *p;
    for (; ok && *p; p++) {
      int f = *p - 'A';
      ok = f >= 0 && f < s->k && f != target && !((word >> f) & 1u);
      if (ok)
        word |= 1u << f;
    }
    if (!ok) {
      diag(c, g->line, g->col, path,
           "expected a generator X=WORD such as D=ABC or D=-ABC over the factor letters "
           "A..%c, got '%s'",
           'A' + s->k - 1, quoted(g, q, sizeof q));
      continue;
    }
    if ((targets >> target) & 1u) {
      diag(c, g->line, g->col, path, "factor %c is generated twice", 'A' + target);
      continue;
    }
    targets |= 1u << target;
    study_gen *x = &s->gens[s->n_gens++];
    x->target = target;
    x->word = word;
    x->sign = sign;
    x->text = dup_text(c, g);
  }
  for (int i = 0; i < s->n_gens; i++)
    if (s->gens[i].word & targets)
      diag(c, n->line, n->col, "fraction",
           "generator %s uses a generated factor; write every generator over the base "
           "factors only",
           s->gens[i].text ? s->gens[i].text : "?");
  for (int f = 0; f < s->k; f++)
    if (s->f[f].n_levels != 2 && s->f[f].n_levels != 0) {
      diag(c, n->line, n->col, "fraction",
           "a 2^(k-p) fraction needs every factor at two levels; %s has %d", s->f[f].path,
           s->f[f].n_levels);
      break;
    }
}

/* eval: true, or {points: N, reps: N} as accelrt eval's --points and --reps. */
static void parse_eval(pctx *c, ar_study *s, const ar_ynode *n) {
  s->eval_line = n->line;
  s->eval_col = n->col;
  s->eval_points = 0;
  s->eval_reps = 3;
  if (n->kind == AR_YNODE_SCALAR && (ar_ynode_is(n, "true") || ar_ynode_is(n, "false"))) {
    s->eval = ar_ynode_is(n, "true");
    return;
  }
  if (n->kind != AR_YNODE_MAP) {
    char q[128];
    diag(c, n->line, n->col, "eval",
         "expected {points: N, reps: N} (accelrt eval's --points, 0 for every test point, "
         "and --reps) or true, got %s%s%s",
         n->kind == AR_YNODE_SEQ ? "a list" : "'", n->kind == AR_YNODE_SEQ ? "" : quoted(n, q, sizeof q),
         n->kind == AR_YNODE_SEQ ? "" : "'");
    return;
  }
  s->eval = true;
  long v;
  for (int i = 0; i < n->n; i++) {
    const ar_ynode *k = n->keys[i], *x = n->vals[i];
    if (ar_ynode_is(k, "points")) {
      if (get_int(c, x, "eval.points", 0, 2147483647L, &v))
        s->eval_points = v;
    } else if (ar_ynode_is(k, "reps")) {
      if (get_int(c, x, "eval.reps", 1, 1000, &v))
        s->eval_reps = v;
    } else {
      char q[128];
      diag(c, k->line, k->col, "eval",
           "unknown key '%s'; eval has points (test points, 0 for all) and reps (timed "
           "passes, the fastest kept)",
           quoted(k, q, sizeof q));
    }
  }
}

static void parse_sets(pctx *c, ar_study *s, const ar_ynode *n) {
  if (n->kind != AR_YNODE_MAP) {
    diag(c, n->line, n->col, "set",
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

static void parse_tree(pctx *c, ar_study *s, const ar_ynode *root) {
  if (!root || root->kind != AR_YNODE_MAP) {
    diag(c, root ? root->line : 0, root ? root->col : 0, NULL,
         "a study file is a mapping with base, factors and response (see docs/study.md)");
    return;
  }
  for (int i = 0; i < root->n; i++) {
    bool known = false;
    for (int j = 0; study_keys[j] && !known; j++)
      known = ar_ynode_is(root->keys[i], study_keys[j]);
    if (!known) {
      char q[128];
      diag(c, root->keys[i]->line, root->keys[i]->col, NULL,
           "unknown key '%s'; a study has name, base, set, factors, response, better, "
           "replicates, seed, fraction, ranks, timeout_s, output, vary_seed, keep_checkpoints, "
           "eval, scale",
           quoted(root->keys[i], q, sizeof q));
    }
  }
  const ar_ynode *n;
  if ((n = ar_ynode_get(root, "name")) && scalar(c, n, "name"))
    s->name = dup_text(c, n);
  if (!(n = ar_ynode_get(root, "base"))) {
    diag(c, root->line, root->col, "base",
         "missing: name the base job file, e.g. base: ../quickstart.yaml (relative to this "
         "file)");
  } else if (scalar(c, n, "base")) {
    s->base_given = dup_text(c, n);
    char *dir = path_dir(s->file);
    if (n->text[0] == '/' || !dir)
      s->base = dup_text(c, n);
    else
      s->base = ar_path_join(dir, n->text);
    ar_free(dir);
    if (!s->base) {
      c->nomem = true;
    } else if (access(s->base, R_OK) != 0) {
      char q[128];
      diag(c, n->line, n->col, "base", "cannot read the base job '%s' (%s: %s); the path is "
           "relative to the study file", quoted(n, q, sizeof q), s->base, strerror(errno));
      ar_free(s->base);
      s->base = NULL;
    }
  }
  if ((n = ar_ynode_get(root, "set")))
    parse_sets(c, s, n);
  if (!(n = ar_ynode_get(root, "factors")))
    diag(c, root->line, root->col, "factors",
         "missing: list the factors, e.g. factors: {train.batch: [64, 256]}");
  else
    parse_factors(c, s, n);
  if (!(n = ar_ynode_get(root, "response")))
    diag(c, root->line, root->col, "response",
         "missing: say what to measure, e.g. response: samples_per_s");
  else
    parse_response(c, s, n);
  bool yes;
  if ((n = ar_ynode_get(root, "better"))) {
    if (get_choice(c, n, "better", "higher", "lower", "", &yes))
      s->better = yes ? 1 : -1;
  } else if (s->resp == AR_RESP_KEY && s->resp_name) {
    diag(c, root->line, root->col, "better",
         "missing: say whether a higher or a lower %s is better (better: higher)",
         s->resp_name);
  }
  if ((n = ar_ynode_get(root, "scale")) &&
      get_choice(c, n, "scale", "linear", "log",
                 " (log analyses ln of the response: effects as ratios, for speeds and times)",
                 &yes))
    s->scale = yes ? AR_FX_LINEAR : AR_FX_LOG;
  long v;
  s->replicates = 3;
  if ((n = ar_ynode_get(root, "replicates")) && get_int(c, n, "replicates", 1, 1000, &v))
    s->replicates = (int)v;
  s->seed = 1;
  if ((n = ar_ynode_get(root, "seed")) && get_int(c, n, "seed", 0, 2147483647L, &v))
    s->seed = (uint64_t)v;
  if ((n = ar_ynode_get(root, "ranks")) && get_int(c, n, "ranks", 2, 4096, &v))
    s->ranks = (int)v;
  if ((n = ar_ynode_get(root, "timeout_s")) && scalar(c, n, "timeout_s")) {
    char *end = NULL;
    double t = strtod(n->text, &end);
    if (!n->len || *end || !(t > 0 && t < 1e7)) {
      char q[128];
      diag(c, n->line, n->col, "timeout_s", "expected seconds above 0, got '%s'",
           quoted(n, q, sizeof q));
    }
    s->timeout_s = t;
  }
  if ((n = ar_ynode_get(root, "vary_seed")))
    get_bool(c, n, "vary_seed", &s->vary_seed);
  if ((n = ar_ynode_get(root, "keep_checkpoints")))
    get_bool(c, n, "keep_checkpoints", &s->keep_checkpoints);
  if ((n = ar_ynode_get(root, "output")) && scalar(c, n, "output"))
    s->out = dup_text(c, n);
  if ((n = ar_ynode_get(root, "fraction")) && s->k > 0)
    parse_fraction(c, s, n);
  if ((n = ar_ynode_get(root, "eval")))
    parse_eval(c, s, n);
  if (s->resp_name && resp_from_eval(s->resp) && !s->eval)
    diag(c, s->resp_line, s->resp_col, "response",
         "%s is read from eval.json, which accelrt eval writes after each run: add "
         "eval: {points: 2000, reps: 3} (or eval: true for every test point)",
         s->resp_name);
}

/* ---- validation against the job ---------------------------------------------- */

/* Loads the base job with the fixed overrides plus `extra`; returns the
 * status and the spec or the diagnostics. */
static ar_status load_job(const ar_study *s, const char *const *extra, int n_extra,
                          ar_spec **spec, ar_diags *jd) {
  int n = s->n_sets + n_extra;
  const char **sets = ar_calloc((size_t)n + 1, sizeof *sets);
  if (!sets)
    return AR_NOMEM;
  for (int i = 0; i < s->n_sets; i++)
    sets[i] = s->sets[i];
  for (int i = 0; i < n_extra; i++)
    sets[s->n_sets + i] = extra[i];
  ar_status st = ar_spec_load(s->base, sets, n, spec, jd);
  ar_free(sets);
  return st;
}

/* One job diagnostic as text: "BASE:L:C: KEY: message" or "KEY: message". */
static void job_diag_text(const ar_study *s, const ar_diag *g, char *buf, size_t cap) {
  if (g->set || g->line <= 0)
    snprintf(buf, cap, "%s%s%s", g->path ? g->path : "", g->path ? ": " : "", g->message);
  else
    snprintf(buf, cap, "%s:%d:%d: %s%s%s", s->base, g->line, g->col, g->path ? g->path : "",
             g->path ? ": " : "", g->message);
}

static bool is_cuda(const char *device) { return device && !strncmp(device, "cuda", 4); }

/* Whether a single job's output layer may run LSH-sampled, so that
 * accelrt eval also scores by LSH candidates (mode lsh, or auto at least
 * auto_min_width wide, on a device that is not a GPU). */
static bool output_may_sample(const ar_spec *spec) {
  if (spec->n_jobs > 0 || spec->n_layers < 1 || is_cuda(spec->device))
    return false;
  const ar_layer_spec *out = &spec->layers[spec->n_layers - 1];
  return out->sparse.mode == AR_SPARSE_LSH ||
         (out->sparse.mode == AR_SPARSE_AUTO && out->width >= out->sparse.auto_min_width);
}

static void validate(pctx *c, ar_study *s, int base_line, int base_col) {
  ar_spec *spec = NULL;
  ar_diags jd = {0, NULL};
  char text[2048];
  ar_status st = load_job(s, NULL, 0, &spec, &jd);
  if (st == AR_NOMEM) {
    c->nomem = true;
    return;
  }
  if (st != AR_OK) {
    for (int i = 0; i < jd.count; i++) {
      const ar_diag *g = &jd.items[i];
      job_diag_text(s, g, text, sizeof text);
      int j = 0;
      while (g->set && j < s->n_sets && strcmp(g->set, s->sets[j]))
        j++;
      if (g->set && j < s->n_sets)
        diag(c, s->set_line[j], s->set_col[j], "set", "%s", text);
      else
        diag(c, base_line, base_col, "base", "the base job is not valid: %s", text);
    }
    ar_diags_fini(&jd);
    return;
  }
  s->kind = spec->n_jobs > 0 ? STUDY_JOBS : spec->distributed.enabled ? STUDY_DIST : STUDY_SINGLE;
  s->job_seed = spec->seed;
  bool has_test = spec->n_jobs == 0 && (spec->data.test || (spec->data.generate &&
                                                             spec->data.gen.test_points > 0));
  ar_spec_destroy(spec);
  static const char *const kind_name[] = {"a single job", "a jobs: file", "a distributed job"};
  if (s->kind == STUDY_DIST && s->ranks == 0)
    diag(c, base_line, base_col, "ranks",
         "the base job has a distributed: section: set ranks: N (servers plus workers); its "
         "runs start under mpiexec --oversubscribe -n N");
  if (s->kind != STUDY_DIST && s->ranks > 0)
    diag(c, base_line, base_col, "ranks",
         "ranks is for a base job with a distributed: section; this base is %s",
         kind_name[s->kind]);
  if (s->kind == STUDY_DIST && s->ranks > 0 && s->ranks < 2)
    diag(c, base_line, base_col, "ranks", "a distributed job needs a server and a worker");
  if (s->resp_name) {
    const char *why = NULL;
    switch (s->resp) {
    case AR_RESP_SAMPLES_PER_S:
    case AR_RESP_ITERATION_S:
    case AR_RESP_P_AT_1:
    case AR_RESP_TIME_TO_P1:
      if (s->kind == STUDY_JOBS)
        why = "a jobs: run's summary has makespan and JCTs, not per-job training figures; "
              "use makespan_s or jct_s";
      break;
    case AR_RESP_MAKESPAN_S:
      if (s->kind == STUDY_SINGLE)
        why = "a single job has no makespan; use iteration_s or wall_s";
      break;
    case AR_RESP_JCT_S:
      if (s->kind != STUDY_JOBS)
        why = "job completion times come from a jobs: file; use wall_s";
      break;
    default:
      break;
    }
    if (!why && s->resp == AR_RESP_TIME_TO_P1 && !has_test)
      why = "the base job has no test split, so P@1 is never measured; give data.test or "
            "data.generate.test_points";
    if (why)
      diag(c, base_line, base_col, "response", "%s is not available for %s: %s", s->resp_name,
           kind_name[s->kind], why);
  }
  if (s->eval && s->kind == STUDY_JOBS)
    diag(c, s->eval_line, s->eval_col, "eval",
         "accelrt eval evaluates one job, and the base is a jobs: file; drop eval: or study "
         "one of its jobs on its own");
  else if (s->eval && !has_test)
    diag(c, s->eval_line, s->eval_col, "eval",
         "the base job has no test split to evaluate on; give data.test or "
         "data.generate.test_points");
  /* Every level alone, at its place in the file; a problem every level
   * shares word for word (an unknown key) once, at the factor's key. */
  bool levels_ok = true;
  for (int f = 0; f < s->k; f++) {
    char first[2048] = "";
    int same = 0, nk = s->f[f].n_keys;
    for (int l = 0; l < s->f[f].n_levels; l++) {
      const char *const *set = (const char *const *)&s->f[f].set[l * nk];
      if (!set[0])
        continue;
      st = load_job(s, set, nk, &spec, &jd);
      if (st == AR_NOMEM) {
        c->nomem = true;
        return;
      }
      ar_spec_destroy(spec);
      if (st != AR_OK && jd.count > 0) {
        job_diag_text(s, &jd.items[0], text, sizeof text);
        same += l == 0 || !strcmp(first, text);
        if (l == 0)
          snprintf(first, sizeof first, "%s", text);
      }
      ar_diags_fini(&jd);
    }
    if (same == s->f[f].n_levels) {
      char path[300];
      snprintf(path, sizeof path, "factors.%s", s->f[f].path);
      diag(c, s->f[f].line, s->f[f].col, path,
           "the base job refuses this key at every level: %s; use a key of the job (see "
           "accelrt schema)",
           first);
      levels_ok = false;
      continue;
    }
    for (int l = 0; l < s->f[f].n_levels; l++) {
      const char *const *set = (const char *const *)&s->f[f].set[l * nk];
      if (!set[0])
        continue;
      st = load_job(s, set, nk, &spec, &jd);
      if (st == AR_NOMEM) {
        c->nomem = true;
        return;
      }
      ar_spec_destroy(spec);
      char path[320];
      snprintf(path, sizeof path, "factors.%s[%d]", s->f[f].path, l);
      for (int i = 0; st != AR_OK && i < jd.count; i++) {
        job_diag_text(s, &jd.items[i], text, sizeof text);
        diag(c, s->f[f].lline[l], s->f[f].lcol[l], path,
             "level '%s' is not valid for the base job: %s; fix the level or the factor's key "
             "(keys that must agree are one factor when joined by '+', e.g. "
             "model.layers.out.dense+data.generate.labels)",
             s->f[f].label[l], text);
        levels_ok = false;
      }
      ar_diags_fini(&jd);
    }
  }
  if (!levels_ok)
    return;
  /* Then every planned combination. */
  const char *sets[AR_FX_MAX_FACTORS * STUDY_MAX_LINKED];
  bool sampled = false;
  for (int cell = 0; cell < s->n_cells; cell++) {
    if (!s->planned[cell])
      continue;
    int ns = 0;
    for (int f = 0; f < s->k; f++)
      for (int i = 0; i < s->f[f].n_keys; i++)
        sets[ns++] = s->f[f].set[ar__study_level(s, cell, f) * s->f[f].n_keys + i];
    st = load_job(s, sets, ns, &spec, &jd);
    if (st == AR_NOMEM) {
      c->nomem = true;
      return;
    }
    sampled = sampled || (st == AR_OK && output_may_sample(spec));
    ar_spec_destroy(spec);
    char name[64];
    ar__study_cell_name(s, cell, name, sizeof name);
    for (int i = 0; st != AR_OK && i < jd.count; i++) {
      job_diag_text(s, &jd.items[i], text, sizeof text);
      diag(c, s->f[0].line, s->f[0].col, "factors",
           "cell %s combines levels the job refuses: %s; drop a level or add a fixed "
           "override under set:",
           name, text);
    }
    ar_diags_fini(&jd);
  }
  if (s->resp == AR_RESP_EVAL_KEY && s->resp_key && !strncmp(s->resp_key, "lsh_", 4) &&
      !sampled && s->kind != STUDY_JOBS)
    diag(c, s->resp_line, s->resp_col, "response",
         "eval.json has %s only when the output layer runs LSH-sampled, and it does in no "
         "cell of this study; sample it (model.layers.NAME.sparse.mode: lsh, as a factor or "
         "under set:) or use inference_samples_per_s / inference_p_at_1",
         s->resp_key);
}

/* The planned cells (all, or those of the fraction) and the randomised
 * run order (Fisher-Yates from the study's seed). */
static ar_status make_design(ar_study *s) {
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

static char *default_name(const char *file) {
  const char *b = strrchr(file, '/');
  b = b ? b + 1 : file;
  char *n = ar_strdup(b);
  if (n) {
    char *dot = strrchr(n, '.');
    if (dot && dot != n)
      *dot = '\0';
  }
  return n;
}

ar_status ar_study_load(const char *path, const ar_study_opts *opts, ar_study **out,
                        ar_diags *diags) {
  ar_diags local = {0, NULL};
  ar_diags *d = diags ? diags : &local;
  d->count = 0;
  d->items = NULL;
  *out = NULL;
  pctx c = {d, false};
  ar_study *s = ar_calloc(1, sizeof *s);
  char *text = NULL;
  ar_ynode *root = NULL;
  ar_status st = AR_NOMEM;
  if (!s || !(s->file = ar_strdup(path)))
    goto done;
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    diag(&c, 0, 0, NULL, "cannot read the study file: %s", strerror(errno));
    st = AR_IO;
    goto done;
  }
  size_t cap = 1 << 16, len = 0;
  text = ar_malloc(cap);
  while (text) {
    size_t got = fread(text + len, 1, cap - len, fp);
    len += got;
    if (got == 0 || len > AR_SPEC_MAX_BYTES)
      break;
    if (len == cap) {
      char *t = ar_realloc(text, cap * 2);
      if (!t) {
        ar_free(text);
        text = NULL;
        break;
      }
      text = t;
      cap *= 2;
    }
  }
  fclose(fp);
  if (!text)
    goto done;
  if (len > AR_SPEC_MAX_BYTES) {
    diag(&c, 0, 0, NULL, "the study file is larger than %u bytes", AR_SPEC_MAX_BYTES);
    st = AR_SPEC;
    goto done;
  }
  st = ar__yaml_parse(text, len, -1, report_yaml, &c, &root);
  if (st == AR_NOMEM)
    goto done;
  st = AR_SPEC;
  if (d->count)
    goto done;
  parse_tree(&c, s, root);
  if (!s->name)
    s->name = default_name(path);
  if (opts && opts->out_dir) {
    ar_free(s->out);
    s->out = ar_strdup(opts->out_dir);
  } else if (!s->out && s->name) {
    size_t n = strlen(s->name) + 16;
    s->out = ar_malloc(n);
    if (s->out)
      snprintf(s->out, n, "runs/studies/%s", s->name);
  }
  if (!s->name || !s->out)
    c.nomem = true;
  if (c.nomem) {
    st = AR_NOMEM;
    goto done;
  }
  if (d->count)
    goto done;
  if (make_design(s) != AR_OK) {
    st = AR_NOMEM;
    goto done;
  }
  const ar_ynode *b = ar_ynode_get(root, "base");
  validate(&c, s, b->line, b->col);
  st = c.nomem ? AR_NOMEM : d->count ? AR_SPEC : AR_OK;
done:
  /* In file order (problems without a place last); stable. */
  for (int i = 1; i < d->count; i++)
    for (int j = i; j > 0; j--) {
      ar_diag *a = &d->items[j - 1], *b = &d->items[j];
      long ka = a->line > 0 ? (long)a->line * 100000 + a->col : 1L << 40;
      long kb = b->line > 0 ? (long)b->line * 100000 + b->col : 1L << 40;
      if (ka <= kb)
        break;
      ar_diag t = *a;
      *a = *b;
      *b = t;
    }
  ar_ynode_destroy(root);
  ar_free(text);
  if (st == AR_OK)
    *out = s;
  else
    ar_study_destroy(s);
  if (!diags)
    ar_diags_fini(&local);
  return st;
}

/* ---- the design, printed ------------------------------------------------------ */

static const char *kind_text(const ar_study *s, char *buf, size_t cap) {
  if (s->kind == STUDY_DIST)
    snprintf(buf, cap, "distributed job, %d ranks under mpiexec", s->ranks);
  else
    snprintf(buf, cap, "%s", s->kind == STUDY_JOBS ? "jobs: file (lanes)" : "single job");
  return buf;
}

static void fill_design(const ar_study *s, ar_fx_design *d, int *levels,
                        const char **names, const char *const **lnames) {
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
  fill_design(s, &d, levels, names, ln);
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
  char kb[128], cn[64];
  fprintf(to, "study %s: base %s (%s)\n", s->name, s->base, kind_text(s, kb, sizeof kb));
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

/* ---- runs.csv ---------------------------------------------------------------- */

/* Appends one CSV field, quoted when it needs to be. */
static void csv_field(char **buf, size_t *len, size_t *cap, const char *v, bool first) {
  size_t need = *len + 2 * strlen(v) + 8;
  if (need > *cap) {
    size_t nc = need * 2;
    char *b = ar_realloc(*buf, nc);
    if (!b)
      return;
    *buf = b;
    *cap = nc;
  }
  char *o = *buf + *len;
  if (!first)
    *o++ = ',';
  bool q = strpbrk(v, ",\"\n\r") != NULL;
  if (q)
    *o++ = '"';
  for (const char *p = v; *p; p++) {
    if (*p == '"')
      *o++ = '"';
    *o++ = *p == '\n' || *p == '\r' ? ' ' : *p;
  }
  if (q)
    *o++ = '"';
  *o = '\0';
  *len = (size_t)(o - *buf);
}

static char *csv_header(const ar_study *s) {
  char *b = NULL;
  size_t len = 0, cap = 0;
  const char *fixed[] = {"run", "cell", "replicate", "order"};
  for (int i = 0; i < 4; i++)
    csv_field(&b, &len, &cap, fixed[i], i == 0);
  for (int f = 0; f < s->k; f++)
    csv_field(&b, &len, &cap, s->f[f].path, false);
  csv_field(&b, &len, &cap, s->resp_name, false);
  const char *tail[] = {"status", "wall_s", "started_unix", "note"};
  for (int i = 0; i < 4; i++)
    csv_field(&b, &len, &cap, tail[i], false);
  return b;
}

/* Splits a CSV line in place; returns the number of fields (at most max). */
static int csv_split(char *line, char **fields, int max) {
  int n = 0;
  char *p = line;
  while (n < max) {
    char *o = p;
    fields[n++] = o;
    if (*p == '"') {
      p++;
      for (;;) {
        if (*p == '"' && p[1] == '"') {
          *o++ = '"';
          p += 2;
        } else if (*p == '"') {
          p++;
          break;
        } else if (*p == '\0') {
          break;
        } else {
          *o++ = *p++;
        }
      }
    }
    while (*p && *p != ',')
      *o++ = *p++;
    bool more = *p == ',';
    *o = '\0';
    if (!more)
      break;
    p++;
  }
  return n;
}

static void rows_free(study_row *rows, int n) {
  for (int i = 0; i < n; i++) {
    ar_free(rows[i].run);
    ar_free(rows[i].status);
    ar_free(rows[i].note);
  }
  ar_free(rows);
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

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t len;
  char *t = slurp(f, &len);
  fclose(f);
  return t;
}

/* Reads OUT/runs.csv: drops a partial last line (truncating the file when
 * `repair`), checks the header, and returns the rows (a run's later row
 * replaces an earlier one). */
static ar_status read_rows(const ar_study *s, bool repair, study_row **out, int *n_out,
                           ar_err *err) {
  *out = NULL;
  *n_out = 0;
  char *path = ar_path_join(s->out, "runs.csv");
  if (!path)
    return ar_errf(err, AR_NOMEM, "out of memory");
  FILE *f = fopen(path, "r+");
  if (!f) {
    ar_free(path);
    return AR_OK;
  }
  size_t len = 0;
  char *data = slurp(f, &len);
  ar_status st = AR_OK;
  if (!data) {
    fclose(f);
    ar_free(path);
    return ar_errf(err, AR_NOMEM, "out of memory reading runs.csv");
  }
  size_t keep = len;
  while (keep > 0 && data[keep - 1] != '\n')
    keep--;
  if (keep < len) {
    fprintf(stderr, "accelrt study: %s: dropped a partial last line (a run stopped while its "
            "row was written); that run is redone\n", path);
    if (repair && (ftruncate(fileno(f), (off_t)keep) != 0 || fsync(fileno(f)) != 0))
      st = ar_errf(err, AR_IO, "cannot repair '%s': %s", path, strerror(errno));
    data[keep] = '\0';
  }
  fclose(f);
  char *header = csv_header(s);
  study_row *rows = NULL;
  int n = 0, cap = 0;
  char *save = NULL, *line = strtok_r(data, "\n", &save);
  if (st == AR_OK && line && header && strcmp(line, header) != 0)
    st = ar_errf(err, AR_STATE,
                 "%s was written by a different study (its header is '%.200s', this study's "
                 "is '%.200s'); use another output folder (--out DIR) or move it away",
                 path, line, header);
  int ncol = 4 + s->k + 5;
  char **fl = ar_malloc((size_t)ncol * sizeof *fl);
  if (!fl && st == AR_OK)
    st = ar_errf(err, AR_NOMEM, "out of memory");
  int lineno = 1;
  while (st == AR_OK && line && (line = strtok_r(NULL, "\n", &save))) {
    lineno++;
    int nf = csv_split(line, fl, ncol);
    if (nf != ncol) {
      st = ar_errf(err, AR_CORRUPT, "%s:%d: expected %d fields, found %d; the file was "
                   "edited by hand? fix or remove that line",
                   path, lineno, ncol, nf);
      break;
    }
    int cell = -1, rep = atoi(fl[2]) - 1;
    for (int c = 0; c < s->n_cells && cell < 0; c++) {
      char cn[64];
      ar__study_cell_name(s, c, cn, sizeof cn);
      if (!strcmp(cn, fl[1]))
        cell = c;
    }
    if (cell < 0 || !s->planned[cell] || rep < 0 || rep >= s->replicates) {
      st = ar_errf(err, AR_CORRUPT, "%s:%d: run '%s' is not part of this design", path, lineno,
                   fl[0]);
      break;
    }
    int at = 0;
    while (at < n && strcmp(rows[at].run, fl[0]))
      at++;
    if (at == n) {
      if (n == cap) {
        cap = cap ? 2 * cap : 32;
        study_row *r = ar_realloc(rows, (size_t)cap * sizeof *r);
        if (!r) {
          st = ar_errf(err, AR_NOMEM, "out of memory");
          break;
        }
        rows = r;
      }
      memset(&rows[n++], 0, sizeof *rows);
    } else {
      ar_free(rows[at].run);
      ar_free(rows[at].status);
      ar_free(rows[at].note);
    }
    study_row *r = &rows[at];
    r->run = ar_strdup(fl[0]);
    r->cell = cell;
    r->rep = rep;
    r->order = atoi(fl[3]);
    char *end = NULL;
    r->y = strtod(fl[4 + s->k], &end);
    if (end == fl[4 + s->k])
      r->y = NAN;
    r->status = ar_strdup(fl[5 + s->k]);
    r->wall_s = strtod(fl[6 + s->k], NULL);
    r->started = strtod(fl[7 + s->k], NULL);
    r->note = ar_strdup(fl[8 + s->k]);
    if (!r->run || !r->status || !r->note)
      st = ar_errf(err, AR_NOMEM, "out of memory");
  }
  ar_free(fl);
  free(data);
  ar_free(header);
  ar_free(path);
  if (st != AR_OK) {
    rows_free(rows, n);
    return st;
  }
  *out = rows;
  *n_out = n;
  return AR_OK;
}

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

static ar_status append_row(const ar_study *s, const study_row *r, ar_err *err) {
  char *path = ar_path_join(s->out, "runs.csv");
  if (!path)
    return ar_errf(err, AR_NOMEM, "out of memory");
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0666);
  if (fd < 0) {
    ar_status st = ar_errf(err, AR_IO, "cannot write '%s': %s", path, strerror(errno));
    ar_free(path);
    return st;
  }
  struct stat sb;
  char *b = NULL;
  size_t len = 0, cap = 0;
  if (fstat(fd, &sb) == 0 && sb.st_size == 0) {
    /* A new file: the header first, in the same write as the row. */
    char *h = csv_header(s);
    size_t hl = h ? strlen(h) : 0;
    b = h ? ar_malloc(hl + 2) : NULL;
    if (b) {
      memcpy(b, h, hl);
      b[hl] = '\n';
      b[hl + 1] = '\0';
      len = hl + 1;
      cap = hl + 2;
    }
    ar_free(h);
  }
  char num[64], cn[64];
  ar__study_cell_name(s, r->cell, cn, sizeof cn);
  csv_field(&b, &len, &cap, r->run, true);
  csv_field(&b, &len, &cap, cn, false);
  snprintf(num, sizeof num, "%d", r->rep + 1);
  csv_field(&b, &len, &cap, num, false);
  snprintf(num, sizeof num, "%d", r->order);
  csv_field(&b, &len, &cap, num, false);
  for (int f = 0; f < s->k; f++)
    csv_field(&b, &len, &cap, s->f[f].label[ar__study_level(s, r->cell, f)], false);
  if (isfinite(r->y))
    snprintf(num, sizeof num, "%.10g", r->y);
  else
    num[0] = '\0';
  csv_field(&b, &len, &cap, num, false);
  csv_field(&b, &len, &cap, r->status, false);
  snprintf(num, sizeof num, "%.3f", r->wall_s);
  csv_field(&b, &len, &cap, num, false);
  snprintf(num, sizeof num, "%.3f", r->started);
  csv_field(&b, &len, &cap, num, false);
  csv_field(&b, &len, &cap, r->note ? r->note : "", false);
  ar_status st = AR_OK;
  if (!b || len + 1 >= cap) {
    char *nb = b ? ar_realloc(b, len + 2) : NULL;
    if (!nb)
      st = ar_errf(err, AR_NOMEM, "out of memory");
    else
      b = nb;
  }
  if (st == AR_OK) {
    b[len++] = '\n';
    st = write_all(fd, b, len, path, err);
  }
  if (st == AR_OK && fsync(fd) != 0)
    st = ar_errf(err, AR_IO, "fsync of '%s' failed: %s", path, strerror(errno));
  close(fd);
  ar_free(b);
  ar_free(path);
  return st;
}

/* ---- design.txt ---------------------------------------------------------------- */

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
  fprintf(m, "accelrt study design 1\nbase: %s\nbase_fnv1a: %016llx\n", real ? real : s->base,
          (unsigned long long)file_hash(s->base));
  free(real);
  for (int i = 0; i < s->n_sets; i++)
    fprintf(m, "set: %s\n", s->sets[i]);
  for (int f = 0; f < s->k; f++) {
    fprintf(m, "factor %c: %s:", 'A' + f, s->f[f].path);
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

static ar_status check_design(const ar_study *s, bool resume, ar_err *err) {
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

/* ---- one run ------------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int rm_checkpoint(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  if (flag == FTW_F && !strcmp(p + ftw->base, "checkpoint.bin"))
    unlink(p);
  return 0;
}

double ar__study_json_num(const char *json, const char *key) {
  char pat[160];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(json, pat);
  if (!p)
    return NAN;
  p += strlen(pat);
  char *end = NULL;
  double v = strtod(p, &end);
  return end == p ? NAN : v;
}

/* The response of a finished run: sets r->y, or r->status and r->note
 * (for an inference_ response, the note says which path was measured). */
static void extract(const ar_study *s, const char *dir, study_row *r) {
  char path[4200];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  char *sum = read_text(path);
  if (!sum) {
    r->status = ar_strdup("no_response");
    snprintf(path, sizeof path, "run %s wrote no summary.json in %s", r->run, dir);
    r->note = ar_strdup(path);
    return;
  }
  double y = NAN;
  const char *key = NULL, *file = "summary.json", *why = "";
  char *ev = NULL;
  bool dist = s->kind == STUDY_DIST, jobs = s->kind == STUDY_JOBS, sampled = false;
  switch (s->resp) {
  case AR_RESP_SAMPLES_PER_S: key = "samples_per_s"; break;
  case AR_RESP_ITERATION_S:
    if (dist)
      key = "iteration_s_median";
    else
      y = ar__study_json_num(sum, "train_s") / ar__study_json_num(sum, "iterations");
    break;
  case AR_RESP_MAKESPAN_S: key = dist ? "makespan_s_median" : "makespan_s"; break;
  case AR_RESP_JCT_S: key = "avg_jct_s"; break;
  case AR_RESP_P_AT_1: key = "p_at_1"; break;
  case AR_RESP_WALL_S: key = jobs ? "makespan_s" : "wall_s"; break;
  case AR_RESP_KEY: key = s->resp_key; break;
  case AR_RESP_EVAL_KEY:
  case AR_RESP_INFERENCE_SAMPLES_PER_S:
  case AR_RESP_INFERENCE_P_AT_1:
    file = "eval.json";
    snprintf(path, sizeof path, "%s/eval.json", dir);
    ev = read_text(path);
    if (!ev) {
      r->status = ar_strdup("no_response");
      snprintf(path, sizeof path, "run %s wrote no eval.json in %s (see its log.txt)", r->run,
               dir);
      r->note = ar_strdup(path);
      free(sum);
      return;
    }
    /* eval.json has the lsh_ numbers exactly when the output layer ran
     * sampled: that is then the job's own inference path. */
    sampled = !isnan(ar__study_json_num(ev, "lsh_samples_per_s"));
    if (s->resp == AR_RESP_EVAL_KEY)
      key = s->resp_key;
    else if (s->resp == AR_RESP_INFERENCE_SAMPLES_PER_S)
      key = sampled ? "lsh_samples_per_s" : "samples_per_s";
    else
      key = sampled ? "lsh_p_at_1" : "p_at_1";
    if (!sampled && !strncmp(key, "lsh_", 4))
      why = " (the output layer did not run LSH-sampled in this run)";
    y = ar__study_json_num(ev, key);
    break;
  case AR_RESP_TIME_TO_P1: {
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char *m = read_text(path), *save = NULL;
    double best = NAN, best_t = NAN;
    for (char *line = m ? strtok_r(m, "\n", &save) : NULL; line && isnan(y);
         line = strtok_r(NULL, "\n", &save)) {
      double p = ar__study_json_num(line, "p_at_1"), t = ar__study_json_num(line, "train_s");
      if (isnan(p))
        continue;
      if (p >= s->resp_x)
        y = t;
      if (isnan(best) || p > best) {
        best = p;
        best_t = t;
      }
    }
    free(m);
    if (isnan(y)) {
      r->status = ar_strdup("not_reached");
      snprintf(path, sizeof path,
               "run %s never reached P@1 %g (best %.2f at %.1f s): train longer or lower "
               "the threshold",
               r->run, s->resp_x, best, best_t);
      r->note = ar_strdup(path);
      free(sum);
      return;
    }
    break;
  }
  }
  if (key && !ev)
    y = ar__study_json_num(sum, key);
  if (strstr(sum, "\"interrupted\": true")) {
    r->status = ar_strdup("failed");
    snprintf(path, sizeof path, "run %s was interrupted (its summary says so)", r->run);
    r->note = ar_strdup(path);
  } else if (!isfinite(y)) {
    r->status = ar_strdup("no_response");
    snprintf(path, sizeof path, "the %s of run %s has no number '%s'%s", file, r->run,
             key ? key : "train_s / iterations", why);
    r->note = ar_strdup(path);
  } else {
    r->y = y;
    r->status = ar_strdup("ok");
    if (s->resp == AR_RESP_INFERENCE_SAMPLES_PER_S || s->resp == AR_RESP_INFERENCE_P_AT_1)
      snprintf(path, sizeof path, "inference %s (eval.json %s)",
               sampled ? "by LSH candidates" : "scoring every label", key);
    else
      path[0] = '\0';
    r->note = ar_strdup(path);
  }
  free(ev);
  free(sum);
}

/* The last non-empty line of a run's log, for the note of a failed run. */
static void last_line(const char *log, char *buf, size_t cap) {
  buf[0] = '\0';
  char *t = read_text(log);
  if (!t)
    return;
  size_t n = strlen(t);
  while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' '))
    t[--n] = '\0';
  char *nl = strrchr(t, '\n');
  snprintf(buf, cap, "%s", nl ? nl + 1 : t);
  free(t);
}

/* Makes the generated data of every job of spec once per distinct set of
 * generation parameters, in OUT/data/<hash>/, and links each run's
 * output.dir/data there (the engine reuses data whose stamp matches). */
static ar_status share_data(const ar_study *s, ar_spec *spec, ar_err *err) {
  int n = spec->n_jobs ? spec->n_jobs : 1;
  for (int i = 0; i < n; i++) {
    ar_spec *j = spec->n_jobs ? spec->jobs[i] : spec;
    if (!j->data.generate)
      continue;
    const ar_gen_spec *g = &j->data.gen;
    char key[512];
    snprintf(key, sizeof key, "%lld %lld %lld %lld %d %d %.17g %llu",
             (long long)g->train_points, (long long)g->test_points, (long long)g->features,
             (long long)g->labels, g->nnz, g->labels_per_point, g->noise,
             (unsigned long long)j->seed);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = key; *p; p++)
      h = (h ^ (unsigned char)*p) * 1099511628211ull;
    char cache[4200], link_path[4300], target[4300];
    snprintf(cache, sizeof cache, "%s/data/%016llx", s->out, (unsigned long long)h);
    char *run_dir = j->output.dir;
    j->output.dir = cache;
    const char *tr, *te;
    char *storage = NULL;
    ar_status st = ar_run_resolve_data(j, NULL, &tr, &te, &storage, err);
    j->output.dir = run_dir;
    ar_free(storage);
    if (st != AR_OK)
      return st;
    AR_CHECK(ar_mkdirs(run_dir, err));
    snprintf(link_path, sizeof link_path, "%s/data", run_dir);
    char *real = realpath(cache, NULL);
    snprintf(target, sizeof target, "%s/data", real ? real : cache);
    free(real);
    if (symlink(target, link_path) != 0 && errno != EEXIST)
      return ar_errf(err, AR_IO, "cannot link '%s' to '%s': %s", link_path, target,
                     strerror(errno));
  }
  return AR_OK;
}

/* The overrides of one run. */
static int run_sets(const ar_study *s, int cell, int rep, const char *dir, char **own,
                    const char **sets) {
  int n = 0;
  for (int f = 0; f < s->k; f++)
    for (int i = 0; i < s->f[f].n_keys; i++)
      sets[n++] = s->f[f].set[ar__study_level(s, cell, f) * s->f[f].n_keys + i];
  size_t len = strlen(dir) + 16;
  own[0] = ar_malloc(len);
  if (own[0])
    snprintf(own[0], len, "output.dir=%s", dir);
  sets[n++] = own[0];
  own[1] = NULL;
  if (s->vary_seed) {
    own[1] = ar_malloc(48);
    if (own[1])
      snprintf(own[1], 48, "seed=%llu", (unsigned long long)(s->job_seed + (uint64_t)rep));
    sets[n++] = own[1];
  }
  return n;
}

typedef enum { RUN_DONE = 0, RUN_STOPPED } run_end;

/* How a child process ended. */
typedef enum { CHILD_EXITED = 0, CHILD_TIMEOUT, CHILD_STOPPED } child_end;

/* The argv of one child, NULL-terminated (ar_free it; the strings are
 * borrowed): [mpiexec --oversubscribe -n RANKS] EXE CMD BASE, every fixed
 * override and the run's own ones as --set, then tail. */
static const char **child_argv(const ar_study *s, const char *exe, const char *cmd,
                               const char *ranks, const char *const *sets, int ns,
                               const char *const *tail, int nt) {
  size_t n = 8 + 2 * ((size_t)s->n_sets + (size_t)ns) + (size_t)nt;
  const char **argv = ar_calloc(n, sizeof *argv);
  if (!argv)
    return NULL;
  int a = 0;
  if (ranks) {
    const char *mpiexec = getenv("ACCELRT_MPIEXEC");
    argv[a++] = mpiexec && mpiexec[0] ? mpiexec : "mpiexec";
    argv[a++] = "--oversubscribe";
    argv[a++] = "-n";
    argv[a++] = ranks;
  }
  argv[a++] = exe;
  argv[a++] = cmd;
  argv[a++] = s->base;
  for (int i = 0; i < s->n_sets; i++) {
    argv[a++] = "--set";
    argv[a++] = s->sets[i];
  }
  for (int i = 0; i < ns; i++) {
    argv[a++] = "--set";
    argv[a++] = sets[i];
  }
  for (int i = 0; i < nt; i++)
    argv[a++] = tail[i];
  argv[a] = NULL;
  return argv;
}

/* Runs argv in a process group of its own with its output in logp
 * (appended when append), until it exits (CHILD_EXITED, its wait status
 * in *wst), the run's timeout_s counted from t0 passes (CHILD_TIMEOUT) or
 * a signal asks the study to stop (CHILD_STOPPED); in the last two the
 * group gets SIGTERM, and SIGKILL 10 s later.  AR_IO when it cannot start. */
static ar_status run_child(const ar_study *s, const char *const *argv, const char *logp,
                           bool append, double t0, const char *what, int *wst, child_end *end,
                           ar_err *err) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return ar_errf(err, AR_IO, "cannot start %s: %s", what, strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int fd = open(logp, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0666);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "accelrt study: cannot execute %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  *wst = 0;
  bool timed_out = false;
  double kill_at = 0;
  for (;;) {
    pid_t w = waitpid(pid, wst, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR))
      break;
    double now = ar_now();
    if (!kill_at && (stop_signal || (s->timeout_s > 0 && now - t0 > s->timeout_s))) {
      timed_out = !stop_signal;
      kill(-pid, SIGTERM);
      kill_at = now + 10;
    } else if (kill_at && now > kill_at) {
      kill(-pid, SIGKILL);
      kill_at = now + 1e9;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  *end = timed_out ? CHILD_TIMEOUT : stop_signal ? CHILD_STOPPED : CHILD_EXITED;
  return AR_OK;
}

/* This program's path, for the children.  AR_STATE when the binary was
 * rebuilt since the study started (the link reads "PATH (deleted)"): the
 * runs of one study must not mix two builds. */
static ar_status self_exe(char *exe, size_t cap, ar_err *err) {
  ssize_t el = readlink("/proc/self/exe", exe, cap - 1);
  if (el <= 0)
    return ar_errf(err, AR_IO, "cannot find this program's path (/proc/self/exe): %s",
                   strerror(errno));
  exe[el] = '\0';
  if (el > 10 && !strcmp(exe + el - 10, " (deleted)"))
    return ar_errf(err, AR_STATE,
                   "this program's binary (%.*s) was replaced while the study ran; start the "
                   "study again to resume with the new build",
                   (int)(el - 10), exe);
  return AR_OK;
}

/* Runs one run to its row.  RUN_STOPPED when a signal asked to stop. */
static ar_status run_one(const ar_study *s, int idx, study_row *r, run_end *end, ar_err *err) {
  int cell = s->run_cell[idx], rep = s->run_rep[idx];
  char cn[64], dir[4200], logp[4300];
  ar__study_cell_name(s, cell, cn, sizeof cn);
  char id[96];
  snprintf(id, sizeof id, "%s-r%d", cn, rep + 1);
  snprintf(dir, sizeof dir, "%s/runs/%s", s->out, id);
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  memset(r, 0, sizeof *r);
  r->run = ar_strdup(id);
  r->cell = cell;
  r->rep = rep;
  r->order = idx + 1;
  r->y = NAN;
  *end = RUN_DONE;
  if (!r->run)
    return ar_errf(err, AR_NOMEM, "out of memory");
  rm_tree(dir);
  AR_CHECK(ar_mkdirs(dir, err));
  char *own[2] = {NULL, NULL};
  const char *sets[AR_FX_MAX_FACTORS * STUDY_MAX_LINKED + 4];
  int ns = run_sets(s, cell, rep, dir, own, sets);
  ar_spec *spec = NULL;
  ar_diags jd = {0, NULL};
  ar_status st = load_job(s, sets, ns, &spec, &jd);
  ar_diags_fini(&jd);
  r->started = (double)time(NULL);
  double t0 = ar_now();
  if (st != AR_OK) {
    ar_free(own[0]);
    ar_free(own[1]);
    return ar_errf(err, st, "run %s: the job no longer loads (did the base job change?)", id);
  }
  /* A CUDA device that is not there: the run is skipped, not failed. */
  char why[256] = "";
  bool cuda = is_cuda(spec->device);
  for (int i = 0; i < spec->n_jobs; i++)
    cuda = cuda || is_cuda(spec->jobs[i]->device);
  if (cuda && ar_cuda_device_count(why, sizeof why) == 0) {
    ar_spec_destroy(spec);
    ar_free(own[0]);
    ar_free(own[1]);
    r->status = ar_strdup("skipped");
    char note[400];
    snprintf(note, sizeof note, "no CUDA device here (%s): the cell stays missing", why);
    r->note = ar_strdup(note);
    return r->status && r->note ? AR_OK : ar_errf(err, AR_NOMEM, "out of memory");
  }
  st = share_data(s, spec, err);
  ar_spec_destroy(spec);
  if (st != AR_OK) {
    ar_free(own[0]);
    ar_free(own[1]);
    return st;
  }
  char exe[4096];
  st = self_exe(exe, sizeof exe, err);
  if (st != AR_OK) {
    ar_free(own[0]);
    ar_free(own[1]);
    return st;
  }
  /* The run, then (when it trained) its eval, both counted against
   * timeout_s; the row is written only after both, so that a study
   * stopped between them redoes the whole run. */
  char ranks[16], what[160], pts[32], reps[32];
  snprintf(ranks, sizeof ranks, "%d", s->ranks);
  snprintf(what, sizeof what, "run %s", id);
  const char *tail[] = {"--quiet"};
  const char **argv = child_argv(s, exe, "run", s->kind == STUDY_DIST ? ranks : NULL, sets, ns,
                                 tail, 1);
  int wst = 0;
  child_end how = CHILD_EXITED;
  st = argv ? run_child(s, argv, logp, false, t0, what, &wst, &how, err)
            : ar_errf(err, AR_NOMEM, "out of memory");
  ar_free(argv);
  bool evaluated = false;
  if (st == AR_OK && s->eval && how == CHILD_EXITED && WIFEXITED(wst) && WEXITSTATUS(wst) == 0) {
    snprintf(pts, sizeof pts, "%ld", s->eval_points);
    snprintf(reps, sizeof reps, "%ld", s->eval_reps);
    snprintf(what, sizeof what, "the eval of run %s", id);
    const char *etail[] = {"--points", pts, "--reps", reps};
    argv = child_argv(s, exe, "eval", NULL, sets, ns, etail, 4);
    st = self_exe(exe, sizeof exe, err);
    if (st == AR_OK)
      st = argv ? run_child(s, argv, logp, true, t0, what, &wst, &how, err)
                : ar_errf(err, AR_NOMEM, "out of memory");
    ar_free(argv);
    evaluated = true;
  }
  ar_free(own[0]);
  ar_free(own[1]);
  if (st != AR_OK)
    return st;
  r->wall_s = ar_now() - t0;
  if (how == CHILD_STOPPED) {
    *end = RUN_STOPPED;
    return AR_OK;
  }
  char note[5200], ll[600];
  if (how == CHILD_TIMEOUT) {
    r->status = ar_strdup("timeout");
    snprintf(note, sizeof note, "stopped after timeout_s %g s%s", s->timeout_s,
             evaluated ? " (in its eval)" : "");
    r->note = ar_strdup(note);
  } else if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
    last_line(logp, ll, sizeof ll);
    r->status = ar_strdup("failed");
    if (WIFEXITED(wst))
      snprintf(note, sizeof note, "%sexit %d: %s (log: %s)", evaluated ? "eval " : "",
               WEXITSTATUS(wst), ll, logp);
    else
      snprintf(note, sizeof note, "%skilled by signal %d (log: %s)", evaluated ? "eval " : "",
               WTERMSIG(wst), logp);
    r->note = ar_strdup(note);
  } else {
    extract(s, dir, r);
  }
  if (!s->keep_checkpoints)
    nftw(dir, rm_checkpoint, 16, FTW_PHYS);
  return r->status && r->note ? AR_OK : ar_errf(err, AR_NOMEM, "out of memory");
}

/* ---- the study ------------------------------------------------------------------- */

/* A number of effects.csv: six significant digits, empty when not finite. */
static void csv_num(char *buf, size_t cap, double v) {
  if (isfinite(v))
    snprintf(buf, cap, "%.6g", v);
  else
    buf[0] = '\0';
}

static ar_status write_effects(const ar_study *s, const ar_fx_design *d, const ar_fx_result *r,
                               ar_err *err) {
  char *t = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&t, &len);
  if (!m)
    return ar_errf(err, AR_NOMEM, "out of memory");
  /* A log study has four more columns: the scale and, from the ln-scale
   * estimate and interval, an effect's ratio (ar_fx_ratio) or a level's
   * geometric mean; a linear study's file stays as it always was. */
  bool logs = s->scale == AR_FX_LOG;
  int n_cols = logs ? 16 : 12;
  fprintf(m, "kind,term,letters,order,level,estimate,se,ci_low,ci_high,verdict,"
             "confounded_with,sentence%s\n",
          logs ? ",scale,ratio,ratio_ci_low,ratio_ci_high" : "");
  char *b = NULL;
  size_t bl = 0, bc = 0;
  char name[512], letters[32], other[32], sentence[2048], nums[4][32], ratio[3][32];
  for (int i = 0; i < r->n_terms; i++) {
    const ar_fx_term *T = &r->terms[i];
    ar_fx_term_name(r, d, i, false, name, sizeof name);
    ar_fx_term_name(r, d, i, true, letters, sizeof letters);
    other[0] = '\0';
    if (T->alias_of >= 0) {
      ar_fx_term_name(r, d, T->alias_of, true, other + (T->alias_sign < 0),
                      sizeof other - 1);
      if (T->alias_sign < 0)
        other[0] = '-';
    } else if (T->alias_of == -2) {
      snprintf(other, sizeof other, "mean");
    }
    ar_fx_sentence(r, d, i, sentence, sizeof sentence);
    double v[4] = {T->effect, T->se, T->lo, T->hi};
    for (int j = 0; j < 4; j++)
      csv_num(nums[j], sizeof nums[j], v[j]);
    char ord[8];
    snprintf(ord, sizeof ord, "%d", T->order);
    double rv[3] = {T->effect, T->lo, T->hi};
    for (int j = 0; j < 3; j++)
      csv_num(ratio[j], sizeof ratio[j], isfinite(rv[j]) ? ar_fx_ratio(T, rv[j]) : NAN);
    bl = 0;
    const char *fields[] = {"effect",  name,    letters,  ord,     "",
                            nums[0],   nums[1], nums[2],  nums[3], ar_fx_verdict_name(T->verdict),
                            other,     sentence, "log",   ratio[0], ratio[1],
                            ratio[2]};
    for (int j = 0; j < n_cols; j++)
      csv_field(&b, &bl, &bc, fields[j], j == 0);
    fprintf(m, "%s\n", b ? b : "");
  }
  for (int f = 0; f < s->k; f++)
    for (int l = 0; l < s->f[f].n_levels; l++) {
      int o = r->level_off[f] + l;
      double v[3] = {r->level_mean[o], r->level_lo[o], r->level_hi[o]};
      for (int j = 0; j < 3; j++) {
        csv_num(nums[j], sizeof nums[j], v[j]);
        csv_num(ratio[j], sizeof ratio[j], exp(v[j]));
      }
      snprintf(letters, sizeof letters, "%c", 'A' + f);
      bl = 0;
      const char *fields[] = {"level_mean", s->f[f].path, letters, "1", s->f[f].label[l],
                              nums[0], "", nums[1], nums[2], "", "", "", "log", ratio[0],
                              ratio[1], ratio[2]};
      for (int j = 0; j < n_cols; j++)
        csv_field(&b, &bl, &bc, fields[j], j == 0);
      fprintf(m, "%s\n", b ? b : "");
    }
  fclose(m);
  ar_free(b);
  char *path = ar_path_join(s->out, "effects.csv");
  ar_status st = path && t ? ar_write_file_atomic(path, t, len, err)
                           : ar_errf(err, AR_NOMEM, "out of memory");
  ar_free(path);
  free(t);
  return st;
}

ar_status ar_study_analyze(ar_study *s, const ar_study_opts *opts, ar_err *err) {
  FILE *log = opts && opts->log ? opts->log : stdout;
  bool quiet = opts && opts->quiet;
  study_row *rows = NULL;
  int n = 0;
  AR_CHECK(read_rows(s, false, &rows, &n, err));
  int *cell = ar_malloc((size_t)(n ? n : 1) * sizeof *cell);
  double *y = ar_malloc((size_t)(n ? n : 1) * sizeof *y);
  if (!cell || !y) {
    ar_free(cell);
    ar_free(y);
    rows_free(rows, n);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  int m = 0;
  for (int i = 0; i < n; i++)
    if (!strcmp(rows[i].status, "ok") && isfinite(rows[i].y)) {
      cell[m] = rows[i].cell;
      y[m++] = rows[i].y;
    }
  int levels[AR_FX_MAX_FACTORS];
  const char *names[AR_FX_MAX_FACTORS];
  const char *const *ln[AR_FX_MAX_FACTORS];
  ar_fx_design d;
  fill_design(s, &d, levels, names, ln);
  ar_fx_result *r = NULL;
  ar_status st = ar_fx_analyze(&d, cell, y, m, &r, err);
  ar_free(cell);
  ar_free(y);
  if (st == AR_OK)
    st = write_effects(s, &d, r, err);
  char *report = ar_path_join(s->out, "report.html");
  if (st == AR_OK)
    st = report ? ar__study_report(s, rows, n, &d, r, report, err)
                : ar_errf(err, AR_NOMEM, "out of memory");
  if (st == AR_OK && !quiet) {
    fprintf(log, "\n%s: %d of %d runs gave %s", s->name, m, s->n_runs, s->resp_name);
    if (r->n_missing)
      fprintf(log, "; %d planned cell%s without a result", r->n_missing,
              r->n_missing > 1 ? "s" : "");
    fprintf(log, "%s\n", s->scale == AR_FX_LOG ? "; analysed on a log scale" : "");
    /* A response <= 0 has no logarithm: the run is named and left out. */
    int shown = 0;
    for (int i = 0; s->scale == AR_FX_LOG && i < n; i++)
      if (!strcmp(rows[i].status, "ok") && isfinite(rows[i].y) && rows[i].y <= 0)
        fprintf(log, "%s%s (%s %.6g)", shown++ ? ", " : "  not analysable on a log scale: ",
                rows[i].run, s->resp_name, rows[i].y);
    if (shown)
      fprintf(log, ": left out (a response <= 0 has no logarithm)\n");
    char sentence[2048];
    for (int i = 0; i < r->n_terms; i++) {
      if (r->terms[i].alias_of != -1 && r->terms[i].order > 1)
        continue;
      ar_fx_sentence(r, &d, i, sentence, sizeof sentence);
      fprintf(log, "  %s\n", sentence);
    }
    for (int f = 0; f < s->k; f++) {
      if (s->f[f].n_levels == 2)
        continue;
      fprintf(log, "  %s: means", s->f[f].path);
      for (int l = 0; l < s->f[f].n_levels; l++)
        fprintf(log, "%s %s %.4g", l ? "," : "", s->f[f].label[l],
                s->scale == AR_FX_LOG ? exp(r->level_mean[r->level_off[f] + l])
                                      : r->level_mean[r->level_off[f] + l]);
      fprintf(log, " (%sa factor of %d levels: only its main effect; interactions need two "
              "levels)\n", s->scale == AR_FX_LOG ? "geometric; " : "", s->f[f].n_levels);
    }
    fprintf(log, "report: %s  effects: %s/effects.csv  runs: %s/runs.csv\n", report, s->out,
            s->out);
  }
  ar_free(report);
  ar_fx_result_destroy(r);
  rows_free(rows, n);
  return st;
}

ar_status ar_study_run(ar_study *s, const ar_study_opts *opts, ar_err *err) {
  FILE *log = opts && opts->log ? opts->log : stdout;
  bool quiet = opts && opts->quiet;
  char *runs = ar_path_join(s->out, "runs");
  if (!runs)
    return ar_errf(err, AR_NOMEM, "out of memory");
  ar_status st = ar_mkdirs(runs, err);
  ar_free(runs);
  AR_CHECK(st);
  AR_CHECK(check_design(s, opts && opts->resume, err));
  study_row *rows = NULL;
  int n = 0;
  AR_CHECK(read_rows(s, true, &rows, &n, err));
  bool *done = ar_calloc((size_t)s->n_runs, sizeof *done);
  if (!done) {
    rows_free(rows, n);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  int n_done = 0;
  for (int i = 0; i < s->n_runs; i++)
    for (int j = 0; j < n; j++)
      if (rows[j].cell == s->run_cell[i] && rows[j].rep == s->run_rep[i] &&
          (!(opts && opts->retry_failed) || !strcmp(rows[j].status, "ok"))) {
        done[i] = true;
        n_done++;
      }
  rows_free(rows, n);
  if (!quiet)
    fprintf(log, "study %s: %d runs (%d cells x %d replicates), %d done before, output %s\n",
            s->name, s->n_runs, s->n_planned, s->replicates, n_done, s->out);
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  stop_signal = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  /* Tests stop a study after N runs as if interrupted. */
  const char *stop_env = getenv("ACCELRT_STUDY_STOP_AFTER");
  int stop_after = stop_env ? atoi(stop_env) : -1, ran = 0;
  bool stopped = false;
  for (int i = 0; i < s->n_runs && st == AR_OK; i++) {
    if (done[i])
      continue;
    if (stop_signal || (stop_after >= 0 && ran >= stop_after)) {
      stopped = true;
      break;
    }
    study_row r;
    run_end end;
    st = run_one(s, i, &r, &end, err);
    if (st == AR_OK && end == RUN_STOPPED) {
      stopped = true;
    } else if (st == AR_OK) {
      st = append_row(s, &r, err);
      ran++;
      if (st == AR_OK && !quiet) {
        char lv[512] = "";
        size_t len = 0;
        for (int f = 0; f < s->k && len < sizeof lv; f++)
          len += (size_t)snprintf(lv + len, sizeof lv - len, "%s%s=%s", f ? " " : "",
                                  s->f[f].path, s->f[f].label[ar__study_level(s, r.cell, f)]);
        fprintf(log, "[%d/%d] %s (%s): ", ++n_done, s->n_runs, r.run, lv);
        if (!strcmp(r.status, "ok"))
          fprintf(log, "%s %.6g %s, %.1f s%s%s\n", s->resp_name, r.y, s->unit, r.wall_s,
                  r.note[0] ? "; " : "", r.note);
        else
          fprintf(log, "%s: %s\n", r.status, r.note);
        fflush(log);
      }
    }
    ar_free(r.run);
    ar_free(r.status);
    ar_free(r.note);
    if (stopped)
      break;
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  ar_free(done);
  if (st != AR_OK)
    return st;
  if (stopped)
    return ar_errf(err, AR_INTERRUPTED,
                   "study stopped after %d of %d runs; runs.csv keeps every finished run: "
                   "resume with 'accelrt study %s%s%s' (the same command)",
                   n_done, s->n_runs, s->file, opts && opts->out_dir ? " --out " : "",
                   opts && opts->out_dir ? opts->out_dir : "");
  return ar_study_analyze(s, opts, err);
}
