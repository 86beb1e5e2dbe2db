/*
 * Host backend losses: softmax_xent and sigmoid_bce against a double
 * reference, their gradients against central finite differences of their
 * own loss, numerical stability for huge logits, rows without labels,
 * grad aliasing logits, loss-only calls, and 1 vs 2 threads.
 */
#include "op_fixtures.h"

#include <float.h>

typedef enum loss_kind { SOFTMAX, BCE } loss_kind;

static void run_loss(ar_device *dev, loss_kind kind, int64_t rows, int64_t cols,
                     const float *x, const fx_csr *lab, float scale, float *grad,
                     float *loss) {
  if (kind == SOFTMAX)
    ar_device_softmax_xent(dev, rows, cols, x, lab->ptr, lab->idx, scale, grad,
                           loss);
  else
    ar_device_sigmoid_bce(dev, rows, cols, x, lab->ptr, lab->idx, scale, grad,
                          loss);
}

/* Reference in double straight from the definitions (softmax: target mass
 * 1/|L| on each label, rows without labels contribute nothing; bce: targets
 * 0/1, every row counts).  gmag and lmag receive the magnitudes the errors
 * are measured against: about scale (p + t) for a gradient entry, the sum
 * of the absolute terms for a loss. */
static void ref_loss(loss_kind kind, int64_t rows, int64_t cols, const float *x,
                     const fx_csr *lab, double scale, double *grad,
                     double *gmag, double *loss, double *lmag) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    double *g = grad + r * cols, *gm = gmag + r * cols;
    int64_t nl = lab->ptr[r + 1] - lab->ptr[r];
    loss[r] = 0;
    lmag[r] = 0;
    if (kind == SOFTMAX) {
      if (nl == 0) {
        for (int64_t j = 0; j < cols; j++)
          g[j] = gm[j] = 0;
        continue;
      }
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < cols; j++)
        m = xr[j] > m ? xr[j] : m;
      for (int64_t j = 0; j < cols; j++)
        s += exp(xr[j] - m);
      /* The kernel, like any float implementation, rounds x - max to
       * float: half an ulp of |x - max| moves p by 2^-24 |x - max|
       * relative, which the magnitude allows for (0.1 >= 2^-24 / 1e-6). */
      for (int64_t j = 0; j < cols; j++) {
        g[j] = fabs(scale) * exp(xr[j] - m) / s;
        gm[j] = g[j] * (1.0 + 0.1 * fabs(xr[j] - m));
      }
      lmag[r] = fabs(m) + log(s);
      for (int64_t e = lab->ptr[r]; e < lab->ptr[r + 1]; e++) {
        int32_t j = lab->idx[e];
        loss[r] -= (1.0 / nl) * (xr[j] - m - log(s));
        lmag[r] += fabs(xr[j]) / nl;
        g[j] -= scale / nl;
        gm[j] += fabs(scale) / nl;
      }
    } else {
      for (int64_t j = 0; j < cols; j++) {
        double v = xr[j];
        double term = (v > 0 ? v : 0) + log1p(exp(-fabs(v)));
        loss[r] += term;
        lmag[r] += term;
        g[j] = gm[j] = scale / (1.0 + exp(-v));
        gm[j] = fabs(gm[j]);
      }
      for (int64_t e = lab->ptr[r]; e < lab->ptr[r + 1]; e++) {
        int32_t j = lab->idx[e];
        loss[r] -= xr[j];
        lmag[r] += fabs(xr[j]);
        g[j] -= scale;
        gm[j] += fabs(scale);
      }
    }
  }
}

/* Runs the kernel with a gradient, then without, against the reference. */
static void check_against_ref_ramp(loss_kind kind, fx_rng *r, int64_t rows,
                                   int64_t cols, float lo, float hi,
                                   float scale, float slope) {
  fx_csr lab = fx_csr_random(r, rows, cols, 3);
  float *x = fx_floats(dev2, rows * cols), *g = fx_floats(dev2, rows * cols);
  float *loss = fx_floats(dev2, rows), *loss_only = fx_floats(dev2, rows);
  fx_fill_uniform(r, x, rows * cols, lo, hi);
  for (int64_t i = 0; i < rows; i++) /* a ramp moves the max along the row */
    for (int64_t j = 0; j < cols; j++)
      x[i * cols + j] += slope * (float)j;
  fx_fill_uniform(r, g, rows * cols, 50, 60); /* must be overwritten */
  double *rg = test_malloc((size_t)(rows * cols) * sizeof *rg);
  double *gmag = test_malloc((size_t)(rows * cols) * sizeof *gmag);
  double *rl = test_malloc((size_t)rows * sizeof *rl);
  double *lmag = test_malloc((size_t)rows * sizeof *lmag);
  ref_loss(kind, rows, cols, x, &lab, scale, rg, gmag, rl, lmag);
  run_loss(dev2, kind, rows, cols, x, &lab, scale, g, loss);
  run_loss(dev2, kind, rows, cols, x, &lab, scale, NULL, loss_only);
  char what[160];
  snprintf(what, sizeof what, "%s %lldx%lld range [%g, %g] slope %g scale %g: ",
           kind == SOFTMAX ? "softmax_xent" : "sigmoid_bce", (long long)rows,
           (long long)cols, (double)lo, (double)hi, (double)slope,
           (double)scale);
  size_t at = strlen(what);
  snprintf(what + at, sizeof what - at, "loss");
  fx_expect_close(what, loss, rl, lmag, rows, 2e-6, 1e-30);
  snprintf(what + at, sizeof what - at, "loss without grad");
  fx_expect_close(what, loss_only, rl, lmag, rows, 2e-6, 1e-30);
  snprintf(what + at, sizeof what - at, "grad");
  fx_expect_close(what, g, rg, gmag, rows * cols, 1e-6, 1e-30);
  test_free(rg);
  test_free(gmag);
  test_free(rl);
  test_free(lmag);
  fx_free_floats(dev2, x, rows * cols);
  fx_free_floats(dev2, g, rows * cols);
  fx_free_floats(dev2, loss, rows);
  fx_free_floats(dev2, loss_only, rows);
  fx_csr_free(&lab);
}

static void check_against_ref(loss_kind kind, fx_rng *r, int64_t rows,
                              int64_t cols, float lo, float hi, float scale) {
  check_against_ref_ramp(kind, r, rows, cols, lo, hi, scale, 0.0f);
}

static void test_softmax_xent_ref(void **state) {
  (void)state;
  fx_rng r = {11};
  const int64_t rows[] = {1, 7, 33}, cols[] = {1, 7, 33, 1000, 5000};
  for (int i = 0; i < 3; i++)
    for (int c = 0; c < 5; c++) {
      check_against_ref(SOFTMAX, &r, rows[i], cols[c], -5, 5, 1.0f);
      check_against_ref(SOFTMAX, &r, rows[i], cols[c], -3, 3, 1.0f / 33);
    }
}

static void test_sigmoid_bce_ref(void **state) {
  (void)state;
  fx_rng r = {12};
  const int64_t rows[] = {1, 7, 33}, cols[] = {1, 7, 33, 1000, 5000};
  for (int i = 0; i < 3; i++)
    for (int c = 0; c < 5; c++) {
      check_against_ref(BCE, &r, rows[i], cols[c], -5, 5, 1.0f);
      check_against_ref(BCE, &r, rows[i], cols[c], -30, 30, 0.5f);
    }
}

/* Logits of +-1000 and far beyond exp's range: finite, correct results
 * (the log-sum-exp and |x| forms never take exp of a large number). */
static void test_huge_logits(void **state) {
  (void)state;
  fx_rng r = {13};
  check_against_ref(SOFTMAX, &r, 7, 33, -1000, 1000, 1.0f);
  check_against_ref(SOFTMAX, &r, 7, 33, 1e6f, 1e6f + 20, 1.0f);
  check_against_ref(BCE, &r, 7, 33, -1000, 1000, 1.0f);
}

/* The host kernel reads a wide row in blocks with a running max: a rising
 * ramp raises the max in every block (earlier blocks must be rescaled), a
 * falling one never after the first, a steep one underflows all but the
 * last blocks. */
static void test_softmax_moving_max(void **state) {
  (void)state;
  fx_rng r = {17};
  const float slopes[] = {1e-3f, -1e-3f, 0.05f, -0.05f};
  for (int i = 0; i < 4; i++) {
    check_against_ref_ramp(SOFTMAX, &r, 3, 20000, -1, 1, 1.0f, slopes[i]);
    check_against_ref_ramp(SOFTMAX, &r, 2, 2049, -1, 1, 0.5f, slopes[i]);
  }
  /* A spike of +300 in the last column, past the last full group of 16 of
   * a short final block: missing it from the max overflows exp. */
  const int64_t spiked[] = {7, 2055, 4100, 4096 + 2048 + 17};
  for (int i = 0; i < 4; i++) {
    int64_t cols = spiked[i];
    fx_csr lab = fx_csr_random(&r, 2, cols, 2);
    float *x = fx_floats(dev2, 2 * cols), *g = fx_floats(dev2, 2 * cols);
    float loss[2];
    double *rg = test_malloc((size_t)(2 * cols) * sizeof *rg);
    double *gm = test_malloc((size_t)(2 * cols) * sizeof *gm);
    double rl[2], lm[2];
    fx_fill_uniform(&r, x, 2 * cols, -1, 1);
    x[cols - 1] += 300.0f;
    x[2 * cols - 1] += 300.0f;
    ref_loss(SOFTMAX, 2, cols, x, &lab, 1.0, rg, gm, rl, lm);
    ar_device_softmax_xent(dev2, 2, cols, x, lab.ptr, lab.idx, 1.0f, g, loss);
    fx_expect_close("spiked softmax loss", loss, rl, lm, 2, 2e-6, 1e-30);
    fx_expect_close("spiked softmax grad", g, rg, gm, 2 * cols, 1e-6, 1e-30);
    test_free(rg);
    test_free(gm);
    fx_free_floats(dev2, x, 2 * cols);
    fx_free_floats(dev2, g, 2 * cols);
    fx_csr_free(&lab);
  }
  /* Wider than SMX_MAX_BLOCKS blocks of the minimum size: larger blocks. */
  check_against_ref_ramp(SOFTMAX, &r, 1, 2100000, -3, 3, 1.0f, 2e-6f);
}

/* d(sum of loss_rows)/dx by central differences vs the returned gradient. */
static void check_finite_differences(loss_kind kind, fx_rng *r, int64_t rows,
                                     int64_t cols) {
  fx_csr lab = fx_csr_random(r, rows, cols, 3);
  int64_t n = rows * cols;
  float *x = fx_floats(dev1, n), *g = fx_floats(dev1, n);
  float *loss = fx_floats(dev1, rows);
  fx_fill_uniform(r, x, n, -2, 2);
  run_loss(dev1, kind, rows, cols, x, &lab, 1.0f, g, loss);
  double *fd = test_malloc((size_t)n * sizeof *fd);
  for (int64_t i = 0; i < n; i++) {
    const float x0 = x[i];
    const float xp = x0 + 1e-2f, xm = x0 - 1e-2f;
    double lp = 0, lm = 0;
    x[i] = xp;
    run_loss(dev1, kind, rows, cols, x, &lab, 1.0f, NULL, loss);
    for (int64_t q = 0; q < rows; q++)
      lp += loss[q];
    x[i] = xm;
    run_loss(dev1, kind, rows, cols, x, &lab, 1.0f, NULL, loss);
    for (int64_t q = 0; q < rows; q++)
      lm += loss[q];
    x[i] = x0;
    fd[i] = (lp - lm) / ((double)xp - (double)xm);
  }
  char what[96];
  snprintf(what, sizeof what, "%s %lldx%lld gradient vs finite differences",
           kind == SOFTMAX ? "softmax_xent" : "sigmoid_bce", (long long)rows,
           (long long)cols);
  fx_expect_close(what, g, fd, NULL, n, 1e-3, 5e-4);
  test_free(fd);
  fx_free_floats(dev1, x, n);
  fx_free_floats(dev1, g, n);
  fx_free_floats(dev1, loss, rows);
  fx_csr_free(&lab);
}

static void test_finite_differences(void **state) {
  (void)state;
  fx_rng r = {14};
  check_finite_differences(SOFTMAX, &r, 4, 7);
  check_finite_differences(SOFTMAX, &r, 3, 33);
  check_finite_differences(BCE, &r, 4, 7);
  check_finite_differences(BCE, &r, 3, 33);
}

/* A softmax row without labels: zero loss, zero gradient (even where the
 * gradient buffer held garbage); a row with one label among one column:
 * p = 1, zero loss and gradient. */
static void test_softmax_degenerate_rows(void **state) {
  (void)state;
  int64_t ptr[3] = {0, 0, 1};
  int32_t idx[1] = {2};
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, g[8], loss[2];
  for (int i = 0; i < 8; i++)
    g[i] = NAN;
  ar_device_softmax_xent(dev1, 2, 4, x, ptr, idx, 1.0f, g, loss);
  assert_true(loss[0] == 0.0f);
  for (int j = 0; j < 4; j++)
    assert_true(g[j] == 0.0f);
  assert_true(loss[1] > 0.0f && isfinite(loss[1]));

  int64_t p1[2] = {0, 1};
  int32_t i1[1] = {0};
  float x1[1] = {-3}, g1[1], l1[1];
  ar_device_softmax_xent(dev1, 1, 1, x1, p1, i1, 1.0f, g1, l1);
  assert_true(fabsf(l1[0]) < 1e-6f && fabsf(g1[0]) < 1e-6f);
}

/* grad == logits gives the same numbers as separate buffers. */
static void test_grad_aliases_logits(void **state) {
  (void)state;
  fx_rng r = {15};
  const int64_t rows = 9, cols = 4099;
  fx_csr lab = fx_csr_random(&r, rows, cols, 4);
  float *x = fx_floats(dev2, rows * cols), *g = fx_floats(dev2, rows * cols);
  float *l1 = fx_floats(dev2, rows), *l2 = fx_floats(dev2, rows);
  for (int kind = SOFTMAX; kind <= BCE; kind++) {
    fx_fill_uniform(&r, x, rows * cols, -4, 4);
    run_loss(dev2, (loss_kind)kind, rows, cols, x, &lab, 0.5f, g, l1);
    run_loss(dev2, (loss_kind)kind, rows, cols, x, &lab, 0.5f, x, l2);
    fx_expect_identical("aliased grad", x, g, rows * cols);
    fx_expect_identical("aliased loss", l1, l2, rows);
  }
  fx_free_floats(dev2, x, rows * cols);
  fx_free_floats(dev2, g, rows * cols);
  fx_free_floats(dev2, l1, rows);
  fx_free_floats(dev2, l2, rows);
  fx_csr_free(&lab);
}

static void test_threads_identical(void **state) {
  (void)state;
  fx_rng r = {16};
  const int64_t rows = 6, cols = 70001;
  fx_csr lab = fx_csr_random(&r, rows, cols, 5);
  float *x = fx_floats(dev1, rows * cols);
  float *g1 = fx_floats(dev1, rows * cols), *g2 = fx_floats(dev1, rows * cols);
  float *l1 = fx_floats(dev1, rows), *l2 = fx_floats(dev1, rows);
  fx_fill_uniform(&r, x, rows * cols, -8, 8);
  for (int kind = SOFTMAX; kind <= BCE; kind++) {
    run_loss(dev1, (loss_kind)kind, rows, cols, x, &lab, 1.0f / 6, g1, l1);
    run_loss(dev2, (loss_kind)kind, rows, cols, x, &lab, 1.0f / 6, g2, l2);
    fx_expect_identical("grad, 1 vs 2 threads", g1, g2, rows * cols);
    fx_expect_identical("loss, 1 vs 2 threads", l1, l2, rows);
  }
  fx_free_floats(dev1, x, rows * cols);
  fx_free_floats(dev1, g1, rows * cols);
  fx_free_floats(dev1, g2, rows * cols);
  fx_free_floats(dev1, l1, rows);
  fx_free_floats(dev1, l2, rows);
  fx_csr_free(&lab);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softmax_xent_ref),
      cmocka_unit_test(test_sigmoid_bce_ref),
      cmocka_unit_test(test_huge_logits),
      cmocka_unit_test(test_softmax_moving_max),
      cmocka_unit_test(test_finite_differences),
      cmocka_unit_test(test_softmax_degenerate_rows),
      cmocka_unit_test(test_grad_aliases_logits),
      cmocka_unit_test(test_threads_identical),
  };
  return cmocka_run_group_tests(tests, fx_setup_pair, fx_teardown_pair);
}
