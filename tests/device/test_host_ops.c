/*
 * Host backend: every math op except the losses and optimizers against a
 * naive double-precision reference, on shapes that include 1, odd sizes and
 * sizes past the kernels' block and parallel thresholds; plus bit-identical
 * results for 1 and 2 threads.
 */
#include "op_fixtures.h"

#include <stdlib.h>

/* ---- gemm ------------------------------------------------------------------- */

static void check_gemm(ar_device *dev, fx_rng *r, bool ta, bool tb, int64_t m,
                       int64_t n, int64_t k, float alpha, float beta) {
  /* Stored shapes, with a padded row stride to exercise lda/ldb/ldc. */
  int64_t ar_ = ta ? k : m, ac = ta ? m : k;
  int64_t br = tb ? n : k, bc = tb ? k : n;
  int64_t lda = ac + 3, ldb = bc + 1, ldc = n + 2;
  float *a = fx_floats(dev, ar_ * lda), *b = fx_floats(dev, br * ldb);
  float *c = fx_floats(dev, m * ldc);
  fx_fill_uniform(r, a, ar_ * lda, -1, 1);
  fx_fill_uniform(r, b, br * ldb, -1, 1);
  fx_fill_uniform(r, c, m * ldc, -1, 1);
  double *ref = test_malloc((size_t)(m * ldc) * sizeof *ref);
  double *mag = test_malloc((size_t)(m * ldc) * sizeof *mag);
  for (int64_t i = 0; i < m; i++) {
    for (int64_t j = 0; j < ldc; j++) {
      double c0 = beta == 0.0f ? 0.0 : (double)beta * c[i * ldc + j];
      if (j >= n) { /* padding must stay untouched */
        ref[i * ldc + j] = c[i * ldc + j];
        mag[i * ldc + j] = 0;
        continue;
      }
      double s = 0, sm = 0;
      for (int64_t p = 0; p < k; p++) {
        double av = ta ? a[p * lda + i] : a[i * lda + p];
        double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
        sm += fabs(av * bv);
      }
      ref[i * ldc + j] = alpha * s + c0;
      mag[i * ldc + j] = fabs(alpha) * sm + fabs(c0);
    }
  }
  ar_device_gemm(dev, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  char what[128];
  snprintf(what, sizeof what, "gemm ta=%d tb=%d m=%lld n=%lld k=%lld", ta, tb,
           (long long)m, (long long)n, (long long)k);
  fx_expect_close(what, c, ref, mag, m * ldc, 1e-5, 1e-6);
  test_free(ref);
  test_free(mag);
  fx_free_floats(dev, a, ar_ * lda);
  fx_free_floats(dev, b, br * ldb);
  fx_free_floats(dev, c, m * ldc);
}

static void test_gemm(void **state) {
  (void)state;
  fx_rng r = {1};
  /* The last two are large enough for the threads to split C's columns,
   * then its rows. */
  const int64_t shapes[][3] = {{1, 1, 1},     {7, 33, 5},     {33, 7, 1000},
                               {1000, 1, 7},  {1, 1000, 33},  {64, 65, 66},
                               {33, 1001, 131}, {1001, 33, 131}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 4; t++)
      check_gemm(dev2, &r, t & 1, t & 2, shapes[s][0], shapes[s][1],
                 shapes[s][2], t == 3 ? -0.5f : 1.0f, t == 1 ? 0.75f : 0.0f);
}

/* k = 0: C = beta C, and beta = 0 clears C even where it held NaN. */
static void test_gemm_empty_k(void **state) {
  (void)state;
  float c[6] = {NAN, 1, 2, 3, 4, 5};
  float a[1] = {0}, b[1] = {0};
  ar_device_gemm(dev1, false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 0.0f, c, 3);
  for (int i = 0; i < 6; i++)
    assert_true(c[i] == 0.0f);
  float d[2] = {2, -4};
  ar_device_gemm(dev1, false, false, 1, 2, 0, 1.0f, a, 1, b, 2, 0.5f, d, 2);
  assert_true(d[0] == 1.0f && d[1] == -2.0f);
}

/* ---- spmm / spmm_t ------------------------------------------------------------- */

static void check_spmm(ar_device *dev, fx_rng *r, int64_t rows, int64_t in,
                       int64_t out, int64_t max_nnz) {
  fx_csr x = fx_csr_random(r, rows, in, max_nnz);
  float *w = fx_floats(dev, in * out), *y = fx_floats(dev, rows * out);
  fx_fill_uniform(r, w, in * out, -1, 1);
  fx_fill_uniform(r, y, rows * out, 100, 200); /* must be overwritten */
  double *ref = test_calloc((size_t)(rows * out), sizeof *ref);
  double *mag = test_calloc((size_t)(rows * out), sizeof *mag);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t e = x.ptr[i]; e < x.ptr[i + 1]; e++)
      for (int64_t j = 0; j < out; j++) {
        double t = (double)x.val[e] * w[x.idx[e] * out + j];
        ref[i * out + j] += t;
        mag[i * out + j] += fabs(t);
      }
  ar_device_spmm(dev, rows, x.ptr, x.idx, x.val, w, out, y);
  char what[96];
  snprintf(what, sizeof what, "spmm rows=%lld in=%lld out=%lld", (long long)rows,
           (long long)in, (long long)out);
  fx_expect_close(what, y, ref, mag, rows * out, 1e-5, 1e-7);
  test_free(ref);
  test_free(mag);
  fx_free_floats(dev, w, in * out);
  fx_free_floats(dev, y, rows * out);
  fx_csr_free(&x);
}

static void test_spmm(void **state) {
  (void)state;
  fx_rng r = {2};
  const int64_t rows[] = {1, 7, 33, 1000}, outs[] = {1, 7, 33, 128};
  for (int i = 0; i < 4; i++)
    for (int o = 0; o < 4; o++) {
      check_spmm(dev2, &r, rows[i], 1000, outs[o], 20);
      check_spmm(dev2, &r, rows[i], 5, outs[o], 5); /* dense-ish, tiny input */
    }
}

/* dW += X^T dY: rows of dW named by no nonzero must not change at all; a
 * small input range makes many batch rows share features. */
static void check_spmm_t(ar_device *dev, fx_rng *r, int64_t rows, int64_t in,
                         int64_t out, int64_t max_nnz) {
  fx_csr x = fx_csr_random(r, rows, in, max_nnz);
  float *dy = fx_floats(dev, rows * out), *dw = fx_floats(dev, in * out);
  fx_fill_uniform(r, dy, rows * out, -1, 1);
  fx_fill_uniform(r, dw, in * out, -1, 1); /* accumulated into */
  double *ref = test_malloc((size_t)(in * out) * sizeof *ref);
  double *mag = test_malloc((size_t)(in * out) * sizeof *mag);
  for (int64_t i = 0; i < in * out; i++) {
    ref[i] = dw[i];
    mag[i] = fabs(dw[i]);
  }
  for (int64_t i = 0; i < rows; i++)
    for (int64_t e = x.ptr[i]; e < x.ptr[i + 1]; e++)
      for (int64_t j = 0; j < out; j++) {
        double t = (double)x.val[e] * dy[i * out + j];
        ref[x.idx[e] * out + j] += t;
        mag[x.idx[e] * out + j] += fabs(t);
      }
  ar_device_spmm_t(dev, rows, x.ptr, x.idx, x.val, dy, out, dw);
  char what[96];
  snprintf(what, sizeof what, "spmm_t rows=%lld in=%lld out=%lld",
           (long long)rows, (long long)in, (long long)out);
  /* atol 0: untouched rows must come back bit for bit. */
  fx_expect_close(what, dw, ref, mag, in * out, 1e-5, 0.0);
  test_free(ref);
  test_free(mag);
  fx_free_floats(dev, dy, rows * out);
  fx_free_floats(dev, dw, in * out);
  fx_csr_free(&x);
}

static void test_spmm_t(void **state) {
  (void)state;
  fx_rng r = {3};
  const int64_t rows[] = {1, 7, 33, 1000}, outs[] = {1, 7, 33, 128, 1000};
  for (int i = 0; i < 4; i++)
    for (int o = 0; o < 5; o++) {
      check_spmm_t(dev2, &r, rows[i], 1000, outs[o], 20);
      check_spmm_t(dev2, &r, rows[i], 7, outs[o], 4); /* repeated features */
    }
}

/* ---- bias_act, act_grad, col_sum, fill ------------------------------------------ */

static double ref_act(ar_act act, double x) {
  switch (act) {
  case AR_ACT_RELU:
    return x > 0 ? x : 0;
  case AR_ACT_SIGMOID:
    return 1.0 / (1.0 + exp(-x));
  default:
    return x;
  }
}

static void test_bias_act(void **state) {
  (void)state;
  fx_rng r = {4};
  const int64_t shapes[][2] = {{1, 1}, {7, 33}, {33, 7}, {1, 1000}, {3, 4099},
                               {40, 1000}};
  const ar_act acts[] = {AR_ACT_NONE, AR_ACT_RELU, AR_ACT_SIGMOID,
                         AR_ACT_SOFTMAX};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int a = 0; a < 4; a++)
      for (int with_bias = 0; with_bias < 2; with_bias++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        float *y = fx_floats(dev2, rows * cols), *b = fx_floats(dev2, cols);
        /* Wide range: sigmoid must neither overflow nor lose its tails. */
        fx_fill_uniform(&r, y, rows * cols, -100, 100);
        fx_fill_uniform(&r, b, cols, -3, 3);
        double *ref = test_malloc((size_t)(rows * cols) * sizeof *ref);
        /* The reference starts from the float sum y + b, as the kernel
         * does: near x = -100 one rounding of x alone moves sigmoid(x) by
         * 4e-6 relative, which would hide the activation's own error. */
        for (int64_t i = 0; i < rows; i++)
          for (int64_t j = 0; j < cols; j++)
            ref[i * cols + j] = ref_act(
                acts[a], (float)((double)y[i * cols + j] + (with_bias ? b[j] : 0.0)));
        ar_device_bias_act(dev2, rows, cols, with_bias ? b : NULL, acts[a], y);
        char what[96];
        snprintf(what, sizeof what, "bias_act act=%d bias=%d %lldx%lld", acts[a],
                 with_bias, (long long)rows, (long long)cols);
        fx_expect_close(what, y, ref, NULL, rows * cols, 1e-6, 1e-30);
        test_free(ref);
        fx_free_floats(dev2, y, rows * cols);
        fx_free_floats(dev2, b, cols);
      }
}

static void test_act_grad(void **state) {
  (void)state;
  fx_rng r = {5};
  const int64_t ns[] = {1, 7, 33, 1000, 100003};
  const ar_act acts[] = {AR_ACT_NONE, AR_ACT_RELU, AR_ACT_SIGMOID,
                         AR_ACT_SOFTMAX};
  for (int s = 0; s < 5; s++)
    for (int a = 0; a < 4; a++) {
      int64_t n = ns[s];
      float *y = fx_floats(dev2, n), *dy = fx_floats(dev2, n);
      for (int64_t i = 0; i < n; i++) /* y as the activation would leave it */
        y[i] = (float)ref_act(acts[a], fx_uniform(&r, -4, 4));
      fx_fill_uniform(&r, dy, n, -1, 1);
      double *ref = test_malloc((size_t)n * sizeof *ref);
      for (int64_t i = 0; i < n; i++) {
        double d = dy[i];
        if (acts[a] == AR_ACT_RELU)
          d = y[i] > 0 ? d : 0;
        else if (acts[a] == AR_ACT_SIGMOID)
          d *= (double)y[i] * (1.0 - y[i]);
        ref[i] = d;
      }
      ar_device_act_grad(dev2, n, acts[a], y, dy);
      char what[64];
      snprintf(what, sizeof what, "act_grad act=%d n=%lld", acts[a],
               (long long)n);
      fx_expect_close(what, dy, ref, NULL, n, 1e-6, 1e-12);
      test_free(ref);
      fx_free_floats(dev2, y, n);
      fx_free_floats(dev2, dy, n);
    }
}

static void test_col_sum(void **state) {
  (void)state;
  fx_rng r = {6};
  const int64_t rows[] = {1, 7, 33, 1000}, cols[] = {1, 7, 33, 1000, 5000};
  for (int i = 0; i < 4; i++)
    for (int c = 0; c < 5; c++)
      for (int acc = 0; acc < 2; acc++) {
        int64_t m = rows[i], n = cols[c];
        float *dy = fx_floats(dev2, m * n), *db = fx_floats(dev2, n);
        fx_fill_uniform(&r, dy, m * n, -1, 1);
        fx_fill_uniform(&r, db, n, -1, 1);
        double *ref = test_malloc((size_t)n * sizeof *ref);
        double *mag = test_malloc((size_t)n * sizeof *mag);
        for (int64_t j = 0; j < n; j++) {
          ref[j] = acc ? db[j] : 0.0;
          mag[j] = fabs(ref[j]);
          for (int64_t k = 0; k < m; k++) {
            ref[j] += dy[k * n + j];
            mag[j] += fabs(dy[k * n + j]);
          }
        }
        ar_device_col_sum(dev2, m, n, dy, acc, db);
        char what[80];
        snprintf(what, sizeof what, "col_sum %lldx%lld accumulate=%d",
                 (long long)m, (long long)n, acc);
        fx_expect_close(what, db, ref, mag, n, 1e-5, 1e-7);
        test_free(ref);
        test_free(mag);
        fx_free_floats(dev2, dy, m * n);
        fx_free_floats(dev2, db, n);
      }
}

static void test_fill(void **state) {
  (void)state;
  const int64_t ns[] = {1, 7, 100003};
  for (int s = 0; s < 3; s++) {
    float *x = fx_floats(dev2, ns[s] + 1);
    x[ns[s]] = 7.0f; /* one past the end must survive */
    ar_device_fill(dev2, x, ns[s], -2.5f);
    for (int64_t i = 0; i < ns[s]; i++)
      assert_true(x[i] == -2.5f);
    assert_true(x[ns[s]] == 7.0f);
    fx_free_floats(dev2, x, ns[s] + 1);
  }
}

/* ---- topk -------------------------------------------------------------------------- */

typedef struct ranked {
  float v;
  int32_t i;
} ranked;

static int by_rank(const void *pa, const void *pb) {
  const ranked *a = pa, *b = pb;
  if (a->v != b->v)
    return a->v > b->v ? -1 : 1;
  return a->i < b->i ? -1 : (a->i > b->i);
}

static void check_topk(ar_device *dev, fx_rng *r, int64_t rows, int64_t cols,
                       int k, int levels) {
  float *s = fx_floats(dev, rows * cols);
  for (int64_t i = 0; i < rows * cols; i++) /* few levels: many ties */
    s[i] = levels ? (float)fx_below(r, levels) : fx_uniform(r, -1, 1);
  int32_t *idx = test_malloc((size_t)(rows * k) * sizeof *idx);
  ranked *all = test_malloc((size_t)cols * sizeof *all);
  ar_device_topk(dev, rows, cols, s, k, idx);
  for (int64_t i = 0; i < rows; i++) {
    for (int64_t j = 0; j < cols; j++)
      all[j] = (ranked){s[i * cols + j], (int32_t)j};
    qsort(all, (size_t)cols, sizeof *all, by_rank);
    for (int q = 0; q < k; q++)
      if (idx[i * k + q] != all[q].i)
        fail_msg("topk rows=%lld cols=%lld k=%d levels=%d: row %lld rank %d is "
                 "column %d (%g), expected %d (%g)",
                 (long long)rows, (long long)cols, k, levels, (long long)i, q,
                 idx[i * k + q], (double)s[i * cols + idx[i * k + q]],
                 all[q].i, (double)all[q].v);
  }
  test_free(idx);
  test_free(all);
  fx_free_floats(dev, s, rows * cols);
}

static void test_topk(void **state) {
  (void)state;
  fx_rng r = {7};
  const int64_t cols[] = {1, 7, 33, 1000, 5000};
  for (int c = 0; c < 5; c++) {
    const int ks[] = {1, 3, 5, (int)cols[c]};
    for (int q = 0; q < 4; q++) {
      if (ks[q] > cols[c])
        continue;
      check_topk(dev2, &r, 33, cols[c], ks[q], 0);
      check_topk(dev2, &r, 33, cols[c], ks[q], 3); /* heavy ties */
    }
  }
  check_topk(dev2, &r, 7, 100, 5, 1); /* all equal: the first five columns */
}

/* Ties at the boundary: the smaller index wins even when the larger one is
 * seen first by a naive scan from the end. */
static void test_topk_ties(void **state) {
  (void)state;
  float s[8] = {1, 5, 3, 5, 2, 5, 0, 3};
  int32_t idx[4];
  ar_device_topk(dev1, 1, 8, s, 4, idx);
  assert_int_equal(idx[0], 1);
  assert_int_equal(idx[1], 3);
  assert_int_equal(idx[2], 5);
  assert_int_equal(idx[3], 2);
}

/* ---- 1 thread vs 2 threads --------------------------------------------------------- */

static void test_threads_identical(void **state) {
  (void)state;
  fx_rng r = {8};
  const int64_t rows = 96, in = 50, out = 1031, cols = 70001;
  fx_csr x = fx_csr_random(&r, rows, in, 30);
  float *w = fx_floats(dev1, in * out), *y1 = fx_floats(dev1, rows * out),
        *y2 = fx_floats(dev1, rows * out);
  fx_fill_uniform(&r, w, in * out, -1, 1);
  ar_device_spmm(dev1, rows, x.ptr, x.idx, x.val, w, out, y1);
  ar_device_spmm(dev2, rows, x.ptr, x.idx, x.val, w, out, y2);
  fx_expect_identical("spmm", y1, y2, rows * out);

  float *dw1 = fx_copy(dev1, w, in * out), *dw2 = fx_copy(dev1, w, in * out);
  ar_device_spmm_t(dev1, rows, x.ptr, x.idx, x.val, y1, out, dw1);
  ar_device_spmm_t(dev2, rows, x.ptr, x.idx, x.val, y1, out, dw2);
  fx_expect_identical("spmm_t", dw1, dw2, in * out);

  float *z = fx_floats(dev1, 4 * cols), *b = fx_floats(dev1, cols);
  fx_fill_uniform(&r, z, 4 * cols, -5, 5);
  fx_fill_uniform(&r, b, cols, -1, 1);
  const ar_act acts[] = {AR_ACT_RELU, AR_ACT_SIGMOID};
  for (int a = 0; a < 2; a++) {
    float *z1 = fx_copy(dev1, z, 4 * cols), *z2 = fx_copy(dev1, z, 4 * cols);
    ar_device_bias_act(dev1, 4, cols, b, acts[a], z1);
    ar_device_bias_act(dev2, 4, cols, b, acts[a], z2);
    fx_expect_identical("bias_act", z1, z2, 4 * cols);
    float *g1 = fx_copy(dev1, z, 4 * cols), *g2 = fx_copy(dev1, z, 4 * cols);
    ar_device_act_grad(dev1, 4 * cols, acts[a], z1, g1);
    ar_device_act_grad(dev2, 4 * cols, acts[a], z1, g2);
    fx_expect_identical("act_grad", g1, g2, 4 * cols);
    fx_free_floats(dev1, g1, 4 * cols);
    fx_free_floats(dev1, g2, 4 * cols);
    fx_free_floats(dev1, z1, 4 * cols);
    fx_free_floats(dev1, z2, 4 * cols);
  }
  float *c1 = fx_copy(dev1, b, cols), *c2 = fx_copy(dev1, b, cols);
  ar_device_col_sum(dev1, 4, cols, z, true, c1);
  ar_device_col_sum(dev2, 4, cols, z, true, c2);
  fx_expect_identical("col_sum", c1, c2, cols);

  int32_t *t1 = test_malloc(4 * 5 * sizeof *t1), *t2 = test_malloc(4 * 5 * sizeof *t2);
  ar_device_topk(dev1, 4, cols, z, 5, t1);
  ar_device_topk(dev2, 4, cols, z, 5, t2);
  assert_memory_equal(t1, t2, 4 * 5 * sizeof *t1);

  test_free(t1);
  test_free(t2);
  fx_free_floats(dev1, c1, cols);
  fx_free_floats(dev1, c2, cols);
  fx_free_floats(dev1, z, 4 * cols);
  fx_free_floats(dev1, b, cols);
  fx_free_floats(dev1, dw1, in * out);
  fx_free_floats(dev1, dw2, in * out);
  fx_free_floats(dev1, w, in * out);
  fx_free_floats(dev1, y1, rows * out);
  fx_free_floats(dev1, y2, rows * out);
  fx_csr_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm),        cmocka_unit_test(test_gemm_empty_k),
      cmocka_unit_test(test_spmm),        cmocka_unit_test(test_spmm_t),
      cmocka_unit_test(test_bias_act),    cmocka_unit_test(test_act_grad),
      cmocka_unit_test(test_col_sum),     cmocka_unit_test(test_fill),
      cmocka_unit_test(test_topk),        cmocka_unit_test(test_topk_ties),
      cmocka_unit_test(test_threads_identical),
  };
  return cmocka_run_group_tests(tests, fx_setup_pair, fx_teardown_pair);
}
