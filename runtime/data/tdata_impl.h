/*
 * Private to runtime/data/tdata*.c: the dataset handle both readers fill
 * and the npy header both the reader and the token generator agree on.
 */
#ifndef ACCELRT_TDATA_IMPL_H
#define ACCELRT_TDATA_IMPL_H

#include "accelrt/tdata.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tdata maps little-endian npy data in place: big-endian hosts are not supported"
#endif

/* Memory a dataset releases at close: up to two malloc'ed buffers
 * (decompressed idx files, realigned npy data) and two mapped files. */
#define AR__TDATA_HOLD 2

struct ar_tdata {
  ar_tdata_info info;
  int64_t elems;      /* values in one example: the product of info.dims */
  const void *x;      /* (count, elems) of info.type */
  const uint8_t *y8;  /* (count) idx class ids, or NULL */
  const int64_t *y64; /* (count) npy class ids, or NULL */
  const void *yt;     /* (count, info.targets) npy targets of info.target_type, or NULL */
  void *heap[AR__TDATA_HOLD];
  void *map[AR__TDATA_HOLD];
  size_t map_len[AR__TDATA_HOLD];
};

/* A zeroed handle, or NULL when out of memory. */
ar_tdata *ar__tdata_alloc(void);

/* Maps the regular file fd read-only (the descriptor stays the caller's).
 * An empty file gives *base NULL and *len 0.  AR_IO naming path. */
ar_status ar__tdata_map(int fd, const char *path, void **base, size_t *len, ar_err *err);

/* Writes an npy v1.0 header for a C-order little-endian array with the
 * given descr ("<i8") and shape into out (at least AR__NPY_HEADER_MAX
 * bytes), padded with spaces and ending in '\n' so that its length, which
 * is returned, is a multiple of 64 (the npy format, NEP 1). */
#define AR__NPY_HEADER_MAX 256
size_t ar__npy_header(char *out, const char *descr, const int64_t *shape, int nd);

#endif /* ACCELRT_TDATA_IMPL_H */
