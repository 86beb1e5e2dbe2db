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

/* top-k and threshold against a reference on random tables: 70 tables (more
 * than the sampler locates at once), 8 buckets each over 300 neurons, so
 * counts tie a lot and the cut of a budget falls inside a run of equal
 * counts; a few ids sit twice in a bucket (counted twice, clamped at L).
 * The reference counts the queried buckets itself and sorts the ids it saw
 * by count, stably (the first found first among equal counts). */
enum { RN = 300, RL = 70 };

static int by_count_desc(const void *a, const void *b, const uint32_t *cnt) {
  const uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
  const uint32_t cx = cnt[x] < RL ? cnt[x] : RL, cy = cnt[y] < RL ? cnt[y] : RL;
  return (cx < cy) - (cx > cy);
}

static void test_topk_random(void **st) {
  (void)st;
  ar_lsh_hash *h = mkhash(AR_LSH_SRP, 4, 1, RL, 3, 1);
  ar_lsh_tables *t = mktables(h, RN, 4 * RN, AR_LSH_FIFO, 0, 1);
  ar_lsh_scratch *s = mkscratch(h, t);
  ar_rng g;
  ar_rng_seed(&g, 5, 9);
  uint32_t b[RL], q[RL];
  for (uint32_t id = 0; id < RN + 6; id++) { /* the last 6: ids 0-5 again */
    for (uint32_t l = 0; l < RL; l++)
      b[l] = (uint32_t)ar_rng_below(&g, 8);
    assert_int_equal(ar_lsh_tables_insert(t, id % RN, b), AR_OK);
  }
  for (int trial = 0; trial < 8; trial++) {
    for (uint32_t l = 0; l < RL; l++)
      q[l] = trial == 0 ? b[l] : (uint32_t)ar_rng_below(&g, 8); /* 0: holds id 5 twice */
    const uint32_t always[2] = {(uint32_t)ar_rng_below(&g, RN), 7};
    const size_t na = trial % 2 ? 2 : 0;
    /* The reference's counts and first-found order. */
    static uint32_t cnt[RN], seen[RN], sorted[RN];
    memset(cnt, 0, sizeof cnt);
    size_t nseen = 0;
    for (uint32_t l = 0; l < RL; l++) {
      uint32_t c;
      const uint32_t *ids = ar_lsh_tables_bucket(t, l, q[l], &c);
      for (uint32_t j = 0; j < c; j++) {
        const uint32_t id = ids[j];
        if (na && (id == always[0] || id == always[1]))
          continue;
        if (cnt[id]++ == 0)
          seen[nseen++] = id;
      }
    }
    memcpy(sorted, seen, nseen * sizeof *seen);
    /* A stable insertion sort (qsort is not stable). */
    for (size_t i = 1; i < nseen; i++)
      for (size_t j = i; j > 0 && by_count_desc(&sorted[j - 1], &sorted[j], cnt) > 0; j--) {
        const uint32_t x = sorted[j];
        sorted[j] = sorted[j - 1];
        sorted[j - 1] = x;
      }
    const size_t nfix = na ? (always[0] == always[1] ? 1 : 2) : 0;
    const size_t budgets[] = {1, 7, 50, 150, RN - 1, 0};
    for (size_t bi = 0; bi < sizeof budgets / sizeof *budgets; bi++) {
      ar_lsh_sample_opts o = AR_LSH_SAMPLE_OPTS_INIT;
      o.strategy = AR_LSH_TOPK;
      o.budget = (uint32_t)budgets[bi];
      uint32_t out[RN];
      size_t n = 0;
      assert_int_equal(ar_lsh_sample(t, q, &o, always, na, s, &g, out, RN, &n), AR_OK);
      size_t take = RN - nfix;
      if (o.budget && o.budget < take)
        take = o.budget;
      const size_t want = take < nseen ? take : nseen;
      if (n != nfix + want)
        fail_msg("trial %d budget %zu: %zu ids, want %zu", trial, budgets[bi], n, nfix + want);
      for (size_t i = 0; i < nfix; i++)
        assert_int_equal(out[i], always[i]);
      for (size_t i = 0; i < want; i++)
        if (out[nfix + i] != sorted[i])
          fail_msg("trial %d budget %zu: id %zu is %u, want %u (count %u)", trial,
                   budgets[bi], i, out[nfix + i], sorted[i], cnt[sorted[i]]);
    }
    /* threshold: the ids found in at least th tables, first found first,
     * up to max_active. */
    const uint32_t ths[] = {1, 9, 12, 20};
    for (size_t ti = 0; ti < 4; ti++) {
      ar_lsh_sample_opts o = AR_LSH_SAMPLE_OPTS_INIT;
      o.strategy = AR_LSH_THRESHOLD;
      o.threshold = ths[ti];
      o.max_active = ti == 1 ? 40 : 0;
      uint32_t out[RN];
      size_t n = 0;
      assert_int_equal(ar_lsh_sample(t, q, &o, always, na, s, &g, out, RN, &n), AR_OK);
      const size_t cap = (o.max_active ? o.max_active : RN) - nfix;
      size_t w = 0;
      for (size_t i = 0; i < nseen && w < cap; i++)
        if (cnt[seen[i]] >= ths[ti]) {
          assert_true(nfix + w < n);
          assert_int_equal(out[nfix + w], seen[i]);
          w++;
        }
      assert_int_equal(n, nfix + w);
    }
  }
  ar_lsh_scratch_destroy(s);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keep_top),
      cmocka_unit_test(test_topk_random),
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
