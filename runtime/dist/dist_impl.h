/*
 * runtime/dist private header: the state one MPI rank holds while it runs
 * its part of a parameter-server job (ar_dist_run), shared by the files of
 * this folder:
 *
 *   dist_run.c   set-up (MPI, roles, shards, this rank's ar_job), the
 *                iteration loop, resume, teardown;
 *   transport.c  clock, waiting (abort channel, signals, dead-peer
 *                timeout), MPI error text, messages in pieces;
 *   opgraph.c    the workers' op graph for commsched, the schedule
 *                (tracing -> oracle -> TIC/TAC wizard, schedule files);
 *   server.c     one server iteration: gated, paced parameter sends,
 *                gradient receives, the optimizer;
 *   worker.c     one worker iteration: its job's step with the receives
 *                and sends as hooks per chain layer or per graph node,
 *                the report to rank 0;
 *   report.c     rank 0: the iteration reports, TicTac's metrics, the
 *                trace, the distributed keys of the job's metrics lines
 *                and summary; the shards gathered for its checkpoints;
 *   rows.c       the rows messages of sampled layers' tensors;
 *   stage.c      a worker whose device memory MPI cannot read (CUDA):
 *                host staging of its parameters and gradients;
 *   share.c      distributed.share: a worker as a tenant of lanes;
 *   timeline.c   trace.json: each rank's spans and transfers, gathered
 *                by rank 0 at the end onto one clock;
 *   graph.c      graph models (spec->graph): a transfer per parameter
 *                tensor of the net, the op graph of its DAG, the per-node
 *                lists the worker's hooks use, batch norm's statistics;
 *   lowered.c    chains lowered onto the graph engine (spec->lowered):
 *                the net computes, the wire is the chain's.
 *
 * Every rank runs one ar_job (runtime/engine): the job reads the data,
 * holds the model and, on rank 0, evaluates, logs, checkpoints and writes
 * the summary.  A worker steps its job on its part of each global batch;
 * the servers do not step theirs (they sum gradients and apply the
 * optimizer to their shards) and rank 0 records each iteration in its.
 *
 * Roles: ranks 0..S-1 are servers, S..size-1 workers; worker w is rank
 * S + w.  Every parameter tensor (each chain layer's w and b; each
 * trainable tensor of a graph model's net, graph.c) is one transfer of
 * the commsched graph, owned by one server (a chain layer's two on the
 * same one; sharding balanced by bytes).  A layer that some worker computes
 * LSH-sampled is sampled in the servers' model too (its sparse Adam state)
 * and its tensors travel as rows (rows.c) to and from every worker.  Three duplicated communicators keep the traffic apart so that
 * a worker can probe parameters with MPI_ANY_TAG and see them exactly in
 * the order its server posted them (MPI's non-overtaking rule holds for
 * matched probes): cparam (server -> worker parameters, tag = transfer),
 * cgrad (worker -> server gradients, tag = transfer) and cctl (reports,
 * aborts, broadcasts, gathers).
 *
 * Messages in pieces: an MPI count is an int, so a message goes as
 * ar__dist_pieces(largest size) pieces of at most c->piece bytes, piece k
 * carrying the message's bytes [k * piece, (k + 1) * piece) (none when it
 * is shorter); both sides know the largest size (a tensor's bytes, a rows
 * tensor's wire), so they agree on the count.  The pieces of one message
 * share its source, tag and communicator, and MPI's non-overtaking rule
 * keeps them in order.  Below 2 GiB a message is one piece.
 *
 * Times: every span is seconds of CLOCK_REALTIME minus rank 0's clock at
 * start-up (broadcast), so the spans of different ranks are on one clock
 * on one machine and, across machines, off by the NTP skew only.
 */
#ifndef ACCELRT_DIST_IMPL_H
#define ACCELRT_DIST_IMPL_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "accelrt/commsched.h"
#include "accelrt/data.h"
#include "accelrt/dist.h"
#include "accelrt/runtime.h"

enum {
  AR__DIST_TAG_TRACE = 0,  /* cctl: a rank's trace events, at the end */
  AR__DIST_TAG_ABORT = 1,  /* cctl: int64 {iteration, failed rank, reporter} */
  AR__DIST_TAG_REPORT = 2, /* cctl: a worker's or a server's iteration report */
  AR__DIST_TAG_GATHER = 3  /* cctl: shards sent to rank 0 (base tag) */
};

/* One parameter tensor = one transfer (id = index in ar__dist.t). */
typedef struct ar__dist_tensor {
  char name[80];   /* "<layer>.w" / "<layer>.b" */
  int layer;
  bool bias;
  int64_t count;   /* floats */
  size_t bytes;
  int server;      /* owning server rank */
  float *p, *g;    /* in this rank's model: parameter, gradient (device
                      memory of the rank's device) */
  float *hp, *hg;  /* (count) a staged worker's host copies of p and g
                      (stage.c); NULL when the rank does not stage */
  float *s1, *s2;  /* optimizer state (may be NULL) */
  /* Tensors of a layer some worker samples travel as rows (rows.c). */
  bool rows;
  uint32_t nrows;  /* rows of the tensor: the layer's width */
  int64_t row_len; /* floats per row: the layer's inputs for w, 1 for b */
  size_t wire;     /* the largest message: bytes, or for rows the largest
                      rows message (ar__rows_wire) */
  int pieces;      /* pieces of each of its messages (ar__dist_pieces) */
  size_t slot;     /* its first piece's index in the per-piece arrays */
  uint8_t *msg;    /* (wire) server: this iteration's parameter rows;
                      worker: the parameters received, then its gradient */
  size_t msg_bytes;
  void *last;      /* servers, a rows layer's w: sparse Adam's row steps
                      (nrows x u64) in the model, gathered with w */
  int ntensor;     /* graph models: the parameter's tensor in the net
                      (ar_net_param.tensor); its layer is -1 */
} ar__dist_tensor;

/* Rows message flags and a view of one (rows.c). */
#define AR__ROWS_DENSE 1u  /* every row in order, no ids */
#define AR__ROWS_RESYNC 2u /* parameters: a full copy, not changes */
typedef struct ar__rows {
  uint32_t flags, n;
  const uint32_t *ids; /* (n); NULL when dense */
  const float *vals;   /* (n, row_len) */
} ar__rows;

/* A worker's report of one iteration, as doubles (one message): a head,
 * then the parts of ar__wrep_part at ar__wrep's offsets. */
enum {
  AR__WREP_ITER = 0,
  AR__WREP_ROWS,
  AR__WREP_LOSS_SUM,
  AR__WREP_EPOCH,
  AR__WREP_ROWS_IN_EPOCH,
  AR__WREP_T0,          /* began waiting for parameters */
  AR__WREP_HEAD
};
typedef enum ar__wrep_part {
  AR__WREP_OP_START = 0, /* (nops) when each op of the graph began */
  AR__WREP_OP_END,       /* (nops) when it ended */
  AR__WREP_READY,        /* (nt) when each transfer's gradient was ready */
  AR__WREP_ORDER,        /* (nt) transfer ids (as doubles) in probe order */
  AR__WREP_PARAM_BYTES,  /* (nt) bytes of each parameter message received */
  AR__WREP_GRAD_BYTES,   /* (nt) bytes of each gradient message sent */
  AR__WREP_PARTS         /* (its offset is the report's length) */
} ar__wrep_part;
/* A server's report: {iteration, start, update start, update end}, then
 * the parts of ar__srep_part, each W x nt (worker-major), NaN where not
 * its transfer; the update parts use their first nt entries, one per
 * tensor. */
enum {
  AR__SREP_ITER = 0,
  AR__SREP_START,
  AR__SREP_UPD0,
  AR__SREP_UPD1,
  AR__SREP_HEAD
};
typedef enum ar__srep_part {
  AR__SREP_SEND_START = 0, /* bytes on the (emulated) wire */
  AR__SREP_ARRIVE,         /* at the worker: the emulated arrival, or the
                              post time without link emulation */
  AR__SREP_DELIVERED,      /* gradient at the server */
  AR__SREP_UPD_START,      /* (nt used) when the update of each own unit
                              (a graph tensor, a chain layer at its w, a
                              rows layer at its w) began, NaN for others */
  AR__SREP_UPD_END,        /* (nt used) when it ended */
  AR__SREP_PARTS
} ar__srep_part;

/* Per-iteration figures kept by rank 0 for the summary. */
typedef struct ar__dist_iter_stat {
  double makespan, comm, comp, eff, straggler, wall;
  int eff_defined;
  bool warm; /* a traced (warm-up) iteration */
  /* Bytes of the rows tensors per worker (mean over workers): parameters
   * received, gradients sent. */
  double rows_param, rows_grad;
} ar__dist_iter_stat;

typedef struct ar__share ar__share;

#define AR__DIST_DEV_DESC 48 /* bytes of a worker's device description */

typedef struct ar__dist {
  const ar_spec *spec;
  ar_spec wspec;          /* this rank's copy (its job's spec): its device,
                             threads and layer modes */
  ar_dist_opts o;
  ar_err *err;
  int rank, size, S, W;   /* W = size - S */
  int local_index, local_count; /* this rank among its machine's ranks */
  bool server;
  int widx;               /* worker index, -1 on servers */
  MPI_Comm cparam, cgrad, cctl;
  double clock0;          /* rank 0's CLOCK_REALTIME at start */

  /* A graph model (spec->graph, graph.c): every parameter tensor of its
   * net is a transfer; the hooks are per node. */
  bool graph;
  /* A chain lowered onto the graph engine (spec->lowered, lowered.c): the
   * net computes, the transfers, op graph and hooks are the chain's;
   * graph is false. */
  bool lowered;
  struct ar_net *net;
  int nnodes;
  int first_node;         /* the node whose forward runs first
                             (ar_net_forward_order) */
  int *need_at, *need;    /* (nnodes + 1, nt) per node, CSR: the transfers
                             its forward waits for (first readers) */
  int *ready_at, *ready;  /* (nnodes + 1, nt) per node: the gradients final
                             after its backward */
  ar_job *job;            /* this rank's part of the job (its model, data,
                             and on rank 0 the records) */
  bool resumed;           /* the job continues from rank 0's checkpoint
                             (--resume, and there was one) */
  ar_job_hooks hooks;     /* a worker's, around each layer (graph: node) of
                             its step */
  double wall0;           /* when ar_dist_run began */
  int64_t iter;           /* iterations done */
  size_t piece;           /* bytes per piece of a message */
  size_t nslots;          /* pieces of one message of every tensor */
  uint32_t *slot_t;       /* (nslots) the tensor of a piece */
  ar_device *dev;
  char dev_name[32];      /* workers: the device they compute on ("host",
                             "cuda:N"); servers: "host" */
  bool staged;            /* a worker staging through host buffers */
  void *stage;            /* (stage_bytes) the staged tensors' hp and hg */
  size_t stage_bytes;
  ar_model *model;
  /* What each rank computes sampled: smask[rank * n_layers + l] (servers:
   * whether any worker samples l, which makes it a rows layer). */
  uint8_t *smask;         /* (size, n_layers) */
  ar_layer_spec *wlayers; /* wspec's layers: the modes this rank runs */
  char *wdesc;            /* (size, AR__DIST_DEV_DESC) each worker's device,
                             "host", "cuda:0", "host (staged)"; "" for a
                             server */
  int nt;                 /* transfers = 2 x layers (graph: parameters) */
  ar__dist_tensor *t;     /* (nt) */

  int64_t total;          /* iterations the job runs */

  /* The op graph and the schedule (opgraph.c). */
  ar_commsched_graph *g;
  ar_commsched_op *fwd, *bwd; /* (n_layers; graph: nodes, bwd NONE for a
                                 node that does not train) */
  ar_commsched_op loss_op;
  size_t nops;
  ar_commsched_oracle *oracle;  /* rank 0, during the traced iterations */
  ar_commsched_schedule *sched; /* tic/tac/file: fixed after warm-up */
  ar_commsched_order order;     /* the order in force after warm-up */
  bool from_file;               /* the schedule came from schedule_file */
  int64_t warmup;               /* iterations traced before the schedule */
  int64_t first_iter;           /* the first iteration this run executes */
  double schedule_ms;

  /* Server state (server.c).  Iterations overlap: a tensor updated in
   * iteration i is offered for i + 1 at once, so the send side of two
   * iterations is live together; what it keeps per iteration is doubled
   * and indexed by the iteration's parity (gates, send_start, arrive,
   * sendleft, sent). */
  ar_commsched_gate *gates[2];
  ar_commsched_pacer *out_pacer, *in_pacer; /* NULL without link emulation */
  float *gradbuf;         /* (W, own floats): each worker's gradients */
  size_t *gradoff;        /* (nt) offset of a tensor in one worker's part */
  size_t own_floats;
  MPI_Request *sreq, *rreq; /* (W x nslots) per piece */
  int *sleft, *rleft;     /* (W x nt) pieces of a message not completed */
  size_t *rbytes;         /* (W x nt) bytes of a gradient received */
  double *send_start, *arrive; /* (2, W x nt) per parity */
  double *delivered;      /* (W x nt) */
  uint32_t *pend_w, *pend_t; /* (2 W x nt) FIFO of paced sends not posted */
  double *pend_at;
  uint8_t *pend_p;        /* (2 W x nt) the parity of each */
  size_t pend_head, pend_tail;
  uint8_t *spar;          /* (W x nt) the parity of the send posted */
  size_t sent[2];         /* per parity: parameter sends completed */
  size_t expect;          /* messages each way per iteration */
  bool next_on;           /* the next iteration's sends have begun */
  size_t next_offered;    /* updq units offered to the next iteration */
  uint8_t *noffered;      /* (nt) graph: offered to the next iteration (a
                             node's tensors go together, see use) */
  bool vote_in;           /* stop_req completed, stop_any holds the vote */
  /* The next iteration's parameter sends completed during this one: their
   * trace spans, recorded when that iteration begins. */
  struct ar__dist_tl_pend *tl_pend; /* (W x nt) */
  size_t tl_npend;
  uint32_t *tl_next2;     /* (W) the next iteration's send places */
  uint8_t *gwire;         /* (W, own_wire) the workers' rows messages */
  size_t *wireoff;        /* (nt) offset of a rows tensor in one worker's part */
  size_t own_wire;
  MPI_Status *rstat;      /* (W x nslots) */
  /* Early updates (server.c): each own dense tensor is updated as soon as
   * every worker's gradient of it is in (a chain layer: both of its
   * tensors'), not after the iteration's last gradient. */
  int *gleft;             /* (nt) workers whose gradient has not come */
  int *sendleft;          /* (2, nt) per parity: workers whose parameter
                             send is not done */
  double *gdue;           /* (nt) the last (emulated) delivery of its gradient */
  uint32_t *use;          /* (nt) the op each tensor is first used by
                             (ar_commsched_graph_first_use): the out port
                             sends a worker an op's tensors in one turn */
  int *node_next;         /* (nt) own dense tensors: the next with the same
                             use, a ring (a tensor alone: itself) */
  uint32_t *updq;         /* (nt) FIFO of update units ready (a tensor; a
                             chain layer by its w) */
  size_t updq_head, updq_tail;
  double upd_lr;          /* graph: this iteration's learning rate */
  double upd0, upd1;      /* the first update's start, the last's end (clock) */
  double *upd_t0, *upd_t1; /* (nt) each unit's update: its start and end
                              (clock), NaN when it had none this iteration */
  double upd0_tl;         /* the first's start, ar_now() (the timeline) */
  struct ar_lsh_touched **dirty; /* (n_layers) own rows layers: rows changed
                                    since the workers last received them */
  bool resync;            /* the next parameters are a full copy */
  int64_t rows_dense_steps; /* rows layers updated densely (a dense worker) */
  /* Worker state (worker.c), per-iteration scratch made once. */
  double *w_arrival;      /* (nt) when each tensor was in */
  uint32_t *w_order_u;    /* (nt) the transfers in probe order */
  size_t w_norder;
  int *w_idx;             /* (nslots) which requests completed */
  uint64_t *w_bytes;      /* (2 nt) the bytes for o.on_bytes */
  double op_t0;           /* when the op in progress began */
  int *s_idx;             /* (W x nslots) server: completed requests, scratch */
  MPI_Request *preq;      /* (nslots) a piece's parameter receive or
                             gradient send */
  int *pmatched, *pleft;  /* (nt) pieces of the parameters matched, and
                             receives or sends not completed */
  size_t *pbytes;         /* (nt) bytes of the parameters received */
  double *report;         /* (report length) */
  size_t report_len;
  /* Rank 0 (report.c). */
  double *reports;        /* (W + S - 1, max report length) */
  size_t srep_len;
  MPI_Request *rep_req;   /* (W + S - 1) */
  int *rep_done;          /* (W + S - 1) scratch: which reports came */
  ar__dist_iter_stat *stats; /* (total) */
  ar__dist_iter_stat *cur;   /* the iteration being recorded */
  ar_commsched_span *spans;  /* scratch for the metrics */
  double *finish;            /* (W) */
  size_t rows_dense_bytes;   /* dense size of the rows tensors (0: none) */
  double *bytes_sum;         /* (nt) rows tensors' bytes in the traced */
  int64_t *bytes_n;          /* (nt) iterations, both directions */
  FILE *trace;             /* trace.tsv: every op and transfer (NULL: off) */
  char *oracle_path, *trace_path;

  /* Waiting (transport.c). */
  MPI_Request abort_req;
  int64_t abort_msg[3];
  double last_progress;
  double timeout_s;
  /* A poll sleeps at most until this time (0: no deadline): the server
   * sets it to the next paced send's due time. */
  double wake_at;
  /* Seconds this rank slept in polls, waiting for its peers: a shared
   * device's proxy job reports an iteration's part as not device time. */
  double idle_s;
  double linger_s; /* ACCELRT_DIST_LINGER (tests; dist_run.c) */
  /* distributed.share (share.c): this worker's device is shared with
   * other tenants' jobs through lanes; NULL otherwise. */
  ar__share *share;
  bool dev_borrowed; /* dev is a lane handle of share's runner */
  bool failed;       /* the run is ending with an error */
  /* The timeline (timeline.c): this rank's recorder, also its job's;
   * NULL when traces are off. */
  ar_trace *tl;
  ar_trace_opts tl_opts; /* its options: rank 0's */
  bool tl_det;       /* the iteration's transfers are recorded */
  const ar_commsched_schedule *tl_sched; /* the iteration's (priorities) */
  double tl_conv;    /* ar_now() - ar__dist_clock(), set each iteration */
  double tl_poll;    /* server: when the gradient receives were last tested */
  uint32_t *tl_order; /* server (W x nt): a parameter send's place among its
                         worker's this iteration; worker (nt): a parameter
                         receive's among its server's, then a gradient send's */
  uint32_t *tl_next, *tl_gnext; /* (channels) places given so far: the
                                   parameters', the gradients' */
  double *tl_t0;     /* worker (nt): when a receive was matched, then when
                        its gradient was posted */
  double *tl_infos;  /* rank 0 (size x 8): the ranks' figures at the end */
  /* Stopping on SIGINT/SIGTERM (dist_run.c): in the iteration loop a
   * signal no longer fails a wait; every rank votes at each iteration's
   * end (stop_req, the vote of the iteration before, is awaited one
   * iteration later), and all stop together after the iteration where
   * the vote says a rank saw one, rank 0 writing the checkpoint. */
  bool defer_stop;   /* a signal is handled at the vote, not in waits */
  bool stopped;      /* the ranks stopped on a signal, checkpoint written */
  MPI_Request stop_req;
  int stop_mine, stop_any;
} ar__dist;

/* ---- transport.c ---- */
double ar__dist_clock(const ar__dist *c);
/* The MPI error text of rc, "what failed" first.  Returns AR_IO. */
ar_status ar__dist_mpi_err(ar__dist *c, int rc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* One turn of a wait loop.  progressed: something completed since the
 * last call (resets the dead-peer timer); otherwise sleeps a little.
 * Fails, with a message naming `peer` and the iteration, when another
 * rank reported a failure, a signal arrived before the iteration loop
 * (in it, c->defer_stop: the ranks stop together at an iteration's end),
 * or nothing progressed for timeout_s while waiting for `what` from
 * `peer`. */
ar_status ar__dist_poll(ar__dist *c, bool progressed, int peer, const char *what);
void ar__dist_poll_reset(ar__dist *c);
/* Tells every other rank (but `failed`) that `failed` failed: best effort,
 * never blocks for long. */
void ar__dist_notify_failure(ar__dist *c, int failed);
/* Waits for one request with the poll rules. */
ar_status ar__dist_wait(ar__dist *c, MPI_Request *r, int peer, const char *what);
/* MPI_Ibcast of n items from rank 0 on cctl, waited with the poll rules. */
ar_status ar__dist_bcast(ar__dist *c, void *buf, int n, MPI_Datatype type,
                         const char *what);
/* The same for `bytes` bytes, in pieces. */
ar_status ar__dist_bcast_bytes(ar__dist *c, void *buf, size_t bytes, const char *what);
/* Pieces of a message of at most `bytes` bytes: at least 1. */
static inline int ar__dist_pieces(const ar__dist *c, size_t bytes) {
  return bytes <= c->piece ? 1 : (int)((bytes + c->piece - 1) / c->piece);
}
/* Posts the `pieces` pieces of a message at buf to or from `peer` (tag,
 * comm) into req[0..pieces): a send of `bytes` bytes, or a receive of at
 * most `bytes` (the message's largest size).  AR_IO with "<what> '<name>'
 * to/from rank <peer>" and MPI's reason. */
ar_status ar__dist_post(ar__dist *c, bool send, void *buf, size_t bytes, int pieces, int peer,
                        int tag, MPI_Comm comm, MPI_Request *req, const char *what,
                        const char *name);
/* n as an MPI count: AR_UNSUPPORTED naming `what` when it exceeds INT_MAX
 * (a message that is not sent in pieces). */
ar_status ar__dist_count(ar__dist *c, size_t n, const char *what, int *out);
void ar__dist_install_signals(void);
void ar__dist_restore_signals(void);

/* ---- opgraph.c ---- */
/* Items of size[0..n) to `servers` servers (chan): each to the one with
 * the fewest bytes so far (load, zeroed by the caller), largest first
 * (ties: lower id, lower server), the classic greedy balance; ord is
 * scratch of n. */
void ar__dist_shard(const size_t *size, int n, int servers, uint32_t *chan, int *ord,
                    size_t *load);
ar_status ar__dist_graph_build(ar__dist *c);
ar_commsched_order ar__dist_order_of(ar_order_kind k);
/* The schedule the servers enforce in iteration `iter` (1-based): NULL
 * (as ready) during warm-up for tic/tac and under none; a fresh random
 * schedule under random (owned by the caller: *owned is set). */
ar_status ar__dist_schedule_for(ar__dist *c, int64_t iter,
                                ar_commsched_schedule **out, bool *owned);
/* After the last traced iteration: rank 0 turns the oracle into op times,
 * broadcasts them, every rank computes the same TIC/TAC schedule.  Reads
 * the schedule file instead when it exists; writes it when it does not. */
ar_status ar__dist_schedule_setup(ar__dist *c);
/* At start-up: a schedule_file that exists is read on rank 0 and
 * broadcast (then no warm-up schedule is computed). */
ar_status ar__dist_schedule_from_file(ar__dist *c);

/* ---- graph.c (graph models) ---- */
/* The transfers (one per trainable parameter of the net, sharded over the
 * servers by bytes) and the per-node lists. */
ar_status ar__dist_graph_tensors(ar__dist *c);
/* Binds the transfers to the net's memory again. */
void ar__dist_graph_bind(ar__dist *c);
/* The op graph of the net (see ar_dist_net_op_graph) and the op ids. */
ar_status ar__dist_graph_ops(ar__dist *c);
/* Worker hooks of a graph model (worker.c calls them for spec->graph). */
ar_status ar__dist_graph_before(ar__dist *c, ar_job_phase phase, int node);
ar_status ar__dist_graph_after(ar__dist *c, ar_job_phase phase, int node);
/* The running statistics (batch norm's): worker 0's go to rank 0 before
 * an evaluation, a checkpoint and at the end (collective between those
 * two ranks; a no-op for others and for chain models). */
ar_status ar__dist_graph_states(ar__dist *c);
/* Every rank's job tensors as checkpoints list them (resume). */
int ar__dist_job_tensors(ar__dist *c, const char **names, float **ptrs, int64_t *counts,
                         int cap);
void ar__dist_graph_fini(ar__dist *c);

/* ---- lowered.c (chains lowered onto the graph engine) ---- */
/* Binds the chain's transfers (2l, 2l + 1) to the net's parameters of
 * their names (again after the blocks moved); AR_STATE when the net is not
 * the chain's. */
ar_status ar__dist_lowered_bind(ar__dist *c);
/* Worker hooks of a lowered chain, per node (worker.c calls them). */
ar_status ar__dist_lowered_before(ar__dist *c, ar_job_phase phase, int node);
ar_status ar__dist_lowered_after(ar__dist *c, ar_job_phase phase, int node);

/* Layer l's rows sets, sampled on this rank (the lowered net's head, or
 * the chain's layer): the gradient's touched rows, one marked, their
 * gradients zeroed and the set cleared, rows whose parameters changed
 * (ids NULL: all), the table rebuild due at the step, sparse Adam over
 * the marked rows (AR_STATE with the reason). */
const uint32_t *ar__dist_rows_touched(ar__dist *c, int l, size_t *n);
void ar__dist_rows_mark(ar__dist *c, int l, uint32_t id);
void ar__dist_rows_clear(ar__dist *c, int l);
void ar__dist_rows_changed(ar__dist *c, int l, const uint32_t *ids, size_t n);
ar_status ar__dist_rows_rehash(ar__dist *c, int l);
ar_status ar__dist_rows_step(ar__dist *c, int l);

/* ---- server.c / worker.c ---- */
/* A chain's worker hooks around layer l (worker.c). */
ar_status ar__dist_chain_before(ar__dist *c, ar_job_phase phase, int l);
ar_status ar__dist_chain_after(ar__dist *c, ar_job_phase phase, int l);
ar_status ar__dist_server_init(ar__dist *c);
void ar__dist_server_fini(ar__dist *c);
ar_status ar__dist_server_iteration(ar__dist *c, int64_t iter,
                                    const ar_commsched_schedule *s);
/* dist_run.c: whether iteration iter + 1 is sure to run with a schedule
 * already known (not past the end, not the first after warm-up, and the
 * stop vote it depends on has come and says go on): *yes.  Never waits. */
ar_status ar__dist_next_certain(ar__dist *c, int64_t iter, bool *yes);
/* The hooks a worker's job steps with (before ar_job_open). */
void ar__dist_worker_hooks(ar__dist *c);
ar_status ar__dist_worker_init(ar__dist *c);
void ar__dist_worker_fini(ar__dist *c);
ar_status ar__dist_worker_iteration(ar__dist *c, int64_t iter);

/* ---- rows.c ---- */
size_t ar__rows_wire(const ar__dist_tensor *T);
size_t ar__rows_size(const ar__dist_tensor *T, size_t n); /* n rows, with ids */
/* Writes rows ids[0..n) of src (the tensor's layout) into out, or every
 * row when ids is NULL (AR__ROWS_DENSE added).  Returns the bytes. */
size_t ar__rows_pack(const ar__dist_tensor *T, const float *src, const uint32_t *ids, size_t n,
                     uint32_t flags, uint8_t *out);
void ar__rows_view(const uint8_t *msg, ar__rows *out);
/* AR_OK when msg (bytes long, from rank peer) is a well-formed rows
 * message of T; AR_STATE with the reason otherwise. */
ar_status ar__rows_check(ar__dist *c, const ar__dist_tensor *T, const uint8_t *msg, size_t bytes,
                         int peer);
/* dst (the tensor's layout): its rows = (add: +=) the message's. */
void ar__rows_apply(const ar__dist_tensor *T, const ar__rows *r, float *dst, bool add);
/* Whether rank computes layer l sampled. */
static inline bool ar__dist_sampled(const ar__dist *c, int rank, int l) {
  return c->smask[(size_t)rank * (size_t)c->spec->n_layers + (size_t)l] != 0;
}

/* ---- stage.c (staged workers) ---- */
/* Allocates every tensor's hp and hg in one host block (page-locked on
 * CUDA) and fills hp from the model. */
ar_status ar__stage_init(ar__dist *c);
void ar__stage_fini(ar__dist *c); /* NULL-safe, idempotent */
/* Where tensor T's parameters are received and its gradient is sent
 * from: the host copies when staged, the model's memory otherwise. */
static inline float *ar__dist_param_buf(const ar__dist_tensor *T) { return T->hp ? T->hp : T->p; }
static inline float *ar__dist_grad_buf(const ar__dist_tensor *T) { return T->hg ? T->hg : T->g; }
/* Layer l's parameters are in hp: copies them into the model (a rows
 * tensor whose message held a few rows: those rows only). */
ar_status ar__stage_params_in(ar__dist *c, int l);
/* Every hp was overwritten (a resume's broadcast): copies all in. */
ar_status ar__stage_reload(ar__dist *c);
/* Layer l's backward was enqueued: copies its gradients out into hg
 * (waits for the layer's work). */
ar_status ar__stage_grads_out(ar__dist *c, int l);

/* ---- report layouts: the one statement of them (worker.c and server.c
 * write, report.c reads) ---- */
/* Where part p of a worker's report begins (p = AR__WREP_PARTS: its
 * length), in doubles. */
static inline size_t ar__wrep(const ar__dist *c, ar__wrep_part p) {
  size_t nt = (size_t)c->nt;
  return AR__WREP_HEAD + (p <= AR__WREP_OP_END ? (size_t)p * c->nops
                                               : 2 * c->nops + (size_t)(p - AR__WREP_READY) * nt);
}
/* Where part p of a server's report begins (AR__SREP_PARTS: its length);
 * worker w's transfer t is at + w * nt + t. */
static inline size_t ar__srep(const ar__dist *c, ar__srep_part p) {
  return AR__SREP_HEAD + (size_t)p * (size_t)c->W * (size_t)c->nt;
}

/* ---- report.c (rank 0) ---- */
ar_status ar__dist_report_init(ar__dist *c, bool resume);
void ar__dist_report_fini(ar__dist *c);
/* Rank 0: posts the receives of iteration iter's reports. */
ar_status ar__dist_reports_post(ar__dist *c);
/* Rank 0: waits for them, feeds the oracle while tracing, computes the
 * iteration's metrics, logs. */
ar_status ar__dist_reports_collect(ar__dist *c, int64_t iter, double wall_s,
                                   const double *own_server_report);
/* All servers: the shards of servers 1..S-1 go to rank 0 (before an
 * evaluation or a checkpoint). */
ar_status ar__dist_gather(ar__dist *c);
/* Rank 0's ar_job_opts.keys: the distributed keys of its iteration lines
 * and summary. */
void ar__dist_keys(void *ctx, ar_job_output where, ar_json *j);
/* Rank 0, after the traced iterations: the mean bytes of rows tensor t's
 * messages (its dense bytes when it is not a rows tensor or none was
 * counted). */
size_t ar__dist_rows_mean_bytes(const ar__dist *c, int t);


/* ---- share.c (distributed.share, workers only) ---- */
/* Opens the lanes runner on the worker's device (c->dev_name: a CUDA
 * worker's GPU is the shared device) with the share file's jobs and this
 * worker as a tenant of `persistent` + `ephemeral` bytes (its plan), starts it, and
 * waits until the worker is admitted (c->share set even on failure, for
 * ar__share_close). */
ar_status ar__share_open(ar__dist *c, int threads, size_t persistent, size_t ephemeral);
/* The lane handle and blocks the worker's model lives in. */
void ar__share_blocks(const ar__dist *c, ar_device **dev, void **pers, void **eph);
/* Waits for the worker's turn (one iteration); applies moved blocks. */
ar_status ar__share_begin(ar__dist *c);
/* The iteration ran with status st; last: it was the job's last. */
void ar__share_end(ar__dist *c, ar_status st, bool last);
/* Ends the sharing: waits for the co-tenants to finish (or stops them when
 * failed or the worker did not finish), frees everything.  NULL-safe. */
void ar__share_close(ar__dist *c, bool failed);
/* dist_run.c: the model's blocks moved; the tensor table follows. */
void ar__dist_rebind(ar__dist *c, void *persistent, void *ephemeral);

/* ---- timeline.c ---- */
/* After the roles are known, on every rank: rank 0's options (rank0, read
 * from its environment) are broadcast and the recorder made with two
 * tracks per channel, its parameters (AR_TRACE_CHANNEL + k) and its
 * gradients (AR_TRACE_CHANNEL + peers + k; peers: W on a server, S on a
 * worker) (c->tl stays NULL when they say no trace).  AR_NOMEM. */
ar_status ar__dist_tl_open(ar__dist *c, const ar_trace_opts *rank0);
void ar__dist_tl_close(ar__dist *c); /* idempotent */
/* An iteration begins under schedule s (NULL: none or warm-up). */
void ar__dist_tl_begin(ar__dist *c, int64_t iter, const ar_commsched_schedule *s);
/* A transfer of tensor t on channel chan (a server's worker index, a
 * worker's server rank), parameters or its gradient, its place on the
 * channel, its bytes, from t0 to t1 (ar_now()).  Only while c->tl_det. */
void ar__dist_tl_transfer(ar__dist *c, int chan, int t, bool grad, uint32_t order, size_t bytes,
                          double t0, double t1);
/* After a successful run, on every rank (collective): the clocks aligned,
 * every rank's spans to rank 0, which writes output.dir/trace.json. */
ar_status ar__dist_tl_write(ar__dist *c);

#endif /* ACCELRT_DIST_IMPL_H */
