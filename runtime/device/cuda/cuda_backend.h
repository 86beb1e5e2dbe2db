/*
 * CUDA backend entry points (private to runtime/device).
 *
 * Two implementations: cuda_device.cu when the backend is built
 * (ACCELRT_CUDA=ON, or AUTO with nvcc found), cuda_absent.c otherwise.
 * Both also define the public probe ar_cuda_device_count.  device.c is the
 * only caller.
 *
 * Tests: tests/device/test_device_open.c (both builds),
 * tests/device/test_cuda_probe.c (CUDA builds).
 */
#ifndef ACCELRT_CUDA_BACKEND_H
#define ACCELRT_CUDA_BACKEND_H

#include "accelrt/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens CUDA device `ordinal`.  AR_NODEVICE when it is not present (no
 * driver, no device, ordinal out of range), with the reason in err.  The
 * handle belongs to the caller, closed with ar_device_close. */
ar_status ar__cuda_device_create(int ordinal, const ar_device_opts *opts,
                                 ar_device **out, ar_err *err);

/* Writes one line per CUDA device to `to`, or one line saying why there is
 * none.  Thread-safe. */
void ar__cuda_describe(FILE *to);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_CUDA_BACKEND_H */
