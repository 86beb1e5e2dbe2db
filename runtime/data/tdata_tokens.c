/*
 * ar_tdata_generate_tokens: a token dataset whose label only order can
 * tell (tdata.h states the rule).  Every row holds the class token, the
 * two markers once each and filler drawn from the same distribution in
 * both classes; the label is whether marker 2 precedes marker 3.  A model
 * that sees a bag of words is at chance, one that sees positions is not.
 *
 * Row r of a split draws from its own stream, seeded with (seed, split,
 * r), so a row does not depend on how many rows came before it.  Rows are
 * written as they are made (one row of memory), the class ids are kept
 * (8 bytes a row) and written after; both files are written atomically.
 */
#define _GNU_SOURCE
#include "tdata_impl.h"

#include <string.h>

#define TOKEN_PAD 0
#define TOKEN_CLASS 1
#define TOKEN_FIRST 2  /* the marker whose lead means class 1 */
#define TOKEN_SECOND 3
#define TOKEN_FILLER 4 /* fillers are [TOKEN_FILLER, vocab) */
#define SEQ_MAX ((int64_t)1 << 24)

/* The digits base vocab - 4 that hold labels - 1 (labels > 2). */
static int64_t digits(const ar_tokens_spec *s) {
  const int64_t base = s->vocab - TOKEN_FILLER;
  int64_t d = 1;
  for (int64_t top = s->labels - 1; top >= base; top /= base)
    d++;
  return d;
}

/* Many classes: the class's digits at positions 1..D (tdata.h). */
static int64_t make_row_digits(const ar_tokens_spec *s, ar_rng *g, int64_t *row) {
  const int64_t base = s->vocab - TOKEN_FILLER, D = digits(s);
  int64_t lo = s->seq / 2 < D + 1 ? D + 1 : s->seq / 2;
  int64_t len = lo + (int64_t)ar_rng_below(g, (uint64_t)(s->seq - lo + 1));
  int64_t c = (int64_t)ar_rng_below(g, (uint64_t)s->labels);
  row[0] = TOKEN_CLASS;
  for (int64_t j = D + 1; j < len; j++)
    row[j] = TOKEN_FILLER + (int64_t)ar_rng_below(g, (uint64_t)base);
  for (int64_t j = len; j < s->seq; j++)
    row[j] = TOKEN_PAD;
  for (int64_t j = D, v = c; j >= 1; j--, v /= base)
    row[j] = TOKEN_FILLER + v % base;
  return c;
}

/* Makes row r (seq tokens) and returns its class id. */
static int64_t make_row(const ar_tokens_spec *s, uint64_t seed, uint64_t split, int64_t r,
                        int64_t *row) {
  ar_rng g;
  ar_rng_seed3(&g, seed, split, (uint64_t)r);
  if (s->labels > 2)
    return make_row_digits(s, &g, row);
  /* Two distinct marker positions in [1, L) need L >= 3. */
  int64_t lo = s->seq / 2 < 3 ? 3 : s->seq / 2;
  int64_t len = lo + (int64_t)ar_rng_below(&g, (uint64_t)(s->seq - lo + 1));
  row[0] = TOKEN_CLASS;
  for (int64_t j = 1; j < len; j++)
    row[j] = TOKEN_FILLER + (int64_t)ar_rng_below(&g, (uint64_t)(s->vocab - TOKEN_FILLER));
  for (int64_t j = len; j < s->seq; j++)
    row[j] = TOKEN_PAD;
  int64_t a = 1 + (int64_t)ar_rng_below(&g, (uint64_t)(len - 1));
  int64_t b = 1 + (int64_t)ar_rng_below(&g, (uint64_t)(len - 2));
  if (b >= a)
    b++;
  row[a] = TOKEN_FIRST;
  row[b] = TOKEN_SECOND;
  return a < b;
}

/* Writes an npy header and n int64 values through an atomic write. */
static ar_status write_values(ar_fs_atomic *a, const int64_t *v, size_t n, ar_err *err) {
  if (n && fwrite(v, sizeof *v, n, a->f) != n) {
    ar_fs_atomic_abort(a);
    return ar_errf(err, AR_IO, "%s: write failed (check the disk space)", a->path);
  }
  return AR_OK;
}

static ar_status begin_npy(const ar_fs *fs, const char *path, const int64_t *shape, int nd,
                           ar_fs_atomic *a, ar_err *err) {
  char head[AR__NPY_HEADER_MAX];
  size_t n = ar__npy_header(head, "<i8", shape, nd);
  AR_CHECK(ar_fs_atomic_begin(fs, path, a, err));
  if (fwrite(head, 1, n, a->f) != n) {
    ar_fs_atomic_abort(a);
    return ar_errf(err, AR_IO, "%s: write failed (check the disk space)", path);
  }
  return AR_OK;
}

/* The bytes of one split's x.npy and y.npy as write_split writes them
 * (header and int64 values each); the header is padded to 64 bytes, so
 * ar_tdata_open_npy maps the values in place and holds exactly these. */
static size_t split_bytes(const ar_tokens_spec *s, int64_t points) {
  char head[AR__NPY_HEADER_MAX];
  int64_t xshape[2] = {points, s->seq};
  size_t x = ar__npy_header(head, "<i8", xshape, 2) + (size_t)points * (size_t)s->seq * 8;
  size_t y = ar__npy_header(head, "<i8", &points, 1) + (size_t)points * 8;
  return x + y;
}

size_t ar_tdata_tokens_bytes(const ar_tokens_spec *spec, bool test) {
  int64_t points = test ? spec->test_points : spec->train_points;
  return points > 0 ? split_bytes(spec, points) : 0;
}

/* DIR/NAME/x.npy and y.npy with `points` rows of split number `split`. */
static ar_status write_split(const ar_tokens_spec *s, uint64_t seed, uint64_t split,
                             int64_t points, const char *dir, const char *name,
                             const ar_fs *fs, ar_err *err) {
  char *sub = ar_path_join(dir, name);
  char *xp = sub ? ar_path_join(sub, "x.npy") : NULL;
  char *yp = sub ? ar_path_join(sub, "y.npy") : NULL;
  int64_t *row = ar_malloc((size_t)s->seq * sizeof *row);
  int64_t *y = ar_malloc((size_t)points * sizeof *y);
  ar_fs_atomic a;
  ar_status st;
  if (!sub || !xp || !yp || !row || !y) {
    st = ar_errf(err, AR_NOMEM, "out of memory writing %lld token rows into %s/%s",
                 (long long)points, dir, name);
    goto done;
  }
  if ((st = ar_fs_mkdirs(fs, sub, err)) != AR_OK)
    goto done;
  int64_t xshape[2] = {points, s->seq};
  if ((st = begin_npy(fs, xp, xshape, 2, &a, err)) != AR_OK)
    goto done;
  for (int64_t r = 0; r < points; r++) {
    y[r] = make_row(s, seed, split, r, row);
    if ((st = write_values(&a, row, (size_t)s->seq, err)) != AR_OK)
      goto done;
  }
  if ((st = ar_fs_atomic_commit(&a, err)) != AR_OK ||
      (st = begin_npy(fs, yp, &points, 1, &a, err)) != AR_OK ||
      (st = write_values(&a, y, (size_t)points, err)) != AR_OK)
    goto done;
  st = ar_fs_atomic_commit(&a, err);
done:
  ar_free(y);
  ar_free(row);
  ar_free(yp);
  ar_free(xp);
  ar_free(sub);
  return st;
}

ar_status ar_tdata_generate_tokens(const ar_tokens_spec *spec, uint64_t seed, const char *dir,
                                   const ar_fs *fs, ar_err *err) {
  if (spec->seq < 3 || spec->seq > SEQ_MAX)
    return ar_errf(err, AR_INVALID,
                   "token data: seq %lld, expected 3 to %lld (the class token and two "
                   "markers at distinct positions need 3)",
                   (long long)spec->seq, (long long)SEQ_MAX);
  if (spec->vocab < 5)
    return ar_errf(err, AR_INVALID,
                   "token data: vocab %lld, expected at least 5 (0 pad, 1 class, 2 and 3 "
                   "markers, then fillers)",
                   (long long)spec->vocab);
  if (spec->labels > 2 && spec->seq < digits(spec) + 1)
    return ar_errf(err, AR_INVALID,
                   "token data: %lld labels take %lld digits over %lld filler tokens, which "
                   "need seq of at least %lld (got %lld); raise seq or vocab",
                   (long long)spec->labels, (long long)digits(spec),
                   (long long)(spec->vocab - TOKEN_FILLER), (long long)digits(spec) + 1,
                   (long long)spec->seq);
  if (spec->train_points < 1 || spec->test_points < 0 ||
      spec->train_points > INT64_MAX / 8 / spec->seq ||
      spec->test_points > INT64_MAX / 8 / spec->seq)
    return ar_errf(err, AR_INVALID,
                   "token data: %lld train and %lld test points, expected at least 1 and 0",
                   (long long)spec->train_points, (long long)spec->test_points);
  AR_CHECK(write_split(spec, seed, 0, spec->train_points, dir, "train", fs, err));
  return write_split(spec, seed, 1, spec->test_points, dir, "test", fs, err);
}
