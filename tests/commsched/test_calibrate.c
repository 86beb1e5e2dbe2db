/* Calibration of the simulator from a traced run (commsched.h): median
 * compute times, and the per-message cost fitted on the transfers the
 * worker was idle for, robust to a few slow ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accelrt/commsched.h"

#include <math.h>

/* Two recvs and two compute ops. */
static ar_commsched_graph *small_graph(void) {
  ar_commsched_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_graph_create(&g, &err), AR_OK);
  ar_commsched_op r0, r1, f, b;
  assert_int_equal(ar_commsched_graph_add_recv(g, "w", 4000, 0, 1e-3, &r0, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_recv(g, "b", 40, 0, 1e-3, &r1, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_compute(g, "fwd", 1e-3, &f, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_compute(g, "bwd", 1e-3, &b, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_edge(g, r0, f, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_edge(g, r1, f, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_edge(g, f, b, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_seal(g, &err), AR_OK);
  return g;
}

static ar_commsched_trace_event compute(ar_commsched_op op, double start, double end) {
  return (ar_commsched_trace_event){AR_COMMSCHED_COMPUTE, op, 0, start, end, NAN};
}

static ar_commsched_trace_event recv(double bytes, double link, double end) {
  return (ar_commsched_trace_event){AR_COMMSCHED_RECV, AR_COMMSCHED_NONE, bytes, 0, end, link};
}

static void test_medians(void **state) {
  (void)state;
  ar_commsched_graph *g = small_graph();
  ar_commsched_calib *c = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_calib_create(g, &c, &err), AR_OK);
  /* fwd takes 1, 2, 3, 4 and a slow 100 ms; bwd is traced twice; an op
   * outside the graph and a backwards interval are ignored. */
  const double fwd[5] = {1e-3, 2e-3, 3e-3, 4e-3, 100e-3};
  for (int i = 0; i < 5; i++) {
    ar_commsched_trace_event ev[4] = {compute(2, 10, 10 + fwd[i]), compute(3, 20, 20.006),
                                      compute(AR_COMMSCHED_NONE, 0, 5), compute(3, 9, 8)};
    assert_int_equal(ar_commsched_calib_add(c, ev, i < 2 ? 4 : 1, &err), AR_OK);
  }
  ar_commsched_calib_result r;
  assert_int_equal(ar_commsched_calib_apply(c, g, &r, &err), AR_OK);
  assert_int_equal(r.ops_set, 2);
  assert_true(fabs(ar_commsched_graph_time(g, 2) - 3e-3) < 1e-12);
  assert_true(fabs(ar_commsched_graph_time(g, 3) - 6e-3) < 1e-9);
  /* The means' total over the medians': fwd 22 ms against 3, bwd 6 and 6. */
  assert_true(fabs(r.mean_scale - 28.0 / 9.0) < 1e-9);
  /* Recv times are the oracle's, not the calibration's. */
  assert_true(fabs(ar_commsched_graph_time(g, 0) - 1e-3) < 1e-15);
  /* Too few transfers for a fit. */
  assert_true(isnan(r.message_s) && isnan(r.byte_s));
  assert_int_equal(r.samples, 0);
  /* An op id beyond the graph is refused. */
  ar_commsched_trace_event bad = compute(7, 0, 1);
  assert_int_equal(ar_commsched_calib_add(c, &bad, 1, &err), AR_INVALID);
  ar_commsched_calib_destroy(c);
  ar_commsched_graph_destroy(g);
}

static void test_fit(void **state) {
  (void)state;
  ar_commsched_graph *g = small_graph();
  ar_commsched_calib *c = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_calib_create(g, &c, &err), AR_OK);
  /* time = 50 us + bytes / (2 GB/s), exactly, on 40 idle transfers; and
   * in each iteration one transfer overlapped by compute (not idle) that
   * took a second, which the fit must leave out. */
  const double a = 50e-6, b = 0.5e-9;
  uint64_t x = 12345;
  for (int i = 0; i < 40; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    double bytes = (double)(1000 + (x >> 40) % 10000000);
    double link = 100.0 * i;
    ar_commsched_trace_event ev[3] = {
        recv(bytes, link, link + a + b * bytes),
        recv(1e6, link + 50, link + 51),
        compute(2, link + 50.2, link + 50.4),
    };
    assert_int_equal(ar_commsched_calib_add(c, ev, 3, &err), AR_OK);
  }
  ar_commsched_calib_result r;
  assert_int_equal(ar_commsched_calib_apply(c, g, &r, &err), AR_OK);
  assert_int_equal(r.samples, 40);
  assert_true(fabs(r.message_s - a) < 1e-9);
  assert_true(fabs(r.byte_s - b) / b < 1e-6);
  /* Applying twice gives the same answer. */
  ar_commsched_calib_result r2;
  assert_int_equal(ar_commsched_calib_apply(c, g, &r2, &err), AR_OK);
  assert_true(r2.message_s == r.message_s && r2.byte_s == r.byte_s);
  ar_commsched_calib_destroy(c);
  ar_commsched_graph_destroy(g);
}

static void test_intercept_is_a_median(void **state) {
  (void)state;
  /* Messages of one size (no slope to fit): 7 took 80 us, 3 waited 20 ms
   * for a core.  The mean would say 6 ms a message; the median says 80 us. */
  ar_commsched_graph *g = small_graph();
  ar_commsched_calib *c = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_calib_create(g, &c, &err), AR_OK);
  for (int i = 0; i < 10; i++) {
    ar_commsched_trace_event ev = recv(4096, 10.0 * i, 10.0 * i + 80e-6 + (i % 3 == 1 ? 20e-3 : 0));
    assert_int_equal(ar_commsched_calib_add(c, &ev, 1, &err), AR_OK);
  }
  ar_commsched_calib_result r;
  assert_int_equal(ar_commsched_calib_apply(c, g, &r, &err), AR_OK);
  assert_int_equal(r.samples, 10);
  assert_true(r.byte_s == 0);
  assert_true(fabs(r.message_s - 80e-6) < 1e-9);
  assert_true(r.mean_scale == 1.0); /* no compute op traced */
  ar_commsched_calib_destroy(c);
  ar_commsched_graph_destroy(g);
}

static void test_never_negative(void **state) {
  (void)state;
  /* Bigger messages arriving faster (noise): no negative cost per byte,
   * nor a negative intercept. */
  ar_commsched_graph *g = small_graph();
  ar_commsched_calib *c = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_calib_create(g, &c, &err), AR_OK);
  for (int i = 0; i < 10; i++) {
    ar_commsched_trace_event ev = recv(1000.0 * (i + 1), 10.0 * i, 10.0 * i + 1e-3 - 1e-5 * i);
    assert_int_equal(ar_commsched_calib_add(c, &ev, 1, &err), AR_OK);
  }
  ar_commsched_calib_result r;
  assert_int_equal(ar_commsched_calib_apply(c, g, &r, &err), AR_OK);
  assert_true(r.byte_s == 0);
  assert_true(r.message_s >= 0);
  ar_commsched_calib_destroy(c);
  ar_commsched_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_medians),
      cmocka_unit_test(test_fit),
      cmocka_unit_test(test_intercept_is_a_median),
      cmocka_unit_test(test_never_negative),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
