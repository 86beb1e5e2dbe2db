/*
 * The checked wrappers of the math ops (contracts in
 * include/accelrt/device.h): each asserts its arguments, returns at once
 * when the handle recorded a failure, and calls the backend's slot, or the
 * generic implementation of an optional one.  They sit on the training
 * loop's path, so they do nothing else: one load of dev->failed, a few
 * compares, one indirect call.
 *
 * The asserts state what every backend may take for granted (see
 * device_impl.h).  A sparse operand's entries (spmm's idx, val and W, a
 * loss's labels) are not checked here: how many there are is in device
 * memory, which the host cannot read without a copy; the host backend
 * asserts the label range as it reads them.
 */
#include "device_impl.h"

/* The op may run: dev is a handle, and nothing failed on it yet. */
static inline bool op_runs(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->failed == AR_OK;
}

/* A (rows, cols) operand stored with row stride ld at p: when it holds an
 * element, p is not NULL and ld covers a row. */
static inline bool matrix_ok(const float *p, int64_t rows, int64_t cols,
                             int64_t ld) {
  return rows == 0 || cols == 0 || (p != NULL && ld >= cols);
}

static inline bool act_ok(ar_act act) {
  return act == AR_ACT_NONE || act == AR_ACT_RELU || act == AR_ACT_SIGMOID ||
         act == AR_ACT_SOFTMAX;
}

/* Generic fill for a backend without one: copies a block of `value` in,
 * a block at a time.  A failed copy is the handle's failure, as for an op
 * that ran asynchronously. */
#define FILL_BLOCK 1024

static void fill_by_copy(ar_device *dev, float *x, int64_t n, float value) {
  float block[FILL_BLOCK];
  int64_t len = n < FILL_BLOCK ? n : FILL_BLOCK;
  for (int64_t i = 0; i < len; i++)
    block[i] = value;
  for (int64_t off = 0; off < n; off += FILL_BLOCK) {
    int64_t c = n - off < FILL_BLOCK ? n - off : FILL_BLOCK;
    ar_status st =
        dev->ops->copy_in(dev, x + off, block, (size_t)c * sizeof *x);
    if (st != AR_OK) {
      if (dev->failed == AR_OK)
        dev->failed = st;
      return;
    }
  }
}

void ar_device_fill(ar_device *dev, float *x, int64_t n, float value) {
  if (!op_runs(dev))
    return;
  AR_ASSERT(n >= 0 && (n == 0 || x != NULL));
  if (dev->ops->fill)
    dev->ops->fill(dev, x, n, value);
  else
    fill_by_copy(dev, x, n, value);
}

void ar_device_gemm(ar_device *dev, bool trans_a, bool trans_b, int64_t m,
                    int64_t n, int64_t k, float alpha, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float beta,
                    float *c, int64_t ldc) {
  if (!op_runs(dev))
    return;
  AR_ASSERT(m >= 0 && n >= 0 && k >= 0);
  AR_ASSERT(matrix_ok(c, m, n, ldc));
  if (m > 0 && n > 0) { /* A and B are read only when C has elements */
    AR_ASSERT(trans_a ? matrix_ok(a, k, m, lda) : matrix_ok(a, m, k, lda));
    AR_ASSERT(trans_b ? matrix_ok(b, n, k, ldb) : matrix_ok(b, k, n, ldb));
  }
  dev->ops->gemm(dev, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                 ldc);
}

/* What spmm and spmm_t may run with: the CSR offsets whenever there are
 * rows, and the dense (rows, out) operand (Y, or dY) when it has an
 * element. */
static inline bool csr_op_runs(const ar_device *dev, int64_t rows,
                               const int64_t *row_ptr, int64_t out,
                               const float *dense) {
  if (!op_runs(dev))
    return false;
  AR_ASSERT(rows >= 0 && out >= 0 && (rows == 0 || row_ptr != NULL));
  AR_ASSERT(matrix_ok(dense, rows, out, out));
  return true;
}

void ar_device_spmm(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                    const int32_t *idx, const float *val, const float *w,
                    int64_t out, float *y) {
  if (csr_op_runs(dev, rows, row_ptr, out, y))
    dev->ops->spmm(dev, rows, row_ptr, idx, val, w, out, y);
}

void ar_device_spmm_t(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                      const int32_t *idx, const float *val, const float *dy,
                      int64_t out, float *dw) {
  if (csr_op_runs(dev, rows, row_ptr, out, dy))
    dev->ops->spmm_t(dev, rows, row_ptr, idx, val, dy, out, dw);
}

void ar_device_bias_act(ar_device *dev, int64_t rows, int64_t cols,
                        const float *bias, ar_act act, float *y) {
  if (!op_runs(dev))
    return;
  AR_ASSERT(rows >= 0 && cols >= 0 && act_ok(act));
  AR_ASSERT(matrix_ok(y, rows, cols, cols));
  dev->ops->bias_act(dev, rows, cols, bias, act, y);
}

void ar_device_act_grad(ar_device *dev, int64_t n, ar_act act, const float *y,
                        float *dy) {
  if (!op_runs(dev))
    return;
  AR_ASSERT(n >= 0 && act_ok(act) && (n == 0 || (y != NULL && dy != NULL)));
  dev->ops->act_grad(dev, n, act, y, dy);
}

void ar_device_col_sum(ar_device *dev, int64_t rows, int64_t cols,
                       const float *dy, bool accumulate, float *db) {
  if (!op_runs(dev))
    return;
  AR_ASSERT(rows >= 0 && cols >= 0 && (cols == 0 || db != NULL));
  AR_ASSERT(matrix_ok(dy, rows, cols, cols));
  dev->ops->col_sum(dev, rows, cols, dy, accumulate, db);
}

/* What both losses may run with: the logits, the label offsets and a
 * loss per row whenever there are rows. */
static inline bool loss_op_runs(const ar_device *dev, int64_t rows,
                                int64_t cols, const float *logits,
                                const int64_t *lab_ptr,
                                const float *loss_rows) {
  if (!op_runs(dev))
    return false;
  AR_ASSERT(rows >= 0 && cols >= 0 &&
            (rows == 0 || (lab_ptr != NULL && loss_rows != NULL)));
  AR_ASSERT(matrix_ok(logits, rows, cols, cols));
  return true;
}

void ar_device_softmax_xent(ar_device *dev, int64_t rows, int64_t cols,
                            const float *logits, const int64_t *lab_ptr,
                            const int32_t *lab, float scale, float *grad,
                            float *loss_rows) {
  if (loss_op_runs(dev, rows, cols, logits, lab_ptr, loss_rows))
    dev->ops->softmax_xent(dev, rows, cols, logits, lab_ptr, lab, scale, grad,
                           loss_rows);
}

void ar_device_sigmoid_bce(ar_device *dev, int64_t rows, int64_t cols,
                           const float *logits, const int64_t *lab_ptr,
                           const int32_t *lab, float scale, float *grad,
                           float *loss_rows) {
  if (loss_op_runs(dev, rows, cols, logits, lab_ptr, loss_rows))
    dev->ops->sigmoid_bce(dev, rows, cols, logits, lab_ptr, lab, scale, grad,
                          loss_rows);
}

void ar_device_topk(ar_device *dev, int64_t rows, int64_t cols,
                    const float *scores, int k, int32_t *idx) {
  if (!op_runs(dev))
    return;
  /* Indices are int32: a row wider than that has none for its tail. */
  AR_ASSERT(rows >= 0 && cols >= 0 && cols <= INT32_MAX);
  AR_ASSERT(k >= 0 && k <= cols);
  AR_ASSERT(matrix_ok(scores, rows, cols, cols) &&
            (rows == 0 || k == 0 || idx != NULL));
  dev->ops->topk(dev, rows, cols, scores, k, idx);
}

void ar_device_adam(ar_device *dev, int64_t n, float *p, const float *g,
                    float *m, float *v, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int64_t t) {
  if (!op_runs(dev))
    return;
  AR_ASSERT(n >= 0 && t >= 1);
  AR_ASSERT(n == 0 || (p != NULL && g != NULL && m != NULL && v != NULL));
  dev->ops->adam(dev, n, p, g, m, v, lr, beta1, beta2, eps, weight_decay, t);
}

void ar_device_sgd(ar_device *dev, int64_t n, float *p, const float *g,
                   float *vel, float lr, float momentum, float weight_decay) {
  if (!op_runs(dev))
    return;
  AR_ASSERT(n >= 0);
  AR_ASSERT(n == 0 ||
            (p != NULL && g != NULL && (momentum == 0.0f || vel != NULL)));
  dev->ops->sgd(dev, n, p, g, vel, lr, momentum, weight_decay);
}

void ar_device_bn_fold(ar_device *dev, int64_t out, int64_t per,
                       const float *w, const float *bias, const float *gamma,
                       const float *beta, const float *mean, const float *var,
                       float eps, float *wf, float *bf) {
  if (!op_runs(dev))
    return;
  AR_ASSERT(out >= 0 && per >= 0);
  AR_ASSERT(out == 0 || (gamma != NULL && beta != NULL && mean != NULL &&
                         var != NULL && bf != NULL));
  AR_ASSERT(matrix_ok(w, out, per, per) && matrix_ok(wf, out, per, per));
  dev->ops->bn_fold(dev, out, per, w, bias, gamma, beta, mean, var, eps, wf, bf);
}
