/* Densified winner-take-all hashing (Chen & Shrivastava, "Densified Winner
 * Take All (WTA) Hashing for Sparse Datasets", UAI 2018), SLIDE's default.
 *
 * As WTA (wta.c) but over the non-zero entries of each bin only; a bin with
 * no non-zero entry borrows another bin's code (ar__lsh_densify).  A code
 * has ceil(log2(bin_size)) bits and all of them reach the table index;
 * SLIDE's reference code shifted its 3-bit codes by 2, so K codes overlapped
 * and only ~4% of the buckets were ever used (tests/lsh/test_hash.c checks
 * the coverage). */
#include "lsh_impl.h"

void ar__lsh_dwta_dense(const ar_lsh_hash *h, const float *x,
                        ar_lsh_scratch *s) {
  uint32_t bs = h->o.bin_size;
  for (uint32_t c = 0; c < h->kl; c++) {
    const uint32_t *b = h->bin + (size_t)c * bs;
    uint32_t p = AR__LSH_EMPTY;
    float best = 0.0f;
    for (uint32_t q = 0; q < bs; q++) {
      float v = x[b[q]];
      if (v != 0.0f && (p == AR__LSH_EMPTY || v > best)) {
        best = v;
        p = q;
      }
    }
    s->pos[c] = (uint8_t)p;
    s->code[c] = p;
  }
  ar__lsh_densify(h, s);
}

void ar__lsh_dwta_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                         const float *val, size_t nnz, ar_lsh_scratch *s) {
  for (uint32_t c = 0; c < h->kl; c++)
    s->pos[c] = AR__LSH_EMPTY;
  for (size_t i = 0; i < nnz; i++) {
    float v = val ? val[i] : 1.0f;
    if (v == 0.0f)
      continue;
    for (uint32_t e = h->tptr[idx[i]]; e < h->tptr[idx[i] + 1]; e++) {
      uint32_t c = h->tent[e] / AR__LSH_MAX_BIN, p = h->tent[e] % AR__LSH_MAX_BIN;
      if (s->pos[c] == AR__LSH_EMPTY || v > s->acc[c] ||
          (v == s->acc[c] && p < s->pos[c])) {
        s->acc[c] = v;
        s->pos[c] = (uint8_t)p;
      }
    }
  }
  for (uint32_t c = 0; c < h->kl; c++)
    s->code[c] = s->pos[c];
  ar__lsh_densify(h, s);
}
