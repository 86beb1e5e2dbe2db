/* Winner-take-all hashing (Yagnik et al., "The power of comparative
 * reasoning", ICCV 2011), and the random bins it shares with DWTA.
 *
 * Each of the K*L codes looks at bin_size distinct random coordinates and
 * records the position of the largest value among them, ties going to the
 * first position.  The paper uses the first bin_size entries of a random
 * permutation per code; here one permutation is cut into dim/bin_size
 * consecutive bins, as SLIDE does, which keeps each code's distribution and
 * makes neighbouring codes disjoint.  A sparse row is hashed through the transpose (coordinate ->
 * (code, position)); its absent coordinates count as 0, and a 64-bit mask
 * of the positions seen lets a 0 win exactly where the dense path would. */
#include "lsh_impl.h"

ar_status ar__lsh_bins_init(ar_lsh_hash *h, ar_err *err) {
  uint32_t bs = h->o.bin_size, kl = h->kl, dim = h->o.dim;
  size_t n = (size_t)kl * bs;
  h->bin = ar_malloc(n * sizeof *h->bin);
  h->tptr = ar_calloc((size_t)dim + 1, sizeof *h->tptr);
  h->tent = ar_malloc(n * sizeof *h->tent);
  if (!h->bin || !h->tptr || !h->tent)
    return ar_errf(err, AR_NOMEM, "lsh wta: out of memory for %u bins of %u",
                   kl, bs);
  ar_rng r;
  ar_rng_seed(&r, h->o.seed, 0x575441);
  /* Bins are consecutive slices of random permutations of the
   * coordinates, so the codes of one table look at disjoint coordinates
   * whenever K * bin_size <= dim (overlapping bins correlate the codes and
   * shrink the reachable buckets). */
  uint32_t *perm = ar_malloc((size_t)dim * sizeof *perm);
  if (!perm)
    return ar_errf(err, AR_NOMEM, "lsh wta: out of memory");
  uint32_t per = dim / bs, used = per;
  for (uint32_t c = 0; c < kl; c++, used++) {
    if (used == per) {
      for (uint32_t j = 0; j < dim; j++)
        perm[j] = j;
      for (uint32_t j = dim - 1; j > 0; j--) {
        uint32_t k = (uint32_t)ar_rng_below(&r, (uint64_t)j + 1), v = perm[j];
        perm[j] = perm[k];
        perm[k] = v;
      }
      used = 0;
    }
    for (uint32_t q = 0; q < bs; q++) {
      uint32_t v = perm[used * bs + q];
      h->bin[(size_t)c * bs + q] = v;
      h->tptr[v + 1]++;
    }
  }
  ar_free(perm);
  for (uint32_t j = 0; j < dim; j++)
    h->tptr[j + 1] += h->tptr[j];
  uint32_t *fill = ar_malloc((size_t)dim * sizeof *fill);
  if (!fill)
    return ar_errf(err, AR_NOMEM, "lsh wta: out of memory");
  for (uint32_t j = 0; j < dim; j++)
    fill[j] = h->tptr[j];
  for (uint32_t c = 0; c < kl; c++)
    for (uint32_t q = 0; q < bs; q++)
      h->tent[fill[h->bin[(size_t)c * bs + q]]++] = c * AR__LSH_MAX_BIN + q;
  ar_free(fill);
  return AR_OK;
}

void ar__lsh_wta_dense(const ar_lsh_hash *h, const float *x, ar_lsh_scratch *s) {
  uint32_t bs = h->o.bin_size;
  for (uint32_t c = 0; c < h->kl; c++) {
    const uint32_t *b = h->bin + (size_t)c * bs;
    float best = x[b[0]];
    uint32_t p = 0;
    for (uint32_t q = 1; q < bs; q++)
      if (x[b[q]] > best) {
        best = x[b[q]];
        p = q;
      }
    s->code[c] = p;
  }
}

void ar__lsh_wta_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                        const float *val, size_t nnz, ar_lsh_scratch *s) {
  uint32_t bs = h->o.bin_size, kl = h->kl;
  for (uint32_t c = 0; c < kl; c++) {
    s->pos[c] = AR__LSH_EMPTY;
    s->mask[c] = 0;
  }
  for (size_t i = 0; i < nnz; i++) {
    float v = val ? val[i] : 1.0f;
    for (uint32_t e = h->tptr[idx[i]]; e < h->tptr[idx[i] + 1]; e++) {
      uint32_t c = h->tent[e] / AR__LSH_MAX_BIN, p = h->tent[e] % AR__LSH_MAX_BIN;
      s->mask[c] |= 1ull << p;
      if (s->pos[c] == AR__LSH_EMPTY || v > s->acc[c] ||
          (v == s->acc[c] && p < s->pos[c])) {
        s->acc[c] = v;
        s->pos[c] = (uint8_t)p;
      }
    }
  }
  uint64_t full = bs == 64 ? ~0ull : (1ull << bs) - 1;
  for (uint32_t c = 0; c < kl; c++) {
    uint64_t zero = full & ~s->mask[c];
    if (zero) { /* an absent coordinate holds 0 at position pz */
      uint32_t pz = (uint32_t)__builtin_ctzll(zero);
      if (s->pos[c] == AR__LSH_EMPTY || s->acc[c] < 0.0f ||
          (s->acc[c] == 0.0f && pz < s->pos[c]))
        s->pos[c] = (uint8_t)pz;
    }
    s->code[c] = s->pos[c];
  }
}
