/*
 * Host backend (private to runtime/device): the handle of a host device and
 * the line `accelrt info` prints for the host.  The public constructor is
 * ar_host_device_create in include/accelrt/device.h.
 *
 * Tests: tests/device/test_device_open.c.
 */
#ifndef ACCELRT_HOST_DEVICE_H
#define ACCELRT_HOST_DEVICE_H

#include "device_impl.h"

#include <hwloc.h>

typedef struct ar__host_device {
  ar_device base;         /* first member: a host device is an ar_device */
  hwloc_topology_t topo;  /* owned; NULL when hwloc could not load it */
  hwloc_bitmap_t unpinned; /* owned; the opening thread's CPU binding before
                            * pinning, restored on every team thread at
                            * close; NULL when threads were not pinned */
  int cores;              /* physical cores this process may run on */
} ar__host_device;

/* Writes one line describing the host (CPU, cores, vector ISA the kernels
 * were built for, BLAS) to `to`.  Thread-safe. */
void ar__host_describe(FILE *to);

#endif /* ACCELRT_HOST_DEVICE_H */
