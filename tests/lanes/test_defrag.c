/* lanes: defragmentation keeps every persistent byte (a real host buffer
 * stands in for the device arena) and leaves lanes contiguous. */
#include <string.h>

#include "lanes_util.h"

typedef struct arena {
  unsigned char *mem; /* (capacity) */
  size_t moves, moved;
} arena;

static void move_bytes(void *ctx, size_t dst, size_t src, size_t bytes) {
  arena *a = ctx;
  memmove(a->mem + dst, a->mem + src, bytes);
  a->moves++;
  a->moved += bytes;
}

static unsigned char pattern(ar_lanes_job_id id, size_t i) {
  return (unsigned char)(id * 131u + i * 7u + (i >> 8) * 13u + 1u);
}

enum { MAXJOBS = 400 };

/* Writes each newly admitted job's pattern into its block. */
static void fill_new(const ar_lanes *l, arena *a, ar_lanes_job_id n,
                     char *filled) {
  for (ar_lanes_job_id id = 1; id <= n; id++) {
    ar_lanes_job_info ji = info(l, id);
    if (ji.state == AR_LANES_ADMITTED && !filled[id]) {
      for (size_t i = 0; i < ji.persistent; i++)
        a->mem[ji.persistent_offset + i] = pattern(id, i);
      filled[id] = 1;
    }
  }
}

/* Iterations scribble over their lanes: ephemeral bytes are garbage
 * between iterations and must never reach a persistent block. */
static void scribble_lanes(const ar_lanes *l, arena *a, unsigned char v) {
  size_t nl = ar_lanes_lane_count(l);
  for (size_t k = 0; k < nl; k++) {
    ar_lanes_lane_info li;
    assert_int_equal(ar_lanes_lane_at(l, k, &li), AR_OK);
    memset(a->mem + li.offset, v, li.size);
  }
}

static void verify(const ar_lanes *l, const arena *a, ar_lanes_job_id n,
                   uint64_t seed) {
  for (ar_lanes_job_id id = 1; id <= n; id++) {
    ar_lanes_job_info ji = info(l, id);
    if (ji.state != AR_LANES_ADMITTED)
      continue;
    for (size_t i = 0; i < ji.persistent; i++)
      if (a->mem[ji.persistent_offset + i] != pattern(id, i))
        fail_msg("seed %llu: job %llu byte %zu at offset %zu lost",
                 (unsigned long long)seed, (unsigned long long)id, i,
                 ji.persistent_offset + i);
  }
}

/* ar_lanes_free_each: the free ranges, lowest first. */
typedef struct franges {
  size_t n, off[2 * MAXJOBS + 2], len[2 * MAXJOBS + 2];
} franges;

static void note_free(void *ctx, size_t off, size_t bytes) {
  franges *f = ctx;
  assert_true(f->n < 2 * MAXJOBS + 2);
  f->off[f->n] = off;
  f->len[f->n++] = bytes;
}

/* The free ranges are ascending, maximal (never touching), overlap no
 * block or lane, and add up to what the blocks and lanes leave. */
static void check_free(const ar_lanes *l, ar_lanes_job_id n, franges *f) {
  f->n = 0;
  ar_lanes_free_each(l, note_free, f);
  ar_lanes_usage u;
  ar_lanes_usage_get(l, &u);
  size_t sum = 0;
  for (size_t i = 0; i < f->n; i++) {
    assert_true(f->len[i] > 0 && f->off[i] + f->len[i] <= u.capacity);
    if (i > 0)
      assert_true(f->off[i - 1] + f->len[i - 1] < f->off[i]);
    sum += f->len[i];
    for (ar_lanes_job_id id = 1; id <= n; id++) {
      ar_lanes_job_info ji = info(l, id);
      if (ji.state == AR_LANES_ADMITTED)
        assert_true(ji.persistent_offset + ji.persistent <= f->off[i] ||
                    f->off[i] + f->len[i] <= ji.persistent_offset);
    }
    for (size_t k = 0; k < ar_lanes_lane_count(l); k++) {
      ar_lanes_lane_info li;
      assert_int_equal(ar_lanes_lane_at(l, k, &li), AR_OK);
      assert_true(li.offset + li.size <= f->off[i] || f->off[i] + f->len[i] <= li.offset);
    }
  }
  assert_int_equal(sum, u.capacity - u.persistent_bytes - u.lane_bytes);
}

static void test_bytes_survive(void **state) {
  (void)state;
  size_t total_moves = 0;
  for (uint64_t seed = 0; seed < 100; seed++) {
    ar_rng r;
    ar_rng_seed3(&r, seed, 9, 0);
    const char *pol[] = {"pack", "srtf", "fair", "priority", "fifo"};
    size_t cap = (32 + ar_rng_below(&r, 224)) * 4096;
    ar_lanes *l = make(pol[seed % 5], cap);
    arena a = {ar_malloc(cap), 0, 0};
    assert_non_null(a.mem);
    memset(a.mem, 0xAA, cap);
    char filled[MAXJOBS + 1] = {0};
    ar_lanes_job_id n = 0;
    for (int step = 0; step < 150; step++) {
      uint64_t op = ar_rng_below(&r, 10);
      if ((op < 5 || n == 0) && n < MAXJOBS) {
        submit(l, "j", 1 + ar_rng_below(&r, cap / 8),
               1 + ar_rng_below(&r, cap / 8), 3, (double)step);
        n++;
      } else if (op < 8) {
        ar_lanes_job_id id = 1 + ar_rng_below(&r, n);
        if (info(l, id).state <= AR_LANES_ADMITTED)
          assert_int_equal(ar_lanes_cancel(l, id), AR_OK);
      } else {
        scribble_lanes(l, &a, (unsigned char)step);
        verify(l, &a, n, seed);
        assert_int_equal(ar_lanes_defrag(l, move_bytes, &a), AR_OK);
        check_compact(l, n);
      }
      fill_new(l, &a, n, filled);
      check_ok(l);
      static franges fr;
      check_free(l, n, &fr);
    }
    verify(l, &a, n, seed);
    total_moves += a.moves;
    ar_free(a.mem);
    ar_lanes_destroy(l);
  }
  /* The test is only worth something if blocks really moved. */
  assert_true(total_moves > 1000);
}

/* A hand-built move: b leaves, c's block slides down onto b's place and
 * its lane moves up next to a's. */
static void test_hand_move(void **state) {
  (void)state;
  ar_lanes *l = make("pack", 10 * MiB);
  ar_lanes_job_id a = submit(l, "a", MiB, MiB, 5, 0);
  ar_lanes_job_id b = submit(l, "b", 2 * MiB, 2 * MiB, 5, 1);
  ar_lanes_job_id c = submit(l, "c", MiB, MiB, 5, 2);
  assert_int_equal(info(l, c).persistent_offset, 3 * MiB);
  ar_lanes_lane_info lc;
  assert_int_equal(ar_lanes_lane(l, info(l, c).lane, &lc), AR_OK);
  assert_int_equal(lc.offset, 6 * MiB);
  assert_int_equal(ar_lanes_finish(l, b), AR_OK);
  assert_true(ar_lanes_fragmented(l));
  /* b's block and lane are free, and the middle. */
  static franges fr;
  check_free(l, c, &fr);
  assert_int_equal(fr.n, 3);
  assert_int_equal(fr.off[0], MiB);
  assert_int_equal(fr.len[0], 2 * MiB);
  assert_int_equal(fr.off[1], 4 * MiB);
  assert_int_equal(fr.len[1], 2 * MiB);
  assert_int_equal(fr.off[2], 7 * MiB);
  assert_int_equal(fr.len[2], 2 * MiB);
  arena ar = {ar_calloc(1, 10 * MiB), 0, 0};
  assert_int_equal(ar_lanes_defrag(l, move_bytes, &ar), AR_OK);
  assert_int_equal(ar.moves, 1);
  assert_int_equal(ar.moved, MiB);
  assert_int_equal(info(l, a).persistent_offset, 0);
  assert_int_equal(info(l, c).persistent_offset, MiB);
  assert_int_equal(ar_lanes_lane(l, info(l, c).lane, &lc), AR_OK);
  assert_int_equal(lc.offset, 8 * MiB);
  assert_false(ar_lanes_fragmented(l));
  check_free(l, c, &fr); /* one range between the regions */
  assert_int_equal(fr.n, 1);
  assert_int_equal(fr.off[0], 2 * MiB);
  assert_int_equal(fr.len[0], 6 * MiB);
  /* A second pass over a compact layout moves nothing. */
  assert_int_equal(ar_lanes_defrag(l, move_bytes, &ar), AR_OK);
  assert_int_equal(ar.moves, 1);
  ar_free(ar.mem);
  ar_lanes_destroy(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bytes_survive),
      cmocka_unit_test(test_hand_move),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
