/*
 * The device arena's carving (runtime/device/cuda/cuda_arena.c), over a
 * host buffer: alignment, first fit, splitting and merging, out-of-memory
 * with the figures in the message, bad frees, owners, and random
 * alloc/free sequences checked against the invariants (extents cover the
 * arena exactly, no two free neighbours, `used` adds up).  Plain C: runs
 * in every build, GPU or not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "cuda/cuda_arena.h"

static char buf[1 << 20];

static void check_invariants(const ar__arena *a) {
  size_t off = 0, used = 0;
  for (size_t i = 0; i < a->n; i++) {
    assert_int_equal(a->ext[i].off, off);
    assert_true(a->ext[i].size > 0);
    assert_int_equal(a->ext[i].size % AR__ARENA_ALIGN, 0);
    if (i > 0)
      assert_false(!a->ext[i].used && !a->ext[i - 1].used);
    if (a->ext[i].used)
      used += a->ext[i].size;
    off += a->ext[i].size;
  }
  assert_int_equal(off, a->size);
  assert_int_equal(used, a->used);
}

static void test_basic(void **state) {
  (void)state;
  ar__arena *a = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar__arena_create(buf, 4096 + 100, &a, &err), AR_OK);
  assert_int_equal(a->size, 4096); /* rounded down */
  void *p = NULL, *q = NULL, *r = NULL, *z = NULL;
  assert_int_equal(ar__arena_alloc(a, 1, &p, &err), AR_OK);
  assert_ptr_equal(p, buf);
  assert_int_equal(ar__arena_alloc(a, 300, &q, &err), AR_OK);
  assert_ptr_equal(q, buf + 256);
  assert_int_equal(ar__arena_alloc(a, 0, &z, &err), AR_OK); /* one unit */
  assert_ptr_equal(z, buf + 768);
  assert_int_equal(a->used, 1024);
  check_invariants(a);
  /* Too large: AR_NOMEM, message with the figures, output untouched. */
  r = (void *)0x1;
  assert_int_equal(ar__arena_alloc(a, 4096, &r, &err), AR_NOMEM);
  assert_ptr_equal(r, (void *)0x1);
  assert_non_null(strstr(err.msg, "largest hole 0.0 MiB"));
  assert_non_null(strstr(err.msg, "raise runtime.memory"));
  assert_int_equal(ar__arena_alloc(a, SIZE_MAX, &r, &err), AR_NOMEM);
  /* Free the middle block, then its neighbours: holes merge. */
  assert_true(ar__arena_free(a, q));
  check_invariants(a);
  assert_false(ar__arena_free(a, q));           /* double free */
  assert_false(ar__arena_free(a, buf + 8));     /* not a block start */
  assert_false(ar__arena_free(a, buf + 8192));  /* outside */
  assert_false(ar__arena_free(a, NULL));
  /* First fit reuses the hole. */
  assert_int_equal(ar__arena_alloc(a, 200, &r, &err), AR_OK);
  assert_ptr_equal(r, buf + 256);
  size_t f, l;
  ar__arena_stats(a, &f, &l);
  assert_int_equal(f, 4096 - 3 * 256);
  assert_int_equal(l, 4096 - 1024);
  assert_true(ar__arena_free(a, p));
  assert_true(ar__arena_free(a, r));
  assert_true(ar__arena_free(a, z));
  check_invariants(a);
  assert_int_equal(a->n, 1);
  assert_int_equal(a->used, 0);
  assert_int_equal(a->peak, 1024);
  /* The whole arena in one block. */
  assert_int_equal(ar__arena_alloc(a, 4096, &p, &err), AR_OK);
  assert_true(ar__arena_free(a, p));
  /* Owners: the last release says so. */
  ar__arena_retain(a);
  assert_false(ar__arena_release(a));
  assert_true(ar__arena_release(a));
  ar__arena_destroy(a);
  ar__arena_destroy(NULL);
  assert_int_equal(ar__arena_create(buf, 255, &a, &err), AR_INVALID);
}

/* Random sequences (more blocks than the extent table's first capacity):
 * blocks never overlap and the invariants hold after every step. */
static void test_random(void **state) {
  (void)state;
  ar__arena *a = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar__arena_create(buf, sizeof buf, &a, &err), AR_OK);
  enum { SLOTS = 300 };
  void *ptr[SLOTS] = {0};
  size_t len[SLOTS] = {0};
  uint64_t s = 12345;
  for (int step = 0; step < 20000; step++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    int k = (int)((s >> 33) % SLOTS);
    if (ptr[k]) {
      assert_true(ar__arena_free(a, ptr[k]));
      ptr[k] = NULL;
    } else {
      size_t bytes = (size_t)((s >> 13) % 9000);
      if (ar__arena_alloc(a, bytes, &ptr[k], &err) == AR_OK) {
        len[k] = bytes;
        assert_int_equal(((char *)ptr[k] - buf) % AR__ARENA_ALIGN, 0);
        memset(ptr[k], k & 0xff, bytes);
      } else {
        ptr[k] = NULL;
      }
    }
    if (step % 97 == 0)
      check_invariants(a);
  }
  for (int k = 0; k < SLOTS; k++) {
    if (!ptr[k])
      continue;
    for (size_t i = 0; i < len[k]; i++) /* nobody wrote over the block */
      assert_int_equal((unsigned char)((char *)ptr[k])[i], k & 0xff);
    assert_true(ar__arena_free(a, ptr[k]));
  }
  check_invariants(a);
  assert_int_equal(a->n, 1);
  ar__arena_destroy(a);
}

/* Out of host memory for the extent table is a status, not a crash. */
static void test_host_oom(void **state) {
  (void)state;
  ar__arena *a = NULL;
  ar_err err = AR_ERR_INIT;
  ar_alloc_fail_after(0);
  assert_int_equal(ar__arena_create(buf, sizeof buf, &a, &err), AR_NOMEM);
  ar_alloc_fail_after(1);
  assert_int_equal(ar__arena_create(buf, sizeof buf, &a, &err), AR_NOMEM);
  ar_alloc_fail_after(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_basic),
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_host_oom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
