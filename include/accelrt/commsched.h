/*
 * accelrt commsched: communication scheduling for parameter-server training
 * (TicTac, Hashemi, Abdu Jyothi & Campbell, MLSys 2019).
 *
 * On a worker, recv ops bring parameters from the servers and compute ops
 * depend on them through a DAG.  The order in which the recvs of one
 * worker-server channel arrive decides how early the computation can start.
 * This library holds the pure-algorithm half of TicTac; it knows only ops,
 * dependencies, sizes and times (never MPI, the job spec or the engine):
 *
 *   - ar_commsched_graph: compute ops and recv ops (one per parameter
 *     transfer, with its bytes and its server channel) and the DAG edges;
 *   - ar_commsched_oracle: per-op times, the minimum over traced runs, with
 *     transfers queued behind another on their channel charged only from
 *     when they could start;
 *   - ar_commsched_schedule: the ordering wizard (orders none, random, tic,
 *     tac), priorities normalised per channel, written to and read from a
 *     small text file;
 *   - ar_commsched_gate: sender-side enforcement of a schedule, as a data
 *     structure the transport polls (no threads, no MPI);
 *   - ar_commsched_metrics: per-iteration makespan, busy times, the bounds
 *     U_min and U_max, the scheduling efficiency E and straggler spread;
 *   - ar_commsched_pacer: a token-bucket link emulator on a caller's clock;
 *   - ar_commsched_simulate: a discrete-event simulation of one synchronous
 *     parameter-server iteration under a schedule.
 *
 * Transfers are numbered 0, 1, 2, ... in the order their recv ops were
 * added to the graph; that number (the transfer id) names a transfer in
 * schedules, files and the gate, and is the same on every worker.
 *
 * Thread-safety: no handle is thread-safe; one thread owns each handle.
 * Distinct handles may be used from distinct threads.  A sealed graph is
 * only read by the functions that take it const, so several threads may
 * build schedules from one sealed graph at once.
 * Errors: every function that can fail returns ar_status and writes its
 * message into the ar_err it was given (which may be NULL), as base.h says.
 *
 * Tests: tests/commsched/test_wizard.c (TIC and TAC on hand-worked DAGs and
 * random ones), test_graph.c, test_oracle.c, test_gate.c, test_schedule.c
 * (orders, normalisation, files), test_metrics.c, test_pacer.c,
 * test_simulate.c; bench_tac.c times TAC on 1,000 transfers and
 * bench_simulate.c sweeps the simulator (neither is part of ctest).
 */
#ifndef ACCELRT_COMMSCHED_H
#define ACCELRT_COMMSCHED_H

#include <stddef.h>
#include <stdint.h>

#include "accelrt/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- op graph ----------------------------------------------------------- */

typedef struct ar_commsched_graph ar_commsched_graph;

/* Op ids are indices, from 0, in the order ops were added. */
typedef uint32_t ar_commsched_op;
#define AR_COMMSCHED_NONE UINT32_MAX

typedef enum ar_commsched_op_kind {
  AR_COMMSCHED_COMPUTE = 0,
  AR_COMMSCHED_RECV = 1
} ar_commsched_op_kind;

/* Creates an empty graph.  Returns AR_OK or AR_NOMEM; *out is written only
 * on success. */
ar_status ar_commsched_graph_create(ar_commsched_graph **out, ar_err *err);
/* Frees the graph and everything it owns.  NULL is a no-op. */
void ar_commsched_graph_destroy(ar_commsched_graph *g);

/* Adds a compute op taking time_s seconds (>= 0, finite).  name is copied
 * and may be NULL ("op<id>").  Returns AR_OK, AR_INVALID (bad time),
 * AR_STATE (graph sealed) or AR_NOMEM. */
ar_status ar_commsched_graph_add_compute(ar_commsched_graph *g,
                                         const char *name, double time_s,
                                         ar_commsched_op *out, ar_err *err);

/* Adds a recv op: one parameter transfer of `bytes` from server `channel`,
 * taking time_s seconds.  Its transfer id is the number of recvs added
 * before it.  name is copied; it names the transfer in schedule files, so
 * it must be unique among recvs, non-empty and free of whitespace and '#'
 * (NULL gives "t<transfer id>").  Recv ops are sources of the DAG: nothing
 * may point into them.  Returns AR_OK, AR_INVALID (bad time or name: the
 * message says which), AR_STATE (sealed) or AR_NOMEM. */
ar_status ar_commsched_graph_add_recv(ar_commsched_graph *g, const char *name,
                                      size_t bytes, uint32_t channel,
                                      double time_s, ar_commsched_op *out,
                                      ar_err *err);

/* Adds the dependency "to needs from".  Duplicates are harmless.  Returns
 * AR_OK, AR_INVALID (unknown op, or `to` is a recv op), AR_STATE (sealed)
 * or AR_NOMEM.  Cycles are found by ar_commsched_graph_seal(). */
ar_status ar_commsched_graph_add_edge(ar_commsched_graph *g,
                                      ar_commsched_op from, ar_commsched_op to,
                                      ar_err *err);

/* Freezes the structure: checks the DAG is acyclic and precomputes, for
 * every compute op, the set of recvs upstream of it.  Times may still
 * change afterwards (ar_commsched_graph_set_time, the oracle).  Returns
 * AR_OK, AR_INVALID (a cycle: the message lists the ops on one, e.g.
 * "a -> b -> a"), AR_STATE (already sealed) or AR_NOMEM (nothing changed). */
ar_status ar_commsched_graph_seal(ar_commsched_graph *g, ar_err *err);
int ar_commsched_graph_sealed(const ar_commsched_graph *g);

/* Sets an op's time (seconds, >= 0, finite).  AR_OK or AR_INVALID. */
ar_status ar_commsched_graph_set_time(ar_commsched_graph *g,
                                      ar_commsched_op op, double time_s,
                                      ar_err *err);

/* Sets a transfer's bytes, e.g. to the measured mean of a transfer whose
 * size varies (sparse rows).  Like times, bytes may change after sealing.
 * AR_OK or AR_INVALID (unknown transfer). */
ar_status ar_commsched_graph_set_bytes(ar_commsched_graph *g,
                                       uint32_t transfer, size_t bytes,
                                       ar_err *err);

/* Getters.  Bad ids give 0 / NULL / AR_COMMSCHED_NONE.  Names are borrowed,
 * valid while the graph lives. */
size_t ar_commsched_graph_op_count(const ar_commsched_graph *g);
size_t ar_commsched_graph_transfer_count(const ar_commsched_graph *g);
ar_commsched_op_kind ar_commsched_graph_kind(const ar_commsched_graph *g,
                                             ar_commsched_op op);
const char *ar_commsched_graph_name(const ar_commsched_graph *g,
                                    ar_commsched_op op);
double ar_commsched_graph_time(const ar_commsched_graph *g, ar_commsched_op op);
/* The recv op of a transfer, and the transfer of a recv op. */
ar_commsched_op ar_commsched_graph_recv_op(const ar_commsched_graph *g,
                                           uint32_t transfer);
uint32_t ar_commsched_graph_transfer(const ar_commsched_graph *g,
                                     ar_commsched_op op);
size_t ar_commsched_graph_bytes(const ar_commsched_graph *g, uint32_t transfer);
uint32_t ar_commsched_graph_channel(const ar_commsched_graph *g,
                                    uint32_t transfer);
/* The compute op with the lowest id that the transfer's recv op feeds
 * directly: where the transfer is first used when ops were added in
 * execution order (forward, then backward), so the transfers of one op's
 * inputs share it.  AR_COMMSCHED_NONE for a bad id or a recv that feeds
 * nothing.  O(edges). */
ar_commsched_op ar_commsched_graph_first_use(const ar_commsched_graph *g,
                                            uint32_t transfer);
/* The edges as added: edge i (< edge_count) goes from *from to *to. */
size_t ar_commsched_graph_edge_count(const ar_commsched_graph *g);
void ar_commsched_graph_edge(const ar_commsched_graph *g, size_t i,
                             ar_commsched_op *from, ar_commsched_op *to);

/* ---- time oracle -------------------------------------------------------- */

typedef struct ar_commsched_oracle ar_commsched_oracle;

/* Creates an oracle for the ops of a sealed graph (the graph is not kept;
 * later runs must use the same op ids).  Returns AR_OK, AR_STATE (not
 * sealed) or AR_NOMEM. */
ar_status ar_commsched_oracle_create(const ar_commsched_graph *g,
                                     ar_commsched_oracle **out, ar_err *err);
void ar_commsched_oracle_destroy(ar_commsched_oracle *o);

/* Adds one traced iteration: start[op] and end[op] in seconds (any clock
 * shared by the run), both indexed by op id, length op count; an op not
 * traced in this run has NaN in either.  A compute op is charged end -
 * start.  A transfer is charged end - max(start, e) where e is the latest
 * end among the transfers of its channel that started before it (ties by
 * op id): a transfer queued behind another is charged only from when it
 * could start.  Each op keeps the minimum over runs.  The arrays are read,
 * not kept.  Returns AR_OK, AR_INVALID (end < start, or an infinite time:
 * the message names the op; nothing is recorded) or AR_NOMEM. */
ar_status ar_commsched_oracle_add_run(ar_commsched_oracle *o,
                                      const ar_commsched_graph *g,
                                      const double *start, const double *end,
                                      ar_err *err);

/* Runs recorded for op (0 when never traced) and its time (the minimum;
 * NaN when never traced). */
size_t ar_commsched_oracle_samples(const ar_commsched_oracle *o,
                                   ar_commsched_op op);
double ar_commsched_oracle_time(const ar_commsched_oracle *o,
                                ar_commsched_op op);

/* Writes the oracle's time into the graph for every op traced at least
 * once; other ops keep their time.  Returns AR_OK or AR_INVALID (the graph
 * has a different op count). */
ar_status ar_commsched_oracle_apply(const ar_commsched_oracle *o,
                                    ar_commsched_graph *g, ar_err *err);

/* ---- schedules: the ordering wizard ------------------------------------- */

typedef enum ar_commsched_order {
  AR_COMMSCHED_ORDER_NONE = 0, /* as ready: no transfer listed, all bypass */
  AR_COMMSCHED_ORDER_RANDOM,   /* a seeded shuffle, new every iteration */
  AR_COMMSCHED_ORDER_TIC,      /* TicTac's timing-independent order */
  AR_COMMSCHED_ORDER_TAC       /* TicTac's timing-aware order */
} ar_commsched_order;

/* "none", "random", "tic", "tac".  Parse returns AR_OK or AR_INVALID. */
const char *ar_commsched_order_name(ar_commsched_order order);
ar_status ar_commsched_order_parse(const char *name, ar_commsched_order *out,
                                   ar_err *err);

typedef struct ar_commsched_schedule_opts {
  ar_commsched_order order;
  uint64_t seed;      /* random: the job's seed */
  uint64_t iteration; /* random: the iteration the shuffle is for */
} ar_commsched_schedule_opts;

#define AR_COMMSCHED_SCHEDULE_OPTS_INIT {AR_COMMSCHED_ORDER_TAC, 0, 0}

/* One listed transfer.  priority: 0 goes first, unique under random and
 * tac, shared by equal M+ under tic.  number: the priority normalised on
 * the transfer's channel, i.e. how many transfers of the same channel have
 * a strictly smaller priority (priorities 4,4,7,9,9,12 on one channel give
 * 0,0,2,3,3,5); the gate enforces numbers. */
typedef struct ar_commsched_entry {
  uint32_t transfer;
  const char *name; /* borrowed from the schedule */
  uint32_t channel;
  uint32_t priority;
  uint32_t number;
} ar_commsched_entry;

typedef struct ar_commsched_schedule ar_commsched_schedule;

/* Computes a schedule for a sealed graph: every transfer listed once
 * (none: no transfer listed).  random draws a Fisher-Yates shuffle from an
 * ar_rng seeded with (seed, iteration), so the same pair always gives the
 * same order.  tic and tac are TicTac's algorithms (see tic.c, tac.c); tac
 * reads the graph's op times, tic ignores them.  The time taken is
 * recorded (ar_commsched_schedule_compute_s).  Returns AR_OK, AR_INVALID
 * (unknown order), AR_STATE (graph not sealed) or AR_NOMEM. */
ar_status ar_commsched_schedule_create(const ar_commsched_graph *g,
                                       const ar_commsched_schedule_opts *opts,
                                       ar_commsched_schedule **out,
                                       ar_err *err);
void ar_commsched_schedule_destroy(ar_commsched_schedule *s);

ar_commsched_order ar_commsched_schedule_order(const ar_commsched_schedule *s);
/* Seconds the wizard took (0 for a schedule read from a file). */
double ar_commsched_schedule_compute_s(const ar_commsched_schedule *s);
/* Listed transfers; entry i in priority order (ties by transfer id), i <
 * count, else NULL.  Borrowed, valid while the schedule lives. */
size_t ar_commsched_schedule_count(const ar_commsched_schedule *s);
const ar_commsched_entry *ar_commsched_schedule_entry(
    const ar_commsched_schedule *s, size_t i);
/* The entry of a transfer id, NULL when it is not listed. */
const ar_commsched_entry *ar_commsched_schedule_find(
    const ar_commsched_schedule *s, uint32_t transfer);

/* Writes the schedule as text: comment lines start with '#', one line
 * "order <name>", then one line per listed transfer in priority order:
 * "<transfer id> <name> <channel> <priority>".  Returns AR_OK or AR_IO. */
ar_status ar_commsched_schedule_write(const ar_commsched_schedule *s,
                                      const char *path, ar_err *err);

/* Reads a file written by ar_commsched_schedule_write (blank lines and
 * comments allowed anywhere, lines in any order; the order line is
 * optional and defaults to tac).  Numbers are recomputed from the
 * priorities.  Returns AR_OK, AR_IO (cannot open), AR_PARSE
 * ("FILE:LINE: error: ..." for a wrong field count, a bad integer, a
 * duplicate transfer id or name, an unknown order) or AR_NOMEM. */
ar_status ar_commsched_schedule_read(const char *path,
                                     ar_commsched_schedule **out, ar_err *err);

/* Builds a schedule of `order` for a sealed graph from one priority per
 * transfer (priority[t] for t < transfer count; UINT32_MAX: not listed),
 * with the graph's names and channels; numbers are normalised as for
 * computed schedules.  Used to hand a schedule computed or read on one
 * rank to the others.  compute_s is 0.  Returns AR_OK, AR_INVALID (unknown
 * order), AR_STATE (graph not sealed) or AR_NOMEM. */
ar_status ar_commsched_schedule_from_priorities(const ar_commsched_graph *g,
                                                ar_commsched_order order,
                                                const uint32_t *priority,
                                                ar_commsched_schedule **out,
                                                ar_err *err);

/* Checks a schedule against a graph: every listed transfer exists in it
 * with the same name and channel.  Returns AR_OK or AR_INVALID. */
ar_status ar_commsched_schedule_check(const ar_commsched_schedule *s,
                                      const ar_commsched_graph *g, ar_err *err);

/* ---- enforcement gate (sender side) ------------------------------------- */

/* One gate serves one sender (a parameter server, i.e. one channel) and
 * all its destinations (workers).  The transport offers each transfer when
 * it is ready to send, in any order, then repeatedly asks the gate for the
 * next one it may post, and tells the gate when a send completes.
 *
 * Rule (TicTac's sender-side counter, generalised to shared numbers): each
 * destination has a counter, reset at every iteration start.  A listed
 * transfer may be posted once counter >= its number; posting it adds one.
 * Because a number is the count of transfers with a strictly smaller
 * priority, the counter reaches k exactly when the k transfers numbered
 * below k have all gone, so a group of transfers sharing a number goes in
 * any order among itself and the next group waits for all of it.  (The
 * paper's test is counter == number, which with shared numbers would block
 * every member of a group but the first.)  A transfer declared absent
 * (ar_commsched_gate_skip, ar_commsched_gate_flush) adds its one when the
 * counter reaches its number, as if it had been posted, so those behind
 * it still flow.  Unlisted transfers bypass the order.  With a bound on
 * bytes in flight per destination, the next transfer waits until it fits,
 * except that a transfer goes alone on an idle channel even if larger than
 * the bound; a transfer waiting for room holds back the ones after it, so
 * the order is kept.  All memory is reserved at create and load time. */
typedef struct ar_commsched_gate ar_commsched_gate;

typedef struct ar_commsched_gate_opts {
  uint32_t destinations; /* workers this sender sends to, >= 1 */
  uint32_t transfers;    /* transfer ids are < this, >= 1 */
  size_t max_bytes_in_flight; /* per destination; 0 = no bound */
} ar_commsched_gate_opts;

#define AR_COMMSCHED_GATE_OPTS_INIT {1, 1, 0}

/* Returns AR_OK, AR_INVALID (zero destinations or transfers) or AR_NOMEM.
 * No transfer is listed until ar_commsched_gate_load. */
ar_status ar_commsched_gate_create(const ar_commsched_gate_opts *opts,
                                   ar_commsched_gate **out, ar_err *err);
void ar_commsched_gate_destroy(ar_commsched_gate *gate);

/* Lists the schedule's transfers of `channel` (a NULL schedule lists none)
 * and starts iteration 0 for every destination.  The numbers are copied.
 * Call between iterations (random orders: once per iteration, then
 * ar_commsched_gate_begin).  Returns AR_OK, AR_RANGE (a transfer id >=
 * opts.transfers), AR_INVALID (numbers that are not a valid normalisation)
 * or AR_STATE (transfers pending or in flight). */
ar_status ar_commsched_gate_load(ar_commsched_gate *gate,
                                 const ar_commsched_schedule *s,
                                 uint32_t channel, ar_err *err);

/* Starts an iteration: every counter and transfer state is reset; nothing
 * grows from one iteration to the next.  Returns AR_OK or AR_STATE (some
 * destination still has offered transfers not posted, or posted ones not
 * released: the message names the destination and transfer). */
ar_status ar_commsched_gate_begin(ar_commsched_gate *gate, uint64_t iteration,
                                  ar_err *err);

/* The transfer is ready to be sent to dest.  Returns AR_OK, AR_RANGE (bad
 * dest or transfer) or AR_STATE (already offered, posted or skipped this
 * iteration). */
ar_status ar_commsched_gate_offer(ar_commsched_gate *gate, uint32_t dest,
                                  uint32_t transfer, size_t bytes, ar_err *err);

/* Pops the next transfer to dest that may be posted now into *out and
 * counts its bytes in flight: first the unlisted ones in offer order, then
 * the listed ones in number order (ties by priority, then transfer id).
 * Returns AR_OK, AR_NOTFOUND (nothing may be posted now; *out untouched)
 * or AR_RANGE (bad dest). */
ar_status ar_commsched_gate_next(ar_commsched_gate *gate, uint32_t dest,
                                 uint32_t *out);

/* ar_commsched_gate_next, but only when the transfer it would pop has
 * key[transfer] == want (else AR_NOTFOUND and nothing changes).  A port
 * shared by several destinations uses it to keep sending to one
 * destination while the next transfer feeds the same op
 * (ar_commsched_graph_first_use) before it turns to the next destination:
 * an op's inputs then arrive together, not each behind the other
 * destinations' copy of the one before. */
ar_status ar_commsched_gate_next_if(ar_commsched_gate *gate, uint32_t dest,
                                    const uint32_t *key, uint32_t want,
                                    uint32_t *out);

/* The send of a posted transfer completed: its bytes leave the in-flight
 * count.  Returns AR_OK, AR_RANGE or AR_STATE (not posted, or released). */
ar_status ar_commsched_gate_release(ar_commsched_gate *gate, uint32_t dest,
                                    uint32_t transfer, ar_err *err);

/* Declares a listed transfer absent from this iteration (never to be
 * offered), so the transfers after it are not held back.  Unlisted ids are
 * accepted and ignored.  Returns AR_OK, AR_RANGE or AR_STATE (already
 * offered or posted). */
ar_status ar_commsched_gate_skip(ar_commsched_gate *gate, uint32_t dest,
                                 uint32_t transfer, ar_err *err);

/* Declares every listed transfer to dest not offered yet absent: call it
 * when the sender knows it will offer nothing more to dest this
 * iteration.  Returns AR_OK or AR_RANGE. */
ar_status ar_commsched_gate_flush(ar_commsched_gate *gate, uint32_t dest);

/* Per-destination state, for tests and traces. */
typedef struct ar_commsched_gate_info {
  uint64_t iteration;
  uint32_t counter;        /* listed transfers gone (posted or absent) */
  uint32_t listed;         /* transfers listed on this channel */
  size_t bytes_in_flight;
  size_t waiting;          /* offered, not yet posted */
  size_t footprint_bytes;  /* host memory the whole gate holds */
} ar_commsched_gate_info;
ar_status ar_commsched_gate_info_get(const ar_commsched_gate *gate,
                                     uint32_t dest,
                                     ar_commsched_gate_info *out);

/* ---- per-iteration metrics ---------------------------------------------- */

/* A busy interval, seconds on one clock. */
typedef struct ar_commsched_span {
  double start, end;
} ar_commsched_span;

typedef struct ar_commsched_metrics {
  double makespan_s;  /* latest end - earliest start over all spans */
  double comm_busy_s; /* N: length of the union of the comm spans */
  double comp_busy_s; /* C: length of the union of the compute spans */
  double u_min_s;     /* max(N, C): no ordering can beat it */
  double u_max_s;     /* N + C: no overlap at all */
  /* (U_max - makespan) / (U_max - U_min), clamped to [0, 1]; NaN, with
   * efficiency_defined 0, when U_max - U_min <= 1e-9 x max(U_max, 1 s)
   * (one side idle: no order can matter).  efficiency_raw is unclamped. */
  double efficiency;
  double efficiency_raw;
  int efficiency_defined;
  /* (U_max - U_min) / U_min: the most any ordering could gain. */
  double max_speedup;
} ar_commsched_metrics;

/* Computes one worker's iteration metrics from its spans (copied into a
 * scratch buffer, which is the one allocation).  Busy times are unions, so
 * two transfers overlapping on two channels count once.  Returns AR_OK,
 * AR_INVALID (a span with end < start or not finite; no spans at all) or
 * AR_NOMEM. */
ar_status ar_commsched_metrics_compute(const ar_commsched_span *comm,
                                       size_t ncomm,
                                       const ar_commsched_span *comp,
                                       size_t ncomp, ar_commsched_metrics *out,
                                       ar_err *err);

/* Straggler spread: max - min of the workers' finish times (0 for n <= 1
 * or NULL). */
double ar_commsched_straggler_spread(const double *finish, size_t n);

/* ---- link emulation: a token-bucket pacer (sender side) ----------------- */

/* One pacer paces one channel at its sender (issue 5's `link: {gbps,
 * latency_us}`): a token bucket holding up to burst_bytes tokens, filled
 * at the line rate, one token per byte.  It is a pure data structure on a
 * clock the caller provides (seconds, any origin, e.g. ar_now()), so the
 * transport asks it when a send may go and the tests drive it without
 * sleeping.  Model, stated once:
 *
 *   - sends on one channel are serial: a send starts at max(now, the end of
 *     the previous send);
 *   - at its start a send takes the bucket's tokens at once (up to its
 *     size: the burst), and its remaining bytes leave at the line rate, so
 *     it is done (last byte out) at start + max(0, bytes - tokens) / rate;
 *   - it arrives at done + latency: latency is added once per message and
 *     overlaps the next send (the link is a pipe, not a stop-and-wait);
 *   - over any interval of length t the channel sends at most
 *     burst_bytes + rate x t bytes, and back to back it sends at the rate.
 *
 * A peak rate above the line rate is not modelled: a burst leaves in zero
 * time.  burst_bytes 0 gives a plain serial link (done = start + bytes /
 * rate), which is what the simulator's ports are.  gbps INFINITY leaves
 * only the latency.  Tests: tests/commsched/test_pacer.c. */
typedef struct ar_commsched_pacer ar_commsched_pacer;

typedef struct ar_commsched_link_opts {
  double gbps;        /* line rate, 10^9 bit/s, > 0; INFINITY = unpaced */
  double latency_us;  /* one-way latency per message, >= 0, finite */
  size_t burst_bytes; /* bucket depth; the bucket starts full */
} ar_commsched_link_opts;

#define AR_COMMSCHED_LINK_OPTS_INIT {10.0, 0.0, 0}

/* When one send goes, on the caller's clock (seconds). */
typedef struct ar_commsched_pace {
  double start_s;  /* the send may be posted */
  double done_s;   /* its last byte has left the sender */
  double arrive_s; /* done_s + latency: the receiver has it */
} ar_commsched_pace;

/* Creates a pacer whose bucket is full at time now_s.  The options are
 * copied.  Returns AR_OK, AR_INVALID (gbps <= 0 or NaN, latency negative or
 * not finite: the message names the value) or AR_NOMEM. */
ar_status ar_commsched_pacer_create(const ar_commsched_link_opts *opts,
                                    double now_s, ar_commsched_pacer **out,
                                    ar_err *err);
void ar_commsched_pacer_destroy(ar_commsched_pacer *p);

/* When a send of `bytes` offered at now_s would start, be done and arrive,
 * without changing the pacer.  A now_s earlier than the previous send's
 * end is allowed (the send queues).  Cannot fail. */
void ar_commsched_pacer_earliest(const ar_commsched_pacer *p, double now_s,
                                 size_t bytes, ar_commsched_pace *out);

/* Commits that send: the same times as _earliest, and the bucket and the
 * channel's busy time move on.  out may be NULL. */
void ar_commsched_pacer_consume(ar_commsched_pacer *p, double now_s,
                                size_t bytes, ar_commsched_pace *out);

/* Bytes committed so far, and the tokens in the bucket at now_s (for
 * traces and tests; tokens count from the end of the last send). */
uint64_t ar_commsched_pacer_bytes(const ar_commsched_pacer *p);
double ar_commsched_pacer_tokens(const ar_commsched_pacer *p, double now_s);

/* ---- calibration from a traced run -------------------------------------- */

/*
 * A real run's trace calibrates the simulator (ar_commsched_simulate): each
 * compute op takes its median time over the traced iterations (so the
 * time-sharing of the cores and whatever else ran is in it), and the
 * per-message cost a waiting receiver pays (message_s + bytes x byte_s,
 * see ar_commsched_sim_opts) is the least-squares fit of time = a + bytes x b
 * over the transfers the worker was idle for: from the link's delivery to
 * the worker having the tensor, with no compute op of that worker running
 * in between.  The intercept is the median residual, not the mean, so
 * that a few waits for a core on a loaded machine do not set the cost of
 * every message.  Departure from TicTac: the paper's oracle times ops
 * only; the message cost is ours (the simulator models receive copies).
 * mean_scale: see ar_commsched_calib_result.
 * Tests: tests/commsched/test_calibrate.c.
 */
typedef struct ar_commsched_trace_event {
  ar_commsched_op_kind kind; /* compute, or a received transfer */
  ar_commsched_op op;        /* compute: the graph's op (NONE: not in the graph) */
  double bytes;              /* recv: its size */
  double start, end;         /* seconds, any clock shared by one iteration */
  double link;               /* recv: when the link delivered it; NaN unknown */
} ar_commsched_trace_event;

typedef struct ar_commsched_calib ar_commsched_calib;

typedef struct ar_commsched_calib_result {
  int ops_set;          /* compute ops given a median time */
  long samples;         /* transfers the fit used */
  double message_s;     /* NaN with fewer than 3 samples */
  double byte_s;        /* likewise; never negative */
  /* Sum over the traced ops of their mean time over the sum of their
   * medians (>= 1 with skewed times; 1 when nothing was traced): what the
   * medians leave out of a whole iteration's compute on a time-shared
   * machine, where an op now and then waits for a core.  A simulation's
   * compute_scale for predicting mean iterations, the op's shape kept from
   * the medians. */
  double mean_scale;
} ar_commsched_calib_result;

/* An empty calibration for the compute ops of g (borrowed for op counts
 * only; g may change afterwards).  AR_NOMEM. */
ar_status ar_commsched_calib_create(const ar_commsched_graph *g, ar_commsched_calib **out,
                                    ar_err *err);
void ar_commsched_calib_destroy(ar_commsched_calib *c); /* NULL: no-op */
/* Adds one worker-iteration's events (read, not kept).  AR_INVALID for an
 * op id out of range, AR_NOMEM. */
ar_status ar_commsched_calib_add(ar_commsched_calib *c, const ar_commsched_trace_event *ev,
                                 size_t n, ar_err *err);
/* Sets the median time of every compute op that was traced on g and fills
 * *out.  AR_OK, AR_INVALID (g has fewer ops than at create), AR_NOMEM. */
ar_status ar_commsched_calib_apply(ar_commsched_calib *c, ar_commsched_graph *g,
                                   ar_commsched_calib_result *out, ar_err *err);

/* ---- discrete-event simulation of one iteration ------------------------- */

/* Simulates one synchronous parameter-server iteration of W identical
 * workers and S servers (issue 5's simulator; model in simulate.c):
 *
 *   1. at time 0 every server offers, through an enforcement gate loaded
 *      with the schedule, each transfer of its channel (the recv's channel
 *      is its server) to every worker; it sends them round-robin over the
 *      workers, each worker's in gate order (transfer-id order for none),
 *      a worker's turn taking its next transfer and those after it with
 *      the same first use (ar_commsched_graph_first_use: an op's inputs);
 *   2. each node has one full-duplex port per direction, each a serial link
 *      of the given bandwidth: a message holds its sender's out port and
 *      its receiver's in port for bytes / bandwidth and arrives `latency`
 *      later; so a server's out link is shared by all its workers, a
 *      worker's in link by all servers, and the gradients fan in on each
 *      server's in link;
 *   3. each worker runs its compute ops one at a time, each when its
 *      predecessors are done and its recvs have arrived, earliest-ready
 *      first (ties by op id); with message_s / byte_s each arrival first
 *      costs the worker its copy, and message_s before it when the worker
 *      was waiting when it came, taken between its compute ops;
 *   4. the gradient of a transfer (as many bytes as the parameter) is sent
 *      back when every compute op that consumes the recv directly has
 *      finished (at its arrival if none does), in the order gradients
 *      become ready (ties by transfer id);
 *   5. update: a server applies each of its tensors' update as soon as
 *      every worker's gradient of it has arrived (and, with message_s /
 *      byte_s, been taken in, one at a time), one tensor at a time in the
 *      order they completed, each taking update_s x its share of the
 *      server's bytes (the runtime's early update, server.c); the
 *      iteration ends with the last update or the last compute op.  With
 *      late_update: barrier (the last worker has finished computing and
 *      the last gradient is in), then every server applies its whole
 *      update (update_s), in parallel (the runtime before the early
 *      update);
 *   6. with overlap (not with late_update): iterations follow one
 *      another as the runtime's servers overlap them: a tensor updated in
 *      iteration i is offered for i + 1 at once (the gate's order still
 *      holds), a worker starts i + 1's ops once its i ones are done;
 *      simulated as a few iterations in a row, the last one's figures
 *      returned with iteration_s the steady-state time between two
 *      iterations' ends; its metrics are over its own spans, from its
 *      first offer, as the runtime measures an iteration.
 *
 * Metrics (ar_commsched_metrics_compute over every worker's spans): a
 * communication span is a message from when it was offered to when it
 * arrived (as a worker's trace of its recvs sees it), a computation span
 * is a compute op or a server's update.  makespan_s is the end of the
 * update, from the first offer; U_min <= makespan <= U_max holds in this
 * model without overlap (with it, the iteration before's traffic, not in
 * the spans, can leave gaps: makespan > U_max is possible, E clamps).
 * Tests: tests/commsched/test_simulate.c; bench_simulate.c sweeps workers. */
typedef struct ar_commsched_sim_opts {
  uint32_t workers;     /* W >= 1 */
  uint32_t servers;     /* S >= 1; every recv's channel must be < S */
  double bandwidth_Bps; /* bytes/s per port and direction, > 0; INFINITY */
  double latency_s;     /* per message, >= 0, finite */
  double update_s;      /* each server's update after the barrier, >= 0 */
  /* Calibration terms for a real runtime (all 0 / 1: the ideal model).
   * Every message costs its receiver bytes x byte_s after it arrived (the
   * receiver's copy), and message_s before that when the receiver was
   * waiting when it came, not busy: a waiting runtime sleeps between
   * polls, and on a shared machine waits for a core when it wakes, while
   * a busy one takes the message as soon as it is between ops (the
   * calibration fits message_s on exactly such idle waits).  A worker
   * takes arrivals one at a time between its compute ops (it notices
   * them only between ops, and takes them before the next op), a server
   * in arrival order.  A message is "in" when that is done.  Before
   * 2026-12 every message paid message_s: with its tensors arriving while
   * a worker computes (TAC), that overcharged the calibrated Inception by
   * 12-42% (bench/tictac/README.md).  compute_scale multiplies every
   * worker compute op's time (e.g. workers / cores when more workers than
   * cores share a machine); the update is not scaled. */
  double message_s;     /* >= 0, finite */
  double byte_s;        /* >= 0, finite: 1 / copy rate in bytes/s */
  double compute_scale; /* > 0, finite */
  int late_update;      /* 1: the whole update after the barrier (rule 5) */
  int overlap;          /* 1: iterations overlap as the runtime's do
                           (rule 6); 0: one iteration, every parameter
                           offered at 0 (the runtime before issue 17) */
} ar_commsched_sim_opts;

#define AR_COMMSCHED_SIM_OPTS_INIT {1, 1, 1.25e9, 0.0, 0.0, 0.0, 0.0, 1.0, 0, 0}

typedef struct ar_commsched_sim_result {
  double makespan_s;       /* iteration: offer of the first parameter to
                            * the end of the last update (or compute op) */
  double iteration_s;      /* time per iteration in steady state: between
                            * two iterations' ends (rule 6); makespan_s
                            * without overlap */
  double params_done_s;    /* last parameter arrival on any worker */
  double compute_done_s;   /* last compute op's end on any worker */
  double barrier_s;        /* compute done and every gradient arrived */
  double straggler_s;      /* max - min over workers of their finish (last
                            * compute end or gradient arrival) */
  ar_commsched_metrics metrics; /* N, C, U_min, U_max, E over the iteration */
  uint64_t messages;       /* sent in both directions: 2 x W x transfers */
} ar_commsched_sim_result;

/* Simulates one iteration of a sealed graph, with its op times (seconds:
 * compute ops run that long; a recv's time is ignored, its bytes and the
 * bandwidth decide) under schedule s (NULL, or a schedule of order none:
 * every transfer as ready).  Deterministic: the same inputs give the same
 * result bit for bit (a random order's seed is in its schedule).  Every
 * allocation is freed before return.  Returns AR_OK, AR_STATE (graph not
 * sealed), AR_INVALID (bad option, a recv channel >= servers, a schedule
 * made for another graph: the message says which) or AR_NOMEM. */
ar_status ar_commsched_simulate(const ar_commsched_graph *g,
                                const ar_commsched_schedule *s,
                                const ar_commsched_sim_opts *opts,
                                ar_commsched_sim_result *out, ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_COMMSCHED_H */
