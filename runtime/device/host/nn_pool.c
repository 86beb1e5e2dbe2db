/*
 * Host kernels of MAXPOOL, AVGPOOL and GAVGPOOL (group "conv"): native C
 * and OpenMP on the caller's NCHW tensors, one (n, c) plane per task.
 *
 * MAXPOOL takes PyTorch's rule: the window scanned row by row, a value
 * replaces the maximum when it is larger or NaN, so ties go to the first
 * in window order and a NaN propagates.  Padding is never the maximum
 * (the padding is smaller than the kernel, so every window holds an
 * input).  The forward in training saves, for each output, the offset of
 * its maximum within the window, (ih - ih0) kw + (iw - iw0) counted from
 * the window's unclipped corner: one byte (u8) when the kernel has at most
 * 256 elements, else i32; the aux tensor has the output's shape.  The
 * backward zeroes each gradient plane and adds gout at those offsets, in
 * output order (overlapping windows add up).
 *
 * The common 2x2 stride-2 unpadded max pool has its own loops: four
 * compares per output, vectorised across the output row, and a backward
 * that writes each input gradient once (no zeroing pass).  The
 * environment variable ACCELRT_POOL_PATH=generic makes prepare take the
 * general loops instead (for the tests of both paths and measurements).
 *
 * AVGPOOL divides by the whole kernel area, padding included (PyTorch's
 * count_include_pad=True; with PyTorch's symmetric padding no window
 * reaches past the padded input, so the divisor is always kh*kw), or with
 * exclude_pad by the window's elements inside the input (ONNX's
 * count_include_pad=0).
 *
 * A dilated max pool and one asked for its indices (ONNX's MaxPool) take
 * the general loops: the window's elements dilation apart, and each
 * maximum's flat index into the input written beside its value.
 * GAVGPOOL averages each plane (sum in double).
 *
 * Every output is one thread's, and each gradient plane one thread's, so
 * the results do not depend on the thread count.
 */
#include "host/nn_conv_impl.h"
#include "nn/nn_window.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct pool_geom {
  int64_t N, C, H, W, Ho, Wo;
  int64_t kh, kw, sh, sw, ph, pw; /* ph, pw: top and left padding */
  int64_t dh, dw;                 /* max pool: dilation */
  bool exclude_pad;               /* avg pool: divide by the elements inside */
} pool_geom;

typedef struct pool {
  pool_geom g;
  bool fast2x2; /* max pool 2x2, stride 2, no padding: the special loops */
  bool wide;    /* max pool offsets in i32 (kernel of more than 256) */
} pool;

/* The geometry of op on input x (shape checked by infer). */
static pool_geom pool_geom_of(ar_nn_op op, const ar_nn_attr *t, const ar_shape *x) {
  pool_geom g = {.N = x->d[0], .C = x->d[1], .H = x->d[2], .W = x->d[3], .dh = 1, .dw = 1};
  if (op == AR_NN_GAVGPOOL) {
    g.kh = g.H;
    g.kw = g.W;
    g.sh = g.sw = 1;
    g.Ho = g.Wo = 1;
    return g;
  }
  g.kh = t->kernel[0];
  g.kw = t->kernel[1];
  g.sh = t->stride[0];
  g.sw = t->stride[1];
  g.ph = t->pad[0];
  g.pw = t->pad[1];
  if (op == AR_NN_MAXPOOL) {
    g.dh = t->dilation[0];
    g.dw = t->dilation[1];
  } else {
    g.exclude_pad = t->exclude_pad;
  }
  g.Ho = nn_window_out(g.H, g.kh, g.sh, t->pad[0], t->pad[2], g.dh);
  g.Wo = nn_window_out(g.W, g.kw, g.sw, t->pad[1], t->pad[3], g.dw);
  return g;
}

/* ---- infer --------------------------------------------------------------- */

static ar_status pool_check_input(const char *op, int n_in, const ar_shape *in, const ar_dtype *dt,
                                  ar_err *err) {
  char xs[96];
  if (n_in != 1)
    return ar_errf(err, AR_INVALID, "%s takes one input (N,C,H,W), not %d", op, n_in);
  ar_shape_str(&in[0], xs, sizeof xs);
  if (in[0].nd != 4 || dt[0] != AR_DT_F32)
    return ar_errf(err, AR_INVALID, "input %s %s: %s takes an f32 image batch (N,C,H,W)", xs,
                   ar_dtype_name(dt[0]), op);
  for (int i = 0; i < 4; i++)
    if (in[0].d[i] < 1)
      return ar_errf(err, AR_INVALID, "input %s: %s needs every dimension at least 1", xs, op);
  return AR_OK;
}

static ar_status pool_infer_op(ar_nn_op op, const ar_nn_attr *t, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  const char *name = ar_nn_op_name(op);
  AR_CHECK(pool_check_input(name, n_in, in, dt, err));
  if (op != AR_NN_GAVGPOOL) {
    char xs[96], ks[32], ps[64], ss[32];
    ar_shape_str(&in[0], xs, sizeof xs);
    ar__nn_pair_str(t->kernel, ks, sizeof ks);
    ar__nn_pad_str(t->pad, ps, sizeof ps);
    ar__nn_pair_str(t->stride, ss, sizeof ss);
    if (t->kernel[0] < 1 || t->kernel[1] < 1 || t->stride[0] < 1 || t->stride[1] < 1 ||
        t->pad[0] < 0 || t->pad[1] < 0 || t->pad[2] < 0 || t->pad[3] < 0 ||
        (op == AR_NN_MAXPOOL && (t->dilation[0] < 1 || t->dilation[1] < 1)))
      return ar_errf(err, AR_INVALID,
                     "input %s, kernel %s, padding %s, stride %s: kernel, stride (and a max "
                     "pool's dilation) must be at least 1 and padding at least 0",
                     xs, ks, ps, ss);
    /* A window entirely in the padding would have no maximum. */
    const int64_t eh = op == AR_NN_MAXPOOL ? t->dilation[0] * (t->kernel[0] - 1) + 1 : t->kernel[0];
    const int64_t ew = op == AR_NN_MAXPOOL ? t->dilation[1] * (t->kernel[1] - 1) + 1 : t->kernel[1];
    if (t->pad[0] >= eh || t->pad[2] >= eh || t->pad[1] >= ew || t->pad[3] >= ew)
      return ar_errf(err, AR_INVALID,
                     "input %s, kernel %s, padding %s, stride %s: the padding must be smaller "
                     "than the kernel",
                     xs, ks, ps, ss);
    if (nn_window_out(in[0].d[2], eh, t->stride[0], t->pad[0], t->pad[2], 1) < 1 ||
        nn_window_out(in[0].d[3], ew, t->stride[1], t->pad[1], t->pad[3], 1) < 1)
      return ar_errf(err, AR_INVALID,
                     "input %s, kernel %s, padding %s, stride %s: the output would be empty "
                     "(the kernel is larger than the padded input)",
                     xs, ks, ps, ss);
  }
  pool_geom g = pool_geom_of(op, t, &in[0]);
  ar__nn_sig_init(sig, 1);
  int64_t yd[4] = {g.N, g.C, g.Ho, g.Wo};
  ar_shape ys = op == AR_NN_GAVGPOOL ? ar__nn_shape(2, yd) : ar__nn_shape(4, yd);
  ar__nn_sig_out(sig, &ys, AR_DT_F32);
  /* The backward reads gout only (and the aux offsets of a max pool). */
  sig->in_needed = 0;
  sig->out_needed = false;
  sig->flops = (double)ar_shape_count(&ys) * (double)g.kh * (double)g.kw;
  if (op == AR_NN_MAXPOOL)
    ar__nn_sig_aux(sig, &ys, g.kh * g.kw <= 256 ? AR_DT_U8 : AR_DT_I32);
  if (op == AR_NN_MAXPOOL && t->indices)
    ar__nn_sig_out(sig, &ys, AR_DT_I64);
  return AR_OK;
}

static ar_status maxpool_infer(const ar_nn_attr *t, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  return pool_infer_op(AR_NN_MAXPOOL, t, n_in, in, dt, sig, err);
}
static ar_status avgpool_infer(const ar_nn_attr *t, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  return pool_infer_op(AR_NN_AVGPOOL, t, n_in, in, dt, sig, err);
}
static ar_status gavgpool_infer(const ar_nn_attr *t, int n_in, const ar_shape *in,
                                const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  return pool_infer_op(AR_NN_GAVGPOOL, t, n_in, in, dt, sig, err);
}

/* ---- prepare ------------------------------------------------------------- */

static void pool_release(void *state) { ar_free(state); }

static ar_status pool_prepare(const ar_nn_args *a, bool training, void **state, size_t *work_bytes,
                              ar_err *err) {
  pool_geom g = pool_geom_of(a->op, a->attr, &a->in[0].shape);
  bool max = a->op == AR_NN_MAXPOOL;
  bool wide = g.kh * g.kw > 256;
  if (max && training) {
    char want[96];
    ar_shape ys = ar__nn_shape(4, (int64_t[]){g.N, g.C, g.Ho, g.Wo});
    ar_shape_str(&ys, want, sizeof want);
    if (a->n_aux != 1 || !ar_shape_eq(&a->aux[0].shape, &ys) ||
        a->aux[0].dtype != (wide ? AR_DT_I32 : AR_DT_U8))
      return ar_errf(err, AR_INVALID,
                     "maxpool: the aux tensor is not the %s %s of offsets infer asked for", want,
                     ar_dtype_name(wide ? AR_DT_I32 : AR_DT_U8));
  }
  pool *p = ar_calloc(1, sizeof *p);
  if (!p)
    return ar_errf(err, AR_NOMEM, "out of memory preparing a %s", ar_nn_op_name(a->op));
  p->g = g;
  p->wide = wide;
  const char *path = getenv("ACCELRT_POOL_PATH");
  p->fast2x2 = max && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && a->attr->pad[0] == 0 &&
               a->attr->pad[1] == 0 && a->attr->pad[2] == 0 && a->attr->pad[3] == 0 &&
               g.dh == 1 && g.dw == 1 && !a->attr->indices &&
               !(path && strcmp(path, "generic") == 0);
  *work_bytes = 0;
  *state = p;
  return AR_OK;
}

/* ---- max pool ------------------------------------------------------------ */

/* A value takes the maximum's place when larger, or NaN (PyTorch's rule). */
static inline bool beats(float v, float m) { return v > m || isnan(v); }
/* The same without a short-circuit (no control flow in a vector loop). */
static inline bool beats_sel(float v, float m) { return (v > m) | (v != v); }

/* Outputs of one row the 2x2 forward takes at a time when the row is
 * shorter than one vector step. */
#define MAX2_BLOCK 64

/* The maximum of v0..v3 (window order) and its offset, as a float. */
static inline float max4(float v0, float v1, float v2, float v3, float *k) {
  float m = v0, o = 0.0f;
  bool c = beats_sel(v1, m);
  m = c ? v1 : m;
  o = c ? 1.0f : o;
  c = beats_sel(v2, m);
  m = c ? v2 : m;
  o = c ? 2.0f : o;
  c = beats_sel(v3, m);
  m = c ? v3 : m;
  o = c ? 3.0f : o;
  *k = o;
  return m;
}

/* Eight outputs of one row from its two input rows t and u: one vector
 * step (a fixed trip count, so no scalar remainder). */
static inline __attribute__((always_inline)) void max2x2_8(const float *restrict t,
                                                           const float *restrict u,
                                                           float *restrict y,
                                                           uint8_t *restrict ir, bool save) {
  float kf[8];
#pragma omp simd
  for (int j = 0; j < 8; j++)
    y[j] = max4(t[2 * j], t[2 * j + 1], u[2 * j], u[2 * j + 1], &kf[j]);
  if (save)
    for (int j = 0; j < 8; j++)
      ir[j] = (uint8_t)kf[j];
}

/* 2x2, stride 2, no padding: one plane; offsets saved when save.  The
 * vector loop holds floats only (the offset too, as 0.0f .. 3.0f): with a
 * byte store in it the compiler would take 32 outputs per vector
 * iteration, more than a row of 14 has, and run the scalar loop.  Selects,
 * not branches: random data would mispredict a branch half the time.  A
 * row of at least 8 outputs goes in steps of 8, the last step overlapping
 * the one before when 8 does not divide the row (it writes the same values
 * again): the scalar remainder, with its NaN tests, cost as much as the
 * vector part on rows of 14. */
static inline __attribute__((always_inline)) void max2x2_fwd(const float *restrict x,
                                                             float *restrict y,
                                                             uint8_t *restrict idx,
                                                             const pool_geom *g, bool save) {
  const int64_t W = g->W, Wo = g->Wo;
  float kf[MAX2_BLOCK];
  for (int64_t oh = 0; oh < g->Ho; oh++) {
    const float *restrict r0 = x + 2 * oh * W, *restrict r1 = r0 + W;
    float *yr = y + oh * Wo;
    uint8_t *ir = save ? idx + oh * Wo : NULL;
    if (Wo >= 8) {
      for (int64_t b0 = 0;; b0 += 8) {
        if (b0 + 8 > Wo)
          b0 = Wo - 8;
        max2x2_8(r0 + 2 * b0, r1 + 2 * b0, yr + b0, save ? ir + b0 : NULL, save);
        if (b0 + 8 == Wo)
          break;
      }
      continue;
    }
#pragma omp simd
    for (int64_t j = 0; j < Wo; j++)
      yr[j] = max4(r0[2 * j], r0[2 * j + 1], r1[2 * j], r1[2 * j + 1], &kf[j]);
    if (save)
      for (int64_t j = 0; j < Wo; j++)
        ir[j] = (uint8_t)kf[j];
  }
}

/* Gradients of the inputs of n outputs of one row (their two input rows
 * t and u) from the outputs' gradients gr and offsets kf (floats). */
static inline __attribute__((always_inline)) void max2x2_scatter(const float *restrict gr,
                                                                 const float *restrict kf,
                                                                 float *restrict t,
                                                                 float *restrict u, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    const float v = gr[j], k = kf[j];
    t[2 * j] = k == 0.0f ? v : 0.0f;
    t[2 * j + 1] = k == 1.0f ? v : 0.0f;
    u[2 * j] = k == 2.0f ? v : 0.0f;
    u[2 * j + 1] = k == 3.0f ? v : 0.0f;
  }
}

/* Its backward: every input gradient of the plane written once, in the
 * forward's steps (8 outputs at a time, the last step overlapping: it
 * writes the same values again).  The offsets are widened to floats
 * first, for the same reason as in the forward. */
static void max2x2_bwd(const float *restrict gy, const uint8_t *restrict idx, float *restrict gx,
                       const pool_geom *g) {
  const int64_t W = g->W, Wo = g->Wo;
  float kf[MAX2_BLOCK];
  for (int64_t oh = 0; oh < g->Ho; oh++) {
    float *d0 = gx + 2 * oh * W, *d1 = d0 + W;
    const float *gr = gy + oh * Wo;
    const uint8_t *ir = idx + oh * Wo;
    if (Wo >= 8) {
      for (int64_t b0 = 0;; b0 += 8) {
        if (b0 + 8 > Wo)
          b0 = Wo - 8;
        for (int j = 0; j < 8; j++)
          kf[j] = (float)ir[b0 + j];
        max2x2_scatter(gr + b0, kf, d0 + 2 * b0, d1 + 2 * b0, 8);
        if (b0 + 8 == Wo)
          break;
      }
    } else {
      for (int64_t j = 0; j < Wo; j++)
        kf[j] = (float)ir[j];
      max2x2_scatter(gr, kf, d0, d1, Wo);
    }
    /* An odd width: the last column is in no window. */
    for (int64_t iw = 2 * Wo; iw < W; iw++)
      d0[iw] = d1[iw] = 0.0f;
  }
  /* An odd height: the last row is in no window. */
  for (int64_t ih = 2 * g->Ho; ih < g->H; ih++)
    memset(gx + ih * W, 0, (size_t)W * sizeof(float));
}

/* Any kernel, stride, padding and dilation: one plane; offsets (window
 * positions, i kw + j) saved into idx8 or idx32 (the one not NULL) when
 * save; each maximum's flat index into the input, base + ih W + iw, into
 * flat when not NULL.  A window with no element inside the input (only
 * possible with dilation) gives -inf. */
static inline __attribute__((always_inline)) void max_fwd(const float *restrict x,
                                                          float *restrict y, uint8_t *idx8,
                                                          int32_t *idx32, int64_t *flat,
                                                          int64_t base, const pool_geom *g,
                                                          bool save) {
  const int64_t H = g->H, W = g->W, kw = g->kw, dh = g->dh, dw = g->dw;
  for (int64_t oh = 0; oh < g->Ho; oh++) {
    const int64_t ih0 = oh * g->sh - g->ph;
    for (int64_t ow = 0; ow < g->Wo; ow++) {
      const int64_t iw0 = ow * g->sw - g->pw;
      float m = -INFINITY;
      int64_t k = 0, at = -1;
      const int64_t i0 = nn_window_first(ih0, dh), i1 = nn_window_end(ih0, dh, g->kh, H);
      const int64_t j0 = nn_window_first(iw0, dw), j1 = nn_window_end(iw0, dw, kw, W);
      for (int64_t i = i0; i < i1; i++) {
        const int64_t ih = ih0 + i * dh;
        for (int64_t j = j0; j < j1; j++) {
          const int64_t iw = iw0 + j * dw;
          const float v = x[ih * W + iw];
          if (at < 0 || beats(v, m)) {
            m = v;
            k = i * kw + j;
            at = ih * W + iw;
          }
        }
      }
      const int64_t o = oh * g->Wo + ow;
      y[o] = m;
      if (save && idx8)
        idx8[o] = (uint8_t)k;
      else if (save)
        idx32[o] = (int32_t)k;
      if (flat)
        flat[o] = base + (at < 0 ? 0 : at);
    }
  }
}

/* Its backward: gx zeroed, gout added at each output's maximum. */
static void max_bwd(const float *restrict gy, const uint8_t *idx8, const int32_t *idx32,
                    float *restrict gx, const pool_geom *g) {
  const int64_t H = g->H, W = g->W, kw = g->kw;
  memset(gx, 0, (size_t)(H * W) * sizeof(float));
  for (int64_t oh = 0; oh < g->Ho; oh++)
    for (int64_t ow = 0; ow < g->Wo; ow++) {
      const int64_t o = oh * g->Wo + ow;
      const int64_t k = idx8 ? (int64_t)idx8[o] : (int64_t)idx32[o];
      const int64_t ih = oh * g->sh - g->ph + k / kw * g->dh;
      const int64_t iw = ow * g->sw - g->pw + k % kw * g->dw;
      if (ih >= 0 && ih < H && iw >= 0 && iw < W)
        gx[ih * W + iw] += gy[o];
    }
}

/* ---- average pools ------------------------------------------------------- */

static void avg_fwd(const float *restrict x, float *restrict y, const pool_geom *g) {
  const int64_t H = g->H, W = g->W;
  const float full = (float)(g->kh * g->kw);
  for (int64_t oh = 0; oh < g->Ho; oh++) {
    const int64_t ih0 = oh * g->sh - g->ph;
    const int64_t h0 = ih0 > 0 ? ih0 : 0, h1 = ih0 + g->kh < H ? ih0 + g->kh : H;
    for (int64_t ow = 0; ow < g->Wo; ow++) {
      const int64_t iw0 = ow * g->sw - g->pw;
      const int64_t w0 = iw0 > 0 ? iw0 : 0, w1 = iw0 + g->kw < W ? iw0 + g->kw : W;
      float s = 0.0f;
      for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++)
          s += x[ih * W + iw];
      y[oh * g->Wo + ow] = s / (g->exclude_pad ? (float)((h1 - h0) * (w1 - w0)) : full);
    }
  }
}

static void avg_bwd(const float *restrict gy, float *restrict gx, const pool_geom *g) {
  const int64_t H = g->H, W = g->W;
  const float full = (float)(g->kh * g->kw);
  memset(gx, 0, (size_t)(H * W) * sizeof(float));
  for (int64_t oh = 0; oh < g->Ho; oh++) {
    const int64_t ih0 = oh * g->sh - g->ph;
    const int64_t h0 = ih0 > 0 ? ih0 : 0, h1 = ih0 + g->kh < H ? ih0 + g->kh : H;
    for (int64_t ow = 0; ow < g->Wo; ow++) {
      const int64_t iw0 = ow * g->sw - g->pw;
      const int64_t w0 = iw0 > 0 ? iw0 : 0, w1 = iw0 + g->kw < W ? iw0 + g->kw : W;
      const float v =
          gy[oh * g->Wo + ow] / (g->exclude_pad ? (float)((h1 - h0) * (w1 - w0)) : full);
      for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++)
          gx[ih * W + iw] += v;
    }
  }
}

static inline float plane_mean(const float *restrict x, int64_t S) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < S; j++)
    s += (double)x[j];
  return (float)(s / (double)S);
}

/* ---- forward, backward --------------------------------------------------- */

static void pool_forward(void *state, ar_nn_args *a) {
  const pool *p = state;
  const pool_geom *g = &p->g;
  const int64_t P = g->N * g->C, S = g->H * g->W, So = g->Ho * g->Wo;
  const float *x = a->in[0].p;
  float *y = a->out[0].p;
  const bool save = a->op == AR_NN_MAXPOOL && a->training;
  uint8_t *idx8 = save && !p->wide ? a->aux[0].p : NULL;
  int32_t *idx32 = save && p->wide ? a->aux[0].p : NULL;
  int64_t *flat = a->op == AR_NN_MAXPOOL && a->n_out > 1 ? a->out[1].p : NULL;
  const int nt = ar__nn_conv_team(a, P * S);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t q = 0; q < P; q++) {
    const float *xq = x + q * S;
    float *yq = y + q * So;
    if (a->op == AR_NN_GAVGPOOL)
      yq[0] = plane_mean(xq, S);
    else if (a->op == AR_NN_AVGPOOL)
      avg_fwd(xq, yq, g);
    else if (p->fast2x2 && save)
      max2x2_fwd(xq, yq, idx8 + q * So, g, true);
    else if (p->fast2x2)
      max2x2_fwd(xq, yq, NULL, g, false);
    else if (save)
      max_fwd(xq, yq, idx8 ? idx8 + q * So : NULL, idx32 ? idx32 + q * So : NULL,
              flat ? flat + q * So : NULL, q * S, g, true);
    else
      max_fwd(xq, yq, NULL, NULL, flat ? flat + q * So : NULL, q * S, g, false);
  }
}

static void pool_backward(void *state, ar_nn_args *a) {
  const pool *p = state;
  const pool_geom *g = &p->g;
  float *gx = a->gin[0].p;
  if (!gx)
    return; /* no parameters: nothing else to compute */
  const int64_t P = g->N * g->C, S = g->H * g->W, So = g->Ho * g->Wo;
  const float *gy = a->gout[0].p;
  const bool max = a->op == AR_NN_MAXPOOL;
  const uint8_t *idx8 = max && !p->wide ? a->aux[0].p : NULL;
  const int32_t *idx32 = max && p->wide ? a->aux[0].p : NULL;
  const int nt = ar__nn_conv_team(a, P * S);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t q = 0; q < P; q++) {
    const float *gq = gy + q * So;
    float *dq = gx + q * S;
    if (a->op == AR_NN_GAVGPOOL) {
      const float v = gq[0] / (float)S;
      for (int64_t j = 0; j < S; j++)
        dq[j] = v;
    } else if (a->op == AR_NN_AVGPOOL) {
      avg_bwd(gq, dq, g);
    } else if (p->fast2x2) {
      max2x2_bwd(gq, idx8 + q * So, dq, g);
    } else {
      max_bwd(gq, idx8 ? idx8 + q * So : NULL, idx32 ? idx32 + q * So : NULL, dq, g);
    }
  }
}

void ar__nn_host_pool_register(ar_nn_kernel *table) {
  typedef ar_status infer_fn(const ar_nn_attr *, int, const ar_shape *, const ar_dtype *,
                             ar_nn_sig *, ar_err *);
  infer_fn *const infer[] = {maxpool_infer, avgpool_infer, gavgpool_infer};
  const ar_nn_op ops[] = {AR_NN_MAXPOOL, AR_NN_AVGPOOL, AR_NN_GAVGPOOL};
  for (int i = 0; i < 3; i++)
    table[ops[i]] = (ar_nn_kernel){
        .infer = infer[i],
        .prepare = pool_prepare,
        .forward = pool_forward,
        .backward = pool_backward,
        .release = pool_release,
    };
}
