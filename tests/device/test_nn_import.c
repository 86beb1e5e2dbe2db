/*
 * The nn ops and variants that ONNX import added (include/accelrt/nn.h):
 * NEG, ABS, ERF, CLIP, WHERE, EXPAND, CAST, GATHER; integer operands of
 * the binary ops; max pooling with dilation and with indices, average
 * pooling without the padding in the divisor; the biased running variance
 * of batch normalisation; layer normalisation's statistics as outputs.
 * Gradients against central finite differences (tests/device/nn_check.h),
 * outputs and gradients against PyTorch where it has the op (skipped
 * without torch), and the exact values of the integer and conversion
 * paths against hand-computed ones.
 */
/* mkdtemp (nn_check.h) is POSIX 2008. */
#define _GNU_SOURCE
#include "nn_check.h"

#define TORCH_MATH "tests/device/nn_torch_math.py"
#define TORCH_SHAPE "tests/device/nn_torch_shape.py"
#define T_ATOL 2e-5
#define T_RTOL 2e-4

static const nn_tol tol_smooth = {1e-2, 3e-3, 1e-2, 24};

static ar_nn_attr attr_def(void) {
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  return a;
}

/* Values at least 0.05 from each of the kinks in kinks[0..2) (the
 * case's lo and hi; +-h never crosses one). */
static void fill_away(nn_case *c, int input, void *p, int64_t n) {
  float *x = p;
  if (c->in_dtype[input] != AR_DT_F32) {
    uint8_t *b = p;
    for (int64_t j = 0; j < n; j++)
      b[j] = (uint8_t)(nn__rand(&c->seed) % 2u);
    return;
  }
  for (int64_t j = 0; j < n; j++) {
    float v;
    do
      v = -1.0f + 2.0f * nn__uniform(&c->seed);
    while (fabsf(v) < 0.05f || fabsf(v - c->attr.lo) < 0.05f || fabsf(v - c->attr.hi) < 0.05f);
    x[j] = v;
  }
}

/* Finite differences, then PyTorch when script is given. */
static void check_case(nn_case *c, const char *script) {
  nn_check_grad(c, &tol_smooth);
  if (script)
    nn_check_torch(c, script, T_ATOL, T_RTOL);
}

static void test_unary_new(void **state) {
  (void)state;
  const ar_nn_op ops[] = {AR_NN_NEG, AR_NN_ABS, AR_NN_ERF, AR_NN_CLIP};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    ar_nn_attr a = attr_def();
    if (ops[i] == AR_NN_CLIP) {
      a.lo = -0.3f;
      a.hi = 0.4f;
    }
    nn_case c;
    nn_case_init(&c, ops[i], &a);
    nn_case_input(&c, NN_SHAPE(3, 2, 5), AR_DT_F32);
    c.fill = fill_away;
    assert_int_equal(nn_case_setup(&c), AR_OK);
    printf("# %s\n", ar_nn_op_name(ops[i]));
    check_case(&c, TORCH_MATH);
    if (ops[i] == AR_NN_CLIP) { /* the bounds really bound */
      const float *x = c.a.in[0].p, *y = c.a.out[0].p;
      for (int j = 0; j < 30; j++)
        assert_true(y[j] == (x[j] < -0.3f ? -0.3f : x[j] > 0.4f ? 0.4f : x[j]));
    }
    nn_case_fini(&c);
  }
}

/* NumPy's clip: NaN stays, hi wins when lo > hi; ABS's gradient at 0. */
static void test_clip_edges(void **state) {
  (void)state;
  ar_nn_attr a = attr_def();
  a.lo = 1.0f;
  a.hi = -1.0f;
  nn_case c;
  nn_case_init(&c, AR_NN_CLIP, &a);
  nn_case_input(&c, NN_SHAPE(3), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  float *x = c.a.in[0].p;
  x[0] = NAN;
  x[1] = 5.0f;
  x[2] = -5.0f;
  nn_case_forward(&c);
  const float *y = c.a.out[0].p;
  assert_true(isnan(y[0]));
  assert_true(y[1] == -1.0f && y[2] == -1.0f);
  nn_case_fini(&c);
  a = attr_def();
  a.lo = NAN;
  ar_shape s = NN_SHAPE(3);
  ar_dtype t = AR_DT_F32;
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_nn_infer(AR_NN_CLIP, &a, 1, &s, &t, &sig, &err), AR_INVALID);
  nn_case_init(&c, AR_NN_ABS, NULL);
  nn_case_input(&c, NN_SHAPE(2), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  ((float *)c.a.in[0].p)[0] = 0.0f;
  ((float *)c.a.in[0].p)[1] = -2.0f;
  ((float *)c.a.gout[0].p)[0] = ((float *)c.a.gout[0].p)[1] = 1.0f;
  nn_case_forward(&c);
  nn_case_backward(&c);
  assert_true(((float *)c.a.gin[0].p)[0] == 0.0f && ((float *)c.a.gin[0].p)[1] == -1.0f);
  nn_case_fini(&c);
}

/* cond (2,1,4), x (3,4), y (1): both gradients reduced over the broadcast. */
static void test_where(void **state) {
  (void)state;
  nn_case c;
  nn_case_init(&c, AR_NN_WHERE, NULL);
  nn_case_input(&c, NN_SHAPE(2, 1, 4), AR_DT_BOOL);
  nn_case_input(&c, NN_SHAPE(3, 4), AR_DT_F32);
  nn_case_input(&c, NN_SHAPE(1), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  assert_int_equal(c.sig.out[0].nd, 3);
  assert_int_equal(c.sig.out[0].d[1], 3);
  assert_null(c.a.gin[0].p);
  check_case(&c, TORCH_MATH);
  nn_case_forward(&c);
  const uint8_t *cond = c.a.in[0].p;
  const float *x = c.a.in[1].p, *y = c.a.in[2].p, *o = c.a.out[0].p;
  for (int n = 0; n < 2; n++)
    for (int t = 0; t < 3; t++)
      for (int d = 0; d < 4; d++)
        assert_true(o[(n * 3 + t) * 4 + d] == (cond[n * 4 + d] ? x[t * 4 + d] : y[0]));
  nn_case_fini(&c);
  /* i64 values: forward only, no gradient anywhere. */
  nn_case_init(&c, AR_NN_WHERE, NULL);
  nn_case_input(&c, NN_SHAPE(5), AR_DT_U8);
  nn_case_input(&c, NN_SHAPE(5), AR_DT_I64);
  nn_case_input(&c, (ar_shape){0}, AR_DT_I64);
  c.int_hi = 1000;
  assert_int_equal(nn_case_setup(&c), AR_OK);
  assert_int_equal(c.sig.out_dtype[0], AR_DT_I64);
  assert_int_equal(c.sig.no_grad, 7u);
  nn_case_forward(&c);
  const uint8_t *k = c.a.in[0].p;
  const int64_t *xi = c.a.in[1].p, *yi = c.a.in[2].p, *oi = c.a.out[0].p;
  for (int j = 0; j < 5; j++)
    assert_true(oi[j] == (k[j] ? xi[j] : yi[0]));
  nn_case_fini(&c);
}

static void test_expand(void **state) {
  (void)state;
  ar_nn_attr a = attr_def();
  a.shape = NN_SHAPE(2, 1, 6);
  nn_case c;
  nn_case_init(&c, AR_NN_EXPAND, &a);
  nn_case_input(&c, NN_SHAPE(3, 1), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  assert_int_equal(c.sig.out[0].nd, 3);
  assert_int_equal(c.sig.out[0].d[0], 2);
  assert_int_equal(c.sig.out[0].d[1], 3);
  assert_int_equal(c.sig.out[0].d[2], 6);
  check_case(&c, TORCH_MATH);
  nn_case_fini(&c);
  /* Not broadcastable: the message names both shapes. */
  a.shape = NN_SHAPE(4);
  ar_shape s = NN_SHAPE(3, 2);
  ar_dtype t = AR_DT_F32;
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_nn_infer(AR_NN_EXPAND, &a, 1, &s, &t, &sig, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "3x2"));
  assert_non_null(strstr(err.msg, "4"));
}

/* Conversions with NumPy's results, including the edges C leaves
 * undefined. */
static void test_cast(void **state) {
  (void)state;
  ar_nn_attr a = attr_def();
  a.to = AR_DT_I64;
  nn_case c;
  nn_case_init(&c, AR_NN_CAST, &a);
  nn_case_input(&c, NN_SHAPE(6), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  const float xs[6] = {2.7f, -2.7f, NAN, 1e30f, -1e30f, 0.0f};
  memcpy(c.a.in[0].p, xs, sizeof xs);
  nn_case_forward(&c);
  const int64_t want[6] = {2, -2, 0, INT64_MAX, INT64_MIN, 0};
  assert_memory_equal(c.a.out[0].p, want, sizeof want);
  assert_int_equal(c.sig.no_grad, 1u);
  nn_case_fini(&c);
  /* i64 to u8 wraps; to bool is != 0; to f32 exact for small values. */
  const ar_dtype tos[3] = {AR_DT_U8, AR_DT_BOOL, AR_DT_F32};
  const int64_t iv[4] = {300, -1, 0, 7};
  const uint8_t want_u8[4] = {44, 255, 0, 7}, want_b[4] = {1, 1, 0, 1};
  const float want_f[4] = {300.0f, -1.0f, 0.0f, 7.0f};
  const void *wants[3] = {want_u8, want_b, want_f};
  for (int k = 0; k < 3; k++) {
    a.to = tos[k];
    nn_case_init(&c, AR_NN_CAST, &a);
    nn_case_input(&c, NN_SHAPE(4), AR_DT_I64);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    memcpy(c.a.in[0].p, iv, sizeof iv);
    nn_case_forward(&c);
    assert_memory_equal(c.a.out[0].p, wants[k], 4 * ar_dtype_size(tos[k]));
    nn_case_fini(&c);
  }
  /* f32 to f32 passes the gradient. */
  a.to = AR_DT_F32;
  nn_case_init(&c, AR_NN_CAST, &a);
  nn_case_input(&c, NN_SHAPE(2, 3), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  check_case(&c, NULL);
  nn_case_fini(&c);
}

/* Fills GATHER's indices with a repeat and a negative one. */
static void fill_indices(nn_case *c, int input, void *p, int64_t n) {
  if (input == 0) {
    float *x = p;
    for (int64_t j = 0; j < n; j++)
      x[j] = -1.0f + 2.0f * nn__uniform(&c->seed);
    return;
  }
  const int64_t v[6] = {1, -1, 1, 0, 3, -4};
  for (int64_t j = 0; j < n; j++) {
    if (c->in_dtype[1] == AR_DT_I64)
      ((int64_t *)p)[j] = v[j % 6];
    else
      ((int32_t *)p)[j] = (int32_t)v[j % 6];
  }
}

static void test_gather(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    ar_nn_attr a = attr_def();
    a.axis = k ? 1 : 0;
    nn_case c;
    nn_case_init(&c, AR_NN_GATHER, &a);
    nn_case_input(&c, NN_SHAPE(5, 4, 3), AR_DT_F32);
    nn_case_input(&c, NN_SHAPE(2, 3), k ? AR_DT_I32 : AR_DT_I64);
    c.fill = fill_indices;
    assert_int_equal(nn_case_setup(&c), AR_OK);
    assert_int_equal(c.sig.out[0].nd, 4);
    assert_int_equal(c.sig.out[0].d[a.axis], 2);
    assert_int_equal(c.sig.out[0].d[a.axis + 1], 3);
    printf("# gather axis %d\n", a.axis);
    check_case(&c, k ? NULL : TORCH_SHAPE);
    nn_case_fini(&c);
  }
  /* An index outside the axis reads zeros. */
  ar_nn_attr a = attr_def();
  a.axis = 0;
  nn_case c;
  nn_case_init(&c, AR_NN_GATHER, &a);
  nn_case_input(&c, NN_SHAPE(3, 2), AR_DT_F32);
  nn_case_input(&c, NN_SHAPE(2), AR_DT_I64);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  ((int64_t *)c.a.in[1].p)[0] = 3;
  ((int64_t *)c.a.in[1].p)[1] = -3;
  nn_case_forward(&c);
  const float *x = c.a.in[0].p, *y = c.a.out[0].p;
  assert_true(y[0] == 0.0f && y[1] == 0.0f && y[2] == x[0] && y[3] == x[1]);
  nn_case_fini(&c);
}

/* Element j of an integer tensor of type dt, set to v (wrapped). */
static void set_int(ar_dtype dt, void *p, int j, int64_t v) {
  if (dt == AR_DT_I64)
    ((int64_t *)p)[j] = v;
  else if (dt == AR_DT_I32)
    ((int32_t *)p)[j] = (int32_t)v;
  else
    ((uint8_t *)p)[j] = (uint8_t)v;
}

/* i64, i32 and u8 operands: NumPy's wrapping, truncating division,
 * x / 0 = 0, powers by squaring, broadcasting. */
static void test_int_binary(void **state) {
  (void)state;
  const ar_nn_op ops[] = {AR_NN_ADD, AR_NN_SUB, AR_NN_MUL, AR_NN_DIV, AR_NN_POW};
  const int64_t xa[4] = {7, -7, 250, 3}, xb[2] = {2, 0};
  const int64_t want64[5][8] = {{9, 7, -5, -7, 252, 250, 5, 3},
                                {5, 7, -9, -7, 248, 250, 1, 3},
                                {14, 0, -14, 0, 500, 0, 6, 0},
                                {3, 0, -3, 0, 125, 0, 1, 0},
                                {49, 1, 49, 1, 62500, 1, 9, 1}};
  for (int t = 0; t < 3; t++) {
    const ar_dtype dt = t == 0 ? AR_DT_I64 : t == 1 ? AR_DT_I32 : AR_DT_U8;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
      nn_case c;
      nn_case_init(&c, ops[i], NULL);
      nn_case_input(&c, NN_SHAPE(4, 1), dt);
      nn_case_input(&c, NN_SHAPE(2), dt);
      assert_int_equal(nn_case_setup(&c), AR_OK);
      assert_int_equal(c.sig.out_dtype[0], dt);
      assert_int_equal(c.sig.no_grad, 3u);
      for (int j = 0; j < 4; j++)
        set_int(dt, c.a.in[0].p, j, xa[j]);
      for (int j = 0; j < 2; j++)
        set_int(dt, c.a.in[1].p, j, xb[j]);
      nn_case_forward(&c);
      for (int j = 0; j < 8; j++) {
        int64_t w = want64[i][j], got;
        if (dt == AR_DT_I64) {
          got = ((int64_t *)c.a.out[0].p)[j];
        } else if (dt == AR_DT_I32) {
          got = ((int32_t *)c.a.out[0].p)[j];
        } else {
          /* u8: the inputs wrapped first (-7 is 249), then the result. */
          uint8_t ua = (uint8_t)xa[j / 2], ub = (uint8_t)xb[j % 2];
          w = ops[i] == AR_NN_ADD   ? (uint8_t)(ua + ub)
              : ops[i] == AR_NN_SUB ? (uint8_t)(ua - ub)
              : ops[i] == AR_NN_MUL ? (uint8_t)(ua * ub)
              : ops[i] == AR_NN_DIV ? (ub ? ua / ub : 0)
                                    : (uint8_t)(ub ? ua * ua : 1);
          got = ((uint8_t *)c.a.out[0].p)[j];
        }
        if (got != w)
          printf("# %s %s element %d: %lld, want %lld\n", ar_nn_op_name(ops[i]), ar_dtype_name(dt),
                 j, (long long)got, (long long)w);
        assert_true(got == w);
      }
      nn_case_fini(&c);
    }
  }
  /* Mixed types are refused, naming both. */
  ar_shape s[2] = {NN_SHAPE(2), NN_SHAPE(2)};
  ar_dtype dt[2] = {AR_DT_I64, AR_DT_F32};
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  ar_nn_attr a = attr_def();
  assert_int_equal(ar_nn_infer(AR_NN_ADD, &a, 2, s, dt, &sig, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "i64"));
  assert_non_null(strstr(err.msg, "f32"));
}

/* Distinct values at least 0.04 apart (a permutation of a grid): no two
 * in a window within +-h of each other, so the maximum never changes
 * under the finite differences. */
static void fill_distinct(nn_case *c, int input, void *p, int64_t n) {
  (void)c;
  (void)input;
  float *x = p;
  for (int64_t j = 0; j < n; j++)
    x[j] = -1.0f + 2.0f * (float)((j * 37) % n) / (float)n;
}

/* Max pooling with dilation 2: values by hand, gradient by differences. */
static void test_maxpool_dilation(void **state) {
  (void)state;
  ar_nn_attr a = attr_def();
  a.kernel[0] = a.kernel[1] = 2;
  a.dilation[0] = a.dilation[1] = 2;
  a.indices = true;
  nn_case c;
  nn_case_init(&c, AR_NN_MAXPOOL, &a);
  nn_case_input(&c, NN_SHAPE(1, 2, 5, 5), AR_DT_F32);
  c.fill = fill_distinct;
  assert_int_equal(nn_case_setup(&c), AR_OK);
  assert_int_equal(c.sig.out[0].d[2], 3);
  assert_int_equal(c.sig.n_out, 2);
  assert_int_equal(c.sig.out_dtype[1], AR_DT_I64);
  nn_check_grad(&c, &tol_smooth);
  c.training = false;
  c.a.training = false;
  nn_case_forward(&c);
  const float *x = c.a.in[0].p, *y = c.a.out[0].p;
  const int64_t *ix = c.a.out[1].p;
  for (int p = 0; p < 2; p++)
    for (int oh = 0; oh < 3; oh++)
      for (int ow = 0; ow < 3; ow++) {
        float m = -INFINITY;
        int64_t at = -1;
        for (int i = 0; i < 2; i++)
          for (int j = 0; j < 2; j++) {
            int64_t f = p * 25 + (oh + 2 * i) * 5 + (ow + 2 * j);
            if (at < 0 || x[f] > m) {
              m = x[f];
              at = f;
            }
          }
        assert_true(y[p * 9 + oh * 3 + ow] == m);
        assert_true(ix[p * 9 + oh * 3 + ow] == at);
      }
  nn_case_fini(&c);
}

/* Average pooling without the padding in the divisor: a corner window of
 * a 3x3 kernel with padding 1 holds 4 inputs. */
static void test_avgpool_exclude_pad(void **state) {
  (void)state;
  ar_nn_attr a = attr_def();
  a.kernel[0] = a.kernel[1] = 3;
  a.pad[0] = a.pad[1] = a.pad[2] = a.pad[3] = 1;
  a.exclude_pad = true;
  nn_case c;
  nn_case_init(&c, AR_NN_AVGPOOL, &a);
  nn_case_input(&c, NN_SHAPE(1, 2, 4, 4), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  nn_check_grad(&c, &tol_smooth);
  nn_case_forward(&c);
  const float *x = c.a.in[0].p, *y = c.a.out[0].p;
  assert_float_equal(y[0], (x[0] + x[1] + x[4] + x[5]) / 4.0f, 1e-6);
  float mid = 0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      mid += x[i * 4 + j];
  assert_float_equal(y[5], mid / 9.0f, 1e-6);
  nn_case_fini(&c);
}

/* The running variance moves by the biased batch variance with
 * var_biased (ONNX), by the unbiased one without (PyTorch). */
static void test_batchnorm_var_biased(void **state) {
  (void)state;
  for (int biased = 0; biased < 2; biased++) {
    ar_nn_attr a = attr_def();
    a.var_biased = biased;
    a.momentum = 1.0f; /* running = batch */
    nn_case c;
    nn_case_init(&c, AR_NN_BATCHNORM, &a);
    nn_case_input(&c, NN_SHAPE(4, 1, 1, 2), AR_DT_F32);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    nn_case_forward(&c);
    const float *x = c.a.in[0].p, *rv = c.a.state[1].p;
    double m = 0, v = 0;
    for (int j = 0; j < 8; j++)
      m += x[j] / 8.0;
    for (int j = 0; j < 8; j++)
      v += (x[j] - m) * (x[j] - m);
    assert_float_equal(rv[0], v / (biased ? 8.0 : 7.0), 1e-5);
    nn_case_fini(&c);
  }
}

/* Layer normalisation's statistics as outputs 1 and 2: the mean and rstd
 * a training forward saves in its aux (which test_nn_math checks by
 * hand), in evaluation too, and y as without them. */
static void test_layernorm_stats(void **state) {
  (void)state;
  nn_case plain, c;
  nn_case_init(&plain, AR_NN_LAYERNORM, NULL);
  nn_case_input(&plain, NN_SHAPE(3, 4), AR_DT_F32);
  assert_int_equal(nn_case_setup(&plain), AR_OK);
  ar_nn_attr a = attr_def();
  a.stats = true;
  nn_case_init(&c, AR_NN_LAYERNORM, &a);
  nn_case_input(&c, NN_SHAPE(3, 4), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  assert_int_equal(c.sig.n_out, 3);
  assert_int_equal(c.sig.out[1].nd, 1);
  assert_int_equal(c.sig.out[1].d[0], 3);
  memcpy(c.a.in[0].p, plain.a.in[0].p, 12 * sizeof(float));
  memcpy(c.a.param[0].p, plain.a.param[0].p, 4 * sizeof(float));
  memcpy(c.a.param[1].p, plain.a.param[1].p, 4 * sizeof(float));
  nn_case_forward(&plain);
  nn_case_forward(&c);
  assert_memory_equal(c.a.out[0].p, plain.a.out[0].p, 12 * sizeof(float));
  assert_memory_equal(c.a.out[1].p, c.a.aux[0].p, 3 * sizeof(float));
  assert_memory_equal(c.a.out[2].p, c.a.aux[1].p, 3 * sizeof(float));
  float mean[3], rstd[3];
  memcpy(mean, c.a.out[1].p, sizeof mean);
  memcpy(rstd, c.a.out[2].p, sizeof rstd);
  memset(c.a.out[1].p, 0, sizeof mean);
  memset(c.a.out[2].p, 0, sizeof rstd);
  c.a.training = false;
  nn_case_forward(&c);
  assert_memory_equal(c.a.out[1].p, mean, sizeof mean);
  assert_memory_equal(c.a.out[2].p, rstd, sizeof rstd);
  /* The backward is y's: the statistics take no gradient (their gout
   * zeroed, the objective is y's alone). */
  c.a.training = true;
  memset(c.a.gout[1].p, 0, sizeof mean);
  memset(c.a.gout[2].p, 0, sizeof rstd);
  nn_check_grad(&c, &tol_smooth);
  nn_case_fini(&plain);
  nn_case_fini(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_new),
      cmocka_unit_test(test_clip_edges),
      cmocka_unit_test(test_where),
      cmocka_unit_test(test_expand),
      cmocka_unit_test(test_cast),
      cmocka_unit_test(test_gather),
      cmocka_unit_test(test_int_binary),
      cmocka_unit_test(test_maxpool_dilation),
      cmocka_unit_test(test_avgpool_exclude_pad),
      cmocka_unit_test(test_batchnorm_var_biased),
      cmocka_unit_test(test_layernorm_stats),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
