/* One parameter server's iteration: the parameters of its shard go to
 * every worker through the commsched gate (TicTac §5's sender-side
 * enforcement) and, with link emulation, through a token bucket at its
 * out port; the workers' gradients come back through its in port; each
 * tensor's are summed and its update applied as soon as every worker's
 * gradient of it is in (early update: the updates overlap the gradients
 * still coming), and an updated tensor goes to the next iteration's gate
 * at once (iterations overlap: once the stop vote says the next iteration
 * runs and its schedule is known, its send side begins while this one's
 * gradients still come; a second gate, send stamps and counters per
 * parity; the slot of a tensor's send is free, since its update waited
 * for every send of this iteration).  The next iteration still reads the
 * parameters after this one's update, as synchronous SGD does; the gate
 * keeps its order, so under TIC/TAC one server sends nothing early until
 * its first transfer, the first layer's, is updated.  Layers that some
 * worker samples go as rows both ways (rows.c): only the rows the last
 * update changed go out (at the next iteration's start: their sparse Adam
 * needs every gradient), and the workers' touched rows are summed and
 * updated by sparse Adam. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include "accelrt/net.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "accelrt/lsh.h"

/* A parameter send of the next iteration that completed during this one:
 * its trace span, recorded when that iteration begins (spans belong to
 * the iteration current when they are added). */
typedef struct ar__dist_tl_pend {
  int w, t;
  uint32_t order;
  size_t bytes;
  double t0, t1;
} ar__dist_tl_pend;

/* The gate that enforces the order and, with link emulation, one pacer
 * per port of this server: its out port is shared by the parameters of
 * all its workers, its in port by their gradients (the fan-in); the
 * simulator models the same ports.  No burst: a plain serial link at the
 * line rate. */
static ar_status make_gate(ar__dist *c) {
  const ar_spec *s = c->spec;
  ar_commsched_gate_opts go = AR_COMMSCHED_GATE_OPTS_INIT;
  go.destinations = (uint32_t)c->W;
  go.transfers = (uint32_t)c->nt;
  go.max_bytes_in_flight = (size_t)s->distributed.max_bytes_in_flight;
  AR_CHECK(ar_commsched_gate_create(&go, &c->gates[0], c->err));
  AR_CHECK(ar_commsched_gate_create(&go, &c->gates[1], c->err));
  if (s->distributed.link_gbps <= 0)
    return AR_OK;
  ar_commsched_link_opts lo = AR_COMMSCHED_LINK_OPTS_INIT;
  lo.gbps = s->distributed.link_gbps;
  lo.latency_us = s->distributed.link_latency_us;
  lo.burst_bytes = 0;
  double now = ar__dist_clock(c);
  AR_CHECK(ar_commsched_pacer_create(&lo, now, &c->out_pacer, c->err));
  return ar_commsched_pacer_create(&lo, now, &c->in_pacer, c->err);
}

/* Whether tensor t is a dense one this server owns (steps and sends whole). */
static bool own_dense(const ar__dist *c, int t) {
  return c->t[t].server == c->rank && !c->t[t].rows;
}

/* The per-iteration tables, made once: per (worker, transfer) and per
 * (worker, piece). */
static ar_status make_tables(ar__dist *c) {
  size_t wt = (size_t)c->W * (size_t)c->nt, ws = (size_t)c->W * c->nslots;
  int n;
  AR_CHECK(ar__dist_count(c, ws, "the server's requests", &n));
  AR_CHECK(ar__dist_count(c, c->srep_len, "the server's report", &n));
  c->sreq = ar_malloc(ws * sizeof *c->sreq);
  c->rreq = ar_malloc(ws * sizeof *c->rreq);
  c->rstat = ar_malloc(ws * sizeof *c->rstat);
  c->s_idx = ar_malloc(ws * sizeof *c->s_idx);
  c->sleft = ar_malloc(wt * sizeof *c->sleft);
  c->rleft = ar_malloc(wt * sizeof *c->rleft);
  c->rbytes = ar_malloc(wt * sizeof *c->rbytes);
  c->send_start = ar_malloc(2 * wt * sizeof *c->send_start);
  c->delivered = ar_malloc(wt * sizeof *c->delivered);
  c->arrive = ar_malloc(2 * wt * sizeof *c->arrive);
  c->pend_w = ar_malloc(2 * wt * sizeof *c->pend_w);
  c->pend_t = ar_malloc(2 * wt * sizeof *c->pend_t);
  c->pend_at = ar_malloc(2 * wt * sizeof *c->pend_at);
  c->pend_p = ar_malloc(2 * wt * sizeof *c->pend_p);
  c->spar = ar_malloc(wt * sizeof *c->spar);
  c->tl_pend = ar_malloc(wt * sizeof *c->tl_pend);
  c->tl_next2 = ar_calloc((size_t)c->W, sizeof *c->tl_next2);
  c->report = ar_malloc(c->srep_len * sizeof *c->report);
  size_t nt1 = (size_t)c->nt + 1;
  c->gleft = ar_malloc(nt1 * sizeof *c->gleft);
  c->sendleft = ar_malloc(2 * nt1 * sizeof *c->sendleft);
  c->gdue = ar_malloc(nt1 * sizeof *c->gdue);
  c->updq = ar_malloc(nt1 * sizeof *c->updq);
  c->use = ar_malloc(nt1 * sizeof *c->use);
  c->noffered = ar_calloc(nt1, sizeof *c->noffered);
  c->node_next = ar_malloc(nt1 * sizeof *c->node_next);
  c->upd_t0 = ar_malloc(nt1 * sizeof *c->upd_t0);
  c->upd_t1 = ar_malloc(nt1 * sizeof *c->upd_t1);
  if (!c->gleft || !c->sendleft || !c->gdue || !c->updq || !c->pend_p || !c->spar ||
      !c->tl_pend || !c->tl_next2 || !c->upd_t0 || !c->upd_t1 || !c->use ||
      !c->noffered || !c->node_next)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the server's bookkeeping");
  for (int t = 0; t < c->nt; t++)
    c->use[t] = ar_commsched_graph_first_use(c->g, (uint32_t)t);
  /* Each own dense tensor's ring of those its first op also reads first
   * (offer_node walks it); quadratic once, not per iteration. */
  for (int t = 0; t < c->nt; t++) {
    c->node_next[t] = t;
    for (int k = 1; k < c->nt && own_dense(c, t); k++) { /* after t, wrapping round */
      int m = (t + k) % c->nt;
      if (own_dense(c, m) && c->use[m] == c->use[t]) {
        c->node_next[t] = m;
        break;
      }
    }
  }
  if (!c->sreq || !c->rreq || !c->rstat || !c->s_idx || !c->sleft || !c->rleft || !c->rbytes ||
      !c->send_start || !c->delivered || !c->arrive || !c->pend_w || !c->pend_t || !c->pend_at ||
      !c->report)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the server's bookkeeping");
  for (size_t i = 0; i < ws; i++)
    c->sreq[i] = c->rreq[i] = MPI_REQUEST_NULL;
  for (size_t i = 0; i < c->srep_len; i++) /* the update parts' unused tail */
    c->report[i] = NAN;
  return AR_OK;
}

/* This server's shard: where each own tensor's gradients from one worker
 * go (dense ones in gradbuf, rows messages in gwire), a rows tensor's
 * parameter message and a rows layer's changed rows. */
static ar_status make_shard(ar__dist *c) {
  c->gradoff = ar_calloc((size_t)c->nt, sizeof *c->gradoff);
  c->wireoff = ar_calloc((size_t)c->nt, sizeof *c->wireoff);
  c->dirty = ar_calloc((size_t)c->spec->n_layers, sizeof *c->dirty);
  if (!c->gradoff || !c->wireoff || !c->dirty)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the server's bookkeeping");
  c->own_floats = 0;
  c->own_wire = 0;
  for (int t = 0; t < c->nt; t++) {
    ar__dist_tensor *T = &c->t[t];
    if (T->server != c->rank)
      continue;
    if (!T->rows) {
      c->gradoff[t] = c->own_floats;
      c->own_floats += (size_t)T->count;
      continue;
    }
    c->wireoff[t] = c->own_wire;
    c->own_wire += (T->wire + 7) & ~(size_t)7;
    T->msg = ar_malloc(T->wire);
    if (!T->msg)
      return ar_errf(c->err, AR_NOMEM, "out of memory for the rows of '%s' (%zu bytes)",
                     T->name, T->wire);
    if (!T->bias)
      AR_CHECK(ar_lsh_touched_create(T->nrows, &c->dirty[T->layer], c->err));
  }
  c->resync = true;
  c->gwire = ar_malloc((size_t)c->W * c->own_wire + 1);
  if (!c->gwire)
    return ar_errf(c->err, AR_NOMEM, "out of memory for %d workers' gradient rows (%zu bytes "
                   "each)", c->W, c->own_wire);
  c->gradbuf = ar_malloc((size_t)c->W * c->own_floats * sizeof(float) + 1);
  if (!c->gradbuf)
    return ar_errf(c->err, AR_NOMEM, "out of memory for %d workers' gradients (%zu floats each)",
                   c->W, c->own_floats);
  return AR_OK;
}

ar_status ar__dist_server_init(ar__dist *c) {
  AR_CHECK(make_gate(c));
  AR_CHECK(make_tables(c));
  return make_shard(c);
}

void ar__dist_server_fini(ar__dist *c) {
  if (c->sreq) {
    size_t ws = (size_t)c->W * c->nslots;
    for (size_t i = 0; i < ws; i++) {
      if (c->sreq[i] != MPI_REQUEST_NULL)
        MPI_Request_free(&c->sreq[i]);
      if (c->rreq && c->rreq[i] != MPI_REQUEST_NULL) {
        MPI_Cancel(&c->rreq[i]);
        MPI_Request_free(&c->rreq[i]);
      }
    }
  }
  ar_commsched_gate_destroy(c->gates[0]);
  ar_commsched_gate_destroy(c->gates[1]);
  ar_free(c->pend_p);
  ar_free(c->spar);
  ar_free(c->tl_pend);
  ar_free(c->tl_next2);
  ar_commsched_pacer_destroy(c->out_pacer);
  ar_commsched_pacer_destroy(c->in_pacer);
  ar_free(c->gradbuf);
  ar_free(c->gradoff);
  ar_free(c->gwire);
  ar_free(c->wireoff);
  ar_free(c->rstat);
  for (int l = 0; c->dirty && l < c->spec->n_layers; l++)
    ar_lsh_touched_destroy(c->dirty[l]);
  ar_free(c->dirty);
  ar_free(c->sreq);
  ar_free(c->rreq);
  ar_free(c->sleft);
  ar_free(c->rleft);
  ar_free(c->rbytes);
  ar_free(c->send_start);
  ar_free(c->delivered);
  ar_free(c->arrive);
  ar_free(c->pend_w);
  ar_free(c->pend_t);
  ar_free(c->pend_at);
  ar_free(c->s_idx);
  ar_free(c->report);
  ar_free(c->gleft);
  ar_free(c->sendleft);
  ar_free(c->gdue);
  ar_free(c->updq);
  ar_free(c->use);
  ar_free(c->node_next);
  ar_free(c->noffered);
  ar_free(c->upd_t0);
  ar_free(c->upd_t1);
}

typedef struct srv_iter {
  int p;               /* this iteration's parity (iter & 1) */
  int64_t iter;
  size_t recvd;
  double last_delivery;
} srv_iter;

/* Bytes of a tensor's parameter message this iteration. */
static size_t msg_bytes(const ar__dist_tensor *T) { return T->rows ? T->msg_bytes : T->bytes; }

/* Moves every transfer gate p lets go into the FIFO, round-robin over
 * the workers (each worker's in gate order), stamping when its bytes go
 * on the emulated wire.  Without link emulation a send goes at once.  A
 * worker's turn takes its next transfer and those after it that the same
 * op uses first (a layer's w and b, a conv's weight and bias): taken one
 * each, a worker had an op's first input early and its last only after
 * the other workers' copies of the first, so every worker waited as long
 * as the last (the simulator interleaves the same way).  `next`: p is
 * the next iteration's (its places in the trace are counted apart). */
static bool gate_to_fifo(ar__dist *c, int p, bool next) {
  bool any = false, more = true;
  size_t wt = (size_t)c->W * (size_t)c->nt;
  while (more) {
    more = false;
    for (int w = 0; w < c->W; w++) {
      uint32_t t, op;
      if (ar_commsched_gate_next(c->gates[p], (uint32_t)w, &t) != AR_OK)
        continue;
      more = any = true;
      do {
        op = c->use[t];
        double now = ar__dist_clock(c), at = now, start = now;
        if (c->out_pacer) {
          ar_commsched_pace pace;
          ar_commsched_pacer_consume(c->out_pacer, now, msg_bytes(&c->t[t]), &pace);
          at = pace.arrive_s;
          start = pace.start_s;
        }
        size_t k = c->pend_tail++, wk = (size_t)w * (size_t)c->nt + t;
        if (c->tl) /* the order the gate released them in, per worker */
          c->tl_order[wk] = next ? c->tl_next2[w]++ : c->tl_next[w]++;
        c->pend_w[k] = (uint32_t)w;
        c->pend_t[k] = t;
        c->pend_at[k] = at;
        c->pend_p[k] = (uint8_t)p;
        c->send_start[(size_t)p * wt + wk] = start;
        c->arrive[(size_t)p * wt + wk] = at;
      } while (ar_commsched_gate_next_if(c->gates[p], (uint32_t)w, c->use, op, &t) == AR_OK);
    }
  }
  return any;
}

/* Posts the sends whose emulated arrival has come (the FIFO's times never
 * decrease: one serial port, shared by both iterations' sends).  A
 * tensor's slot is free: its send of the next iteration is offered only
 * after its update, which waits for every send of this one. */
static ar_status post_due(ar__dist *c, bool *progressed) {
  double now = ar__dist_clock(c);
  while (c->pend_head < c->pend_tail && c->pend_at[c->pend_head] <= now) {
    size_t k = c->pend_head++;
    uint32_t w = c->pend_w[k], t = c->pend_t[k];
    const ar__dist_tensor *T = &c->t[t];
    MPI_Request *q = &c->sreq[(size_t)w * c->nslots + T->slot];
    ar_status st = ar__dist_post(c, true, T->rows ? (void *)T->msg : (void *)T->p, msg_bytes(T),
                                 T->pieces, c->S + (int)w, (int)t, c->cparam, q, "sending",
                                 T->name);
    if (st != AR_OK) {
      ar__dist_notify_failure(c, c->S + (int)w);
      return st;
    }
    c->sleft[(size_t)w * (size_t)c->nt + t] = T->pieces;
    c->spar[(size_t)w * (size_t)c->nt + t] = c->pend_p[k];
    *progressed = true;
  }
  return AR_OK;
}

/* The rank of the first request still open (for messages). */
static int first_open(const ar__dist *c, const MPI_Request *r) {
  size_t ws = (size_t)c->W * c->nslots;
  for (size_t i = 0; i < ws; i++)
    if (r[i] != MPI_REQUEST_NULL)
      return c->S + (int)(i / c->nslots);
  return -1;
}

/* Tests a request array: idx[0..*n) are the ones that completed. */
static ar_status test_some(ar__dist *c, MPI_Request *r, int *idx, int *n, MPI_Status *stat,
                           const char *what) {
  int ws = c->W * (int)c->nslots; /* checked at init */
  int rc = MPI_Testsome(ws, r, n, idx, stat ? stat : MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) {
    int peer = first_open(c, r);
    ar__dist_notify_failure(c, peer);
    return ar__dist_mpi_err(c, rc, "iteration %lld: %s of rank %d",
                            (long long)c->iter + 1, what, peer);
  }
  if (*n == MPI_UNDEFINED)
    *n = 0;
  return AR_OK;
}

/* Worker w's gradient rows message of tensor t. */
static uint8_t *grad_msg(const ar__dist *c, int w, int t) {
  return c->gwire + (size_t)w * c->own_wire + c->wireoff[t];
}

/* A piece of worker w's gradient of t came (bytes long) in the poll that
 * began at `polled` (ar_now()): when it was the message's last, the
 * message is delivered (at its emulated arrival with link emulation). */
static ar_status gradient_piece(ar__dist *c, srv_iter *it, int w, int t, int bytes, double now,
                                double polled) {
  size_t k = (size_t)w * (size_t)c->nt + (size_t)t;
  c->rbytes[k] += (size_t)bytes;
  if (--c->rleft[k] > 0)
    return AR_OK;
  const ar__dist_tensor *T = &c->t[t];
  size_t got = T->rows ? c->rbytes[k] : T->bytes;
  if (T->rows)
    AR_CHECK(ar__rows_check(c, T, grad_msg(c, w, t), got, c->S + w));
  double at = now;
  if (c->in_pacer) {
    ar_commsched_pace pace;
    ar_commsched_pacer_consume(c->in_pacer, now, got, &pace);
    at = pace.arrive_s;
  }
  c->delivered[k] = at;
  if (at > it->last_delivery)
    it->last_delivery = at;
  it->recvd++;
  if (!T->rows) {
    if (at > c->gdue[t])
      c->gdue[t] = at;
    /* The tensor's (chain: its layer's) gradients are all in: it is the
     * next update unit.  Deliveries are stamped in the in port's order, so
     * the queue's due times never decrease. */
    if (--c->gleft[t] == 0 && (c->graph || c->gleft[t ^ 1] == 0))
      c->updq[c->updq_tail++] = c->graph ? (uint32_t)t : (uint32_t)(t & ~1);
  }
  if (c->tl_det) {
    double end = c->tl_conv + at;
    ar__dist_tl_transfer(c, w, t, true, c->tl_gnext[w]++, got, polled,
                         end > c->tl_poll ? end : c->tl_poll);
  }
  return AR_OK;
}

/* Parameter sends completed (idx[0..n) of sreq): the gate of their
 * iteration releases them; a message whose last piece went is a span of
 * the timeline, kept for later when it is the next iteration's (cur is
 * this one's parity). */
static ar_status sends_done(ar__dist *c, const int *idx, int n, int cur) {
  for (int i = 0; i < n; i++) {
    uint32_t w = (uint32_t)((size_t)idx[i] / c->nslots);
    uint32_t t = c->slot_t[(size_t)idx[i] % c->nslots];
    size_t k = (size_t)w * (size_t)c->nt + t;
    if (--c->sleft[k] > 0)
      continue;
    int p = c->spar[k];
    AR_CHECK(ar_commsched_gate_release(c->gates[p], w, t, c->err));
    c->sent[p]++;
    c->sendleft[(size_t)p * ((size_t)c->nt + 1) + t]--;
    if (!c->tl)
      continue;
    double t0 = c->tl_conv + c->send_start[(size_t)p * (size_t)c->W * (size_t)c->nt + k];
    if (p != cur) {
      ar__dist_tl_pend *e = &c->tl_pend[c->tl_npend++];
      *e = (ar__dist_tl_pend){(int)w, (int)t, c->tl_order[k], msg_bytes(&c->t[t]), t0, ar_now()};
    } else if (c->tl_det) {
      ar__dist_tl_transfer(c, (int)w, (int)t, false, c->tl_order[k], msg_bytes(&c->t[t]), t0,
                           ar_now());
    }
  }
  return AR_OK;
}

static ar_status apply_due(ar__dist *c, int p, double now);
static ar_status next_offers(ar__dist *c, srv_iter *it);

static ar_status exchange(ar__dist *c, srv_iter *it, int *idx) {
  ar__dist_poll_reset(c);
  c->tl_poll = c->tl_det ? ar_now() : 0.0;
  for (;;) {
    bool progressed = gate_to_fifo(c, it->p, false);
    if (c->next_on)
      progressed = gate_to_fifo(c, it->p ^ 1, true) || progressed;
    AR_CHECK(post_due(c, &progressed));
    int n;
    AR_CHECK(test_some(c, c->sreq, idx, &n, NULL, "a parameter send"));
    AR_CHECK(sends_done(c, idx, n, it->p));
    progressed = progressed || n > 0;
    double polled = c->tl_poll;
    if (c->tl_det)
      c->tl_poll = ar_now();
    AR_CHECK(test_some(c, c->rreq, idx, &n, c->rstat, "a gradient receive"));
    double now = ar__dist_clock(c);
    for (int i = 0; i < n; i++) {
      int cnt = 0;
      MPI_Get_count(&c->rstat[i], MPI_BYTE, &cnt);
      int w = (int)((size_t)idx[i] / c->nslots);
      int t = (int)c->slot_t[(size_t)idx[i] % c->nslots];
      AR_CHECK(gradient_piece(c, it, w, t, cnt, now, polled));
      progressed = true;
    }
    if (c->updq_head < c->updq_tail) {
      size_t before = c->updq_head;
      AR_CHECK(apply_due(c, it->p, now));
      progressed = progressed || c->updq_head > before;
    }
    AR_CHECK(next_offers(c, it));
    /* Done when every message has come and every dense update is done:
     * with link emulation the gradients' deliveries fall due later than
     * MPI hands them over, and the sends of the next iteration that the
     * updates let go keep flowing meanwhile. */
    if (c->sent[it->p] == c->expect && it->recvd == c->expect && c->updq_head == c->updq_tail)
      return AR_OK;
    int peer = first_open(c, c->rreq);
    c->wake_at = c->pend_head < c->pend_tail ? c->pend_at[c->pend_head] : 0.0;
    if (c->updq_head < c->updq_tail) {
      uint32_t u = c->updq[c->updq_head];
      if (c->sendleft[(size_t)it->p * ((size_t)c->nt + 1) + u] == 0 &&
          (c->wake_at == 0.0 || c->gdue[u] < c->wake_at))
        c->wake_at = c->gdue[u]; /* an update falls due */
    }
    ar_status st = ar__dist_poll(c, progressed, peer >= 0 ? peer : first_open(c, c->sreq),
                                 peer >= 0 ? "gradients" : "acceptance of parameters");
    c->wake_at = 0.0;
    AR_CHECK(st);
  }
}

/* A rows layer: the workers' rows summed in worker order into the
 * gradient rows, then sparse Adam over their union (each row's moments
 * decayed for the steps it skipped), as ar_model_train_batch does on one
 * process with the same global batch.  A worker that computed the layer
 * dense sent every row: then every row is updated, which is dense Adam
 * (the moments of rows skipped before are decayed first).  What differs
 * from one process: the workers' HOGWILD adds are summed per worker, and
 * each worker tops up its rows' active sets from its own rows' mean
 * retrieval (runtime/engine/sampled.c), so the shared negatives can
 * differ by a few ids. */
static ar_status apply_rows(ar__dist *c, int l) {
  /* The touched rows are w's ids (b may come dense when that is
   * smaller); a dense w means a dense worker. */
  bool dense = false;
  for (int w = 0; w < c->W; w++) {
    ar__rows r;
    ar__rows_view(grad_msg(c, w, 2 * l), &r);
    dense = dense || r.ids == NULL;
  }
  for (int w = 0; w < c->W; w++)
    for (int t = 2 * l; t <= 2 * l + 1; t++) {
      ar__dist_tensor *T = &c->t[t];
      ar__rows r;
      ar__rows_view(grad_msg(c, w, t), &r);
      ar__rows_apply(T, &r, T->g, true);
      for (uint32_t i = 0; !dense && t == 2 * l && i < r.n; i++)
        ar__dist_rows_mark(c, l, r.ids[i]);
    }
  if (dense) {
    for (uint32_t i = 0; i < c->t[2 * l].nrows; i++)
      ar__dist_rows_mark(c, l, i);
    c->rows_dense_steps++;
  }
  size_t n = 0;
  const uint32_t *ids = ar__dist_rows_touched(c, l, &n);
  for (size_t i = 0; i < n; i++)
    ar_lsh_touched_mark(c->dirty[l], ids[i]);
  return ar__dist_rows_step(c, l);
}

/* The workers' dense gradients of own tensor t summed into its gradient,
 * in worker order, so the result does not depend on arrival. */
static void sum_grads(ar__dist *c, const ar__dist_tensor *T, int t) {
  const float *g0 = c->gradbuf + c->gradoff[t];
  memcpy(T->g, g0, (size_t)T->count * sizeof(float));
  for (int w = 1; w < c->W; w++) {
    const float *gw = g0 + (size_t)w * c->own_floats;
    for (int64_t i = 0; i < T->count; i++)
      T->g[i] += gw[i];
  }
}

/* The update units whose gradients have all been delivered by `now`
 * (ar__dist_clock) and whose parameters every worker has (a send buffer
 * is not written while MPI may read it), in the order they completed.
 * Each unit is what one process would do for it: a graph parameter's step
 * of the net's optimizer, a chain layer's step of the engine's; the sum is
 * in worker order whatever the arrival order, so the result is exactly
 * the update after the whole iteration. */
static ar_status apply_due(ar__dist *c, int p, double now) {
  const int *left = c->sendleft + (size_t)p * ((size_t)c->nt + 1);
  while (c->updq_head < c->updq_tail) {
    int t = (int)c->updq[c->updq_head];
    bool chain = !c->graph;
    if (c->gdue[t] > now || left[t] > 0 || (chain && left[t + 1] > 0))
      return AR_OK;
    c->updq_head++;
    c->upd_t0[t] = ar__dist_clock(c);
    if (isnan(c->upd0)) {
      c->upd0 = c->upd_t0[t];
      c->upd0_tl = c->tl ? ar_now() : 0.0;
    }
    ar__dist_tensor *T = &c->t[t];
    sum_grads(c, T, t);
    if (chain) {
      sum_grads(c, &c->t[t + 1], t + 1);
      if (c->lowered) { /* the net's optimizer, the chain's arithmetic */
        ar_net_opt_param(c->net, T->ntensor, c->upd_lr);
        ar_net_opt_param(c->net, c->t[t + 1].ntensor, c->upd_lr);
      } else {
        ar_model_step_layer(c->model, T->layer);
      }
    } else {
      ar_net_opt_param(c->net, T->ntensor, c->upd_lr);
    }
    c->upd1 = c->upd_t1[t] = ar__dist_clock(c);
  }
  return AR_OK;
}

/* Before the iteration's gradients: the optimizer's step (a graph's
 * learning rate) and the early-update counters of the own tensors. */
static void updates_begin(ar__dist *c) {
  if (c->net)
    c->upd_lr = ar_net_opt_begin(c->net);
  else
    ar_model_advance_step(c->model);
  c->updq_head = c->updq_tail = 0;
  c->next_offered = 0;
  c->upd0 = c->upd1 = NAN;
  for (int t = 0; t < c->nt; t++) {
    c->gleft[t] = c->t[t].server == c->rank ? c->W : 0;
    c->gdue[t] = -INFINITY;
    c->upd_t0[t] = c->upd_t1[t] = NAN;
  }
}

/* The send side of the iteration of parity p begins: its gate loaded with
 * schedule s and started, its counters and stamps reset. */
static ar_status sends_begin(ar__dist *c, int p, int64_t iter, const ar_commsched_schedule *s) {
  /* tic/tac once, random every iteration; counters reset (TicTac's
   * reference never reset them, see commsched.h). */
  AR_CHECK(ar_commsched_gate_load(c->gates[p], s, (uint32_t)c->rank, c->err));
  AR_CHECK(ar_commsched_gate_begin(c->gates[p], (uint64_t)iter, c->err));
  size_t wt = (size_t)c->W * (size_t)c->nt;
  for (size_t k = 0; k < wt; k++)
    c->send_start[(size_t)p * wt + k] = c->arrive[(size_t)p * wt + k] = NAN;
  int *left = c->sendleft + (size_t)p * ((size_t)c->nt + 1);
  for (int t = 0; t < c->nt; t++)
    left[t] = c->t[t].server == c->rank ? c->W : 0;
  c->sent[p] = 0;
  return AR_OK;
}

/* Offers own tensor t of the iteration of parity p to every worker. */
static ar_status offer(ar__dist *c, int p, int t) {
  for (int w = 0; w < c->W; w++)
    AR_CHECK(ar_commsched_gate_offer(c->gates[p], (uint32_t)w, (uint32_t)t,
                                     msg_bytes(&c->t[t]), c->err));
  return AR_OK;
}

/* Graph: whether every own tensor that t's first op reads first (a
 * conv's weight and bias, a batch norm's two) has been updated this
 * iteration: t's ring (node_next). */
static bool node_updated(const ar__dist *c, int t) {
  int m = t;
  do {
    if (isnan(c->upd_t1[m]))
      return false;
    m = c->node_next[m];
  } while (m != t);
  return true;
}

/* Offers to the next iteration (parity p) graph tensor t's node's
 * tensors once they are all updated: the out port then sends a worker
 * the node's inputs in one turn (gate_to_fifo), which it cannot when the
 * first is on the wire before the second is offered. */
static ar_status offer_node(ar__dist *c, int p, int t) {
  if (!node_updated(c, t))
    return AR_OK;
  int m = t;
  do {
    if (!c->noffered[m]) {
      c->noffered[m] = 1;
      AR_CHECK(offer(c, p, m));
    }
    m = c->node_next[m];
  } while (m != t);
  return AR_OK;
}

/* Overlap: once the next iteration is sure to run (ar__dist_next_certain),
 * its send side begins and every unit updated so far (a graph node's
 * tensors, all of them updated; a chain layer's two) is offered to it, in
 * update order: its parameters are final for it.  Rows tensors wait for
 * its start (their update needs every gradient). */
static ar_status next_offers(ar__dist *c, srv_iter *it) {
  if (c->updq_head == c->next_offered)
    return AR_OK;
  if (!c->next_on) {
    bool yes = false;
    AR_CHECK(ar__dist_next_certain(c, it->iter, &yes));
    if (!yes)
      return AR_OK;
    ar_commsched_schedule *ns = NULL;
    bool owned = false;
    AR_CHECK(ar__dist_schedule_for(c, it->iter + 1, &ns, &owned));
    ar_status st = sends_begin(c, it->p ^ 1, it->iter + 1, ns); /* the gate copies it */
    if (owned)
      ar_commsched_schedule_destroy(ns);
    AR_CHECK(st);
    memset(c->tl_next2, 0, (size_t)c->W * sizeof *c->tl_next2);
    memset(c->noffered, 0, (size_t)c->nt * sizeof *c->noffered);
    c->tl_npend = 0;
    c->next_on = true;
  }
  for (; c->next_offered < c->updq_head; c->next_offered++) {
    int t = (int)c->updq[c->next_offered];
    if (c->graph) {
      AR_CHECK(offer_node(c, it->p ^ 1, t));
    } else {
      AR_CHECK(offer(c, it->p ^ 1, t));
      AR_CHECK(offer(c, it->p ^ 1, t + 1));
    }
  }
  return AR_OK;
}

/* Sleeps until `at` (ar__dist_clock). */
static void sleep_until(ar__dist *c, double at) {
  for (double now = ar__dist_clock(c); now < at; now = ar__dist_clock(c)) {
    double left = at - now;
    struct timespec ts = {(time_t)left, (long)((left - floor(left)) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

/* Every message has come (with link emulation the last deliveries may
 * still be due): the units not applied yet, each when it falls due, then,
 * after the last delivery, the rows layers (sparse Adam over the union of
 * the workers' rows, which needs them all). */
static ar_status updates_end(ar__dist *c, srv_iter *it) {
  double last_delivery = it->last_delivery;
  for (;;) {
    AR_CHECK(apply_due(c, it->p, ar__dist_clock(c)));
    AR_CHECK(next_offers(c, it));
    if (c->updq_head == c->updq_tail)
      break;
    sleep_until(c, c->gdue[c->updq[c->updq_head]]);
  }
  /* With link emulation a gradient counts from its emulated arrival. */
  sleep_until(c, last_delivery);
  for (int t = 0; !c->graph && t < c->nt; t++) {
    const ar__dist_tensor *T = &c->t[t];
    if (T->server != c->rank || !T->rows || T->bias)
      continue;
    c->upd_t0[t] = ar__dist_clock(c);
    if (isnan(c->upd0)) {
      c->upd0 = c->upd_t0[t];
      c->upd0_tl = c->tl ? ar_now() : 0.0;
    }
    AR_CHECK(apply_rows(c, T->layer));
    c->upd1 = c->upd_t1[t] = ar__dist_clock(c);
  }
  ar_device_sync(c->dev);
  if (isnan(c->upd0)) { /* a server without tensors */
    c->upd0 = c->upd1 = ar__dist_clock(c);
    c->upd0_tl = c->tl ? ar_now() : 0.0;
  } else {
    c->upd1 = ar__dist_clock(c);
  }
  return AR_OK;
}

/* This iteration's parameter rows of the own rows tensors: every row on
 * the first iteration of a run (start or resume), else the rows the last
 * update changed (every worker received all earlier ones), or every row
 * without ids when that is smaller. */
static void pack_params(ar__dist *c) {
  for (int t = 0; t < c->nt; t++) {
    ar__dist_tensor *T = &c->t[t];
    if (T->server != c->rank || !T->rows)
      continue;
    size_t n = 0;
    const uint32_t *ids = ar_lsh_touched_ids(c->dirty[T->layer], &n);
    if (c->resync)
      T->msg_bytes = ar__rows_pack(T, T->p, NULL, 0, AR__ROWS_RESYNC, T->msg);
    else if (ar__rows_size(T, n) >= ar__rows_size(T, 0) + T->bytes) /* dense is smaller */
      T->msg_bytes = ar__rows_pack(T, T->p, NULL, 0, 0, T->msg);
    else
      T->msg_bytes = ar__rows_pack(T, T->p, ids, n, 0, T->msg);
  }
  for (int l = 0; l < c->spec->n_layers; l++)
    if (c->dirty[l])
      ar_lsh_touched_clear(c->dirty[l]);
  c->resync = false;
}

static ar_status post_grad_recvs(ar__dist *c) {
  c->expect = 0;
  for (int w = 0; w < c->W; w++)
    for (int t = 0; t < c->nt; t++) {
      const ar__dist_tensor *T = &c->t[t];
      size_t k = (size_t)w * (size_t)c->nt + (size_t)t;
      c->delivered[k] = NAN;
      if (T->server != c->rank)
        continue;
      void *buf = T->rows ? (void *)grad_msg(c, w, t)
                          : (void *)(c->gradbuf + (size_t)w * c->own_floats + c->gradoff[t]);
      c->rleft[k] = T->pieces;
      c->rbytes[k] = 0;
      AR_CHECK(ar__dist_post(c, false, buf, T->wire, T->pieces, c->S + w, t, c->cgrad,
                             &c->rreq[(size_t)w * c->nslots + T->slot],
                             "posting the receive of the gradient of", T->name));
      c->expect++;
    }
  return AR_OK;
}

/* The iteration's parameters: all of them to every worker (worker-major,
 * the order unlisted ones go in), or, when its send side began during the
 * iteration before (overlap), only the rows tensors, which wait for it. */
static ar_status offer_params(ar__dist *c, int p, bool early) {
  for (int w = 0; w < c->W; w++)
    for (int t = 0; t < c->nt; t++) {
      const ar__dist_tensor *T = &c->t[t];
      if (T->server == c->rank && (!early || T->rows))
        AR_CHECK(ar_commsched_gate_offer(c->gates[p], (uint32_t)w, (uint32_t)t, msg_bytes(T),
                                         c->err));
    }
  return AR_OK;
}

/* The next iteration's sends that completed during the one before, on
 * the timeline now that their iteration is the current one. */
static void tl_flush(ar__dist *c) {
  if (c->tl_det)
    for (size_t i = 0; i < c->tl_npend; i++) {
      const ar__dist_tl_pend *e = &c->tl_pend[i];
      ar__dist_tl_transfer(c, e->w, e->t, false, e->order, e->bytes, e->t0, e->t1);
    }
  c->tl_npend = 0;
}

static ar_status send_report(ar__dist *c, const double *rep) {
  MPI_Request q;
  int rc = MPI_Isend(rep, (int)c->srep_len, MPI_DOUBLE, 0, AR__DIST_TAG_REPORT, c->cctl, &q);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "sending the iteration report to rank 0");
  return ar__dist_wait(c, &q, 0, "acceptance of the iteration report");
}

ar_status ar__dist_server_iteration(ar__dist *c, int64_t iter, const ar_commsched_schedule *s) {
  double wall0 = ar__dist_clock(c), it0 = c->tl ? ar_now() : 0.0;
  int p = (int)(iter & 1);
  bool early = c->next_on; /* its send side began in the iteration before */
  c->next_on = false;
  ar__dist_tl_begin(c, iter, s);
  if (c->tl) {
    if (early) /* the places given before it began */
      memcpy(c->tl_next, c->tl_next2, (size_t)c->W * sizeof *c->tl_next);
    tl_flush(c);
  }
  if (!early)
    AR_CHECK(sends_begin(c, p, iter, s));
  srv_iter it = {p, iter, 0, -INFINITY};
  if (c->rank == 0)
    AR_CHECK(ar__dist_reports_post(c));
  double start = ar__dist_clock(c);
  /* The FIFO holds only sends of this iteration now: to its front. */
  size_t left = c->pend_tail - c->pend_head;
  memmove(c->pend_w, c->pend_w + c->pend_head, left * sizeof *c->pend_w);
  memmove(c->pend_t, c->pend_t + c->pend_head, left * sizeof *c->pend_t);
  memmove(c->pend_at, c->pend_at + c->pend_head, left * sizeof *c->pend_at);
  memmove(c->pend_p, c->pend_p + c->pend_head, left * sizeof *c->pend_p);
  c->pend_head = 0;
  c->pend_tail = left;
  pack_params(c);
  updates_begin(c);
  AR_CHECK(offer_params(c, p, early));
  AR_CHECK(post_grad_recvs(c));
  AR_CHECK(exchange(c, &it, c->s_idx));
  AR_CHECK(updates_end(c, &it));
  double *rep = c->report;
  size_t wt = (size_t)c->W * (size_t)c->nt;
  const double *ss = c->send_start + (size_t)p * wt;
  for (size_t k = 0; k < wt; k++) /* overlap: its first send may precede it */
    if (ss[k] < start)
      start = ss[k];
  rep[AR__SREP_ITER] = (double)iter;
  rep[AR__SREP_START] = start;
  rep[AR__SREP_UPD0] = c->upd0; /* the first update's start: early */
  rep[AR__SREP_UPD1] = c->upd1;
  if (c->tl) {
    double u1 = ar_now();
    ar_trace_add_span(c->tl, AR_TRACE_STEPS, "optimizer", "optimizer", NULL, c->upd0_tl, u1,
                      false);
    ar_trace_add_span(c->tl, AR_TRACE_ITERATIONS, "iteration", "iteration", NULL, it0, u1, false);
  }
  memcpy(rep + ar__srep(c, AR__SREP_SEND_START), ss, wt * sizeof *rep);
  memcpy(rep + ar__srep(c, AR__SREP_ARRIVE), c->arrive + (size_t)p * wt, wt * sizeof *rep);
  memcpy(rep + ar__srep(c, AR__SREP_DELIVERED), c->delivered, wt * sizeof *rep);
  memcpy(rep + ar__srep(c, AR__SREP_UPD_START), c->upd_t0, (size_t)c->nt * sizeof *rep);
  memcpy(rep + ar__srep(c, AR__SREP_UPD_END), c->upd_t1, (size_t)c->nt * sizeof *rep);
  if (c->rank != 0)
    return send_report(c, rep);
  return ar__dist_reports_collect(c, iter, ar__dist_clock(c) - wall0, rep);
}
