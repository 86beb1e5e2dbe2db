/* One worker's iteration: its slice of the global batch, the parameters as
 * they arrive (probed with MPI_ANY_TAG, so the order seen is the order the
 * servers posted: the order the gate enforced), forward layer by layer as
 * soon as each layer's parameters are in, backward, each gradient sent as
 * soon as its layer's backward is done, and the iteration report (every
 * op's start and end) to rank 0 — the tracing TicTac's time oracle needs
 * (§4.1).  Layers this worker samples (SLIDE) run per sample through
 * the engine's per-layer training calls; their parameters arrive as the
 * rows that changed (rows.c), which also tells the hash tables what to
 * re-hash at the next rebuild, and their gradients leave as the rows the
 * batch touched.  A worker on a GPU (or told to stage) receives and sends
 * through host copies of its tensors (stage.c): its layers' copy-in joins
 * the per-layer wait, its gradients' copy-out the layer's backward. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include <math.h>
#include <string.h>

ar_status ar__dist_worker_init(ar__dist *c) {
  c->preq = ar_malloc((size_t)c->nt * sizeof *c->preq);
  c->pcount = ar_calloc((size_t)c->nt, sizeof *c->pcount);
  c->report_len = ar__dist_worker_report_len(c);
  c->report = ar_malloc(c->report_len * sizeof *c->report);
  size_t nt = (size_t)c->nt;
  c->w_arrival = ar_malloc(nt * sizeof *c->w_arrival);
  c->w_order_u = ar_malloc(nt * sizeof *c->w_order_u);
  c->w_idx = ar_malloc(nt * sizeof *c->w_idx);
  c->w_bytes = ar_malloc(2 * nt * sizeof *c->w_bytes);
  if (!c->preq || !c->pcount || !c->report || !c->w_arrival || !c->w_order_u || !c->w_idx ||
      !c->w_bytes)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the worker's bookkeeping");
  for (int t = 0; t < c->nt; t++)
    if (c->t[t].rows && !(c->t[t].msg = ar_malloc(c->t[t].wire)))
      return ar_errf(c->err, AR_NOMEM, "out of memory for the rows of '%s' (%zu bytes)",
                     c->t[t].name, c->t[t].wire);
  for (int t = 0; t < c->nt; t++)
    c->preq[t] = MPI_REQUEST_NULL;
  return AR_OK;
}

void ar__dist_worker_fini(ar__dist *c) {
  if (c->preq)
    for (int t = 0; t < c->nt; t++)
      if (c->preq[t] != MPI_REQUEST_NULL)
        MPI_Request_free(&c->preq[t]);
  ar_free(c->preq);
  ar_free(c->pcount);
  ar_free(c->report);
  ar_free(c->w_arrival);
  ar_free(c->w_order_u);
  ar_free(c->w_idx);
  ar_free(c->w_bytes);
}

/* Copies rows [lo, hi) of src into dst. */
static void slice_batch(const ar_batch *src, int64_t lo, int64_t hi, ar_batch *dst) {
  int64_t f0 = src->row_ptr[lo], l0 = src->lab_ptr[lo];
  int64_t nf = src->row_ptr[hi] - f0, nl = src->lab_ptr[hi] - l0;
  dst->rows = hi - lo;
  for (int64_t r = 0; r <= hi - lo; r++) {
    dst->row_ptr[r] = src->row_ptr[lo + r] - f0;
    dst->lab_ptr[r] = src->lab_ptr[lo + r] - l0;
  }
  memcpy(dst->idx, src->idx + f0, (size_t)nf * sizeof *dst->idx);
  memcpy(dst->val, src->val + f0, (size_t)nf * sizeof *dst->val);
  memcpy(dst->lab, src->lab + l0, (size_t)nl * sizeof *dst->lab);
}

/* Reads the next global batch (the same stream on every worker) and loads
 * this worker's contiguous share of it.  *global_rows: rows of the whole
 * batch (the gradients are scaled by rows / global_rows). */
static ar_status load_share(ar__dist *c, int64_t *global_rows) {
  const ar_spec *s = c->spec;
  AR_CHECK(ar_reader_next(c->train, s->train.batch, &c->gbatch, c->err));
  if (c->gbatch.rows == 0) {
    c->st.epoch++;
    c->st.rows_in_epoch = 0;
    AR_CHECK(ar_reader_rewind(c->train, (uint64_t)c->st.epoch, c->err));
    AR_CHECK(ar_reader_next(c->train, s->train.batch, &c->gbatch, c->err));
  }
  int64_t R = c->gbatch.rows;
  int64_t lo = R * c->widx / c->W, hi = R * (c->widx + 1) / c->W;
  slice_batch(&c->gbatch, lo, hi, &c->lbatch);
  c->st.rows_in_epoch += R;
  c->st.samples += R;
  *global_rows = R;
  ar_status st = ar_model_load(c->model, &c->lbatch);
  if (st != AR_OK)
    return ar_errf(c->err, st, "worker %d: %s", c->widx, c->model->err.msg);
  return AR_OK;
}

typedef struct wrk_iter {
  double *arrival; /* (nt) */
  double *order;   /* (nt) transfer ids in probe order */
  uint32_t *order_u;
  size_t norder;
  int *idx;
} wrk_iter;

/* A rows message of parameters is in: its rows into the replica, and,
 * unless it is a full copy the tables already reflect, into the set the
 * next table rebuild re-hashes. */
static ar_status take_rows(ar__dist *c, int t) {
  ar__dist_tensor *T = &c->t[t];
  AR_CHECK(ar__rows_check(c, T, T->msg, (size_t)c->pcount[t], T->server));
  ar__rows r;
  ar__rows_view(T->msg, &r);
  ar__rows_apply(T, &r, ar__dist_param_buf(T), false);
  if (!(r.flags & AR__ROWS_RESYNC) && ar__dist_sampled(c, c->rank, T->layer))
    ar_model_rows_changed(c->model, T->layer, r.ids, r.n);
  return AR_OK;
}

/* Matches every parameter message that has come (in posting order) and
 * completes the receives that are done. */
static ar_status recv_step(ar__dist *c, wrk_iter *w, bool *progressed) {
  for (int s = 0; s < c->S; s++) {
    for (;;) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status status;
      int rc = MPI_Improbe(s, MPI_ANY_TAG, c->cparam, &flag, &msg, &status);
      if (rc != MPI_SUCCESS)
        return ar__dist_mpi_err(c, rc, "iteration %lld: probing parameters from rank %d",
                                (long long)c->st.iteration + 1, s);
      if (!flag)
        break;
      int t = status.MPI_TAG;
      if (t < 0 || t >= c->nt || c->t[t].server != s || !isnan(w->arrival[t]) ||
          c->preq[t] != MPI_REQUEST_NULL)
        return ar_errf(c->err, AR_STATE,
                       "iteration %lld: rank %d sent parameter tensor %d, which it does not "
                       "own or already sent (ranks running different job files?)",
                       (long long)c->st.iteration + 1, s, t);
      const ar__dist_tensor *T = &c->t[t];
      c->pcount[t] = (int)T->bytes;
      if (T->rows) {
        MPI_Get_count(&status, MPI_BYTE, &c->pcount[t]);
        if (c->pcount[t] < 0 || (size_t)c->pcount[t] > T->wire)
          return ar_errf(c->err, AR_STATE, "iteration %lld: rank %d sent %d bytes for '%s', "
                         "more than its rows can take (%zu; ranks running different job "
                         "files?)", (long long)c->st.iteration + 1, s, c->pcount[t], T->name,
                         T->wire);
        rc = MPI_Imrecv(T->msg, c->pcount[t], MPI_BYTE, &msg, &c->preq[t]);
      } else {
        rc = MPI_Imrecv(ar__dist_param_buf(T), (int)T->count, MPI_FLOAT, &msg, &c->preq[t]);
      }
      if (rc != MPI_SUCCESS)
        return ar__dist_mpi_err(c, rc, "receiving '%s' from rank %d", c->t[t].name, s);
      c->report[AR__WREP_HEAD + ar_commsched_graph_recv_op(c->g, (uint32_t)t)] =
          ar__dist_clock(c); /* matched: the copy starts */
      w->order[w->norder] = (double)t;
      w->order_u[w->norder++] = (uint32_t)t;
      *progressed = true;
    }
  }
  int n = 0;
  int rc = MPI_Testsome(c->nt, c->preq, &n, w->idx, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "iteration %lld: receiving parameters",
                            (long long)c->st.iteration + 1);
  if (n == MPI_UNDEFINED)
    n = 0;
  double now = ar__dist_clock(c);
  for (int i = 0; i < n; i++) {
    w->arrival[w->idx[i]] = now;
    if (c->t[w->idx[i]].rows)
      AR_CHECK(take_rows(c, w->idx[i]));
    *progressed = true;
  }
  return AR_OK;
}

/* Waits until both tensors of layer l are in (staged: and copied into
 * the model); *in is the time they were all in, before the copy-in. */
static ar_status wait_layer(ar__dist *c, wrk_iter *w, int l, double *in) {
  ar__dist_poll_reset(c);
  for (;;) {
    bool progressed = false;
    AR_CHECK(recv_step(c, w, &progressed));
    int missing = -1;
    for (int t = 2 * l; t <= 2 * l + 1; t++)
      if (isnan(w->arrival[t]))
        missing = t;
    if (missing < 0) {
      *in = ar__dist_clock(c);
      if (c->staged)
        AR_CHECK(ar__stage_params_in(c, l));
      /* The replica now holds step m->step's rows: the rebuild that
       * single-process training does right after that step. */
      if (ar__dist_sampled(c, c->rank, l) && ar_model_sampled_rehash(c->model, l) != AR_OK)
        return ar_errf(c->err, AR_STATE, "worker %d: %s", c->widx, c->model->err.msg);
      return AR_OK;
    }
    AR_CHECK(ar__dist_poll(c, progressed, c->t[missing].server, "parameters"));
  }
}

/* Sends layer l's gradients: a rows tensor as the rows the batch touched
 * (sampled here) or every row (dense here); then a sampled layer's
 * gradient rows are zeroed for the next batch (a worker does not step). */
static ar_status send_grads(ar__dist *c, int l) {
  size_t n = 0;
  const uint32_t *ids = NULL;
  bool sampled = ar__dist_sampled(c, c->rank, l);
  if (sampled)
    ids = ar_model_grad_rows(c->model, l, &n);
  for (int t = 2 * l; t <= 2 * l + 1; t++) {
    ar__dist_tensor *T = &c->t[t];
    int rc;
    if (T->rows) {
      /* b may go dense when that is smaller: the touched rows are w's
       * ids (a layer's w and b are on one server). */
      bool rows = sampled && (!T->bias || ar__rows_size(T, n) < ar__rows_size(T, 0) + T->bytes);
      T->msg_bytes = ar__rows_pack(T, ar__dist_grad_buf(T), rows ? ids : NULL, n, 0, T->msg);
      rc = MPI_Isend(T->msg, (int)T->msg_bytes, MPI_BYTE, T->server, t, c->cgrad, &c->preq[t]);
    } else {
      rc = MPI_Isend(ar__dist_grad_buf(T), (int)T->count, MPI_FLOAT, T->server, t, c->cgrad,
                     &c->preq[t]);
    }
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "iteration %lld: sending the gradient of '%s' to rank %d",
                              (long long)c->st.iteration + 1, T->name, T->server);
    c->report[AR__WREP_HEAD + 2 * c->nops + 3 * (size_t)c->nt + (size_t)t] =
        (double)(T->rows ? T->msg_bytes : T->bytes);
  }
  if (sampled)
    ar_model_grad_rows_clear(c->model, l);
  return AR_OK;
}

static ar_status wait_grads(ar__dist *c, wrk_iter *w) {
  ar__dist_poll_reset(c);
  for (;;) {
    int n = 0;
    int rc = MPI_Testsome(c->nt, c->preq, &n, w->idx, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "iteration %lld: sending gradients",
                              (long long)c->st.iteration + 1);
    if (n == MPI_UNDEFINED)
      return AR_OK;
    int peer = -1;
    for (int t = 0; t < c->nt && peer < 0; t++)
      if (c->preq[t] != MPI_REQUEST_NULL)
        peer = c->t[t].server;
    if (peer < 0)
      return AR_OK;
    AR_CHECK(ar__dist_poll(c, n > 0, peer, "acceptance of gradients"));
  }
}

/* Waits for the device's queue (an asynchronous device reports a failed
 * op here) and records op's span. */
static ar_status timed_sync(ar__dist *c, ar_commsched_op op, double t0) {
  ar_status st = ar_device_sync(c->dev);
  if (st != AR_OK)
    return ar_errf(c->err, st, "worker %d: iteration %lld on %s: %s", c->widx,
                   (long long)c->st.iteration + 1, c->dev_name, ar_device_errmsg(c->dev));
  double *rep = c->report + AR__WREP_HEAD;
  rep[op] = t0;
  rep[c->nops + op] = ar__dist_clock(c);
  return AR_OK;
}

/* Forward, loss and backward on the loaded rows, waiting for each layer's
 * parameters and sending each layer's gradients as soon as they exist. */
static ar_status compute(ar__dist *c, wrk_iter *w, int64_t R, double *loss_sum) {
  ar_model *m = c->model;
  ar_device *d = c->dev;
  int n = m->n_layers;
  int64_t rows = m->rows;
  /* The loss gradient is divided by the global batch's rows, so the
   * workers' gradients sum to the mean over the global batch. */
  m->grad_rows = R;
  double lsum = 0.0;
  for (int l = 0; l < n; l++) {
    double in = 0.0;
    AR_CHECK(wait_layer(c, w, l, &in));
    /* A staged layer's copy-in is part of its forward op: the oracle's
     * op times are what a layer costs once its transfers are in. */
    double t0 = c->staged ? in : ar__dist_clock(c);
    if (rows > 0 && ar_model_train_forward_layer(m, l, &lsum) != AR_OK)
      return ar_errf(c->err, AR_STATE, "worker %d: %s", c->widx, m->err.msg);
    AR_CHECK(timed_sync(c, c->fwd[l], t0));
  }
  double t0 = ar__dist_clock(c);
  *loss_sum = 0.0;
  if (rows > 0)
    *loss_sum = m->layers[n - 1].smp ? lsum : (double)ar_model_loss(m, true) * (double)rows;
  if (m->loss_status != AR_OK)
    return ar_errf(c->err, m->loss_status, "worker %d: %s", c->widx, m->err.msg);
  AR_CHECK(timed_sync(c, c->loss_op, t0));
  for (int l = n - 1; l >= 0; l--) {
    t0 = ar__dist_clock(c);
    if (rows > 0) {
      if (ar_model_train_backward_layer(m, l) != AR_OK)
        return ar_errf(c->err, AR_STATE, "worker %d: %s", c->widx, m->err.msg);
    } else if (!m->layers[l].smp) { /* a sampled layer's rows are zero */
      ar_device_fill(d, m->layers[l].gw, m->layers[l].in * m->layers[l].out, 0.0f);
      ar_device_fill(d, m->layers[l].gb, m->layers[l].out, 0.0f);
    }
    if (c->staged)
      AR_CHECK(ar__stage_grads_out(c, l)); /* part of the layer's backward */
    AR_CHECK(timed_sync(c, c->bwd[l], t0));
    double ready = c->report[AR__WREP_HEAD + c->nops + c->bwd[l]];
    c->report[AR__WREP_HEAD + 2 * c->nops + 2 * l] = ready;
    c->report[AR__WREP_HEAD + 2 * c->nops + 2 * l + 1] = ready;
    AR_CHECK(send_grads(c, l));
  }
  /* The step the servers take now: the model's step numbers the sampled
   * layers' random streams and their rebuild schedule, as on one process. */
  ar_model_advance_step(m);
  return AR_OK;
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
  int64_t R = 0;
  AR_CHECK(load_share(c, &R));
  size_t nt = (size_t)c->nt;
  double *rep = c->report;
  for (size_t i = 0; i < c->report_len; i++)
    rep[i] = NAN;
  wrk_iter w;
  w.arrival = c->w_arrival;
  w.order_u = c->w_order_u;
  w.idx = c->w_idx;
  for (size_t t = 0; t < nt; t++)
    w.arrival[t] = NAN;
  w.order = rep + AR__WREP_HEAD + 2 * c->nops + nt;
  w.norder = 0;
  rep[AR__WREP_T0] = ar__dist_clock(c);
  double loss_sum = 0.0;
  ar_status st = compute(c, &w, R, &loss_sum);
  if (st == AR_OK)
    st = wait_grads(c, &w);
  if (st == AR_OK) {
    for (size_t t = 0; t < nt; t++) { /* a recv op ends when its tensor is in */
      rep[AR__WREP_HEAD + c->nops + ar_commsched_graph_recv_op(c->g, (uint32_t)t)] =
          w.arrival[t];
      rep[AR__WREP_HEAD + 2 * c->nops + 2 * nt + t] = (double)c->pcount[t];
    }
    rep[AR__WREP_ITER] = (double)iter;
    rep[AR__WREP_ROWS] = (double)c->model->rows;
    rep[AR__WREP_LOSS_SUM] = loss_sum;
    rep[AR__WREP_EPOCH] = (double)c->st.epoch;
    rep[AR__WREP_ROWS_IN_EPOCH] = (double)c->st.rows_in_epoch;
    st = send_report(c);
  }
  if (st == AR_OK && c->o.on_recv_order)
    c->o.on_recv_order(c->o.ctx, iter, w.order_u, w.norder);
  if (st == AR_OK && c->o.on_bytes) {
    const double *b = rep + AR__WREP_HEAD + 2 * c->nops + 2 * nt;
    for (size_t i = 0; i < 2 * nt; i++)
      c->w_bytes[i] = (uint64_t)b[i];
    c->o.on_bytes(c->o.ctx, iter, c->w_bytes, c->w_bytes + nt, nt);
  }
  return st;
}
