/*
 * tdata tests: idx files (plain and gzip) written here round-trip, the
 * labels naming rule and its compression preference, located AR_PARSE
 * errors for truncated, mislabelled and mismatched files; npy files of
 * each dtype and header version, written by hand here, round-trip and
 * bad headers are refused; batches normalise exactly, augment
 * reproducibly and independently of batch composition, flip and crop
 * exactly; orders are reproducible permutations; the token generator
 * keeps its rule on every row and hides its label from a bag of words;
 * the real Fashion-MNIST files when installed.
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "accelrt/tdata.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

static char dir[256];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
  (void)sb, (void)flag, (void)f;
  return remove(p);
}

static int setup(void **state) {
  (void)state;
  const char *base = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/accelrt-tdata-XXXXXX", base ? base : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* "dir/name" in one of eight static buffers. */
static const char *path(const char *name) {
  static char bufs[8][512];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, 512, "%s/%s", dir, name);
  return b;
}

static void put(const char *name, const void *data, size_t len) {
  FILE *f = fopen(path(name), "wb");
  assert_non_null(f);
  if (len)
    assert_int_equal(fwrite(data, 1, len, f), len);
  fclose(f);
}

static void put_gz(const char *name, const void *data, size_t len) {
  gzFile g = gzopen(path(name), "wb");
  assert_non_null(g);
  assert_int_equal(gzwrite(g, data, (unsigned)len), (int)len);
  assert_int_equal(gzclose(g), Z_OK);
}

static void be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
  p[3] = (uint8_t)v;
}

/* idx images: n x h x w, pixel (i, y, x) = (i * 31 + y * w + x) & 255.
 * Returns the bytes (malloc'ed) and their length. */
static uint8_t *idx_images(uint32_t n, uint32_t h, uint32_t w, size_t *len) {
  *len = 16 + (size_t)n * h * w;
  uint8_t *b = malloc(*len);
  be32(b, 0x803), be32(b + 4, n), be32(b + 8, h), be32(b + 12, w);
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < (size_t)h * w; k++)
      b[16 + i * h * w + k] = (uint8_t)((i * 31 + k) & 255);
  return b;
}

/* idx labels: label i = (i * mul + add) % classes. */
static uint8_t *idx_labels(uint32_t n, int mul, int add, int classes, size_t *len) {
  *len = 8 + n;
  uint8_t *b = malloc(*len);
  be32(b, 0x801), be32(b + 4, n);
  for (uint32_t i = 0; i < n; i++)
    b[8 + i] = (uint8_t)((i * mul + add) % classes);
  return b;
}

static ar_tdata *open_idx_ok(const char *images, const char *labels) {
  ar_err err = AR_ERR_INIT;
  ar_tdata *d = NULL;
  ar_status st = ar_tdata_open_idx(images, labels, NULL, &d, &err);
  if (st != AR_OK)
    fail_msg("open_idx %s: %s: %s", images, ar_status_name(st), err.msg);
  return d;
}

/* Expects status st and every needle in the message. */
static void expect_err(ar_status got, const ar_err *err, ar_status st, const char *n1,
                       const char *n2) {
  if (got != st || (n1 && !strstr(err->msg, n1)) || (n2 && !strstr(err->msg, n2)))
    fail_msg("expected %s with '%s' and '%s', got %s: %s", ar_status_name(st), n1 ? n1 : "",
             n2 ? n2 : "", ar_status_name(got), err->msg);
}

static void check_idx(ar_tdata *d, uint32_t n, uint32_t h, uint32_t w, int mul, int add,
                      int classes) {
  ar_tdata_info info;
  ar_tdata_get_info(d, &info);
  assert_int_equal(info.count, n);
  assert_int_equal(info.nd, 3);
  assert_int_equal(info.dims[0], 1);
  assert_int_equal(info.dims[1], h);
  assert_int_equal(info.dims[2], w);
  assert_int_equal(info.type, AR_TDATA_U8);
  assert_int_equal(info.classes, classes);
  int64_t idx[3] = {n - 1, 0, 2};
  float x[3 * 64];
  int64_t y[3];
  assert_true(h * w <= 64);
  ar_tdata_batch(d, idx, 3, NULL, 0, 2, x, NULL, y);
  for (int b = 0; b < 3; b++) {
    assert_int_equal(y[b], (idx[b] * mul + add) % classes);
    assert_int_equal(ar_tdata_label(d, idx[b]), y[b]);
    for (uint32_t k = 0; k < h * w; k++)
      assert_true(x[b * h * w + k] == (float)((idx[b] * 31 + k) & 255) / 255.0f);
  }
}

/* ---- idx ------------------------------------------------------------------ */

static void test_idx_plain(void **state) {
  (void)state;
  size_t li, ll;
  uint8_t *im = idx_images(7, 3, 4, &li), *lb = idx_labels(7, 3, 1, 5, &ll);
  put("p-images-idx3-ubyte", im, li);
  put("p-labels-idx1-ubyte", lb, ll);
  ar_tdata *d = open_idx_ok(path("p-images-idx3-ubyte"), NULL);
  check_idx(d, 7, 3, 4, 3, 1, 5);
  ar_tdata_info info;
  ar_tdata_get_info(d, &info);
  assert_int_equal(info.bytes, li + ll);
  ar_tdata_close(d);
  ar_tdata_close(NULL);
  free(im), free(lb);
}

/* Gzip images find gzip labels before plain ones; plain images fall back
 * to gzip labels; the "images.idx3" rule; an explicit labels path. */
static void test_idx_gz_and_naming(void **state) {
  (void)state;
  size_t li, ll, lo;
  uint8_t *im = idx_images(9, 5, 2, &li), *lb = idx_labels(9, 1, 0, 4, &ll);
  uint8_t *other = idx_labels(9, 1, 1, 4, &lo);
  put_gz("g-images-idx3-ubyte.gz", im, li);
  put_gz("g-labels-idx1-ubyte.gz", lb, ll);
  put("g-labels-idx1-ubyte", other, lo); /* plain: must not be taken */
  ar_tdata *d = open_idx_ok(path("g-images-idx3-ubyte.gz"), NULL);
  check_idx(d, 9, 5, 2, 1, 0, 4);
  ar_tdata_info info;
  ar_tdata_get_info(d, &info);
  assert_int_equal(info.bytes, li + ll); /* decompressed sizes */
  ar_tdata_close(d);

  put("h-images-idx3-ubyte", im, li);
  put_gz("h-labels-idx1-ubyte.gz", lb, ll);
  d = open_idx_ok(path("h-images-idx3-ubyte"), NULL);
  check_idx(d, 9, 5, 2, 1, 0, 4);
  ar_tdata_close(d);

  put("train-images.idx3", im, li);
  put("train-labels.idx1", other, lo);
  d = open_idx_ok(path("train-images.idx3"), NULL);
  check_idx(d, 9, 5, 2, 1, 1, 4);
  ar_tdata_close(d);

  put("anything.bin", lb, ll);
  d = open_idx_ok(path("g-images-idx3-ubyte.gz"), path("anything.bin"));
  check_idx(d, 9, 5, 2, 1, 0, 4);
  ar_tdata_close(d);

  ar_err err = AR_ERR_INIT;
  d = NULL;
  put("m-images-idx3-ubyte", im, li);
  ar_status st = ar_tdata_open_idx(path("m-images-idx3-ubyte"), NULL, NULL, &d, &err);
  expect_err(st, &err, AR_NOTFOUND, "m-labels-idx1-ubyte", "data.train_labels");
  assert_null(d);
  put("pictures.raw", im, li);
  st = ar_tdata_open_idx(path("pictures.raw"), NULL, NULL, &d, &err);
  expect_err(st, &err, AR_NOTFOUND, "pictures.raw", "data.train_labels");
  free(im), free(lb), free(other);
}

static void test_idx_errors(void **state) {
  (void)state;
  size_t li, ll;
  uint8_t *im = idx_images(6, 4, 4, &li), *lb = idx_labels(6, 1, 0, 3, &ll);
  ar_err err = AR_ERR_INIT;
  ar_tdata *d = NULL;
  ar_status st;
  put("ok-labels-idx1-ubyte", lb, ll);

  /* Truncated: 6 images of 16 promised, 5.5 present. */
  put("t-images-idx3-ubyte", im, li - 8);
  st = ar_tdata_open_idx(path("t-images-idx3-ubyte"), path("ok-labels-idx1-ubyte"), NULL, &d,
                         &err);
  expect_err(st, &err, AR_PARSE, "t-images-idx3-ubyte: truncated", "promises 96 bytes");
  assert_non_null(strstr(err.msg, "has 88"));
  /* Truncated in the header itself. */
  put("u-images-idx3-ubyte", im, 10);
  st = ar_tdata_open_idx(path("u-images-idx3-ubyte"), path("ok-labels-idx1-ubyte"), NULL, &d,
                         &err);
  expect_err(st, &err, AR_PARSE, "u-images-idx3-ubyte: truncated", "16");
  /* A gzip stream cut short. */
  put_gz("z-images-idx3-ubyte.gz", im, li);
  size_t zl;
  FILE *f = fopen(path("z-images-idx3-ubyte.gz"), "rb");
  uint8_t zb[4096];
  zl = fread(zb, 1, sizeof zb, f);
  fclose(f);
  put("z-images-idx3-ubyte.gz", zb, zl - 12); /* drops the trailer and some data */
  st = ar_tdata_open_idx(path("z-images-idx3-ubyte.gz"), path("ok-labels-idx1-ubyte"), NULL,
                         &d, &err);
  expect_err(st, &err, AR_PARSE, "z-images-idx3-ubyte.gz: truncated", "gzip stream ends early");
  /* Only the 8-byte trailer (CRC, size) missing: the data is all there
   * but unchecked, which is refused too. */
  put("y-images-idx3-ubyte.gz", zb, zl - 8);
  st = ar_tdata_open_idx(path("y-images-idx3-ubyte.gz"), path("ok-labels-idx1-ubyte"), NULL,
                         &d, &err);
  expect_err(st, &err, AR_PARSE, "y-images-idx3-ubyte.gz", "checksum");
  /* A damaged gzip stream (the CRC no longer matches). */
  zb[zl - 7] ^= 0x55;
  put("x-images-idx3-ubyte.gz", zb, zl);
  st = ar_tdata_open_idx(path("x-images-idx3-ubyte.gz"), path("ok-labels-idx1-ubyte"), NULL,
                         &d, &err);
  expect_err(st, &err, AR_PARSE, "x-images-idx3-ubyte.gz: cannot decompress", NULL);
  /* Trailing bytes. */
  uint8_t *longer = calloc(li + 3, 1);
  memcpy(longer, im, li);
  put("l-images-idx3-ubyte", longer, li + 3);
  st = ar_tdata_open_idx(path("l-images-idx3-ubyte"), path("ok-labels-idx1-ubyte"), NULL, &d,
                         &err);
  expect_err(st, &err, AR_PARSE, "l-images-idx3-ubyte", "3 bytes after");
  free(longer);
  /* Bad magic: the labels file given as images, and the other way round. */
  st = ar_tdata_open_idx(path("ok-labels-idx1-ubyte"), path("ok-labels-idx1-ubyte"), NULL, &d,
                         &err);
  expect_err(st, &err, AR_PARSE, "ok-labels-idx1-ubyte: offset 0: magic 0x00000801",
             "expected 0x00000803");
  put("b-images-idx3-ubyte", im, li);
  put("b-labels-idx1-ubyte", im, li);
  st = ar_tdata_open_idx(path("b-images-idx3-ubyte"), NULL, NULL, &d, &err);
  expect_err(st, &err, AR_PARSE, "b-labels-idx1-ubyte: offset 0: magic 0x00000803",
             "expected 0x00000801");
  /* Counts that disagree. */
  size_t l5;
  uint8_t *five = idx_labels(5, 1, 0, 3, &l5);
  put("c-images-idx3-ubyte", im, li);
  put("c-labels-idx1-ubyte", five, l5);
  st = ar_tdata_open_idx(path("c-images-idx3-ubyte"), NULL, NULL, &d, &err);
  expect_err(st, &err, AR_PARSE, "c-labels-idx1-ubyte", "6 images");
  assert_non_null(strstr(err.msg, "5 labels"));
  assert_null(d);
  free(five), free(im), free(lb);
}

/* ---- npy ------------------------------------------------------------------ */

/* Writes dir/sub/name as npy version major.0 with the dict text given,
 * padded so that the values start at `align` modulo 64 (0: aligned). */
static void put_npy(const char *sub, const char *name, int major, const char *dict,
                    const void *data, size_t len, int align) {
  char folder[512], p[600];
  snprintf(folder, sizeof folder, "%s/%s", dir, sub);
  mkdir(folder, 0777);
  snprintf(p, sizeof p, "%s/%s", folder, name);
  size_t pre = major == 1 ? 10 : 12;
  size_t body = strlen(dict) + 1;
  size_t total = pre + body;
  size_t pad = (64 - total % 64) % 64 + (size_t)align;
  size_t hlen = body + pad;
  uint8_t head[512];
  memcpy(head, "\x93NUMPY", 6);
  head[6] = (uint8_t)major, head[7] = 0;
  for (size_t k = 0; k < pre - 8; k++)
    head[8 + k] = (uint8_t)(hlen >> (8 * k));
  memcpy(head + pre, dict, body - 1);
  memset(head + pre + body - 1, ' ', pad);
  head[pre + hlen - 1] = '\n';
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(head, 1, pre + hlen, f), pre + hlen);
  if (len)
    assert_int_equal(fwrite(data, 1, len, f), len);
  fclose(f);
}

static void put_y(const char *sub, const int64_t *y, int n) {
  char dict[128];
  snprintf(dict, sizeof dict, "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }", n);
  put_npy(sub, "y.npy", 1, dict, y, (size_t)n * 8, 0);
}

static ar_tdata *open_npy_ok(const char *sub) {
  ar_err err = AR_ERR_INIT;
  ar_tdata *d = NULL;
  ar_status st = ar_tdata_open_npy(path(sub), NULL, &d, &err);
  if (st != AR_OK)
    fail_msg("open_npy %s: %s: %s", sub, ar_status_name(st), err.msg);
  return d;
}

static void test_npy_dtypes(void **state) {
  (void)state;
  int64_t y[4] = {0, 2, 1, 2};
  float xf[4 * 6];
  uint8_t xu[4 * 6];
  int64_t xi[4 * 6];
  for (int k = 0; k < 24; k++)
    xf[k] = (float)k * 0.5f - 3.0f, xu[k] = (uint8_t)(k * 10), xi[k] = (int64_t)k * 1000 - 5;
  /* f32, version 1.0, keys in another order and double quotes; also a
   * copy whose values start misaligned (realigned by the reader). */
  const char *df = "{\"shape\": (4, 2, 3), 'fortran_order': False, 'descr': '<f4'}";
  put_npy("f32", "x.npy", 1, df, xf, sizeof xf, 0);
  put_y("f32", y, 4);
  put_npy("f32odd", "x.npy", 1, df, xf, sizeof xf, 2);
  put_y("f32odd", y, 4);
  put_npy("u8", "x.npy", 2, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 6), }",
          xu, sizeof xu, 0);
  put_y("u8", y, 4);
  put_npy("i64", "x.npy", 3, "{'descr': '<i8', 'fortran_order': False, 'shape': (4, 6), }",
          xi, sizeof xi, 0);
  put_y("i64", y, 4);

  const char *subs[] = {"f32", "f32odd", "u8", "i64"};
  for (int s = 0; s < 4; s++) {
    ar_tdata *d = open_npy_ok(subs[s]);
    ar_tdata_info info;
    ar_tdata_get_info(d, &info);
    assert_int_equal(info.count, 4);
    assert_int_equal(info.classes, 3);
    int64_t idx[4] = {3, 1, 0, 2};
    float x[24];
    int64_t ids[24], yb[4];
    if (s < 2) {
      assert_int_equal(info.type, AR_TDATA_F32);
      assert_int_equal(info.nd, 2);
      assert_int_equal(info.dims[0], 2);
      assert_int_equal(info.dims[1], 3);
      ar_tdata_batch(d, idx, 4, NULL, 0, 1, x, NULL, yb);
      for (int b = 0; b < 4; b++)
        for (int k = 0; k < 6; k++)
          assert_true(x[b * 6 + k] == xf[idx[b] * 6 + k]);
    } else if (s == 2) {
      assert_int_equal(info.type, AR_TDATA_U8);
      assert_int_equal(info.nd, 1);
      ar_tdata_batch(d, idx, 4, NULL, 0, 1, x, NULL, yb);
      for (int b = 0; b < 4; b++)
        for (int k = 0; k < 6; k++)
          assert_true(x[b * 6 + k] == (float)xu[idx[b] * 6 + k] / 255.0f);
    } else {
      assert_int_equal(info.type, AR_TDATA_I64);
      ar_tdata_batch(d, idx, 4, NULL, 0, 1, NULL, ids, yb);
      for (int b = 0; b < 4; b++)
        for (int k = 0; k < 6; k++)
          assert_int_equal(ids[b * 6 + k], xi[idx[b] * 6 + k]);
      ar_err err = AR_ERR_INIT;
      float m, sd;
      assert_int_equal(ar_tdata_channel_stats(d, &m, &sd, &err), AR_INVALID);
    }
    for (int b = 0; b < 4; b++)
      assert_int_equal(yb[b], y[idx[b]]);
    ar_tdata_close(d);
  }
}

static void expect_npy_err(const char *sub, const char *n1, const char *n2) {
  ar_err err = AR_ERR_INIT;
  ar_tdata *d = NULL;
  ar_status st = ar_tdata_open_npy(path(sub), NULL, &d, &err);
  expect_err(st, &err, AR_PARSE, n1, n2);
  assert_null(d);
}

static void test_npy_refused(void **state) {
  (void)state;
  int64_t y[3] = {0, 1, 1}, yneg[3] = {0, -2, 1};
  double xd[6] = {0};
  put_npy("f8", "x.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }",
          xd, sizeof xd, 0);
  put_y("f8", y, 3);
  expect_npy_err("f8", "f8/x.npy", "descr: '<f8'");
  float xf[6] = {0};
  put_npy("fo", "x.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", xf,
          sizeof xf, 0);
  put_y("fo", y, 3);
  expect_npy_err("fo", "fo/x.npy", "fortran_order");
  const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
  put_npy("cnt", "x.npy", 1, ok, xf, sizeof xf, 0);
  put_y("cnt", y, 2);
  expect_npy_err("cnt", "cnt/y.npy", "2 class ids");
  put_npy("neg", "x.npy", 1, ok, xf, sizeof xf, 0);
  put_y("neg", yneg, 3);
  expect_npy_err("neg", "neg/y.npy", "example 1 has class id -2");
  put_npy("short", "x.npy", 1, ok, xf, sizeof xf - 4, 0);
  put_y("short", y, 3);
  expect_npy_err("short", "short/x.npy: truncated", "promises 24 bytes");
  put_npy("ver", "x.npy", 4, ok, xf, sizeof xf, 0);
  put_y("ver", y, 3);
  expect_npy_err("ver", "ver/x.npy", "version 4.0");
  put_npy("dict", "x.npy", 1, "{'descr': '<f4', 'fortran_order': False 'shape': (3, 2)}", xf,
          sizeof xf, 0);
  put_y("dict", y, 3);
  expect_npy_err("dict", "dict/x.npy: header offset", "expected ','");
  put_npy("yf", "x.npy", 1, ok, xf, sizeof xf, 0);
  put_npy("yf", "y.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", xf,
          12, 0);
  expect_npy_err("yf", "yf/y.npy", "'<i8'");
}

/* Targets (N, C) for model.loss sigmoid_bce: u8 multi-hot and f32 read as
 * floats per example in the order asked; i64 of two axes is refused. */
static void test_npy_targets(void **state) {
  (void)state;
  float xf[3 * 2] = {0}, tf[3 * 4] = {0, 0.5f, 1, 0, 1, 1, 0, 0, 0.25f, 0, 0, 1};
  uint8_t tu[3 * 4] = {1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1};
  const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
  put_npy("tu8", "x.npy", 1, ok, xf, sizeof xf, 0);
  put_npy("tu8", "y.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 4), }", tu,
          sizeof tu, 0);
  put_npy("tf32", "x.npy", 1, ok, xf, sizeof xf, 0);
  put_npy("tf32", "y.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", tf,
          sizeof tf, 0);
  const int64_t idx[2] = {2, 0};
  for (int k = 0; k < 2; k++) {
    ar_tdata *d = open_npy_ok(k ? "tf32" : "tu8");
    ar_tdata_info in;
    ar_tdata_get_info(d, &in);
    assert_int_equal(in.targets, 4);
    assert_int_equal(in.classes, 4);
    float t[2 * 4];
    ar_tdata_targets(d, idx, 2, t);
    for (int j = 0; j < 4; j++) {
      assert_float_equal(t[j], k ? tf[8 + j] : (float)tu[8 + j], 0);
      assert_float_equal(t[4 + j], k ? tf[j] : (float)tu[j], 0);
    }
    ar_tdata_close(d);
  }
  int64_t y2[3 * 4] = {0};
  put_npy("ti64", "x.npy", 1, ok, xf, sizeof xf, 0);
  put_npy("ti64", "y.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 4), }", y2,
          sizeof y2, 0);
  expect_npy_err("ti64", "ti64/y.npy", "'|u1' or '<f4' with two");
}

/* ---- batches -------------------------------------------------------------- */

#define C 2
#define H 5
#define W 6
#define N 40

/* An npy f32 dataset of N images (C, H, W) with distinct values. */
static ar_tdata *images(void) {
  static float xs[N * C * H * W];
  int64_t y[N];
  for (int k = 0; k < N * C * H * W; k++)
    xs[k] = (float)((k * 7919) % 1000) / 100.0f + 0.5f;
  for (int i = 0; i < N; i++)
    y[i] = i % 3;
  char dict[128];
  snprintf(dict, sizeof dict,
           "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d, %d), }", N, C, H, W);
  put_npy("img", "x.npy", 1, dict, xs, sizeof xs, 0);
  put_y("img", y, N);
  return open_npy_ok("img");
}

static void test_batch_normalise(void **state) {
  (void)state;
  /* u8 idx: exact ((v / 255) - mean) / std. */
  size_t li, ll;
  uint8_t *im = idx_images(4, 3, 3, &li), *lb = idx_labels(4, 1, 0, 2, &ll);
  put("n-images-idx3-ubyte", im, li);
  put("n-labels-idx1-ubyte", lb, ll);
  ar_tdata *d = open_idx_ok(path("n-images-idx3-ubyte"), NULL);
  float mean = 0.25f, sd = 0.3f;
  ar_tdata_aug aug = {&mean, &sd, 0, false, 7};
  int64_t idx[2] = {2, 3};
  float x[18];
  ar_tdata_batch(d, idx, 2, &aug, 5, 1, x, NULL, NULL);
  for (int b = 0; b < 2; b++)
    for (int k = 0; k < 9; k++)
      assert_true(x[b * 9 + k] == ((float)im[16 + idx[b] * 9 + k] / 255.0f - mean) / sd);
  /* Channel statistics against a direct computation. */
  float m, s;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_tdata_channel_stats(d, &m, &s, &err), AR_OK);
  double sum = 0, sq = 0;
  for (int k = 0; k < 36; k++)
    sum += im[16 + k] / 255.0;
  for (int k = 0; k < 36; k++)
    sq += (im[16 + k] / 255.0 - sum / 36) * (im[16 + k] / 255.0 - sum / 36);
  assert_float_equal(m, sum / 36, 1e-6);
  assert_float_equal(s, sqrt(sq / 36), 1e-6);
  ar_tdata_close(d);
  free(im), free(lb);

  /* f32 with two channels: each its own mean and std. */
  d = images();
  float cm[C] = {1.0f, -2.0f}, cs[C] = {2.0f, 0.5f};
  ar_tdata_aug a2 = {cm, cs, 0, false, 1};
  float plain[C * H * W], out[C * H * W];
  int64_t one = 11;
  ar_tdata_batch(d, &one, 1, NULL, 0, 1, plain, NULL, NULL);
  ar_tdata_batch(d, &one, 1, &a2, 0, 1, out, NULL, NULL);
  for (int c = 0; c < C; c++)
    for (int k = 0; k < H * W; k++)
      assert_true(out[c * H * W + k] == (plain[c * H * W + k] - cm[c]) / cs[c]);
  float mc[C], sc[C];
  assert_int_equal(ar_tdata_channel_stats(d, mc, sc, &err), AR_OK);
  for (int c = 0; c < C; c++) {
    double s1 = 0, s2 = 0;
    float e[C * H * W];
    for (int64_t i = 0; i < N; i++) {
      ar_tdata_batch(d, &i, 1, NULL, 0, 1, e, NULL, NULL);
      for (int k = 0; k < H * W; k++)
        s1 += e[c * H * W + k], s2 += (double)e[c * H * W + k] * e[c * H * W + k];
    }
    double mu = s1 / (N * H * W);
    assert_float_equal(mc[c], mu, 1e-5);
    assert_float_equal(sc[c], sqrt(s2 / (N * H * W) - mu * mu), 1e-4);
  }
  ar_tdata_close(d);
}

/* out is `in` mirrored (flip) and shifted by (sy, sx) with zeros. */
static bool is_shift(const float *in, const float *out, bool flip, int sy, int sx) {
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        int xx = (flip ? W - 1 - x : x) + sx, yy = y + sy;
        float want = (yy < 0 || yy >= H || xx < 0 || xx >= W) ? 0.0f
                                                               : in[(c * H + yy) * W + xx];
        if (out[(c * H + y) * W + x] != want)
          return false;
      }
  return true;
}

static void test_batch_augment(void **state) {
  (void)state;
  ar_tdata *d = images();
  int64_t all[N];
  for (int i = 0; i < N; i++)
    all[i] = N - 1 - i;
  static float plain[N][C * H * W], a[N][C * H * W], b[N][C * H * W], c2[N][C * H * W];
  ar_tdata_batch(d, all, N, NULL, 0, 4, plain[0], NULL, NULL);

  /* Flip only: every example is itself or its exact mirror, both occur. */
  ar_tdata_aug flip = {NULL, NULL, 0, true, 3};
  ar_tdata_batch(d, all, N, &flip, 1, 4, a[0], NULL, NULL);
  int mirrored = 0;
  for (int i = 0; i < N; i++) {
    bool same = is_shift(plain[i], a[i], false, 0, 0), mir = is_shift(plain[i], a[i], true, 0, 0);
    assert_true(same || mir);
    mirrored += mir;
  }
  assert_in_range(mirrored, 5, N - 5);

  /* Crop only: every example is an exact shift within the padding. */
  ar_tdata_aug crop = {NULL, NULL, 2, false, 3};
  ar_tdata_batch(d, all, N, &crop, 1, 4, a[0], NULL, NULL);
  int moved = 0;
  for (int i = 0; i < N; i++) {
    int found = 0;
    for (int sy = -2; sy <= 2; sy++)
      for (int sx = -2; sx <= 2; sx++)
        if (is_shift(plain[i], a[i], false, sy, sx)) {
          found = 1;
          moved += sy != 0 || sx != 0;
        }
    assert_int_equal(found, 1);
  }
  assert_true(moved > N / 2);

  /* Both, with normalisation: padding is zero after normalisation. */
  float m[C] = {0.5f, 1.5f}, s[C] = {2.0f, 4.0f};
  ar_tdata_aug full = {m, s, 1, true, 99};
  ar_tdata_batch(d, all, N, &full, 2, 4, a[0], NULL, NULL);
  ar_tdata_batch(d, all, N, &full, 2, 1, b[0], NULL, NULL);
  assert_memory_equal(a, b, sizeof a); /* threads change nothing */
  /* One example alone gets what it got inside the full batch. */
  for (int i = 0; i < N; i += 7) {
    float one[C * H * W];
    ar_tdata_batch(d, &all[i], 1, &full, 2, 1, one, NULL, NULL);
    assert_memory_equal(one, a[i], sizeof one);
  }
  ar_tdata_aug other = full;
  other.seed = 100;
  ar_tdata_batch(d, all, N, &other, 2, 2, c2[0], NULL, NULL);
  assert_memory_not_equal(a, c2, sizeof a);
  ar_tdata_batch(d, all, N, &full, 3, 2, c2[0], NULL, NULL);
  assert_memory_not_equal(a, c2, sizeof a); /* another epoch */
  float normed[C * H * W];
  for (int i = 0; i < N; i++) {
    for (int c = 0; c < C; c++)
      for (int k = 0; k < H * W; k++)
        normed[c * H * W + k] = (plain[i][c * H * W + k] - m[c]) / s[c];
    int found = 0;
    for (int f = 0; f < 2; f++)
      for (int sy = -1; sy <= 1; sy++)
        for (int sx = -1; sx <= 1; sx++)
          found += is_shift(normed, a[i], f, sy, sx);
    assert_true(found >= 1);
  }
  ar_tdata_close(d);
}

static void test_order(void **state) {
  (void)state;
  enum { n = 1000 };
  static int64_t p[n], q[n], r[n];
  ar_tdata_order(n, false, 5, 1, p);
  for (int i = 0; i < n; i++)
    assert_int_equal(p[i], i);
  ar_tdata_order(n, true, 5, 1, p);
  ar_tdata_order(n, true, 5, 1, q);
  assert_memory_equal(p, q, sizeof p);
  static char seen[n];
  int fixed = 0;
  for (int i = 0; i < n; i++) {
    assert_in_range(p[i], 0, n - 1);
    assert_int_equal(seen[p[i]], 0);
    seen[p[i]] = 1;
    fixed += p[i] == i;
  }
  assert_true(fixed < 10);
  ar_tdata_order(n, true, 5, 2, r);
  assert_memory_not_equal(p, r, sizeof p);
  ar_tdata_order(n, true, 6, 1, r);
  assert_memory_not_equal(p, r, sizeof p);
  ar_tdata_order(0, true, 1, 1, r);
  ar_tdata_order(1, true, 1, 1, r);
  assert_int_equal(r[0], 0);
}

/* ---- tokens --------------------------------------------------------------- */

/* labels > 2: the class's digits base vocab - 4 at positions 1..D, filler
 * after them, padding after the row's length; a seq too short for D
 * digits is refused. */
static void test_tokens_many_labels(void **state) {
  (void)state;
  enum { seq = 6, vocab = 14, train = 2000, labels = 1000 };
  ar_tokens_spec spec = {train, 0, seq, vocab, labels};
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_tdata_generate_tokens(&spec, 7, path("many"), NULL, &err);
  if (st != AR_OK)
    fail_msg("generate: %s", err.msg);
  ar_tdata *d = open_npy_ok("many/train");
  static int64_t ids[train * seq], y[train], idx[train];
  static bool seen[labels];
  ar_tdata_order(train, false, 0, 0, idx);
  ar_tdata_batch(d, idx, train, NULL, 0, 2, NULL, ids, y);
  int distinct = 0;
  for (int r = 0; r < train; r++) {
    const int64_t *t = ids + r * seq;
    assert_int_equal(t[0], 1);
    assert_in_range(y[r], 0, labels - 1);
    int64_t c = 0;
    for (int j = 1; j <= 3; j++) { /* 999 takes 3 digits base 10 */
      assert_in_range(t[j], 4, vocab - 1);
      c = c * 10 + (t[j] - 4);
    }
    assert_int_equal(c, y[r]);
    distinct += !seen[y[r]];
    seen[y[r]] = true;
  }
  assert_true(distinct > 800); /* uniform over 1000 classes */
  ar_tdata_close(d);
  ar_tokens_spec bad = {10, 0, 3, vocab, labels};
  assert_int_equal(ar_tdata_generate_tokens(&bad, 1, path("many_bad"), NULL, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "need seq of at least 4"));
}

static void test_tokens(void **state) {
  (void)state;
  enum { seq = 16, vocab = 12, train = 3000, test = 400 };
  ar_tokens_spec spec = {train, test, seq, vocab, 0};
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_tdata_generate_tokens(&spec, 42, path("tok"), NULL, &err);
  if (st != AR_OK)
    fail_msg("generate: %s", err.msg);
  ar_tdata *d = open_npy_ok("tok/train");
  ar_tdata_info info;
  ar_tdata_get_info(d, &info);
  assert_int_equal(info.count, train);
  assert_int_equal(info.type, AR_TDATA_I64);
  assert_int_equal(info.nd, 1);
  assert_int_equal(info.dims[0], seq);
  assert_int_equal(info.classes, 2);
  static int64_t ids[train * seq], y[train], idx[train];
  ar_tdata_order(train, false, 0, 0, idx);
  ar_tdata_batch(d, idx, train, NULL, 0, 2, NULL, ids, y);
  long ones = 0, hist[2][vocab] = {{0}}, lens[2] = {0};
  for (int r = 0; r < train; r++) {
    const int64_t *t = ids + r * seq;
    assert_int_equal(t[0], 1);
    int len = seq;
    while (len > 0 && t[len - 1] == 0)
      len--;
    assert_in_range(len, seq / 2, seq);
    int p2 = -1, p3 = -1;
    for (int j = 1; j < len; j++) {
      assert_in_range(t[j], 2, vocab - 1);
      if (t[j] == 2) {
        assert_int_equal(p2, -1);
        p2 = j;
      }
      if (t[j] == 3) {
        assert_int_equal(p3, -1);
        p3 = j;
      }
      hist[y[r]][t[j]]++;
    }
    assert_true(p2 > 0 && p3 > 0); /* each marker exactly once */
    assert_int_equal(y[r], p2 < p3);
    ones += y[r];
    lens[y[r]] += len;
  }
  assert_in_range(ones, train * 45 / 100, train * 55 / 100);
  /* Bag of words: per class, each marker once a row and the filler
   * tokens equally frequent in both classes (within sampling noise). */
  long rows[2] = {train - ones, ones};
  for (int c = 0; c < 2; c++) {
    assert_int_equal(hist[c][2], rows[c]);
    assert_int_equal(hist[c][3], rows[c]);
  }
  for (int v = 4; v < vocab; v++) {
    double f0 = (double)hist[0][v] / (double)(lens[0] - 3 * rows[0]);
    double f1 = (double)hist[1][v] / (double)(lens[1] - 3 * rows[1]);
    assert_float_equal(f0, f1, 0.01);
    assert_float_equal(f0, 1.0 / (vocab - 4), 0.01);
  }
  assert_float_equal((double)lens[0] / rows[0], (double)lens[1] / rows[1], 0.3);
  ar_tdata_close(d);
  d = open_npy_ok("tok/test");
  ar_tdata_get_info(d, &info);
  assert_int_equal(info.count, test);
  ar_tdata_close(d);

  /* The same seed writes the same bytes; another seed does not. */
  st = ar_tdata_generate_tokens(&spec, 42, path("tok2"), NULL, &err);
  assert_int_equal(st, AR_OK);
  st = ar_tdata_generate_tokens(&spec, 43, path("tok3"), NULL, &err);
  assert_int_equal(st, AR_OK);
  const char *names[3] = {"tok/train/x.npy", "tok2/train/x.npy", "tok3/train/x.npy"};
  static char buf[3][train * seq * 8 + 128];
  for (int k = 0; k < 3; k++) {
    FILE *f = fopen(path(names[k]), "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf[k], 1, sizeof buf[k], f), train * seq * 8 + 128);
    fclose(f);
  }
  /* The npy v1.0 header is padded to 128 bytes here (a multiple of 64). */
  assert_memory_equal(buf[0], "\x93NUMPY\x01\x00", 8);
  assert_int_equal(buf[0][127], '\n');
  assert_memory_equal(buf[0], buf[1], sizeof buf[0]);
  assert_memory_not_equal(buf[0], buf[2], sizeof buf[0]);

  ar_tokens_spec bad = {10, 10, 2, 100, 0};
  assert_int_equal(ar_tdata_generate_tokens(&bad, 1, path("bad"), NULL, &err), AR_INVALID);
  bad = (ar_tokens_spec){10, 10, 8, 4, 0};
  assert_int_equal(ar_tdata_generate_tokens(&bad, 1, path("bad"), NULL, &err), AR_INVALID);
  /* The shortest legal rows: seq 3 puts both markers after the class token. */
  ar_tokens_spec tiny = {50, 0, 3, 5, 0};
  assert_int_equal(ar_tdata_generate_tokens(&tiny, 1, path("tiny"), NULL, &err), AR_OK);
  d = open_npy_ok("tiny/train");
  int64_t t[50 * 3], ty[50];
  ar_tdata_batch(d, idx, 50, NULL, 0, 1, NULL, t, ty);
  for (int r = 0; r < 50; r++)
    assert_int_equal(ty[r], t[r * 3 + 1] == 2);
  ar_tdata_close(d);
  d = open_npy_ok("tiny/test");
  ar_tdata_get_info(d, &info);
  assert_int_equal(info.count, 0);
  ar_tdata_close(d);
}

/* ---- Fashion-MNIST -------------------------------------------------------- */

static void test_fashion_mnist(void **state) {
  (void)state;
  if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
    skip();
    return;
  }
  ar_tdata *tr = open_idx_ok(FASHION_DIR "/train-images-idx3-ubyte.gz", NULL);
  ar_tdata *te = open_idx_ok(FASHION_DIR "/t10k-images-idx3-ubyte.gz", NULL);
  ar_tdata_info a, b;
  ar_tdata_get_info(tr, &a);
  ar_tdata_get_info(te, &b);
  assert_int_equal(a.count, 60000);
  assert_int_equal(b.count, 10000);
  assert_int_equal(a.dims[1], 28);
  assert_int_equal(a.dims[2], 28);
  assert_int_equal(b.dims[1], 28);
  assert_int_equal(a.classes, 10);
  assert_int_equal(b.classes, 10);
  /* Balanced classes: 6000 of each in train. */
  long per[10] = {0};
  for (int64_t i = 0; i < a.count; i++)
    per[ar_tdata_label(tr, i)]++;
  for (int c = 0; c < 10; c++)
    assert_int_equal(per[c], 6000);
  /* The commonly quoted statistics of the training images. */
  float m, s;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_tdata_channel_stats(tr, &m, &s, &err), AR_OK);
  assert_float_equal(m, 0.2860, 0.001);
  assert_float_equal(s, 0.3530, 0.001);
  ar_tdata_close(tr);
  ar_tdata_close(te);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idx_plain),       cmocka_unit_test(test_idx_gz_and_naming),
      cmocka_unit_test(test_idx_errors),      cmocka_unit_test(test_npy_dtypes),
      cmocka_unit_test(test_npy_refused),     cmocka_unit_test(test_npy_targets),
      cmocka_unit_test(test_batch_normalise),
      cmocka_unit_test(test_batch_augment),   cmocka_unit_test(test_order),
      cmocka_unit_test(test_tokens),          cmocka_unit_test(test_tokens_many_labels),          cmocka_unit_test(test_fashion_mnist),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
