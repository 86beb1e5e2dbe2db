/*
 * runtime/tenancy private header: the multi-job runner's core.
 *
 * The runner knows jobs only through a small table of functions (start,
 * step, rebase, finish, close), so the scheduler, the lanes, the worker
 * threads, the defragmentation and the records are tested with synthetic
 * jobs (tests/tenancy/test_runner.c) and driven by the engine's ar_job in
 * production (tenancy_run.c, service.c).
 *
 * Threads: the thread that calls ar__runner_run is the scheduler; it alone
 * touches the ar_lanes handle and calls the job functions of jobs that are
 * not running an iteration.  Worker threads (one per concurrently running
 * lane) run start + step (+ finish when the job ends) of the job they were
 * handed.  ar__runner_add, _cancel, _stop, _result and _now may be called
 * from any thread.
 */
#ifndef ACCELRT_TENANCY_IMPL_H
#define ACCELRT_TENANCY_IMPL_H

#include "accelrt/device.h"
#include "accelrt/lanes.h"
#include "accelrt/runtime.h"
#include "accelrt/spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A job as the runner drives it.  `job` is the implementation's handle. */
typedef struct ar__tjob_fns {
  /* Creates the job's state on dev (borrowed: the lane handle the job runs
   * every iteration on, shared with the other jobs of its lane, valid
   * until the runner is destroyed) in the given arena blocks.  Called
   * once, by a worker, before the first step. */
  ar_status (*start)(void *job, ar_device *dev, void *persistent,
                     void *ephemeral, ar_err *err);
  /* One iteration. */
  ar_status (*step)(void *job, ar_err *err);
  /* All iterations run. */
  bool (*done)(void *job);
  /* Blocks moved (persistent bytes already copied); NULL keeps one. */
  void (*rebase)(void *job, void *persistent, void *ephemeral);
  /* Ends a started job: interrupted = stopped early (cancel, shutdown). */
  ar_status (*finish)(void *job, bool interrupted, ar_err *err);
  /* Frees the job (started or not). */
  void (*close)(void *job);
} ar__tjob_fns;

typedef struct ar__tjob_desc {
  const char *name;    /* copied */
  const char *out_dir; /* copied; per-job record goes to its metrics.jsonl;
                          NULL: none */
  size_t persistent, ephemeral; /* exact plan sizes */
  uint64_t iterations;          /* iterations still to run (>= 1) */
  uint64_t iterations_before;   /* done before (a resumed job) */
  int priority;
  int max_threads;  /* host threads an iteration may use; 0 = its share */
  double arrival_s; /* on the runner's clock; the service uses "now" */
  void *job;        /* ownership passes to the runner (fns->close) */
  const ar__tjob_fns *fns;
  const ar_fs *fs; /* borrowed, outlives the job: opens out_dir's files */
} ar__tjob_desc;

typedef enum ar__tjob_state {
  AR__TJ_PENDING = 0, /* not arrived yet */
  AR__TJ_QUEUED,      /* waiting for memory */
  AR__TJ_ADMITTED,    /* holds a block and a lane */
  AR__TJ_DONE,        /* ran all its iterations */
  AR__TJ_FAILED,      /* an error ended it (others keep running) */
  AR__TJ_CANCELLED,   /* ar__runner_cancel */
  AR__TJ_STOPPED      /* the runner stopped (checkpointed when started) */
} ar__tjob_state;

const char *ar__tjob_state_name(ar__tjob_state s);
static inline bool ar__tjob_ended(ar__tjob_state s) { return s >= AR__TJ_DONE; }

typedef struct ar__tjob_result {
  ar__tjob_state state;
  double arrival_s, admit_s, first_s, end_s; /* runner clock; -1 unset */
  double queue_s, jct_s;
  uint64_t iterations; /* run here (not counting iterations_before) */
  uint32_t lane;       /* the lane it ran in; 0 when never admitted */
  uint64_t switches;   /* iterations that followed another job's in its lane */
  double switch_ms_p50, switch_ms_p99;
  double busy_s;       /* sum of its iteration times */
  char reason[256];    /* why it waits (queued) */
  char error[AR_ERR_MAX + 64]; /* failed: why */
} ar__tjob_result;

typedef struct ar__runner ar__runner;

/* Called on every change of a job's state (arrived, admitted, reason
 * changed, ended), from the scheduler thread with the runner's lock held:
 * it must not call ar__runner_* functions. */
typedef void (*ar__runner_event_fn)(void *ctx, size_t job,
                                    const ar__tjob_result *r);

typedef struct ar__runner_opts {
  const char *policy;  /* lanes policy name */
  /* The lanes' bytes; 0: from the device: on the host runtime.memory's
   * bytes or its fraction (default all) of the available RAM; on a device
   * with an arena (CUDA) what the arena has left once the lane handles
   * took their workspaces.  Given on such a device, it must fit there. */
  size_t capacity;
  const char *device;  /* "host", "cuda:N", "auto" */
  /* Opening the device: runtime.memory (memory_bytes / memory_fraction)
   * sizes a CUDA device's arena; see ar_job_device_opts.  pin is ignored
   * (lanes share the cores). */
  ar_device_opts device_opts;
  int threads;         /* host threads in all; 0 = all cores */
  int max_concurrent;  /* iterations at once; 0: threads (host), 8 else */
  /* Lane handles: 0 = on the host one per live lane (opened as lanes
   * need them), elsewhere one per max_concurrent; n > 0 = at most n, lanes
   * beyond share them and take turns (tests). */
  int max_lane_handles;
  /* 0: never; 1: when the layout is fragmented and a job waits (after a
   * job left); 2: after every departure (tests). */
  int defrag;
  bool service;        /* run until ar__runner_stop, not until all ended */
  const char *out_dir; /* summary.json, metrics.jsonl, trace.json; NULL */
  const ar_fs *fs;     /* borrowed: opens out_dir's files; NULL: directly */
  const char *trace_path; /* NULL: out_dir/trace.json */
  ar__runner_event_fn on_event; /* optional */
  void *ctx;
} ar__runner_opts;

#define AR__RUNNER_OPTS_INIT                                                     \
  {"fifo", 0, "host", AR_DEVICE_OPTS_INIT, 0, 0, 0, 1, false, NULL, NULL, NULL, NULL, NULL}

/* Opens the device once, the lane handles (ar_device_open_lane where the
 * backend has queues; host devices with their share of the threads on the
 * host), sizes the capacity, carves it with one ar_device_alloc and makes
 * the lanes handle.  AR_INVALID / AR_NOMEM /
 * AR_RANGE / device statuses, with what to set in err. */
ar_status ar__runner_create(const ar__runner_opts *opts, ar__runner **out,
                            ar_err *err);
/* The host's budget for the lanes (runner.c): runtime.memory in bytes
 * (at most what this host can give, ar_host_memory_get), or a fraction
 * (default all) of that; where it came from in source (may be NULL).
 * AR_RANGE, AR_UNSUPPORTED with what to set in err. */
ar_status ar__host_lanes_capacity(const ar_device_opts *o, size_t *out, char *source,
                                  size_t source_len, ar_err *err);

/* The lanes' capacity in bytes and the device's name ("host", "cuda:0"). */
size_t ar__runner_capacity(const ar__runner *r);
const char *ar__runner_device_name(const ar__runner *r);
/* The device the runner opened (borrowed; the one allocation of the arena
 * is its only one) and, in *lane_handles, how many lane handles it has. */
ar_device *ar__runner_device(ar__runner *r, int *lane_handles);
/* Lane handle i (borrowed), or NULL out of range. */
ar_device *ar__runner_lane_handle(ar__runner *r, int i);
/* Closes every job still held, frees everything.  NULL is a no-op. */
void ar__runner_destroy(ar__runner *r);

/* Adds a job; *index (may be NULL) is its number, from 0.  On failure the
 * job stays the caller's.  AR_INVALID (incomplete table, zero iterations),
 * AR_NOMEM.  A job that can never fit fails alone when it arrives. */
ar_status ar__runner_add(ar__runner *r, const ar__tjob_desc *d, size_t *index,
                         ar_err *err);
/* Cancels a job at its next iteration boundary.  AR_OK, AR_NOTFOUND,
 * AR_STATE (already ended). */
ar_status ar__runner_cancel(ar__runner *r, size_t index);
/* Asks the run to end: no new iteration starts; started jobs are finished
 * as interrupted (their checkpoint written), the others closed. */
void ar__runner_stop(ar__runner *r);
/* Runs until every job ended (or, in service mode, until stopped).
 * AR_OK, or the first runner-level failure (a job's failure is only in
 * its result). */
ar_status ar__runner_run(ar__runner *r, ar_err *err);

size_t ar__runner_count(ar__runner *r);
ar_status ar__runner_result(ar__runner *r, size_t index, ar__tjob_result *out);
/* Seconds since ar__runner_run started (0 before). */
double ar__runner_now(ar__runner *r);

/* Run-level figures (filled at the end of ar__runner_run). */
typedef struct ar__runner_summary {
  const char *policy;
  double makespan_s, avg_jct_s, p95_jct_s, avg_queue_s;
  double switch_ms_p50, switch_ms_p99;
  uint64_t switches;
  size_t max_memory_bytes, capacity_bytes;
  double busy_fraction;
  uint64_t defrags, defrag_bytes_moved;
  size_t jobs, failed;
} ar__runner_summary;
void ar__runner_summary_get(ar__runner *r, ar__runner_summary *out);

/* ---- records (record.c) ---- */

/* Value at quantile q in [0, 1] of v (n values; sorted in place), nearest
 * rank; 0 when n = 0. */
double ar__quantile(double *v, size_t n, double q);

/* ---- engine jobs (tenancy_run.c) ---- */

/* Opens an engine job (ar_job_open) for `spec` and fills *d for the
 * runner (fns, plan sizes, iterations left, output dir, priority; arrival
 * is the caller's).  opts: resume, the job's fs (quiet is forced).
 * The spec must outlive the job.  Statuses of ar_job_open; AR_STATE when a
 * resumed job has no iteration left. */

ar_status ar__tenancy_open_job(const ar_spec *spec, const ar_run_opts *opts,
                               ar__tjob_desc *d, ar_err *err);
/* A job that only fails with `message` when started: a job whose data
 * could not be opened still appears, failed, in the run's records.
 * Strings are copied.  AR_NOMEM. */
ar_status ar__tenancy_failed_job(const char *name, const char *out_dir,
                                 const char *message, ar__tjob_desc *d);

#endif
