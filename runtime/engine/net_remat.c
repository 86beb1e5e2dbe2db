/* Graph models: batch norm outputs recomputed in the backward instead of
 * kept (docs/graph.md, "Recomputed batch norm outputs").
 *
 * A training batch norm keeps its input x and the batch's mean and
 * variance (its aux tensors) until its own backward.  Its output y =
 * act((x - mean) gamma / sqrt(var + eps) + beta) is therefore a function
 * of tensors alive anyway, and the parameters do not change before the
 * optimizer.  Where a later node's backward reads y (a conv's weight
 * gradient reads its input), y need not be kept from the forward to that
 * backward: just before the first such backward, the batch norm's
 * evaluation forward with the saved batch statistics in place of the
 * running ones writes y again into a tensor of its own (NODE.recomputed),
 * alive from that backward step to the last one reading it.  The
 * evaluation forward computes the scale and the affine map with the
 * training forward's expressions, so on the host the copy has the same
 * bits as y, and so does every gradient.  The forward's y then lives only
 * until its last reader's forward: in a ResNet block the batch norm +
 * relu between the two convs keeps its input (the first conv's output)
 * and no longer its output, one activation of four a block.  The cost is
 * one element-wise pass a recomputed tensor an iteration.
 *
 * Not recomputed: a batch norm that does not train, whose output is a
 * graph output, the logits or read by a sampled node's backward, or whose
 * input is itself recomputed (that input is not kept for it).
 * ACCELRT_RECOMPUTE=0 in the environment turns the pass off (for tests
 * and measurements).  Tests: tests/engine/test_net.c. */
#include "net_impl.h"

#include <stdlib.h>
#include <string.h>

static bool recompute_enabled(void) {
  const char *e = getenv("ACCELRT_RECOMPUTE");
  return !(e && !strcmp(e, "0"));
}

/* Whether node r's backward reads its input k (and runs the generic
 * kernel: a sampled node's backward is its own). */
static bool bwd_reads(const nnode *r, int k) {
  return r->trains && (r->sig.in_needed & (1u << k));
}

static bool sampled(const ar_net *n, int i) {
  return i == n->head || n->nodes[i].hid1 != 0;
}

/* Batch norm node b's output as a candidate: the node that reads it first
 * in backward order (the highest index) in *first, or false. */
static bool candidate(const ar_net *n, int b, int *first) {
  const nnode *d = &n->nodes[b];
  if (d->op != AR_NN_BATCHNORM || !d->trains || d->sig.n_out != 1 || d->sig.n_aux != 2 ||
      d->sig.n_state != 2 || !(d->sig.in_needed & 1u) || sampled(n, b))
    return false;
  const int t = d->out[0], x = d->in[0];
  const ntensor *y = &n->tensors[t];
  if (y->keep || t == n->logits || t == n->loss || y->dtype != AR_DT_F32)
    return false;
  const int px = n->tensors[x].producer;
  if (px >= 0 && n->nodes[px].copy >= 0)
    return false; /* x is not kept until the readers' backward */
  *first = -1;
  for (int i = b + 1; i < n->n_nodes; i++)
    for (int k = 0; k < n->nodes[i].n_in; k++)
      if (n->nodes[i].in[k] == t && bwd_reads(&n->nodes[i], k)) {
        if (sampled(n, i))
          return false;
        *first = i;
      }
  return *first >= 0 && n->nodes[*first].redo < 0;
}

ar_status ar__net_remat(ar_net *n, ar_err *err) {
  if (!recompute_enabled())
    return AR_OK;
  char tn[400];
  for (int b = 0; b < n->n_nodes; b++) {
    int first;
    if (!candidate(n, b, &first))
      continue;
    nnode *d = &n->nodes[b];
    snprintf(tn, sizeof tn, "%.300s.recomputed", d->name);
    const int c = ar__net_tensor(n, tn, &n->tensors[d->out[0]].shape, AR_DT_F32, T_ACT);
    int w = -1;
    if (c >= 0 && d->work_bytes) {
      ar_shape ws = {1, {(int64_t)d->work_bytes}};
      snprintf(tn, sizeof tn, "%.300s.work_recompute", d->name);
      w = ar__net_tensor(n, tn, &ws, AR_DT_U8, T_WORK);
    }
    if (c < 0 || (d->work_bytes && w < 0))
      return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
    n->tensors[c].producer = b;
    d->copy = c;
    d->copy_work = w;
    n->nodes[first].redo = b;
    for (int i = b + 1; i < n->n_nodes; i++)
      for (int k = 0; k < n->nodes[i].n_in; k++)
        if (n->nodes[i].in[k] == d->out[0] && bwd_reads(&n->nodes[i], k))
          n->nodes[i].again[k] = c;
  }
  return AR_OK;
}

void ar__net_recompute(ar_net *n, const nnode *r) {
  if (r->redo < 0)
    return;
  const nnode *b = &n->nodes[r->redo];
  ar_nn_args a = b->args;
  a.training = false; /* normalise with the state given: the batch's */
  a.state[0].p = a.aux[0].p;
  a.state[1].p = a.aux[1].p;
  a.out[0].p = n->tensors[b->copy].p;
  a.work = b->copy_work >= 0 ? n->tensors[b->copy_work].p : NULL;
  ar_device_nn_forward(n->dev, b->peval, &a);
}
