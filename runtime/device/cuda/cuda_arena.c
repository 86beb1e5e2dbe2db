/*
 * The device arena: first-fit carving of one reservation (see cuda_arena.h
 * for the rules).  Plain C, built in every configuration so that its test
 * runs on machines without a GPU.
 */
#include "cuda/cuda_arena.h"

#include <string.h>

static size_t round_up(size_t bytes) {
  if (bytes == 0)
    return AR__ARENA_ALIGN;
  if (bytes > SIZE_MAX - (AR__ARENA_ALIGN - 1))
    return 0; /* does not fit any arena */
  return (bytes + AR__ARENA_ALIGN - 1) & ~(AR__ARENA_ALIGN - 1);
}

ar_status ar__arena_create(void *base, size_t size, ar__arena **out,
                           ar_err *err) {
  size &= ~(AR__ARENA_ALIGN - 1);
  if (size == 0)
    return ar_errf(err, AR_INVALID,
                   "device arena: %zu bytes is below one block of %zu bytes; "
                   "raise runtime.memory",
                   size, AR__ARENA_ALIGN);
  ar__arena *a = ar_calloc(1, sizeof *a);
  if (!a)
    return ar_errf(err, AR_NOMEM, "device arena: out of host memory");
  a->cap = 64;
  a->ext = ar_malloc(a->cap * sizeof *a->ext);
  if (!a->ext) {
    ar_free(a);
    return ar_errf(err, AR_NOMEM, "device arena: out of host memory");
  }
  if (pthread_mutex_init(&a->lock, NULL) != 0) {
    ar_free(a->ext);
    ar_free(a);
    return ar_errf(err, AR_NOMEM, "device arena: cannot create its mutex");
  }
  a->base = base;
  a->size = size;
  a->ext[0] = (ar__arena_extent){0, size, false};
  a->n = 1;
  a->owners = 1;
  *out = a;
  return AR_OK;
}

void ar__arena_retain(ar__arena *a) {
  pthread_mutex_lock(&a->lock);
  a->owners++;
  pthread_mutex_unlock(&a->lock);
}

bool ar__arena_release(ar__arena *a) {
  pthread_mutex_lock(&a->lock);
  AR_ASSERT(a->owners > 0);
  bool last = --a->owners == 0;
  pthread_mutex_unlock(&a->lock);
  return last;
}

void ar__arena_destroy(ar__arena *a) {
  if (!a)
    return;
  pthread_mutex_destroy(&a->lock);
  ar_free(a->ext);
  ar_free(a);
}

static void stats_locked(const ar__arena *a, size_t *free_bytes,
                         size_t *largest) {
  size_t f = 0, l = 0;
  for (size_t i = 0; i < a->n; i++) {
    if (!a->ext[i].used) {
      f += a->ext[i].size;
      if (a->ext[i].size > l)
        l = a->ext[i].size;
    }
  }
  *free_bytes = f;
  *largest = l;
}

void ar__arena_stats(ar__arena *a, size_t *free_bytes, size_t *largest) {
  pthread_mutex_lock(&a->lock);
  stats_locked(a, free_bytes, largest);
  pthread_mutex_unlock(&a->lock);
}

ar_status ar__arena_alloc(ar__arena *a, size_t bytes, void **out,
                          ar_err *err) {
  const size_t need = round_up(bytes);
  ar_status st = AR_OK;
  pthread_mutex_lock(&a->lock);
  size_t i = 0;
  while (i < a->n && (a->ext[i].used || need == 0 || a->ext[i].size < need))
    i++;
  if (i == a->n) {
    size_t f, l;
    stats_locked(a, &f, &l);
    st = ar_errf(err, AR_NOMEM,
                 "device arena of %.1f MiB cannot hold %zu bytes (%.1f MiB): "
                 "%.1f MiB free, largest hole %.1f MiB; raise runtime.memory "
                 "or lower train.batch",
                 (double)a->size / 1048576.0, bytes, (double)bytes / 1048576.0,
                 (double)f / 1048576.0, (double)l / 1048576.0);
    goto done;
  }
  if (a->ext[i].size > need) {
    /* Split: the tail stays free as a new extent after i. */
    if (a->n == a->cap) {
      size_t cap = a->cap * 2;
      ar__arena_extent *e = ar_realloc(a->ext, cap * sizeof *e);
      if (!e) {
        st = ar_errf(err, AR_NOMEM, "device arena: out of host memory");
        goto done;
      }
      a->ext = e;
      a->cap = cap;
    }
    memmove(&a->ext[i + 2], &a->ext[i + 1], (a->n - i - 1) * sizeof *a->ext);
    a->ext[i + 1] = (ar__arena_extent){a->ext[i].off + need,
                                       a->ext[i].size - need, false};
    a->ext[i].size = need;
    a->n++;
  }
  a->ext[i].used = true;
  a->used += need;
  if (a->used > a->peak)
    a->peak = a->used;
  *out = a->base + a->ext[i].off;
done:
  pthread_mutex_unlock(&a->lock);
  return st;
}

bool ar__arena_free(ar__arena *a, void *ptr) {
  if (!ptr || (char *)ptr < a->base || (char *)ptr >= a->base + a->size)
    return false;
  const size_t off = (size_t)((char *)ptr - a->base);
  bool ok = false;
  pthread_mutex_lock(&a->lock);
  /* Binary search: extents are sorted by offset. */
  size_t lo = 0, hi = a->n;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (a->ext[mid].off <= off)
      lo = mid;
    else
      hi = mid;
  }
  size_t i = lo;
  if (a->ext[i].off != off || !a->ext[i].used)
    goto done;
  ok = true;
  a->ext[i].used = false;
  a->used -= a->ext[i].size;
  /* Merge with the next extent, then with the previous one. */
  if (i + 1 < a->n && !a->ext[i + 1].used) {
    a->ext[i].size += a->ext[i + 1].size;
    memmove(&a->ext[i + 1], &a->ext[i + 2], (a->n - i - 2) * sizeof *a->ext);
    a->n--;
  }
  if (i > 0 && !a->ext[i - 1].used) {
    a->ext[i - 1].size += a->ext[i].size;
    memmove(&a->ext[i], &a->ext[i + 1], (a->n - i - 1) * sizeof *a->ext);
    a->n--;
  }
done:
  pthread_mutex_unlock(&a->lock);
  return ok;
}
