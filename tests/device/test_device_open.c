/*
 * Device wrappers: opening by name ("host", "auto", "cuda:N", bad names),
 * options, byte accounting, out-of-memory paths through the allocation
 * hook, copies, and the `accelrt info` description.
 */
#define _GNU_SOURCE /* dup, dup2, lseek, fileno; sched_getaffinity, CPU_COUNT */
#include "op_fixtures.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

/* Runs fn with stderr redirected to a temporary file and returns what was
 * written there (caller frees with test_free). */
static char *capture_stderr(void (*fn)(void *), void *arg) {
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  fflush(stderr);
  int saved = dup(fileno(stderr));
  assert_true(saved >= 0);
  assert_true(dup2(fileno(tmp), fileno(stderr)) >= 0);
  fn(arg);
  fflush(stderr);
  assert_true(dup2(saved, fileno(stderr)) >= 0);
  close(saved);
  /* stderr wrote through the shared descriptor, so ask it, not tmp's
   * (unused) stdio buffer. */
  long n = (long)lseek(fileno(tmp), 0, SEEK_END);
  assert_true(n >= 0);
  char *text = test_malloc((size_t)n + 1);
  lseek(fileno(tmp), 0, SEEK_SET);
  ssize_t got = read(fileno(tmp), text, (size_t)n);
  assert_true(got == n);
  text[n] = '\0';
  fclose(tmp);
  return text;
}

static void test_open_host(void **state) {
  (void)state;
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", NULL, &dev, &err), AR_OK);
  assert_non_null(dev);
  assert_string_equal(ar_device_name(dev), "host");
  assert_true(ar_device_threads(dev) >= 1);
  assert_int_equal(ar_device_bytes_in_use(dev), 0);
  ar_device_close(dev);

  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = 2;
  o.pin = false;
  assert_int_equal(ar_device_open("host", &o, &dev, &err), AR_OK);
  ar_host_cpus cpus;
  ar_host_cpus_get(&cpus);
  assert_int_equal(ar_device_threads(dev), cpus.cpus < 2 ? cpus.cpus : 2); /* capped by a 1-CPU mask */
  ar_device_close(dev);
  ar_device_close(NULL); /* no-op */
}

/* A host device of `threads` threads with pinning asked for; it opens. */
static ar_device *open_pinned(int threads) {
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  o.pin = true;
  o.threads = threads;
  assert_int_equal(ar_device_open("host", &o, &dev, &err), AR_OK);
  return dev;
}

/* Pinning never fails the open: one thread per core pins, more threads
 * than cores run unpinned with a notice. */
static void test_open_pinned(void **state) {
  (void)state;
  ar_device *dev = open_pinned(1);
  float x[3] = {1, 2, 3};
  ar_device_fill(dev, x, 3, 0.5f);
  assert_true(x[2] == 0.5f);
  ar_device_close(dev);
  dev = open_pinned(64); /* more than the CPUs of any test machine here: capped */
  ar_host_cpus cpus;
  ar_host_cpus_get(&cpus);
  assert_int_equal(ar_device_threads(dev), cpus.cpus < 64 ? cpus.cpus : 64);
  ar_device_close(dev);
  dev = open_pinned(0); /* one per core, pinned */
  assert_true(ar_device_threads(dev) >= 1);
  ar_device_close(dev);
}

/* CPUs the calling thread may run on. */
static int thread_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

/* A team with fewer threads than the mask has cores is not pinned: the
 * opening thread (the team's thread 0) keeps the whole mask.  Pinned, every
 * one-thread job on a machine sat on its first core (two such jobs side
 * by side shared core 0 and left the others idle).  A team of one thread
 * per core is pinned: thread 0 on one core's CPUs, the mask back at close. */
static void test_small_team_unpinned(void **state) {
  (void)state;
  ar_host_cpus cpus;
  ar_host_cpus_get(&cpus);
  if (cpus.cores < 2)
    skip(); /* one core: every team fills it */
  const int before = thread_cpus();
  ar_device *dev = open_pinned(1);
  assert_int_equal(thread_cpus(), before);
  ar_device_close(dev);
  assert_int_equal(thread_cpus(), before);
  dev = open_pinned(cpus.cores);
  assert_int_equal(ar_device_threads(dev), cpus.cores);
  const int pinned = thread_cpus();
  assert_true(pinned >= 1);
  assert_true(pinned < before); /* one core's CPUs of the mask */
  assert_true(pinned <= cpus.cpus - (cpus.cores - 1));
  ar_device_close(dev);
  assert_int_equal(thread_cpus(), before);
}

static void test_open_invalid(void **state) {
  (void)state;
  const char *bad[] = {"bogus", "Host", "", "cuda", "cuda:", "cuda:-1",
                       "cuda:x", "cuda:0x", "cuda:99999999999", "host "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ar_device *dev = (ar_device *)&bad; /* must stay untouched */
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_device_open(bad[i], NULL, &dev, &err), AR_INVALID);
    assert_ptr_equal(dev, (ar_device *)&bad);
    assert_int_equal(err.status, AR_INVALID);
    assert_non_null(strstr(err.msg, "unknown device"));
    assert_non_null(strstr(err.msg, bad[i]));
  }
  ar_err err = AR_ERR_INIT;
  ar_device *dev = NULL;
  assert_int_equal(ar_device_open(NULL, NULL, &dev, &err), AR_INVALID);
  assert_int_equal(ar_device_open("host", NULL, NULL, &err), AR_INVALID);
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = -1;
  assert_int_equal(ar_device_open("host", &o, &dev, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "threads = -1"));
  assert_null(dev);
}

/* cuda:0 without a usable CUDA device: AR_NODEVICE and the reason.  With a
 * device present it opens. */
static void test_open_cuda_absent(void **state) {
  (void)state;
  char why[512] = "untouched";
  int n = ar_cuda_device_count(why, sizeof why);
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.memory_bytes = 64u << 20; /* a small arena when a GPU is present */
  ar_status st = ar_device_open("cuda:0", &o, &dev, &err);
  if (n > 0) { /* a GPU: cuda:0 opens */
    assert_int_equal(st, AR_OK);
    assert_non_null(dev);
    assert_string_equal(ar_device_name(dev), "cuda");
    ar_device_close(dev);
    dev = NULL;
  } else {
    assert_null(dev);
    assert_true(err.msg[0] != '\0');
    assert_non_null(strstr(err.msg, "cuda:0"));
  }
  if (n == 0) {
    assert_int_equal(st, AR_NODEVICE);
    assert_true(why[0] != '\0' && strcmp(why, "untouched") != 0);
    assert_non_null(strstr(err.msg, why));
#ifndef ACCELRT_HAVE_CUDA
    assert_non_null(strstr(why, "CUDA backend not built"));
    assert_non_null(strstr(why, "-DACCELRT_CUDA=ON"));
#endif
  }
  /* An ordinal past the last device is never available. */
  st = ar_device_open("cuda:7", NULL, &dev, &err);
  if (n <= 7) {
    assert_int_equal(st, AR_NODEVICE);
    assert_non_null(strstr(err.msg, "cuda:7"));
  }
  assert_null(dev);
}

static void open_auto(void *arg) {
  ar_device **dev = arg;
  ar_err err = AR_ERR_INIT;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.pin = false;
  assert_int_equal(ar_device_open("auto", &o, dev, &err), AR_OK);
}

/* "auto" falls back to the host when no CUDA device opens, saying so in
 * exactly one line; with a GPU it opens cuda:0. */
static void test_open_auto(void **state) {
  (void)state;
  ar_log_level saved = ar_log_get_level();
  ar_log_set_level(AR_LOG_INFO);
  ar_device *dev = NULL;
  char *text = capture_stderr(open_auto, &dev);
  ar_log_set_level(saved);
  assert_non_null(dev);
  if (ar_cuda_device_count(NULL, 0) > 0) { /* a GPU: auto takes it, silently */
    assert_string_equal(ar_device_name(dev), "cuda");
  } else {
    assert_string_equal(ar_device_name(dev), "host");
    assert_non_null(strstr(text, "device auto: using the host"));
    char *nl = strchr(text, '\n');
    assert_non_null(nl);
    assert_true(nl[1] == '\0'); /* one line */
  }
  test_free(text);
  ar_device_close(dev);
}

static void test_alloc_accounting(void **state) {
  (void)state;
  ar_device *dev = fx_open_host(1);
  void *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(ar_device_alloc(dev, 100, &a), AR_OK);
  assert_int_equal(ar_device_alloc(dev, 1000, &b), AR_OK);
  assert_int_equal((uintptr_t)a % 64, 0);
  assert_int_equal((uintptr_t)b % 64, 0);
  assert_int_equal(ar_device_bytes_in_use(dev), 1100);
  assert_int_equal(ar_device_bytes_peak(dev), 1100);
  ar_device_free(dev, a, 100);
  assert_int_equal(ar_device_bytes_in_use(dev), 1000);
  assert_int_equal(ar_device_bytes_peak(dev), 1100);
  assert_int_equal(ar_device_alloc(dev, 0, &c), AR_OK); /* zero bytes is fine */
  assert_non_null(c);
  ar_device_free(dev, c, 0);
  assert_int_equal(ar_device_alloc(dev, 50, &a), AR_OK);
  assert_int_equal(ar_device_bytes_in_use(dev), 1050);
  assert_int_equal(ar_device_bytes_peak(dev), 1100);
  assert_int_equal(ar_device_alloc(dev, 200, &c), AR_OK);
  assert_int_equal(ar_device_bytes_peak(dev), 1250);
  ar_device_free(dev, NULL, 999); /* no-op */
  assert_int_equal(ar_device_bytes_in_use(dev), 1250);
  ar_device_free(dev, a, 50);
  ar_device_free(dev, b, 1000);
  ar_device_free(dev, c, 200);
  assert_int_equal(ar_device_bytes_in_use(dev), 0);
  assert_int_equal(ar_device_bytes_peak(dev), 1250);
  assert_int_equal(ar_device_alloc(dev, 8, NULL), AR_INVALID);
  assert_int_equal(ar_device_alloc(NULL, 8, &a), AR_INVALID);
  ar_device_close(dev);
}

/* Out of memory is a status with a message, never a crash, and leaves the
 * accounting and the outputs as they were. */
static void test_out_of_memory(void **state) {
  (void)state;
  ar_device *dev = fx_open_host(1);
  void *keep = NULL, *p = (void *)&keep;
  assert_int_equal(ar_device_alloc(dev, 64, &keep), AR_OK);
  ar_alloc_fail_after(0);
  ar_status st = ar_device_alloc(dev, 1 << 20, &p);
  ar_alloc_fail_after(-1);
  assert_int_equal(st, AR_NOMEM);
  assert_ptr_equal(p, (void *)&keep);
  assert_int_equal(ar_device_bytes_in_use(dev), 64);
  assert_int_equal(ar_device_bytes_peak(dev), 64);
  assert_int_equal(ar_device_errcode(dev), AR_NOMEM);
  assert_non_null(
      strstr(ar_device_errmsg(dev), "cannot allocate 1048576 bytes"));
  assert_non_null(strstr(ar_device_errmsg(dev), "64 bytes in use"));
  ar_device_free(dev, keep, 64);
  ar_device_close(dev);

  ar_device *d2 = (ar_device *)&p;
  ar_err err = AR_ERR_INIT;
  ar_alloc_fail_after(0);
  st = ar_device_open("host", NULL, &d2, &err);
  ar_alloc_fail_after(-1);
  assert_int_equal(st, AR_NOMEM);
  assert_ptr_equal(d2, (ar_device *)&p);
  assert_true(err.msg[0] != '\0');
}

static void test_copy_sync(void **state) {
  (void)state;
  ar_device *dev = fx_open_host(2);
  float src[5] = {1, 2, 3, 4, 5}, back[5] = {0};
  float *d = fx_floats(dev, 5);
  assert_int_equal(ar_device_copy_in(dev, d, src, sizeof src), AR_OK);
  assert_int_equal(ar_device_sync(dev), AR_OK);
  assert_int_equal(ar_device_copy_out(dev, back, d, sizeof back), AR_OK);
  assert_memory_equal(src, back, sizeof src);
  assert_int_equal(ar_device_copy_in(dev, d, src, 0), AR_OK);
  assert_int_equal(ar_device_copy_in(dev, NULL, src, 4), AR_INVALID);
  assert_non_null(strstr(ar_device_errmsg(dev), "NULL"));
  fx_free_floats(dev, d, 5);
  ar_device_close(dev);
}

/* Staging host memory: usable, outside the device's accounting, freed
 * with its wrapper; out of memory is a status with what to do. */
static void test_host_alloc(void **state) {
  (void)state;
  ar_device *dev = fx_open_host(1);
  float *h = NULL, src[4] = {1, 2, 3, 4};
  assert_int_equal(ar_device_host_alloc(dev, sizeof src, (void **)&h), AR_OK);
  assert_non_null(h);
  assert_int_equal(ar_device_bytes_in_use(dev), 0);
  float *d = fx_floats(dev, 4);
  assert_int_equal(ar_device_copy_in(dev, d, src, sizeof src), AR_OK);
  assert_int_equal(ar_device_copy_out(dev, h, d, sizeof src), AR_OK);
  assert_memory_equal(h, src, sizeof src);
  ar_device_host_free(dev, h);
  ar_device_host_free(dev, NULL); /* no-op */
  void *p = (void *)&h;
  ar_alloc_fail_after(0);
  ar_status st = ar_device_host_alloc(dev, 1 << 20, &p);
  ar_alloc_fail_after(-1);
  assert_int_equal(st, AR_NOMEM);
  assert_null(p);
  assert_non_null(strstr(ar_device_errmsg(dev), "1048576 bytes of staging"));
  assert_int_equal(ar_device_host_alloc(dev, 8, NULL), AR_INVALID);
  assert_int_equal(ar_device_host_alloc(NULL, 8, &p), AR_INVALID);
  fx_free_floats(dev, d, 4);
  ar_device_close(dev);
}

static void test_describe_all(void **state) {
  (void)state;
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  ar_device_describe_all(tmp);
  rewind(tmp);
  char line[1024];
  assert_non_null(fgets(line, sizeof line, tmp));
  assert_true(strncmp(line, "host: ", 6) == 0);
  assert_non_null(strstr(line, "cores"));
  assert_non_null(fgets(line, sizeof line, tmp));
  assert_true(strncmp(line, "cuda", 4) == 0);
#ifndef ACCELRT_HAVE_CUDA
  assert_non_null(strstr(line, "CUDA backend not built"));
#endif
  fclose(tmp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_host),
      cmocka_unit_test(test_open_pinned),
      cmocka_unit_test(test_small_team_unpinned),
      cmocka_unit_test(test_open_invalid),
      cmocka_unit_test(test_open_cuda_absent),
      cmocka_unit_test(test_open_auto),
      cmocka_unit_test(test_alloc_accounting),
      cmocka_unit_test(test_out_of_memory),
      cmocka_unit_test(test_copy_sync),
      cmocka_unit_test(test_host_alloc),
      cmocka_unit_test(test_describe_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
