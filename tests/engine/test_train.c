/* The training loop: a resumed run reaches exactly the parameters of an
 * uninterrupted one (single thread, shuffling on, across an epoch
 * boundary); damaged checkpoints are refused; training lowers the loss. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accelrt/runtime.h"
#include "engine_fixtures.h"
#include "engine_scratch.h"

static ar_spec *job(const char *out, int iterations) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: resume\nseed: 11\ndevice: host\n"
           "model:\n  input: {sparse: 300}\n  layers:\n"
           "    - {name: h, dense: 16, activation: relu}\n"
           "    - {name: out, dense: 40, activation: softmax}\n"
           "data: {generate: {train_points: 200, test_points: 50, features: 300, labels: 40,"
           " nnz: 8, labels_per_point: 2}, shuffle_window: 64}\n"
           "train: {batch: 32, iterations: %d, threads: 1, eval_every: 4,"
           " optimizer: {adam: {lr: 0.01}}}\n"
           "output: {dir: '%s'}\n",
           iterations, out);
  return parse(yaml);
}

static void run_job(const char *out, int iterations, bool resume, ar_summary *s) {
  ar_spec *spec = job(out, iterations);
  ar_run_opts o = AR_RUN_OPTS_INIT;
  o.quiet = true;
  o.resume = resume;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_run(spec, &o, s, &err);
  if (st != AR_OK)
    fail_msg("ar_run: %s", err.msg);
  ar_spec_destroy(spec);
}

/* Header: magic 8, version 4, count 4, 5 x i64 (iteration, epoch,
 * rows_in_epoch, samples, step), f64 train_s.  Everything but train_s and
 * the checksum must match between the two runs. */
#define OFF_TRAIN_S (8 + 4 + 4 + 40)

/* The checkpoints that runs a and b left are the same but for those. */
static void same_checkpoints(const char *a, const char *b) {
  char pa[340], pb[340];
  snprintf(pa, sizeof pa, "%s/checkpoint.bin", a);
  snprintf(pb, sizeof pb, "%s/checkpoint.bin", b);
  size_t la, lb;
  unsigned char *ca = slurp(pa, &la), *cb = slurp(pb, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(ca, cb, OFF_TRAIN_S);
  assert_memory_equal(ca + OFF_TRAIN_S + 8, cb + OFF_TRAIN_S + 8, la - OFF_TRAIN_S - 8 - 4);
  free(ca);
  free(cb);
}

static void test_resume_matches_uninterrupted(void **state) {
  (void)state;
  char a[300], b[300];
  snprintf(a, sizeof a, "%s/full", tmpdir);
  snprintf(b, sizeof b, "%s/split", tmpdir);
  ar_summary sa, sb1, sb2;
  run_job(a, 13, false, &sa); /* 200 points / 32 = 7 batches: crosses an epoch */
  run_job(b, 5, false, &sb1);
  {
    /* A scheduler sees a resumed job's position before it starts. */
    ar_spec *spec = job(b, 13);
    ar_run_opts o = AR_RUN_OPTS_INIT;
    o.resume = true;
    o.quiet = true;
    ar_err err = AR_ERR_INIT;
    ar_job *j = NULL;
    assert_int_equal(ar_job_open(spec, &o, &j, &err), AR_OK);
    assert_int_equal(ar_job_iteration(j), 5);
    assert_int_equal(ar_job_total(j), 13);
    ar_job_close(j);
    ar_spec_destroy(spec);
  }
  run_job(b, 13, true, &sb2);
  assert_int_equal(sa.iterations, 13);
  assert_int_equal(sb2.iterations, 13);
  assert_int_equal(sb2.samples, sa.samples);
  same_checkpoints(a, b);
  assert_true(sa.p_at[0] >= 0);
  assert_true(sa.p_at[0] == sb2.p_at[0]);
  /* The resumed run's metrics hold each evaluation once, in order: those
   * of the first part (4, and 5 where it stopped) and those after it. */
  char mp[340];
  snprintf(mp, sizeof mp, "%s/metrics.jsonl", b);
  FILE *f = fopen(mp, "r");
  assert_non_null(f);
  char line[1024];
  static const long expect[] = {4, 5, 8, 12, 13};
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    assert_true(n < 5);
    long it = strtol(strstr(line, "\"iteration\": ") + 13, NULL, 10);
    assert_int_equal(it, expect[n]);
    n++;
  }
  fclose(f);
  assert_int_equal(n, 5);
}

/* The job API in caller-owned blocks (as lanes use it), with the
 * persistent block moved to another address after iteration 6, ends with
 * the same checkpoint as ar_run. */
static void test_job_api_in_given_blocks_with_a_move(void **state) {
  (void)state;
  char a[300], b[300];
  snprintf(a, sizeof a, "%s/api_ref", tmpdir);
  snprintf(b, sizeof b, "%s/api_blocks", tmpdir);
  ar_summary sa, sb;
  run_job(a, 13, false, &sa);
  ar_spec *spec = job(b, 13);
  ar_run_opts o = AR_RUN_OPTS_INIT;
  o.quiet = true;
  ar_err err = AR_ERR_INIT;
  ar_job *j = NULL;
  assert_int_equal(ar_job_open(spec, &o, &j, &err), AR_OK);
  const ar_plan *plan = ar_job_plan(j);
  assert_true(plan->persistent_bytes > 0 && plan->ephemeral_bytes > 0);
  ar_device *dev = NULL;
  ar_device_opts dopts = AR_DEVICE_OPTS_INIT;
  dopts.threads = 1;
  assert_int_equal(ar_device_open("host", &dopts, &dev, &err), AR_OK);
  size_t pb1 = plan->persistent_bytes, eb = plan->ephemeral_bytes;
  unsigned char *p1 = aligned_alloc(256, (pb1 + 255) / 256 * 256);
  unsigned char *p2 = aligned_alloc(256, (pb1 + 255) / 256 * 256);
  unsigned char *e1 = aligned_alloc(256, (eb + 255) / 256 * 256);
  assert_int_equal(ar_job_start(j, dev, p1, e1, &err), AR_OK);
  assert_ptr_equal(ar_job_model(j)->persistent, p1);
  assert_int_equal(ar_job_total(j), 13);
  while (!ar_job_done(j)) {
    assert_int_equal(ar_job_step(j, &err), AR_OK);
    if (ar_job_iteration(j) == 6) {
      memcpy(p2, p1, pb1);
      memset(p1, 0xff, pb1); /* any read of the old block would show */
      ar_job_rebase(j, p2, NULL);
    }
  }
  assert_int_equal(ar_job_step(j, &err), AR_STATE);
  assert_int_equal(ar_job_finish(j, false, &sb, &err), AR_OK);
  ar_job_close(j);
  ar_device_close(dev);
  free(p1);
  free(p2);
  free(e1);
  ar_spec_destroy(spec);
  assert_int_equal(sb.iterations, 13);
  same_checkpoints(a, b);
  assert_true(sa.p_at[0] == sb.p_at[0]);
}

static void test_damaged_checkpoint_refused(void **state) {
  (void)state;
  char d[300], p[340];
  snprintf(d, sizeof d, "%s/damaged", tmpdir);
  ar_summary s;
  run_job(d, 3, false, &s);
  snprintf(p, sizeof p, "%s/checkpoint.bin", d);
  size_t len;
  unsigned char *c = slurp(p, &len);
  ar_spec *spec = job(d, 6);
  ar_run_opts o = AR_RUN_OPTS_INIT;
  o.quiet = true;
  o.resume = true;
  ar_err err = AR_ERR_INIT;
  /* One flipped bit in a tensor: the checksum catches it. */
  c[len / 2] ^= 1;
  FILE *f = fopen(p, "wb");
  fwrite(c, 1, len, f);
  fclose(f);
  assert_int_equal(ar_run(spec, &o, &s, &err), AR_CORRUPT);
  assert_non_null(strstr(err.msg, "checksum"));
  /* Truncated. */
  f = fopen(p, "wb");
  fwrite(c, 1, len / 3, f);
  fclose(f);
  assert_int_equal(ar_run(spec, &o, &s, &err), AR_CORRUPT);
  assert_non_null(strstr(err.msg, "truncated"));
  free(c);
  ar_spec_destroy(spec);
}

/* --resume drops the lines of iterations that will run again: by the JSON
 * member, whatever the spacing, never a look-alike inside a string. */
static void test_trim_lines(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/trim.jsonl", tmpdir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("{\"iteration\": 10, \"loss\": 1}\n"
        "{\"iteration\":30,\"loss\":2}\n"
        "{\"note\": \"\\\"iteration\\\": 99\", \"iteration\": 20}\n"
        "{\"event\": \"job\"}\n"
        "not json\n"
        "{\n", f);
  fclose(f);
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_trim_lines(NULL, path, 20, "iteration", &err), AR_OK);
  size_t len = 0;
  unsigned char *text = slurp(path, &len);
  const char *want = "{\"iteration\": 10, \"loss\": 1}\n"
                     "{\"note\": \"\\\"iteration\\\": 99\", \"iteration\": 20}\n"
                     "{\"event\": \"job\"}\n"
                     "not json\n"
                     "{\n";
  assert_int_equal(len, strlen(want));
  assert_memory_equal(text, want, len);
  free(text);
  /* Tab-separated lines: the number that starts the line. */
  snprintf(path, sizeof path, "%s/trim.tsv", tmpdir);
  f = fopen(path, "w");
  fputs("iteration\tx\n5\ta\n6\tb\n7\tc\n", f);
  fclose(f);
  assert_int_equal(ar_trim_lines(NULL, path, 6, NULL, &err), AR_OK);
  text = slurp(path, &len);
  assert_int_equal(len, strlen("iteration\tx\n5\ta\n6\tb\n"));
  assert_memory_equal(text, "iteration\tx\n5\ta\n6\tb\n", len);
  free(text);
  /* A missing file is fine. */
  snprintf(path, sizeof path, "%s/none.jsonl", tmpdir);
  assert_int_equal(ar_trim_lines(NULL, path, 6, "iteration", &err), AR_OK);
}

static void test_training_learns(void **state) {
  (void)state;
  char d[300];
  snprintf(d, sizeof d, "%s/learn", tmpdir);
  ar_summary s;
  run_job(d, 60, false, &s);
  char mp[340];
  snprintf(mp, sizeof mp, "%s/metrics.jsonl", d);
  FILE *f = fopen(mp, "r");
  char line[1024];
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  double first = strtod(strstr(line, "\"test_loss\": ") + 13, NULL);
  /* Planted structure: the test loss must fall well below its start and
   * P@1 must beat chance (2.5% for 40 labels) many times over. */
  assert_true(s.loss < 0.8 * first);
  assert_true(s.p_at[0] > 30.0);
}

/* A job with a timeline records its spans without allocating: after the
 * first step every allocation fails, and the next five (inside the first
 * epoch) still run and record what the rule says: per-layer detail in
 * iterations 2, 3 (the first three) and 4 (every fourth), and a batch,
 * an optimizer and an iteration span in each. */
static void test_trace_records_without_allocating(void **state) {
  (void)state;
  char d[300];
  snprintf(d, sizeof d, "%s/traced", tmpdir);
  ar_spec *spec = job(d, 13);
  spec->train.eval_every = 0;
  spec->train.checkpoint_every = 0;
  ar_err err = AR_ERR_INIT;
  ar_trace_opts to = AR_TRACE_OPTS_INIT;
  to.detail_first = 3;
  to.detail_every = 4;
  ar_job_opts jo = AR_JOB_OPTS_INIT;
  assert_int_equal(ar_trace_create(&to, &jo.trace, &err), AR_OK);
  ar_run_opts o = AR_RUN_OPTS_INIT;
  o.quiet = true;
  ar_job *j = NULL;
  ar_device *dev = NULL;
  ar_device_opts dopts = AR_DEVICE_OPTS_INIT;
  dopts.threads = 1;
  assert_int_equal(ar_job_open_ex(spec, &o, &jo, &j, &err), AR_OK);
  assert_int_equal(ar_device_open("host", &dopts, &dev, &err), AR_OK);
  assert_int_equal(ar_job_start(j, dev, NULL, NULL, &err), AR_OK);
  assert_int_equal(ar_job_step(j, &err), AR_OK);
  size_t before = ar_trace_count(jo.trace);
  ar_status st = AR_OK;
  ar_alloc_fail_after(0);
  for (int i = 0; i < 5 && st == AR_OK; i++)
    st = ar_job_step(j, &err);
  ar_alloc_fail_after(-1);
  assert_int_equal(st, AR_OK);
  assert_int_equal(ar_trace_count(jo.trace) - before, 3 * 5 + 5 * 3);
  assert_int_equal(ar_trace_dropped(jo.trace), 0);
  ar_job_close(j);
  ar_device_close(dev);
  ar_trace_destroy(jo.trace);
  ar_spec_destroy(spec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_records_without_allocating),
      cmocka_unit_test(test_resume_matches_uninterrupted),
      cmocka_unit_test(test_job_api_in_given_blocks_with_a_move),
      cmocka_unit_test(test_damaged_checkpoint_refused),
      cmocka_unit_test(test_training_learns),
      cmocka_unit_test(test_trim_lines),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
