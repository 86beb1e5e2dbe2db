/*
 * The device arena (private to runtime/device): one reservation of device
 * memory, made once when a CUDA device is opened, from which every
 * ar_device_alloc of that device and of its lane handles is carved.  The
 * training loop therefore never calls cudaMalloc (STYLE.md, "Memory and
 * ownership"); a job that does not fit is an AR_NOMEM status at admission
 * time, not a failure in the middle of an iteration.
 *
 * This file knows only offsets: the base pointer is opaque (device memory
 * for the CUDA backend, any buffer in the tests), so the carving is plain C
 * and is tested without a GPU (tests/device/test_cuda_arena.c).
 *
 * Placement: first fit over extents kept sorted by offset, every block
 * rounded up to AR__ARENA_ALIGN bytes (256: cudaMalloc's own alignment,
 * enough for every vector load and for cuBLAS); freed blocks merge with
 * free neighbours at once, so two adjacent holes never coexist.
 *
 * Sharing: the lane handles of one device (ar_device_open_lane) share its
 * arena.  The arena counts its owners and is released with the last one;
 * a mutex makes carving and freeing safe from several threads.
 */
#ifndef ACCELRT_CUDA_ARENA_H
#define ACCELRT_CUDA_ARENA_H

#include "accelrt/base.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AR__ARENA_ALIGN ((size_t)256)

typedef struct ar__arena_extent {
  size_t off;  /* from the base */
  size_t size; /* multiple of AR__ARENA_ALIGN */
  bool used;
} ar__arena_extent;

typedef struct ar__arena {
  char *base;   /* the reservation; owned by whoever made it (see release) */
  size_t size;  /* bytes, multiple of AR__ARENA_ALIGN */
  size_t used;  /* bytes in used extents */
  size_t peak;  /* largest `used` seen */
  ar__arena_extent *ext; /* (n) sorted by off, covering [0, size) exactly */
  size_t n, cap;
  int owners;   /* handles sharing the arena */
  pthread_mutex_t lock;
} ar__arena;

/* Creates an arena over [base, base + size) with one owner; size is
 * rounded down to AR__ARENA_ALIGN.  AR_NOMEM (host memory for the extent
 * table), AR_INVALID for size below one alignment unit. */
ar_status ar__arena_create(void *base, size_t size, ar__arena **out,
                           ar_err *err);

/* Adds one owner (a lane handle).  Thread-safe. */
void ar__arena_retain(ar__arena *a);

/* Drops one owner.  Returns true when it was the last, after which the
 * caller releases `base` (cudaFree) and then calls ar__arena_destroy. */
bool ar__arena_release(ar__arena *a);
void ar__arena_destroy(ar__arena *a); /* NULL is a no-op */

/* Carves `bytes` (0 counts as one alignment unit) into *out.  AR_NOMEM with
 * the arena's size, free bytes and largest hole in err when nothing fits;
 * *out is then untouched.  Thread-safe. */
ar_status ar__arena_alloc(ar__arena *a, size_t bytes, void **out,
                          ar_err *err);

/* Returns the block that starts at ptr.  Returns false (and changes
 * nothing) when ptr is not the start of a used block: a caller's bug that
 * the backend reports.  Thread-safe. */
bool ar__arena_free(ar__arena *a, void *ptr);

/* Bytes free in total and in the largest hole.  Thread-safe. */
void ar__arena_stats(ar__arena *a, size_t *free_bytes, size_t *largest);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_CUDA_ARENA_H */
