/* Densified one-permutation minhash (Shrivastava & Li, ICML 2014;
 * densification as in Shrivastava, "Optimal densification", ICML 2017) of
 * the set of non-zero coordinates.
 *
 * One seeded 64-bit hash per coordinate stands in for the permutation: its
 * high half picks one of the K*L bins, its low half is the value; a code is
 * its bin's minimum value, mixed and cut to ceil(log2(bin_size)) bits (so two
 * rows collide with probability about J + (1 - J) / 2^bits for Jaccard
 * similarity J).  Empty bins borrow (ar__lsh_densify).  SLIDE's variant
 * first keeps the row's largest entries; here every non-zero counts, so a
 * caller wanting top entries passes only those. */
#include "lsh_impl.h"

static void add(const ar_lsh_hash *h, uint32_t j, ar_lsh_scratch *s) {
  uint64_t r = ar_mix64(h->key ^ ((uint64_t)j << 20) ^ 0xD0F8ull);
  uint32_t bin = (uint32_t)(((r >> 32) * h->kl) >> 32);
  uint32_t v = (uint32_t)r;
  if (s->pos[bin] == AR__LSH_EMPTY || v < s->code[bin]) {
    s->code[bin] = v;
    s->pos[bin] = 0;
  }
}

static void finish(const ar_lsh_hash *h, ar_lsh_scratch *s) {
  for (uint32_t c = 0; c < h->kl; c++)
    if (s->pos[c] != AR__LSH_EMPTY)
      s->code[c] = (uint32_t)(ar_mix64(s->code[c] ^ h->key) >> (64 - h->cb));
  ar__lsh_densify(h, s);
}

void ar__lsh_doph_dense(const ar_lsh_hash *h, const float *x,
                        ar_lsh_scratch *s) {
  for (uint32_t c = 0; c < h->kl; c++)
    s->pos[c] = AR__LSH_EMPTY;
  for (uint32_t j = 0; j < h->o.dim; j++)
    if (x[j] != 0.0f)
      add(h, j, s);
  finish(h, s);
}

void ar__lsh_doph_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                         const float *val, size_t nnz, ar_lsh_scratch *s) {
  for (uint32_t c = 0; c < h->kl; c++)
    s->pos[c] = AR__LSH_EMPTY;
  for (size_t i = 0; i < nnz; i++)
    if (!val || val[i] != 0.0f)
      add(h, idx[i], s);
  finish(h, s);
}
