/*
 * CUDA kernels of the nn ops in group "conv": CONV2D, MAXPOOL, AVGPOOL,
 * GAVGPOOL, BATCHNORM, on the caller's NCHW tensors, with the semantics of
 * runtime/device/host/nn_conv.c, nn_pool.c and nn_bnorm.c.
 *
 * CONV2D runs cuDNN when the build and the machine have it (below:
 * algorithms picked at prepare within the caller's workspace), else a
 * direct convolution (any kernel, stride, padding, dilation, groups): one thread per output for the forward, one per input element
 * for the data gradient (gathering the outputs whose windows hold it), and
 * one block per weight (and per bias) for the weight gradients, summing
 * over the batch and the output plane in double.  A fused relu masks gout
 * with y > 0, as the host does.  No workspace.
 *
 * MAXPOOL keeps PyTorch's rule (ties to the first in window order, NaN
 * propagates) and saves each output's offset in its window in the aux
 * tensor (u8, or i32 for kernels over 256); the backward gathers, for each
 * input element, gout of the outputs whose saved offset points at it, in
 * output order as the host adds them.  AVGPOOL divides by kh kw, or with
 * exclude_pad by the window's elements inside the input.  GAVGPOOL: one
 * block per plane.
 *
 * BATCHNORM: one block per channel computes the batch mean and biased
 * variance in double, updates the running statistics, then normalises the
 * channel (evaluation: the running statistics); the backward reduces sum g
 * and sum g (x - mean) per channel the same way and writes dx, dgamma and
 * dbeta.  The fused relu's mask comes from x as on the host.
 */
#include "cuda/cuda_nn.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- CONV2D -------------------------------------------------------------- */

typedef struct conv_g {
  int64_t N, C, H, W, O, Ho, Wo;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw; /* ph, pw: top and left padding */
  int64_t Cg, Og;                         /* channels per group, in and out */
  bool relu, bias;
} conv_g;

static conv_g conv_geom(const ar_nn_args *a) {
  const ar_nn_attr *t = a->attr;
  const int64_t *x = a->in[0].shape.d, *y = a->out[0].shape.d;
  conv_g g;
  g.N = x[0];
  g.C = x[1];
  g.H = x[2];
  g.W = x[3];
  g.O = y[1];
  g.Ho = y[2];
  g.Wo = y[3];
  g.kh = t->kernel[0];
  g.kw = t->kernel[1];
  g.sh = t->stride[0];
  g.sw = t->stride[1];
  g.ph = t->pad[0];
  g.pw = t->pad[1];
  g.dh = t->dilation[0];
  g.dw = t->dilation[1];
  g.Cg = g.C / t->groups;
  g.Og = g.O / t->groups;
  g.relu = t->act == AR_ACT_RELU;
  g.bias = t->bias;
  return g;
}

/* y[n][o][oh][ow] = b[o] + sum over the group's channels and the window. */
static __global__ void conv_fwd_k(conv_g g, const float *x, const float *w,
                                  const float *b, float *y) {
  const int64_t total = g.N * g.O * g.Ho * g.Wo;
  NN_LOOP(e, total) {
    const int64_t ow = e % g.Wo, oh = e / g.Wo % g.Ho, o = e / (g.Wo * g.Ho) % g.O,
                  n = e / (g.Wo * g.Ho * g.O);
    const int64_t c0 = o / g.Og * g.Cg;
    float s = g.bias ? b[o] : 0.0f;
    for (int64_t ci = 0; ci < g.Cg; ci++) {
      const float *xp = x + (n * g.C + c0 + ci) * g.H * g.W;
      const float *wp = w + (o * g.Cg + ci) * g.kh * g.kw;
      for (int64_t i = 0; i < g.kh; i++) {
        const int64_t ih = oh * g.sh - g.ph + i * g.dh;
        if (ih < 0 || ih >= g.H)
          continue;
        for (int64_t j = 0; j < g.kw; j++) {
          const int64_t iw = ow * g.sw - g.pw + j * g.dw;
          if (iw >= 0 && iw < g.W)
            s += xp[ih * g.W + iw] * wp[i * g.kw + j];
        }
      }
    }
    y[e] = g.relu ? (s > 0.0f ? s : 0.0f) : s;
  }
}

/* gout through the fused relu (y > 0), or as it is. */
static __device__ __forceinline__ float conv_gz(const conv_g &g, const float *gy,
                                                const float *y, int64_t idx) {
  return g.relu && !(y[idx] > 0.0f) ? 0.0f : gy[idx];
}

/* dx[n][c][ih][iw]: every output (o in c's group, oh, ow) whose window
 * position (i, j) lands on (ih, iw): oh sh - ph + i dh == ih. */
static __global__ void conv_bwd_data_k(conv_g g, const float *gy, const float *y,
                                       const float *w, float *dx) {
  const int64_t total = g.N * g.C * g.H * g.W;
  NN_LOOP(e, total) {
    const int64_t iw = e % g.W, ih = e / g.W % g.H, c = e / (g.W * g.H) % g.C,
                  n = e / (g.W * g.H * g.C);
    const int64_t grp = c / g.Cg, ci = c - grp * g.Cg;
    float s = 0.0f;
    for (int64_t o = grp * g.Og; o < (grp + 1) * g.Og; o++) {
      const float *wp = w + (o * g.Cg + ci) * g.kh * g.kw;
      for (int64_t i = 0; i < g.kh; i++) {
        const int64_t th = ih + g.ph - i * g.dh;
        if (th < 0 || th % g.sh != 0 || th / g.sh >= g.Ho)
          continue;
        const int64_t oh = th / g.sh;
        for (int64_t j = 0; j < g.kw; j++) {
          const int64_t tw = iw + g.pw - j * g.dw;
          if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.Wo)
            continue;
          const int64_t ow = tw / g.sw;
          const int64_t yi = ((n * g.O + o) * g.Ho + oh) * g.Wo + ow;
          s += conv_gz(g, gy, y, yi) * wp[i * g.kw + j];
        }
      }
    }
    dx[e] = s;
  }
}

/* One block per weight w[o][ci][i][j]: the sum over n, oh, ow of
 * gz[n][o][oh][ow] x[n][c][ih][iw], in double. */
static __global__ void conv_bwd_w_k(conv_g g, const float *gy, const float *y,
                                    const float *x, float *dw) {
  const int64_t widx = blockIdx.x;
  const int64_t j = widx % g.kw, i = widx / g.kw % g.kh, ci = widx / (g.kw * g.kh) % g.Cg,
                o = widx / (g.kw * g.kh * g.Cg);
  const int64_t c = o / g.Og * g.Cg + ci, plane = g.Ho * g.Wo;
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < g.N * plane; k += blockDim.x) {
    const int64_t n = k / plane, oh = k % plane / g.Wo, ow = k % g.Wo;
    const int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
    if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W)
      continue;
    const int64_t yi = (n * g.O + o) * plane + k % plane;
    s += (double)(conv_gz(g, gy, y, yi) * x[((n * g.C + c) * g.H + ih) * g.W + iw]);
  }
  s = nn_block_sum(s);
  if (threadIdx.x == 0)
    dw[widx] = (float)s;
}

/* One block per output channel: db[o] = sum of gz over n, oh, ow. */
static __global__ void conv_bwd_b_k(conv_g g, const float *gy, const float *y, float *db) {
  const int64_t o = blockIdx.x, plane = g.Ho * g.Wo;
  double s = 0.0;
  for (int64_t k = threadIdx.x; k < g.N * plane; k += blockDim.x)
    s += (double)conv_gz(g, gy, y, (k / plane * g.O + o) * plane + k % plane);
  s = nn_block_sum(s);
  if (threadIdx.x == 0)
    db[o] = (float)s;
}

#ifdef ACCELRT_HAVE_CUDNN
/* ---- CONV2D through cuDNN -------------------------------------------------
 * When the handle has cuDNN (and ACCELRT_CUDA_CONV is not "direct"),
 * prepare describes the convolution to cuDNN and picks, in cuDNN's
 * heuristic order, the first algorithm of each pass that fits the
 * workspace the caller can give (the engine's plan: a->work_bytes at
 * prepare; else what the host's kernel asks for the same op) and, for the
 * two backward passes, is deterministic; the workspace it then asks for is
 * what those algorithms need, plus gout masked by a fused relu.  Shapes
 * cuDNN cannot take (asymmetric padding, dims past int) or no fitting
 * algorithm: the direct kernels above.  FP32 arithmetic only
 * (CUDNN_FMA_MATH: no TF32), as the host. */

/* y[n][o][..] = act(y + b[o]): the bias and relu after cuDNN's product. */
static __global__ void conv_bias_act_k(conv_g g, const float *b, float *y) {
  const int64_t plane = g.Ho * g.Wo;
  NN_LOOP(e, g.N * g.O * plane) {
    float v = y[e] + (g.bias ? b[e / plane % g.O] : 0.0f);
    y[e] = g.relu ? (v > 0.0f ? v : 0.0f) : v;
  }
}

/* gz = gout where y > 0, else 0 (the fused relu's backward). */
static __global__ void relu_mask_k(int64_t n, const float *y, const float *gy, float *gz) {
  NN_LOOP(e, n) { gz[e] = y[e] > 0.0f ? gy[e] : 0.0f; }
}

typedef struct conv_dnn {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t c;
  cudnnConvolutionFwdAlgo_t fa;
  cudnnConvolutionBwdDataAlgo_t da;
  cudnnConvolutionBwdFilterAlgo_t wa;
  size_t gz_bytes; /* (N, O, Ho, Wo) masked gout at the workspace's start */
  size_t ws_bytes; /* cuDNN's workspace, after it */
} conv_dnn;

static void dnn_release(void *state) {
  conv_dnn *c = (conv_dnn *)state;
  if (!c)
    return;
  if (c->x)
    ar__dnn.destroy_tensor(c->x);
  if (c->y)
    ar__dnn.destroy_tensor(c->y);
  if (c->w)
    ar__dnn.destroy_filter(c->w);
  if (c->c)
    ar__dnn.destroy_conv(c->c);
  ar_free(c);
}

/* The first of cuDNN's n ranked results that ran, fits room and (when
 * det) is deterministic; -1 when none. */
template <typename P> static int pick(const P *perf, int n, size_t room, bool det) {
  for (int i = 0; i < n; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= room &&
        (!det || perf[i].determinism == CUDNN_DETERMINISTIC))
      return i;
  return -1;
}

static bool fits_int(const conv_g &g) {
  const int64_t v[] = {g.N, g.C, g.H, g.W, g.O, g.Ho, g.Wo, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i] > INT_MAX)
      return false;
  return true;
}

/* The host kernel's workspace for this op (the budget when the caller did
 * not say one). */
static size_t host_work(const ar_nn_args *a, bool training) {
  const ar_nn_kernel *k = &ar__nn_host_table()[AR_NN_CONV2D];
  void *st = NULL;
  size_t w = 0;
  ar_err ignored = AR_ERR_INIT;
  if (!k->prepare || k->prepare(a, training, &st, &w, &ignored) != AR_OK)
    return 0;
  if (k->release)
    k->release(st);
  return w;
}

#define DNN_STEP(call, what)                                                   \
  do {                                                                         \
    cudnnStatus_t s_ = (call);                                                 \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                          \
      st = ar_errf(err, AR_DEVICE, "cuda:%d: %s failed: %s", d->ordinal, what, \
                   ar__dnn.error_string(s_));                                  \
      goto fail;                                                               \
    }                                                                          \
  } while (0)

static ar_status dnn_prepare(const ar_nn_args *a, bool training, void **state,
                             size_t *work_bytes, ar_err *err) {
  ar__cuda_device *d = nn_dev(a);
  const conv_g g = conv_geom(a);
  const int64_t *p = a->attr->pad;
  if (p[0] != p[2] || p[1] != p[3] || !fits_int(g))
    return AR_OK; /* the direct kernels */
  const size_t room = a->work_bytes ? a->work_bytes : host_work(a, training);
  ar_status st = AR_OK;
  cudnnHandle_t h = (cudnnHandle_t)d->dnn;
  conv_dnn *c = (conv_dnn *)ar_calloc(1, sizeof *c);
  if (!c)
    return ar_errf(err, AR_NOMEM, "out of memory preparing a conv");
  c->gz_bytes = training && g.relu ? ((size_t)(g.N * g.O * g.Ho * g.Wo) * 4 + 255) / 256 * 256 : 0;
  if (cudaSetDevice(d->ordinal) != cudaSuccess) {
    st = ar__cuda_status(cudaGetLastError(), err, "cudaSetDevice", d->ordinal);
    goto fail;
  }
  DNN_STEP(ar__dnn.create_tensor(&c->x), "cudnnCreateTensorDescriptor");
  DNN_STEP(ar__dnn.create_tensor(&c->y), "cudnnCreateTensorDescriptor");
  DNN_STEP(ar__dnn.create_filter(&c->w), "cudnnCreateFilterDescriptor");
  DNN_STEP(ar__dnn.create_conv(&c->c), "cudnnCreateConvolutionDescriptor");
  DNN_STEP(ar__dnn.set_tensor4d(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g.N, (int)g.C,
                                (int)g.H, (int)g.W),
           "cudnnSetTensor4dDescriptor (input)");
  DNN_STEP(ar__dnn.set_tensor4d(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g.N, (int)g.O,
                                (int)g.Ho, (int)g.Wo),
           "cudnnSetTensor4dDescriptor (output)");
  DNN_STEP(ar__dnn.set_filter4d(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)g.O, (int)g.Cg,
                                (int)g.kh, (int)g.kw),
           "cudnnSetFilter4dDescriptor");
  DNN_STEP(ar__dnn.set_conv2d(c->c, (int)g.ph, (int)g.pw, (int)g.sh, (int)g.sw, (int)g.dh,
                              (int)g.dw, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
           "cudnnSetConvolution2dDescriptor");
  DNN_STEP(ar__dnn.set_groups(c->c, (int)a->attr->groups), "cudnnSetConvolutionGroupCount");
  DNN_STEP(ar__dnn.set_math(c->c, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  {
    const size_t left = room > c->gz_bytes ? room - c->gz_bytes : 0;
    cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t wp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int nf = 0, nd = 0, nw = 0;
    DNN_STEP(ar__dnn.fwd_algos(h, c->x, c->w, c->c, c->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nf,
                               fp),
             "cudnnGetConvolutionForwardAlgorithm_v7");
    const int f = pick(fp, nf, left, false);
    int di = 0, wi = 0;
    if (training) {
      DNN_STEP(ar__dnn.bwd_data_algos(h, c->w, c->y, c->c, c->x,
                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &nd, dp),
               "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      DNN_STEP(ar__dnn.bwd_filter_algos(h, c->x, c->y, c->c, c->w,
                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &nw, wp),
               "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      di = pick(dp, nd, left, true);
      wi = pick(wp, nw, left, true);
    }
    if (f < 0 || di < 0 || wi < 0 || (g.relu && training && c->gz_bytes > room)) {
      dnn_release(c); /* nothing fits: the direct kernels */
      return AR_OK;
    }
    c->fa = fp[f].algo;
    c->ws_bytes = fp[f].memory;
    if (training) {
      c->da = dp[di].algo;
      c->wa = wp[wi].algo;
      c->ws_bytes = dp[di].memory > c->ws_bytes ? dp[di].memory : c->ws_bytes;
      c->ws_bytes = wp[wi].memory > c->ws_bytes ? wp[wi].memory : c->ws_bytes;
    }
  }
  *state = c;
  *work_bytes = c->gz_bytes + c->ws_bytes;
  return AR_OK;
fail:
  dnn_release(c);
  return st;
}
#undef DNN_STEP

static void dnn_forward(const conv_dnn *c, const conv_g &g, ar_nn_args *a) {
  ar__cuda_device *d = nn_dev(a);
  if (!ar__cuda_enter(d))
    return;
  AR_ASSERT(a->work_bytes >= c->gz_bytes + c->ws_bytes);
  const float one = 1.0f, zero = 0.0f;
  void *ws = c->ws_bytes ? (char *)a->work + c->gz_bytes : NULL;
  if (!ar__cudnn_note(d,
                      ar__dnn.fwd((cudnnHandle_t)d->dnn, &one, c->x, a->in[0].p, c->w,
                                  a->param[0].p, c->c, c->fa, ws, c->ws_bytes, &zero, c->y,
                                  a->out[0].p),
                      "cudnnConvolutionForward"))
    return;
  if (g.bias || g.relu)
    NN_LAUNCH(a, g.N * g.O * g.Ho * g.Wo, "nn conv bias", conv_bias_act_k, g,
              (const float *)(g.bias ? a->param[1].p : NULL), (float *)a->out[0].p);
}

static void dnn_backward(const conv_dnn *c, const conv_g &g, ar_nn_args *a) {
  ar__cuda_device *d = nn_dev(a);
  if (!ar__cuda_enter(d))
    return;
  AR_ASSERT(a->work_bytes >= c->gz_bytes + c->ws_bytes);
  const float one = 1.0f, zero = 0.0f;
  const int64_t ny = g.N * g.O * g.Ho * g.Wo;
  const float *gy = (const float *)a->gout[0].p, *y = (const float *)a->out[0].p;
  const float *gz = gy;
  if (g.relu) {
    NN_LAUNCH(a, ny, "nn conv relu mask", relu_mask_k, ny, y, gy, (float *)a->work);
    gz = (const float *)a->work;
  }
  void *ws = c->ws_bytes ? (char *)a->work + c->gz_bytes : NULL;
  cudnnHandle_t h = (cudnnHandle_t)d->dnn;
  if (a->gin[0].p)
    ar__cudnn_note(d,
                   ar__dnn.bwd_data(h, &one, c->w, a->param[0].p, c->y, gz, c->c, c->da, ws,
                                    c->ws_bytes, &zero, c->x, a->gin[0].p),
                   "cudnnConvolutionBackwardData");
  ar__cudnn_note(d,
                 ar__dnn.bwd_filter(h, &one, c->x, a->in[0].p, c->y, gz, c->c, c->wa, ws,
                                    c->ws_bytes, &zero, c->w, a->gparam[0].p),
                 "cudnnConvolutionBackwardFilter");
  if (g.bias)
    NN_LAUNCH_ROWS(a, g.O, "nn conv backward (bias)", conv_bwd_b_k, g, gy, y,
                   (float *)a->gparam[1].p);
}
#endif

/* cuDNN when the handle has it and the shapes suit it (state: its
 * descriptors), else the direct kernels (state NULL, no workspace). */
static ar_status conv_prepare(const ar_nn_args *a, bool training, void **state,
                              size_t *work_bytes, ar_err *err) {
  *state = NULL;
  *work_bytes = 0;
#ifdef ACCELRT_HAVE_CUDNN
  const char *path = getenv("ACCELRT_CUDA_CONV");
  if (nn_dev(a)->dnn && !(path && !strcmp(path, "direct")))
    return dnn_prepare(a, training, state, work_bytes, err);
#else
  (void)a;
  (void)training;
  (void)err;
#endif
  return AR_OK;
}

static void conv_release(void *state) {
#ifdef ACCELRT_HAVE_CUDNN
  dnn_release(state);
#else
  AR_ASSERT(!state);
#endif
}

static void conv_forward(void *state, ar_nn_args *a) {
  const conv_g g = conv_geom(a);
#ifdef ACCELRT_HAVE_CUDNN
  if (state) {
    dnn_forward((const conv_dnn *)state, g, a);
    return;
  }
#else
  (void)state;
#endif
  NN_LAUNCH(a, g.N * g.O * g.Ho * g.Wo, "nn conv forward", conv_fwd_k, g,
            (const float *)a->in[0].p, (const float *)a->param[0].p,
            (const float *)(g.bias ? a->param[1].p : NULL), (float *)a->out[0].p);
}

static void conv_backward(void *state, ar_nn_args *a) {
  const conv_g g = conv_geom(a);
#ifdef ACCELRT_HAVE_CUDNN
  if (state) {
    dnn_backward((const conv_dnn *)state, g, a);
    return;
  }
#else
  (void)state;
#endif
  const float *gy = (const float *)a->gout[0].p, *y = (const float *)a->out[0].p;
  if (a->gin[0].p)
    NN_LAUNCH(a, g.N * g.C * g.H * g.W, "nn conv backward (data)", conv_bwd_data_k, g, gy, y,
              (const float *)a->param[0].p, (float *)a->gin[0].p);
  NN_LAUNCH_ROWS(a, g.O * g.Cg * g.kh * g.kw, "nn conv backward (weights)", conv_bwd_w_k, g,
                 gy, y, (const float *)a->in[0].p, (float *)a->gparam[0].p);
  if (g.bias)
    NN_LAUNCH_ROWS(a, g.O, "nn conv backward (bias)", conv_bwd_b_k, g, gy, y,
                   (float *)a->gparam[1].p);
}

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

/* The window positions of one axis inside the input: i in [first, end). */
static __device__ __forceinline__ int64_t pool_first(int64_t p0, int64_t d) {
  return p0 < 0 ? (-p0 + d - 1) / d : 0;
}
static __device__ __forceinline__ int64_t pool_end(int64_t p0, int64_t d, int64_t k,
                                                   int64_t n) {
  const int64_t e = n - p0 <= 0 ? 0 : (n - p0 + d - 1) / d;
  return e < k ? e : k;
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
    const int64_t i1 = pool_end(ih0, g.dh, g.kh, g.H), j1 = pool_end(iw0, g.dw, g.kw, g.W);
    for (int64_t i = pool_first(ih0, g.dh); i < i1; i++) {
      const int64_t ih = ih0 + i * g.dh;
      for (int64_t j = pool_first(iw0, g.dw); j < j1; j++) {
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

/* ---- BATCHNORM ----------------------------------------------------------- */

typedef struct bn_g {
  int64_t N, C, S; /* x seen as (N, C, S) */
  float eps, momentum;
  double unbias; /* the running variance's factor on the biased one */
  bool relu, train;
} bn_g;

static bn_g bn_geom(const ar_nn_args *a) {
  const ar_shape *xs = &a->in[0].shape;
  bn_g g;
  g.N = xs->d[0];
  g.C = xs->d[1];
  g.S = xs->nd == 4 ? xs->d[2] * xs->d[3] : 1;
  g.eps = a->attr->eps;
  g.momentum = a->attr->momentum;
  const int64_t m = g.N * g.S;
  g.unbias = a->attr->var_biased ? 1.0 : (double)m / (double)(m - 1 > 0 ? m - 1 : 1);
  g.relu = a->attr->act == AR_ACT_RELU;
  g.train = a->training;
  return g;
}

/* gamma[c] / sqrt(var[c] + eps), as the host rounds it. */
static __device__ __forceinline__ float bn_scale(float gamma, float var, float eps) {
  return (float)((double)gamma * (1.0 / sqrt((double)var + (double)eps)));
}

/* One block per channel c; element k of the channel (k < N S) is
 * x[(n C + c) S + s] with n = k / S, s = k % S. */
static __global__ void bn_fwd_k(bn_g g, const float *x, const float *gamma, const float *beta,
                                float *rm, float *rv, float *mean_aux, float *var_aux,
                                float *y) {
  const int64_t c = blockIdx.x, m = g.N * g.S;
  float mean, var;
  if (g.train) {
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x)
      s += (double)x[(k / g.S * g.C + c) * g.S + k % g.S];
    const double mu = nn_block_sum(s) / (double)m;
    double q = 0.0;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
      const double d = (double)x[(k / g.S * g.C + c) * g.S + k % g.S] - mu;
      q += d * d;
    }
    const double v = nn_block_sum(q) / (double)m;
    mean = (float)mu;
    var = (float)v;
    if (threadIdx.x == 0) {
      mean_aux[c] = mean;
      var_aux[c] = var;
      rm[c] = (1.0f - g.momentum) * rm[c] + g.momentum * mean;
      rv[c] = (1.0f - g.momentum) * rv[c] + g.momentum * (float)((double)var * g.unbias);
    }
  } else {
    mean = rm[c];
    var = rv[c];
  }
  const float scale = bn_scale(gamma[c], var, g.eps), b = beta[c];
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = (k / g.S * g.C + c) * g.S + k % g.S;
    const float v = (x[i] - mean) * scale + b;
    y[i] = g.relu ? (v > 0.0f ? v : 0.0f) : v;
  }
}

/* One block per channel: sg = sum g, sgx = sum g (x - mean) (g masked by
 * the relu's pre-activation), then dgamma, dbeta and dx = A g + B (x -
 * mean) + D as on the host. */
static __global__ void bn_bwd_k(bn_g g, const float *x, const float *gamma, const float *beta,
                                const float *gy, const float *mean_aux, const float *var_aux,
                                float *dx, float *dgamma, float *dbeta) {
  const int64_t c = blockIdx.x, m = g.N * g.S;
  const float mean = mean_aux[c], var = var_aux[c];
  const float scale = bn_scale(gamma[c], var, g.eps), b = beta[c];
  double s1 = 0.0, s2 = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = (k / g.S * g.C + c) * g.S + k % g.S;
    const float xc = x[i] - mean;
    const float gv = g.relu && !(xc * scale + b > 0.0f) ? 0.0f : gy[i];
    s1 += (double)gv;
    s2 += (double)(gv * xc);
  }
  const double sg = nn_block_sum(s1), sgx = nn_block_sum(s2);
  const double rs = 1.0 / sqrt((double)var + (double)g.eps), gr = (double)gamma[c] * rs;
  if (threadIdx.x == 0) {
    dgamma[c] = (float)(sgx * rs);
    dbeta[c] = (float)sg;
  }
  if (!dx)
    return;
  const float A = (float)gr, B = (float)(-gr * rs * rs * sgx / (double)m),
              D = (float)(-gr * sg / (double)m);
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const int64_t i = (k / g.S * g.C + c) * g.S + k % g.S;
    const float xc = x[i] - mean;
    const float gv = g.relu && !(xc * scale + b > 0.0f) ? 0.0f : gy[i];
    dx[i] = A * gv + B * xc + D;
  }
}

static void bn_forward(void *state, ar_nn_args *a) {
  (void)state;
  const bn_g g = bn_geom(a);
  NN_LAUNCH_ROWS(a, g.C, "nn batchnorm forward", bn_fwd_k, g, (const float *)a->in[0].p,
                 (const float *)a->param[0].p, (const float *)a->param[1].p,
                 (float *)a->state[0].p, (float *)a->state[1].p,
                 (float *)(g.train ? a->aux[0].p : NULL),
                 (float *)(g.train ? a->aux[1].p : NULL), (float *)a->out[0].p);
}

static void bn_backward(void *state, ar_nn_args *a) {
  (void)state;
  const bn_g g = bn_geom(a);
  NN_LAUNCH_ROWS(a, g.C, "nn batchnorm backward", bn_bwd_k, g, (const float *)a->in[0].p,
                 (const float *)a->param[0].p, (const float *)a->param[1].p,
                 (const float *)a->gout[0].p, (const float *)a->aux[0].p,
                 (const float *)a->aux[1].p, (float *)a->gin[0].p, (float *)a->gparam[0].p,
                 (float *)a->gparam[1].p);
}

void ar__cuda_nn_conv_register(ar_nn_kernel *table) {
  table[AR_NN_CONV2D].prepare = conv_prepare;
  table[AR_NN_CONV2D].release = conv_release;
  table[AR_NN_CONV2D].forward = conv_forward;
  table[AR_NN_CONV2D].backward = conv_backward;
  const ar_nn_op pools[] = {AR_NN_MAXPOOL, AR_NN_AVGPOOL, AR_NN_GAVGPOOL};
  for (int i = 0; i < 3; i++) {
    table[pools[i]].forward = pool_forward;
    table[pools[i]].backward = pool_backward;
  }
  table[AR_NN_BATCHNORM].forward = bn_forward;
  table[AR_NN_BATCHNORM].backward = bn_backward;
}
