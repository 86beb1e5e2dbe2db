/*
 * CUDA kernels of the nn ops in group "sparse" with the semantics of
 * runtime/device/host/nn_sparse.c: SPARSE_DENSE and XENT_MULTI are the
 * chain engine's first layer and losses as graph ops, so here, as there,
 * they are the device table's own launchers (cuda_kernels.cu: spmm,
 * spmm_t, bias_act, act_grad, col_sum, softmax_xent, sigmoid_bce) called
 * in the host op's order.  The CUDA chain engine runs the same launchers,
 * so a graph model over sparse input on CUDA computes what the chain
 * computes on CUDA.  spmm_t meets several rows naming one feature in
 * atomics (cuda_kernels.cu), so dw's last bits vary from run to run; every
 * other result is deterministic.
 */
#include "cuda/cuda_nn.h"

/* ---- SPARSE_DENSE ---------------------------------------------------------
 * row_ptr (N+1) i64, idx (E) i32, val (E) f32 -> y (N, out) = act(x w + b). */

static void sdense_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_nn_attr *at = a->attr;
  const int64_t rows = a->in[0].shape.d[0] - 1;
  float *y = (float *)a->out[0].p;
  ar__cuda_spmm(a->dev, rows, (const int64_t *)a->in[0].p, (const int32_t *)a->in[1].p,
                (const float *)a->in[2].p, (const float *)a->param[0].p, at->out, y);
  ar__cuda_bias_act(a->dev, rows, at->out, at->bias ? (const float *)a->param[1].p : NULL,
                    at->act, y);
}

/* gz = gout * act'(y) in the workspace (the host's prepare sizes it), then
 * db = column sums of gz and dw = x^T gz over a zeroed dw. */
static void sdense_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_nn_attr *at = a->attr;
  const int64_t rows = a->in[0].shape.d[0] - 1, n = rows * at->out;
  const float *g = (const float *)a->gout[0].p;
  if (at->act != AR_ACT_NONE) {
    AR_ASSERT(a->work && a->work_bytes >= (size_t)n * sizeof(float));
    float *gz = (float *)a->work;
    ar__cuda_nn_copy(a, gz, g, (size_t)n * sizeof(float), "nn sparse_dense backward copy");
    ar__cuda_act_grad(a->dev, n, at->act, (const float *)a->out[0].p, gz);
    g = gz;
  }
  if (at->bias)
    ar__cuda_col_sum(a->dev, rows, at->out, g, false, (float *)a->gparam[1].p);
  ar__cuda_fill(a->dev, (float *)a->gparam[0].p, at->vocab * at->out, 0.0f);
  ar__cuda_spmm_t(a->dev, rows, (const int64_t *)a->in[0].p, (const int32_t *)a->in[1].p,
                  (const float *)a->in[2].p, g, at->out, (float *)a->gparam[0].p);
}

/* ---- XENT_MULTI -----------------------------------------------------------
 * logits (N, C), lab_ptr (N+1) i64, lab (E) i32 -> loss (N). */

/* The rows that count (a->rows), then zeros for the padding: the host's
 * xmulti_run. */
static void xmulti_run(ar_nn_args *a, float *grad) {
  const int64_t all = a->in[0].shape.d[0], cols = a->in[0].shape.d[1];
  const int64_t rows = a->rows > 0 && a->rows < all ? a->rows : all;
  float *loss = (float *)a->out[0].p;
  ar__cuda_fill(a->dev, loss + rows, all - rows, 0.0f);
  if (grad)
    ar__cuda_fill(a->dev, grad + rows * cols, (all - rows) * cols, 0.0f);
  const float *x = (const float *)a->in[0].p;
  const int64_t *lp = (const int64_t *)a->in[1].p;
  const int32_t *lab = (const int32_t *)a->in[2].p;
  if (a->attr->act == AR_ACT_SIGMOID)
    ar__cuda_sigmoid_bce(a->dev, rows, cols, x, lp, lab, a->scale, grad, loss);
  else
    ar__cuda_softmax_xent(a->dev, rows, cols, x, lp, lab, a->scale, grad, loss);
}

static void xmulti_forward(void *state, ar_nn_args *a) {
  (void)state;
  xmulti_run(a, NULL);
}

static void xmulti_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    xmulti_run(a, (float *)a->gin[0].p);
}

void ar__cuda_nn_sparse_register(ar_nn_kernel *table) {
  /* The host's prepare: no state, gz's workspace when an activation masks
   * gout, which the backward here uses the same way. */
  table[AR_NN_SPARSE_DENSE].prepare = ar__nn_host_table()[AR_NN_SPARSE_DENSE].prepare;
  table[AR_NN_SPARSE_DENSE].forward = sdense_forward;
  table[AR_NN_SPARSE_DENSE].backward = sdense_backward;
  table[AR_NN_XENT_MULTI].forward = xmulti_forward;
  table[AR_NN_XENT_MULTI].backward = xmulti_backward;
}
