/*
 * Inside a device (private to runtime/device, in the manner of ggml's
 * ggml-backend-impl.h): the operation table a backend fills in, and the
 * base every backend's handle embeds.  Only device.c, ops.c and the
 * backends (host/, cuda/) include this; everyone else holds an opaque
 * ar_device and calls the checked wrappers of include/accelrt/device.h,
 * which is also where each op's contract is stated.
 *
 * What the wrappers guarantee a backend, so that the slots need not check:
 * dev is not NULL, sizes are not negative, every pointer an op will read
 * or write is not NULL (an empty operand may be), topk's k <= cols, and no
 * op reaches the table once the handle recorded a failure (dev->failed).
 *
 * Tests: tests/device/test_device_wrappers.c fills the optional slots'
 * defaults and the skipping after a failure in through this header.
 */
#ifndef ACCELRT_DEVICE_IMPL_H
#define ACCELRT_DEVICE_IMPL_H

#include "accelrt/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The operation table.  Slots marked (optional) may be NULL: the wrapper
 * then uses the generic implementation it names, or answers
 * AR_UNSUPPORTED.  The other slots are required (ar_device_open asserts
 * them).  Each op's contract is that of its wrapper, ar_device_<slot>. */
struct ar_nn_kernel; /* runtime/device/nn/nn_impl.h */

typedef struct ar_device_ops {
  const char *name; /* "host", "cuda" */

  void (*destroy)(ar_device *dev);

  /* ---- memory ---- */
  /* ar_device_alloc keeps the byte accounting around these two. */
  ar_status (*alloc)(ar_device *dev, size_t bytes, void **out);
  void (*free)(ar_device *dev, void *ptr);
  ar_status (*copy_in)(ar_device *dev, void *dst, const void *host_src,
                       size_t bytes);
  ar_status (*copy_out)(ar_device *dev, void *host_dst, const void *src,
                        size_t bytes);
  /* (optional) NULL: the ops are synchronous, sync answers AR_OK. */
  ar_status (*sync)(ar_device *dev);
  /* (optional) NULL: ar_device_fill copies a host buffer of `value` in with
   * copy_in, a few KiB at a time. */
  void (*fill)(ar_device *dev, float *x, int64_t n, float value);

  /* ---- dense math ---- */
  void (*gemm)(ar_device *dev, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

  /* ---- sparse input (CSR batch) ---- */
  void (*spmm)(ar_device *dev, int64_t rows, const int64_t *row_ptr,
               const int32_t *idx, const float *val, const float *w,
               int64_t out, float *y);
  void (*spmm_t)(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                 const int32_t *idx, const float *val, const float *dy,
                 int64_t out, float *dw);

  /* ---- elementwise and reductions ---- */
  void (*bias_act)(ar_device *dev, int64_t rows, int64_t cols,
                   const float *bias, ar_act act, float *y);
  void (*act_grad)(ar_device *dev, int64_t n, ar_act act, const float *y,
                   float *dy);
  void (*col_sum)(ar_device *dev, int64_t rows, int64_t cols, const float *dy,
                  bool accumulate, float *db);

  /* ---- losses and top-k ---- */
  void (*softmax_xent)(ar_device *dev, int64_t rows, int64_t cols,
                       const float *logits, const int64_t *lab_ptr,
                       const int32_t *lab, float scale, float *grad,
                       float *loss_rows);
  void (*sigmoid_bce)(ar_device *dev, int64_t rows, int64_t cols,
                      const float *logits, const int64_t *lab_ptr,
                      const int32_t *lab, float scale, float *grad,
                      float *loss_rows);
  void (*topk)(ar_device *dev, int64_t rows, int64_t cols, const float *scores,
               int k, int32_t *idx);

  /* ---- optimizers ---- */
  void (*adam)(ar_device *dev, int64_t n, float *p, const float *g, float *m,
               float *v, float lr, float beta1, float beta2, float eps,
               float weight_decay, int64_t t);
  void (*sgd)(ar_device *dev, int64_t n, float *p, const float *g, float *vel,
              float lr, float momentum, float weight_decay);

  /* ---- graph models' evaluation ---- */
  void (*bn_fold)(ar_device *dev, int64_t out, int64_t per, const float *w,
                  const float *bias, const float *gamma, const float *beta,
                  const float *mean, const float *var, float eps, float *wf,
                  float *bf);

  /* ---- (optional) memory query and lanes ---- */
  /* NULL: ar_device_mem_info answers AR_UNSUPPORTED. */
  ar_status (*mem_info)(ar_device *dev, ar_device_mem *out);
  /* A second handle on the same device for one lane (ar_device_open_lane).
   * NULL: ar_device_open_lane answers AR_UNSUPPORTED and
   * ar_device_has_lanes false. */
  ar_status (*open_lane)(ar_device *dev, ar_device **out);

  /* ---- (optional) device-to-device copy ---- */
  /* memmove semantics, on the handle's queue (ar_device_copy).  NULL:
   * ar_device_copy stages through host memory with copy_out and copy_in. */
  ar_status (*copy)(ar_device *dev, void *dst, const void *src, size_t bytes);

  /* ---- (optional) host staging memory ---- */
  /* ar_device_host_alloc.  NULL: ar_malloc and ar_free (host: its memory
   * is the host's, nothing to gain). */
  ar_status (*host_alloc)(ar_device *dev, size_t bytes, void **out);
  void (*host_free)(ar_device *dev, void *ptr);

  /* ---- (optional) graph ops (include/accelrt/nn.h) ---- */
  /* The backend's kernels, indexed by ar_nn_op (runtime/device/nn/
   * nn_impl.h); an entry without forward is an op it lacks.  NULL: no graph
   * ops on this device (ar_device_nn_prepare answers AR_UNSUPPORTED). */
  const struct ar_nn_kernel *(*nn_table)(ar_device *dev);
} ar_device_ops;

/* Base of every device; backends embed it as their first member.  The
 * backend sets ops, index and threads when it makes a handle; device.c
 * resets the accounting, failed and err when it hands the handle out. */
struct ar_device {
  const ar_device_ops *ops;
  int index;           /* cuda: device ordinal; host: 0 */
  int threads;         /* host: threads the ops use (the tenancy runner
                          changes it between iterations) */
  size_t bytes_in_use; /* maintained by ar_device_alloc / ar_device_free */
  size_t bytes_peak;
  /* The first failure of an op that ran asynchronously (cuda: a launch
   * error, a lost device), or AR_OK.  Set once by the backend, with the
   * reason in err; from then on every op wrapper skips the table and sync,
   * copy_in and copy_out return it (ar_device_status). */
  ar_status failed;
  ar_err err;          /* the device's last error message */
};

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_DEVICE_IMPL_H */
