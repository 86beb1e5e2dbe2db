/* lsh sparse kernels: forward/backward against a naive double reference,
 * sparse input == dense input, all-active == a plain dense layer, finite
 * differences of the softmax-over-active loss, sparse Adam against a
 * step-by-step dense-Adam scalar reference, and the touched-row set. */
#include <omp.h>

#include "lsh_util.h"

/* A layer with random weights and biases, row stride in + pad. */
typedef struct layer {
  ar_lsh_rows r;
  float *store_w, *store_b;
} layer;

static layer mklayer(ar_rng *g, uint32_t neurons, uint32_t in, uint32_t pad,
                     int bias, double scale) {
  layer l;
  l.r.neurons = neurons;
  l.r.in = in;
  l.r.ld = (size_t)in + pad;
  l.store_w = calloc((size_t)neurons * l.r.ld, sizeof(float));
  l.store_b = bias ? calloc(neurons, sizeof(float)) : NULL;
  for (uint32_t i = 0; i < neurons; i++) {
    for (uint32_t j = 0; j < in; j++)
      l.store_w[(size_t)i * l.r.ld + j] = (float)(scale * ar_rng_normal(g));
    if (bias)
      l.store_b[i] = (float)(scale * ar_rng_normal(g));
  }
  l.r.w = l.store_w;
  l.r.b = l.store_b;
  return l;
}

static void freelayer(layer *l) {
  free(l->store_w);
  free(l->store_b);
}

/* A zeroed gradient with the layer's shape but its own stride. */
static layer mkgrad(const layer *l, uint32_t pad) {
  layer gl;
  gl.r = l->r;
  gl.r.ld = (size_t)l->r.in + pad;
  gl.store_w = calloc((size_t)l->r.neurons * gl.r.ld, sizeof(float));
  gl.store_b = l->r.b ? calloc(l->r.neurons, sizeof(float)) : NULL;
  gl.r.w = gl.store_w;
  gl.r.b = gl.store_b;
  return gl;
}

/* n distinct ids of [0, neurons) in random order. */
static void random_active(ar_rng *g, uint32_t neurons, uint32_t *out,
                          size_t n) {
  uint32_t *perm = malloc(neurons * sizeof *perm);
  for (uint32_t i = 0; i < neurons; i++)
    perm[i] = i;
  for (size_t i = 0; i < n; i++) {
    size_t j = i + (size_t)ar_rng_below(g, neurons - i);
    uint32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
    out[i] = perm[i];
  }
  free(perm);
}

/* Shuffles the sparse pairs so the kernels see unsorted indices. */
static void shuffle_pairs(ar_rng *g, uint32_t *idx, float *val, size_t n) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)ar_rng_below(g, i);
    uint32_t ti = idx[i - 1];
    idx[i - 1] = idx[j];
    idx[j] = ti;
    float tv = val[i - 1];
    val[i - 1] = val[j];
    val[j] = tv;
  }
}

static void assert_close(double got, double want, double tol, const char *what,
                         size_t at) {
  if (fabs(got - want) > tol * (1.0 + fabs(want)))
    fail_msg("%s[%zu]: got %.9g want %.9g", what, at, got, want);
}

static float *wrow(const ar_lsh_rows *r, uint32_t i) {
  return r->w + (size_t)i * r->ld;
}

/* ---- forward/backward vs a naive double reference --------------------- */

static void test_naive_reference(void **st) {
  (void)st;
  ar_rng g;
  ar_rng_seed3(&g, 11, 0, 0);
  for (int trial = 0; trial < 60; trial++) {
    uint32_t N = 1 + (uint32_t)ar_rng_below(&g, 300);
    uint32_t D = 1 + (uint32_t)ar_rng_below(&g, 90);
    size_t n = 1 + (size_t)ar_rng_below(&g, N);
    int bias = trial % 3 != 0;
    ar_lsh_act act = trial % 2 ? AR_LSH_ACT_RELU : AR_LSH_ACT_NONE;
    int sparse = trial % 4 >= 2;
    layer L = mklayer(&g, N, D, (uint32_t)(trial % 5), bias, 0.3);
    layer G = mkgrad(&L, (uint32_t)(trial % 3));
    uint32_t *act_ids = malloc(n * sizeof *act_ids);
    random_active(&g, N, act_ids, n);
    float *x = calloc(D, sizeof *x);
    randrow(&g, x, D, sparse ? 0.6 : 0.0);
    uint32_t *idx = malloc(D * sizeof *idx);
    float *val = malloc(D * sizeof *val);
    size_t nnz = to_sparse(x, D, idx, val);
    shuffle_pairs(&g, idx, val, nnz);
    ar_lsh_input in = {sparse ? NULL : x, idx, val, nnz};
    /* Non-zero starting gradients: the kernel must accumulate. */
    for (size_t k = 0; k < (size_t)N * G.r.ld; k++)
      G.r.w[k] = (float)ar_rng_normal(&g);
    if (bias)
      for (uint32_t i = 0; i < N; i++)
        G.r.b[i] = (float)ar_rng_normal(&g);
    float *gw0 = malloc((size_t)N * G.r.ld * sizeof *gw0);
    memcpy(gw0, G.r.w, (size_t)N * G.r.ld * sizeof *gw0);
    float *gb0 = bias ? malloc(N * sizeof *gb0) : NULL;
    if (bias)
      memcpy(gb0, G.r.b, N * sizeof *gb0);

    float *out = malloc(n * sizeof *out), *dout = malloc(n * sizeof *dout);
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_lsh_forward(&L.r, &in, act_ids, n, act, out, &err),
                     AR_OK);
    double *gref = calloc(n, sizeof *gref);
    for (size_t i = 0; i < n; i++) {
      double z = bias ? L.r.b[act_ids[i]] : 0.0;
      for (uint32_t j = 0; j < D; j++)
        z += (double)wrow(&L.r, act_ids[i])[j] * x[j];
      double y = act == AR_LSH_ACT_RELU && z <= 0.0 ? 0.0 : z;
      assert_close(out[i], y, 1e-5, "forward", i);
      dout[i] = (float)ar_rng_normal(&g);
      gref[i] = act == AR_LSH_ACT_RELU && !(out[i] > 0.0f) ? 0.0 : dout[i];
    }

    float *dx = calloc(D, sizeof *dx);
    ar_lsh_touched *tch = NULL;
    assert_int_equal(ar_lsh_touched_create(N, &tch, &err), AR_OK);
    assert_int_equal(ar_lsh_backward(&L.r, &in, act_ids, n, act, out, dout,
                                     &G.r, dx, tch, &err),
                     AR_OK);
    /* Reference gradients in double from the starting values. */
    for (uint32_t r = 0; r < N; r++) {
      double gr = 0.0;
      int is_active = 0;
      for (size_t i = 0; i < n; i++)
        if (act_ids[i] == r) {
          gr = gref[i];
          is_active = 1;
        }
      assert_int_equal(ar_lsh_touched_has(tch, r), is_active);
      for (uint32_t j = 0; j < D; j++) {
        size_t c = (size_t)r * G.r.ld + j;
        assert_close(G.r.w[c], gw0[c] + gr * x[j], 1e-6, "dW", c);
      }
      if (bias)
        assert_close(G.r.b[r], gb0[r] + gr, 1e-6, "db", r);
    }
    size_t tc;
    ar_lsh_touched_ids(tch, &tc);
    assert_int_equal(tc, n);
    if (sparse) {
      for (size_t k = 0; k < nnz; k++) {
        double want = 0.0;
        for (size_t i = 0; i < n; i++)
          want += gref[i] * wrow(&L.r, act_ids[i])[idx[k]];
        assert_close(dx[k], want, 1e-5, "dx sparse", k);
      }
    } else {
      for (uint32_t j = 0; j < D; j++) {
        double want = 0.0;
        for (size_t i = 0; i < n; i++)
          want += gref[i] * wrow(&L.r, act_ids[i])[j];
        assert_close(dx[j], want, 1e-5, "dx", j);
      }
    }
    ar_lsh_touched_destroy(tch);
    free(dx);
    free(gref);
    free(out);
    free(dout);
    free(gw0);
    free(gb0);
    free(idx);
    free(val);
    free(x);
    free(act_ids);
    freelayer(&G);
    freelayer(&L);
  }
}

/* ---- sparse input == dense input ----------------------------------------- */

static void test_sparse_equals_dense(void **st) {
  (void)st;
  ar_rng g;
  ar_rng_seed3(&g, 12, 0, 0);
  for (int trial = 0; trial < 20; trial++) {
    uint32_t N = 50 + (uint32_t)ar_rng_below(&g, 200);
    uint32_t D = 5 + (uint32_t)ar_rng_below(&g, 200);
    size_t n = 1 + (size_t)ar_rng_below(&g, N);
    layer L = mklayer(&g, N, D, 3, 1, 0.2);
    layer Gd = mkgrad(&L, 0), Gs = mkgrad(&L, 0);
    uint32_t *ids = malloc(n * sizeof *ids);
    random_active(&g, N, ids, n);
    float *x = malloc(D * sizeof *x);
    randrow(&g, x, D, 0.8);
    uint32_t *idx = malloc(D * sizeof *idx);
    float *val = malloc(D * sizeof *val);
    size_t nnz = to_sparse(x, D, idx, val);
    shuffle_pairs(&g, idx, val, nnz);
    ar_lsh_input xd = {x, NULL, NULL, 0}, xs = {NULL, idx, val, nnz};
    float *od = malloc(n * sizeof *od), *os = malloc(n * sizeof *os);
    float *dout = malloc(n * sizeof *dout);
    assert_int_equal(
        ar_lsh_forward(&L.r, &xd, ids, n, AR_LSH_ACT_RELU, od, NULL), AR_OK);
    assert_int_equal(
        ar_lsh_forward(&L.r, &xs, ids, n, AR_LSH_ACT_RELU, os, NULL), AR_OK);
    for (size_t i = 0; i < n; i++) {
      assert_close(os[i], od[i], 1e-5, "sparse forward", i);
      dout[i] = (float)ar_rng_normal(&g);
    }
    float *dxd = calloc(D, sizeof *dxd), *dxs = calloc(D, sizeof *dxs);
    /* The same ReLU mask for both, so the gradients are comparable bit for
     * bit: each gradient element sums the same products in the same order. */
    assert_int_equal(ar_lsh_backward(&L.r, &xd, ids, n, AR_LSH_ACT_RELU, od,
                                     dout, &Gd.r, dxd, NULL, NULL),
                     AR_OK);
    assert_int_equal(ar_lsh_backward(&L.r, &xs, ids, n, AR_LSH_ACT_RELU, od,
                                     dout, &Gs.r, dxs, NULL, NULL),
                     AR_OK);
    assert_memory_equal(Gd.r.w, Gs.r.w, (size_t)N * D * sizeof(float));
    assert_memory_equal(Gd.r.b, Gs.r.b, N * sizeof(float));
    for (size_t k = 0; k < nnz; k++)
      assert_true(dxs[k] == dxd[idx[k]]);
    free(dxd);
    free(dxs);
    free(od);
    free(os);
    free(dout);
    free(idx);
    free(val);
    free(x);
    free(ids);
    freelayer(&Gd);
    freelayer(&Gs);
    freelayer(&L);
  }
}

/* ---- all neurons active == a plain dense layer -----------------------------
 */

static void test_all_active_is_dense(void **st) {
  (void)st;
  ar_rng g;
  ar_rng_seed3(&g, 13, 0, 0);
  const uint32_t N = 97, D = 41;
  layer L = mklayer(&g, N, D, 7, 1, 0.3);
  layer G = mkgrad(&L, 1);
  uint32_t ids[97];
  for (uint32_t i = 0; i < N; i++)
    ids[i] = i;
  float x[41];
  randrow(&g, x, D, 0.0);
  ar_lsh_input in = {x, NULL, NULL, 0};
  float out[97], dl[97];
  assert_int_equal(
      ar_lsh_forward(&L.r, &in, ids, N, AR_LSH_ACT_NONE, out, NULL), AR_OK);
  const uint32_t labels[] = {5, 60, 17};
  double loss;
  assert_int_equal(
      ar_lsh_softmax_active(out, ids, N, labels, 3, dl, &loss, NULL), AR_OK);
  float dx[41] = {0};
  assert_int_equal(ar_lsh_backward(&L.r, &in, ids, N, AR_LSH_ACT_NONE, out, dl,
                                   &G.r, dx, NULL, NULL),
                   AR_OK);
  /* The dense layer as matrix products in double, column by column: z = W x
   * + b, full softmax with targets 1/3, dW = g x^T, db = g, dx = W^T g. */
  double z[97], p[97], sum = 0.0, mx = -1e300;
  for (uint32_t i = 0; i < N; i++)
    z[i] = L.r.b[i];
  for (uint32_t j = 0; j < D; j++)
    for (uint32_t i = 0; i < N; i++)
      z[i] += (double)wrow(&L.r, i)[j] * x[j];
  for (uint32_t i = 0; i < N; i++) {
    assert_close(out[i], z[i], 1e-5, "dense z", i);
    mx = z[i] > mx ? z[i] : mx;
  }
  for (uint32_t i = 0; i < N; i++)
    sum += exp(z[i] - mx);
  double want_loss = 0.0;
  for (uint32_t i = 0; i < N; i++) {
    double t = (i == 5 || i == 60 || i == 17) ? 1.0 / 3.0 : 0.0;
    p[i] = exp(z[i] - mx) / sum - t;
    if (t > 0.0)
      want_loss -= t * (z[i] - mx - log(sum));
  }
  assert_close(loss, want_loss, 1e-5, "dense loss", 0);
  for (uint32_t i = 0; i < N; i++) {
    assert_close(dl[i], p[i], 1e-5, "dense dlogit", i);
    assert_close(G.r.b[i], p[i], 1e-5, "dense db", i);
    for (uint32_t j = 0; j < D; j++)
      assert_close(wrow(&G.r, i)[j], p[i] * x[j], 1e-5, "dense dW",
                   (size_t)i * D + j);
  }
  for (uint32_t j = 0; j < D; j++) {
    double want = 0.0;
    for (uint32_t i = 0; i < N; i++)
      want += (double)wrow(&L.r, i)[j] * p[i];
    assert_close(dx[j], want, 1e-5, "dense dx", j);
  }
  freelayer(&G);
  freelayer(&L);
}

/* ---- finite differences of the softmax-over-active loss ---------------------
 */

static double loss_of(const float *logit, const uint32_t *ids, size_t n,
                      const uint32_t *labels, size_t nlab) {
  float *d = malloc(n * sizeof *d);
  double loss = 0.0;
  assert_int_equal(
      ar_lsh_softmax_active(logit, ids, n, labels, nlab, d, &loss, NULL),
      AR_OK);
  free(d);
  return loss;
}

static void test_softmax_fd(void **st) {
  (void)st;
  ar_rng g;
  ar_rng_seed3(&g, 14, 0, 0);
  enum { N = 64 };
  uint32_t ids[N];
  random_active(&g, 1000, ids, N);
  const uint32_t labels[] = {ids[3], ids[40], ids[7], ids[63]};
  float z[N], d[N];
  for (int i = 0; i < N; i++)
    z[i] = (float)(2.0 * ar_rng_normal(&g));
  double loss;
  assert_int_equal(ar_lsh_softmax_active(z, ids, N, labels, 4, d, &loss, NULL),
                   AR_OK);
  double total = 0.0;
  for (int i = 0; i < N; i++) {
    const float h = 1e-2f, z0 = z[i];
    z[i] = z0 + h;
    double lp = loss_of(z, ids, N, labels, 4);
    z[i] = z0 - h;
    double lm = loss_of(z, ids, N, labels, 4);
    z[i] = z0;
    double fd = (lp - lm) / ((double)(z0 + h) - (double)(z0 - h));
    if (fabs(fd - d[i]) > 2e-4)
      fail_msg("dlogit[%d]: %.7g, finite difference %.7g", i, (double)d[i], fd);
    total += d[i];
  }
  assert_true(fabs(total) < 1e-5); /* probabilities and targets both sum to 1 */
  /* In place (dlogit aliases logit) gives the same. */
  float zz[N];
  memcpy(zz, z, sizeof zz);
  double loss2;
  assert_int_equal(
      ar_lsh_softmax_active(zz, ids, N, labels, 4, zz, &loss2, NULL), AR_OK);
  assert_memory_equal(zz, d, sizeof zz);
  assert_true(loss2 == loss);

  /* Through the layer: dL/dW and dL/db of active rows by finite differences
   * of forward + softmax, against backward. */
  const uint32_t NN = 30, D = 9;
  layer L = mklayer(&g, NN, D, 2, 1, 0.5);
  layer G = mkgrad(&L, 0);
  uint32_t act[12];
  random_active(&g, NN, act, 12);
  const uint32_t lab[] = {act[0], act[5]};
  float x[9], out[12], dl[12];
  randrow(&g, x, D, 0.3);
  ar_lsh_input in = {x, NULL, NULL, 0};
  assert_int_equal(
      ar_lsh_forward(&L.r, &in, act, 12, AR_LSH_ACT_NONE, out, NULL), AR_OK);
  assert_int_equal(ar_lsh_softmax_active(out, act, 12, lab, 2, dl, &loss, NULL),
                   AR_OK);
  assert_int_equal(ar_lsh_backward(&L.r, &in, act, 12, AR_LSH_ACT_NONE, out, dl,
                                   &G.r, NULL, NULL, NULL),
                   AR_OK);
  for (int i = 0; i < 12; i++)
    for (uint32_t j = 0; j <= D; j++) { /* j == D: the bias */
      float *p = j < D ? &wrow(&L.r, act[i])[j] : &L.r.b[act[i]];
      const float h = 1e-2f, p0 = *p;
      double l2[2];
      for (int s = 0; s < 2; s++) {
        *p = s ? p0 - h : p0 + h;
        assert_int_equal(
            ar_lsh_forward(&L.r, &in, act, 12, AR_LSH_ACT_NONE, out, NULL),
            AR_OK);
        l2[s] = loss_of(out, act, 12, lab, 2);
      }
      *p = p0;
      double fd = (l2[0] - l2[1]) / (2.0 * h);
      double an = j < D ? wrow(&G.r, act[i])[j] : G.r.b[act[i]];
      if (fabs(fd - an) > 1e-3)
        fail_msg("row %u col %u: backward %.7g, finite difference %.7g", act[i],
                 j, an, fd);
    }
  freelayer(&G);
  freelayer(&L);
}

/* ---- sparse Adam vs a scalar reference
 * ---------------------------------------- */

/* catch_up past every step of a test. */
#define T_ALL UINT64_MAX

/* The sparse step against the header's rule in double, lazy (catch_up 0)
 * or catching up the skipped steps at steps t <= catch_up: the moves
 * summed one q^j at a time here, in closed form there. */
static void adam_reference_case(uint64_t catch_up) {
  ar_rng g;
  ar_rng_seed3(&g, 15, 0, 0);
  /* T: row 1's gap (T - 2 steps) is past the step's table of decays, row
   * 2's first one (255 steps) its last entry. */
  enum { N = 40, D = 7, T = 300 };
  layer L = mklayer(&g, N, D, 3, 1, 0.5);
  layer G = mkgrad(&L, 2);
  ar_lsh_adam_opts o = AR_LSH_ADAM_OPTS_INIT;
  o.lr = 1e-2f;
  o.beta1 = 0.8f;
  o.beta2 = 0.995f; /* decays over long gaps still tell apart */
  o.eps = 1e-6f;
  o.threads = 2;
  o.catch_up = catch_up;
  ar_lsh_adam *a = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lsh_adam_create(N, D, 1, &o, &a, &err), AR_OK);
  ar_lsh_touched *tch = NULL;
  assert_int_equal(ar_lsh_touched_create(N, &tch, &err), AR_OK);
  /* Reference: dense Adam moments, zero gradient when untouched, parameter
   * moved only on touched steps (the semantics the header states); with
   * catch_up, first by the sum over the skipped steps of q^j times the
   * move the moments as of the last update give.  s: each row's last
   * update, m0 and v0 its moments then. */
  double w[N][D + 1], m[N][D + 1], v[N][D + 1], m0[N][D + 1], v0[N][D + 1];
  int s_r[N];
  for (int r = 0; r < N; r++) {
    s_r[r] = 0;
    for (int j = 0; j <= D; j++) {
      w[r][j] = j < D ? wrow(&L.r, (uint32_t)r)[j] : L.r.b[r];
      m[r][j] = v[r][j] = m0[r][j] = v0[r][j] = 0.0;
    }
  }
  const float *km, *kv, *kmb, *kvb;
  const uint64_t *last;
  ar_lsh_adam_state(a, &km, &kv, &kmb, &kvb, &last);
  for (int t = 1; t <= T; t++) {
    int touched[N];
    double gr[N][D + 1];
    for (int r = 0; r < N; r++) {
      /* Row 0 never touched; row 1 at steps 1 and T only, row 2 at 1,
       * 257 and T; others 40%. */
      touched[r] = r == 0   ? 0
                   : r == 1 ? (t == 1 || t == T)
                   : r == 2 ? (t == 1 || t == 257 || t == T)
                            : ar_rng_uniform(&g) < 0.4;
      for (int j = 0; j <= D; j++)
        gr[r][j] = touched[r] ? ar_rng_normal(&g) : 0.0;
      if (touched[r]) {
        for (int j = 0; j < D; j++)
          wrow(&G.r, (uint32_t)r)[j] = (float)gr[r][j];
        G.r.b[r] = (float)gr[r][D];
        ar_lsh_touched_mark(tch, (uint32_t)r);
      }
    }
    assert_int_equal(ar_lsh_adam_step(a, &L.r, &G.r, tch, &err), AR_OK);
    assert_int_equal(ar_lsh_adam_t(a), t);
    size_t cnt;
    ar_lsh_touched_ids(tch, &cnt);
    assert_int_equal(cnt, 0);
    const double b1 = o.beta1, b2 = o.beta2, q = b1 / sqrt(b2);
    for (int r = 0; r < N; r++) {
      double S = 0.0; /* q + q^2 + ... for the steps row r skipped */
      if ((uint64_t)t <= catch_up && touched[r] && s_r[r] > 0)
        for (int k = 1; k <= t - s_r[r] - 1; k++)
          S += pow(q, k);
      for (int j = 0; j <= D; j++) {
        if (S > 0.0)
          w[r][j] -= o.lr * S * (m0[r][j] / (1 - pow(b1, t))) /
                     (sqrt(v0[r][j] / (1 - pow(b2, t))) + o.eps);
        m[r][j] = b1 * m[r][j] + (1 - b1) * gr[r][j];
        v[r][j] = b2 * v[r][j] + (1 - b2) * gr[r][j] * gr[r][j];
        if (touched[r]) {
          w[r][j] -= o.lr * (m[r][j] / (1 - pow(b1, t))) /
                     (sqrt(v[r][j] / (1 - pow(b2, t))) + o.eps);
          m0[r][j] = m[r][j];
          v0[r][j] = v[r][j];
        }
      }
      if (touched[r])
        s_r[r] = t;
    }
    for (int r = 0; r < N; r++) {
      assert_int_equal(last[r],
                       touched[r] ? (uint64_t)t : (r == 0 ? 0 : last[r]));
      for (int j = 0; j <= D; j++) {
        double kw = j < D ? wrow(&L.r, (uint32_t)r)[j] : L.r.b[r];
        assert_close(kw, w[r][j], 1e-5, "adam w", (size_t)r * 100 + j);
        float kg = j < D ? wrow(&G.r, (uint32_t)r)[j] : G.r.b[r];
        assert_true(kg == 0.0f);
        if (touched[r]) {
          double mm = j < D ? km[r * D + j] : kmb[r];
          double vv = j < D ? kv[r * D + j] : kvb[r];
          assert_close(mm, m[r][j], 1e-5, "adam m", (size_t)r * 100 + j);
          assert_close(vv, v[r][j], 1e-5, "adam v", (size_t)r * 100 + j);
        }
      }
    }
  }
  /* Row 1 skipped T-2 steps and was then caught up: its moments above were
   * checked at step T; row 0 never moved. */
  assert_int_equal(last[1], T);
  assert_int_equal(last[0], 0);
  /* Shape mismatch is refused. */
  L.r.in = D - 1;
  assert_int_equal(ar_lsh_adam_step(a, &L.r, &G.r, tch, &err), AR_INVALID);
  ar_lsh_touched_destroy(tch);
  ar_lsh_adam_destroy(a);
  ar_lsh_adam_destroy(NULL);
  freelayer(&G);
  freelayer(&L);
}

static void test_adam_reference(void **st) {
  (void)st;
  adam_reference_case(0);
}

static void test_adam_catch_up_reference(void **st) {
  (void)st;
  adam_reference_case(T_ALL);
}

/* Catching up for the first 200 steps only: row 2's step 257 and the
 * last step (rows 1 and 2 after gaps past 200) are lazy again. */
static void test_adam_catch_up_then_lazy(void **st) {
  (void)st;
  adam_reference_case(200);
}

/* What catching up is for: a row that misses steps ends where dense Adam
 * (every step, zero gradient on the missed ones) puts it, which the lazy
 * step does not.  One row of 16, touched every step but for gaps of 5, 40
 * and 300 steps, 3,000 steps of SLIDE's betas: after each gap's catch-up
 * the row is off dense Adam by at most a tenth of what the lazy step is
 * off (the closed form takes this step's bias corrections and leaves eps
 * out of the decay, so not exactly), and the lazy one is off by more than
 * the moves of a few steps.  A row never touched before does not move;
 * betas with beta1 >= sqrt(beta2) are refused. */
static void test_adam_catch_up_dense(void **st) {
  (void)st;
  enum { D = 16, T = 3000 };
  ar_rng g;
  ar_rng_seed3(&g, 27, 0, 0);
  layer L[2], G[2];
  ar_lsh_adam *a[2] = {NULL, NULL};
  ar_lsh_touched *tch[2] = {NULL, NULL};
  ar_lsh_adam_opts o = AR_LSH_ADAM_OPTS_INIT;
  o.lr = 1e-3f;
  ar_err err = AR_ERR_INIT;
  for (int c = 0; c < 2; c++) {
    ar_rng_seed3(&g, 27, 0, 0);
    L[c] = mklayer(&g, 2, D, 0, 1, 0.5);
    G[c] = mkgrad(&L[c], 0);
    o.catch_up = c ? T : 0;
    assert_int_equal(ar_lsh_adam_create(2, D, 1, &o, &a[c], &err), AR_OK);
    assert_int_equal(ar_lsh_touched_create(2, &tch[c], &err), AR_OK);
  }
  double w[D + 1], m[D + 1], v[D + 1], mean[D + 1];
  for (int j = 0; j <= D; j++) {
    w[j] = j < D ? wrow(&L[0].r, 0)[j] : L[0].r.b[0];
    m[j] = v[j] = 0.0;
    mean[j] = ar_rng_normal(&g); /* a drift the gradients share, so momentum builds */
  }
  const float row1 = wrow(&L[1].r, 1)[0];
  const double b1 = o.beta1, b2 = o.beta2;
  double worst_lazy_min = 1e30;
  int gaps = 0;
  for (int t = 1; t <= T; t++) {
    const int skip = (t > 500 && t <= 505) || (t > 1000 && t <= 1040) ||
                     (t > 2000 && t <= 2300);
    double gr[D + 1];
    for (int j = 0; j <= D; j++)
      gr[j] = skip ? 0.0 : mean[j] + 0.3 * ar_rng_normal(&g);
    for (int c = 0; c < 2; c++) {
      if (!skip) {
        for (int j = 0; j < D; j++)
          wrow(&G[c].r, 0)[j] = (float)gr[j];
        G[c].r.b[0] = (float)gr[D];
        ar_lsh_touched_mark(tch[c], 0);
      }
      assert_int_equal(ar_lsh_adam_step(a[c], &L[c].r, &G[c].r, tch[c], &err), AR_OK);
    }
    double step = 0.0;
    for (int j = 0; j <= D; j++) {
      m[j] = b1 * m[j] + (1 - b1) * gr[j];
      v[j] = b2 * v[j] + (1 - b2) * gr[j] * gr[j];
      const double d = o.lr * (m[j] / (1 - pow(b1, t))) / (sqrt(v[j] / (1 - pow(b2, t))) + o.eps);
      w[j] -= d;
      step = fmax(step, fabs(d));
    }
    /* The first step after each gap: both sparse rows stepped again. */
    if (t == 506 || t == 1041 || t == 2301) {
      gaps++;
      double off[2] = {0.0, 0.0};
      for (int c = 0; c < 2; c++)
        for (int j = 0; j <= D; j++) {
          const double kw = j < D ? wrow(&L[c].r, 0)[j] : L[c].r.b[0];
          off[c] = fmax(off[c], fabs(kw - w[j]));
        }
      if (off[1] > 0.1 * off[0])
        fail_msg("step %d: catch-up %.3g off dense Adam, lazy %.3g", t, off[1], off[0]);
      worst_lazy_min = fmin(worst_lazy_min, off[0] / step);
    }
  }
  assert_int_equal(gaps, 3);
  /* The lazy row is off by more than 3 steps' moves after even the 5-step
   * gap: what the comparison above tells apart. */
  if (!(worst_lazy_min > 3.0))
    fail_msg("lazy row off dense Adam by only %.3g steps' moves", worst_lazy_min);
  /* Row 1 never touched: never moved. */
  assert_true(wrow(&L[1].r, 1)[0] == row1);
  for (int c = 0; c < 2; c++) {
    ar_lsh_touched_destroy(tch[c]);
    ar_lsh_adam_destroy(a[c]);
    freelayer(&G[c]);
    freelayer(&L[c]);
  }
  o.catch_up = 1;
  o.beta1 = 0.99f;
  o.beta2 = 0.9f; /* q = 1.04: the moves would grow */
  ar_lsh_adam *bad = NULL;
  assert_int_equal(ar_lsh_adam_create(2, D, 0, &o, &bad, &err), AR_INVALID);
  assert_null(bad);
  assert_non_null(strstr(err.msg, "beta1 < sqrt(beta2)"));
}

/* The step updates its rows in ascending order off the touched bitmap,
 * with two threads once it has more than 256: rows marked in a shuffled
 * order (as the backward marks them, by example) and the same rows marked
 * in ascending order give the same bits in weights and moments, every
 * marked row and no other is stepped, and rows at the ends of the bitmap
 * (0, 63, 64, the last) are not lost. */
static void test_adam_order(void **st) {
  (void)st;
  ar_rng g;
  ar_rng_seed3(&g, 21, 0, 0);
  enum { N = 3001, D = 19, T = 5 };
  layer L[2], G[2];
  ar_lsh_adam *a[2] = {NULL, NULL};
  ar_lsh_touched *tch[2] = {NULL, NULL};
  ar_lsh_adam_opts o = AR_LSH_ADAM_OPTS_INIT;
  o.lr = 1e-2f;
  o.threads = 2;
  ar_err err = AR_ERR_INIT;
  L[0] = mklayer(&g, N, D, 3, 1, 0.5);
  for (int k = 0; k < 2; k++) {
    if (k) {
      L[1] = mklayer(&g, N, D, 3, 1, 0.5);
      memcpy(L[1].store_w, L[0].store_w, (size_t)N * L[0].r.ld * sizeof(float));
      memcpy(L[1].store_b, L[0].store_b, (size_t)N * sizeof(float));
    }
    G[k] = mkgrad(&L[k], 1);
    assert_int_equal(ar_lsh_adam_create(N, D, 1, &o, &a[k], &err), AR_OK);
    assert_int_equal(ar_lsh_touched_create(N, &tch[k], &err), AR_OK);
  }
  uint32_t ids[N];
  for (int t = 1; t <= T; t++) {
    size_t n = 0;
    for (uint32_t r = 0; r < N; r++)
      if (r == 0 || r == 63 || r == 64 || r == N - 1 || ar_rng_uniform(&g) < 0.3)
        ids[n++] = r;
    assert_true(n > 256);
    for (size_t k = 0; k < n; k++) { /* the same gradient in both */
      const uint32_t r = ids[k];
      for (int j = 0; j < D; j++)
        wrow(&G[0].r, r)[j] = wrow(&G[1].r, r)[j] = (float)ar_rng_normal(&g);
      G[0].r.b[r] = G[1].r.b[r] = (float)ar_rng_normal(&g);
      ar_lsh_touched_mark(tch[1], r); /* ascending */
    }
    for (size_t k = n - 1; k > 0; k--) { /* shuffled */
      const size_t j = (size_t)(ar_rng_uniform(&g) * (double)(k + 1)) % (k + 1);
      const uint32_t x = ids[k];
      ids[k] = ids[j];
      ids[j] = x;
    }
    for (size_t k = 0; k < n; k++)
      ar_lsh_touched_mark(tch[0], ids[k]);
    for (int k = 0; k < 2; k++)
      assert_int_equal(ar_lsh_adam_step(a[k], &L[k].r, &G[k].r, tch[k], &err), AR_OK);
    assert_memory_equal(L[0].store_w, L[1].store_w, (size_t)N * L[0].r.ld * sizeof(float));
    assert_memory_equal(L[0].store_b, L[1].store_b, (size_t)N * sizeof(float));
    const float *m[2], *v[2], *mb[2], *vb[2];
    const uint64_t *last[2];
    for (int k = 0; k < 2; k++)
      ar_lsh_adam_state(a[k], &m[k], &v[k], &mb[k], &vb[k], &last[k]);
    assert_memory_equal(m[0], m[1], (size_t)N * D * sizeof(float));
    assert_memory_equal(v[0], v[1], (size_t)N * D * sizeof(float));
    assert_memory_equal(vb[0], vb[1], (size_t)N * sizeof(float));
    size_t stepped = 0;
    for (uint32_t r = 0; r < N; r++) {
      stepped += last[0][r] == (uint64_t)t;
      assert_int_equal(last[0][r], last[1][r]);
    }
    assert_int_equal(stepped, n);
    assert_int_equal(last[0][0], t);
    assert_int_equal(last[0][63], t);
    assert_int_equal(last[0][64], t);
    assert_int_equal(last[0][N - 1], t);
  }
  for (int k = 0; k < 2; k++) {
    ar_lsh_touched_destroy(tch[k]);
    ar_lsh_adam_destroy(a[k]);
    freelayer(&G[k]);
    freelayer(&L[k]);
  }
}

/* ---- touched set
 * --------------------------------------------------------------- */

static void test_touched(void **st) {
  (void)st;
  const uint32_t N = 1000;
  ar_lsh_touched *t = NULL;
  assert_int_equal(ar_lsh_touched_create(N, &t, NULL), AR_OK);
  const uint32_t ids[] = {5, 64, 63, 5, 999, 0, 64, 128};
  for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
    ar_lsh_touched_mark(t, ids[k]);
  size_t c;
  const uint32_t *l = ar_lsh_touched_ids(t, &c);
  assert_int_equal(c, 6);
  const uint32_t want[] = {5, 64, 63, 999, 0, 128};
  for (size_t k = 0; k < c; k++)
    assert_int_equal(l[k], want[k]);
  assert_true(ar_lsh_touched_has(t, 63) && !ar_lsh_touched_has(t, 62));
  assert_false(ar_lsh_touched_has(t, N));
  ar_lsh_touched_clear(t);
  ar_lsh_touched_ids(t, &c);
  assert_int_equal(c, 0);
  for (uint32_t i = 0; i < N; i++)
    assert_false(ar_lsh_touched_has(t, i));
  /* Concurrent marks: every id listed exactly once. */
  int seen[1000];
  for (int round = 0; round < 3; round++) {
#pragma omp parallel for num_threads(4) schedule(dynamic, 7)
    for (int k = 0; k < 20000; k++)
      ar_lsh_touched_mark(t, (uint32_t)((k * 7919u) % 701u));
    l = ar_lsh_touched_ids(t, &c);
    assert_int_equal(c, 701);
    memset(seen, 0, sizeof seen);
    for (size_t k = 0; k < c; k++) {
      assert_true(l[k] < 701);
      assert_int_equal(seen[l[k]]++, 0);
    }
    ar_lsh_touched_clear(t);
    for (uint32_t i = 0; i < N; i++)
      assert_false(ar_lsh_touched_has(t, i));
  }
  ar_lsh_touched_destroy(t);
  ar_lsh_touched_destroy(NULL);
}

/* ---- errors
 * ------------------------------------------------------------------------ */

static void test_errors(void **st) {
  (void)st;
  ar_rng g;
  ar_rng_seed3(&g, 16, 0, 0);
  layer L = mklayer(&g, 10, 4, 0, 1, 1.0);
  layer G = mkgrad(&L, 0);
  float x[4] = {1, 2, 3, 4}, out[3], dout[3] = {1, 1, 1};
  ar_lsh_input in = {x, NULL, NULL, 0};
  uint32_t bad[] = {1, 10, 2}, good[] = {1, 9, 2};
  ar_err err = AR_ERR_INIT;
  assert_int_equal(
      ar_lsh_forward(&L.r, &in, bad, 3, AR_LSH_ACT_NONE, out, &err), AR_RANGE);
  assert_non_null(strstr(err.msg, "active id 10"));
  uint32_t sidx[] = {0, 4};
  float sval[] = {1, 1};
  ar_lsh_input sin = {NULL, sidx, sval, 2};
  assert_int_equal(
      ar_lsh_forward(&L.r, &sin, good, 3, AR_LSH_ACT_NONE, out, &err),
      AR_RANGE);
  assert_int_equal(ar_lsh_backward(&L.r, &sin, good, 3, AR_LSH_ACT_NONE, out,
                                   dout, &G.r, NULL, NULL, &err),
                   AR_RANGE);
  G.r.in = 3;
  assert_int_equal(ar_lsh_backward(&L.r, &in, good, 3, AR_LSH_ACT_NONE, out,
                                   dout, &G.r, NULL, NULL, &err),
                   AR_INVALID);
  const uint32_t lab[] = {7};
  double loss;
  assert_int_equal(
      ar_lsh_softmax_active(out, good, 3, lab, 1, out, &loss, &err),
      AR_NOTFOUND);
  ar_lsh_adam_opts o = AR_LSH_ADAM_OPTS_INIT;
  o.beta2 = 1.0f;
  ar_lsh_adam *a = NULL;
  assert_int_equal(ar_lsh_adam_create(10, 4, 1, &o, &a, &err), AR_INVALID);
  assert_null(a);
  freelayer(&G);
  freelayer(&L);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_naive_reference),
      cmocka_unit_test(test_sparse_equals_dense),
      cmocka_unit_test(test_all_active_is_dense),
      cmocka_unit_test(test_softmax_fd),
      cmocka_unit_test(test_adam_reference),
      cmocka_unit_test(test_adam_catch_up_reference),
      cmocka_unit_test(test_adam_catch_up_then_lazy),
      cmocka_unit_test(test_adam_catch_up_dense),
      cmocka_unit_test(test_adam_order),
      cmocka_unit_test(test_touched),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
