/* Hash family handles: option checks, dispatch to the families, combining K
 * codes into a table index, densification, and the per-thread scratch. */
#include <string.h>

#include "lsh_impl.h"

static uint32_t ceil_log2(uint32_t v) {
  uint32_t b = 0;
  while (((uint32_t)1 << b) < v)
    b++;
  return b;
}

ar_status ar_lsh_hash_opts_resolve(const ar_lsh_hash_opts *opts, ar_lsh_hash_opts *out,
                                   ar_err *err) {
  if (!opts || !out)
    return ar_errf(err, AR_INVALID, "lsh hash: opts and out must not be NULL");
  ar_lsh_hash_opts o = *opts;
  if ((unsigned)o.family > AR_LSH_DOPH)
    return ar_errf(err, AR_INVALID, "lsh hash: unknown family %d",
                   (int)o.family);
  if (o.dim == 0)
    return ar_errf(err, AR_INVALID, "lsh hash: dim is 0; set the input width");
  if (o.K < 1 || o.K > 64 || o.L < 1 || o.L > 1024)
    return ar_errf(err, AR_INVALID,
                   "lsh hash: K=%u L=%u out of range (K 1..64, L 1..1024)",
                   o.K, o.L);
  uint32_t cb = 1;
  if (o.family != AR_LSH_SRP) {
    if (o.bin_size < 2 || o.bin_size > AR__LSH_MAX_BIN)
      return ar_errf(err, AR_INVALID, "lsh hash: bin_size %u not in 2..%u",
                     o.bin_size, AR__LSH_MAX_BIN);
    if (o.family != AR_LSH_DOPH && o.bin_size > o.dim)
      return ar_errf(err, AR_INVALID,
                     "lsh hash: bin_size %u exceeds dim %u; lower bin_size",
                     o.bin_size, o.dim);
    cb = ceil_log2(o.bin_size);
  } else if (o.srp_ratio < 1) {
    return ar_errf(err, AR_INVALID, "lsh hash: srp_ratio must be >= 1");
  }
  if (o.bits == 0)
    o.bits = o.K * cb < 20 ? o.K * cb : 20;
  if (o.bits > 28)
    return ar_errf(err, AR_INVALID,
                   "lsh hash: bits=%u gives too many buckets; use at most 28",
                   o.bits);
  *out = o;
  return AR_OK;
}

ar_status ar_lsh_hash_bytes(const ar_lsh_hash_opts *opts, size_t *out, ar_err *err) {
  ar_lsh_hash_opts o = AR_LSH_HASH_OPTS_INIT;
  AR_CHECK(ar_lsh_hash_opts_resolve(opts, &o, err));
  /* dim < 2^32 and K*L <= 2^16: no product below overflows 64 bits. */
  const uint64_t kl = (uint64_t)o.K * o.L, cells = (uint64_t)o.dim * kl;
  uint64_t bytes = sizeof(ar_lsh_hash);
  if (o.family == AR_LSH_SRP)
    bytes += cells + (cells <= AR__LSH_SRP_PROJ_MAX ? cells * sizeof(float) : 0);
  else if (o.family != AR_LSH_DOPH)
    bytes += 2 * kl * o.bin_size * sizeof(uint32_t) + ((uint64_t)o.dim + 1) * sizeof(uint32_t);
  if (bytes > SIZE_MAX)
    return ar_errf(err, AR_RANGE, "lsh hash: %llu bytes do not fit in memory",
                   (unsigned long long)bytes);
  *out = (size_t)bytes;
  return AR_OK;
}

ar_status ar_lsh_hash_create(const ar_lsh_hash_opts *opts, ar_lsh_hash **out,
                             ar_err *err) {
  if (!opts || !out)
    return ar_errf(err, AR_INVALID, "lsh hash: opts and out must not be NULL");
  ar_lsh_hash_opts o = AR_LSH_HASH_OPTS_INIT;
  AR_CHECK(ar_lsh_hash_opts_resolve(opts, &o, err));
  const uint32_t cb = o.family == AR_LSH_SRP ? 1 : ceil_log2(o.bin_size);
  ar_lsh_hash *h = ar_calloc(1, sizeof *h);
  if (!h)
    return ar_errf(err, AR_NOMEM, "lsh hash: out of memory");
  h->o = o;
  h->kl = o.K * o.L;
  h->cb = cb;
  h->nb = (uint32_t)1 << o.bits;
  h->concat = o.K * cb <= o.bits;
  h->key = ar_mix64(o.seed ^ 0x4C5348ull);
  ar_status st = AR_OK;
  if (o.family == AR_LSH_SRP)
    st = ar__lsh_srp_init(h, err);
  else if (o.family != AR_LSH_DOPH)
    st = ar__lsh_bins_init(h, err);
  if (st != AR_OK) {
    ar_lsh_hash_destroy(h);
    return st;
  }
  *out = h;
  return AR_OK;
}

void ar_lsh_hash_destroy(ar_lsh_hash *h) {
  if (!h)
    return;
  ar_free(h->sgn);
  ar_free(h->proj);
  ar_free(h->bin);
  ar_free(h->tptr);
  ar_free(h->tent);
  ar_free(h);
}

uint32_t ar_lsh_hash_L(const ar_lsh_hash *h) { return h->o.L; }
uint32_t ar_lsh_hash_K(const ar_lsh_hash *h) { return h->o.K; }
uint32_t ar_lsh_hash_buckets(const ar_lsh_hash *h) { return h->nb; }
uint32_t ar_lsh_hash_code_bits(const ar_lsh_hash *h) { return h->cb; }
const ar_lsh_hash_opts *ar_lsh_hash_opts_get(const ar_lsh_hash *h) {
  return &h->o;
}

void ar__lsh_densify(const ar_lsh_hash *h, ar_lsh_scratch *s) {
  uint32_t kl = h->kl, any = 0;
  for (uint32_t i = 0; i < kl && !any; i++)
    any = s->pos[i] != AR__LSH_EMPTY;
  if (!any) {
    memset(s->code, 0, kl * sizeof *s->code);
    return;
  }
  /* Borrow only from codes that were non-empty before densification, so
   * the result does not depend on the order codes are filled in.  Random
   * probes first (the paper's 2-universal probing), then a scan, so that a
   * row touching a single bin still fills every code. */
  for (uint32_t i = 0; i < kl; i++) {
    if (s->pos[i] != AR__LSH_EMPTY)
      continue;
    uint32_t j = kl, src = kl;
    for (uint32_t a = 1; a <= 32 && src == kl; a++) {
      uint64_t r = ar_mix64(h->key ^ ((uint64_t)i << 24) ^ a);
      j = (uint32_t)(((r >> 32) * kl) >> 32);
      if (s->pos[j] != AR__LSH_EMPTY)
        src = j;
    }
    for (uint32_t step = 1; src == kl; step++) {
      uint32_t c = (j + step) % kl;
      if (s->pos[c] != AR__LSH_EMPTY)
        src = c;
    }
    s->code[i] = s->code[src];
  }
}

/* Table l's index from its K codes. */
void ar__lsh_combine(const ar_lsh_hash *h, const uint32_t *code, uint32_t *out) {
  uint32_t K = h->o.K;
  for (uint32_t l = 0; l < h->o.L; l++) {
    const uint32_t *c = code + (size_t)l * K;
    if (h->concat) {
      uint32_t v = 0;
      for (uint32_t k = 0; k < K; k++)
        v = (v << h->cb) | c[k];
      out[l] = v;
    } else {
      uint64_t v = h->key + l;
      for (uint32_t k = 0; k < K; k++)
        v = ar_mix64(v ^ ((uint64_t)c[k] << 8) ^ k);
      out[l] = (uint32_t)(v >> (64 - h->o.bits));
    }
  }
}

static ar_status check_scratch(const ar_lsh_hash *h, ar_lsh_scratch *s) {
  if (!s || s->kl < h->kl)
    return ar_errf(s ? &s->err : NULL, AR_INVALID,
                   "lsh hash: scratch holds %u codes, the family needs %u; "
                   "create it with this family",
                   s ? s->kl : 0, h->kl);
  return AR_OK;
}

ar_status ar_lsh_hash_dense_codes(const ar_lsh_hash *h, const float *x,
                                  ar_lsh_scratch *s, uint32_t *out) {
  AR_CHECK(check_scratch(h, s));
  switch (h->o.family) {
  case AR_LSH_SRP: ar__lsh_srp_dense(h, x, s); break;
  case AR_LSH_WTA: ar__lsh_wta_dense(h, x, s); break;
  case AR_LSH_DWTA: ar__lsh_dwta_dense(h, x, s); break;
  case AR_LSH_DOPH: ar__lsh_doph_dense(h, x, s); break;
  }
  if (out)
    memcpy(out, s->code, h->kl * sizeof *out);
  return AR_OK;
}

ar_status ar_lsh_hash_sparse_codes(const ar_lsh_hash *h, const uint32_t *idx,
                                   const float *val, size_t nnz,
                                   ar_lsh_scratch *s, uint32_t *out) {
  AR_CHECK(check_scratch(h, s));
  for (size_t i = 0; i < nnz; i++)
    if (idx[i] >= h->o.dim)
      return ar_errf(&s->err, AR_RANGE,
                     "lsh hash: sparse index %u at %zu is >= dim %u", idx[i],
                     i, h->o.dim);
  switch (h->o.family) {
  case AR_LSH_SRP: ar__lsh_srp_sparse(h, idx, val, nnz, s); break;
  case AR_LSH_WTA: ar__lsh_wta_sparse(h, idx, val, nnz, s); break;
  case AR_LSH_DWTA: ar__lsh_dwta_sparse(h, idx, val, nnz, s); break;
  case AR_LSH_DOPH: ar__lsh_doph_sparse(h, idx, val, nnz, s); break;
  }
  if (out)
    memcpy(out, s->code, h->kl * sizeof *out);
  return AR_OK;
}

ar_status ar_lsh_hash_dense(const ar_lsh_hash *h, const float *x,
                            ar_lsh_scratch *s, uint32_t *out) {
  AR_CHECK(ar_lsh_hash_dense_codes(h, x, s, NULL));
  ar__lsh_combine(h, s->code, out);
  return AR_OK;
}

ar_status ar_lsh_hash_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                             const float *val, size_t nnz, ar_lsh_scratch *s,
                             uint32_t *out) {
  AR_CHECK(ar_lsh_hash_sparse_codes(h, idx, val, nnz, s, NULL));
  ar__lsh_combine(h, s->code, out);
  return AR_OK;
}

/* ---- scratch ---- */

size_t ar_lsh_scratch_bytes(uint32_t kl, uint32_t neurons) {
  size_t k = kl ? kl : 1, n = neurons ? neurons : 1;
  return sizeof(ar_lsh_scratch) + k * (sizeof(float) + 1 + sizeof(uint64_t) + sizeof(uint32_t)) +
         n * sizeof(uint16_t) + (2 * n + 1) * sizeof(uint32_t); /* seen: one slot past */
}

ar_status ar_lsh_scratch_create(const ar_lsh_hash *h, const ar_lsh_tables *t,
                                ar_lsh_scratch **out, ar_err *err) {
  if (!out)
    return ar_errf(err, AR_INVALID, "lsh scratch: out must not be NULL");
  ar_lsh_scratch *s = ar_calloc(1, sizeof *s);
  if (!s)
    return ar_errf(err, AR_NOMEM, "lsh scratch: out of memory");
  s->kl = h ? h->kl : 0;
  s->n = t ? ar__lsh_tables_neurons(t) : 0;
  size_t kl = s->kl ? s->kl : 1, n = s->n ? s->n : 1;
  s->acc = ar_malloc(kl * sizeof *s->acc);
  s->pos = ar_malloc(kl);
  s->mask = ar_malloc(kl * sizeof *s->mask);
  s->code = ar_malloc(kl * sizeof *s->code);
  s->cnt = ar_calloc(n, sizeof *s->cnt);
  s->seen = ar_malloc((n + 1) * sizeof *s->seen); /* the count loop's spare write */
  s->tmp = ar_malloc(n * sizeof *s->tmp);
  if (!s->acc || !s->pos || !s->mask || !s->code || !s->cnt || !s->seen ||
      !s->tmp) {
    ar_lsh_scratch_destroy(s);
    return ar_errf(err, AR_NOMEM,
                   "lsh scratch: out of memory for %zu codes, %zu neurons", kl,
                   n);
  }
  *out = s;
  return AR_OK;
}

void ar_lsh_scratch_destroy(ar_lsh_scratch *s) {
  if (!s)
    return;
  ar_free(s->acc);
  ar_free(s->pos);
  ar_free(s->mask);
  ar_free(s->code);
  ar_free(s->cnt);
  ar_free(s->seen);
  ar_free(s->tmp);
  ar_free(s);
}

const char *ar_lsh_scratch_errmsg(const ar_lsh_scratch *s) {
  return s ? s->err.msg : "";
}
