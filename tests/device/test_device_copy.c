/*
 * ar_device_copy on the host backend: device-to-device copies with
 * memmove semantics.  Overlapping ranges in both directions (the lanes'
 * defragmentation slides blocks down over themselves; the reverse must
 * hold as well), disjoint ranges, empty and degenerate calls, and the
 * wrapper's host-staging fallback for a backend without a copy op, with a
 * size past its staging buffer so the chunk order matters.  Every result
 * is compared byte for byte with memmove on a host copy.  The fallback
 * test swaps the handle's table, so it includes the private
 * runtime/device/device_impl.h.
 */
#include "op_fixtures.h"

#include "device_impl.h"

#include <stdlib.h>

static ar_device *host;

/* A buffer of n bytes with a pattern that differs at every byte position
 * modulo 251 (prime), so a copy off by any small shift is caught. */
static unsigned char *pattern(ar_device *dev, size_t n) {
  void *p = NULL;
  assert_int_equal(ar_device_alloc(dev, n, &p), AR_OK);
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)(i % 251u);
  return b;
}

/* Copies len bytes from offset s to offset d of an n-byte buffer through
 * ar_device_copy on dev and checks the whole buffer against memmove. */
static void check_copy(ar_device *dev, size_t n, size_t d, size_t s,
                       size_t len) {
  unsigned char *buf = pattern(dev, n);
  unsigned char *ref = test_malloc(n);
  memcpy(ref, buf, n);
  memmove(ref + d, ref + s, len);
  assert_int_equal(ar_device_copy(dev, buf + d, buf + s, len), AR_OK);
  assert_int_equal(ar_device_sync(dev), AR_OK);
  if (memcmp(buf, ref, n) != 0) {
    size_t i = 0;
    while (buf[i] == ref[i])
      i++;
    fail_msg(
        "copy of %zu bytes from %zu to %zu in %zu: byte %zu is %u, expected %u",
        len, s, d, n, i, buf[i], ref[i]);
  }
  test_free(ref);
  ar_device_free(dev, buf, n);
}

static void test_overlap_down(void **state) {
  (void)state;
  /* Slides by less than the size: every chunk overlaps its source. */
  check_copy(host, 1 << 20, 0, 1, (1 << 20) - 1);
  check_copy(host, 1 << 20, 256, 4096, (1 << 20) - 4096);
  check_copy(host, 1000, 3, 500, 500);
  check_copy(host, 4096, 0, 2048, 2048); /* touching, not overlapping */
}

static void test_overlap_up(void **state) {
  (void)state;
  check_copy(host, 1 << 20, 1, 0, (1 << 20) - 1);
  check_copy(host, 1 << 20, 4096, 256, (1 << 20) - 4096);
  check_copy(host, 1000, 500, 3, 497);
}

static void test_disjoint_and_empty(void **state) {
  (void)state;
  check_copy(host, 8192, 4096, 0, 4096);
  check_copy(host, 8192, 0, 4096, 4096);
  check_copy(host, 64, 10, 10, 54); /* onto itself */
  check_copy(host, 64, 0, 32, 0);   /* nothing */
  unsigned char b[4] = {1, 2, 3, 4};
  assert_int_equal(ar_device_copy(host, NULL, b, 0), AR_OK);
  assert_int_equal(ar_device_copy(host, NULL, b, 4), AR_INVALID);
  assert_non_null(strstr(ar_device_errmsg(host), "NULL destination"));
  assert_int_equal(ar_device_copy(host, b, NULL, 4), AR_INVALID);
  assert_int_equal(ar_device_copy(NULL, b, b + 1, 1), AR_INVALID);
}

/* A host device whose table lacks the copy op: the wrapper stages through
 * a 64 MiB host buffer.  96 MiB slid by 1 MiB takes two chunks, which are
 * correct only in the right order. */
static void test_staging_fallback(void **state) {
  (void)state;
  ar_device_ops ops = *host->ops;
  ops.copy = NULL;
  const ar_device_ops *saved = host->ops;
  host->ops = &ops;
  const size_t mib = (size_t)1 << 20;
  check_copy(host, 97 * mib, 0, mib, 96 * mib);
  check_copy(host, 97 * mib, mib, 0, 96 * mib);
  check_copy(host, 4096, 1, 0, 4095);
  host->ops = saved;
}

static int setup(void **state) {
  (void)state;
  host = fx_open_host(1);
  return host ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  ar_device_close(host);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_overlap_down),
      cmocka_unit_test(test_overlap_up),
      cmocka_unit_test(test_disjoint_and_empty),
      cmocka_unit_test(test_staging_fallback),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
