/*
 * CUDA kernel of CONV2D (group "conv"), with the semantics of
 * runtime/device/host/nn_conv.c, on the caller's NCHW tensors.
 *
 * CONV2D runs cuDNN when the build and the machine have it (below:
 * algorithms picked at prepare within the caller's workspace), else a
 * direct convolution (any kernel, stride, padding, dilation, groups): one
 * thread per output for the forward, one per input element for the data
 * gradient (gathering the outputs whose windows hold it), and one block
 * per weight (and per bias) for the weight gradients, summing over the
 * batch and the output plane in double.  A fused relu masks gout with
 * y > 0, as the host does.  No workspace.  The pools are in
 * cuda_nn_pool.cu, BATCHNORM in cuda_nn_bnorm.cu.
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

void ar__cuda_nn_conv_register(ar_nn_kernel *table) {
  table[AR_NN_CONV2D].prepare = conv_prepare;
  table[AR_NN_CONV2D].release = conv_release;
  table[AR_NN_CONV2D].forward = conv_forward;
  table[AR_NN_CONV2D].backward = conv_backward;
  ar__cuda_nn_pool_register(table);
  ar__cuda_nn_bnorm_register(table);
}
