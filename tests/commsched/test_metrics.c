/* commsched: per-iteration metrics on hand examples. */
#include <math.h>

#include "cs_util.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-12)

/* comm [0, 4] and [2, 6] overlap: N = 6.  comp [3, 5] and [6, 10]: C = 6.
 * makespan 10, U_min 6, U_max 12, E = (12 - 10) / (12 - 6) = 1/3, the most
 * an order could gain (12 - 6) / 6 = 1. */
static void test_hand_example(void **state) {
  (void)state;
  ar_commsched_span comm[] = {{2, 6}, {0, 4}}, comp[] = {{6, 10}, {3, 5}};
  ar_commsched_metrics m;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_metrics_compute(comm, 2, comp, 2, &m, &err),
                   AR_OK);
  NEAR(m.makespan_s, 10);
  NEAR(m.comm_busy_s, 6);
  NEAR(m.comp_busy_s, 6);
  NEAR(m.u_min_s, 6);
  NEAR(m.u_max_s, 12);
  assert_true(m.efficiency_defined);
  NEAR(m.efficiency, 1.0 / 3.0);
  NEAR(m.max_speedup, 1.0);
  /* Inputs are not reordered. */
  assert_true(comm[0].start == 2 && comp[0].start == 6);
}

static void test_edges(void **state) {
  (void)state;
  ar_commsched_metrics m;
  ar_err err = AR_ERR_INIT;
  /* Only communication: U_max == U_min, E undefined. */
  ar_commsched_span comm[] = {{0, 1}};
  assert_int_equal(ar_commsched_metrics_compute(comm, 1, NULL, 0, &m, &err),
                   AR_OK);
  assert_false(m.efficiency_defined);
  assert_true(isnan(m.efficiency));
  /* Idle gap: makespan 6 > U_max 2, raw E = -4, clamped to 0. */
  ar_commsched_span comp[] = {{5, 6}};
  assert_int_equal(ar_commsched_metrics_compute(comm, 1, comp, 1, &m, &err),
                   AR_OK);
  NEAR(m.efficiency_raw, -4);
  NEAR(m.efficiency, 0);
  /* Perfect overlap of equal sides: E = 1. */
  ar_commsched_span comp2[] = {{0, 1}};
  assert_int_equal(ar_commsched_metrics_compute(comm, 1, comp2, 1, &m, &err),
                   AR_OK);
  NEAR(m.efficiency, 1);
  ar_commsched_span bad[] = {{3, 2}};
  assert_int_equal(ar_commsched_metrics_compute(bad, 1, NULL, 0, &m, &err),
                   AR_INVALID);
  assert_int_equal(ar_commsched_metrics_compute(NULL, 0, NULL, 0, &m, &err),
                   AR_INVALID);
  double fin[] = {3, 5, 4};
  NEAR(ar_commsched_straggler_spread(fin, 3), 2);
  NEAR(ar_commsched_straggler_spread(fin, 1), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_example),
      cmocka_unit_test(test_edges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
