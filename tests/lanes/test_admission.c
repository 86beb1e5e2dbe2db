/* lanes: admission control under random job mixes and hand-built cases. */
#include <stdio.h>
#include <string.h>

#include "lanes_util.h"

static const char *policies[] = {"fifo", "pack", "srtf", "fair", "priority"};

/* With a compact layout (and always right after defragmentation) a waiting
 * job must not fit: the free space is one range, so it would fit exactly
 * when P + E fit it (new lane) or P fits it and some lane holds its peak. */
static void check_no_idle_fit(const ar_lanes *l, const char *policy,
                              ar_lanes_job_id njobs) {
  ar_lanes_usage u;
  ar_lanes_usage_get(l, &u);
  size_t free_b = u.capacity - u.persistent_bytes - u.lane_bytes;
  if (strcmp(policy, "fifo") == 0) {
    if (u.admitted == 0)
      assert_int_equal(u.queued, 0);
    return;
  }
  size_t nl = ar_lanes_lane_count(l);
  for (ar_lanes_job_id id = 1; id <= njobs; id++) {
    ar_lanes_job_info ji = info(l, id);
    if (ji.state != AR_LANES_QUEUED)
      continue;
    assert_true(strstr(ji.reason, "needs") != NULL);
    int fits = ji.persistent + ji.ephemeral <= free_b;
    for (size_t k = 0; k < nl && !fits; k++) {
      ar_lanes_lane_info li;
      assert_int_equal(ar_lanes_lane_at(l, k, &li), AR_OK);
      fits = li.size >= ji.ephemeral && ji.persistent <= free_b;
    }
    if (fits)
      fail_msg("%s: job %llu waits (%s) although it fits", policy,
               (unsigned long long)id, ji.reason);
  }
}

enum { MIX_STEPS = 120 };

/* fifo's order, from the test's own record of the arrivals: a job is
 * admitted only when no job still waiting comes before it (earlier arrival,
 * or the same arrival and a lower id), whatever the sizes: a later job
 * that fits never passes an earlier one that does not yet fit.  `was` holds
 * the states before this step, for jobs 1..n_before. */
static void check_fifo_order(const ar_lanes *l, const double *arrival,
                             const ar_lanes_job_state *was, ar_lanes_job_id n_before,
                             ar_lanes_job_id n, uint64_t seed, int step) {
  for (ar_lanes_job_id id = 1; id <= n; id++) {
    bool queued_before = id > n_before || was[id - 1] == AR_LANES_QUEUED;
    if (!queued_before || info(l, id).state != AR_LANES_ADMITTED)
      continue;
    for (ar_lanes_job_id w = 1; w <= n; w++) {
      if (w == id || info(l, w).state != AR_LANES_QUEUED)
        continue;
      if (arrival[w - 1] < arrival[id - 1] ||
          (arrival[w - 1] == arrival[id - 1] && w < id))
        fail_msg("fifo, seed %llu, step %d: job %llu (arrival %g) admitted while job %llu "
                 "(arrival %g) waits", (unsigned long long)seed, step,
                 (unsigned long long)id, arrival[id - 1], (unsigned long long)w,
                 arrival[w - 1]);
    }
  }
}

/* Random submit/finish/cancel/pick/iteration/defrag sequences. */
static void run_mix(const char *policy, uint64_t seed) {
  ar_rng r;
  ar_rng_seed3(&r, seed, 4, 0);
  size_t cap = (64 + ar_rng_below(&r, 960)) * 4096 + ar_rng_below(&r, 4096);
  ar_lanes *l = make(policy, cap);
  ar_lanes_job_id n = 0;
  char name[32];
  const bool fifo = strcmp(policy, "fifo") == 0;
  double arrival[MIX_STEPS];
  ar_lanes_job_state was[MIX_STEPS];
  for (int step = 0; step < MIX_STEPS; step++) {
    const ar_lanes_job_id n_before = n;
    for (ar_lanes_job_id id = 1; id <= n; id++)
      was[id - 1] = info(l, id).state;
    uint64_t op = ar_rng_below(&r, 100);
    if (op < 35 || n == 0) {
      /* Sizes up to half the arena, unaligned, some tiny. */
      size_t P = 1 + ar_rng_below(&r, cap / (ar_rng_below(&r, 2) ? 3 : 12));
      size_t E = 1 + ar_rng_below(&r, cap / (ar_rng_below(&r, 2) ? 3 : 12));
      snprintf(name, sizeof name, "j%d", step);
      ar_lanes_job_desc d = AR_LANES_JOB_DESC_INIT;
      d.name = name;
      d.persistent = P;
      d.ephemeral = E;
      d.iterations = 1 + ar_rng_below(&r, 5);
      d.priority = (int)ar_rng_below(&r, 3);
      d.arrival = (double)ar_rng_below(&r, 50);
      ar_lanes_job_id id;
      assert_int_equal(ar_lanes_submit(l, &d, &id), AR_OK);
      assert_int_equal(id, ++n);
      arrival[id - 1] = d.arrival;
    } else if (op < 55) { /* finish or cancel a random job */
      ar_lanes_job_id id = 1 + ar_rng_below(&r, n);
      ar_lanes_job_info ji = info(l, id);
      ar_status s = ar_rng_below(&r, 2) ? ar_lanes_finish(l, id)
                                        : ar_lanes_cancel(l, id);
      if (ji.running || ji.state > AR_LANES_ADMITTED)
        assert_int_equal(s, AR_STATE);
      else if (ji.state == AR_LANES_QUEUED && s != AR_OK)
        assert_int_equal(s, AR_STATE); /* finish of a queued job */
      else
        assert_int_equal(s, AR_OK);
    } else if (op < 75) { /* start an iteration in a random lane */
      size_t nl = ar_lanes_lane_count(l);
      if (nl) {
        ar_lanes_lane_info li;
        assert_int_equal(ar_lanes_lane_at(l, ar_rng_below(&r, nl), &li), AR_OK);
        ar_lanes_job_id j;
        ar_status s = ar_lanes_pick(l, li.id, &j);
        if (li.running)
          assert_int_equal(s, AR_STATE);
        else if (s == AR_OK)
          assert_int_equal(info(l, j).lane, li.id);
      }
    } else if (op < 92) { /* end every running iteration */
      for (ar_lanes_job_id id = 1; id <= n; id++)
        if (info(l, id).running)
          assert_int_equal(
              ar_lanes_iteration_done(l, id, 0.1 + 0.1 * ar_rng_below(&r, 9)),
              AR_OK);
    } else { /* an iteration boundary: defragment */
      for (ar_lanes_job_id id = 1; id <= n; id++)
        if (info(l, id).running)
          assert_int_equal(ar_lanes_iteration_done(l, id, 0.5), AR_OK);
      assert_int_equal(ar_lanes_defrag(l, NULL, NULL), AR_OK);
      check_compact(l, n);
    }
    check_ok(l);
    check_safety(l, n);
    ar_lanes_usage u;
    ar_lanes_usage_get(l, &u);
    if (fifo) {
      assert_true(u.admitted <= 1);
      check_fifo_order(l, arrival, was, n_before, n, seed, step);
    }
    if (!ar_lanes_fragmented(l))
      check_no_idle_fit(l, policy, n);
  }
  ar_lanes_destroy(l);
}

static void test_random_mixes(void **state) {
  (void)state;
  for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++)
    for (uint64_t seed = 0; seed < 200; seed++)
      run_mix(policies[p], seed);
}

static void test_waiting_admitted_when_space_frees(void **state) {
  (void)state;
  ar_lanes *l = make("pack", 10 * MiB);
  ar_lanes_job_id a = submit(l, "a", 4 * MiB, 4 * MiB, 10, 0);
  ar_lanes_job_id b = submit(l, "b", 4 * MiB, 4 * MiB, 10, 1);
  assert_int_equal(info(l, a).state, AR_LANES_ADMITTED);
  assert_int_equal(info(l, b).state, AR_LANES_QUEUED);
  assert_string_equal(info(l, b).reason,
                      "needs 4.0 MiB persistent (its 4.0 MiB peak fits lane 1); "
                      "2.0 MiB free; waiting for a job to finish");
  assert_int_equal(ar_lanes_finish(l, a), AR_OK);
  assert_int_equal(info(l, b).state, AR_LANES_ADMITTED);
  assert_string_equal(info(l, b).reason, "");
  check_ok(l);
  ar_lanes_destroy(l);
}

static void test_reason_numbers(void **state) {
  (void)state;
  ar_lanes *l = make("pack", 6 * GiB);
  submit(l, "a", 3 * GiB, 1 * GiB, 10, 0);
  ar_lanes_job_id b = submit(l, "b", 3 * GiB + GiB / 10, 3 * GiB / 2, 10, 1);
  assert_string_equal(info(l, b).reason,
                      "needs 3.1 GiB persistent + 1.5 GiB lane; 2.0 GiB free; "
                      "waiting for a job to finish");
  ar_lanes_destroy(l);
}

/* Holes left by a departed job: the waiting job fits in sum but not in one
 * range; it says so, and defragmentation admits it. */
static void test_fragmented_then_defrag(void **state) {
  (void)state;
  ar_lanes *l = make("pack", 10 * MiB);
  submit(l, "a", MiB, MiB, 5, 0);
  ar_lanes_job_id b = submit(l, "b", MiB, MiB, 5, 1);
  submit(l, "c", MiB, MiB, 5, 2);
  assert_int_equal(ar_lanes_finish(l, b), AR_OK);
  assert_true(ar_lanes_fragmented(l));
  ar_lanes_job_id d = submit(l, "d", 3 * MiB, 2 * MiB, 5, 3);
  assert_int_equal(info(l, d).state, AR_LANES_QUEUED);
  assert_string_equal(info(l, d).reason,
                      "needs 3.0 MiB persistent + 2.0 MiB lane; 6.0 MiB free; "
                      "free space is split by departed jobs; waiting for "
                      "defragmentation at the next iteration boundary");
  assert_int_equal(ar_lanes_defrag(l, NULL, NULL), AR_OK);
  assert_int_equal(info(l, d).state, AR_LANES_ADMITTED);
  check_compact(l, 4);
  check_ok(l);
  ar_lanes_destroy(l);
}

/* pack: a new lane while memory allows, then the smallest lane that holds
 * the job's peak (best fit). */
static void test_pack_best_fit(void **state) {
  (void)state;
  ar_lanes *l = make("pack", 10 * MiB);
  ar_lanes_job_id a = submit(l, "a", MiB, 3 * MiB, 5, 0);
  ar_lanes_job_id b = submit(l, "b", MiB, 2 * MiB, 5, 1);
  ar_lanes_job_id c = submit(l, "c", MiB, MiB, 5, 2);
  assert_int_equal(ar_lanes_lane_count(l), 3);
  ar_lanes_job_id d = submit(l, "d", MiB / 2, 3 * MiB / 2, 5, 3);
  assert_int_equal(info(l, d).state, AR_LANES_ADMITTED);
  assert_int_equal(info(l, d).lane, info(l, b).lane);
  ar_lanes_job_id e = submit(l, "e", MiB / 4, MiB / 2, 5, 4);
  assert_int_equal(info(l, e).lane, info(l, c).lane);
  ar_lanes_job_id f = submit(l, "f", MiB / 8, 4 * MiB, 5, 5);
  assert_int_equal(info(l, f).state, AR_LANES_QUEUED);
  assert_int_equal(ar_lanes_lane_count(l), 3);
  /* The lane of 'a' dies with it; its 3 MiB become free for 'f'. */
  assert_int_equal(ar_lanes_finish(l, a), AR_OK);
  assert_int_equal(ar_lanes_lane_count(l), 2);
  assert_int_equal(ar_lanes_defrag(l, NULL, NULL), AR_OK);
  assert_int_equal(info(l, f).state, AR_LANES_ADMITTED);
  check_ok(l);
  ar_lanes_destroy(l);
}

/* srtf, fair, priority time-share first: equal peaks make one lane. */
static void test_shared_first(void **state) {
  (void)state;
  const char *pol[] = {"srtf", "fair", "priority"};
  for (int p = 0; p < 3; p++) {
    ar_lanes *l = make(pol[p], 100 * MiB);
    for (int i = 0; i < 5; i++)
      submit(l, "x", MiB, 8 * MiB, 5, i);
    assert_int_equal(ar_lanes_lane_count(l), 1);
    submit(l, "big", MiB, 9 * MiB, 5, 9);
    assert_int_equal(ar_lanes_lane_count(l), 2);
    ar_lanes_destroy(l);
  }
}

static void test_fifo_one_at_a_time_in_arrival_order(void **state) {
  (void)state;
  ar_lanes *l = make("fifo", 100 * MiB);
  ar_lanes_job_id a = submit(l, "a", MiB, MiB, 5, 0);
  ar_lanes_job_id c = submit(l, "c", MiB, MiB, 5, 5);
  ar_lanes_job_id b = submit(l, "b", MiB, MiB, 5, 3);
  assert_int_equal(info(l, a).state, AR_LANES_ADMITTED);
  assert_int_equal(info(l, b).state, AR_LANES_QUEUED);
  assert_string_equal(info(l, b).reason,
                      "policy fifo runs 1 job(s) at a time; waiting for 'a' "
                      "to finish");
  assert_int_equal(ar_lanes_finish(l, a), AR_OK);
  assert_int_equal(info(l, b).state, AR_LANES_ADMITTED);
  assert_int_equal(info(l, c).state, AR_LANES_QUEUED);
  ar_lanes_destroy(l);
}

/* fifo never lets a later job pass: submitted out of arrival order, with
 * equal arrivals (then by submission) and a large job at the head that does
 * not fit beside the running one while the small ones behind it would, the
 * jobs are admitted exactly in arrival order.  The handle keeps its waiting
 * jobs in no particular order (a departure moves the last into its slot),
 * so taking them as stored would pass this order's second step. */
static void test_fifo_never_overtakes(void **state) {
  (void)state;
  ar_lanes *l = make("fifo", 100 * MiB);
  const ar_lanes_job_id a = submit(l, "a", MiB, MiB, 5, 0);
  const ar_lanes_job_id e = submit(l, "e", MiB, MiB, 5, 9);
  const ar_lanes_job_id c = submit(l, "c", MiB, MiB, 5, 5);
  const ar_lanes_job_id d = submit(l, "d", MiB, MiB, 5, 5);
  const ar_lanes_job_id b = submit(l, "b", 80 * MiB, 19 * MiB, 5, 3);
  const ar_lanes_job_id order[] = {a, b, c, d, e};
  const char *names = "abcde";
  for (size_t k = 0; k < 5; k++) {
    for (size_t i = 0; i < 5; i++) {
      ar_lanes_job_state want =
          i < k ? AR_LANES_FINISHED : i == k ? AR_LANES_ADMITTED : AR_LANES_QUEUED;
      if (info(l, order[i]).state != want)
        fail_msg("after %zu job(s) finished, job %c is in state %d, want %d", k, names[i],
                 (int)info(l, order[i]).state, (int)want);
    }
    check_ok(l);
    assert_int_equal(ar_lanes_finish(l, order[k]), AR_OK);
  }
  ar_lanes_destroy(l);
}

/* ar_lanes_fits_alone answers, without a handle, what submitting the job
 * to a fresh handle of the same options answers; at the edges (exactly the
 * capacity, one byte over, sizes rounded to the alignment) and at random,
 * with capacities that are not multiples of the alignment. */
static void test_fits_alone_matches_submit(void **state) {
  (void)state;
  ar_rng r;
  ar_rng_seed(&r, 17, 3);
  for (int i = 0; i < 2000; i++) {
    ar_lanes_opts o = AR_LANES_OPTS_INIT;
    o.capacity = 256 + (size_t)ar_rng_below(&r, 64 * 1024);
    size_t P, E;
    if (i < 3) { /* exactly full; one byte over; P alone over */
      o.capacity = 4096;
      P = 1024;
      E = i == 0 ? 3072 : i == 1 ? 3073 : 1;
      if (i == 2)
        P = 4097;
    } else {
      P = (size_t)ar_rng_below(&r, o.capacity + 512);
      E = (size_t)ar_rng_below(&r, o.capacity + 512);
    }
    ar_lanes *l = NULL;
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_lanes_create(&o, &l, &err), AR_OK);
    ar_lanes_job_desc d = AR_LANES_JOB_DESC_INIT;
    d.persistent = P;
    d.ephemeral = E;
    ar_lanes_job_id id = 0;
    bool admitted = ar_lanes_submit(l, &d, &id) == AR_OK;
    if (admitted != ar_lanes_fits_alone(&o, P, E))
      fail_msg("capacity %zu, P %zu, E %zu: submit %d, fits_alone %d", o.capacity, P, E,
               admitted, !admitted);
    if (i == 0)
      assert_true(admitted);
    if (i == 1 || i == 2)
      assert_false(admitted);
    ar_lanes_destroy(l);
  }
  ar_lanes_opts bad = AR_LANES_OPTS_INIT;
  bad.capacity = 1 << 20;
  bad.align = 100;
  assert_false(ar_lanes_fits_alone(&bad, 1, 1));
}

static void test_bad_input(void **state) {
  (void)state;
  ar_lanes_opts o = AR_LANES_OPTS_INIT;
  ar_lanes *l = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lanes_create(&o, &l, &err), AR_INVALID); /* capacity 0 */
  o.capacity = MiB;
  o.policy = "lottery";
  assert_int_equal(ar_lanes_create(&o, &l, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "fifo, pack, srtf, fair, priority"));
  o.policy = "pack";
  o.align = 100;
  assert_int_equal(ar_lanes_create(&o, &l, &err), AR_INVALID);
  assert_null(l);
  l = make("pack", 10 * MiB);
  ar_lanes_job_desc d = AR_LANES_JOB_DESC_INIT;
  d.name = "huge";
  d.persistent = 8 * MiB;
  d.ephemeral = 3 * MiB;
  ar_lanes_job_id id = 0;
  assert_int_equal(ar_lanes_submit(l, &d, &id), AR_INVALID);
  assert_non_null(strstr(ar_lanes_errmsg(l), "raise runtime.memory"));
  d.persistent = MiB;
  d.iterations = 0;
  assert_int_equal(ar_lanes_submit(l, &d, &id), AR_INVALID);
  assert_int_equal(ar_lanes_finish(l, 42), AR_NOTFOUND);
  ar_lanes_destroy(l);
  ar_lanes_destroy(NULL);
}

/* Out-of-memory on the host is a status, never a crash or a leak. */
static void test_oom(void **state) {
  (void)state;
  for (long k = 0; k < 12; k++) {
    ar_lanes_opts o = AR_LANES_OPTS_INIT;
    o.capacity = 100 * MiB;
    ar_lanes *l = NULL;
    ar_alloc_fail_after(k);
    ar_status s = ar_lanes_create(&o, &l, NULL);
    for (int i = 0; s == AR_OK && i < 40; i++) {
      ar_lanes_job_desc d = AR_LANES_JOB_DESC_INIT;
      d.persistent = d.ephemeral = MiB;
      ar_lanes_job_id id;
      s = ar_lanes_submit(l, &d, &id);
    }
    ar_alloc_fail_after(-1);
    assert_true(s == AR_OK || s == AR_NOMEM);
    if (l)
      check_ok(l);
    ar_lanes_destroy(l);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_mixes),
      cmocka_unit_test(test_waiting_admitted_when_space_frees),
      cmocka_unit_test(test_reason_numbers),
      cmocka_unit_test(test_fragmented_then_defrag),
      cmocka_unit_test(test_pack_best_fit),
      cmocka_unit_test(test_shared_first),
      cmocka_unit_test(test_fifo_one_at_a_time_in_arrival_order),
      cmocka_unit_test(test_fifo_never_overtakes),
      cmocka_unit_test(test_fits_alone_matches_submit),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_oom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
