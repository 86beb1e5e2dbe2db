/*
 * Host backend optimizers: several Adam and SGD steps against a scalar
 * double-precision transcription of torch.optim.Adam / torch.optim.SGD,
 * including settings where the eps conventions differ by orders of
 * magnitude, plus 1 vs 2 threads.
 */
#include "op_fixtures.h"

typedef struct adam_cfg {
  float lr, beta1, beta2, eps, wd;
  float grad_range; /* gradients uniform in +-grad_range */
} adam_cfg;

/* torch.optim.Adam's update (amsgrad=False, maximize=False), one element:
 *   g += wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). */
static void ref_adam_step(double *p, double g, double *m, double *v,
                          const adam_cfg *c, int64_t t) {
  g += (double)c->wd * *p;
  *m = c->beta1 * *m + (1.0 - c->beta1) * g;
  *v = c->beta2 * *v + (1.0 - c->beta2) * g * g;
  double bc1 = 1.0 - pow(c->beta1, (double)t);
  double bc2 = 1.0 - pow(c->beta2, (double)t);
  *p -= c->lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + c->eps);
}

static void check_adam(ar_device *dev, fx_rng *r, int64_t n, const adam_cfg *c,
                       int64_t t0, int steps) {
  float *p = fx_floats(dev, n), *g = fx_floats(dev, n), *m = fx_floats(dev, n),
        *v = fx_floats(dev, n), *g_copy = fx_floats(dev, n);
  double *rp = test_malloc((size_t)n * sizeof *rp);
  double *rm = test_malloc((size_t)n * sizeof *rm);
  double *rv = test_malloc((size_t)n * sizeof *rv);
  fx_fill_uniform(r, p, n, -1, 1);
  for (int64_t i = 0; i < n; i++) {
    /* A run resumed at t0 > 1 starts from some optimizer state. */
    m[i] = t0 > 1 ? fx_uniform(r, -0.1f, 0.1f) : 0.0f;
    v[i] = t0 > 1 ? fx_uniform(r, 0.0f, 0.01f) : 0.0f;
    rp[i] = p[i];
    rm[i] = m[i];
    rv[i] = v[i];
  }
  for (int s = 0; s < steps; s++) {
    int64_t t = t0 + s;
    fx_fill_uniform(r, g, n, -c->grad_range, c->grad_range);
    if (n > 3)
      g[3] = 0.0f; /* a zero gradient moves p by momentum alone */
    memcpy(g_copy, g, (size_t)n * sizeof *g);
    ar_device_adam(dev, n, p, g, m, v, c->lr, c->beta1, c->beta2, c->eps,
                   c->wd, t);
    assert_memory_equal(g, g_copy, (size_t)n * sizeof *g); /* g unchanged */
    for (int64_t i = 0; i < n; i++)
      ref_adam_step(&rp[i], g[i], &rm[i], &rv[i], c, t);
  }
  char what[128];
  snprintf(what, sizeof what,
           "adam n=%lld lr=%g eps=%g wd=%g t=%lld..%lld: ", (long long)n,
           (double)c->lr, (double)c->eps, (double)c->wd, (long long)t0,
           (long long)(t0 + steps - 1));
  size_t at = strlen(what);
  /* p moves by about lr per step; float p carries ~1e-7 per step. */
  snprintf(what + at, sizeof what - at, "p");
  fx_expect_close(what, p, rp, NULL, n, 1e-6, 1e-6 * c->lr * steps + 1e-7);
  snprintf(what + at, sizeof what - at, "m");
  /* m averages signed gradients: near zero it is a difference of terms of
   * size grad_range, so its error is absolute at that scale. */
  fx_expect_close(what, m, rm, NULL, n, 1e-5, 1e-6 * c->grad_range);
  snprintf(what + at, sizeof what - at, "v");
  fx_expect_close(what, v, rv, NULL, n, 1e-5, 1e-12);
  test_free(rp);
  test_free(rm);
  test_free(rv);
  fx_free_floats(dev, p, n);
  fx_free_floats(dev, g, n);
  fx_free_floats(dev, m, n);
  fx_free_floats(dev, v, n);
  fx_free_floats(dev, g_copy, n);
}

static void test_adam(void **state) {
  (void)state;
  fx_rng r = {21};
  const int64_t ns[] = {1, 7, 33, 1000, 100003};
  const adam_cfg cfgs[] = {
      {1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f},   /* PyTorch defaults, big lr */
      {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1.0f},  /* L2 weight decay */
      /* eps comparable to sqrt(v-hat): PyTorch's eps and the paper's
       * eps-hat differ here by a factor 1/sqrt(1 - b2^t) = 31.6 at t = 1. */
      {1e-2f, 0.9f, 0.999f, 1e-1f, 0.0f, 0.1f},
      {1e-2f, 0.5f, 0.9f, 1e-3f, 0.0f, 1e-3f},
  };
  for (int s = 0; s < 5; s++)
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
      check_adam(dev2, &r, ns[s], &cfgs[c], 1, 5);
      check_adam(dev2, &r, ns[s], &cfgs[c], 100, 3);
    }
}

typedef struct sgd_cfg {
  float lr, momentum, wd;
} sgd_cfg;

static void check_sgd(ar_device *dev, fx_rng *r, int64_t n, const sgd_cfg *c,
                      int steps) {
  float *p = fx_floats(dev, n), *g = fx_floats(dev, n);
  float *vel = c->momentum != 0.0f ? fx_floats(dev, n) : NULL;
  double *rp = test_malloc((size_t)n * sizeof *rp);
  double *rv = test_calloc((size_t)n, sizeof *rv);
  fx_fill_uniform(r, p, n, -1, 1);
  for (int64_t i = 0; i < n; i++)
    rp[i] = p[i];
  if (vel)
    memset(vel, 0, (size_t)n * sizeof *vel);
  for (int s = 0; s < steps; s++) {
    fx_fill_uniform(r, g, n, -1, 1);
    ar_device_sgd(dev, n, p, g, vel, c->lr, c->momentum, c->wd);
    /* torch.optim.SGD (dampening 0, nesterov off): d = g + wd p;
     * buf = momentum buf + d (buf = d at the first step); p -= lr buf. */
    for (int64_t i = 0; i < n; i++) {
      double d = g[i] + (double)c->wd * rp[i];
      if (c->momentum != 0.0f) {
        rv[i] = s == 0 ? d : c->momentum * rv[i] + d;
        d = rv[i];
      }
      rp[i] -= c->lr * d;
    }
  }
  char what[96];
  snprintf(what, sizeof what, "sgd n=%lld lr=%g momentum=%g wd=%g", (long long)n,
           (double)c->lr, (double)c->momentum, (double)c->wd);
  fx_expect_close(what, p, rp, NULL, n, 1e-6, 1e-6);
  if (vel) {
    /* Like Adam's m, the velocity sums signed gradients of size 1. */
    fx_expect_close(what, vel, rv, NULL, n, 1e-5, 1e-6);
    fx_free_floats(dev, vel, n);
  }
  test_free(rp);
  test_free(rv);
  fx_free_floats(dev, p, n);
  fx_free_floats(dev, g, n);
}

static void test_sgd(void **state) {
  (void)state;
  fx_rng r = {22};
  const int64_t ns[] = {1, 7, 33, 1000, 100003};
  const sgd_cfg cfgs[] = {
      {0.1f, 0.0f, 0.0f}, {0.05f, 0.9f, 0.0f}, {0.05f, 0.9f, 1e-2f},
      {0.1f, 0.0f, 1e-1f}};
  for (int s = 0; s < 5; s++)
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
      check_sgd(dev2, &r, ns[s], &cfgs[c], 4);
}

static void test_threads_identical(void **state) {
  (void)state;
  fx_rng r = {23};
  const int64_t n = 300007;
  float *p1 = fx_floats(dev1, n), *m1 = fx_floats(dev1, n),
        *v1 = fx_floats(dev1, n), *g = fx_floats(dev1, n);
  fx_fill_uniform(&r, p1, n, -1, 1);
  memset(m1, 0, (size_t)n * sizeof *m1);
  memset(v1, 0, (size_t)n * sizeof *v1);
  float *p2 = fx_copy(dev1, p1, n), *m2 = fx_copy(dev1, m1, n),
        *v2 = fx_copy(dev1, v1, n);
  for (int t = 1; t <= 3; t++) {
    fx_fill_uniform(&r, g, n, -1, 1);
    ar_device_adam(dev1, n, p1, g, m1, v1, 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f, t);
    ar_device_adam(dev2, n, p2, g, m2, v2, 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f, t);
    ar_device_sgd(dev1, n, p1, g, m1, 1e-2f, 0.9f, 1e-4f);
    ar_device_sgd(dev2, n, p2, g, m2, 1e-2f, 0.9f, 1e-4f);
  }
  fx_expect_identical("p, 1 vs 2 threads", p1, p2, n);
  fx_expect_identical("m, 1 vs 2 threads", m1, m2, n);
  fx_expect_identical("v, 1 vs 2 threads", v1, v2, n);
  fx_free_floats(dev1, p1, n);
  fx_free_floats(dev1, m1, n);
  fx_free_floats(dev1, v1, n);
  fx_free_floats(dev1, p2, n);
  fx_free_floats(dev1, m2, n);
  fx_free_floats(dev1, v2, n);
  fx_free_floats(dev1, g, n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adam),
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_threads_identical),
  };
  return cmocka_run_group_tests(tests, fx_setup_pair, fx_teardown_pair);
}
