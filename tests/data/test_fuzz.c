/*
 * Fuzz-ish reader test: thousands of small files made of valid rows,
 * random bytes and mutated rows, opened with random options.  A file is
 * either rejected with AR_PARSE and a "FILE:LINE: error:" message, or
 * read back (with skips and rewinds) with every id in range, no repeated
 * label in a row and exactly `points` rows an epoch.  Run under ASan to
 * catch any read past a buffer.  ACCELRT_FUZZ_SEED and ACCELRT_FUZZ_ITERS
 * change the stream and its length for longer runs by hand.
 */
#include "test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "accelrt/data.h"

static uint64_t fz_state = 0x243F6A8885A308D3ull;

static uint64_t fz_next(void) {
  fz_state ^= fz_state << 13;
  fz_state ^= fz_state >> 7;
  fz_state ^= fz_state << 17;
  return fz_state;
}

static int fz_below(int n) { return (int)(fz_next() % (uint64_t)n); }

typedef struct text {
  char *b;
  size_t n, cap;
} text;

static void put(text *t, const char *s, size_t n) {
  if (t->n + n + 1 > t->cap) {
    t->cap = (t->n + n + 1) * 2;
    t->b = realloc(t->b, t->cap);
  }
  memcpy(t->b + t->n, s, n);
  t->n += n;
}

static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

static void valid_row(text *t, int libsvm) {
  char tmp[64];
  int nl = fz_below(4);
  for (int i = 0; i < nl; i++) {
    snprintf(tmp, sizeof tmp, "%s%d", i ? "," : "", fz_below(12));
    puts_(t, tmp);
  }
  if (nl == 0)
    puts_(t, " ");
  int nf = fz_below(6);
  static const char *const vals[] = {"1", "0.5", "-2", "1e-3", "3.25E+2", "0", ".5", "7."};
  for (int i = 0; i < nf; i++) {
    snprintf(tmp, sizeof tmp, " %d:%s", fz_below(20) + libsvm, vals[fz_below(8)]);
    puts_(t, tmp);
  }
  if (fz_below(8) == 0)
    puts_(t, "  ");
  if (fz_below(8) == 0)
    puts_(t, "\r");
}

static void random_bytes(text *t) {
  static const char alpha[] = "0123456789,: .-+eE\r\tnaix\n";
  int n = fz_below(40);
  for (int i = 0; i < n; i++) {
    char c = fz_below(10) == 0 ? (char)fz_below(256) : alpha[fz_below((int)sizeof alpha - 1)];
    put(t, &c, 1);
  }
}

static void mutate(text *t, size_t from) {
  int n = 1 + fz_below(3);
  for (int k = 0; k < n && t->n > from; k++) {
    size_t at = from + (size_t)fz_below((int)(t->n - from));
    int op = fz_below(3);
    static const char pick[] = "0123456789,: .-\n\r\0x";
    if (op == 0) {
      t->b[at] = pick[fz_below((int)sizeof pick - 1)];
    } else if (op == 1) {
      memmove(t->b + at, t->b + at + 1, t->n - at - 1);
      t->n--;
    } else {
      put(t, " ", 1);
      memmove(t->b + at + 1, t->b + at, t->n - at - 1);
      t->b[at] = pick[fz_below((int)sizeof pick - 1)];
    }
  }
}

static void check_reader(ar_reader *r, const ar_data_stats *s) {
  ar_batch b;
  int64_t bs = 1 + fz_below(4);
  assert_int_equal(ar_batch_init(&b, bs, s->max_nnz, s->max_labels), AR_OK);
  for (int epoch = 0; epoch < 2; epoch++) {
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_reader_rewind(r, (uint64_t)epoch, &err), AR_OK);
    int64_t skip = fz_below(3) == 0 ? fz_below((int)s->points + 2) : 0;
    assert_int_equal(ar_reader_skip(r, skip, &err), AR_OK);
    int64_t rows = skip < s->points ? skip : s->points;
    for (;;) {
      assert_int_equal(ar_reader_next(r, bs, &b, &err), AR_OK);
      if (!b.rows)
        break;
      for (int64_t k = 0; k < b.rows; k++) {
        assert_true(b.row_ptr[k + 1] - b.row_ptr[k] <= s->max_nnz);
        assert_true(b.lab_ptr[k + 1] - b.lab_ptr[k] <= s->max_labels);
        for (int64_t j = b.row_ptr[k]; j < b.row_ptr[k + 1]; j++)
          assert_true(b.idx[j] >= 0 && b.idx[j] < s->features);
        for (int64_t j = b.lab_ptr[k]; j < b.lab_ptr[k + 1]; j++) {
          assert_true(b.lab[j] >= 0 && b.lab[j] < s->labels);
          for (int64_t q = b.lab_ptr[k]; q < j; q++)
            assert_true(b.lab[q] != b.lab[j]);
        }
      }
      rows += b.rows;
    }
    assert_int_equal(rows, s->points);
  }
  ar_batch_fini(&b);
}

static void test_fuzz(void **state) {
  (void)state;
  text t = {NULL, 0, 0};
  int accepted = 0, rejected = 0, iters = 4000;
  const char *env = getenv("ACCELRT_FUZZ_SEED");
  if (env && strtoull(env, NULL, 10))
    fz_state = strtoull(env, NULL, 10);
  env = getenv("ACCELRT_FUZZ_ITERS");
  if (env && atoi(env) > 0)
    iters = atoi(env);
  for (int iter = 0; iter < iters; iter++) {
    int libsvm = fz_below(2);
    int rows = fz_below(8);
    t.n = 0;
    if (!libsvm) {
      char h[64];
      snprintf(h, sizeof h, "%d %d %d\n", fz_below(3) ? rows : fz_below(10),
               fz_below(4) ? 20 : fz_below(25), fz_below(4) ? 12 : fz_below(15));
      puts_(&t, h);
    }
    size_t body = t.n;
    for (int i = 0; i < rows; i++) {
      int kind = fz_below(10);
      if (kind < 6)
        valid_row(&t, libsvm);
      else if (kind < 8)
        random_bytes(&t);
      else {
        size_t at = t.n;
        valid_row(&t, libsvm);
        mutate(&t, at);
      }
      if (i + 1 < rows || fz_below(2))
        puts_(&t, "\n");
    }
    if (fz_below(4) == 0)
      mutate(&t, fz_below(4) == 0 ? 0 : body);
    if (fz_below(8) == 0)
      puts_(&t, "\n\n");
    const char *p = tu_write_n("fuzz.txt", t.b ? t.b : "", t.n);
    assert_non_null(p);

    ar_reader_opts o = AR_READER_OPTS_INIT;
    o.format = libsvm ? AR_FMT_LIBSVM : AR_FMT_XC;
    o.shuffle_window = fz_below(5);
    o.seed = (uint64_t)iter;
    o.features = fz_below(3) == 0 ? fz_below(25) : 0;
    o.labels = fz_below(3) == 0 ? fz_below(15) : 0;
    ar_reader *r = NULL;
    ar_err err = AR_ERR_INIT;
    ar_status st = ar_reader_open(p, &o, &r, &err);
    if (st == AR_OK) {
      accepted++;
      check_reader(r, ar_reader_stats(r));
      ar_reader_close(r);
    } else {
      rejected++;
      char want[600];
      snprintf(want, sizeof want, "%s:", p);
      if (st != AR_PARSE || strncmp(err.msg, want, strlen(want)) != 0 ||
          !strstr(err.msg, ": error: ") || r != NULL)
        fail_msg("iteration %d: %s '%s'", iter, ar_status_name(st), err.msg);
    }
  }
  print_message("fuzz: %d files accepted, %d rejected\n", accepted, rejected);
  assert_true(accepted > iters / 8);
  assert_true(rejected > iters / 8);
  free(t.b);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_fuzz)};
  return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
