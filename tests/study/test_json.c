/* study: reading the JSON runs write (runtime/study/json.c) -- what the
 * project's writer (ar_json_*, metrics.c) writes, the tenancy runner's
 * pretty-printed summary, and what the study's former reader (a strstr for
 * '"key": ') got wrong: no space or more space around the colon, a key and
 * its value on different lines, an escaped key (all four: not found), the
 * same key in a nested object first (it read the nested one), a key only
 * in a nested object (read as the summary's), a file cut short (read), and
 * true without the one spacing it looked for. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "accelrt/runtime.h"
#include "json.h"

/* The number under key in the document text (NaN when absent). */
static double num_in(const char *text, const char *key) {
  cJSON *doc = ar__study_json_text(text);
  assert_non_null(doc);
  double v = ar__study_json_num(doc, key);
  cJSON_Delete(doc);
  return v;
}

/* What ar_json_* write, read back: numbers, integers, strings with the
 * characters the writer escapes, true and false, and a non-finite number
 * (written as null) read as NaN. */
static void test_project_writer(void **state) {
  (void)state;
  ar_json *j = ar_json_begin();
  ar_json_str(j, "name", "a \"quoted\" \\ name\twith\ncontrol");
  ar_json_num(j, "samples_per_s", 1234.5678);
  ar_json_int(j, "iterations", 9007199254740993LL); /* past 2^53: read as a double */
  ar_json_num(j, "loss", NAN);
  ar_json_num(j, "p_at_1", 1e-12);
  ar_json_bool(j, "interrupted", true);
  ar_json_bool(j, "warmup", false);
  ar_json_str(j, "kind", "eval");
  const char *text = ar_json_end(j);
  assert_non_null(text);
  cJSON *doc = ar__study_json_text(text);
  assert_non_null(doc);
  assert_true(ar__study_json_num(doc, "samples_per_s") == 1234.5678);
  assert_true(ar__study_json_num(doc, "iterations") == 9007199254740993.0);
  assert_true(isnan(ar__study_json_num(doc, "loss")));
  assert_true(ar__study_json_num(doc, "p_at_1") == 1e-12);
  assert_true(isnan(ar__study_json_num(doc, "absent")));
  assert_true(isnan(ar__study_json_num(doc, "name"))); /* a string is not a number */
  assert_true(ar__study_json_true(doc, "interrupted"));
  assert_false(ar__study_json_true(doc, "warmup"));
  assert_true(ar__study_json_str_is(doc, "kind", "eval"));
  assert_true(ar__study_json_str_is(doc, "name", "a \"quoted\" \\ name\twith\ncontrol"));
  cJSON_Delete(doc);
  ar_json_destroy(j);
}

/* The shape of the tenancy runner's summary.json (runtime/tenancy/
 * runner.c): one key per line, indented, with a jobs array whose items have
 * keys of their own. */
static void test_pretty_summary(void **state) {
  (void)state;
  static const char text[] =
      "{\n  \"policy\": \"srtf\",\n  \"device\": \"host\",\n  \"makespan_s\": 2.500000,\n"
      "  \"avg_jct_s\": 1.250000,\n  \"p95_jct_s\": 2.000000,\n  \"failed\": 0,\n"
      "  \"jobs\": [\n    {\"name\": \"long\", \"status\": \"done\", \"arrival_s\": 0.000000, "
      "\"jct_s\": 2.000000},\n    {\"name\": \"short\", \"status\": \"done\", \"arrival_s\": "
      "0.010000, \"jct_s\": 0.500000}\n  ]\n}\n";
  assert_true(num_in(text, "makespan_s") == 2.5);
  assert_true(num_in(text, "avg_jct_s") == 1.25);
  /* jct_s is only in the jobs: not a number of the summary itself. */
  assert_true(isnan(num_in(text, "jct_s")));
}

/* What the strstr reader missed or misread, read right. */
static void test_spacing_and_traps(void **state) {
  (void)state;
  assert_true(num_in("{\"samples_per_s\":12.5}", "samples_per_s") == 12.5);
  assert_true(num_in("{ \"samples_per_s\" : 12.5 }", "samples_per_s") == 12.5);
  assert_true(num_in("{\n\t\"samples_per_s\"\n:\n\t12.5\n}", "samples_per_s") == 12.5);
  assert_true(num_in("{\"samples_per_s\": 1.25e3}", "samples_per_s") == 1250);
  assert_true(num_in("{\"samples_per_s\": -0.5E-1}", "samples_per_s") == -0.05);
  /* The key's text quoted inside a string before the key itself (JSON's
   * escaping kept the former reader right here too). */
  assert_true(num_in("{\"note\": \"\\\"samples_per_s\\\": 99\", \"samples_per_s\": 12.5}",
                     "samples_per_s") == 12.5);
  /* The same key in a nested object before the top-level one. */
  assert_true(num_in("{\"sub\": {\"p_at_1\": 1}, \"p_at_1\": 2}", "p_at_1") == 2);
  /* A key that the wanted one is a prefix of. */
  assert_true(isnan(num_in("{\"p_at_10\": 5}", "p_at_1")));
  assert_true(num_in("{\"p_at_10\": 5, \"p_at_1\": 7}", "p_at_1") == 7);
  /* Escapes in a key. */
  assert_true(num_in("{\"p_at\\u005f1\": 3}", "p_at_1") == 3);
  cJSON *doc = ar__study_json_text("{\"interrupted\":true,\"kind\" :\"iteration\"}");
  assert_non_null(doc);
  assert_true(ar__study_json_true(doc, "interrupted"));
  assert_true(ar__study_json_str_is(doc, "kind", "iteration"));
  assert_false(ar__study_json_str_is(doc, "kind", "iter"));
  cJSON_Delete(doc);
  doc = ar__study_json_text("{\"interrupted\": \"true\"}");
  assert_false(ar__study_json_true(doc, "interrupted")); /* a string, not true */
  cJSON_Delete(doc);
}

/* Text that is not one JSON value is no document: a file cut short, text
 * after the value, nothing at all. */
static void test_not_json(void **state) {
  (void)state;
  assert_null(ar__study_json_text("{\"samples_per_s\": 12.5"));
  assert_null(ar__study_json_text("{\"a\": 1} x"));
  assert_null(ar__study_json_text(""));
  assert_null(ar__study_json_text(NULL));
  cJSON *doc = ar__study_json_text("  [1, 2]\n");
  assert_non_null(doc); /* a value, but not an object: no numbers by key */
  assert_true(isnan(ar__study_json_num(doc, "a")));
  assert_false(ar__study_json_true(doc, "a"));
  cJSON_Delete(doc);
}

/* metrics.jsonl line by line, as the writer appends it: blank lines and a
 * line that is not JSON (a line cut by a crash) are skipped; then files. */
static void test_lines_and_files(void **state) {
  (void)state;
  char dir[] = "/tmp/accelrt-json-XXXXXX", path[256];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (int i = 1; i <= 3; i++) {
    ar_json *j = ar_json_begin();
    ar_json_int(j, "iteration", 10 * i);
    ar_json_str(j, "kind", "eval");
    ar_json_num(j, "p_at_1", 10.0 * i);
    ar_json_num(j, "train_s", 0.5 * i);
    fputs(ar_json_end(j), f); /* one line, with its newline */
    ar_json_destroy(j);
    if (i == 1)
      fputs("\n", f);
    if (i == 2)
      fputs("{\"iteration\": 25, \"kind\": \"ev\n", f);
  }
  fclose(f);
  f = fopen(path, "r");
  assert_non_null(f);
  char *line = NULL;
  size_t cap = 0;
  double seen[4];
  int n = 0;
  cJSON *m;
  while ((m = ar__study_json_next_line(f, &line, &cap))) {
    assert_true(n < 4);
    seen[n++] = ar__study_json_num(m, "iteration");
    cJSON_Delete(m);
  }
  free(line);
  fclose(f);
  assert_int_equal(n, 3);
  assert_true(seen[0] == 10 && seen[1] == 20 && seen[2] == 30);

  snprintf(path, sizeof path, "%s/summary.json", dir);
  f = fopen(path, "w");
  assert_non_null(f);
  fputs("{\"samples_per_s\": 42}\n", f);
  fclose(f);
  cJSON *doc = ar__study_json_file(path);
  assert_non_null(doc);
  assert_true(ar__study_json_num(doc, "samples_per_s") == 42);
  cJSON_Delete(doc);
  /* A symlink where a run's file should be is not followed. */
  char link_path[300];
  snprintf(link_path, sizeof link_path, "%s/eval.json", dir);
  assert_int_equal(symlink(path, link_path), 0);
  assert_null(ar__study_json_file(link_path));
  unlink(link_path);
  f = fopen(path, "w"); /* a NUL inside: not one JSON value */
  assert_non_null(f);
  fwrite("{\"a\": 1}\0{\"b\": 2}", 1, 17, f);
  fclose(f);
  assert_null(ar__study_json_file(path));
  unlink(path);
  assert_null(ar__study_json_file(path));
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  unlink(path);
  rmdir(dir);
}

/* cJSON allocates through ar_malloc: an allocation failure is no document,
 * not a crash. */
static void test_out_of_memory(void **state) {
  (void)state;
  const char *text = "{\"samples_per_s\": 12.5, \"sub\": {\"a\": [1, 2, 3]}}";
  int failed = 0;
  for (long k = 0; k < 20; k++) {
    ar_alloc_fail_after(k);
    cJSON *doc = ar__study_json_text(text);
    ar_alloc_fail_after(-1);
    failed += doc == NULL;
    if (doc)
      assert_true(ar__study_json_num(doc, "samples_per_s") == 12.5);
    cJSON_Delete(doc);
  }
  assert_true(failed > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_project_writer),  cmocka_unit_test(test_pretty_summary),
      cmocka_unit_test(test_spacing_and_traps), cmocka_unit_test(test_not_json),
      cmocka_unit_test(test_lines_and_files), cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
