/* commsched: building, validating and sealing op graphs. */
#include "cs_util.h"

static void test_cycle_rejected(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op w = recv_op(g, "w", 0, 1.0);
  ar_commsched_op a = compute_op(g, "a", 1.0, 1, &w);
  ar_commsched_op b = compute_op(g, "b", 1.0, 1, &a);
  ar_commsched_op c = compute_op(g, "c", 1.0, 1, &b);
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_graph_add_edge(g, c, a, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_seal(g, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "cycle"));
  /* The message walks the cycle in dependency order, whichever op it
   * starts from. */
  int named = strstr(err.msg, "a -> b -> c -> a") ||
              strstr(err.msg, "b -> c -> a -> b") ||
              strstr(err.msg, "c -> a -> b -> c");
  if (!named)
    fail_msg("cycle not spelled out: %s", err.msg);
  assert_false(ar_commsched_graph_sealed(g));
  ar_commsched_graph_destroy(g);

  /* A self-loop is a cycle too. */
  g = new_graph();
  w = recv_op(g, "w", 0, 1.0);
  a = compute_op(g, "a", 1.0, 1, &w);
  assert_int_equal(ar_commsched_graph_add_edge(g, a, a, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_seal(g, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "a -> a"));
  ar_commsched_graph_destroy(g);
}

static void test_bad_input(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_err err = AR_ERR_INIT;
  ar_commsched_op w = recv_op(g, "w", 0, 1.0), x;
  ar_commsched_op a = compute_op(g, "a", 1.0, 1, &w);
  /* Nothing may point into a recv. */
  assert_int_equal(ar_commsched_graph_add_edge(g, a, w, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "recv"));
  assert_int_equal(ar_commsched_graph_add_edge(g, a, 99, &err), AR_INVALID);
  assert_int_equal(ar_commsched_graph_add_recv(g, "w", 1, 0, 1.0, &x, &err),
                   AR_INVALID);
  assert_non_null(strstr(err.msg, "used twice"));
  assert_int_equal(ar_commsched_graph_add_recv(g, "two words", 1, 0, 1.0, &x,
                                               &err),
                   AR_INVALID);
  assert_int_equal(ar_commsched_graph_add_recv(g, "", 1, 0, 1.0, &x, &err),
                   AR_INVALID);
  assert_int_equal(ar_commsched_graph_add_compute(g, "n", -1.0, &x, &err),
                   AR_INVALID);
  assert_int_equal(ar_commsched_graph_add_compute(g, "n", 1.0 / 0.0, &x, &err),
                   AR_INVALID);
  /* Unsealed graphs give no schedule. */
  ar_commsched_schedule *s = NULL;
  assert_int_equal(ar_commsched_schedule_create(g, NULL, &s, &err), AR_STATE);
  seal(g);
  assert_int_equal(ar_commsched_graph_add_compute(g, "late", 1.0, &x, &err),
                   AR_STATE);
  assert_int_equal(ar_commsched_graph_add_edge(g, w, a, &err), AR_STATE);
  assert_int_equal(ar_commsched_graph_seal(g, &err), AR_STATE);
  /* Times may still change after seal. */
  assert_int_equal(ar_commsched_graph_set_time(g, a, 2.5, &err), AR_OK);
  assert_true(ar_commsched_graph_time(g, a) == 2.5);
  assert_int_equal(ar_commsched_graph_set_time(g, a, -2.5, &err), AR_INVALID);
  ar_commsched_graph_destroy(g);
  ar_commsched_graph_destroy(NULL);
}

static void test_getters(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op c0 = compute_op(g, NULL, 1.0, 0, NULL);
  ar_commsched_op r0 = recv_op(g, NULL, 3, 1.0);
  ar_commsched_op r1 = recv_op(g, "bias", 1, 1.0);
  assert_int_equal(ar_commsched_graph_op_count(g), 3);
  assert_int_equal(ar_commsched_graph_transfer_count(g), 2);
  assert_string_equal(ar_commsched_graph_name(g, c0), "op0");
  assert_string_equal(ar_commsched_graph_name(g, r0), "t0");
  assert_int_equal(ar_commsched_graph_kind(g, r1), AR_COMMSCHED_RECV);
  assert_int_equal(ar_commsched_graph_kind(g, c0), AR_COMMSCHED_COMPUTE);
  assert_int_equal(ar_commsched_graph_transfer(g, r1), 1);
  assert_int_equal(ar_commsched_graph_transfer(g, c0), AR_COMMSCHED_NONE);
  assert_int_equal(ar_commsched_graph_recv_op(g, 1), r1);
  assert_int_equal(ar_commsched_graph_channel(g, 0), 3);
  assert_int_equal(ar_commsched_graph_bytes(g, 1), 1000);
  assert_int_equal(ar_commsched_graph_recv_op(g, 7), AR_COMMSCHED_NONE);
  ar_commsched_graph_destroy(g);
}

/* Every allocation of build + seal + tac may fail: the status says so and
 * nothing leaks (the sanitizer build checks the second half). */
static void test_out_of_memory(void **state) {
  (void)state;
  int failures = 0;
  for (long k = 0; k < 400; k++) {
    ar_commsched_graph *g = NULL;
    ar_commsched_schedule *s = NULL;
    ar_err err = AR_ERR_INIT;
    ar_status st;
    ar_alloc_fail_after(k);
    st = ar_commsched_graph_create(&g, &err);
    ar_commsched_op ops[8];
    for (int i = 0; i < 4 && st == AR_OK; i++)
      st = ar_commsched_graph_add_recv(g, NULL, 10, (uint32_t)i % 2, 1.0,
                                       &ops[i], &err);
    for (int i = 4; i < 8 && st == AR_OK; i++) {
      st = ar_commsched_graph_add_compute(g, NULL, 1.0, &ops[i], &err);
      if (st == AR_OK)
        st = ar_commsched_graph_add_edge(g, ops[i - 4], ops[i], &err);
      if (st == AR_OK && i > 4)
        st = ar_commsched_graph_add_edge(g, ops[i - 1], ops[i], &err);
    }
    if (st == AR_OK)
      st = ar_commsched_graph_seal(g, &err);
    if (st == AR_OK) {
      ar_commsched_schedule_opts o = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
      st = ar_commsched_schedule_create(g, &o, &s, &err);
    }
    ar_alloc_fail_after(-1);
    if (st != AR_OK) {
      assert_int_equal(st, AR_NOMEM);
      failures++;
    } else {
      assert_int_equal(ar_commsched_schedule_count(s), 4);
    }
    ar_commsched_schedule_destroy(s);
    ar_commsched_graph_destroy(g);
    if (st == AR_OK)
      break;
  }
  assert_true(failures > 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cycle_rejected),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_getters),
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
