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
#include "launcher.h"
#include "response.h"

#include "accelrt/fs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the keys ------------------------------------------------------------ */

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

/* The keys of a study file, in the order of docs/study.md's example (and
 * of "allowed keys: ..."). */
static const ar_schema study_keys[] = {
    {.key = "name",
     .type = AR_SCHEMA_STRING,
     .def_doc = "the file's name without .yaml",
     .doc = "Names the study in messages and the default output folder."},
    {.key = "base",
     .type = AR_SCHEMA_PATH,
     .def_doc = "required unless a factor is base",
     .expect = "the base job file, relative to this file (base: ../quickstart.yaml)",
     .doc = "The job every run runs, relative to the study file; or vary it as a factor, "
            "factors: {base: [a.yaml, b.yaml]}."},
    {.key = "set",
     .type = AR_SCHEMA_ANY,
     .doc = "Fixed overrides for every run, {KEY.PATH: value} as for --set."},
    {.key = "factors",
     .type = AR_SCHEMA_ANY,
     .required = true,
     .expect = "the factors, e.g. factors: {train.batch: [64, 256]}",
     .doc = "{KEY.PATH: [level, level, ...]}: any --set path of the job (or up to four "
            "joined by '+') with two or more levels; base: [job files] varies the base job, "
            "alongside: [none, job file] runs a job beside each run on the same machine."},
    {.key = "response",
     .type = AR_SCHEMA_ANY,
     .required = true,
     .expect = "what to measure, e.g. response: samples_per_s",
     .doc = "What is measured of each run: a name, or {time_to_p1: P}, {key: NAME}, "
            "{eval: NAME}."},
    {.key = "better",
     .type = AR_SCHEMA_ENUM,
     .values = better_values,
     .def_doc = "per response",
     .expect = "higher or lower",
     .doc = "Whether a higher or a lower response is better (required for {key:})."},
    {.key = "replicates",
     .type = AR_SCHEMA_INT,
     .imin = 1,
     .imax = 1000,
     .def = "3",
     .expect = "a whole number from 1 to 1000",
     .doc = "Runs per cell; 2 or more for intervals."},
    {.key = "seed",
     .type = AR_SCHEMA_INT,
     .imin = 0,
     .imax = 2147483647,
     .def = "1",
     .expect = "a whole number from 0 to 2147483647",
     .doc = "Randomises the run order."},
    {.key = "fraction",
     .type = AR_SCHEMA_ANY,
     .doc = "Generators of a 2^(k-p) fraction, [D=ABC] (two-level factors only)."},
    {.key = "ranks",
     .type = AR_SCHEMA_INT,
     .imin = 2,
     .imax = 4096,
     .expect = "a whole number from 2 to 4096",
     .doc = "MPI ranks of a base job with distributed: (its runs start under the launcher)."},
    {.key = "launcher",
     .type = AR_SCHEMA_ANY,
     .def_doc = "$ACCELRT_MPIEXEC, else mpiexec",
     .doc = "The command a distributed run starts under, e.g. \"srun --mpi=pmix -n {ranks}\" "
            "or a list of its words; {ranks} becomes ranks:, and -n {ranks} is appended when "
            "no word has it."},
    {.key = "timeout_s",
     .type = AR_SCHEMA_FLOAT,
     .fmin = 0,
     .fmin_open = true,
     .fmax = 1e7,
     .fmax_open = true,
     .expect = "seconds above 0",
     .doc = "A run (with its eval) taking longer is stopped and recorded as timeout."},
    {.key = "output",
     .type = AR_SCHEMA_STRING,
     .def_doc = "runs/studies/NAME",
     .doc = "The output folder; --out DIR overrides it."},
    {.key = "vary_seed",
     .type = AR_SCHEMA_ENUM,
     .values = bool_values,
     .def = "false",
     .expect = "true or false",
     .doc = "true: replicate r runs with the job's seed + r."},
    {.key = "keep_checkpoints",
     .type = AR_SCHEMA_ENUM,
     .values = bool_values,
     .def = "false",
     .expect = "true or false",
     .doc = "true: keep each run's checkpoint.bin."},
    {.key = "eval",
     .type = AR_SCHEMA_ANY,
     .doc = "accelrt eval after each run that trained: true, false or {points: N, reps: N}."},
    {.key = "scale",
     .type = AR_SCHEMA_ENUM,
     .values = scale_values,
     .def = "linear",
     .expect = "linear or log",
     .doc = "The scale of the analysis: log fits ln(response), effects as ratios."},
    {0}};

static const ar_schema study_file = {.key = "", .type = AR_SCHEMA_MAP, .kids = study_keys};

/* ---- helpers ------------------------------------------------------------- */

void ar__study_diag(study_diags *c, int line, int col, const char *path, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (ar_diags_add(c->d, line, col, path, "%s", msg) != AR_OK)
    c->nomem = true;
}

bool ar__study_scalar(study_diags *c, const ar_ynode *n, const char *key) {
  if (n->kind == AR_YNODE_SCALAR)
    return true;
  ar__study_diag(c, n->line, n->col, key, "expected a single value, got a %s",
                 n->kind == AR_YNODE_MAP ? "mapping" : "list");
  return false;
}

char *ar__study_strdup(study_diags *c, const char *text) {
  char *s = ar_strdup(text);
  if (!s)
    c->nomem = true;
  return s;
}

char *ar__study_override(study_diags *c, const char *path, const ar_ynode *n) {
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

/* ---- eval, set ----------------------------------------------------------- */

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
    if (!ar__study_scalar(c, n->vals[i], path))
      continue;
    s->sets[s->n_sets] = ar__study_override(c, n->keys[i]->text, n->vals[i]);
    s->set_line[s->n_sets] = n->vals[i]->line;
    s->set_col[s->n_sets++] = n->vals[i]->col;
  }
}

/* ---- the file ------------------------------------------------------------ */

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

char *ar__study_file_path(study_diags *c, const ar_study *s, const ar_ynode *n,
                          const char *key, const char *what) {
  char *dir = path_dir(s->file);
  char *p = n->text[0] == '/' || !dir ? ar__study_strdup(c, n->text) : ar_path_join(dir, n->text);
  ar_free(dir);
  if (!p) {
    c->nomem = true;
  } else if (access(p, R_OK) != 0) {
    char q[128];
    ar__study_diag(c, n->line, n->col, key,
                   "cannot read %s '%s' (%s: %s); the path is relative to the study file", what,
                   ar_ynode_quote(n, q, sizeof q), p, strerror(errno));
    ar_free(p);
    p = NULL;
  }
  return p;
}

/* base: resolved against the study file's folder, and readable; required
 * unless a factor varies it (then its first level stands for it where one
 * base is named). */
static void read_base(study_diags *c, ar_study *s, const ar_ynode *root) {
  const ar_ynode *n = ar_ynode_get(root, "base");
  if (s->base_factor >= 0) {
    const study_factor *f = &s->f[s->base_factor];
    if (n)
      ar__study_diag(c, n->line, n->col, "base",
                     "the base job is a factor (factors.base at line %d): drop this base: or "
                     "the factor",
                     f->line);
    else if (f->n_levels > 0 && f->file[0])
      s->base = ar__study_strdup(c, f->file[0]);
    return;
  }
  if (!n) {
    ar__study_diag(c, root->line, root->col, "base",
                   "missing: name the job every run runs (base: ../quickstart.yaml), or vary "
                   "it as a factor (factors: {base: [a.yaml, b.yaml]})");
    return;
  }
  ar_schema_value v;
  if (!ar_schema_get(&study_file, root, "base", &v))
    return; /* not a path: reported */
  s->base_given = ar__study_strdup(c, v.s);
  s->base = ar__study_file_path(c, s, n, "base", "the base job");
}

/* The keys whose values the table checks and converts (or defaults). */
static void read_settings(study_diags *c, ar_study *s, const ar_ynode *root) {
  ar_schema_value v;
  if (ar_schema_get(&study_file, root, "name", &v))
    s->name = ar__study_strdup(c, v.s);
  if (ar_schema_get(&study_file, root, "output", &v))
    s->out = ar__study_strdup(c, v.s);
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
  if ((n = ar_ynode_get(root, "factors")))
    ar__study_parse_factors(c, s, n);
  read_base(c, s, root);
  if ((n = ar_ynode_get(root, "set")))
    parse_sets(c, s, n);
  if ((n = ar_ynode_get(root, "response")))
    ar__study_parse_response(c, s, n);
  read_settings(c, s, root);
  if ((n = ar_ynode_get(root, "fraction")) && s->k > 0)
    ar__study_parse_fraction(c, s, n);
  if ((n = ar_ynode_get(root, "eval")))
    parse_eval(c, s, n);
  if ((n = ar_ynode_get(root, "launcher")))
    ar__study_parse_launcher(c, s, n);
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
    s->name = ar__study_strdup(c, b ? b + 1 : s->file);
    char *dot = s->name ? strrchr(s->name, '.') : NULL;
    if (dot && dot != s->name)
      *dot = '\0';
  }
  if (opts && opts->out_dir) {
    ar_free(s->out);
    s->out = ar__study_strdup(c, opts->out_dir);
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
  if (s)
    s->base_factor = s->alongside_factor = -1;
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
  /* Problems of the base job go to base:, or with a base factor to each
   * level of it. */
  const ar_ynode *b = ar_ynode_get(root, "base");
  ar_srcpos at = b ? (ar_srcpos){b->line, b->col}
                   : (ar_srcpos){s->f[s->base_factor].line, s->f[s->base_factor].col};
  ar__study_validate(&c, s, at);
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
      if (x->file)
        ar_free(x->file[l]);
    }
    ar_free(x->file);
    ar_free(x->seed);
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
  ar__study_launcher_free(s);
  ar_free(s);
}

const char *ar_study_out_dir(const ar_study *s) { return s->out; }
