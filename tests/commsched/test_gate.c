/* commsched: the sender-side enforcement gate. */
#include <unistd.h>

#include "cs_util.h"

static char path[256];

static ar_commsched_schedule *from_text(const char *text) {
  write_file(path, text);
  ar_commsched_schedule *s = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_schedule_read(path, &s, &err) != AR_OK)
    fail_msg("%s", err.msg);
  return s;
}

static ar_commsched_gate *new_gate(uint32_t dests, uint32_t transfers,
                                   size_t bound,
                                   const ar_commsched_schedule *s,
                                   uint32_t channel) {
  ar_commsched_gate_opts o = AR_COMMSCHED_GATE_OPTS_INIT;
  o.destinations = dests;
  o.transfers = transfers;
  o.max_bytes_in_flight = bound;
  ar_commsched_gate *g = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_gate_create(&o, &g, &err), AR_OK);
  if (ar_commsched_gate_load(g, s, channel, &err) != AR_OK)
    fail_msg("%s", err.msg);
  return g;
}

/* Posts everything that may go now (releasing at once), appending to out. */
static size_t drain(ar_commsched_gate *g, uint32_t dest, uint32_t *out,
                    size_t n) {
  uint32_t t;
  while (ar_commsched_gate_next(g, dest, &t) == AR_OK) {
    out[n++] = t;
    assert_int_equal(ar_commsched_gate_release(g, dest, t, NULL), AR_OK);
  }
  return n;
}

/* Channel 0 priorities 4,4,7,9,9,12 -> numbers 0,0,2,3,3,5 (transfers 0-5);
 * transfer 6 is on channel 1, so this gate (channel 0) bypasses it. */
static const char *ties_text = "0 a 0 4\n1 b 0 4\n2 c 0 7\n3 d 0 9\n"
                               "4 e 0 9\n5 f 0 12\n6 g 1 0\n";
static const uint32_t ties_num[] = {0, 0, 2, 3, 3, 5};

/* Whatever order the transfers are offered in, they are posted in number
 * order, a group never split by a later one. */
static void test_order_enforced(void **state) {
  (void)state;
  ar_commsched_schedule *s = from_text(ties_text);
  ar_commsched_gate *g = new_gate(2, 8, 0, s, 0);
  ar_err err = AR_ERR_INIT;
  for (uint64_t seed = 0; seed < 200; seed++) {
    ar_rng r;
    ar_rng_seed(&r, seed, 5);
    uint32_t perm[6] = {0, 1, 2, 3, 4, 5};
    for (int i = 5; i > 0; i--) {
      int j = (int)ar_rng_below(&r, (uint64_t)i + 1);
      uint32_t x = perm[i];
      perm[i] = perm[j];
      perm[j] = x;
    }
    assert_int_equal(ar_commsched_gate_begin(g, seed, &err), AR_OK);
    uint32_t out[8];
    size_t n = 0;
    for (int i = 0; i < 6; i++) {
      assert_int_equal(ar_commsched_gate_offer(g, 1, perm[i], 10, &err), AR_OK);
      n = drain(g, 1, out, n);
      /* Destination 0 got nothing and is not affected. */
      ar_commsched_gate_info info;
      assert_int_equal(ar_commsched_gate_info_get(g, 0, &info), AR_OK);
      assert_int_equal(info.counter, 0);
    }
    assert_int_equal(n, 6);
    for (size_t i = 1; i < n; i++)
      assert_true(ties_num[out[i - 1]] <= ties_num[out[i]]);
    /* Posted exactly when all with a smaller number had gone. */
    for (size_t i = 0; i < n; i++)
      assert_true(ties_num[out[i]] <= i);
  }
  /* A plain priority order: offered in reverse, posted in order. */
  assert_int_equal(ar_commsched_gate_begin(g, 999, &err), AR_OK);
  uint32_t out[8];
  size_t n = 0;
  for (int t = 5; t >= 0; t--) {
    assert_int_equal(ar_commsched_gate_offer(g, 0, (uint32_t)t, 10, &err),
                     AR_OK);
    n = drain(g, 0, out, n);
    if (t > 1)
      assert_int_equal(n, 0); /* nothing until a number-0 transfer comes */
  }
  assert_int_equal(n, 6);
  assert_true(out[0] == 1 && out[1] == 0); /* the group goes as offered */
  assert_true(out[2] == 2 && out[3] == 3 && out[4] == 4 && out[5] == 5);
  ar_commsched_gate_destroy(g);
  ar_commsched_schedule_destroy(s);
}

static void test_bypass(void **state) {
  (void)state;
  ar_commsched_schedule *s = from_text(ties_text);
  ar_commsched_gate *g = new_gate(1, 8, 0, s, 0);
  ar_err err = AR_ERR_INIT;
  uint32_t t;
  /* Transfer 5 (number 5) waits; 6 (other channel) and 7 (not in the
   * schedule) go at once, in offer order. */
  assert_int_equal(ar_commsched_gate_offer(g, 0, 5, 10, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 7, 10, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 6, 10, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_OK);
  assert_int_equal(t, 7);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_OK);
  assert_int_equal(t, 6);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_NOTFOUND);
  /* Offered twice is a bug of the caller. */
  assert_int_equal(ar_commsched_gate_offer(g, 0, 6, 10, &err), AR_STATE);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 8, 10, &err), AR_RANGE);
  ar_commsched_gate_destroy(g);
  /* With no schedule (order none) everything bypasses. */
  g = new_gate(1, 3, 0, NULL, 0);
  for (uint32_t i = 0; i < 3; i++)
    assert_int_equal(ar_commsched_gate_offer(g, 0, 2 - i, 1, &err), AR_OK);
  for (uint32_t i = 0; i < 3; i++) {
    assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_OK);
    assert_int_equal(t, 2 - i);
  }
  ar_commsched_gate_destroy(g);
  ar_commsched_schedule_destroy(s);
}

static void test_bytes_bound(void **state) {
  (void)state;
  ar_commsched_schedule *s = from_text("0 a 0 0\n1 b 0 1\n2 c 0 2\n3 d 0 3\n");
  ar_commsched_gate *g = new_gate(1, 4, 100, s, 0);
  ar_err err = AR_ERR_INIT;
  ar_commsched_gate_info info;
  uint32_t t;
  assert_int_equal(ar_commsched_gate_offer(g, 0, 0, 60, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 1, 60, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 2, 30, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_OK);
  assert_int_equal(t, 0);
  /* 60 + 60 > 100: transfer 1 waits, and 2 (which would fit) may not
   * overtake it. */
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_info_get(g, 0, &info), AR_OK);
  assert_int_equal(info.bytes_in_flight, 60);
  assert_int_equal(info.waiting, 2);
  assert_int_equal(ar_commsched_gate_release(g, 0, 0, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_release(g, 0, 0, &err), AR_STATE);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_OK);
  assert_int_equal(t, 1);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_OK); /* 60+30 fits */
  assert_int_equal(t, 2);
  assert_int_equal(ar_commsched_gate_info_get(g, 0, &info), AR_OK);
  assert_int_equal(info.bytes_in_flight, 90);
  /* Larger than the bound: waits for an idle channel, then goes alone. */
  assert_int_equal(ar_commsched_gate_offer(g, 0, 3, 500, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_release(g, 0, 1, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_release(g, 0, 2, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next(g, 0, &t), AR_OK);
  assert_int_equal(t, 3);
  /* The iteration cannot end with a transfer in flight. */
  assert_int_equal(ar_commsched_gate_begin(g, 1, &err), AR_STATE);
  assert_non_null(strstr(err.msg, "in flight"));
  assert_int_equal(ar_commsched_gate_release(g, 0, 3, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_begin(g, 1, &err), AR_OK);
  ar_commsched_gate_destroy(g);
  ar_commsched_schedule_destroy(s);
}

/* next_if pops what next would pop, only when its key matches; a miss
 * changes nothing (the same transfer comes next), for listed transfers,
 * bypassing ones and under the bytes bound alike. */
static void test_next_if(void **state) {
  (void)state;
  ar_commsched_schedule *s = from_text("0 a 0 0\n1 b 0 1\n2 c 0 2\n");
  ar_commsched_gate *g = new_gate(2, 4, 100, s, 0);
  ar_err err = AR_ERR_INIT;
  const uint32_t key[4] = {7, 7, 9, 9};
  uint32_t t = 99;
  for (uint32_t i = 0; i < 3; i++)
    assert_int_equal(ar_commsched_gate_offer(g, 1, i, 40, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next_if(g, 1, key, 9, &t), AR_NOTFOUND);
  assert_int_equal(t, 99);
  assert_int_equal(ar_commsched_gate_next_if(g, 1, key, 7, &t), AR_OK);
  assert_int_equal(t, 0);
  assert_int_equal(ar_commsched_gate_next_if(g, 1, key, 7, &t), AR_OK);
  assert_int_equal(t, 1);
  /* 2 has key 9, and 40 + 40 + 40 > 100 anyway. */
  assert_int_equal(ar_commsched_gate_next_if(g, 1, key, 7, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_next_if(g, 1, key, 9, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_release(g, 1, 0, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next_if(g, 1, key, 7, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_next_if(g, 1, key, 9, &t), AR_OK);
  assert_int_equal(t, 2);
  /* Destination 0 untouched; an unlisted transfer (3) bypasses, keyed too. */
  assert_int_equal(ar_commsched_gate_offer(g, 0, 3, 10, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_next_if(g, 0, key, 7, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_next_if(g, 0, key, 9, &t), AR_OK);
  assert_int_equal(t, 3);
  assert_int_equal(ar_commsched_gate_next_if(g, 0, NULL, 0, &t), AR_NOTFOUND);
  assert_int_equal(ar_commsched_gate_next_if(g, 2, key, 7, &t), AR_RANGE);
  ar_commsched_gate_destroy(g);
  ar_commsched_schedule_destroy(s);
}

/* A thousand iterations: the same sequence each time, the counter back at
 * zero at every start, the footprint unchanged. */
static void test_reset_no_growth(void **state) {
  (void)state;
  ar_commsched_schedule *s = from_text(ties_text);
  ar_commsched_gate *g = new_gate(3, 8, 25, s, 0);
  ar_err err = AR_ERR_INIT;
  ar_commsched_gate_info info;
  assert_int_equal(ar_commsched_gate_info_get(g, 0, &info), AR_OK);
  size_t footprint = info.footprint_bytes;
  uint32_t first[8], out[8];
  for (uint64_t it = 0; it < 1000; it++) {
    assert_int_equal(ar_commsched_gate_begin(g, it, &err), AR_OK);
    for (uint32_t d = 0; d < 3; d++) {
      assert_int_equal(ar_commsched_gate_info_get(g, d, &info), AR_OK);
      assert_int_equal(info.counter, 0);
      assert_int_equal(info.iteration, it);
      assert_int_equal(info.footprint_bytes, footprint);
      for (uint32_t t = 6; t-- > 0;)
        assert_int_equal(ar_commsched_gate_offer(g, d, t, 10, &err), AR_OK);
      size_t n = drain(g, d, out, 0);
      assert_int_equal(n, 6);
      if (it == 0 && d == 0)
        memcpy(first, out, sizeof out);
      assert_memory_equal(first, out, 6 * sizeof *out);
      assert_int_equal(ar_commsched_gate_info_get(g, d, &info), AR_OK);
      assert_int_equal(info.counter, 6);
    }
  }
  ar_commsched_gate_destroy(g);
  ar_commsched_schedule_destroy(s);
}

/* A listed transfer that never comes: skip or flush lets the rest flow,
 * and an absent transfer never lets a later one overtake an earlier one. */
static void test_absent_no_deadlock(void **state) {
  (void)state;
  ar_commsched_schedule *s =
      from_text("0 a 0 0\n1 b 0 1\n2 c 0 2\n3 d 0 3\n4 e 0 4\n");
  ar_commsched_gate *g = new_gate(1, 5, 0, s, 0);
  ar_err err = AR_ERR_INIT;
  uint32_t out[5];
  size_t n;
  /* Transfer 0 absent: 1..4 wait ... */
  for (uint32_t t = 1; t < 5; t++)
    assert_int_equal(ar_commsched_gate_offer(g, 0, t, 1, &err), AR_OK);
  assert_int_equal(drain(g, 0, out, 0), 0);
  /* ... until it is skipped. */
  assert_int_equal(ar_commsched_gate_skip(g, 0, 0, &err), AR_OK);
  n = drain(g, 0, out, 0);
  assert_int_equal(n, 4);
  for (uint32_t i = 0; i < 4; i++)
    assert_int_equal(out[i], i + 1);

  /* Skipping a later transfer early does not let the one after it go
   * before the earlier ones. */
  assert_int_equal(ar_commsched_gate_begin(g, 1, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_skip(g, 0, 3, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 4, 1, &err), AR_OK);
  assert_int_equal(drain(g, 0, out, 0), 0);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 2, 1, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 1, 1, &err), AR_OK);
  assert_int_equal(drain(g, 0, out, 0), 0);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 0, 1, &err), AR_OK);
  n = drain(g, 0, out, 0);
  assert_int_equal(n, 4);
  assert_true(out[0] == 0 && out[1] == 1 && out[2] == 2 && out[3] == 4);
  assert_int_equal(ar_commsched_gate_skip(g, 0, 0, &err), AR_STATE);

  /* Flush: 1 and 3 never come; the sender says it offers nothing more. */
  assert_int_equal(ar_commsched_gate_begin(g, 2, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 4, 1, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 2, 1, &err), AR_OK);
  assert_int_equal(ar_commsched_gate_offer(g, 0, 0, 1, &err), AR_OK);
  n = drain(g, 0, out, 0);
  assert_int_equal(n, 1);
  assert_int_equal(out[0], 0);
  /* Without the flush the iteration cannot end: transfers still wait. */
  assert_int_equal(ar_commsched_gate_begin(g, 3, &err), AR_STATE);
  assert_non_null(strstr(err.msg, "waiting"));
  assert_int_equal(ar_commsched_gate_flush(g, 0), AR_OK);
  n = drain(g, 0, out, 0);
  assert_int_equal(n, 2);
  assert_true(out[0] == 2 && out[1] == 4);
  ar_commsched_gate_info info;
  assert_int_equal(ar_commsched_gate_info_get(g, 0, &info), AR_OK);
  assert_int_equal(info.counter, 5);
  assert_int_equal(ar_commsched_gate_begin(g, 3, &err), AR_OK);
  ar_commsched_gate_destroy(g);
  ar_commsched_schedule_destroy(s);
}

/* Random offer / skip sequences over a TIC schedule of a random chain:
 * everything offered is eventually posted, and posts follow numbers. */
static void test_random_sequences(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  for (uint64_t seed = 0; seed < 100; seed++) {
    ar_rng r;
    ar_rng_seed(&r, seed, 9);
    uint32_t n = 1 + (uint32_t)ar_rng_below(&r, 30);
    char text[4096];
    size_t len = 0;
    uint32_t prio[32];
    for (uint32_t t = 0; t < n; t++) {
      prio[t] = (uint32_t)ar_rng_below(&r, 8);
      len += (size_t)snprintf(text + len, sizeof text - len, "%u t%u 0 %u\n",
                              t, t, prio[t]);
    }
    ar_commsched_schedule *s = from_text(text);
    ar_commsched_gate *g = new_gate(1, 32, ar_rng_below(&r, 3) * 10, s, 0);
    uint32_t perm[32], out[32];
    for (uint32_t t = 0; t < n; t++)
      perm[t] = t;
    for (uint32_t i = n; i > 1; i--) {
      uint32_t j = (uint32_t)ar_rng_below(&r, i), x = perm[i - 1];
      perm[i - 1] = perm[j];
      perm[j] = x;
    }
    size_t got = 0, absent = 0;
    int skipped[32] = {0};
    for (uint32_t i = 0; i < n; i++) {
      if (ar_rng_below(&r, 5) == 0) {
        assert_int_equal(ar_commsched_gate_skip(g, 0, perm[i], &err), AR_OK);
        skipped[perm[i]] = 1;
        absent++;
      } else {
        assert_int_equal(ar_commsched_gate_offer(
                             g, 0, perm[i], 1 + ar_rng_below(&r, 20), &err),
                         AR_OK);
      }
      got = drain(g, 0, out, got);
    }
    assert_int_equal(got + absent, n);
    for (size_t i = 1; i < got; i++)
      assert_true(number_of(s, out[i - 1]) <= number_of(s, out[i]));
    /* A transfer went only after every non-skipped one of smaller
     * priority. */
    for (size_t i = 0; i < got; i++)
      for (size_t j = i + 1; j < got; j++)
        assert_false(prio[out[j]] < prio[out[i]]);
    (void)skipped;
    ar_commsched_gate_destroy(g);
    ar_commsched_schedule_destroy(s);
  }
}

int main(void) {
  snprintf(path, sizeof path, "commsched_gate_%ld.sched", (long)getpid());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_enforced),
      cmocka_unit_test(test_bypass),
      cmocka_unit_test(test_bytes_bound),
      cmocka_unit_test(test_next_if),
      cmocka_unit_test(test_reset_no_growth),
      cmocka_unit_test(test_absent_no_deadlock),
      cmocka_unit_test(test_random_sequences),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  remove(path);
  return rc;
}
