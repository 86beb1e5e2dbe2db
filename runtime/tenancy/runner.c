/*
 * The multi-job runner: many jobs on one device through lanes (Salus, Yu &
 * Chowdhury, MLSys 2020).
 *
 * One arena allocation holds every byte the jobs use on the device; the
 * lanes library (lanes/) hands out its offsets: each admitted job's
 * persistent block and, per lane, the ephemeral range its jobs' iterations
 * use in turn (Salus §3, memory model and lanes).  The scheduler thread
 * admits arriving jobs, asks the policy which job runs the next iteration
 * in each free lane (iteration-granularity scheduling, Salus §4) and hands
 * the iteration to a worker thread, so lanes run concurrently.
 *
 * Devices: the runner opens the device once (runtime.memory sizes a CUDA
 * device's arena at open) and carves every job's blocks from ONE
 * ar_device_alloc of the lanes' capacity, so no job allocates device
 * memory of its own.  Iterations run on lane handles.  On a backend with
 * queues (CUDA) they are a fixed pool of ar_device_open_lane handles, one
 * per concurrent iteration, each with its own stream and cuBLAS handle,
 * opened before the capacity is measured so their cuBLAS workspaces come
 * out of the arena first.  On the host each live lane gets a host device
 * of its own (one per worker made at create, more opened as lanes need
 * them, reused when a lane ends) whose thread count is set to the lane's
 * share of the cores before every iteration.  A lane is bound to a handle
 * when it first runs (one no live lane holds, if any), and a job runs every
 * iteration on the handle it started on, which the engine's ar_job keeps
 * (a job keeps its lane for life in lanes/, so that is its lane's handle).
 * The scheduler never runs two iterations on one handle at once (a handle
 * serves one thread at a time); with more live lanes than CUDA handles
 * some lanes share one and take turns.  Memory a handle's queue may still
 * touch is synchronised before it changes hands: a job's handle when the
 * job leaves (its block and lane go back to the lanes), every handle
 * before a defragmentation moves blocks, and the copying handle after.
 *
 * A job that fails (an error, a NaN loss) ends alone: its lane and block
 * are reclaimed and the others keep running.  When a job leaves a hole and
 * another waits, the scheduler lets the running iterations end, compacts
 * the persistent blocks (copying their bytes) and re-packs the lanes
 * (Salus §3.3 describes this defragmentation; its code never had it).
 * On the host the arena's free pages go back to the kernel when a job
 * leaves and after each defragmentation (discard_free).
 *
 * Records: per job queueing time, JCT, iterations, switch latency (end of
 * one job's iteration to the start of another job's iteration in the same
 * lane); per device memory by region and lanes over time, busy fraction;
 * in out_dir/metrics.jsonl, out_dir/trace.json (Chrome trace format, one
 * track per lane) and out_dir/summary.json.
 */
#define _GNU_SOURCE
#include "tenancy_impl.h"

#include "accelrt/runtime.h"
#include "accelrt/trace.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* The trace is kept in memory and written at the end; past this size
 * iteration events are dropped (a long-lived service), counted in the
 * summary. */
#define TRACE_MAX_BYTES ((size_t)64 << 20)
/* Switch latencies kept for the quantiles (the first ones). */
#define SWITCH_KEEP 1000000

typedef struct tjob {
  ar_tjob_desc d;
  char *name, *out_dir; /* owned copies */
  ar_lanes_job_id lid;  /* 0 before arrival */
  ar_tjob_result res;
  bool started, running, cancel_req, closed;
  bool waited; /* was not admitted on arrival (counted once) */
  int slot; /* the lane handle it started on (runner's slots); -1 before */
  void *pers, *eph;
  double *sw; /* (nsw) switch latencies, seconds */
  size_t nsw, capsw;
  /* Its pace (ar_tjob_progress): two marks of (runner clock, iterations,
   * samples), the older one 5 to 10 s back once the job ran that long. */
  struct pace_mark {
    double t;
    uint64_t it, samples;
  } mark[2];
  double last_report; /* runner clock of the last on_progress */
  /* The samples fns->progress reported after the job's last step (at its
   * start, before the first), so a step's samples are the difference: one
   * progress call a step.  Touched only by the worker that holds the job. */
  uint64_t samples_seen;
} tjob;

/* A lane handle.  Its struct never moves (workers keep a pointer to it
 * while the scheduler grows the table). */
typedef struct slot {
  ar_device *dev; /* NULL until its first iteration opens it (host) */
  bool owned;     /* false: the runner's device itself */
  bool busy;      /* an iteration runs on it */
} slot;

typedef enum { W_IDLE = 0, W_BUSY, W_DONE, W_EXIT } wstate;

typedef struct worker {
  ar_runner *r;
  pthread_t th;
  bool th_ok;
  pthread_cond_t cv;
  wstate state;
  /* the task */
  size_t job;
  ar_lanes_lane_id lane;
  int slot;     /* the lane handle the iteration runs on */
  slot *slotp;  /* r->slots[slot], stable while the table grows */
  int threads;
  void *pers, *eph;
  /* its outcome */
  ar_status st;
  ar_err err;
  bool stepped, ended, started_now;
  bool reported;     /* loss and samples below came from fns->progress */
  double loss;
  uint64_t samples;  /* the job's samples so far */
  uint64_t stepped_samples; /* trained by this step (ar_runner_stats) */
  double t_setup, t_start, t_end, t_fin; /* start began, step began/ended,
                                            finish ended */
  double idle;       /* of the step, waits the job reported (fns->idle_s) */
} worker;

typedef struct lane_rec {
  ar_lanes_lane_id id;
  int slot; /* its lane handle; -1 until it first runs */
  bool named, has_last;
  size_t last_job;
  double last_end;
  uint64_t last_dispatch;
} lane_rec;

struct ar_runner {
  ar_runner_opts o;
  char *policy, *device_name, *out_dir, *trace_path;
  const ar_fs *fs; /* borrowed: opens out_dir's files */
  ar_device *dev;  /* the one device opened by name; owns the arena */
  void *arena_raw; /* the one ar_device_alloc every block is carved from */
  size_t arena_raw_bytes;
  unsigned char *arena; /* 256-byte aligned base */
  size_t capacity;      /* the lanes' bytes from arena */
  ar_lanes *lanes;
  int threads, nworkers;
  bool host;
  slot **slots; /* (nslots) lane handles */
  int nslots, capslots;
  bool grow_slots; /* host: a new handle for a lane when none is free */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  tjob **jobs;
  size_t njobs, capjobs;
  size_t *by_lid; /* (nlid) lanes job id - 1 -> index */
  size_t nlid, caplid;
  worker *workers;
  lane_rec *lrec;
  size_t nlrec, caplrec;

  double t0;
  bool clock_started, stop, draining, departed;
  int nrunning;
  double busy_since, busy_total;
  uint64_t dispatch_seq, defrags, moved;
  size_t max_mem;
  ar_lanes_usage last_usage;
  size_t last_lanes;
  double *sw_all;
  size_t nsw_all, capsw_all;
  uint64_t switches;
  /* For ar_runner_stats: totals since the run started. */
  uint64_t iterations_total, samples_total, admission_waits;
  uint64_t sw_hist[AR_RUNNER_SWITCH_BOUNDS + 1]; /* per bucket, not cumulative */
  double sw_sum;
  ar_sbuf trace;
  uint64_t trace_dropped;
  FILE *metrics;
  ar_runner_summary sum;
  char sum_policy[32];
};

static double clock_now(ar_runner *r) {
  return r->clock_started ? ar_now() - r->t0 : 0.0;
}

double ar_runner_now(ar_runner *r) {
  pthread_mutex_lock(&r->mu);
  double t = clock_now(r);
  pthread_mutex_unlock(&r->mu);
  return t;
}

/* ---- lifecycle ----------------------------------------------------------- */

/* The handle iterations of slot i run on (NULL: not opened yet). */
static ar_device *slot_dev(ar_runner *r, int i) { return r->slots[i]->dev; }

/* Appends a lane handle (dev may be NULL: opened at its first iteration).
 * Returns its index, or -1 when out of memory. */
static int add_slot(ar_runner *r, ar_device *dev, bool owned) {
  if (r->nslots == r->capslots) {
    int cap = r->capslots ? 2 * r->capslots : 8;
    slot **n = ar_realloc(r->slots, (size_t)cap * sizeof *n);
    if (!n)
      return -1;
    r->slots = n;
    r->capslots = cap;
  }
  slot *sl = ar_calloc(1, sizeof *sl);
  if (!sl)
    return -1;
  sl->dev = dev;
  sl->owned = owned;
  r->slots[r->nslots] = sl;
  return r->nslots++;
}

ar_status ar__host_lanes_capacity(const ar_device_opts *o, size_t *out, char *source,
                                  size_t source_len, ar_err *err) {
  ar_host_memory hm;
  ar_host_memory_get(&hm);
  char a[32], b[32];
  if (o->memory_bytes > 0) {
    if (hm.limit > 0 && o->memory_bytes > hm.limit)
      return ar_errf(err, AR_RANGE,
                     "runtime.memory of %s exceeds the %s this host can give (%s); lower "
                     "runtime.memory or give a fraction such as 90%%",
                     ar_lanes_fmt_bytes((size_t)o->memory_bytes, a, sizeof a),
                     ar_lanes_fmt_bytes((size_t)hm.limit, b, sizeof b), hm.source);
    *out = (size_t)o->memory_bytes;
    if (source)
      snprintf(source, source_len, "runtime.memory");
    return AR_OK;
  }
  size_t avail = hm.limit > SIZE_MAX ? SIZE_MAX : (size_t)hm.limit;
  if (avail == 0)
    return ar_errf(err, AR_UNSUPPORTED,
                   "cannot read the host's available memory (/proc/meminfo) or a cgroup "
                   "limit; give runtime.memory in bytes (e.g. memory: 8GiB)");
  double f = o->memory_fraction > 0 ? o->memory_fraction : 1.0;
  if (!(f <= 1.0))
    return ar_errf(err, AR_RANGE,
                   "runtime.memory fraction %g is not in (0, 1]; give a percentage such "
                   "as 50%% or a size in bytes",
                   f);
  *out = (size_t)((double)avail * f);
  if (source)
    snprintf(source, source_len, "%.0f%% of %s", f * 100.0, hm.source);
  return AR_OK;
}

/* The lanes' capacity on a device with an arena (CUDA): what is left of
 * it once the lane handles took their workspaces, or opts->capacity when
 * that fits. */
static ar_status arena_capacity(ar_runner *r, size_t want, size_t *out, ar_err *err) {
  ar_device_mem mi;
  ar_status st = ar_device_mem_info(r->dev, &mi);
  char why[AR_ERR_MAX];
  if (st != AR_OK)
    snprintf(why, sizeof why, "%s", ar_device_errmsg(r->dev));
  else if (mi.capacity == 0) {
    st = AR_UNSUPPORTED;
    snprintf(why, sizeof why, "device %s keeps no arena", r->device_name);
  }
  if (st != AR_OK) {
    if (r->o.device_opts.memory_bytes > 0) { /* no arena to measure */
      *out = want ? want : (size_t)r->o.device_opts.memory_bytes;
      return AR_OK;
    }
    return ar_errf(err, st, "cannot size the lanes on %s (%s); give runtime.memory in bytes",
                   r->device_name, why);
  }
  char a[32], b[32];
  if (want > mi.available)
    return ar_errf(err, AR_NOMEM,
                   "the lanes need %s but the arena of %s has %s left after %d lane "
                   "handles; raise runtime.memory",
                   ar_lanes_fmt_bytes(want, a, sizeof a), r->device_name,
                   ar_lanes_fmt_bytes(mi.available, b, sizeof b), r->nslots);
  *out = want ? want : (size_t)mi.available;
  ar_log(AR_LOG_INFO,
         "lanes on %s: %s of the arena's %s (the rest: the cuBLAS workspaces of the "
         "device and its %d lane handles)",
         r->device_name, ar_lanes_fmt_bytes(*out, a, sizeof a),
         ar_lanes_fmt_bytes(mi.capacity, b, sizeof b), r->nslots);
  return AR_OK;
}

/* The lane handles made at create (see the top of this file): on the host
 * one per worker to begin with (opening a host device loads the machine's
 * topology, tens of milliseconds), more as lanes need them; on a device
 * with queues a fixed pool, made now because each takes its cuBLAS
 * workspace from the arena the lanes get the rest of. */
static ar_status open_slots(ar_runner *r, ar_err *err) {
  int n = r->o.max_lane_handles > 0 ? r->o.max_lane_handles : r->nworkers;
  if (!r->host && !ar_device_has_lanes(r->dev)) {
    /* Neither queues nor host threads: every iteration on the device
     * handle, one at a time. */
    r->nworkers = 1;
    if (add_slot(r, r->dev, false) < 0)
      return ar_errf(err, AR_NOMEM, "out of memory");
    return AR_OK;
  }
  if (r->host && n > r->nworkers)
    n = r->nworkers;
  r->grow_slots = r->host && r->o.max_lane_handles == 0;
  int share = r->threads / r->nworkers;
  for (int i = 0; i < n; i++) {
    ar_device *d = NULL;
    ar_status st;
    if (r->host) {
      ar_device_opts o = AR_DEVICE_OPTS_INIT;
      o.threads = share > 0 ? share : 1;
      o.pin = false; /* lanes share the cores; pinning would stack them */
      st = ar_device_open("host", &o, &d, err);
    } else {
      st = ar_device_open_lane(r->dev, &d);
      if (st != AR_OK)
        st = ar_errf(err, st, "opening lane handle %d of %d on %s: %s", i + 1, n,
                     r->device_name, ar_device_errmsg(r->dev));
    }
    if (st != AR_OK)
      return st;
    if (add_slot(r, d, true) < 0) {
      ar_device_close(d);
      return ar_errf(err, AR_NOMEM, "out of memory");
    }
  }
  return AR_OK;
}

/* The lanes' capacity (r->capacity), then the one allocation it is
 * carved from (r->arena, 256-byte aligned). */
static ar_status reserve_arena(ar_runner *r, const ar_runner_opts *opts, ar_err *err) {
  size_t cap = opts->capacity;
  if (r->host) {
    if (cap == 0)
      AR_CHECK(ar__host_lanes_capacity(&opts->device_opts, &cap, NULL, 0, err));
  } else {
    AR_CHECK(arena_capacity(r, cap, &cap, err));
  }
  cap &= ~(size_t)255;
  if (cap == 0)
    return ar_errf(err, AR_INVALID,
                   "runner: a memory capacity under 256 bytes holds no job; set "
                   "runtime.memory (e.g. 2GiB or 50%%)");
  /* Host memory is only 64-byte aligned: 256 more bytes to align the base
   * to the lanes' 256.  An arena's blocks are 256-byte aligned already. */
  r->arena_raw_bytes = cap + (r->host ? 256 : 0);
  ar_status st = ar_device_alloc(r->dev, r->arena_raw_bytes, &r->arena_raw);
  if (st != AR_OK) {
    char b[32];
    r->arena_raw = NULL;
    return ar_errf(err, st,
                   "cannot reserve the %s of runtime.memory on %s (%s); lower "
                   "runtime.memory",
                   ar_lanes_fmt_bytes(cap, b, sizeof b), r->device_name,
                   ar_device_errmsg(r->dev));
  }
  r->arena = (unsigned char *)(((uintptr_t)r->arena_raw + 255) & ~(uintptr_t)255);
  size_t lost = (size_t)(r->arena - (unsigned char *)r->arena_raw);
  r->capacity = r->arena_raw_bytes - lost < cap ? (r->arena_raw_bytes - lost) & ~(size_t)255
                                                : cap;
  return AR_OK;
}

ar_status ar_runner_create(const ar_runner_opts *opts, ar_runner **out,
                            ar_err *err) {
  if (!opts || !out || !opts->policy || !opts->device)
    return ar_errf(err, AR_INVALID, "runner: options, policy and device are required");
  ar_runner *r = ar_calloc(1, sizeof *r);
  if (!r)
    return ar_errf(err, AR_NOMEM, "out of memory");
  r->o = *opts;
  r->policy = ar_strdup(opts->policy);
  r->out_dir = opts->out_dir ? ar_strdup(opts->out_dir) : NULL;
  r->fs = opts->fs;
  r->trace_path = opts->trace_path ? ar_strdup(opts->trace_path) : NULL;
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  ar_status st = AR_OK;
  if (!r->policy || (opts->out_dir && !r->out_dir) ||
      (opts->trace_path && !r->trace_path)) {
    st = ar_errf(err, AR_NOMEM, "out of memory");
    goto fail;
  }

  /* The device, once: a CUDA device reserves its arena here. */
  ar_device_opts dopts = opts->device_opts;
  dopts.pin = false; /* the scheduler thread issues only copies */
  st = ar_device_open(opts->device, &dopts, &r->dev, err);
  if (st != AR_OK)
    goto fail;
  r->host = strcmp(ar_device_name(r->dev), "host") == 0;
  char name[32];
  if (r->host)
    snprintf(name, sizeof name, "host");
  else
    snprintf(name, sizeof name, "%s:%d", ar_device_name(r->dev), ar_device_index(r->dev));
  r->device_name = ar_strdup(name);
  if (!r->device_name) {
    st = ar_errf(err, AR_NOMEM, "out of memory");
    goto fail;
  }
  ar_host_cpus cpus;
  ar_host_cpus_get(&cpus);
  r->threads = ar_host_cpus_cap(&cpus, opts->threads);
  if (r->threads < 1)
    r->threads = 1;
  r->nworkers = opts->max_concurrent > 0 ? opts->max_concurrent
                : r->host                ? r->threads
                                         : 8;
  st = open_slots(r, err);
  if (st != AR_OK)
    goto fail;

  st = reserve_arena(r, opts, err);
  if (st != AR_OK)
    goto fail;

  ar_lanes_opts lo = AR_LANES_OPTS_INIT;
  lo.capacity = r->capacity;
  lo.policy = opts->policy;
  /* A job's iteration time is unknown until it ran one: assume it tiny, so
   * srtf runs a newcomer's first iteration soon and measures it (Salus
   * used the times its clients declared). */
  lo.default_iteration_s = 1e-6;
  st = ar_lanes_create(&lo, &r->lanes, err);
  if (st != AR_OK)
    goto fail;
  r->workers = ar_calloc((size_t)r->nworkers, sizeof *r->workers);
  if (!r->workers) {
    st = ar_errf(err, AR_NOMEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < r->nworkers; i++) {
    r->workers[i].r = r;
    pthread_cond_init(&r->workers[i].cv, NULL);
  }
  *out = r;
  return AR_OK;
fail:
  ar_runner_destroy(r);
  return st;
}

size_t ar_runner_capacity(const ar_runner *r) { return r->capacity; }
const char *ar_runner_device_name(const ar_runner *r) { return r->device_name; }

ar_device *ar_runner_device(ar_runner *r, int *lane_handles) {
  if (lane_handles)
    *lane_handles = r->nslots;
  return r->dev;
}

ar_device *ar_runner_lane_handle(ar_runner *r, int i) {
  return i >= 0 && i < r->nslots ? slot_dev(r, i) : NULL;
}

static void job_free(ar_runner *r, tjob *j) {
  (void)r;
  if (!j)
    return;
  if (!j->closed && j->d.fns && j->d.fns->close)
    j->d.fns->close(j->d.job);
  ar_free(j->name);
  ar_free(j->out_dir);
  ar_free(j->sw);
  ar_free(j);
}

void ar_runner_destroy(ar_runner *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->njobs; i++)
    job_free(r, r->jobs[i]);
  ar_free(r->jobs);
  ar_free(r->by_lid);
  if (r->workers) {
    for (int i = 0; i < r->nworkers; i++)
      pthread_cond_destroy(&r->workers[i].cv);
    ar_free(r->workers);
  }
  ar_free(r->lrec);
  ar_free(r->sw_all);
  ar_sbuf_fini(&r->trace);
  if (r->metrics)
    fclose(r->metrics);
  /* Jobs are closed above, so no queue touches the arena any more; lane
   * handles go before the device (the arena goes with the last handle). */
  for (int i = 0; i < r->nslots; i++) {
    if (r->slots[i]->owned)
      ar_device_close(r->slots[i]->dev);
    ar_free(r->slots[i]);
  }
  ar_free(r->slots);
  if (r->arena_raw)
    ar_device_free(r->dev, r->arena_raw, r->arena_raw_bytes);
  ar_device_close(r->dev);
  ar_lanes_destroy(r->lanes);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  ar_free(r->policy);
  ar_free(r->device_name);
  ar_free(r->out_dir);
  ar_free(r->trace_path);
  ar_free(r);
}

/* ---- jobs from any thread -------------------------------------------------- */

static void result_init(ar_tjob_result *res) {
  memset(res, 0, sizeof *res);
  res->arrival_s = res->admit_s = res->first_s = res->end_s = -1;
}

ar_status ar_runner_add(ar_runner *r, const ar_tjob_desc *d, size_t *index,
                         ar_err *err) {
  if (!d || !d->fns || !d->fns->start || !d->fns->step || !d->fns->done ||
      !d->fns->rebase || !d->fns->finish || !d->fns->close)
    return ar_errf(err, AR_INVALID, "runner: a job needs its whole table of functions");
  if (d->iterations == 0)
    return ar_errf(err, AR_INVALID, "job '%s' has no iterations left to run",
                   d->name ? d->name : "?");
  tjob *j = ar_calloc(1, sizeof *j);
  if (!j)
    return ar_errf(err, AR_NOMEM, "out of memory");
  j->d = *d;
  j->name = ar_strdup(d->name ? d->name : "job");
  j->out_dir = d->out_dir ? ar_strdup(d->out_dir) : NULL;
  if (!j->name || (d->out_dir && !j->out_dir)) {
    ar_free(j->name);
    ar_free(j->out_dir);
    ar_free(j);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  j->d.name = j->name;
  j->d.out_dir = j->out_dir;
  j->slot = -1;
  result_init(&j->res);
  j->res.state = AR_TJ_PENDING;
  ar_tjob_progress *pg = &j->res.progress;
  pg->iteration = d->iterations_before;
  pg->iterations = d->iterations_before + d->iterations;
  pg->loss = pg->samples_per_s = pg->eta_s = NAN;
  pthread_mutex_lock(&r->mu);
  if (r->njobs == r->capjobs) {
    size_t cap = r->capjobs ? 2 * r->capjobs : 16;
    tjob **nj = ar_realloc(r->jobs, cap * sizeof *nj);
    if (!nj) {
      pthread_mutex_unlock(&r->mu);
      ar_free(j->name);
      ar_free(j->out_dir);
      ar_free(j);
      return ar_errf(err, AR_NOMEM, "out of memory");
    }
    r->jobs = nj;
    r->capjobs = cap;
  }
  if (index)
    *index = r->njobs;
  r->jobs[r->njobs++] = j;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return AR_OK;
}

ar_status ar_runner_cancel(ar_runner *r, size_t index) {
  pthread_mutex_lock(&r->mu);
  ar_status st = AR_OK;
  if (index >= r->njobs)
    st = AR_NOTFOUND;
  else if (ar_tjob_ended(r->jobs[index]->res.state))
    st = AR_STATE;
  else {
    r->jobs[index]->cancel_req = true;
    pthread_cond_signal(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  return st;
}

void ar_runner_stop(ar_runner *r) {
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

size_t ar_runner_count(ar_runner *r) {
  pthread_mutex_lock(&r->mu);
  size_t n = r->njobs;
  pthread_mutex_unlock(&r->mu);
  return n;
}

ar_status ar_runner_result(ar_runner *r, size_t index, ar_tjob_result *out) {
  pthread_mutex_lock(&r->mu);
  ar_status st = AR_NOTFOUND;
  if (index < r->njobs) {
    *out = r->jobs[index]->res;
    st = AR_OK;
  }
  pthread_mutex_unlock(&r->mu);
  return st;
}

ar_status ar_runner_progress(ar_runner *r, size_t index, ar_tjob_progress *out) {
  ar_tjob_result res;
  AR_CHECK(ar_runner_result(r, index, &res));
  *out = res.progress;
  return AR_OK;
}

void ar_runner_summary_get(ar_runner *r, ar_runner_summary *out) {
  pthread_mutex_lock(&r->mu);
  *out = r->sum;
  pthread_mutex_unlock(&r->mu);
}

/* ---- records --------------------------------------------------------------- */

static double us(double s) { return s * 1e6; }

static void metrics_line(ar_runner *r, const char *text) {
  if (r->metrics && text) {
    fputs(text, r->metrics);
    fputc('\n', r->metrics);
    fflush(r->metrics);
  }
}

static bool trace_room(ar_runner *r) {
  if (r->trace.len < TRACE_MAX_BYTES)
    return true;
  r->trace_dropped++;
  return false;
}

static lane_rec *lane_rec_get(ar_runner *r, ar_lanes_lane_id id) {
  for (size_t i = 0; i < r->nlrec; i++)
    if (r->lrec[i].id == id)
      return &r->lrec[i];
  if (r->nlrec == r->caplrec) {
    size_t cap = r->caplrec ? 2 * r->caplrec : 16;
    lane_rec *n = ar_realloc(r->lrec, cap * sizeof *n);
    if (!n)
      return NULL;
    r->lrec = n;
    r->caplrec = cap;
  }
  lane_rec *l = &r->lrec[r->nlrec++];
  memset(l, 0, sizeof *l);
  l->id = id;
  l->slot = -1;
  return l;
}

/* Memory by region and the lanes, when they changed. */
static void sample_memory(ar_runner *r, const char *why) {
  ar_lanes_usage u;
  ar_lanes_usage_get(r->lanes, &u);
  size_t nl = ar_lanes_lane_count(r->lanes);
  if (u.persistent_bytes == r->last_usage.persistent_bytes &&
      u.lane_bytes == r->last_usage.lane_bytes && u.admitted == r->last_usage.admitted &&
      u.queued == r->last_usage.queued && nl == r->last_lanes && strcmp(why, "start") != 0)
    return;
  r->last_usage = u;
  r->last_lanes = nl;
  size_t used = u.persistent_bytes + u.lane_bytes;
  if (used > r->max_mem)
    r->max_mem = used;
  double t = clock_now(r);
  ar_sbuf b = {0};
  ar_sbuf_printf(&b,
                "{\"event\": \"memory\", \"t_s\": %.6f, \"why\": \"%s\", "
                "\"persistent_bytes\": %zu, \"lane_bytes\": %zu, \"free_bytes\": %zu, "
                "\"capacity_bytes\": %zu, \"lanes\": %zu, \"admitted\": %zu, "
                "\"queued\": %zu, \"lane_sizes\": [",
                t, why, u.persistent_bytes, u.lane_bytes, u.capacity - used, u.capacity, nl,
                u.admitted, u.queued);
  for (size_t k = 0; k < nl; k++) {
    ar_lanes_lane_info li;
    if (ar_lanes_lane_at(r->lanes, k, &li) == AR_OK)
      ar_sbuf_printf(&b, "%s{\"lane\": %u, \"offset\": %zu, \"bytes\": %zu, \"jobs\": %zu}",
                    k ? ", " : "", (unsigned)li.id, li.offset, li.size, li.jobs);
  }
  ar_sbuf_printf(&b, "]}");
  if (!b.oom)
    metrics_line(r, b.buf);
  ar_sbuf_fini(&b);
  if (trace_room(r)) {
    static const char *const mk[] = {"persistent", "lanes", "free"};
    static const char *const jk[] = {"admitted", "queued", "lanes"};
    int64_t mv[] = {(int64_t)u.persistent_bytes, (int64_t)u.lane_bytes,
                    (int64_t)(u.capacity - used)};
    int64_t jv[] = {(int64_t)u.admitted, (int64_t)u.queued, (int64_t)nl};
    ar_ctrace_counter(&r->trace, 1, us(t), "memory", mk, mv, 3);
    ar_ctrace_counter(&r->trace, 1, us(t), "jobs", jk, jv, 3);
  }
}

static void trace_instant(ar_runner *r, const char *what, const tjob *j) {
  if (!trace_room(r))
    return;
  ar_ctrace_event e = {1, 0, us(clock_now(r)), 0, NULL, what, j->name, NULL, NULL, 0};
  ar_ctrace_instant(&r->trace, &e);
}

static void job_event(ar_runner *r, size_t idx) {
  if (r->o.on_event)
    r->o.on_event(r->o.ctx, idx, &r->jobs[idx]->res);
}

/* A job's lines: in the run's metrics.jsonl and its own. */
static void job_record(ar_runner *r, tjob *j) {
  ar_tjob_result *res = &j->res;
  res->switch_ms_p50 = 1e3 * ar__quantile(j->sw, j->nsw, 0.5);
  res->switch_ms_p99 = 1e3 * ar__quantile(j->sw, j->nsw, 0.99);
  ar_sbuf b = {0};
  ar_sbuf_printf(&b, "{\"event\": \"job\", \"name\": ");
  ar_sbuf_json_str(&b, j->name);
  ar_sbuf_printf(&b,
                ", \"status\": \"%s\", \"arrival_s\": %.6f, \"queue_s\": %.6f, "
                "\"jct_s\": %.6f, \"iterations\": %llu, \"lane\": %u, \"switches\": %llu, "
                "\"switch_latency_ms_p50\": %.4f, \"switch_latency_ms_p99\": %.4f, "
                "\"busy_s\": %.6f, \"device_s\": %.6f, \"persistent_bytes\": %zu, "
                "\"ephemeral_bytes\": %zu",
                ar_tjob_state_name(res->state), res->arrival_s, res->queue_s, res->jct_s,
                (unsigned long long)res->iterations, (unsigned)res->lane,
                (unsigned long long)res->switches, res->switch_ms_p50, res->switch_ms_p99,
                res->busy_s, res->device_s, j->d.persistent, j->d.ephemeral);
  if (res->error[0]) {
    ar_sbuf_printf(&b, ", \"error\": ");
    ar_sbuf_json_str(&b, res->error);
  }
  ar_sbuf_printf(&b, "}");
  if (!b.oom) {
    metrics_line(r, b.buf);
    if (j->out_dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/metrics.jsonl", j->out_dir);
      ar_err e = AR_ERR_INIT;
      FILE *f = NULL;
      if (ar_fs_mkdirs(j->d.fs, j->out_dir, &e) == AR_OK &&
          ar_fs_open_write(j->d.fs, path, true, &f, &e) == AR_OK) {
        fprintf(f, "%s\n", b.buf);
        fclose(f);
      }
    }
  }
  ar_sbuf_fini(&b);
  trace_instant(r, res->state == AR_TJ_DONE ? "done" : ar_tjob_state_name(res->state), j);
}

/* ---- the scheduler ---------------------------------------------------------- */

/* The memory an admitted job holds: its block and its lane's bytes
 * (r->mu held). */
static void held_memory(ar_runner *r, tjob *j) {
  ar_lanes_lane_info li;
  j->res.progress.persistent_bytes = j->d.persistent;
  j->res.progress.lane_bytes =
      ar_lanes_lane(r->lanes, j->res.lane, &li) == AR_OK ? li.size : 0;
}

/* On the host: the whole pages of the arena that no block or lane holds
 * go back to the kernel (their next touch reads zeros, which no block
 * relies on).  Otherwise a departed job's block, a shrunk lane and what a
 * defragmentation vacated stay resident while later blocks fault in pages
 * elsewhere, and the process held up to the arena's high-water mark on
 * top of the bytes live.  Under r->mu; no iteration touches a free byte. */
static void discard_range(void *ctxp, size_t off, size_t bytes) {
  ar_runner *r = ctxp;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)(r->arena + off) + page - 1) & ~(page - 1);
  uintptr_t hi = (uintptr_t)(r->arena + off + bytes) & ~(page - 1);
  if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0)
    ar_log(AR_LOG_DEBUG, "lanes: madvise of %zu free bytes: %s", (size_t)(hi - lo),
           strerror(errno));
}

static void discard_free(ar_runner *r) {
  if (r->host)
    ar_lanes_free_each(r->lanes, discard_range, r);
}

/* Ends a job that runs no iteration now: finishes it when started (an
 * interrupted one writes its checkpoint), closes it, gives its memory back
 * to the lanes. */
static void end_job(ar_runner *r, size_t idx, ar_tjob_state state, bool call_finish,
                    const char *error) {
  tjob *j = r->jobs[idx];
  AR_ASSERT(!j->running);
  if (call_finish && j->started) {
    ar_err e = AR_ERR_INIT;
    ar_status st = j->d.fns->finish(j->d.job, state != AR_TJ_DONE, &e);
    if (st != AR_OK && state == AR_TJ_DONE) {
      state = AR_TJ_FAILED;
      snprintf(j->res.error, sizeof j->res.error, "finishing: %s", e.msg);
    }
  }
  if (!j->closed) {
    j->d.fns->close(j->d.job);
    j->closed = true;
  }
  ar_device *d = j->slot >= 0 ? slot_dev(r, j->slot) : NULL;
  if (j->started && d) {
    /* Its block and lane go back to the lanes, and another handle may
     * carve them at once: nothing of this job may still be queued. */
    if (ar_device_sync(d) != AR_OK)
      ar_log(AR_LOG_WARN, "job '%s': its device queue failed at its end: %s", j->name,
             ar_device_errmsg(d));
  }
  if (j->lid) {
    ar_lanes_job_info ji;
    if (ar_lanes_job(r->lanes, j->lid, &ji) == AR_OK) {
      if (ji.state == AR_LANES_ADMITTED) {
        AR_ASSERT(ar_lanes_finish(r->lanes, j->lid) == AR_OK);
        r->departed = true;
        discard_free(r);
      } else if (ji.state == AR_LANES_QUEUED) {
        AR_ASSERT(ar_lanes_cancel(r->lanes, j->lid) == AR_OK);
      }
    }
  }
  double now = clock_now(r);
  if (error && !j->res.error[0])
    snprintf(j->res.error, sizeof j->res.error, "%s", error);
  j->res.state = state;
  j->res.reason[0] = '\0';
  j->res.end_s = now;
  j->res.progress.persistent_bytes = j->res.progress.lane_bytes = 0;
  j->res.progress.eta_s = NAN;
  if (j->res.arrival_s >= 0)
    j->res.jct_s = now - j->res.arrival_s;
  if (j->res.admit_s < 0 && j->res.arrival_s >= 0)
    j->res.queue_s = now - j->res.arrival_s;
  if (state == AR_TJ_FAILED)
    ar_log(AR_LOG_WARN, "job '%s' failed: %s (the other jobs keep running)", j->name,
           j->res.error);
  job_record(r, j);
  job_event(r, idx);
}

/* Queued jobs the lanes admitted since the last look. */
static void refresh_admissions(ar_runner *r) {
  double now = clock_now(r);
  for (size_t i = 0; i < r->njobs; i++) {
    tjob *j = r->jobs[i];
    if (j->res.state != AR_TJ_QUEUED)
      continue;
    ar_lanes_job_info ji;
    if (ar_lanes_job(r->lanes, j->lid, &ji) != AR_OK)
      continue;
    if (ji.state == AR_LANES_ADMITTED) {
      j->res.state = AR_TJ_ADMITTED;
      j->res.admit_s = now;
      j->res.queue_s = now - j->res.arrival_s;
      j->res.lane = ji.lane;
      j->res.reason[0] = '\0';
      held_memory(r, j);
      trace_instant(r, "admit", j);
      job_event(r, i);
      continue;
    }
    if (!j->waited) { /* still queued after its first pass: it waits */
      j->waited = true;
      r->admission_waits++;
    }
    if (strcmp(j->res.reason, ji.reason ? ji.reason : "") != 0) {
      snprintf(j->res.reason, sizeof j->res.reason, "%s", ji.reason ? ji.reason : "");
      job_event(r, i);
    }
  }
}

static void arrivals(ar_runner *r, double *next_arrival) {
  double now = clock_now(r);
  *next_arrival = INFINITY;
  for (size_t i = 0; i < r->njobs; i++) {
    tjob *j = r->jobs[i];
    if (j->res.state != AR_TJ_PENDING)
      continue;
    if (j->cancel_req) {
      j->res.arrival_s = j->d.arrival_s < now ? j->d.arrival_s : now;
      end_job(r, i, AR_TJ_CANCELLED, false, NULL);
      continue;
    }
    if (j->d.arrival_s > now) {
      if (j->d.arrival_s < *next_arrival)
        *next_arrival = j->d.arrival_s;
      continue;
    }
    j->res.arrival_s = j->d.arrival_s;
    ar_lanes_job_desc ld = AR_LANES_JOB_DESC_INIT;
    ld.name = j->name;
    ld.persistent = j->d.persistent;
    ld.ephemeral = j->d.ephemeral;
    ld.iterations = j->d.iterations;
    ld.priority = j->d.priority;
    ld.arrival = j->d.arrival_s;
    ar_lanes_job_id lid = 0;
    if (r->nlid == r->caplid) {
      size_t cap = r->caplid ? 2 * r->caplid : 16;
      size_t *n = ar_realloc(r->by_lid, cap * sizeof *n);
      if (!n) {
        end_job(r, i, AR_TJ_FAILED, false, "out of memory admitting the job");
        continue;
      }
      r->by_lid = n;
      r->caplid = cap;
    }
    ar_status st = ar_lanes_submit(r->lanes, &ld, &lid);
    if (st != AR_OK) {
      char msg[600];
      snprintf(msg, sizeof msg, "%s", ar_lanes_errmsg(r->lanes));
      end_job(r, i, AR_TJ_FAILED, false, msg);
      continue;
    }
    AR_ASSERT(lid == r->nlid + 1);
    r->by_lid[r->nlid++] = i;
    j->lid = lid;
    j->res.state = AR_TJ_QUEUED;
    trace_instant(r, "arrive", j);
    job_event(r, i);
  }
}

static void busy_change(ar_runner *r, int delta) {
  double now = clock_now(r);
  if (r->nrunning == 0 && delta > 0)
    r->busy_since = now;
  r->nrunning += delta;
  if (r->nrunning == 0 && delta < 0)
    r->busy_total += now - r->busy_since;
}

/* Appends x to the growable array (*v, *n, *cap), doubling from `first`;
 * out of memory, the value is dropped (the quantiles lose a sample). */
static void push_double(double **v, size_t *n, size_t *cap, size_t first, double x) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : first;
    double *p = ar_realloc(*v, c * sizeof *p);
    if (p) {
      *v = p;
      *cap = c;
    }
  }
  if (*n < *cap)
    (*v)[(*n)++] = x;
}

/* Upper bounds of the switch-latency histogram (seconds): 50 us to 1 s,
 * about three per decade; a lane switch on the host takes tens of
 * microseconds, one behind a long checkpoint far more. */
const double ar_runner_switch_bounds[AR_RUNNER_SWITCH_BOUNDS] = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0};

static void push_switch(ar_runner *r, tjob *j, double s) {
  push_double(&j->sw, &j->nsw, &j->capsw, 64, s);
  r->switches++;
  size_t b = 0;
  while (b < AR_RUNNER_SWITCH_BOUNDS && s > ar_runner_switch_bounds[b])
    b++;
  r->sw_hist[b]++;
  r->sw_sum += s;
  if (r->nsw_all < SWITCH_KEEP)
    push_double(&r->sw_all, &r->nsw_all, &r->capsw_all, 256, s);
}

/* The job's progress after an iteration that ended at te (runner clock):
 * position, loss, memory, and its pace over the window of its marks
 * (ar_tjob_progress says which).  A few assignments: it runs after every
 * iteration, under r->mu. */
static void measure_progress(ar_runner *r, tjob *j, const worker *w, double te) {
  ar_tjob_progress *p = &j->res.progress;
  p->iteration = j->d.iterations_before + j->res.iterations;
  if (w->reported)
    p->loss = w->loss;
  held_memory(r, j);
  struct pace_mark now = {te, p->iteration, w->reported ? w->samples : 0};
  if (j->res.iterations == 1) {
    j->mark[0] = j->mark[1] = now;
    return;
  }
  const struct pace_mark *from = &j->mark[0];
  double dt = te - from->t;
  if (dt > 0 && now.it > from->it) {
    double per_s = (double)(now.it - from->it) / dt;
    p->eta_s = (double)(p->iterations > now.it ? p->iterations - now.it : 0) / per_s;
    if (w->reported && now.samples >= from->samples)
      p->samples_per_s = (double)(now.samples - from->samples) / dt;
  }
  if (te - j->mark[1].t >= 5.0) {
    j->mark[0] = j->mark[1];
    j->mark[1] = now;
  }
}

/* Tells the on_progress callee about a running job: after its first
 * iteration, then at most every AR_RUNNER_PROGRESS_S (r->mu held). */
static void report_progress(ar_runner *r, size_t idx) {
  tjob *j = r->jobs[idx];
  if (!r->o.on_progress || j->res.state != AR_TJ_ADMITTED)
    return;
  double now = clock_now(r);
  if (j->res.iterations > 1 && now - j->last_report < AR_RUNNER_PROGRESS_S)
    return;
  j->last_report = now;
  r->o.on_progress(r->o.ctx, idx, &j->res);
}

/* A worker handed an iteration back. */
static void complete(ar_runner *r, worker *w) {
  size_t idx = w->job;
  tjob *j = r->jobs[idx];
  j->running = false;
  w->slotp->busy = false;
  busy_change(r, -1);
  double secs = w->stepped ? w->t_end - w->t_start : 0.0;
  if (!(secs >= 0))
    secs = 0;
  /* The policy is charged the device's part of the step. */
  double dev_secs = secs - (w->idle > 0 ? w->idle : 0.0);
  if (!(dev_secs >= 0))
    dev_secs = 0;
  AR_ASSERT(ar_lanes_iteration_done(r->lanes, j->lid, dev_secs) == AR_OK);
  if (w->stepped) {
    double ts = w->t_start - r->t0, te = w->t_end - r->t0;
    j->res.iterations++;
    r->iterations_total++;
    r->samples_total += w->stepped_samples;
    j->res.busy_s += secs;
    j->res.device_s += dev_secs;
    measure_progress(r, j, w, te);
    if (j->res.first_s < 0)
      j->res.first_s = ts;
    lane_rec *lr = lane_rec_get(r, w->lane);
    if (lr) {
      /* A switch: another job's iteration ended last in this lane.  A job
       * that had to be started first (its model created) is not a switch
       * but an admission; a finished job's final evaluation and checkpoint
       * are not part of the next switch either. */
      if (lr->has_last && lr->last_job != idx && !w->started_now) {
        j->res.switches++;
        push_switch(r, j, ts - lr->last_end);
      }
      lr->has_last = true;
      lr->last_job = idx;
      lr->last_end = w->ended ? w->t_fin - r->t0 : te;
      if (!lr->named && trace_room(r)) {
        char name[32];
        lr->named = true;
        snprintf(name, sizeof name, "lane %u", (unsigned)w->lane);
        ar_ctrace_thread_name(&r->trace, 1, (int)w->lane, name);
      }
    }
    int tid = (int)w->lane;
    if (w->started_now && trace_room(r)) {
      ar_ctrace_event e = {1, tid, us(w->t_setup - r->t0), us(w->t_start - w->t_setup),
                           "setup", "start", NULL, NULL, NULL, 0};
      ar_ctrace_complete(&r->trace, &e);
    }
    if (w->ended && trace_room(r)) {
      ar_ctrace_event e = {1, tid, us(te), us(w->t_fin - w->t_end), "setup", "finish", NULL,
                           NULL, NULL, 0};
      ar_ctrace_complete(&r->trace, &e);
    }
    if (trace_room(r)) {
      static const char *const keys[] = {"iteration", "threads"};
      int64_t vals[] = {(int64_t)(j->d.iterations_before + j->res.iterations), w->threads};
      ar_ctrace_event e = {1, tid, us(ts), us(te - ts), "iteration", NULL, j->name, keys, vals, 2};
      ar_ctrace_complete(&r->trace, &e);
    }
  }
  if (w->st != AR_OK) {
    end_job(r, idx, AR_TJ_FAILED, false, w->err.msg[0] ? w->err.msg : ar_status_str(w->st));
  } else if (w->ended) {
    /* The worker already called finish (the final evaluation uses the
     * lane, so it ran inside the last iteration's turn). */
    end_job(r, idx, AR_TJ_DONE, false, NULL);
  } else if (j->cancel_req) {
    end_job(r, idx, AR_TJ_CANCELLED, true, NULL);
  } else if (r->stop) {
    /* handled by the stop pass */
  } else if (w->stepped) {
    report_progress(r, idx);
  }
  w->state = W_IDLE;
}

/* Copies a persistent block down (or up) inside the arena, on the
 * runner's device handle; the ranges may overlap (ar_device_copy has
 * memmove semantics). */
typedef struct move_ctx {
  ar_runner *r;
  ar_status st;
} move_ctx;

static void move_block(void *ctxp, size_t dst, size_t src, size_t bytes) {
  move_ctx *m = ctxp;
  ar_runner *r = m->r;
  r->moved += bytes;
  if (m->st == AR_OK)
    m->st = ar_device_copy(r->dev, r->arena + dst, r->arena + src, bytes);
}

static ar_status defragment(ar_runner *r, ar_err *err) {
  double t = clock_now(r);
  /* No iteration runs, but a lane handle's queue may still hold work on
   * bytes about to move (or about to be overwritten by a move). */
  for (int i = 0; i < r->nslots; i++) {
    ar_device *d = slot_dev(r, i);
    if (d && ar_device_sync(d) != AR_OK)
      return ar_errf(err, AR_DEVICE,
                     "defragmentation: lane handle %d of %s failed before the move: %s", i,
                     r->device_name, ar_device_errmsg(d));
  }
  move_ctx m = {r, AR_OK};
  uint64_t moved0 = r->moved;
  AR_ASSERT(ar_lanes_defrag(r->lanes, move_block, &m) == AR_OK);
  /* The lane handles use the moved bytes next: the copies must be done. */
  if (m.st == AR_OK)
    m.st = ar_device_sync(r->dev);
  if (m.st != AR_OK)
    return ar_errf(err, m.st, "defragmentation: copying a persistent block failed: %s",
                   ar_device_errmsg(r->dev));
  r->defrags++;
  discard_free(r); /* the blocks' old places, the lanes' shrunk parts */
  /* Started jobs whose block moved learn its new address. */
  for (size_t i = 0; i < r->njobs; i++) {
    tjob *j = r->jobs[i];
    if (j->res.state != AR_TJ_ADMITTED || !j->started)
      continue;
    ar_lanes_job_info ji;
    AR_ASSERT(ar_lanes_job(r->lanes, j->lid, &ji) == AR_OK);
    void *p = r->arena + ji.persistent_offset;
    if (p != j->pers) {
      j->d.fns->rebase(j->d.job, p, NULL);
      j->pers = p;
    }
  }
  double dt = clock_now(r) - t;
  char line[256];
  snprintf(line, sizeof line,
           "{\"event\": \"defrag\", \"t_s\": %.6f, \"duration_s\": %.6f, \"bytes_moved\": %llu}",
           t, dt, (unsigned long long)(r->moved - moved0));
  metrics_line(r, line);
  if (trace_room(r)) {
    static const char *const keys[] = {"bytes_moved"};
    int64_t vals[] = {(int64_t)(r->moved - moved0)};
    ar_ctrace_event e = {1, 0, us(t), us(dt), NULL, "defrag", NULL, keys, vals, 1};
    ar_ctrace_complete(&r->trace, &e);
  }
  return AR_OK;
}

static int by_last_dispatch(const void *a, const void *b) {
  const lane_rec *x = *(lane_rec *const *)a, *y = *(lane_rec *const *)b;
  return x->last_dispatch < y->last_dispatch ? -1 : x->last_dispatch > y->last_dispatch;
}

/* The handle a lane is bound to when it first runs: one no live lane is
 * bound to; else, on the host, a new one; else the one fewest live lanes
 * are bound to (idle ones first, then the lowest index). */
static int bind_slot(ar_runner *r) {
  size_t nl = ar_lanes_lane_count(r->lanes);
  int best = 0;
  size_t best_n = SIZE_MAX;
  for (int s = 0; s < r->nslots; s++) {
    size_t n = 0;
    for (size_t k = 0; k < nl; k++) {
      ar_lanes_lane_info li;
      if (ar_lanes_lane_at(r->lanes, k, &li) != AR_OK)
        continue;
      for (size_t q = 0; q < r->nlrec; q++)
        if (r->lrec[q].id == li.id && r->lrec[q].slot == s)
          n++;
    }
    if (n == 0 && !r->slots[s]->busy)
      return s;
    n = 2 * n + (r->slots[s]->busy ? 1 : 0);
    if (n < best_n) {
      best_n = n;
      best = s;
    }
  }
  if (r->grow_slots) {
    int s = add_slot(r, NULL, true);
    if (s >= 0)
      return s;
  }
  return best;
}

/* Whether an iteration may start in lane lr now: whichever job the policy
 * picks, the handle it runs on must be idle (its lane's handle for a new
 * job, the one it started on otherwise). */
static bool lane_handles_idle(ar_runner *r, const lane_rec *lr) {
  if (r->slots[lr->slot]->busy)
    return false;
  for (size_t i = 0; i < r->njobs; i++) {
    const tjob *j = r->jobs[i];
    if (!j->running && j->started && j->res.state == AR_TJ_ADMITTED &&
        j->res.lane == lr->id && r->slots[j->slot]->busy)
      return false;
  }
  return true;
}

/* Hands iterations to idle workers, one per free lane, lanes that waited
 * longest first. */
static void dispatch(ar_runner *r) {
  size_t nl = ar_lanes_lane_count(r->lanes);
  if (nl == 0)
    return;
  lane_rec *order[256];
  size_t n = 0;
  for (size_t k = 0; k < nl && n < 256; k++) {
    ar_lanes_lane_info li;
    if (ar_lanes_lane_at(r->lanes, k, &li) != AR_OK || li.running)
      continue;
    lane_rec *lr = lane_rec_get(r, li.id);
    if (lr)
      order[n++] = lr;
  }
  qsort(order, n, sizeof *order, by_last_dispatch);
  size_t concurrent = nl < (size_t)r->nworkers ? nl : (size_t)r->nworkers;
  int share = r->threads / (int)(concurrent ? concurrent : 1);
  if (share < 1)
    share = 1;
  int wi = 0;
  for (size_t k = 0; k < n; k++) {
    while (wi < r->nworkers && r->workers[wi].state != W_IDLE)
      wi++;
    if (wi == r->nworkers)
      return;
    if (order[k]->slot < 0)
      order[k]->slot = bind_slot(r);
    if (!lane_handles_idle(r, order[k]))
      continue;
    ar_lanes_job_id lid = 0;
    if (ar_lanes_pick(r->lanes, order[k]->id, &lid) != AR_OK)
      continue;
    size_t idx = r->by_lid[lid - 1];
    tjob *j = r->jobs[idx];
    ar_lanes_job_info ji;
    ar_lanes_lane_info li;
    AR_ASSERT(ar_lanes_job(r->lanes, lid, &ji) == AR_OK);
    AR_ASSERT(ar_lanes_lane(r->lanes, order[k]->id, &li) == AR_OK);
    worker *w = &r->workers[wi];
    w->job = idx;
    w->lane = li.id;
    if (!j->started)
      j->slot = order[k]->slot; /* the engine keeps the handle it starts on */
    w->slot = j->slot;
    w->slotp = r->slots[j->slot];
    w->slotp->busy = true;
    w->threads = j->d.max_threads > 0 && j->d.max_threads < share ? j->d.max_threads : share;
    w->pers = r->arena + ji.persistent_offset;
    w->eph = r->arena + li.offset;
    w->st = AR_OK;
    w->err.status = AR_OK;
    w->err.msg[0] = '\0';
    w->stepped = w->ended = w->started_now = w->reported = false;
    w->idle = 0;
    w->stepped_samples = 0;
    w->state = W_BUSY;
    j->running = true;
    j->res.lane = li.id;
    busy_change(r, +1);
    order[k]->last_dispatch = ++r->dispatch_seq;
    pthread_cond_signal(&w->cv);
  }
}

/* The worker's side of one iteration.  The job is the worker's alone
 * until it reports back, so no lock is held. */
static void run_task(ar_runner *r, worker *w, tjob *j) {
  const ar_tjob_fns *fns = j->d.fns;
  ar_status st = AR_OK;
  w->t_setup = ar_now();
  slot *sl = w->slotp;
  if (!sl->dev) {
    /* A lane's new host handle, opened here rather than by the scheduler
     * (loading the topology takes tens of milliseconds). */
    ar_device_opts o = AR_DEVICE_OPTS_INIT;
    o.threads = w->threads;
    o.pin = false;
    st = ar_device_open("host", &o, &sl->dev, &w->err);
    if (st != AR_OK) {
      sl->dev = NULL;
      ar_err_wrap(&w->err, "opening a lane's host device");
      w->t_start = w->t_end = w->t_fin = ar_now();
      w->st = st;
      return;
    }
  }
  ar_device *dev = sl->dev;
  if (r->host)
    ar_device_set_threads(dev, w->threads); /* this iteration's share of the cores */
  if (!j->started) {
    w->started_now = true;
    st = fns->start(j->d.job, dev, w->pers, w->eph, &w->err);
    if (st == AR_OK) {
      j->started = true;
      j->pers = w->pers;
      j->eph = w->eph;
      double loss0;
      if (fns->progress) /* a resumed job's earlier samples */
        fns->progress(j->d.job, &loss0, &j->samples_seen);
    }
  } else if (w->eph != j->eph) {
    fns->rebase(j->d.job, NULL, w->eph);
    j->eph = w->eph;
  }
  if (st == AR_OK && fns->done(j->d.job)) {
    /* A resumed job whose checkpoint was already at its end. */
    st = fns->finish(j->d.job, false, &w->err);
    w->ended = true;
    w->st = st;
    w->t_start = w->t_end = w->t_fin = ar_now();
    return;
  }
  if (st == AR_OK) {
    w->t_start = ar_now();
    st = fns->step(j->d.job, &w->err);
    w->t_end = ar_now();
    w->idle = fns->idle_s ? fns->idle_s(j->d.job) : 0.0;
    w->stepped = true;
    w->reported = st == AR_OK && fns->progress;
    if (w->reported) {
      fns->progress(j->d.job, &w->loss, &w->samples);
      w->stepped_samples = w->samples > j->samples_seen ? w->samples - j->samples_seen : 0;
      j->samples_seen = w->samples;
    }
  }
  if (st == AR_OK &&
      (fns->done(j->d.job) || j->res.iterations + 1 >= j->d.iterations)) {
    st = fns->finish(j->d.job, false, &w->err);
    if (st != AR_OK)
      ar_err_wrap(&w->err, "finishing");
    w->ended = true;
  }
  w->t_fin = ar_now();
  w->st = st;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  ar_runner *r = w->r;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (w->state != W_BUSY && w->state != W_EXIT)
      pthread_cond_wait(&w->cv, &r->mu);
    if (w->state == W_EXIT)
      break;
    tjob *j = r->jobs[w->job];
    pthread_mutex_unlock(&r->mu);
    run_task(r, w, j);
    pthread_mutex_lock(&r->mu);
    w->state = W_DONE;
    pthread_cond_signal(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

static bool all_ended(ar_runner *r) {
  for (size_t i = 0; i < r->njobs; i++)
    if (!ar_tjob_ended(r->jobs[i]->res.state))
      return false;
  return true;
}

static void finish_summary(ar_runner *r) {
  ar_runner_summary *s = &r->sum;
  memset(s, 0, sizeof *s);
  snprintf(r->sum_policy, sizeof r->sum_policy, "%s", r->policy);
  s->policy = r->sum_policy;
  double *jct = ar_malloc((r->njobs + 1) * sizeof *jct);
  double sum_jct = 0, sum_q = 0, end = 0;
  size_t n = 0;
  for (size_t i = 0; i < r->njobs; i++) {
    const ar_tjob_result *res = &r->jobs[i]->res;
    if (res->end_s > end)
      end = res->end_s;
    if (res->state == AR_TJ_FAILED)
      s->failed++;
    if (res->arrival_s < 0 || res->end_s < 0)
      continue;
    if (jct)
      jct[n] = res->jct_s;
    n++;
    sum_jct += res->jct_s;
    sum_q += res->queue_s;
  }
  s->jobs = r->njobs;
  s->makespan_s = end;
  s->avg_jct_s = n ? sum_jct / (double)n : 0;
  s->avg_queue_s = n ? sum_q / (double)n : 0;
  s->p95_jct_s = jct ? ar__quantile(jct, n, 0.95) : 0;
  ar_free(jct);
  s->switches = r->switches;
  s->switch_ms_p50 = 1e3 * ar__quantile(r->sw_all, r->nsw_all, 0.5);
  s->switch_ms_p99 = 1e3 * ar__quantile(r->sw_all, r->nsw_all, 0.99);
  s->max_memory_bytes = r->max_mem;
  ar_lanes_usage u;
  ar_lanes_usage_get(r->lanes, &u);
  s->capacity_bytes = u.capacity;
  s->busy_fraction = end > 0 ? r->busy_total / end : 0;
  s->defrags = r->defrags;
  s->defrag_bytes_moved = r->moved;
}

static ar_status write_outputs(ar_runner *r, ar_err *err) {
  const ar_runner_summary *s = &r->sum;
  ar_sbuf b = {0};
  ar_sbuf_printf(&b, "{\n  \"policy\": ");
  ar_sbuf_json_str(&b, s->policy);
  ar_sbuf_printf(&b, ",\n  \"device\": ");
  ar_sbuf_json_str(&b, r->device_name);
  ar_sbuf_printf(&b,
                ",\n  \"makespan_s\": %.6f,\n  \"avg_jct_s\": %.6f,\n  \"p95_jct_s\": %.6f,\n"
                "  \"avg_queue_s\": %.6f,\n  \"switch_latency_ms_p50\": %.6f,\n"
                "  \"switch_latency_ms_p99\": %.6f,\n  \"switches\": %llu,\n"
                "  \"max_memory_bytes\": %zu,\n  \"capacity_bytes\": %zu,\n"
                "  \"busy_fraction\": %.6f,\n  \"defrags\": %llu,\n"
                "  \"defrag_bytes_moved\": %llu,\n  \"threads\": %d,\n"
                "  \"failed\": %zu,\n  \"jobs\": [",
                s->makespan_s, s->avg_jct_s, s->p95_jct_s, s->avg_queue_s, s->switch_ms_p50,
                s->switch_ms_p99, (unsigned long long)s->switches, s->max_memory_bytes,
                s->capacity_bytes, s->busy_fraction, (unsigned long long)s->defrags,
                (unsigned long long)s->defrag_bytes_moved, r->threads, s->failed);
  for (size_t i = 0; i < r->njobs; i++) {
    const tjob *j = r->jobs[i];
    const ar_tjob_result *res = &j->res;
    ar_sbuf_printf(&b, "%s\n    {\"name\": ", i ? "," : "");
    ar_sbuf_json_str(&b, j->name);
    ar_sbuf_printf(&b,
                  ", \"status\": \"%s\", \"arrival_s\": %.6f, \"jct_s\": %.6f, "
                  "\"queue_s\": %.6f, \"iterations\": %llu, \"lane\": %u, "
                  "\"switch_latency_ms_p50\": %.4f",
                  ar_tjob_state_name(res->state), res->arrival_s, res->jct_s, res->queue_s,
                  (unsigned long long)res->iterations, (unsigned)res->lane,
                  res->switch_ms_p50);
    if (res->error[0]) {
      ar_sbuf_printf(&b, ", \"error\": ");
      ar_sbuf_json_str(&b, res->error);
    }
    ar_sbuf_printf(&b, "}");
  }
  ar_sbuf_printf(&b, "\n  ]\n}\n");
  if (b.oom) {
    ar_sbuf_fini(&b);
    return ar_errf(err, AR_NOMEM, "out of memory writing summary.json");
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/summary.json", r->out_dir);
  ar_status st = ar_fs_write_atomic(r->fs, path, b.buf, b.len, err);
  ar_sbuf_fini(&b);
  if (st != AR_OK)
    return st;
  /* The trace (trace.h's writer): the process, the admission track, the
   * events kept during the run. */
  ar_sbuf t = {0};
  char pname[256], other[64];
  snprintf(pname, sizeof pname, "accelrt lanes on %s (%s)", r->device_name, r->policy);
  snprintf(other, sizeof other, "\"dropped_events\": %llu", (unsigned long long)r->trace_dropped);
  ar_ctrace_begin(&t);
  ar_ctrace_process_name(&t, 1, pname, 0);
  ar_ctrace_thread_name(&t, 1, 0, "admission");
  ar_ctrace_events(&t, r->trace.buf, r->trace.len);
  ar_ctrace_end(&t, other);
  if (t.oom) {
    ar_sbuf_fini(&t);
    return ar_errf(err, AR_NOMEM, "out of memory writing the trace");
  }
  if (r->trace_path)
    snprintf(path, sizeof path, "%s", r->trace_path);
  else
    snprintf(path, sizeof path, "%s/trace.json", r->out_dir);
  st = ar_fs_write_atomic(r->fs, path, t.buf, t.len, err);
  ar_sbuf_fini(&t);
  return st;
}

void ar_runner_stats_get(ar_runner *r, ar_runner_stats *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&r->mu);
  ar_lanes_usage u;
  ar_lanes_usage_get(r->lanes, &u);
  out->uptime_s = clock_now(r);
  out->capacity_bytes = u.capacity;
  out->persistent_bytes = u.persistent_bytes;
  out->lane_bytes = u.lane_bytes;
  out->admitted = u.admitted;
  out->queued = u.queued;
  out->iterations = r->iterations_total;
  out->samples = r->samples_total;
  out->admission_waits = r->admission_waits;
  out->switches = r->switches;
  out->switch_sum_s = r->sw_sum;
  memcpy(out->switch_buckets, r->sw_hist, sizeof out->switch_buckets);
  out->defrags = r->defrags;
  out->busy_s = r->busy_total + (r->nrunning > 0 ? out->uptime_s - r->busy_since : 0.0);
  out->lanes = ar_lanes_lane_count(r->lanes);
  for (size_t k = 0; k < out->lanes && k < AR_RUNNER_STATS_LANES; k++) {
    ar_lanes_lane_info li;
    if (ar_lanes_lane_at(r->lanes, k, &li) != AR_OK)
      break;
    out->lane[k] = (ar_runner_lane_stats){li.id, li.offset, li.size, li.jobs, li.running != 0};
  }
  pthread_mutex_unlock(&r->mu);
}

static void stop_all(ar_runner *r) {
  for (size_t i = 0; i < r->njobs; i++) {
    tjob *j = r->jobs[i];
    if (ar_tjob_ended(j->res.state))
      continue;
    if (j->res.arrival_s < 0)
      j->res.arrival_s = j->d.arrival_s < clock_now(r) ? j->d.arrival_s : clock_now(r);
    end_job(r, i, AR_TJ_STOPPED, true, NULL);
  }
}

/* Starts the lane threads (r->mu held); none started is a failure. */
static ar_status start_workers(ar_runner *r, ar_err *err) {
  int started = 0;
  for (; started < r->nworkers; started++) {
    worker *w = &r->workers[started];
    if (pthread_create(&w->th, NULL, worker_main, w) != 0)
      break;
    w->th_ok = true;
  }
  if (started == 0)
    return ar_errf(err, AR_NOMEM, "cannot start the lane threads");
  r->nworkers = started;
  return AR_OK;
}

/* Cancels of jobs that run no iteration now (r->mu held).  Its checkpoint
 * uses the job's handle, which another lane may be using (lanes share
 * handles when there are more lanes than handles). */
static void end_cancelled(ar_runner *r) {
  for (size_t i = 0; i < r->njobs; i++) {
    tjob *j = r->jobs[i];
    if (j->cancel_req && !j->running &&
        (j->res.state == AR_TJ_QUEUED || j->res.state == AR_TJ_ADMITTED) &&
        (!j->started || !r->slots[j->slot]->busy))
      end_job(r, i, AR_TJ_CANCELLED, true, NULL);
  }
}

/* Defragmentation at an iteration boundary of every lane: asks the lanes
 * to drain when the layout is fragmented (and a job waits, unless
 * defrag == 2), and defragments once they have (r->mu held). */
static ar_status maybe_defragment(ar_runner *r, ar_err *err) {
  if (r->o.defrag && r->departed && !r->draining) {
    ar_lanes_usage u;
    ar_lanes_usage_get(r->lanes, &u);
    if (!ar_lanes_fragmented(r->lanes))
      r->departed = false;
    else if (r->o.defrag == 2 || u.queued > 0)
      r->draining = true;
  }
  if (!r->draining || r->nrunning > 0)
    return AR_OK;
  r->draining = false;
  r->departed = false;
  AR_CHECK(defragment(r, err));
  refresh_admissions(r);
  sample_memory(r, "defrag");
  return AR_OK;
}

/* Nothing runs, nothing arrives, yet only queued jobs remain: they can
 * never be admitted (a bug in the lanes, or a job that never ends), so
 * they fail.  Returns whether it ended any (r->mu held). */
static bool fail_never_admitted(ar_runner *r) {
  for (size_t i = 0; i < r->njobs; i++)
    if (r->jobs[i]->res.state == AR_TJ_ADMITTED)
      return false;
  for (size_t i = 0; i < r->njobs; i++)
    if (r->jobs[i]->res.state == AR_TJ_QUEUED)
      end_job(r, i, AR_TJ_FAILED, false,
              "never admitted: nothing else runs and it still does not fit");
  return true;
}

/* Sleeps (r->mu held) until a worker reports, a job is added or cancelled,
 * or the next arrival, at most a second. */
static void wait_for_change(ar_runner *r, double next_arrival) {
  for (int i = 0; i < r->nworkers; i++)
    if (r->workers[i].state == W_DONE)
      return;
  double wait = isinf(next_arrival) ? 1.0 : next_arrival - clock_now(r);
  if (wait > 1.0)
    wait = 1.0;
  if (wait <= 0)
    return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double at = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + wait;
  ts.tv_sec = (time_t)at;
  ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
  pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* The scheduler (r->mu held): completes finished iterations, ends
 * cancelled jobs, admits arrivals, defragments and dispatches, until every
 * job ended (batch mode) or a stop; a runner-level failure returns at once. */
static ar_status schedule(ar_runner *r, ar_err *err) {
  for (;;) {
    for (int i = 0; i < r->nworkers; i++)
      if (r->workers[i].state == W_DONE)
        complete(r, &r->workers[i]);
    if (r->stop) {
      if (r->nrunning == 0) {
        stop_all(r);
        sample_memory(r, "stop");
        return AR_OK;
      }
      pthread_cond_wait(&r->cv, &r->mu);
      continue;
    }
    end_cancelled(r);
    double next_arrival;
    arrivals(r, &next_arrival);
    refresh_admissions(r);
    sample_memory(r, "change");
    AR_CHECK(maybe_defragment(r, err));
    if (!r->draining)
      dispatch(r);
    if (!r->o.service && r->nrunning == 0 && all_ended(r))
      return AR_OK;
    if (r->nrunning == 0 && !r->draining && isinf(next_arrival) && !r->o.service &&
        fail_never_admitted(r))
      continue;
    wait_for_change(r, next_arrival);
  }
}

/* After a runner-level failure (r->mu held): lets running iterations end,
 * then stops every job. */
static void drain_and_stop(ar_runner *r) {
  while (r->nrunning > 0) {
    for (int i = 0; i < r->nworkers; i++)
      if (r->workers[i].state == W_DONE)
        complete(r, &r->workers[i]);
    if (r->nrunning > 0)
      pthread_cond_wait(&r->cv, &r->mu);
  }
  stop_all(r);
}

/* Tells the lane threads to exit and joins them (r->mu held on entry,
 * released while joining, held again on return). */
static void end_workers(ar_runner *r) {
  for (int i = 0; i < r->nworkers; i++) {
    r->workers[i].state = W_EXIT;
    pthread_cond_signal(&r->workers[i].cv);
  }
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < r->nworkers; i++)
    if (r->workers[i].th_ok) {
      pthread_join(r->workers[i].th, NULL);
      r->workers[i].th_ok = false;
    }
  pthread_mutex_lock(&r->mu);
}

ar_status ar_runner_run(ar_runner *r, ar_err *err) {
  if (r->out_dir) {
    AR_CHECK(ar_fs_mkdirs(r->fs, r->out_dir, err));
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->out_dir);
    AR_CHECK(ar_fs_open_write(r->fs, path, false, &r->metrics, err));
  }
  pthread_mutex_lock(&r->mu);
  r->t0 = ar_now();
  r->clock_started = true;
  ar_status st = start_workers(r, err);
  if (st != AR_OK) {
    pthread_mutex_unlock(&r->mu);
    return st;
  }
  sample_memory(r, "start");
  st = schedule(r, err);
  if (st != AR_OK)
    drain_and_stop(r);
  end_workers(r);
  finish_summary(r);
  pthread_mutex_unlock(&r->mu);
  if (r->out_dir) {
    ar_err e2 = AR_ERR_INIT;
    ar_status ws = write_outputs(r, st == AR_OK ? err : &e2);
    if (st == AR_OK)
      st = ws;
  }
  if (r->metrics) {
    fclose(r->metrics);
    r->metrics = NULL;
  }
  return st;
}
