/*
 * accelrt device: one opaque handle with a table of operations, in the
 * manner of ggml's backends.  The engine (runtime/engine) only ever calls
 * through this table, so a job runs unchanged on every backend:
 *
 *   host  always built: OpenMP threads pinned with hwloc, CBLAS (OpenBLAS)
 *         for GEMM, vectorised loops for the rest (runtime/device/host/);
 *   cuda  built with ACCELRT_CUDA (runtime/device/cuda/): cuBLAS for GEMM,
 *         own kernels for the rest; one cudaMalloc arena per device at
 *         open (runtime.memory), from which every alloc is carved; one
 *         stream and cuBLAS handle per handle, and ar_device_open_lane for
 *         one more handle per lane over the same arena.
 *
 * Conventions for every math op:
 *   - matrices are row-major; shapes are given in the comments as
 *     (rows, cols);
 *   - pointers are device pointers from ar_device_alloc;
 *   - ops are enqueued on the device's queue and may run asynchronously:
 *     ar_device_sync waits for all of them;
 *   - ops do not fail once their arguments are valid (the wrappers check),
 *     so they return void; memory and copy calls return ar_status.  A
 *     backend whose ops run asynchronously (cuda) can still see a failure
 *     (a launch error, a lost device): it records the first one, with the
 *     call and the runtime's text, in dev->err, skips every later op, and
 *     returns that status from the next sync, copy_in or copy_out.
 *
 * Thread-safety: a device handle is used by one thread at a time; the
 * backend parallelises inside each op.
 *
 * Tests: tests/device/test_host_ops.c, test_host_losses.c and
 * test_host_optim.c run every op against a naive double-precision
 * reference; test_device_open.c covers opening by name and the memory
 * accounting; test_cuda_probe.c the CUDA probe; test_cuda_arena.c the
 * carving of the device arena; test_cuda_parity.c runs every op on the
 * CUDA backend against the host backend and trains a small network on
 * both (label cuda, skipped without a GPU); test_device_copy.c the
 * device-to-device copy over overlapping ranges.
 */
#ifndef ACCELRT_DEVICE_H
#define ACCELRT_DEVICE_H

#include "accelrt/base.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ar_device ar_device;

/* Activations the device applies (bias_act, act_grad); the job file's
 * `activation` names them (spec.h). */
typedef enum ar_act {
  AR_ACT_NONE = 0, /* identity */
  AR_ACT_RELU,
  AR_ACT_SIGMOID,
  AR_ACT_SOFTMAX /* output layer only: softmax cross-entropy loss */
} ar_act;

typedef struct ar_device_opts {
  int threads; /* host: worker threads; 0 = one per core */
  bool pin;    /* host: bind threads to cores with hwloc */
  /* cuda: size of the arena reserved at open (runtime.memory): bytes when
   * memory_bytes > 0, else memory_fraction (0 < f <= 1) of the device's
   * free memory, else AR_DEVICE_DEFAULT_FRACTION of it.  The host backend
   * reserves nothing (its lanes keep the budget themselves). */
  uint64_t memory_bytes;
  double memory_fraction;
} ar_device_opts;
#define AR_DEVICE_OPTS_INIT {0, true, 0, 0.0}
#define AR_DEVICE_DEFAULT_FRACTION 0.9

/* Memory of a device (ar_device_mem_info). */
typedef struct ar_device_mem {
  uint64_t total;    /* physical memory of the device (host: RAM) */
  uint64_t free;     /* free now, outside any arena (host: what this
                        process can use, ar_host_memory_get's limit) */
  uint64_t capacity; /* the arena every alloc carves from; 0: no arena */
  uint64_t available; /* of capacity, not carved yet (0 without arena) */
} ar_device_mem;

/* The operation table a backend fills in.  Slots marked (optional) may be
 * NULL; the public wrappers then use a generic implementation or return
 * AR_UNSUPPORTED. */
typedef struct ar_device_ops {
  const char *name; /* "host", "cuda" */

  void (*destroy)(ar_device *dev);

  /* ---- memory ---- */
  ar_status (*alloc)(ar_device *dev, size_t bytes, void **out);
  void (*free)(ar_device *dev, void *ptr);
  ar_status (*copy_in)(ar_device *dev, void *dst, const void *host_src, size_t bytes);
  ar_status (*copy_out)(ar_device *dev, void *host_dst, const void *src, size_t bytes);
  ar_status (*sync)(ar_device *dev);
  void (*fill)(ar_device *dev, float *x, int64_t n, float value);

  /* ---- dense math ---- */
  /* C (m,n) = alpha * op(A) op(B) + beta * C; op(A) is (m,k), op(B) (k,n);
   * lda/ldb/ldc are the row strides of A, B, C as stored. */
  void (*gemm)(ar_device *dev, bool trans_a, bool trans_b, int64_t m, int64_t n,
               int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

  /* ---- sparse input (CSR batch) ----
   * A batch of `rows` sparse rows: row r has entries
   * idx[row_ptr[r] .. row_ptr[r+1]-1] with values val[...].
   * W is (in, out), one contiguous row of `out` floats per input feature.
   * spmm:     Y (rows, out) = X W      (Y overwritten)
   * spmm_t:   dW (in, out) += X^T dY   (only rows of dW named in idx change) */
  void (*spmm)(ar_device *dev, int64_t rows, const int64_t *row_ptr,
               const int32_t *idx, const float *val, const float *w,
               int64_t out, float *y);
  void (*spmm_t)(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                 const int32_t *idx, const float *val, const float *dy,
                 int64_t out, float *dw);

  /* ---- elementwise and reductions ---- */
  /* Y (rows, cols) = act(Y + bias) in place; bias (cols) may be NULL.
   * act is NONE, RELU or SIGMOID (SOFTMAX is handled by the loss ops). */
  void (*bias_act)(ar_device *dev, int64_t rows, int64_t cols,
                   const float *bias, ar_act act, float *y);
  /* dY *= act'(.) expressed through the activated output Y (n values). */
  void (*act_grad)(ar_device *dev, int64_t n, ar_act act, const float *y,
                   float *dy);
  /* db (cols) = (beta ? db : 0) + sum over rows of dY (rows, cols). */
  void (*col_sum)(ar_device *dev, int64_t rows, int64_t cols, const float *dy,
                  bool accumulate, float *db);

  /* ---- losses ----
   * Labels of row r: lab[lab_ptr[r] .. lab_ptr[r+1]-1] (no duplicates).
   * softmax_xent: multi-label softmax cross-entropy, the target mass 1/|L_r|
   *   on each true label of row r; a row without labels contributes no loss
   *   and no gradient.
   * sigmoid_bce: binary cross-entropy of sigmoid(logit) against 0/1 targets,
   *   summed over the cols of the row.
   * Both: loss_rows (rows) receives each row's loss; if grad is not NULL it
   * receives scale * dLoss/dLogit (rows, cols); grad may alias logits. */
  void (*softmax_xent)(ar_device *dev, int64_t rows, int64_t cols,
                       const float *logits, const int64_t *lab_ptr,
                       const int32_t *lab, float scale, float *grad,
                       float *loss_rows);
  void (*sigmoid_bce)(ar_device *dev, int64_t rows, int64_t cols,
                      const float *logits, const int64_t *lab_ptr,
                      const int32_t *lab, float scale, float *grad,
                      float *loss_rows);
  /* For each row of scores (rows, cols), the indices of the k largest
   * values in descending order into idx (rows, k); ties broken by the
   * smaller index.  k <= cols. */
  void (*topk)(ar_device *dev, int64_t rows, int64_t cols, const float *scores,
               int k, int32_t *idx);

  /* ---- optimizers (n parameters, flat) ----
   * adam: Adam (Kingma & Ba) with bias correction for step t >= 1, decoupled
   *   weight decay off (L2 added to the gradient when weight_decay > 0);
   * sgd: v = momentum * v + g; p -= lr * v (v may be NULL when momentum 0).
   * Both leave g unchanged. */
  void (*adam)(ar_device *dev, int64_t n, float *p, const float *g, float *m,
               float *v, float lr, float beta1, float beta2, float eps,
               float weight_decay, int64_t t);
  void (*sgd)(ar_device *dev, int64_t n, float *p, const float *g, float *vel,
              float lr, float momentum, float weight_decay);

  /* ---- (optional) memory query and lanes ---- */
  /* Fills *out (see ar_device_mem).  NULL: ar_device_mem_info answers
   * AR_UNSUPPORTED. */
  ar_status (*mem_info)(ar_device *dev, ar_device_mem *out);
  /* A second handle on the same device for one lane: its own queue (cuda:
   * a stream and a cuBLAS handle bound to it), sharing this device's arena
   * and memory, so one lane's ops overlap another's.  The handle belongs
   * to the caller, closed with ar_device_close, in any order with its
   * parent (the arena goes with the last handle).  NULL:
   * ar_device_open_lane answers AR_UNSUPPORTED. */
  ar_status (*open_lane)(ar_device *dev, ar_device **out);

  /* ---- (optional) device-to-device copy ---- */
  /* Copies `bytes` from src to dst, both device memory of this device (any
   * of its handles), with memmove semantics: the ranges may overlap and dst
   * receives the bytes src held before the call (the lanes' defragmentation
   * slides persistent blocks down over themselves).  Enqueued on the
   * handle's queue after its earlier ops; ar_device_sync waits for it.
   * NULL: ar_device_copy stages through host memory with copy_out and
   * copy_in. */
  ar_status (*copy)(ar_device *dev, void *dst, const void *src, size_t bytes);

  /* ---- (optional) host staging memory ---- */
  /* Host memory that copy_in and copy_out move fastest (cuda: page-locked,
   * cudaMallocHost), for buffers that are copied every iteration (a
   * distributed worker's parameters and gradients, which MPI moves through
   * host memory).  Not carved from the arena, not counted in bytes_in_use.
   * NULL: ar_device_host_alloc uses ar_malloc (host: its memory is the
   * host's, nothing to gain). */
  ar_status (*host_alloc)(ar_device *dev, size_t bytes, void **out);
  void (*host_free)(ar_device *dev, void *ptr);
} ar_device_ops;

/* Base of every device; backends embed it as their first member. */
struct ar_device {
  const ar_device_ops *ops;
  int index;           /* cuda: device ordinal; host: 0 */
  int threads;         /* host: threads the ops use */
  size_t bytes_in_use; /* maintained by ar_device_alloc / ar_device_free */
  size_t bytes_peak;
  ar_err err;          /* the device's last error message */
};

/* Opens a device by name: "host", "cuda:N", or "auto" (the first CUDA
 * device when the backend is built and a device is present, else host with
 * a one-line notice).  AR_NODEVICE with the reason in err when a named
 * device is not available; AR_INVALID for an unknown name. */
ar_status ar_device_open(const char *name, const ar_device_opts *opts,
                         ar_device **out, ar_err *err);
void ar_device_close(ar_device *dev); /* NULL is a no-op */

/* Host backend constructor (runtime/device/host). */
ar_status ar_host_device_create(const ar_device_opts *opts, ar_device **out,
                                ar_err *err);

/* Memory wrappers that keep the device's byte accounting. */
ar_status ar_device_alloc(ar_device *dev, size_t bytes, void **out);
void ar_device_free(ar_device *dev, void *ptr, size_t bytes);

/* The device's memory (total, free, arena capacity and what is left of
 * it), for runtime.memory and the lanes' capacity.  AR_UNSUPPORTED when the
 * backend cannot tell; AR_DEVICE with the reason in dev->err. */
ar_status ar_device_mem_info(ar_device *dev, ar_device_mem *out);

/* Opens a lane handle on dev (see ar_device_ops.open_lane): same device,
 * same arena, its own queue.  Ops on two handles are ordered only by
 * ar_device_sync on each; memory freed through one handle waits for that
 * handle's queue, so another lane may reuse it at once.  AR_UNSUPPORTED
 * for a backend without queues (host); the reason in dev->err. */
ar_status ar_device_open_lane(ar_device *dev, ar_device **out);

/* Copies `bytes` of device memory from src to dst on dev's queue; the
 * ranges may overlap (memmove semantics).  Uses the backend's copy op
 * (host: memmove; cuda: cudaMemcpyAsync device to device, see
 * runtime/device/cuda/cuda_device.cu for overlapping ranges), or stages
 * through a host buffer of at most 64 MiB when the backend has none.
 * AR_OK; AR_INVALID (NULL pointer with bytes > 0), AR_NOMEM (no host
 * staging buffer), or the device's status, with the reason in dev->err.
 * Thread-safety: as every op of the handle. */
ar_status ar_device_copy(ar_device *dev, void *dst, const void *src,
                         size_t bytes);

/* Host memory for staging copies to and from dev (see
 * ar_device_ops.host_alloc): page-locked on CUDA, plain ar_malloc on the
 * host backend.  The buffer belongs to the caller, freed with
 * ar_device_host_free on the same handle (or one of its lanes) before the
 * device closes.  AR_OK; AR_INVALID (out NULL); AR_NOMEM or the device's
 * status with the reason in dev->err.  Thread-safety: as every op of the
 * handle. */
ar_status ar_device_host_alloc(ar_device *dev, size_t bytes, void **out);
void ar_device_host_free(ar_device *dev, void *ptr); /* ptr NULL: no-op */

/* The arena size for `opts` on a device with `free_bytes` free: bytes
 * when given, else the fraction (or the default one) of free_bytes.
 * AR_RANGE when bytes exceed free_bytes or the fraction is not in (0, 1],
 * with what to set in err. */
ar_status ar_device_arena_size(const ar_device_opts *opts, uint64_t free_bytes,
                               const char *device_name, uint64_t *out,
                               ar_err *err);

/* Describes the devices this build can see, one line each, into `to`
 * (used by `accelrt info`): host always; CUDA devices when built and
 * present, or the reason they are not. */
void ar_device_describe_all(FILE *to);

/* The host memory this process can use (runtime/device/host/host_memory.c):
 * MemAvailable from /proc/meminfo and the memory limit of the process's
 * cgroup (v2 memory.max, v1 memory.limit_in_bytes; the lowest of its
 * folder and every ancestor), whichever is lower. */
typedef struct ar_host_memory {
  uint64_t limit;          /* the lower of the two; 0 when neither is known */
  uint64_t mem_available;  /* MemAvailable; 0 when unreadable */
  uint64_t cgroup_limit;   /* UINT64_MAX: no limit ("max") or no cgroup file */
  char cgroup_file[1024];  /* the file the cgroup limit came from, or "" */
  char source[1152];       /* where `limit` came from, for messages */
} ar_host_memory;
/* Fills *out.  AR_OK; AR_UNSUPPORTED when /proc/meminfo cannot be read
 * (the cgroup limit may still be there).  Thread-safe. */
ar_status ar_host_memory_get(ar_host_memory *out);
/* The same with every path below `root` (a folder holding proc/ and
 * sys/fs/cgroup/), so tests can replay captured machines. */
ar_status ar_host_memory_get_at(const char *root, ar_host_memory *out);

/* CUDA probe, always linkable: returns the number of CUDA devices, or 0
 * with the reason in `why` (not built, no driver, no device). */
int ar_cuda_device_count(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_DEVICE_H */
