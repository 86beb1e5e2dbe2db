/*
 * The CUDA backend when it is not built: the probe reports why, and opening
 * a CUDA device fails with that reason.  Linked instead of cuda_device.cu
 * when ACCELRT_CUDA is OFF or no CUDA toolkit was found.
 */
#include "cuda/cuda_backend.h"

#include <stdio.h>

static const char not_built[] =
    "CUDA backend not built (configure with -DACCELRT_CUDA=ON and a CUDA "
    "toolkit)";

int ar_cuda_device_count(char *why, size_t why_len) {
  if (why && why_len > 0)
    snprintf(why, why_len, "%s", not_built);
  return 0;
}

ar_status ar__cuda_device_create(int ordinal, const ar_device_opts *opts,
                                 ar_device **out, ar_err *err) {
  (void)opts;
  (void)out;
  return ar_errf(err, AR_NODEVICE, "device cuda:%d is not available: %s",
                 ordinal, not_built);
}

void ar__cuda_describe(FILE *to) { fprintf(to, "cuda: none (%s)\n", not_built); }
