/* Shared helpers for the lsh tests: seeded random rows and handle makers. */
#ifndef TESTS_LSH_UTIL_H
#define TESTS_LSH_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accelrt/lsh.h"

static inline ar_lsh_hash *mkhash(ar_lsh_family f, uint32_t dim, uint32_t K,
                                  uint32_t L, uint32_t bits, uint64_t seed) {
  ar_lsh_hash_opts o = AR_LSH_HASH_OPTS_INIT;
  o.family = f;
  o.dim = dim;
  o.K = K;
  o.L = L;
  o.bits = bits;
  o.seed = seed;
  ar_lsh_hash *h = NULL;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_lsh_hash_create(&o, &h, &err);
  if (st != AR_OK)
    fail_msg("hash create: %s", err.msg);
  return h;
}

static inline ar_lsh_scratch *mkscratch(const ar_lsh_hash *h,
                                        const ar_lsh_tables *t) {
  ar_lsh_scratch *s = NULL;
  assert_int_equal(ar_lsh_scratch_create(h, t, &s, NULL), AR_OK);
  return s;
}

static inline ar_lsh_tables *mktables(const ar_lsh_hash *h, uint32_t neurons,
                                      uint32_t cap, ar_lsh_policy p,
                                      uint64_t seed, int threads) {
  ar_lsh_tables_opts o = AR_LSH_TABLES_OPTS_INIT;
  o.neurons = neurons;
  o.capacity = cap;
  o.policy = p;
  o.seed = seed;
  o.threads = threads;
  ar_lsh_tables *t = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_lsh_tables_create(h, &o, &t, &err) != AR_OK)
    fail_msg("tables create: %s", err.msg);
  return t;
}

/* Standard normal entries, a fraction `zeros` of them set to 0. */
static inline void randrow(ar_rng *r, float *x, uint32_t dim, double zeros) {
  for (uint32_t j = 0; j < dim; j++)
    x[j] = ar_rng_uniform(r) < zeros ? 0.0f : (float)ar_rng_normal(r);
}

/* Sparse form of x with ascending indices; returns nnz. */
static inline size_t to_sparse(const float *x, uint32_t dim, uint32_t *idx,
                               float *val) {
  size_t n = 0;
  for (uint32_t j = 0; j < dim; j++)
    if (x[j] != 0.0f) {
      idx[n] = j;
      val[n++] = x[j];
    }
  return n;
}

#endif /* TESTS_LSH_UTIL_H */
