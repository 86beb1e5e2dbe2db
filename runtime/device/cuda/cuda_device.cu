/*
 * CUDA backend: the probe (how many devices, or why none), the device
 * handle and its lane handles, the arena, copies (host to device, device
 * to host, and device to device for the defragmentation), synchronisation,
 * the memory query, and the operation table.  The kernels are in
 * cuda_kernels.cu, the arena's carving in cuda_arena.c.
 *
 * One handle = one CUDA stream + one cuBLAS handle bound to it.  Opening
 * "cuda:N" makes the one cudaMalloc of the device: an arena of
 * runtime.memory bytes (or a fraction of the free memory, see
 * ar_device_arena_size), from which every later ar_device_alloc is carved,
 * cuBLAS's workspace included, so neither cuBLAS nor the training loop
 * allocates device memory afterwards.  ar_device_open_lane makes another
 * handle (its own stream and cuBLAS handle) over the same arena: one per
 * lane, so the iterations of two lanes can overlap on the GPU (Salus §3's
 * lanes as CUDA streams).  The arena is released with the last handle.
 *
 * Copies are synchronous with respect to the host buffer: copy_in and
 * copy_out enqueue on the handle's stream and wait for it, so the caller
 * may reuse or read its buffer at once (the engine stages through small
 * stack buffers).  They therefore also wait for the ops enqueued before
 * them; the engine copies once per batch in and once per loss out.
 */
#include "cuda/cuda_impl.h"
#include "cuda/cuda_nn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* cuBLAS workspace carved from the arena per handle.  NVIDIA recommends
 * 32 MiB on Hopper (cuBLAS documentation, cublasSetWorkspace); smaller
 * arenas get 1/16 of their size. */
#define BLAS_WS_BYTES ((size_t)32 << 20)

/* ---- cuBLAS, loaded on first use ---------------------------------------------- */

ar__cublas_api ar__blas;
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
static void *blas_lib;

#define AR__STR2(x) #x
#define AR__STR(x) AR__STR2(x)

/* Both loaders below fill a table of function pointers from a library
 * opened with dlopen: SYM looks up `sym` in their local `lib`, stores it in
 * `api.field`, and turns their local `ok` false when it is missing. */
#define SYM(field, sym)                                                        \
  api.field = (decltype(api.field))dlsym(lib, #sym);                           \
  ok = ok && api.field != NULL

ar_status ar__cublas_load(ar_err *err) {
  static const char *names[] = {"libcublas.so." AR__STR(CUBLAS_VER_MAJOR),
                                "libcublas.so"};
  ar_status st = AR_OK;
  pthread_mutex_lock(&blas_lock);
  if (blas_lib)
    goto done;
  {
    void *lib = NULL;
    const char *why = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
      lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
      if (!lib && i == 0)
        why = dlerror();
    }
    if (!lib) {
      st = ar_errf(err, AR_NODEVICE,
                   "cannot load cuBLAS (%s: %s); install the CUDA %d "
                   "toolkit's cuBLAS or add its folder to LD_LIBRARY_PATH",
                   names[0], why, CUBLAS_VER_MAJOR);
      goto done;
    }
    ar__cublas_api api;
    bool ok = true;
    SYM(create, cublasCreate_v2);
    SYM(destroy, cublasDestroy_v2);
    SYM(set_stream, cublasSetStream_v2);
    SYM(set_workspace, cublasSetWorkspace_v2);
    SYM(sgemm, cublasSgemm_v2);
    SYM(sgemm_64, cublasSgemm_v2_64);
    if (!ok) {
      dlclose(lib);
      st = ar_errf(err, AR_NODEVICE,
                   "%s lacks a cuBLAS function accelrt needs (it is older "
                   "than the CUDA %d headers accelrt was built with); install "
                   "the matching cuBLAS",
                   names[0], CUBLAS_VER_MAJOR);
      goto done;
    }
    ar__blas = api;
    blas_lib = lib;
  }
done:
  pthread_mutex_unlock(&blas_lock);
  return st;
}

#ifdef ACCELRT_HAVE_CUDNN
/* ---- cuDNN, loaded on first use --------------------------------------------- */

ar__cudnn_api ar__dnn;
static void *dnn_lib;

ar_status ar__cudnn_load(ar_err *err) {
  static const char *name = "libcudnn.so." AR__STR(CUDNN_MAJOR);
  ar_status st = AR_OK;
  pthread_mutex_lock(&blas_lock);
  if (!dnn_lib) {
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      st = ar_errf(err, AR_NODEVICE,
                   "cannot load cuDNN (%s: %s); the graph ops use accelrt's own "
                   "convolution kernels instead",
                   name, dlerror());
    } else {
      ar__cudnn_api api;
      bool ok = true;
      SYM(create, cudnnCreate);
      SYM(destroy, cudnnDestroy);
      SYM(set_stream, cudnnSetStream);
      SYM(error_string, cudnnGetErrorString);
      SYM(create_tensor, cudnnCreateTensorDescriptor);
      SYM(set_tensor4d, cudnnSetTensor4dDescriptor);
      SYM(destroy_tensor, cudnnDestroyTensorDescriptor);
      SYM(create_filter, cudnnCreateFilterDescriptor);
      SYM(set_filter4d, cudnnSetFilter4dDescriptor);
      SYM(destroy_filter, cudnnDestroyFilterDescriptor);
      SYM(create_conv, cudnnCreateConvolutionDescriptor);
      SYM(set_conv2d, cudnnSetConvolution2dDescriptor);
      SYM(set_groups, cudnnSetConvolutionGroupCount);
      SYM(set_math, cudnnSetConvolutionMathType);
      SYM(destroy_conv, cudnnDestroyConvolutionDescriptor);
      SYM(fwd_algos, cudnnGetConvolutionForwardAlgorithm_v7);
      SYM(bwd_data_algos, cudnnGetConvolutionBackwardDataAlgorithm_v7);
      SYM(bwd_filter_algos, cudnnGetConvolutionBackwardFilterAlgorithm_v7);
      SYM(fwd, cudnnConvolutionForward);
      SYM(bwd_data, cudnnConvolutionBackwardData);
      SYM(bwd_filter, cudnnConvolutionBackwardFilter);
      if (!ok) {
        dlclose(lib);
        st = ar_errf(err, AR_NODEVICE,
                     "%s lacks a function accelrt needs (older than the cuDNN %d "
                     "headers it was built with); the graph ops use accelrt's own "
                     "convolution kernels instead",
                     name, CUDNN_MAJOR);
      } else {
        ar__dnn = api;
        dnn_lib = lib;
      }
    }
  }
  pthread_mutex_unlock(&blas_lock);
  return st;
}

bool ar__cudnn_note(ar__cuda_device *d, cudnnStatus_t s, const char *call) {
  if (s == CUDNN_STATUS_SUCCESS)
    return true;
  if (d->base.failed == AR_OK)
    d->base.failed = ar_errf(&d->base.err, AR_DEVICE, "cuda:%d: %s failed: %s",
                             d->ordinal, call, ar__dnn.error_string(s));
  return false;
}
#endif
#undef SYM

/* ---- errors ------------------------------------------------------------------ */

const char *ar__cublas_text(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (cuBLAS could not initialise: no usable GPU or out of device memory)";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED (out of device memory)";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (an argument is out of range)";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH (the GPU lacks a feature this call needs)";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED (a kernel failed on the GPU)";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  default: return "unknown cuBLAS status";
  }
}

ar_status ar__cuda_status(cudaError_t e, ar_err *err, const char *call,
                          int ordinal) {
  if (e == cudaSuccess)
    return AR_OK;
  (void)cudaGetLastError(); /* do not leave the error for a later call */
  ar_status st = e == cudaErrorMemoryAllocation ? AR_NOMEM : AR_DEVICE;
  return ar_errf(err, st, "cuda:%d: %s failed: %s (%s)", ordinal, call,
                 cudaGetErrorString(e), cudaGetErrorName(e));
}

bool ar__cuda_note(ar__cuda_device *d, cudaError_t e, const char *call) {
  if (e == cudaSuccess)
    return true;
  if (d->base.failed == AR_OK) {
    d->base.failed = ar__cuda_status(e, &d->base.err, call, d->ordinal);
    ar_err_wrap(&d->base.err, "an op on the GPU failed; the device handle is "
                              "unusable from here on");
  } else {
    (void)cudaGetLastError();
  }
  return false;
}

bool ar__cublas_note(ar__cuda_device *d, cublasStatus_t s, const char *call) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return true;
  if (d->base.failed == AR_OK)
    d->base.failed = ar_errf(&d->base.err, AR_DEVICE, "cuda:%d: %s failed: %s",
                        d->ordinal, call, ar__cublas_text(s));
  return false;
}

/* ---- probe ------------------------------------------------------------------- */

/* Why cudaGetDeviceCount found nothing, in words that say what to do. */
static void explain(cudaError_t e, char *why, size_t why_len) {
  if (!why || why_len == 0)
    return;
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  switch (e) {
  case cudaErrorNoDevice:
    snprintf(why, why_len,
             "no CUDA device found (the driver lists none; check nvidia-smi "
             "and CUDA_VISIBLE_DEVICES)");
    break;
  case cudaErrorInsufficientDriver:
    snprintf(why, why_len,
             "no usable NVIDIA driver (missing, or older than CUDA runtime "
             "%d.%d); install or update the NVIDIA driver",
             rt / 1000, (rt % 1000) / 10);
    break;
  default:
    snprintf(why, why_len, "CUDA runtime error %s: %s", cudaGetErrorName(e),
             cudaGetErrorString(e));
    break;
  }
}

extern "C" int ar_cuda_device_count(char *why, size_t why_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    explain(e, why, why_len);
    return 0;
  }
  if (n <= 0) {
    explain(cudaErrorNoDevice, why, why_len);
    return 0;
  }
  if (why && why_len > 0)
    why[0] = '\0';
  return n;
}

/* ---- memory ------------------------------------------------------------------ */

static ar_status cuda_alloc(ar_device *dev, size_t bytes, void **out) {
  ar__cuda_device *d = ar__cuda(dev);
  ar_status st = ar__arena_alloc(d->arena, bytes, out, &dev->err);
  if (st != AR_OK)
    ar_err_wrap(&dev->err, "cuda:%d", d->ordinal);
  return st;
}

/* Waits for this handle's stream first: ops still running may use the
 * block, and another lane handle may carve it again right after. */
static void cuda_free(ar_device *dev, void *ptr) {
  ar__cuda_device *d = ar__cuda(dev);
  if (!ptr)
    return;
  ar__cuda_note(d, cudaSetDevice(d->ordinal), "cudaSetDevice");
  ar__cuda_note(d, cudaStreamSynchronize(d->stream), "cudaStreamSynchronize");
  bool ok = ar__arena_free(d->arena, ptr);
  AR_ASSERT(ok && "freed pointer is not a block of this device's arena");
}

static ar_status cuda_copy(ar_device *dev, void *dst, const void *src,
                           size_t bytes, const char *what) {
  ar__cuda_device *d = ar__cuda(dev);
  if (d->base.failed != AR_OK)
    return d->base.failed;
  if (bytes == 0)
    return AR_OK;
  if (!dst || !src)
    return ar_errf(&dev->err, AR_INVALID,
                   "cuda:%d: %s of %zu bytes with a NULL %s pointer",
                   d->ordinal, what, bytes, dst ? "source" : "destination");
  if (!ar__cuda_note(d, cudaSetDevice(d->ordinal), "cudaSetDevice") ||
      !ar__cuda_note(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                        d->stream),
                     "cudaMemcpyAsync") ||
      !ar__cuda_note(d, cudaStreamSynchronize(d->stream),
                     "cudaStreamSynchronize"))
    return d->base.failed;
  return AR_OK;
}

static ar_status cuda_copy_in(ar_device *dev, void *dst, const void *host_src,
                              size_t bytes) {
  return cuda_copy(dev, dst, host_src, bytes, "copy_in");
}

static ar_status cuda_copy_out(ar_device *dev, void *host_dst, const void *src,
                               size_t bytes) {
  return cuda_copy(dev, host_dst, src, bytes, "copy_out");
}

/* Page-locked host memory (ar_device_ops.host_alloc): copy_in and copy_out
 * of such buffers run at the link's full rate and need no bounce buffer in
 * the driver.  Not from the arena: it is host memory. */
static ar_status cuda_host_alloc(ar_device *dev, size_t bytes, void **out) {
  ar__cuda_device *d = ar__cuda(dev);
  AR_CUDA_CHECK(d, cudaSetDevice(d->ordinal), &dev->err);
  cudaError_t e = cudaMallocHost(out, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    *out = NULL;
    (void)cudaGetLastError(); /* not sticky: clear it for later calls */
    return ar_errf(&dev->err, AR_NOMEM,
                   "cuda:%d: cudaMallocHost of %zu bytes failed: %s; free "
                   "host memory or lower train.batch or the model size",
                   d->ordinal, bytes, cudaGetErrorString(e));
  }
  return AR_OK;
}

static void cuda_host_free(ar_device *dev, void *ptr) {
  ar__cuda_device *d = ar__cuda(dev);
  ar__cuda_note(d, cudaFreeHost(ptr), "cudaFreeHost");
}

/* Device-to-device copy with memmove semantics (ar_device_ops.copy),
 * asynchronous on the handle's stream.  cudaMemcpy of overlapping ranges
 * is undefined, so an overlapping copy (the defragmentation sliding a
 * block down by less than its size) is split into chunks no larger than
 * the distance between the ranges, taken in the order that never
 * overwrites source bytes not yet read (ascending when dst is below src);
 * the stream runs them one after another.  When the distance is small
 * against the size (many tiny chunks), a temporary of up to 64 MiB is
 * carved from the arena instead and each chunk goes src -> temporary ->
 * dst; the copy then waits for the stream before giving the temporary
 * back.  Without room in the arena it falls back to the small chunks
 * (slower, never wrong). */
#define COPY_TEMP_BYTES ((size_t)64 << 20)
#define COPY_DIRECT_MAX_CHUNKS 64

static ar_status cuda_copy_d2d(ar_device *dev, void *dst, const void *src,
                               size_t bytes) {
  ar__cuda_device *d = ar__cuda(dev);
  if (d->base.failed != AR_OK)
    return d->base.failed;
  if (bytes == 0 || dst == src)
    return AR_OK;
  if (!dst || !src)
    return ar_errf(&dev->err, AR_INVALID,
                   "cuda:%d: copy of %zu bytes with a NULL %s pointer",
                   d->ordinal, bytes, dst ? "source" : "destination");
  if (!ar__cuda_note(d, cudaSetDevice(d->ordinal), "cudaSetDevice"))
    return d->base.failed;
  char *to = (char *)dst;
  const char *from = (const char *)src;
  const bool down = (uintptr_t)to < (uintptr_t)from;
  size_t gap = down ? (size_t)(from - to) : (size_t)(to - from);
  if (gap >= bytes) {
    ar__cuda_note(d, cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice,
                                     d->stream),
                  "cudaMemcpyAsync");
    return d->base.failed;
  }
  size_t chunk = gap;
  void *temp = NULL;
  if (bytes / gap > COPY_DIRECT_MAX_CHUNKS) {
    size_t free_b = 0, largest = 0;
    ar__arena_stats(d->arena, &free_b, &largest);
    size_t want = bytes < COPY_TEMP_BYTES ? bytes : COPY_TEMP_BYTES;
    if (want > largest)
      want = largest & ~(AR__ARENA_ALIGN - 1);
    ar_err ignored = AR_ERR_INIT;
    if (want > gap && ar__arena_alloc(d->arena, want, &temp, &ignored) == AR_OK)
      chunk = want;
    else
      temp = NULL;
  }
  size_t n = (bytes + chunk - 1) / chunk;
  for (size_t k = 0; k < n && d->base.failed == AR_OK; k++) {
    size_t c = down ? k : n - 1 - k;
    size_t off = c * chunk, len = bytes - off < chunk ? bytes - off : chunk;
    if (temp) {
      if (ar__cuda_note(d, cudaMemcpyAsync(temp, from + off, len,
                                           cudaMemcpyDeviceToDevice, d->stream),
                        "cudaMemcpyAsync"))
        ar__cuda_note(d, cudaMemcpyAsync(to + off, temp, len,
                                         cudaMemcpyDeviceToDevice, d->stream),
                      "cudaMemcpyAsync");
    } else {
      ar__cuda_note(d, cudaMemcpyAsync(to + off, from + off, len,
                                       cudaMemcpyDeviceToDevice, d->stream),
                    "cudaMemcpyAsync");
    }
  }
  if (temp) {
    /* Another handle may carve the temporary again as soon as it is back. */
    ar__cuda_note(d, cudaStreamSynchronize(d->stream), "cudaStreamSynchronize");
    ar__arena_free(d->arena, temp);
  }
  return d->base.failed;
}

static ar_status cuda_sync(ar_device *dev) {
  ar__cuda_device *d = ar__cuda(dev);
  if (d->base.failed == AR_OK) {
    ar__cuda_note(d, cudaSetDevice(d->ordinal), "cudaSetDevice");
    ar__cuda_note(d, cudaStreamSynchronize(d->stream), "cudaStreamSynchronize");
  }
  return d->base.failed;
}

static ar_status cuda_mem_info(ar_device *dev, ar_device_mem *out) {
  ar__cuda_device *d = ar__cuda(dev);
  size_t free_b = 0, total_b = 0;
  AR_CUDA_CHECK(d, cudaSetDevice(d->ordinal), &dev->err);
  AR_CUDA_CHECK(d, cudaMemGetInfo(&free_b, &total_b), &dev->err);
  size_t avail = 0, largest = 0;
  ar__arena_stats(d->arena, &avail, &largest);
  out->total = total_b;
  out->free = free_b;
  out->capacity = d->arena->size;
  out->available = avail;
  return AR_OK;
}

/* ---- handles ------------------------------------------------------------------ */

/* Releases what setup_queue made, in reverse order, and the handle's share
 * of the arena; the arena itself goes with its last owner. */
static void teardown(ar__cuda_device *d) {
  if (d->stream)
    (void)cudaStreamSynchronize(d->stream);
#ifdef ACCELRT_HAVE_CUDNN
  if (d->dnn)
    ar__dnn.destroy((cudnnHandle_t)d->dnn);
#endif
  if (d->blas)
    ar__blas.destroy(d->blas);
  if (d->blas_ws)
    ar__arena_free(d->arena, d->blas_ws);
  if (d->stream)
    cudaStreamDestroy(d->stream);
  if (d->arena && ar__arena_release(d->arena)) {
    cudaFree(d->arena_base);
    ar__arena_destroy(d->arena);
  }
  (void)cudaGetLastError();
  ar_free(d);
}

static void cuda_destroy(ar_device *dev) {
  ar__cuda_device *d = ar__cuda(dev);
  cudaSetDevice(d->ordinal);
  teardown(d);
}

/* A cuDNN handle on the stream when the build has cuDNN and the machine
 * loads it; without, d->dnn stays NULL and the graph ops run their own
 * kernels (not an error).  A handle that cannot be made where the library
 * loads is an error: the GPU is then not usable. */
static ar_status setup_dnn(ar__cuda_device *d, ar_err *err) {
#ifdef ACCELRT_HAVE_CUDNN
  ar_err why = AR_ERR_INIT;
  if (ar__cudnn_load(&why) != AR_OK)
    return AR_OK;
  cudnnHandle_t h = NULL;
  cudnnStatus_t s = ar__dnn.create(&h);
  if (s != CUDNN_STATUS_SUCCESS)
    return ar_errf(err, AR_DEVICE, "cuda:%d: cudnnCreate failed: %s", d->ordinal,
                   ar__dnn.error_string(s));
  d->dnn = h;
  s = ar__dnn.set_stream(h, d->stream);
  if (s != CUDNN_STATUS_SUCCESS)
    return ar_errf(err, AR_DEVICE, "cuda:%d: cudnnSetStream failed: %s", d->ordinal,
                   ar__dnn.error_string(s));
#else
  (void)d;
  (void)err;
#endif
  return AR_OK;
}

/* A stream, a cuBLAS handle on it, and its workspace from the arena; a
 * cuDNN handle on it too when there is cuDNN. */
static ar_status setup_queue(ar__cuda_device *d, ar_err *err) {
  AR_CUDA_CHECK(d, cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking),
                err);
  cublasStatus_t s = ar__blas.create(&d->blas);
  if (s != CUBLAS_STATUS_SUCCESS) {
    d->blas = NULL;
    return ar_errf(err, AR_DEVICE, "cuda:%d: cublasCreate failed: %s",
                   d->ordinal, ar__cublas_text(s));
  }
  s = ar__blas.set_stream(d->blas, d->stream);
  if (s != CUBLAS_STATUS_SUCCESS)
    return ar_errf(err, AR_DEVICE, "cuda:%d: cublasSetStream failed: %s",
                   d->ordinal, ar__cublas_text(s));
  size_t ws = BLAS_WS_BYTES;
  if (ws > d->arena->size / 16)
    ws = d->arena->size / 16 & ~(AR__ARENA_ALIGN - 1);
  if (ws > 0) {
    ar_status st = ar__arena_alloc(d->arena, ws, &d->blas_ws, err);
    if (st != AR_OK)
      return ar_err_wrap(err, "cuda:%d: cuBLAS workspace", d->ordinal);
    d->blas_ws_bytes = ws;
    s = ar__blas.set_workspace(d->blas, d->blas_ws, ws);
    if (s != CUBLAS_STATUS_SUCCESS)
      return ar_errf(err, AR_DEVICE, "cuda:%d: cublasSetWorkspace failed: %s",
                     d->ordinal, ar__cublas_text(s));
  }
  return setup_dnn(d, err);
}

static ar_status cuda_open_lane(ar_device *dev, ar_device **out);

static const ar_device_ops cuda_ops = {
    /* name */ "cuda",
    /* destroy */ cuda_destroy,
    /* alloc */ cuda_alloc,
    /* free */ cuda_free,
    /* copy_in */ cuda_copy_in,
    /* copy_out */ cuda_copy_out,
    /* sync */ cuda_sync,
    /* fill */ ar__cuda_fill,
    /* gemm */ ar__cuda_gemm,
    /* spmm */ ar__cuda_spmm,
    /* spmm_t */ ar__cuda_spmm_t,
    /* bias_act */ ar__cuda_bias_act,
    /* act_grad */ ar__cuda_act_grad,
    /* col_sum */ ar__cuda_col_sum,
    /* softmax_xent */ ar__cuda_softmax_xent,
    /* sigmoid_bce */ ar__cuda_sigmoid_bce,
    /* topk */ ar__cuda_topk,
    /* adam */ ar__cuda_adam,
    /* sgd */ ar__cuda_sgd,
    /* bn_fold */ ar__cuda_bn_fold,
    /* mem_info */ cuda_mem_info,
    /* open_lane */ cuda_open_lane,
    /* copy */ cuda_copy_d2d,
    /* host_alloc */ cuda_host_alloc,
    /* host_free */ cuda_host_free,
    /* nn_table */ ar__cuda_nn_table,
};

static ar__cuda_device *new_handle(int ordinal) {
  ar__cuda_device *d = (ar__cuda_device *)ar_calloc(1, sizeof *d);
  if (!d)
    return NULL;
  d->base.ops = &cuda_ops;
  d->base.index = ordinal;
  d->base.threads = 1;
  d->base.err = (ar_err)AR_ERR_INIT;
  d->ordinal = ordinal;
  d->base.failed = AR_OK;
  return d;
}

static ar_status cuda_open_lane(ar_device *dev, ar_device **out) {
  ar__cuda_device *p = ar__cuda(dev);
  if (p->base.failed != AR_OK)
    return p->base.failed;
  ar__cuda_device *d = new_handle(p->ordinal);
  if (!d)
    return ar_errf(&dev->err, AR_NOMEM,
                   "cuda:%d: out of host memory for a lane handle", p->ordinal);
  d->sm_count = p->sm_count;
  memcpy(d->name, p->name, sizeof d->name);
  d->arena = p->arena;
  d->arena_base = p->arena_base;
  ar__arena_retain(d->arena);
  ar_status st = cudaSetDevice(p->ordinal) == cudaSuccess
                     ? setup_queue(d, &dev->err)
                     : ar__cuda_status(cudaGetLastError(), &dev->err,
                                       "cudaSetDevice", p->ordinal);
  if (st != AR_OK) {
    ar_err_wrap(&dev->err, "opening a lane handle");
    teardown(d);
    return st;
  }
  *out = &d->base;
  return AR_OK;
}

extern "C" ar_status ar__cuda_device_create(int ordinal,
                                            const ar_device_opts *opts,
                                            ar_device **out, ar_err *err) {
  char why[512];
  int n = ar_cuda_device_count(why, sizeof why);
  if (n <= 0)
    return ar_errf(err, AR_NODEVICE, "device cuda:%d is not available: %s",
                   ordinal, why);
  if (ordinal < 0 || ordinal >= n)
    return ar_errf(err, AR_NODEVICE,
                   "device cuda:%d is not available: this machine has %d CUDA "
                   "device%s",
                   ordinal, n, n == 1 ? "" : "s");
  ar_status bst = ar__cublas_load(err);
  if (bst != AR_OK)
    return ar_err_wrap(err, "device cuda:%d is not available", ordinal);
  ar__cuda_device *d = new_handle(ordinal);
  if (!d)
    return ar_errf(err, AR_NOMEM, "cuda:%d: out of host memory for the handle",
                   ordinal);
  ar_status st = AR_OK;
  cudaDeviceProp prop;
  size_t free_b = 0, total_b = 0;
  uint64_t bytes = 0;
  char label[32];
  snprintf(label, sizeof label, "cuda:%d", ordinal);
#define STEP(call)                                                             \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      st = ar__cuda_status(e_, err, #call, ordinal);                           \
      goto fail;                                                               \
    }                                                                          \
  } while (0)
  STEP(cudaSetDevice(ordinal));
  STEP(cudaGetDeviceProperties(&prop, ordinal));
  snprintf(d->name, sizeof d->name, "%s", prop.name);
  d->sm_count = prop.multiProcessorCount;
  STEP(cudaMemGetInfo(&free_b, &total_b));
  st = ar_device_arena_size(opts, free_b, label, &bytes, err);
  if (st != AR_OK)
    goto fail;
  bytes &= ~(uint64_t)(AR__ARENA_ALIGN - 1);
  if (bytes < AR__ARENA_ALIGN) {
    st = ar_errf(err, AR_NOMEM,
                 "cuda:%d: an arena of %llu bytes is too small; raise "
                 "runtime.memory",
                 ordinal, (unsigned long long)bytes);
    goto fail;
  }
  {
    cudaError_t e = cudaMalloc(&d->arena_base, (size_t)bytes);
    if (e != cudaSuccess) {
      d->arena_base = NULL;
      st = ar__cuda_status(e, err, "cudaMalloc", ordinal);
      ar_err_wrap(err,
                  "cuda:%d: reserving the arena of %.2f GiB (%.2f GiB free); "
                  "lower runtime.memory",
                  ordinal, (double)bytes / 1073741824.0,
                  (double)free_b / 1073741824.0);
      goto fail;
    }
  }
#undef STEP
  st = ar__arena_create(d->arena_base, (size_t)bytes, &d->arena, err);
  if (st != AR_OK) {
    cudaFree(d->arena_base);
    goto fail;
  }
  st = setup_queue(d, err);
  if (st != AR_OK)
    goto fail;
  *out = &d->base;
  return AR_OK;
fail:
  teardown(d);
  return st;
}

extern "C" void ar__cuda_describe(FILE *to) {
  char why[512];
  int n = ar_cuda_device_count(why, sizeof why);
  if (n <= 0) {
    fprintf(to, "cuda: none (%s)\n", why);
    return;
  }
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  for (int i = 0; i < n; i++) {
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, i);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fprintf(to, "cuda:%d: cannot read its properties: %s\n", i,
              cudaGetErrorString(e));
      continue;
    }
    fprintf(to,
            "cuda:%d: %s, %.1f GiB, compute capability %d.%d, %d SMs "
            "(driver %d.%d, runtime %d.%d)\n",
            i, prop.name,
            (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
            prop.major, prop.minor, prop.multiProcessorCount, drv / 1000,
            (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
  }
  /* Which convolutions the graph ops run there. */
#ifdef ACCELRT_HAVE_CUDNN
  ar_err dnn_why = AR_ERR_INIT;
  if (ar__cudnn_load(&dnn_why) == AR_OK)
    fprintf(to, "cudnn: libcudnn.so.%d loaded (the graph ops' convolutions)\n",
            CUDNN_MAJOR);
  else
    fprintf(to, "cudnn: none (%s)\n", dnn_why.msg);
#else
  fprintf(to, "cudnn: not built (ACCELRT_CUDNN); the graph ops' convolutions "
              "run accelrt's own kernels\n");
#endif
}
