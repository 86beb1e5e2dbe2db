/*
 * A discrete-event simulation of one synchronous parameter-server
 * iteration (issue 5's simulator; the model is listed in commsched.h).
 * It exists to predict what an order buys at cluster sizes no testbed has,
 * so the model is deliberately small, and every choice is stated here:
 *
 * Network.  Every node (server or worker) has an out port and an in port,
 * each a serial link of `bandwidth` bytes/s (a token-bucket pacer with no
 * burst, see pacer.c).  A message holds its sender's out port and its
 * receiver's in port together for bytes / bandwidth (a non-blocking
 * switch between them) and arrives `latency` after its last byte left.
 * The two directions never interfere, so parameters (down) and gradients
 * (up) are simulated one after the other.  Each sender sends its messages
 * in its own order; when several senders compete, the message that can
 * start earliest goes first (ties: lower node id), which is a list
 * schedule: starts never decrease in commit order, so no message is ever
 * placed before a decision it depends on.
 *
 * Order.  Departure from TicTac, which orders each worker-server channel
 * separately: one server's out port is shared by all its workers, so the
 * server interleaves them round-robin, taking each worker's next transfer
 * from an ar_commsched_gate loaded with the schedule (the enforcement the
 * runtime uses), and in the same turn the transfers after it that the
 * same op uses first (ar_commsched_gate_next_if): a layer's weight and
 * bias reach one worker together, not each behind the other workers' copy
 * of the one before (which made every worker wait as long as the last;
 * the runtime's server does the same).  Every worker has the same schedule; with order none the
 * gate lists nothing and transfers go in transfer-id order, the order the
 * recvs were added (all parameters are ready at once, so "as ready" has
 * no other meaning here).  Bytes-in-flight bounds are not simulated.
 *
 * Update.  A server applies each of its tensors' update when every
 * worker's gradient of it is in (taken in, with the calibration costs),
 * one at a time in that order, each taking update_s x its share of the
 * server's parameter bytes: the runtime's early update (runtime/dist/
 * server.c), whose optimizer is a pass over the tensor.  The iteration
 * ends with the last update.  late_update keeps the model before it: a
 * barrier, then the whole update_s on every server.
 *
 * Overlap (the runtime's servers since issue 17): a tensor updated in
 * iteration i is offered for i + 1 at once, under the same gate order, so
 * i + 1's first parameters may leave while i's last gradients are still
 * coming.  Simulated as SIM_PASSES iterations in a row: pass k + 1 offers
 * each transfer when pass k updated it (its clock starts at pass k's first
 * update end), its workers compute no earlier than their pass-k compute
 * ended, and the ports are free (pass k's parameters left before its
 * gradients, which all came before its updates ended).  The messages keep
 * the gate's order: one waits for the one before it on its server's out
 * port, so a transfer updated late holds back those after it (tic and tac
 * put the first layer, whose gradient comes last, first).  The iteration
 * time is the steady state: the time between the last two passes' ends;
 * the metrics are the last pass's own spans, from its first offer, as the
 * runtime measures an iteration (the pass before's gradients and ops that
 * run in its window are not in them, so an idle gap of its own can push
 * its makespan past U_max: E is clamped).  Without overlap (or
 * with late_update) one iteration is simulated, every parameter offered
 * at time 0, as before.
 *
 * Workers.  One compute op at a time, each when its compute predecessors
 * finished and its recvs arrived, earliest-ready first (ties by op id), so
 * a worker never idles while some op could run.  A gradient (as many
 * bytes as its parameter) is ready when the compute ops fed directly by
 * the recv have all finished: the graph should make each recv feed the
 * backward op that produces its gradient.
 *
 * Calibration (message_s, byte_s, compute_scale; the ideal model has 0,
 * 0, 1).  A real runtime pays per message: the receiver matches it and
 * copies it (MPI over shared memory copies at the receiver) before the
 * data is usable, and a receiver waiting for a message sleeps between
 * polls (and, on a shared machine, waits for a core when it wakes).  So
 * every arrival costs its receiver bytes x byte_s, and message_s more
 * when it was waiting, not busy, when the message came (the calibration
 * fits message_s on such waits).  A worker is one CPU: it takes its
 * arrivals in arrival order, only between compute ops (the runtime's
 * worker polls before each layer), and before the next op when both are
 * due; an op that could run now does not wait for a later arrival.  A
 * parameter is "in" when its copy is done, and its comm span ends there.
 * A server takes its gradients in arrival order (its in port already
 * orders them), busy while it takes one (its updates do not count as busy
 * here).  Compute
 * ops of workers last time_s x compute_scale (workers time-sharing
 * cores); copies and the update are not scaled (their costs are measured
 * under the same sharing).  With zero costs a copy takes no time and an
 * op's ready time is its recvs' arrivals, exactly the ideal model.
 *
 * Why U_min <= makespan <= U_max holds: a message's span runs from its
 * offer to its arrival, so the worker that finishes last is covered by
 * its parameter spans from 0 to its last arrival, computes without a gap
 * from then to its last op (every op's inputs are there; copies count in
 * the parameter spans), is covered by
 * its gradient spans from then to the barrier, and the update covers the
 * rest (early: the last update's chain of back-to-back updates starts at
 * an arrival); the makespan is thus at most N + C.  test_simulate.c checks it on
 * random DAGs.
 *
 * Cost: O(S x W x T) for parameters, O(W x (ops + edges) log ops) for
 * compute and O(W^2 x T) for gradients, with T transfers; memory
 * O(W x (T + ops)).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "commsched_impl.h"

/* Iterations simulated in a row with overlap: the period settles after
 * the second (every pass sees the same offsets once the first has set
 * them), the later ones check it. */
#define SIM_PASSES 4

/* A gradient and when it is ready, for sorting a worker's sends. */
typedef struct ready_key {
  double ready;
  uint32_t t;
} ready_key;

typedef struct sim {
  const ar_commsched_graph *g;
  ar_commsched_sim_opts o;
  size_t n, T, W, S;
  /* Graph, compute side. */
  uint32_t *succ_off; /* (n + 1) */
  uint32_t *succ;     /* (nedges) */
  uint32_t *npred;    /* (n) compute predecessors, duplicates counted */
  /* Per worker. */
  double *arrive; /* (W, T) parameter arrival */
  double *gready; /* (W, T) gradient ready */
  double *finish; /* (W) last compute end or gradient arrival */
  /* Scratch. */
  uint32_t *cnt;         /* (n) */
  double *rdy;           /* (n) */
  uint32_t *heap;        /* (n) */
  uint32_t *dl_w, *dl_t; /* (W x T) parameter messages, grouped by server */
  uint32_t *srv_off;     /* (S + 1) */
  uint32_t *up;          /* (W, T) each worker's gradients in send order */
  ready_key *keys;       /* (T) */
  double *out_free, *in_free; /* (max(W, S)) port busy-until */
  double *cpu_free;           /* (S) a server's CPU busy-until (copies) */
  uint32_t *nrpred;           /* (n) recv predecessors, duplicates counted */
  uint32_t *head;             /* (max(W, S)) */
  ar_commsched_span *comm;    /* (2 x W x T) */
  ar_commsched_span *comp;    /* (W x ncompute + S + T) */
  double *tdone;              /* (T) every worker's gradient of t in */
  uint32_t *uord;             /* (T) scratch: a server's tensors */
  double *offer;              /* (T) when the parameter is offered */
  double *uend;               /* (T) when its update ended */
  double *avail;              /* (W) when the worker's CPU is free */
  double *cdone;              /* (W) its last compute op's end */
  uint32_t *use;              /* (T) the lowest compute op each recv feeds */
  size_t ncomm, ncomp, ncompute;
} sim;

static double xfer_s(const sim *m, size_t bytes) {
  return isinf(m->o.bandwidth_Bps) ? 0.0 : (double)bytes / m->o.bandwidth_Bps;
}

/* What taking one message in costs its receiver (0 in the ideal model):
 * the copy, and message_s before it when the receiver was waiting for
 * something to arrive (asleep between polls) rather than busy. */
static double take_s(const sim *m, size_t bytes, bool waiting) {
  return (waiting ? m->o.message_s : 0.0) + (double)bytes * m->o.byte_s;
}

static ar_status check_opts(const ar_commsched_graph *g,
                            const ar_commsched_schedule *s,
                            const ar_commsched_sim_opts *o, ar_err *err) {
  if (!g->sealed)
    return ar_errf(err, AR_STATE, "commsched simulate: seal the graph first");
  if (o->workers == 0 || o->servers == 0)
    return ar_errf(err, AR_INVALID,
                   "commsched simulate: %u workers and %u servers; need at "
                   "least one of each",
                   o->workers, o->servers);
  if (!(o->bandwidth_Bps > 0.0))
    return ar_errf(err, AR_INVALID,
                   "commsched simulate: bandwidth %g bytes/s; give a rate > 0 "
                   "(INFINITY for a free network)",
                   o->bandwidth_Bps);
  if (!isfinite(o->latency_s) || o->latency_s < 0.0 || !isfinite(o->update_s) ||
      o->update_s < 0.0)
    return ar_errf(err, AR_INVALID,
                   "commsched simulate: latency %g s and update %g s must be "
                   "finite and >= 0",
                   o->latency_s, o->update_s);
  if (!isfinite(o->message_s) || o->message_s < 0.0 || !isfinite(o->byte_s) ||
      o->byte_s < 0.0 || !isfinite(o->compute_scale) || !(o->compute_scale > 0.0))
    return ar_errf(err, AR_INVALID,
                   "commsched simulate: message cost %g s, byte cost %g s and "
                   "compute scale %g must be finite, the costs >= 0 and the "
                   "scale > 0",
                   o->message_s, o->byte_s, o->compute_scale);
  for (size_t t = 0; t < g->nrecv; t++)
    if (g->recvs[t].channel >= o->servers)
      return ar_errf(err, AR_INVALID,
                     "commsched simulate: transfer %zu ('%s') is on channel "
                     "%u but only %u servers are simulated; raise servers or "
                     "reshard the graph",
                     t, g->ops[g->recvs[t].op].name, g->recvs[t].channel,
                     o->servers);
  if (s)
    AR_CHECK(ar_commsched_schedule_check(s, g, err));
  uint64_t wt = (uint64_t)o->workers * g->nrecv;
  if (wt > UINT32_MAX / 2 || (uint64_t)o->workers * g->nops > UINT32_MAX)
    return ar_errf(err, AR_RANGE,
                   "commsched simulate: %u workers x %zu ops is too large to "
                   "simulate",
                   o->workers, g->nops);
  return AR_OK;
}

static void sim_free(sim *m) {
  ar_free(m->succ_off);
  ar_free(m->succ);
  ar_free(m->npred);
  ar_free(m->arrive);
  ar_free(m->gready);
  ar_free(m->finish);
  ar_free(m->cnt);
  ar_free(m->rdy);
  ar_free(m->heap);
  ar_free(m->dl_w);
  ar_free(m->dl_t);
  ar_free(m->srv_off);
  ar_free(m->up);
  ar_free(m->keys);
  ar_free(m->out_free);
  ar_free(m->in_free);
  ar_free(m->cpu_free);
  ar_free(m->nrpred);
  ar_free(m->head);
  ar_free(m->comm);
  ar_free(m->comp);
  ar_free(m->tdone);
  ar_free(m->uord);
  ar_free(m->offer);
  ar_free(m->uend);
  ar_free(m->avail);
  ar_free(m->cdone);
  ar_free(m->use);
}

static int sim_alloc(sim *m) {
  const ar_commsched_graph *g = m->g;
  size_t n = m->n, WT = m->W * m->T, P = m->W > m->S ? m->W : m->S;
  m->ncompute = n - g->nrecv;
  m->succ_off = ar_calloc(n + 1, sizeof *m->succ_off);
  m->succ = ar_malloc((g->nedges + 1) * sizeof *m->succ);
  m->npred = ar_calloc(n + 1, sizeof *m->npred);
  m->arrive = ar_malloc((WT + 1) * sizeof *m->arrive);
  m->gready = ar_malloc((WT + 1) * sizeof *m->gready);
  m->finish = ar_calloc(m->W, sizeof *m->finish);
  m->cnt = ar_malloc((n + 1) * sizeof *m->cnt);
  m->rdy = ar_malloc((n + 1) * sizeof *m->rdy);
  m->heap = ar_malloc((n + 1) * sizeof *m->heap);
  m->dl_w = ar_malloc((WT + 1) * sizeof *m->dl_w);
  m->dl_t = ar_malloc((WT + 1) * sizeof *m->dl_t);
  m->srv_off = ar_calloc(m->S + 1, sizeof *m->srv_off);
  m->up = ar_malloc((WT + 1) * sizeof *m->up);
  m->keys = ar_malloc((m->T + 1) * sizeof *m->keys);
  m->out_free = ar_malloc(P * sizeof *m->out_free);
  m->in_free = ar_malloc(P * sizeof *m->in_free);
  m->cpu_free = ar_malloc(P * sizeof *m->cpu_free);
  m->nrpred = ar_calloc(n + 1, sizeof *m->nrpred);
  m->head = ar_malloc(P * sizeof *m->head);
  m->comm = ar_malloc((2 * WT + 1) * sizeof *m->comm);
  m->comp = ar_malloc((m->W * m->ncompute + m->S + m->T) * sizeof *m->comp);
  m->tdone = ar_malloc((m->T + 1) * sizeof *m->tdone);
  m->uord = ar_malloc((m->T + 1) * sizeof *m->uord);
  m->offer = ar_calloc(m->T + 1, sizeof *m->offer);
  m->uend = ar_calloc(m->T + 1, sizeof *m->uend);
  m->avail = ar_calloc(m->W + 1, sizeof *m->avail);
  m->cdone = ar_calloc(m->W + 1, sizeof *m->cdone);
  m->use = ar_malloc((m->T + 1) * sizeof *m->use);
  if (!m->offer || !m->uend || !m->avail || !m->cdone || !m->use)
    return 0;
  return m->succ_off && m->succ && m->npred && m->arrive && m->gready &&
         m->finish && m->cnt && m->rdy && m->heap && m->dl_w && m->dl_t &&
         m->srv_off && m->up && m->keys && m->out_free && m->in_free &&
         m->head && m->comm && m->comp && m->cpu_free && m->nrpred && m->tdone &&
         m->uord;
}

/* Successor lists, and each compute op's count of compute predecessors
 * (recv predecessors are waited for through their arrival times). */
static void build_csr(sim *m) {
  const ar_commsched_graph *g = m->g;
  for (size_t e = 0; e < g->nedges; e++)
    m->succ_off[g->edges[2 * e] + 1]++;
  for (size_t i = 0; i < m->n; i++)
    m->succ_off[i + 1] += m->succ_off[i];
  for (size_t i = 0; i < m->n; i++)
    m->cnt[i] = m->succ_off[i];
  for (size_t e = 0; e < g->nedges; e++) {
    uint32_t f = g->edges[2 * e], t = g->edges[2 * e + 1];
    m->succ[m->cnt[f]++] = t;
    if (g->ops[f].kind == AR_COMMSCHED_COMPUTE)
      m->npred[t]++;
    else
      m->nrpred[t]++;
  }
  for (size_t t = 0; t < m->T; t++) {
    ar_commsched_op r = g->recvs[t].op;
    m->use[t] = AR_COMMSCHED_NONE;
    for (uint32_t i = m->succ_off[r]; i < m->succ_off[r + 1]; i++)
      if (m->succ[i] < m->use[t])
        m->use[t] = m->succ[i];
  }
}

/* Lists every server's parameter messages in send order: round-robin over
 * the workers, each worker's next transfer as the gate releases it and,
 * before the next worker's turn, those after it that feed the same op
 * (the runtime's server does the same: runtime/dist/server.c). */
static ar_status list_params(sim *m, const ar_commsched_schedule *s,
                             ar_err *err) {
  const ar_commsched_graph *g = m->g;
  ar_commsched_gate_opts go = AR_COMMSCHED_GATE_OPTS_INIT;
  go.destinations = (uint32_t)m->W;
  go.transfers = m->T > 0 ? (uint32_t)m->T : 1;
  ar_commsched_gate *gate = NULL;
  AR_CHECK(ar_commsched_gate_create(&go, &gate, err));
  ar_status st = AR_OK;
  size_t k = 0;
  for (uint32_t srv = 0; srv < m->S; srv++) {
    m->srv_off[srv] = (uint32_t)k;
    st = ar_commsched_gate_load(gate, s, srv, err);
    if (st != AR_OK)
      goto done;
    for (uint32_t w = 0; w < m->W; w++)
      for (uint32_t t = 0; t < m->T; t++)
        if (g->recvs[t].channel == srv &&
            (st = ar_commsched_gate_offer(gate, w, t, g->recvs[t].bytes,
                                          err)) != AR_OK)
          goto done;
    for (int progress = 1; progress;) {
      progress = 0;
      for (uint32_t w = 0; w < m->W; w++) {
        uint32_t t;
        if (ar_commsched_gate_next(gate, w, &t) != AR_OK)
          continue;
        st = ar_commsched_gate_release(gate, w, t, err);
        if (st != AR_OK)
          goto done;
        for (;;) {
          m->dl_w[k] = w;
          m->dl_t[k] = t;
          k++;
          uint32_t prev = t;
          if (ar_commsched_gate_next_if(gate, w, m->use, m->use[prev], &t) != AR_OK)
            break;
          st = ar_commsched_gate_release(gate, w, t, err);
          if (st != AR_OK)
            goto done;
        }
        progress = 1;
      }
    }
  }
  m->srv_off[m->S] = (uint32_t)k;
  /* Every offered transfer was posted: the gate never holds one back
   * without a bytes-in-flight bound. */
  AR_ASSERT(k == m->W * m->T);
done:
  ar_commsched_gate_destroy(gate);
  return st;
}

/* Parameters: servers are the senders, workers' in ports the receivers. */
static void sim_params(sim *m) {
  const ar_commsched_graph *g = m->g;
  for (size_t i = 0; i < m->S; i++) {
    m->out_free[i] = 0.0;
    m->head[i] = m->srv_off[i];
  }
  for (size_t w = 0; w < m->W; w++)
    m->in_free[w] = 0.0;
  for (size_t left = m->W * m->T; left > 0; left--) {
    size_t best = SIZE_MAX;
    double best_t = INFINITY;
    for (size_t srv = 0; srv < m->S; srv++) {
      if (m->head[srv] == m->srv_off[srv + 1])
        continue;
      uint32_t w = m->dl_w[m->head[srv]];
      double t =
          m->out_free[srv] > m->in_free[w] ? m->out_free[srv] : m->in_free[w];
      double off = m->offer[m->dl_t[m->head[srv]]];
      if (off > t)
        t = off;
      if (best == SIZE_MAX || t < best_t) {
        best = srv;
        best_t = t;
      }
    }
    uint32_t k = m->head[best]++, w = m->dl_w[k], t = m->dl_t[k];
    double done = best_t + xfer_s(m, g->recvs[t].bytes);
    m->out_free[best] = m->in_free[w] = done;
    m->arrive[(size_t)w * m->T + t] = done + m->o.latency_s;
  }
}

/* Min-heap of compute ops keyed by (ready time, op id). */
static int before(const sim *m, uint32_t a, uint32_t b) {
  if (m->rdy[a] != m->rdy[b])
    return m->rdy[a] < m->rdy[b];
  return a < b;
}

static void heap_push(sim *m, size_t *len, uint32_t v) {
  size_t i = (*len)++;
  while (i > 0 && before(m, v, m->heap[(i - 1) / 2])) {
    m->heap[i] = m->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  m->heap[i] = v;
}

static uint32_t heap_pop(sim *m, size_t *len) {
  uint32_t top = m->heap[0], v = m->heap[--*len];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *len)
      break;
    if (c + 1 < *len && before(m, m->heap[c + 1], m->heap[c]))
      c++;
    if (!before(m, m->heap[c], v))
      break;
    m->heap[i] = m->heap[c];
    i = c;
  }
  m->heap[i] = v;
  return top;
}

static int cmp_ready(const void *a, const void *b);

/* Completes a parameter's copy at `have`: its comm span, and its
 * consumers may run from then. */
static void param_in(sim *m, size_t *len, uint32_t t, double have) {
  const ar_commsched_graph *g = m->g;
  uint32_t r = g->recvs[t].op;
  m->comm[m->ncomm].start = m->offer[t];
  m->comm[m->ncomm].end = have;
  m->ncomm++;
  for (uint32_t k = m->succ_off[r]; k < m->succ_off[r + 1]; k++) {
    uint32_t c = m->succ[k];
    if (have > m->rdy[c])
      m->rdy[c] = have;
    if (--m->cnt[c] == 0)
      heap_push(m, len, c);
  }
}

/* One worker's compute, with its parameter copies between ops; returns
 * its last compute end and leaves in arrive[w] when each parameter was
 * in.  Reuses rdy as the op's end time once the op has run. */
static double sim_compute(sim *m, size_t w) {
  const ar_commsched_graph *g = m->g;
  double *arr = m->arrive + w * m->T;
  size_t len = 0, ci = 0;
  for (size_t i = 0; i < m->n; i++) {
    m->cnt[i] = m->npred[i] + m->nrpred[i];
    m->rdy[i] = 0.0;
  }
  for (size_t t = 0; t < m->T; t++) {
    m->keys[t].ready = arr[t];
    m->keys[t].t = (uint32_t)t;
  }
  qsort(m->keys, m->T, sizeof *m->keys, cmp_ready);
  for (size_t i = 0; i < m->n; i++)
    if (g->ops[i].kind == AR_COMMSCHED_COMPUTE && m->cnt[i] == 0)
      heap_push(m, &len, (uint32_t)i);
  double now = m->avail[w], last = 0.0;
  while (len > 0 || ci < m->T) {
    double ac = ci < m->T ? m->keys[ci].ready : INFINITY;
    double rc = len > 0 ? m->rdy[m->heap[0]] : INFINITY;
    bool op_now = len > 0 && rc <= now;
    if (ci < m->T && (ac <= now || (!op_now && ac <= rc))) {
      /* The next arrival: the worker takes it in (no cost: at once). */
      uint32_t t = m->keys[ci++].t;
      double cost = take_s(m, g->recvs[t].bytes, ac > now), have = ac;
      if (cost > 0.0) {
        have = (ac > now ? ac : now) + cost;
        now = have;
      }
      arr[t] = have;
      param_in(m, &len, t, have);
      continue;
    }
    uint32_t v = heap_pop(m, &len);
    double start = m->rdy[v] > now ? m->rdy[v] : now;
    now = start + g->ops[v].time_s * m->o.compute_scale;
    last = now;
    m->rdy[v] = now;
    m->comp[m->ncomp].start = start;
    m->comp[m->ncomp].end = now;
    m->ncomp++;
    for (uint32_t k = m->succ_off[v]; k < m->succ_off[v + 1]; k++) {
      uint32_t c = m->succ[k];
      if (now > m->rdy[c])
        m->rdy[c] = now;
      if (--m->cnt[c] == 0)
        heap_push(m, &len, c);
    }
  }
  /* Gradient readiness: the end of the last direct consumer. */
  double *gr = m->gready + w * m->T;
  for (size_t t = 0; t < m->T; t++) {
    uint32_t r = g->recvs[t].op;
    gr[t] = arr[t];
    for (uint32_t k = m->succ_off[r]; k < m->succ_off[r + 1]; k++)
      if (m->rdy[m->succ[k]] > gr[t])
        gr[t] = m->rdy[m->succ[k]];
  }
  return last;
}

static int cmp_ready(const void *a, const void *b) {
  const ready_key *x = a, *y = b;
  if (x->ready != y->ready)
    return x->ready < y->ready ? -1 : 1;
  return x->t < y->t ? -1 : x->t > y->t;
}

/* Gradients: workers are the senders, servers' in ports the receivers.
 * Returns the last arrival. */
static double sim_grads(sim *m) {
  const ar_commsched_graph *g = m->g;
  double last = 0.0;
  for (size_t w = 0; w < m->W; w++) {
    for (size_t t = 0; t < m->T; t++) {
      m->keys[t].ready = m->gready[w * m->T + t];
      m->keys[t].t = (uint32_t)t;
    }
    qsort(m->keys, m->T, sizeof *m->keys, cmp_ready);
    for (size_t t = 0; t < m->T; t++)
      m->up[w * m->T + t] = m->keys[t].t;
    m->out_free[w] = 0.0;
    m->head[w] = 0;
  }
  for (size_t srv = 0; srv < m->S; srv++)
    m->in_free[srv] = m->cpu_free[srv] = 0.0;
  for (size_t t = 0; t < m->T; t++)
    m->tdone[t] = 0.0;
  for (size_t left = m->W * m->T; left > 0; left--) {
    size_t best = SIZE_MAX;
    double best_t = INFINITY;
    for (size_t w = 0; w < m->W; w++) {
      if (m->head[w] == m->T)
        continue;
      uint32_t t = m->up[w * m->T + m->head[w]];
      uint32_t srv = g->recvs[t].channel;
      double st = m->gready[w * m->T + t];
      if (m->out_free[w] > st)
        st = m->out_free[w];
      if (m->in_free[srv] > st)
        st = m->in_free[srv];
      if (best == SIZE_MAX || st < best_t) {
        best = w;
        best_t = st;
      }
    }
    uint32_t t = m->up[best * m->T + m->head[best]++];
    uint32_t srv = g->recvs[t].channel;
    double done = best_t + xfer_s(m, g->recvs[t].bytes);
    m->out_free[best] = m->in_free[srv] = done;
    double arr = done + m->o.latency_s;
    /* Arrivals at one server come in commit order (its in port is
     * serial), so its CPU takes them first come, first served. */
    double cost = take_s(m, g->recvs[t].bytes, arr > m->cpu_free[srv]);
    if (cost > 0.0) {
      arr = (arr > m->cpu_free[srv] ? arr : m->cpu_free[srv]) + cost;
      m->cpu_free[srv] = arr;
    }
    m->comm[m->ncomm].start = m->gready[best * m->T + t];
    m->comm[m->ncomm].end = arr;
    m->ncomm++;
    if (arr > m->finish[best])
      m->finish[best] = arr;
    if (arr > m->tdone[t])
      m->tdone[t] = arr;
    if (arr > last)
      last = arr;
  }
  return last;
}

/* The early updates (see the header): each server's tensors in the order
 * their gradients were all in (ties by id), back to back on its CPU.
 * Returns the last update's end (0 without transfers). */
static double sim_updates(sim *m) {
  const ar_commsched_graph *g = m->g;
  double last = 0.0;
  for (uint32_t srv = 0; srv < m->S; srv++) {
    size_t n = 0;
    double bytes = 0.0;
    for (size_t t = 0; t < m->T; t++)
      if (g->recvs[t].channel == srv) {
        m->keys[n].ready = m->tdone[t];
        m->keys[n].t = (uint32_t)t;
        n++;
        bytes += (double)g->recvs[t].bytes;
      }
    qsort(m->keys, n, sizeof *m->keys, cmp_ready);
    double free_at = 0.0;
    for (size_t i = 0; i < n; i++) {
      uint32_t t = m->keys[i].t;
      double share = bytes > 0 ? (double)g->recvs[t].bytes / bytes : 1.0 / (double)n;
      double start = m->keys[i].ready > free_at ? m->keys[i].ready : free_at;
      free_at = start + m->o.update_s * share;
      m->comp[m->ncomp].start = start;
      m->comp[m->ncomp].end = free_at;
      m->ncomp++;
      m->uend[t] = free_at;
    }
    if (free_at > last)
      last = free_at;
  }
  return last;
}

/* One iteration under the offers and CPU times in m (the model above):
 * its spans into m->comm and m->comp, its figures into *r. */
static void sim_pass(sim *m, ar_commsched_sim_result *r) {
  sim_params(m);
  for (size_t k = 0; k < m->W * m->T; k++)
    if (m->arrive[k] > r->params_done_s)
      r->params_done_s = m->arrive[k];
  for (size_t w = 0; w < m->W; w++) {
    double end = sim_compute(m, w);
    m->finish[w] = m->cdone[w] = end;
    if (end > r->compute_done_s)
      r->compute_done_s = end;
  }
  double grads = sim_grads(m);
  r->barrier_s = grads > r->compute_done_s ? grads : r->compute_done_s;
  if (m->o.late_update) {
    r->makespan_s = r->barrier_s + m->o.update_s;
    for (size_t srv = 0; srv < m->S; srv++) {
      m->comp[m->ncomp].start = r->barrier_s;
      m->comp[m->ncomp].end = r->makespan_s;
      m->ncomp++;
    }
  } else {
    double upd = sim_updates(m);
    r->makespan_s = upd > r->barrier_s ? upd : r->barrier_s;
  }
}

ar_status ar_commsched_simulate(const ar_commsched_graph *g,
                                const ar_commsched_schedule *s,
                                const ar_commsched_sim_opts *opts,
                                ar_commsched_sim_result *out, ar_err *err) {
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  if (opts)
    o = *opts;
  AR_CHECK(check_opts(g, s, &o, err));
  sim m;
  memset(&m, 0, sizeof m);
  m.g = g;
  m.o = o;
  m.n = g->nops;
  m.T = g->nrecv;
  m.W = o.workers;
  m.S = o.servers;
  ar_status st = AR_OK;
  if (!sim_alloc(&m)) {
    st = ar_errf(err, AR_NOMEM,
                 "commsched simulate: out of memory for %zu workers x %zu "
                 "ops",
                 m.W, m.n);
    goto done;
  }
  build_csr(&m);
  st = list_params(&m, s, err);
  if (st != AR_OK)
    goto done;
  ar_commsched_sim_result r;
  memset(&r, 0, sizeof r);
  int passes = o.overlap && !o.late_update ? SIM_PASSES : 1;
  double base = 0.0, end_prev = 0.0;
  for (int pass = 0; pass < passes; pass++) {
    double shift = 0.0; /* this pass's clock from the last one's */
    if (pass > 0) {
      shift = INFINITY;
      for (size_t t = 0; t < m.T; t++)
        if (m.uend[t] < shift)
          shift = m.uend[t];
      if (!isfinite(shift))
        shift = r.makespan_s;
      for (size_t t = 0; t < m.T; t++)
        m.offer[t] = m.uend[t] - shift;
      for (size_t w = 0; w < m.W; w++)
        m.avail[w] = m.cdone[w] > shift ? m.cdone[w] - shift : 0.0;
    }
    base += shift;
    m.ncomm = m.ncomp = 0;
    memset(&r, 0, sizeof r);
    sim_pass(&m, &r);
    /* Steady state: the time between two iterations' ends. */
    r.iteration_s = pass > 0 ? base + r.makespan_s - end_prev : r.makespan_s;
    end_prev = base + r.makespan_s;
  }
  r.straggler_s = ar_commsched_straggler_spread(m.finish, m.W);
  r.messages = (uint64_t)m.ncomm;
  st = ar_commsched_metrics_compute(m.comm, m.ncomm, m.comp, m.ncomp,
                                    &r.metrics, err);
  if (st != AR_OK)
    goto done;
  if (m.ncomm == 0 && m.ncomp == 0) { /* an empty graph, early updates */
    m.comp[0].start = m.comp[0].end = 0.0;
    m.ncomp = 1;
  }
  /* Some span starts at 0 (a parameter, the first op, or the update of an
   * empty graph) and the makespan's span (an update, an op or a gradient)
   * ends last, so both sides agree exactly. */
  AR_ASSERT(r.metrics.makespan_s == r.makespan_s);
  *out = r;
done:
  sim_free(&m);
  return st;
}
