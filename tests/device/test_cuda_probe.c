/*
 * CUDA backend probe (built with the CUDA backend only).  Without a usable
 * GPU: the probe says why, "cuda:0" is AR_NODEVICE with that reason, the
 * description says "none", and the test then exits 77 (skipped) because
 * the GPU half did not run.  With a GPU: every device is described and
 * cuda:0 opens (with a small arena).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "accelrt/device.h"

static int devices;

static void test_probe(void **state) {
  (void)state;
  char why[512] = "untouched";
  devices = ar_cuda_device_count(why, sizeof why);
  assert_true(devices >= 0);
  assert_int_equal(ar_cuda_device_count(NULL, 0), devices); /* why optional */
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.memory_bytes = 64u << 20;
  ar_status st = ar_device_open("cuda:0", &o, &dev, &err);
  if (devices == 0) {
    assert_null(dev);
    assert_true(why[0] != '\0' && strcmp(why, "untouched") != 0);
    assert_null(strstr(why, "not built")); /* this build has the backend */
    assert_int_equal(st, AR_NODEVICE);
    assert_non_null(strstr(err.msg, why));
  } else {
    assert_string_equal(why, "");
    if (st != AR_OK)
      fail_msg("cuda:0 is present but does not open: %s", err.msg);
    assert_string_equal(ar_device_name(dev), "cuda");
    ar_device_close(dev);
  }
}

static void test_describe(void **state) {
  (void)state;
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  ar_device_describe_all(tmp);
  rewind(tmp);
  char line[1024];
  int cuda_lines = 0;
  bool none = false;
  while (fgets(line, sizeof line, tmp)) {
    if (strncmp(line, "cuda", 4) == 0) {
      cuda_lines++;
      none = none || strncmp(line, "cuda: none", 10) == 0;
    }
  }
  fclose(tmp);
  if (devices == 0) {
    assert_int_equal(cuda_lines, 1);
    assert_true(none);
  } else {
    assert_int_equal(cuda_lines, devices);
    assert_false(none);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_probe),
      cmocka_unit_test(test_describe),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (failed == 0 && devices == 0) {
    fprintf(stderr, "no CUDA device: the GPU half of this test was skipped\n");
    return 77;
  }
  return failed;
}
