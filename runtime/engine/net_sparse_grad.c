/* Graph models: sparse embedding gradients (docs/graph.md, "Sparse
 * embedding gradients").  An `embedding` item with `sparse_grad: true`
 * lists the batch's distinct ids in its forward (an aux tensor of the
 * plan, kept alive until the optimizer), its backward writes only those
 * rows of the table's gradient, and the optimizer steps only those rows,
 * as the chain engine's sparse rows do:
 *
 *   - SGD: p -= lr (g + wd p) on the listed rows; with momentum, their
 *     velocity v = momentum v + g + wd p, p -= lr v; the other rows'
 *     parameters and velocity do not move;
 *   - Adam: the listed rows' moments and parameters by Adam's rule with
 *     the bias correction of the global step (PyTorch's SparseAdam: the
 *     step counts every iteration, not the row's updates); AdamW's
 *     decoupled decay on the listed rows only;
 *   - so without momentum and weight decay, SGD gives exactly the dense
 *     result (an untouched row's dense gradient is 0); the others are the
 *     lazy rules, which differ from dense ones where a row is absent from
 *     a batch.
 *
 * On the host and on CUDA (the embedding's kernels list the ids and write
 * the rows on the device; the list is copied to the host, which launches
 * the optimizer row by row), not under `distributed:` (the servers step
 * whole tensors): refused when the graph is built.
 * The table's gradient keeps the table's shape in the plan (the rows not
 * listed are simply not written).  Tests: tests/engine/test_net_sparse_grad.c. */
#include "net_impl.h"

#include <string.h>

/* A job-file error at node d's item. */
static ar_status refuse(const ar_net *n, const nnode *d, const char *msg, ar_err *err) {
  return ar_spec_item_errf(n->spec, d->ls ? &d->ls->pos : NULL, d->path, err, AR_SPEC,
                           "sparse_grad: %s", msg);
}

/* How many nodes read tensor t as a parameter. */
static int param_readers(const ar_net *n, int t) {
  int c = 0;
  for (int i = 0; i < n->n_nodes; i++)
    for (int k = 0; k < n->nodes[i].sig.n_param; k++)
      c += n->nodes[i].param[k] == t;
  return c;
}

ar_status ar__net_sparse_check(ar_net *n, bool training, ar_err *err) {
  for (int i = 0; i < n->n_nodes; i++) {
    nnode *d = &n->nodes[i];
    if (!d->attr.sparse_grad)
      continue;
    if (d->op != AR_NN_EMBEDDING)
      return refuse(n, d, "only an `embedding` item has sparse gradients; remove the key", err);
    if (!training)
      continue;
    if (!n->spec)
      return refuse(n, d, "a graph built by a program has no sparse gradients", err);
    if (n->spec->distributed.enabled)
      return refuse(n, d,
                    "the parameter servers step whole tensors; remove sparse_grad under "
                    "`distributed:`",
                    err);
    if (param_readers(n, d->param[0]) != 1)
      return refuse(n, d, "the table is read by other nodes too; its gradient is dense", err);
    n->tensors[d->param[0]].sparse = true;
  }
  return AR_OK;
}

void ar__net_sparse_lifetimes(ar_net *n) {
  const int64_t end = 2 * (int64_t)n->n_nodes;
  for (int i = 0; i < n->n_nodes; i++) {
    const nnode *d = &n->nodes[i];
    if (!d->trains || !d->attr.sparse_grad || !n->tensors[d->param[0]].sparse)
      continue;
    ntensor *t = &n->tensors[d->aux[0]]; /* read again by the optimizer */
    if (end > t->last)
      t->last = end;
  }
}

ar_status ar__net_sparse_start(ar_net *n, ar_err *err) {
  size_t most = 0;
  for (int i = 0; i < n->n_nodes; i++) {
    const nnode *d = &n->nodes[i];
    if (d->trains && d->attr.sparse_grad && n->tensors[d->param[0]].sparse &&
        n->tensors[d->aux[0]].bytes > most)
      most = n->tensors[d->aux[0]].bytes;
  }
  if (!most || !strcmp(ar_device_name(n->dev), "host"))
    return AR_OK;
  n->sparse_rows = ar_malloc(most);
  if (!n->sparse_rows)
    return ar_errf(err, AR_NOMEM, "out of host memory for the sparse embedding rows");
  return AR_OK;
}

void ar__net_opt_sparse(ar_net *n, int tensor, double lr) {
  const ar_spec *s = n->spec;
  const ntensor *t = &n->tensors[tensor];
  const ntensor *list = &n->tensors[n->nodes[t->producer].aux[0]];
  const int64_t *rows = list->p;
  const int64_t width = t->shape.d[1];
  if (n->sparse_rows) { /* a device: the list to the host (a failed copy is the device's) */
    if (ar_device_copy_out(n->dev, n->sparse_rows, list->p, list->bytes) != AR_OK)
      return;
    rows = n->sparse_rows;
  }
  float wd = t->decay ? (float)s->train.weight_decay : 0.0f;
  const bool adam = s->train.optimizer == AR_OPT_ADAM;
  const float keep = adam && s->train.decoupled ? 1.0f - (float)lr * wd : 1.0f;
  if (adam && s->train.decoupled)
    wd = 0.0f;
  float *w = t->p, *g = n->tensors[t->grad].p;
  float *m = t->opt1 >= 0 ? n->tensors[t->opt1].p : NULL;
  float *v = t->opt2 >= 0 ? n->tensors[t->opt2].p : NULL;
  for (int64_t k = 0; k < rows[0]; k++) {
    const int64_t off = rows[1 + k] * width;
    if (keep != 1.0f && !n->sparse_rows) /* AdamW: the row shrinks, its gradient stays the loss's */
      for (int64_t j = 0; j < width; j++)
        w[off + j] *= keep;
    else if (keep != 1.0f) /* on a device: a GEMM with k = 0 scales C (the row) by beta */
      ar_device_gemm(n->dev, false, false, 1, width, 0, 1.0f, w + off, 1, w + off, width, keep,
                     w + off, width);
    if (adam)
      ar_device_adam(n->dev, width, w + off, g + off, m + off, v + off, (float)lr,
                     (float)s->train.beta1, (float)s->train.beta2, (float)s->train.eps, wd,
                     n->step);
    else
      ar_device_sgd(n->dev, width, w + off, g + off, m ? m + off : NULL, (float)lr,
                    (float)s->train.momentum, wd);
  }
}
