/* lanes: the iteration scheduler's pick orders under each policy. */
#include <math.h>
#include <string.h>

#include "lanes_util.h"

/* Runs one iteration in the job's lane: pick, then done with `secs`. */
static ar_lanes_job_id step(ar_lanes *l, ar_lanes_lane_id lane, double secs) {
  ar_lanes_job_id j = 0;
  assert_int_equal(ar_lanes_pick(l, lane, &j), AR_OK);
  assert_int_equal(ar_lanes_iteration_done(l, j, secs), AR_OK);
  return j;
}

/* srtf against a schedule computed by hand (default iteration time 1 s):
 *   A: 3 iterations of 0.2 s, B: 2 of 2.0 s, C: 4 of 0.5 s, all in one lane;
 *   D: 1 iteration of 3.0 s, submitted after the first iteration.
 *   pick 1: remaining A 3, B 2, C 4          -> B (B now 1 x 2.0 = 2)
 *   pick 2: A 3, B 2, C 4, D 1               -> D (preempts B), D leaves
 *   pick 3: A 3, B 2, C 4                    -> B, B leaves
 *   pick 4: A 3, C 4                         -> A (A now 2 x 0.2 = 0.4)
 *   picks 5, 6: A 0.4 then 0.2 < C 4         -> A, A; A leaves
 *   picks 7-10: C.                                                       */
static void test_srtf_reference(void **state) {
  (void)state;
  ar_lanes *l = make("srtf", 100 * MiB);
  ar_lanes_job_id A = submit(l, "A", MiB, 8 * MiB, 3, 0);
  ar_lanes_job_id B = submit(l, "B", MiB, 8 * MiB, 2, 1);
  ar_lanes_job_id C = submit(l, "C", MiB, 8 * MiB, 4, 2);
  ar_lanes_lane_id lane = info(l, A).lane;
  assert_int_equal(info(l, C).lane, lane);
  const double secs[5] = {0, 0.2, 2.0, 0.5, 3.0}; /* by id */
  ar_lanes_job_id order[10], D = 0;
  for (int k = 0; k < 10; k++) {
    ar_lanes_job_id j = 0;
    assert_int_equal(ar_lanes_pick(l, lane, &j), AR_OK);
    order[k] = j;
    assert_int_equal(ar_lanes_iteration_done(l, j, secs[j]), AR_OK);
    if (k == 0) {
      D = submit(l, "D", MiB, 8 * MiB, 1, 3);
      assert_int_equal(info(l, D).lane, lane);
    }
    ar_lanes_job_info ji = info(l, j);
    if (ji.iterations_done == ji.iterations)
      assert_int_equal(ar_lanes_finish(l, j), AR_OK);
    check_ok(l);
  }
  const ar_lanes_job_id want[10] = {B, D, B, A, A, A, C, C, C, C};
  assert_memory_equal(order, want, sizeof want);
  assert_true(fabs(info(l, C).used_s - 2.0) < 1e-12);
  ar_lanes_destroy(l);
}

/* srtf against a reference simulator over random mixes: jobs of random
 * lengths and per-iteration times (binary fractions, so both sides compute
 * the same doubles) share one lane and arrive at random picks; at every
 * pick the reference takes a job still being probed (fewer than three
 * measured iterations) before one that is not, then the least (iterations
 * left x measured time, or the 1 s default before a measurement), ties by
 * arrival then id.  Every pick must agree, and every job must finish. */
static void test_srtf_random_reference(void **state) {
  (void)state;
  static const double times[4] = {0.25, 0.5, 1.0, 2.0};
  for (uint64_t seed = 0; seed < 1000; seed++) {
    ar_rng r;
    ar_rng_seed3(&r, seed, 11, 0);
    ar_lanes *l = make("srtf", 1 * GiB);
    enum { MAXJ = 10 };
    uint64_t iters[MAXJ + 1], done[MAXJ + 1] = {0}, measured[MAXJ + 1] = {0};
    double used[MAXJ + 1] = {0}, t[MAXJ + 1];
    int n = 0, left = 0;
    size_t target = 2 + ar_rng_below(&r, MAXJ - 1);
    ar_lanes_lane_id lane = 0;
    for (int pick = 0; left > 0 || n < (int)target; pick++) {
      /* Arrivals: the first job at once, then at random picks. */
      while (n < (int)target && (n == 0 || left == 0 || ar_rng_below(&r, 4) == 0)) {
        n++;
        iters[n] = 1 + ar_rng_below(&r, 12);
        t[n] = times[ar_rng_below(&r, 4)];
        ar_lanes_job_id id = submit(l, "j", MiB, 8 * MiB, iters[n], (double)n);
        assert_int_equal(id, (ar_lanes_job_id)n);
        if (left == 0) /* the lane went with its last job */
          lane = 0;
        if (!lane)
          lane = info(l, id).lane;
        assert_int_equal(info(l, id).lane, lane);
        left++;
      }
      int want = 0, want_probe = 0;
      double best = 0;
      for (int k = 1; k <= n; k++) {
        if (done[k] >= iters[k])
          continue;
        double mean = measured[k] ? used[k] / (double)measured[k] : 1.0;
        double rem = (double)(iters[k] - done[k]) * mean;
        int probe = measured[k] < 3;
        if (!want || probe > want_probe || (probe == want_probe && rem < best)) {
          want = k; /* ties: the earlier (lower) id stays */
          best = rem;
          want_probe = probe;
        }
      }
      ar_lanes_job_id got = 0;
      assert_int_equal(ar_lanes_pick(l, lane, &got), AR_OK);
      if ((int)got != want)
        fail_msg("seed %llu pick %d: srtf ran job %llu, the reference job %d",
                 (unsigned long long)seed, pick, (unsigned long long)got, want);
      assert_int_equal(ar_lanes_iteration_done(l, got, t[want]), AR_OK);
      done[want]++;
      measured[want]++;
      used[want] += t[want];
      if (done[want] == iters[want]) {
        assert_int_equal(ar_lanes_finish(l, got), AR_OK);
        left--;
      }
    }
    check_ok(l);
    ar_lanes_destroy(l);
  }
}

/* srtf on a shared machine: the newcomer B (8 iterations of 0.01 s) loses
 * the processor during its first iteration, measured 1 s.  A mean would
 * put B at 7 s left against A's 0.4 s and run all of A first; B's next two
 * probe iterations outvote the outlier (median 0.01 s), so B runs to its
 * end before A resumes.  Its estimate keeps the median of the last five. */
static void test_srtf_outlier(void **state) {
  (void)state;
  ar_lanes *l = make("srtf", 100 * MiB);
  ar_lanes_job_id A = submit(l, "A", MiB, 8 * MiB, 24, 0);
  ar_lanes_lane_id lane = info(l, A).lane;
  for (int k = 0; k < 4; k++)
    assert_int_equal(step(l, lane, 0.02), A); /* A: 20 x 0.02 = 0.4 s left */
  ar_lanes_job_id B = submit(l, "B", MiB, 8 * MiB, 8, 1);
  assert_int_equal(step(l, lane, 1.0), B);  /* probe 1: the outlier */
  assert_true(fabs(info(l, B).remaining_s - 7.0) < 1e-12);
  assert_int_equal(step(l, lane, 0.01), B); /* probe 2 */
  assert_true(fabs(info(l, B).remaining_s - 6 * 0.505) < 1e-12);
  assert_int_equal(step(l, lane, 0.01), B); /* probe 3: median 0.01 */
  assert_true(fabs(info(l, B).remaining_s - 5 * 0.01) < 1e-12);
  for (int k = 0; k < 5; k++)
    assert_int_equal(step(l, lane, 0.01), B);
  assert_int_equal(ar_lanes_finish(l, B), AR_OK);
  assert_int_equal(step(l, lane, 0.02), A);
  /* The window slides: after four slow iterations they are the majority
   * of A's last five, and A's estimate is theirs. */
  for (int k = 0; k < 4; k++)
    step(l, lane, 0.5);
  assert_true(fabs(info(l, A).remaining_s - 15 * 0.5) < 1e-12);
  ar_lanes_destroy(l);
}

/* fair: with iteration times in Salus's 0.1-0.9 s range, every active job
 * runs within a bounded number of picks, and used times stay within one
 * iteration of each other; a newcomer does not monopolise the lane. */
static void test_fair_no_starvation(void **state) {
  (void)state;
  for (uint64_t seed = 0; seed < 300; seed++) {
    ar_rng r;
    ar_rng_seed3(&r, seed, 7, 0);
    ar_lanes *l = make("fair", 1 * GiB);
    enum { MAXJ = 8 };
    double t[MAXJ + 1];
    uint64_t last[MAXJ + 1] = {0};
    size_t k0 = 2 + ar_rng_below(&r, 4);
    ar_lanes_job_id n = 0;
    for (size_t i = 0; i < k0; i++) {
      n = submit(l, "f", MiB, 16 * MiB, 1000000, (double)i);
      t[n] = 0.1 + 0.1 * (double)ar_rng_below(&r, 9);
    }
    ar_lanes_lane_id lane = info(l, 1).lane;
    uint64_t pick = 0;
    for (int round = 0; round < 1500; round++) {
      if (n < MAXJ && ar_rng_below(&r, 200) == 0) { /* a late arrival */
        n = submit(l, "late", MiB, 16 * MiB, 1000000, 100.0 + round);
        assert_int_equal(info(l, n).lane, lane);
        t[n] = 0.1 + 0.1 * (double)ar_rng_below(&r, 9);
        last[n] = pick;
      }
      ar_lanes_job_id j = 0;
      assert_int_equal(ar_lanes_pick(l, lane, &j), AR_OK);
      assert_int_equal(ar_lanes_iteration_done(l, j, t[j]), AR_OK);
      last[j] = ++pick;
      /* Each other job can run at most 0.9 / 0.1 + 1 times before its
       * used time passes that of a job left waiting. */
      uint64_t bound = (uint64_t)(n - 1) * 11 + 1;
      for (ar_lanes_job_id i = 1; i <= n; i++)
        if (pick - last[i] > bound)
          fail_msg("seed %llu: job %llu starved for %llu picks (bound %llu)",
                   (unsigned long long)seed, (unsigned long long)i,
                   (unsigned long long)(pick - last[i]),
                   (unsigned long long)bound);
    }
    double lo = 1e300, hi = 0;
    for (ar_lanes_job_id i = 1; i <= k0; i++) {
      double u = info(l, i).used_s;
      lo = u < lo ? u : lo;
      hi = u > hi ? u : hi;
    }
    assert_true(hi - lo <= 0.9 + 1e-9);
    check_ok(l);
    ar_lanes_destroy(l);
  }
}

/* pack: jobs sharing a lane take turns round-robin. */
static void test_pack_round_robin(void **state) {
  (void)state;
  /* 3 MiB of persistent + one 6 MiB lane fill the 10 MiB arena, so the
   * second and third jobs share the first one's lane. */
  ar_lanes *l = make("pack", 10 * MiB);
  ar_lanes_job_id a = submit(l, "a", MiB, 6 * MiB, 4, 0);
  ar_lanes_job_id b = submit(l, "b", MiB, 5 * MiB, 4, 1);
  ar_lanes_job_id c = submit(l, "c", MiB, 6 * MiB, 4, 2);
  ar_lanes_lane_id lane = info(l, a).lane;
  assert_int_equal(info(l, b).lane, lane);
  assert_int_equal(info(l, c).lane, lane);
  ar_lanes_job_id order[6];
  for (int k = 0; k < 6; k++)
    order[k] = step(l, lane, 0.3);
  const ar_lanes_job_id want[6] = {a, b, c, a, b, c};
  assert_memory_equal(order, want, sizeof want);
  ar_lanes_destroy(l);
}

/* priority: highest first, ties by arrival; strict. */
static void test_priority_order(void **state) {
  (void)state;
  ar_lanes *l = make("priority", 100 * MiB);
  ar_lanes_job_desc d = AR_LANES_JOB_DESC_INIT;
  d.persistent = MiB;
  d.ephemeral = 8 * MiB;
  d.iterations = 2;
  const int prio[4] = {1, 3, 2, 3};
  ar_lanes_job_id id[4];
  for (int i = 0; i < 4; i++) {
    d.priority = prio[i];
    d.arrival = i;
    assert_int_equal(ar_lanes_submit(l, &d, &id[i]), AR_OK);
  }
  ar_lanes_lane_id lane = info(l, id[0]).lane;
  ar_lanes_job_id order[8];
  for (int k = 0; k < 8; k++)
    order[k] = step(l, lane, 0.5);
  const ar_lanes_job_id want[8] = {id[1], id[1], id[3], id[3],
                                   id[2], id[2], id[0], id[0]};
  assert_memory_equal(order, want, sizeof want);
  ar_lanes_job_id j;
  assert_int_equal(ar_lanes_pick(l, lane, &j), AR_NOTFOUND); /* all done */
  ar_lanes_destroy(l);
}

/* One iteration per lane at a time; misuse is a status. */
static void test_pick_misuse(void **state) {
  (void)state;
  ar_lanes *l = make("pack", 100 * MiB);
  ar_lanes_job_id a = submit(l, "a", MiB, MiB, 3, 0);
  ar_lanes_lane_id lane = info(l, a).lane;
  ar_lanes_job_id j;
  assert_int_equal(ar_lanes_pick(l, lane, &j), AR_OK);
  assert_int_equal(ar_lanes_pick(l, lane, &j), AR_STATE);
  assert_int_equal(ar_lanes_finish(l, a), AR_STATE);
  assert_int_equal(ar_lanes_cancel(l, a), AR_STATE);
  assert_int_equal(ar_lanes_defrag(l, NULL, NULL), AR_STATE);
  assert_int_equal(ar_lanes_iteration_done(l, a, -1.0), AR_INVALID);
  assert_int_equal(ar_lanes_iteration_done(l, a, NAN), AR_INVALID);
  assert_int_equal(ar_lanes_iteration_done(l, a, 0.25), AR_OK);
  assert_int_equal(ar_lanes_iteration_done(l, a, 0.25), AR_STATE);
  assert_int_equal(ar_lanes_pick(l, 999, &j), AR_NOTFOUND);
  /* Remaining time: 2 iterations left x 0.25 s measured. */
  assert_true(fabs(info(l, a).remaining_s - 0.5) < 1e-12);
  assert_int_equal(ar_lanes_cancel(l, a), AR_OK);
  assert_int_equal(ar_lanes_lane_count(l), 0);
  assert_int_equal(ar_lanes_pick(l, lane, &j), AR_NOTFOUND);
  ar_lanes_destroy(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_srtf_reference),
      cmocka_unit_test(test_srtf_random_reference),
      cmocka_unit_test(test_srtf_outlier),
      cmocka_unit_test(test_fair_no_starvation),
      cmocka_unit_test(test_pack_round_robin),
      cmocka_unit_test(test_priority_order),
      cmocka_unit_test(test_pick_misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
