/* A graph model's LSH-sampled head (SLIDE, Chen et al., MLSys 2020): the
 * last dense node, the one before the softmax cross-entropy, when its job
 * file item carries a `sparse:` section that samples on this device
 * (ar_layer_sampled, the chain's rule).  Training runs the chain engine's
 * sampled output layer (sampled.c, ar__sampled_head_*): hash the node's
 * input, retrieve the active neurons (the true label always added, the
 * batch's shared uniform random negatives beside them, sparse.negatives,
 * their logits log-Q corrected), compute only those, the softmax
 * cross-entropy over the active set, then backward into only the
 * touched gradient rows and the input's gradient; the sparse Adam step
 * updates only those rows and the tables are rebuilt on the layer's
 * schedule.  Evaluation runs the node's dense op: every class is scored.
 * A lowered chain's head that reads a sampled node's active set, or the
 * sparse rows as the only layer, scores as the chain's sampled_forward
 * does there (no shared negatives; ar__sampled_head_rows_forward), and
 * the one-layer head is evaluated by the sampled kernels from the rows.
 *
 * Memory: the rows' gradients are persistent (T_SGRAD), the per-batch
 * buffers ephemeral (T_SAMP, live from the node's forward to its
 * backward), the rows' last-update steps a state tensor (checkpointed
 * with Adam's moments), and the lsh library's tables, hash functions,
 * scratch and touched sets host entries of the plan: start allocates
 * them once, an iteration allocates nothing.
 *
 * A head without a bias (a Gemm without C, PyTorch's Linear(bias=False)):
 * the sampled layer has a bias, so it gets a zero bias that does not train
 * (HS_ZB with its gradient and Adam moments, persistent but neither a
 * parameter nor checkpointed nor exported): the step puts it back to zero
 * after each update, so every forward sees W x alone, as the model says. */
#include "engine_impl.h"
#include "net_impl.h"

#include <string.h>

static int64_t head_in(const ar_net *n) {
  const nnode *d = &n->nodes[n->head];
  return n->tensors[d->param[0]].shape.d[1];
}

static int64_t head_out(const ar_net *n) {
  return n->tensors[n->nodes[n->head].param[0]].shape.d[0];
}

/* Labels a row may hold: the data's bound over sparse input (multi-label
 * XC data, every label always active as in the chain), else one class. */
static int64_t head_labels(const ar_net *n) {
  return ar_net_sparse_input(n) && n->max_labels > 0 ? n->max_labels : 1;
}

/* The shared negatives' room; -1 (ar__sampled_bytes): the shared path
 * without room. */
static int64_t shared_cap(const ar_net *n) {
  int64_t c = ar_layer_shared_cap(n->hspec, n->head_l, head_labels(n));
  return c ? c : -1;
}

static ar_status add_kind(ar_net *n, int which, const char *what, int64_t count, ar_dtype t,
                          int kind, ar_err *err) {
  char tn[400];
  snprintf(tn, sizeof tn, "%.190s.lsh.%s", n->nodes[n->head].name, what);
  ar_shape s = {1, {count > 0 ? count : 1}};
  int id = ar__net_tensor(n, tn, &s, t, kind);
  if (id < 0)
    return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
  n->hs[which] = id;
  return AR_OK;
}

static ar_status add_buf(ar_net *n, int which, const char *what, int64_t count, ar_dtype t,
                         ar_err *err) {
  return add_kind(n, which, what, count, t, T_SAMP, err);
}

ar_status ar__net_head_plan(ar_net *n, ar_err *err) {
  for (int k = 0; k < HS_COUNT; k++)
    n->hs[k] = -1;
  n->head_last = -1;
  if (n->head < 0)
    return AR_OK;
  nnode *d = &n->nodes[n->head];
  const int64_t B = n->batch, in = head_in(n), out = head_out(n);
  if (d->sig.n_param == 1) { /* no bias: a zero one that does not train */
    static const char *const zw[] = {"zero_b", "zero_gb", "zero_b_m1", "zero_b_m2"};
    for (int k = 0; k < 4; k++)
      AR_CHECK(add_kind(n, HS_ZB + k, zw[k], out, AR_DT_F32, T_SGRAD, err));
    d = &n->nodes[n->head];
  }
  const int64_t cap = ar_layer_active_cap(n->hspec, n->head_l, head_labels(n));
  const int64_t sc = ar_layer_shared_cap(n->hspec, n->head_l, head_labels(n));
  AR_CHECK(add_buf(n, HS_ACTIVE, "active", B * cap, AR_DT_I32, err));
  AR_CHECK(add_buf(n, HS_N, "n", B, AR_DT_I32, err));
  AR_CHECK(add_buf(n, HS_OUT, "out", B * cap, AR_DT_F32, err));
  AR_CHECK(add_buf(n, HS_DOUT, "dout", B * cap, AR_DT_F32, err));
  if (sc) {
    AR_CHECK(add_buf(n, HS_SIDS, "shared_ids", sc, AR_DT_I32, err));
    AR_CHECK(add_buf(n, HS_SW, "shared_w", sc * in, AR_DT_F32, err));
    AR_CHECK(add_buf(n, HS_SGW, "shared_gw", sc * in, AR_DT_F32, err));
    AR_CHECK(add_buf(n, HS_SB, "shared_b", sc, AR_DT_F32, err));
    AR_CHECK(add_buf(n, HS_SGB, "shared_gb", sc, AR_DT_F32, err));
    AR_CHECK(add_buf(n, HS_SZ, "shared_z", B * sc, AR_DT_F32, err));
  }
  if (!ar_net_sparse_input(n)) { /* one class a row: as the layer reads labels */
    AR_CHECK(add_buf(n, HS_LAB, "labels", B, AR_DT_I32, err));
    AR_CHECK(add_buf(n, HS_LABPTR, "label_ptr", B + 1, AR_DT_I64, err));
  }
  /* Each row's last update step (u64, as two floats' bytes): state. */
  char tn[400];
  snprintf(tn, sizeof tn, "%.190s.lsh_last", d->name);
  ar_shape ls = {1, {2 * out}};
  n->head_last = ar__net_tensor(n, tn, &ls, AR_DT_F32, T_STATE);
  if (n->head_last < 0)
    return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
  n->tensors[n->head_last].init = AR_NN_INIT_ZEROS;
  d = &n->nodes[n->head];
  /* The rows' gradients persist between iterations. */
  for (int k = 0; k < d->sig.n_param; k++)
    if (d->trains && d->gparam[k] >= 0 && d->gptmp[k] < 0)
      n->tensors[d->gparam[k]].kind = T_SGRAD;
  return AR_OK;
}

/* The reshapes (at most cap, into chain) that take tensor t to the logits
 * of the same shape, each tensor on the way read by the next alone (a
 * MatMul head's (rows, out) back to the batch's shape and out again); -1
 * when t does not reach the logits so. */
static int reshapes_to_logits(const ar_net *n, int t, int *chain, int cap) {
  const ntensor *lg = &n->tensors[n->logits];
  if (!ar_shape_eq(&n->tensors[t].shape, &lg->shape))
    return -1;
  int c = 0;
  while (t != n->logits) {
    int reader = -1, readers = 0;
    for (int i = 0; i < n->n_nodes; i++)
      for (int k = 0; k < n->nodes[i].n_in; k++)
        if (n->nodes[i].in[k] == t) {
          reader = i;
          readers++;
        }
    if (readers != 1 || n->nodes[reader].op != AR_NN_RESHAPE || c == cap)
      return -1;
    chain[c++] = reader;
    t = n->nodes[reader].out[0];
  }
  return c;
}

ar_status ar__net_head_onnx(ar_net *n, ar_err *err) {
  const ar_spec *s = n->spec;
  if (!s || s->n_onnx_sparse == 0)
    return AR_OK;
  const char *file = s->file ? s->file : "<string>";
  const ar_layer_spec *e = &s->onnx_sparse[0];
  char at[64] = "";
  if (e->pos.line > 0)
    snprintf(at, sizeof at, ":%d:%d", e->pos.line, e->pos.col);
  if (s->n_onnx_sparse > 1)
    return ar_errf(err, AR_SPEC, "%s%s: error: model.sparse: %d nodes named; only the last "
                   "Gemm or MatMul (producing the logits) can be LSH-sampled: keep one", file, at,
                   s->n_onnx_sparse);
  int node = -1;
  for (int i = 0; i < n->n_nodes && node < 0; i++)
    if (!strcmp(n->nodes[i].name, e->name))
      node = i;
  /* An ONNX node lowered to several (NODE/part...): one of them. */
  const size_t len = strlen(e->name);
  for (int i = 0; i < n->n_nodes && node < 0; i++)
    if (!strncmp(n->nodes[i].name, e->name, len) && n->nodes[i].name[len] == '/')
      node = i;
  const nnode *prod = &n->nodes[n->tensors[n->logits].producer];
  if (node < 0)
    return ar_errf(err, AR_SPEC, "%s%s: error: model.sparse.%s: %s has no node '%s'; the node "
                   "producing the logits is '%s'", file, at, e->name, s->onnx, e->name,
                   prod->name);
  const nnode *d = &n->nodes[node];
  int chain[8], n_chain = 0; /* reshapes from the node's rows to the logits */
  if (d->op == AR_NN_DENSE)
    n_chain = reshapes_to_logits(n, d->out[0], chain, 8);
  if (d->op != AR_NN_DENSE || n_chain < 0 || n->tensors[d->in[0]].shape.nd != 2)
    return ar_errf(err, AR_SPEC, "%s%s: error: model.sparse.%s: node '%s' of %s is not a Gemm "
                   "or MatMul (with or without a bias) whose weight is an initializer read only "
                   "there, producing the logits (PyTorch's last Linear; export with "
                   "do_constant_folding=True so that a MatMul's weight is one); the node "
                   "producing the logits is '%s'", file, at, e->name, e->name, s->onnx,
                   prod->name);
  if (s->train.optimizer != AR_OPT_ADAM || s->train.weight_decay > 0)
    return ar_errf(err, AR_SPEC, "%s%s: error: model.sparse.%s: an LSH-sampled head trains "
                   "with Adam without weight decay (sparse Adam on the touched rows); set "
                   "train.optimizer to adam with weight_decay 0", file, at, e->name);
  n->hspec_own = *s;
  n->hlayer = *e;
  n->hlayer.width = n->tensors[d->param[0]].shape.d[0];
  n->hspec_own.layers = &n->hlayer;
  n->hspec_own.n_layers = 1;
  n->hspec = &n->hspec_own;
  if (ar_layer_sampled(n->hspec, 0, true)) {
    n->head = node;
    n->head_l = 0;
    for (int k = 0; k < n_chain; k++)
      n->nodes[chain[k]].after_head = true;
  }
  return AR_OK;
}

void ar__net_lsh_host(ar_net *n, const char *node, const ar__sampled_mem *sb) {
  static const char *const what[] = {"lsh.tables", "lsh.hash", "lsh.scratch", "lsh.touched",
                                     "lsh.ids"};
  const size_t bytes[] = {sb->tables, sb->hash, sb->scratch, sb->touched, sb->ids};
  for (int k = 0; k < 5; k++) {
    if (!bytes[k])
      continue;
    ar_plan_entry *e = &n->plan.entries[n->plan.count++];
    snprintf(e->name, sizeof e->name, "%.40s.%s", node, what[k]);
    e->cls = AR_MEM_HOST;
    e->bytes = bytes[k];
    e->last_use = INT64_MAX;
    n->plan.host_bytes += bytes[k];
  }
}

ar_status ar__net_head_host(ar_net *n, ar_err *err) {
  if (n->head < 0)
    return AR_OK;
  ar__sampled_mem sb;
  AR_CHECK(ar__sampled_bytes(n->hspec, n->head_l, head_in(n), 0, ar_plan_threads(n->hspec),
                             shared_cap(n), &sb, err));
  ar__net_lsh_host(n, n->nodes[n->head].name, &sb);
  return AR_OK;
}

static void *tp(const ar_net *n, int t) { return t >= 0 ? n->tensors[t].p : NULL; }

static ar__sampled_ptrs head_ptrs(const ar_net *n) {
  const nnode *d = &n->nodes[n->head];
  const int *h = n->hs;
  const bool nb = d->sig.n_param == 1;
  ar__sampled_ptrs p = {tp(n, d->param[0]),     tp(n, nb ? h[HS_ZB] : d->param[1]),
                        tp(n, d->gparam[0]),    tp(n, nb ? h[HS_ZGB] : d->gparam[1]),
                        tp(n, h[HS_ACTIVE]),   tp(n, h[HS_N]),
                        tp(n, h[HS_OUT]),       tp(n, h[HS_DOUT]),     tp(n, h[HS_SIDS]),
                        tp(n, h[HS_SW]),        tp(n, h[HS_SGW]),      tp(n, h[HS_SB]),
                        tp(n, h[HS_SGB]),       tp(n, h[HS_SZ])};
  return p;
}

ar_status ar__net_head_start(ar_net *n, ar_err *err) {
  if (n->head < 0)
    return AR_OK;
  if (!n->smp) {
    const nnode *d = &n->nodes[n->head];
    const ntensor *w = &n->tensors[d->param[0]];
    const bool nb = d->sig.n_param == 1;
    const ntensor *b = nb ? NULL : &n->tensors[d->param[1]];
    ar__sampled_cfg c = {n->hspec, n->head_l, d->name, n->dev, head_in(n), head_out(n),
                         head_labels(n),
                         n->step, n->head_from < 0 && !n->head_csr, n->head_csr, head_ptrs(n),
                         tp(n, w->opt1), tp(n, w->opt2), tp(n, nb ? n->hs[HS_ZM1] : b->opt1),
                         tp(n, nb ? n->hs[HS_ZM2] : b->opt2), tp(n, n->head_last)};
    if (!c.s1w || !c.s2w)
      return ar_errf(err, AR_UNSUPPORTED, "%s is LSH-sampled, which trains with Adam only; "
                     "set train.optimizer to adam or the item's sparse.mode to dense", d->path);
    ar_status st = ar__sampled_new(&c, &n->smp, err);
    if (st != AR_OK)
      return st;
  }
  return ar__sampled_reset(n->smp, n->step, n->trace, err);
}

void ar__net_head_bind(ar_net *n) {
  if (n->smp) {
    ar__sampled_ptrs p = head_ptrs(n);
    ar__sampled_set_mem(n->smp, &p);
  }
}

void ar__net_head_stop(ar_net *n) {
  ar__sampled_destroy(n->smp);
  n->smp = NULL;
}

/* The staged batch as the layer reads it.  Over sparse input: the
 * batch's label CSR (several labels a row) and its real rows only, the
 * gradient divided as the chain's (grad_rows, else the real rows); the
 * padded rows after them are zeroed by the callers.  Otherwise the class
 * of each row as a one-label CSR over the whole batch. */
static ar__sbatch head_batch(ar_net *n, const nnode *d) {
  const float *X = tp(n, d->in[0]);
  float *dX = d->gin[0] >= 0 ? tp(n, d->gin[0]) : NULL;
  if (ar_net_sparse_input(n)) {
    const int64_t div = n->grad_rows > 0 ? n->grad_rows : n->rows > 0 ? n->rows : 1;
    ar__sbatch b = {n->rows, 1.0f / (float)div, X, dX, tp(n, n->sx[SX_LAB]),
                    tp(n, n->sx[SX_LPTR]), n->step, tp(n, n->loss), NULL, NULL, NULL, NULL};
    if (n->head_csr) { /* a one-layer chain: the CSR rows (host memory) */
      b.X = NULL;
      b.dX = NULL;
      b.row_ptr = tp(n, n->sx[SX_PTR]);
      b.idx = tp(n, n->sx[SX_IDX]);
      b.val = tp(n, n->sx[SX_VAL]);
    } else if (n->head_from >= 0) { /* a sampled node's active set */
      b.X = NULL;
      b.from = n->hid[n->head_from].smp;
    }
    return b;
  }
  int32_t *lab = tp(n, n->hs[HS_LAB]);
  int64_t *ptr = tp(n, n->hs[HS_LABPTR]);
  const int64_t *y = tp(n, n->y);
  for (int64_t r = 0; r < n->batch; r++) {
    lab[r] = (int32_t)y[r];
    ptr[r] = r;
  }
  ptr[n->batch] = n->batch;
  ar__sbatch b = {n->batch, 1.0f / (float)n->batch, X, dX, lab, ptr, n->step, tp(n, n->loss),
                  NULL, NULL, NULL, NULL};
  return b;
}

ar_status ar__net_head_forward(ar_net *n, const nnode *d, ar_err *err) {
  ar__sbatch b = head_batch(n, d);
  n->head_loss_sum = 0;
  if (b.rows < n->batch) /* padding rows: no loss */
    memset(b.row_loss + b.rows, 0, (size_t)(n->batch - b.rows) * sizeof(float));
  if (b.rows == 0)
    return AR_OK;
  if (b.from || b.row_ptr) /* the chain's unshared scoring */
    return ar__sampled_head_rows_forward(n->smp, &b, &n->head_loss_sum, err);
  return ar__sampled_head_forward(n->smp, &b, &n->head_loss_sum, err);
}

bool ar__net_head_eval(ar_net *n, const nnode *d, ar_status *st, ar_err *err) {
  if (!n->head_csr || !n->smp || d != &n->nodes[n->head])
    return false;
  /* A one-layer chain's head over the sparse rows: every class by the
   * sampled kernels, as the chain's sampled_full (its input n->xd is
   * never filled). */
  ar__sbatch b = head_batch(n, d);
  float *Y = tp(n, d->out[0]);
  memset(Y, 0, (size_t)(n->batch * head_out(n)) * sizeof(float)); /* padding rows: zeros */
  *st = b.rows > 0 ? ar__sampled_hidden_full(n->smp, &b, false, Y, err) : AR_OK;
  return true;
}

ar_status ar__net_head_backward(ar_net *n, const nnode *d, ar_err *err) {
  ar__sbatch b = head_batch(n, d);
  const int64_t in = head_in(n);
  if (b.dX && b.rows < n->batch) /* padding rows: no gradient */
    memset(b.dX + b.rows * in, 0, (size_t)((n->batch - b.rows) * in) * sizeof(float));
  if (b.rows == 0)
    return AR_OK;
  if (b.from || b.row_ptr)
    return ar__sampled_hidden_backward(n->smp, &b, false, NULL, err);
  return ar__sampled_head_backward(n->smp, &b, err);
}

ar_status ar__net_head_step(ar_net *n, ar_err *err) {
  AR_CHECK(ar__sampled_step(n->smp, n->step, err));
  if (n->hs[HS_ZB] >= 0)
    ar_device_fill(n->dev, tp(n, n->hs[HS_ZB]), head_out(n), 0.0f);
  return ar__sampled_rehash(n->smp, n->step, n->trace, err);
}

const char *ar__net_head_stats(const ar_net *n, ar_sampled_stats *out) {
  if (!n->smp)
    return NULL;
  ar__sampled_stats(n->smp, out);
  return n->nodes[n->head].name;
}

/* ---- sampled items under distributed: (net.h) ---- */

/* Item `layer`'s sampled layer and its last-steps tensor (NULL, -1:
 * none). */
static struct ar_sampled *sampled_of(const ar_net *n, int layer, int *last) {
  *last = -1;
  if (n->smp && n->hspec == n->spec && n->head_l == layer) {
    *last = n->head_last;
    return n->smp;
  }
  for (int j = 0; j < n->n_hid; j++)
    if (n->hid[j].smp && n->hid[j].l == layer) {
      *last = n->hid[j].last;
      return n->hid[j].smp;
    }
  return NULL;
}

static struct ar_sampled *must(const ar_net *n, int layer) {
  int last;
  struct ar_sampled *s = sampled_of(n, layer, &last);
  AR_ASSERT(s);
  return s;
}

bool ar_net_sampled(const ar_net *n, int layer) {
  int last;
  return sampled_of(n, layer, &last) != NULL;
}

const uint32_t *ar_net_sampled_grad_rows(const ar_net *n, int layer, size_t *count) {
  return ar__sampled_grad_rows(must(n, layer), count);
}

void ar_net_sampled_grad_rows_mark(ar_net *n, int layer, uint32_t id) {
  ar__sampled_grad_rows_mark(must(n, layer), id);
}

void ar_net_sampled_grad_rows_clear(ar_net *n, int layer) {
  ar__sampled_grad_rows_clear(must(n, layer));
}

void ar_net_sampled_rows_changed(ar_net *n, int layer, const uint32_t *ids, size_t count) {
  ar__sampled_rows_changed(must(n, layer), ids, count);
}

ar_status ar_net_sampled_rehash(ar_net *n, int layer, ar_err *err) {
  return ar__sampled_rehash(must(n, layer), n->step, n->trace, err);
}

ar_status ar_net_sampled_step(ar_net *n, int layer, ar_err *err) {
  return ar__sampled_step(must(n, layer), n->step, err);
}

void *ar_net_sampled_last(const ar_net *n, int layer) {
  int last;
  AR_ASSERT(sampled_of(n, layer, &last) && last >= 0);
  return tp(n, last);
}

bool ar_net_head_sampled(const ar_net *n) { return n->smp != NULL; }

double ar_net_head_loss_sum(const ar_net *n) { return n->head_loss_sum; }
