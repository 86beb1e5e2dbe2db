/*
 * The device's checked wrappers (runtime/device/ops.c, device.c): the
 * accessors of the opaque handle, the generic implementations of the
 * optional slots, the skipping of every op once the handle recorded a
 * failure (as the CUDA backend does after an asynchronous error), and the
 * asserts that stop a caller's wrong shapes before a backend sees them.
 * The failure and the empty slots are made by hand through the private
 * runtime/device/device_impl.h, so this runs on the host backend alone.
 */
#define _POSIX_C_SOURCE 200809L /* fork, waitpid, dup2 */
#include "op_fixtures.h"

#include "device_impl.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_accessors(void **state) {
  (void)state;
  ar_device *dev = fx_open_host(3);
  assert_string_equal(ar_device_name(dev), "host");
  assert_int_equal(ar_device_index(dev), 0);
  ar_host_cpus cpus; /* never more threads than the CPUs this process has */
  ar_host_cpus_get(&cpus);
  assert_int_equal(ar_device_threads(dev), ar_host_cpus_cap(&cpus, 3));
  ar_device_set_threads(dev, 1); /* the tenancy runner, between iterations */
  assert_int_equal(ar_device_threads(dev), 1);
  assert_false(ar_device_has_lanes(dev));
  assert_int_equal(ar_device_status(dev), AR_OK);
  assert_int_equal(ar_device_errcode(dev), AR_OK);
  assert_string_equal(ar_device_errmsg(dev), "");
  ar_device *lane = (ar_device *)&lane;
  assert_int_equal(ar_device_open_lane(dev, &lane), AR_UNSUPPORTED);
  assert_ptr_equal(lane, (ar_device *)&lane);
  assert_int_equal(ar_device_errcode(dev), AR_UNSUPPORTED);
  assert_non_null(strstr(ar_device_errmsg(dev), "no queues"));
  /* A failed call is not a failed handle: ops still run. */
  assert_int_equal(ar_device_status(dev), AR_OK);
  ar_device_close(dev);
}

/* A copy_in that always fails, for the generic fill. */
static ar_status broken_copy_in(ar_device *dev, void *dst, const void *src,
                                size_t bytes) {
  (void)dst;
  (void)src;
  return ar_errf(&dev->err, AR_DEVICE, "copy_in of %zu bytes: link lost",
                 bytes);
}

/* A backend without fill, sync or copy gets the wrappers' generic ones;
 * the fill spans several of its staging blocks, and stays inside x. */
static void test_optional_slots(void **state) {
  (void)state;
  ar_device *dev = fx_open_host(2);
  ar_device_ops ops = *dev->ops;
  const ar_device_ops *saved = dev->ops;
  ops.fill = NULL;
  ops.sync = NULL;
  ops.copy = NULL;
  dev->ops = &ops;
  const int64_t n = 2500;
  float *x = fx_floats(dev, n + 1);
  x[n] = 7.0f;
  ar_device_fill(dev, x, n, -1.5f);
  for (int64_t i = 0; i < n; i++)
    assert_true(x[i] == -1.5f);
  assert_true(x[n] == 7.0f);
  ar_device_fill(dev, x, 0, 3.0f); /* nothing */
  assert_true(x[0] == -1.5f);
  assert_int_equal(ar_device_sync(dev), AR_OK);
  x[0] = 1.0f;
  assert_int_equal(ar_device_copy(dev, x + 1, x, sizeof *x), AR_OK);
  assert_true(x[1] == 1.0f);

  /* The generic fill cannot return a status: a failed copy is the
   * handle's failure, and later calls report it. */
  ops.copy_in = broken_copy_in;
  ar_device_fill(dev, x, n, 0.0f);
  assert_int_equal(ar_device_status(dev), AR_DEVICE);
  assert_non_null(strstr(ar_device_errmsg(dev), "link lost"));
  assert_int_equal(ar_device_sync(dev), AR_DEVICE);
  dev->failed = AR_OK;

  dev->ops = saved;
  fx_free_floats(dev, x, n + 1);
  ar_device_close(dev);
}

/* Once a handle recorded a failure, no op reaches the backend and every
 * call with a status returns it; the message stays. */
static void test_skip_after_failure(void **state) {
  (void)state;
  ar_device *dev = fx_open_host(1);
  float *a = fx_floats(dev, 4), *c = fx_floats(dev, 4);
  int32_t *idx = (int32_t *)fx_floats(dev, 4);
  for (int i = 0; i < 4; i++) {
    a[i] = (float)(i + 1);
    c[i] = 9.0f;
    idx[i] = -1;
  }
  ar_errf(&dev->err, AR_DEVICE, "cuda:0: kernel failed (as if)");
  dev->failed = AR_DEVICE;
  assert_int_equal(ar_device_status(dev), AR_DEVICE);

  ar_device_fill(dev, c, 4, 0.0f);
  ar_device_gemm(dev, false, false, 2, 2, 2, 1.0f, a, 2, a, 2, 0.0f, c, 2);
  ar_device_bias_act(dev, 2, 2, a, AR_ACT_RELU, c);
  ar_device_act_grad(dev, 4, AR_ACT_SIGMOID, a, c);
  ar_device_col_sum(dev, 2, 2, a, false, c);
  ar_device_topk(dev, 2, 2, a, 2, idx);
  ar_device_sgd(dev, 4, c, a, NULL, 0.1f, 0.0f, 0.0f);
  ar_device_adam(dev, 4, c, a, a, a, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  for (int i = 0; i < 4; i++) {
    assert_true(c[i] == 9.0f);
    assert_int_equal(idx[i], -1);
  }
  float host[4] = {0};
  assert_int_equal(ar_device_copy_in(dev, c, a, sizeof host), AR_DEVICE);
  assert_true(c[0] == 9.0f);
  assert_int_equal(ar_device_copy_out(dev, host, a, sizeof host), AR_DEVICE);
  assert_true(host[0] == 0.0f);
  assert_int_equal(ar_device_copy(dev, c, a, sizeof host), AR_DEVICE);
  assert_int_equal(ar_device_copy(dev, c, c, sizeof host), AR_DEVICE);
  assert_int_equal(ar_device_sync(dev), AR_DEVICE);
  assert_non_null(strstr(ar_device_errmsg(dev), "kernel failed"));

  dev->failed = AR_OK; /* so that the test can free and close */
  fx_free_floats(dev, a, 4);
  fx_free_floats(dev, c, 4);
  fx_free_floats(dev, (float *)idx, 4);
  ar_device_close(dev);
}

/* ---- the asserts: each call runs in a child, which must abort ---------- */

static ar_device *adev;
static float abuf[16];
static int32_t aidx[16];

static void topk_k_past_cols(void) {
  ar_device_topk(adev, 1, 3, abuf, 4, aidx);
}
static void topk_negative_k(void) {
  ar_device_topk(adev, 1, 3, abuf, -1, aidx);
}
static void fill_null(void) { ar_device_fill(adev, NULL, 4, 0.0f); }
static void fill_negative(void) { ar_device_fill(adev, abuf, -1, 0.0f); }
static void gemm_negative(void) {
  ar_device_gemm(adev, false, false, -1, 2, 2, 1.0f, abuf, 2, abuf, 2, 0.0f,
                 abuf, 2);
}
static void gemm_short_stride(void) { /* A (2,3) with lda 2 */
  ar_device_gemm(adev, false, false, 2, 2, 3, 1.0f, abuf, 2, abuf, 2, 0.0f,
                 abuf, 2);
}
static void gemm_null_b(void) {
  ar_device_gemm(adev, false, true, 2, 2, 2, 1.0f, abuf, 2, NULL, 2, 0.0f,
                 abuf, 2);
}
static void spmm_null_row_ptr(void) {
  ar_device_spmm(adev, 2, NULL, aidx, abuf, abuf, 2, abuf);
}
static void bias_act_bad_act(void) {
  ar_device_bias_act(adev, 2, 2, NULL, (ar_act)42, abuf);
}
static void col_sum_null_db(void) {
  ar_device_col_sum(adev, 2, 2, abuf, false, NULL);
}
static void xent_null_loss(void) {
  int64_t ptr[2] = {0, 0};
  ar_device_softmax_xent(adev, 1, 2, abuf, ptr, aidx, 1.0f, NULL, NULL);
}
static void adam_step_zero(void) {
  ar_device_adam(adev, 4, abuf, abuf, abuf, abuf, 0.1f, 0.9f, 0.999f, 1e-8f,
                 0.0f, 0);
}
static void sgd_momentum_without_velocity(void) {
  ar_device_sgd(adev, 4, abuf, abuf, NULL, 0.1f, 0.9f, 0.0f);
}
static void set_threads_zero(void) { ar_device_set_threads(adev, 0); }

static void expect_abort(const char *what, void (*call)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0)
      dup2(null, STDERR_FILENO); /* the assert's report */
    call();
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
    fail_msg("%s: the wrapper did not stop the call (status %#x)", what,
             (unsigned)status);
}

static void test_asserts(void **state) {
  (void)state;
  adev = fx_open_host(1);
  /* The same arguments, valid, run. */
  ar_device_topk(adev, 1, 3, abuf, 3, aidx);
  ar_device_topk(adev, 0, 3, abuf, 0, NULL);
  ar_device_gemm(adev, false, false, 2, 2, 0, 1.0f, NULL, 0, NULL, 0, 0.0f,
                 abuf, 2);
  ar_device_sgd(adev, 4, abuf, abuf, NULL, 0.1f, 0.0f, 0.0f);
  expect_abort("topk k > cols", topk_k_past_cols);
  expect_abort("topk k < 0", topk_negative_k);
  expect_abort("fill NULL", fill_null);
  expect_abort("fill n < 0", fill_negative);
  expect_abort("gemm m < 0", gemm_negative);
  expect_abort("gemm lda < k", gemm_short_stride);
  expect_abort("gemm B NULL", gemm_null_b);
  expect_abort("spmm row_ptr NULL", spmm_null_row_ptr);
  expect_abort("bias_act act", bias_act_bad_act);
  expect_abort("col_sum db NULL", col_sum_null_db);
  expect_abort("softmax_xent loss_rows NULL", xent_null_loss);
  expect_abort("adam t = 0", adam_step_zero);
  expect_abort("sgd momentum, vel NULL", sgd_momentum_without_velocity);
  expect_abort("set_threads 0", set_threads_zero);
  ar_device_close(adev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accessors),
      cmocka_unit_test(test_optional_slots),
      cmocka_unit_test(test_skip_after_failure),
      cmocka_unit_test(test_asserts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
