/*
 * In-lane tensor offsets: a static, liveness-based plan of one iteration's
 * ephemeral memory.
 *
 * Salus frees an iteration's ephemeral memory in one step at its end and
 * sizes a lane by the iteration's peak; how tensors are laid out inside the
 * lane is left to the framework's allocator.  Here the layout is computed
 * once from the tensors' lifetimes, so an iteration allocates nothing:
 * greedy by size (the strategy of TensorFlow Lite's "greedy by size" arena
 * planner, rewritten here), largest tensor first, each into the smallest
 * gap left between the tensors already placed that are live at the same
 * time as it, or above the highest of them when no gap holds it.
 *
 * Why the peak never exceeds the plain sum: take the tensors in placement
 * order.  A tensor's offset is at most the end of the highest tensor placed
 * before it, so by induction the k-th tensor ends at most at the sum of the
 * sizes of the first k.
 */
#include <stdint.h>
#include <stdlib.h>

#include "lanes_impl.h"

typedef struct placed {
  size_t off, end; /* [off, end) */
} placed;

static int by_offset(const void *a, const void *b) {
  const placed *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* Order of placement: larger first, then earlier first use, then index. */
typedef struct order_key {
  size_t bytes;
  int64_t first_use;
  size_t index;
} order_key;

static int placement_before(const void *a, const void *b) {
  const order_key *x = a, *y = b;
  if (x->bytes != y->bytes)
    return x->bytes > y->bytes ? -1 : 1;
  if (x->first_use != y->first_use)
    return x->first_use < y->first_use ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Checks the tensors (lifetimes in order, sizes that cannot overflow the
 * address space once aligned); *sum is their aligned bytes together. */
static ar_status check_tensors(const ar_lanes_tensor *t, size_t n, size_t align, size_t *sum,
                               ar_err *err) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (t[i].first_use > t[i].last_use)
      return ar_errf(err, AR_INVALID,
                     "tensor %zu: first use %lld is after its last use %lld",
                     i, (long long)t[i].first_use, (long long)t[i].last_use);
    if (t[i].bytes > SIZE_MAX - align + 1 ||
        total > SIZE_MAX - ((t[i].bytes + align - 1) & ~(align - 1)))
      return ar_errf(err, AR_RANGE,
                     "tensor %zu: %zu bytes make the plan overflow the address "
                     "space",
                     i, t[i].bytes);
    total += (t[i].bytes + align - 1) & ~(align - 1);
  }
  *sum = total;
  return AR_OK;
}

/* The offset for tensor i of `size` aligned bytes: the smallest gap among
 * the placed tensors that live together with it that holds it, else above
 * the highest end.  live is scratch for n entries. */
static size_t best_fit(const ar_lanes_tensor *t, size_t n, size_t align, const size_t *offsets,
                       const unsigned char *done, size_t i, size_t size, placed *live) {
  size_t nl = 0;
  for (size_t j = 0; j < n; j++) {
    if (!done[j] || t[j].bytes == 0)
      continue;
    if (t[j].last_use < t[i].first_use || t[i].last_use < t[j].first_use)
      continue;
    live[nl].off = offsets[j];
    live[nl].end = offsets[j] + ((t[j].bytes + align - 1) & ~(align - 1));
    nl++;
  }
  qsort(live, nl, sizeof *live, by_offset);
  size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
  for (size_t m = 0; m < nl; m++) {
    if (live[m].off > cursor) {
      size_t gap = live[m].off - cursor;
      if (gap >= size && gap < best_gap) {
        best_gap = gap;
        best = cursor;
      }
    }
    if (live[m].end > cursor)
      cursor = live[m].end;
  }
  return best != SIZE_MAX ? best : cursor;
}

ar_status ar_lanes_plan_offsets(const ar_lanes_tensor *t, size_t n,
                                size_t align, size_t *offsets, size_t *peak,
                                ar_err *err) {
  if (n > 0 && (!t || !offsets))
    return ar_errf(err, AR_INVALID,
                   "ar_lanes_plan_offsets: %zu tensors but no tensor or offset "
                   "array",
                   n);
  if (!peak)
    return ar_errf(err, AR_INVALID, "ar_lanes_plan_offsets: peak is required");
  if (align == 0)
    align = 64;
  if (align & (align - 1))
    return ar_errf(err, AR_INVALID,
                   "ar_lanes_plan_offsets: align %zu is not a power of two",
                   align);
  size_t total = 0;
  AR_CHECK(check_tensors(t, n, align, &total, err));
  if (n == 0) {
    *peak = 0;
    return AR_OK;
  }
  order_key *idx = ar_malloc(n * sizeof *idx);
  unsigned char *done = ar_calloc(n, 1);
  placed *live = ar_malloc(n * sizeof *live);
  if (!idx || !done || !live) {
    ar_free(idx);
    ar_free(done);
    ar_free(live);
    return ar_errf(err, AR_NOMEM, "out of memory planning %zu tensors", n);
  }
  for (size_t i = 0; i < n; i++)
    idx[i] = (order_key){t[i].bytes, t[i].first_use, i};
  qsort(idx, n, sizeof *idx, placement_before);
  size_t top = 0;
  for (size_t k = 0; k < n; k++) {
    size_t i = idx[k].index;
    size_t size = (t[i].bytes + align - 1) & ~(align - 1);
    offsets[i] = size ? best_fit(t, n, align, offsets, done, i, size, live) : 0;
    done[i] = 1;
    if (offsets[i] + size > top)
      top = offsets[i] + size;
  }
  AR_ASSERT(top <= total);
  *peak = top;
  ar_free(idx);
  ar_free(done);
  ar_free(live);
  return AR_OK;
}
