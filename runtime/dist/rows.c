/* Sparse rows on the wire.  The w and b of a layer that some worker runs
 * LSH-sampled (SLIDE) travel as rows instead of whole tensors: a worker's
 * gradient is the rows its share of the batch touched (every active id,
 * also those whose gradient is zero, so that the server's sparse Adam
 * decays their moments as single-process training does), and the
 * parameters a server sends are the rows its last update changed (every
 * worker received the previous iteration's, so those are exactly the rows
 * that changed since it last received them).  One message per tensor,
 * self-contained (b carries its ids too, or goes dense when that is
 * smaller: a gradient's touched rows are its w's ids, and a layer's w and
 * b are on one server):
 *
 *   u32 flags, u32 n, u32 ids[n] (absent when AR__ROWS_DENSE),
 *   f32 vals[n x row_len]  (row i of the tensor = its row_len floats)
 *
 * AR__ROWS_DENSE: every row in order (n = the tensor's rows; a dense
 * worker's gradient, or parameters when that is smaller than the rows);
 * AR__ROWS_RESYNC: parameters that are a full copy, not changes (the first
 * iteration of a run, after a start or a resume: the receiver's hash
 * tables already reflect them).  Sizes vary, so receivers size their
 * buffers for the largest message (ar__rows_wire) and read the real size
 * from the MPI status. */
#define _GNU_SOURCE
#include "dist_impl.h"

#include <string.h>

enum { ROWS_HEAD = 2 * sizeof(uint32_t) };

size_t ar__rows_wire(const ar__dist_tensor *T) {
  return ROWS_HEAD + (size_t)T->nrows * sizeof(uint32_t) + T->bytes;
}

size_t ar__rows_size(const ar__dist_tensor *T, size_t n) {
  return ROWS_HEAD + n * sizeof(uint32_t) + n * (size_t)T->row_len * sizeof(float);
}

size_t ar__rows_pack(const ar__dist_tensor *T, const float *src, const uint32_t *ids, size_t n,
                     uint32_t flags, uint8_t *out) {
  uint32_t head[2] = {flags, (uint32_t)n};
  if (!ids) {
    head[0] |= AR__ROWS_DENSE;
    head[1] = T->nrows;
    memcpy(out, head, sizeof head);
    memcpy(out + ROWS_HEAD, src, T->bytes);
    return ROWS_HEAD + T->bytes;
  }
  memcpy(out, head, sizeof head);
  memcpy(out + ROWS_HEAD, ids, n * sizeof *ids);
  size_t k = (size_t)T->row_len;
  float *vals = (float *)(out + ROWS_HEAD + n * sizeof *ids);
  for (size_t i = 0; i < n; i++)
    memcpy(vals + i * k, src + (size_t)ids[i] * k, k * sizeof(float));
  return ar__rows_size(T, n);
}

void ar__rows_view(const uint8_t *msg, ar__rows *out) {
  uint32_t head[2];
  memcpy(head, msg, sizeof head);
  out->flags = head[0];
  out->n = head[1];
  bool dense = head[0] & AR__ROWS_DENSE;
  out->ids = dense ? NULL : (const uint32_t *)(msg + ROWS_HEAD);
  out->vals = (const float *)(msg + ROWS_HEAD + (dense ? 0 : (size_t)head[1] * sizeof(uint32_t)));
}

ar_status ar__rows_check(ar__dist *c, const ar__dist_tensor *T, const uint8_t *msg, size_t bytes,
                         int peer) {
  const char *why = NULL;
  ar__rows r = {0, 0, NULL, NULL};
  if (bytes < ROWS_HEAD)
    why = "shorter than its header";
  else
    ar__rows_view(msg, &r);
  if (!why && (r.flags & ~(uint32_t)(AR__ROWS_DENSE | AR__ROWS_RESYNC)))
    why = "unknown flags";
  else if (!why && r.flags & AR__ROWS_DENSE)
    why = r.n == T->nrows && bytes == ROWS_HEAD + T->bytes ? NULL : "a dense message of the wrong size";
  else if (!why)
    why = r.n <= T->nrows && bytes == ar__rows_size(T, r.n) ? NULL : "its size disagrees with its row count";
  for (uint32_t i = 0; !why && r.ids && i < r.n; i++)
    if (r.ids[i] >= T->nrows)
      why = "a row id out of range";
  if (!why)
    return AR_OK;
  return ar_errf(c->err, AR_STATE,
                 "iteration %lld: rank %d sent a malformed rows message for '%s' (%zu bytes, %u "
                 "rows of %u): %s (ranks running different builds or job files?)",
                 (long long)c->iter + 1, peer, T->name, bytes, r.n, T->nrows, why);
}

void ar__rows_apply(const ar__dist_tensor *T, const ar__rows *r, float *dst, bool add) {
  size_t k = (size_t)T->row_len;
  if (!r->ids) {
    if (!add) {
      memcpy(dst, r->vals, T->bytes);
      return;
    }
    for (int64_t i = 0; i < T->count; i++)
      dst[i] += r->vals[i];
    return;
  }
  for (uint32_t i = 0; i < r->n; i++) {
    float *d = dst + (size_t)r->ids[i] * k;
    const float *v = r->vals + (size_t)i * k;
    if (add)
      for (size_t j = 0; j < k; j++)
        d[j] += v[j];
    else
      memcpy(d, v, k * sizeof(float));
  }
}
