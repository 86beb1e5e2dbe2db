/*
 * The host kernels of the nn group "shape" (runtime/device/host/nn_shape.c,
 * nn_embed.c, nn_attention.c): finite-difference gradients of every op and
 * variant, outputs and gradients against PyTorch
 * (tests/device/nn_torch_shape.py; skipped without torch), that backward
 * overwrites its gradients, the shape errors' messages, dropout's
 * statistics, and attention's results for 1 and 2 threads bit for bit.
 */
/* mkdtemp (nn_check.h) is POSIX 2008, hidden under -std=c11 without this. */
#define _DEFAULT_SOURCE
#include "nn_check.h"

#include <stdint.h>

#define TORCH "tests/device/nn_torch_shape.py"

/* Copy-like ops are linear with gradients of exactly gout: a tolerance far
 * below one element's size catches any misplaced element. */
static const nn_tol tol_exact = {1e-2, 1e-3, 1e-3, 64};
/* Attention: smooth, but float forward passes; errors of a wrong kernel
 * are of the size of the gradients themselves. */
static const nn_tol tol_attn = {1e-2, 2e-3, 1e-2, 48};

/* After the gradient check: a second backward into gradients filled with
 * garbage gives the same values (backward overwrites, never adds). */
static void check_overwrites(nn_case *c) {
  ar_nn_args *a = &c->a;
  void *keep_in[AR_NN_MAX_IO] = {0}, *keep_p[AR_NN_MAX_IO] = {0};
  nn_case_forward(c);
  nn_case_backward(c);
  for (int i = 0; i < a->n_in; i++)
    if (a->gin[i].p) {
      size_t b = (size_t)ar_shape_count(&a->in[i].shape) * 4;
      keep_in[i] = malloc(b);
      memcpy(keep_in[i], a->gin[i].p, b);
      memset(a->gin[i].p, 0x5a, b);
    }
  for (int i = 0; i < a->n_param; i++) {
    size_t b = (size_t)ar_shape_count(&a->param[i].shape) * 4;
    keep_p[i] = malloc(b);
    memcpy(keep_p[i], a->gparam[i].p, b);
    memset(a->gparam[i].p, 0x5a, b);
  }
  nn_case_backward(c);
  for (int i = 0; i < a->n_in; i++)
    if (keep_in[i]) {
      assert_memory_equal(keep_in[i], a->gin[i].p, (size_t)ar_shape_count(&a->in[i].shape) * 4);
      free(keep_in[i]);
    }
  for (int i = 0; i < a->n_param; i++) {
    assert_memory_equal(keep_p[i], a->gparam[i].p,
                        (size_t)ar_shape_count(&a->param[i].shape) * 4);
    free(keep_p[i]);
  }
}

/* Gradient check, overwrite check and PyTorch comparison of a case whose
 * inputs are set; frees it. */
static void check_case(nn_case *c, const nn_tol *tol, bool torch) {
  assert_int_equal(nn_case_setup(c), AR_OK);
  nn_check_grad(c, tol);
  check_overwrites(c);
  if (torch)
    nn_check_torch(c, TORCH, 1e-5, 1e-4);
  nn_case_fini(c);
}

/* The message of a failing infer (AR_INVALID), for the tests to search. */
static const char *infer_error(ar_nn_op op, const ar_nn_attr *attr, int n, const ar_shape *in,
                               const ar_dtype *dt) {
  static ar_err err;
  err = (ar_err)AR_ERR_INIT;
  ar_nn_sig sig;
  assert_int_equal(ar_nn_infer(op, attr, n, in, dt, &sig, &err), AR_INVALID);
  printf("# %s: %s\n", ar_nn_op_name(op), err.msg);
  return err.msg;
}

static void assert_mentions(const char *msg, const char *what) {
  if (!strstr(msg, what))
    fail_msg("the message \"%s\" does not mention \"%s\"", msg, what);
}

static const ar_dtype f32s[AR_NN_MAX_IO] = {AR_DT_F32, AR_DT_F32, AR_DT_F32, AR_DT_F32,
                                            AR_DT_F32, AR_DT_F32, AR_DT_F32, AR_DT_F32};

/* ---- concat, split, slice ------------------------------------------------ */

static void test_concat(void **state) {
  (void)state;
  /* Three inputs whose sizes along the axis differ (1, 2, 3). */
  const int axes[] = {0, 1, 2, -1, -3};
  for (size_t t = 0; t < sizeof axes / sizeof axes[0]; t++) {
    ar_nn_attr at;
    ar_nn_attr_defaults(&at);
    at.axis = axes[t];
    int ax = at.axis < 0 ? at.axis + 3 : at.axis;
    nn_case c;
    nn_case_init(&c, AR_NN_CONCAT, &at);
    for (int i = 0; i < 3; i++) {
      ar_shape s = NN_SHAPE(2, 3, 4);
      s.d[ax] = i + 1;
      nn_case_input(&c, s, AR_DT_F32);
    }
    assert_int_equal(nn_case_setup(&c), AR_OK);
    assert_int_equal(c.sig.out[0].d[ax], 6);
    nn_case_fini(&c);
    nn_case_init(&c, AR_NN_CONCAT, &at);
    for (int i = 0; i < 3; i++) {
      ar_shape s = NN_SHAPE(2, 3, 4);
      s.d[ax] = i + 1;
      nn_case_input(&c, s, AR_DT_F32);
    }
    /* PyTorch (a few seconds a run) on two of the axes. */
    check_case(&c, &tol_exact, axes[t] == 0 || axes[t] == -1);
  }
}

static void test_concat_errors(void **state) {
  (void)state;
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.axis = 1;
  ar_shape in[2] = {NN_SHAPE(4, 3, 8), NN_SHAPE(4, 5, 9)};
  const char *m = infer_error(AR_NN_CONCAT, &at, 2, in, f32s);
  assert_mentions(m, "4x3x8");
  assert_mentions(m, "4x5x9");
  assert_mentions(m, "axis 1");
  in[1] = NN_SHAPE(4, 5);
  m = infer_error(AR_NN_CONCAT, &at, 2, in, f32s);
  assert_mentions(m, "4x5");
  at.axis = 3;
  in[1] = NN_SHAPE(4, 3, 8);
  m = infer_error(AR_NN_CONCAT, &at, 2, in, f32s);
  assert_mentions(m, "axis 3");
}

static void test_split(void **state) {
  (void)state;
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.axis = 1;
  at.n_sizes = 3;
  at.sizes[0] = 2;
  at.sizes[1] = 3;
  at.sizes[2] = 1;
  nn_case c;
  nn_case_init(&c, AR_NN_SPLIT, &at);
  nn_case_input(&c, NN_SHAPE(2, 6, 3), AR_DT_F32);
  check_case(&c, &tol_exact, true);
  at.axis = -1;
  at.n_sizes = 2;
  at.sizes[0] = 1;
  at.sizes[1] = 4;
  nn_case_init(&c, AR_NN_SPLIT, &at);
  nn_case_input(&c, NN_SHAPE(3, 2, 5), AR_DT_F32);
  check_case(&c, &tol_exact, false);

  at.axis = 1;
  ar_shape in = NN_SHAPE(4, 10, 8);
  const char *m = infer_error(AR_NN_SPLIT, &at, 1, &in, f32s);
  assert_mentions(m, "4x10x8");
  assert_mentions(m, "1+4");
  assert_mentions(m, "not 10");
}

static void test_slice(void **state) {
  (void)state;
  const int64_t ranges[][3] = {{1, 1, 4}, {1, -3, 100}, {2, 0, 2}, {0, 1, -1}};
  for (size_t t = 0; t < sizeof ranges / sizeof ranges[0]; t++) {
    ar_nn_attr at;
    ar_nn_attr_defaults(&at);
    at.axis = (int)ranges[t][0];
    at.begin = ranges[t][1];
    at.end = ranges[t][2];
    nn_case c;
    nn_case_init(&c, AR_NN_SLICE, &at);
    nn_case_input(&c, NN_SHAPE(3, 5, 4), AR_DT_F32);
    check_case(&c, &tol_exact, t == 1);
  }
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.axis = 1;
  at.begin = 12;
  at.end = 15;
  ar_shape in = NN_SHAPE(4, 10);
  const char *m = infer_error(AR_NN_SLICE, &at, 1, &in, f32s);
  assert_mentions(m, "4x10");
  assert_mentions(m, "from 12 to 15");
}

/* ---- pad, reshape, flatten, transpose ----------------------------------- */

static void test_pad(void **state) {
  (void)state;
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.scalar = 0.5f;
  const int64_t before[3] = {0, 1, 2}, after[3] = {1, 0, 3};
  for (int i = 0; i < 3; i++) {
    at.pad_nd[i] = before[i];
    at.pad_nd[AR_NN_MAX_DIMS + i] = after[i];
  }
  nn_case c;
  nn_case_init(&c, AR_NN_PAD, &at);
  nn_case_input(&c, NN_SHAPE(2, 3, 4), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  ar_shape want = NN_SHAPE(3, 4, 9);
  assert_true(ar_shape_eq(&c.sig.out[0], &want));
  nn_case_forward(&c);
  const float *y = c.a.out[0].p, *x = c.a.in[0].p;
  assert_true(y[0] == 0.5f);                         /* a pad */
  assert_true(y[(0 * 4 + 1) * 9 + 2] == x[0]);       /* x[0,0,0] */
  assert_true(y[(1 * 4 + 3) * 9 + 5] == x[23]);      /* x[1,2,3] */
  assert_true(y[(2 * 4 + 3) * 9 + 8] == 0.5f);
  nn_case_fini(&c);
  nn_case_init(&c, AR_NN_PAD, &at);
  nn_case_input(&c, NN_SHAPE(2, 3, 4), AR_DT_F32);
  check_case(&c, &tol_exact, true);

  at.pad_nd[AR_NN_MAX_DIMS + 1] = -1;
  ar_shape in = NN_SHAPE(2, 3, 4);
  const char *m = infer_error(AR_NN_PAD, &at, 1, &in, f32s);
  assert_mentions(m, "2x3x4");
  assert_mentions(m, "dim 1");
  at.pad_nd[AR_NN_MAX_DIMS + 1] = 0;
  at.pad_nd[4] = 2;
  m = infer_error(AR_NN_PAD, &at, 1, &in, f32s);
  assert_mentions(m, "dim 4");
}

static void test_reshape_flatten(void **state) {
  (void)state;
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.shape = NN_SHAPE(0, -1, 2);
  nn_case c;
  nn_case_init(&c, AR_NN_RESHAPE, &at);
  nn_case_input(&c, NN_SHAPE(2, 3, 4), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  ar_shape want = NN_SHAPE(2, 6, 2);
  assert_true(ar_shape_eq(&c.sig.out[0], &want));
  nn_case_fini(&c);
  nn_case_init(&c, AR_NN_RESHAPE, &at);
  nn_case_input(&c, NN_SHAPE(2, 3, 4), AR_DT_F32);
  check_case(&c, &tol_exact, true);

  nn_case_init(&c, AR_NN_FLATTEN, NULL);
  nn_case_input(&c, NN_SHAPE(2, 3, 2, 2), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  want = NN_SHAPE(2, 12);
  assert_true(ar_shape_eq(&c.sig.out[0], &want));
  nn_case_fini(&c);
  nn_case_init(&c, AR_NN_FLATTEN, NULL);
  nn_case_input(&c, NN_SHAPE(2, 3, 2, 2), AR_DT_F32);
  check_case(&c, &tol_exact, false);

  ar_shape in = NN_SHAPE(4, 3, 8);
  at.shape = NN_SHAPE(5, 20);
  const char *m = infer_error(AR_NN_RESHAPE, &at, 1, &in, f32s);
  assert_mentions(m, "4x3x8");
  assert_mentions(m, "5x20");
  at.shape = NN_SHAPE(5, -1);
  m = infer_error(AR_NN_RESHAPE, &at, 1, &in, f32s);
  assert_mentions(m, "5x-1");
  at.shape = NN_SHAPE(-1, -1);
  m = infer_error(AR_NN_RESHAPE, &at, 1, &in, f32s);
  assert_mentions(m, "only one");
}

static void test_transpose(void **state) {
  (void)state;
  const int perms3[][3] = {{1, 0, 2}, {2, 0, 1}, {0, 2, 1}, {2, 1, 0}};
  for (size_t t = 0; t < sizeof perms3 / sizeof perms3[0]; t++) {
    ar_nn_attr at;
    ar_nn_attr_defaults(&at);
    memcpy(at.perm, perms3[t], sizeof perms3[t]);
    nn_case c;
    nn_case_init(&c, AR_NN_TRANSPOSE, &at);
    nn_case_input(&c, NN_SHAPE(2, 3, 4), AR_DT_F32);
    check_case(&c, &tol_exact, t == 1);
  }
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  const int p4[4] = {3, 1, 0, 2};
  memcpy(at.perm, p4, sizeof p4);
  nn_case c;
  nn_case_init(&c, AR_NN_TRANSPOSE, &at);
  nn_case_input(&c, NN_SHAPE(2, 3, 4, 5), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  ar_shape want = NN_SHAPE(5, 3, 2, 4);
  assert_true(ar_shape_eq(&c.sig.out[0], &want));
  nn_case_forward(&c);
  /* y[e, b, a, c] = x[a, b, c, e]: x[1, 2, 3, 4] at y[4, 2, 1, 3]. */
  const float *x = c.a.in[0].p, *y = c.a.out[0].p;
  assert_true(y[((4 * 3 + 2) * 2 + 1) * 4 + 3] == x[((1 * 3 + 2) * 4 + 3) * 5 + 4]);
  nn_case_fini(&c);
  nn_case_init(&c, AR_NN_TRANSPOSE, &at);
  nn_case_input(&c, NN_SHAPE(2, 3, 4, 5), AR_DT_F32);
  check_case(&c, &tol_exact, true);

  at.perm[0] = 0;
  at.perm[1] = 2;
  at.perm[2] = 2;
  ar_shape in = NN_SHAPE(4, 3, 8);
  const char *m = infer_error(AR_NN_TRANSPOSE, &at, 1, &in, f32s);
  assert_mentions(m, "4x3x8");
  assert_mentions(m, "0,2,2");
}

/* ---- embedding, posembed, mask ------------------------------------------ */

static void test_embedding(void **state) {
  (void)state;
  const ar_dtype types[2] = {AR_DT_I64, AR_DT_I32};
  for (int t = 0; t < 2; t++) {
    ar_nn_attr at;
    ar_nn_attr_defaults(&at);
    at.vocab = 7;
    at.out = 6;
    nn_case c;
    nn_case_init(&c, AR_NN_EMBEDDING, &at);
    /* 15 ids from 5 values: repeats, and rows of the table no id uses. */
    c.int_hi = 5;
    nn_case_input(&c, NN_SHAPE(3, 5), types[t]);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    assert_int_equal(c.sig.no_grad, 1u);
    assert_true(c.sig.param_init[0] == AR_NN_INIT_NORMAL && c.sig.param_std[0] == 1.0f);
    ar_shape want = NN_SHAPE(3, 5, 6);
    assert_true(ar_shape_eq(&c.sig.out[0], &want));
    /* Every table element is checked: repeated ids sum, unused rows are 0. */
    nn_tol all = tol_exact;
    all.samples = 7 * 6;
    nn_check_grad(&c, &all);
    check_overwrites(&c);
    if (types[t] == AR_DT_I64)
      nn_check_torch(&c, TORCH, 1e-6, 1e-6);
    nn_case_fini(&c);
  }
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.vocab = 0;
  at.out = 4;
  ar_shape in = NN_SHAPE(2, 5);
  ar_dtype i64 = AR_DT_I64;
  const char *m = infer_error(AR_NN_EMBEDDING, &at, 1, &in, &i64);
  assert_mentions(m, "2x5");
  assert_mentions(m, "vocab 0");
  at.vocab = 5;
  m = infer_error(AR_NN_EMBEDDING, &at, 1, &in, f32s);
  assert_mentions(m, "f32");
}

static void test_posembed(void **state) {
  (void)state;
  nn_case c;
  nn_case_init(&c, AR_NN_POSEMBED, NULL);
  nn_case_input(&c, NN_SHAPE(3, 4, 6), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  ar_shape want = NN_SHAPE(4, 6);
  assert_true(ar_shape_eq(&c.sig.param[0], &want));
  assert_true(c.sig.param_init[0] == AR_NN_INIT_NORMAL && c.sig.param_std[0] == 0.02f);
  nn_case_fini(&c);
  nn_case_init(&c, AR_NN_POSEMBED, NULL);
  nn_case_input(&c, NN_SHAPE(3, 4, 6), AR_DT_F32);
  check_case(&c, &tol_exact, true);
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  ar_shape in = NN_SHAPE(3, 24);
  assert_mentions(infer_error(AR_NN_POSEMBED, &at, 1, &in, f32s), "3x24");
}

static void test_mask(void **state) {
  (void)state;
  const ar_dtype types[2] = {AR_DT_I64, AR_DT_I32};
  for (int t = 0; t < 2; t++) {
    ar_nn_attr at;
    ar_nn_attr_defaults(&at);
    at.pad_id = 2;
    nn_case c;
    nn_case_init(&c, AR_NN_MASK, &at);
    nn_case_input(&c, NN_SHAPE(3, 7), types[t]);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    assert_int_equal(c.sig.no_grad, 1u);
    assert_true(c.sig.out_dtype[0] == AR_DT_F32);
    nn_case_forward(&c);
    const float *y = c.a.out[0].p;
    int zeros = 0;
    for (int i = 0; i < 21; i++) {
      int64_t id = types[t] == AR_DT_I64 ? ((int64_t *)c.a.in[0].p)[i]
                                         : ((int32_t *)c.a.in[0].p)[i];
      assert_true(y[i] == (id != 2 ? 1.0f : 0.0f));
      zeros += id == 2;
    }
    assert_true(zeros > 0 && zeros < 21);
    /* Forward only: the output takes no gradient. */
    c.training = c.a.training = false;
    if (types[t] == AR_DT_I64)
      nn_check_torch(&c, TORCH, 0, 0);
    nn_case_fini(&c);
  }
}

/* ---- dropout -------------------------------------------------------------- */

static void test_dropout_grad(void **state) {
  (void)state;
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.p = 0.4f;
  nn_case c;
  nn_case_init(&c, AR_NN_DROPOUT, &at);
  nn_case_input(&c, NN_SHAPE(4, 5, 6), AR_DT_F32);
  check_case(&c, &tol_exact, false);

  ar_shape in = NN_SHAPE(4, 5);
  at.p = 1.0f;
  assert_mentions(infer_error(AR_NN_DROPOUT, &at, 1, &in, f32s), "p 1");
  at.p = -0.1f;
  assert_mentions(infer_error(AR_NN_DROPOUT, &at, 1, &in, f32s), "4x5");
}

static void fill_ones(nn_case *c, int input, void *p, int64_t n) {
  (void)c;
  (void)input;
  for (int64_t i = 0; i < n; i++)
    ((float *)p)[i] = 1.0f;
}

static void test_dropout_stats(void **state) {
  (void)state;
  const float ps[3] = {0.1f, 0.3f, 0.75f};
  for (int t = 0; t < 3; t++) {
    ar_nn_attr at;
    ar_nn_attr_defaults(&at);
    at.p = ps[t];
    nn_case c;
    nn_case_init(&c, AR_NN_DROPOUT, &at);
    c.fill = fill_ones;
    const int64_t n = 200000;
    nn_case_input(&c, NN_SHAPE(100, 2000), AR_DT_F32);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    assert_true(c.sig.aux_dtype[0] == AR_DT_U8);
    nn_case_forward(&c);
    const float *y = c.a.out[0].p;
    const uint8_t *mask = c.a.aux[0].p;
    const float scale = 1.0f / (1.0f - ps[t]);
    int64_t kept = 0, runs = 0;
    for (int64_t i = 0; i < n; i++) {
      assert_true(mask[i] <= 1);
      assert_true(y[i] == (mask[i] ? scale : 0.0f));
      kept += mask[i];
      runs += i && mask[i] != mask[i - 1];
    }
    /* Binomial: the standard deviation of the kept fraction is below
     * 0.0011 here; 5 of them. */
    double frac = (double)kept / (double)n, q = 1.0 - ps[t];
    printf("# dropout p %.2f: kept %.4f\n", (double)ps[t], frac);
    assert_true(fabs(frac - q) < 0.0055);
    /* Independent draws change value 2 p (1-p) of the time. */
    assert_true(fabs((double)runs / (double)n - 2 * ps[t] * q) < 0.01);
    /* The same seed draws the same mask; another seed another one. */
    uint8_t *first = malloc((size_t)n);
    memcpy(first, mask, (size_t)n);
    memset(c.a.aux[0].p, 7, (size_t)n);
    nn_case_forward(&c);
    assert_memory_equal(first, c.a.aux[0].p, (size_t)n);
    c.a.seed = 8;
    nn_case_forward(&c);
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++)
      same += first[i] == mask[i];
    assert_true(fabs((double)same / (double)n - (q * q + ps[t] * ps[t])) < 0.01);
    /* Evaluation: identity, and the mask is not written. */
    memcpy(c.a.aux[0].p, first, (size_t)n);
    c.a.training = false;
    nn_case_forward(&c);
    for (int64_t i = 0; i < n; i++)
      assert_true(y[i] == 1.0f);
    assert_memory_equal(first, c.a.aux[0].p, (size_t)n);
    free(first);
    nn_case_fini(&c);
  }
}

/* ---- attention ------------------------------------------------------------ */

/* x uniform; the mask pads positions 1 and T-1 of sequence 1 and the last
 * position of sequence 2 (key 0 always stays, so every causal query has a
 * key). */
static void fill_attention(nn_case *c, int input, void *p, int64_t n) {
  float *f = p;
  if (input == 0) {
    for (int64_t i = 0; i < n; i++)
      f[i] = 2.0f * nn__uniform(&c->seed) - 1.0f;
    return;
  }
  int64_t t = c->in_shape[1].d[1];
  for (int64_t i = 0; i < n; i++)
    f[i] = 1.0f;
  if (c->in_shape[1].d[0] > 1) {
    f[t + 1] = 0.0f;
    f[t + t - 1] = 0.0f;
  }
  if (c->in_shape[1].d[0] > 2)
    f[2 * t + t - 1] = 0.0f;
}

static void attention_case(nn_case *c, int n, int t, int d, int heads, bool mask, bool causal) {
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.heads = heads;
  at.causal = causal;
  nn_case_init(c, AR_NN_ATTENTION, &at);
  c->fill = fill_attention;
  nn_case_input(c, NN_SHAPE(n, t, d), AR_DT_F32);
  if (mask)
    nn_case_input(c, NN_SHAPE(n, t), AR_DT_F32);
}

static void test_attention_grad(void **state) {
  (void)state;
  const struct {
    int n, t, d, heads;
    bool mask, causal;
  } v[] = {{2, 5, 8, 2, false, false}, {3, 5, 8, 2, true, false}, {2, 6, 8, 4, false, true},
           {3, 5, 6, 3, true, true},   {1, 4, 4, 1, false, false}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    printf("# attention N %d T %d D %d heads %d mask %d causal %d\n", v[i].n, v[i].t, v[i].d,
           v[i].heads, v[i].mask, v[i].causal);
    nn_case c;
    attention_case(&c, v[i].n, v[i].t, v[i].d, v[i].heads, v[i].mask, v[i].causal);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    assert_int_equal(c.sig.n_param, 8);
    assert_int_equal(c.sig.no_grad, v[i].mask ? 2u : 0u);
    if (v[i].mask)
      assert_null(c.a.gin[1].p); /* the mask takes no gradient */
    nn_check_grad(&c, &tol_attn);
    check_overwrites(&c);
    /* Masked keys and, under causal, later keys get probability 0. */
    const float *pr = c.a.aux[3].p, *mk = v[i].mask ? c.a.in[1].p : NULL;
    for (int64_t b = 0; b < v[i].n; b++)
      for (int64_t h = 0; h < v[i].heads; h++)
        for (int64_t q = 0; q < v[i].t; q++) {
          double s = 0;
          for (int64_t k = 0; k < v[i].t; k++) {
            float pv = pr[((b * v[i].heads + h) * v[i].t + q) * v[i].t + k];
            if ((mk && mk[b * v[i].t + k] == 0.0f) || (v[i].causal && k > q))
              assert_true(pv == 0.0f);
            s += pv;
          }
          assert_true(fabs(s - 1.0) < 1e-5);
        }
    if (v[i].mask)
      nn_check_torch(&c, TORCH, 1e-5, 1e-4);
    nn_case_fini(&c);
  }
}

/* Evaluation (scratch from the workspace, no aux) gives the training
 * forward's output; one and two threads agree bit for bit on a size that
 * splits the heads among threads. */
static void test_attention_eval_threads(void **state) {
  (void)state;
  ar_host_cpus cpus;
  ar_host_cpus_get(&cpus);
  if (cpus.cpus < 2)
    skip(); /* a one-CPU mask caps the second device at one thread */
  /* The same case on a one-thread and a two-thread device. */
  nn_case one, two;
  attention_case(&one, 4, 24, 32, 4, true, true);
  attention_case(&two, 4, 24, 32, 4, true, true);
  nn_case *both[2] = {&one, &two};
  for (int k = 0; k < 2; k++) {
    ar_device_opts o = AR_DEVICE_OPTS_INIT;
    o.threads = k + 1;
    o.pin = false;
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_device_open("host", &o, &both[k]->dev, &err), AR_OK);
  }
  assert_int_equal(nn_case_setup(&one), AR_OK);
  assert_int_equal(nn_case_setup(&two), AR_OK);
  nn_case_forward(&one);
  nn_case_backward(&one);
  nn_case_forward(&two);
  nn_case_backward(&two);
  assert_int_equal(two.a.threads, 2);
  size_t ob = (size_t)ar_shape_count(&one.a.out[0].shape) * 4;
  assert_memory_equal(one.a.out[0].p, two.a.out[0].p, ob);
  assert_memory_equal(one.a.gin[0].p, two.a.gin[0].p, ob);
  for (int i = 0; i < 8; i++)
    assert_memory_equal(one.a.gparam[i].p, two.a.gparam[i].p,
                        (size_t)ar_shape_count(&one.a.param[i].shape) * 4);
  float *train_out = malloc(ob);
  memcpy(train_out, two.a.out[0].p, ob);
  for (int i = 0; i < two.a.n_aux; i++)
    memset(two.a.aux[i].p, 0x5a,
           (size_t)ar_shape_count(&two.a.aux[i].shape) * ar_dtype_size(two.a.aux[i].dtype));
  two.a.training = false;
  memset(two.a.out[0].p, 0, ob);
  nn_case_forward(&two);
  assert_memory_equal(train_out, two.a.out[0].p, ob);
  const uint8_t *q = two.a.aux[0].p;
  assert_true(q[0] == 0x5a && q[1] == 0x5a);
  free(train_out);
  nn_case_fini(&one);
  nn_case_fini(&two);
}

static void test_attention_errors(void **state) {
  (void)state;
  ar_nn_attr at;
  ar_nn_attr_defaults(&at);
  at.heads = 4;
  ar_shape in[2] = {NN_SHAPE(2, 5, 30), NN_SHAPE(2, 5)};
  const char *m = infer_error(AR_NN_ATTENTION, &at, 1, in, f32s);
  assert_mentions(m, "D 30 is not divisible by heads 4");
  assert_mentions(m, "2x5x30");
  at.heads = 3;
  in[1] = NN_SHAPE(2, 6);
  m = infer_error(AR_NN_ATTENTION, &at, 2, in, f32s);
  assert_mentions(m, "2x6");
  assert_mentions(m, "2x5x30");
  in[0] = NN_SHAPE(10, 30);
  m = infer_error(AR_NN_ATTENTION, &at, 1, in, f32s);
  assert_mentions(m, "10x30");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_concat_errors),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_pad),
      cmocka_unit_test(test_reshape_flatten),
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_embedding),
      cmocka_unit_test(test_posembed),
      cmocka_unit_test(test_mask),
      cmocka_unit_test(test_dropout_grad),
      cmocka_unit_test(test_dropout_stats),
      cmocka_unit_test(test_attention_grad),
      cmocka_unit_test(test_attention_eval_threads),
      cmocka_unit_test(test_attention_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
