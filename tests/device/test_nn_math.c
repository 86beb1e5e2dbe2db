/*
 * The host kernels of the nn ops in group "math" (include/accelrt/nn.h):
 * every op's gradient against central finite differences, including the
 * broadcasting forms ((N,C)+(C), (N,1,D)*(1,T,D), a scalar operand) and the
 * reductions' keepdims and axis_all; outputs and gradients against PyTorch
 * (tests/device/nn_torch_math.py, skipped without torch); shape and dtype
 * errors naming the shapes; backward overwriting (not adding to) its
 * gradients and skipping NULL ones; and 1 vs 2 threads on sizes that take
 * the parallel paths giving the same bits.
 */
/* mkdtemp (nn_check.h) is POSIX 2008. */
#define _GNU_SOURCE
#include "nn_check.h"

#define TORCH_SCRIPT "tests/device/nn_torch_math.py"

/* Tight enough that a missing factor or term (a wrong kernel) fails: the
 * gradients below are O(0.1..1), the central difference with h = 1e-2 is
 * within about 1e-4 of them for these smooth functions. */
static const nn_tol tol_smooth = {1e-2, 3e-3, 1e-2, 24};
/* Float outputs against PyTorch's double ones. */
#define T_ATOL 2e-5
#define T_RTOL 2e-4

typedef struct spec {
  ar_nn_op op;
  ar_nn_attr attr;
  int n_in;
  ar_shape in[3];
  ar_dtype dt[3];
  bool pos[3];
  int64_t int_hi;
  float scale;
  bool torch; /* also against PyTorch: each run costs the import of torch
                 (about 2 s), so one or two cases per op */
} spec;

static ar_nn_attr attr_def(void) {
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  return a;
}

static spec spec1(ar_nn_op op, ar_shape x) {
  spec s;
  memset(&s, 0, sizeof s);
  s.op = op;
  s.attr = attr_def();
  s.n_in = 1;
  s.in[0] = x;
  s.dt[0] = AR_DT_F32;
  s.scale = 1.0f;
  return s;
}

static spec spec2(ar_nn_op op, ar_shape x, ar_shape y) {
  spec s = spec1(op, x);
  s.n_in = 2;
  s.in[1] = y;
  s.dt[1] = AR_DT_F32;
  return s;
}

static void setup(nn_case *c, const spec *s, ar_device *dev) {
  nn_case_init(c, s->op, &s->attr);
  for (int i = 0; i < s->n_in; i++) {
    nn_case_input(c, s->in[i], s->dt[i]);
    c->positive[i] = s->pos[i];
  }
  if (s->int_hi)
    c->int_hi = s->int_hi;
  c->dev = dev;
  assert_int_equal(nn_case_setup(c), AR_OK);
  c->a.scale = s->scale;
}

/* Every gradient of a fresh forward+backward, copied. */
typedef struct grads {
  int n;
  float *g[2 * AR_NN_MAX_IO];
  int64_t len[2 * AR_NN_MAX_IO];
} grads;

static void grads_take(nn_case *c, grads *out) {
  out->n = 0;
  for (int i = 0; i < c->a.n_in + c->a.n_param; i++) {
    ar_tref *t = i < c->a.n_in ? &c->a.gin[i] : &c->a.gparam[i - c->a.n_in];
    if (!t->p)
      continue;
    int64_t n = ar_shape_count(&t->shape);
    out->g[out->n] = malloc((size_t)n * 4 + 4);
    memcpy(out->g[out->n], t->p, (size_t)n * 4);
    out->len[out->n++] = n;
  }
}

static void grads_free(grads *g) {
  for (int i = 0; i < g->n; i++)
    free(g->g[i]);
}

/* Backward overwrites: garbage in every gradient before a second backward
 * changes nothing. */
static void check_overwrite(nn_case *c) {
  nn_case_forward(c);
  nn_case_backward(c);
  grads first;
  grads_take(c, &first);
  for (int i = 0; i < c->a.n_in + c->a.n_param; i++) {
    ar_tref *t = i < c->a.n_in ? &c->a.gin[i] : &c->a.gparam[i - c->a.n_in];
    if (!t->p)
      continue;
    float *p = t->p;
    for (int64_t j = 0; j < ar_shape_count(&t->shape); j++)
      p[j] = 777.0f;
  }
  nn_case_backward(c);
  grads second;
  grads_take(c, &second);
  assert_int_equal(first.n, second.n);
  for (int i = 0; i < first.n; i++)
    assert_memory_equal(first.g[i], second.g[i], (size_t)first.len[i] * 4);
  grads_free(&first);
  grads_free(&second);
}

/* Finite differences, overwriting, then (s->torch) PyTorch, on one case. */
static void run_spec(const spec *s, const nn_tol *tol) {
  nn_case c;
  setup(&c, s, NULL);
  nn_check_grad(&c, tol ? tol : &tol_smooth);
  check_overwrite(&c);
  if (s->torch)
    nn_check_torch(&c, TORCH_SCRIPT, T_ATOL, T_RTOL);
  nn_case_fini(&c);
}

/* ---- DENSE, MATMUL --------------------------------------------------------- */

static void test_dense(void **state) {
  (void)state;
  spec s = spec1(AR_NN_DENSE, NN_SHAPE(2, 3, 5));
  s.attr.out = 4;
  s.torch = true;
  run_spec(&s, NULL);
  s.torch = false;
  s.attr.act = AR_ACT_SIGMOID;
  run_spec(&s, NULL);
  s.attr.bias = false;
  s.in[0] = NN_SHAPE(6, 5);
  run_spec(&s, NULL);
  /* relu: inputs away from the kink so +-h never crosses it */
  s.attr.act = AR_ACT_RELU;
  s.attr.bias = true;
  nn_case c;
  setup(&c, &s, NULL);
  nn_tol t = {1e-3, 3e-3, 1e-2, 24};
  nn_check_grad(&c, &t);
  nn_check_torch(&c, TORCH_SCRIPT, T_ATOL, T_RTOL);
  nn_case_fini(&c);
}

static void test_dense_sig(void **state) {
  (void)state;
  ar_nn_attr a = attr_def();
  a.out = 7;
  ar_shape x = NN_SHAPE(2, 3, 5);
  ar_dtype t = AR_DT_F32;
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_nn_infer(AR_NN_DENSE, &a, 1, &x, &t, &sig, &err), AR_OK);
  assert_int_equal(sig.n_param, 2);
  assert_int_equal(sig.param[0].d[0], 7);
  assert_int_equal(sig.param[0].d[1], 5);
  assert_int_equal(sig.out[0].nd, 3);
  assert_int_equal(sig.out[0].d[2], 7);
  assert_true(sig.flops == 2.0 * 6 * 5 * 7);
  assert_int_equal(sig.in_needed, 1u);
  assert_false(sig.out_needed);
}

static void test_matmul(void **state) {
  (void)state;
  spec s = spec2(AR_NN_MATMUL, NN_SHAPE(2, 3, 4), NN_SHAPE(2, 4, 5));
  run_spec(&s, NULL);
  s = spec2(AR_NN_MATMUL, NN_SHAPE(2, 2, 3, 4), NN_SHAPE(2, 2, 5, 4));
  s.attr.trans_b = true;
  s.torch = true;
  run_spec(&s, NULL);
  s = spec2(AR_NN_MATMUL, NN_SHAPE(3, 6), NN_SHAPE(6, 2));
  run_spec(&s, NULL);
}

/* gin[i].p NULL: its work is skipped, the other gradient still right. */
static void test_matmul_null_gin(void **state) {
  (void)state;
  spec s = spec2(AR_NN_MATMUL, NN_SHAPE(2, 3, 4), NN_SHAPE(2, 4, 5));
  nn_case c, ref;
  setup(&c, &s, NULL);
  setup(&ref, &s, NULL);
  free(c.a.gin[0].p);
  c.a.gin[0].p = NULL;
  nn_case_forward(&c);
  nn_case_backward(&c);
  nn_case_forward(&ref);
  nn_case_backward(&ref);
  assert_memory_equal(c.a.gin[1].p, ref.a.gin[1].p, 2 * 4 * 5 * 4);
  nn_case_fini(&c);
  nn_case_fini(&ref);
}

/* ---- unary ------------------------------------------------------------------ */

static void test_unary(void **state) {
  (void)state;
  const ar_nn_op ops[] = {AR_NN_SIGMOID, AR_NN_TANH, AR_NN_GELU, AR_NN_EXP,
                          AR_NN_SQRT,    AR_NN_LOG};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    spec s = spec1(ops[i], NN_SHAPE(3, 2, 5));
    s.pos[0] = ops[i] == AR_NN_SQRT || ops[i] == AR_NN_LOG;
    s.torch = true;
    printf("# %s\n", ar_nn_op_name(ops[i]));
    run_spec(&s, NULL);
  }
}

/* Values kept at least 0.05 from the kink at 0, so +-h never crosses it. */
static void fill_away_from_zero(nn_case *c, int input, void *p, int64_t n) {
  (void)input;
  float *x = p;
  for (int64_t j = 0; j < n; j++) {
    float u = nn__uniform(&c->seed);
    x[j] = u < 0.5f ? -0.05f - u : u - 0.45f;
  }
}

static void test_relu(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    spec s = spec1(k ? AR_NN_LEAKY_RELU : AR_NN_RELU, NN_SHAPE(4, 9));
    s.attr.alpha = 0.2f;
    nn_case c;
    nn_case_init(&c, s.op, &s.attr);
    nn_case_input(&c, s.in[0], AR_DT_F32);
    c.fill = fill_away_from_zero;
    assert_int_equal(nn_case_setup(&c), AR_OK);
    nn_check_grad(&c, &tol_smooth);
    check_overwrite(&c);
    if (k) /* alpha's meaning */
      nn_check_torch(&c, TORCH_SCRIPT, T_ATOL, T_RTOL);
    /* leaky: negative inputs really are scaled by alpha */
    const float *x = c.a.in[0].p, *y = c.a.out[0].p;
    for (int j = 0; j < 36; j++)
      assert_true(y[j] == (x[j] > 0 ? x[j] : (k ? 0.2f * x[j] : 0.0f)));
    nn_case_fini(&c);
  }
}

/* ---- softmax, layernorm, xent -------------------------------------------------- */

static void test_softmax(void **state) {
  (void)state;
  spec s = spec1(AR_NN_SOFTMAX, NN_SHAPE(2, 3, 7));
  s.torch = true;
  run_spec(&s, NULL);
  s.op = AR_NN_LOG_SOFTMAX;
  run_spec(&s, NULL);
}

/* Logits in the thousands: max subtraction keeps everything finite. */
static void test_softmax_stable(void **state) {
  (void)state;
  const ar_nn_op ops[] = {AR_NN_SOFTMAX, AR_NN_LOG_SOFTMAX};
  for (int k = 0; k < 2; k++) {
    spec s = spec1(ops[k], NN_SHAPE(1, 3));
    nn_case c;
    setup(&c, &s, NULL);
    float *x = c.a.in[0].p;
    x[0] = 1000.0f;
    x[1] = 999.0f;
    x[2] = -1000.0f;
    nn_case_forward(&c);
    const float *y = c.a.out[0].p;
    double e1 = exp(-1.0), z = 1.0 + e1;
    double want0 = k ? -log(z) : 1.0 / z, want1 = k ? -1.0 - log(z) : e1 / z;
    assert_float_equal(y[0], want0, 1e-6);
    assert_float_equal(y[1], want1, 1e-6);
    assert_true(k ? y[2] < -1999.0f : y[2] == 0.0f);
    nn_case_fini(&c);
  }
}

static void test_layernorm(void **state) {
  (void)state;
  spec s = spec1(AR_NN_LAYERNORM, NN_SHAPE(2, 3, 6));
  s.torch = true;
  run_spec(&s, NULL);
  s.torch = false;
  s.in[0] = NN_SHAPE(5);
  s.attr.eps = 1e-3f;
  run_spec(&s, NULL);
}

static void test_layernorm_aux(void **state) {
  (void)state;
  spec s = spec1(AR_NN_LAYERNORM, NN_SHAPE(3, 4));
  nn_case c;
  setup(&c, &s, NULL);
  assert_int_equal(c.sig.n_aux, 2);
  assert_int_equal(c.sig.aux[0].nd, 1);
  assert_int_equal(c.sig.aux[0].d[0], 3);
  assert_false(c.sig.param_decay[0]);
  assert_false(c.sig.param_decay[1]);
  nn_case_forward(&c);
  const float *x = c.a.in[0].p, *mean = c.a.aux[0].p, *rstd = c.a.aux[1].p;
  for (int r = 0; r < 3; r++) {
    double m = 0, v = 0;
    for (int j = 0; j < 4; j++)
      m += x[r * 4 + j] / 4.0;
    for (int j = 0; j < 4; j++)
      v += (x[r * 4 + j] - m) * (x[r * 4 + j] - m) / 4.0;
    assert_float_equal(mean[r], m, 1e-6);
    assert_float_equal(rstd[r], 1.0 / sqrt(v + 1e-5), 1e-4 / sqrt(v + 1e-5));
  }
  nn_case_fini(&c);
}

static void test_xent(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    spec s = spec2(AR_NN_XENT, NN_SHAPE(5, 7), NN_SHAPE(5));
    s.dt[1] = k ? AR_DT_I32 : AR_DT_I64;
    s.int_hi = 7;
    s.scale = 0.2f;
    nn_case c;
    setup(&c, &s, NULL);
    assert_int_equal(c.sig.no_grad, 2u);
    assert_null(c.a.gin[1].p);
    /* The gradient ignores gout: scribbling on it changes nothing. */
    nn_case_forward(&c);
    nn_case_backward(&c);
    float g0[35];
    memcpy(g0, c.a.gin[0].p, sizeof g0);
    for (int j = 0; j < 5; j++)
      ((float *)c.a.gout[0].p)[j] = 3.0f * (float)j - 5.0f;
    nn_case_backward(&c);
    assert_memory_equal(g0, c.a.gin[0].p, sizeof g0);
    for (int j = 0; j < 5; j++)
      ((float *)c.a.gout[0].p)[j] = 1.0f;
    nn_check_grad(&c, &tol_smooth);
    check_overwrite(&c);
    if (!k)
      nn_check_torch(&c, TORCH_SCRIPT, T_ATOL, T_RTOL);
    nn_case_fini(&c);
  }
}

/* BCE: the row's mean sigmoid cross-entropy against multi-hot targets
 * (by hand in double), its gradient by finite differences, gout ignored. */
static void test_bce(void **state) {
  (void)state;
  spec s = spec2(AR_NN_BCE, NN_SHAPE(4, 6), NN_SHAPE(4, 6));
  s.scale = 0.25f;
  nn_case c;
  setup(&c, &s, NULL);
  assert_int_equal(c.sig.no_grad, 2u);
  float *x = c.a.in[0].p, *t = c.a.in[1].p;
  for (int j = 0; j < 24; j++) {
    t[j] = (float)((j * 7) % 3 == 0);
    x[j] *= 4.0f; /* both tails of the sigmoid */
  }
  x[0] = 60.0f; /* exp would overflow in a naive log(1 + exp(x)) */
  x[1] = -60.0f;
  nn_case_forward(&c);
  const float *loss = c.a.out[0].p;
  for (int r = 0; r < 4; r++) {
    double want = 0;
    for (int j = r * 6; j < r * 6 + 6; j++)
      want += fmax(x[j], 0.0) - (double)x[j] * t[j] + log1p(exp(-fabs((double)x[j])));
    assert_float_equal(loss[r], want / 6.0, 1e-5 * fmax(1.0, want / 6.0));
  }
  for (int j = 0; j < 4; j++)
    ((float *)c.a.gout[0].p)[j] = 1.0f;
  nn_case_backward(&c);
  float g0[24];
  memcpy(g0, c.a.gin[0].p, sizeof g0);
  for (int j = 0; j < 4; j++)
    ((float *)c.a.gout[0].p)[j] = 2.0f * (float)j - 3.0f;
  nn_case_backward(&c);
  assert_memory_equal(g0, c.a.gin[0].p, sizeof g0);
  for (int j = 0; j < 4; j++)
    ((float *)c.a.gout[0].p)[j] = 1.0f;
  x[0] = 2.0f; /* finite differences need the smooth middle */
  x[1] = -2.0f;
  nn_check_grad(&c, &tol_smooth);
  nn_case_fini(&c);
  /* Targets must be logits' shape and f32. */
  ar_shape bad[2] = {NN_SHAPE(4, 6), NN_SHAPE(4)};
  ar_dtype dt[2] = {AR_DT_F32, AR_DT_F32};
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  ar_nn_attr a = attr_def();
  assert_int_equal(ar_nn_infer(AR_NN_BCE, &a, 2, bad, dt, &sig, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "4x6"));
}

static void test_xent_stable(void **state) {
  (void)state;
  spec s = spec2(AR_NN_XENT, NN_SHAPE(2, 3), NN_SHAPE(2));
  s.dt[1] = AR_DT_I64;
  s.int_hi = 3;
  nn_case c;
  setup(&c, &s, NULL);
  float *x = c.a.in[0].p;
  int64_t *lab = c.a.in[1].p;
  const float v[6] = {1000, 999, -1000, -1000, 0, 50};
  memcpy(x, v, sizeof v);
  lab[0] = 1;
  lab[1] = 0;
  nn_case_forward(&c);
  const float *loss = c.a.out[0].p;
  assert_float_equal(loss[0], 1.0 + log1p(exp(-1.0)), 1e-5);
  assert_float_equal(loss[1], 1050.0, 1e-2);
  nn_case_fini(&c);
}

/* Rows far wider than the 7-class cases above, of a length that is no
 * multiple of the vector lanes or the summing chunks: softmax, log_softmax
 * and xent (its loss with and without the softmax kept, and the softmax it
 * keeps) against double sums by hand.  The kernels take the exponentials
 * vectorised and sum them in chunks; a lost remainder or chunk, or a
 * wrong max, is far outside these bounds. */
static void test_softmax_wide_rows(void **state) {
  (void)state;
  enum { R = 3, C = 5003 };
  const ar_nn_op ops[] = {AR_NN_SOFTMAX, AR_NN_LOG_SOFTMAX, AR_NN_XENT};
  for (int k = 0; k < 3; k++) {
    spec s = ops[k] == AR_NN_XENT ? spec2(AR_NN_XENT, NN_SHAPE(R, C), NN_SHAPE(R))
                                  : spec1(ops[k], NN_SHAPE(R, C));
    if (ops[k] == AR_NN_XENT) {
      s.dt[1] = AR_DT_I64;
      s.int_hi = C;
    }
    nn_case c;
    setup(&c, &s, NULL);
    float *x = c.a.in[0].p;
    for (int64_t i = 0; i < (int64_t)R * C; i++) /* spread over [-8, 8] */
      x[i] = (float)((i * 7919 % 16001) - 8000) / 1000.0f;
    x[C + 4321] = 30.0f; /* a row with one dominant class */
    for (int tr = 0; tr < (ops[k] == AR_NN_XENT ? 2 : 1); tr++) {
      c.a.training = tr == 0;
      nn_case_forward(&c);
      for (int r = 0; r < R; r++) {
        const float *xr = x + (int64_t)r * C;
        double m = -INFINITY, z = 0.0;
        for (int j = 0; j < C; j++)
          m = xr[j] > m ? xr[j] : m;
        for (int j = 0; j < C; j++)
          z += exp((double)xr[j] - m);
        if (ops[k] == AR_NN_XENT) {
          const int64_t lab = ((const int64_t *)c.a.in[1].p)[r];
          const double want = log(z) + m - xr[lab];
          assert_float_equal(((const float *)c.a.out[0].p)[r], want, 1e-5 * (1.0 + want));
          if (!c.a.training)
            continue;
        }
        const float *y = ops[k] == AR_NN_XENT ? c.a.aux[0].p : c.a.out[0].p;
        for (int j = 0; j < C; j++) {
          const double lp = (double)xr[j] - m - log(z), p = exp(lp);
          const double got = y[(int64_t)r * C + j];
          if (ops[k] == AR_NN_LOG_SOFTMAX)
            assert_float_equal(got, lp, 2e-6 * (1.0 + fabs(lp)));
          else
            assert_float_equal(got, p, 1e-6 * p + 1e-12);
        }
      }
    }
    nn_case_fini(&c);
  }
}

/* ---- binary, broadcasting ------------------------------------------------------- */

static void test_binary_same(void **state) {
  (void)state;
  const ar_nn_op ops[] = {AR_NN_ADD, AR_NN_SUB, AR_NN_MUL, AR_NN_DIV, AR_NN_POW};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    spec s = spec2(ops[i], NN_SHAPE(3, 4), NN_SHAPE(3, 4));
    s.pos[0] = ops[i] == AR_NN_POW;
    s.pos[1] = ops[i] == AR_NN_DIV;
    s.torch = ops[i] == AR_NN_DIV || ops[i] == AR_NN_POW;
    printf("# %s\n", ar_nn_op_name(ops[i]));
    run_spec(&s, NULL);
  }
}

/* (N,C)+(C), (C)-(N,C), (N,1,D)*(1,T,D), (N,T,1)/(T,D), pow (N,T,D)^(T,1). */
static void test_binary_broadcast(void **state) {
  (void)state;
  struct {
    ar_nn_op op;
    ar_shape a, b;
  } cases[] = {
      {AR_NN_ADD, NN_SHAPE(4, 5), NN_SHAPE(5)},
      {AR_NN_SUB, NN_SHAPE(5), NN_SHAPE(4, 5)},
      {AR_NN_MUL, NN_SHAPE(2, 1, 4), NN_SHAPE(1, 3, 4)},
      {AR_NN_DIV, NN_SHAPE(2, 3, 1), NN_SHAPE(3, 4)},
      {AR_NN_POW, NN_SHAPE(2, 3, 4), NN_SHAPE(3, 1)},
      {AR_NN_MUL, NN_SHAPE(2, 3, 4), NN_SHAPE(1)},
      {AR_NN_ADD, NN_SHAPE(3, 1, 2, 1), NN_SHAPE(2, 4)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    spec s = spec2(cases[i].op, cases[i].a, cases[i].b);
    s.pos[0] = cases[i].op == AR_NN_POW;
    s.pos[1] = cases[i].op == AR_NN_DIV;
    s.torch = i == 2 || i == 6;
    printf("# case %zu: %s\n", i, ar_nn_op_name(cases[i].op));
    run_spec(&s, NULL);
  }
}

static void test_binary_scalar(void **state) {
  (void)state;
  struct {
    ar_nn_op op;
    float scalar;
    bool pos;
  } cases[] = {{AR_NN_ADD, 0.7f, false}, {AR_NN_SUB, -1.5f, false}, {AR_NN_MUL, -2.5f, false},
               {AR_NN_DIV, 4.0f, false}, {AR_NN_POW, 2.0f, false},  {AR_NN_POW, 0.5f, true},
               {AR_NN_POW, -1.5f, true}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    spec s = spec1(cases[i].op, NN_SHAPE(3, 5));
    s.attr.scalar = cases[i].scalar;
    s.pos[0] = cases[i].pos;
    s.torch = i == 1 || i == 6; /* the order of x - scalar; pow's */
    printf("# %s %g\n", ar_nn_op_name(cases[i].op), (double)cases[i].scalar);
    run_spec(&s, NULL);
  }
}

/* ---- MEAN, SUM ------------------------------------------------------------------ */

static void test_reduce(void **state) {
  (void)state;
  struct {
    int axis;
    bool all, keep;
    int64_t want[4];
    int want_nd;
  } cases[] = {
      {1, false, false, {2, 4}, 2},     {-1, false, true, {2, 3, 1}, 3},
      {0, false, false, {3, 4}, 2},     {0, true, false, {2}, 1},
      {0, true, true, {2, 1, 1}, 3},
  };
  const ar_nn_op ops[] = {AR_NN_MEAN, AR_NN_SUM};
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      spec s = spec1(ops[k], NN_SHAPE(2, 3, 4));
      s.attr.axis = cases[i].axis;
      s.attr.axis_all = cases[i].all;
      s.attr.keepdims = cases[i].keep;
      s.torch = (k == 0 && i == 1) || (k == 1 && i == 4);
      printf("# %s case %zu\n", ar_nn_op_name(ops[k]), i);
      nn_case c;
      setup(&c, &s, NULL);
      assert_int_equal(c.sig.out[0].nd, cases[i].want_nd);
      for (int d = 0; d < cases[i].want_nd; d++)
        assert_int_equal(c.sig.out[0].d[d], cases[i].want[d]);
      nn_case_fini(&c);
      run_spec(&s, NULL);
    }
}

/* ---- errors ------------------------------------------------------------------------ */

static void expect_error(ar_nn_op op, const ar_nn_attr *attr, int n, const ar_shape *in,
                         const ar_dtype *dt, const char *want1, const char *want2) {
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  ar_nn_attr def = attr_def();
  assert_int_equal(ar_nn_infer(op, attr ? attr : &def, n, in, dt, &sig, &err), AR_INVALID);
  printf("# %s: %s\n", ar_nn_op_name(op), err.msg);
  assert_non_null(strstr(err.msg, want1));
  if (want2)
    assert_non_null(strstr(err.msg, want2));
}

static void test_errors(void **state) {
  (void)state;
  const ar_dtype f2[2] = {AR_DT_F32, AR_DT_F32};
  ar_shape s[2];
  s[0] = NN_SHAPE(4, 3);
  s[1] = NN_SHAPE(5, 3);
  expect_error(AR_NN_ADD, NULL, 2, s, f2, "4x3", "5x3");
  expect_error(AR_NN_MUL, NULL, 2, s, f2, "dim 0 is 4 and 5", NULL);
  s[0] = NN_SHAPE(2, 3, 4);
  s[1] = NN_SHAPE(2, 5, 6);
  expect_error(AR_NN_MATMUL, NULL, 2, s, f2, "2x3x4", "2x5x6");
  s[1] = NN_SHAPE(3, 4, 6);
  expect_error(AR_NN_MATMUL, NULL, 2, s, f2, "batch dim 0 is 2 and 3", NULL);
  s[1] = NN_SHAPE(4, 6);
  expect_error(AR_NN_MATMUL, NULL, 2, s, f2, "2x3x4", "4x6");
  ar_nn_attr a = attr_def();
  a.out = 3;
  a.act = AR_ACT_SOFTMAX;
  expect_error(AR_NN_DENSE, &a, 1, s, f2, "act", NULL);
  a.act = AR_ACT_NONE;
  a.out = 0;
  expect_error(AR_NN_DENSE, &a, 1, s, f2, "out", NULL);
  a = attr_def();
  a.axis = 3;
  expect_error(AR_NN_MEAN, &a, 1, s, f2, "axis 3", "2x3x4");
  a.axis = -4;
  expect_error(AR_NN_SUM, &a, 1, s, f2, "axis -4", "2x3x4");
  const ar_dtype bad_lab[2] = {AR_DT_F32, AR_DT_F32};
  s[0] = NN_SHAPE(4, 3);
  s[1] = NN_SHAPE(4);
  expect_error(AR_NN_XENT, NULL, 2, s, bad_lab, "f32", "i64");
  const ar_dtype lab[2] = {AR_DT_F32, AR_DT_I64};
  s[1] = NN_SHAPE(5);
  expect_error(AR_NN_XENT, NULL, 2, s, lab, "4x3", "5");
  const ar_dtype i64[1] = {AR_DT_I64};
  expect_error(AR_NN_SOFTMAX, NULL, 1, s, i64, "i64", NULL);
  s[0] = NN_SHAPE(4, 3);
  expect_error(AR_NN_RELU, NULL, 2, s, f2, "1 input", NULL);
  ar_shape scalar = {0};
  expect_error(AR_NN_LAYERNORM, NULL, 1, &scalar, f2, "scalar", NULL);
}

/* ---- in_needed, out_needed ------------------------------------------------------
 * The engine may free what the sig says the backward does not read: with
 * those pointers NULL, the backward gives the same gradients. */

static void check_needed(const spec *s) {
  nn_case c;
  setup(&c, s, NULL);
  printf("# needed: %s (in %#x, out %d)\n", ar_nn_op_name(s->op), c.sig.in_needed,
         (int)c.sig.out_needed);
  nn_case_forward(&c);
  nn_case_backward(&c);
  grads ref;
  grads_take(&c, &ref);
  void *in[AR_NN_MAX_IO], *out[AR_NN_MAX_IO];
  for (int i = 0; i < c.a.n_in; i++) {
    in[i] = c.a.in[i].p;
    if (!(c.sig.in_needed >> i & 1u))
      c.a.in[i].p = NULL;
  }
  for (int i = 0; i < c.a.n_out; i++) {
    out[i] = c.a.out[i].p;
    if (!c.sig.out_needed)
      c.a.out[i].p = NULL;
  }
  nn_case_backward(&c);
  grads got;
  grads_take(&c, &got);
  for (int i = 0; i < c.a.n_in; i++)
    c.a.in[i].p = in[i];
  for (int i = 0; i < c.a.n_out; i++)
    c.a.out[i].p = out[i];
  assert_int_equal(ref.n, got.n);
  for (int i = 0; i < ref.n; i++)
    assert_memory_equal(ref.g[i], got.g[i], (size_t)ref.len[i] * 4);
  grads_free(&ref);
  grads_free(&got);
  nn_case_fini(&c);
}

static void test_needed(void **state) {
  (void)state;
  const ar_nn_op unary[] = {AR_NN_RELU, AR_NN_LEAKY_RELU, AR_NN_SIGMOID, AR_NN_TANH,
                            AR_NN_GELU, AR_NN_SQRT,       AR_NN_EXP,     AR_NN_LOG,
                            AR_NN_SOFTMAX, AR_NN_LOG_SOFTMAX, AR_NN_LAYERNORM,
                            AR_NN_MEAN, AR_NN_SUM};
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
    spec s = spec1(unary[i], NN_SHAPE(3, 5));
    s.pos[0] = true;
    check_needed(&s);
  }
  const ar_nn_op binary[] = {AR_NN_ADD, AR_NN_SUB, AR_NN_MUL, AR_NN_DIV, AR_NN_POW};
  for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
    spec s = spec2(binary[i], NN_SHAPE(3, 5), NN_SHAPE(5));
    s.pos[0] = s.pos[1] = true;
    check_needed(&s);
    s = spec1(binary[i], NN_SHAPE(3, 5));
    s.attr.scalar = 1.5f;
    s.pos[0] = true;
    check_needed(&s);
  }
  spec s = spec1(AR_NN_DENSE, NN_SHAPE(3, 5));
  s.attr.out = 4;
  check_needed(&s);
  s.attr.act = AR_ACT_SIGMOID;
  check_needed(&s);
  s = spec2(AR_NN_MATMUL, NN_SHAPE(2, 3, 4), NN_SHAPE(2, 4, 5));
  check_needed(&s);
  s = spec2(AR_NN_XENT, NN_SHAPE(4, 6), NN_SHAPE(4));
  s.dt[1] = AR_DT_I64;
  s.int_hi = 6;
  check_needed(&s);
}

/* ---- threads ------------------------------------------------------------------------ */

/* Sizes above the parallel threshold: the two-thread device gives the
 * bits of the one-thread one (the serial paths are the ones checked
 * against finite differences and PyTorch above).  Not exact: the ops whose
 * GEMMs ar__host_sgemm splits, because OpenBLAS does not give the same bits
 * for a slice of rows as for the whole product (measured: dense's dx
 * differed in the last bits from row 150 of 256 on). */
static void same_bits_1_vs_2(const spec *s, bool exact) {
  ar_device *d1;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  ar_err err = AR_ERR_INIT;
  printf("# 1 vs 2 threads: %s\n", ar_nn_op_name(s->op));
  o.threads = 1;
  o.pin = false;
  assert_int_equal(ar_device_open("host", &o, &d1, &err), AR_OK);
  nn_case c1, c2;
  setup(&c1, s, d1);
  setup(&c2, s, NULL); /* two threads */
  nn_case_forward(&c1);
  nn_case_backward(&c1);
  nn_case_forward(&c2);
  nn_case_backward(&c2);
  grads g1, g2;
  grads_take(&c1, &g1);
  grads_take(&c2, &g2);
  if (exact) {
    for (int i = 0; i < c1.a.n_out; i++)
      assert_memory_equal(c1.a.out[i].p, c2.a.out[i].p,
                          (size_t)ar_shape_count(&c1.a.out[i].shape) * 4);
    for (int i = 0; i < g1.n; i++)
      assert_memory_equal(g1.g[i], g2.g[i], (size_t)g1.len[i] * 4);
  } else {
    int bad = 0;
    for (int i = 0; i < c1.a.n_out; i++)
      bad += nn__compare("out", i, c2.a.out[i].p, c1.a.out[i].p,
                         ar_shape_count(&c1.a.out[i].shape), 1e-5, 1e-5);
    for (int i = 0; i < g1.n; i++)
      bad += nn__compare("grad", i, g2.g[i], g1.g[i], g1.len[i], 1e-5, 1e-5);
    assert_int_equal(bad, 0);
  }
  grads_free(&g1);
  grads_free(&g2);
  nn_case_fini(&c1);
  nn_case_fini(&c2);
}

static void test_threads(void **state) {
  (void)state;
  spec s = spec2(AR_NN_ADD, NN_SHAPE(512, 96), NN_SHAPE(96));
  same_bits_1_vs_2(&s, true);
  s = spec2(AR_NN_MUL, NN_SHAPE(16, 1, 64), NN_SHAPE(1, 48, 64));
  same_bits_1_vs_2(&s, true);
  s = spec2(AR_NN_DIV, NN_SHAPE(40, 30, 1), NN_SHAPE(30, 40));
  s.pos[1] = true;
  same_bits_1_vs_2(&s, true);
  s = spec1(AR_NN_SUM, NN_SHAPE(200, 30, 8));
  s.attr.axis = 0;
  same_bits_1_vs_2(&s, true);
  s.op = AR_NN_MEAN;
  s.attr.axis_all = true;
  same_bits_1_vs_2(&s, true);
  s = spec1(AR_NN_LAYERNORM, NN_SHAPE(300, 130));
  same_bits_1_vs_2(&s, true);
  s = spec1(AR_NN_SOFTMAX, NN_SHAPE(300, 130));
  same_bits_1_vs_2(&s, true);
  s = spec1(AR_NN_GELU, NN_SHAPE(300, 130));
  same_bits_1_vs_2(&s, true);
  s = spec1(AR_NN_DENSE, NN_SHAPE(256, 160));
  s.attr.out = 200;
  s.attr.act = AR_ACT_RELU;
  same_bits_1_vs_2(&s, false);
  s = spec2(AR_NN_MATMUL, NN_SHAPE(64, 16, 32), NN_SHAPE(64, 16, 32));
  s.attr.trans_b = true;
  same_bits_1_vs_2(&s, false);
  s = spec2(AR_NN_XENT, NN_SHAPE(300, 130), NN_SHAPE(300));
  s.dt[1] = AR_DT_I64;
  s.int_hi = 130;
  same_bits_1_vs_2(&s, true);
}

/* The parallel paths against finite differences too, on one large case
 * each for the broadcast reductions (a few elements sampled). */
static void test_parallel_grad(void **state) {
  (void)state;
  spec s = spec2(AR_NN_MUL, NN_SHAPE(16, 1, 64), NN_SHAPE(1, 48, 64));
  nn_case c;
  setup(&c, &s, NULL);
  nn_tol t = {1e-2, 2e-2, 2e-2, 8};
  nn_check_grad(&c, &t);
  nn_check_torch(&c, TORCH_SCRIPT, 1e-4, 2e-4);
  nn_case_fini(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense),           cmocka_unit_test(test_dense_sig),
      cmocka_unit_test(test_matmul),          cmocka_unit_test(test_matmul_null_gin),
      cmocka_unit_test(test_unary),           cmocka_unit_test(test_relu),
      cmocka_unit_test(test_softmax),         cmocka_unit_test(test_softmax_stable),
      cmocka_unit_test(test_layernorm),       cmocka_unit_test(test_layernorm_aux),
      cmocka_unit_test(test_xent),            cmocka_unit_test(test_xent_stable),
      cmocka_unit_test(test_bce),             cmocka_unit_test(test_softmax_wide_rows),
      cmocka_unit_test(test_binary_same),     cmocka_unit_test(test_binary_broadcast),
      cmocka_unit_test(test_binary_scalar),   cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_errors),          cmocka_unit_test(test_needed),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_parallel_grad),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
