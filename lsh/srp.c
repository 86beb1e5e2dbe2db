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

#include <cblas.h>
#include <string.h>
#include <omp.h>

/* Rows per GEMM when hashing many rows. */
#define BLOCK 512

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
  if (n <= AR__LSH_SRP_PROJ_MAX) {
    h->proj = ar_malloc(n * sizeof *h->proj);
    for (size_t i = 0; h->proj && i < n; i++)
      h->proj[i] = (float)h->sgn[i]; /* no memory: rows are hashed one by one */
  }
  return AR_OK;
}

/* Table builds hash every weight row: as a GEMM, (rows, dim) x (dim, K*L),
 * it runs at BLAS speed instead of one pass over the signs per row.  The
 * sums are associated differently from the per-row path, so a projection
 * within rounding of 0 may take the other sign: such a row lands in a
 * bucket its exact hash would miss in that one table, which only matters
 * for rows lying on a hyperplane. */
ar_status ar__lsh_srp_rows(const ar_lsh_hash *h, const float *w, size_t ld,
                           const uint32_t *ids, size_t count, uint32_t *out,
                           int nt) {
  if (!h->proj)
    return AR_UNSUPPORTED;
  const uint32_t kl = h->kl, dim = h->o.dim, L = h->o.L;
  const size_t nblocks = (count + BLOCK - 1) / BLOCK;
  int failed = 0;
#pragma omp parallel num_threads(nt)
  {
    float *sum = ar_malloc((size_t)BLOCK * kl * sizeof *sum);
    float *gather = ids ? ar_malloc((size_t)BLOCK * dim * sizeof *gather) : NULL;
    uint32_t *code = ar_malloc(kl * sizeof *code);
    if (!sum || !code || (ids && !gather)) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp barrier
    if (!failed) {
#pragma omp for schedule(static)
      for (size_t b = 0; b < nblocks; b++) {
        const size_t lo = b * BLOCK, nb = count - lo < BLOCK ? count - lo : BLOCK;
        const float *x = w + lo * ld;
        size_t ldx = ld;
        if (ids) {
          for (size_t i = 0; i < nb; i++)
            memcpy(gather + i * dim, w + (size_t)ids[lo + i] * ld, dim * sizeof(float));
          x = gather;
          ldx = dim;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nb, (int)kl, (int)dim,
                    1.0f, x, (int)ldx, h->proj, (int)kl, 0.0f, sum, (int)kl);
        for (size_t i = 0; i < nb; i++) {
          for (uint32_t c = 0; c < kl; c++)
            code[c] = sum[i * kl + c] > 0.0f;
          ar__lsh_combine(h, code, out + (lo + i) * L);
        }
      }
    }
    ar_free(sum);
    ar_free(gather);
    ar_free(code);
  }
  return failed ? AR_NOMEM : AR_OK;
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
