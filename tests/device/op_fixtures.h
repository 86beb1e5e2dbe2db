/*
 * Fixtures shared by the device op tests: a seeded random generator,
 * random CSR batches and label sets, device buffers, and a tolerance check
 * that names the worst element when it fails.
 */
#ifndef ACCELRT_TEST_OP_FIXTURES_H
#define ACCELRT_TEST_OP_FIXTURES_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "accelrt/device.h"

/* ---- random numbers (splitmix64: fixed seeds, same stream everywhere) ---- */

typedef struct fx_rng {
  uint64_t s;
} fx_rng;

static inline uint64_t fx_next(fx_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float fx_uniform(fx_rng *r, float lo, float hi) {
  double u = (double)(fx_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(lo + (hi - lo) * u);
}

/* Uniform integer in [0, n). */
static inline int64_t fx_below(fx_rng *r, int64_t n) {
  return (int64_t)(fx_next(r) % (uint64_t)n);
}

static inline void fx_fill_uniform(fx_rng *r, float *x, int64_t n, float lo,
                                   float hi) {
  for (int64_t i = 0; i < n; i++)
    x[i] = fx_uniform(r, lo, hi);
}

/* ---- devices and buffers ---------------------------------------------------- */

static inline ar_device *fx_open_host(int threads) {
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = threads;
  o.pin = false;
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_device_open("host", &o, &dev, &err);
  if (st != AR_OK)
    fail_msg("ar_device_open(host, threads=%d): %s", threads, err.msg);
  return dev;
}

/* A device buffer of n floats (at least one).  On the host backend device
 * pointers are host pointers, so tests read and write them directly. */
static inline float *fx_floats(ar_device *dev, int64_t n) {
  void *p = NULL;
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
  if (ar_device_alloc(dev, bytes, &p) != AR_OK)
    fail_msg("ar_device_alloc(%zu): %s", bytes, ar_device_errmsg(dev));
  return p;
}

static inline void fx_free_floats(ar_device *dev, float *p, int64_t n) {
  ar_device_free(dev, p, (size_t)(n > 0 ? n : 1) * sizeof(float));
}

static inline float *fx_copy(ar_device *dev, const float *src, int64_t n) {
  float *d = fx_floats(dev, n);
  memcpy(d, src, (size_t)n * sizeof *d);
  return d;
}

/* ---- sparse batches and label sets ------------------------------------------- */

/* `rows` rows of distinct indices in [0, range), between 0 and max_per_row
 * entries each (never more than range), values in [-1, 1).  Used both as a
 * CSR input batch (indices = features) and as label sets (no values).
 * Owned by the caller, released with fx_csr_free. */
typedef struct fx_csr {
  int64_t rows;
  int64_t *ptr; /* (rows + 1) */
  int32_t *idx; /* (ptr[rows]) */
  float *val;   /* (ptr[rows]) */
} fx_csr;

static inline fx_csr fx_csr_random(fx_rng *r, int64_t rows, int64_t range,
                                   int64_t max_per_row) {
  fx_csr c;
  c.rows = rows;
  if (max_per_row > range)
    max_per_row = range;
  c.ptr = test_malloc((size_t)(rows + 1) * sizeof *c.ptr);
  c.idx = test_malloc((size_t)(rows * max_per_row + 1) * sizeof *c.idx);
  c.val = test_malloc((size_t)(rows * max_per_row + 1) * sizeof *c.val);
  c.ptr[0] = 0;
  for (int64_t i = 0; i < rows; i++) {
    int64_t n = fx_below(r, max_per_row + 1);
    int64_t e = c.ptr[i];
    for (int64_t k = 0; k < n; k++) {
      int32_t f;
      bool dup;
      do { /* rejection keeps the indices of a row distinct */
        f = (int32_t)fx_below(r, range);
        dup = false;
        for (int64_t q = c.ptr[i]; q < e; q++)
          dup = dup || c.idx[q] == f;
      } while (dup);
      c.idx[e] = f;
      c.val[e] = fx_uniform(r, -1.0f, 1.0f);
      e++;
    }
    c.ptr[i + 1] = e;
  }
  return c;
}

static inline void fx_csr_free(fx_csr *c) {
  test_free(c->ptr);
  test_free(c->idx);
  test_free(c->val);
}

/* ---- comparisons --------------------------------------------------------------- */

/* Fails unless |got[i] - ref[i]| <= atol + rtol * scale[i] for every i, where
 * scale is the magnitude the error should be measured against (|ref| when
 * scale is NULL).  The message names the worst element. */
static inline void fx_expect_close(const char *what, const float *got,
                                   const double *ref, const double *scale,
                                   int64_t n, double rtol, double atol) {
  int64_t worst = -1;
  double worst_excess = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double s = scale ? scale[i] : fabs(ref[i]);
    double err = fabs((double)got[i] - ref[i]);
    double excess = err - (atol + rtol * s);
    if (!(excess <= 0.0) && (worst < 0 || !(excess <= worst_excess))) {
      worst = i;
      worst_excess = excess;
    }
  }
  if (worst >= 0)
    fail_msg("%s: element %lld of %lld is %.9g, reference %.9g (tolerance "
             "%.3g + %.3g * %.3g)",
             what, (long long)worst, (long long)n, (double)got[worst],
             ref[worst], atol, rtol, scale ? scale[worst] : fabs(ref[worst]));
}

/* Fails unless the two float arrays are bit-identical. */
static inline void fx_expect_identical(const char *what, const float *a,
                                       const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
      fail_msg("%s: element %lld differs: %.9g vs %.9g", what, (long long)i,
               (double)a[i], (double)b[i]);
  }
}

/* The two host devices an op test group compares: one thread and two
 * threads (the ops must agree, bit for bit where they are deterministic).
 * Open them with fx_setup_pair and close them with fx_teardown_pair, the
 * group's setup and teardown. */
static ar_device *dev1, *dev2;

static inline int fx_setup_pair(void **state) {
  (void)state;
  dev1 = fx_open_host(1);
  dev2 = fx_open_host(2);
  return 0;
}

static inline int fx_teardown_pair(void **state) {
  (void)state;
  ar_device_close(dev1);
  ar_device_close(dev2);
  return 0;
}

#endif /* ACCELRT_TEST_OP_FIXTURES_H */
