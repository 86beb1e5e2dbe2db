/* lsh sampling: union, top-k, threshold on hand-built buckets; always-include
 * lists; minimum and maximum counts; no allocation per call. */
#include "lsh_util.h"

/* Three tables over 20 neurons; bucket 1 holds {1,2,3}, {2,3,4}, {3,4,5}. */
typedef struct fix {
  ar_lsh_hash *h;
  ar_lsh_tables *t;
  ar_lsh_scratch *s;
  ar_rng rng;
} fix;

static int setup(void **st) {
  fix *f = calloc(1, sizeof *f);
  f->h = mkhash(AR_LSH_SRP, 4, 1, 3, 4, 1);
  f->t = mktables(f->h, 20, 8, AR_LSH_FIFO, 0, 1);
  const uint32_t ids[3][3] = {{1, 2, 3}, {2, 3, 4}, {3, 4, 5}};
  for (uint32_t l = 0; l < 3; l++)
    for (int j = 0; j < 3; j++) {
      uint32_t b[3] = {0, 0, 0}; /* other tables: bucket 0, never queried */
      b[l] = 1;
      assert_int_equal(ar_lsh_tables_insert(f->t, ids[l][j], b), AR_OK);
    }
  f->s = mkscratch(f->h, f->t);
  ar_rng_seed(&f->rng, 1, 2);
  *st = f;
  return 0;
}

static int teardown(void **st) {
  fix *f = *st;
  ar_lsh_scratch_destroy(f->s);
  ar_lsh_tables_destroy(f->t);
  ar_lsh_hash_destroy(f->h);
  free(f);
  return 0;
}

static const uint32_t Q[3] = {1, 1, 1};

/* Samples and checks the output is exactly `want` (in order). */
static void expect(fix *f, const ar_lsh_sample_opts *o, const uint32_t *always,
                   size_t na, const uint32_t *want, size_t nw) {
  uint32_t out[20];
  size_t n = 99;
  assert_int_equal(ar_lsh_sample(f->t, Q, o, always, na, f->s, &f->rng, out,
                                 20, &n),
                   AR_OK);
  if (n != nw)
    fail_msg("got %zu ids, want %zu", n, nw);
  assert_memory_equal(out, want, nw * sizeof *want);
}

static void test_union(void **st) {
  fix *f = *st;
  ar_lsh_sample_opts o = AR_LSH_SAMPLE_OPTS_INIT;
  expect(f, &o, NULL, 0, (uint32_t[]){1, 2, 3, 4, 5}, 5);
  o.budget = 3;
  expect(f, &o, NULL, 0, (uint32_t[]){1, 2, 3}, 3);
  /* Twice the same: the scratch was reset. */
  expect(f, &o, NULL, 0, (uint32_t[]){1, 2, 3}, 3);
}

static void test_topk(void **st) {
  fix *f = *st;
  ar_lsh_sample_opts o = AR_LSH_SAMPLE_OPTS_INIT;
  o.strategy = AR_LSH_TOPK;
  o.budget = 1;
  expect(f, &o, NULL, 0, (uint32_t[]){3}, 1);
  o.budget = 3; /* 3 in three tables, 2 and 4 in two: first found first */
  expect(f, &o, NULL, 0, (uint32_t[]){3, 2, 4}, 3);
  o.budget = 0;
  expect(f, &o, NULL, 0, (uint32_t[]){3, 2, 4, 1, 5}, 5);
  /* An always-include id is not counted again among the candidates. */
  o.budget = 2;
  expect(f, &o, (uint32_t[]){3}, 1, (uint32_t[]){3, 2, 4}, 3);
}

static void test_threshold(void **st) {
  fix *f = *st;
  ar_lsh_sample_opts o = AR_LSH_SAMPLE_OPTS_INIT;
  o.strategy = AR_LSH_THRESHOLD;
  o.threshold = 2;
  expect(f, &o, NULL, 0, (uint32_t[]){2, 3, 4}, 3);
  o.threshold = 3;
  expect(f, &o, NULL, 0, (uint32_t[]){3}, 1);
  o.threshold = 4;
  expect(f, &o, NULL, 0, NULL, 0);
  o.threshold = 1;
  o.max_active = 2;
  expect(f, &o, NULL, 0, (uint32_t[]){1, 2}, 2);
}

static void test_always_include(void **st) {
  fix *f = *st;
  ar_lsh_sample_opts o = AR_LSH_SAMPLE_OPTS_INIT;
  /* Labels first, duplicates dropped, then the other candidates. */
  expect(f, &o, (uint32_t[]){7, 3, 7}, 3, (uint32_t[]){7, 3, 1, 2, 4, 5}, 6);
  o.max_active = 4;
  expect(f, &o, (uint32_t[]){7}, 1, (uint32_t[]){7, 1, 2, 3}, 4);
  /* A label list longer than max_active is output whole. */
  o.max_active = 2;
  expect(f, &o, (uint32_t[]){10, 11, 12}, 3, (uint32_t[]){10, 11, 12}, 3);
}

static int distinct(const uint32_t *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (a[i] == a[j])
        return 0;
  return 1;
}

static void test_min_max_active(void **st) {
  fix *f = *st;
  ar_lsh_sample_opts o = AR_LSH_SAMPLE_OPTS_INIT;
  uint32_t out[20], out2[20];
  size_t n, n2;
  /* A small layer stays sparse: no padding unless asked. */
  assert_int_equal(
      ar_lsh_sample(f->t, Q, &o, NULL, 0, f->s, &f->rng, out, 20, &n), AR_OK);
  assert_int_equal(n, 5);
  /* min 10: the 5 candidates plus 5 distinct random others, repeatable. */
  o.min_active = 10;
  for (int dense = 0; dense < 2; dense++) {
    if (dense)
      o.min_active = 18; /* the Fisher-Yates path */
    ar_rng r1, r2;
    ar_rng_seed(&r1, 9, 9);
    ar_rng_seed(&r2, 9, 9);
    assert_int_equal(ar_lsh_sample(f->t, Q, &o, (uint32_t[]){19}, 1, f->s,
                                   &r1, out, 20, &n),
                     AR_OK);
    assert_int_equal(ar_lsh_sample(f->t, Q, &o, (uint32_t[]){19}, 1, f->s,
                                   &r2, out2, 20, &n2),
                     AR_OK);
    assert_int_equal(n, o.min_active);
    assert_memory_equal(out, out2, n * sizeof *out);
    assert_true(distinct(out, n));
    assert_memory_equal(out, ((uint32_t[]){19, 1, 2, 3, 4, 5}), 24);
    for (size_t i = 0; i < n; i++)
      assert_true(out[i] < 20);
  }
  /* min above max: max wins; min = all neurons: every neuron once. */
  o.min_active = 15;
  o.max_active = 8;
  assert_int_equal(
      ar_lsh_sample(f->t, Q, &o, NULL, 0, f->s, &f->rng, out, 20, &n), AR_OK);
  assert_int_equal(n, 8);
  o.min_active = 20;
  o.max_active = 0;
  assert_int_equal(
      ar_lsh_sample(f->t, Q, &o, NULL, 0, f->s, &f->rng, out, 20, &n), AR_OK);
  assert_int_equal(n, 20);
  assert_true(distinct(out, n));
}

static void test_no_allocation_and_errors(void **st) {
  fix *f = *st;
  ar_lsh_sample_opts o = AR_LSH_SAMPLE_OPTS_INIT;
  o.strategy = AR_LSH_TOPK;
  o.min_active = 12;
  uint32_t out[20], b[3];
  size_t n;
  float x[4] = {1, -2, 3, 0.5f};
  ar_alloc_fail_after(0); /* any allocation would now fail */
  assert_int_equal(ar_lsh_hash_dense(f->h, x, f->s, b), AR_OK);
  assert_int_equal(
      ar_lsh_sample(f->t, Q, &o, (uint32_t[]){4}, 1, f->s, &f->rng, out, 20,
                    &n),
      AR_OK);
  ar_alloc_fail_after(-1);
  assert_int_equal(n, 12);
  assert_int_equal(
      ar_lsh_sample(f->t, Q, &o, NULL, 0, f->s, &f->rng, out, 10, &n),
      AR_INVALID); /* out smaller than max_active (all 20) */
  assert_non_null(strstr(ar_lsh_scratch_errmsg(f->s), "max_active"));
  assert_int_equal(ar_lsh_sample(f->t, Q, &o, (uint32_t[]){20}, 1, f->s,
                                 &f->rng, out, 20, &n),
                   AR_RANGE);
  o.strategy = AR_LSH_THRESHOLD;
  o.threshold = 0;
  assert_int_equal(
      ar_lsh_sample(f->t, Q, &o, NULL, 0, f->s, &f->rng, out, 20, &n),
      AR_INVALID);
  ar_lsh_scratch *small = mkscratch(f->h, NULL);
  o.threshold = 1;
  assert_int_equal(
      ar_lsh_sample(f->t, Q, &o, NULL, 0, small, &f->rng, out, 20, &n),
      AR_INVALID);
  ar_lsh_scratch_destroy(small);
}

/* ar_lsh_keep_top against a sort: the k highest of [from, n) end up at
 * from..from+k-1 with their own ids, the head untouched, for inputs with
 * many ties (relu's zeros), NaNs, k at the edges and sizes that exercise
 * the partition's recursion. */
static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  x = x != x ? -INFINITY : x;
  y = y != y ? -INFINITY : y;
  return (x < y) - (x > y);
}

static void test_keep_top(void **st) {
  (void)st;
  enum { N = 3001 };
  static uint32_t ids[N];
  static float vals[N], orig[N], sorted[N];
  ar_rng g;
  ar_rng_seed(&g, 7, 11);
  const size_t sizes[] = {0, 1, 2, 5, 64, 257, N};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (int kind = 0; kind < 3; kind++) {
      const size_t n = sizes[si], from = n > 3 ? 3 : 0;
      const size_t ks[] = {0, 1, n / 3, n > from ? n - from - 1 : 0, n};
      for (size_t ki = 0; ki < 5; ki++) {
        for (size_t i = 0; i < n; i++) {
          const uint32_t u = (uint32_t)ar_rng_below(&g, 1000);
          /* kind 0: distinct-ish; 1: mostly zeros (ties); 2: some NaNs */
          vals[i] = kind == 1 && u < 700 ? 0.0f : (float)u - 500.0f;
          if (kind == 2 && u % 17 == 0)
            vals[i] = NAN;
          ids[i] = (uint32_t)i; /* id = original position */
          orig[i] = vals[i];
        }
        const size_t k = ks[ki];
        const size_t got = ar_lsh_keep_top(ids, vals, from, n, k);
        const size_t want = n < from + k ? n : from + k;
        assert_int_equal(got, want);
        for (size_t i = 0; i < from && i < n; i++)
          assert_int_equal(ids[i], i);
        /* every position holds an id with its own value, each id once */
        static unsigned char seen[N];
        memset(seen, 0, sizeof seen);
        for (size_t i = 0; i < n; i++) {
          assert_false(seen[ids[i]]);
          seen[ids[i]] = 1;
          assert_memory_equal(&vals[i], &orig[ids[i]], sizeof(float));
        }
        if (n <= from)
          continue;
        memcpy(sorted, orig + from, (n - from) * sizeof(float));
        qsort(sorted, n - from, sizeof(float), cmp_desc);
        /* the kept values, sorted, are the k highest */
        memcpy(orig, vals + from, (got - from) * sizeof(float));
        qsort(orig, got - from, sizeof(float), cmp_desc);
        for (size_t i = 0; i < got - from; i++) {
          const float a = orig[i] != orig[i] ? -INFINITY : orig[i];
          const float b = sorted[i] != sorted[i] ? -INFINITY : sorted[i];
          assert_true(a == b);
        }
      }
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keep_top),
      cmocka_unit_test_setup_teardown(test_union, setup, teardown),
      cmocka_unit_test_setup_teardown(test_topk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threshold, setup, teardown),
      cmocka_unit_test_setup_teardown(test_always_include, setup, teardown),
      cmocka_unit_test_setup_teardown(test_min_max_active, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_allocation_and_errors, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
