/*
 * A parsed study against its base job (see study_file.h): everything that
 * can be known before a run starts is refused here, at its place in the
 * study file, so that a study never fails half-way through for a typo.
 */
#include "launcher.h"
#include "study_file.h"

#include "design.h"

#include <string.h>

ar_status ar__study_load_job(const ar_study *s, const char *base, const char *const *extra,
                             int n_extra, ar_spec **spec, ar_diags *jd) {
  int n = s->n_sets + n_extra;
  const char **sets = ar_calloc((size_t)n + 1, sizeof *sets);
  if (!sets)
    return AR_NOMEM;
  for (int i = 0; i < s->n_sets; i++)
    sets[i] = s->sets[i];
  for (int i = 0; i < n_extra; i++)
    sets[s->n_sets + i] = extra[i];
  ar_status st = ar_spec_load(base, sets, n, spec, jd);
  ar_free(sets);
  return st;
}

bool ar__study_is_cuda(const char *device) { return device && !strncmp(device, "cuda", 4); }

/* One job diagnostic as text: "BASE:L:C: KEY: message" or "KEY: message". */
static void job_diag_text(const char *base, const ar_diag *g, char *buf, size_t cap) {
  if (g->set || g->line <= 0)
    snprintf(buf, cap, "%s%s%s", g->path ? g->path : "", g->path ? ": " : "", g->message);
  else
    snprintf(buf, cap, "%s:%d:%d: %s%s%s", base, g->line, g->col, g->path ? g->path : "",
             g->path ? ": " : "", g->message);
}

/* Whether a single job's output layer may run LSH-sampled, so that
 * accelrt eval also scores by LSH candidates (mode lsh, or auto at least
 * auto_min_width wide, on a device that is not a GPU). */
static bool output_may_sample(const ar_spec *spec) {
  if (spec->n_jobs > 0 || spec->n_layers < 1 || ar__study_is_cuda(spec->device))
    return false;
  const ar_layer_spec *out = &spec->layers[spec->n_layers - 1];
  return out->sparse.mode == AR_SPARSE_LSH ||
         (out->sparse.mode == AR_SPARSE_AUTO && out->width >= out->sparse.auto_min_width);
}

static const char *const kind_name[] = {"a single job", "a jobs: file", "a distributed job"};

/* One base job with the fixed overrides: its kind, seed and whether it
 * has a test split.  false after reporting its problems (at the override
 * under set: that caused one, else at `at` as `key`, "the base job is not
 * valid: ..."). */
static bool load_base(study_diags *c, const ar_study *s, const char *base, ar_srcpos at,
                      const char *key, study_kind *kind, uint64_t *seed, bool *has_test) {
  ar_spec *spec = NULL;
  ar_diags jd = {0, NULL};
  ar_status st = ar__study_load_job(s, base, NULL, 0, &spec, &jd);
  c->nomem = c->nomem || st == AR_NOMEM;
  char text[2048];
  for (int i = 0; st != AR_OK && st != AR_NOMEM && i < jd.count; i++) {
    const ar_diag *g = &jd.items[i];
    job_diag_text(base, g, text, sizeof text);
    int j = 0;
    while (g->set && j < s->n_sets && strcmp(g->set, s->sets[j]))
      j++;
    if (g->set && j < s->n_sets)
      ar__study_diag(c, s->set_line[j], s->set_col[j], "set", "%s", text);
    else
      ar__study_diag(c, at.line, at.col, key, "the base job is not valid: %s", text);
  }
  ar_diags_fini(&jd);
  if (st != AR_OK)
    return false;
  *kind = spec->n_jobs > 0 ? STUDY_JOBS : spec->distributed.enabled ? STUDY_DIST : STUDY_SINGLE;
  *seed = spec->seed;
  *has_test = spec->n_jobs == 0 &&
              (spec->data.test || (spec->data.generate && spec->data.gen.test_points > 0));
  ar_spec_destroy(spec);
  return true;
}

/* The base job, or every level of a base factor (which must be jobs of
 * one kind: a study runs them all the same way): s->kind, s->job_seed
 * (and each level's seed), and whether every base has a test split. */
static bool check_base(study_diags *c, ar_study *s, ar_srcpos base, bool *has_test) {
  if (s->base_factor < 0)
    return load_base(c, s, s->base, base, "base", &s->kind, &s->job_seed, has_test);
  study_factor *f = &s->f[s->base_factor];
  bool ok = true;
  *has_test = true;
  for (int l = 0; l < f->n_levels; l++) {
    char path[320];
    snprintf(path, sizeof path, "factors.base[%d]", l);
    study_kind kind;
    bool test = false;
    if (!f->file[l] ||
        !load_base(c, s, f->file[l], (ar_srcpos){f->lline[l], f->lcol[l]}, path, &kind,
                   &f->seed[l], &test)) {
      ok = false;
      continue;
    }
    *has_test = *has_test && test;
    if (l == 0) {
      s->kind = kind;
      s->job_seed = f->seed[0];
    } else if (kind != s->kind) {
      ar__study_diag(c, f->lline[l], f->lcol[l], path,
                     "'%s' is %s but '%s' is %s: the bases of a study run the same way; "
                     "give every level a distributed: section, or none",
                     f->label[l], kind_name[kind], f->label[0], kind_name[s->kind]);
      ok = false;
    }
  }
  return ok;
}

/* Every job file of an alongside factor loads as a job on its own. */
static void check_alongside(study_diags *c, const ar_study *s) {
  if (s->alongside_factor < 0)
    return;
  const study_factor *f = &s->f[s->alongside_factor];
  for (int l = 0; l < f->n_levels; l++) {
    if (!f->file[l])
      continue;
    ar_spec *spec = NULL;
    ar_diags jd = {0, NULL};
    ar_status st = ar_spec_load(f->file[l], NULL, 0, &spec, &jd);
    c->nomem = c->nomem || st == AR_NOMEM;
    char text[2048], path[320];
    snprintf(path, sizeof path, "factors.alongside[%d]", l);
    if (st != AR_OK && jd.count > 0) {
      job_diag_text(f->file[l], &jd.items[0], text, sizeof text);
      ar__study_diag(c, f->lline[l], f->lcol[l], path,
                     "level '%s' is not a job accelrt run can run: %s", f->label[l], text);
    } else if (st == AR_OK && spec->distributed.enabled) {
      ar__study_diag(c, f->lline[l], f->lcol[l], path,
                     "level '%s' is a distributed job; a job alongside runs in one process "
                     "(a single job or a jobs: file)",
                     f->label[l]);
    }
    ar_spec_destroy(spec);
    ar_diags_fini(&jd);
  }
}

/* Why the base job cannot give the response, or NULL when it can. */
static const char *response_unavailable(const ar_study *s, bool has_test) {
  switch (s->resp) {
  case AR_RESP_SAMPLES_PER_S:
  case AR_RESP_ITERATION_S:
  case AR_RESP_P_AT_1:
  case AR_RESP_TIME_TO_P1:
    if (s->kind == STUDY_JOBS)
      return "a jobs: run's summary has makespan and JCTs, not per-job training figures; "
             "use makespan_s or jct_s";
    break;
  case AR_RESP_MAKESPAN_S:
    if (s->kind == STUDY_SINGLE)
      return "a single job has no makespan; use iteration_s or wall_s";
    break;
  case AR_RESP_JCT_S:
    if (s->kind != STUDY_JOBS)
      return "job completion times come from a jobs: file; use wall_s";
    break;
  default:
    break;
  }
  if (s->resp == AR_RESP_TIME_TO_P1 && !has_test)
    return "the base job has no test split, so P@1 is never measured; give data.test or "
           "data.generate.test_points";
  return NULL;
}

/* ranks:, launcher:, the response and eval: against the kind of base job;
 * the launcher of a distributed base is resolved here. */
static void check_kind(study_diags *c, ar_study *s, ar_srcpos base, bool has_test) {
  if (s->kind == STUDY_DIST && s->ranks == 0)
    ar__study_diag(c, base.line, base.col, "ranks",
                   "the base job has a distributed: section: set ranks: N (servers plus "
                   "workers); its runs start under mpiexec -n N (or launcher:)");
  if (s->kind != STUDY_DIST && s->ranks > 0)
    ar__study_diag(c, base.line, base.col, "ranks",
                   "ranks is for a base job with a distributed: section; this base is %s",
                   kind_name[s->kind]);
  if (s->kind != STUDY_DIST && s->launch_line > 0)
    ar__study_diag(c, s->launch_line, s->launch_col, "launcher",
                   "launcher starts the ranks of a base job with a distributed: section; this "
                   "base is %s, whose runs start without one: drop launcher:",
                   kind_name[s->kind]);
  if (s->kind == STUDY_DIST && s->ranks > 0)
    ar__study_resolve_launcher(c, s);
  if (s->kind == STUDY_DIST && s->ranks > 0 && s->ranks < 2)
    ar__study_diag(c, base.line, base.col, "ranks",
                   "a distributed job needs a server and a worker");
  const char *why = s->resp_name ? response_unavailable(s, has_test) : NULL;
  if (why)
    ar__study_diag(c, base.line, base.col, "response", "%s is not available for %s: %s",
                   s->resp_name, kind_name[s->kind], why);
  if (s->eval && s->kind == STUDY_JOBS)
    ar__study_diag(c, s->eval_line, s->eval_col, "eval",
                   "accelrt eval evaluates one job, and the base is a jobs: file; drop eval: "
                   "or study one of its jobs on its own");
  else if (s->eval && !has_test)
    ar__study_diag(c, s->eval_line, s->eval_col, "eval",
                   "the base job has no test split to evaluate on; give data.test or "
                   "data.generate.test_points");
}

/* The base job with level l of factor f: its first problem as text in
 * first (when it has one), every problem reported at the level when
 * report is set.  false when the job refuses the level (with at least one
 * diagnostic). */
static bool level_loads(study_diags *c, const ar_study *s, int f, int l, bool report,
                        char *first, size_t cap) {
  const study_factor *x = &s->f[f];
  const char *const *set = (const char *const *)&x->set[l * x->n_keys];
  ar_spec *spec = NULL;
  ar_diags jd = {0, NULL};
  ar_status st = ar__study_load_job(s, s->base, set, x->n_keys, &spec, &jd);
  c->nomem = c->nomem || st == AR_NOMEM;
  ar_spec_destroy(spec);
  char text[2048], path[320];
  snprintf(path, sizeof path, "factors.%s[%d]", x->path, l);
  bool refused = st != AR_OK && jd.count > 0;
  if (refused)
    job_diag_text(s->base, &jd.items[0], first, cap);
  for (int i = 0; report && refused && i < jd.count; i++) {
    job_diag_text(s->base, &jd.items[i], text, sizeof text);
    ar__study_diag(c, x->lline[l], x->lcol[l], path,
                   "level '%s' is not valid for the base job: %s; fix the level or the "
                   "factor's key (keys that must agree are one factor when joined by '+', "
                   "e.g. model.layers.out.dense+data.generate.labels)",
                   x->label[l], text);
  }
  ar_diags_fini(&jd);
  return !refused;
}

/* Every level alone (with the first base when the base is a factor), at
 * its place in the file; a problem every level shares word for word (an
 * unknown key) once, at the factor's key.  false when a level was
 * refused. */
static bool check_levels(study_diags *c, const ar_study *s) {
  bool ok = true;
  for (int f = 0; f < s->k && !c->nomem; f++) {
    const study_factor *x = &s->f[f];
    if (x->kind != FACTOR_SET)
      continue;
    char first[2048] = "", text[2048];
    int same = 0;
    for (int l = 0; l < x->n_levels; l++)
      if (x->set[l * x->n_keys] && !level_loads(c, s, f, l, false, text, sizeof text)) {
        same += l == 0 || !strcmp(first, text);
        if (l == 0)
          snprintf(first, sizeof first, "%s", text);
      }
    if (same == x->n_levels) {
      char path[300];
      snprintf(path, sizeof path, "factors.%s", x->path);
      ar__study_diag(c, x->line, x->col, path,
                     "the base job refuses this key at every level: %s; use a key of the job "
                     "(see accelrt schema)",
                     first);
      ok = false;
      continue;
    }
    for (int l = 0; l < x->n_levels; l++)
      if (x->set[l * x->n_keys] && !level_loads(c, s, f, l, true, text, sizeof text))
        ok = false;
  }
  return ok;
}

/* Every planned combination of levels; *sampled tells whether the output
 * layer may run sampled in any cell. */
static void check_cells(study_diags *c, const ar_study *s, bool *sampled) {
  const char *sets[AR_FX_MAX_FACTORS * STUDY_MAX_LINKED];
  char text[2048], name[64];
  *sampled = false;
  for (int cell = 0; cell < s->n_cells && !c->nomem; cell++) {
    if (!s->planned[cell])
      continue;
    int ns = 0;
    for (int f = 0; f < s->k; f++)
      for (int i = 0; i < s->f[f].n_keys; i++)
        sets[ns++] = s->f[f].set[ar__study_level(s, cell, f) * s->f[f].n_keys + i];
    const char *base = ar__study_base(s, cell);
    ar_spec *spec = NULL;
    ar_diags jd = {0, NULL};
    ar_status st = ar__study_load_job(s, base, sets, ns, &spec, &jd);
    c->nomem = c->nomem || st == AR_NOMEM;
    *sampled = *sampled || (st == AR_OK && output_may_sample(spec));
    ar_spec_destroy(spec);
    ar__study_cell_name(s, cell, name, sizeof name);
    for (int i = 0; st != AR_OK && i < jd.count; i++) {
      job_diag_text(base, &jd.items[i], text, sizeof text);
      ar__study_diag(c, s->f[0].line, s->f[0].col, "factors",
                     "cell %s combines levels the job refuses: %s; drop a level or add a "
                     "fixed override under set:",
                     name, text);
    }
    ar_diags_fini(&jd);
  }
}

void ar__study_validate(study_diags *c, ar_study *s, ar_srcpos base) {
  bool has_test = false, sampled = false;
  if (!check_base(c, s, base, &has_test))
    return;
  check_kind(c, s, base, has_test);
  check_alongside(c, s);
  if (c->nomem || !check_levels(c, s))
    return;
  check_cells(c, s, &sampled);
  if (s->resp == AR_RESP_EVAL_KEY && s->resp_key && !strncmp(s->resp_key, "lsh_", 4) &&
      !sampled && s->kind != STUDY_JOBS)
    ar__study_diag(c, s->resp_line, s->resp_col, "response",
                   "eval.json has %s only when the output layer runs LSH-sampled, and it does "
                   "in no cell of this study; sample it (model.layers.NAME.sparse.mode: lsh, "
                   "as a factor or under set:) or use inference_samples_per_s / "
                   "inference_p_at_1",
                   s->resp_key);
}
