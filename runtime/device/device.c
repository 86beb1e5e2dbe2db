/*
 * Device wrappers: opening a device by name, the handle's accessors, byte
 * accounting of its memory, copies and synchronisation, lanes, and the
 * device list of `accelrt info`.  The math ops' wrappers are in ops.c, the
 * backends in host/ and cuda/; everything here is backend-neutral.
 */
#include "device_impl.h"

#include "cuda/cuda_backend.h"
#include "host/host_device.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Parses "cuda:N" (N decimal, no sign, no trailing text) into *ordinal. */
static bool parse_cuda_name(const char *name, int *ordinal) {
  if (strncmp(name, "cuda:", 5) != 0)
    return false;
  const char *digits = name + 5;
  if (*digits < '0' || *digits > '9')
    return false;
  char *end = NULL;
  errno = 0;
  long v = strtol(digits, &end, 10);
  if (errno != 0 || *end != '\0' || v > INT_MAX)
    return false;
  *ordinal = (int)v;
  return true;
}

static ar_status open_cuda(int ordinal, const ar_device_opts *opts,
                           ar_device **out, ar_err *err) {
  char why[512];
  int n = ar_cuda_device_count(why, sizeof why);
  if (n <= 0)
    return ar_errf(err, AR_NODEVICE,
                   "device cuda:%d is not available: %s; use device: host "
                   "(or auto)",
                   ordinal, why);
  if (ordinal >= n)
    return ar_errf(err, AR_NODEVICE,
                   "device cuda:%d is not available: this machine has %d CUDA "
                   "device%s (cuda:0 to cuda:%d)",
                   ordinal, n, n == 1 ? "" : "s", n - 1);
  return ar__cuda_device_create(ordinal, opts, out, err);
}

/* "auto": the first CUDA device when one opens, else the host, saying why
 * in one line so a user who expected the GPU learns what happened. */
static ar_status open_auto(const ar_device_opts *opts, ar_device **out,
                           ar_err *err) {
  char why[AR_ERR_MAX];
  int n = ar_cuda_device_count(why, sizeof why);
  if (n > 0) {
    ar_err cuda_err = AR_ERR_INIT;
    if (ar__cuda_device_create(0, opts, out, &cuda_err) == AR_OK)
      return AR_OK;
    snprintf(why, sizeof why, "%s", cuda_err.msg);
  }
  ar_log(AR_LOG_INFO, "device auto: using the host (%s)", why);
  return ar_host_device_create(opts, out, err);
}

/* A handle as ar_device_open and ar_device_open_lane give it out: nothing
 * allocated through it, nothing failed, no message. */
static void hand_out(ar_device *dev) {
  dev->bytes_in_use = 0;
  dev->bytes_peak = 0;
  dev->failed = AR_OK;
  dev->err = (ar_err)AR_ERR_INIT;
}

ar_status ar_device_open(const char *name, const ar_device_opts *opts,
                         ar_device **out, ar_err *err) {
  if (!name || !out)
    return ar_errf(err, AR_INVALID, "ar_device_open: %s is NULL",
                   name ? "out" : "name");
  ar_device *dev = NULL;
  ar_status st;
  int ordinal = 0;
  if (strcmp(name, "host") == 0)
    st = ar_host_device_create(opts, &dev, err);
  else if (strcmp(name, "auto") == 0)
    st = open_auto(opts, &dev, err);
  else if (parse_cuda_name(name, &ordinal))
    st = open_cuda(ordinal, opts, &dev, err);
  else
    return ar_errf(err, AR_INVALID,
                   "unknown device '%s': use \"host\", \"auto\" or \"cuda:N\" "
                   "(N = 0, 1, ...)",
                   name);
  if (st != AR_OK)
    return st;
  /* A backend that leaves a required slot empty is a bug, not a user error. */
  const ar_device_ops *o = dev->ops;
  AR_ASSERT(o && o->name && o->destroy && o->alloc && o->free && o->copy_in &&
            o->copy_out && o->gemm && o->spmm && o->spmm_t && o->bias_act &&
            o->act_grad && o->col_sum && o->softmax_xent && o->sigmoid_bce &&
            o->topk && o->adam && o->sgd);
  hand_out(dev);
  *out = dev;
  return AR_OK;
}

void ar_device_close(ar_device *dev) {
  if (!dev)
    return;
  if (dev->bytes_in_use != 0)
    ar_log(AR_LOG_DEBUG, "device %s: closed with %zu bytes still allocated",
           dev->ops->name, dev->bytes_in_use);
  dev->ops->destroy(dev);
}

/* ---- accessors ----------------------------------------------------------- */

const char *ar_device_name(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->ops->name;
}

int ar_device_index(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->index;
}

int ar_device_threads(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->threads;
}

void ar_device_set_threads(ar_device *dev, int threads) {
  AR_ASSERT(dev != NULL && threads >= 1);
  dev->threads = threads;
}

bool ar_device_has_lanes(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->ops->open_lane != NULL;
}

const char *ar_device_errmsg(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->err.msg;
}

ar_status ar_device_errcode(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->err.status;
}

ar_status ar_device_status(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->failed;
}

size_t ar_device_bytes_in_use(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->bytes_in_use;
}

size_t ar_device_bytes_peak(const ar_device *dev) {
  AR_ASSERT(dev != NULL);
  return dev->bytes_peak;
}

/* ---- memory, copies, synchronisation ------------------------------------- */

ar_status ar_device_alloc(ar_device *dev, size_t bytes, void **out) {
  if (!dev)
    return AR_INVALID;
  if (!out)
    return ar_errf(&dev->err, AR_INVALID, "ar_device_alloc: out is NULL");
  void *p = NULL;
  ar_status st = dev->ops->alloc(dev, bytes, &p);
  if (st != AR_OK)
    return ar_err_wrap(&dev->err, "device %s (%zu bytes in use)",
                       dev->ops->name, dev->bytes_in_use);
  dev->bytes_in_use += bytes;
  if (dev->bytes_in_use > dev->bytes_peak)
    dev->bytes_peak = dev->bytes_in_use;
  *out = p;
  return AR_OK;
}

void ar_device_free(ar_device *dev, void *ptr, size_t bytes) {
  if (!dev || !ptr)
    return;
  /* Freeing more than was allocated means the caller's sizes are wrong. */
  AR_ASSERT(bytes <= dev->bytes_in_use);
  dev->ops->free(dev, ptr);
  dev->bytes_in_use -= bytes;
}

ar_status ar_device_mem_info(ar_device *dev, ar_device_mem *out) {
  if (!dev)
    return AR_INVALID;
  if (!out)
    return ar_errf(&dev->err, AR_INVALID, "ar_device_mem_info: out is NULL");
  if (!dev->ops->mem_info)
    return ar_errf(&dev->err, AR_UNSUPPORTED,
                   "device %s cannot report its memory; give runtime.memory "
                   "in bytes",
                   dev->ops->name);
  return dev->ops->mem_info(dev, out);
}

ar_status ar_device_open_lane(ar_device *dev, ar_device **out) {
  if (!dev)
    return AR_INVALID;
  if (!out)
    return ar_errf(&dev->err, AR_INVALID, "ar_device_open_lane: out is NULL");
  if (!dev->ops->open_lane)
    return ar_errf(&dev->err, AR_UNSUPPORTED,
                   "device %s has no queues to give each lane its own; run "
                   "the lanes' iterations on the device handle itself",
                   dev->ops->name);
  ar_device *lane = NULL;
  ar_status st = dev->ops->open_lane(dev, &lane);
  if (st != AR_OK)
    return st;
  hand_out(lane);
  *out = lane;
  return AR_OK;
}

ar_status ar_device_host_alloc(ar_device *dev, size_t bytes, void **out) {
  if (!dev)
    return AR_INVALID;
  if (!out)
    return ar_errf(&dev->err, AR_INVALID, "ar_device_host_alloc: out is NULL");
  *out = NULL;
  if (dev->ops->host_alloc)
    return dev->ops->host_alloc(dev, bytes, out);
  void *p = ar_malloc(bytes);
  if (!p)
    return ar_errf(&dev->err, AR_NOMEM,
                   "device %s: no host memory for %zu bytes of staging "
                   "buffers; lower train.batch or the model size",
                   dev->ops->name, bytes);
  *out = p;
  return AR_OK;
}

void ar_device_host_free(ar_device *dev, void *ptr) {
  if (!dev || !ptr)
    return;
  if (dev->ops->host_free)
    dev->ops->host_free(dev, ptr);
  else
    ar_free(ptr);
}

/* What every copy checks first: a failure recorded on the handle, then
 * its pointers (a NULL one is the caller's to handle, so a status). */
static ar_status copy_args(ar_device *dev, const char *what, const void *dst,
                           const void *src, size_t bytes) {
  if (dev->failed != AR_OK)
    return dev->failed;
  if (bytes > 0 && (!dst || !src))
    return ar_errf(&dev->err, AR_INVALID,
                   "%s: %zu bytes with a NULL %s pointer", what, bytes,
                   dst ? "source" : "destination");
  return AR_OK;
}

ar_status ar_device_copy_in(ar_device *dev, void *dst, const void *host_src,
                            size_t bytes) {
  if (!dev)
    return AR_INVALID;
  AR_CHECK(copy_args(dev, "ar_device_copy_in", dst, host_src, bytes));
  return dev->ops->copy_in(dev, dst, host_src, bytes);
}

ar_status ar_device_copy_out(ar_device *dev, void *host_dst, const void *src,
                             size_t bytes) {
  if (!dev)
    return AR_INVALID;
  AR_CHECK(copy_args(dev, "ar_device_copy_out", host_dst, src, bytes));
  return dev->ops->copy_out(dev, host_dst, src, bytes);
}

ar_status ar_device_sync(ar_device *dev) {
  if (!dev)
    return AR_INVALID;
  if (dev->failed != AR_OK)
    return dev->failed;
  return dev->ops->sync ? dev->ops->sync(dev) : AR_OK;
}

/* Host staging for a backend without its own copy: chunks taken in the
 * order that never overwrites source bytes not yet read (ascending when
 * dst is below src, descending otherwise). */
#define COPY_STAGE_BYTES ((size_t)64 << 20)

ar_status ar_device_copy(ar_device *dev, void *dst, const void *src,
                         size_t bytes) {
  if (!dev)
    return AR_INVALID;
  if (bytes == 0 || dst == src)
    return dev->failed;
  AR_CHECK(copy_args(dev, "ar_device_copy", dst, src, bytes));
  if (dev->ops->copy)
    return dev->ops->copy(dev, dst, src, bytes);
  size_t chunk = bytes < COPY_STAGE_BYTES ? bytes : COPY_STAGE_BYTES;
  unsigned char *stage = ar_malloc(chunk);
  if (!stage)
    return ar_errf(&dev->err, AR_NOMEM,
                   "device %s: no host memory for a %zu-byte copy buffer",
                   dev->ops->name, chunk);
  const bool down = (uintptr_t)dst < (uintptr_t)src;
  size_t n = (bytes + chunk - 1) / chunk;
  ar_status st = AR_OK;
  for (size_t k = 0; k < n && st == AR_OK; k++) {
    size_t c = down ? k : n - 1 - k;
    size_t off = c * chunk, len = bytes - off < chunk ? bytes - off : chunk;
    st = dev->ops->copy_out(dev, stage, (const unsigned char *)src + off, len);
    if (st == AR_OK)
      st = dev->ops->copy_in(dev, (unsigned char *)dst + off, stage, len);
  }
  ar_free(stage);
  return st;
}

ar_status ar_device_arena_size(const ar_device_opts *opts, uint64_t free_bytes,
                               const char *device_name, uint64_t *out,
                               ar_err *err) {
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  if (opts)
    o = *opts;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (o.memory_bytes > 0) {
    if (o.memory_bytes > free_bytes)
      return ar_errf(err, AR_RANGE,
                     "runtime.memory of %.2f GiB exceeds the %.2f GiB free on "
                     "%s; lower runtime.memory or give a fraction such as 90%%",
                     (double)o.memory_bytes / gib, (double)free_bytes / gib,
                     device_name);
    *out = o.memory_bytes;
    return AR_OK;
  }
  double f = o.memory_fraction != 0.0 ? o.memory_fraction
                                     : AR_DEVICE_DEFAULT_FRACTION;
  if (!(f > 0.0 && f <= 1.0))
    return ar_errf(err, AR_RANGE,
                   "runtime.memory fraction %g is not in (0, 1]; give a "
                   "percentage such as 90%% or a size in bytes",
                   o.memory_fraction);
  *out = (uint64_t)((double)free_bytes * f);
  return AR_OK;
}

void ar_device_describe_all(FILE *to) {
  if (!to)
    to = stdout;
  ar__host_describe(to);
  ar__cuda_describe(to);
}
