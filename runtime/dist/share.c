/* distributed.share: a worker whose device is shared with other tenants'
 * jobs through lanes (Salus, Yu & Chowdhury, MLSys 2020) while it trains
 * its part of a parameter-server job (TicTac).
 *
 * The worker opens the multi-job runner of runtime/tenancy on its device
 * (the host, or its GPU: the runner then hands the proxy a CUDA lane
 * handle, and the worker stages its tensors through host buffers,
 * stage.c) with the jobs of the share file and adds itself as one more
 * tenant: a proxy job whose plan is the worker's exact memory plan.  The
 * runner admits the proxy like any job (its persistent block and a lane
 * come from the lanes' capacity), and the worker's model is created in
 * those blocks on the lane's handle, so every byte it uses is the lanes'.
 * Each iteration is the policy's decision: when the runner hands the
 * proxy its lane for one iteration, the proxy's step lets the worker's
 * main thread (the only one that calls MPI) run one distributed iteration
 * and waits for it; meanwhile the runner's other lanes run the
 * co-tenants' iterations.  A co-tenant iteration in the proxy's lane
 * delays the worker, and a synchronous job waits for its slowest worker:
 * that is the interaction a study of sharing x ordering measures.
 *
 * The proxy's blocks may move (a defragmentation, or another ephemeral
 * range for its lane): the runner calls rebase while the worker waits for
 * its turn, and the worker applies the new addresses when its next turn
 * starts, before it touches the model.
 *
 * Every worker runs its own copy of the share file's jobs (one shared
 * device per worker, as on a cluster of shared GPUs); their outputs go to
 * OUT/share/worker<i>/<job>/ and the runner's records to
 * OUT/share/worker<i>/.
 *
 * distributed.share_tenants: steady wraps each co-tenant in
 * a job that starts it again (a fresh ar_job of the same spec, in the
 * same blocks) whenever it ran its iterations, and is done once the
 * worker ran its last iteration, so the co-tenants load the device for as
 * long as the distributed job runs, neither less (a long job would train
 * alone once they ended) nor more (a short one absorbs all their work):
 * with a fixed amount of co-tenant work, the architectures study's
 * sharing cost measured the job's length, not its family.  once (the
 * default): the share file's jobs as they are, each run its iterations
 * once, as a user co-locating real jobs expects.
 *
 * The proxy's turn reports the worker's waits for its peers (the seconds
 * its polls slept, c->idle_s) as not device time (ar_tjob_fns.idle_s):
 * charged to fair, they would hand the co-tenants as much again before
 * the worker's next turn, delaying it and lengthening its peer's waits in
 * turn, a spiral that steady co-tenants never end (iterations of 0.4 1.6
 * 4.6 13 29 s in the architectures study's transformer before). */
#define _GNU_SOURCE
#include "dist_impl.h"

#include "accelrt/tenancy.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef enum {
  SH_WAIT_START = 0, /* added, not admitted yet */
  SH_IDLE,           /* started; no turn granted */
  SH_GO,             /* the runner granted one iteration */
  SH_DONE,           /* the worker ran it (status in it_st) */
  SH_ENDED           /* the runner ended the proxy (finished, failed, stopped) */
} sh_state;

struct ar__share {
  ar__dist *c;
  ar_spec *spec; /* the share file, loaded (outputs redirected) */
  char *out_dir;
  ar_runner *runner;
  pthread_t thread;
  bool thread_running;
  ar_status run_st; /* ar_runner_run's status */
  ar_err run_err;
  size_t proxy;     /* the proxy's job index */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  sh_state state;
  bool finished;    /* the worker ran its last iteration */
  /* The worker keeps its last turn until it closed its model: after the
   * last iteration it still reads its block (worker 0's running
   * statistics to rank 0, the model's teardown), which the runner frees
   * (and, on the host, hands back to the kernel) once the proxy ends. */
  bool holding; /* (only after a last iteration that succeeded) */
  bool runner_done; /* ar_runner_run returned */
  ar_status it_st;
  char why[2 * AR_ERR_MAX + 256]; /* the runner's reason when it ended the proxy */
  double idle0;    /* the worker's c->idle_s when its turn began */
  double step_idle; /* of its last turn: seconds it waited for its peers */
  ar_device *dev;
  void *pers, *eph;          /* the blocks now */
  bool moved;                /* pers/eph changed since the model was made */
};

static void sh_lock(ar__share *s) { pthread_mutex_lock(&s->mu); }
static void sh_unlock(ar__share *s) { pthread_mutex_unlock(&s->mu); }

/* ---- the proxy job (called on the runner's threads) ---- */

static ar_status p_start(void *job, ar_device *dev, void *p, void *e, ar_err *err) {
  (void)err;
  ar__share *s = job;
  sh_lock(s);
  s->dev = dev;
  s->pers = p;
  s->eph = e;
  s->state = SH_IDLE;
  pthread_cond_broadcast(&s->cv);
  sh_unlock(s);
  return AR_OK;
}

static ar_status p_step(void *job, ar_err *err) {
  ar__share *s = job;
  sh_lock(s);
  s->state = SH_GO;
  pthread_cond_broadcast(&s->cv);
  while (s->state == SH_GO)
    pthread_cond_wait(&s->cv, &s->mu);
  ar_status st = s->state == SH_DONE ? s->it_st : AR_INTERRUPTED;
  if (s->state == SH_DONE)
    s->state = SH_IDLE;
  sh_unlock(s);
  if (st != AR_OK)
    ar_errf(err, st, "the distributed iteration failed (the worker's error says why)");
  return st;
}

static bool p_done(void *job) {
  ar__share *s = job;
  sh_lock(s);
  bool f = s->finished;
  sh_unlock(s);
  return f;
}

static void p_rebase(void *job, void *p, void *e) {
  ar__share *s = job;
  sh_lock(s);
  if (p && p != s->pers) {
    s->pers = p;
    s->moved = true;
  }
  if (e && e != s->eph) {
    s->eph = e;
    s->moved = true;
  }
  sh_unlock(s);
}

static ar_status p_finish(void *job, bool interrupted, ar_err *err) {
  (void)interrupted;
  (void)err;
  ar__share *s = job;
  sh_lock(s);
  s->state = SH_ENDED;
  pthread_cond_broadcast(&s->cv);
  sh_unlock(s);
  return AR_OK;
}

static void p_close(void *job) { (void)job; /* the worker owns it */ }

/* The worker's turn waited this long for its peers (parameters, the
 * servers' acceptance): not device time, so fair does not hand the
 * co-tenants as much again before the next turn. */
static double p_idle_s(void *job) {
  ar__share *s = job;
  sh_lock(s);
  double idle = s->step_idle;
  sh_unlock(s);
  return idle;
}

static const ar_tjob_fns proxy_fns = {p_start,  p_step,  p_done, p_rebase,
                                      p_finish, p_close, NULL,   p_idle_s};

/* ---- a steady co-tenant (distributed.share_tenants: steady) ----
 * The runner sees one job with no end of its own: rounds of the engine job
 * (ar_tenancy_open_job's), each a fresh run of the tenant's spec, until
 * the worker finished.  Its functions run where the runner calls a job's. */

/* The runner's iteration count for a steady co-tenant: never reached (the
 * job ends through done()), small enough that no count overflows. */
#define SH_STEADY_ITERATIONS ((uint64_t)1 << 40)

typedef struct steady_job {
  ar__share *s;
  const ar_spec *spec; /* the co-tenant's (s->spec's item) */
  const ar_tjob_fns *fns; /* the engine job's */
  void *inner;            /* this round's engine job; NULL after a failed restart */
  size_t persistent, ephemeral; /* the blocks it was admitted on */
  ar_device *dev;
  void *pers, *eph;
  uint64_t rounds;         /* rounds started */
  uint64_t samples_before; /* samples of the rounds before this one */
} steady_job;

static ar_status st_start(void *job, ar_device *dev, void *p, void *e, ar_err *err) {
  steady_job *t = job;
  t->dev = dev;
  t->pers = p;
  t->eph = e;
  t->rounds = 1;
  return t->fns->start(t->inner, dev, p, e, err);
}

/* Ends the round that ran all its iterations (final evaluation, checkpoint,
 * summary) and starts the next in the same blocks: the same spec plans
 * the same sizes, checked. */
static ar_status st_restart(steady_job *t, ar_err *err) {
  double loss;
  uint64_t n = 0;
  ar_status st = t->fns->finish(t->inner, false, err);
  if (t->fns->progress)
    t->fns->progress(t->inner, &loss, &n);
  t->samples_before += n;
  t->fns->close(t->inner);
  t->inner = NULL;
  AR_CHECK(st);
  ar_tjob_desc d;
  AR_CHECK(ar_tenancy_open_job(t->spec, NULL, &d, err));
  t->inner = d.job;
  if (d.persistent > t->persistent || d.ephemeral > t->ephemeral)
    return ar_errf(err, AR_STATE, "its round %llu planned %zu + %zu bytes, more than the "
                   "%zu + %zu it was admitted on", (unsigned long long)t->rounds + 1,
                   d.persistent, d.ephemeral, t->persistent, t->ephemeral);
  AR_CHECK(t->fns->start(t->inner, t->dev, t->pers, t->eph, err));
  t->rounds++;
  return AR_OK;
}

static ar_status st_step(void *job, ar_err *err) {
  steady_job *t = job;
  if (!t->inner)
    return ar_errf(err, AR_STATE, "its restart failed");
  if (t->fns->done(t->inner))
    AR_CHECK(st_restart(t, err));
  return t->fns->step(t->inner, err);
}

static bool st_done(void *job) { return p_done(((steady_job *)job)->s); }

static void st_rebase(void *job, void *p, void *e) {
  steady_job *t = job;
  if (p)
    t->pers = p;
  if (e)
    t->eph = e;
  if (t->inner)
    t->fns->rebase(t->inner, p, e);
}

/* The worker finished (or the run stopped): the round ends where it is,
 * as interrupted unless it had just run its last iteration. */
static ar_status st_finish(void *job, bool interrupted, ar_err *err) {
  steady_job *t = job;
  if (!t->inner)
    return AR_OK;
  return t->fns->finish(t->inner, interrupted || !t->fns->done(t->inner), err);
}

static void st_close(void *job) {
  steady_job *t = job;
  if (t->inner)
    t->fns->close(t->inner);
  ar_free(t);
}

static void st_progress(void *job, double *loss, uint64_t *samples) {
  steady_job *t = job;
  uint64_t n = 0;
  *loss = NAN;
  if (t->inner && t->fns->progress)
    t->fns->progress(t->inner, loss, &n);
  *samples = t->samples_before + n;
}

static double st_idle_s(void *job) {
  steady_job *t = job;
  return t->inner && t->fns->idle_s ? t->fns->idle_s(t->inner) : 0.0;
}

static const ar_tjob_fns steady_fns = {st_start,  st_step,  st_done,     st_rebase,
                                       st_finish, st_close, st_progress, st_idle_s};

/* Wraps the engine job d describes (d->job, d->fns) into a steady one. */
static ar_status steady_wrap(ar__share *s, const ar_spec *spec, ar_tjob_desc *d) {
  steady_job *t = ar_calloc(1, sizeof *t);
  if (!t)
    return AR_NOMEM;
  t->s = s;
  t->spec = spec;
  t->fns = d->fns;
  t->inner = d->job;
  t->persistent = d->persistent;
  t->ephemeral = d->ephemeral;
  d->job = t;
  d->fns = &steady_fns;
  d->iterations = SH_STEADY_ITERATIONS;
  return AR_OK;
}

/* The runner's events (scheduler thread, runner lock held): the proxy
 * ended without the worker (it could not fit, the run stopped). */
static void on_event(void *ctx, size_t job, const ar_tjob_result *r) {
  ar__share *s = ctx;
  if (job != s->proxy || !ar_tjob_ended(r->state))
    return;
  sh_lock(s);
  if (s->state != SH_ENDED) {
    s->state = SH_ENDED;
    snprintf(s->why, sizeof s->why, "%s%s%s", ar_tjob_state_name(r->state),
             r->error[0] ? ": " : "", r->error[0] ? r->error : r->reason);
  }
  pthread_cond_broadcast(&s->cv);
  sh_unlock(s);
}

static void *run_thread(void *arg) {
  ar__share *s = arg;
  ar_status st = ar_runner_run(s->runner, &s->run_err);
  sh_lock(s);
  s->run_st = st;
  s->runner_done = true;
  if (s->state != SH_ENDED && s->state != SH_DONE)
    s->state = SH_ENDED;
  pthread_cond_broadcast(&s->cv);
  sh_unlock(s);
  return NULL;
}

/* ---- the worker's side (main thread) ---- */

/* Waits (s->mu held) until pred holds, checking
 * every 50 ms that no other rank failed and no signal came (the wait for
 * one's turn is not a dead peer: progressed = true). */
static ar_status wait_until(ar__share *s, bool (*pred)(const ar__share *), const char *what) {
  while (!pred(s)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    int rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    if (rc == ETIMEDOUT && !pred(s)) {
      sh_unlock(s);
      ar_status st = ar__dist_poll(s->c, true, -1, what);
      sh_lock(s);
      if (st != AR_OK)
        return st;
    }
  }
  return AR_OK;
}

static bool started_or_ended(const ar__share *s) {
  return s->state != SH_WAIT_START;
}
static bool go_or_ended(const ar__share *s) {
  return s->state == SH_GO || s->state == SH_ENDED;
}

static ar_status ended_error(ar__share *s, const char *when) {
  ar__dist *c = s->c;
  if (s->runner_done && s->run_st != AR_OK)
    return ar_errf(c->err, s->run_st, "worker %d: the lanes runner of distributed.share "
                   "stopped %s: %s", c->widx, when, s->run_err.msg);
  return ar_errf(c->err, AR_STATE, "worker %d: its tenant in the shared device's lanes ended "
                 "%s (%s); see %s/summary.json", c->widx, when,
                 s->why[0] ? s->why : "no reason given", s->out_dir);
}

/* Loads the share file and points each of its jobs' outputs into
 * OUT/share/worker<i>/. */
static ar_status load_share_file(ar__share *s) {
  ar__dist *c = s->c;
  const char *path = c->spec->distributed.share_file;
  ar_diags diags = {0, NULL};
  ar_status st = ar_spec_load(path, NULL, 0, &s->spec, &diags);
  if (st != AR_OK) {
    const ar_diag *d = diags.count > 0 ? &diags.items[0] : NULL;
    if (d && d->line > 0)
      ar_errf(c->err, st, "distributed.share: %s:%d:%d: %s%s%s", path, d->line, d->col,
              d->path ? d->path : "", d->path ? ": " : "", d->message);
    else if (d)
      ar_errf(c->err, st, "distributed.share: %s: %s (a path in the job file is relative to "
              "its folder, one given with --set to the working directory)", path, d->message);
    else
      ar_errf(c->err, st, "distributed.share: cannot load %s: check the path (relative to the "
              "job file's folder)", path);
    ar_diags_fini(&diags);
    return st;
  }
  ar_diags_fini(&diags);
  if (s->spec->n_jobs <= 0)
    return ar_errf(c->err, AR_SPEC, "distributed.share: %s has no `jobs:` list; it names the "
                   "jobs that share each worker's device", path);
  size_t n = strlen(c->spec->output.dir) + 48;
  s->out_dir = ar_malloc(n);
  if (!s->out_dir)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  snprintf(s->out_dir, n, "%s/share/worker%d", c->spec->output.dir, c->widx);
  AR_CHECK(ar_mkdirs(s->out_dir, c->err));
  for (int i = 0; i < s->spec->n_jobs; i++) {
    ar_spec *j = s->spec->jobs[i];
    char *dir = ar_path_join(s->out_dir, j->name);
    if (!dir)
      return ar_errf(c->err, AR_NOMEM, "out of memory");
    ar_free(j->output.dir);
    j->output.dir = dir;
  }
  return AR_OK;
}

ar_status ar__share_open(ar__dist *c, int threads, size_t persistent, size_t ephemeral) {
  ar__share *s = ar_calloc(1, sizeof *s);
  if (!s)
    return ar_errf(c->err, AR_NOMEM, "out of memory");
  c->share = s;
  s->c = c;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  AR_CHECK(load_share_file(s));
  const ar_spec *sp = s->spec;
  ar_runner_opts ro = AR_RUNNER_OPTS_INIT;
  ro.policy = ar_policy_name(sp->runtime.policy);
  ro.device = c->dev_name; /* a GPU worker shares its GPU */
  ro.device_opts = ar_job_device_opts(sp);
  ro.threads = threads;
  ro.out_dir = s->out_dir;
  ro.on_event = on_event;
  ro.ctx = s;
  AR_CHECK(ar_runner_create(&ro, &s->runner, c->err));
  /* The worker first (arrival 0, added first), then the co-tenants at
   * their arrival times. */
  char name[64];
  snprintf(name, sizeof name, "%s.worker%d", c->spec->name, c->widx);
  ar_tjob_desc d;
  memset(&d, 0, sizeof d);
  d.name = name;
  d.out_dir = NULL;
  d.persistent = persistent;
  d.ephemeral = ephemeral;
  d.iterations = (uint64_t)(c->total > 0 ? c->total : 1);
  d.max_threads = threads;
  d.job = s;
  d.fns = &proxy_fns;
  AR_CHECK(ar_runner_add(s->runner, &d, &s->proxy, c->err));
  for (int i = 0; i < sp->n_jobs; i++) {
    ar_tjob_desc jd;
    ar_err je = AR_ERR_INIT;
    ar_status os = ar_tenancy_open_job(sp->jobs[i], NULL, &jd, &je);
    if (os != AR_OK)
      return ar_errf(c->err, os, "distributed.share: job '%s' of %s: %s", sp->jobs[i]->name,
                     c->spec->distributed.share_file, je.msg);
    if (c->spec->distributed.share_tenants == AR_SHARE_STEADY &&
        steady_wrap(s, sp->jobs[i], &jd) != AR_OK) {
      jd.fns->close(jd.job);
      return ar_errf(c->err, AR_NOMEM, "out of memory");
    }
    if (ar_runner_add(s->runner, &jd, NULL, &je) != AR_OK) {
      jd.fns->close(jd.job);
      return ar_errf(c->err, AR_NOMEM, "%s", je.msg);
    }
  }
  if (pthread_create(&s->thread, NULL, run_thread, s) != 0)
    return ar_errf(c->err, AR_NOMEM, "cannot start the lanes runner's thread");
  s->thread_running = true;
  sh_lock(s);
  ar_status st = wait_until(s, started_or_ended, "admission into the shared device's lanes");
  if (st == AR_OK && s->state == SH_ENDED)
    st = ended_error(s, "before it was admitted");
  sh_unlock(s);
  return st;
}

void ar__share_blocks(const ar__dist *c, ar_device **dev, void **pers, void **eph) {
  ar__share *s = c->share;
  sh_lock(s);
  *dev = s->dev;
  *pers = s->pers;
  *eph = s->eph;
  s->moved = false;
  sh_unlock(s);
}

ar_status ar__share_begin(ar__dist *c) {
  ar__share *s = c->share;
  sh_lock(s);
  ar_status st = wait_until(s, go_or_ended, "this worker's turn on the shared device");
  if (st == AR_OK && s->state == SH_ENDED)
    st = ended_error(s, "while the job ran");
  bool moved = st == AR_OK && s->moved;
  void *p = s->pers, *e = s->eph;
  s->moved = false;
  s->idle0 = c->idle_s; /* the wait for the turn itself is not the step's */
  sh_unlock(s);
  if (moved)
    ar__dist_rebind(c, p, e);
  return st;
}

void ar__share_end(ar__dist *c, ar_status st, bool last) {
  ar__share *s = c->share;
  sh_lock(s);
  if (last)
    s->finished = true;
  if (s->state == SH_GO && last && st == AR_OK) {
    s->holding = true; /* ends in ar__share_close */
  } else if (s->state == SH_GO) {
    s->it_st = st;
    s->step_idle = c->idle_s - s->idle0;
    s->state = SH_DONE;
  }
  pthread_cond_broadcast(&s->cv);
  sh_unlock(s);
}

void ar__share_close(ar__dist *c, bool failed) {
  ar__share *s = c->share;
  if (!s)
    return;
  if (s->thread_running) {
    sh_lock(s);
    if (!s->finished || failed) {
      /* Let a granted turn return, then stop the runner: the co-tenants
       * write their checkpoints. */
      s->finished = true;
      if (s->state == SH_GO) {
        s->it_st = AR_INTERRUPTED;
        s->state = SH_DONE;
      }
      pthread_cond_broadcast(&s->cv);
      sh_unlock(s);
      ar_runner_stop(s->runner);
    } else {
      if (s->holding && s->state == SH_GO) { /* the last turn ends now */
        s->it_st = AR_OK;
        s->step_idle = c->idle_s - s->idle0;
        s->state = SH_DONE;
        pthread_cond_broadcast(&s->cv);
      }
      sh_unlock(s);
    }
    /* Co-tenants run once run to their end; steady ones stop at their
     * next iteration. */
    pthread_join(s->thread, NULL);
  }
  ar_runner_destroy(s->runner);
  ar_spec_destroy(s->spec);
  ar_free(s->out_dir);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  ar_free(s);
  c->share = NULL;
}
