/*
 * The graph ops (include/accelrt/nn.h) on CUDA against the host backend
 * (label cuda): each op is prepared on both devices with the same shapes,
 * given the same random inputs, parameters, state and output gradients,
 * and run forward in training mode (outputs, aux tensors and updated state
 * compared), backward (every input and parameter gradient compared) and
 * forward in evaluation mode (outputs compared).  Every buffer the CUDA op
 * writes starts as NaN (all bits set), so an element it forgets to write
 * fails the comparison.
 *
 * The convolutions run twice: through cuDNN (when the build and the
 * machine have it) and through the direct kernels.
 *
 * Tolerances, per op, |cuda - host| <= atol + rtol |host|:
 *   - exact (0, 0): the ops that only move data or draw the same bits
 *     (reshape, flatten, slice, concat, split, transpose, embedding,
 *     posembed, mask, dropout: the host's counter-based generator), the
 *     max pool (its offsets and values), the average pools' forward;
 *   - 2e-6, 1e-6: element-wise ops (CUDA's expf, tanhf, erff, logf are
 *     within 2 ulp of the host's libm);
 *   - 1e-5, 1e-6: softmax, log_softmax, xent, global average pool and the
 *     average pools' backward (sums in double on both sides, rounded once);
 *   - 1e-4, 1e-5: conv, dense, matmul, attention (sums of up to a few
 *     hundred products in another order: cuBLAS and oneDNN block
 *     differently, and the GPU fuses multiplies and adds), batchnorm and
 *     layernorm (their gradients subtract two sums of the same size),
 *     sparse_dense (its dw adds the rows naming a feature with atomics,
 *     in any order);
 *   - the typed ops: exact for every integer result (ADD..POW on i64, i32,
 *     u8, wrapping; WHERE, EXPAND, CAST, GATHER of any type), PAD, GATHER's
 *     gradient (a repeated index's rows added in index order, as the
 *     host), CAST's and the unbroadcast add relu's; 1e-5, 1e-6 for the
 *     gradients summed over broadcast dims (WHERE, EXPAND, add relu
 *     broadcast), xent_multi (the chain's losses: sums in double) and bce.
 * Prints a table of the largest differences per op (ci/gpu-check keeps
 * it).  Exits 77 (skipped) when no CUDA device is present.
 *
 * Built with -DPARITY_DEVICE='"host"' (ctest: device.nn_cuda_harness) it
 * compares the host with a one-thread host device instead: the test's own
 * bookkeeping runs on every machine, so a GPU run checks kernels only.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "op_fixtures.h"
#include "parity.h"

#include "accelrt/nn.h"

#include <stdlib.h>

/* ---- buffers on both devices ------------------------------------------------------- */

typedef struct pair {
  void *h, *c;
  size_t bytes;
} pair;

#define MAX_BUFS 64
static pair bufs[MAX_BUFS];
static int n_bufs;

static void device_ok(const char *what) {
  if (ar_device_sync(C) != AR_OK)
    fail_msg("%s: %s: %s", what, PARITY_DEVICE, ar_device_errmsg(C));
}

/* A buffer of `bytes` on both devices: the host's from src (zeros when
 * NULL), the compared device's from src too, or all bits set (NaN) when
 * src is NULL, so that an element its op does not write shows. */
static pair pair_new(const void *src, size_t bytes) {
  AR_ASSERT(n_bufs < MAX_BUFS);
  pair p = {NULL, NULL, bytes > 0 ? bytes : 4};
  if (ar_device_alloc(H, p.bytes, &p.h) != AR_OK)
    fail_msg("host alloc %zu: %s", p.bytes, ar_device_errmsg(H));
  if (ar_device_alloc(C, p.bytes, &p.c) != AR_OK)
    fail_msg("%s alloc %zu: %s", PARITY_DEVICE, p.bytes, ar_device_errmsg(C));
  unsigned char *tmp = test_malloc(p.bytes);
  memset(tmp, 0, p.bytes);
  if (src)
    memcpy(tmp, src, bytes);
  assert_int_equal(ar_device_copy_in(H, p.h, tmp, p.bytes), AR_OK);
  if (!src)
    memset(tmp, 0xff, p.bytes);
  if (ar_device_copy_in(C, p.c, tmp, p.bytes) != AR_OK)
    fail_msg("%s copy_in: %s", PARITY_DEVICE, ar_device_errmsg(C));
  test_free(tmp);
  bufs[n_bufs++] = p;
  return p;
}

static void pairs_drop(void) {
  for (int i = 0; i < n_bufs; i++) {
    ar_device_free(H, bufs[i].h, bufs[i].bytes);
    ar_device_free(C, bufs[i].c, bufs[i].bytes);
  }
  n_bufs = 0;
}

/* Compares tensor t (pointers th, tc) of the op: f32 within the
 * tolerance, other types exactly. */
static void compare(const char *op, const char *what, const ar_tref *th, const ar_tref *tc,
                    double rtol, double atol) {
  device_ok(what);
  const int64_t n = ar_shape_count(&th->shape);
  const size_t bytes = (size_t)n * ar_dtype_size(th->dtype);
  if (bytes == 0)
    return;
  unsigned char *h = test_malloc(bytes), *c = test_malloc(bytes);
  assert_int_equal(ar_device_copy_out(H, h, th->p, bytes), AR_OK);
  if (ar_device_copy_out(C, c, tc->p, bytes) != AR_OK)
    fail_msg("%s: %s copy_out: %s", what, PARITY_DEVICE, ar_device_errmsg(C));
  if (th->dtype != AR_DT_F32) {
    const size_t es = ar_dtype_size(th->dtype);
    for (int64_t i = 0; i < n; i++)
      if (memcmp(h + (size_t)i * es, c + (size_t)i * es, es) != 0)
        fail_msg("%s %s: element %lld of %lld (%s) differs", op, what, (long long)i,
                 (long long)n, ar_dtype_name(th->dtype));
    record(op, 0, 0, n);
  } else {
    const float *hf = (const float *)h, *cf = (const float *)c;
    double worst_abs = 0, worst_rel = 0;
    for (int64_t i = 0; i < n; i++) {
      if (isnan(hf[i]) || isnan(cf[i]) || isinf(hf[i]) || isinf(cf[i])) {
        if (!(isnan(hf[i]) && isnan(cf[i])) && hf[i] != cf[i])
          fail_msg("%s %s: element %lld of %lld: %s %.9g, host %.9g", op, what, (long long)i,
                   (long long)n, PARITY_DEVICE, (double)cf[i], (double)hf[i]);
        continue;
      }
      const double d = fabs((double)cf[i] - (double)hf[i]);
      if (d > atol + rtol * fabs((double)hf[i]))
        fail_msg("%s %s: element %lld of %lld: %s %.9g, host %.9g (difference %.3g > %.3g + "
                 "%.3g * |host|)",
                 op, what, (long long)i, (long long)n, PARITY_DEVICE, (double)cf[i],
                 (double)hf[i], d, atol, rtol);
      worst_abs = d > worst_abs ? d : worst_abs;
      const double rel = d / (fabs((double)hf[i]) > 1e-30 ? fabs((double)hf[i]) : 1e-30);
      if (d > 0 && rel > worst_rel)
        worst_rel = rel;
    }
    record(op, worst_abs, worst_rel, n);
  }
  test_free(h);
  test_free(c);
}

/* ---- one op on both devices ------------------------------------------------------------ */

typedef struct tol {
  double rtol, atol;
} tol;
static const tol EXACT = {0, 0}, ELTWISE = {2e-6, 1e-6}, ROWS = {1e-5, 1e-6},
                 SUMS = {1e-4, 1e-5};

/* What a case gives: its inputs' shapes and types, f32 inputs uniform in
 * [lo, hi), integer inputs (ids, labels) in [0, ids). */
typedef struct nn_case {
  const char *name;
  ar_nn_op op;
  int n_in;
  ar_shape in[3];
  ar_dtype dt[3];
  float lo, hi;
  int64_t ids;
  tol t;
  unsigned binary; /* f32 inputs (bit i) of 0s and 1s instead: masks */
} nn_case;

static pair random_tensor(fx_rng *r, const ar_shape *s, ar_dtype dt, float lo, float hi,
                          int64_t ids, bool binary) {
  const int64_t n = ar_shape_count(s);
  const size_t bytes = (size_t)n * ar_dtype_size(dt);
  void *v = test_malloc(bytes > 0 ? bytes : 1);
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
    case AR_DT_F32:
      ((float *)v)[i] = binary ? (float)(fx_below(r, 4) != 0) : fx_uniform(r, lo, hi);
      break;
    case AR_DT_I64: ((int64_t *)v)[i] = fx_below(r, ids); break;
    case AR_DT_I32: ((int32_t *)v)[i] = (int32_t)fx_below(r, ids); break;
    default: ((uint8_t *)v)[i] = (uint8_t)fx_below(r, ids); break;
    }
  }
  pair p = pair_new(v, bytes);
  test_free(v);
  return p;
}

/* What some cases give beyond their shapes: inputs with set contents
 * (data[i] non-NULL: input i's elements, e.g. a CSR batch's row pointers),
 * and the rows that count (XENT_MULTI's a->rows; 0: all). */
typedef struct nn_given {
  const void *data[3];
  int64_t rows;
  bool zero_grads; /* parameter gradients start as zeros on both devices
                      (an op that writes only some of their rows) */
} nn_given;

/* Both devices' args for the op (pointers into new pairs); the CUDA side
 * of every buffer an op writes starts as NaN. */
static void args_make(const nn_case *k, const nn_given *giv, const ar_nn_attr *at,
                      const ar_nn_sig *sig, ar_nn_args *ah, ar_nn_args *ac) {
  fx_rng r = {0x6e6e6375ull + (uint64_t)k->op};
  ar_nn_args_from_sig(ah, k->op, at, sig);
  ar_nn_args_from_sig(ac, k->op, at, sig);
  ah->n_in = ac->n_in = k->n_in;
  for (int i = 0; i < k->n_in; i++) {
    pair p = giv->data[i] ? pair_new(giv->data[i], (size_t)ar_shape_count(&k->in[i]) *
                                                       ar_dtype_size(k->dt[i]))
                          : random_tensor(&r, &k->in[i], k->dt[i], k->lo, k->hi, k->ids,
                                          k->binary >> i & 1u);
    ah->in[i] = (ar_tref){p.h, k->in[i], k->dt[i]};
    ac->in[i] = (ar_tref){p.c, k->in[i], k->dt[i]};
    ah->gin[i] = ac->gin[i] = (ar_tref){NULL, k->in[i], AR_DT_F32};
    if (k->dt[i] == AR_DT_F32 && !(sig->no_grad & (1u << i))) {
      pair g = pair_new(NULL, (size_t)ar_shape_count(&k->in[i]) * 4);
      ah->gin[i].p = g.h;
      ac->gin[i].p = g.c;
    }
  }
  for (int i = 0; i < sig->n_param; i++) {
    pair p = random_tensor(&r, &sig->param[i], AR_DT_F32, -1.0f, 1.0f, 0, false);
    ah->param[i].p = p.h;
    ac->param[i].p = p.c;
    const size_t gb = (size_t)ar_shape_count(&sig->param[i]) * 4;
    void *zeros = giv->zero_grads ? test_calloc(1, gb > 0 ? gb : 1) : NULL;
    pair g = pair_new(zeros, gb);
    if (zeros)
      test_free(zeros);
    ah->gparam[i].p = g.h;
    ac->gparam[i].p = g.c;
  }
  for (int i = 0; i < sig->n_state; i++) {
    /* Positive: batch normalisation's running variance. */
    pair p = random_tensor(&r, &sig->state[i], AR_DT_F32, 0.5f, 1.5f, 0, false);
    ah->state[i].p = p.h;
    ac->state[i].p = p.c;
  }
  for (int i = 0; i < sig->n_out; i++) {
    pair p = pair_new(NULL, (size_t)ar_shape_count(&sig->out[i]) * ar_dtype_size(sig->out_dtype[i]));
    ah->out[i].p = p.h;
    ac->out[i].p = p.c;
    pair g = random_tensor(&r, &sig->out[i], AR_DT_F32, -1.0f, 1.0f, 0, false);
    ah->gout[i].p = g.h;
    ac->gout[i].p = g.c;
  }
  for (int i = 0; i < sig->n_aux; i++) {
    pair p = pair_new(NULL, (size_t)ar_shape_count(&sig->aux[i]) * ar_dtype_size(sig->aux_dtype[i]));
    ah->aux[i].p = p.h;
    ac->aux[i].p = p.c;
  }
  ah->seed = ac->seed = 0x5eed;
  ah->scale = ac->scale = 0.25f;
  ah->rows = ac->rows = giv->rows;
}

static ar_nn_prim *prepare(ar_device *dev, const nn_case *k, const ar_nn_args *a,
                           bool training, size_t *work) {
  ar_nn_prim *p = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_device_nn_prepare(dev, a, training, &p, work, &err) != AR_OK)
    fail_msg("%s: prepare on %s: %s", k->name, ar_device_name(dev), err.msg);
  return p;
}

static void check_given(const nn_case *k, const ar_nn_attr *at, const nn_given *giv) {
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  if (ar_nn_infer(k->op, at, k->n_in, k->in, k->dt, &sig, &err) != AR_OK)
    fail_msg("%s: infer: %s", k->name, err.msg);
  ar_nn_args ah, ac;
  args_make(k, giv, at, &sig, &ah, &ac);
  size_t wh = 0, wc = 0, wh2 = 0, wc2 = 0;
  ar_nn_prim *ph = prepare(H, k, &ah, true, &wh), *pc = prepare(C, k, &ac, true, &wc);
  ar_nn_prim *eh = prepare(H, k, &ah, false, &wh2), *ec = prepare(C, k, &ac, false, &wc2);
  size_t w = wh;
  w = wc > w ? wc : w;
  w = wh2 > w ? wh2 : w;
  w = wc2 > w ? wc2 : w;
  /* The engine plans the host's workspace: the compared device must not
   * need more. */
  if (wc > wh || wc2 > wh2)
    fail_msg("%s: %s asks for a workspace of %zu/%zu bytes, the host %zu/%zu", k->name,
             PARITY_DEVICE, wc, wc2, wh, wh2);
  pair work = pair_new(NULL, w);
  ah.work = work.h;
  ac.work = work.c;
  ah.work_bytes = ac.work_bytes = w;
  const char *op = k->name;
  double rt = k->t.rtol, abs_t = k->t.atol;

  ah.training = ac.training = true;
  ar_device_nn_forward(H, ph, &ah);
  ar_device_nn_forward(C, pc, &ac);
  for (int i = 0; i < sig.n_out; i++)
    compare(op, "forward output", &ah.out[i], &ac.out[i], rt, abs_t);
  for (int i = 0; i < sig.n_aux; i++)
    compare(op, "forward aux", &ah.aux[i], &ac.aux[i], rt, abs_t);
  for (int i = 0; i < sig.n_state; i++)
    compare(op, "forward state", &ah.state[i], &ac.state[i], rt, abs_t);

  ar_device_nn_backward(H, ph, &ah);
  ar_device_nn_backward(C, pc, &ac);
  for (int i = 0; i < k->n_in; i++)
    if (ah.gin[i].p)
      compare(op, "input gradient", &ah.gin[i], &ac.gin[i], rt, abs_t);
  for (int i = 0; i < sig.n_param; i++)
    compare(op, "parameter gradient", &ah.gparam[i], &ac.gparam[i], rt, abs_t);

  ah.training = ac.training = false;
  ar_device_nn_forward(H, eh, &ah);
  ar_device_nn_forward(C, ec, &ac);
  for (int i = 0; i < sig.n_out; i++)
    compare(op, "evaluation output", &ah.out[i], &ac.out[i], rt, abs_t);

  ar_device_nn_release(H, ph);
  ar_device_nn_release(C, pc);
  ar_device_nn_release(H, eh);
  ar_device_nn_release(C, ec);
  pairs_drop();
}

static void check(const nn_case *k, const ar_nn_attr *at) {
  const nn_given none = {{NULL, NULL, NULL}, 0, false};
  check_given(k, at, &none);
}

static ar_shape shp(int nd, int64_t a, int64_t b, int64_t c, int64_t d) {
  ar_shape s = {nd, {a, b, c, d, 0, 0}};
  return s;
}

/* One f32 input. */
static nn_case one(const char *name, ar_nn_op op, ar_shape s, float lo, float hi, tol t) {
  nn_case k = {name, op, 1, {s}, {AR_DT_F32}, lo, hi, 0, t, 0};
  return k;
}

/* ---- the cases, in the order the ready graph jobs need the ops ---------------------- */

/* A conv case through both CUDA paths: cuDNN (when the build and the
 * machine have it) and the direct kernels (ACCELRT_CUDA_CONV=direct). */
static void check_conv(nn_case *k, const ar_nn_attr *a) {
  char name[80];
  const char *base = k->name;
  snprintf(name, sizeof name, "%s (direct)", base);
  k->name = name;
  setenv("ACCELRT_CUDA_CONV", "direct", 1);
  check(k, a);
  unsetenv("ACCELRT_CUDA_CONV");
  k->name = base;
  check(k, a);
}

static void test_conv(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.out = 5;
  a.kernel[0] = a.kernel[1] = 3;
  a.pad[0] = a.pad[1] = a.pad[2] = a.pad[3] = 1;
  nn_case k = one("conv 3x3 pad 1", AR_NN_CONV2D, shp(4, 2, 3, 7, 6), -1, 1, SUMS);
  check_conv(&k, &a);
  /* Strided, dilated, grouped, asymmetric padding, fused relu, no bias. */
  ar_nn_attr_defaults(&a);
  a.out = 6;
  a.kernel[0] = 3;
  a.kernel[1] = 2;
  a.stride[0] = 2;
  a.stride[1] = 3;
  a.pad[0] = 2;
  a.pad[1] = 1;
  a.pad[2] = 0;
  a.pad[3] = 1;
  a.dilation[0] = 2;
  a.groups = 2;
  a.bias = false;
  a.act = AR_ACT_RELU;
  k = one("conv strided grouped relu", AR_NN_CONV2D, shp(4, 3, 4, 11, 10), -1, 1, SUMS);
  check_conv(&k, &a);
}

static void test_batchnorm(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.act = AR_ACT_RELU;
  nn_case k = one("batchnorm relu", AR_NN_BATCHNORM, shp(4, 4, 3, 5, 6), -2, 3, SUMS);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  k = one("batchnorm 2-d", AR_NN_BATCHNORM, shp(2, 9, 5, 0, 0), -1, 1, SUMS);
  check(&k, &a);
}

static void test_pools(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.kernel[0] = a.kernel[1] = 2;
  a.stride[0] = a.stride[1] = 2;
  nn_case k = one("maxpool 2x2", AR_NN_MAXPOOL, shp(4, 2, 3, 9, 8), -1, 1, EXACT);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.kernel[0] = a.kernel[1] = 3;
  a.stride[0] = 2;
  a.stride[1] = 1;
  a.pad[0] = a.pad[1] = a.pad[2] = a.pad[3] = 1;
  a.dilation[1] = 2;
  a.indices = true;
  k = one("maxpool dilated indices", AR_NN_MAXPOOL, shp(4, 2, 2, 7, 9), -1, 1, EXACT);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.kernel[0] = a.kernel[1] = 3;
  a.stride[0] = a.stride[1] = 2;
  a.pad[0] = a.pad[1] = a.pad[2] = a.pad[3] = 1;
  k = one("avgpool 3x3 pad 1", AR_NN_AVGPOOL, shp(4, 2, 3, 8, 7), -1, 1, ROWS);
  check(&k, &a);
  a.exclude_pad = true;
  k = one("avgpool exclude_pad", AR_NN_AVGPOOL, shp(4, 2, 3, 8, 7), -1, 1, ROWS);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  k = one("global_avgpool", AR_NN_GAVGPOOL, shp(4, 3, 4, 5, 6), -1, 1, ROWS);
  check(&k, &a);
}

static void test_dense_matmul(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.out = 7;
  a.act = AR_ACT_RELU;
  nn_case k = one("dense relu", AR_NN_DENSE, shp(3, 3, 4, 9, 0), -1, 1, SUMS);
  check(&k, &a);
  a.act = AR_ACT_SIGMOID;
  a.bias = false;
  k = one("dense sigmoid", AR_NN_DENSE, shp(2, 6, 33, 0, 0), -1, 1, SUMS);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.out = 10;
  k = one("dense", AR_NN_DENSE, shp(2, 5, 12, 0, 0), -1, 1, SUMS);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  k = (nn_case){"matmul", AR_NN_MATMUL, 2, {shp(4, 2, 3, 4, 5), shp(4, 2, 3, 5, 6)},
                {AR_DT_F32, AR_DT_F32}, -1, 1, 0, SUMS, 0};
  check(&k, &a);
  a.trans_b = true;
  k = (nn_case){"matmul trans_b", AR_NN_MATMUL, 2, {shp(3, 4, 3, 5, 0), shp(3, 4, 6, 5, 0)},
                {AR_DT_F32, AR_DT_F32}, -1, 1, 0, SUMS, 0};
  check(&k, &a);
}

static void test_unary(void **state) {
  (void)state;
  static const struct {
    ar_nn_op op;
    float lo, hi;
  } ops[] = {{AR_NN_RELU, -2, 2},   {AR_NN_LEAKY_RELU, -2, 2}, {AR_NN_SIGMOID, -6, 6},
             {AR_NN_TANH, -3, 3},   {AR_NN_GELU, -4, 4},       {AR_NN_SQRT, 0.1f, 4},
             {AR_NN_EXP, -3, 3},    {AR_NN_LOG, 0.1f, 4},      {AR_NN_NEG, -2, 2},
             {AR_NN_ABS, -2, 2},    {AR_NN_ERF, -3, 3},        {AR_NN_CLIP, -2, 2}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    ar_nn_attr a;
    ar_nn_attr_defaults(&a);
    a.alpha = 0.2f;
    a.lo = -0.5f;
    a.hi = 1.0f;
    nn_case k = one(ar_nn_op_name(ops[i].op), ops[i].op, shp(3, 3, 7, 5, 0), ops[i].lo,
                    ops[i].hi, ELTWISE);
    check(&k, &a);
  }
}

static void test_binary(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  nn_case k = {"add broadcast", AR_NN_ADD, 2, {shp(3, 4, 1, 5, 0), shp(2, 3, 1, 0, 0)},
               {AR_DT_F32, AR_DT_F32}, -1, 1, 0, ELTWISE, 0};
  check(&k, &a);
  k = (nn_case){"sub", AR_NN_SUB, 2, {shp(2, 3, 4, 0, 0), shp(2, 3, 4, 0, 0)},
                {AR_DT_F32, AR_DT_F32}, -1, 1, 0, ELTWISE, 0};
  check(&k, &a);
  k = (nn_case){"mul broadcast", AR_NN_MUL, 2, {shp(3, 2, 3, 4, 0), shp(1, 4, 0, 0, 0)},
                {AR_DT_F32, AR_DT_F32}, -1, 1, 0, ELTWISE, 0};
  check(&k, &a);
  k = (nn_case){"div broadcast", AR_NN_DIV, 2, {shp(2, 2, 3, 0, 0), shp(2, 2, 1, 0, 0)},
                {AR_DT_F32, AR_DT_F32}, 0.5f, 2, 0, ELTWISE, 0};
  check(&k, &a);
  k = (nn_case){"pow", AR_NN_POW, 2, {shp(2, 3, 4, 0, 0), shp(2, 3, 4, 0, 0)},
                {AR_DT_F32, AR_DT_F32}, 0.5f, 2, 0, ELTWISE, 0};
  check(&k, &a);
  a.scalar = 1.5f;
  k = one("mul scalar", AR_NN_MUL, shp(2, 3, 4, 0, 0), -1, 1, ELTWISE);
  check(&k, &a);
  k = one("pow scalar", AR_NN_POW, shp(2, 3, 4, 0, 0), 0.5f, 2, ELTWISE);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.axis = 1;
  k = one("mean axis 1", AR_NN_MEAN, shp(3, 2, 5, 3, 0), -1, 1, ROWS);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.axis_all = true;
  a.keepdims = true;
  k = one("sum all", AR_NN_SUM, shp(3, 3, 4, 5, 0), -1, 1, ROWS);
  check(&k, &a);
}

static void test_rows(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  nn_case k = one("softmax", AR_NN_SOFTMAX, shp(2, 4, 300, 0, 0), -5, 5, ROWS);
  check(&k, &a);
  k = one("log_softmax", AR_NN_LOG_SOFTMAX, shp(3, 2, 3, 9, 0), -5, 5, ROWS);
  check(&k, &a);
  k = one("layernorm", AR_NN_LAYERNORM, shp(3, 3, 4, 16, 0), -2, 2, SUMS);
  check(&k, &a);
  a.stats = true;
  k = one("layernorm stats", AR_NN_LAYERNORM, shp(2, 5, 300, 0, 0), -2, 2, SUMS);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  k = (nn_case){"xent i64", AR_NN_XENT, 2, {shp(2, 5, 7, 0, 0), shp(1, 5, 0, 0, 0)},
                {AR_DT_F32, AR_DT_I64}, -3, 3, 7, ROWS, 0};
  check(&k, &a);
  k = (nn_case){"xent i32", AR_NN_XENT, 2, {shp(2, 3, 1000, 0, 0), shp(1, 3, 0, 0, 0)},
                {AR_DT_F32, AR_DT_I32}, -3, 3, 1000, ROWS, 0};
  check(&k, &a);
}

static void test_moves(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.shape = shp(2, 6, -1, 0, 0);
  nn_case k = one("reshape", AR_NN_RESHAPE, shp(3, 2, 3, 4, 0), -1, 1, EXACT);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  k = one("flatten", AR_NN_FLATTEN, shp(4, 2, 3, 2, 2), -1, 1, EXACT);
  check(&k, &a);
  a.axis = 1;
  a.begin = 1;
  a.end = 3;
  k = one("slice", AR_NN_SLICE, shp(3, 2, 4, 3, 0), -1, 1, EXACT);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.axis = 1;
  k = (nn_case){"concat", AR_NN_CONCAT, 2, {shp(3, 2, 3, 4, 0), shp(3, 2, 1, 4, 0)},
                {AR_DT_F32, AR_DT_F32}, -1, 1, 0, EXACT, 0};
  check(&k, &a);
  a.axis = -1;
  a.n_sizes = 2;
  a.sizes[0] = 1;
  a.sizes[1] = 3;
  k = one("split", AR_NN_SPLIT, shp(3, 2, 3, 4, 0), -1, 1, EXACT);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.perm[0] = 2;
  a.perm[1] = 0;
  a.perm[2] = 1;
  k = one("transpose", AR_NN_TRANSPOSE, shp(3, 2, 3, 4, 0), -1, 1, EXACT);
  check(&k, &a);
}

static void test_tokens(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.out = 6;
  a.vocab = 11;
  nn_case k = {"embedding", AR_NN_EMBEDDING, 1, {shp(2, 3, 5, 0, 0)}, {AR_DT_I64}, 0, 0, 11,
               EXACT, 0};
  check(&k, &a);
  /* Sparse gradients: the distinct ids listed ascending (aux, exact), only
   * their rows of the gradient written (the others stay zero on both);
   * 300 ids of 40 (the CUDA compaction's chunks of 256 and repeats across
   * them), then i32 ids. */
  a.sparse_grad = true;
  a.vocab = 40;
  k = (nn_case){"embedding sparse_grad", AR_NN_EMBEDDING, 1, {shp(2, 3, 100, 0, 0)},
                {AR_DT_I64}, 0, 0, 40, EXACT, 0};
  nn_given zg = {{NULL, NULL, NULL}, 0, true};
  check_given(&k, &a, &zg);
  a.vocab = 1000;
  k = (nn_case){"embedding sparse_grad i32", AR_NN_EMBEDDING, 1, {shp(2, 4, 7, 0, 0)},
                {AR_DT_I32}, 0, 0, 1000, EXACT, 0};
  check_given(&k, &a, &zg);
  ar_nn_attr_defaults(&a);
  ar_nn_attr_defaults(&a);
  k = one("posembed", AR_NN_POSEMBED, shp(3, 2, 5, 6, 0), -1, 1, EXACT);
  check(&k, &a);
  a.pad_id = 2;
  k = (nn_case){"mask", AR_NN_MASK, 1, {shp(2, 3, 5, 0, 0)}, {AR_DT_I64}, 0, 0, 4, EXACT, 0};
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.p = 0.3f;
  k = one("dropout", AR_NN_DROPOUT, shp(3, 4, 5, 6, 0), -1, 1, EXACT);
  check(&k, &a);
}

static void test_attention(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.heads = 2;
  nn_case k = one("attention", AR_NN_ATTENTION, shp(3, 2, 5, 8, 0), -1, 1, SUMS);
  check(&k, &a);
  /* With a padding mask (a quarter of the keys masked) and causal: a row
   * whose allowed keys are all masked is all zeros on both sides. */
  a.heads = 4;
  a.causal = true;
  k = (nn_case){"attention mask causal", AR_NN_ATTENTION, 2,
                {shp(3, 3, 7, 16, 0), shp(2, 3, 7, 0, 0)}, {AR_DT_F32, AR_DT_F32}, -1, 1, 0,
                SUMS, 2u};
  check(&k, &a);
}

/* A CSR batch: 4 rows (the second empty), 7 of the 8 entries' room used,
 * feature 3 named by three rows (spmm_t's atomics meet there); the labels
 * of 4 rows over 6 classes, the third row without any. */
static const int64_t csr_ptr[5] = {0, 2, 2, 5, 7};
static const int32_t csr_idx[8] = {3, 0, 3, 8, 5, 3, 1, 0};
static const int64_t lab_ptr[5] = {0, 2, 3, 3, 5};
static const int32_t lab_idx[6] = {1, 4, 0, 5, 2, 0};

static void test_sparse(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.vocab = 9;
  a.out = 7;
  a.act = AR_ACT_RELU;
  /* spmm_t adds a feature's rows with atomics, in any order: SUMS. */
  nn_case k = {"sparse_dense relu", AR_NN_SPARSE_DENSE, 3,
               {shp(1, 5, 0, 0, 0), shp(1, 8, 0, 0, 0), shp(1, 8, 0, 0, 0)},
               {AR_DT_I64, AR_DT_I32, AR_DT_F32}, -1, 1, 0, SUMS, 0};
  nn_given g = {{csr_ptr, csr_idx, NULL}, 0, false};
  check_given(&k, &a, &g);
  a.act = AR_ACT_SIGMOID;
  a.bias = false;
  k.name = "sparse_dense sigmoid";
  check_given(&k, &a, &g);
  a.act = AR_ACT_NONE;
  a.bias = true;
  k.name = "sparse_dense";
  check_given(&k, &a, &g);
  ar_nn_attr_defaults(&a);
  a.act = AR_ACT_SOFTMAX;
  k = (nn_case){"xent_multi softmax", AR_NN_XENT_MULTI, 3,
                {shp(2, 4, 6, 0, 0), shp(1, 5, 0, 0, 0), shp(1, 6, 0, 0, 0)},
                {AR_DT_F32, AR_DT_I64, AR_DT_I32}, -3, 3, 0, ROWS, 0};
  g = (nn_given){{NULL, lab_ptr, lab_idx}, 0, false};
  check_given(&k, &a, &g);
  /* A padded batch: the last row does not count (loss and gradient 0). */
  g.rows = 3;
  k.name = "xent_multi softmax padded";
  check_given(&k, &a, &g);
  a.act = AR_ACT_SIGMOID;
  k.name = "xent_multi sigmoid padded";
  check_given(&k, &a, &g);
}

/* The fused activations the graph engine's fusion pass makes (conv and
 * batch norm with act RELU are in test_conv and test_batchnorm). */
static void test_fused(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.act = AR_ACT_RELU;
  nn_case k = {"add relu broadcast", AR_NN_ADD, 2, {shp(3, 4, 1, 5, 0), shp(2, 3, 1, 0, 0)},
               {AR_DT_F32, AR_DT_F32}, -1, 1, 0, ROWS, 0};
  check(&k, &a);
  k = (nn_case){"add relu", AR_NN_ADD, 2, {shp(4, 2, 3, 4, 5), shp(4, 2, 3, 4, 5)},
                {AR_DT_F32, AR_DT_F32}, -1, 1, 0, EXACT, 0};
  check(&k, &a);
}

static void test_typed(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  /* Integer arithmetic: exact, wrapping; DIV meets zero divisors. */
  static const ar_dtype ints[] = {AR_DT_I64, AR_DT_I32, AR_DT_U8};
  static const ar_nn_op ops[] = {AR_NN_ADD, AR_NN_SUB, AR_NN_MUL, AR_NN_DIV, AR_NN_POW};
  for (size_t t = 0; t < sizeof ints / sizeof ints[0]; t++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      char name[40];
      snprintf(name, sizeof name, "%s %s", ar_nn_op_name(ops[o]), ar_dtype_name(ints[t]));
      nn_case k = {name, ops[o], 2, {shp(3, 2, 3, 4, 0), shp(2, 1, 4, 0, 0)},
                   {ints[t], ints[t]}, 0, 0, ops[o] == AR_NN_POW ? 9 : 300, EXACT, 0};
      check(&k, &a);
    }
  /* Negative integers (random ones are not): truncating division, odd
   * and negative powers, INT64_MIN / -1 wrapping. */
  static const int64_t xs[6] = {-7, 7, INT64_MIN, -3, 0, -1};
  static const int64_t zs[6] = {2, -2, -1, 3, 0, -3};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    char name[40];
    snprintf(name, sizeof name, "%s i64 signed", ar_nn_op_name(ops[o]));
    nn_case k = {name, ops[o], 2, {shp(1, 6, 0, 0, 0), shp(1, 6, 0, 0, 0)},
                 {AR_DT_I64, AR_DT_I64}, 0, 0, 1, EXACT, 0};
    nn_given g = {{xs, zs, NULL}, 0, false};
    check_given(&k, &a, &g);
  }
  /* WHERE: a broadcast condition and operands (the gradients summed over
   * the broadcast dims: ROWS), then i64 operands. */
  nn_case k = {"where broadcast", AR_NN_WHERE, 3,
               {shp(3, 2, 1, 4, 0), shp(2, 3, 4, 0, 0), shp(3, 2, 3, 1, 0)},
               {AR_DT_BOOL, AR_DT_F32, AR_DT_F32}, -1, 1, 2, ROWS, 0};
  check(&k, &a);
  k = (nn_case){"where i64", AR_NN_WHERE, 3,
                {shp(2, 3, 4, 0, 0), shp(2, 3, 4, 0, 0), shp(1, 4, 0, 0, 0)},
                {AR_DT_U8, AR_DT_I64, AR_DT_I64}, 0, 0, 2, EXACT, 0};
  check(&k, &a);
  a.shape = shp(4, 2, 3, 4, 5);
  k = one("expand", AR_NN_EXPAND, shp(3, 3, 1, 5, 0), -1, 1, ROWS);
  check(&k, &a);
  k = (nn_case){"expand u8", AR_NN_EXPAND, 1, {shp(2, 4, 1, 0, 0)}, {AR_DT_U8}, 0, 0, 256,
                EXACT, 0};
  a.shape = shp(2, 1, 6, 0, 0);
  check(&k, &a);
  /* CAST: f32 beyond i32's, u8's ranges (truncated, then wrapped), to
   * bool, integers to f32, and f32 to f32 (the gradient passes). */
  ar_nn_attr_defaults(&a);
  static const struct {
    ar_dtype from, to;
    float lo, hi;
  } casts[] = {{AR_DT_F32, AR_DT_I32, -6e9f, 6e9f}, {AR_DT_F32, AR_DT_U8, -600, 600},
               {AR_DT_F32, AR_DT_I64, -1e20f, 1e20f}, {AR_DT_F32, AR_DT_BOOL, -1, 1},
               {AR_DT_I64, AR_DT_F32, 0, 0},          {AR_DT_I32, AR_DT_U8, 0, 0},
               {AR_DT_U8, AR_DT_I64, 0, 0},           {AR_DT_F32, AR_DT_F32, -1, 1}};
  for (size_t i = 0; i < sizeof casts / sizeof casts[0]; i++) {
    char name[40];
    snprintf(name, sizeof name, "cast %s to %s", ar_dtype_name(casts[i].from),
             ar_dtype_name(casts[i].to));
    a.to = casts[i].to;
    k = (nn_case){name, AR_NN_CAST, 1, {shp(2, 5, 7, 0, 0)}, {casts[i].from}, casts[i].lo,
                  casts[i].hi, 200, EXACT, 0};
    check(&k, &a);
  }
  /* GATHER along axis 1: negative indices, two outside the axis (zeros),
   * one repeated (its gradient rows added in index order: exact). */
  static const int64_t gidx[6] = {-1, 2, 7, 0, 2, -6};
  ar_nn_attr_defaults(&a);
  a.axis = 1;
  k = (nn_case){"gather", AR_NN_GATHER, 2, {shp(3, 3, 5, 4, 0), shp(2, 2, 3, 0, 0)},
                {AR_DT_F32, AR_DT_I64}, -1, 1, 5, EXACT, 0};
  nn_given g = {{NULL, gidx, NULL}, 0, false};
  check_given(&k, &a, &g);
  a.axis = -1;
  k = (nn_case){"gather i32 of i32", AR_NN_GATHER, 2, {shp(2, 4, 6, 0, 0), shp(1, 5, 0, 0, 0)},
                {AR_DT_I32, AR_DT_I32}, 0, 0, 6, EXACT, 0};
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  a.pad_nd[0] = 1;
  a.pad_nd[2] = 2;
  a.pad_nd[AR_NN_MAX_DIMS + 1] = 3;
  a.pad_nd[AR_NN_MAX_DIMS + 2] = 1;
  a.scalar = 0.5f;
  k = one("pad", AR_NN_PAD, shp(3, 2, 3, 4, 0), -1, 1, EXACT);
  check(&k, &a);
  ar_nn_attr_defaults(&a);
  k = (nn_case){"bce", AR_NN_BCE, 2, {shp(2, 5, 9, 0, 0), shp(2, 5, 9, 0, 0)},
                {AR_DT_F32, AR_DT_F32}, -4, 4, 0, ROWS, 2u};
  check(&k, &a);
}

/* ---- main ------------------------------------------------------------------------------ */

/* The group's devices: the compared one with an arena of 1 GiB. */
static int setup(void **state) {
  (void)state;
  return parity_open((uint64_t)1 << 30);
}

int main(void) {
  if (parity_skip("graph ops parity test"))
    return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv),   cmocka_unit_test(test_batchnorm),
      cmocka_unit_test(test_pools),  cmocka_unit_test(test_dense_matmul),
      cmocka_unit_test(test_unary),  cmocka_unit_test(test_binary),
      cmocka_unit_test(test_rows),   cmocka_unit_test(test_moves),
      cmocka_unit_test(test_tokens), cmocka_unit_test(test_attention),
      cmocka_unit_test(test_sparse), cmocka_unit_test(test_fused),
      cmocka_unit_test(test_typed),
  };
  int failed = cmocka_run_group_tests(tests, setup, parity_close);
  parity_print("CUDA vs host, graph ops (largest differences over every compared element)",
               "case");
  return failed ? 1 : 0;
}
