/* Base: status table, error buffers, allocation failure injection, rng. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <string.h>

#include "accelrt/base.h"

static void test_status_names(void **state) {
  (void)state;
  assert_string_equal(ar_status_name(AR_OK), "AR_OK");
  assert_string_equal(ar_status_name(AR_NOMEM), "AR_NOMEM");
  assert_string_equal(ar_status_str(AR_NOMEM), "out of memory");
  assert_string_equal(ar_status_name((ar_status)9999), "AR_UNKNOWN");
  assert_int_equal(AR_OK, 0);
}

static void test_errf_and_wrap(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_errf(&err, AR_IO, "cannot open '%s'", "x.txt"), AR_IO);
  assert_int_equal(err.status, AR_IO);
  assert_string_equal(err.msg, "cannot open 'x.txt'");
  assert_int_equal(ar_err_wrap(&err, "loading %s", "job"), AR_IO);
  assert_string_equal(err.msg, "loading job: cannot open 'x.txt'");
  assert_int_equal(ar_errf(NULL, AR_PARSE, "ignored"), AR_PARSE);
  /* A message longer than the buffer is cut, never overflowed. */
  char big[3000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  ar_errf(&err, AR_INVALID, "%s", big);
  assert_int_equal(strlen(err.msg), AR_ERR_MAX - 1);
}

static void test_alloc_failure_injection(void **state) {
  (void)state;
  ar_alloc_fail_after(2);
  void *a = ar_malloc(10), *b = ar_calloc(2, 8), *c = ar_malloc(10);
  assert_non_null(a);
  assert_non_null(b);
  assert_null(c);
  assert_null(ar_strdup("x"));
  ar_alloc_fail_after(-1);
  void *d = ar_aligned_alloc(64, 100);
  assert_non_null(d);
  assert_int_equal((uintptr_t)d % 64, 0);
  ar_free(a);
  ar_free(b);
  ar_free(d);
}

/* The counter records the bytes asked for of every live block since the
 * start, from any thread, and forgets older blocks when they are freed. */
static void test_alloc_count(void **state) {
  (void)state;
  void *old = ar_malloc(1000);
  assert_int_equal(ar_alloc_count_start(), AR_OK);
  int64_t blocks = -1;
  assert_int_equal(ar_alloc_count_live(&blocks), 0);
  assert_int_equal(blocks, 0);
  char *a = ar_malloc(100);
  int *b = ar_calloc(10, sizeof *b);
  void *c = ar_aligned_alloc(64, 300);
  assert_int_equal(ar_alloc_count_live(&blocks), 100 + 40 + 300);
  assert_int_equal(blocks, 3);
  a = ar_realloc(a, 250);
  assert_int_equal(ar_alloc_count_live(NULL), 250 + 40 + 300);
  ar_free(old); /* from before the start: not counted, not subtracted */
  assert_int_equal(ar_alloc_count_live(NULL), 250 + 40 + 300);
  void *p[4];
#pragma omp parallel for num_threads(4)
  for (int t = 0; t < 4; t++)
    p[t] = ar_malloc(1000 * (size_t)(t + 1));
  assert_int_equal(ar_alloc_count_live(&blocks), 250 + 40 + 300 + 10000);
  assert_int_equal(blocks, 7);
  for (int t = 0; t < 4; t++)
    ar_free(p[t]);
  ar_free(a);
  ar_free(b);
  ar_free(c);
  assert_int_equal(ar_alloc_count_live(&blocks), 0);
  assert_int_equal(blocks, 0);
  ar_alloc_count_stop();
  void *d = ar_malloc(10); /* off: nothing recorded */
  ar_free(d);
}

static void test_rng_repeatable_and_uniform(void **state) {
  (void)state;
  ar_rng a, b, c;
  ar_rng_seed(&a, 42, 0);
  ar_rng_seed(&b, 42, 0);
  ar_rng_seed(&c, 42, 1);
  int same_c = 0;
  for (int i = 0; i < 100; i++) {
    uint64_t x = ar_rng_next(&a);
    assert_true(x == ar_rng_next(&b));
    same_c += x == ar_rng_next(&c);
  }
  assert_true(same_c < 2);
  /* below(n) stays in range and hits every bucket about equally. */
  int hist[7] = {0};
  for (int i = 0; i < 70000; i++) {
    uint64_t v = ar_rng_below(&a, 7);
    assert_true(v < 7);
    hist[v]++;
  }
  for (int i = 0; i < 7; i++)
    assert_true(hist[i] > 9000 && hist[i] < 11000);
  double sum = 0, sq = 0;
  for (int i = 0; i < 100000; i++) {
    double z = ar_rng_normal(&a);
    sum += z;
    sq += z * z;
  }
  assert_true(sum / 100000 > -0.02 && sum / 100000 < 0.02);
  assert_true(sq / 100000 > 0.97 && sq / 100000 < 1.03);
}

static void test_sbuf_json(void **state) {
  (void)state;
  ar_sbuf b = {0};
  ar_sbuf_json_str(&b, "a\"b\\c\n\x01z");
  assert_string_equal(b.buf, "\"a\\\"b\\\\c\\u000a\\u0001z\"");
  /* Grows past any first guess; stays NUL-terminated. */
  for (int i = 0; i < 1000; i++)
    ar_sbuf_printf(&b, "%04d", i);
  assert_int_equal(b.len, strlen(b.buf));
  assert_int_equal(b.len, 22 + 4000);
  ar_sbuf_fini(&b);
  assert_null(b.buf);
  /* An allocation failure sticks: later calls do nothing. */
  ar_alloc_fail_after(0);
  ar_sbuf_printf(&b, "x");
  ar_alloc_fail_after(-1);
  assert_true(b.oom);
  ar_sbuf_printf(&b, "y");
  assert_null(b.buf);
  ar_sbuf_fini(&b);
}

/* Text that is not UTF-8 still makes valid JSON: each stray byte is
 * U+FFFD, well-formed sequences pass through. */
static void test_sbuf_json_utf8(void **state) {
  (void)state;
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"caf\xc3\xa9", "\"caf\xc3\xa9\""},                /* 2 bytes, kept */
      {"\xe2\x82\xac\xf0\x9f\x98\x80", "\"\xe2\x82\xac\xf0\x9f\x98\x80\""}, /* 3, 4 */
      {"caf\xe9!", "\"caf\\ufffd!\""},                    /* Latin-1 */
      {"\x80x", "\"\\ufffdx\""},                          /* stray continuation */
      {"\xc0\xaf", "\"\\ufffd\\ufffd\""},                 /* overlong '/' */
      {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},       /* a surrogate */
      {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* past U+10FFFF */
      {"ab\xe2\x82", "\"ab\\ufffd\\ufffd\""},              /* cut short */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ar_sbuf b = {0};
    ar_sbuf_json_str(&b, cases[i].in);
    assert_string_equal(b.buf, cases[i].out);
    ar_sbuf_fini(&b);
  }
}

/* Suggestions: swaps, case and the typo limits (one edit under five
 * characters, two from five on, never as many as the word has). */
static void test_suggest(void **state) {
  (void)state;
  static const char *const cmds[] = {"run", "submit", "ps", "logs", "cancel", NULL, "serve"};
  const size_t n = sizeof cmds / sizeof cmds[0];
  assert_int_equal(ar_edit_distance("sumbit", 6, "submit", 6), 1);
  assert_int_equal(ar_edit_distance("kitten", 6, "sitting", 7), 3);
  assert_int_equal(ar_edit_distance("", 0, "abc", 3), 3);
  assert_int_equal(ar_edit_distance("ABC", 3, "abc", 3), 0);
  assert_string_equal(ar_suggest("sumbit", 6, cmds, n), "submit");
  assert_string_equal(ar_suggest("SERVE", 5, cmds, n), "serve");
  assert_string_equal(ar_suggest("cancl", 5, cmds, n), "cancel");
  assert_string_equal(ar_suggest("lgs", 3, cmds, n), "logs");
  assert_string_equal(ar_suggest("rn", 2, cmds, n), "run");
  assert_string_equal(ar_suggest("sbmt", 4, cmds, n), "submit"); /* two edits, long... */
  assert_null(ar_suggest("rx", 2, cmds, n));                      /* ...and short */
  assert_null(ar_suggest("xyzzy", 5, cmds, n));
  assert_null(ar_suggest("p", 1, cmds, n));    /* as many edits as letters */
  assert_null(ar_suggest("x", 1, cmds, 0));
  char longer[100];
  memset(longer, 'a', sizeof longer);
  assert_int_equal(ar_edit_distance(longer, sizeof longer, "a", 1), INT32_MAX);
  assert_null(ar_suggest(longer, sizeof longer, cmds, n));
}

static volatile sig_atomic_t custom_hits;
static void custom(int sig) {
  (void)sig;
  custom_hits++;
}

static void test_stop_signals(void **state) {
  (void)state;
  signal(SIGTERM, custom);
  ar_stop_signals_install(true);
  assert_int_equal(ar_stop_signal(), 0);
  raise(SIGPIPE); /* ignored while installed with ignore_pipe */
  /* Nested: one flag, the outer install's old handlers come back last. */
  ar_stop_signals_install(false);
  raise(SIGTERM);
  assert_int_equal(ar_stop_signal(), SIGTERM);
  ar_stop_signals_restore();
  assert_int_equal(custom_hits, 0);
  raise(SIGINT);
  assert_int_equal(ar_stop_signal(), SIGINT);
  ar_stop_signals_restore();
  raise(SIGTERM);
  assert_int_equal(custom_hits, 1);
  /* A new install clears the flag. */
  ar_stop_signals_install(false);
  assert_int_equal(ar_stop_signal(), 0);
  ar_stop_signals_restore();
  ar_stop_signals_restore(); /* one too many: a no-op */
  signal(SIGTERM, SIG_DFL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stop_signals),
      cmocka_unit_test(test_sbuf_json),
      cmocka_unit_test(test_sbuf_json_utf8),
      cmocka_unit_test(test_suggest),
      cmocka_unit_test(test_status_names),
      cmocka_unit_test(test_errf_and_wrap),
      cmocka_unit_test(test_alloc_failure_injection),
      cmocka_unit_test(test_alloc_count),
      cmocka_unit_test(test_rng_repeatable_and_uniform),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
