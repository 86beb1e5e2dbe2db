/*
 * tenancy: the operator metrics' formats (runtime/tenancy/metrics.c) on
 * synthetic snapshots: the Prometheus text line by line (every family's
 * HELP and TYPE before its samples, exact counters past 2^53, cumulative
 * histogram buckets ending at +Inf with _count equal to that bucket,
 * escaped label values), the status page's JSON read back with cJSON, and
 * the history's ring and rates.  A live server is scraped by metrics.sh.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

static ar__msnap snapshot(void) {
  ar__msnap s;
  memset(&s, 0, sizeof s);
  s.time = 1800000000.25;
  snprintf(s.device, sizeof s.device, "%s", "cu\"da\\0");
  snprintf(s.policy, sizeof s.policy, "%s", "pack");
  s.jobs[AR__MS_RUNNING] = 2;
  s.jobs[AR__MS_QUEUED] = 1;
  s.jobs[AR__MS_DONE] = 7;
  s.run.iterations = ((uint64_t)1 << 60) + 1; /* not a double */
  s.run.samples = 123456789;
  s.run.capacity_bytes = (size_t)1 << 30;
  s.run.persistent_bytes = 3000;
  s.run.lane_bytes = 5000;
  s.run.queued = 1;
  s.run.admission_waits = 4;
  s.run.switch_buckets[0] = 1;
  s.run.switch_buckets[2] = 2;
  s.run.switch_buckets[AR_RUNNER_SWITCH_BOUNDS] = 3; /* above 1 s */
  s.run.switches = 6;
  s.run.switch_sum_s = 4.5;
  s.run.lanes = 70;
  for (size_t i = 0; i < AR_RUNNER_STATS_LANES; i++)
    s.run.lane[i] = (ar_runner_lane_stats){(uint32_t)i + 1, 100 * i, 64, 1, i == 3};
  return s;
}

static char *prometheus(const ar__msnap *s, double rate) {
  ar_sbuf b = {0};
  ar__metrics_prometheus(s, rate, &b);
  assert_false(b.oom);
  return b.buf;
}

/* The family a sample line belongs to: its name up to '{' or ' ', less a
 * histogram suffix when that family was declared a histogram. */
static void family_of(const char *line, const char *histogram, char *out, size_t cap) {
  size_t n = strcspn(line, "{ ");
  snprintf(out, cap, "%.*s", (int)n, line);
  size_t h = strlen(histogram);
  if (!strncmp(out, histogram, h) && (!strcmp(out + h, "_bucket") || !strcmp(out + h, "_sum") ||
                                      !strcmp(out + h, "_count")))
    out[h] = '\0';
}

static void test_prometheus_shape(void **state) {
  (void)state;
  ar__msnap s = snapshot();
  char *text = prometheus(&s, 12.5);
  /* Walk the lines: a HELP then a TYPE open each family; every sample
   * belongs to the family open now. */
  char open_family[128] = "", helped[128] = "", histogram[128] = "-";
  int families = 0, samples = 0;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char name[128], type[32];
    if (sscanf(line, "# HELP %127s", name) == 1) {
      snprintf(helped, sizeof helped, "%s", name);
      assert_true(strlen(line) > strlen(name) + 8); /* a text after the name */
      continue;
    }
    if (sscanf(line, "# TYPE %127s %31s", name, type) == 2) {
      assert_string_equal(name, helped);
      assert_true(!strcmp(type, "counter") || !strcmp(type, "gauge") ||
                  !strcmp(type, "histogram"));
      if (!strcmp(type, "counter"))
        assert_string_equal(name + strlen(name) - 6, "_total");
      if (!strcmp(type, "histogram"))
        snprintf(histogram, sizeof histogram, "%s", name);
      snprintf(open_family, sizeof open_family, "%s", name);
      families++;
      continue;
    }
    assert_true(line[0] != '#');
    char fam[128];
    family_of(line, histogram, fam, sizeof fam);
    if (strcmp(fam, open_family) != 0)
      fail_msg("sample '%s' outside its family (open: %s)", line, open_family);
    samples++;
  }
  assert_true(families >= 15);
  assert_true(samples >= families);
  ar_free(text);
}

static void test_prometheus_values(void **state) {
  (void)state;
  ar__msnap s = snapshot();
  char *text = prometheus(&s, 12.5);
  const char *want[] = {
      "\naccelrt_iterations_total 1152921504606846977\n",
      "\naccelrt_samples_total 123456789\n",
      "\naccelrt_samples_per_second 12.5\n",
      "\naccelrt_jobs{state=\"running\"} 2\n",
      "\naccelrt_jobs{state=\"queued\"} 1\n",
      "\naccelrt_jobs{state=\"done\"} 7\n",
      "\naccelrt_jobs{state=\"pending\"} 0\n",
      "\naccelrt_jobs{state=\"cancelled\"} 0\n",
      "\naccelrt_memory_capacity_bytes 1073741824\n",
      "\naccelrt_memory_persistent_bytes 3000\n",
      "\naccelrt_memory_lane_bytes 5000\n",
      "\naccelrt_lanes 70\n",
      "\naccelrt_admission_waiting_jobs 1\n",
      "\naccelrt_admission_waits_total 4\n",
      /* cumulative: 1, 1, 3, ... 3, then +Inf 6 */
      "\naccelrt_lane_switch_latency_seconds_bucket{le=\"5e-05\"} 1\n"
      "accelrt_lane_switch_latency_seconds_bucket{le=\"0.0001\"} 1\n"
      "accelrt_lane_switch_latency_seconds_bucket{le=\"0.00025\"} 3\n",
      "accelrt_lane_switch_latency_seconds_bucket{le=\"1\"} 3\n"
      "accelrt_lane_switch_latency_seconds_bucket{le=\"+Inf\"} 6\n"
      "accelrt_lane_switch_latency_seconds_sum 4.5\n"
      "accelrt_lane_switch_latency_seconds_count 6\n",
      "\naccelrt_info{device=\"cu\\\"da\\\\0\",policy=\"pack\"} 1\n",
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(text, want[i]))
      fail_msg("missing:%s\nin:\n%s", want[i], text);
  ar_free(text);
}

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v))
    fail_msg("no number '%s'", key);
  return v->valuedouble;
}

static void test_status_json(void **state) {
  (void)state;
  ar__msnap s = snapshot();
  ar__mhist *h = calloc(1, sizeof *h);
  assert_non_null(h);
  for (int i = 0; i < 3; i++) {
    s.time = 1800000000.0 + 2 * i;
    s.run.samples = 1000 * (uint64_t)i;
    ar__mhist_push(h, &s);
  }
  ar_sbuf b = {0};
  ar__metrics_status_json(&s, h, 2.0, &b);
  assert_false(b.oom);
  cJSON *j = cJSON_Parse(b.buf);
  if (!j)
    fail_msg("not JSON: %s", b.buf);
  assert_string_equal(cJSON_GetObjectItem(j, "device")->valuestring, "cu\"da\\0");
  const cJSON *jobs = cJSON_GetObjectItem(j, "jobs");
  assert_int_equal((int)num(jobs, "running"), 2);
  assert_int_equal((int)num(jobs, "done"), 7);
  assert_true(num(j, "time") == 1800000004.0);
  assert_true(num(j, "samples_per_s") == 500.0);
  const cJSON *mem = cJSON_GetObjectItem(j, "memory");
  assert_true(num(mem, "free_bytes") == (double)((1 << 30) - 8000));
  assert_int_equal((int)num(j, "lanes_total"), 70);
  const cJSON *lanes = cJSON_GetObjectItem(j, "lanes");
  assert_int_equal(cJSON_GetArraySize(lanes), AR_RUNNER_STATS_LANES);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(lanes, 3), "running")));
  const cJSON *hist = cJSON_GetObjectItem(j, "history");
  const char *arrays[] = {"time", "persistent_bytes", "lane_bytes", "running", "queued",
                          "samples_per_s"};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(hist, arrays[i])), 3);
  assert_true(cJSON_GetArrayItem(cJSON_GetObjectItem(hist, "samples_per_s"), 1)->valuedouble ==
              500.0);
  cJSON_Delete(j);
  ar_sbuf_fini(&b);
  free(h);
}

/* The ring keeps the newest AR__MHIST_CAP points in order; the rate is
 * the samples since the point before over the seconds between them, 0
 * with one point or when the counter went back. */
static void test_history(void **state) {
  (void)state;
  ar__mhist *h = calloc(1, sizeof *h);
  assert_non_null(h);
  ar__msnap s = snapshot();
  s.time = 10;
  s.run.samples = 0;
  ar__mhist_push(h, &s);
  assert_true(ar__mhist_rate(h) == 0.0);
  s.time = 14;
  s.run.samples = 400;
  ar__mhist_push(h, &s);
  assert_true(ar__mhist_rate(h) == 100.0);
  s.time = 16;
  s.run.samples = 100; /* a new runner */
  ar__mhist_push(h, &s);
  assert_true(ar__mhist_rate(h) == 0.0);
  for (int i = 0; i < AR__MHIST_CAP + 5; i++) {
    s.time = 100 + i;
    s.run.samples = 10 * (uint64_t)i;
    ar__mhist_push(h, &s);
  }
  assert_int_equal(h->n, AR__MHIST_CAP);
  assert_true(h->p[h->first].time == 105.0);
  assert_true(h->p[(h->first + h->n - 1) % AR__MHIST_CAP].time == 100.0 + AR__MHIST_CAP + 4);
  assert_true(ar__mhist_rate(h) == 10.0);
  free(h);
}

static void test_states(void **state) {
  (void)state;
  assert_int_equal(ar__mstate_of(AR_TJ_ADMITTED), AR__MS_RUNNING);
  assert_int_equal(ar__mstate_of(AR_TJ_STOPPED), AR__MS_QUEUED);
  assert_string_equal(ar__mstate_name(ar__mstate_of(AR_TJ_CANCELLED)), "cancelled");
  assert_string_equal(ar__mstate_name(ar__mstate_of(AR_TJ_PENDING)), "pending");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prometheus_shape), cmocka_unit_test(test_prometheus_values),
      cmocka_unit_test(test_status_json),      cmocka_unit_test(test_history),
      cmocka_unit_test(test_states),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
