/* A graph model's hidden LSH-sampled dense nodes (SLIDE, Chen et al.,
 * MLSys 2020): a top-level `dense` item that is not the last, with a
 * `sparse:` section that samples on this device (ar_layer_sampled, the
 * chain's rule), trains as the chain's hidden sampled layer does
 * (sampled.c, ar__sampled_hidden_*): per row, hash the node's dense
 * input, retrieve the active neurons from the tables (topped up from the
 * batch's shared stream to min_active), compute only those (relu or
 * identity), and write the node's output as the chain writes a sampled
 * layer's y when a dense layer reads it: (batch, width), the active
 * neurons' values and zeros elsewhere.  Backward gathers the output's
 * gradient on the active set, adds into only the touched gradient rows
 * and writes the input's gradient; the sparse Adam step updates only those
 * rows and the tables are rebuilt on the item's schedule.  Evaluation runs
 * the node's dense op: every neuron (as the chain's evaluation).
 *
 * Memory, as the head's (net_sampled.c): gradient rows persistent
 * (T_SGRAD), per-batch buffers ephemeral (T_SAMP, live from the node's
 * forward to its backward), each row's last update step a state tensor
 * (checkpointed with Adam's moments), and the lsh library's tables, hash
 * functions, scratch and touched sets host entries of the plan.  A resume
 * rebuilds the tables from the rows (ar_net_resumed).
 *
 * Why dense with zeros and not the active set: the chain itself scatters
 * into y when a dense layer follows, and every graph op reads dense
 * tensors.  A sampled node reading a sampled node (which the chain runs on
 * the sparse activation) is built only for a lowered chain: it reads the
 * other's active set as the chain does (net_hid.from) and hands its
 * gradient back through the dense tensor, which the other gathers at its
 * ids; in a written graph ar__net_hid_add refuses it.  A lowered chain's
 * first layer over model.input.sparse reads the CSR rows (net_hid.csr). */
#include "engine_impl.h"
#include "net_impl.h"

#include <string.h>

static void *tp(const ar_net *n, int t) { return t >= 0 ? n->tensors[t].p : NULL; }

static const nnode *node_of(const ar_net *n, const net_hid *h) { return &n->nodes[h->node]; }

static int64_t hid_in(const ar_net *n, const net_hid *h) {
  return n->tensors[node_of(n, h)->param[0]].shape.d[1];
}

static int64_t hid_out(const ar_net *n, const net_hid *h) {
  return n->tensors[node_of(n, h)->param[0]].shape.d[0];
}

ar_status ar__net_hid_add(build_ctx *b, const ar_layer_spec *ls, const char *path, int node) {
  ar_net *n = b->net;
  const ar_spec *sp = n->spec;
  nnode *d = &n->nodes[node];
  if (d->op != AR_NN_DENSE)
    return ar__net_build_err(b, ls, path,
                             "sparse: an LSH-sampled hidden item reading the sparse input "
                             "directly is not built in this version (it reads a dense item); "
                             "write the model as a chain, which samples it, or set "
                             "sparse.mode to dense");
  if (n->tensors[d->in[0]].shape.nd != 2 || d->sig.n_param != 2)
    return ar__net_build_err(b, ls, path,
                             "sparse: an LSH-sampled hidden item reads (batch, features) and "
                             "has a bias; flatten its input first, drop `bias: false`");
  if (d->attr.act != AR_ACT_RELU && d->attr.act != AR_ACT_NONE)
    return ar__net_build_err(b, ls, path,
                             "sparse: an LSH-sampled hidden item computes relu or identity "
                             "neurons (the sampled kernels); set activation to relu or none, "
                             "or sparse.mode to dense");
  if (sp->train.optimizer != AR_OPT_ADAM || sp->train.weight_decay > 0)
    return ar__net_build_err(b, ls, path,
                             "sparse: an LSH-sampled item trains with Adam without weight "
                             "decay (sparse Adam on the touched rows); set train.optimizer to "
                             "adam with weight_decay 0, or this item's sparse.mode to dense");
  if (ar_layer_catch_up_refused(sp, (int)(ls - sp->layers)))
    return ar__net_build_err(b, ls, path,
                             "sparse: catch_up needs "
                             "Adam's beta1 < sqrt(beta2), here %g and %g; change the betas or "
                             "set this item's sparse.catch_up to 0",
                             sp->train.beta1, sp->train.beta2);
  /* A lowered chain's first layer over model.input.sparse reads the CSR
   * rows, as the chain's does (its dense input n->xd is a shape only). */
  const bool csr = d->in[0] == n->xd && sp->input.kind == AR_INPUT_SPARSE;
  const int in_prod = n->tensors[d->in[0]].producer;
  /* A lowered chain's sampled layer after a sampled layer reads its
   * active set, as the chain's does (the chain's input_of). */
  const int from = in_prod >= 0 && sp->lowered ? n->nodes[in_prod].hid1 - 1 : -1;
  if (in_prod >= 0 && n->nodes[in_prod].hid1 && from < 0)
    return ar__net_build_err(b, ls, path,
                             "sparse: an LSH-sampled item reading another one is not built in "
                             "this version (the chain reads the active set there); write the "
                             "model as a chain, or set one sparse.mode to dense");
  net_hid *g = ar_realloc(n->hid, (size_t)(n->n_hid + 1) * sizeof *g);
  if (!g)
    return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
  n->hid = g;
  net_hid *h = &n->hid[n->n_hid++];
  memset(h, 0, sizeof *h);
  h->node = node;
  h->l = (int)(ls - sp->layers);
  h->last = -1;
  h->csr = csr;
  h->from = from;
  for (int k = 0; k < HH_COUNT; k++)
    h->buf[k] = -1;
  d->hid1 = n->n_hid;
  return AR_OK;
}

ar_status ar__net_hid_plan(ar_net *n, ar_err *err) {
  for (int i = 0; i < n->n_nodes; i++) /* the fusion pass may have moved nodes */
    if (n->nodes[i].hid1)
      n->hid[n->nodes[i].hid1 - 1].node = i;
  for (int j = 0; j < n->n_hid; j++) {
    net_hid *h = &n->hid[j];
    const nnode *d = node_of(n, h);
    const int64_t B = n->batch, cap = ar_layer_active_cap(n->spec, h->l, 0);
    static const char *const what[HH_COUNT] = {"active", "n", "out", "dout"};
    const int64_t cnt[HH_COUNT] = {B * cap, B, B * cap, B * cap};
    const ar_dtype dt[HH_COUNT] = {AR_DT_I32, AR_DT_I32, AR_DT_F32, AR_DT_F32};
    char tn[400];
    for (int k = 0; k < HH_COUNT; k++) {
      snprintf(tn, sizeof tn, "%.190s.lsh.%s", d->name, what[k]);
      ar_shape s = {1, {cnt[k]}};
      h->buf[k] = ar__net_tensor(n, tn, &s, dt[k], T_SAMP);
      if (h->buf[k] < 0)
        return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
      d = node_of(n, h);
    }
    snprintf(tn, sizeof tn, "%.190s.lsh_last", d->name);
    ar_shape ls = {1, {2 * hid_out(n, h)}}; /* u64 a row, as two floats' bytes */
    h->last = ar__net_tensor(n, tn, &ls, AR_DT_F32, T_STATE);
    if (h->last < 0)
      return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
    n->tensors[h->last].init = AR_NN_INIT_ZEROS;
    d = node_of(n, h);
    for (int k = 0; k < d->sig.n_param; k++)
      if (d->trains && d->gparam[k] >= 0 && d->gptmp[k] < 0)
        n->tensors[d->gparam[k]].kind = T_SGRAD;
  }
  return AR_OK;
}

void ar__net_hid_lifetimes(ar_net *n, void (*live)(ntensor *, int64_t)) {
  for (int j = 0; j < n->n_hid; j++)
    for (int k = 0; k < HH_COUNT; k++)
      if (n->hid[j].buf[k] >= 0) {
        live(&n->tensors[n->hid[j].buf[k]], ar__net_fstep(n, n->hid[j].node));
        live(&n->tensors[n->hid[j].buf[k]], 2 * n->n_nodes - 1 - n->hid[j].node);
      }
}

ar_status ar__net_hid_host(ar_net *n, ar_err *err) {
  for (int j = 0; j < n->n_hid && n->hid[j].buf[0] >= 0; j++) {
    const net_hid *h = &n->hid[j];
    ar__sampled_mem sb;
    AR_CHECK(
        ar__sampled_bytes(n->spec, h->l, hid_in(n, h), 0, ar_plan_threads(n->spec), 0, &sb, err));
    ar__net_lsh_host(n, node_of(n, h)->name, &sb);
  }
  return AR_OK;
}

static ar__sampled_ptrs hid_ptrs(const ar_net *n, const net_hid *h) {
  const nnode *d = node_of(n, h);
  ar__sampled_ptrs p = {tp(n, d->param[0]),
                        tp(n, d->param[1]),
                        tp(n, d->gparam[0]),
                        tp(n, d->gparam[1]),
                        tp(n, h->buf[HH_ACTIVE]),
                        tp(n, h->buf[HH_N]),
                        tp(n, h->buf[HH_OUT]),
                        tp(n, h->buf[HH_DOUT]),
                        NULL,
                        NULL,
                        NULL,
                        NULL,
                        NULL,
                        NULL};
  return p;
}

ar_status ar__net_hid_start(ar_net *n, ar_err *err) {
  for (int j = 0; j < n->n_hid && n->hid[j].buf[0] >= 0; j++) {
    net_hid *h = &n->hid[j];
    if (!h->smp) {
      const nnode *d = node_of(n, h);
      const ntensor *w = &n->tensors[d->param[0]], *b = &n->tensors[d->param[1]];
      ar__sampled_cfg c = {n->spec,
                           h->l,
                           d->name,
                           n->dev,
                           hid_in(n, h),
                           hid_out(n, h),
                           0,
                           n->step,
                           false,
                           h->csr, /* every id, for the evaluation's scoring */
                           hid_ptrs(n, h),
                           tp(n, w->opt1),
                           tp(n, w->opt2),
                           tp(n, b->opt1),
                           tp(n, b->opt2),
                           tp(n, h->last)};
      AR_CHECK(ar__sampled_new(&c, &h->smp, err));
    }
    AR_CHECK(ar__sampled_reset(h->smp, n->step, n->trace, err));
  }
  return AR_OK;
}

void ar__net_hid_bind(ar_net *n) {
  for (int j = 0; j < n->n_hid; j++)
    if (n->hid[j].smp) {
      ar__sampled_ptrs p = hid_ptrs(n, &n->hid[j]);
      ar__sampled_set_mem(n->hid[j].smp, &p);
    }
}

void ar__net_hid_stop(ar_net *n) {
  for (int j = 0; j < n->n_hid; j++) {
    ar__sampled_destroy(n->hid[j].smp);
    n->hid[j].smp = NULL;
  }
}

/* The node's dense batch: over sparse input the staged rows only, as the
 * chain samples them (a padded row would touch rows with a zero gradient,
 * and the sparse Adam step would move them); every row otherwise. */
static ar__sbatch hid_batch(const ar_net *n, const nnode *d) {
  const int64_t rows = ar_net_sparse_input(n) ? n->rows : n->batch;
  ar__sbatch b = {rows, 1.0f, tp(n, d->in[0]), d->gin[0] >= 0 ? tp(n, d->gin[0]) : NULL,
                  NULL, NULL, n->step,         NULL, NULL, NULL, NULL, NULL};
  if (n->hid[d->hid1 - 1].csr) { /* the CSR rows (host memory: a host-only layer) */
    b.X = NULL;
    b.dX = NULL; /* the input is data */
    b.row_ptr = tp(n, n->sx[SX_PTR]);
    b.idx = tp(n, n->sx[SX_IDX]);
    b.val = tp(n, n->sx[SX_VAL]);
  }
  if (n->hid[d->hid1 - 1].from >= 0) { /* the previous sampled node's active set */
    b.X = NULL;
    b.from = n->hid[n->hid[d->hid1 - 1].from].smp;
  }
  return b;
}

bool ar__net_hid_eval(ar_net *n, const nnode *d, ar_status *st, ar_err *err) {
  const net_hid *h = &n->hid[d->hid1 - 1];
  if (!h->csr)
    return false;
  if (!h->smp) { /* an inference graph: its input was never filled */
    *st = ar_errf(err, AR_STATE,
                  "layer %s: a lowered chain's LSH-sampled first layer is evaluated by the "
                  "chain's evaluation (a bug: it should not reach an inference graph)",
                  d->name);
    return true;
  }
  ar__sbatch b = hid_batch(n, d);
  float *Y = tp(n, d->out[0]);
  const int64_t width = hid_out(n, h);
  memset(Y, 0, (size_t)(n->batch * width) * sizeof(float)); /* padding rows: zeros */
  *st = b.rows > 0 ? ar__sampled_hidden_full(h->smp, &b, d->attr.act == AR_ACT_RELU, Y, err)
                   : AR_OK;
  return true;
}

ar_status ar__net_hid_forward(ar_net *n, const nnode *d, ar_err *err) {
  const net_hid *h = &n->hid[d->hid1 - 1];
  ar__sbatch b = hid_batch(n, d);
  float *Y = tp(n, d->out[0]);
  const int64_t width = hid_out(n, h);
  if (b.rows < n->batch) /* padding rows: zeros */
    memset(Y + b.rows * width, 0, (size_t)((n->batch - b.rows) * width) * sizeof(float));
  if (b.rows == 0)
    return AR_OK;
  return ar__sampled_hidden_forward(h->smp, &b, d->attr.act == AR_ACT_RELU, Y, err);
}

ar_status ar__net_hid_backward(ar_net *n, const nnode *d, ar_err *err) {
  const net_hid *h = &n->hid[d->hid1 - 1];
  ar__sbatch b = hid_batch(n, d);
  const int64_t in = hid_in(n, h);
  if (b.dX && b.rows < n->batch) /* padding rows: no gradient */
    memset(b.dX + b.rows * in, 0, (size_t)((n->batch - b.rows) * in) * sizeof(float));
  if (b.rows == 0)
    return AR_OK;
  return ar__sampled_hidden_backward(h->smp, &b, d->attr.act == AR_ACT_RELU,
                                     tp(n, n->tensors[d->out[0]].grad), err);
}

ar_status ar__net_hid_step(ar_net *n, ar_err *err) {
  for (int j = 0; j < n->n_hid; j++)
    if (n->hid[j].smp) {
      AR_CHECK(ar__sampled_step(n->hid[j].smp, n->step, err));
      AR_CHECK(ar__sampled_rehash(n->hid[j].smp, n->step, n->trace, err));
    }
  return AR_OK;
}

bool ar__net_hid_param(const ar_net *n, int t) {
  for (int j = 0; j < n->n_hid; j++)
    if (n->hid[j].smp) {
      const nnode *d = node_of(n, &n->hid[j]);
      if (t == d->param[0] || t == d->param[1])
        return true;
    }
  return false;
}

const char *ar__net_hid_stats(const ar_net *n, int i, ar_sampled_stats *out) {
  if (i < 0 || i >= n->n_hid || !n->hid[i].smp)
    return NULL;
  ar__sampled_stats(n->hid[i].smp, out);
  return node_of(n, &n->hid[i])->name;
}
