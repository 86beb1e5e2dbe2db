/* SRP / SimHash (Charikar, STOC 2002) with sparse random projections: each
 * of the K*L projections is +1 or -1 on a random 1/srp_ratio of the
 * coordinates and 0 elsewhere (as SLIDE's SimHash; Li et al., KDD 2006,
 * show such sparse projections keep the angle estimate).  A code is the
 * sign bit of the projection.
 *
 * The signs are stored coordinate-major, (dim, K*L) int8, so the dense and
 * the sparse paths run the same loop: for each non-zero coordinate, add
 * +-x to every projection, vectorised over projections.  Each sum thus sees
 * the same terms in the same order in both paths (bit-identical results for
 * ascending sparse indices), and multiplying by -1, 0 or +1 is exact. */
#include "lsh_impl.h"

ar_status ar__lsh_srp_init(ar_lsh_hash *h, ar_err *err) {
  size_t n = (size_t)h->o.dim * h->kl;
  h->sgn = ar_malloc(n);
  if (!h->sgn)
    return ar_errf(err, AR_NOMEM,
                   "lsh srp: out of memory for %zu projection signs (dim %u x "
                   "K*L %u); lower K*L",
                   n, h->o.dim, h->kl);
  ar_rng r;
  ar_rng_seed(&r, h->o.seed, 0x535250);
  uint64_t span = 2ull * h->o.srp_ratio;
  for (size_t i = 0; i < n; i++) {
    uint64_t u = ar_rng_below(&r, span);
    h->sgn[i] = (int8_t)(u == 0 ? 1 : u == 1 ? -1 : 0);
  }
  return AR_OK;
}

static inline void accumulate(const int8_t *restrict row, float xj,
                              float *restrict acc, uint32_t kl) {
#pragma omp simd
  for (uint32_t b = 0; b < kl; b++)
    acc[b] += (float)row[b] * xj;
}

static void finish(uint32_t kl, ar_lsh_scratch *s) {
  for (uint32_t b = 0; b < kl; b++)
    s->code[b] = s->acc[b] > 0.0f;
}

void ar__lsh_srp_dense(const ar_lsh_hash *h, const float *x, ar_lsh_scratch *s) {
  uint32_t kl = h->kl;
  for (uint32_t b = 0; b < kl; b++)
    s->acc[b] = 0.0f;
  for (uint32_t j = 0; j < h->o.dim; j++)
    if (x[j] != 0.0f)
      accumulate(h->sgn + (size_t)j * kl, x[j], s->acc, kl);
  finish(kl, s);
}

void ar__lsh_srp_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                        const float *val, size_t nnz, ar_lsh_scratch *s) {
  uint32_t kl = h->kl;
  for (uint32_t b = 0; b < kl; b++)
    s->acc[b] = 0.0f;
  for (size_t i = 0; i < nnz; i++) {
    float v = val ? val[i] : 1.0f;
    if (v != 0.0f)
      accumulate(h->sgn + (size_t)idx[i] * kl, v, s->acc, kl);
  }
  finish(kl, s);
}
