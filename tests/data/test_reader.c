/*
 * Reader tests: exact parsing of small xc and libsvm files, every kind of
 * malformed line with its line number, range checks, batches, the windowed
 * shuffle (determinism, permutation, per-window blocks), skip equivalence,
 * long lines, files changed after open, and out-of-memory injection.
 */
#include "test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "accelrt/data.h"

static ar_reader *open_ok(const char *path, const ar_reader_opts *o) {
  ar_err err = AR_ERR_INIT;
  ar_reader *r = NULL;
  ar_status st = ar_reader_open(path, o, &r, &err);
  if (st != AR_OK)
    fail_msg("open %s: %s: %s", path, ar_status_name(st), err.msg);
  return r;
}

static ar_reader_opts fmt_opts(ar_data_format f) {
  ar_reader_opts o = AR_READER_OPTS_INIT;
  o.format = f;
  return o;
}

/* ---- exact parsing ---------------------------------------------------------- */

static void test_xc_exact(void **state) {
  (void)state;
  const char *p = tu_write("exact.txt",
                           "4 10 6\n"
                           "0,5 0:1 3:0.25 9:1e-3\n"
                           " 2:2.5\n"
                           "3,3,1,3 7:-1.5 8:+4E2   \r\n"
                           "2\n"
                           "\n");
  ar_reader_opts o = fmt_opts(AR_FMT_XC);
  ar_reader *r = open_ok(p, &o);
  const ar_data_stats *s = ar_reader_stats(r);
  assert_int_equal(s->points, 4);
  assert_int_equal(s->features, 10);
  assert_int_equal(s->labels, 6);
  assert_int_equal(s->max_nnz, 3);
  assert_int_equal(s->max_labels, 2);
  assert_int_equal(s->total_nnz, 6);
  assert_int_equal(s->total_labels, 5);
  assert_int_equal(s->empty_label_rows, 1);

  ar_batch b;
  assert_int_equal(ar_batch_init(&b, 8, s->max_nnz, s->max_labels), AR_OK);
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_reader_next(r, 8, &b, &err), AR_OK);
  assert_int_equal(b.rows, 4);
  const int64_t rp[] = {0, 3, 4, 6, 6};
  const int64_t lp[] = {0, 2, 2, 4, 5};
  const int32_t idx[] = {0, 3, 9, 2, 7, 8};
  const float val[] = {1.0f, 0.25f, 1e-3f, 2.5f, -1.5f, 400.0f};
  const int32_t lab[] = {0, 5, 3, 1, 2};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(b.row_ptr[i], rp[i]);
    assert_int_equal(b.lab_ptr[i], lp[i]);
  }
  for (int i = 0; i < 6; i++) {
    assert_int_equal(b.idx[i], idx[i]);
    assert_true(b.val[i] == val[i]);
  }
  for (int i = 0; i < 5; i++)
    assert_int_equal(b.lab[i], lab[i]);
  /* End of epoch, and it stays there. */
  assert_int_equal(ar_reader_next(r, 8, &b, &err), AR_OK);
  assert_int_equal(b.rows, 0);
  assert_int_equal(ar_reader_next(r, 8, &b, &err), AR_OK);
  assert_int_equal(b.rows, 0);
  /* Rewind serves it again. */
  assert_int_equal(ar_reader_rewind(r, 0, &err), AR_OK);
  assert_int_equal(ar_reader_next(r, 2, &b, &err), AR_OK);
  assert_int_equal(b.rows, 2);
  assert_int_equal(b.idx[3], 2);
  ar_batch_fini(&b);
  ar_reader_close(r);
}

/* Values in every notation round to the same float strtof gives. */
static void test_values_match_strtof(void **state) {
  (void)state;
  static const char *const vals[] = {
      "0", "1", "-1", "0.1", "0.2", "0.3", "3.14159265358979", "1e-3", "1E+3",
      "2.5e-7", "123456789", "0.000001", "1.0000001", "-0.0", "16777217",
      "3.4e38", "1e-45", "1e-50", "12345678901234567890123", "0.1234567890123456789",
      "7.", ".5", "+.25e1", "99999999999999999999e-20", "4.9406564584124654e-324"};
  const int n = (int)(sizeof vals / sizeof *vals);
  char text[4096];
  int off = snprintf(text, sizeof text, "1 %d 1\n0", n);
  for (int i = 0; i < n; i++)
    off += snprintf(text + off, sizeof text - (size_t)off, " %d:%s", i, vals[i]);
  snprintf(text + off, sizeof text - (size_t)off, "\n");
  ar_reader_opts o = fmt_opts(AR_FMT_XC);
  ar_reader *r = open_ok(tu_write("vals.txt", text), &o);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, 1, n, 1), AR_OK);
  assert_int_equal(ar_reader_next(r, 1, &b, NULL), AR_OK);
  assert_int_equal(b.rows, 1);
  for (int i = 0; i < n; i++) {
    float want = strtof(vals[i], NULL);
    if (b.val[i] != want)
      fail_msg("value '%s': got %.9g want %.9g", vals[i], (double)b.val[i],
               (double)want);
  }
  ar_batch_fini(&b);
  ar_reader_close(r);
}

static void test_libsvm(void **state) {
  (void)state;
  const char *p = tu_write("svm.txt",
                           "1,0 1:1 5:0.5\n"
                           " 3:2\n"
                           "4,4 2:1\r\n");
  ar_reader_opts o = fmt_opts(AR_FMT_LIBSVM);
  ar_reader *r = open_ok(p, &o);
  const ar_data_stats *s = ar_reader_stats(r);
  assert_int_equal(s->points, 3);
  assert_int_equal(s->features, 5); /* largest index 5, 1-based */
  assert_int_equal(s->labels, 5);   /* largest label 4, 0-based */
  assert_int_equal(s->empty_label_rows, 1);
  assert_int_equal(s->max_labels, 2);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, 3, s->max_nnz, s->max_labels), AR_OK);
  assert_int_equal(ar_reader_next(r, 3, &b, NULL), AR_OK);
  assert_int_equal(b.rows, 3);
  assert_int_equal(b.idx[0], 0);
  assert_int_equal(b.idx[1], 4);
  assert_true(b.val[1] == 0.5f);
  assert_int_equal(b.idx[2], 2);
  assert_int_equal(b.idx[3], 1);
  assert_int_equal(b.lab[0], 1);
  assert_int_equal(b.lab[1], 0);
  assert_int_equal(b.lab_ptr[2], 2); /* row 1 has no labels */
  assert_int_equal(b.lab[2], 4);     /* "4,4" de-duplicated */
  assert_int_equal(b.lab_ptr[3], 3);
  ar_batch_fini(&b);
  ar_reader_close(r);

  /* The expected widths raise the stats when larger... */
  o.features = 8;
  o.labels = 10;
  r = open_ok(p, &o);
  assert_int_equal(ar_reader_stats(r)->features, 8);
  assert_int_equal(ar_reader_stats(r)->labels, 10);
  ar_reader_close(r);
  /* ...and bound the ids when smaller. */
  ar_err err = AR_ERR_INIT;
  o.features = 4;
  o.labels = 0;
  assert_int_equal(ar_reader_open(p, &o, &r, &err), AR_PARSE);
  assert_null(r);
  assert_non_null(strstr(err.msg, "svm.txt:1: error: feature index 5 out of range [1, 4]"));
}

/* ---- malformed input ---------------------------------------------------------- */

typedef struct bad_case {
  ar_data_format fmt;
  int64_t features, labels; /* opts */
  const char *text;
  int line;
  const char *what;
  size_t len; /* bytes of text; 0: strlen (for texts with a NUL inside) */
} bad_case;

static const bad_case bad_cases[] = {
    {AR_FMT_XC, 0, 0, "", 1, "empty file", 0},
    {AR_FMT_XC, 0, 0, "abc\n0 1:1\n", 1, "malformed header", 0},
    {AR_FMT_XC, 0, 0, "0,1 3:1\n", 1, "malformed header", 0},
    {AR_FMT_XC, 0, 0, "2 10\n", 1, "no labels count", 0},
    {AR_FMT_XC, 0, 0, "2 10 5 7\n", 1, "more than three", 0},
    {AR_FMT_XC, 0, 0, "1 0 5\n0\n", 1, "0 features", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 1:1\n1 2:1\n", 3, "more points than the 1", 0},
    {AR_FMT_XC, 0, 0, "3 10 5\n0 1:1\n1 2:1\n", 1, "declares 3 points but the file has 2", 0},
    {AR_FMT_XC, 0, 0, "2 10 5\n0 1:1\n1 10:1\n", 3, "feature id 10 out of range [0, 10)", 0},
    {AR_FMT_XC, 0, 0, "2 10 5\n0 1:1\n5 2:1\n", 3, "label id 5 out of range [0, 5)", 0},
    {AR_FMT_XC, 5, 0, "1 10 5\n0 7:1\n", 2, "feature id 7 out of range [0, 5)", 0},
    {AR_FMT_XC, 0, 2, "1 10 5\n0,3 7:1\n", 2, "label id 3 out of range [0, 2)", 0},
    {AR_FMT_XC, 0, 0, "2 10 5\n0 1:1\n0 1:1 2\n", 3, "missing ':'", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 1:abc\n", 2, "non-numeric value", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 1:1x\n", 2, "non-numeric value", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 1:\n", 2, "non-numeric value", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 1:1e\n", 2, "non-numeric value", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 x:1\n", 2, "non-numeric feature id", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 -1:1\n", 2, "negative feature id", 0},
    {AR_FMT_XC, 0, 0, "2 10 5\n0 1:1\n-1 1:1\n", 3, "negative label id", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\nx 1:1\n", 2, "non-numeric label id", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0;1 1:1\n", 2, "unexpected character", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0,,1 1:1\n", 2, "empty label id", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0, 1:1\n", 2, "empty label id", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n1:1 2:1\n", 2, "labels come first", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 1:nan\n", 2, "not a finite", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 1:-inf\n", 2, "not a finite", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 1:1e39\n", 2, "not a finite", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n99999999999 1:1\n", 2, "too large", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 99999999999:1\n", 2, "too large", 0},
    /* 20 digits and more: refused before any signed overflow (UBSan). */
    {AR_FMT_XC, 0, 0, "99999999999999999999 5 5\n0 1:1\n", 1,
     "header points count '99999999999999999999' is too large", 0},
    {AR_FMT_XC, 0, 0, "1 99999999999999999999 5\n0 1:1\n", 1,
     "header features count '99999999999999999999' is too large", 0},
    {AR_FMT_XC, 0, 0, "1 5 184467440737095516160\n0 1:1\n", 1,
     "header labels count '184467440737095516160' is too large", 0},
    {AR_FMT_XC, 0, 0, "4611686018427387905 5 5\n0 1:1\n", 1, "is too large", 0},
    {AR_FMT_XC, 0, 0, "4611686018427387904 5 5\n0 1:1\n", 1,
     "declares 4611686018427387904 points but the file has 1", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n99999999999999999999 1:1\n", 2, "too large", 0},
    {AR_FMT_XC, 0, 0, "1 10 5\n0 9223372036854775808:1\n", 2, "too large", 0},
    {AR_FMT_LIBSVM, 0, 0, "99999999999999999999 1:1\n", 1, "too large", 0},
    {AR_FMT_LIBSVM, 0, 0, "0 99999999999999999999:1\n", 1, "too large", 0},
    {AR_FMT_XC, 0, 0, "3 10 5\n0 1:1\n\n1 2:1\n", 3, "blank line inside", 0},
    {AR_FMT_XC, 0, 0, "2 10 5\n0 1:1\n1 2:1\0\n", 3, "non-numeric value",
     sizeof "2 10 5\n0 1:1\n1 2:1\0\n" - 1},
    {AR_FMT_LIBSVM, 0, 0, "0 0:1\n", 1, "feature index 0", 0},
    {AR_FMT_LIBSVM, 0, 0, "0 1:1\n1 2:1 x\n", 2, "non-numeric feature id", 0},
    {AR_FMT_LIBSVM, 0, 0, "0 1:1\n1 2:1 3\n", 2, "missing ':'", 0},
    {AR_FMT_LIBSVM, 0, 3, "0 1:1\n1 2:1\n\n3 1:1\n", 3, "blank line inside", 0},
    {AR_FMT_LIBSVM, 0, 3, "0 1:1\n1 2:1\n3 1:1\n", 3, "label id 3 out of range [0, 3)", 0},
};

static void test_malformed(void **state) {
  (void)state;
  const int n = (int)(sizeof bad_cases / sizeof *bad_cases);
  for (int i = 0; i < n; i++) {
    const bad_case *c = &bad_cases[i];
    size_t len = c->len ? c->len : strlen(c->text);
    const char *p = tu_write_n("bad.txt", c->text, len);
    ar_reader_opts o = fmt_opts(c->fmt);
    o.features = c->features;
    o.labels = c->labels;
    ar_reader *r = (ar_reader *)1;
    ar_err err = AR_ERR_INIT;
    ar_status st = ar_reader_open(p, &o, &r, &err);
    char want[600];
    snprintf(want, sizeof want, "%s:%d: error: ", p, c->line);
    if (st != AR_PARSE || strncmp(err.msg, want, strlen(want)) != 0 ||
        !strstr(err.msg, c->what) || !strchr(err.msg, '(') || r != NULL)
      fail_msg("case %d (%s): got %s '%s', want AR_PARSE '%s...%s'", i, c->what,
               ar_status_name(st), err.msg, want, c->what);
  }
}

/* Numbers of many digits: a value of hundreds of zeros is zero, one that
 * needs more than NUM_TOKEN_MAX characters is refused with its line, and
 * a point count one past 2^62 is too large while 2^62 itself parses. */
static void test_long_numbers(void **state) {
  (void)state;
  char text[2048];
  int n = snprintf(text, sizeof text, "2 10 5\n0 1:0.");
  for (int i = 0; i < 600; i++)
    text[n++] = '0';
  n += snprintf(text + n, sizeof text - (size_t)n, " 2:");
  for (int i = 0; i < 600; i++)
    text[n++] = i ? '0' : '1';
  n += snprintf(text + n, sizeof text - (size_t)n, "e-590\n1 3:1\n");
  ar_reader_opts o = fmt_opts(AR_FMT_XC);
  ar_reader *r = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_reader_open(tu_write("long_num.txt", text), &o, &r, &err), AR_PARSE);
  assert_non_null(strstr(err.msg, "long_num.txt:2: error: value of feature '2:"));
  assert_non_null(strstr(err.msg, "longer than"));
  /* Without the long one, the zeros are a zero. */
  n = snprintf(text, sizeof text, "1 10 5\n0 1:0.");
  for (int i = 0; i < 600; i++)
    text[n++] = '0';
  snprintf(text + n, sizeof text - (size_t)n, "\n");
  r = open_ok(tu_write("zeros.txt", text), &o);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, 1, 1, 1), AR_OK);
  assert_int_equal(ar_reader_next(r, 1, &b, &err), AR_OK);
  assert_int_equal(b.rows, 1);
  assert_true(b.val[0] == 0.0f);
  ar_batch_fini(&b);
  ar_reader_close(r);
}

static void test_bad_args(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  ar_reader *r = NULL;
  assert_int_equal(ar_reader_open(tu_path("missing.txt"), NULL, &r, &err), AR_NOTFOUND);
  assert_non_null(strstr(err.msg, "missing.txt"));
  assert_null(r);
  ar_reader_opts o = AR_READER_OPTS_INIT;
  o.shuffle_window = -1;
  assert_int_equal(ar_reader_open(tu_write("ok.txt", "1 2 2\n0 1:1\n"), &o, &r, &err),
                   AR_INVALID);
  ar_reader_close(NULL);

  /* A batch smaller than asked or than the largest row is refused. */
  r = open_ok(tu_write("ok.txt", "2 4 2\n0 1:1 2:1\n1 3:1\n"), NULL);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, 2, 1, 1), AR_OK);
  assert_int_equal(ar_reader_next(r, 3, &b, &err), AR_INVALID);
  assert_int_equal(ar_reader_next(r, 2, &b, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "largest row"));
  ar_batch_fini(&b);
  assert_int_equal(ar_batch_init(&b, 2, 2, 1), AR_OK);
  assert_int_equal(ar_reader_next(r, 2, &b, &err), AR_OK);
  assert_int_equal(b.rows, 2);
  assert_int_equal(ar_reader_skip(r, -1, &err), AR_INVALID);
  ar_batch_fini(&b);
  ar_reader_close(r);
}

/* ---- labels --------------------------------------------------------------------- */

/* Long label lists with repeats go through the hash set: first occurrence
 * wins, order kept, and the set grows for very long lists. */
static void test_label_dedupe_long(void **state) {
  (void)state;
  enum { N = 3000 };
  char *text = malloc(64 * N);
  int off = sprintf(text, "3 10 %d\n", N);
  /* Row 0: 0..N-1 then every id again in reverse. */
  for (int i = 0; i < N; i++)
    off += sprintf(text + off, "%s%d", i ? "," : "", i);
  for (int i = N - 1; i >= 0; i--)
    off += sprintf(text + off, ",%d", i);
  off += sprintf(text + off, " 1:1\n");
  /* Row 1: 20 labels, with repeats after the 16th. */
  off += sprintf(text + off, "5,4,3,2,1,0,6,7,8,9,10,11,12,13,14,15,5,16,0,17,16,18,19 2:1\n");
  /* Row 2: 17 copies of one label. */
  off += sprintf(text + off, "7");
  for (int i = 0; i < 16; i++)
    off += sprintf(text + off, ",7");
  off += sprintf(text + off, "\n");
  ar_reader_opts o = fmt_opts(AR_FMT_XC);
  o.shuffle_window = 3;
  ar_reader *r = open_ok(tu_write_n("dedupe.txt", text, (size_t)off), &o);
  free(text);
  const ar_data_stats *s = ar_reader_stats(r);
  assert_int_equal(s->max_labels, N);
  assert_int_equal(s->total_labels, N + 20 + 1);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, 3, s->max_nnz, s->max_labels), AR_OK);
  for (uint64_t epoch = 0; epoch < 2; epoch++) {
    assert_int_equal(ar_reader_rewind(r, epoch, NULL), AR_OK);
    assert_int_equal(ar_reader_next(r, 3, &b, NULL), AR_OK);
    assert_int_equal(b.rows, 3);
    for (int k = 0; k < 3; k++) {
      const int32_t *l = b.lab + b.lab_ptr[k];
      int64_t n = b.lab_ptr[k + 1] - b.lab_ptr[k];
      if (n == N) {
        for (int i = 0; i < N; i++)
          assert_int_equal(l[i], i);
      } else if (n == 20) {
        const int32_t want[20] = {5, 4, 3, 2, 1, 0, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                  16, 17, 18, 19};
        for (int i = 0; i < 20; i++)
          assert_int_equal(l[i], want[i]);
      } else {
        assert_int_equal(n, 1);
        assert_int_equal(l[0], 7);
      }
    }
  }
  ar_batch_fini(&b);
  ar_reader_close(r);
}

/* ---- batches and order ---------------------------------------------------------- */

/* Writes an xc file of n rows; row i has label i % labels, features
 * i % 97 (value i) and (i * 7) % 97 + 97 (value 0.5) when i is odd. */
static const char *write_rows(const char *name, int n) {
  size_t cap = (size_t)n * 48 + 64;
  char *t = malloc(cap);
  size_t off = (size_t)snprintf(t, cap, "%d 200 %d\n", n, n);
  for (int i = 0; i < n; i++) {
    off += (size_t)snprintf(t + off, cap - off, "%d %d:%d", i, i % 97, i);
    if (i & 1)
      off += (size_t)snprintf(t + off, cap - off, " %d:0.5", (i * 7) % 97 + 97);
    off += (size_t)snprintf(t + off, cap - off, "\n");
  }
  const char *p = tu_write_n(name, t, off);
  free(t);
  return p;
}

/* Checks that every row of b is row `label` of write_rows; returns the
 * row ids in order into out. */
static void rows_of(const ar_batch *b, int64_t *out) {
  for (int64_t k = 0; k < b->rows; k++) {
    assert_int_equal(b->lab_ptr[k + 1] - b->lab_ptr[k], 1);
    int32_t i = b->lab[b->lab_ptr[k]];
    int64_t f0 = b->row_ptr[k], nf = b->row_ptr[k + 1] - f0;
    assert_int_equal(nf, (i & 1) ? 2 : 1);
    assert_int_equal(b->idx[f0], i % 97);
    assert_true(b->val[f0] == (float)i);
    if (i & 1) {
      assert_int_equal(b->idx[f0 + 1], (i * 7) % 97 + 97);
      assert_true(b->val[f0 + 1] == 0.5f);
    }
    out[k] = i;
  }
}

/* Reads the rest of the epoch in batches of `bs` into order; returns rows. */
static int64_t read_rest(ar_reader *r, int64_t bs, int64_t *order) {
  const ar_data_stats *s = ar_reader_stats(r);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, bs, s->max_nnz, s->max_labels), AR_OK);
  int64_t n = 0;
  for (;;) {
    ar_err err = AR_ERR_INIT;
    ar_status st = ar_reader_next(r, bs, &b, &err);
    if (st != AR_OK)
      fail_msg("next: %s", err.msg);
    if (b.rows == 0)
      break;
    assert_true(b.rows <= bs);
    rows_of(&b, order + n);
    n += b.rows;
  }
  ar_batch_fini(&b);
  return n;
}

static void test_batches_file_order(void **state) {
  (void)state;
  const char *p = write_rows("rows10.txt", 10);
  for (int w = 0; w < 2; w++) {
    ar_reader_opts o = fmt_opts(AR_FMT_XC);
    o.shuffle_window = w; /* 0 and 1 both mean file order */
    o.seed = 99;
    ar_reader *r = open_ok(p, &o);
    ar_batch b;
    assert_int_equal(ar_batch_init(&b, 4, 2, 1), AR_OK);
    const int64_t sizes[] = {4, 4, 2, 0, 0};
    int64_t got[4], next = 0;
    for (int k = 0; k < 5; k++) {
      assert_int_equal(ar_reader_next(r, 4, &b, NULL), AR_OK);
      assert_int_equal(b.rows, sizes[k]);
      rows_of(&b, got);
      for (int64_t i = 0; i < b.rows; i++)
        assert_int_equal(got[i], next++);
    }
    /* A later epoch is the same order without shuffling. */
    assert_int_equal(ar_reader_rewind(r, 5, NULL), AR_OK);
    assert_int_equal(ar_reader_next(r, 3, &b, NULL), AR_OK);
    rows_of(&b, got);
    assert_int_equal(b.rows, 3);
    assert_int_equal(got[0], 0);
    assert_int_equal(got[2], 2);
    ar_batch_fini(&b);
    ar_reader_close(r);
  }
}

enum { NROWS = 103, WIN = 10 };

static void epoch_order(const char *p, uint64_t seed, uint64_t epoch, int64_t window,
                        int64_t bs, int64_t *order) {
  ar_reader_opts o = fmt_opts(AR_FMT_XC);
  o.shuffle_window = window;
  o.seed = seed;
  ar_reader *r = open_ok(p, &o);
  assert_int_equal(ar_reader_rewind(r, epoch, NULL), AR_OK);
  assert_int_equal(read_rest(r, bs, order), NROWS);
  ar_reader_close(r);
}

static int same_order(const int64_t *a, const int64_t *b, int n) {
  return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

static void test_shuffle(void **state) {
  (void)state;
  const char *p = write_rows("rows103.txt", NROWS);
  int64_t a[NROWS], b[NROWS], c[NROWS];
  epoch_order(p, 7, 0, WIN, 7, a);

  /* A permutation of the rows, each window's rows served as a block. */
  int seen[NROWS] = {0};
  for (int i = 0; i < NROWS; i++) {
    assert_true(a[i] >= 0 && a[i] < NROWS);
    seen[a[i]]++;
    assert_int_equal(a[i] / WIN, i / WIN);
  }
  for (int i = 0; i < NROWS; i++)
    assert_int_equal(seen[i], 1);
  int moved = 0;
  for (int i = 0; i < NROWS; i++)
    moved += a[i] != i;
  assert_true(moved > NROWS / 2);

  /* Same (seed, epoch): same order, whatever the batch size. */
  epoch_order(p, 7, 0, WIN, 1, b);
  assert_true(same_order(a, b, NROWS));
  epoch_order(p, 7, 0, WIN, 64, b);
  assert_true(same_order(a, b, NROWS));
  /* Other epoch or seed: another order. */
  epoch_order(p, 7, 1, WIN, 7, b);
  assert_false(same_order(a, b, NROWS));
  epoch_order(p, 8, 0, WIN, 7, c);
  assert_false(same_order(a, c, NROWS));

  /* Rewinding one reader replays exactly. */
  ar_reader_opts o = fmt_opts(AR_FMT_XC);
  o.shuffle_window = WIN;
  o.seed = 7;
  ar_reader *r = open_ok(p, &o);
  int64_t d[NROWS];
  assert_int_equal(read_rest(r, 5, d), NROWS);
  assert_true(same_order(a, d, NROWS));
  assert_int_equal(ar_reader_rewind(r, 1, NULL), AR_OK);
  assert_int_equal(read_rest(r, 5, d), NROWS);
  assert_true(same_order(b, d, NROWS));
  assert_int_equal(ar_reader_rewind(r, 0, NULL), AR_OK);
  assert_int_equal(read_rest(r, 5, d), NROWS);
  assert_true(same_order(a, d, NROWS));
  ar_reader_close(r);

  /* A window larger than the file shuffles the whole file. */
  epoch_order(p, 3, 0, 1000, 10, d);
  memset(seen, 0, sizeof seen);
  int crossed = 0;
  for (int i = 0; i < NROWS; i++) {
    seen[d[i]]++;
    crossed += d[i] / WIN != i / WIN;
  }
  for (int i = 0; i < NROWS; i++)
    assert_int_equal(seen[i], 1);
  assert_true(crossed > NROWS / 2);
}

/* skip(k) then next() delivers rows k.. of an uninterrupted epoch. */
static void test_skip_equivalence(void **state) {
  (void)state;
  const char *p = write_rows("rows103.txt", NROWS);
  const int64_t windows[] = {0, 1, WIN, 1000};
  const int64_t ks[] = {0, 1, 9, 10, 11, 25, 50, 99, 102, 103, 200};
  for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++) {
    int64_t full[NROWS];
    epoch_order(p, 42, 3, windows[wi], 6, full);
    ar_reader_opts o = fmt_opts(AR_FMT_XC);
    o.shuffle_window = windows[wi];
    o.seed = 42;
    ar_reader *r = open_ok(p, &o);
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
      int64_t k = ks[ki], rest[NROWS];
      assert_int_equal(ar_reader_rewind(r, 3, NULL), AR_OK);
      assert_int_equal(ar_reader_skip(r, k, NULL), AR_OK);
      int64_t want = k < NROWS ? NROWS - k : 0;
      assert_int_equal(read_rest(r, 4, rest), want);
      for (int64_t i = 0; i < want; i++)
        assert_int_equal(rest[i], full[k + i]);

      /* In pieces, mixed with next(): next 3, skip k, skip 8. */
      assert_int_equal(ar_reader_rewind(r, 3, NULL), AR_OK);
      ar_batch b;
      assert_int_equal(ar_batch_init(&b, 3, 2, 1), AR_OK);
      assert_int_equal(ar_reader_next(r, 3, &b, NULL), AR_OK);
      ar_batch_fini(&b);
      assert_int_equal(ar_reader_skip(r, k, NULL), AR_OK);
      assert_int_equal(ar_reader_skip(r, 8, NULL), AR_OK);
      int64_t from = 3 + k + 8;
      want = from < NROWS ? NROWS - from : 0;
      assert_int_equal(read_rest(r, 5, rest), want);
      for (int64_t i = 0; i < want; i++)
        assert_int_equal(rest[i], full[from + i]);
    }
    ar_reader_close(r);
  }
}

/* ---- long lines ----------------------------------------------------------------- */

/* A row of 300,000 features (a line of several MiB, longer than the
 * initial read buffer) between short ones, without a final newline. */
static void test_long_line(void **state) {
  (void)state;
  enum { NF = 300000 };
  size_t cap = (size_t)NF * 16 + 256;
  char *t = malloc(cap);
  size_t off = (size_t)snprintf(t, cap, "3 %d 3\n0 5:1\n1", NF);
  for (int i = 0; i < NF; i++)
    off += (size_t)snprintf(t + off, cap - off, " %d:0.5", i);
  off += (size_t)snprintf(t + off, cap - off, "\n2 7:2");
  const char *p = tu_write_n("long.txt", t, off);
  free(t);
  for (int w = 0; w <= 2; w += 2) {
    ar_reader_opts o = fmt_opts(AR_FMT_XC);
    o.shuffle_window = w;
    ar_reader *r = open_ok(p, &o);
    const ar_data_stats *s = ar_reader_stats(r);
    assert_int_equal(s->points, 3);
    assert_int_equal(s->max_nnz, NF);
    assert_int_equal(s->total_nnz, NF + 2);
    ar_batch b;
    assert_int_equal(ar_batch_init(&b, 3, s->max_nnz, s->max_labels), AR_OK);
    for (int epoch = 0; epoch < 2; epoch++) {
      assert_int_equal(ar_reader_rewind(r, (uint64_t)epoch, NULL), AR_OK);
      assert_int_equal(ar_reader_next(r, 3, &b, NULL), AR_OK);
      assert_int_equal(b.rows, 3);
      int found = 0;
      for (int k = 0; k < 3; k++) {
        if (b.lab[b.lab_ptr[k]] != 1)
          continue;
        found = 1;
        int64_t f0 = b.row_ptr[k];
        assert_int_equal(b.row_ptr[k + 1] - f0, NF);
        assert_int_equal(b.idx[f0 + NF - 1], NF - 1);
        assert_true(b.val[f0 + 12345] == 0.5f);
      }
      assert_true(found);
    }
    ar_batch_fini(&b);
    ar_reader_close(r);
  }
}

/* ---- a file that changes under an open reader --------------------------------- */

static void test_file_changed(void **state) {
  (void)state;
  const char *p = write_rows("changing.txt", 20);
  ar_reader_opts o = fmt_opts(AR_FMT_XC);
  o.shuffle_window = 4;
  ar_reader *r = open_ok(p, &o);
  /* Shorter now: the reader reports it and refuses to go on.  (The
   * rewind drops what the reader had buffered of the old contents.) */
  assert_non_null(tu_write("changing.txt", "20 200 20\n0 0:0\n1 1:1 104:0.5\n"));
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, 8, 2, 1), AR_OK);
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_reader_rewind(r, 0, &err), AR_OK);
  assert_int_equal(ar_reader_next(r, 8, &b, &err), AR_CORRUPT);
  assert_non_null(strstr(err.msg, "changed"));
  assert_int_equal(ar_reader_next(r, 8, &b, &err), AR_STATE);
  assert_int_equal(ar_reader_skip(r, 1, &err), AR_STATE);
  /* Rows bigger than at open: refused, nothing overflows. */
  assert_non_null(tu_write("changing.txt",
                           "20 200 20\n0 0:0 1:1 2:2 3:3 4:4\n1,2,3,4,5 1:1\n"));
  assert_int_equal(ar_reader_rewind(r, 0, &err), AR_OK);
  assert_int_equal(ar_reader_next(r, 8, &b, &err), AR_CORRUPT);
  ar_batch_fini(&b);
  ar_reader_close(r);
}

/* ---- out of memory -------------------------------------------------------------- */

static void test_alloc_failures(void **state) {
  (void)state;
  const char *p = write_rows("rows103.txt", NROWS);
  int64_t want[NROWS];
  epoch_order(p, 5, 0, WIN, 8, want);
  int succeeded = 0;
  for (long n = 0; n < 200 && !succeeded; n++) {
    ar_reader_opts o = fmt_opts(AR_FMT_XC);
    o.shuffle_window = WIN;
    o.seed = 5;
    ar_reader *r = (ar_reader *)1;
    ar_err err = AR_ERR_INIT;
    ar_alloc_fail_after(n);
    ar_status st = ar_reader_open(p, &o, &r, &err);
    if (st == AR_OK) {
      /* Reading allocates nothing: it works with allocation still failing. */
      ar_alloc_fail_after(0);
      int64_t got[NROWS];
      ar_batch b;
      ar_alloc_fail_after(-1);
      assert_int_equal(ar_batch_init(&b, 8, 2, 1), AR_OK);
      ar_alloc_fail_after(0);
      int64_t nrows = 0;
      for (;;) {
        assert_int_equal(ar_reader_next(r, 8, &b, &err), AR_OK);
        if (!b.rows)
          break;
        rows_of(&b, got + nrows);
        nrows += b.rows;
      }
      assert_int_equal(nrows, NROWS);
      assert_true(same_order(got, want, NROWS));
      assert_int_equal(ar_reader_rewind(r, 0, &err), AR_OK);
      assert_int_equal(ar_reader_skip(r, 37, &err), AR_OK);
      ar_alloc_fail_after(-1);
      ar_batch_fini(&b);
      ar_reader_close(r);
      succeeded = 1;
    } else {
      ar_alloc_fail_after(-1);
      if (st != AR_NOMEM || r != NULL)
        fail_msg("allocation %ld failing: got %s '%s'", n, ar_status_name(st), err.msg);
      assert_non_null(strstr(err.msg, "memory"));
    }
  }
  assert_true(succeeded);

  /* Long label lists grow buffers during the scan: fail each of those too. */
  char text[8192];
  int off = sprintf(text, "2 5 1000\n");
  for (int i = 0; i < 600; i++)
    off += sprintf(text + off, "%s%d", i ? "," : "", i);
  off += sprintf(text + off, " 1:1\n3 2:1\n");
  p = tu_write_n("manylabels.txt", text, (size_t)off);
  succeeded = 0;
  for (long n = 0; n < 200 && !succeeded; n++) {
    ar_reader *r = NULL;
    ar_alloc_fail_after(n);
    ar_status st = ar_reader_open(p, NULL, &r, NULL);
    ar_alloc_fail_after(-1);
    if (st == AR_OK) {
      assert_int_equal(ar_reader_stats(r)->max_labels, 600);
      ar_reader_close(r);
      succeeded = 1;
    } else {
      assert_int_equal(st, AR_NOMEM);
    }
  }
  assert_true(succeeded);

  /* ar_batch_init fails cleanly on any of its allocations. */
  for (long n = 0; n < 5; n++) {
    ar_batch b;
    ar_alloc_fail_after(n);
    assert_int_equal(ar_batch_init(&b, 4, 3, 2), AR_NOMEM);
    ar_alloc_fail_after(-1);
    assert_null(b.idx);
    assert_null(b.row_ptr);
    ar_batch_fini(&b);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_xc_exact),
      cmocka_unit_test(test_values_match_strtof),
      cmocka_unit_test(test_libsvm),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_long_numbers),
      cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_label_dedupe_long),
      cmocka_unit_test(test_batches_file_order),
      cmocka_unit_test(test_shuffle),
      cmocka_unit_test(test_skip_equivalence),
      cmocka_unit_test(test_long_line),
      cmocka_unit_test(test_file_changed),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
