/*
 * The service's job log lines and ps reply (runtime/tenancy/joblog.c,
 * ps.c): a line written is read back the same, plain or JSON; old plain
 * lines still show as they were and become "event" objects dated from the
 * log file; whatever a damaged log holds comes out as our JSON form (so a
 * client's parser never meets anything else); the ps table and JSON carry
 * every field, unknown ones as '-' and null.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "joblog.h"
#include "ps.h"

/* Renders one line for a reader; the result is the caller's to free. */
static char *render(ar__joblog_view *v, const char *line) {
  char *copy = strdup(line);
  ar_sbuf out = {0};
  ar__joblog_render(v, copy, &out);
  free(copy);
  assert_false(out.oom);
  return out.buf;
}

/* The line a writer makes, without its newline. */
static char *written(double t, const char *kind, const char *text, const ar_tjob_progress *p) {
  ar_sbuf b = {0};
  ar__joblog_line(&b, t, kind, text, p);
  assert_true(b.len > 0 && b.buf[b.len - 1] == '\n');
  b.buf[b.len - 1] = '\0';
  return b.buf;
}

static void clock_of(double t, char *buf, size_t cap) {
  time_t tt = (time_t)t;
  struct tm tm;
  localtime_r(&tt, &tm);
  strftime(buf, cap, "%H:%M:%S", &tm);
}

/* A JSON reader gets the line itself; a plain one "[HH:MM:SS] text", the
 * text unescaped (quotes, backslashes, newlines, control bytes, UTF-8). */
static void test_round_trip(void **state) {
  (void)state;
  const char *text = "failed: \"a\\b\"\nsecond line\tcaf\xc3\xa9 \xe2\x82\xac \x01";
  char *line = written(1700000000.25, "failed", text, NULL);
  ar__joblog_view json = {true, 0, 0}, plain = {false, 0, 0};
  char *j = render(&json, line);
  char *want = malloc(strlen(line) + 2);
  sprintf(want, "%s\n", line);
  assert_string_equal(j, want);
  assert_true(json.last == 1700000000.25);
  char *p = render(&plain, line);
  char ts[16], exp[256];
  clock_of(1700000000.25, ts, sizeof ts);
  snprintf(exp, sizeof exp, "[%s] %s\n", ts, text);
  assert_string_equal(p, exp);
  ar_free(line);
  ar_free(j);
  ar_free(p);
  free(want);
}

/* A progress line carries its figures, null where unknown, and reads back
 * to the same line. */
static void test_progress_line(void **state) {
  (void)state;
  ar_tjob_progress pg = {120, 1000, 0.51234, 3456.4, 42.0, 1000, 2000};
  ar_sbuf t = {0};
  ar__joblog_progress_text(&pg, &t);
  assert_string_equal(t.buf, "iter 120/1000 (12%) loss 0.5123 3456 samples/s ETA 00:42");
  char *line = written(1700000001.0, "progress", t.buf, &pg);
  assert_non_null(strstr(line, "\"iteration\": 120, \"iterations\": 1000, \"loss\": 0.51234, "
                               "\"samples_per_s\": 3456.4, \"eta_s\": 42}"));
  ar__joblog_view json = {true, 0, 0};
  char *j = render(&json, line);
  assert_int_equal(strncmp(j, line, strlen(line)), 0);
  ar_free(line);
  ar_free(j);
  ar_sbuf_fini(&t);
  ar_tjob_progress first = {1, 30, NAN, NAN, NAN, 0, 0};
  ar__joblog_progress_text(&first, &t);
  assert_string_equal(t.buf, "iter 1/30 (3%)");
  line = written(1.0, "progress", t.buf, &first);
  assert_non_null(strstr(line, "\"loss\": null, \"samples_per_s\": null, \"eta_s\": null}"));
  j = render(&json, line);
  assert_int_equal(strncmp(j, line, strlen(line)), 0);
  ar_free(line);
  ar_free(j);
  ar_sbuf_fini(&t);
}

/* Lines of a log written before version 3: shown as they are; in JSON,
 * kind "event" at the clock they show on the log file's date (the day
 * before when the clock is later than the file), a continuation line at
 * the time of the line before. */
static void test_old_lines(void **state) {
  (void)state;
  struct tm tm = {0};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 4;
  tm.tm_mday = 1;
  tm.tm_hour = 10;
  tm.tm_min = 5;
  tm.tm_isdst = -1;
  double file_time = (double)mktime(&tm); /* 2024-05-01 10:05 local */
  ar__joblog_view plain = {false, file_time, 0}, json = {true, file_time, 0};
  const char *lines[] = {"[10:00:00] submitted by uid 0 from /x/job.yaml",
                         "job.yaml:4:2: error: train: \"bad\"", "[23:59:59] queued"};
  for (int i = 0; i < 3; i++) {
    char *p = render(&plain, lines[i]);
    assert_int_equal(strlen(p), strlen(lines[i]) + 1);
    assert_int_equal(strncmp(p, lines[i], strlen(lines[i])), 0);
    ar_free(p);
  }
  char *a = render(&json, lines[0]);
  char exp[256];
  snprintf(exp, sizeof exp, "{\"time\": %.3f, \"kind\": \"event\", \"text\": \"submitted by uid 0 "
           "from /x/job.yaml\"}\n", file_time - 300);
  assert_string_equal(a, exp);
  char *b = render(&json, lines[1]);
  snprintf(exp, sizeof exp, "{\"time\": %.3f, \"kind\": \"event\", \"text\": \"job.yaml:4:2: "
           "error: train: \\\"bad\\\"\"}\n", file_time - 300);
  assert_string_equal(b, exp);
  char *c = render(&json, lines[2]);
  snprintf(exp, sizeof exp, "{\"time\": %.3f, \"kind\": \"event\", \"text\": \"queued\"}\n",
           file_time - 300 + 13 * 3600 + 59 * 60 + 59 - 86400);
  assert_string_equal(c, exp);
  ar_free(a);
  ar_free(b);
  ar_free(c);
}

/* Whatever a damaged log holds (a line cut by a crash with the next one
 * glued on, bytes that are not UTF-8, an unknown escape) comes out to a
 * JSON reader in our own form: read back, it parses as a line of ours. */
static void test_damaged_lines(void **state) {
  (void)state;
  const char *bad[] = {
      "{\"time\": 1, \"kind\": \"que{\"time\": 2, \"kind\": \"queued\", \"text\": \"x\"}",
      "{\"time\": 1, \"kind\": \"queued\", \"text\": \"a\\qb\"}",
      "{\"time\": 1, \"kind\": \"queued\", \"text\": \"unterminated",
      "{\"time\": 1, \"kind\": \"progress\", \"text\": \"x\", \"iteration\": -1}",
      "{\"time\": nan, \"kind\": \"queued\", \"text\": \"x\"}",
      "\xff\xfe binary \x80",
      "",
      "[99:00:00] not a clock",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ar__joblog_view v = {true, 1000.0, 0};
    char *once = render(&v, bad[i]);
    assert_non_null(strstr(once, "\"kind\": \"event\""));
    once[strlen(once) - 1] = '\0';
    ar__joblog_view v2 = {false, 1000.0, 0};
    char *shown = render(&v2, once);
    assert_int_equal(shown[0], '['); /* not shown raw, as a line we cannot read */
    ar_free(once);
    ar_free(shown);
  }
  /* \u escapes: a surrogate pair is one character, a lone one U+FFFD. */
  ar__joblog_view plain = {false, 0, 0};
  char *p = render(&plain, "{\"time\": 0, \"kind\": \"done\", \"text\": \"\\ud83d\\ude00 "
                           "\\ud800 \\u00e9 \\u0000\"}");
  assert_non_null(strstr(p, "] \xf0\x9f\x98\x80 \xef\xbf\xbd \xc3\xa9 \xef\xbf\xbd\n"));
  ar_free(p);
}

static void test_eta(void **state) {
  (void)state;
  char b[32];
  assert_string_equal(ar__fmt_eta(42.4, b, sizeof b), "00:42");
  assert_string_equal(ar__fmt_eta(3725, b, sizeof b), "1:02:05");
  assert_string_equal(ar__fmt_eta(NAN, b, sizeof b), "--:--");
  assert_string_equal(ar__fmt_eta(-1, b, sizeof b), "--:--");
}

/* ps: every column and key; '-' and null for what is not known. */
static void test_ps(void **state) {
  (void)state;
  ar__ps_job jobs[2];
  memset(jobs, 0, sizeof jobs);
  jobs[0] = (ar__ps_job){.id = 7, .uid = 0, .name = "svc", .state = "running",
                         .progress = {120, 1000, 0.5, 3000.0, 42.0, 1 << 20, 3 << 19},
                         .lane = 2, .submitted = 1700000000.5, .started = 1700000001};
  jobs[1] = (ar__ps_job){.id = 8, .uid = 4242424, .name = "q\"x", .state = "failed",
                         .progress = {0, 30, NAN, NAN, NAN, 0, 0}, .submitted = 1700000002,
                         .ended = 1700000003, .error = "bad \"data\""};
  ar_sbuf t = {0};
  ar__ps_table(&t, jobs, 2);
  char *l1 = strchr(t.buf, '\n') + 1, *l2 = strchr(l1, '\n') + 1;
  assert_int_equal(strncmp(t.buf, "ID     USER       STATE", 23), 0);
  char id[16], user[64], st[16], it[32], loss[16], sps[16], eta[16], mem[32], lane[8], name[16];
  assert_int_equal(sscanf(l1, "%15s %63s %15s %31s %15s %15s %15s %31s %7s %15s", id, user, st,
                          it, loss, sps, eta, mem, lane, name), 10);
  assert_string_equal(id, "7");
  assert_string_equal(user, "root");
  assert_string_equal(st, "running");
  assert_string_equal(it, "120/1000");
  assert_string_equal(loss, "0.5000");
  assert_string_equal(sps, "3000.0");
  assert_string_equal(eta, "00:42");
  assert_string_equal(mem, "1.0MiB+1.5MiB");
  assert_string_equal(lane, "2");
  assert_string_equal(name, "svc");
  assert_int_equal(sscanf(l2, "%15s %63s %15s %31s %15s %15s %15s %31s %7s", id, user, st, it,
                          loss, sps, eta, mem, lane), 9);
  assert_string_equal(user, "4242424"); /* no account: the number */
  assert_string_equal(it, "0/30");
  assert_string_equal(loss, "-");
  assert_string_equal(sps, "-");
  assert_string_equal(eta, "-");
  assert_string_equal(mem, "-");
  assert_string_equal(lane, "-");
  ar_sbuf_fini(&t);
  ar__ps_json(&t, jobs, 2);
  assert_string_equal(
      t.buf,
      "[{\"id\": 7, \"name\": \"svc\", \"uid\": 0, \"state\": \"running\", \"iteration\": 120, "
      "\"iterations\": 1000, \"loss\": 0.5, \"samples_per_s\": 3000, \"eta_s\": 42, "
      "\"persistent_bytes\": 1048576, \"lane_bytes\": 1572864, \"lane\": 2, "
      "\"submitted\": 1700000000.500, \"started\": 1700000001.000, \"ended\": null, "
      "\"error\": null},\n"
      " {\"id\": 8, \"name\": \"q\\\"x\", \"uid\": 4242424, \"state\": \"failed\", "
      "\"iteration\": 0, \"iterations\": 30, \"loss\": null, \"samples_per_s\": null, "
      "\"eta_s\": null, \"persistent_bytes\": 0, \"lane_bytes\": 0, \"lane\": null, "
      "\"submitted\": 1700000002.000, \"started\": null, \"ended\": 1700000003.000, "
      "\"error\": \"bad \\\"data\\\"\"}]\n");
  ar_sbuf_fini(&t);
  ar__ps_json(&t, NULL, 0);
  assert_string_equal(t.buf, "[]\n");
  ar_sbuf_fini(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_progress_line),
      cmocka_unit_test(test_old_lines),    cmocka_unit_test(test_damaged_lines),
      cmocka_unit_test(test_eta),          cmocka_unit_test(test_ps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
