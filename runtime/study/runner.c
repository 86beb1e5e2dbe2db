/*
 * The runs of a study (ar_study_run): the runs not yet recorded in
 * OUT/runs.csv, in the study's randomised order, one child process each
 * (child.c), one durable row each (store.c); SIGINT or SIGTERM stops the
 * running child and leaves runs.csv valid, so that the same command
 * resumes.  A run that was running when the study stopped has no row, so
 * its folder is cleared and it is redone.
 */
#define _GNU_SOURCE
#include "child.h"
#include "launcher.h"
#include "response.h"
#include "store.h"
#include "study_file.h"

#include "accelrt/device.h"
#include "accelrt/runtime.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- a run's folder ------------------------------------------------------ */

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
    uint64_t seed = s->base_factor >= 0
                        ? s->f[s->base_factor].seed[ar__study_level(s, cell, s->base_factor)]
                        : s->job_seed;
    own[1] = ar_malloc(48);
    if (own[1])
      snprintf(own[1], 48, "seed=%llu", (unsigned long long)(seed + (uint64_t)rep));
    sets[n++] = own[1];
  }
  return n;
}

/* The last non-empty line of a run's log (trailing blanks cut), for the
 * note of a failed run; "" when there is none. */
static void last_line(const char *log, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(log, "r");
  char *line = NULL;
  size_t lcap = 0;
  ssize_t n;
  while (f && (n = getline(&line, &lcap, f)) > 0) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
      line[--n] = '\0';
    if (n > 0)
      snprintf(buf, cap, "%s", line);
  }
  free(line);
  if (f)
    fclose(f);
}

/* ---- one run ------------------------------------------------------------- */

/* One run being run: its name, folder, log and overrides. */
typedef struct one_run {
  char id[96];    /* "A0B1-r2" */
  const char *base;      /* its base job */
  const char *alongside; /* the job file run alongside it, or NULL */
  char dir[4200]; /* OUT/runs/ID */
  char logp[4300];
  const char *sets[AR_FX_MAX_FACTORS * STUDY_MAX_LINKED + 4];
  int ns;
  char *own[2]; /* the overrides made for this run (output.dir, seed) */
  int along_starts; /* how many times the job alongside started */
} one_run;

/* Names the run, clears its folder (a stopped run's is stale), starts its
 * row (order idx + 1) and makes its overrides. */
static ar_status start_run(const ar_study *s, int idx, one_run *x, study_row *r, ar_err *err) {
  int cell = s->run_cell[idx], rep = s->run_rep[idx];
  char cn[64];
  ar__study_cell_name(s, cell, cn, sizeof cn);
  snprintf(x->id, sizeof x->id, "%s-r%d", cn, rep + 1);
  snprintf(x->dir, sizeof x->dir, "%s/runs/%s", s->out, x->id);
  snprintf(x->logp, sizeof x->logp, "%s/log.txt", x->dir);
  memset(r, 0, sizeof *r);
  r->run = ar_strdup(x->id);
  r->cell = cell;
  r->rep = rep;
  r->order = idx + 1;
  r->y = NAN;
  x->ns = run_sets(s, cell, rep, x->dir, x->own, x->sets);
  x->base = ar__study_base(s, cell);
  x->alongside = ar__study_alongside(s, cell);
  if (!r->run || !x->own[0] || (s->vary_seed && !x->own[1]))
    return ar_errf(err, AR_NOMEM, "out of memory");
  rm_tree(x->dir);
  return ar_mkdirs(x->dir, err);
}

/* Loads the run's job: a CUDA device that is not there skips the run (its
 * row says so, *skipped); otherwise its generated data is shared.  The run
 * starts when its job has loaded: r->started, and *t0 for its wall time
 * and timeout (which count the data's generation). */
static ar_status prepare_job(const ar_study *s, one_run *x, study_row *r, double *t0,
                             bool *skipped, ar_err *err) {
  ar_spec *spec = NULL;
  ar_diags jd = {0, NULL};
  ar_status st = ar__study_load_job(s, x->base, x->sets, x->ns, &spec, &jd);
  ar_diags_fini(&jd);
  r->started = (double)time(NULL);
  *t0 = ar_now();
  *skipped = false;
  if (st != AR_OK)
    return ar_errf(err, st, "run %s: the job no longer loads (did the base job change?)", x->id);
  char why[256] = "";
  bool cuda = ar__study_is_cuda(spec->device);
  for (int i = 0; i < spec->n_jobs; i++)
    cuda = cuda || ar__study_is_cuda(spec->jobs[i]->device);
  if (cuda && ar_cuda_device_count(why, sizeof why) == 0) {
    char note[400];
    snprintf(note, sizeof note, "no CUDA device here (%s): the cell stays missing", why);
    r->status = RUN_SKIPPED;
    r->note = ar_strdup(note);
    *skipped = true;
  } else {
    st = share_data(s, spec, err);
  }
  ar_spec_destroy(spec);
  return st;
}

/* The run, then (when it trained) its eval, both counted against
 * timeout_s from t0; *evaluated tells whether the eval ran, *wst and *how
 * are the last child's. */
static ar_status run_children(const ar_study *s, one_run *x, double t0, int *wst,
                              child_end *how, bool *evaluated, ar_err *err) {
  char exe[4096], what[160], pts[32], reps[32];
  *evaluated = false;
  AR_CHECK(ar__study_self_exe(exe, sizeof exe, err));
  snprintf(what, sizeof what, "run %s", x->id);
  const char *tail[] = {"--quiet"};
  const char **argv = ar__study_child_argv(s, exe, "run", x->base, s->kind == STUDY_DIST,
                                           x->sets, x->ns, tail, 1);
  /* The job alongside starts first, so that the run shares the machine
   * from its first iteration, and stops when the run ends. */
  char adir[4300], alog[4400];
  pid_t along = 0;
  snprintf(adir, sizeof adir, "%s/alongside", x->dir);
  snprintf(alog, sizeof alog, "%s/log.txt", adir);
  ar_status st = argv ? AR_OK : ar_errf(err, AR_NOMEM, "out of memory");
  if (st == AR_OK && x->alongside && (st = ar_mkdirs(adir, err)) == AR_OK)
    st = ar__study_alongside_start(exe, x->alongside, adir, alog, &along, err);
  /* Its start-up (data, plan) can outlast a short run's: the run waits
   * until it trains, at most a minute. */
  if (st == AR_OK && along > 0)
    ar__study_alongside_wait(along, adir, alog, 60.0);
  if (st == AR_OK)
    st = ar__study_child_run(argv, x->logp, false, t0, s->timeout_s, what, wst, how, err);
  if (along > 0)
    ar__study_alongside_stop(along, alog, &x->along_starts);
  ar_free(argv);
  if (st != AR_OK || !s->eval || *how != CHILD_EXITED || !WIFEXITED(*wst) ||
      WEXITSTATUS(*wst) != 0)
    return st;
  /* The binary may have been replaced while the run trained. */
  AR_CHECK(ar__study_self_exe(exe, sizeof exe, err));
  snprintf(pts, sizeof pts, "%ld", s->eval_points);
  snprintf(reps, sizeof reps, "%ld", s->eval_reps);
  snprintf(what, sizeof what, "the eval of run %s", x->id);
  const char *etail[] = {"--points", pts, "--reps", reps};
  argv = ar__study_child_argv(s, exe, "eval", x->base, false, x->sets, x->ns, etail, 4);
  st = argv ? ar__study_child_run(argv, x->logp, true, t0, s->timeout_s, what, wst, how, err)
            : ar_errf(err, AR_NOMEM, "out of memory");
  ar_free(argv);
  *evaluated = true;
  return st;
}

/* The row of a run whose children ended (not stopped by a signal): timed
 * out, failed (exit status or signal, with the log's last line), or its
 * response. */
static void finish_row(const ar_study *s, const one_run *x, int wst, child_end how,
                       bool evaluated, study_row *r) {
  char note[5200], ll[600];
  const char *in_eval = evaluated ? "eval " : "";
  if (how == CHILD_TIMEOUT) {
    r->status = RUN_TIMEOUT;
    snprintf(note, sizeof note, "stopped after timeout_s %g s%s", s->timeout_s,
             evaluated ? " (in its eval)" : "");
  } else if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
    last_line(x->logp, ll, sizeof ll);
    r->status = RUN_FAILED;
    if (WIFEXITED(wst))
      snprintf(note, sizeof note, "%sexit %d: %s (log: %s)", in_eval, WEXITSTATUS(wst), ll,
               x->logp);
    else
      snprintf(note, sizeof note, "%skilled by signal %d (log: %s)", in_eval, WTERMSIG(wst),
               x->logp);
  } else {
    ar__study_read_response(s, x->dir, r);
    return;
  }
  r->note = ar_strdup(note);
}

/* Runs run idx of the order to its row in *r (ar_free its strings), or
 * sets *stopped when a signal asked the study to stop (no row then). */
static ar_status run_one(const ar_study *s, int idx, study_row *r, bool *stopped, ar_err *err) {
  one_run x = {.own = {NULL, NULL}};
  *stopped = false;
  bool skipped = false;
  double t0 = 0;
  ar_status st = start_run(s, idx, &x, r, err);
  if (st == AR_OK)
    st = prepare_job(s, &x, r, &t0, &skipped, err);
  if (st != AR_OK || skipped)
    goto done;
  int wst = 0;
  child_end how = CHILD_EXITED;
  bool evaluated = false;
  st = run_children(s, &x, t0, &wst, &how, &evaluated, err);
  if (st != AR_OK)
    goto done;
  r->wall_s = ar_now() - t0;
  if (how == CHILD_STOPPED) {
    *stopped = true;
    goto done;
  }
  finish_row(s, &x, wst, how, evaluated, r);
  if (x.alongside && r->note) {
    /* How often the job alongside ran: a reader can tell how much of the
     * run it covered. */
    char *n = NULL;
    if (asprintf(&n, "%s%salongside started %d time%s", r->note, r->note[0] ? "; " : "",
                 x.along_starts, x.along_starts == 1 ? "" : "s") < 0)
      n = NULL;
    ar_free(r->note);
    r->note = n ? ar_strdup(n) : NULL;
    free(n);
  }
  if (!s->keep_checkpoints)
    nftw(x.dir, rm_checkpoint, 16, FTW_PHYS);
  if (!r->note)
    st = ar_errf(err, AR_NOMEM, "out of memory");
done:
  ar_free(x.own[0]);
  ar_free(x.own[1]);
  if (st == AR_OK && skipped && !r->note)
    st = ar_errf(err, AR_NOMEM, "out of memory");
  return st;
}

/* ---- the study ----------------------------------------------------------- */

/* Which runs of the order have a row (with retry_failed: an ok row) in
 * done[0..n_runs) (ar_free it), and how many in *n_done. */
static ar_status find_done(const ar_study *s, bool retry_failed, bool **done, int *n_done,
                           ar_err *err) {
  study_row *rows = NULL;
  int n = 0;
  *n_done = 0;
  AR_CHECK(ar__study_store_read(s, true, &rows, &n, err));
  *done = ar_calloc((size_t)s->n_runs, sizeof **done);
  if (!*done) {
    ar__study_rows_free(rows, n);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  for (int i = 0; i < s->n_runs; i++)
    for (int j = 0; j < n; j++)
      if (rows[j].cell == s->run_cell[i] && rows[j].rep == s->run_rep[i] &&
          (!retry_failed || rows[j].status == RUN_OK)) {
        (*done)[i] = true;
        (*n_done)++;
      }
  ar__study_rows_free(rows, n);
  return AR_OK;
}

/* "[3/8] A1B0-r2 (train.batch=64 ...): samples_per_s 1234 samples/s, 1.2 s" */
static void print_row(FILE *log, const ar_study *s, const study_row *r, int n_done) {
  char lv[512] = "";
  size_t len = 0;
  for (int f = 0; f < s->k && len < sizeof lv; f++)
    len += (size_t)snprintf(lv + len, sizeof lv - len, "%s%s=%s", f ? " " : "", s->f[f].path,
                            s->f[f].label[ar__study_level(s, r->cell, f)]);
  fprintf(log, "[%d/%d] %s (%s): ", n_done, s->n_runs, r->run, lv);
  if (r->status == RUN_OK)
    fprintf(log, "%s %.6g %s, %.1f s%s%s\n", s->resp_name, r->y, s->unit, r->wall_s,
            r->note[0] ? "; " : "", r->note);
  else
    fprintf(log, "%s: %s\n", ar__study_status_name(r->status), r->note);
  fflush(log);
}

ar_status ar_study_run(ar_study *s, const ar_study_opts *opts, ar_err *err) {
  FILE *log = opts && opts->log ? opts->log : stdout;
  bool quiet = opts && opts->quiet;
  char *runs = ar_path_join(s->out, "runs");
  ar_status st = runs ? ar_mkdirs(runs, err) : ar_errf(err, AR_NOMEM, "out of memory");
  ar_free(runs);
  AR_CHECK(st);
  AR_CHECK(ar__study_store_check_design(s, opts && opts->resume, err));
  bool *done = NULL;
  int n_done = 0;
  AR_CHECK(find_done(s, opts && opts->retry_failed, &done, &n_done, err));
  if (!quiet)
    fprintf(log, "study %s: %d runs (%d cells x %d replicates), %d done before, output %s\n",
            s->name, s->n_runs, s->n_planned, s->replicates, n_done, s->out);
  if (!quiet && s->kind == STUDY_DIST) {
    char lt[2048];
    fprintf(log, "each run starts under %s\n", ar__study_launcher_text(s, lt, sizeof lt));
  }
  study_signals saved;
  ar__study_signals_catch(&saved);
  /* Tests stop a study after N runs as if interrupted. */
  const char *stop_env = getenv("ACCELRT_STUDY_STOP_AFTER");
  int stop_after = stop_env ? atoi(stop_env) : -1, ran = 0;
  bool stopped = false;
  for (int i = 0; i < s->n_runs && st == AR_OK && !stopped; i++) {
    if (done[i])
      continue;
    if (ar__study_stop_requested() || (stop_after >= 0 && ran >= stop_after)) {
      stopped = true;
      break;
    }
    study_row r;
    st = run_one(s, i, &r, &stopped, err);
    if (st == AR_OK && !stopped) {
      st = ar__study_store_append(s, &r, err);
      ran++;
      n_done++;
      if (st == AR_OK && !quiet)
        print_row(log, s, &r, n_done);
    }
    ar_free(r.run);
    ar_free(r.note);
  }
  ar__study_signals_restore(&saved);
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
