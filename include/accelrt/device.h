/*
 * accelrt device: one opaque handle and the checked wrappers every caller
 * goes through, in the manner of ggml's backends (ggml-backend.h): the
 * operation table a backend fills in lives in runtime/device/device_impl.h,
 * which nothing outside runtime/device includes, so a job runs unchanged
 * on every backend:
 *
 *   host  always built: OpenMP threads pinned with hwloc, CBLAS (OpenBLAS)
 *         for GEMM, vectorised loops for the rest (runtime/device/host/);
 *   cuda  built with ACCELRT_CUDA (runtime/device/cuda/): cuBLAS for GEMM,
 *         own kernels for the rest; one cudaMalloc arena per device at
 *         open (runtime.memory), from which every alloc is carved; one
 *         stream and cuBLAS handle per handle, and ar_device_open_lane for
 *         one more handle per lane over the same arena.
 *
 * Conventions for every math op (ar_device_fill .. ar_device_bn_fold):
 *   - matrices are row-major; shapes are given in the comments as
 *     (rows, cols);
 *   - pointers are device pointers from ar_device_alloc, borrowed for the
 *     call (on the host backend they are host pointers);
 *   - ops are enqueued on the device's queue and may run asynchronously:
 *     ar_device_sync waits for all of them;
 *   - ops return void: their arguments are the engine's invariants, not
 *     user input, and the wrappers check them with AR_ASSERT (sizes not
 *     negative, pointers not NULL where the op reads or writes any element,
 *     k <= cols for top-k), so a wrong shape stops the process with
 *     file:line rather than corrupting memory.  Memory and copy calls
 *     return ar_status.
 *
 * Errors: a call that returns ar_status leaves the reason in the handle's
 * message (ar_device_errmsg, SQLite style), except ar_device_open, which
 * has no handle yet and writes into the caller's err.  A backend whose ops
 * run asynchronously (cuda) can still see an op fail (a launch error, a
 * lost device): it records the first failure, with the call and the
 * runtime's text, in the handle (ar_device_status); from then on every op
 * wrapper returns without calling the backend, and ar_device_sync,
 * ar_device_copy_in, ar_device_copy_out and ar_device_copy return that
 * status.  The handle is then only good for reading the message, freeing
 * its memory and closing.
 *
 * Thread-safety: a device handle, its accessors included, is used by one
 * thread at a time; the backend parallelises inside each op.  Different
 * handles (lanes) may be used from different threads at once.
 *
 * Tests: tests/device/test_host_ops.c, test_host_losses.c and
 * test_host_optim.c run every op against a naive double-precision
 * reference; test_device_open.c covers opening by name and the memory
 * accounting; test_device_wrappers.c the wrappers' argument checks, the
 * optional slots' defaults and the skipping after a recorded failure;
 * test_cuda_probe.c the CUDA probe; test_cuda_arena.c the carving of the
 * device arena; test_cuda_parity.c runs every op on the CUDA backend
 * against the host backend and trains a small network on both (label
 * cuda, skipped without a GPU); test_device_copy.c the device-to-device
 * copy over overlapping ranges.
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
  int threads; /* host: worker threads; 0 = the default of ar_host_cpus
                  (capped at the CPUs this process may use either way) */
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

/* ---- the handle ---------------------------------------------------------- */

/* Opens a device by name: "host", "cuda:N", or "auto" (the first CUDA
 * device when the backend is built and a device is present, else host with
 * a one-line notice).  The handle belongs to the caller, closed with
 * ar_device_close.  AR_OK; AR_NODEVICE with the reason in err when a named
 * device is not available; AR_INVALID for an unknown name or a NULL
 * argument; AR_NOMEM.  *out is left untouched on failure.  Thread-safe. */
ar_status ar_device_open(const char *name, const ar_device_opts *opts,
                         ar_device **out, ar_err *err);
/* Closes a handle (a device or a lane handle, in any order: the memory
 * they share goes with the last one).  NULL is a no-op. */
void ar_device_close(ar_device *dev);

/* Host backend constructor (runtime/device/host); ar_device_open("host")
 * is the usual way in.  Statuses as ar_device_open. */
ar_status ar_host_device_create(const ar_device_opts *opts, ar_device **out,
                                ar_err *err);

/* What the handle is: its backend's name ("host", "cuda"; static
 * storage), its index among the backend's devices (cuda: the ordinal;
 * host: 0), and the threads its ops use (host; cuda: 1). */
const char *ar_device_name(const ar_device *dev);
int ar_device_index(const ar_device *dev);
int ar_device_threads(const ar_device *dev);
/* Sets the threads the host backend's ops use from the next op on
 * (threads >= 1, AR_ASSERT).  For the tenancy runner, which gives each
 * iteration its share of the cores: call it between iterations, never
 * while an op of the handle runs.  Other backends ignore it. */
void ar_device_set_threads(ar_device *dev, int threads);
/* Whether the backend has queues to give each lane a handle of its own
 * (ar_device_open_lane answers AR_OK rather than AR_UNSUPPORTED). */
bool ar_device_has_lanes(const ar_device *dev);

/* The handle's last error message ("" when none; borrowed, valid until
 * the next call on the handle) and the status it was recorded with
 * (AR_OK when none), as SQLite's errmsg and errcode.  A later success
 * does not clear them. */
const char *ar_device_errmsg(const ar_device *dev);
ar_status ar_device_errcode(const ar_device *dev);
/* The failure that made the handle unusable (see "Errors" above), or
 * AR_OK.  Only backends whose ops run asynchronously record one. */
ar_status ar_device_status(const ar_device *dev);

/* ---- memory -------------------------------------------------------------- */

/* Carves `bytes` (0 is fine) of device memory into *out, and counts them
 * in ar_device_bytes_in_use.  The block belongs to the caller, freed with
 * ar_device_free with the same size.  AR_OK; AR_INVALID (dev or out
 * NULL); AR_NOMEM with the bytes in use in the message; *out is left
 * untouched on failure. */
ar_status ar_device_alloc(ar_device *dev, size_t bytes, void **out);
/* Frees a block of ar_device_alloc; bytes must be what was allocated
 * (AR_ASSERT against the accounting).  ptr NULL: no-op. */
void ar_device_free(ar_device *dev, void *ptr, size_t bytes);
/* Bytes allocated through this handle and not freed, and the most there
 * ever were (lane handles count their own). */
size_t ar_device_bytes_in_use(const ar_device *dev);
size_t ar_device_bytes_peak(const ar_device *dev);

/* The device's memory (total, free, arena capacity and what is left of
 * it), for runtime.memory and the lanes' capacity.  AR_OK;
 * AR_UNSUPPORTED when the backend cannot tell; AR_INVALID (out NULL);
 * AR_DEVICE; the reason in the handle's message. */
ar_status ar_device_mem_info(ar_device *dev, ar_device_mem *out);

/* Copies `bytes` from host memory into device memory (copy_in), or out of
 * it (copy_out).  Synchronous with respect to the host buffer: it may be
 * reused or read as soon as the call returns, so the copy also waits for
 * the ops enqueued before it.  AR_OK; AR_INVALID (dev NULL, or a NULL
 * pointer with bytes > 0); the handle's recorded failure
 * (ar_device_status); AR_DEVICE; the reason in the handle's message. */
ar_status ar_device_copy_in(ar_device *dev, void *dst, const void *host_src,
                            size_t bytes);
ar_status ar_device_copy_out(ar_device *dev, void *host_dst, const void *src,
                             size_t bytes);

/* Waits for every op enqueued on this handle (not on its lanes).  AR_OK;
 * AR_INVALID (dev NULL); the handle's recorded failure. */
ar_status ar_device_sync(ar_device *dev);

/* Copies `bytes` of device memory from src to dst on dev's queue; the
 * ranges may overlap (memmove semantics).  Uses the backend's copy op
 * (host: memmove; cuda: cudaMemcpyAsync device to device, see
 * runtime/device/cuda/cuda_device.cu for overlapping ranges), or stages
 * through a host buffer of at most 64 MiB when the backend has none.
 * AR_OK; AR_INVALID (NULL pointer with bytes > 0), AR_NOMEM (no host
 * staging buffer), or the device's status, with the reason in the handle's
 * message. */
ar_status ar_device_copy(ar_device *dev, void *dst, const void *src,
                         size_t bytes);

/* Host memory for staging copies to and from dev: page-locked on CUDA,
 * plain ar_malloc on the host backend.  The buffer belongs to the caller,
 * freed with ar_device_host_free on the same handle (or one of its lanes)
 * before the device closes.  AR_OK; AR_INVALID (out NULL); AR_NOMEM or
 * the device's status with the reason in the handle's message. */
ar_status ar_device_host_alloc(ar_device *dev, size_t bytes, void **out);
void ar_device_host_free(ar_device *dev, void *ptr); /* ptr NULL: no-op */

/* ---- lanes --------------------------------------------------------------- */

/* Opens a lane handle on dev: same device, same arena, its own queue
 * (cuda: a stream and a cuBLAS handle bound to it), so one lane's ops
 * overlap another's.  The handle belongs to the caller, closed with
 * ar_device_close, in any order with its parent.  Ops on two handles are
 * ordered only by ar_device_sync on each; memory freed through one handle
 * waits for that handle's queue, so another lane may reuse it at once.
 * AR_OK; AR_INVALID (out NULL); AR_UNSUPPORTED for a backend without
 * queues (host, ar_device_has_lanes false); the device's statuses; the
 * reason in dev's message. */
ar_status ar_device_open_lane(ar_device *dev, ar_device **out);

/* ---- math ops (conventions at the top of this file) ---------------------- */

/* x (n) = value. */
void ar_device_fill(ar_device *dev, float *x, int64_t n, float value);

/* C (m,n) = alpha * op(A) op(B) + beta * C; op(A) is (m,k), op(B) (k,n);
 * lda/ldb/ldc are the row strides of A, B, C as stored (at least their
 * stored column counts).  k = 0 scales C by beta. */
void ar_device_gemm(ar_device *dev, bool trans_a, bool trans_b, int64_t m,
                    int64_t n, int64_t k, float alpha, const float *a,
                    int64_t lda, const float *b, int64_t ldb, float beta,
                    float *c, int64_t ldc);

/* Sparse input, a CSR batch of `rows` sparse rows: row r has entries
 * idx[row_ptr[r] .. row_ptr[r+1]-1] with values val[...].
 * W is (in, out), one contiguous row of `out` floats per input feature.
 * spmm:     Y (rows, out) = X W      (Y overwritten)
 * spmm_t:   dW (in, out) += X^T dY   (only rows of dW named in idx change) */
void ar_device_spmm(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                    const int32_t *idx, const float *val, const float *w,
                    int64_t out, float *y);
void ar_device_spmm_t(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                      const int32_t *idx, const float *val, const float *dy,
                      int64_t out, float *dw);

/* Y (rows, cols) = act(Y + bias) in place; bias (cols) may be NULL.
 * SOFTMAX leaves the logits raw (the loss ops apply it). */
void ar_device_bias_act(ar_device *dev, int64_t rows, int64_t cols,
                        const float *bias, ar_act act, float *y);
/* dY (n) *= act'(.) expressed through the activated output Y (n); NONE
 * and SOFTMAX leave dY as it is. */
void ar_device_act_grad(ar_device *dev, int64_t n, ar_act act, const float *y,
                        float *dy);
/* db (cols) = (accumulate ? db : 0) + sum over rows of dY (rows, cols). */
void ar_device_col_sum(ar_device *dev, int64_t rows, int64_t cols,
                       const float *dy, bool accumulate, float *db);

/* Losses.  Labels of row r: lab[lab_ptr[r] .. lab_ptr[r+1]-1] (no
 * duplicates, each < cols).
 * softmax_xent: multi-label softmax cross-entropy, the target mass 1/|L_r|
 *   on each true label of row r; a row without labels contributes no loss
 *   and no gradient.
 * sigmoid_bce: binary cross-entropy of sigmoid(logit) against 0/1 targets,
 *   summed over the cols of the row.
 * Both: loss_rows (rows) receives each row's loss; if grad is not NULL it
 * receives scale * dLoss/dLogit (rows, cols); grad may alias logits. */
void ar_device_softmax_xent(ar_device *dev, int64_t rows, int64_t cols,
                            const float *logits, const int64_t *lab_ptr,
                            const int32_t *lab, float scale, float *grad,
                            float *loss_rows);
void ar_device_sigmoid_bce(ar_device *dev, int64_t rows, int64_t cols,
                           const float *logits, const int64_t *lab_ptr,
                           const int32_t *lab, float scale, float *grad,
                           float *loss_rows);

/* For each row of scores (rows, cols), the indices of the k largest
 * values in descending order into idx (rows, k); ties broken by the
 * smaller index.  0 <= k <= cols. */
void ar_device_topk(ar_device *dev, int64_t rows, int64_t cols,
                    const float *scores, int k, int32_t *idx);

/* Optimizers over n parameters, flat.
 * adam: Adam (Kingma & Ba) with bias correction for step t >= 1, decoupled
 *   weight decay off (L2 added to the gradient when weight_decay > 0);
 * sgd: v = momentum * v + g; p -= lr * v (vel may be NULL when momentum
 *   is 0).
 * Both leave g unchanged. */
void ar_device_adam(ar_device *dev, int64_t n, float *p, const float *g,
                    float *m, float *v, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int64_t t);
void ar_device_sgd(ar_device *dev, int64_t n, float *p, const float *g,
                   float *vel, float lr, float momentum, float weight_decay);

/* A convolution folded with the batch normalisation after it (graph
 * models' evaluation, runtime/engine/net_fuse.c): per output channel o of
 * w (out, per) and bias (out, or NULL: zeros), with the batch norm's
 * gamma, beta, running mean and var (out each),
 *   s = gamma[o] / sqrt(var[o] + eps) (in double, rounded to float),
 *   wf[o, :] = w[o, :] s,  bf[o] = (bias[o] - mean[o]) s + beta[o]. */
void ar_device_bn_fold(ar_device *dev, int64_t out, int64_t per,
                       const float *w, const float *bias, const float *gamma,
                       const float *beta, const float *mean, const float *var,
                       float eps, float *wf, float *bf);

/* ---- devices of this machine --------------------------------------------- */

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

/* The CPUs this process may use (runtime/device/host/host_cpus.c) and the
 * threads a job takes when it asks for none: OMP_NUM_THREADS (its first
 * number), else SLURM_CPUS_PER_TASK, else one per physical core with a CPU
 * in the affinity mask (taskset, a Slurm allotment), bounded by the
 * cgroup's cpu.max quota; never more than the CPUs in the mask.  The host
 * device pins its threads only inside that mask. */
typedef struct ar_host_cpus {
  int threads;        /* the default thread count, >= 1 */
  int cpus;           /* CPUs (processing units) in the affinity mask */
  int cores;          /* physical cores with at least one of those CPUs */
  double cgroup_cpus; /* cpu.max quota / period; 0: no limit */
  char list[256];     /* the mask, "0-3,8" */
  char source[192];   /* why `threads`, for accelrt info and notices */
  bool per_process;   /* `threads` came from OMP_NUM_THREADS or
                         SLURM_CPUS_PER_TASK, which count for this process
                         alone (one MPI rank), not for every process that
                         shares the mask */
} ar_host_cpus;
/* Fills *out.  The mask is the one the process had at the first call
 * (the host device makes that call before it binds its threads, so a
 * thread's later binding is never taken for the process's mask).  AR_OK;
 * AR_UNSUPPORTED when the mask cannot be read (then one thread).  _at
 * reads the cgroup files under `root` (tests).  Thread-safe. */
ar_status ar_host_cpus_get(ar_host_cpus *out);
ar_status ar_host_cpus_get_at(const char *root, ar_host_cpus *out);
/* A thread count asked for: the default when asked < 1, else asked capped
 * at the CPUs in the mask. */
int ar_host_cpus_cap(const ar_host_cpus *c, int asked);

/* CUDA probe, always linkable: returns the number of CUDA devices, or 0
 * with the reason in `why` (not built, no driver, no device). */
int ar_cuda_device_count(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_DEVICE_H */
