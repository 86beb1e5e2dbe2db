/*
 * The pace that `accelrt run`'s progress shows (ar_progress_pace): the
 * samples/s and the ETA come from the iterations and samples between two
 * marks, so a resumed run, whose first mark here is far into the run, is
 * measured by what this process did, not by the whole run's count over
 * this process's time.
 */
#include "accelrt/runtime.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static void pace(ar_progress_mark from, ar_progress_mark now, int64_t total, double *rate,
                 double *eta) {
  ar_progress_pace(&from, &now, total, rate, eta);
}

/* A fresh run: 100 iterations of 64 samples in 10 s, 300 to go. */
static void test_fresh(void **state) {
  (void)state;
  double rate, eta;
  pace((ar_progress_mark){5.0, 0, 0}, (ar_progress_mark){15.0, 100, 6400}, 400, &rate, &eta);
  assert_float_equal(rate, 640.0, 1e-9);
  assert_float_equal(eta, 30.0, 1e-9);
}

/* The brief's case: resumed at iteration 9000 of 14040 (576,000 samples
 * before), this process did 56 iterations of 64 in 6.07 s.  The run's
 * whole count over this process's time would give 9056/14040 done and
 * about 135 samples/s; this process's pace is 590 samples/s, 4984
 * iterations left at 56 a 6.07 s: 540 s. */
static void test_resumed(void **state) {
  (void)state;
  double rate, eta;
  ar_progress_mark first = {1000.0, 9000, 576000};
  ar_progress_mark now = {1006.075, 9056, 576000 + 56 * 64};
  pace(first, now, 14040, &rate, &eta);
  assert_float_equal(rate, 56.0 * 64 / 6.075, 1e-9);
  assert_float_equal(eta, (14040.0 - 9056.0) * 6.075 / 56.0, 1e-9);
  assert_true(rate > 589 && rate < 591);
  assert_true(eta > 540 && eta < 541);
}

/* Unknown: the first update itself (no time, no iteration since), a clock
 * that went backwards, no total; and a run at or past its end has 0 left. */
static void test_unknown_and_end(void **state) {
  (void)state;
  double rate, eta;
  ar_progress_mark m = {3.0, 7, 70};
  pace(m, m, 100, &rate, &eta);
  assert_true(rate < 0 && eta < 0);
  pace(m, (ar_progress_mark){2.0, 9, 90}, 100, &rate, &eta);
  assert_true(rate < 0 && eta < 0);
  pace(m, (ar_progress_mark){4.0, 7, 70}, 100, &rate, &eta); /* time, no iteration */
  assert_true(rate < 0 && eta < 0);
  pace(m, (ar_progress_mark){5.0, 9, 90}, 0, &rate, &eta);
  assert_float_equal(rate, 10.0, 1e-9);
  assert_true(eta < 0);
  pace(m, (ar_progress_mark){5.0, 100, 1000}, 100, &rate, &eta);
  assert_float_equal(eta, 0.0, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fresh),
      cmocka_unit_test(test_resumed),
      cmocka_unit_test(test_unknown_and_end),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
