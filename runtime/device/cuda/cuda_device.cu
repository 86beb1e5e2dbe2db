/*
 * CUDA backend, first stage: the probe (how many devices, or why none) and
 * the `cuda:N` entry of ar_device_open.  The operation table (cuBLAS GEMM,
 * the kernels, one cudaMalloc arena per device) lands with the CUDA issue;
 * until then opening a present device returns AR_UNSUPPORTED and "auto"
 * falls back to the host.
 *
 * Every CUDA runtime call goes through cuda_status(), which turns a
 * cudaError_t into an ar_status plus a message (the AR_CUDA_CHECK role of
 * STYLE.md).  No call here aborts or prints to stdout.
 */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdio.h>

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
    (void)cudaGetLastError(); /* do not leave the error for a later call */
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

/* Translates a failed CUDA call into a status and message in err. */
static ar_status cuda_status(cudaError_t e, ar_err *err, const char *what,
                             int ordinal) {
  if (e == cudaSuccess)
    return AR_OK;
  (void)cudaGetLastError();
  return ar_errf(err, AR_DEVICE, "cuda:%d: %s failed: %s (%s)", ordinal, what,
                 cudaGetErrorString(e), cudaGetErrorName(e));
}

extern "C" ar_status ar__cuda_device_create(int ordinal,
                                            const ar_device_opts *opts,
                                            ar_device **out, ar_err *err) {
  (void)opts;
  (void)out;
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
  cudaDeviceProp prop;
  ar_status st = cuda_status(cudaGetDeviceProperties(&prop, ordinal), err,
                             "cudaGetDeviceProperties", ordinal);
  if (st != AR_OK)
    return st;
  return ar_errf(err, AR_UNSUPPORTED,
                 "device cuda:%d (%s) is present, but the CUDA backend's ops "
                 "land with the CUDA issue; use device: host until then",
                 ordinal, prop.name);
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
            "(driver %d.%d, runtime %d.%d; backend ops not built yet)\n",
            i, prop.name,
            (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
            prop.major, prop.minor, prop.multiProcessorCount, drv / 1000,
            (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
  }
}
