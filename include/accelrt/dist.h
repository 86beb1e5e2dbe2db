/*
 * accelrt dist: synchronous parameter-server training over MPI with
 * TicTac-ordered transfers (commsched/).  `mpirun -np N accelrt run JOB`
 * with a `distributed:` section in the job: ranks 0..servers-1 are
 * parameter servers, the others workers.
 *
 * Each iteration every worker receives the current parameters (one
 * transfer per parameter tensor, from the server that owns it; layers are
 * sharded over the servers balanced by bytes), runs forward and backward
 * on its contiguous slice of the global batch (the same shuffled stream
 * and seed as a single-process run), scales its gradients by its share of
 * the rows (so their sum is the single-process mean gradient) and sends
 * them; each server sums them in worker order and applies the optimizer.
 * The order of the parameter transfers on each channel is enforced at the
 * server with commsched's gate: none, random, or TIC/TAC computed after
 * the first distributed.trace_iterations iterations (the warm-up, traced
 * and reported).  distributed.link paces each server's ports with a token
 * bucket (parameters at its out port, gradients at its in port).
 *
 * Devices: a worker computes on its distributed.workers[i].device (else
 * the job's device): host, cuda:N, or auto (a GPU when the build has CUDA
 * and one is present, else the host).  MPI moves host memory, so a worker
 * on a GPU stages: its parameters arrive in host buffers and are copied
 * into the model on the device when their layer is next (TicTac's
 * per-layer wait is kept), its gradients are copied out after their
 * layer's backward and sent from host buffers (runtime/dist/stage.c).
 * CPU and GPU workers may be mixed in one job; the servers keep one model
 * on the host.
 *
 * Sampled layers (SLIDE): a worker on a host computes a layer whose
 * `sparse` mode says so LSH-sampled (distributed.workers[i].sparse: dense
 * keeps a worker dense).  Such a layer's w and b travel as rows
 * (runtime/dist/rows.c): gradients as the rows the worker's batch touched,
 * parameters as the rows that changed since the last iteration (all of
 * them on the first iteration and after a resume); the server sums the
 * workers' rows and applies sparse Adam to their union, as single-process
 * SLIDE training does, or to every row when some worker computed the
 * layer dense.  The op graph's bytes of those transfers are set to the
 * means measured during warm-up.
 *
 * Every rank runs the job as one ar_job (runtime.h): a worker steps its
 * job on its part of each global batch, with the receives and sends as
 * hooks around each layer and the servers' update instead of its
 * optimizer; the servers' jobs do not step, and rank 0's records every
 * iteration, evaluates, checkpoints (the other servers' shards gathered
 * first) and writes the summary as a single-process run does.  Messages
 * go in pieces of at most INT_MAX bytes (ar_dist_opts.piece_bytes).
 *
 * Failures: communicators return errors (MPI_ERRORS_RETURN) and every wait
 * is a polling loop, so a rank that dies is reported by the ranks waiting
 * for it ("iteration 7: rank 2 (worker 1) sent no gradients for 30 s ...")
 * and, with mpirun --enable-recovery, relayed to every other rank; under a
 * plain mpirun the other ranks get SIGTERM from mpirun and are stopped by
 * it (or report the dead peer after the timeout).  The process exits
 * non-zero; checkpoints are written atomically, so the last one stays
 * valid.
 *
 * Stopping: SIGINT or SIGTERM to any rank during the iterations (scancel,
 * a time limit, Ctrl-C) does not break off a transfer; the ranks vote at
 * the end of every iteration, read the vote one iteration later, and all
 * stop after the same iteration; rank 0 writes the checkpoint and a
 * summary marked interrupted, and ar_dist_run returns AR_INTERRUPTED on
 * every rank.  Before the iterations a signal fails the set-up at once.
 *
 * Outputs (rank 0, output.dir): metrics.jsonl (one line per iteration with
 * makespan, busy times, E; evaluations as in single-process runs),
 * summary.json (the usual keys plus order, iteration_s_median, warmup_s,
 * efficiency_median, comm_busy_s_median, comp_busy_s_median, schedule_ms,
 * straggler_s_median), checkpoint.bin (the whole model, shards gathered),
 * oracle.tsv (the op times after warm-up, read by `accelrt simulate`),
 * trace.json (the timeline: one process per rank, every transfer on its
 * channel's track; written at the end of a run that succeeded, every
 * rank's events gathered by rank 0, docs/trace.md),
 * trace.tsv (every op and transfer of every worker, every iteration: the
 * worker's start/end, a transfer's emulated wire and link times; read by
 * `accelrt simulate --trace` to calibrate).  On --resume, metrics.jsonl and
 * trace.tsv lose the lines past the checkpoint's iteration before the
 * rerun appends its own.
 *
 * Tests: tests/dist/ (under mpiexec -n 3: receive order equals the
 * priority order, random orders differ, distributed equals single-process
 * training, a killed rank is reported without a hang, SIGTERM to one rank
 * stops every rank at one iteration with a checkpoint: stop.sh).
 */
#ifndef ACCELRT_DIST_H
#define ACCELRT_DIST_H

#include "accelrt/commsched.h"
#include "accelrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options of a distributed run beyond the job file. */
typedef struct ar_dist_opts {
  /* Seconds without progress after which a peer is declared dead; 0: the
   * environment variable ACCELRT_DIST_TIMEOUT, else 120. */
  double timeout_s;
  /* Fault injection for tests: rank fail_rank kills itself (SIGKILL) at
   * the start of iteration fail_iteration (1-based); -1: never.  The
   * environment variable ACCELRT_DIST_FAULT="RANK:ITERATION" sets it for
   * ar_dist_run. */
  int fail_rank;
  int64_t fail_iteration;
  /* Observers for tests (may be NULL), called on the calling rank:
   * on_recv_order on every worker after each iteration with the transfer
   * ids in the order their server posted them (per worker, all servers'
   * transfers interleaved as probed); on_schedule on every rank when the
   * fixed schedule (tic, tac or a file) is set. */
  void (*on_recv_order)(void *ctx, int64_t iteration, const uint32_t *transfers,
                        size_t n);
  void (*on_schedule)(void *ctx, const ar_commsched_schedule *s);
  void *ctx;
  /* On every worker after each iteration: the bytes of each transfer's
   * parameter message received and gradient message sent (rows tensors
   * vary; the others are their dense size). */
  void (*on_bytes)(void *ctx, int64_t iteration, const uint64_t *param_bytes,
                   const uint64_t *grad_bytes, size_t n);
  /* This rank, when it is a worker, stages its parameters and gradients
   * through host buffers as a GPU worker does (received into host memory,
   * copied into the model with copy_in before the layer that needs them,
   * copied out after its backward and sent from host memory), even on
   * the host: the staging path of GPU workers tested on a CPU.  A worker
   * on a CUDA device always stages.  The environment variable
   * ACCELRT_DIST_STAGE=1 sets it for ar_dist_run. */
  bool stage;
  /* Bytes per piece of a message: an MPI count is an int, so every
   * message goes in pieces of at most this many bytes (the pieces of one
   * keep their order: MPI's non-overtaking rule).  0: the environment
   * variable ACCELRT_DIST_PIECE, else INT_MAX rounded down to 64 bytes, so
   * that messages under 2 GiB are one piece; tests set a few KiB. */
  size_t piece_bytes;
  /* (may be NULL) Called on every rank whose run ends with a status other
   * than AR_OK (a stop, an error), with err's message, before the ranks'
   * last barrier: a line written here is out before any rank exits (under
   * mpiexec the first rank to exit non-zero gets the others killed). */
  void (*on_end)(void *ctx, ar_status st, const ar_err *err);
} ar_dist_opts;

#define AR_DIST_OPTS_INIT {0.0, -1, -1, NULL, NULL, NULL, NULL, false, 0, NULL}

/* Runs spec (distributed.enabled) as this MPI rank's part of the job.
 * Initialises MPI when it is not initialised yet and then finalises it
 * (on success; after a failure MPI is left as is, since finalising with a
 * dead peer can hang: the process should exit).  Before returning, the
 * ranks meet at a last barrier (dopts->on_end, if set, runs just before
 * it); a rank that does not come (dead) is waited for a bounded time.  Rank 0 writes the
 * outputs and fills *summary (other ranks leave it untouched).  AR_OK;
 * AR_INTERRUPTED when a signal stopped the ranks together (checkpoint
 * written; MPI finalised, as all ranks agreed); or another status with
 * the reason (naming the rank and iteration of a dead peer) in err. */
ar_status ar_dist_run(const ar_spec *spec, const ar_run_opts *opts,
                      ar_summary *summary, ar_err *err);
/* As ar_dist_run with options (dopts may be NULL: defaults). */
ar_status ar_dist_run_ex(const ar_spec *spec, const ar_run_opts *opts,
                         const ar_dist_opts *dopts, ar_summary *summary,
                         ar_err *err);

/* The workers' op graph of a job for commsched (sealed; caller destroys):
 * one recv per parameter tensor (layer l's w is transfer 2l, its b 2l+1,
 * named "<layer>.w"/"<layer>.b", channel = its server, layers sharded
 * over `servers` balanced by bytes), a forward and a backward op per
 * layer and the loss, with placeholder times (the runtime's oracle or
 * `accelrt simulate` sets them).  The runtime schedules exactly this
 * graph.  AR_OK, AR_INVALID, AR_NOMEM. */
ar_status ar_dist_op_graph(const ar_spec *spec, int servers,
                           ar_commsched_graph **out, ar_err *err);
/* The same for a graph model (its net, built: include/accelrt/net.h), from
 * the model's real DAG (sealed; caller destroys):
 *   ops 0..P-1: recv of each trainable parameter, in ar_net_params order
 *     (the transfer ids), each on the server with the fewest bytes so far,
 *     largest parameters first (ties: lower id, lower server);
 *   ops P..P+N-1: fwd of node i (list order);
 *   then bwd of each node that trains, in backward order (last node
 *     first).
 * Edges: recv p -> fwd of every node reading p, and -> bwd of the node
 * after whose backward p's gradient is final (its first reader: the
 * simulator's "gradient ready"); fwd of a producer -> fwd of its
 * consumers; fwd i -> bwd i; bwd j -> bwd i for every training node j
 * that reads an output of i; and the worker's execution order (one CPU,
 * the forward in ar_net_forward_order, the backward in list order last
 * first): fwd of each node -> fwd of the next in that order, the last fwd
 * -> every bwd, bwd of each training node -> bwd of the next one down, so
 * parallel branches follow one another as they run.  fwd and
 * bwd (room for the nodes; may be NULL) get each node's op ids
 * (AR_COMMSCHED_NONE: a node that does not train has no bwd). */
struct ar_net;
ar_status ar_dist_net_op_graph(const struct ar_net *net, int servers, ar_commsched_graph **out,
                               ar_commsched_op *fwd, ar_commsched_op *bwd, ar_err *err);

/* Reads a time oracle (output.dir/oracle.tsv of a distributed run): each
 * compute op of g named there gets its time; *set counts them.  AR_IO,
 * AR_PARSE ("FILE:LINE: error: ..."), AR_INVALID. */
ar_status ar_dist_read_oracle(const char *path, ar_commsched_graph *g, int *set,
                              ar_err *err);
/* Calibrates g from a run's trace (output.dir/trace.tsv) with commsched's
 * calibration (median compute times after warm-up, the fitted message
 * cost in *out).  AR_IO, AR_PARSE, AR_NOMEM.  Tests: tests/dist/cli.sh
 * (accelrt simulate --trace), tests/commsched/test_calibrate.c. */
ar_status ar_dist_read_trace(const char *path, ar_commsched_graph *g,
                             ar_commsched_calib_result *out, ar_err *err);

/* The op ids of that graph for a model of n layers, the one statement of
 * its layout: transfers first (w of layer l is 2l, its b 2l+1), then the
 * forward ops in layer order, the loss, and the backward ops from the last
 * layer down. */
static inline ar_commsched_op ar_dist_op_recv_w(int l) { return (ar_commsched_op)(2 * l); }
static inline ar_commsched_op ar_dist_op_recv_b(int l) { return (ar_commsched_op)(2 * l + 1); }
static inline ar_commsched_op ar_dist_op_fwd(int n, int l) { return (ar_commsched_op)(2 * n + l); }
static inline ar_commsched_op ar_dist_op_loss(int n) { return (ar_commsched_op)(3 * n); }
static inline ar_commsched_op ar_dist_op_bwd(int n, int l) {
  return (ar_commsched_op)(3 * n + 1 + (n - 1 - l));
}

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_DIST_H */
