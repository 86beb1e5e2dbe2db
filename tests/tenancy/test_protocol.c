/*
 * The service's message codec (runtime/tenancy/protocol.c), version 3: the
 * json flag is taken in ps and logs requests of version 3 and refused
 * everywhere else, so that a v1 or v2 message means what it always meant;
 * a message without json encodes to the same bytes as before.  (The fuzz
 * corpus, tests/fuzz/corpus/msg, replays the same messages for crashes.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"

/* A body of fields, each "TAG=VALUE" (tag in decimal). */
static size_t body(uint8_t *out, const char *const *fields, size_t n) {
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(fields[i], '=');
    size_t len = strlen(eq + 1);
    out[at] = (uint8_t)atoi(fields[i]);
    out[at + 1] = (uint8_t)(len >> 24);
    out[at + 2] = (uint8_t)(len >> 16);
    out[at + 3] = (uint8_t)(len >> 8);
    out[at + 4] = (uint8_t)len;
    memcpy(out + at + 5, eq + 1, len);
    at += 5 + len;
  }
  return at;
}

static ar_status decode(const char *const *fields, size_t n, ar__msg *m, ar_err *err) {
  static uint8_t b[4096];
  return ar__msg_decode(b, body(b, fields, n), m, err);
}

#define DECODE(m, err, ...)                                                          \
  decode((const char *const[]){__VA_ARGS__},                                         \
         sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *), m, err)

static void test_json_accepted_in_v3_ps_and_logs(void **state) {
  (void)state;
  ar__msg m;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(DECODE(&m, &err, "1=ps", "12=3", "14=1"), AR_OK);
  assert_int_equal(m.op, AR__OP_PS);
  assert_true(m.json);
  assert_int_equal(DECODE(&m, &err, "1=logs", "2=7", "8=1", "14=1", "12=3"), AR_OK);
  assert_true(m.json && m.follow && m.id == 7);
  assert_int_equal(DECODE(&m, &err, "1=ps", "12=4", "14=0"), AR_OK); /* newer: the codec's */
  assert_false(m.json);
  assert_int_equal(DECODE(&m, &err, "1=ps", "12=2"), AR_OK);
  assert_false(m.json);
}

static void test_json_refused_elsewhere(void **state) {
  (void)state;
  ar__msg m;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(DECODE(&m, &err, "1=ps", "12=2", "14=1"), AR_PARSE);
  assert_non_null(strstr(err.msg, "version 3"));
  assert_int_equal(DECODE(&m, &err, "1=logs", "2=1", "14=1"), AR_PARSE); /* v1 */
  assert_non_null(strstr(err.msg, "says 1"));
  assert_int_equal(DECODE(&m, &err, "1=cancel", "2=1", "12=3", "14=1"), AR_PARSE);
  assert_non_null(strstr(err.msg, "ps and logs only"));
  assert_int_equal(DECODE(&m, &err, "1=submit", "3=x", "12=3", "14=1"), AR_PARSE);
  assert_int_equal(DECODE(&m, &err, "1=ps", "12=3", "14=yes"), AR_PARSE);
  assert_int_equal(DECODE(&m, &err, "1=ps", "12=3", "14=1", "14=1"), AR_PARSE);
  assert_int_equal(DECODE(&m, &err, "1=ps", "12=3", "15=1"), AR_PARSE);
}

/* Encoding: json travels as tag 14 and back; without it the bytes are
 * what a version-2 encoder wrote (no tag 14 at all). */
static void test_encode_round_trip(void **state) {
  (void)state;
  ar__msg m, back;
  memset(&m, 0, sizeof m);
  m.op = AR__OP_LOGS;
  m.version = 3;
  m.has_id = true;
  m.id = 42;
  m.json = true;
  uint8_t *b = NULL;
  size_t n = 0;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar__msg_encode(&m, &b, &n, &err), AR_OK);
  assert_int_equal(ar__msg_decode(b + 4, n - 4, &back, &err), AR_OK);
  assert_true(back.json && back.id == 42 && back.op == AR__OP_LOGS && back.version == 3);
  ar_free(b);
  m.json = false;
  m.version = 2;
  assert_int_equal(ar__msg_encode(&m, &b, &n, &err), AR_OK);
  static const uint8_t v2[] = {1, 0, 0, 0, 4,  'l', 'o', 'g', 's', 12, 0, 0, 0,
                               1, '2', 2, 0, 0, 0, 2, '4', '2'};
  assert_int_equal(n - 4, sizeof v2);
  assert_memory_equal(b + 4, v2, sizeof v2);
  ar_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_accepted_in_v3_ps_and_logs),
      cmocka_unit_test(test_json_refused_elsewhere),
      cmocka_unit_test(test_encode_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
