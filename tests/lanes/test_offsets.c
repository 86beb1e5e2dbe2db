/* lanes: liveness-based offsets of one iteration's tensors inside a lane. */
#include <string.h>

#include "lanes_util.h"

static size_t round_up(size_t b, size_t a) { return (b + a - 1) & ~(a - 1); }

/* Checks what ar_lanes_plan_offsets promises, from the inputs alone: no two
 * tensors live at one step share a byte, offsets are aligned, the peak is
 * the highest end, at most the plain sum, and at least the largest sum of
 * sizes live at one step. */
static void verify(const ar_lanes_tensor *t, size_t n, size_t align,
                   const size_t *off, size_t peak) {
  size_t sum = 0, top = 0;
  for (size_t i = 0; i < n; i++) {
    size_t si = round_up(t[i].bytes, align);
    sum += si;
    assert_int_equal(off[i] % align, 0);
    if (si && off[i] + si > top)
      top = off[i] + si;
    for (size_t j = i + 1; j < n; j++) {
      size_t sj = round_up(t[j].bytes, align);
      if (!si || !sj)
        continue;
      int together = !(t[i].last_use < t[j].first_use ||
                       t[j].last_use < t[i].first_use);
      int disjoint = off[i] + si <= off[j] || off[j] + sj <= off[i];
      if (together && !disjoint)
        fail_msg("tensors %zu [%zu,+%zu) and %zu [%zu,+%zu) are live together "
                 "and overlap",
                 i, off[i], si, j, off[j], sj);
    }
  }
  assert_int_equal(peak, top);
  assert_true(peak <= sum);
  /* Lower bound: the bytes live at each step where some tensor starts. */
  for (size_t i = 0; i < n; i++) {
    size_t live = 0;
    for (size_t j = 0; j < n; j++)
      if (t[j].first_use <= t[i].first_use && t[i].first_use <= t[j].last_use)
        live += round_up(t[j].bytes, align);
    assert_true(live <= peak);
  }
}

/* A chain of layers, as one training iteration uses them: activations
 * live from their forward op to their backward op, gradients briefly.
 * By hand, placement order a0, g0 (4 KiB; a0 first by first use), a1, g1:
 *   a0 -> 0; g0 is live with a0 -> above it, 4 KiB;
 *   a1 (ops 1..4) is live with a0 only -> above a0, 4 KiB (g0's bytes,
 *   which are free until op 5);
 *   g1 (ops 4..5) is live with a0, a1 and g0 -> above all, 8 KiB.
 * Peak 10 KiB, which is also the bytes live at op 5 (a0 + g1 + g0): the
 * plan is optimal here, and below the plain sum of 12 KiB. */
static void test_hand_chain(void **state) {
  (void)state;
  const ar_lanes_tensor t[4] = {
      {4096, 0, 5}, /* a0 */
      {2048, 1, 4}, /* a1 */
      {2048, 4, 5}, /* g1 */
      {4096, 5, 5}, /* g0 */
  };
  size_t off[4], peak = 0;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lanes_plan_offsets(t, 4, 256, off, &peak, &err), AR_OK);
  /* Placement order: a0 (4096, first 0), g0 (4096, first 5), a1, g1.
   * a0 -> 0; g0 overlaps a0 -> 4096; a1 overlaps a0 only (not g0: 1..4
   * vs 5..5) -> smallest gap: none below a0, so above a0's end: 4096;
   * g1 overlaps a0, a1 and g0 -> above all: 8192. */
  assert_int_equal(off[0], 0);
  assert_int_equal(off[3], 4096);
  assert_int_equal(off[1], 4096);
  assert_int_equal(off[2], 8192);
  assert_int_equal(peak, 10240);
  verify(t, 4, 256, off, peak);
  /* Strictly better than the plain sum of 12 KiB. */
  assert_true(peak < 12288);
}

/* The smallest gap that holds a tensor wins over the first and the last.
 * In KiB: A 3 (step 0) -> 0; B 3 (steps 0-1) -> 3; C 2 (0) -> 6;
 * D 2 (0-1) -> 8; E 2 (0) -> 10; F 2 (0-1) -> 12.  At step 1 only B, D and
 * F are live, leaving gaps [0,3), [6,8) and [10,12); G 2 (step 1) takes
 * [6,8): the smallest that fits (first fit would take 0, last fit 10). */
static void test_best_gap(void **state) {
  (void)state;
  const ar_lanes_tensor t[7] = {
      {3072, 0, 0}, {3072, 0, 1}, {2048, 0, 0}, {2048, 0, 1},
      {2048, 0, 0}, {2048, 0, 1}, {2048, 1, 1},
  };
  const size_t want[7] = {0, 3072, 6144, 8192, 10240, 12288, 6144};
  size_t off[7], peak = 0;
  assert_int_equal(ar_lanes_plan_offsets(t, 7, 1024, off, &peak, NULL), AR_OK);
  verify(t, 7, 1024, off, peak);
  assert_memory_equal(off, want, sizeof want);
  assert_int_equal(peak, 14336);
}

static void test_random_lifetimes(void **state) {
  (void)state;
  enum { MAXN = 120 };
  ar_lanes_tensor t[MAXN];
  size_t off[MAXN];
  for (uint64_t seed = 0; seed < 2000; seed++) {
    ar_rng r;
    ar_rng_seed(&r, seed, 7);
    size_t n = (size_t)ar_rng_below(&r, MAXN + 1);
    int64_t steps = 1 + (int64_t)ar_rng_below(&r, 60);
    size_t align = (size_t)1 << ar_rng_below(&r, 9);
    for (size_t i = 0; i < n; i++) {
      int64_t a = (int64_t)ar_rng_below(&r, (uint64_t)steps);
      int64_t b = a + (int64_t)ar_rng_below(&r, (uint64_t)(steps - a));
      t[i].first_use = a;
      t[i].last_use = b;
      /* Mostly small, some large, a few empty. */
      uint64_t k = ar_rng_below(&r, 10);
      t[i].bytes = k == 0 ? 0 : k < 8 ? (size_t)ar_rng_below(&r, 5000)
                                       : (size_t)ar_rng_below(&r, 1 << 20);
    }
    size_t peak = 0;
    ar_err err = AR_ERR_INIT;
    ar_status st = ar_lanes_plan_offsets(t, n, align, off, &peak, &err);
    if (st != AR_OK)
      fail_msg("seed %llu: %s", (unsigned long long)seed, err.msg);
    verify(t, n, align, off, peak);
  }
}

static void test_bad_input(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  size_t off[2], peak = 7;
  ar_lanes_tensor t[2] = {{10, 3, 2}, {10, 0, 1}};
  assert_int_equal(ar_lanes_plan_offsets(t, 2, 64, off, &peak, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "tensor 0"));
  t[0].first_use = 0;
  assert_int_equal(ar_lanes_plan_offsets(t, 2, 48, off, &peak, &err), AR_INVALID);
  assert_int_equal(ar_lanes_plan_offsets(NULL, 2, 64, off, &peak, &err), AR_INVALID);
  assert_int_equal(ar_lanes_plan_offsets(t, 2, 64, off, NULL, &err), AR_INVALID);
  t[0].bytes = SIZE_MAX - 10;
  t[1].bytes = SIZE_MAX - 10;
  assert_int_equal(ar_lanes_plan_offsets(t, 2, 64, off, &peak, &err), AR_RANGE);
  assert_int_equal(ar_lanes_plan_offsets(NULL, 0, 64, NULL, &peak, &err), AR_OK);
  assert_int_equal(peak, 0);
  /* Out of memory leaves the outputs alone and reports it. */
  t[0].bytes = t[1].bytes = 100;
  t[1].first_use = 3;
  t[1].last_use = 4;
  peak = 7;
  ar_alloc_fail_after(0);
  ar_status st = ar_lanes_plan_offsets(t, 2, 64, off, &peak, &err);
  ar_alloc_fail_after(-1);
  assert_int_equal(st, AR_NOMEM);
  assert_int_equal(peak, 7);
  assert_int_equal(ar_lanes_plan_offsets(t, 2, 64, off, &peak, &err), AR_OK);
  assert_int_equal(peak, 128); /* disjoint lifetimes share the bytes */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_chain),
      cmocka_unit_test(test_best_gap),
      cmocka_unit_test(test_random_lifetimes),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
