/*
 * CUDA kernels of MAXPOOL, AVGPOOL and GAVGPOOL (group "conv"), with the
 * semantics of runtime/device/host/nn_pool.c, on NCHW tensors: one thread
 * per output, or per input element for the backward.
 *
 * MAXPOOL keeps PyTorch's rule (ties to the first in window order, NaN
 * propagates) and saves each output's offset in its window in the aux
 * tensor (u8, or i32 for kernels over 256); the backward gathers, for each
 * input element, gout of the outputs whose saved offset points at it, in
 * output order as the host adds them.  AVGPOOL divides by kh kw, or with
 * exclude_pad by the window's elements inside the input.  GAVGPOOL: one
 * block per plane.  No workspace.
 */
#include "cuda/cuda_nn.h"
#include "nn/nn_window.h"

#include <math.h>

/* ---- MAXPOOL, AVGPOOL, GAVGPOOL ------------------------------------------ */

typedef struct pool_g {
  int64_t P, H, W, Ho, Wo; /* P = N C planes */
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool exclude_pad, wide;
} pool_g;

static pool_g pool_geom(const ar_nn_args *a) {
  const ar_nn_attr *t = a->attr;
  const ar_shape *x = &a->in[0].shape, *y = &a->out[0].shape;
  pool_g g;
  g.P = x->d[0] * x->d[1];
  g.H = x->d[2];
  g.W = x->d[3];
  const bool global = a->op == AR_NN_GAVGPOOL;
  g.Ho = global ? 1 : y->d[2];
  g.Wo = global ? 1 : y->d[3];
  g.kh = global ? g.H : t->kernel[0];
  g.kw = global ? g.W : t->kernel[1];
  g.sh = global ? 1 : t->stride[0];
  g.sw = global ? 1 : t->stride[1];
  g.ph = global ? 0 : t->pad[0];
  g.pw = global ? 0 : t->pad[1];
  g.dh = a->op == AR_NN_MAXPOOL ? t->dilation[0] : 1;
  g.dw = a->op == AR_NN_MAXPOOL ? t->dilation[1] : 1;
  g.exclude_pad = a->op == AR_NN_AVGPOOL && t->exclude_pad;
  g.wide = g.kh * g.kw > 256;
  return g;
}

/* The outputs along one axis whose window (start o s - p, extent ext)
 * holds input position v: o in [lo, hi]. */
static __device__ __forceinline__ void pool_range(int64_t v, int64_t s, int64_t p,
                                                  int64_t ext, int64_t out, int64_t *lo,
                                                  int64_t *hi) {
  const int64_t a = v + p - (ext - 1); /* o s >= a */
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  const int64_t h = (v + p) / s; /* o s <= v + p; v + p >= 0 */
  *hi = h < out - 1 ? h : out - 1;
}

static __global__ void maxpool_fwd_k(pool_g g, const float *x, float *y, uint8_t *idx8,
                                     int32_t *idx32, int64_t *flat) {
  const int64_t So = g.Ho * g.Wo, S = g.H * g.W;
  NN_LOOP(e, g.P * So) {
    const int64_t q = e / So, ow = e % g.Wo, oh = e % So / g.Wo;
    const float *xq = x + q * S;
    const int64_t ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
    float m = -INFINITY;
    int64_t k = 0, at = -1;
    const int64_t i1 = nn_window_end(ih0, g.dh, g.kh, g.H);
    const int64_t j1 = nn_window_end(iw0, g.dw, g.kw, g.W);
    for (int64_t i = nn_window_first(ih0, g.dh); i < i1; i++) {
      const int64_t ih = ih0 + i * g.dh;
      for (int64_t j = nn_window_first(iw0, g.dw); j < j1; j++) {
        const int64_t iw = iw0 + j * g.dw;
        const float v = xq[ih * g.W + iw];
        if (at < 0 || v > m || isnan(v)) {
          m = v;
          k = i * g.kw + j;
          at = ih * g.W + iw;
        }
      }
    }
    y[e] = m;
    if (idx8)
      idx8[e] = (uint8_t)k;
    if (idx32)
      idx32[e] = (int32_t)k;
    if (flat)
      flat[e] = q * S + (at < 0 ? 0 : at);
  }
}

static __global__ void maxpool_bwd_k(pool_g g, const float *gy, const uint8_t *idx8,
                                     const int32_t *idx32, float *gx) {
  const int64_t So = g.Ho * g.Wo, S = g.H * g.W;
  NN_LOOP(e, g.P * S) {
    const int64_t q = e / S, ih = e % S / g.W, iw = e % g.W;
    int64_t oh0, oh1, ow0, ow1;
    pool_range(ih, g.sh, g.ph, g.dh * (g.kh - 1) + 1, g.Ho, &oh0, &oh1);
    pool_range(iw, g.sw, g.pw, g.dw * (g.kw - 1) + 1, g.Wo, &ow0, &ow1);
    float s = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++) {
        const int64_t o = q * So + oh * g.Wo + ow;
        const int64_t k = idx8 ? (int64_t)idx8[o] : (int64_t)idx32[o];
        if (oh * g.sh - g.ph + k / g.kw * g.dh == ih && ow * g.sw - g.pw + k % g.kw * g.dw == iw)
          s += gy[o];
      }
    gx[e] = s;
  }
}

/* The divisor of output (oh, ow) of an average pool (no dilation). */
static __device__ __forceinline__ float avg_div(const pool_g &g, int64_t oh, int64_t ow) {
  if (!g.exclude_pad)
    return (float)(g.kh * g.kw);
  const int64_t ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
  const int64_t h0 = ih0 > 0 ? ih0 : 0, h1 = ih0 + g.kh < g.H ? ih0 + g.kh : g.H;
  const int64_t w0 = iw0 > 0 ? iw0 : 0, w1 = iw0 + g.kw < g.W ? iw0 + g.kw : g.W;
  return (float)((h1 - h0) * (w1 - w0));
}

static __global__ void avgpool_fwd_k(pool_g g, const float *x, float *y) {
  const int64_t So = g.Ho * g.Wo, S = g.H * g.W;
  NN_LOOP(e, g.P * So) {
    const int64_t q = e / So, ow = e % g.Wo, oh = e % So / g.Wo;
    const float *xq = x + q * S;
    const int64_t ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
    const int64_t h0 = ih0 > 0 ? ih0 : 0, h1 = ih0 + g.kh < g.H ? ih0 + g.kh : g.H;
    const int64_t w0 = iw0 > 0 ? iw0 : 0, w1 = iw0 + g.kw < g.W ? iw0 + g.kw : g.W;
    float s = 0.0f;
    for (int64_t ih = h0; ih < h1; ih++)
      for (int64_t iw = w0; iw < w1; iw++)
        s += xq[ih * g.W + iw];
    y[e] = s / avg_div(g, oh, ow);
  }
}

static __global__ void avgpool_bwd_k(pool_g g, const float *gy, float *gx) {
  const int64_t So = g.Ho * g.Wo, S = g.H * g.W;
  NN_LOOP(e, g.P * S) {
    const int64_t q = e / S, ih = e % S / g.W, iw = e % g.W;
    int64_t oh0, oh1, ow0, ow1;
    pool_range(ih, g.sh, g.ph, g.kh, g.Ho, &oh0, &oh1);
    pool_range(iw, g.sw, g.pw, g.kw, g.Wo, &ow0, &ow1);
    float s = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++)
        s += gy[q * So + oh * g.Wo + ow] / avg_div(g, oh, ow);
    gx[e] = s;
  }
}

/* One block per plane: its mean, summed in double. */
static __global__ void gavg_fwd_k(int64_t S, const float *x, float *y) {
  const float *xq = x + (int64_t)blockIdx.x * S;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
    s += (double)xq[j];
  s = nn_block_sum(s);
  if (threadIdx.x == 0)
    y[blockIdx.x] = (float)(s / (double)S);
}

static __global__ void gavg_bwd_k(int64_t P, int64_t S, const float *gy, float *gx) {
  NN_LOOP(e, P * S) { gx[e] = gy[e / S] / (float)S; }
}

static void pool_forward(void *state, ar_nn_args *a) {
  (void)state;
  const pool_g g = pool_geom(a);
  const float *x = (const float *)a->in[0].p;
  float *y = (float *)a->out[0].p;
  if (a->op == AR_NN_GAVGPOOL) {
    NN_LAUNCH_ROWS(a, g.P, "nn global_avgpool forward", gavg_fwd_k, g.H * g.W, x, y);
  } else if (a->op == AR_NN_AVGPOOL) {
    NN_LAUNCH(a, g.P * g.Ho * g.Wo, "nn avgpool forward", avgpool_fwd_k, g, x, y);
  } else {
    const bool save = a->training && a->n_aux > 0;
    uint8_t *idx8 = save && !g.wide ? (uint8_t *)a->aux[0].p : NULL;
    int32_t *idx32 = save && g.wide ? (int32_t *)a->aux[0].p : NULL;
    int64_t *flat = a->n_out > 1 ? (int64_t *)a->out[1].p : NULL;
    NN_LAUNCH(a, g.P * g.Ho * g.Wo, "nn maxpool forward", maxpool_fwd_k, g, x, y, idx8, idx32,
              flat);
  }
}

static void pool_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const pool_g g = pool_geom(a);
  const float *gy = (const float *)a->gout[0].p;
  float *gx = (float *)a->gin[0].p;
  if (a->op == AR_NN_GAVGPOOL)
    NN_LAUNCH(a, g.P * g.H * g.W, "nn global_avgpool backward", gavg_bwd_k, g.P, g.H * g.W, gy,
              gx);
  else if (a->op == AR_NN_AVGPOOL)
    NN_LAUNCH(a, g.P * g.H * g.W, "nn avgpool backward", avgpool_bwd_k, g, gy, gx);
  else
    NN_LAUNCH(a, g.P * g.H * g.W, "nn maxpool backward", maxpool_bwd_k, g, gy,
              (const uint8_t *)(g.wide ? NULL : a->aux[0].p),
              (const int32_t *)(g.wide ? a->aux[0].p : NULL), gx);
}

void ar__cuda_nn_pool_register(ar_nn_kernel *table) {
  const ar_nn_op pools[] = {AR_NN_MAXPOOL, AR_NN_AVGPOOL, AR_NN_GAVGPOOL};
  for (int i = 0; i < 3; i++) {
    table[pools[i]].forward = pool_forward;
    table[pools[i]].backward = pool_backward;
  }
}
