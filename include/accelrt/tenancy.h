/*
 * accelrt tenancy: many jobs on one device through lanes (lanes/): the
 * multi-job runner behind `accelrt run` of a file with `jobs:`, and the
 * execution service (`accelrt serve`, `submit`, `ps`, `logs`, `cancel`).
 *
 * Tests: tests/tenancy/test_runner.c (the runner with synthetic jobs:
 * random mixes under every policy, failures, cancels, defragmentation byte
 * for byte, progress), tests/tenancy/multi_job.sh (a `jobs:` file end to
 * end), tests/tenancy/service.sh (two users, a killed server, garbage),
 * tests/tenancy/live.sh (live status, logs and cancel through the CLI).
 */
#ifndef ACCELRT_TENANCY_H
#define ACCELRT_TENANCY_H

#include "accelrt/device.h"
#include "accelrt/lanes.h"
#include "accelrt/runtime.h"
#include "accelrt/spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs every job of spec->jobs on one device under spec->runtime (policy,
 * memory), each job writing to its own output.dir, and writes the run's
 * summary.json into spec->output.dir.  AR_OK when every job succeeded. */
ar_status ar_tenancy_run(const ar_spec *spec, const ar_run_opts *opts,
                         ar_err *err);

/* The lanes' capacity ar_tenancy_run gives spec's jobs, as it sizes it
 * before allocating it: on the host runtime.memory in bytes (at most what
 * this host can give) or its fraction (default all) of what this process
 * can use (MemAvailable or its cgroup's limit); on a GPU runtime.memory in
 * bytes, or 0 when it is a fraction of the free memory, known only once
 * the device is open.  Where it came from goes to source (source_len
 * bytes).  Opens no device, allocates nothing (`accelrt check`).  AR_OK;
 * AR_RANGE / AR_UNSUPPORTED with what to set in err. */
ar_status ar_tenancy_capacity(const ar_spec *spec, size_t *out, char *source, size_t source_len,
                              ar_err *err);

/* ---- the multi-job runner ------------------------------------------------
 * Many jobs on one device through lanes.  The runner knows jobs only through
 * a small table of functions (start, step, rebase, finish, close), so the
 * scheduler, the lanes, the worker threads, the defragmentation and the
 * records are tested with synthetic jobs (tests/tenancy/test_runner.c) and
 * driven by the engine's ar_job in production (ar_tenancy_run, the
 * service, and distributed.share's workers, runtime/dist/share.c).
 *
 * Threads: the thread that calls ar_runner_run is the scheduler; it alone
 * changes the ar_lanes handle, always under the runner's lock, under which
 * ar_runner_stats_get reads it; it alone calls the job functions of jobs that are
 * not running an iteration.  Worker threads (one per concurrently running
 * lane) run start + step (+ finish when the job ends) of the job they were
 * handed.  ar_runner_add, _cancel, _stop, _result and _now may be called
 * from any thread. */

/* A job as the runner drives it.  `job` is the implementation's handle. */
typedef struct ar_tjob_fns {
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
  /* (optional) The last iteration's training loss and the samples trained
   * so far (a resumed job's earlier ones included), for the job's
   * progress; called by the worker once after the job's start and once
   * right after each step, so it must be cheap.  NULL: the job reports neither (progress.loss and
   * samples_per_s stay unknown). */
  void (*progress)(void *job, double *loss, uint64_t *samples);
  /* (optional) Seconds of the last step during which the job waited for
   * something other than its device (a distributed worker for its peers'
   * messages), called by the worker right after each step.  The policy is
   * charged the step's wall time less these (fair's equal device time,
   * srtf's estimates): a wait charged as device time would hand the
   * job's co-tenants as much again before its next turn, lengthening the
   * waits of its peers in turn.  NULL: all of a step is device time. */
  double (*idle_s)(void *job);
} ar_tjob_fns;

typedef struct ar_tjob_desc {
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
  const ar_tjob_fns *fns;
  const ar_fs *fs; /* borrowed, outlives the job: opens out_dir's files */
} ar_tjob_desc;

typedef enum ar_tjob_state {
  AR_TJ_PENDING = 0, /* not arrived yet */
  AR_TJ_QUEUED,      /* waiting for memory */
  AR_TJ_ADMITTED,    /* holds a block and a lane */
  AR_TJ_DONE,        /* ran all its iterations */
  AR_TJ_FAILED,      /* an error ended it (others keep running) */
  AR_TJ_CANCELLED,   /* ar_runner_cancel */
  AR_TJ_STOPPED      /* the runner stopped (checkpointed when started) */
} ar_tjob_state;

const char *ar_tjob_state_name(ar_tjob_state s);
static inline bool ar_tjob_ended(ar_tjob_state s) { return s >= AR_TJ_DONE; }

/* A job's progress as the runner last measured it: what `accelrt ps`, its
 * JSON and the service's progress log lines show, and what a metrics
 * exporter reads.  The runner updates it after every iteration (a few
 * assignments, under the lock it already holds), at admission and at the
 * end; read it with ar_runner_progress (any thread) or in the result an
 * event carries.  Unknown figures are NAN. */
typedef struct ar_tjob_progress {
  uint64_t iteration;   /* iterations done, a resumed job's earlier ones included */
  uint64_t iterations;  /* iterations it runs in all */
  double loss;          /* the last iteration's training loss */
  /* Over the last 5 to 10 s of wall-clock time (since its first iteration
   * before that), so time spent waiting for the other jobs of its lane
   * counts: what the job gets from the shared device.  Known from its
   * second iteration on; samples_per_s only for jobs that report samples
   * (ar_tjob_fns.progress). */
  double samples_per_s;
  double eta_s;         /* seconds to its last iteration at that pace */
  size_t persistent_bytes; /* its block while admitted, else 0 */
  size_t lane_bytes;    /* its lane's size while admitted (the lane's other
                           jobs share those bytes), else 0 */
} ar_tjob_progress;

typedef struct ar_tjob_result {
  ar_tjob_state state;
  double arrival_s, admit_s, first_s, end_s; /* runner clock; -1 unset */
  double queue_s, jct_s;
  uint64_t iterations; /* run here (not counting iterations_before) */
  uint32_t lane;       /* the lane it ran in; 0 when never admitted */
  uint64_t switches;   /* iterations that followed another job's in its lane */
  double switch_ms_p50, switch_ms_p99;
  double busy_s;       /* sum of its iteration times */
  double device_s;     /* the part of busy_s charged to the policy: less the
                          waits it reported (ar_tjob_fns.idle_s) */
  ar_tjob_progress progress;
  char reason[256];    /* why it waits (queued) */
  char error[AR_ERR_MAX + 64]; /* failed: why */
} ar_tjob_result;

typedef struct ar_runner ar_runner;

/* Called on every change of a job's state (arrived, admitted, reason
 * changed, ended), from the scheduler thread with the runner's lock held:
 * it must not call ar_runner_* functions. */
typedef void (*ar_runner_event_fn)(void *ctx, size_t job,
                                    const ar_tjob_result *r);

typedef struct ar_runner_opts {
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
  bool service;        /* run until ar_runner_stop, not until all ended */
  const char *out_dir; /* summary.json, metrics.jsonl, trace.json; NULL */
  const ar_fs *fs;     /* borrowed: opens out_dir's files; NULL: directly */
  const char *trace_path; /* NULL: out_dir/trace.json */
  ar_runner_event_fn on_event; /* optional */
  void *ctx;
  /* Optional, as on_event (same thread, lock and ctx): a running job's
   * progress changed; called after its first iteration, then at most every
   * AR_RUNNER_PROGRESS_S seconds per job, so a slow callee costs the
   * scheduler little.  State changes come only through on_event. */
  ar_runner_event_fn on_progress;
} ar_runner_opts;
#define AR_RUNNER_PROGRESS_S 0.25

#define AR_RUNNER_OPTS_INIT                                                     \
  {"fifo", 0, "host", AR_DEVICE_OPTS_INIT, 0, 0, 0, 1, false, NULL, NULL, NULL, NULL, NULL, \
   NULL}

/* Opens the device once, the lane handles (ar_device_open_lane where the
 * backend has queues; host devices with their share of the threads on the
 * host), sizes the capacity, carves it with one ar_device_alloc and makes
 * the lanes handle.  AR_INVALID / AR_NOMEM /
 * AR_RANGE / device statuses, with what to set in err. */
ar_status ar_runner_create(const ar_runner_opts *opts, ar_runner **out,
                            ar_err *err);

/* The lanes' capacity in bytes and the device's name ("host", "cuda:0"). */
size_t ar_runner_capacity(const ar_runner *r);
const char *ar_runner_device_name(const ar_runner *r);
/* The device the runner opened (borrowed; the one allocation of the arena
 * is its only one) and, in *lane_handles, how many lane handles it has. */
ar_device *ar_runner_device(ar_runner *r, int *lane_handles);
/* Lane handle i (borrowed), or NULL out of range. */
ar_device *ar_runner_lane_handle(ar_runner *r, int i);
/* Closes every job still held, frees everything.  NULL is a no-op. */
void ar_runner_destroy(ar_runner *r);

/* Adds a job; *index (may be NULL) is its number, from 0.  On failure the
 * job stays the caller's.  AR_INVALID (incomplete table, zero iterations),
 * AR_NOMEM.  A job that can never fit fails alone when it arrives. */
ar_status ar_runner_add(ar_runner *r, const ar_tjob_desc *d, size_t *index,
                         ar_err *err);
/* Cancels a job at its next iteration boundary.  AR_OK, AR_NOTFOUND,
 * AR_STATE (already ended). */
ar_status ar_runner_cancel(ar_runner *r, size_t index);
/* Asks the run to end: no new iteration starts; started jobs are finished
 * as interrupted (their checkpoint written), the others closed. */
void ar_runner_stop(ar_runner *r);
/* Runs until every job ended (or, in service mode, until stopped).
 * AR_OK, or the first runner-level failure (a job's failure is only in
 * its result). */
ar_status ar_runner_run(ar_runner *r, ar_err *err);

size_t ar_runner_count(ar_runner *r);
ar_status ar_runner_result(ar_runner *r, size_t index, ar_tjob_result *out);
/* A job's progress (a copy, consistent: taken under the runner's lock).
 * Thread-safe.  AR_OK, AR_NOTFOUND. */
ar_status ar_runner_progress(ar_runner *r, size_t index, ar_tjob_progress *out);
/* Seconds since ar_runner_run started (0 before). */
double ar_runner_now(ar_runner *r);

/* Run-level figures (filled at the end of ar_runner_run). */
typedef struct ar_runner_summary {
  const char *policy;
  double makespan_s, avg_jct_s, p95_jct_s, avg_queue_s;
  double switch_ms_p50, switch_ms_p99;
  uint64_t switches;
  size_t max_memory_bytes, capacity_bytes;
  double busy_fraction;
  uint64_t defrags, defrag_bytes_moved;
  size_t jobs, failed;
} ar_runner_summary;
void ar_runner_summary_get(ar_runner *r, ar_runner_summary *out);

/* Live aggregates while it runs, for an operator's metrics (the service's
 * --http endpoint): totals over every job, never one job's figures.  The
 * switch-latency histogram's upper bounds in seconds are
 * ar_runner_switch_bounds (ascending); switch_buckets[i] counts latencies
 * in (bounds[i-1], bounds[i]], the last one those above every bound. */
#define AR_RUNNER_SWITCH_BOUNDS 13
#define AR_RUNNER_STATS_LANES 64
extern const double ar_runner_switch_bounds[AR_RUNNER_SWITCH_BOUNDS];
typedef struct ar_runner_lane_stats {
  uint32_t id;
  size_t offset, bytes; /* its range of the arena */
  size_t jobs;          /* admitted jobs sharing it */
  bool running;         /* an iteration runs in it now */
} ar_runner_lane_stats;
typedef struct ar_runner_stats {
  double uptime_s; /* the runner's clock */
  size_t capacity_bytes, persistent_bytes, lane_bytes;
  size_t admitted, queued; /* jobs holding memory; jobs waiting for it */
  uint64_t iterations;     /* completed since the runner started */
  uint64_t samples;        /* trained in them (jobs with fns->samples) */
  uint64_t admission_waits; /* jobs that arrived and could not be admitted at once */
  uint64_t switches;
  double switch_sum_s;
  uint64_t switch_buckets[AR_RUNNER_SWITCH_BOUNDS + 1];
  uint64_t defrags;
  double busy_s; /* time during which at least one iteration ran */
  size_t lanes;  /* lanes that exist; the first AR_RUNNER_STATS_LANES in lane[] */
  ar_runner_lane_stats lane[AR_RUNNER_STATS_LANES];
} ar_runner_stats;
/* Fills *out under the runner's lock (a copy: no pointer into the runner).
 * Any thread; allocates nothing. */
void ar_runner_stats_get(ar_runner *r, ar_runner_stats *out);

/* Engine jobs for the runner (tenancy_run.c). */

/* What the lanes admit a job on, from the plan its ar_job_open computed:
 * *persistent is the persistent block with the host entries (a sampled
 * layer's tables, a graph job's datasets), held as long as the job;
 * *ephemeral is one iteration's peak.  The one admission figure: the
 * runner (ar_tenancy_open_job), a distributed worker joining a shared
 * device (distributed.share) and `accelrt check`'s table all take it from
 * here.  Any thread; allocates nothing. */
void ar_tenancy_admit_sizes(const ar_plan *plan, size_t *persistent, size_t *ephemeral);

/* Opens an engine job (ar_job_open) for `spec` and fills *d for the
 * runner (fns, plan sizes, iterations left, output dir, priority; arrival
 * is the caller's).  opts: resume, the job's fs (quiet is forced).
 * The spec must outlive the job.  Statuses of ar_job_open; AR_STATE when a
 * resumed job has no iteration left. */

ar_status ar_tenancy_open_job(const ar_spec *spec, const ar_run_opts *opts,
                               ar_tjob_desc *d, ar_err *err);
/* A job that only fails with `message` when started: a job whose data
 * could not be opened still appears, failed, in the run's records.
 * Strings are copied.  AR_NOMEM. */
ar_status ar_tenancy_failed_job(const char *name, const char *out_dir,
                                 const char *message, ar_tjob_desc *d);

/* The execution service (runtime/tenancy/service.c): `accelrt serve`.
 * Listens on socket_path (a Unix socket; the kernel's SO_PEERCRED says
 * who connects, never a claim in a message), keeps its journal in
 * state_dir, and runs the submitted jobs through the same runner as
 * ar_tenancy_run on `device` (opened once; its lanes get their own
 * handles) under `policy` with memory_bytes (or memory_fraction of the
 * free memory; both 0: all of the host's, or the CUDA default of 90% of
 * the GPU's).
 *
 * Least privilege: every path a job names is opened by a child process
 * that took the submitter's uid and groups (runtime/tenancy/broker.h), so
 * a job reads and writes exactly what its submitter could, and its outputs
 * belong to them; a server started by root then gives up every
 * capability.  A server that is not root serves only its own uid.  The
 * state folder must be the server's own (state.h) and is opened only
 * beneath its descriptor.  Every input is bounded by the limits below.
 * docs/service.md is the full description, with the wire protocol.
 *
 * Returns when SIGINT or SIGTERM arrives, after the running jobs wrote
 * their checkpoints; AR_STATE when another server holds state_dir,
 * AR_INVALID for a state folder or socket path it refuses.
 * Tests: tests/tenancy/service.sh, tests/tenancy/security.sh,
 * tests/tenancy/metrics.sh (--http). */
typedef struct ar_serve_opts {
  const char *state_dir;
  const char *socket_path;
  const char *device;  /* "auto", "host", "cuda:N" */
  const char *policy;  /* "fifo", "pack", "srtf", "fair", "priority" */
  uint64_t memory_bytes;
  double memory_fraction;
  int threads;            /* host threads in all; 0 = all cores */
  int request_timeout_ms; /* a whole request message must arrive in it */
  int max_conns_per_uid;  /* open connections of one uid; root and the
                             server's own uid are not limited */
  int max_queued;         /* jobs of one uid not ended yet (root: no limit) */
  int keep_ended;         /* ended jobs of one uid kept for ps and logs; the
                             ones that ended first are forgotten */
  uint64_t max_generated; /* bytes a job's data.generate may write */
  int64_t max_line;       /* longest line of a data file, bytes */
  /* NULL: none; else "ADDR:PORT" (or "PORT", on loopback) where operators
   * read aggregate metrics over HTTP (Prometheus text at /metrics, a
   * status page at /; docs/service.md).  Not authenticated: it shows no
   * job's name, id, user or path. */
  const char *http;
} ar_serve_opts;
#define AR_SERVE_OPTS_INIT                                                           \
  {NULL, NULL, "auto", "pack", 0, 0.0, 0, 10000, 8, 16, 100, (uint64_t)2 << 30,   \
   (int64_t)16 << 20, NULL}

/* Whether this build serves --http (libmicrohttpd found when configured). */
bool ar_serve_http_available(void);

/* The default state folder and socket for a server of this process's uid:
 * $ACCELRT_STATE / $ACCELRT_SOCKET when set; else for root /var/lib/accelrt
 * and /run/accelrt/accelrt.sock; else $XDG_STATE_HOME/accelrt (or
 * ~/.local/state/accelrt) and $XDG_RUNTIME_DIR/accelrt.sock.  Never a
 * predictable name in a folder everyone may write.  Either buffer may be
 * NULL.  AR_INVALID (with what to set) when no safe default exists. */
ar_status ar_serve_default_paths(char *state, size_t state_cap, char *socket,
                                 size_t socket_cap, ar_err *err);

ar_status ar_tenancy_serve(const ar_serve_opts *opts, ar_err *err);

/* ---- the client side: accelrt submit, ps, logs, cancel -------------------
 * One request over the service's socket and its replies (the protocol is
 * docs/service.md's; runtime/tenancy/client.c speaks it). */
typedef enum ar_client_op {
  AR_CLIENT_SUBMIT = 1,
  AR_CLIENT_PS,
  AR_CLIENT_LOGS,
  AR_CLIENT_CANCEL
} ar_client_op;
#define AR_CLIENT_MAX_SETS 64

typedef struct ar_client_request {
  ar_client_op op;
  uint64_t id;                   /* logs, cancel */
  bool follow;                   /* logs: until the job ends */
  const char *yaml;              /* submit: the job file's text, yaml_len bytes */
  size_t yaml_len;
  const char *file, *base, *cwd; /* submit: the file (for messages), the folders
                                    its data paths and output.dir resolve in */
  const char *const *sets;       /* submit: KEY=VALUE overrides */
  int n_sets;                    /* at most AR_CLIENT_MAX_SETS */
  bool keep_generated;           /* submit: keep data.generate's files */
  bool json;                     /* ps, logs: the JSON forms (protocol 3) */
} ar_client_request;

/* Receives the text the server sends: each chunk of a log, then the text
 * of its final "ok" (a job id, the ps table, a confirmation). */
typedef void (*ar_client_text_fn)(void *ctx, const char *text, size_t n);

/* Connects to socket_path, sends req and reads the replies until the
 * server ends the exchange, passing their text to on_text (may be NULL).
 * AR_OK when the server did what was asked; AR_STATE with the server's own
 * words in err when it refused (a job-file error, a limit, "no job N of
 * yours"); AR_IO when it cannot be reached or the exchange broke, and
 * AR_INVALID for a bad request, with what to do in err.  Thread-safe.
 * Tests: tests/tenancy/service.sh and security.sh, through the CLI. */
ar_status ar_client_call(const char *socket_path, const ar_client_request *req,
                         ar_client_text_fn on_text, void *ctx, ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_TENANCY_H */
