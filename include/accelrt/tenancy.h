/*
 * accelrt tenancy: many jobs on one device through lanes (lanes/): the
 * multi-job runner behind `accelrt run` of a file with `jobs:`, and the
 * execution service (`accelrt serve`, `submit`, `ps`, `logs`, `cancel`).
 *
 * Tests: tests/tenancy/test_runner.c (the runner with synthetic jobs:
 * random mixes under every policy, failures, cancels, defragmentation byte
 * for byte), tests/tenancy/multi_job.sh (a `jobs:` file end to end),
 * tests/tenancy/service.sh (two users, a killed server, garbage).
 */
#ifndef ACCELRT_TENANCY_H
#define ACCELRT_TENANCY_H

#include "accelrt/runtime.h"

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
 * Tests: tests/tenancy/service.sh, tests/tenancy/security.sh. */
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
} ar_serve_opts;
#define AR_SERVE_OPTS_INIT                                                           \
  {NULL, NULL, "auto", "pack", 0, 0.0, 0, 10000, 8, 16, 100, (uint64_t)2 << 30,   \
   (int64_t)16 << 20}

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
