/*
 * Host backend kernels (private to runtime/device).
 *
 * Each function implements one slot of ar_device_ops for the host device
 * (see include/accelrt/device.h for the contract of each op).  They run
 * synchronously on the calling thread plus dev->threads - 1 OpenMP workers,
 * allocate nothing, and never fail: the wrappers (runtime/device/ops.c)
 * checked the arguments they can see (device_impl.h lists them); a broken
 * invariant in the data, such as a label index >= cols, stops the process
 * through AR_ASSERT.
 *
 * Determinism: for a fixed input every op returns bit-identical results
 * whatever dev->threads is.  Work is split either by rows (each row is
 * computed by one thread, in one fixed order) or by column slices whose
 * bounds are multiples of AR__HOST_ALIGN_FLOATS (each element is summed in
 * the same order by whichever thread owns it).  Element-wise loops use only
 * IEEE operations that give the same result in a vector body and in a
 * scalar remainder, so where a loop is split does not matter either.
 *
 * Tests: tests/device/test_host_ops.c, test_host_losses.c, test_host_optim.c.
 */
#ifndef ACCELRT_HOST_KERNELS_H
#define ACCELRT_HOST_KERNELS_H

#include "device_impl.h"

/* Split points of parallel loops are multiples of this many floats (one
 * 64-byte cache line), so that threads never write to the same cache line
 * of a 64-byte aligned buffer. */
#define AR__HOST_ALIGN_FLOATS 16

void ar__host_fill(ar_device *dev, float *x, int64_t n, float value);

/* ar__host_gemm with a thread count instead of a handle (the nn kernels,
 * runtime/device/host/nn_*.c, get theirs in ar_nn_args). */
void ar__host_sgemm(int threads, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc);
void ar__host_gemm(ar_device *dev, bool trans_a, bool trans_b, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc);

void ar__host_spmm(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                   const int32_t *idx, const float *val, const float *w,
                   int64_t out, float *y);
void ar__host_spmm_t(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                     const int32_t *idx, const float *val, const float *dy,
                     int64_t out, float *dw);

void ar__host_bias_act(ar_device *dev, int64_t rows, int64_t cols,
                       const float *bias, ar_act act, float *y);
void ar__host_act_grad(ar_device *dev, int64_t n, ar_act act, const float *y,
                       float *dy);
void ar__host_col_sum(ar_device *dev, int64_t rows, int64_t cols,
                      const float *dy, bool accumulate, float *db);
void ar__host_bn_fold(ar_device *dev, int64_t out, int64_t per, const float *w,
                      const float *bias, const float *gamma, const float *beta,
                      const float *mean, const float *var, float eps, float *wf,
                      float *bf);

/* sum_j exp(x[j] - m) over one row of n values, m >= every x[j] (the row's
 * max), each term also stored in e[j] unless e is NULL (e may alias x):
 * the losses' vectorised exponential (relative error below 1e-7) and
 * chunked sum (a few 1e-7 relative over any n), for the nn ops' rows. */
double ar__host_row_sum_exp(const float *x, int64_t n, float m, float *e);

void ar__host_softmax_xent(ar_device *dev, int64_t rows, int64_t cols,
                           const float *logits, const int64_t *lab_ptr,
                           const int32_t *lab, float scale, float *grad,
                           float *loss_rows);
void ar__host_sigmoid_bce(ar_device *dev, int64_t rows, int64_t cols,
                          const float *logits, const int64_t *lab_ptr,
                          const int32_t *lab, float scale, float *grad,
                          float *loss_rows);
void ar__host_topk(ar_device *dev, int64_t rows, int64_t cols,
                   const float *scores, int k, int32_t *idx);

void ar__host_adam(ar_device *dev, int64_t n, float *p, const float *g,
                   float *m, float *v, float lr, float beta1, float beta2,
                   float eps, float weight_decay, int64_t t);
void ar__host_sgd(ar_device *dev, int64_t n, float *p, const float *g,
                  float *vel, float lr, float momentum, float weight_decay);

#endif /* ACCELRT_HOST_KERNELS_H */
