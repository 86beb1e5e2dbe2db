/* commsched: the token-bucket link pacer, driven by a made-up clock. */
#include <math.h>

#include "cs_util.h"

static ar_commsched_pacer *pacer(double gbps, double latency_us, size_t burst,
                                 double now) {
  ar_commsched_link_opts o = AR_COMMSCHED_LINK_OPTS_INIT;
  o.gbps = gbps;
  o.latency_us = latency_us;
  o.burst_bytes = burst;
  ar_commsched_pacer *p = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_pacer_create(&o, now, &p, &err) != AR_OK)
    fail_msg("pacer: %s", err.msg);
  return p;
}

/* A sender that always has the next message ready (it offers each one at
 * the previous one's start) gets the configured rate: 10 Gbit/s is
 * 1.25e9 bytes/s, and the 64 KiB burst is negligible against ~5 GB. */
static void test_throughput(void **state) {
  (void)state;
  const double rate = 10e9 / 8;
  ar_commsched_pacer *p = pacer(10, 50, 64 * 1024, 100.0);
  ar_rng r;
  ar_rng_seed(&r, 7, 1);
  double now = 100.0;
  uint64_t total = 0;
  ar_commsched_pace pc = {0, 0, 0};
  for (int i = 0; i < 10000; i++) {
    size_t b = 1 + (size_t)ar_rng_below(&r, 1 << 20);
    ar_commsched_pacer_consume(p, now, b, &pc);
    now = pc.start_s;
    total += b;
  }
  assert_true(ar_commsched_pacer_bytes(p) == total);
  double measured = (double)total / (pc.done_s - 100.0);
  assert_true(fabs(measured / rate - 1.0) < 0.01);
  /* Exactly: the bucket's burst plus the rate over the elapsed time. */
  assert_true(fabs((double)total - (64 * 1024 + rate * (pc.done_s - 100.0))) <
              1e-6 * (double)total);
  /* 1 Gbit/s, a clock that never advances (every send queues). */
  ar_commsched_pacer_destroy(p);
  p = pacer(1, 0, 0, 0.0);
  for (int i = 0; i < 1000; i++)
    ar_commsched_pacer_consume(p, 0.0, 125000, &pc);
  assert_true(fabs(pc.done_s - 1.0) < 1e-9); /* 125 MB at 125 MB/s */
  ar_commsched_pacer_destroy(p);
}

/* Latency is added once per message and overlaps the next send: 100
 * messages of 125,000 bytes at 10 Gbit/s (100 us each) offered at once
 * arrive at (i + 1) x 100 us + 50 us, the last at 10.05 ms, not at
 * 10 ms + 100 x 50 us. */
static void test_latency_once(void **state) {
  (void)state;
  ar_commsched_pacer *p = pacer(10, 50, 0, 0.0);
  ar_commsched_pace pc;
  for (int i = 0; i < 100; i++) {
    ar_commsched_pacer_consume(p, 0.0, 125000, &pc);
    assert_true(fabs(pc.start_s - i * 100e-6) < 1e-12);
    assert_true(fabs(pc.done_s - (i + 1) * 100e-6) < 1e-12);
    assert_true(fabs(pc.arrive_s - pc.done_s - 50e-6) < 1e-15);
  }
  assert_true(fabs(pc.arrive_s - 10.05e-3) < 1e-12);
  /* An idle link: one message takes bytes / rate + latency. */
  ar_commsched_pacer_consume(p, 1.0, 1250, &pc);
  assert_true(pc.start_s == 1.0);
  assert_true(fabs(pc.arrive_s - 1.0 - 1e-6 - 50e-6) < 1e-12);
  ar_commsched_pacer_destroy(p);
}

/* Over any run of messages i..j the bytes sent fit in the burst plus the
 * rate times the time they took, with random sizes and offer times; the
 * burst is actually used; an idle bucket refills to the burst, no more. */
static void test_bursts_bounded(void **state) {
  (void)state;
  enum { N = 600 };
  const double rate = 1e9 / 8, burst = 256 * 1024;
  ar_commsched_pacer *p = pacer(1, 20, 256 * 1024, 0.0);
  ar_rng r;
  ar_rng_seed(&r, 11, 2);
  static double start[N], done[N], bytes[N];
  double now = 0.0;
  int bursts = 0;
  for (int i = 0; i < N; i++) {
    size_t b = 1 + (size_t)ar_rng_below(&r, 200 * 1024);
    now += 2e-3 * ar_rng_uniform(&r);
    ar_commsched_pace pc, pe;
    ar_commsched_pacer_earliest(p, now, b, &pe);
    ar_commsched_pacer_consume(p, now, b, &pc);
    assert_memory_equal(&pc, &pe, sizeof pc); /* earliest == consume */
    assert_true(pc.start_s >= now);
    assert_true(i == 0 || pc.start_s >= done[i - 1]); /* serial */
    assert_true(ar_commsched_pacer_tokens(p, pc.done_s) <= burst);
    start[i] = pc.start_s;
    done[i] = pc.done_s;
    bytes[i] = (double)b;
    bursts += pc.done_s == pc.start_s;
  }
  for (int i = 0; i < N; i++) {
    double sum = 0.0;
    for (int j = i; j < N; j++) {
      sum += bytes[j];
      assert_true(sum <= burst + rate * (done[j] - start[i]) + 1e-3);
    }
  }
  assert_true(bursts > 0);
  assert_true(ar_commsched_pacer_tokens(p, now + 100.0) == burst);
  ar_commsched_pacer_destroy(p);
}

static void test_unpaced_and_errors(void **state) {
  (void)state;
  ar_commsched_pacer *p = pacer(INFINITY, 30, 0, 5.0);
  ar_commsched_pace pc;
  for (int i = 0; i < 10; i++) {
    ar_commsched_pacer_consume(p, 5.0 + i, (size_t)1 << 30, &pc);
    assert_true(pc.start_s == 5.0 + i && pc.done_s == pc.start_s);
    assert_true(fabs(pc.arrive_s - pc.start_s - 30e-6) < 1e-12);
  }
  ar_commsched_pacer_destroy(p);
  ar_commsched_pacer_destroy(NULL);

  ar_commsched_link_opts o = AR_COMMSCHED_LINK_OPTS_INIT;
  ar_err err = AR_ERR_INIT;
  const double bad_gbps[] = {0.0, -1.0, NAN};
  for (int i = 0; i < 3; i++) {
    o.gbps = bad_gbps[i];
    assert_int_equal(ar_commsched_pacer_create(&o, 0.0, &p, &err), AR_INVALID);
  }
  assert_non_null(strstr(err.msg, "gbps"));
  o.gbps = 10;
  o.latency_us = -1;
  assert_int_equal(ar_commsched_pacer_create(&o, 0.0, &p, &err), AR_INVALID);
  o.latency_us = INFINITY;
  assert_int_equal(ar_commsched_pacer_create(&o, 0.0, &p, &err), AR_INVALID);
  o.latency_us = 0;
  ar_alloc_fail_after(0);
  assert_int_equal(ar_commsched_pacer_create(&o, 0.0, &p, &err), AR_NOMEM);
  ar_alloc_fail_after(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_throughput),
      cmocka_unit_test(test_latency_once),
      cmocka_unit_test(test_bursts_bounded),
      cmocka_unit_test(test_unpaced_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
