/*
 * The host kernels of the nn ops in group "conv" (runtime/device/host/
 * nn_conv.c, nn_pool.c, nn_bnorm.c): finite-difference gradients of every
 * op and variant, outputs, state and gradients against PyTorch
 * (tests/device/nn_torch_conv.py; skipped without torch), the shape
 * errors' messages, and that backward overwrites what it is given.
 *
 * Each convolution case runs twice: with the layouts oneDNN chooses
 * (blocked, reordered through the workspace) and with plain NCHW/OIHW
 * (ACCELRT_CONV_LAYOUT=plain), so both paths of the kernel are checked.
 *
 * NN_CONV_BENCH=1 in the environment adds a timing of the two layouts on
 * Fashion-MNIST-sized convolutions, and of batch normalisation and max
 * pooling at the same shapes (printed, not asserted).
 */
/* mkdtemp, setenv (POSIX 2008). */
#define _GNU_SOURCE
#include "nn_check.h"

#include "accelrt/nn.h"

#include <stdint.h>
#include <time.h>

#define TORCH_SCRIPT "tests/device/nn_torch_conv.py"

/* Tight enough that a gradient off by a factor, a shifted index or a
 * missing term fails (gradients here are O(0.1..10)); loose enough for
 * f32 central differences with h = 1e-2. */
static const nn_tol tol = {1e-2, 5e-3, 1e-2, 32};

enum {
  EVAL = 1,
  SEPARATED = 2,
  NO_GIN = 4,
  EVAL_OF_TRAINED = 8,
  KINK_FREE = 16,
  TORCH_ONLY = 32,
  TORCH = 64,
  TIES = 128
};

/* A fused relu has a kink at 0: a central difference across it is off by
 * up to |gout| / 2, and with h = 1e-2 some of a few hundred outputs sit
 * that close to 0.  KINK_FREE keeps every pre-activation at least ~0.2
 * away from 0 under any +-h perturbation: channels alternate between a
 * large positive and a large negative offset (conv: bias +-1 with small
 * weights and positive inputs; batchnorm: beta +-2.5 with gamma < 0.8),
 * so the backward must pass the full gradient through the positive
 * channels and none through the negative ones.  The element-wise mask is
 * checked against PyTorch's exact gradients. */
static void kink_free(nn_case *c) {
  ar_nn_args *a = &c->a;
  int64_t nch = ar_shape_count(&a->param[1].shape);
  float *p0 = a->param[0].p, *p1 = a->param[1].p;
  if (c->op == AR_NN_CONV2D) {
    int64_t nw = ar_shape_count(&a->param[0].shape);
    float big = 0;
    for (int64_t j = 0; j < nw; j++)
      big = fmaxf(big, fabsf(p0[j]));
    int64_t fan = nw / nch;
    /* |sum w x| <= fan * (0.7 / (1.5 fan)) * 1.5 = 0.7 < 1. */
    for (int64_t j = 0; j < nw; j++)
      p0[j] *= 0.7f / (1.5f * (float)fan * big);
  } else {
    for (int64_t j = 0; j < nch; j++)
      p0[j] = 0.4f + 0.3f * (float)(j % 3) / 2.0f;
  }
  for (int64_t j = 0; j < nch; j++)
    p1[j] = (j % 2 ? -1.0f : 1.0f) * (c->op == AR_NN_CONV2D ? 1.0f : 2.5f);
}

/* Values 0.05 apart in a scrambled order: a perturbation of +-h never
 * changes which element of a pooling window is the largest. */
static void fill_separated(nn_case *c, int input, void *p, int64_t n) {
  (void)c;
  (void)input;
  float *x = p;
  int64_t m = n % 37 ? 37 : 41;
  for (int64_t j = 0; j < n; j++)
    x[j] = 0.05f * (float)((j * m) % n) - 0.025f * (float)n;
}

/* Three levels only: most pooling windows hold several equal maxima. */
static void fill_ties(nn_case *c, int input, void *p, int64_t n) {
  (void)input;
  float *x = p;
  for (int64_t j = 0; j < n; j++)
    x[j] = (float)(nn__rand(&c->seed) % 3u) - 1.0f;
}

/* NaN in every gradient buffer: a backward that adds instead of
 * overwriting (or skips an element) leaves NaN behind. */
static void poison_grads(nn_case *c) {
  for (int i = 0; i < c->a.n_in; i++)
    if (c->a.gin[i].p)
      for (int64_t j = 0; j < ar_shape_count(&c->a.gin[i].shape); j++)
        ((float *)c->a.gin[i].p)[j] = NAN;
  for (int i = 0; i < c->a.n_param; i++)
    for (int64_t j = 0; j < ar_shape_count(&c->a.gparam[i].shape); j++)
      ((float *)c->a.gparam[i].p)[j] = NAN;
}

static void assert_finite(const ar_tref *t) {
  for (int64_t j = 0; j < ar_shape_count(&t->shape); j++)
    assert_true(isfinite(((const float *)t->p)[j]));
}

/* One case: gradients (training), then PyTorch on the same values. */
static void run_case(ar_nn_op op, const ar_nn_attr *at, ar_shape x, int flags) {
  nn_case c;
  nn_case_init(&c, op, at);
  nn_case_input(&c, x, AR_DT_F32);
  if (flags & SEPARATED)
    c.fill = fill_separated;
  if (flags & TIES)
    c.fill = fill_ties;
  if (flags & EVAL)
    c.training = false;
  if (flags & KINK_FREE)
    c.positive[0] = op == AR_NN_CONV2D;
  assert_int_equal(nn_case_setup(&c), AR_OK);
  if (flags & KINK_FREE)
    kink_free(&c);
  if (flags & NO_GIN) {
    free(c.a.gin[0].p);
    c.a.gin[0].p = NULL;
  }
  if (c.training) {
    poison_grads(&c);
    nn_case_forward(&c);
    nn_case_backward(&c);
    if (c.a.gin[0].p)
      assert_finite(&c.a.gin[0]);
    for (int i = 0; i < c.a.n_param; i++)
      assert_finite(&c.a.gparam[i]);
    if ((c.a.gin[0].p || c.a.n_param) && !(flags & TORCH_ONLY))
      nn_check_grad(&c, &tol);
  }
  if (flags & EVAL_OF_TRAINED) {
    /* Prepared for training, run in evaluation (a validation pass). */
    c.training = false;
    c.a.training = false;
  }
  /* PyTorch costs a second and a half per case (its import): the cases
   * that pin down a convention (padding, dilation, groups, divisors,
   * statistics) ask for it; finite differences check the rest. */
  if (flags & (TORCH | TORCH_ONLY))
    nn_check_torch(&c, TORCH_SCRIPT, 1e-4, 1e-4);
  nn_case_fini(&c);
}

static void conv_both(const ar_nn_attr *at, ar_shape x, int flags) {
  unsetenv("ACCELRT_CONV_LAYOUT");
  run_case(AR_NN_CONV2D, at, x, flags);
  setenv("ACCELRT_CONV_LAYOUT", "plain", 1);
  if (!(flags & TORCH_ONLY))
    run_case(AR_NN_CONV2D, at, x, flags & ~TORCH);
  unsetenv("ACCELRT_CONV_LAYOUT");
}

static ar_nn_attr conv_attr(int64_t out, int64_t k, int64_t stride, int64_t pad) {
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.out = out;
  a.kernel[0] = a.kernel[1] = k;
  a.stride[0] = a.stride[1] = stride;
  for (int i = 0; i < 4; i++)
    a.pad[i] = pad;
  return a;
}

/* ---- conv ---------------------------------------------------------------- */

static void test_conv_basic(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(4, 3, 1, 1);
  conv_both(&a, NN_SHAPE(2, 3, 6, 6), TORCH);
}

static void test_conv_stride2(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(5, 3, 2, 1);
  conv_both(&a, NN_SHAPE(2, 3, 7, 8), 0);
}

static void test_conv_rect_asym_pad(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(3, 3, 1, 0);
  a.kernel[1] = 2;
  a.stride[1] = 2;
  a.pad[0] = 2;
  a.pad[1] = 0;
  a.pad[2] = 1;
  a.pad[3] = 1;
  conv_both(&a, NN_SHAPE(2, 2, 5, 7), TORCH);
}

static void test_conv_dilation2(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(4, 3, 1, 2);
  a.dilation[0] = a.dilation[1] = 2;
  conv_both(&a, NN_SHAPE(2, 3, 7, 7), TORCH);
}

static void test_conv_groups2(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(6, 3, 1, 1);
  a.groups = 2;
  conv_both(&a, NN_SHAPE(2, 4, 6, 5), TORCH);
}

static void test_conv_no_bias(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(4, 3, 2, 0);
  a.bias = false;
  conv_both(&a, NN_SHAPE(2, 3, 7, 7), 0);
}

static void test_conv_relu(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(4, 3, 1, 1);
  a.act = AR_ACT_RELU;
  conv_both(&a, NN_SHAPE(2, 3, 6, 6), KINK_FREE);
  a.groups = 2;
  a.stride[0] = 2;
  conv_both(&a, NN_SHAPE(2, 2, 6, 6), KINK_FREE);
  /* Random pre-activations, element-wise mask: PyTorch only. */
  if (nn_torch_available()) {
    a.groups = 1;
    a.stride[0] = 1;
    conv_both(&a, NN_SHAPE(2, 3, 6, 6), TORCH_ONLY);
  }
}

static void test_conv_1x1_wide_channels(void **st) {
  (void)st;
  /* 16 channels: the blocked layouts (8c/16c) without padding blocks. */
  ar_nn_attr a = conv_attr(16, 1, 1, 0);
  conv_both(&a, NN_SHAPE(2, 16, 4, 4), 0);
  a = conv_attr(16, 3, 1, 1);
  conv_both(&a, NN_SHAPE(1, 16, 5, 5), 0);
}

static void test_conv_eval(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(4, 3, 1, 1);
  a.act = AR_ACT_RELU;
  conv_both(&a, NN_SHAPE(2, 3, 6, 6), EVAL | TORCH);
  conv_both(&a, NN_SHAPE(2, 3, 6, 6), EVAL_OF_TRAINED | KINK_FREE | TORCH);
}

/* The first layer: no input gradient wanted, the weights' still right. */
static void test_conv_no_input_grad(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(4, 3, 1, 1);
  a.act = AR_ACT_RELU;
  conv_both(&a, NN_SHAPE(2, 3, 6, 6), NO_GIN | KINK_FREE);
}

/* One thread and several (three asked for; the device keeps to the CPUs
 * the process may use) give the same outputs and gradients: primitives
 * made and run with a team split the work without losing any of it. */
static void threads_case(ar_nn_op op, const ar_nn_attr *at, ar_shape x, int threads, float **out) {
  nn_case c;
  nn_case_init(&c, op, at);
  nn_case_input(&c, x, AR_DT_F32);
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = threads;
  o.pin = false;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", &o, &c.dev, &err), AR_OK);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  nn_case_forward(&c);
  nn_case_backward(&c);
  int64_t ny = ar_shape_count(&c.a.out[0].shape), nx = ar_shape_count(&x);
  int64_t nw = ar_shape_count(&c.a.param[0].shape);
  *out = malloc((size_t)(ny + nx + nw) * sizeof(float));
  memcpy(*out, c.a.out[0].p, (size_t)ny * 4);
  memcpy(*out + ny, c.a.gin[0].p, (size_t)nx * 4);
  memcpy(*out + ny + nx, c.a.gparam[0].p, (size_t)nw * 4);
  nn_case_fini(&c);
}

static void test_threads(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(24, 3, 1, 1);
  ar_shape x = NN_SHAPE(8, 16, 12, 12);
  float *one, *three;
  threads_case(AR_NN_CONV2D, &a, x, 1, &one);
  threads_case(AR_NN_CONV2D, &a, x, 3, &three);
  int64_t n = 8 * 24 * 144 + 8 * 16 * 144 + 24 * 16 * 9;
  for (int64_t j = 0; j < n; j++)
    assert_float_equal(one[j], three[j], 1e-3 * (1.0 + fabs(one[j])));
  free(one);
  free(three);
  ar_nn_attr_defaults(&a);
  threads_case(AR_NN_BATCHNORM, &a, x, 1, &one);
  threads_case(AR_NN_BATCHNORM, &a, x, 3, &three);
  n = 2 * 8 * 16 * 144 + 16;
  for (int64_t j = 0; j < n; j++)
    assert_float_equal(one[j], three[j], 1e-4 * (1.0 + fabs(one[j])));
  free(one);
  free(three);
}

/* ---- pooling ------------------------------------------------------------- */

static ar_nn_attr pool_attr(int64_t k, int64_t stride, int64_t pad) {
  ar_nn_attr a = conv_attr(0, k, stride, pad);
  return a;
}

static void test_maxpool(void **st) {
  (void)st;
  ar_nn_attr a = pool_attr(2, 2, 0);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 3, 6, 6), SEPARATED);
  a = pool_attr(3, 2, 1);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 3, 7, 7), SEPARATED | TORCH);
  /* Overlapping windows (stride 1): one input feeds several maxima. */
  a = pool_attr(3, 1, 1);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(1, 2, 5, 6), SEPARATED);
  a = pool_attr(2, 2, 0);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 3, 6, 6), SEPARATED | EVAL);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 3, 6, 6), SEPARATED | EVAL_OF_TRAINED | TORCH);
}

static void test_avgpool(void **st) {
  (void)st;
  ar_nn_attr a = pool_attr(2, 2, 0);
  run_case(AR_NN_AVGPOOL, &a, NN_SHAPE(2, 3, 6, 6), 0);
  /* Padding counted in the divisor (count_include_pad). */
  a = pool_attr(3, 2, 1);
  run_case(AR_NN_AVGPOOL, &a, NN_SHAPE(2, 3, 7, 8), TORCH);
  a = pool_attr(3, 1, 1);
  run_case(AR_NN_AVGPOOL, &a, NN_SHAPE(1, 2, 5, 5), EVAL | TORCH);
}

static void test_global_avgpool(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  run_case(AR_NN_GAVGPOOL, &a, NN_SHAPE(3, 4, 5, 6), TORCH);
  run_case(AR_NN_GAVGPOOL, &a, NN_SHAPE(2, 3, 1, 1), 0);
}

/* Everything one training forward and backward of a pooling or
 * batchnorm case gives (out, aux, gin, gparam), concatenated as bytes,
 * under ACCELRT_POOL_PATH=path (NULL: unset) on `threads` threads. */
static size_t run_bytes(ar_nn_op op, const ar_nn_attr *at, ar_shape x, int flags,
                        const char *path, int threads, unsigned char **out) {
  if (path)
    setenv("ACCELRT_POOL_PATH", path, 1);
  else
    unsetenv("ACCELRT_POOL_PATH");
  nn_case c;
  nn_case_init(&c, op, at);
  nn_case_input(&c, x, AR_DT_F32);
  if (flags & TIES)
    c.fill = fill_ties;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = threads;
  o.pin = false;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", &o, &c.dev, &err), AR_OK);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  unsetenv("ACCELRT_POOL_PATH");
  poison_grads(&c);
  nn_case_forward(&c);
  nn_case_backward(&c);
  const ar_tref *t[4 * AR_NN_MAX_IO];
  int nt = 0;
  for (int i = 0; i < c.a.n_out; i++)
    t[nt++] = &c.a.out[i];
  for (int i = 0; i < c.a.n_aux; i++)
    t[nt++] = &c.a.aux[i];
  for (int i = 0; i < c.a.n_in; i++)
    t[nt++] = &c.a.gin[i];
  for (int i = 0; i < c.a.n_param; i++)
    t[nt++] = &c.a.gparam[i];
  size_t n = 0;
  for (int i = 0; i < nt; i++)
    n += (size_t)ar_shape_count(&t[i]->shape) * ar_dtype_size(t[i]->dtype);
  *out = malloc(n);
  assert_non_null(*out);
  size_t at_ = 0;
  for (int i = 0; i < nt; i++) {
    size_t b = (size_t)ar_shape_count(&t[i]->shape) * ar_dtype_size(t[i]->dtype);
    memcpy(*out + at_, t[i]->p, b);
    at_ += b;
  }
  nn_case_fini(&c);
  return n;
}

/* Two runs that must agree bit for bit. */
static void same_bytes(ar_nn_op op, const ar_nn_attr *at, ar_shape x, int flags, const char *pa,
                       int ta, const char *pb, int tb) {
  unsigned char *a, *b;
  size_t na = run_bytes(op, at, x, flags, pa, ta, &a);
  size_t nb = run_bytes(op, at, x, flags, pb, tb, &b);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na);
  free(a);
  free(b);
}

/* The 2x2 stride-2 max pool's own loops against the general ones: the
 * same outputs, offsets and gradients, with many ties, odd sizes (a last
 * row and column in no window), rows longer than one block of the fast
 * loop, and both thread counts. */
static void test_maxpool_2x2_paths(void **st) {
  (void)st;
  ar_nn_attr a = pool_attr(2, 2, 0);
  /* Rows of 3, 4, 8, 16 (odd width), 75 and 14 outputs: shorter than one
   * vector step of 8, exactly one or two, and ending in an overlapping
   * step. */
  const ar_shape xs[] = {NN_SHAPE(2, 3, 6, 6),   NN_SHAPE(2, 3, 7, 9),    NN_SHAPE(1, 2, 4, 16),
                         NN_SHAPE(2, 2, 5, 33),  NN_SHAPE(1, 2, 5, 150),  NN_SHAPE(128, 4, 28, 28)};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
    same_bytes(AR_NN_MAXPOOL, &a, xs[i], TIES, NULL, 1, "generic", 1);
    same_bytes(AR_NN_MAXPOOL, &a, xs[i], 0, NULL, 2, "generic", 1);
  }
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 3, 7, 9), SEPARATED | TORCH);
  setenv("ACCELRT_POOL_PATH", "generic", 1);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 3, 7, 9), SEPARATED);
  unsetenv("ACCELRT_POOL_PATH");
}

/* Ties go to the first maximum in window order (row by row), as in
 * PyTorch: by hand, then against PyTorch on data full of ties. */
static void test_maxpool_ties(void **st) {
  (void)st;
  for (int generic = 0; generic < 2; generic++) {
    if (generic)
      setenv("ACCELRT_POOL_PATH", "generic", 1);
    ar_nn_attr a = pool_attr(2, 2, 0);
    nn_case c;
    nn_case_init(&c, AR_NN_MAXPOOL, &a);
    nn_case_input(&c, NN_SHAPE(1, 1, 2, 6), AR_DT_F32);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    /* Windows: all equal; bottom pair equal and largest; right column. */
    const float x[12] = {5, 5, 1, 2, 0, 7, 5, 5, 3, 3, 1, 7};
    memcpy(c.a.in[0].p, x, sizeof x);
    float *g = c.a.gout[0].p;
    g[0] = 1.0f;
    g[1] = 2.0f;
    g[2] = 3.0f;
    nn_case_forward(&c);
    nn_case_backward(&c);
    const float *y = c.a.out[0].p, *gx = c.a.gin[0].p;
    assert_true(y[0] == 5.0f && y[1] == 3.0f && y[2] == 7.0f);
    const float want[12] = {1, 0, 0, 0, 0, 3, 0, 0, 2, 0, 0, 0};
    for (int j = 0; j < 12; j++)
      assert_true(gx[j] == want[j]);
    nn_case_fini(&c);
    unsetenv("ACCELRT_POOL_PATH");
  }
  ar_nn_attr a = pool_attr(2, 2, 0);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 3, 6, 8), TIES | TORCH_ONLY);
  a = pool_attr(3, 1, 1);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 2, 5, 6), TIES | TORCH_ONLY);
  a = pool_attr(3, 2, 1);
  run_case(AR_NN_MAXPOOL, &a, NN_SHAPE(1, 2, 7, 7), TIES | TORCH_ONLY);
}

/* A kernel of more than 256 elements keeps its offsets in i32. */
static void test_maxpool_wide_kernel(void **st) {
  (void)st;
  ar_nn_attr a = pool_attr(17, 3, 2);
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  ar_dtype dt = AR_DT_F32;
  ar_shape x = NN_SHAPE(1, 2, 20, 21);
  assert_int_equal(ar_nn_infer(AR_NN_MAXPOOL, &a, 1, &x, &dt, &sig, &err), AR_OK);
  assert_int_equal(sig.aux_dtype[0], AR_DT_I32);
  assert_true(ar_shape_eq(&sig.aux[0], &sig.out[0]));
  run_case(AR_NN_MAXPOOL, &a, x, SEPARATED | TORCH);
  a = pool_attr(2, 2, 0);
  assert_int_equal(ar_nn_infer(AR_NN_MAXPOOL, &a, 1, &x, &dt, &sig, &err), AR_OK);
  assert_int_equal(sig.aux_dtype[0], AR_DT_U8);
}

/* Pooling and batchnorm give the same bits on one thread and on two
 * (work is split by planes or channels, never inside a sum). */
static void test_pool_bnorm_threads(void **st) {
  (void)st;
  ar_nn_attr a = pool_attr(3, 2, 1);
  same_bytes(AR_NN_MAXPOOL, &a, NN_SHAPE(16, 8, 17, 17), 0, NULL, 1, NULL, 2);
  same_bytes(AR_NN_AVGPOOL, &a, NN_SHAPE(16, 8, 17, 17), 0, NULL, 1, NULL, 2);
  a = pool_attr(2, 2, 0);
  same_bytes(AR_NN_MAXPOOL, &a, NN_SHAPE(16, 8, 28, 28), TIES, NULL, 1, NULL, 2);
  ar_nn_attr_defaults(&a);
  same_bytes(AR_NN_GAVGPOOL, &a, NN_SHAPE(16, 8, 17, 17), 0, NULL, 1, NULL, 2);
  same_bytes(AR_NN_BATCHNORM, &a, NN_SHAPE(16, 8, 17, 17), 0, NULL, 1, NULL, 2);
  same_bytes(AR_NN_BATCHNORM, &a, NN_SHAPE(600, 300), 0, NULL, 1, NULL, 2);
  a.act = AR_ACT_RELU;
  same_bytes(AR_NN_BATCHNORM, &a, NN_SHAPE(16, 8, 17, 17), 0, NULL, 1, NULL, 2);
  same_bytes(AR_NN_BATCHNORM, &a, NN_SHAPE(600, 300), 0, NULL, 1, NULL, 2);
}

/* ---- batchnorm ----------------------------------------------------------- */

static void test_batchnorm_4d(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(3, 4, 3, 5), 0);
  a.momentum = 0.3f;
  a.eps = 1e-3f;
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(2, 3, 4, 4), TORCH);
}

static void test_batchnorm_2d(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  /* Two rows: the unbiased factor 2/(2-1) is as large as it gets. */
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(2, 5), TORCH);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(8, 6), 0);
}

static void test_batchnorm_relu(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.act = AR_ACT_RELU;
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(3, 4, 3, 3), KINK_FREE);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(6, 5), KINK_FREE);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(3, 4, 3, 3), TORCH_ONLY);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(3, 4, 3, 3), EVAL | TORCH);
}

/* 2-D input wider than one column block (256) and taller than one float
 * chunk of rows (256), and planes longer than one chunk, with relu. */
static void test_batchnorm_blocks(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(3, 300), TORCH);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(300, 3), TORCH);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(2, 3, 20, 20), TORCH);
  a.act = AR_ACT_RELU;
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(300, 4), KINK_FREE);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(2, 4, 20, 20), KINK_FREE);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(270, 260), TORCH_ONLY);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(2, 4, 20, 20), TORCH_ONLY);
}

/* With a fused relu, the backward takes the mask from x, not from y
 * (infer says out_needed false, so the engine may have freed y): the same
 * gradients with y overwritten by NaN. */
static void test_batchnorm_relu_no_y(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.act = AR_ACT_RELU;
  const ar_shape xs[] = {NN_SHAPE(4, 3, 5, 5), NN_SHAPE(16, 7)};
  for (int i = 0; i < 2; i++) {
    nn_case c;
    nn_case_init(&c, AR_NN_BATCHNORM, &a);
    nn_case_input(&c, xs[i], AR_DT_F32);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    assert_false(c.sig.out_needed);
    nn_case_forward(&c);
    nn_case_backward(&c);
    int64_t nx = ar_shape_count(&xs[i]), nc = xs[i].d[1];
    float *want = malloc((size_t)(nx + 2 * nc) * sizeof(float));
    memcpy(want, c.a.gin[0].p, (size_t)nx * 4);
    memcpy(want + nx, c.a.gparam[0].p, (size_t)nc * 4);
    memcpy(want + nx + nc, c.a.gparam[1].p, (size_t)nc * 4);
    for (int64_t j = 0; j < nx; j++)
      ((float *)c.a.out[0].p)[j] = NAN;
    poison_grads(&c);
    nn_case_backward(&c);
    assert_memory_equal(want, c.a.gin[0].p, (size_t)nx * 4);
    assert_memory_equal(want + nx, c.a.gparam[0].p, (size_t)nc * 4);
    assert_memory_equal(want + nx + nc, c.a.gparam[1].p, (size_t)nc * 4);
    free(want);
    nn_case_fini(&c);
  }
}

/* The batch statistics of 100k values per channel far from zero (mean
 * 100, spread 1e-2: float sums and E[x^2] - E[x]^2 would lose the
 * variance) against a double-precision reference. */
static void test_batchnorm_accuracy(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  const int64_t N = 128, C = 2, S = 28 * 28;
  for (int two_d = 0; two_d < 2; two_d++) {
    nn_case c;
    nn_case_init(&c, AR_NN_BATCHNORM, &a);
    nn_case_input(&c, two_d ? NN_SHAPE(N * S, C) : NN_SHAPE(N, C, 28, 28), AR_DT_F32);
    assert_int_equal(nn_case_setup(&c), AR_OK);
    float *x = c.a.in[0].p;
    for (int64_t j = 0; j < N * C * S; j++)
      x[j] = 100.0f + 0.01f * (2.0f * nn__uniform(&c.seed) - 1.0f);
    nn_case_forward(&c);
    for (int64_t ch = 0; ch < C; ch++) {
      double s = 0.0, q = 0.0;
      for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < S; j++)
          s += x[two_d ? (n * S + j) * C + ch : (n * C + ch) * S + j];
      const double m = s / (double)(N * S);
      for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < S; j++) {
          const double d = x[two_d ? (n * S + j) * C + ch : (n * C + ch) * S + j] - m;
          q += d * d;
        }
      const double v = q / (double)(N * S);
      assert_float_equal(((float *)c.a.aux[0].p)[ch], m, 1e-6 * m);
      assert_float_equal(((float *)c.a.aux[1].p)[ch], v, 1e-5 * v);
    }
    nn_case_fini(&c);
  }
}

/* Evaluation uses the running statistics and leaves them alone (torch
 * compares the state after the forward too). */
static void test_batchnorm_eval(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  nn_case c;
  nn_case_init(&c, AR_NN_BATCHNORM, &a);
  nn_case_input(&c, NN_SHAPE(2, 3, 4, 4), AR_DT_F32);
  c.training = false;
  assert_int_equal(nn_case_setup(&c), AR_OK);
  float *rm = c.a.state[0].p, *rv = c.a.state[1].p;
  for (int i = 0; i < 3; i++) {
    rm[i] = 0.1f * (float)(i + 1);
    rv[i] = 0.5f + 0.4f * (float)i;
  }
  nn_case_forward(&c);
  /* By hand: y = gamma (x - rm) / sqrt(rv + eps) + beta. */
  const float *x = c.a.in[0].p, *y = c.a.out[0].p, *g = c.a.param[0].p, *b = c.a.param[1].p;
  for (int n = 0; n < 2; n++)
    for (int ch = 0; ch < 3; ch++)
      for (int j = 0; j < 16; j++) {
        int i = (n * 3 + ch) * 16 + j;
        float want = g[ch] * (x[i] - rm[ch]) / sqrtf(rv[ch] + a.eps) + b[ch];
        assert_float_equal(y[i], want, 1e-5);
      }
  assert_float_equal(rm[1], 0.2f, 0.0f);
  assert_float_equal(rv[2], 1.3f, 0.0f);
  nn_check_torch(&c, TORCH_SCRIPT, 1e-4, 1e-4);
  nn_case_fini(&c);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(3, 4, 3, 5), EVAL_OF_TRAINED | TORCH);
}

/* The running statistics after one training forward, by hand. */
static void test_batchnorm_running_stats(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.momentum = 0.25f;
  nn_case c;
  nn_case_init(&c, AR_NN_BATCHNORM, &a);
  nn_case_input(&c, NN_SHAPE(4, 2), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  float *x = c.a.in[0].p;
  const float col0[] = {1, 2, 3, 6}, col1[] = {-1, -1, 1, 1};
  for (int n = 0; n < 4; n++) {
    x[2 * n] = col0[n];
    x[2 * n + 1] = col1[n];
  }
  float *rm = c.a.state[0].p, *rv = c.a.state[1].p;
  rm[0] = rm[1] = 0.0f;
  rv[0] = rv[1] = 1.0f;
  nn_case_forward(&c);
  /* col0: mean 3, biased var 3.5, unbiased 14/3; col1: mean 0, var 1 and 4/3. */
  assert_float_equal(rm[0], 0.75f, 1e-6);
  assert_float_equal(rm[1], 0.0f, 1e-6);
  assert_float_equal(rv[0], 0.75f + 0.25f * 14.0f / 3.0f, 1e-5);
  assert_float_equal(rv[1], 0.75f + 0.25f * 4.0f / 3.0f, 1e-5);
  assert_float_equal(((float *)c.a.aux[0].p)[0], 3.0f, 1e-6);
  assert_float_equal(((float *)c.a.aux[1].p)[0], 3.5f, 1e-5);
  nn_case_fini(&c);
}

static void test_batchnorm_no_input_grad(void **st) {
  (void)st;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(3, 4, 3, 3), NO_GIN);
  a.act = AR_ACT_RELU;
  run_case(AR_NN_BATCHNORM, &a, NN_SHAPE(3, 4, 3, 3), NO_GIN | KINK_FREE);
}

/* ---- shape errors -------------------------------------------------------- */

/* infer fails with AR_INVALID and a message holding every string of want. */
static void expect_error(ar_nn_op op, const ar_nn_attr *at, ar_shape x, const char *const *want,
                         int n_want) {
  ar_err err = AR_ERR_INIT;
  ar_nn_sig sig;
  ar_dtype dt = AR_DT_F32;
  ar_status s = ar_nn_infer(op, at, 1, &x, &dt, &sig, &err);
  printf("# %s: %s\n", ar_nn_op_name(op), err.msg);
  assert_int_equal(s, AR_INVALID);
  for (int i = 0; i < n_want; i++)
    if (!strstr(err.msg, want[i]))
      fail_msg("'%s' not in the message '%s'", want[i], err.msg);
}
#define EXPECT_ERROR(op, at, x, ...)                                                               \
  expect_error(op, at, x, (const char *const[]){__VA_ARGS__},                                      \
               (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *)))

static void test_shape_errors(void **st) {
  (void)st;
  ar_nn_attr a = conv_attr(8, 5, 3, 0);
  EXPECT_ERROR(AR_NN_CONV2D, &a, NN_SHAPE(2, 32, 4, 4), "input 2x32x4x4", "kernel 5", "padding 0",
               "stride 3", "empty");
  a = conv_attr(8, 3, 1, 1);
  a.dilation[0] = a.dilation[1] = 3;
  EXPECT_ERROR(AR_NN_CONV2D, &a, NN_SHAPE(2, 3, 4, 4), "input 2x3x4x4", "dilation 3", "empty");
  a = conv_attr(8, 3, 1, 1);
  EXPECT_ERROR(AR_NN_CONV2D, &a, NN_SHAPE(3, 28, 28), "input 3x28x28", "(N,C,H,W)");
  a.groups = 3;
  EXPECT_ERROR(AR_NN_CONV2D, &a, NN_SHAPE(2, 4, 6, 6), "input 2x4x6x6", "groups 3", "divisible");
  a = conv_attr(8, 3, 0, 1);
  EXPECT_ERROR(AR_NN_CONV2D, &a, NN_SHAPE(2, 4, 6, 6), "stride 0");
  a = conv_attr(8, 3, 1, 1);
  a.pad[2] = 0;
  a.kernel[1] = 2;
  a.stride[1] = 9;
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  ar_dtype dt = AR_DT_F32;
  ar_shape x = NN_SHAPE(1, 1, 5, 5);
  /* Valid, and the output size is PyTorch's: (5+1+0-3)/1+1 = 4, (5+2-2)/9+1 = 1. */
  assert_int_equal(ar_nn_infer(AR_NN_CONV2D, &a, 1, &x, &dt, &sig, &err), AR_OK);
  assert_int_equal(sig.out[0].d[2], 4);
  assert_int_equal(sig.out[0].d[3], 1);
  assert_true(sig.flops == 2.0 * 8 * 4 * 1 * 3 * 2);

  a = pool_attr(2, 2, 2);
  EXPECT_ERROR(AR_NN_MAXPOOL, &a, NN_SHAPE(2, 3, 6, 6), "input 2x3x6x6", "kernel 2", "padding 2",
               "smaller than the kernel");
  a = pool_attr(7, 1, 0);
  EXPECT_ERROR(AR_NN_AVGPOOL, &a, NN_SHAPE(2, 3, 6, 6), "input 2x3x6x6", "kernel 7", "empty");
  EXPECT_ERROR(AR_NN_GAVGPOOL, &a, NN_SHAPE(2, 3, 6), "input 2x3x6", "(N,C,H,W)");
  ar_nn_attr_defaults(&a);
  EXPECT_ERROR(AR_NN_BATCHNORM, &a, NN_SHAPE(2, 3, 6), "input 2x3x6", "3 dimensions");
  EXPECT_ERROR(AR_NN_BATCHNORM, &a, NN_SHAPE(2, 3, 6, 6, 2), "input 2x3x6x6x2");

  /* One value per channel cannot train (PyTorch refuses it too). */
  nn_case c;
  nn_case_init(&c, AR_NN_BATCHNORM, &a);
  nn_case_input(&c, NN_SHAPE(1, 3), AR_DT_F32);
  assert_int_equal(nn_case_setup(&c), AR_INVALID);
  nn_case_fini(&c);
}

/* ---- timing (NN_CONV_BENCH=1) --------------------------------------------- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void bench_one(const char *layout, int64_t cin, int64_t cout, int64_t hw, int threads) {
  if (layout)
    setenv("ACCELRT_CONV_LAYOUT", layout, 1);
  else
    unsetenv("ACCELRT_CONV_LAYOUT");
  ar_nn_attr a = conv_attr(cout, 3, 1, 1);
  a.act = AR_ACT_RELU;
  nn_case c;
  nn_case_init(&c, AR_NN_CONV2D, &a);
  nn_case_input(&c, NN_SHAPE(128, cin, hw, hw), AR_DT_F32);
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = threads;
  o.pin = false;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", &o, &c.dev, &err), AR_OK);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  if (cin == 1) {
    /* A first layer: nothing upstream wants the images' gradient. */
    free(c.a.gin[0].p);
    c.a.gin[0].p = NULL;
  }
  nn_case_forward(&c);
  nn_case_backward(&c);
  int reps = 10;
  double t0 = now_s();
  for (int i = 0; i < reps; i++)
    nn_case_forward(&c);
  double t1 = now_s();
  for (int i = 0; i < reps; i++)
    nn_case_backward(&c);
  double t2 = now_s();
  printf("# bench %-7s 128x%lldx%lldx%lld -> %lld: forward %.2f ms, backward %.2f ms, "
         "workspace %.1f MiB (threads %d)\n",
         layout ? layout : "blocked", (long long)cin, (long long)hw, (long long)hw, (long long)cout,
         1e3 * (t1 - t0) / reps, 1e3 * (t2 - t1) / reps, (double)c.work_bytes / 1048576.0,
         c.a.threads);
  nn_case_fini(&c);
  unsetenv("ACCELRT_CONV_LAYOUT");
}

static void test_conv_bench(void **st) {
  (void)st;
  if (!getenv("NN_CONV_BENCH"))
    skip();
  for (int threads = 1; threads <= 2; threads++)
    for (int r = 0; r < 2; r++) {
      bench_one(NULL, 1, 32, 28, threads);
      bench_one("plain", 1, 32, 28, threads);
      bench_one(NULL, 32, 64, 14, threads);
      bench_one("plain", 32, 64, 14, threads);
    }
  /* The ResNet-20's three stages (configs/fashion-resnet.yaml), 2 threads. */
  for (int r = 0; r < 2; r++)
    for (int64_t s = 0; s < 3; s++) {
      bench_one(NULL, 16 << s, 16 << s, 28 >> s, 2);
      bench_one("plain", 16 << s, 16 << s, 28 >> s, 2);
    }
}

/* Batch normalisation (fused relu) and 2x2 max pooling at the Fashion
 * CNN's shapes, training forward and backward. */
static void bench_op(ar_nn_op op, const ar_nn_attr *at, ar_shape x, int threads) {
  nn_case c;
  nn_case_init(&c, op, at);
  nn_case_input(&c, x, AR_DT_F32);
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = threads;
  o.pin = false;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", &o, &c.dev, &err), AR_OK);
  assert_int_equal(nn_case_setup(&c), AR_OK);
  nn_case_forward(&c);
  nn_case_backward(&c);
  /* The fastest of 20 calls each: the machine may be shared, and the
   * minimum is what the kernel costs when nothing else runs. */
  double fwd = 1e9, bwd = 1e9;
  for (int i = 0; i < 20; i++) {
    double t0 = now_s();
    nn_case_forward(&c);
    double t1 = now_s();
    nn_case_backward(&c);
    double t2 = now_s();
    fwd = t1 - t0 < fwd ? t1 - t0 : fwd;
    bwd = t2 - t1 < bwd ? t2 - t1 : bwd;
  }
  char xs[64];
  printf("# bench %-9s %-13s forward %7.3f ms, backward %7.3f ms (fastest of 20; threads %d)\n",
         ar_nn_op_name(op), ar_shape_str(&x, xs, sizeof xs), 1e3 * fwd, 1e3 * bwd, c.a.threads);
  nn_case_fini(&c);
}

static void test_pool_bnorm_bench(void **st) {
  (void)st;
  if (!getenv("NN_CONV_BENCH"))
    skip();
  ar_nn_attr bn, mp = pool_attr(2, 2, 0);
  ar_nn_attr_defaults(&bn);
  bn.act = AR_ACT_RELU;
  for (int threads = 1; threads <= 2; threads++)
    for (int r = 0; r < 1; r++) {
      bench_op(AR_NN_BATCHNORM, &bn, NN_SHAPE(128, 32, 28, 28), threads);
      bench_op(AR_NN_MAXPOOL, &mp, NN_SHAPE(128, 32, 28, 28), threads);
      bench_op(AR_NN_BATCHNORM, &bn, NN_SHAPE(128, 64, 14, 14), threads);
      bench_op(AR_NN_MAXPOOL, &mp, NN_SHAPE(128, 64, 14, 14), threads);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_basic),
      cmocka_unit_test(test_conv_stride2),
      cmocka_unit_test(test_conv_rect_asym_pad),
      cmocka_unit_test(test_conv_dilation2),
      cmocka_unit_test(test_conv_groups2),
      cmocka_unit_test(test_conv_no_bias),
      cmocka_unit_test(test_conv_relu),
      cmocka_unit_test(test_conv_1x1_wide_channels),
      cmocka_unit_test(test_conv_eval),
      cmocka_unit_test(test_conv_no_input_grad),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_maxpool),
      cmocka_unit_test(test_avgpool),
      cmocka_unit_test(test_global_avgpool),
      cmocka_unit_test(test_maxpool_2x2_paths),
      cmocka_unit_test(test_maxpool_ties),
      cmocka_unit_test(test_maxpool_wide_kernel),
      cmocka_unit_test(test_pool_bnorm_threads),
      cmocka_unit_test(test_batchnorm_4d),
      cmocka_unit_test(test_batchnorm_2d),
      cmocka_unit_test(test_batchnorm_relu),
      cmocka_unit_test(test_batchnorm_blocks),
      cmocka_unit_test(test_batchnorm_relu_no_y),
      cmocka_unit_test(test_batchnorm_accuracy),
      cmocka_unit_test(test_batchnorm_eval),
      cmocka_unit_test(test_batchnorm_running_stats),
      cmocka_unit_test(test_batchnorm_no_input_grad),
      cmocka_unit_test(test_shape_errors),
      cmocka_unit_test(test_conv_bench),
      cmocka_unit_test(test_pool_bnorm_bench),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
