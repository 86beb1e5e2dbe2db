/* commsched: the time oracle (minimum over runs, queued transfers charged
 * from when they could start). */
#include <math.h>

#include "cs_util.h"

/* r0, r1 on channel 0, r2 on channel 1, compute c.
 * Run 1: r0 [0, 2] -> 2; r1 [0, 5] started with r0 but queued behind it
 *        until 2 -> 5 - 2 = 3; r2 [0, 4] alone on its channel -> 4;
 *        c [5, 6] -> 1.
 * Run 2: r0 [10, 11] -> 1; r1 [10.5, 14] waits for r0 until 11 -> 3;
 *        r2 not traced; c [0, 0.5] -> 0.5.
 * Minimum: r0 1, r1 3, r2 4 (one sample), c 0.5. */
static void test_min_and_queueing(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op r0 = recv_op(g, "r0", 0, 9.0);
  ar_commsched_op r1 = recv_op(g, "r1", 0, 9.0);
  ar_commsched_op r2 = recv_op(g, "r2", 1, 9.0);
  ar_commsched_op d[] = {r0, r1, r2};
  ar_commsched_op c = compute_op(g, "c", 9.0, 3, d);
  ar_commsched_op idle = compute_op(g, "idle", 7.0, 0, NULL);
  seal(g);
  ar_commsched_oracle *o = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_oracle_create(g, &o, &err), AR_OK);
  double s1[5], e1[5], s2[5], e2[5];
  s1[r0] = 0, e1[r0] = 2, s1[r1] = 0, e1[r1] = 5, s1[r2] = 0, e1[r2] = 4;
  s1[c] = 5, e1[c] = 6, s1[idle] = NAN, e1[idle] = NAN;
  s2[r0] = 10, e2[r0] = 11, s2[r1] = 10.5, e2[r1] = 14, s2[r2] = NAN;
  e2[r2] = NAN, s2[c] = 0, e2[c] = 0.5, s2[idle] = 1, e2[idle] = NAN;
  assert_int_equal(ar_commsched_oracle_add_run(o, g, s1, e1, &err), AR_OK);
  assert_true(fabs(ar_commsched_oracle_time(o, r1) - 3.0) < 1e-12);
  assert_int_equal(ar_commsched_oracle_add_run(o, g, s2, e2, &err), AR_OK);
  assert_true(fabs(ar_commsched_oracle_time(o, r0) - 1.0) < 1e-12);
  assert_true(fabs(ar_commsched_oracle_time(o, r1) - 3.0) < 1e-12);
  assert_true(fabs(ar_commsched_oracle_time(o, r2) - 4.0) < 1e-12);
  assert_true(fabs(ar_commsched_oracle_time(o, c) - 0.5) < 1e-12);
  assert_int_equal(ar_commsched_oracle_samples(o, r2), 1);
  assert_int_equal(ar_commsched_oracle_samples(o, c), 2);
  assert_int_equal(ar_commsched_oracle_samples(o, idle), 0);
  assert_true(isnan(ar_commsched_oracle_time(o, idle)));
  assert_int_equal(ar_commsched_oracle_apply(o, g, &err), AR_OK);
  assert_true(fabs(ar_commsched_graph_time(g, r1) - 3.0) < 1e-12);
  assert_true(fabs(ar_commsched_graph_time(g, c) - 0.5) < 1e-12);
  assert_true(ar_commsched_graph_time(g, idle) == 7.0); /* never traced */

  /* A span ending before it starts is refused and records nothing. */
  e1[c] = 4;
  assert_int_equal(ar_commsched_oracle_add_run(o, g, s1, e1, &err),
                   AR_INVALID);
  assert_non_null(strstr(err.msg, "'c'"));
  assert_int_equal(ar_commsched_oracle_samples(o, c), 2);
  ar_commsched_oracle_destroy(o);
  ar_commsched_oracle_destroy(NULL);
  ar_commsched_graph_destroy(g);
}

/* Three transfers back to back on one channel, all posted at 0: each is
 * charged its own slot, not its queueing. */
static void test_back_to_back(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op r[3];
  r[0] = recv_op(g, "a", 0, 1.0);
  r[1] = recv_op(g, "b", 0, 1.0);
  r[2] = recv_op(g, "c", 0, 1.0);
  seal(g);
  ar_commsched_oracle *o = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_oracle_create(g, &o, &err), AR_OK);
  double s[3] = {0, 0, 0}, e[3] = {1, 3, 6};
  assert_int_equal(ar_commsched_oracle_add_run(o, g, s, e, &err), AR_OK);
  assert_true(fabs(ar_commsched_oracle_time(o, r[0]) - 1) < 1e-12);
  assert_true(fabs(ar_commsched_oracle_time(o, r[1]) - 2) < 1e-12);
  assert_true(fabs(ar_commsched_oracle_time(o, r[2]) - 3) < 1e-12);
  ar_commsched_oracle_destroy(o);
  ar_commsched_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_min_and_queueing),
      cmocka_unit_test(test_back_to_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
