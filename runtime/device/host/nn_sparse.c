/*
 * Host kernels of the nn ops in group "sparse" (AR_NN_OP_MAP's third
 * column): SPARSE_DENSE, a dense layer fed by a CSR batch, and XENT_MULTI,
 * the extreme-classification losses over a CSR batch of labels.  They are
 * the chain engine's first layer and loss (runtime/engine/model.c) as graph
 * ops: the same host kernels (ar__host_spmm, _spmm_t, _bias_act,
 * _col_sum, _softmax_xent, _sigmoid_bce) in the same order, so a graph
 * model over sparse input computes what the chain computes, bit for bit
 * for these ops.  include/accelrt/nn.h states their contracts.
 */
#include "host/nn_math_impl.h"

#include "host/host_kernels.h"

/* ---- SPARSE_DENSE ---------------------------------------------------------
 * row_ptr (N+1) i64, idx (E) i32, val (E) f32 -> y (N, out) = act(x w + b),
 * w (vocab, out). */

static ar_status sdense_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                              const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  char b0[64], b1[64], b2[64];
  AR_CHECK(ar__nn_want_inputs(AR_NN_SPARSE_DENSE, n_in, 3, 3, err));
  if (in_dtype[0] != AR_DT_I64 || in_dtype[1] != AR_DT_I32 || in_dtype[2] != AR_DT_F32)
    return ar_errf(err, AR_INVALID,
                   "sparse_dense: inputs are %s, %s, %s; want row_ptr i64, idx i32, val f32",
                   ar_dtype_name(in_dtype[0]), ar_dtype_name(in_dtype[1]),
                   ar_dtype_name(in_dtype[2]));
  if (in[0].nd != 1 || in[0].d[0] < 2 || in[1].nd != 1 || in[2].nd != 1 ||
      in[1].d[0] != in[2].d[0])
    return ar_errf(err, AR_INVALID,
                   "sparse_dense: row_ptr %s, idx %s, val %s; want (N+1) with N >= 1, and idx "
                   "and val of one length (E)",
                   ar_shape_str(&in[0], b0, sizeof b0), ar_shape_str(&in[1], b1, sizeof b1),
                   ar_shape_str(&in[2], b2, sizeof b2));
  if (attr->vocab <= 0 || attr->out <= 0)
    return ar_errf(err, AR_INVALID,
                   "sparse_dense: vocab (input features) %lld, out %lld; give both > 0",
                   (long long)attr->vocab, (long long)attr->out);
  if (attr->act != AR_ACT_NONE && attr->act != AR_ACT_RELU && attr->act != AR_ACT_SIGMOID)
    return ar_errf(err, AR_INVALID, "sparse_dense: act %d is not none, relu or sigmoid",
                   (int)attr->act);
  const int64_t rows = in[0].d[0] - 1;
  ar__nn_sig_init(sig, n_in);
  ar_shape y = ar__nn_shape(2, (int64_t[]){rows, attr->out});
  ar__nn_sig_out(sig, &y, AR_DT_F32);
  ar_shape w = ar__nn_shape(2, (int64_t[]){attr->vocab, attr->out});
  ar__nn_sig_param(sig, "w", &w, AR_NN_INIT_FAN_IN_ROWS, true);
  if (attr->bias) {
    ar_shape bs = ar__nn_shape(1, (int64_t[]){attr->out});
    ar__nn_sig_param(sig, "b", &bs, AR_NN_INIT_ZEROS, true);
  }
  sig->no_grad = 7u;
  sig->in_needed = 7u; /* dw = x^T gz */
  sig->out_needed = attr->act != AR_ACT_NONE;
  /* Each stored entry adds a row of w: the room, an upper bound. */
  sig->flops = 2.0 * (double)in[1].d[0] * (double)attr->out;
  return AR_OK;
}

/* gz = gout * act'(y) must not be written over gout. */
static ar_status sdense_prepare(const ar_nn_args *a, bool training, void **state,
                                size_t *work_bytes, ar_err *err) {
  (void)err;
  *state = NULL;
  *work_bytes = training && a->attr->act != AR_ACT_NONE
                    ? (size_t)ar_shape_count(&a->out[0].shape) * sizeof(float)
                    : 0;
  return AR_OK;
}

static void sdense_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_nn_attr *at = a->attr;
  const int64_t rows = a->in[0].shape.d[0] - 1;
  float *y = a->out[0].p;
  ar__host_spmm(a->dev, rows, a->in[0].p, a->in[1].p, a->in[2].p, a->param[0].p, at->out, y);
  ar__host_bias_act(a->dev, rows, at->out, at->bias ? a->param[1].p : NULL, at->act, y);
}

static void sdense_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_nn_attr *at = a->attr;
  const int64_t rows = a->in[0].shape.d[0] - 1, n = rows * at->out;
  const float *g = a->gout[0].p;
  if (at->act != AR_ACT_NONE) {
    AR_ASSERT(a->work && a->work_bytes >= (size_t)n * sizeof(float));
    float *gz = a->work;
    const float *src = g;
#pragma omp parallel for simd schedule(static) num_threads(ar__nn_team(a, n)) if (parallel: n > AR__NN_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
      gz[i] = src[i];
    ar__host_act_grad(a->dev, n, at->act, a->out[0].p, gz);
    g = gz;
  }
  if (at->bias)
    ar__host_col_sum(a->dev, rows, at->out, g, false, a->gparam[1].p);
  ar__host_fill(a->dev, a->gparam[0].p, at->vocab * at->out, 0.0f);
  ar__host_spmm_t(a->dev, rows, a->in[0].p, a->in[1].p, a->in[2].p, g, at->out, a->gparam[0].p);
}

/* ---- XENT_MULTI -----------------------------------------------------------
 * logits (N, C), lab_ptr (N+1) i64, lab (E) i32 -> loss (N). */

static ar_status xmulti_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                              const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  char b0[64], b1[64], b2[64];
  AR_CHECK(ar__nn_want_inputs(AR_NN_XENT_MULTI, n_in, 3, 3, err));
  if (in_dtype[0] != AR_DT_F32 || in_dtype[1] != AR_DT_I64 || in_dtype[2] != AR_DT_I32)
    return ar_errf(err, AR_INVALID,
                   "xent_multi: inputs are %s, %s, %s; want logits f32, lab_ptr i64, lab i32",
                   ar_dtype_name(in_dtype[0]), ar_dtype_name(in_dtype[1]),
                   ar_dtype_name(in_dtype[2]));
  if (in[0].nd != 2 || in[0].d[1] <= 0 || in[1].nd != 1 || in[1].d[0] != in[0].d[0] + 1 ||
      in[2].nd != 1)
    return ar_errf(err, AR_INVALID,
                   "xent_multi: logits %s, lab_ptr %s, lab %s; want (N, C), (N+1) and (E)",
                   ar_shape_str(&in[0], b0, sizeof b0), ar_shape_str(&in[1], b1, sizeof b1),
                   ar_shape_str(&in[2], b2, sizeof b2));
  if (attr->act != AR_ACT_SOFTMAX && attr->act != AR_ACT_SIGMOID)
    return ar_errf(err, AR_INVALID, "xent_multi: act %d is not softmax or sigmoid",
                   (int)attr->act);
  ar__nn_sig_init(sig, n_in);
  ar_shape l = ar__nn_shape(1, (int64_t[]){in[0].d[0]});
  ar__nn_sig_out(sig, &l, AR_DT_F32);
  sig->no_grad = 6u;
  sig->in_needed = 7u; /* the gradient is recomputed from the logits */
  sig->flops = 4.0 * (double)ar_shape_count(&in[0]);
  return AR_OK;
}

/* The rows that count (a->rows), then zeros for the padding. */
static void xmulti_run(ar_nn_args *a, float *grad) {
  const int64_t all = a->in[0].shape.d[0], cols = a->in[0].shape.d[1];
  const int64_t rows = a->rows > 0 && a->rows < all ? a->rows : all;
  float *loss = a->out[0].p;
  for (int64_t r = rows; r < all; r++)
    loss[r] = 0.0f;
  if (grad && rows < all)
    ar__host_fill(a->dev, grad + rows * cols, (all - rows) * cols, 0.0f);
  if (a->attr->act == AR_ACT_SIGMOID)
    ar__host_sigmoid_bce(a->dev, rows, cols, a->in[0].p, a->in[1].p, a->in[2].p, a->scale, grad,
                         a->out[0].p);
  else
    ar__host_softmax_xent(a->dev, rows, cols, a->in[0].p, a->in[1].p, a->in[2].p, a->scale,
                          grad, a->out[0].p);
}

static void xmulti_forward(void *state, ar_nn_args *a) {
  (void)state;
  xmulti_run(a, NULL);
}

/* The loss rows are written again, with the same values. */
static void xmulti_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    xmulti_run(a, a->gin[0].p);
}

void ar__nn_host_sparse_register(ar_nn_kernel *table) {
  table[AR_NN_SPARSE_DENSE] = (ar_nn_kernel){.infer = sdense_infer,
                                             .prepare = sdense_prepare,
                                             .forward = sdense_forward,
                                             .backward = sdense_backward};
  table[AR_NN_XENT_MULTI] = (ar_nn_kernel){
      .infer = xmulti_infer, .forward = xmulti_forward, .backward = xmulti_backward};
}
