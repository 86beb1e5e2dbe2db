/*
 * accelrt runtime: runs a validated job end to end on one device — data,
 * model, training loop, evaluation, metrics, progress, checkpoints.
 *
 * Outputs in spec->output.dir:
 *   metrics.jsonl   one JSON object per evaluation
 *   trace.json      the run's timeline (Chrome trace format, trace.h):
 *                   iterations, their parts, per-layer or per-op detail
 *   summary.json    final metrics (names are a contract: samples_per_s, loss,
 *                   p_at_1, p_at_3, p_at_5, iterations, epochs, wall_s,
 *                   peak_rss_bytes, device, threads, ...)
 *   checkpoint.bin  parameters + optimizer state + data position, written
 *                   atomically (temp file, fsync, rename)
 *   job.resolved.yaml, run.json
 *                   what ran (spec->resolved) and how (version, build
 *                   features, command line, start time), when the caller
 *                   gives run_json (accelrt run does)
 *
 * Tests: tests/engine/test_train.c (resume equals an uninterrupted run),
 * tests/e2e (the CLI on a small job).
 */
#ifndef ACCELRT_RUNTIME_H
#define ACCELRT_RUNTIME_H

#include "accelrt/base.h"
#include "accelrt/fs.h"
#include "accelrt/graph.h"
#include "accelrt/spec.h"
#include "accelrt/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ar_run_opts {
  bool resume;   /* continue from output.dir/checkpoint.bin */
  bool quiet;    /* no progress output */
  FILE *progress; /* where progress goes (default stderr) */
  /* Whose rights every file of the job is opened with (data, outputs,
   * checkpoints, generated data): NULL is this process's; the service
   * passes the submitter's (fs.h).  Borrowed; outlives the job. */
  const ar_fs *fs;
  int64_t max_line;       /* data files' longest line; 0: AR_READER_MAX_LINE */
  uint64_t max_generated; /* bytes data.generate may write; 0: no bound */
  /* Remove the files of a run already in output.dir (ar_run_outputs, and
   * nothing else) before the job starts: `accelrt run --overwrite`.  A
   * jobs: run clears the run's folder and each job's. */
  bool overwrite;
  /* run.json's text (borrowed): written with spec->resolved as
   * job.resolved.yaml into output.dir (atomically) when the job's records
   * start, also when resuming; NULL writes neither (the service, tests). */
  const char *run_json;
} ar_run_opts;
#define AR_RUN_OPTS_INIT {false, false, NULL, NULL, 0, 0, false, NULL}

/* The files a run writes into its output.dir, by name, NULL-terminated:
 * what opts.overwrite removes.  Generated data (output.dir/data/),
 * eval.json and a distributed run's oracle.tsv and trace.tsv are not among
 * them. */
extern const char *const ar_run_outputs[];
/* Whether dir holds a finished (or stopped) run: its summary.json, which a
 * run writes last, is there. */
bool ar_run_finished(const ar_fs *fs, const char *dir);
/* Removes dir's ar_run_outputs; missing ones are fine.  AR_IO naming the
 * file, AR_NOMEM. */
ar_status ar_run_clear_outputs(const ar_fs *fs, const char *dir, ar_err *err);
/* Writes dir/job.resolved.yaml (resolved; NULL: not written) and
 * dir/run.json (run_json) atomically, through fs (NULL: this process's
 * rights).  dir must exist.  AR_IO, AR_NOMEM. */
ar_status ar_run_describe(const ar_fs *fs, const char *dir, const char *resolved,
                          const char *run_json, ar_err *err);

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
 * other statuses with the reason in err.  Writes output.dir/trace.json
 * once the job has started, whatever the outcome (its recorder takes
 * ar_trace_opts_env's overrides; a malformed one is AR_INVALID before
 * anything runs). */
ar_status ar_run(const ar_spec *spec, const ar_run_opts *opts,
                 ar_summary *summary, ar_err *err);

/* A job's position, as checkpoints keep it. */
typedef struct ar_ckpt_state {
  int64_t iteration;     /* iterations done */
  int64_t epoch;         /* current epoch */
  int64_t rows_in_epoch; /* rows of the current epoch already consumed */
  int64_t samples;       /* samples trained so far */
  double train_s;        /* training seconds so far */
} ar_ckpt_state;

/* A flat JSON object (metrics.jsonl lines, summary.json): see below. */
typedef struct ar_json ar_json;

/* ---- one job, an iteration at a time ----
 *
 * ar_run is ar_job_open, ar_job_start, ar_job_step until ar_job_done,
 * ar_job_finish, ar_job_close.  Schedulers that interleave jobs on one
 * device (lanes/, runtime/tenancy) drive the same calls, so a job behaves
 * the same alone and shared.  The calls of one job must not run
 * concurrently with each other; different jobs may run in different
 * threads.  A job never installs signal handlers (ar_run does). */
typedef struct ar_job ar_job;

/* ---- a job as part of a distributed one (runtime/dist) ----
 *
 * A distributed job runs one ar_job on every MPI rank.  Each worker steps
 * its own with the hooks below around every layer, or every node of a
 * graph model (its parameters arrive,
 * its gradients leave) and the step left to the parameter servers; rank
 * 0, a server, does not step its job but records each iteration the
 * workers ran (ar_job_record) and evaluates, checkpoints and writes the
 * summary through the same calls as a job on its own. */

/* The parts of one training iteration a hook is called around. */
typedef enum ar_job_phase {
  AR_JOB_FORWARD = 0, /* a layer's forward pass */
  AR_JOB_LOSS,        /* the loss and its gradient (layer: the last one) */
  AR_JOB_BACKWARD     /* a layer's backward pass */
} ar_job_phase;

/* Callbacks of ar_job_step (each may be NULL).  They run on the thread
 * that calls ar_job_step, between the device calls of the iteration; a
 * status other than AR_OK ends the step with it (the hook's reason in the
 * err given to ar_job_step).  A chain model's layers go forward 0..n-1,
 * then the loss, then backward n-1..0.  A graph model (spec->graph) calls
 * them per node of its net instead, `layer` being the node: forward
 * 0..n-1 (the loss is its last node, no AR_JOB_LOSS), then backward
 * n-1..0 for the nodes that train (ar_net_node_trains). */
typedef struct ar_job_hooks {
  /* Before `phase` of `layer`.  Before AR_JOB_FORWARD the layer's
   * parameters must be in the model when it returns (a worker waits for
   * them here). */
  ar_status (*before)(void *ctx, ar_job_phase phase, int layer);
  /* After `phase` of `layer` was enqueued on the device (not waited for).
   * After AR_JOB_BACKWARD the layer's gradients are final (a worker sends
   * them here). */
  ar_status (*after)(void *ctx, ar_job_phase phase, int layer);
  /* Instead of the optimizer, once the last backward is done: the
   * parameters are updated elsewhere (parameter servers).  The job still
   * counts the step (the model's step, which numbers the sampled layers'
   * random streams and rebuilds). */
  ar_status (*step)(void *ctx);
  void *ctx;
} ar_job_hooks;

/* Where ar_job_opts.keys adds keys. */
typedef enum ar_job_output {
  AR_JOB_OUT_ITERATION = 0, /* a line of metrics.jsonl per recorded iteration */
  AR_JOB_OUT_SUMMARY        /* summary.json */
} ar_job_output;

typedef struct ar_job_opts {
  /* Data parallelism: the job reads every global batch of train.batch
   * rows (the same stream on every part) and computes its rows [R * part /
   * parts, R * (part + 1) / parts) of the R it got; the loss gradient is
   * divided by R, so that the parts' gradients sum to the batch mean.  Its
   * model holds ceil(train.batch / parts) rows.  A part does not check its
   * own loss (ar_job_record checks the batch's). */
  int part, parts;
  /* Rows the model holds instead (0: as above): a server keeping only a
   * shard of the parameters takes 1. */
  int32_t model_rows;
  /* The job keeps the records: makes output.dir, opens the test split,
   * evaluates, writes metrics.jsonl, checkpoints and summary.json, shows
   * progress.  false for a distributed worker and the servers but rank 0:
   * then ar_job_evaluate, ar_job_checkpoint and ar_job_finish refuse. */
  bool records;
  /* The iterations run elsewhere (the servers of a distributed job): the
   * job reads no training batch (ar_job_step refuses) and takes each
   * iteration's result from ar_job_record.  Its metrics lines name their
   * kind ("iteration", "eval"), and its summary leaves out what describes
   * a model that computes (ephemeral and host bytes, the sampled layers'
   * statistics): its model only holds the parameters. */
  bool remote;
  const ar_job_hooks *hooks; /* copied; NULL: none */
  /* Adds the caller's keys to a recorded iteration's line or to the
   * summary (may be NULL); keys_ctx is its first argument. */
  void (*keys)(void *ctx, ar_job_output where, ar_json *j);
  void *keys_ctx;
  /* When the run began (ar_now()): the summary's wall_s counts from it;
   * 0: from ar_job_open. */
  double t0;
  /* Where the job records its timeline (borrowed; NULL: nowhere): each
   * step's iteration number, an iteration span (AR_TRACE_ITERATIONS) and
   * its parts (AR_TRACE_STEPS): batch, the forward and backward of each
   * layer or graph op and the loss (detail spans), the optimizer (or the
   * hooks' step), evaluation, checkpoint; table rebuilds of sampled
   * layers (AR_TRACE_LSH).  The job names those tracks.  Recording
   * allocates nothing.  On a device other than the host, a detailed
   * iteration waits for each layer (so its span is the layer's time). */
  ar_trace *trace;
} ar_job_opts;
#define AR_JOB_OPTS_INIT {0, 1, 0, true, false, NULL, NULL, NULL, 0.0, NULL}

/* The device options a job asks for: its train.threads (0: all cores) and
 * runtime.memory as the device arena's size. */
ar_device_opts ar_job_device_opts(const ar_spec *spec);

/* Phase 1, no device memory: makes output.dir (clearing it with
 * opts->overwrite, describing the run with opts->run_json), resolves or
 * generates the data, opens the readers, computes the exact memory plan.
 * With opts->resume and no checkpoint yet, the job starts from the
 * beginning and a warning says so (ar_job_resumed tells). */
ar_status ar_job_open(const ar_spec *spec, const ar_run_opts *opts,
                      ar_job **out, ar_err *err);
/* As ar_job_open, as a part of a larger run (jopts may be NULL: a job on
 * its own, as ar_job_open).  The spec must outlive the job. */
ar_status ar_job_open_ex(const ar_spec *spec, const ar_run_opts *opts, const ar_job_opts *jopts,
                         ar_job **out, ar_err *err);
/* Whether the job continues from a checkpoint (opts.resume, and one was
 * there). */
bool ar_job_resumed(const ar_job *j);
/* The plan computed by ar_job_open: persistent and ephemeral bytes. */
const ar_plan *ar_job_plan(const ar_job *j);
/* Phase 2: creates the model on dev (borrowed; outlives the job).  With
 * persistent and ephemeral non-NULL the model uses those device blocks
 * (plan sizes, 256-byte aligned) instead of allocating its own: lanes
 * carve them from one arena.  Initialises the parameters, or loads the
 * checkpoint when resuming, and opens metrics.jsonl. */
ar_status ar_job_start(ar_job *j, ar_device *dev, void *persistent,
                       void *ephemeral, ar_err *err);
/* Moves the job to new blocks between iterations (defragmentation): the
 * caller has already copied the persistent bytes to new_persistent (a
 * device copy); the ephemeral block holds nothing between iterations, so
 * only its address changes.  Either may be NULL to keep the old one. */
void ar_job_rebase(ar_job *j, void *new_persistent, void *new_ephemeral);
/* One training iteration, with the evaluation and checkpoint the spec
 * asks for at this iteration.  AR_OK; on failure (data, NaN loss) the
 * reason is in err and the job must only be finished or closed. */
ar_status ar_job_step(ar_job *j, ar_err *err);
bool ar_job_done(const ar_job *j);          /* all iterations run */
int64_t ar_job_iteration(const ar_job *j);  /* iterations done (a resumed
                                               job's from ar_job_open on) */
int64_t ar_job_total(const ar_job *j);      /* iterations the job runs */
/* The job's position: iterations done, epoch, rows of the epoch read,
 * samples, training seconds (borrowed, valid while the job lives). */
const ar_ckpt_state *ar_job_state(const ar_job *j);
/* What the spec asks for after iteration `iteration` (1-based):
 * train.eval_every and train.checkpoint_every, never after the last
 * iteration (ar_job_finish evaluates and checkpoints then).  ar_job_step
 * follows it; a distributed run's servers ask it to gather their shards
 * first. */
void ar_job_due(const ar_job *j, int64_t iteration, bool *eval, bool *checkpoint);
/* Evaluates the model on the test split (when there is one) and appends
 * the line to metrics.jsonl.  AR_STATE for a job without records. */
ar_status ar_job_evaluate(ar_job *j, ar_err *err);
/* Writes a checkpoint of the current state (between iterations).  AR_STATE
 * for a job without records. */
ar_status ar_job_checkpoint(ar_job *j, ar_err *err);
/* The mean training loss of the job's last iteration in this process (0
 * before its first), as its progress line shows it. */
double ar_job_last_loss(const ar_job *j);
/* A part's last step (ar_job_opts.parts): the summed losses of the rows
 * it computed (their count is ar_job_last_rows). */
double ar_job_last_loss_sum(const ar_job *j);
/* The rows this process computed in its last step (a part: its slice of
 * the global batch). */
int64_t ar_job_last_rows(const ar_job *j);
/* One iteration of a remote job (ar_job_opts.remote), run elsewhere. */
typedef struct ar_job_result {
  int64_t rows;                 /* rows of the global batch */
  int64_t epoch, rows_in_epoch; /* the data position after it */
  double loss;                  /* mean loss over those rows */
  double seconds;               /* its wall time */
} ar_job_result;
/* Counts it as ar_job_step counts its own (position, samples, training
 * time, the loss for the next evaluation line, progress) and appends its
 * line to metrics.jsonl: iteration, kind, train_loss and the keys of
 * ar_job_opts.keys.  AR_RANGE when the loss is not finite; AR_STATE for a
 * job that is not remote or not started; AR_IO. */
ar_status ar_job_record(ar_job *j, const ar_job_result *r, ar_err *err);
/* Continues a job that was opened without opts->resume from position st
 * (a checkpoint's, which the caller read: rank 0 of a distributed job),
 * after the caller put that checkpoint's parameters and optimizer step
 * into the model: the position is taken and checked against the training
 * data, and a job that computes rebuilds its sampled layers' tables and
 * seeks its training data there.  Between ar_job_start and the first
 * step.  Statuses of ar_checkpoint_check_data, the reader, the tables. */
ar_status ar_job_resume_at(ar_job *j, const ar_ckpt_state *st, ar_err *err);
/* Ends the job: the final evaluation when it ran to the end, the
 * checkpoint and summary.json (interrupted: true when stopped early).
 * Fills *summary when not NULL. */
ar_status ar_job_finish(ar_job *j, bool interrupted, ar_summary *summary,
                        ar_err *err);
/* Frees the job (and the model's own memory, not blocks given to
 * ar_job_start).  NULL is a no-op. */
void ar_job_close(ar_job *j);
/* The model, after ar_job_start (borrowed). */
ar_model *ar_job_model(ar_job *j);
/* A graph model's net (spec->graph), after ar_job_start (borrowed; NULL
 * for a chain model, whose ar_job_model is not NULL). */
struct ar_net *ar_job_net(ar_job *j);

/* ---- evaluating a checkpoint (accelrt eval) ---- */
/* One setting of the inference tables measured on the probe: K, L, the
 * candidates scored per point (budget), the share of probe points whose
 * exact top-1 was among them, the mean candidates scored and retrieved,
 * the cost per point in row dot products (scored + retrieved / 32 +
 * hashing), and whether the recall target was reached. */
typedef struct ar_lsh_try {
  int K, L;
  int64_t budget;
  double recall, candidates, retrieved, cost;
  bool reached;
} ar_lsh_try;
#define AR_EVAL_LSH_TRIES 32
#define AR_EVAL_LSH_RECALL 0.95 /* the default recall target */

/* accelrt eval's LSH inference settings; 0 everywhere: chosen. */
typedef struct ar_eval_opts {
  int lsh_K;          /* codes per table (else sparse.K, else chosen) */
  int lsh_L;          /* tables (else chosen from sparse.L x 1, 2, 4) */
  int64_t lsh_budget; /* candidates scored per point (else chosen) */
  double lsh_recall;  /* the choice's target, in (0, 1] */
  int64_t lsh_probe;  /* training points the choice measures */
} ar_eval_opts;

typedef struct ar_eval_report {
  int64_t points;        /* test points evaluated */
  char device[32];
  int threads;
  /* Every output neuron scored (exact). */
  double p_at[3], loss, seconds, samples_per_s;
  /* LSH inference: the output layer's candidates retrieved from its hash
   * tables (only when the output layer is sampled on this device). */
  bool lsh;
  double lsh_p_at[3], lsh_seconds, lsh_samples_per_s, lsh_active_mean;
  /* The inference tables (runtime/engine/lsh_infer.c): their own hash
   * functions over the output layer's rows, K codes and L tables, scoring
   * the first lsh_budget candidates of each point.  Unless set by hand,
   * K and the budget are chosen on lsh_probe_points training points as
   * the cheapest setting whose candidates hold the exact top-1 for
   * lsh_recall_target of them (lsh_reached: some setting did); each K
   * tried is in lsh_tried.  lsh_K_auto is training's K. */
  int lsh_K, lsh_K_auto, lsh_L;
  int64_t lsh_budget, lsh_probe_points;
  bool lsh_K_hand, lsh_L_hand, lsh_budget_hand, lsh_reached;
  double lsh_recall_target, lsh_probe_recall, lsh_probe_candidates;
  int lsh_n_tried;
  ar_lsh_try lsh_tried[AR_EVAL_LSH_TRIES];
  /* On the test points: the share whose exact top-1 was among the
   * candidates scored, and of their true labels, the share retrieved. */
  double lsh_recall_top1, lsh_recall_labels;
  /* A graph model (one class per point): top-1 and top-5 accuracy in
   * percent; p_at[0] is top-1 as well, p_at[1] and p_at[2] are -1. */
  bool single_label;
  double top1, top5;
} ar_eval_report;

/* Evaluates the parameters in checkpoint `ckpt` (written by a run of the
 * same model) on the job's test split, at most max_points points (0: all),
 * both ways when the output layer is sampled; each way is timed over
 * `reps` passes (>= 1) and the fastest pass reported.  opts (NULL: all
 * chosen) sets the inference tables by hand.  AR_NOTFOUND when the job
 * has no test split or the checkpoint is missing; AR_INVALID for opts out
 * of range (a K or L the hash family refuses, a recall outside (0, 1]). */
ar_status ar_eval_checkpoint(const ar_spec *spec, const char *ckpt, int64_t max_points,
                             int reps, const ar_eval_opts *opts, ar_eval_report *out,
                             ar_err *err);

/* accelrt export: the model of checkpoint `checkpoint` (NULL:
 * output.dir/checkpoint.bin) as an ONNX inference graph at `out` (written
 * atomically: a failure leaves no file), opset 13..17, the batch axis
 * symbolic.  test_dir (NULL: none): also writes there model.onnx and
 * test_data_set_0/input_0.pb, output_0.pb, the first evaluation batch as
 * the net sees it (after data.normalize) and the net's logits for it: an
 * ONNX backend-test folder (accelrt onnx-test).  version: the producer
 * version written.  A chain model (sparse or dense rows through dense
 * layers) exports as Gemm layers taking the rows as dense (batch,
 * features) f32; test_dir is for graph models.  AR_OK; AR_UNSUPPORTED (a
 * node with no ONNX form, named; test_dir with a chain model); AR_NOTFOUND (no checkpoint); the checkpoint's
 * statuses (another model's); AR_IO; AR_NOMEM. */
typedef struct ar_export_opts {
  const char *checkpoint, *out, *test_dir, *version;
  int opset;
} ar_export_opts;
ar_status ar_export_onnx(const ar_spec *spec, const ar_export_opts *o, ar_err *err);

/* Data a job will train on: generates data.generate into
 * output.dir/data/ when needed (reused when the same parameters and seed
 * were generated before) and returns the train and test paths (test may be
 * NULL), borrowed from the spec or owned by `*storage` (free with ar_free). */
ar_status ar_run_resolve_data(const ar_spec *spec, const ar_run_opts *opts,
                              const char **train, const char **test, char **storage,
                              ar_err *err);
/* The shape of the data a job will train on, as `accelrt run` will see it,
 * without writing anything: data files are scanned (every line checked,
 * opened with opts->fs, read only); data.generate runs the generator in
 * memory (ar_data_generate_stats gives what reading its files would).
 * *test is zeroed and *has_test false without a test split.  opts may be
 * NULL.  Statuses of ar_reader_open and ar_data_generate_stats; AR_PARSE
 * for a training file without points. */
ar_status ar_job_data_stats(const ar_spec *spec, const ar_run_opts *opts, ar_data_stats *train,
                            ar_data_stats *test, bool *has_test, ar_err *err);
/* The bytes a graph job's datasets hold in memory (idx decompressed, npy
 * mapped; with_test: the test split too, as a job that keeps records opens
 * it), which ar_job_open adds to its plan's host bytes and so to what the
 * lanes admit it on; computed reading only: files are opened read only and
 * data.generate's token set is sized without being written.  0 for a
 * chain or a graph over sparse input (read in batches).  Statuses of
 * ar_tdata_open_idx / ar_tdata_open_npy, with err. */
ar_status ar_job_data_bytes(const ar_spec *spec, bool with_test, size_t *out, ar_err *err);
/* The row bounds a job's plan and batches use: the larger max_nnz and
 * max_labels of train and test (test may be NULL), at least 1 each. */
void ar_job_row_bounds(const ar_data_stats *train, const ar_data_stats *test, int64_t *max_nnz,
                       int64_t *max_labels);

/* Removes what ar_run_resolve_data generated (nothing for data files the
 * job names): output.dir/data/ and its files. */
void ar_run_remove_generated(const ar_spec *spec, const ar_fs *fs);

/* ---- checkpoints ---- */

/* Writes the model's tensors and `st` to `path` atomically, through fs
 * (NULL: this process's rights).  AR_IO, AR_NOMEM; AR_UNSUPPORTED for a
 * model of more tensors than a checkpoint holds (65,536). */
ar_status ar_checkpoint_save(const ar_model *m, const ar_ckpt_state *st, const ar_fs *fs,
                             const char *path, ar_err *err);
/* Reads the position (iteration, epoch, samples, time) of a checkpoint,
 * without a model.  The file is verified as ar_checkpoint_load verifies
 * it, but for the shapes: the whole file's checksum before any field is
 * used, every header field within what a run can write (counts >= 0 and
 * at most 2^53, iterations <= samples, optimizer steps <= iterations,
 * train_s finite and >= 0), the tensor table within the file and nothing
 * after it.  AR_CORRUPT naming the file and the field when a check fails;
 * AR_NOTFOUND or AR_IO when it cannot be opened; AR_NOMEM.  st is written
 * only on success.  Reads the file once whole (in fixed chunks). */
ar_status ar_checkpoint_peek(const ar_fs *fs, const char *path, ar_ckpt_state *st,
                             ar_err *err);
/* Loads a checkpoint into a model of the same shape, after the checks of
 * ar_checkpoint_peek.  AR_CORRUPT when one fails (also when the file
 * changes while it is read); AR_SPEC when the tensors' names or sizes
 * differ from the model's (the message names the tensor); the model is
 * written to only when the file has passed every check, but is left
 * partly loaded when it changed in between (the caller then fails). */
ar_status ar_checkpoint_load(ar_model *m, ar_ckpt_state *st, const ar_fs *fs, const char *path,
                             ar_err *err);
/* Whether a checkpoint's data position is one a training file of `points`
 * points can give: samples == epoch * points + rows_in_epoch and
 * 0 <= rows_in_epoch <= points, as the engine keeps them.  AR_SPEC naming
 * `path` ("the training data's shape differs from the checkpoint's")
 * otherwise.  The iteration count is not involved, so a resumed job may
 * change train.epochs, train.iterations or train.threads. */
ar_status ar_checkpoint_check_data(const ar_ckpt_state *st, int64_t points, const char *path,
                                   ar_err *err);

/* ---- machine ---- */
/* Prints the hwloc topology summary (packages, cores, PUs, NUMA nodes,
 * caches) for `accelrt info`. */
void ar_topology_print(FILE *to);
/* Physical cores of this machine (hwloc), at least 1. */
int ar_topology_cores(void);
/* The threads a job runs with: train.threads when above 0, capped at the
 * CPUs this process may use, else the default of ar_host_cpus
 * (OMP_NUM_THREADS, SLURM_CPUS_PER_TASK, the affinity mask, cpu.max). */
int ar_job_threads(const ar_spec *spec);

/* ---- progress ---- */
typedef struct ar_progress ar_progress;
/* total_iters 0 = unknown.  On a terminal: a bar redrawn in place; off a
 * terminal: one plain line every few seconds; quiet: nothing. */
ar_progress *ar_progress_create(FILE *to, bool quiet, int64_t total_iters);
/* After iteration iter (of the whole run, a resumed one's earlier ones
 * included), samples the run's samples so far.  The samples/s and ETA
 * shown are this process's pace since its first update ("--" until a
 * later one): a resumed run's earlier process does not enter them. */
void ar_progress_update(ar_progress *p, int64_t iter, int64_t epoch,
                        double loss, int64_t samples);
/* A point of a run: clock (seconds), iterations and samples so far. */
typedef struct ar_progress_mark {
  double t;
  int64_t iter, samples;
} ar_progress_mark;
/* The pace between two marks: samples per second, and the seconds left
 * to reach iteration total (0 = unknown total) at that pace.  Each is -1
 * when unknown (no iteration or no time between the marks, no total). */
void ar_progress_pace(const ar_progress_mark *from, const ar_progress_mark *now, int64_t total,
                      double *samples_per_s, double *eta_s);
void ar_progress_note(ar_progress *p, const char *line); /* a line that stays */
void ar_progress_finish(ar_progress *p);
void ar_progress_destroy(ar_progress *p);

/* ---- JSON output ---- */
/* Appends one object to metrics.jsonl; fields are given as pairs. */
ar_json *ar_json_begin(void);
void ar_json_num(ar_json *j, const char *key, double v);
void ar_json_int(ar_json *j, const char *key, int64_t v);
void ar_json_str(ar_json *j, const char *key, const char *v);
void ar_json_bool(ar_json *j, const char *key, bool v);
/* Finishes the object and returns its text (owned by j until destroy). */
const char *ar_json_end(ar_json *j);
void ar_json_destroy(ar_json *j);
/* ar_fs_write_atomic and ar_fs_mkdirs with this process's rights. */
ar_status ar_write_file_atomic(const char *path, const void *data, size_t len,
                               ar_err *err);
ar_status ar_mkdirs(const char *path, ar_err *err);
/* --resume: keeps the lines of the file at `path` whose iteration (the
 * number member `key` of a JSON-lines object, or with key NULL the number
 * that starts a tab-separated line) is at most upto, and the lines without
 * one, so that iterations rerun after a checkpoint are not logged twice.
 * A missing file is fine; the file is read without following a link. */
ar_status ar_trim_lines(const ar_fs *fs, const char *path, int64_t upto, const char *key,
                        ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_RUNTIME_H */
