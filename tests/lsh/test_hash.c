/* lsh hash families: determinism, sparse == dense, DWTA bucket coverage,
 * collision probabilities against theory. */
#include "lsh_util.h"

#define DIM 128

static const ar_lsh_family fams[] = {AR_LSH_SRP, AR_LSH_WTA, AR_LSH_DWTA,
                                     AR_LSH_DOPH};

static void test_determinism(void **st) {
  (void)st;
  for (int f = 0; f < 4; f++) {
    ar_lsh_hash *a = mkhash(fams[f], DIM, 6, 20, 0, 7);
    ar_lsh_hash *b = mkhash(fams[f], DIM, 6, 20, 0, 7);
    ar_lsh_hash *c = mkhash(fams[f], DIM, 6, 20, 0, 8);
    ar_lsh_scratch *s = mkscratch(a, NULL);
    ar_rng r;
    ar_rng_seed(&r, 1, f);
    float x[DIM];
    uint32_t ba[20], bb[20], bc[20];
    int differ = 0;
    for (int i = 0; i < 50; i++) {
      randrow(&r, x, DIM, 0.5);
      assert_int_equal(ar_lsh_hash_dense(a, x, s, ba), AR_OK);
      assert_int_equal(ar_lsh_hash_dense(b, x, s, bb), AR_OK);
      assert_int_equal(ar_lsh_hash_dense(c, x, s, bc), AR_OK);
      assert_memory_equal(ba, bb, sizeof ba);
      differ += memcmp(ba, bc, sizeof ba) != 0;
      for (int l = 0; l < 20; l++)
        assert_true(ba[l] < ar_lsh_hash_buckets(a));
    }
    assert_true(differ > 40); /* another seed is another family */
    if (fams[f] == AR_LSH_SRP) { /* non-negative (ReLU) rows: balanced bits */
      uint32_t codes[120];
      long ones = 0;
      for (int i = 0; i < 200; i++) {
        randrow(&r, x, DIM, 0.5);
        for (int j = 0; j < DIM; j++)
          x[j] = fabsf(x[j]);
        ar_lsh_hash_dense_codes(a, x, s, codes);
        for (int k = 0; k < 120; k++)
          ones += codes[k];
      }
      assert_true(ones > 0.4 * 200 * 120 && ones < 0.6 * 200 * 120);
    }
    ar_lsh_scratch_destroy(s);
    ar_lsh_hash_destroy(a);
    ar_lsh_hash_destroy(b);
    ar_lsh_hash_destroy(c);
  }
}

/* The same vector as a dense and as a sparse row hashes the same, with
 * ascending and (except SRP, whose float sums depend on order) shuffled
 * indices; also with the combining hash (bits < K * code bits). */
static void test_sparse_equals_dense(void **st) {
  (void)st;
  uint32_t idx[DIM];
  float x[DIM], val[DIM];
  for (int f = 0; f < 4; f++)
    for (uint32_t bits = 0; bits <= 10; bits += 10) {
      ar_lsh_hash *h = mkhash(fams[f], DIM, 5, 16, bits, 3);
      ar_lsh_scratch *s = mkscratch(h, NULL);
      ar_rng r;
      ar_rng_seed(&r, 2, f);
      uint32_t cd[80], cs[80], bd[16], bs[16];
      for (int i = 0; i < 300; i++) {
        double z = i % 3 == 0 ? 0.97 : i % 3 == 1 ? 0.5 : 0.0;
        randrow(&r, x, DIM, z);
        if (i % 7 == 0) /* ties and all-positive rows */
          for (int j = 0; j < DIM; j++)
            x[j] = x[j] != 0.0f ? (float)(1 + (j % 3)) : 0.0f;
        size_t nnz = to_sparse(x, DIM, idx, val);
        if (i % 5 == 0) /* explicit zeros (after the others) change nothing */
          for (uint32_t j = 0; j < DIM && j < 40; j++)
            if (x[j] == 0.0f) {
              idx[nnz] = j;
              val[nnz++] = 0.0f;
            }
        if (fams[f] != AR_LSH_SRP && nnz > 1)
          for (size_t k = nnz - 1; k > 0; k--) {
            size_t j = ar_rng_below(&r, k + 1);
            uint32_t ti = idx[k]; idx[k] = idx[j]; idx[j] = ti;
            float tv = val[k]; val[k] = val[j]; val[j] = tv;
          }
        assert_int_equal(ar_lsh_hash_dense_codes(h, x, s, cd), AR_OK);
        assert_int_equal(ar_lsh_hash_sparse_codes(h, idx, val, nnz, s, cs),
                         AR_OK);
        assert_memory_equal(cd, cs, sizeof cd);
        assert_int_equal(ar_lsh_hash_dense(h, x, s, bd), AR_OK);
        assert_int_equal(ar_lsh_hash_sparse(h, idx, val, nnz, s, bs), AR_OK);
        assert_memory_equal(bd, bs, sizeof bd);
      }
      ar_lsh_scratch_destroy(s);
      ar_lsh_hash_destroy(h);
    }
}

/* Fraction of the buckets of table 0 that n random rows reach. */
static double coverage(ar_lsh_hash *h, int n, double zeros, uint32_t dim) {
  uint32_t nb = ar_lsh_hash_buckets(h), L = ar_lsh_hash_L(h);
  unsigned char *hit = calloc(nb, 1);
  uint32_t *b = malloc(L * sizeof *b);
  float *x = malloc(dim * sizeof *x);
  ar_lsh_scratch *s = mkscratch(h, NULL);
  ar_rng r;
  ar_rng_seed(&r, 5, dim);
  for (int i = 0; i < n; i++) {
    randrow(&r, x, dim, zeros);
    assert_int_equal(ar_lsh_hash_dense(h, x, s, b), AR_OK);
    hit[b[0]] = 1;
  }
  size_t c = 0;
  for (uint32_t i = 0; i < nb; i++)
    c += hit[i];
  ar_lsh_scratch_destroy(s);
  free(x);
  free(b);
  free(hit);
  return (double)c / nb;
}

/* SLIDE's DWTA reached ~4% of its buckets; with all code bits kept, random
 * rows reach nearly every one (K=4, bin 8: 2^12 buckets, 20k rows: 99%). */
static void test_dwta_coverage(void **st) {
  (void)st;
  ar_lsh_hash *h = mkhash(AR_LSH_DWTA, DIM, 4, 2, 0, 11);
  assert_int_equal(ar_lsh_hash_buckets(h), 1u << 12);
  assert_int_equal(ar_lsh_hash_code_bits(h), 3);
  double dense = coverage(h, 20000, 0.5, DIM);
  ar_lsh_hash_destroy(h);
  /* Sparse rows (2% non-zero): densification still spreads them. */
  h = mkhash(AR_LSH_DWTA, 1000, 4, 50, 0, 12);
  double sparse = coverage(h, 20000, 0.98, 1000);
  ar_lsh_hash_destroy(h);
  /* The shape SLIDE ships, K=6: 2^18 buckets, 200k rows reach 1-e^-0.76. */
  h = mkhash(AR_LSH_DWTA, DIM, 6, 1, 0, 13);
  assert_int_equal(ar_lsh_hash_buckets(h), 1u << 18);
  double k6 = coverage(h, 200000, 0.5, DIM);
  ar_lsh_hash_destroy(h);
  print_message("dwta coverage: dense %.3f sparse %.3f K=6 %.3f\n", dense,
                sparse, k6);
  assert_true(dense > 0.95);
  assert_true(sparse > 0.80);
  assert_true(k6 > 0.50);
}

/* A unit vector at cosine c from x. */
static void at_cosine(ar_rng *r, const float *x, float *y, uint32_t dim,
                      double c) {
  double nx = 0, d = 0, nz = 0;
  float z[DIM];
  randrow(r, z, dim, 0.0);
  for (uint32_t j = 0; j < dim; j++) {
    nx += (double)x[j] * x[j];
    d += (double)x[j] * z[j];
  }
  for (uint32_t j = 0; j < dim; j++)
    z[j] -= (float)(d / nx * x[j]);
  for (uint32_t j = 0; j < dim; j++)
    nz += (double)z[j] * z[j];
  for (uint32_t j = 0; j < dim; j++)
    y[j] = (float)(c * x[j] / sqrt(nx) + sqrt(1 - c * c) * z[j] / sqrt(nz));
}

/* Per-code collision rate over seeded pairs at cosine c. */
static double collide(ar_lsh_family f, double c, uint64_t seed) {
  ar_lsh_hash *h = mkhash(f, DIM, 1, 64, 0, seed);
  ar_lsh_scratch *s = mkscratch(h, NULL);
  ar_rng r;
  ar_rng_seed(&r, seed, 99);
  float x[DIM], y[DIM];
  uint32_t a[64], b[64];
  long same = 0, total = 0;
  for (int p = 0; p < 300; p++) {
    randrow(&r, x, DIM, 0.0);
    at_cosine(&r, x, y, DIM, c);
    ar_lsh_hash_dense_codes(h, x, s, a);
    ar_lsh_hash_dense_codes(h, y, s, b);
    for (int k = 0; k < 64; k++)
      same += a[k] == b[k];
    total += 64;
  }
  ar_lsh_scratch_destroy(s);
  ar_lsh_hash_destroy(h);
  return (double)same / total;
}

/* SimHash: Pr[bit equal] = 1 - angle/pi (Charikar); the sparse projections
 * keep it to within a few points.  WTA and DWTA: monotone in similarity. */
static void test_collision_vs_cosine(void **st) {
  (void)st;
  const double cs[] = {0.0, 0.3, 0.7, 0.95};
  for (int f = 0; f < 3; f++) {
    double prev = -1;
    for (int i = 0; i < 4; i++) {
      double p = collide(fams[f], cs[i], 21 + i);
      if (fams[f] == AR_LSH_SRP) {
        double th = 1 - acos(cs[i]) / 3.14159265358979323846;
        print_message("srp cos %.2f: %.3f (theory %.3f)\n", cs[i], p, th);
        assert_true(fabs(p - th) < 0.06);
      }
      assert_true(p > prev + 0.03);
      prev = p;
    }
  }
}

/* DOPH: codes of sets with Jaccard J collide about J + (1-J)/2^bits. */
static void test_doph_jaccard(void **st) {
  (void)st;
  ar_lsh_hash *h = mkhash(AR_LSH_DOPH, 10000, 1, 64, 0, 5);
  ar_lsh_scratch *s = mkscratch(h, NULL);
  ar_rng r;
  ar_rng_seed(&r, 6, 0);
  uint32_t a[200], b[200], ca[64], cb[64];
  const double J[] = {0.1, 0.5, 0.9};
  double prev = 0;
  for (int i = 0; i < 3; i++) {
    long same = 0, total = 0;
    for (int p = 0; p < 200; p++) {
      /* |A| = |B| = 100 with `shared` in common: J = shared/(200-shared). */
      int shared = (int)lround(200 * J[i] / (1 + J[i]));
      uint32_t base = (uint32_t)ar_rng_below(&r, 9000);
      for (int k = 0; k < 100; k++) {
        a[k] = base + k;
        b[k] = k < shared ? base + k : base + 100 + k;
      }
      ar_lsh_hash_sparse_codes(h, a, NULL, 100, s, ca);
      ar_lsh_hash_sparse_codes(h, b, NULL, 100, s, cb);
      for (int k = 0; k < 64; k++)
        same += ca[k] == cb[k];
      total += 64;
    }
    double pr = (double)same / total, th = J[i] + (1 - J[i]) / 8.0;
    print_message("doph J %.1f: %.3f (theory %.3f)\n", J[i], pr, th);
    assert_true(fabs(pr - th) < 0.08);
    assert_true(pr > prev);
    prev = pr;
  }
  ar_lsh_scratch_destroy(s);
  ar_lsh_hash_destroy(h);
}

static void test_errors(void **st) {
  (void)st;
  ar_lsh_hash_opts o = AR_LSH_HASH_OPTS_INIT;
  ar_lsh_hash *h = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lsh_hash_create(&o, &h, &err), AR_INVALID); /* dim 0 */
  o.dim = 4;
  assert_int_equal(ar_lsh_hash_create(&o, &h, &err), AR_INVALID); /* bin>dim */
  assert_non_null(strstr(err.msg, "bin_size"));
  o.bin_size = 4;
  o.bits = 29;
  assert_int_equal(ar_lsh_hash_create(&o, &h, &err), AR_INVALID);
  o.bits = 0;
  assert_int_equal(ar_lsh_hash_create(&o, &h, &err), AR_OK);
  ar_lsh_scratch *s = mkscratch(h, NULL);
  uint32_t idx[2] = {1, 4}, out[50];
  assert_int_equal(ar_lsh_hash_sparse(h, idx, NULL, 2, s, out), AR_RANGE);
  assert_non_null(strstr(ar_lsh_scratch_errmsg(s), "dim"));
  ar_lsh_scratch *small = mkscratch(NULL, NULL);
  float x[4] = {1, 2, 3, 4};
  assert_int_equal(ar_lsh_hash_dense(h, x, small, out), AR_INVALID);
  ar_lsh_scratch_destroy(small);
  ar_lsh_scratch_destroy(s);
  ar_lsh_hash_destroy(h);
  ar_lsh_hash_destroy(NULL);
  /* Out of memory at every allocation: a status, never a crash or leak. */
  for (long k = 0; k < 12; k++)
    for (int f = 0; f < 4; f++) {
      o.family = fams[f];
      h = NULL;
      ar_alloc_fail_after(k);
      ar_status r = ar_lsh_hash_create(&o, &h, &err);
      ar_alloc_fail_after(-1);
      assert_true(r == AR_OK || r == AR_NOMEM);
      ar_lsh_hash_destroy(h);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_determinism),
      cmocka_unit_test(test_sparse_equals_dense),
      cmocka_unit_test(test_dwta_coverage),
      cmocka_unit_test(test_collision_vs_cosine),
      cmocka_unit_test(test_doph_jaccard),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
