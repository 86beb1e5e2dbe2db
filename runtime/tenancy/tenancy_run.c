/*
 * `accelrt run` of a file with `jobs:`: every job in one process on one
 * device, sharing it through lanes under runtime.policy and runtime.memory
 * (Salus, Yu & Chowdhury, MLSys 2020).  The engine's ar_job (open, start
 * in carved blocks, step, rebase, finish) is what the runner drives; the
 * plan sizes it admits on are exact (Salus took them from profiling).
 */
#define _GNU_SOURCE
#include "accelrt/tenancy.h"

#include "tenancy_impl.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the engine job behind the runner's table ---- */

static ar_status e_start(void *job, ar_device *dev, void *p, void *e, ar_err *err) {
  return ar_job_start(job, dev, p, e, err);
}
static ar_status e_step(void *job, ar_err *err) { return ar_job_step(job, err); }
static bool e_done(void *job) { return ar_job_done(job); }
static void e_rebase(void *job, void *p, void *e) { ar_job_rebase(job, p, e); }
static ar_status e_finish(void *job, bool interrupted, ar_err *err) {
  return ar_job_finish(job, interrupted, NULL, err);
}
static void e_close(void *job) { ar_job_close(job); }
static void e_progress(void *job, double *loss, uint64_t *samples) {
  *loss = ar_job_last_loss(job);
  int64_t n = ar_job_state(job)->samples;
  *samples = n > 0 ? (uint64_t)n : 0;
}

static const ar_tjob_fns engine_fns = {e_start, e_step,  e_done,    e_rebase,
                                       e_finish, e_close, e_progress, NULL};

void ar_tenancy_admit_sizes(const ar_plan *plan, size_t *persistent, size_t *ephemeral) {
  /* The host entries (a sampled layer's hash tables, a graph job's
   * datasets) are held as long as the job, like its persistent block:
   * admitted with it, so the lanes' budget covers them; on a GPU that
   * reserves device bytes the job does not use, which errs on the safe
   * side. */
  *persistent = plan->persistent_bytes + plan->host_bytes;
  *ephemeral = plan->ephemeral_bytes;
}

ar_status ar_tenancy_open_job(const ar_spec *spec, const ar_run_opts *opts,
                               ar_tjob_desc *d, ar_err *err) {
  ar_run_opts o = opts ? *opts : (ar_run_opts)AR_RUN_OPTS_INIT;
  o.quiet = true;
  ar_job *j = NULL;
  AR_CHECK(ar_job_open(spec, &o, &j, err));
  const ar_plan *plan = ar_job_plan(j);
  memset(d, 0, sizeof *d);
  d->name = spec->name;
  d->out_dir = spec->output.dir;
  d->fs = o.fs;
  ar_tenancy_admit_sizes(plan, &d->persistent, &d->ephemeral);
  /* ar_job_open already read a resumed job's checkpoint position, so it is
   * admitted for the iterations it has left (srtf sees them); the runner
   * still ends it when the engine says it is done. */
  int64_t total = ar_job_total(j), done = ar_job_iteration(j);
  if (total - done <= 0) {
    ar_job_close(j);
    return ar_errf(err, AR_STATE, "job '%s' has no iteration left to run", spec->name);
  }
  d->iterations = (uint64_t)(total - done);
  d->iterations_before = (uint64_t)done;
  d->priority = spec->priority;
  d->max_threads = spec->train.threads;
  d->arrival_s = spec->arrival_s;
  d->job = j;
  d->fns = &engine_fns;
  return AR_OK;
}

/* ---- a job that could not be opened ---- */

typedef struct failed_job {
  char *message;
} failed_job;

static ar_status f_start(void *job, ar_device *dev, void *p, void *e, ar_err *err) {
  (void)dev;
  (void)p;
  (void)e;
  return ar_errf(err, AR_INVALID, "%s", ((failed_job *)job)->message);
}
static ar_status f_step(void *job, ar_err *err) {
  return f_start(job, NULL, NULL, NULL, err);
}
static bool f_done(void *job) {
  (void)job;
  return false;
}
static void f_rebase(void *job, void *p, void *e) {
  (void)job;
  (void)p;
  (void)e;
}
static ar_status f_finish(void *job, bool interrupted, ar_err *err) {
  (void)job;
  (void)interrupted;
  (void)err;
  return AR_OK;
}
static void f_close(void *job) {
  failed_job *f = job;
  if (f)
    ar_free(f->message);
  ar_free(f);
}
static const ar_tjob_fns failed_fns = {f_start, f_step,  f_done, f_rebase,
                                       f_finish, f_close, NULL,   NULL};

ar_status ar_tenancy_failed_job(const char *name, const char *out_dir, const char *message,
                                 ar_tjob_desc *d) {
  failed_job *f = ar_calloc(1, sizeof *f);
  if (!f || !(f->message = ar_strdup(message ? message : "failed"))) {
    ar_free(f);
    return AR_NOMEM;
  }
  memset(d, 0, sizeof *d);
  d->name = name;
  d->out_dir = out_dir;
  d->persistent = 1;
  d->ephemeral = 1;
  d->iterations = 1;
  d->job = f;
  d->fns = &failed_fns;
  return AR_OK;
}

/* ---- signals: a watcher turns SIGINT/SIGTERM into ar_runner_stop ---- */

typedef struct watcher {
  ar_runner *r;
  volatile int done;
} watcher;

static void *watch(void *arg) {
  watcher *w = arg;
  while (!w->done) {
    if (ar_stop_signal()) {
      ar_runner_stop(w->r);
      break;
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/* ---- progress lines ---- */

typedef struct run_ctx {
  const ar_spec *spec;
  bool quiet;
  double t0;
} run_ctx;

static void on_event(void *ctxp, size_t idx, const ar_tjob_result *res) {
  run_ctx *c = ctxp;
  if (c->quiet || idx >= (size_t)c->spec->n_jobs)
    return;
  const char *name = c->spec->jobs[idx]->name;
  double t = ar_now() - c->t0;
  switch (res->state) {
  case AR_TJ_ADMITTED:
    fprintf(stderr, "[%8.2fs] %-16s admitted to lane %u (queued %.2f s)\n", t, name,
            (unsigned)res->lane, res->queue_s);
    break;
  case AR_TJ_DONE:
    fprintf(stderr, "[%8.2fs] %-16s done: %llu iterations, JCT %.2f s\n", t, name,
            (unsigned long long)res->iterations, res->jct_s);
    break;
  case AR_TJ_FAILED:
    fprintf(stderr, "[%8.2fs] %-16s FAILED: %s\n", t, name, res->error);
    break;
  case AR_TJ_STOPPED:
  case AR_TJ_CANCELLED:
    fprintf(stderr, "[%8.2fs] %-16s %s after %llu iterations\n", t, name,
            ar_tjob_state_name(res->state), (unsigned long long)res->iterations);
    break;
  default:
    break;
  }
}

ar_status ar_tenancy_capacity(const ar_spec *spec, size_t *out, char *source, size_t source_len,
                              ar_err *err) {
  ar_device_opts o = ar_job_device_opts(spec);
  *out = 0;
  if (ar_spec_runs_on_host(spec)) {
    AR_CHECK(ar__host_lanes_capacity(&o, out, source, source_len, err));
    *out &= ~(size_t)255; /* as the runner carves it */
    return AR_OK;
  }
  if (o.memory_bytes > 0) {
    *out = (size_t)o.memory_bytes & ~(size_t)255;
    snprintf(source, source_len, "runtime.memory (the arena of %s, less its lane handles' "
             "workspaces)", spec->device);
  } else {
    snprintf(source, source_len, "a fraction of the free memory of %s, known when it is "
             "opened", spec->device);
  }
  return AR_OK;
}

/* Opens every job of the file and adds it to r: a job that cannot be
 * opened fails alone, in the records like any failed job. */
static ar_status add_jobs(ar_runner *r, const ar_spec *spec, const ar_run_opts *opts,
                          bool quiet, ar_err *err) {
  for (int i = 0; i < spec->n_jobs; i++) {
    const ar_spec *js = spec->jobs[i];
    ar_tjob_desc d;
    ar_err je = AR_ERR_INIT;
    ar_run_opts jo = AR_RUN_OPTS_INIT;
    if (opts) { /* a job without a checkpoint yet starts afresh (ar_job_open) */
      jo.resume = opts->resume;
      jo.overwrite = opts->overwrite;
      jo.run_json = opts->run_json;
    }
    ar_status os = ar_tenancy_open_job(js, &jo, &d, &je);
    if (os == AR_NOMEM)
      return ar_errf(err, AR_NOMEM, "out of memory opening job '%s'", js->name);
    if (os != AR_OK) {
      if (!quiet)
        fprintf(stderr, "accelrt run: job '%s': %s\n", js->name, je.msg);
      if (ar_tenancy_failed_job(js->name, js->output.dir, je.msg, &d) != AR_OK)
        return ar_errf(err, AR_NOMEM, "out of memory");
      d.arrival_s = js->arrival_s;
    }
    ar_err ae = AR_ERR_INIT;
    if (ar_runner_add(r, &d, NULL, &ae) != AR_OK) {
      d.fns->close(d.job);
      return ar_errf(err, AR_NOMEM, "%s", ae.msg);
    }
  }
  return AR_OK;
}

/* The run's table on stdout. */
static void print_summary(ar_runner *r, const ar_spec *spec, const ar_runner_summary *s) {
  printf("\n%s: %zu jobs under %s on %s\n", spec->name, s->jobs, s->policy,
         ar_runner_device_name(r));
  printf("  %-20s %-9s %10s %10s %10s %5s\n", "job", "status", "JCT s", "queue s", "iters",
         "lane");
  for (size_t i = 0; i < s->jobs; i++) {
    ar_tjob_result res;
    if (ar_runner_result(r, i, &res) != AR_OK)
      continue;
    printf("  %-20s %-9s %10.2f %10.2f %10llu %5u\n", spec->jobs[i]->name,
           ar_tjob_state_name(res.state), res.jct_s, res.queue_s,
           (unsigned long long)res.iterations, (unsigned)res.lane);
  }
  printf("  makespan %.2f s, avg JCT %.2f s, p95 JCT %.2f s, avg queue %.2f s\n",
         s->makespan_s, s->avg_jct_s, s->p95_jct_s, s->avg_queue_s);
  printf("  switch latency p50 %.3f ms, p99 %.3f ms (%llu switches); busy %.0f%%\n",
         s->switch_ms_p50, s->switch_ms_p99, (unsigned long long)s->switches,
         100.0 * s->busy_fraction);
  printf("  memory: at most %.1f MiB of %.1f MiB; %llu defragmentations\n",
         (double)s->max_memory_bytes / 1048576.0, (double)s->capacity_bytes / 1048576.0,
         (unsigned long long)s->defrags);
  printf("  output %s/{summary.json,metrics.jsonl,trace.json}\n", spec->output.dir);
}

/* Runs r until its jobs ended, SIGINT/SIGTERM stopping it through a
 * watcher thread. */
static ar_status run_watched(ar_runner *r, ar_err *err) {
  ar_stop_signals_install(false);
  watcher w = {r, 0};
  pthread_t wt;
  bool watching = pthread_create(&wt, NULL, watch, &w) == 0;
  ar_status st = ar_runner_run(r, err);
  w.done = 1;
  if (watching)
    pthread_join(wt, NULL);
  ar_stop_signals_restore();
  return st;
}

ar_status ar_tenancy_run(const ar_spec *spec, const ar_run_opts *opts, ar_err *err) {
  if (!spec || spec->n_jobs <= 0)
    return ar_errf(err, AR_INVALID, "ar_tenancy_run: the file has no jobs");
  bool quiet = opts && opts->quiet;
  ar_runner_opts ro = AR_RUNNER_OPTS_INIT;
  ro.policy = ar_policy_name(spec->runtime.policy);
  ro.device = spec->device ? spec->device : "auto";
  /* The device is opened once for every job, with the top-level
   * runtime.memory (a CUDA device's arena). */
  ro.device_opts = ar_job_device_opts(spec);
  ro.threads = 0;
  ro.out_dir = spec->output.dir;
  run_ctx rc = {spec, quiet, ar_now()};
  ro.on_event = on_event;
  ro.ctx = &rc;
  /* The run's own folder, as each job's: cleared with --overwrite, and
   * described (the whole file resolved) before anything runs. */
  if (opts && (opts->overwrite || opts->run_json)) {
    AR_CHECK(ar_fs_mkdirs(NULL, spec->output.dir, err));
    if (opts->overwrite)
      AR_CHECK(ar_run_clear_outputs(NULL, spec->output.dir, err));
    if (opts->run_json)
      AR_CHECK(ar_run_describe(NULL, spec->output.dir, spec->resolved, opts->run_json, err));
  }
  ar_runner *r = NULL;
  AR_CHECK(ar_runner_create(&ro, &r, err));
  ar_status st = add_jobs(r, spec, opts, quiet, err);
  if (st == AR_OK) {
    if (!quiet)
      fprintf(stderr, "accelrt run: %d jobs on %s under %s, %.2f GiB of memory\n",
              spec->n_jobs, ar_runner_device_name(r), ro.policy,
              (double)ar_runner_capacity(r) / (1 << 30));
    rc.t0 = ar_now();
    st = run_watched(r, err);
    ar_runner_summary s;
    ar_runner_summary_get(r, &s);
    if (st == AR_OK && !quiet)
      print_summary(r, spec, &s);
    if (st == AR_OK && ar_stop_signal())
      st = ar_errf(err, AR_INTERRUPTED,
                   "interrupted; running jobs wrote their checkpoints: continue with "
                   "--resume");
    else if (st == AR_OK && s.failed > 0)
      st = ar_errf(err, AR_STATE, "%zu of %zu jobs failed (see %s/summary.json)", s.failed,
                   s.jobs, spec->output.dir);
  }
  ar_runner_destroy(r);
  return st;
}
