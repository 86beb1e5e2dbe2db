/* The memory plan against the device's memory and against size_t:
 *
 * - ar_plan_fit refuses a plan one byte over the limit (host: the whole
 *   plan; a GPU: the two blocks against the device, the host entries
 *   against the host), with the bytes, the limit, where it came from and
 *   what to lower; it lets one that fits, or an unknown limit, through.
 * - A 10^9-wide layer is refused by ar_model_create before anything is
 *   allocated, with that message (not an allocation failure).
 * - Widths whose byte counts leave size_t are refused by ar_plan_compute
 *   with a message, without wrapping (UBSan builds check the arithmetic).
 * - ar_job_data_bytes remembers an idx file's size only while the file is
 *   the same: rewritten with more images, the figure follows. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accelrt/graph.h"
#include "accelrt/runtime.h"
#include "engine_fixtures.h"

static const char *SMALL =
    "name: small\nseed: 1\ndevice: host\n"
    "model:\n  input: {sparse: 2000}\n  layers:\n"
    "    - {name: hidden, dense: %s, activation: relu}\n"
    "    - {name: out, dense: 100, activation: softmax}\n"
    "data: {train: x.txt}\ntrain: {batch: 64, iterations: 1, threads: 1}\n";

static ar_spec *small(const char *hidden) {
  char yaml[1024];
  snprintf(yaml, sizeof yaml, SMALL, hidden);
  return parse(yaml);
}

static void test_fit_host(void **state) {
  (void)state;
  ar_spec *spec = small("64");
  ar_plan plan;
  assert_int_equal(ar_plan_compute_on(spec, 20, 3, true, &plan, NULL), AR_OK);
  ar_mem_limit lim;
  memset(&lim, 0, sizeof lim);
  lim.on_host = true;
  snprintf(lim.host_source, sizeof lim.host_source, "the test's limit");
  ar_err err = AR_ERR_INIT;
  lim.host = plan.total_bytes;
  assert_int_equal(ar_plan_fit(&plan, spec, &lim, &err), AR_OK);
  lim.host = 0; /* unknown: not checked */
  assert_int_equal(ar_plan_fit(&plan, spec, &lim, &err), AR_OK);
  lim.host = plan.total_bytes - 1;
  assert_int_equal(ar_plan_fit(&plan, spec, &lim, &err), AR_NOMEM);
  char want[64];
  snprintf(want, sizeof want, "%zu bytes", plan.total_bytes);
  assert_non_null(strstr(err.msg, want));
  snprintf(want, sizeof want, "%zu bytes", plan.total_bytes - 1);
  assert_non_null(strstr(err.msg, want));
  assert_non_null(strstr(err.msg, "the test's limit"));
  assert_non_null(strstr(err.msg, "nothing was allocated"));
  /* The largest tensor is hidden.w (2000 x 64): its width is what to lower. */
  assert_non_null(strstr(err.msg, "model.layers.hidden.dense"));
  ar_plan_fini(&plan);
  ar_spec_destroy(spec);
}

/* On a GPU the blocks are device memory and the host entries (here a
 * dense batch's staging copy) host memory, each against its own limit. */
static void test_fit_gpu(void **state) {
  (void)state;
  ar_spec *spec = parse("name: g\nmodel:\n  input: {dense: 500}\n  layers:\n"
                        "    - {name: out, dense: 10}\n"
                        "data: {train: x.txt}\ntrain: {batch: 256, iterations: 1}\n");
  ar_plan plan;
  assert_int_equal(ar_plan_compute_on(spec, 500, 1, false, &plan, NULL), AR_OK);
  assert_int_equal(plan.host_bytes, 256 * 500 * 4);
  const size_t blocks = plan.persistent_bytes + plan.ephemeral_bytes;
  ar_mem_limit lim;
  memset(&lim, 0, sizeof lim);
  lim.on_host = false;
  lim.host = plan.host_bytes;
  lim.device = blocks;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_plan_fit(&plan, spec, &lim, &err), AR_OK);
  lim.device = blocks - 1;
  assert_int_equal(ar_plan_fit(&plan, spec, &lim, &err), AR_NOMEM);
  lim.device = blocks;
  lim.host = plan.host_bytes - 1;
  assert_int_equal(ar_plan_fit(&plan, spec, &lim, &err), AR_NOMEM);
  assert_non_null(strstr(err.msg, "host memory"));
  ar_plan_fini(&plan);
  ar_spec_destroy(spec);
}

/* The case: a 10^9-wide layer on the host is refused by the plan,
 * not by a failing (or, with overcommit, succeeding) allocation. */
static void test_wide_layer_refused_before_allocating(void **state) {
  (void)state;
  ar_spec *spec = small("1000000000");
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = 1;
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", &o, &dev, &err), AR_OK);
  ar_model *m = NULL;
  assert_int_equal(ar_model_create(dev, spec, 20, 3, &m, &err), AR_NOMEM);
  assert_null(m);
  assert_int_equal(ar_device_bytes_peak(dev), 0);
  assert_non_null(strstr(err.msg, "job 'small' needs"));
  assert_non_null(strstr(err.msg, "this host can give it"));
  assert_non_null(strstr(err.msg, "nothing was allocated"));
  assert_non_null(strstr(err.msg, "model.layers.hidden.dense"));
  ar_device_close(dev);
  ar_spec_destroy(spec);
}

/* Widths at the schema's limit (2^31 - 1): one weight matrix is just
 * below 2^64 bytes, the plan's sum is not; refused with a message. */
static void test_overflow_refused(void **state) {
  (void)state;
  ar_spec *spec = parse("name: o\nmodel:\n  input: {dense: 2147483647}\n  layers:\n"
                        "    - {name: wide, dense: 2147483647}\n"
                        "    - {name: out, dense: 2147483647}\n"
                        "data: {train: x.txt}\ntrain: {batch: 1048576, iterations: 1}\n");
  ar_plan plan;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_plan_compute_on(spec, 1, 1, true, &plan, &err), AR_RANGE);
  assert_non_null(strstr(err.msg, "overflows"));
  assert_non_null(strstr(err.msg, "wide."));
  assert_int_equal(plan.count, 0);
  assert_null(plan.entries);
  /* SGD without momentum (no optimizer state): the weights fit size_t,
   * the ephemeral block (the gradient, the input batch) does not. */
  ar_spec_destroy(spec);
  spec = parse("name: o\nmodel:\n  input: {dense: 2147483647}\n  layers:\n"
               "    - {name: out, dense: 2147483647}\n"
               "data: {train: x.txt}\n"
               "train: {batch: 1, iterations: 1, optimizer: {sgd: {lr: 0.1, momentum: 0}}}\n");
  assert_int_equal(ar_plan_compute_on(spec, 1, 1, false, &plan, &err), AR_RANGE);
  assert_non_null(strstr(err.msg, "overflows"));
  assert_non_null(strstr(err.msg, "out.grad"));
  ar_spec_destroy(spec);
}


/* An idx file of n 4x4 images (values i) and its labels, named by the
 * MNIST rule next to it. */
static void write_idx(const char *dir, uint32_t n) {
  char p[512];
  uint8_t hd[16] = {0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 4};
  for (int k = 0; k < 4; k++)
    hd[4 + k] = (uint8_t)(n >> (24 - 8 * k));
  snprintf(p, sizeof p, "%s/d-images-idx3-ubyte", dir);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  fwrite(hd, 1, 16, f);
  for (uint32_t i = 0; i < n * 16; i++)
    fputc((int)(i % 251), f);
  fclose(f);
  hd[3] = 1;
  snprintf(p, sizeof p, "%s/d-labels-idx1-ubyte", dir);
  f = fopen(p, "wb");
  assert_non_null(f);
  fwrite(hd, 1, 8, f);
  for (uint32_t i = 0; i < n; i++)
    fputc((int)(i % 3), f);
  fclose(f);
}

static void test_data_bytes_follow_the_file(void **state) {
  (void)state;
  char dir[] = "/tmp/accelrt-plan-XXXXXX", yaml[1024];
  assert_non_null(mkdtemp(dir));
  snprintf(yaml, sizeof yaml,
           "name: img\nseed: 1\ndevice: host\n"
           "model:\n  input: {image: [1, 4, 4]}\n  layers:\n"
           "    - {name: flat, op: flatten}\n    - {name: out, dense: 3, activation: softmax}\n"
           "data: {format: idx, train: %s/d-images-idx3-ubyte}\n"
           "train: {batch: 2, iterations: 1, threads: 1}\n",
           dir);
  ar_spec *spec = parse(yaml);
  ar_err err = {0};
  size_t b10 = 0, again = 0, b40 = 0;
  write_idx(dir, 10);
  assert_int_equal(ar_job_data_bytes(spec, false, &b10, &err), AR_OK);
  assert_true(b10 >= 10 * 16);
  assert_int_equal(ar_job_data_bytes(spec, false, &again, &err), AR_OK);
  assert_int_equal(again, b10);
  write_idx(dir, 40); /* the same name, four times the images */
  assert_int_equal(ar_job_data_bytes(spec, false, &b40, &err), AR_OK);
  assert_true(b40 > b10);
  assert_true(b40 - b10 >= 30 * 16);
  char p[512];
  snprintf(p, sizeof p, "%s/d-images-idx3-ubyte", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/d-labels-idx1-ubyte", dir);
  unlink(p);
  rmdir(dir);
  ar_spec_destroy(spec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fit_host),
      cmocka_unit_test(test_fit_gpu),
      cmocka_unit_test(test_wide_layer_refused_before_allocating),
      cmocka_unit_test(test_overflow_refused),
      cmocka_unit_test(test_data_bytes_follow_the_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
