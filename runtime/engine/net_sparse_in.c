/* A graph model over sparse input (model.input.sparse, XC data): the
 * batch is five tensors, the features' CSR (batch.row_ptr, batch.idx,
 * batch.val) and the labels' (batch.lab_ptr, batch.lab), each planned at
 * the data's bounds (rows of at most max_nnz features and max_labels
 * labels), as the chain engine plans its batch.  `input` names the
 * features; a dense item reading them becomes a SPARSE_DENSE node (the
 * chain's first layer: w is (features, out)), and the loss is XENT_MULTI
 * with the last item's activation (the chain's losses).  A batch shorter
 * than planned (an epoch's last) is padded with empty rows that the loss
 * leaves out: its mean and gradient are over the real rows, as the
 * chain's.  The weights of its top-level dense items start as the
 * chain's layers do, so the same network written either way is the same
 * model.  docs/graph.md, "Sparse input". */
#include "engine_impl.h"
#include "net_impl.h"

#include <math.h>
#include <string.h>

bool ar_net_sparse_input(const ar_net *n) { return n->sx[SX_PTR] >= 0; }

ar_status ar__net_sparse_inputs(build_ctx *b) {
  ar_net *n = b->net;
  static const char *const names[SX_COUNT] = {"batch.row_ptr", "batch.idx", "batch.val",
                                              "batch.lab_ptr", "batch.lab"};
  static const ar_dtype types[SX_COUNT] = {AR_DT_I64, AR_DT_I32, AR_DT_F32, AR_DT_I64,
                                           AR_DT_I32};
  const int64_t B = n->batch;
  const int64_t len[SX_COUNT] = {B + 1, B * n->max_nnz, B * n->max_nnz, B + 1,
                                 B * n->max_labels};
  for (int k = 0; k < SX_COUNT; k++) {
    ar_shape s = {1, {len[k]}};
    n->sx[k] = ar__net_tensor(n, names[k], &s, types[k], T_INPUT);
    if (n->sx[k] < 0)
      return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
  }
  const ar_spec *s = n->spec;
  if (s->input.kind != AR_INPUT_DENSE && !(s->lowered && ar_layer_sampled(s, 0, true)))
    /* `input` names the features (the row pointers stand for the three). */
    return ar__net_bind_name(b, "input", n->sx[SX_PTR]);
  /* A lowered chain over model.input.dense: the features as the chain
   * reads them, a dense (batch, features) tensor (ar_net_stage_sparse
   * scatters the rows into it); item 0 is a dense node, as the chain's
   * first layer (w (width, features)).  The CSR tensors above stay in
   * the plan, unread but for the labels.  A lowered chain's sampled first
   * layer over model.input.sparse is a dense node too, its rows (width,
   * features) as the chain's sampled rows; it reads the CSR tensors
   * (net_sampled_hidden.c), so its input only gives the shape (T_SHAPE:
   * no (batch, features) floats planned). */
  ar_shape xs = {2, {B, n->spec->input.features}};
  n->xd = ar__net_tensor(n, "batch.x", &xs, AR_DT_F32,
                         s->input.kind == AR_INPUT_DENSE ? T_INPUT : T_SHAPE);
  if (n->xd < 0)
    return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
  return ar__net_bind_name(b, "input", n->xd);
}

ar_status ar__net_sparse_item(build_ctx *b, const ar_layer_spec *ls, const char *path,
                              ar_nn_op *op, ar_nn_attr *a, int *in, int *n_in) {
  ar_net *n = b->net;
  bool reads = false;
  for (int k = 0; k < *n_in; k++)
    reads |= in[k] == n->sx[SX_PTR];
  if (!reads)
    return AR_OK;
  if (*op != AR_NN_DENSE || *n_in != 1)
    return ar__net_build_err(b, ls, path,
                             "the sparse input (model.input.sparse) feeds dense items only "
                             "(`dense: WIDTH`, reading nothing else); this item is %s with %d "
                             "input%s",
                             ar_nn_op_name(*op), *n_in, *n_in == 1 ? "" : "s");
  *op = AR_NN_SPARSE_DENSE;
  a->vocab = n->spec->input.features;
  in[0] = n->sx[SX_PTR];
  in[1] = n->sx[SX_IDX];
  in[2] = n->sx[SX_VAL];
  *n_in = 3;
  return AR_OK;
}

size_t ar__net_sparse_bytes(const ar_net *n) {
  size_t s = 0;
  for (int k = 0; k < SX_COUNT; k++)
    s += n->tensors[n->sx[k]].bytes;
  return s;
}

/* The staged dense batch (a lowered chain over model.input.dense): after
 * the CSR tensors, the loss rows and the top 5 (net_run.c's staging). */
static float *staged_x(const ar_net *n) {
  return (float *)((char *)n->staging + ar__net_sparse_bytes(n) + (size_t)n->batch * (4 + 5 * 4));
}

/* The staged tensor k (host). */
static void *staged(const ar_net *n, int k) {
  char *p = n->staging;
  for (int j = 0; j < k; j++)
    p += n->tensors[n->sx[j]].bytes;
  return p;
}

ar_status ar_net_stage_sparse(ar_net *n, const ar_batch *b, ar_err *err) {
  AR_ASSERT(ar_net_sparse_input(n) && n->staging);
  const int64_t rows = b->rows, nnz = b->row_ptr[rows], nlab = b->lab_ptr[rows];
  if (rows > n->batch || nnz > n->batch * n->max_nnz || nlab > n->batch * n->max_labels)
    return ar_errf(err, AR_RANGE,
                   "a batch of %lld rows, %lld features and %lld labels exceeds the plan (%lld "
                   "rows of at most %lld features and %lld labels); the data changed since the "
                   "job was planned: run it again",
                   (long long)rows, (long long)nnz, (long long)nlab, (long long)n->batch,
                   (long long)n->max_nnz, (long long)n->max_labels);
  for (int64_t e = 0; e < nnz; e++)
    if (b->idx[e] < 0 || b->idx[e] >= n->spec->input.features)
      return ar_errf(err, AR_RANGE,
                     "a point holds feature %d, outside model.input.sparse %lld (features "
                     "0..%lld); raise it to the data's feature count",
                     b->idx[e], (long long)n->spec->input.features,
                     (long long)n->spec->input.features - 1);
  for (int64_t e = 0; e < nlab; e++)
    if (b->lab[e] < 0 || b->lab[e] >= n->classes)
      return ar_errf(err, AR_RANGE,
                     "a point has label %d, but the model's last layer has %lld outputs (ids "
                     "0..%lld); make the last dense layer as wide as the labels",
                     b->lab[e], (long long)n->classes, (long long)n->classes - 1);
  int64_t *ptr = staged(n, SX_PTR), *lptr = staged(n, SX_LPTR);
  memcpy(ptr, b->row_ptr, (size_t)(rows + 1) * sizeof *ptr);
  memcpy(lptr, b->lab_ptr, (size_t)(rows + 1) * sizeof *lptr);
  for (int64_t r = rows + 1; r <= n->batch; r++) { /* padding: empty rows */
    ptr[r] = nnz;
    lptr[r] = nlab;
  }
  memcpy(staged(n, SX_IDX), b->idx, (size_t)nnz * sizeof *b->idx);
  memcpy(staged(n, SX_VAL), b->val, (size_t)nnz * sizeof *b->val);
  memcpy(staged(n, SX_LAB), b->lab, (size_t)nlab * sizeof *b->lab);
  if (n->xd >= 0 && n->spec->input.kind == AR_INPUT_DENSE) {
    /* the chain's scatter (ar_model_load); padding rows: 0 */
    const int64_t F = n->spec->input.features;
    float *x = staged_x(n);
    memset(x, 0, n->tensors[n->xd].bytes);
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = b->row_ptr[r]; j < b->row_ptr[r + 1]; j++)
        x[r * F + b->idx[j]] += b->val[j];
  }
  n->rows = rows;
  return AR_OK;
}

ar_status ar__net_sparse_load(ar_net *n, ar_err *err) {
  const int64_t *ptr = staged(n, SX_PTR), *lptr = staged(n, SX_LPTR);
  /* Only what the batch holds is copied: the rest of idx, val and lab is
   * never read. */
  const size_t bytes[SX_COUNT] = {(size_t)(n->batch + 1) * 8, (size_t)ptr[n->batch] * 4,
                                  (size_t)ptr[n->batch] * 4, (size_t)(n->batch + 1) * 8,
                                  (size_t)lptr[n->batch] * 4};
  for (int k = 0; k < SX_COUNT; k++) {
    ar_status st = ar_device_copy_in(n->dev, n->tensors[n->sx[k]].p, staged(n, k), bytes[k]);
    if (st != AR_OK)
      return ar_errf(err, st, "copying the batch to the device: %s", ar_device_errmsg(n->dev));
  }
  if (n->xd >= 0 && n->spec->input.kind == AR_INPUT_DENSE) {
    ar_status st = ar_device_copy_in(n->dev, n->tensors[n->xd].p, staged_x(n),
                                     n->tensors[n->xd].bytes);
    if (st != AR_OK)
      return ar_errf(err, st, "copying the batch to the device: %s", ar_device_errmsg(n->dev));
  }
  nnode *loss = &n->nodes[n->tensors[n->loss].producer];
  loss->args.rows = n->rows;
  /* A short batch's dense items compute its real rows only (their padding
   * rows are zeros), as the chain's layers do: OpenBLAS may sum a product
   * of 16 rows in another order than the same rows padded to 128, so the
   * padded products rounded differently from the chain's (docs/graph.md,
   * Sparse input). */
  for (int i = 0; i < n->n_nodes; i++) {
    nnode *d = &n->nodes[i];
    const ar_shape *in = &d->args.in[0].shape;
    if (d->op == AR_NN_DENSE && in->nd == 2 && in->d[0] == n->batch)
      d->args.rows = n->rows < n->batch ? n->rows : 0;
  }
  loss->args.scale = 1.0f / (float)(n->grad_rows > 0 ? n->grad_rows : n->rows > 0 ? n->rows : 1);
  return AR_OK;
}

void ar__net_sparse_hits(const ar_net *n, const float *loss, const int32_t *top, int k,
                         ar_eval_acc *acc) {
  const int64_t *lptr = staged(n, SX_LPTR);
  const int32_t *lab = staged(n, SX_LAB);
  double sum = 0;
  for (int64_t r = 0; r < n->rows; r++) {
    sum += loss[r];
    acc->rows++;
    ar__count_hits(acc, top + r * k, k, lab + lptr[r], lptr[r + 1] - lptr[r]);
  }
  /* As the chain adds a batch: its mean as a float, times its rows. */
  if (n->rows)
    acc->loss_sum += (double)(float)(sum / (double)n->rows) * (double)n->rows;
}

bool ar__net_sparse_init(const ar_net *n, int t) {
  const ntensor *w = &n->tensors[t];
  if (!ar_net_sparse_input(n) || w->kind != T_PARAM || w->producer < 0)
    return false;
  const nnode *d = &n->nodes[w->producer];
  const ar_spec *s = n->spec;
  const bool sd = d->op == AR_NN_SPARSE_DENSE;
  if ((!sd && d->op != AR_NN_DENSE) || t != d->param[0] || !d->ls || d->ls < s->layers ||
      d->ls >= s->layers + s->n_layers)
    return false;
  /* The chain's rule (runtime/engine/model.c, init_params): He normal for
   * a relu layer, else Xavier uniform (or train.init), one stream per
   * layer, drawn in the weights' memory order. */
  const int64_t l = d->ls - s->layers;
  const int64_t in = sd ? w->shape.d[0] : w->shape.d[1], out = sd ? w->shape.d[1] : w->shape.d[0];
  ar_init_kind kind = s->train.init;
  if (kind == AR_INIT_AUTO)
    kind = d->ls->act == AR_ACT_RELU ? AR_INIT_HE : AR_INIT_XAVIER;
  ar_rng rng;
  ar_rng_seed(&rng, s->seed, 1000 + (uint64_t)l);
  float *p = w->p;
  const double he = sqrt(2.0 / (double)in), xa = sqrt(6.0 / (double)(in + out));
  for (int64_t i = 0; i < in * out; i++)
    p[i] = kind == AR_INIT_HE ? (float)(ar_rng_normal(&rng) * he)
                              : (float)((2.0 * ar_rng_uniform(&rng) - 1.0) * xa);
  return true;
}
