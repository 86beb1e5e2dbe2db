/* Timelines (include/accelrt/trace.h): the Chrome trace writer's text and
 * escaping, the recorder's detail rule and bound (counted by hand), its
 * serial tracks, that recording allocates nothing, the environment's
 * overrides, and a written trace.json. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accelrt/trace.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_writer_text(void **state) {
  (void)state;
  ar_sbuf b = {0};
  ar_ctrace_begin(&b);
  ar_ctrace_process_name(&b, 1, "run \"x\"", 0);
  static const char *const keys[] = {"iteration", "bytes"};
  int64_t vals[] = {3, -7};
  ar_ctrace_event e = {1, 2, 1.5, 2.25, "forward", "forward", "a\\b\n", keys, vals, 2};
  ar_ctrace_complete(&b, &e);
  ar_ctrace_event i = {1, 0, 4.0, 99.0, NULL, "admit", NULL, NULL, NULL, 0};
  ar_ctrace_instant(&b, &i);
  ar_sbuf frag = {0};
  ar_ctrace_counter(&frag, 1, 5.0, "memory", keys, vals, 1);
  ar_ctrace_events(&b, frag.buf, frag.len);
  ar_ctrace_end(&b, "\"dropped_events\": 0");
  assert_false(b.oom);
  const char *want =
      "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n"
      "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": "
      "\"run \\\"x\\\"\"}},\n"
      "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"sort_index\": "
      "0}},\n"
      "{\"name\": \"forward a\\\\b\\u000a\", \"cat\": \"forward\", \"ph\": \"X\", \"pid\": 1, "
      "\"tid\": 2, \"ts\": 1.500, \"dur\": 2.250, \"args\": {\"iteration\": 3, \"bytes\": -7}},\n"
      "{\"name\": \"admit\", \"ph\": \"i\", \"pid\": 1, \"tid\": 0, \"ts\": 4.000, \"s\": \"t\"},\n"
      "{\"name\": \"memory\", \"ph\": \"C\", \"pid\": 1, \"ts\": 5.000, \"args\": {\"iteration\": "
      "3}}\n"
      "], \"otherData\": {\"dropped_events\": 0}}\n";
  assert_string_equal(b.buf, want);
  ar_sbuf_fini(&frag);
  ar_sbuf_fini(&b);
}

static ar_trace *make(size_t events, int64_t first, int64_t every) {
  ar_trace_opts o = AR_TRACE_OPTS_INIT;
  o.events = events;
  o.detail_first = first;
  o.detail_every = every;
  o.tracks = 20;
  ar_trace *t = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_trace_create(&o, &t, &err), AR_OK);
  assert_non_null(t);
  return t;
}

/* Each iteration: three detail spans (when kept) and one per-iteration
 * span. */
static void iterate(ar_trace *t, int64_t from, int64_t to) {
  for (int64_t it = from; it <= to; it++) {
    ar_trace_iteration(t, it);
    for (int k = 0; k < 3; k++)
      ar_trace_add_span(t, AR_TRACE_STEPS, "forward", "forward", "l", 1.0, 2.0, true);
    ar_trace_add_span(t, AR_TRACE_ITERATIONS, "iteration", "iteration", NULL, 0.0, 3.0, false);
  }
}

/* Counts the rendered complete events named `name` whose iteration is it
 * (it 0: any). */
static int count_events(const ar_trace *t, const char *name, int64_t it) {
  ar_sbuf b = {0};
  ar_trace_render(t, 1, 0.0, &b);
  assert_false(b.oom);
  char pat[128];
  int n = 0;
  snprintf(pat, sizeof pat, "\"name\": \"%s\"", name);
  for (const char *p = b.buf ? strstr(b.buf, pat) : NULL; p; p = strstr(p + 1, pat)) {
    const char *end = strchr(p, '}');
    char want[64];
    snprintf(want, sizeof want, "\"iteration\": %lld}", (long long)it);
    const char *at = strstr(p, "\"iteration\": ");
    n += it == 0 || (at && at < end + 1 && strncmp(at, want, strlen(want)) == 0);
  }
  ar_sbuf_fini(&b);
  return n;
}

static void test_detail_rule(void **state) {
  (void)state;
  ar_trace *t = make(100, 2, 5);
  iterate(t, 1, 20);
  /* Detail in 1, 2, 5, 10, 15, 20: 6 x 3, and 20 iteration spans. */
  assert_int_equal(ar_trace_count(t), 38);
  assert_int_equal(ar_trace_dropped(t), 0);
  assert_int_equal(ar_trace_detail_stopped(t), 0);
  int64_t detailed[] = {1, 2, 5, 10, 15, 20};
  for (size_t i = 0; i < 6; i++)
    assert_int_equal(count_events(t, "forward l", detailed[i]), 3);
  assert_int_equal(count_events(t, "forward l", 3), 0);
  assert_int_equal(count_events(t, "forward l", 19), 0);
  assert_int_equal(count_events(t, "iteration", 0), 20);
  ar_trace_destroy(t);
}

/* A resumed run's recorder starts at a later iteration: its first
 * detail_first iterations get detail as a fresh run's would (a resumed
 * run that ends before the next detail_every-th had no detail at all). */
static void test_detail_rule_resumed(void **state) {
  (void)state;
  ar_trace *t = make(100, 2, 5);
  iterate(t, 101, 108);
  int64_t detailed[] = {101, 102, 105};
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(count_events(t, "forward l", detailed[i]), 3);
  assert_int_equal(count_events(t, "forward l", 103), 0);
  assert_int_equal(count_events(t, "forward l", 0), 9);
  ar_trace_destroy(t);
}

static void test_bound(void **state) {
  (void)state;
  /* 20 spans, detail while under 15 and only for an iteration whose 4
   * spans (3 detail, 1 per-iteration) all fit there: iterations 1-3 whole
   * (12 spans), 4 would end at 16 (detail stops there), its iteration span
   * and those of 5-11 fill the rest, 12 loses its own. */
  ar_trace *t = make(20, 100, 0);
  ar_alloc_fail_after(0); /* recording must not allocate */
  iterate(t, 1, 12);
  ar_alloc_fail_after(-1);
  assert_int_equal(ar_trace_count(t), 20);
  assert_int_equal(ar_trace_detail_stopped(t), 4);
  assert_int_equal(ar_trace_dropped(t), 9 * 3 + 1);
  for (int64_t it = 1; it <= 3; it++)
    assert_int_equal(count_events(t, "forward l", it), 3);
  assert_int_equal(count_events(t, "forward l", 4), 0);
  assert_int_equal(count_events(t, "iteration", 11), 1);
  assert_int_equal(count_events(t, "iteration", 12), 0);
  ar_sbuf o = {0};
  ar_trace_render_other(t, &o);
  assert_non_null(strstr(o.buf, "\"dropped_events\": 28"));
  assert_non_null(strstr(o.buf, "\"detail_stopped_at\": 4"));
  ar_sbuf_fini(&o);
  ar_trace_destroy(t);
}

static void test_serial_track(void **state) {
  (void)state;
  ar_trace *t = make(10, 1, 0);
  ar_trace_track(t, AR_TRACE_CHANNEL, "server 0", true);
  ar_trace_track(t, AR_TRACE_STEPS, "steps", false);
  ar_trace_iteration(t, 1);
  ar_trace_add_span(t, AR_TRACE_CHANNEL, "param", NULL, "a", 1.0, 2.0, true);
  ar_trace_add_span(t, AR_TRACE_CHANNEL, "param", NULL, "b", 1.5, 3.0, true); /* -> 2..3 */
  ar_trace_add_span(t, AR_TRACE_CHANNEL, "param", NULL, "c", 1.0, 2.5, true); /* -> 3..3 */
  ar_trace_add_span(t, AR_TRACE_STEPS, "forward", "forward", "x", 1.0, 2.0, true);
  ar_trace_add_span(t, AR_TRACE_STEPS, "forward", "forward", "y", 1.5, 2.0, true); /* kept */
  ar_sbuf b = {0};
  ar_trace_render(t, 7, 1.0, &b);
  assert_non_null(strstr(b.buf, "\"tid\": 16, \"args\": {\"name\": \"server 0\"}"));
  assert_non_null(strstr(b.buf, "\"name\": \"a\", \"cat\": \"param\", \"ph\": \"X\", \"pid\": 7, "
                                "\"tid\": 16, \"ts\": 0.000, \"dur\": 1000000.000"));
  assert_non_null(strstr(b.buf, "\"name\": \"b\", \"cat\": \"param\", \"ph\": \"X\", \"pid\": 7, "
                                "\"tid\": 16, \"ts\": 1000000.000, \"dur\": 1000000.000"));
  assert_non_null(strstr(b.buf, "\"name\": \"c\", \"cat\": \"param\", \"ph\": \"X\", \"pid\": 7, "
                                "\"tid\": 16, \"ts\": 2000000.000, \"dur\": 0.000"));
  assert_non_null(strstr(b.buf, "\"name\": \"forward y\", \"cat\": \"forward\", \"ph\": \"X\", "
                                "\"pid\": 7, \"tid\": 2, \"ts\": 500000.000, \"dur\": 500000.000"));
  ar_sbuf_fini(&b);
  ar_trace_destroy(t);
}

static void test_env(void **state) {
  (void)state;
  ar_trace_opts o = AR_TRACE_OPTS_INIT;
  ar_err err = AR_ERR_INIT;
  setenv("ACCELRT_TRACE_EVENTS", "12x", 1);
  assert_int_equal(ar_trace_opts_env(&o, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "ACCELRT_TRACE_EVENTS='12x'"));
  assert_int_equal(o.events, 131072);
  setenv("ACCELRT_TRACE_EVENTS", "0", 1);
  setenv("ACCELRT_TRACE_DETAIL", "3:", 1);
  assert_int_equal(ar_trace_opts_env(&o, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "ACCELRT_TRACE_DETAIL"));
  setenv("ACCELRT_TRACE_DETAIL", "-1", 1);
  assert_int_equal(ar_trace_opts_env(&o, &err), AR_INVALID);
  setenv("ACCELRT_TRACE_DETAIL", "3:7", 1);
  assert_int_equal(ar_trace_opts_env(&o, &err), AR_OK);
  assert_int_equal(o.events, 0);
  assert_int_equal(o.detail_first, 3);
  assert_int_equal(o.detail_every, 7);
  ar_trace *t = (ar_trace *)&o; /* overwritten */
  assert_int_equal(ar_trace_create(&o, &t, &err), AR_OK);
  assert_null(t); /* 0 events: no recorder, and recording into NULL is nothing */
  ar_trace_iteration(t, 1);
  assert_false(ar_trace_detail(t));
  ar_trace_add_span(t, AR_TRACE_STEPS, "x", "x", NULL, 0.0, 1.0, false);
  unsetenv("ACCELRT_TRACE_EVENTS");
  unsetenv("ACCELRT_TRACE_DETAIL");
}

static void test_write(void **state) {
  (void)state;
  char dir[] = "/tmp/accelrt-trace-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/trace.json", dir);
  ar_trace *t = make(10, 1, 0);
  ar_trace_track(t, AR_TRACE_ITERATIONS, "iterations", false);
  ar_trace_iteration(t, 1);
  double t0 = ar_trace_start(t);
  ar_trace_add_span(t, AR_TRACE_ITERATIONS, "iteration", "iteration", NULL, t0 + 0.001,
                    t0 + 0.003, false);
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_trace_write(t, "accelrt run t", NULL, path, &err), AR_OK);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char text[4096];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  assert_non_null(strstr(text, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n"));
  assert_non_null(strstr(text, "\"args\": {\"name\": \"accelrt run t\"}"));
  assert_non_null(strstr(text, "\"ts\": 1000.000, \"dur\": 2000.000, \"args\": {\"iteration\": "
                               "1}}"));
  assert_non_null(strstr(text, "\"otherData\": {\"events\": 1, \"dropped_events\": 0, "
                               "\"capacity\": 10, \"detail_first\": 1, \"detail_every\": 0, "
                               "\"detail_stopped_at\": null}}\n"));
  ar_trace_destroy(t);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_writer_text),  cmocka_unit_test(test_detail_rule),
      cmocka_unit_test(test_detail_rule_resumed),
      cmocka_unit_test(test_bound),        cmocka_unit_test(test_serial_track),
      cmocka_unit_test(test_env),          cmocka_unit_test(test_write),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
