/* lsh rehash schedule against hand-computed iteration numbers. */
#include "lsh_util.h"

/* Rebuild iterations among 1..upto, and where new hashes fall. */
static size_t run(const ar_lsh_rehash_opts *o, uint64_t upto, uint64_t *reb,
                  uint64_t *newh, size_t *nnew) {
  ar_lsh_rehash r;
  assert_int_equal(ar_lsh_rehash_init(&r, o, NULL), AR_OK);
  size_t n = 0;
  *nnew = 0;
  for (uint64_t it = 1; it <= upto; it++) {
    ar_lsh_rehash_action a = ar_lsh_rehash_check(&r, it);
    if (a != AR_LSH_REHASH_NONE)
      reb[n++] = it;
    if (a == AR_LSH_REHASH_NEW_HASH)
      newh[(*nnew)++] = it;
  }
  return n;
}

static void test_growth(void **st) {
  (void)st;
  ar_lsh_rehash_opts o = AR_LSH_REHASH_OPTS_INIT;
  o.growth = 1.1;
  uint64_t reb[100], nh[10];
  size_t nn;
  size_t n = run(&o, 2000, reb, nh, &nn);
  /* Gaps 50, 55, 60.5->61, 66.55->67, 73.205->73, 80.53->81, 88.58->89,
   * 97.44->97, 107.18->107, 117.9->118. */
  const uint64_t want[] = {50, 105, 166, 233, 306, 387, 476, 573, 680, 798};
  for (size_t i = 0; i < 10; i++)
    assert_int_equal(reb[i], want[i]);
  /* New hash functions at 1000 and 2000, which also rebuild. */
  assert_int_equal(nn, 2);
  assert_int_equal(nh[0], 1000);
  assert_int_equal(nh[1], 2000);
  assert_true(n > 10);
}

static void test_fixed_and_catch_up(void **st) {
  (void)st;
  ar_lsh_rehash_opts o = AR_LSH_REHASH_OPTS_INIT;
  o.every = 7;
  o.new_hash_every = 0;
  uint64_t reb[100], nh[10];
  size_t nn;
  size_t n = run(&o, 70, reb, nh, &nn);
  assert_int_equal(n, 10);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(reb[i], 7 * (i + 1));
  assert_int_equal(nn, 0);
  /* Skipped points are caught up once. */
  ar_lsh_rehash r;
  o.every = 50;
  assert_int_equal(ar_lsh_rehash_init(&r, &o, NULL), AR_OK);
  assert_int_equal(ar_lsh_rehash_check(&r, 49), AR_LSH_REHASH_NONE);
  assert_int_equal(ar_lsh_rehash_check(&r, 120), AR_LSH_REHASH_REBUILD);
  assert_int_equal(ar_lsh_rehash_check(&r, 149), AR_LSH_REHASH_NONE);
  assert_int_equal(ar_lsh_rehash_check(&r, 150), AR_LSH_REHASH_REBUILD);
  o.every = 0;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lsh_rehash_init(&r, &o, &err), AR_INVALID);
  o.every = 5;
  o.growth = 0.5;
  assert_int_equal(ar_lsh_rehash_init(&r, &o, &err), AR_INVALID);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_growth),
      cmocka_unit_test(test_fixed_and_catch_up),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
