/* Graph models under `distributed:` (spec->graph: conv, batch norm,
 * attention, ONNX imports; runtime/engine/net*.c): every trainable
 * parameter tensor of the worker's net is one transfer, sharded over the
 * servers by bytes; the op graph commsched orders is the net's DAG (a
 * fwd op per node, a bwd op per training node, a recv per parameter, see
 * ar_dist_net_op_graph) with the worker's execution order added (one CPU,
 * the nodes one at a time, parallel branches one after another: the
 * forward in ar_net_forward_order, ready nodes that wait for no parameter
 * first, the backward in list order last first); the workers' hooks are
 * per node (worker.c): a
 * parameter is waited for before the forward of its first reader and its
 * gradient sent after that reader's backward, the last contribution to
 * it.  The servers step with the net's own optimizer, one parameter at a
 * time (ar_net_opt_param).  Running statistics (batch norm's) are not
 * gradients: each worker keeps its own, and rank 0 takes worker 0's
 * before every evaluation, checkpoint and the end of the run
 * (ar__dist_graph_states), so what rank 0 evaluates and saves is a model
 * one worker really ran. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include "accelrt/net.h"

#include <string.h>

static void op_name(char *out, size_t cap, const char *prefix, const char *name) {
  snprintf(out, cap, "%s%s", prefix, name);
  for (char *s = out; *s; s++)
    if (*s == ' ' || *s == '\t' || *s == '#' || *s == '\n' || *s == '\r')
      *s = '_';
}

/* Edge a -> b once (deps may repeat a node). */
static ar_status edge(ar_commsched_graph *g, ar_commsched_op a, ar_commsched_op b,
                      const int *seen, int nseen, int node, ar_err *err) {
  for (int i = 0; i < nseen; i++)
    if (seen[i] == node)
      return AR_OK;
  return ar_commsched_graph_add_edge(g, a, b, err);
}

/* The recvs (op p: transfer p) and the forward ops (fwd[i]: node i, ops
 * in list order), with the net's edges and the worker's forward order. */
static ar_status add_fwd_ops(const ar_net *net, const ar_net_param *ps, int P,
                             const uint32_t *chan, const int *order, ar_commsched_op *fwd,
                             ar_commsched_graph *g, ar_err *err) {
  int N = ar_net_node_count(net);
  char name[240];
  ar_commsched_op op;
  int deps[64], prm[64];
  for (int p = 0; p < P; p++) {
    size_t bytes = (size_t)ps[p].count * sizeof(float);
    op_name(name, sizeof name, "", ps[p].name);
    /* A first guess (10 Gbit/s) until the oracle has measured it. */
    AR_CHECK(ar_commsched_graph_add_recv(g, name, bytes, chan[p], (double)bytes / 1.25e9, &op,
                                         err));
  }
  for (int i = 0; i < N; i++) {
    op_name(name, sizeof name, "fwd.", ar_net_node_name(net, i));
    AR_CHECK(ar_commsched_graph_add_compute(g, name, 1e-4, &fwd[i], err));
  }
  for (int s = 0; s < N; s++) {
    const int i = order[s];
    int nd = ar_net_node_inputs(net, i, deps, 64);
    for (int k = 0; k < nd; k++)
      AR_CHECK(edge(g, fwd[deps[k]], fwd[i], deps, k, deps[k], err));
    /* The worker is one CPU running the nodes in the forward order: the
     * branches of a block that the DAG leaves parallel run one after
     * another, so the order is an edge too (without it TAC may send a
     * later branch's parameters first, and the worker waits for the one
     * it runs). */
    if (s > 0)
      AR_CHECK(edge(g, fwd[order[s - 1]], fwd[i], deps, nd, order[s - 1], err));
    int np = ar_net_node_params(net, i, prm, 64);
    for (int k = 0; k < np; k++)
      for (int p = 0; p < P; p++)
        if (ps[p].tensor == prm[k])
          AR_CHECK(edge(g, (ar_commsched_op)p, fwd[i], prm, k, prm[k], err));
  }
  return AR_OK;
}

static ar_status add_net_ops(const ar_net *net, const ar_net_param *ps, int P,
                             const uint32_t *chan, ar_commsched_op *fwd, ar_commsched_op *bwd,
                             ar_commsched_graph *g, ar_err *err) {
  int N = ar_net_node_count(net);
  char name[240];
  int deps[64];
  int *order = ar_calloc((size_t)N, sizeof *order);
  if (!order)
    return ar_errf(err, AR_NOMEM, "out of memory for the op graph");
  ar_net_forward_order(net, order);
  ar_status st = add_fwd_ops(net, ps, P, chan, order, fwd, g, err);
  ar_free(order);
  AR_CHECK(st);
  for (int i = N - 1; i >= 0; i--) {
    bwd[i] = AR_COMMSCHED_NONE;
    if (!ar_net_node_trains(net, i))
      continue;
    op_name(name, sizeof name, "bwd.", ar_net_node_name(net, i));
    AR_CHECK(ar_commsched_graph_add_compute(g, name, 2e-4, &bwd[i], err));
    AR_CHECK(ar_commsched_graph_add_edge(g, fwd[i], bwd[i], err));
    for (int p = 0; p < P; p++)
      if (ps[p].ready == i)
        AR_CHECK(ar_commsched_graph_add_edge(g, (ar_commsched_op)p, bwd[i], err));
  }
  /* bwd of a consumer -> bwd of the producers it reads (the gradient
   * flows back along every edge of the forward graph); the backward pass
   * runs the nodes last first after the whole forward (the loss), one at
   * a time: that order is an edge too. */
  int later = -1; /* the training node whose backward runs just before */
  for (int j = N - 1; j >= 0; j--) {
    if (bwd[j] == AR_COMMSCHED_NONE)
      continue;
    int nd = ar_net_node_inputs(net, j, deps, 64);
    for (int k = 0; k < nd; k++)
      if (bwd[deps[k]] != AR_COMMSCHED_NONE)
        AR_CHECK(edge(g, bwd[j], bwd[deps[k]], deps, k, deps[k], err));
    if (later < 0 && j < N - 1)
      AR_CHECK(ar_commsched_graph_add_edge(g, fwd[N - 1], bwd[j], err));
    if (later >= 0) {
      int ld = ar_net_node_inputs(net, later, deps, 64);
      AR_CHECK(edge(g, bwd[later], bwd[j], deps, ld, j, err));
    }
    later = j;
  }
  return ar_commsched_graph_seal(g, err);
}

ar_status ar_dist_net_op_graph(const ar_net *net, int servers, ar_commsched_graph **out,
                               ar_commsched_op *fwd_out, ar_commsched_op *bwd_out, ar_err *err) {
  int P = ar_net_params(net, NULL), N = ar_net_node_count(net);
  if (servers < 1 || P < 1 || N < 1)
    return ar_errf(err, AR_INVALID, "op graph: %d servers, %d parameters, %d nodes", servers, P,
                   N);
  ar_net_param *ps = ar_calloc((size_t)P, sizeof *ps);
  size_t *size = ar_calloc((size_t)P, sizeof *size);
  uint32_t *chan = ar_calloc((size_t)P, sizeof *chan);
  int *ord = ar_calloc((size_t)P, sizeof *ord);
  size_t *load = ar_calloc((size_t)servers, sizeof *load);
  ar_commsched_op *fwd = ar_calloc((size_t)N, sizeof *fwd), *bwd = ar_calloc((size_t)N,
                                                                             sizeof *bwd);
  ar_commsched_graph *g = NULL;
  ar_status st = AR_OK;
  if (!ps || !size || !chan || !ord || !load || !fwd || !bwd) {
    st = ar_errf(err, AR_NOMEM, "out of memory for the op graph");
  } else {
    ar_net_params(net, ps);
    for (int p = 0; p < P; p++)
      size[p] = (size_t)ps[p].count * sizeof(float);
    ar__dist_shard(size, P, servers, chan, ord, load);
    st = ar_commsched_graph_create(&g, err);
    if (st == AR_OK)
      st = add_net_ops(net, ps, P, chan, fwd, bwd, g, err);
    if (st == AR_OK) {
      *out = g;
      g = NULL;
      if (fwd_out)
        memcpy(fwd_out, fwd, (size_t)N * sizeof *fwd);
      if (bwd_out)
        memcpy(bwd_out, bwd, (size_t)N * sizeof *bwd);
    } else {
      ar_err_wrap(err, "building the op graph");
    }
  }
  ar_commsched_graph_destroy(g);
  ar_free(ps);
  ar_free(size);
  ar_free(chan);
  ar_free(ord);
  ar_free(load);
  ar_free(fwd);
  ar_free(bwd);
  return st;
}

/* Per node CSR lists of transfers: at[node]..at[node + 1] in list. */
static ar_status node_lists(ar__dist *c, const ar_net_param *ps, bool ready, int **at_out,
                            int **list_out) {
  int N = c->nnodes;
  int *at = ar_calloc((size_t)N + 1, sizeof *at), *list = ar_calloc((size_t)c->nt + 1,
                                                                     sizeof *list);
  *at_out = at;
  *list_out = list;
  if (!at || !list)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the tensor table");
  for (int t = 0; t < c->nt; t++) {
    int node = ready ? ps[t].ready : ps[t].first;
    at[node + 1]++;
  }
  for (int i = 0; i < N; i++)
    at[i + 1] += at[i];
  int *fill = ar_calloc((size_t)N + 1, sizeof *fill);
  if (!fill)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the tensor table");
  for (int t = 0; t < c->nt; t++) {
    int node = ready ? ps[t].ready : ps[t].first;
    list[at[node] + fill[node]++] = t;
  }
  ar_free(fill);
  return AR_OK;
}

void ar__dist_graph_bind(ar__dist *c) {
  ar_net_param *ps = ar_calloc((size_t)c->nt + 1, sizeof *ps);
  if (!ps)
    return;
  ar_net_params(c->net, ps);
  for (int t = 0; t < c->nt; t++) {
    c->t[t].p = ps[t].p;
    c->t[t].g = ps[t].g;
    c->t[t].s1 = ps[t].s1;
    c->t[t].s2 = ps[t].s2;
  }
  ar_free(ps);
}

ar_status ar__dist_graph_tensors(ar__dist *c) {
  c->net = ar_job_net(c->job);
  c->nnodes = ar_net_node_count(c->net);
  int *order = ar_calloc((size_t)c->nnodes + 1, sizeof *order);
  if (!order)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the tensor table");
  ar_net_forward_order(c->net, order);
  c->first_node = order[0];
  ar_free(order);
  c->nt = ar_net_params(c->net, NULL);
  if (c->nt < 1)
    return ar_errf(c->err, AR_SPEC, "the model has no trainable parameters to distribute");
  c->t = ar_calloc((size_t)c->nt, sizeof *c->t);
  ar_net_param *ps = ar_calloc((size_t)c->nt, sizeof *ps);
  if (!c->t || !ps) {
    ar_free(ps);
    return ar_errf(c->err, AR_NOMEM, "out of memory for the tensor table");
  }
  ar_net_params(c->net, ps);
  ar_status st = AR_OK;
  for (int t = 0; t < c->nt; t++) {
    ar__dist_tensor *T = &c->t[t];
    op_name(T->name, sizeof T->name, "", ps[t].name);
    T->layer = -1;
    T->ntensor = ps[t].tensor;
    T->count = ps[t].count;
    T->bytes = (size_t)T->count * sizeof(float);
    T->wire = T->bytes;
    if (ps[t].first < 0 || ps[t].ready < 0)
      st = ar_errf(c->err, AR_STATE, "parameter '%s' has no reader that trains", ps[t].name);
  }
  if (st == AR_OK)
    st = node_lists(c, ps, false, &c->need_at, &c->need);
  if (st == AR_OK)
    st = node_lists(c, ps, true, &c->ready_at, &c->ready);
  ar_free(ps);
  AR_CHECK(st);
  ar__dist_graph_bind(c);
  if (c->tl) { /* the timeline was made before the tensors were known */
    ar_free(c->tl_order);
    ar_free(c->tl_t0);
    c->tl_order = ar_calloc((size_t)(c->server ? c->W : 1) * (size_t)c->nt,
                            sizeof *c->tl_order);
    c->tl_t0 = ar_calloc((size_t)c->nt, sizeof *c->tl_t0);
    if (!c->tl_order || !c->tl_t0)
      return ar_errf(c->err, AR_NOMEM, "out of memory for the timeline");
  }
  return AR_OK;
}

ar_status ar__dist_graph_ops(ar__dist *c) {
  c->fwd = ar_calloc((size_t)c->nnodes, sizeof *c->fwd);
  c->bwd = ar_calloc((size_t)c->nnodes, sizeof *c->bwd);
  if (!c->fwd || !c->bwd)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the op graph");
  AR_CHECK(ar_dist_net_op_graph(c->net, c->S, &c->g, c->fwd, c->bwd, c->err));
  c->loss_op = AR_COMMSCHED_NONE; /* the loss is the net's last node */
  for (int t = 0; t < c->nt; t++) {
    c->t[t].server = (int)ar_commsched_graph_channel(c->g, (uint32_t)t);
    AR_ASSERT(ar_commsched_graph_bytes(c->g, (uint32_t)t) == c->t[t].bytes);
  }
  c->nops = ar_commsched_graph_op_count(c->g);
  return AR_OK;
}

ar_status ar__dist_graph_states(ar__dist *c) {
  if (!c->graph || (c->rank != 0 && c->widx != 0))
    return AR_OK;
  int n = ar_net_states(c->net, NULL, NULL, NULL);
  if (n == 0)
    return AR_OK;
  const char **names = ar_calloc((size_t)n, sizeof *names);
  float **ptrs = ar_calloc((size_t)n, sizeof *ptrs);
  int64_t *counts = ar_calloc((size_t)n, sizeof *counts);
  size_t pieces = 0, nreq = 0;
  ar_status st = AR_OK;
  if (!names || !ptrs || !counts) {
    st = ar_errf(c->err, AR_NOMEM, "out of memory for the running statistics");
  } else {
    ar_net_states(c->net, names, ptrs, counts);
    for (int i = 0; i < n; i++)
      pieces += (size_t)ar__dist_pieces(c, (size_t)counts[i] * sizeof(float));
  }
  MPI_Request *req = st == AR_OK ? ar_malloc(pieces * sizeof *req) : NULL;
  if (st == AR_OK && !req)
    st = ar_errf(c->err, AR_NOMEM, "out of memory");
  bool send = c->rank != 0;
  int peer = send ? 0 : c->S;
  for (int i = 0; i < n && st == AR_OK; i++) {
    size_t bytes = (size_t)counts[i] * sizeof(float);
    int k = ar__dist_pieces(c, bytes);
    st = ar__dist_post(c, send, ptrs[i], bytes, k, peer, AR__DIST_TAG_GATHER + i, c->cctl,
                       req + nreq, send ? "sending the running statistics" :
                       "receiving worker 0's running statistics", names[i]);
    if (st == AR_OK)
      nreq += (size_t)k;
  }
  for (size_t i = 0; i < nreq && st == AR_OK; i++)
    st = ar__dist_wait(c, &req[i], peer, "the running statistics");
  ar_free(req);
  ar_free(names);
  ar_free(ptrs);
  ar_free(counts);
  return st;
}

int ar__dist_job_tensors(ar__dist *c, const char **names, float **ptrs, int64_t *counts,
                         int cap) {
  if (!c->net)
    return ar_model_tensors(c->model, names, ptrs, counts, cap);
  int n = ar_net_tensors(c->net, NULL, NULL, NULL, NULL);
  if (n > cap)
    return n;
  return ar_net_tensors(c->net, names, ptrs, counts, NULL);
}

void ar__dist_graph_fini(ar__dist *c) {
  ar_free(c->need_at);
  ar_free(c->need);
  ar_free(c->ready_at);
  ar_free(c->ready);
}
