/*
 * accelrt runtime: runs a validated job end to end on one device — data,
 * model, training loop, evaluation, metrics, progress, checkpoints.
 *
 * Outputs in spec->output.dir:
 *   metrics.jsonl   one JSON object per evaluation
 *   summary.json    final metrics (names are a contract: samples_per_s, loss,
 *                   p_at_1, p_at_3, p_at_5, iterations, epochs, wall_s,
 *                   peak_rss_bytes, device, threads, ...)
 *   checkpoint.bin  parameters + optimizer state + data position, written
 *                   atomically (temp file, fsync, rename)
 *
 * Tests: tests/engine/test_train.c (resume equals an uninterrupted run),
 * tests/e2e (the CLI on a small job).
 */
#ifndef ACCELRT_RUNTIME_H
#define ACCELRT_RUNTIME_H

#include "accelrt/base.h"
#include "accelrt/graph.h"
#include "accelrt/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ar_run_opts {
  bool resume;   /* continue from output.dir/checkpoint.bin */
  bool quiet;    /* no progress output */
  FILE *progress; /* where progress goes (default stderr) */
} ar_run_opts;
#define AR_RUN_OPTS_INIT {false, false, NULL}

/* Final figures of a run (also written to summary.json). */
typedef struct ar_summary {
  double samples_per_s, wall_s, train_s;
  double loss, train_loss;
  double p_at[3]; /* percent, test split; -1 when there is no test split */
  int64_t iterations, samples;
  double epochs_done; /* samples / training points */
  int64_t peak_rss_bytes;
  int threads;
  char device[32];
  bool interrupted;
} ar_summary;

/* Runs the job.  AR_OK on success (summary filled when not NULL);
 * AR_INTERRUPTED when SIGINT/SIGTERM stopped it (a checkpoint was written);
 * other statuses with the reason in err. */
ar_status ar_run(const ar_spec *spec, const ar_run_opts *opts,
                 ar_summary *summary, ar_err *err);

/* Data a job will train on: generates data.generate into
 * output.dir/data/ when needed (reused when the same parameters and seed
 * were generated before) and returns the train and test paths (test may be
 * NULL), borrowed from the spec or owned by `*storage` (free with ar_free). */
ar_status ar_run_resolve_data(const ar_spec *spec, const char **train,
                              const char **test, char **storage, ar_err *err);

/* ---- checkpoints ---- */
typedef struct ar_ckpt_state {
  int64_t iteration;     /* iterations done */
  int64_t epoch;         /* current epoch */
  int64_t rows_in_epoch; /* rows of the current epoch already consumed */
  int64_t samples;       /* samples trained so far */
  double train_s;        /* training seconds so far */
} ar_ckpt_state;

/* Writes the model's tensors and `st` to `path` atomically.  AR_IO. */
ar_status ar_checkpoint_save(const ar_model *m, const ar_ckpt_state *st,
                             const char *path, ar_err *err);
/* Loads a checkpoint into a model of the same shape.  AR_CORRUPT when the
 * checksum fails or the file is truncated; AR_SPEC when the shapes differ
 * from the job's (the message names the tensor). */
ar_status ar_checkpoint_load(ar_model *m, ar_ckpt_state *st, const char *path,
                             ar_err *err);

/* ---- machine ---- */
/* Prints the hwloc topology summary (packages, cores, PUs, NUMA nodes,
 * caches) for `accelrt info`. */
void ar_topology_print(FILE *to);
/* Physical cores of this machine (hwloc), at least 1. */
int ar_topology_cores(void);

/* ---- progress ---- */
typedef struct ar_progress ar_progress;
/* total_iters 0 = unknown.  On a terminal: a bar redrawn in place; off a
 * terminal: one plain line every few seconds; quiet: nothing. */
ar_progress *ar_progress_create(FILE *to, bool quiet, int64_t total_iters);
void ar_progress_update(ar_progress *p, int64_t iter, int64_t epoch,
                        double loss, double samples_per_s);
void ar_progress_note(ar_progress *p, const char *line); /* a line that stays */
void ar_progress_finish(ar_progress *p);
void ar_progress_destroy(ar_progress *p);

/* ---- JSON output ---- */
/* Appends one object to metrics.jsonl; fields are given as pairs. */
typedef struct ar_json ar_json;
ar_json *ar_json_begin(void);
void ar_json_num(ar_json *j, const char *key, double v);
void ar_json_int(ar_json *j, const char *key, int64_t v);
void ar_json_str(ar_json *j, const char *key, const char *v);
void ar_json_bool(ar_json *j, const char *key, bool v);
/* Finishes the object and returns its text (owned by j until destroy). */
const char *ar_json_end(ar_json *j);
void ar_json_destroy(ar_json *j);
/* Writes text to path atomically (temp, fsync, rename).  AR_IO. */
ar_status ar_write_file_atomic(const char *path, const void *data, size_t len,
                               ar_err *err);
/* mkdir -p.  AR_IO. */
ar_status ar_mkdirs(const char *path, ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_RUNTIME_H */
