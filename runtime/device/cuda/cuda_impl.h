/*
 * Inside the CUDA backend (private to runtime/device/cuda; CUDA C++ only):
 * the device handle, the error breadcrumbs, and the op launchers that
 * cuda_kernels.cu defines for cuda_device.cu's table.
 *
 * Errors (STYLE.md, "Errors"): every CUDA runtime and cuBLAS call goes
 * through AR_CUDA_CHECK / AR_CUBLAS_CHECK (returning calls) or
 * ar__cuda_note / ar__cublas_note (void ops), which turn the code into an
 * ar_status plus "cuda:N: CALL failed: TEXT (NAME)".  The ops of the table
 * return void and run asynchronously, so a failure there is recorded once
 * in the handle (base.failed and base.err, see device_impl.h), the
 * wrappers skip every later op, and the next sync, copy_in or copy_out
 * returns it.  Nothing here aborts.
 */
#ifndef ACCELRT_CUDA_IMPL_H
#define ACCELRT_CUDA_IMPL_H

#include "cuda/cuda_arena.h"
#include "cuda/cuda_backend.h"
#include "device_impl.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

typedef struct ar__cuda_device {
  ar_device base;        /* first member: a CUDA device is an ar_device */
  int ordinal;           /* CUDA device number */
  cudaStream_t stream;   /* owned: the queue every op of this handle uses */
  cublasHandle_t blas;   /* owned: bound to `stream`, workspace from arena */
  void *blas_ws;         /* (blas_ws_bytes) cuBLAS workspace, in the arena */
  size_t blas_ws_bytes;
  ar__arena *arena;      /* shared with the lane handles; refcounted */
  void *arena_base;      /* the one cudaMalloc; freed with the last owner */
  void *dnn;             /* owned: cudnnHandle_t bound to `stream`, or NULL
                            (a build or machine without cuDNN: the graph
                            ops' own kernels run instead) */
  int sm_count;          /* multiprocessors, for grid sizes */
  char name[256];        /* from cudaGetDeviceProperties */
} ar__cuda_device;

static inline ar__cuda_device *ar__cuda(ar_device *dev) {
  return (ar__cuda_device *)dev;
}

/* cuBLAS, loaded with dlopen when the first CUDA device opens (not linked:
 * libcublasLt alone adds over 200 MB of resident memory to every process
 * that loads it, host-only runs included).  Filled by ar__cublas_load. */
typedef struct ar__cublas_api {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasSgemm_v2_64) sgemm_64;
} ar__cublas_api;
extern ar__cublas_api ar__blas;

#ifdef ACCELRT_HAVE_CUDNN
#include <cudnn.h>
/* cuDNN, loaded with dlopen like cuBLAS when the first CUDA device opens
 * (ACCELRT_CUDNN): the legacy convolution API of cuDNN 9 (deprecated
 * there, still shipped; CUDNN_WARN_DEPRECATED is not defined, so it
 * compiles without warnings).  Filled by ar__cudnn_load. */
typedef struct ar__cudnn_api {
  decltype(&cudnnCreate) create;
  decltype(&cudnnDestroy) destroy;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnCreateTensorDescriptor) create_tensor;
  decltype(&cudnnSetTensor4dDescriptor) set_tensor4d;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor;
  decltype(&cudnnCreateFilterDescriptor) create_filter;
  decltype(&cudnnSetFilter4dDescriptor) set_filter4d;
  decltype(&cudnnDestroyFilterDescriptor) destroy_filter;
  decltype(&cudnnCreateConvolutionDescriptor) create_conv;
  decltype(&cudnnSetConvolution2dDescriptor) set_conv2d;
  decltype(&cudnnSetConvolutionGroupCount) set_groups;
  decltype(&cudnnSetConvolutionMathType) set_math;
  decltype(&cudnnDestroyConvolutionDescriptor) destroy_conv;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) fwd_algos;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) bwd_data_algos;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) bwd_filter_algos;
  decltype(&cudnnConvolutionForward) fwd;
  decltype(&cudnnConvolutionBackwardData) bwd_data;
  decltype(&cudnnConvolutionBackwardFilter) bwd_filter;
} ar__cudnn_api;
extern ar__cudnn_api ar__dnn;

/* Loads libcudnn.so.<major of the headers> once (thread-safe).  AR_OK, or
 * AR_NODEVICE with the reason in err (the caller then runs without it). */
ar_status ar__cudnn_load(ar_err *err);

/* Records a failed cuDNN call of an op, as ar__cublas_note. */
bool ar__cudnn_note(ar__cuda_device *d, cudnnStatus_t s, const char *call);
#endif

/* Loads libcublas.so.<major of the headers> once (thread-safe).
 * AR_NODEVICE with the library name and what to do when it is missing. */
ar_status ar__cublas_load(ar_err *err);

/* Records a failed CUDA call of an op (first failure wins) and returns
 * whether the call succeeded. */
bool ar__cuda_note(ar__cuda_device *d, cudaError_t e, const char *call);
bool ar__cublas_note(ar__cuda_device *d, cublasStatus_t s, const char *call);

/* Translates a failed CUDA call into a status and message in err. */
ar_status ar__cuda_status(cudaError_t e, ar_err *err, const char *call,
                          int ordinal);

const char *ar__cublas_text(cublasStatus_t s);

#define AR_CUDA_CHECK(d, call, err)                                            \
  do {                                                                         \
    cudaError_t ar__e = (call);                                                \
    if (ar__e != cudaSuccess)                                                  \
      return ar__cuda_status(ar__e, (err), #call, (d)->ordinal);               \
  } while (0)

/* ---- launch helpers (every kernel file) ---- */

/* True when an op should run: no earlier failure, and the device current. */
static inline bool ar__cuda_enter(ar__cuda_device *d) {
  if (d->base.failed != AR_OK)
    return false;
  return ar__cuda_note(d, cudaSetDevice(d->ordinal), "cudaSetDevice");
}

/* Records a failed launch of `kernel` (bad configuration, lost device). */
static inline void ar__cuda_launched(ar__cuda_device *d, const char *kernel) {
  ar__cuda_note(d, cudaGetLastError(), kernel);
}

/* Blocks for a grid-stride loop over n items, block threads each: at most
 * 16 blocks per SM. */
static inline unsigned ar__cuda_grid(const ar__cuda_device *d, int64_t n,
                                     int block) {
  int64_t g = (n + block - 1) / block;
  int64_t cap = (int64_t)(d->sm_count > 0 ? d->sm_count : 1) * 16;
  if (g > cap)
    g = cap;
  return (unsigned)(g < 1 ? 1 : g);
}

/* ---- the op launchers (cuda_kernels.cu); contracts in accelrt/device.h ---- */
void ar__cuda_fill(ar_device *dev, float *x, int64_t n, float value);
void ar__cuda_gemm(ar_device *dev, bool trans_a, bool trans_b, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc);
void ar__cuda_spmm(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                   const int32_t *idx, const float *val, const float *w,
                   int64_t out, float *y);
void ar__cuda_spmm_t(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                     const int32_t *idx, const float *val, const float *dy,
                     int64_t out, float *dw);
void ar__cuda_bias_act(ar_device *dev, int64_t rows, int64_t cols,
                       const float *bias, ar_act act, float *y);
void ar__cuda_act_grad(ar_device *dev, int64_t n, ar_act act, const float *y,
                       float *dy);
void ar__cuda_col_sum(ar_device *dev, int64_t rows, int64_t cols,
                      const float *dy, bool accumulate, float *db);
void ar__cuda_softmax_xent(ar_device *dev, int64_t rows, int64_t cols,
                           const float *logits, const int64_t *lab_ptr,
                           const int32_t *lab, float scale, float *grad,
                           float *loss_rows);
void ar__cuda_sigmoid_bce(ar_device *dev, int64_t rows, int64_t cols,
                          const float *logits, const int64_t *lab_ptr,
                          const int32_t *lab, float scale, float *grad,
                          float *loss_rows);
void ar__cuda_topk(ar_device *dev, int64_t rows, int64_t cols,
                   const float *scores, int k, int32_t *idx);
void ar__cuda_adam(ar_device *dev, int64_t n, float *p, const float *g,
                   float *m, float *v, float lr, float beta1, float beta2,
                   float eps, float weight_decay, int64_t t);
void ar__cuda_sgd(ar_device *dev, int64_t n, float *p, const float *g,
                  float *vel, float lr, float momentum, float weight_decay);
void ar__cuda_bn_fold(ar_device *dev, int64_t out, int64_t per, const float *w,
                      const float *bias, const float *gamma, const float *beta,
                      const float *mean, const float *var, float eps, float *wf,
                      float *bf);

#endif /* ACCELRT_CUDA_IMPL_H */
