/* A chain of model.layers lowered onto the graph engine (spec->lowered,
 * runtime/engine/net_lower.c) under `distributed:`: the workers and
 * servers hold the lowered net, but everything that crosses the wire is
 * the chain's, so a run is the chain engine's run byte for byte (its
 * losses, its checkpoints) and its traffic the same (bytes, order):
 *
 *  - the transfers are the chain's table (2l: LAYER.w, 2l + 1: LAYER.b),
 *    bound to the net's parameters of those names, whose layouts are the
 *    chain's ((features, width) for the first layer, (width, inputs)
 *    after it);
 *  - the op graph is the chain's (ar_dist_op_graph: its sharding of whole
 *    layers, its fwd / loss / bwd ops), so TIC and TAC compute the chain's
 *    schedule;
 *  - the worker's hooks come per node of the net, which for a lowered
 *    chain is a node per layer then the loss node (checked here); they
 *    map to the chain's per-layer hooks (worker.c), the loss node's
 *    forward and backward together being the chain's loss op;
 *  - the servers update a layer (its w and b) when every worker's
 *    gradients of both are in, as for the chain, with the net's optimizer
 *    (ar_net_opt_param), which is the chain's arithmetic.
 *
 *  - an LSH-sampled layer (the head, a hidden one, the first) travels as
 *    the chain's rows (rows.c; a worker that distributed.workers has
 *    compute it dense holds a dense node of the same (width, inputs)
 *    layout and sends whole gradients, as the chain's, unless the layer
 *    reads the sparse input, which dist_run.c refuses): its rows sets
 *    below are the same ar_sampled object the chain's layer holds,
 *    reached through the net (ar_net_sampled_*), so the workers' rows,
 *    the servers' sparse Adam and the rows' last steps are the chain's.
 *
 * The ar__dist_rows_* functions are the one place that picks the chain's
 * model or the lowered net for a sampled layer's rows. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include "accelrt/net.h"

#include <string.h>

ar_status ar__dist_lowered_bind(ar__dist *c) {
  const int P = ar_net_params(c->net, NULL);
  ar_net_param *ps = ar_calloc((size_t)P + 1, sizeof *ps);
  if (!ps)
    return ar_errf(c->err, AR_NOMEM, "out of memory for the tensor table");
  ar_net_params(c->net, ps);
  const int L = c->spec->n_layers;
  ar_status st = AR_OK;
  if (P != c->nt || ar_net_node_count(c->net) != L + 1)
    st = ar_errf(c->err, AR_STATE,
                 "the lowered chain has %d parameters in %d nodes, the chain %d in %d layers "
                 "and a loss; run it with ACCELRT_CHAIN_ENGINE=chain",
                 P, ar_net_node_count(c->net), c->nt, L);
  for (int t = 0; t < c->nt && st == AR_OK; t++) {
    ar__dist_tensor *T = &c->t[t];
    char want[96];
    snprintf(want, sizeof want, "%s.%s", c->spec->layers[T->layer].name, T->bias ? "b" : "w");
    int j = 0;
    while (j < P && strcmp(ps[j].name, want) != 0)
      j++;
    if (j == P || ps[j].count != T->count || ps[j].first != T->layer ||
        ps[j].ready != T->layer) {
      st = ar_errf(c->err, AR_STATE,
                   "the lowered chain's parameter '%s' is not the chain's (%lld floats, read "
                   "by layer %d); run it with ACCELRT_CHAIN_ENGINE=chain",
                   want, (long long)T->count, T->layer);
      break;
    }
    T->ntensor = ps[j].tensor;
    T->p = ps[j].p;
    T->g = ps[j].g;
    T->s1 = ps[j].s1;
    T->s2 = ps[j].s2;
  }
  ar_free(ps);
  return st;
}

/* The chain's hooks (worker.c) by node: node l < L is layer l; node L,
 * the loss, is the chain's loss op, from its forward to the end of its
 * backward. */
ar_status ar__dist_lowered_before(ar__dist *c, ar_job_phase phase, int node) {
  const int L = c->spec->n_layers;
  if (node < L)
    return ar__dist_chain_before(c, phase, node);
  if (phase == AR_JOB_FORWARD)
    c->op_t0 = ar__dist_clock(c);
  return AR_OK;
}

ar_status ar__dist_lowered_after(ar__dist *c, ar_job_phase phase, int node) {
  const int L = c->spec->n_layers;
  if (phase == AR_JOB_FORWARD && node == L - 1 && ar__dist_sampled(c, c->rank, node)) {
    /* A sampled head computes the loss in its forward, and the net skips
     * the loss node's (its after-hook does not come): the chain's loss op
     * is empty, at the head's end. */
    AR_CHECK(ar__dist_chain_after(c, phase, node));
    c->op_t0 = ar__dist_clock(c);
    return ar__dist_chain_after(c, AR_JOB_LOSS, node);
  }
  if (node < L)
    return ar__dist_chain_after(c, phase, node);
  if (phase == AR_JOB_FORWARD)
    return ar__dist_chain_after(c, AR_JOB_LOSS, L - 1);
  /* The loss node's backward (the chain computes the gradient with the
   * loss): the loss op ends here. */
  c->report[ar__wrep(c, AR__WREP_OP_END) + c->loss_op] = ar__dist_clock(c);
  return AR_OK;
}

/* ---- a sampled layer's rows: the chain's model or the lowered net ---- */

const uint32_t *ar__dist_rows_touched(ar__dist *c, int l, size_t *n) {
  return c->lowered ? ar_net_sampled_grad_rows(c->net, l, n) : ar_model_grad_rows(c->model, l, n);
}

void ar__dist_rows_mark(ar__dist *c, int l, uint32_t id) {
  if (c->lowered)
    ar_net_sampled_grad_rows_mark(c->net, l, id);
  else
    ar_model_grad_rows_mark(c->model, l, id);
}

void ar__dist_rows_clear(ar__dist *c, int l) {
  if (c->lowered)
    ar_net_sampled_grad_rows_clear(c->net, l);
  else
    ar_model_grad_rows_clear(c->model, l);
}

void ar__dist_rows_changed(ar__dist *c, int l, const uint32_t *ids, size_t n) {
  if (c->lowered)
    ar_net_sampled_rows_changed(c->net, l, ids, n);
  else
    ar_model_rows_changed(c->model, l, ids, n);
}

ar_status ar__dist_rows_rehash(ar__dist *c, int l) {
  if (c->lowered)
    return ar_net_sampled_rehash(c->net, l, c->err);
  if (ar_model_sampled_rehash(c->model, l) != AR_OK)
    return ar_errf(c->err, AR_STATE, "worker %d: %s", c->widx, c->model->err.msg);
  return AR_OK;
}

ar_status ar__dist_rows_step(ar__dist *c, int l) {
  if (c->lowered)
    return ar_net_sampled_step(c->net, l, c->err);
  if (ar_model_sampled_step(c->model, l) != AR_OK)
    return ar_errf(c->err, AR_STATE, "server %d: layer %s: %s", c->rank,
                   c->model->layers[l].name, c->model->err.msg);
  return AR_OK;
}
