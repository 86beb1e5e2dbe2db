/*
 * runtime/tenancy private header: what the runner's files share (the
 * runner itself is public: include/accelrt/tenancy.h).
 */
#ifndef ACCELRT_TENANCY_IMPL_H
#define ACCELRT_TENANCY_IMPL_H

#include "accelrt/device.h"
#include "accelrt/lanes.h"
#include "accelrt/runtime.h"
#include "accelrt/spec.h"
#include "accelrt/tenancy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The host's budget for the lanes (runner.c): runtime.memory in bytes
 * (at most what this host can give, ar_host_memory_get), or a fraction
 * (default all) of that; where it came from in source (may be NULL).
 * AR_RANGE, AR_UNSUPPORTED with what to set in err. */
ar_status ar__host_lanes_capacity(const ar_device_opts *o, size_t *out, char *source,
                                  size_t source_len, ar_err *err);

/* ---- records (record.c) ---- */

/* Value at quantile q in [0, 1] of v (n values; sorted in place), nearest
 * rank; 0 when n = 0. */
double ar__quantile(double *v, size_t n, double q);

#endif
