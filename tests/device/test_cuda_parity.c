/*
 * CUDA backend against the host backend (label cuda): every op of the
 * table on the same inputs on both devices, values and gradients compared
 * within tolerances that the host's own reference tests justify; top-k
 * indices must be equal.  Then two short training runs of a small network
 * (sparse input, relu and sigmoid hidden layers, softmax+Adam and
 * sigmoid-BCE+SGD heads) whose per-step losses must match the host's.
 * Also: device-to-device copies over overlapping ranges, lane handles
 * over one arena, the memory query, out-of-memory.
 *
 * Prints a table of the largest absolute and relative difference per op
 * (ci/gpu-check keeps it).  Exits 77 (skipped) when no CUDA device is
 * present, so ctest passes on machines without a GPU.
 */
#include "op_fixtures.h"
#include "parity.h"

#include <stdlib.h>

/* ---- buffers on both devices -------------------------------------------------- */

typedef struct pair {
  void *h, *c;
  size_t bytes;
} pair;

static void cuda_ok(const char *what) {
  ar_status st = ar_device_sync(C);
  if (st != AR_OK)
    fail_msg("%s: cuda sync: %s", what, ar_device_errmsg(C));
}

static pair alloc2(size_t bytes) {
  pair p = {NULL, NULL, bytes > 0 ? bytes : 4};
  if (ar_device_alloc(H, p.bytes, &p.h) != AR_OK)
    fail_msg("host alloc %zu: %s", p.bytes, ar_device_errmsg(H));
  if (ar_device_alloc(C, p.bytes, &p.c) != AR_OK)
    fail_msg("cuda alloc %zu: %s", p.bytes, ar_device_errmsg(C));
  return p;
}

static pair up(const void *src, size_t bytes) {
  pair p = alloc2(bytes);
  if (bytes > 0) {
    assert_int_equal(ar_device_copy_in(H, p.h, src, bytes), AR_OK);
    if (ar_device_copy_in(C, p.c, src, bytes) != AR_OK)
      fail_msg("cuda copy_in %zu: %s", bytes, ar_device_errmsg(C));
  }
  return p;
}

static void drop(pair *p) {
  ar_device_free(H, p->h, p->bytes);
  ar_device_free(C, p->c, p->bytes);
  p->h = p->c = NULL;
}

/* Host copies of both sides of p (caller frees with test_free). */
static void down(pair p, void **h, void **c) {
  *h = test_malloc(p.bytes);
  *c = test_malloc(p.bytes);
  assert_int_equal(ar_device_copy_out(H, *h, p.h, p.bytes), AR_OK);
  if (ar_device_copy_out(C, *c, p.c, p.bytes) != AR_OK)
    fail_msg("cuda copy_out: %s", ar_device_errmsg(C));
}

/* Compares n floats of p: |cuda - host| <= atol + rtol * scale_i, where
 * scale_i is mag[i] when mag is given, else |host_i|.  NaN must meet NaN. */
static void compare(const char *op, const char *what, pair p, int64_t n,
                    const double *mag, double rtol, double atol) {
  cuda_ok(what);
  float *h, *c;
  down(p, (void **)&h, (void **)&c);
  double worst_abs = 0, worst_rel = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(h[i]) || isnan(c[i])) {
      if (!(isnan(h[i]) && isnan(c[i])))
        fail_msg("%s: element %lld: cuda %.9g, host %.9g", what, (long long)i,
                 (double)c[i], (double)h[i]);
      continue;
    }
    if (isinf(h[i]) || isinf(c[i])) {
      if (h[i] != c[i])
        fail_msg("%s: element %lld: cuda %.9g, host %.9g", what, (long long)i,
                 (double)c[i], (double)h[i]);
      continue;
    }
    double d = fabs((double)c[i] - (double)h[i]);
    double s = mag ? mag[i] : fabs((double)h[i]);
    if (d > atol + rtol * s)
      fail_msg("%s: element %lld of %lld: cuda %.9g, host %.9g (difference "
               "%.3g > %.3g + %.3g * %.3g)",
               what, (long long)i, (long long)n, (double)c[i], (double)h[i], d,
               atol, rtol, s);
    if (d > worst_abs)
      worst_abs = d;
    double rel = d / (fabs((double)h[i]) > 1e-30 ? fabs((double)h[i]) : 1e-30);
    if (d > 0 && rel > worst_rel)
      worst_rel = rel;
  }
  record(op, worst_abs, worst_rel, n);
  test_free(h);
  test_free(c);
}

static float *rand_floats(fx_rng *r, int64_t n, float lo, float hi) {
  float *x = test_malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
  fx_fill_uniform(r, x, n, lo, hi);
  return x;
}

/* A CSR batch (or label set) on both devices. */
typedef struct csr2 {
  fx_csr host;
  pair ptr, idx, val;
} csr2;

static csr2 csr_up(fx_rng *r, int64_t rows, int64_t range, int64_t max_per_row) {
  csr2 c;
  c.host = fx_csr_random(r, rows, range, max_per_row);
  int64_t nnz = c.host.ptr[rows];
  c.ptr = up(c.host.ptr, (size_t)(rows + 1) * sizeof(int64_t));
  c.idx = up(c.host.idx, (size_t)nnz * sizeof(int32_t));
  c.val = up(c.host.val, (size_t)nnz * sizeof(float));
  return c;
}

static void csr_drop(csr2 *c) {
  drop(&c->ptr);
  drop(&c->idx);
  drop(&c->val);
  fx_csr_free(&c->host);
}

/* ---- fill, gemm ----------------------------------------------------------------- */

static void test_fill(void **state) {
  (void)state;
  const int64_t sizes[] = {1, 1000, 1000003};
  for (size_t s = 0; s < 3; s++) {
    int64_t n = sizes[s];
    pair p = alloc2((size_t)n * sizeof(float));
    ar_device_fill(H, p.h, n, -0.375f);
    ar_device_fill(C, p.c, n, -0.375f);
    compare("fill", "fill", p, n, NULL, 0, 0);
    drop(&p);
  }
}

static void check_gemm(fx_rng *r, bool ta, bool tb, int64_t m, int64_t n,
                       int64_t k, float alpha, float beta) {
  int64_t ar_ = ta ? k : m, ac = ta ? m : k;
  int64_t br = tb ? n : k, bc = tb ? k : n;
  int64_t lda = ac + 3, ldb = bc + 1, ldc = n + 2;
  float *a = rand_floats(r, ar_ * lda, -1, 1);
  float *b = rand_floats(r, br * ldb, -1, 1);
  float *c = rand_floats(r, m * ldc, -1, 1);
  /* The magnitude each element's rounding is measured against. */
  double *mag = test_malloc((size_t)(m * ldc) * sizeof *mag);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < ldc; j++) {
      double sm = 0;
      for (int64_t q = 0; j < n && q < k; q++) {
        double av = ta ? a[q * lda + i] : a[i * lda + q];
        double bv = tb ? b[j * ldb + q] : b[q * ldb + j];
        sm += fabs(av * bv);
      }
      mag[i * ldc + j] = fabs(alpha) * sm + fabs(beta * c[i * ldc + j]);
    }
  pair pa = up(a, (size_t)(ar_ * lda) * 4), pb = up(b, (size_t)(br * ldb) * 4);
  pair pc = up(c, (size_t)(m * ldc) * 4);
  ar_device_gemm(H, ta, tb, m, n, k, alpha, pa.h, lda, pb.h, ldb, beta, pc.h, ldc);
  ar_device_gemm(C, ta, tb, m, n, k, alpha, pa.c, lda, pb.c, ldb, beta, pc.c, ldc);
  char what[128];
  snprintf(what, sizeof what, "gemm ta=%d tb=%d m=%lld n=%lld k=%lld", ta, tb,
           (long long)m, (long long)n, (long long)k);
  /* Each side is within 1e-5 of the magnitude from the exact product (the
   * host test's bound), so they are within 2e-5 of each other; padding
   * columns must stay equal. */
  compare("gemm", what, pc, m * ldc, mag, 2e-5, 1e-6);
  drop(&pa);
  drop(&pb);
  drop(&pc);
  test_free(a);
  test_free(b);
  test_free(c);
  test_free(mag);
}

static void test_gemm(void **state) {
  (void)state;
  fx_rng r = {11};
  const int64_t shapes[][3] = {{1, 1, 1},    {7, 33, 5},     {33, 7, 1000},
                               {1000, 1, 7}, {1, 1000, 33},  {64, 65, 66},
                               {33, 1001, 131}, {1001, 33, 131},
                               {128, 2000, 128}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 4; t++)
      check_gemm(&r, t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2],
                 t == 3 ? -0.5f : 1.0f, t == 1 ? 0.75f : 0.0f);
}

/* k = 0: C = beta C; beta = 0 clears C even where it held NaN. */
static void test_gemm_empty_k(void **state) {
  (void)state;
  float c[6] = {NAN, 1, 2, 3, 4, 5}, a[1] = {0}, b[1] = {0};
  pair pc = up(c, sizeof c), pa = up(a, 4), pb = up(b, 4);
  ar_device_gemm(H, false, false, 2, 3, 0, 1.0f, pa.h, 1, pb.h, 3, 0.0f, pc.h, 3);
  ar_device_gemm(C, false, false, 2, 3, 0, 1.0f, pa.c, 1, pb.c, 3, 0.0f, pc.c, 3);
  compare("gemm", "gemm k=0 beta=0", pc, 6, NULL, 0, 0);
  ar_device_gemm(H, false, false, 2, 3, 0, 1.0f, pa.h, 1, pb.h, 3, 0.5f, pc.h, 3);
  ar_device_gemm(C, false, false, 2, 3, 0, 1.0f, pa.c, 1, pb.c, 3, 0.5f, pc.c, 3);
  compare("gemm", "gemm k=0 beta=0.5", pc, 6, NULL, 0, 0);
  drop(&pa);
  drop(&pb);
  drop(&pc);
}

/* ---- sparse input ------------------------------------------------------------------ */

static void test_spmm(void **state) {
  (void)state;
  fx_rng r = {12};
  const int64_t shapes[][3] = {/* rows, out, features */
                               {1, 1, 3}, {7, 33, 50}, {300, 128, 5000},
                               {64, 1000, 200}, {3, 70000, 20}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t rows = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
    csr2 x = csr_up(&r, rows, in, 40);
    float *w = rand_floats(&r, in * out, -1, 1);
    float *g = rand_floats(&r, rows * out, -1, 1);
    float *dw0 = rand_floats(&r, in * out, -1, 1);
    pair pw = up(w, (size_t)(in * out) * 4), pg = up(g, (size_t)(rows * out) * 4);
    pair py = alloc2((size_t)(rows * out) * 4);
    pair pdw = up(dw0, (size_t)(in * out) * 4);
    ar_device_spmm(H, rows, x.ptr.h, x.idx.h, x.val.h, pw.h, out, py.h);
    ar_device_spmm(C, rows, x.ptr.c, x.idx.c, x.val.c, pw.c, out, py.c);
    char what[96];
    snprintf(what, sizeof what, "spmm rows=%lld out=%lld", (long long)rows,
             (long long)out);
    /* At most 40 products of magnitude <= 1 per element. */
    compare("spmm", what, py, rows * out, NULL, 1e-5, 1e-5);
    /* spmm_t accumulates into a dW that already holds values. */
    ar_device_spmm_t(H, rows, x.ptr.h, x.idx.h, x.val.h, pg.h, out, pdw.h);
    ar_device_spmm_t(C, rows, x.ptr.c, x.idx.c, x.val.c, pg.c, out, pdw.c);
    snprintf(what, sizeof what, "spmm_t rows=%lld out=%lld", (long long)rows,
             (long long)out);
    compare("spmm_t", what, pdw, in * out, NULL, 1e-5, 1e-5);
    drop(&pw);
    drop(&pg);
    drop(&py);
    drop(&pdw);
    csr_drop(&x);
    test_free(w);
    test_free(g);
    test_free(dw0);
  }
}

/* ---- elementwise and reductions ------------------------------------------------------ */

static void test_bias_act(void **state) {
  (void)state;
  fx_rng r = {13};
  const int64_t shapes[][2] = {{1, 1}, {7, 33}, {300, 5000}, {2, 70001}};
  const ar_act acts[] = {AR_ACT_NONE, AR_ACT_RELU, AR_ACT_SIGMOID,
                         AR_ACT_SOFTMAX};
  const char *act_names[] = {"none", "relu", "sigmoid", "softmax"};
  for (size_t s = 0; s < 4; s++)
    for (int a = 0; a < 4; a++)
      for (int with_bias = 0; with_bias < 2; with_bias++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        float *y = rand_floats(&r, rows * cols, -30, 30);
        float *b = rand_floats(&r, cols, -2, 2);
        pair py = up(y, (size_t)(rows * cols) * 4), pb = up(b, (size_t)cols * 4);
        ar_device_bias_act(H, rows, cols, with_bias ? pb.h : NULL, acts[a], py.h);
        ar_device_bias_act(C, rows, cols, with_bias ? pb.c : NULL, acts[a], py.c);
        char what[96];
        snprintf(what, sizeof what, "bias_act %s bias=%d rows=%lld cols=%lld",
                 act_names[a], with_bias, (long long)rows,
                 (long long)cols);
        compare("bias_act", what, py, rows * cols, NULL, 1e-6, 1e-7);
        drop(&py);
        drop(&pb);
        test_free(y);
        test_free(b);
      }
}

static void test_act_grad(void **state) {
  (void)state;
  fx_rng r = {14};
  const int64_t n = 100003;
  for (int a = 0; a < 2; a++) {
    ar_act act = a ? AR_ACT_SIGMOID : AR_ACT_RELU;
    float *y = rand_floats(&r, n, a ? 0.0f : -1.0f, 1.0f);
    float *dy = rand_floats(&r, n, -1, 1);
    pair py = up(y, (size_t)n * 4), pd = up(dy, (size_t)n * 4);
    ar_device_act_grad(H, n, act, py.h, pd.h);
    ar_device_act_grad(C, n, act, py.c, pd.c);
    compare("act_grad", a ? "act_grad sigmoid" : "act_grad relu", pd, n, NULL,
            1e-6, 1e-7);
    drop(&py);
    drop(&pd);
    test_free(y);
    test_free(dy);
  }
}

static void test_col_sum(void **state) {
  (void)state;
  fx_rng r = {15};
  const int64_t shapes[][2] = {{1, 1}, {300, 33}, {5, 70000}, {128, 4099}};
  for (size_t s = 0; s < 4; s++)
    for (int acc = 0; acc < 2; acc++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1];
      float *dy = rand_floats(&r, rows * cols, -1, 1);
      float *db = rand_floats(&r, cols, -1, 1);
      pair pd = up(dy, (size_t)(rows * cols) * 4), pb = up(db, (size_t)cols * 4);
      ar_device_col_sum(H, rows, cols, pd.h, acc, pb.h);
      ar_device_col_sum(C, rows, cols, pd.c, acc, pb.c);
      char what[96];
      snprintf(what, sizeof what, "col_sum acc=%d rows=%lld cols=%lld", acc,
               (long long)rows, (long long)cols);
      /* Same additions in the same order on both sides. */
      compare("col_sum", what, pb, cols, NULL, 1e-6, 1e-6);
      drop(&pd);
      drop(&pb);
      test_free(dy);
      test_free(db);
    }
}

/* The conv + batch-norm fold of graph models' evaluation: the same float
 * operations in the same order on both sides (s in double; the CUDA
 * kernel keeps the bias's product and sum unfused), so exact; with and
 * without the conv's bias. */
static void test_bn_fold(void **state) {
  (void)state;
  fx_rng r = {16};
  const int64_t shapes[][2] = {{1, 1}, {16, 27}, {64, 576}, {3, 0}};
  for (size_t s = 0; s < 4; s++)
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      const int64_t out = shapes[s][0], per = shapes[s][1];
      float *w = rand_floats(&r, out * per, -1, 1), *b = rand_floats(&r, out, -1, 1);
      float *gamma = rand_floats(&r, out, 0.5f, 1.5f), *beta = rand_floats(&r, out, -1, 1);
      float *mean = rand_floats(&r, out, -1, 1), *var = rand_floats(&r, out, 0.1f, 2);
      pair pw = up(w, (size_t)(out * per) * 4), pb = up(b, (size_t)out * 4);
      pair pg = up(gamma, (size_t)out * 4), pbe = up(beta, (size_t)out * 4);
      pair pm = up(mean, (size_t)out * 4), pv = up(var, (size_t)out * 4);
      pair pwf = alloc2((size_t)(out * per) * 4), pbf = alloc2((size_t)out * 4);
      ar_device_bn_fold(H, out, per, pw.h, with_bias ? pb.h : NULL, pg.h, pbe.h, pm.h, pv.h,
                        1e-5f, pwf.h, pbf.h);
      ar_device_bn_fold(C, out, per, pw.c, with_bias ? pb.c : NULL, pg.c, pbe.c, pm.c, pv.c,
                        1e-5f, pwf.c, pbf.c);
      char what[96];
      snprintf(what, sizeof what, "bn_fold bias=%d out=%lld per=%lld", with_bias,
               (long long)out, (long long)per);
      compare("bn_fold", what, pwf, out * per, NULL, 0, 0);
      compare("bn_fold", what, pbf, out, NULL, 0, 0);
      pair all[] = {pw, pb, pg, pbe, pm, pv, pwf, pbf};
      for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        drop(&all[i]);
      float *hs[] = {w, b, gamma, beta, mean, var};
      for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        test_free(hs[i]);
    }
}

/* ---- losses ---------------------------------------------------------------------------- */

/* grad_mode: 0 none, 1 separate buffer, 2 aliasing the logits. */
static void check_loss(fx_rng *r, bool softmax, int64_t rows, int64_t cols,
                       int grad_mode, float spread) {
  csr2 lab = csr_up(r, rows, cols, 4); /* some rows get no labels */
  float *x = rand_floats(r, rows * cols, -spread, spread);
  pair px = up(x, (size_t)(rows * cols) * 4);
  pair pg = alloc2((size_t)(rows * cols) * 4);
  pair pl = alloc2((size_t)rows * 4);
  const float scale = 1.0f / (float)rows;
  float *gh = grad_mode == 0 ? NULL : grad_mode == 1 ? pg.h : px.h;
  float *gc = grad_mode == 0 ? NULL : grad_mode == 1 ? pg.c : px.c;
  if (softmax) {
    ar_device_softmax_xent(H, rows, cols, px.h, lab.ptr.h, lab.idx.h, scale, gh,
                           pl.h);
    ar_device_softmax_xent(C, rows, cols, px.c, lab.ptr.c, lab.idx.c, scale, gc,
                           pl.c);
  } else {
    ar_device_sigmoid_bce(H, rows, cols, px.h, lab.ptr.h, lab.idx.h, scale, gh,
                          pl.h);
    ar_device_sigmoid_bce(C, rows, cols, px.c, lab.ptr.c, lab.idx.c, scale, gc,
                          pl.c);
  }
  const char *op = softmax ? "softmax_xent" : "sigmoid_bce";
  char what[128];
  snprintf(what, sizeof what, "%s loss rows=%lld cols=%lld grad=%d", op,
           (long long)rows, (long long)cols, grad_mode);
  /* Row losses: sums over up to 2e5 terms, each side within a few 1e-7
   * relative of the exact sum. */
  compare(op, what, pl, rows, NULL, 1e-5, 1e-5);
  if (grad_mode) {
    char gwhat[160];
    snprintf(gwhat, sizeof gwhat, "%s grad", what);
    char gop[48];
    snprintf(gop, sizeof gop, "%s grad", op);
    /* Gradients: scale * (p - t); p from two exp implementations. */
    compare(gop, gwhat, grad_mode == 1 ? pg : px, rows * cols, NULL, 1e-5,
            1e-7 * scale);
  }
  drop(&px);
  drop(&pg);
  drop(&pl);
  csr_drop(&lab);
  test_free(x);
}

static void test_softmax_xent(void **state) {
  (void)state;
  fx_rng r = {16};
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {64, 983}, {4, 200000}, {130, 5}};
  for (size_t s = 0; s < 5; s++)
    for (int gm = 0; gm < 3; gm++)
      check_loss(&r, true, shapes[s][0], shapes[s][1], gm, s == 2 ? 40.0f : 5.0f);
}

static void test_sigmoid_bce(void **state) {
  (void)state;
  fx_rng r = {17};
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {64, 983}, {4, 200000}, {130, 5}};
  for (size_t s = 0; s < 5; s++)
    for (int gm = 0; gm < 3; gm++)
      check_loss(&r, false, shapes[s][0], shapes[s][1], gm, s == 2 ? 40.0f : 5.0f);
}

/* ---- top-k ------------------------------------------------------------------------------- */

static void test_topk(void **state) {
  (void)state;
  fx_rng r = {18};
  const int64_t shapes[][3] = {/* rows, cols, k */
                               {1, 1, 1}, {5, 7, 7}, {64, 1000, 5},
                               {3, 70000, 64}, {200, 983, 5}};
  for (size_t s = 0; s < 5; s++) {
    int64_t rows = shapes[s][0], cols = shapes[s][1];
    int k = (int)shapes[s][2];
    float *x = rand_floats(&r, rows * cols, -4, 4);
    /* Coarse values make ties; a few NaN and infinities. */
    for (int64_t i = 0; i < rows * cols; i++) {
      x[i] = floorf(x[i] * 2.0f) / 2.0f;
      int64_t u = fx_below(&r, 50);
      if (u == 0)
        x[i] = NAN;
      else if (u == 1)
        x[i] = INFINITY;
      else if (u == 2)
        x[i] = -INFINITY;
    }
    pair px = up(x, (size_t)(rows * cols) * 4);
    pair pi = alloc2((size_t)(rows * k) * 4);
    ar_device_topk(H, rows, cols, px.h, k, pi.h);
    ar_device_topk(C, rows, cols, px.c, k, pi.c);
    cuda_ok("topk");
    int32_t *ih, *ic;
    down(pi, (void **)&ih, (void **)&ic);
    for (int64_t i = 0; i < rows * k; i++)
      if (ih[i] != ic[i])
        fail_msg("topk rows=%lld cols=%lld k=%d: row %lld rank %lld: cuda %d, "
                 "host %d",
                 (long long)rows, (long long)cols, k, (long long)(i / k),
                 (long long)(i % k), ic[i], ih[i]);
    record("topk (indices equal)", 0, 0, rows * k);
    test_free(ih);
    test_free(ic);
    drop(&px);
    drop(&pi);
    test_free(x);
  }
}

/* ---- optimizers ------------------------------------------------------------------------- */

static void test_adam(void **state) {
  (void)state;
  fx_rng r = {19};
  const int64_t sizes[] = {1, 1000003};
  for (int s = 0; s < 2; s++)
    for (int wd = 0; wd < 2; wd++) {
      int64_t n = sizes[s];
      float *p = rand_floats(&r, n, -1, 1);
      pair pp = up(p, (size_t)n * 4), pm = alloc2((size_t)n * 4),
           pv = alloc2((size_t)n * 4);
      ar_device_fill(H, pm.h, n, 0.0f);
      ar_device_fill(H, pv.h, n, 0.0f);
      ar_device_fill(C, pm.c, n, 0.0f);
      ar_device_fill(C, pv.c, n, 0.0f);
      for (int64_t t = 1; t <= 3; t++) {
        float *g = rand_floats(&r, n, -1, 1);
        pair pg = up(g, (size_t)n * 4);
        ar_device_adam(H, n, pp.h, pg.h, pm.h, pv.h, 1e-3f, 0.9f, 0.999f, 1e-8f,
                       wd ? 0.01f : 0.0f, t);
        ar_device_adam(C, n, pp.c, pg.c, pm.c, pv.c, 1e-3f, 0.9f, 0.999f, 1e-8f,
                       wd ? 0.01f : 0.0f, t);
        drop(&pg);
        test_free(g);
      }
      compare("adam p", "adam p", pp, n, NULL, 1e-6, 1e-7);
      compare("adam m", "adam m", pm, n, NULL, 1e-5, 1e-7);
      compare("adam v", "adam v", pv, n, NULL, 1e-5, 1e-9);
      drop(&pp);
      drop(&pm);
      drop(&pv);
      test_free(p);
    }
}

static void test_sgd(void **state) {
  (void)state;
  fx_rng r = {20};
  const int64_t n = 100003;
  for (int mode = 0; mode < 4; mode++) {
    float mom = mode & 1 ? 0.9f : 0.0f, wd = mode & 2 ? 1e-4f : 0.0f;
    float *p = rand_floats(&r, n, -1, 1);
    pair pp = up(p, (size_t)n * 4), pv = alloc2((size_t)n * 4);
    ar_device_fill(H, pv.h, n, 0.0f);
    ar_device_fill(C, pv.c, n, 0.0f);
    for (int t = 0; t < 3; t++) {
      float *g = rand_floats(&r, n, -1, 1);
      pair pg = up(g, (size_t)n * 4);
      ar_device_sgd(H, n, pp.h, pg.h, mom != 0.0f ? pv.h : NULL, 0.01f, mom, wd);
      ar_device_sgd(C, n, pp.c, pg.c, mom != 0.0f ? pv.c : NULL, 0.01f, mom, wd);
      drop(&pg);
      test_free(g);
    }
    compare("sgd p", "sgd p", pp, n, NULL, 1e-6, 1e-7);
    if (mom != 0.0f)
      compare("sgd velocity", "sgd velocity", pv, n, NULL, 1e-6, 1e-7);
    drop(&pp);
    drop(&pv);
    test_free(p);
  }
}

/* ---- training runs ------------------------------------------------------------------------ */

/* A network as the engine builds it (runtime/engine/model.c): layer 0 takes
 * the sparse input (W (in, out), spmm), the others are dense (W (out, in),
 * gemm with B transposed); the last layer's logits feed the loss. */
#define NL 3
typedef struct net {
  ar_device *dev;
  int64_t in[NL], out[NL];
  ar_act act[NL];
  float *w[NL], *b[NL], *gw[NL], *gb[NL], *y[NL], *dy[NL];
  float *s1w[NL], *s1b[NL], *s2w[NL], *s2b[NL];
  float *loss;
} net;

static float *dev_floats(ar_device *d, int64_t n, const float *init) {
  void *p = NULL;
  if (ar_device_alloc(d, (size_t)n * 4, &p) != AR_OK)
    fail_msg("alloc on %s: %s", ar_device_name(d), ar_device_errmsg(d));
  if (init)
    assert_int_equal(ar_device_copy_in(d, p, init, (size_t)n * 4), AR_OK);
  else
    ar_device_fill(d, p, n, 0.0f);
  return p;
}

static void net_init(net *m, ar_device *d, const int64_t *widths, const ar_act *acts,
                     int64_t batch, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->dev = d;
  fx_rng r = {seed};
  for (int l = 0; l < NL; l++) {
    int64_t in = widths[l], out = widths[l + 1], nw = in * out;
    m->in[l] = in;
    m->out[l] = out;
    m->act[l] = acts[l];
    float *w = rand_floats(&r, nw, -1, 1);
    float sc = sqrtf(6.0f / (float)(l == 0 ? 40 : in + out));
    for (int64_t i = 0; i < nw; i++)
      w[i] *= sc;
    m->w[l] = dev_floats(d, nw, w);
    test_free(w);
    m->b[l] = dev_floats(d, out, NULL);
    m->gw[l] = dev_floats(d, nw, NULL);
    m->gb[l] = dev_floats(d, out, NULL);
    m->s1w[l] = dev_floats(d, nw, NULL);
    m->s1b[l] = dev_floats(d, out, NULL);
    m->s2w[l] = dev_floats(d, nw, NULL);
    m->s2b[l] = dev_floats(d, out, NULL);
    m->y[l] = dev_floats(d, batch * out, NULL);
    m->dy[l] = dev_floats(d, batch * out, NULL);
  }
  m->loss = dev_floats(d, batch, NULL);
}

static void net_fini(net *m, int64_t batch) {
  ar_device *d = m->dev;
  for (int l = 0; l < NL; l++) {
    size_t nw = (size_t)(m->in[l] * m->out[l]) * 4, no = (size_t)m->out[l] * 4;
    ar_device_free(d, m->w[l], nw);
    ar_device_free(d, m->gw[l], nw);
    ar_device_free(d, m->s1w[l], nw);
    ar_device_free(d, m->s2w[l], nw);
    ar_device_free(d, m->b[l], no);
    ar_device_free(d, m->gb[l], no);
    ar_device_free(d, m->s1b[l], no);
    ar_device_free(d, m->s2b[l], no);
    ar_device_free(d, m->y[l], (size_t)batch * no);
    ar_device_free(d, m->dy[l], (size_t)batch * no);
  }
  ar_device_free(d, m->loss, (size_t)batch * 4);
}

/* One step: forward, loss (returned, mean over rows), backward, optimizer. */
static double net_step(net *m, int64_t rows, const int64_t *ptr, const int32_t *idx,
                       const float *val, const int64_t *lptr, const int32_t *lab,
                       bool adam, int64_t t) {
  ar_device *d = m->dev;
  for (int l = 0; l < NL; l++) {
    if (l == 0)
      ar_device_spmm(d, rows, ptr, idx, val, m->w[0], m->out[0], m->y[0]);
    else
      ar_device_gemm(d, false, true, rows, m->out[l], m->in[l], 1.0f, m->y[l - 1],
                     m->in[l], m->w[l], m->in[l], 0.0f, m->y[l], m->out[l]);
    ar_device_bias_act(d, rows, m->out[l], m->b[l],
                       l == NL - 1 ? AR_ACT_NONE : m->act[l], m->y[l]);
  }
  const int last = NL - 1;
  const float scale = 1.0f / (float)rows;
  if (m->act[last] == AR_ACT_SIGMOID)
    ar_device_sigmoid_bce(d, rows, m->out[last], m->y[last], lptr, lab, scale,
                          m->y[last], m->loss);
  else
    ar_device_softmax_xent(d, rows, m->out[last], m->y[last], lptr, lab, scale,
                           m->y[last], m->loss);
  float lr_[512];
  assert_true(rows <= 512);
  if (ar_device_copy_out(d, lr_, m->loss, (size_t)rows * 4) != AR_OK)
    fail_msg("copy_out loss on %s: %s", ar_device_name(d), ar_device_errmsg(d));
  double loss = 0;
  for (int64_t i = 0; i < rows; i++)
    loss += lr_[i];
  for (int l = last; l >= 0; l--) {
    const float *g = l == last ? m->y[l] : m->dy[l];
    ar_device_col_sum(d, rows, m->out[l], g, false, m->gb[l]);
    if (l == 0) {
      ar_device_fill(d, m->gw[0], m->in[0] * m->out[0], 0.0f);
      ar_device_spmm_t(d, rows, ptr, idx, val, g, m->out[0], m->gw[0]);
    } else {
      ar_device_gemm(d, true, false, m->out[l], m->in[l], rows, 1.0f, g, m->out[l],
                     m->y[l - 1], m->in[l], 0.0f, m->gw[l], m->in[l]);
      ar_device_gemm(d, false, false, rows, m->in[l], m->out[l], 1.0f, g,
                     m->out[l], m->w[l], m->in[l], 0.0f, m->dy[l - 1], m->out[l - 1]);
      ar_device_act_grad(d, rows * m->out[l - 1], m->act[l - 1], m->y[l - 1],
                         m->dy[l - 1]);
    }
  }
  for (int l = 0; l < NL; l++) {
    int64_t nw = m->in[l] * m->out[l];
    if (adam) {
      ar_device_adam(d, nw, m->w[l], m->gw[l], m->s1w[l], m->s2w[l], 1e-3f, 0.9f,
                     0.999f, 1e-8f, 0.0f, t);
      ar_device_adam(d, m->out[l], m->b[l], m->gb[l], m->s1b[l], m->s2b[l], 1e-3f,
                     0.9f, 0.999f, 1e-8f, 0.0f, t);
    } else {
      ar_device_sgd(d, nw, m->w[l], m->gw[l], m->s1w[l], 0.05f, 0.9f, 1e-4f);
      ar_device_sgd(d, m->out[l], m->b[l], m->gb[l], m->s1b[l], 0.05f, 0.9f, 1e-4f);
    }
  }
  return loss / (double)rows;
}

/* Trains the same network from the same weights on both devices over the
 * same batches; the loss curves must agree step by step and go down. */
static void check_training(bool softmax_adam, int steps) {
  const int64_t widths[NL + 1] = {3000, 128, 64, 700};
  const ar_act acts[NL] = {AR_ACT_RELU, AR_ACT_SIGMOID,
                           softmax_adam ? AR_ACT_SOFTMAX : AR_ACT_SIGMOID};
  const int64_t batch = 96;
  enum { NB = 4 };
  fx_rng r = {softmax_adam ? 21u : 22u};
  csr2 x[NB], y[NB];
  for (int b = 0; b < NB; b++) {
    x[b] = csr_up(&r, batch, widths[0], 30);
    y[b] = csr_up(&r, batch, widths[NL], 3);
  }
  net mh, mc;
  net_init(&mh, H, widths, acts, batch, 99);
  net_init(&mc, C, widths, acts, batch, 99);
  double first = 0, last = 0, worst = 0;
  FILE *curve = stdout;
  fprintf(curve, "training %s: step host cuda\n",
          softmax_adam ? "softmax+adam" : "sigmoid-bce+sgd");
  for (int t = 1; t <= steps; t++) {
    int b = (t - 1) % NB;
    double lh = net_step(&mh, batch, x[b].ptr.h, x[b].idx.h, x[b].val.h,
                         y[b].ptr.h, y[b].idx.h, softmax_adam, t);
    double lc = net_step(&mc, batch, x[b].ptr.c, x[b].idx.c, x[b].val.c,
                         y[b].ptr.c, y[b].idx.c, softmax_adam, t);
    cuda_ok("training step");
    if (t <= 3 || t % 10 == 0 || t == steps)
      fprintf(curve, "  %3d %.6f %.6f\n", t, lh, lc);
    double rel = fabs(lc - lh) / fabs(lh);
    if (rel > worst)
      worst = rel;
    /* Rounding differences grow through the steps: 1e-3 relative. */
    if (!(rel <= 1e-3))
      fail_msg("training step %d: loss cuda %.7g vs host %.7g", t, lc, lh);
    if (t == 1)
      first = lh;
    last = lh;
  }
  record(softmax_adam ? "training loss softmax+adam (rel)"
                      : "training loss bce+sgd (rel)",
         0, worst, steps);
  assert_true(last < 0.9 * first); /* it trained */
  net_fini(&mh, batch);
  net_fini(&mc, batch);
  for (int b = 0; b < NB; b++) {
    csr_drop(&x[b]);
    csr_drop(&y[b]);
  }
}

static void test_train_softmax_adam(void **state) {
  (void)state;
  check_training(true, 60);
}

static void test_train_bce_sgd(void **state) {
  (void)state;
  check_training(false, 60);
}

/* ---- device-to-device copy ---------------------------------------------------------------- */

/* ar_device_copy of len bytes from offset s to offset d of an n-byte
 * buffer on the compared device, against memmove on the host. */
static void check_copy(size_t n, size_t d, size_t s, size_t len) {
  unsigned char *init = test_malloc(n), *ref = test_malloc(n), *got = test_malloc(n);
  for (size_t i = 0; i < n; i++)
    init[i] = (unsigned char)(i % 251u);
  memcpy(ref, init, n);
  memmove(ref + d, ref + s, len);
  void *buf = NULL;
  if (ar_device_alloc(C, n, &buf) != AR_OK)
    fail_msg("alloc %zu: %s", n, ar_device_errmsg(C));
  assert_int_equal(ar_device_copy_in(C, buf, init, n), AR_OK);
  unsigned char *b = buf;
  if (ar_device_copy(C, b + d, b + s, len) != AR_OK)
    fail_msg("copy %zu bytes %zu -> %zu: %s", len, s, d, ar_device_errmsg(C));
  cuda_ok("copy");
  assert_int_equal(ar_device_copy_out(C, got, buf, n), AR_OK);
  if (memcmp(got, ref, n) != 0) {
    size_t i = 0;
    while (got[i] == ref[i])
      i++;
    fail_msg("copy of %zu bytes from %zu to %zu in %zu: byte %zu is %u, expected %u", len, s,
             d, n, i, got[i], ref[i]);
  }
  record("copy (device to device)", 0, 0, (int64_t)len);
  ar_device_free(C, buf, n);
  test_free(init);
  test_free(ref);
  test_free(got);
}

/* Disjoint ranges (one cudaMemcpyAsync), overlapping ranges with a large
 * shift (chunks of the shift), and with a small one (through a temporary
 * carved from the arena), down and up. */
static void test_copy(void **state) {
  (void)state;
  const size_t mib = (size_t)1 << 20;
  check_copy(8 * mib, 4 * mib, 0, 4 * mib);
  check_copy(8 * mib, 0, 4 * mib, 4 * mib);
  check_copy(8 * mib, 0, mib, 7 * mib);       /* 7 chunks of 1 MiB, down */
  check_copy(8 * mib, mib, 0, 7 * mib);       /* up */
  check_copy(8 * mib, 0, 256, 8 * mib - 256); /* temporary, down */
  check_copy(8 * mib, 256, 0, 8 * mib - 256); /* temporary, up */
  check_copy(1000, 3, 1, 997);                /* odd sizes and shifts */
  check_copy(1000, 1, 3, 997);
  check_copy(100 * mib, 0, 512, 100 * mib - 512); /* more than one temporary */
}

/* Staging buffers from ar_device_host_alloc (page-locked on CUDA): bytes
 * go in and come back out unchanged, at odd sizes too. */
static void test_host_staging(void **state) {
  (void)state;
  static const size_t sizes[] = {4, 1000, (size_t)9 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    unsigned char *in = NULL, *out = NULL;
    void *buf = NULL;
    if (ar_device_host_alloc(C, n, (void **)&in) != AR_OK ||
        ar_device_host_alloc(C, n, (void **)&out) != AR_OK)
      fail_msg("host_alloc %zu: %s", n, ar_device_errmsg(C));
    for (size_t i = 0; i < n; i++) {
      in[i] = (unsigned char)(i * 7u % 253u);
      out[i] = 0;
    }
    if (ar_device_alloc(C, n, &buf) != AR_OK)
      fail_msg("alloc %zu: %s", n, ar_device_errmsg(C));
    assert_int_equal(ar_device_copy_in(C, buf, in, n), AR_OK);
    assert_int_equal(ar_device_copy_out(C, out, buf, n), AR_OK);
    assert_memory_equal(in, out, n);
    record("copy in/out (staging buffers)", 0, 0, (int64_t)n);
    ar_device_free(C, buf, n);
    ar_device_host_free(C, in);
    ar_device_host_free(C, out);
  }
}

/* ---- memory, lanes, out of memory ----------------------------------------------------------- */

static void test_lanes_and_memory(void **state) {
  (void)state;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.memory_bytes = 256u << 20;
  ar_device *d = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_device_open("cuda:0", &o, &d, &err) != AR_OK)
    fail_msg("open cuda:0 with a 256 MiB arena: %s", err.msg);
  ar_device_mem mi;
  assert_int_equal(ar_device_mem_info(d, &mi), AR_OK);
  assert_int_equal(mi.capacity, 256u << 20);
  assert_true(mi.total >= mi.free && mi.free > 0);
  assert_true(mi.available < mi.capacity); /* the cuBLAS workspace */
  uint64_t avail0 = mi.available;

  ar_device *lane = NULL;
  if (ar_device_open_lane(d, &lane) != AR_OK)
    fail_msg("open_lane: %s", ar_device_errmsg(d));
  assert_int_equal(ar_device_mem_info(lane, &mi), AR_OK);
  assert_int_equal(mi.capacity, 256u << 20); /* the same arena */
  assert_true(mi.available < avail0);        /* the lane's own workspace */
  uint64_t avail1 = mi.available;
  void *p = NULL;
  assert_int_equal(ar_device_alloc(lane, 1u << 20, &p), AR_OK);
  assert_int_equal(ar_device_mem_info(d, &mi), AR_OK);
  assert_int_equal(mi.available, avail1 - (1u << 20));
  /* Ops on the lane's own stream. */
  float a[4] = {1, 2, 3, 4}, c[4];
  float *pa = p, *pc = pa + 4;
  assert_int_equal(ar_device_copy_in(lane, pa, a, sizeof a), AR_OK);
  ar_device_gemm(lane, false, false, 2, 2, 2, 1.0f, pa, 2, pa, 2, 0.0f, pc, 2);
  assert_int_equal(ar_device_sync(lane), AR_OK);
  assert_int_equal(ar_device_copy_out(lane, c, pc, sizeof c), AR_OK);
  assert_true(c[0] == 7 && c[1] == 10 && c[2] == 15 && c[3] == 22);

  /* Out of memory is a status with the figures, accounting unchanged. */
  void *big = NULL;
  size_t before = ar_device_bytes_in_use(d);
  assert_int_equal(ar_device_alloc(d, 300u << 20, &big), AR_NOMEM);
  assert_null(big);
  assert_non_null(strstr(ar_device_errmsg(d), "raise runtime.memory"));
  assert_int_equal(ar_device_bytes_in_use(d), before);

  /* An overlapping copy with no room left for a temporary: small chunks
   * on the lane's stream, still right. */
  void *rest = NULL;
  assert_int_equal(ar_device_mem_info(d, &mi), AR_OK);
  assert_int_equal(ar_device_alloc(lane, mi.available, &rest), AR_OK);
  {
    const size_t n = 64u << 10;
    unsigned char *init = test_malloc(n), *ref = test_malloc(n), *got = test_malloc(n);
    for (size_t i = 0; i < n; i++)
      init[i] = (unsigned char)(i % 251u);
    memcpy(ref, init, n);
    memmove(ref, ref + 256, n - 256);
    unsigned char *b = rest;
    assert_int_equal(ar_device_copy_in(lane, b, init, n), AR_OK);
    assert_int_equal(ar_device_copy(lane, b, b + 256, n - 256), AR_OK);
    assert_int_equal(ar_device_sync(lane), AR_OK);
    assert_int_equal(ar_device_copy_out(lane, got, b, n), AR_OK);
    assert_memory_equal(got, ref, n);
    test_free(init);
    test_free(ref);
    test_free(got);
  }
  ar_device_free(lane, rest, mi.available);

  /* The parent may go first; the lane keeps the arena alive. */
  ar_device_close(d);
  assert_int_equal(ar_device_copy_out(lane, c, pc, sizeof c), AR_OK);
  assert_true(c[3] == 22);
  ar_device_free(lane, p, 1u << 20);
  ar_device_close(lane);

  /* runtime.memory larger than the device: AR_RANGE before any cudaMalloc. */
  o.memory_bytes = (uint64_t)1 << 50;
  assert_int_equal(ar_device_open("cuda:0", &o, &d, &err), AR_RANGE);
  assert_non_null(strstr(err.msg, "runtime.memory"));
  o.memory_bytes = 0;
  o.memory_fraction = 1.5;
  assert_int_equal(ar_device_open("cuda:0", &o, &d, &err), AR_RANGE);
}

/* ---- main ---------------------------------------------------------------------------------- */

/* The group's devices: the compared one with an arena of 2 GiB. */
static int setup(void **state) {
  (void)state;
  return parity_open((uint64_t)2 << 30);
}

int main(void) {
  if (parity_skip("CUDA parity test"))
    return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fill),
      cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_gemm_empty_k),
      cmocka_unit_test(test_spmm),
      cmocka_unit_test(test_bias_act),
      cmocka_unit_test(test_act_grad),
      cmocka_unit_test(test_col_sum),
      cmocka_unit_test(test_bn_fold),
      cmocka_unit_test(test_softmax_xent),
      cmocka_unit_test(test_sigmoid_bce),
      cmocka_unit_test(test_topk),
      cmocka_unit_test(test_adam),
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_train_softmax_adam),
      cmocka_unit_test(test_train_bce_sgd),
      cmocka_unit_test(test_copy),
      cmocka_unit_test(test_host_staging),
  };
  const struct CMUnitTest cuda_only[] = {
      cmocka_unit_test(test_lanes_and_memory),
  };
  int failed = cmocka_run_group_tests(tests, setup, parity_close);
  if (strcmp(PARITY_DEVICE, "host") != 0)
    failed += cmocka_run_group_tests(cuda_only, NULL, NULL);
  parity_print("CUDA vs host parity (largest differences over every compared element)", "op");
  return failed;
}
