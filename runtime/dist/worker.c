/* One worker's iteration: its job's step (runtime/engine: its slice of the
 * global batch, forward, loss, backward a layer at a time) with this
 * file's hooks around each layer — before a layer's forward its
 * parameters as they arrive (probed with MPI_ANY_TAG, so the order seen is
 * the order the servers posted: the order the gate enforced), after its
 * backward its gradients sent at once, and instead of the optimizer the
 * wait until they are accepted — then the iteration report (every op's
 * start and end) to rank 0: the tracing TicTac's time oracle needs
 * (§4.1).  Layers this worker samples (SLIDE) run per sample in the
 * engine; their parameters arrive as the rows that changed (rows.c),
 * which also tells the hash tables what to re-hash at the next rebuild,
 * and their gradients leave as the rows the batch touched.  A worker on a
 * GPU (or told to stage) receives and sends through host copies of its
 * tensors (stage.c): its layers' copy-in joins the per-layer wait, its
 * gradients' copy-out the layer's backward.  A graph model's hooks are per
 * node of its net (ar__dist_graph_before/after): before a node's forward
 * the parameters it is the first to read, after its backward the
 * gradients it made final (graph.c's lists).  A chain lowered onto the
 * graph engine computes with its net but hooks as the chain: its nodes
 * are the layers and the loss (lowered.c). */
#define _GNU_SOURCE
#include "dist_impl.h"

#include "accelrt/net.h"

#include <math.h>
#include <string.h>

static ar_status w_before(void *ctx, ar_job_phase phase, int l);
static ar_status w_after(void *ctx, ar_job_phase phase, int l);
static ar_status w_step(void *ctx);

void ar__dist_worker_hooks(ar__dist *c) {
  c->hooks.before = w_before;
  c->hooks.after = w_after;
  c->hooks.step = w_step;
  c->hooks.ctx = c;
}

ar_status ar__dist_worker_init(ar__dist *c) {
  size_t nt = (size_t)c->nt;
  c->preq = ar_malloc(c->nslots * sizeof *c->preq);
  c->pmatched = ar_calloc(nt, sizeof *c->pmatched);
  c->pleft = ar_calloc(nt, sizeof *c->pleft);
  c->pbytes = ar_calloc(nt, sizeof *c->pbytes);
  c->report_len = ar__wrep(c, AR__WREP_PARTS);
  c->report = ar_malloc(c->report_len * sizeof *c->report);
  c->w_arrival = ar_malloc(nt * sizeof *c->w_arrival);
  c->w_order_u = ar_malloc(nt * sizeof *c->w_order_u);
  c->w_idx = ar_malloc(c->nslots * sizeof *c->w_idx);
  c->w_bytes = ar_malloc(2 * nt * sizeof *c->w_bytes);
  if (!c->preq || !c->pmatched || !c->pleft || !c->pbytes || !c->report ||
      !c->w_arrival || !c->w_order_u || !c->w_idx || !c->w_bytes)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the worker's bookkeeping");
  int n;
  AR_CHECK(ar__dist_count(c, c->nslots, "the worker's requests", &n));
  AR_CHECK(ar__dist_count(c, c->report_len, "the worker's report", &n));
  for (int t = 0; t < c->nt; t++)
    if (c->t[t].rows && !(c->t[t].msg = ar_malloc(c->t[t].wire)))
      return ar_errf(c->err, AR_NOMEM, "out of memory for the rows of '%s' (%zu bytes)",
                     c->t[t].name, c->t[t].wire);
  for (size_t i = 0; i < c->nslots; i++)
    c->preq[i] = MPI_REQUEST_NULL;
  return AR_OK;
}

void ar__dist_worker_fini(ar__dist *c) {
  if (c->preq)
    for (size_t i = 0; i < c->nslots; i++)
      if (c->preq[i] != MPI_REQUEST_NULL)
        MPI_Request_free(&c->preq[i]);
  ar_free(c->preq);
  ar_free(c->pmatched);
  ar_free(c->pleft);
  ar_free(c->pbytes);
  ar_free(c->report);
  ar_free(c->w_arrival);
  ar_free(c->w_order_u);
  ar_free(c->w_idx);
  ar_free(c->w_bytes);
}

/* A rows message of parameters is in: its rows into the replica, and,
 * unless it is a full copy the tables already reflect, into the set the
 * next table rebuild re-hashes. */
static ar_status take_rows(ar__dist *c, int t) {
  ar__dist_tensor *T = &c->t[t];
  AR_CHECK(ar__rows_check(c, T, T->msg, c->pbytes[t], T->server));
  ar__rows r;
  ar__rows_view(T->msg, &r);
  ar__rows_apply(T, &r, ar__dist_param_buf(T), false);
  if (!(r.flags & AR__ROWS_RESYNC) && ar__dist_sampled(c, c->rank, T->layer))
    ar__dist_rows_changed(c, T->layer, r.ids, r.n);
  return AR_OK;
}

/* The next piece of tensor t's parameters, probed as msg from server s:
 * its receive, and when it is the first piece, the match time and the
 * order. */
static ar_status match_piece(ar__dist *c, int s, int t, MPI_Message *msg, MPI_Status *status) {
  const ar__dist_tensor *T = &c->t[t];
  int k = c->pmatched[t], n = 0;
  size_t off = (size_t)k * c->piece;
  size_t cap = T->wire - off < c->piece ? T->wire - off : c->piece;
  MPI_Get_count(status, MPI_BYTE, &n);
  if (n < 0 || (size_t)n > cap || (!T->rows && (size_t)n != cap))
    return ar_errf(c->err, AR_STATE, "iteration %lld: rank %d sent %d bytes as piece %d of "
                   "'%s', which takes %zu (ranks running different job files?)",
                   (long long)c->iter + 1, s, n, k, T->name, cap);
  char *buf = T->rows ? (char *)T->msg : (char *)ar__dist_param_buf(T);
  int rc = MPI_Imrecv(buf + off, n, MPI_BYTE, msg, &c->preq[T->slot + (size_t)k]);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "receiving '%s' from rank %d", T->name, s);
  c->pmatched[t]++;
  c->pbytes[t] += (size_t)n;
  if (k == 0) {
    c->report[ar__wrep(c, AR__WREP_OP_START) + ar_commsched_graph_recv_op(c->g, (uint32_t)t)] =
        ar__dist_clock(c); /* matched: the copy starts */
    c->report[ar__wrep(c, AR__WREP_ORDER) + c->w_norder] = (double)t;
    c->w_order_u[c->w_norder++] = (uint32_t)t;
    if (c->tl_det) { /* its place among its server's, as probed */
      c->tl_t0[t] = ar_now();
      c->tl_order[t] = c->tl_next[s]++;
    }
  }
  return AR_OK;
}

/* Matches every parameter message that has come (in posting order) and
 * completes the receives that are done. */
static ar_status recv_step(ar__dist *c, bool *progressed) {
  for (int s = 0; s < c->S; s++) {
    for (;;) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status status;
      int rc = MPI_Improbe(s, MPI_ANY_TAG, c->cparam, &flag, &msg, &status);
      if (rc != MPI_SUCCESS)
        return ar__dist_mpi_err(c, rc, "iteration %lld: probing parameters from rank %d",
                                (long long)c->iter + 1, s);
      if (!flag)
        break;
      int t = status.MPI_TAG;
      if (t < 0 || t >= c->nt || c->t[t].server != s || c->pmatched[t] >= c->t[t].pieces)
        return ar_errf(c->err, AR_STATE,
                       "iteration %lld: rank %d sent parameter tensor %d, which it does not "
                       "own or already sent (ranks running different job files?)",
                       (long long)c->iter + 1, s, t);
      AR_CHECK(match_piece(c, s, t, &msg, &status));
      *progressed = true;
    }
  }
  int n = 0;
  int rc = MPI_Testsome((int)c->nslots, c->preq, &n, c->w_idx, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "iteration %lld: receiving parameters",
                            (long long)c->iter + 1);
  if (n == MPI_UNDEFINED)
    n = 0;
  double now = ar__dist_clock(c);
  for (int i = 0; i < n; i++) {
    int t = (int)c->slot_t[c->w_idx[i]];
    *progressed = true;
    if (--c->pleft[t] > 0)
      continue;
    c->w_arrival[t] = now;
    if (c->tl_det)
      ar__dist_tl_transfer(c, c->t[t].server, t, false, c->tl_order[t], c->pbytes[t],
                           c->tl_t0[t], ar_now());
    if (c->t[t].rows)
      AR_CHECK(take_rows(c, t));
  }
  return AR_OK;
}

/* Waits until the n transfers of list are in; *in is the time they were
 * all in. */
static ar_status wait_tensors(ar__dist *c, const int *list, int n, double *in) {
  ar__dist_poll_reset(c);
  for (;;) {
    bool progressed = false;
    AR_CHECK(recv_step(c, &progressed));
    int missing = -1;
    for (int i = 0; i < n; i++)
      if (isnan(c->w_arrival[list[i]]))
        missing = list[i];
    if (missing < 0) {
      *in = ar__dist_clock(c);
      return AR_OK;
    }
    AR_CHECK(ar__dist_poll(c, progressed, c->t[missing].server, "parameters"));
  }
}

/* Waits until both tensors of layer l are in (staged: and copied into
 * the model); *in is the time they were all in, before the copy-in. */
static ar_status wait_layer(ar__dist *c, int l, double *in) {
  int both[2] = {2 * l, 2 * l + 1};
  AR_CHECK(wait_tensors(c, both, 2, in));
  if (c->staged)
    AR_CHECK(ar__stage_params_in(c, l));
  /* The replica now holds step m->step's rows: the rebuild that
   * single-process training does right after that step. */
  return ar__dist_sampled(c, c->rank, l) ? ar__dist_rows_rehash(c, l) : AR_OK;
}

/* Posts the send of transfer t's gradient (bytes at buf). */
static ar_status post_grad(ar__dist *c, int t, void *buf, size_t bytes) {
  ar__dist_tensor *T = &c->t[t];
  if (c->tl_det) { /* the receives are done: pleft now counts the sends */
    c->tl_t0[t] = ar_now();
    c->tl_order[t] = c->tl_gnext[T->server]++;
    c->pleft[t] = T->pieces;
  }
  AR_CHECK(ar__dist_post(c, true, buf, bytes, T->pieces, T->server, t, c->cgrad,
                         &c->preq[T->slot], "sending the gradient of", T->name));
  c->report[ar__wrep(c, AR__WREP_GRAD_BYTES) + (size_t)t] = (double)bytes;
  return AR_OK;
}

/* Sends layer l's gradients: a rows tensor as the rows the batch touched
 * (sampled here) or every row (dense here); then a sampled layer's
 * gradient rows are zeroed for the next batch (a worker does not step). */
static ar_status send_grads(ar__dist *c, int l) {
  size_t n = 0;
  const uint32_t *ids = NULL;
  bool sampled = ar__dist_sampled(c, c->rank, l);
  if (sampled)
    ids = ar__dist_rows_touched(c, l, &n);
  for (int t = 2 * l; t <= 2 * l + 1; t++) {
    ar__dist_tensor *T = &c->t[t];
    void *buf = ar__dist_grad_buf(T);
    size_t bytes = T->bytes;
    if (T->rows) {
      /* b may go dense when that is smaller: the touched rows are w's
       * ids (a layer's w and b are on one server). */
      bool rows = sampled && (!T->bias || ar__rows_size(T, n) < ar__rows_size(T, 0) + T->bytes);
      T->msg_bytes = ar__rows_pack(T, ar__dist_grad_buf(T), rows ? ids : NULL, n, 0, T->msg);
      buf = T->msg;
      bytes = T->msg_bytes;
    }
    AR_CHECK(post_grad(c, t, buf, bytes));
  }
  if (sampled)
    ar__dist_rows_clear(c, l);
  return AR_OK;
}

/* Gradient sends completed (c->w_idx[0..n)): a message whose last piece
 * went is a span of the timeline (detailed iterations only). */
static void sends_done(ar__dist *c, int n) {
  for (int i = 0; i < n; i++) {
    int t = (int)c->slot_t[c->w_idx[i]];
    if (--c->pleft[t] > 0)
      continue;
    size_t bytes = (size_t)c->report[ar__wrep(c, AR__WREP_GRAD_BYTES) + (size_t)t];
    ar__dist_tl_transfer(c, c->t[t].server, t, true, c->tl_order[t], bytes, c->tl_t0[t],
                         ar_now());
  }
}

/* The gradient sends posted so far, tested once (detailed iterations,
 * after each layer's sends, so that a send's span ends near its
 * completion rather than at the end of the backward pass). */
static ar_status test_sends(ar__dist *c) {
  int n = 0;
  int rc = MPI_Testsome((int)c->nslots, c->preq, &n, c->w_idx, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "iteration %lld: sending gradients", (long long)c->iter + 1);
  if (n != MPI_UNDEFINED)
    sends_done(c, n);
  return AR_OK;
}

/* Instead of the optimizer (the servers step): waits until every
 * gradient was accepted. */
static ar_status w_step(void *ctx) {
  ar__dist *c = ctx;
  ar__dist_poll_reset(c);
  for (;;) {
    int n = 0;
    int rc = MPI_Testsome((int)c->nslots, c->preq, &n, c->w_idx, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "iteration %lld: sending gradients",
                              (long long)c->iter + 1);
    if (n == MPI_UNDEFINED)
      return AR_OK;
    if (c->tl_det)
      sends_done(c, n);
    int peer = -1;
    for (size_t i = 0; i < c->nslots && peer < 0; i++)
      if (c->preq[i] != MPI_REQUEST_NULL)
        peer = c->t[c->slot_t[i]].server;
    if (peer < 0)
      return AR_OK;
    AR_CHECK(ar__dist_poll(c, n > 0, peer, "acceptance of gradients"));
  }
}

/* Waits for the device's queue (an asynchronous device reports a failed
 * op here) and records op's span from c->op_t0. */
static ar_status timed_sync(ar__dist *c, ar_commsched_op op) {
  ar_status st = ar_device_sync(c->dev);
  if (st != AR_OK)
    return ar_errf(c->err, st, "worker %d: iteration %lld on %s: %s", c->widx,
                   (long long)c->iter + 1, c->dev_name, ar_device_errmsg(c->dev));
  c->report[ar__wrep(c, AR__WREP_OP_START) + op] = c->op_t0;
  c->report[ar__wrep(c, AR__WREP_OP_END) + op] = ar__dist_clock(c);
  return AR_OK;
}

static ar_status w_before(void *ctx, ar_job_phase phase, int l) {
  ar__dist *c = ctx;
  if (c->lowered)
    return ar__dist_lowered_before(c, phase, l);
  return c->graph ? ar__dist_graph_before(c, phase, l) : ar__dist_chain_before(c, phase, l);
}

static ar_status w_after(void *ctx, ar_job_phase phase, int l) {
  ar__dist *c = ctx;
  if (c->lowered)
    return ar__dist_lowered_after(c, phase, l);
  return c->graph ? ar__dist_graph_after(c, phase, l) : ar__dist_chain_after(c, phase, l);
}

/* Before a layer's forward: its parameters (a staged layer's copy-in is
 * part of its forward op: the oracle's op times are what a layer costs
 * once its transfers are in); before the loss and a backward: the time. */
ar_status ar__dist_chain_before(ar__dist *c, ar_job_phase phase, int l) {
  if (phase != AR_JOB_FORWARD) {
    c->op_t0 = ar__dist_clock(c);
    return AR_OK;
  }
  if (l == 0)
    c->report[AR__WREP_T0] = ar__dist_clock(c);
  double in = 0.0, w0 = c->tl_det ? ar_now() : 0.0;
  AR_CHECK(wait_layer(c, l, &in));
  if (c->tl_det) { /* in is on the dist clock: converted, never past now */
    double w1 = ar_now();
    if (c->tl_conv + in < w1)
      w1 = c->tl_conv + in;
    ar_trace_add_span(c->tl, AR_TRACE_STEPS, "wait", "wait", c->spec->layers[l].name, w0, w1,
                      true);
  }
  c->op_t0 = c->staged ? in : ar__dist_clock(c);
  return AR_OK;
}

/* After each op its span; after a layer's backward its gradients go (a
 * staged layer's copy-out is part of its backward). */
ar_status ar__dist_chain_after(ar__dist *c, ar_job_phase phase, int l) {
  if (phase == AR_JOB_FORWARD)
    return timed_sync(c, c->fwd[l]);
  if (phase == AR_JOB_LOSS)
    return timed_sync(c, c->loss_op);
  if (c->staged)
    AR_CHECK(ar__stage_grads_out(c, l));
  AR_CHECK(timed_sync(c, c->bwd[l]));
  double ready = c->report[ar__wrep(c, AR__WREP_OP_END) + c->bwd[l]];
  c->report[ar__wrep(c, AR__WREP_READY) + 2 * (size_t)l] = ready;
  c->report[ar__wrep(c, AR__WREP_READY) + 2 * (size_t)l + 1] = ready;
  AR_CHECK(send_grads(c, l));
  return c->tl_det ? test_sends(c) : AR_OK;
}

/* A graph model's node (graph.c): before its forward the parameters it
 * reads first, after its backward the gradients it made final. */
ar_status ar__dist_graph_before(ar__dist *c, ar_job_phase phase, int node) {
  if (phase != AR_JOB_FORWARD) {
    c->op_t0 = ar__dist_clock(c);
    return AR_OK;
  }
  if (node == c->first_node) /* the forward order's first */
    c->report[AR__WREP_T0] = ar__dist_clock(c);
  int lo = c->need_at[node], hi = c->need_at[node + 1];
  if (hi > lo) {
    double in = 0.0, w0 = c->tl_det ? ar_now() : 0.0;
    AR_CHECK(wait_tensors(c, c->need + lo, hi - lo, &in));
    if (c->tl_det) {
      double w1 = ar_now();
      if (c->tl_conv + in < w1)
        w1 = c->tl_conv + in;
      ar_trace_add_span(c->tl, AR_TRACE_STEPS, "wait", "wait", ar_net_node_name(c->net, node),
                        w0, w1, true);
    }
  }
  c->op_t0 = ar__dist_clock(c);
  return AR_OK;
}

ar_status ar__dist_graph_after(ar__dist *c, ar_job_phase phase, int node) {
  if (phase == AR_JOB_FORWARD)
    return timed_sync(c, c->fwd[node]);
  AR_CHECK(timed_sync(c, c->bwd[node]));
  double ready = c->report[ar__wrep(c, AR__WREP_OP_END) + c->bwd[node]];
  for (int i = c->ready_at[node]; i < c->ready_at[node + 1]; i++) {
    int t = c->ready[i];
    c->report[ar__wrep(c, AR__WREP_READY) + (size_t)t] = ready;
    AR_CHECK(post_grad(c, t, c->t[t].g, c->t[t].bytes));
  }
  return c->tl_det && c->ready_at[node + 1] > c->ready_at[node] ? test_sends(c) : AR_OK;
}

static ar_status send_report(ar__dist *c) {
  MPI_Request q;
  int rc = MPI_Isend(c->report, (int)c->report_len, MPI_DOUBLE, 0, AR__DIST_TAG_REPORT, c->cctl,
                     &q);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "sending the iteration report to rank 0");
  return ar__dist_wait(c, &q, 0, "acceptance of the iteration report");
}

ar_status ar__dist_worker_iteration(ar__dist *c, int64_t iter) {
  size_t nt = (size_t)c->nt;
  double *rep = c->report;
  for (size_t i = 0; i < c->report_len; i++)
    rep[i] = NAN;
  for (size_t t = 0; t < nt; t++) {
    c->w_arrival[t] = NAN;
    c->pmatched[t] = 0;
    c->pleft[t] = c->t[t].pieces;
    c->pbytes[t] = 0;
  }
  c->w_norder = 0;
  ar__dist_tl_begin(c, iter, c->sched);
  AR_CHECK(ar_job_step(c->job, c->err));
  for (size_t t = 0; t < nt; t++) { /* a recv op ends when its tensor is in */
    rep[ar__wrep(c, AR__WREP_OP_END) + ar_commsched_graph_recv_op(c->g, (uint32_t)t)] =
        c->w_arrival[t];
    rep[ar__wrep(c, AR__WREP_PARAM_BYTES) + t] = (double)c->pbytes[t];
  }
  const ar_ckpt_state *pos = ar_job_state(c->job);
  rep[AR__WREP_ITER] = (double)iter;
  rep[AR__WREP_ROWS] = (double)ar_job_last_rows(c->job);
  rep[AR__WREP_LOSS_SUM] = ar_job_last_loss_sum(c->job);
  rep[AR__WREP_EPOCH] = (double)pos->epoch;
  rep[AR__WREP_ROWS_IN_EPOCH] = (double)pos->rows_in_epoch;
  AR_CHECK(send_report(c));
  if (c->o.on_recv_order)
    c->o.on_recv_order(c->o.ctx, iter, c->w_order_u, c->w_norder);
  if (c->o.on_bytes) {
    const double *b = rep + ar__wrep(c, AR__WREP_PARAM_BYTES);
    for (size_t i = 0; i < 2 * nt; i++)
      c->w_bytes[i] = (uint64_t)b[i];
    c->o.on_bytes(c->o.ctx, iter, c->w_bytes, c->w_bytes + nt, nt);
  }
  return AR_OK;
}
