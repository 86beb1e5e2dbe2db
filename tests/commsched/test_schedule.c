/* commsched: orders none and random, normalisation, schedule files. */
#include <unistd.h>

#include "cs_util.h"

static char path[256];

static ar_commsched_graph *chain_graph(int n) {
  ar_commsched_graph *g = new_graph();
  ar_commsched_op prev = AR_COMMSCHED_NONE;
  char name[16];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "w%d", i);
    ar_commsched_op w = recv_op(g, name, (uint32_t)i % 3, 1e-3 * (1 + i % 7));
    ar_commsched_op d[2] = {w, prev};
    snprintf(name, sizeof name, "f%d", i);
    prev = compute_op(g, name, 1e-3 * (1 + i % 5), prev == AR_COMMSCHED_NONE ? 1 : 2, d);
  }
  seal(g);
  return g;
}

/* Priorities 4,4,7,9,9,12 on channel 0 normalise to 0,0,2,3,3,5, whatever
 * lies on channel 1 in between and in whatever order the lines come. */
static void test_normalisation(void **state) {
  (void)state;
  write_file(path, "# hand-made\n"
                   "order tic\n"
                   "5 e 0 12\n"
                   "0 a 0 4\n"
                   "6 x 1 5\n"
                   "3 d 0 9\n"
                   "1 b 0 4\n"
                   "2 c 0 7\n"
                   "7 y 1 5\n"
                   "\n"
                   "4 dd 0 9   # trailing comment\n");
  ar_commsched_schedule *s = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_schedule_read(path, &s, &err) != AR_OK)
    fail_msg("%s", err.msg);
  assert_int_equal(ar_commsched_schedule_order(s), AR_COMMSCHED_ORDER_TIC);
  const uint32_t want[] = {0, 0, 2, 3, 3, 5};
  for (uint32_t t = 0; t < 6; t++)
    assert_int_equal(number_of(s, t), want[t]);
  assert_int_equal(number_of(s, 6), 0);
  assert_int_equal(number_of(s, 7), 0);
  assert_null(ar_commsched_schedule_find(s, 8));
  assert_string_equal(ar_commsched_schedule_find(s, 4)->name, "dd");
  ar_commsched_schedule_destroy(s);
}

static void test_none_and_random(void **state) {
  (void)state;
  ar_commsched_graph *g = chain_graph(40);
  ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_NONE, 0, 0);
  assert_int_equal(ar_commsched_schedule_count(s), 0);
  assert_null(ar_commsched_schedule_find(s, 0));
  ar_commsched_schedule_destroy(s);

  uint32_t a[40], b[40], c[40], d[40];
  ar_commsched_schedule *s1 = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 42, 7);
  ar_commsched_schedule *s2 = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 42, 7);
  ar_commsched_schedule *s3 = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 42, 8);
  ar_commsched_schedule *s4 = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 43, 7);
  for (uint32_t t = 0; t < 40; t++) {
    a[t] = prio_of(s1, t);
    b[t] = prio_of(s2, t);
    c[t] = prio_of(s3, t);
    d[t] = prio_of(s4, t);
  }
  assert_memory_equal(a, b, sizeof a);     /* same seed and iteration */
  assert_memory_not_equal(a, c, sizeof a); /* next iteration differs */
  assert_memory_not_equal(a, d, sizeof a); /* other seed differs */
  /* Over 50 iterations every order is distinct (40! possibilities). */
  static uint32_t seen[50][40];
  for (uint64_t it = 0; it < 50; it++) {
    ar_commsched_schedule *si = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 42, it);
    for (uint32_t t = 0; t < 40; t++)
      seen[it][t] = prio_of(si, t);
    for (uint64_t j = 0; j < it; j++)
      assert_memory_not_equal(seen[it], seen[j], sizeof seen[0]);
    ar_commsched_schedule_destroy(si);
  }
  ar_commsched_schedule_destroy(s1);
  ar_commsched_schedule_destroy(s2);
  ar_commsched_schedule_destroy(s3);
  ar_commsched_schedule_destroy(s4);
  ar_commsched_graph_destroy(g);
}

static void test_order_names(void **state) {
  (void)state;
  ar_commsched_order o;
  ar_err err = AR_ERR_INIT;
  for (int i = 0; i < 4; i++) {
    assert_int_equal(ar_commsched_order_parse(
                         ar_commsched_order_name((ar_commsched_order)i), &o,
                         &err),
                     AR_OK);
    assert_int_equal(o, i);
  }
  assert_int_equal(ar_commsched_order_parse("fifo", &o, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "none, random, tic or tac"));
}

static void test_round_trip(void **state) {
  (void)state;
  ar_commsched_graph *g = chain_graph(30);
  const ar_commsched_order orders[] = {AR_COMMSCHED_ORDER_TAC,
                                       AR_COMMSCHED_ORDER_TIC,
                                       AR_COMMSCHED_ORDER_RANDOM,
                                       AR_COMMSCHED_ORDER_NONE};
  for (int k = 0; k < 4; k++) {
    ar_commsched_schedule *s = schedule(g, orders[k], 5, 1), *r = NULL;
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_commsched_schedule_write(s, path, &err), AR_OK);
    if (ar_commsched_schedule_read(path, &r, &err) != AR_OK)
      fail_msg("%s", err.msg);
    assert_int_equal(ar_commsched_schedule_order(r), orders[k]);
    assert_int_equal(ar_commsched_schedule_count(r),
                     ar_commsched_schedule_count(s));
    for (size_t i = 0; i < ar_commsched_schedule_count(s); i++) {
      const ar_commsched_entry *x = ar_commsched_schedule_entry(s, i);
      const ar_commsched_entry *y = ar_commsched_schedule_entry(r, i);
      assert_int_equal(x->transfer, y->transfer);
      assert_string_equal(x->name, y->name);
      assert_int_equal(x->channel, y->channel);
      assert_int_equal(x->priority, y->priority);
      assert_int_equal(x->number, y->number);
    }
    assert_int_equal(ar_commsched_schedule_check(r, g, &err), AR_OK);
    assert_true(ar_commsched_schedule_compute_s(r) == 0.0);
    ar_commsched_schedule_destroy(r);
    ar_commsched_schedule_destroy(s);
  }
  /* A schedule for another graph is caught. */
  write_file(path, "0 w0 2 0\n");
  ar_commsched_schedule *r = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_schedule_read(path, &r, &err), AR_OK);
  assert_int_equal(ar_commsched_schedule_check(r, g, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "channel"));
  ar_commsched_schedule_destroy(r);
  ar_commsched_graph_destroy(g);
}

static void expect_parse_error(const char *text, const char *where,
                               const char *what) {
  write_file(path, text);
  ar_commsched_schedule *s = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_schedule_read(path, &s, &err), AR_PARSE);
  assert_null(s);
  char loc[300];
  snprintf(loc, sizeof loc, "%s:%s: error:", path, where);
  if (!strstr(err.msg, loc) || !strstr(err.msg, what))
    fail_msg("expected '%s' and '%s' in: %s", loc, what, err.msg);
}

/* A schedule rebuilt from its priorities (how a rank hands a schedule to
 * the others) equals the original entry for entry; unlisted transfers stay
 * unlisted; shared priorities share a number. */
static void test_from_priorities(void **state) {
  (void)state;
  ar_commsched_graph *g = chain_graph(12);
  ar_err err = AR_ERR_INIT;
  ar_commsched_schedule_opts o = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
  o.order = AR_COMMSCHED_ORDER_TAC;
  ar_commsched_schedule *s = NULL, *r = NULL;
  assert_int_equal(ar_commsched_schedule_create(g, &o, &s, &err), AR_OK);
  size_t n = ar_commsched_graph_transfer_count(g);
  uint32_t prio[64];
  for (uint32_t t = 0; t < n; t++)
    prio[t] = ar_commsched_schedule_find(s, t)->priority;
  assert_int_equal(ar_commsched_schedule_from_priorities(g, AR_COMMSCHED_ORDER_TAC, prio, &r,
                                                         &err),
                   AR_OK);
  assert_int_equal(ar_commsched_schedule_count(r), ar_commsched_schedule_count(s));
  for (size_t i = 0; i < n; i++) {
    const ar_commsched_entry *a = ar_commsched_schedule_entry(s, i);
    const ar_commsched_entry *b = ar_commsched_schedule_entry(r, i);
    assert_int_equal(a->transfer, b->transfer);
    assert_int_equal(a->number, b->number);
    assert_string_equal(a->name, b->name);
  }
  assert_int_equal(ar_commsched_schedule_check(r, g, &err), AR_OK);
  ar_commsched_schedule_destroy(r);
  /* Transfer 0 unlisted; on channel 1 (transfers 1, 4, 7, 10) 1 and 4
   * tied. */
  for (uint32_t t = 0; t < n; t++)
    prio[t] = t == 0 ? UINT32_MAX : (t == 4 ? 1 : t);
  assert_int_equal(ar_commsched_schedule_from_priorities(g, AR_COMMSCHED_ORDER_TIC, prio, &r,
                                                         &err),
                   AR_OK);
  assert_int_equal(ar_commsched_schedule_count(r), n - 1);
  assert_null(ar_commsched_schedule_find(r, 0));
  assert_int_equal(ar_commsched_schedule_find(r, 1)->number, 0);
  assert_int_equal(ar_commsched_schedule_find(r, 4)->number, 0);
  assert_int_equal(ar_commsched_schedule_find(r, 7)->number, 2);
  assert_int_equal(ar_commsched_schedule_find(r, 10)->number, 3);
  assert_int_equal(ar_commsched_schedule_order(r), AR_COMMSCHED_ORDER_TIC);
  ar_commsched_schedule_destroy(r);
  ar_commsched_schedule_destroy(s);
  ar_commsched_graph_destroy(g);
}

static void test_malformed(void **state) {
  (void)state;
  expect_parse_error("order tac\n0 a 0 0\n1 b 0\n", "3", "found 3");
  expect_parse_error("0 a 0 0 9\n", "1", "found 5");
  expect_parse_error("# c\nx1 a 0 0\n", "2", "transfer id");
  expect_parse_error("0 a -1 0\n", "1", "channel");
  expect_parse_error("0 a 0 1e3\n", "1", "priority");
  expect_parse_error("0 a 0 99999999999\n", "1", "priority");
  expect_parse_error("0 a 0 0\n\n0 b 0 1\n", "3", "listed again (first on line 1)");
  expect_parse_error("0 a 0 0\n1 a 0 1\n", "2", "name 'a' used again");
  expect_parse_error("order fast\n", "1", "order");
  expect_parse_error("order tic\norder tac\n", "2", "second");
  ar_commsched_schedule *s = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_schedule_read("/nonexistent/x.sched", &s, &err),
                   AR_IO);
  assert_non_null(strstr(err.msg, "/nonexistent/x.sched"));
}

int main(void) {
  snprintf(path, sizeof path, "commsched_test_%ld.sched", (long)getpid());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_normalisation),
      cmocka_unit_test(test_none_and_random),
      cmocka_unit_test(test_order_names),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_from_priorities),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  remove(path);
  return rc;
}
