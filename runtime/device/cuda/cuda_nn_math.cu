/*
 * CUDA kernels of the nn ops in group "math" with the semantics of
 * runtime/device/host/nn_math.c, nn_eltwise.c and nn_norm.c:
 *   - DENSE and MATMUL on cuBLAS (ar__cuda_gemm, row-major as the device's
 *     gemm; MATMUL one product per batch matrix), DENSE's bias and fused
 *     activation with the chain engine's bias_act, its backward masking
 *     gout into the workspace the host also asks for;
 *   - the unary element-wise ops and the binary ones (ADD, SUB, MUL, DIV,
 *     POW) on f32 with NumPy broadcasting or the scalar operand, ADD with
 *     its fused relu (act RELU: the graph engine's fusion pass); the
 *     gradient of a broadcast operand is gathered per operand element over
 *     the dims it is broadcast along (no workspace, no atomics).  Integer
 *     operands (i64, i32, u8; ONNX graphs), forward only, through
 *     nn/nn_elem.h's arithmetic, the host's own;
 *   - MEAN and SUM over one axis or all but the batch's;
 *   - SOFTMAX, LOG_SOFTMAX, LAYERNORM and XENT: one block per row, sums in
 *     double; LAYERNORM's dgamma and dbeta one thread per column, the rows
 *     added in order.
 */
#include "cuda/cuda_nn.h"
#include "nn/nn_elem.h"

#include <math.h>
#include <string.h>

/* ---- DENSE ----------------------------------------------------------------- */

static void dense_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_nn_attr *at = a->attr;
  const int64_t k = a->in[0].shape.d[a->in[0].shape.nd - 1];
  const int64_t m = ar_shape_count(&a->in[0].shape) / k, n = at->out;
  float *y = (float *)a->out[0].p;
  ar__cuda_gemm(a->dev, false, true, m, n, k, 1.0f, (const float *)a->in[0].p, k,
                (const float *)a->param[0].p, k, 0.0f, y, n);
  if (at->bias || at->act != AR_ACT_NONE)
    ar__cuda_bias_act(a->dev, m, n, at->bias ? (const float *)a->param[1].p : NULL, at->act,
                      y);
}

static void dense_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_nn_attr *at = a->attr;
  const int64_t k = a->in[0].shape.d[a->in[0].shape.nd - 1];
  const int64_t m = ar_shape_count(&a->in[0].shape) / k, n = at->out;
  const float *x = (const float *)a->in[0].p, *w = (const float *)a->param[0].p;
  const float *g = (const float *)a->gout[0].p;
  if (at->act != AR_ACT_NONE) {
    AR_ASSERT(a->work && a->work_bytes >= (size_t)(m * n) * sizeof(float));
    float *gz = (float *)a->work;
    ar__cuda_nn_copy(a, gz, g, (size_t)(m * n) * sizeof(float), "nn dense backward (copy)");
    ar__cuda_act_grad(a->dev, m * n, at->act, (const float *)a->out[0].p, gz);
    g = gz;
  }
  if (a->gin[0].p) /* dx = gz w */
    ar__cuda_gemm(a->dev, false, false, m, k, n, 1.0f, g, n, w, k, 0.0f, (float *)a->gin[0].p,
                  k);
  /* dw = gz^T x */
  ar__cuda_gemm(a->dev, true, false, n, k, m, 1.0f, g, n, x, k, 0.0f, (float *)a->gparam[0].p,
                k);
  if (at->bias)
    ar__cuda_col_sum(a->dev, m, n, g, false, (float *)a->gparam[1].p);
}

/* ---- MATMUL ---------------------------------------------------------------- */

typedef struct mm_dims {
  int64_t batch, m, k, n;
} mm_dims;

static mm_dims mm_dims_of(const ar_nn_args *a) {
  const ar_shape *x = &a->in[0].shape, *b = &a->in[1].shape;
  mm_dims d;
  d.m = x->d[x->nd - 2];
  d.k = x->d[x->nd - 1];
  d.n = a->attr->trans_b ? b->d[b->nd - 2] : b->d[b->nd - 1];
  d.batch = 1;
  for (int i = 0; i < x->nd - 2; i++)
    d.batch *= x->d[i];
  return d;
}

/* C_i (m, n) = op(A_i) op(B_i) for every batch matrix i. */
static void batched(ar_nn_args *a, int64_t batch, bool ta, bool tb, int64_t m, int64_t n,
                    int64_t k, const float *A, int64_t lda, int64_t sa, const float *B,
                    int64_t ldb, int64_t sb, float *C, int64_t sc) {
  for (int64_t i = 0; i < batch; i++)
    ar__cuda_gemm(a->dev, ta, tb, m, n, k, 1.0f, A + i * sa, lda, B + i * sb, ldb, 0.0f,
                  C + i * sc, n);
}

static void matmul_forward(void *state, ar_nn_args *a) {
  (void)state;
  const bool tb = a->attr->trans_b;
  const mm_dims d = mm_dims_of(a);
  batched(a, d.batch, false, tb, d.m, d.n, d.k, (const float *)a->in[0].p, d.k, d.m * d.k,
          (const float *)a->in[1].p, tb ? d.k : d.n, d.k * d.n, (float *)a->out[0].p,
          d.m * d.n);
}

static void matmul_backward(void *state, ar_nn_args *a) {
  (void)state;
  const bool tb = a->attr->trans_b;
  const mm_dims d = mm_dims_of(a);
  const float *g = (const float *)a->gout[0].p, *A = (const float *)a->in[0].p,
              *B = (const float *)a->in[1].p;
  if (a->gin[0].p) /* dA (M, K) = G B^T, or G B with trans_b */
    batched(a, d.batch, false, !tb, d.m, d.k, d.n, g, d.n, d.m * d.n, B, tb ? d.k : d.n,
            d.k * d.n, (float *)a->gin[0].p, d.m * d.k);
  if (a->gin[1].p) {
    if (tb) /* dB (N, K) = G^T A */
      batched(a, d.batch, true, false, d.n, d.k, d.m, g, d.n, d.m * d.n, A, d.k, d.m * d.k,
              (float *)a->gin[1].p, d.n * d.k);
    else /* dB (K, N) = A^T G */
      batched(a, d.batch, true, false, d.k, d.n, d.m, A, d.k, d.m * d.k, g, d.n, d.m * d.n,
              (float *)a->gin[1].p, d.k * d.n);
  }
}

/* ---- unary element-wise ---------------------------------------------------- */

#define INV_SQRT2 0.70710678118654752f
#define INV_SQRT_2PI 0.39894228040143268f
#define TWO_OVER_SQRT_PI 1.12837916709551257f

typedef struct un_p {
  int op; /* ar_nn_op */
  float alpha, lo, hi;
} un_p;

static __global__ void unary_fwd_k(un_p p, int64_t n, const float *x, float *y) {
  NN_LOOP(i, n) {
    const float v = x[i];
    float r;
    switch (p.op) {
    case AR_NN_RELU: r = v > 0.0f ? v : 0.0f; break;
    case AR_NN_LEAKY_RELU: r = v > 0.0f ? v : p.alpha * v; break;
    case AR_NN_SIGMOID: {
      const float e = expf(-fabsf(v)), inv = 1.0f / (1.0f + e);
      r = v >= 0.0f ? inv : e * inv;
      break;
    }
    case AR_NN_TANH: r = tanhf(v); break;
    case AR_NN_GELU: r = 0.5f * v * (1.0f + erff(v * INV_SQRT2)); break;
    case AR_NN_SQRT: r = sqrtf(v); break;
    case AR_NN_EXP: r = expf(v); break;
    case AR_NN_LOG: r = logf(v); break;
    case AR_NN_NEG: r = -v; break;
    case AR_NN_ABS: r = fabsf(v); break;
    case AR_NN_ERF: r = erff(v); break;
    default: { /* CLIP: max with lo first, then min with hi; NaN stays */
      const float t = v < p.lo ? p.lo : v;
      r = t > p.hi ? p.hi : t;
      break;
    }
    }
    y[i] = r;
  }
}

static __global__ void unary_bwd_k(un_p p, int64_t n, const float *x, const float *y,
                                   const float *g, float *d) {
  NN_LOOP(i, n) {
    float r;
    switch (p.op) {
    case AR_NN_RELU: r = y[i] > 0.0f ? g[i] : 0.0f; break;
    case AR_NN_LEAKY_RELU: r = x[i] > 0.0f ? g[i] : p.alpha * g[i]; break;
    case AR_NN_SIGMOID: r = g[i] * y[i] * (1.0f - y[i]); break;
    case AR_NN_TANH: r = g[i] * (1.0f - y[i] * y[i]); break;
    case AR_NN_GELU: {
      const float v = x[i];
      r = g[i] * (0.5f * (1.0f + erff(v * INV_SQRT2)) + v * INV_SQRT_2PI * expf(-0.5f * v * v));
      break;
    }
    case AR_NN_SQRT: r = 0.5f * g[i] / y[i]; break;
    case AR_NN_EXP: r = g[i] * y[i]; break;
    case AR_NN_LOG: r = g[i] / x[i]; break;
    case AR_NN_NEG: r = -g[i]; break;
    case AR_NN_ABS: r = x[i] > 0.0f ? g[i] : x[i] < 0.0f ? -g[i] : 0.0f; break;
    case AR_NN_ERF: r = g[i] * TWO_OVER_SQRT_PI * expf(-x[i] * x[i]); break;
    default: r = x[i] >= p.lo && x[i] <= p.hi ? g[i] : 0.0f; break; /* CLIP */
    }
    d[i] = r;
  }
}

static un_p un_params(const ar_nn_args *a) {
  un_p p = {(int)a->op, a->attr->alpha, a->attr->lo, a->attr->hi};
  return p;
}

static void unary_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, n, "nn element-wise forward", unary_fwd_k, un_params(a), n,
            (const float *)a->in[0].p, (float *)a->out[0].p);
}

static void unary_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, n, "nn element-wise backward", unary_bwd_k, un_params(a), n,
            (const float *)a->in[0].p, (const float *)a->out[0].p,
            (const float *)a->gout[0].p, (float *)a->gin[0].p);
}

/* ---- binary element-wise with broadcasting --------------------------------- */

/* The output's dims and each operand's element stride along them (0 where
 * the operand is broadcast or lacks the dim; both 0 for the scalar form's
 * second operand, whose value is `scalar`). */
typedef struct bin_g {
  int nd;
  int64_t out[AR_NN_MAX_DIMS];
  int64_t st[2][AR_NN_MAX_DIMS];
  int op; /* ar_nn_op */
  bool two;
  bool relu; /* ADD's fused relu (f32) */
  float scalar;
} bin_g;

static bin_g bin_geom(const ar_nn_args *a) {
  bin_g g;
  memset(&g, 0, sizeof g);
  const ar_shape *o = &a->out[0].shape;
  g.nd = o->nd;
  for (int k = 0; k < o->nd; k++)
    g.out[k] = o->d[k];
  g.op = (int)a->op;
  g.two = a->n_in == 2;
  g.relu = a->op == AR_NN_ADD && a->attr->act == AR_ACT_RELU;
  g.scalar = a->attr->scalar;
  for (int i = 0; i < a->n_in; i++) {
    const ar_shape *s = &a->in[i].shape;
    int64_t step = 1;
    for (int k = o->nd - 1; k >= 0; k--) {
      const int kk = k - (o->nd - s->nd);
      const int64_t ext = kk >= 0 ? s->d[kk] : 1;
      g.st[i][k] = ext == o->d[k] ? step : 0;
      step *= ext;
    }
  }
  return g;
}

/* The operands' offsets of output element e. */
static __device__ __forceinline__ void bin_offsets(const bin_g &g, int64_t e, int64_t *oa,
                                                   int64_t *ob) {
  int64_t a = 0, b = 0;
  for (int k = g.nd - 1; k >= 0; k--) {
    const int64_t c = e % g.out[k];
    e /= g.out[k];
    a += c * g.st[0][k];
    b += c * g.st[1][k];
  }
  *oa = a;
  *ob = b;
}

static __device__ __forceinline__ float bin_f(int op, bool relu, float x, float z) {
  switch (op) {
  case AR_NN_ADD: return relu ? ((x + z) > 0.0f ? (x + z) : 0.0f) : x + z;
  case AR_NN_SUB: return x - z;
  case AR_NN_MUL: return x * z;
  case AR_NN_DIV: return x / z;
  default: return powf(x, z);
  }
}

/* The gradient of operand `which` at one output element (x, z the
 * operands, gy its gout, y its output). */
static __device__ __forceinline__ float bin_grad(int op, bool relu, int which, float x, float z,
                                                 float gy, float y) {
  switch (op) {
  case AR_NN_ADD: return relu ? (y > 0.0f ? gy : 0.0f) : gy; /* the relu's own rule */
  case AR_NN_SUB: return which ? -gy : gy;
  case AR_NN_MUL: return which ? gy * x : gy * z;
  case AR_NN_DIV: return which ? -gy * x / (z * z) : gy / z;
  default: return which ? gy * y * logf(x) : gy * z * powf(x, z - 1.0f);
  }
}

static __global__ void bin_fwd_k(bin_g g, int64_t n, const float *x, const float *z, float *y) {
  NN_LOOP(e, n) {
    int64_t oa, ob;
    bin_offsets(g, e, &oa, &ob);
    y[e] = bin_f(g.op, g.relu, x[oa], g.two ? z[ob] : g.scalar);
  }
}

/* Integer operands of one type t (two inputs): the host's int_run. */
static __global__ void bin_int_k(bin_g g, int64_t n, ar_dtype t, const void *x, const void *z,
                                 void *y) {
  NN_LOOP(e, n) {
    int64_t oa, ob;
    bin_offsets(g, e, &oa, &ob);
    nn_int_store(t, y, e, nn_int_apply(g.op, nn_int_load(t, x, oa), nn_int_load(t, z, ob)));
  }
}

/* d (operand `which`, m elements) [j] = the sum of its gradient over every
 * output element that reads element j: j's coordinates along the dims the
 * operand keeps, and every combination along the dims it is broadcast
 * along (r, row-major), in output order. */
static __global__ void bin_bwd_k(bin_g g, int which, int64_t m, const float *x, const float *z,
                                 const float *gy, const float *y, float *d) {
  NN_LOOP(j, m) {
    int64_t coord[AR_NN_MAX_DIMS], c[AR_NN_MAX_DIMS];
    const int64_t reps = nn_bcast_coords(g.nd, g.out, g.st[which], j, coord);
    float s = 0.0f;
    for (int64_t r = 0; r < reps; r++) {
      const int64_t e = nn_bcast_elem(g.nd, g.out, g.st[which], coord, r, c);
      int64_t oa = 0, ob = 0;
      for (int k = 0; k < g.nd; k++) {
        oa += c[k] * g.st[0][k];
        ob += c[k] * g.st[1][k];
      }
      const float zv = g.two ? z[ob] : g.scalar;
      s += bin_grad(g.op, g.relu, which, x[oa], zv, gy[e], y ? y[e] : 0.0f);
    }
    d[j] = s;
  }
}

static void bin_forward(void *state, ar_nn_args *a) {
  (void)state;
  const bin_g g = bin_geom(a);
  const int64_t n = ar_shape_count(&a->out[0].shape);
  if (a->in[0].dtype != AR_DT_F32) {
    NN_LAUNCH(a, n, "nn integer binary forward", bin_int_k, g, n, a->in[0].dtype,
              (const void *)a->in[0].p, (const void *)a->in[1].p, a->out[0].p);
    return;
  }
  NN_LAUNCH(a, n, "nn binary forward", bin_fwd_k, g, n, (const float *)a->in[0].p,
            (const float *)(g.two ? a->in[1].p : NULL), (float *)a->out[0].p);
}

static void bin_backward(void *state, ar_nn_args *a) {
  (void)state;
  const bin_g g = bin_geom(a);
  /* POW's second operand and ADD's fused relu read the output (their
   * sig's out_needed). */
  const float *y = (a->op == AR_NN_POW && g.two) || g.relu ? (const float *)a->out[0].p : NULL;
  for (int i = 0; i < a->n_in; i++) {
    if (!a->gin[i].p || a->in[i].dtype != AR_DT_F32) /* integers take no gradient */
      continue;
    const int64_t m = ar_shape_count(&a->in[i].shape);
    NN_LAUNCH(a, m, "nn binary backward", bin_bwd_k, g, i, m, (const float *)a->in[0].p,
              (const float *)(g.two ? a->in[1].p : NULL), (const float *)a->gout[0].p, y,
              (float *)a->gin[i].p);
  }
}

/* ---- MEAN, SUM ------------------------------------------------------------------
 * The input as (outer, r, inner), the r in the middle reduced (one axis, or
 * every axis after the first with axis_all): one thread per output adds
 * its r values in order, in float, and scales once, as the host does. */

typedef struct red_g {
  int64_t outer, r, inner;
} red_g;

static red_g red_geom(const ar_nn_args *a) {
  const ar_shape *s = &a->in[0].shape;
  red_g d = {1, 1, 1};
  if (a->attr->axis_all) {
    d.outer = s->d[0];
    d.r = s->d[0] > 0 ? ar_shape_count(s) / s->d[0] : 0;
    return d;
  }
  const int ax = a->attr->axis < 0 ? a->attr->axis + s->nd : a->attr->axis;
  for (int k = 0; k < s->nd; k++) {
    if (k < ax)
      d.outer *= s->d[k];
    else if (k == ax)
      d.r = s->d[k];
    else
      d.inner *= s->d[k];
  }
  return d;
}

static __global__ void reduce_fwd_k(red_g d, float f, const float *x, float *y) {
  NN_LOOP(e, d.outer * d.inner) {
    const float *xo = x + e / d.inner * d.r * d.inner + e % d.inner;
    float s = 0.0f;
    for (int64_t j = 0; j < d.r; j++)
      s += xo[j * d.inner];
    y[e] = f != 1.0f ? s * f : s;
  }
}

static __global__ void reduce_bwd_k(red_g d, float f, const float *g, float *gx) {
  NN_LOOP(e, d.outer * d.r * d.inner) {
    gx[e] = g[e / (d.r * d.inner) * d.inner + e % d.inner] * f;
  }
}

static void reduce_forward(void *state, ar_nn_args *a) {
  (void)state;
  const red_g d = red_geom(a);
  const float f = a->op == AR_NN_MEAN ? (d.r > 0 ? 1.0f / (float)d.r : NAN) : 1.0f;
  NN_LAUNCH(a, d.outer * d.inner, "nn reduce forward", reduce_fwd_k, d, f,
            (const float *)a->in[0].p, (float *)a->out[0].p);
}

static void reduce_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const red_g d = red_geom(a);
  const float f = a->op == AR_NN_MEAN ? (d.r > 0 ? 1.0f / (float)d.r : 0.0f) : 1.0f;
  NN_LAUNCH(a, d.outer * d.r * d.inner, "nn reduce backward", reduce_bwd_k, d, f,
            (const float *)a->gout[0].p, (float *)a->gin[0].p);
}

/* ---- SOFTMAX, LOG_SOFTMAX ---------------------------------------------------- */

/* The block's row xr (n): its maximum into *mx and sum_j exp(x_j - max),
 * the exponentials in float added in double. */
static __device__ double row_sumexp(const float *xr, int64_t n, float *mx) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    m = xr[j] > m ? xr[j] : m;
  m = nn_block_max(m);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    s += (double)expf(xr[j] - m);
  *mx = m;
  return nn_block_sum(s);
}

/* One block per row of n. */
static __global__ void softmax_fwd_k(int64_t n, bool lg, const float *x, float *y) {
  const float *xr = x + (int64_t)blockIdx.x * n;
  float *yr = y + (int64_t)blockIdx.x * n;
  float mx;
  const double s = row_sumexp(xr, n, &mx);
  if (lg) {
    const float ls = (float)log(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      yr[j] = (xr[j] - mx) - ls;
  } else {
    const float inv = (float)(1.0 / s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      yr[j] = expf(xr[j] - mx) * inv;
  }
}

/* softmax: gx = y (g - <g, y>); log_softmax: gx = g - exp(y) sum(g). */
static __global__ void softmax_bwd_k(int64_t n, bool lg, const float *y, const float *g,
                                     float *gx) {
  const int64_t off = (int64_t)blockIdx.x * n;
  const float *yr = y + off, *gr = g + off;
  float *dr = gx + off;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    s += lg ? (double)gr[j] : (double)(gr[j] * yr[j]);
  const float d = (float)nn_block_sum(s);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dr[j] = lg ? gr[j] - expf(yr[j]) * d : yr[j] * (gr[j] - d);
}

static int64_t last_dim(const ar_shape *s) { return s->nd ? s->d[s->nd - 1] : 1; }

static void softmax_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = last_dim(&a->in[0].shape);
  const int64_t rows = n > 0 ? ar_shape_count(&a->in[0].shape) / n : 0;
  NN_LAUNCH_ROWS(a, rows, "nn softmax forward", softmax_fwd_k, n,
                 a->op == AR_NN_LOG_SOFTMAX, (const float *)a->in[0].p, (float *)a->out[0].p);
}

static void softmax_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const int64_t n = last_dim(&a->in[0].shape);
  const int64_t rows = n > 0 ? ar_shape_count(&a->in[0].shape) / n : 0;
  NN_LAUNCH_ROWS(a, rows, "nn softmax backward", softmax_bwd_k, n,
                 a->op == AR_NN_LOG_SOFTMAX, (const float *)a->out[0].p,
                 (const float *)a->gout[0].p, (float *)a->gin[0].p);
}

/* ---- LAYERNORM ----------------------------------------------------------------- */

/* One block per row: mean, rstd with the biased variance, y; the
 * statistics into aux (training) and the extra outputs (stats). */
static __global__ void ln_fwd_k(int64_t n, float eps, const float *x, const float *gamma,
                                const float *beta, float *y, float *mean_aux, float *rstd_aux,
                                float *mean_out, float *rstd_out) {
  const int64_t r = blockIdx.x;
  const float *xr = x + r * n;
  float *yr = y + r * n;
  double s1 = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    s1 += (double)xr[j];
  const float mean = (float)(nn_block_sum(s1) / (double)n);
  double s2 = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float c = xr[j] - mean;
    s2 += (double)(c * c);
  }
  const float rstd = (float)(1.0 / sqrt(nn_block_sum(s2) / (double)n + (double)eps));
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
  if (threadIdx.x == 0) {
    if (mean_aux) {
      mean_aux[r] = mean;
      rstd_aux[r] = rstd;
    }
    if (mean_out) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

/* gx = rstd (gh - mean(gh) - xhat mean(gh xhat)), gh = g gamma. */
static __global__ void ln_bwd_x_k(int64_t n, const float *x, const float *gamma, const float *g,
                                  const float *mean, const float *rstd, float *gx) {
  const int64_t r = blockIdx.x;
  const float *xr = x + r * n, *gr = g + r * n;
  float *dr = gx + r * n;
  const float mu = mean[r], rs = rstd[r];
  double s1 = 0.0, s2 = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float gh = gr[j] * gamma[j];
    s1 += (double)gh;
    s2 += (double)(gh * (xr[j] - mu) * rs);
  }
  const float m1 = (float)(nn_block_sum(s1) / (double)n);
  const float m2 = (float)(nn_block_sum(s2) / (double)n);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dr[j] = rs * (gr[j] * gamma[j] - m1 - (xr[j] - mu) * rs * m2);
}

/* dgamma = sum_r g xhat, dbeta = sum_r g: one thread per column. */
static __global__ void ln_bwd_p_k(int64_t rows, int64_t n, const float *x, const float *g,
                                  const float *mean, const float *rstd, float *dgamma,
                                  float *dbeta) {
  NN_LOOP(j, n) {
    float sg = 0.0f, sb = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
      const float gv = g[r * n + j];
      sg += gv * (x[r * n + j] - mean[r]) * rstd[r];
      sb += gv;
    }
    dgamma[j] = sg;
    dbeta[j] = sb;
  }
}

static void ln_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = last_dim(&a->in[0].shape), rows = ar_shape_count(&a->in[0].shape) / n;
  const bool stats = a->n_out > 2;
  NN_LAUNCH_ROWS(a, rows, "nn layernorm forward", ln_fwd_k, n, a->attr->eps,
                 (const float *)a->in[0].p, (const float *)a->param[0].p,
                 (const float *)a->param[1].p, (float *)a->out[0].p,
                 (float *)(a->training ? a->aux[0].p : NULL),
                 (float *)(a->training ? a->aux[1].p : NULL),
                 (float *)(stats ? a->out[1].p : NULL), (float *)(stats ? a->out[2].p : NULL));
}

static void ln_backward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = last_dim(&a->in[0].shape), rows = ar_shape_count(&a->in[0].shape) / n;
  const float *x = (const float *)a->in[0].p, *g = (const float *)a->gout[0].p;
  const float *mean = (const float *)a->aux[0].p, *rstd = (const float *)a->aux[1].p;
  if (a->gin[0].p)
    NN_LAUNCH_ROWS(a, rows, "nn layernorm backward (x)", ln_bwd_x_k, n, x,
                   (const float *)a->param[0].p, g, mean, rstd, (float *)a->gin[0].p);
  NN_LAUNCH(a, n, "nn layernorm backward (gamma, beta)", ln_bwd_p_k, rows, n, x, g, mean, rstd,
            (float *)a->gparam[0].p, (float *)a->gparam[1].p);
}

/* ---- XENT ---------------------------------------------------------------------- */

static __device__ __forceinline__ int64_t label_at(const void *lab, bool i64, int64_t r) {
  return i64 ? ((const int64_t *)lab)[r] : (int64_t)((const int32_t *)lab)[r];
}

/* One block per row: loss = log sum exp(x - max) + max - x[label]; the
 * softmax into p (training). */
static __global__ void xent_fwd_k(int64_t n, const float *x, const void *lab, bool i64,
                                  float *loss, float *p) {
  const int64_t r = blockIdx.x;
  const float *xr = x + r * n;
  float mx;
  const double s = row_sumexp(xr, n, &mx);
  if (p) {
    const float inv = (float)(1.0 / s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      p[r * n + j] = expf(xr[j] - mx) * inv;
  }
  if (threadIdx.x == 0) {
    /* The engine checked the labels on the host; clamp anyway so that a
     * bug cannot read outside the row. */
    int64_t l = label_at(lab, i64, r);
    l = l < 0 ? 0 : l >= n ? n - 1 : l;
    loss[r] = (float)(log(s) + (double)(mx - xr[l]));
  }
}

static __global__ void xent_bwd_k(int64_t rows, int64_t n, const float *p, const void *lab,
                                  bool i64, float scale, float *gx) {
  NN_LOOP(e, rows * n) {
    const float v = scale * p[e];
    gx[e] = e % n == label_at(lab, i64, e / n) ? v - scale : v;
  }
}

static void xent_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t rows = a->in[0].shape.d[0], n = a->in[0].shape.d[1];
  NN_LAUNCH_ROWS(a, rows, "nn xent forward", xent_fwd_k, n, (const float *)a->in[0].p,
                 (const void *)a->in[1].p, a->in[1].dtype == AR_DT_I64, (float *)a->out[0].p,
                 (float *)(a->training ? a->aux[0].p : NULL));
}

static void xent_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const int64_t rows = a->in[0].shape.d[0], n = a->in[0].shape.d[1];
  NN_LAUNCH(a, rows * n, "nn xent backward", xent_bwd_k, rows, n, (const float *)a->aux[0].p,
            (const void *)a->in[1].p, a->in[1].dtype == AR_DT_I64, a->scale,
            (float *)a->gin[0].p);
}

void ar__cuda_nn_math_register(ar_nn_kernel *table) {
  /* The host's prepare: no state, and its workspace rule (gz when an
   * activation masks gout), which the backward here uses the same way. */
  table[AR_NN_DENSE].prepare = ar__nn_host_table()[AR_NN_DENSE].prepare;
  table[AR_NN_DENSE].forward = dense_forward;
  table[AR_NN_DENSE].backward = dense_backward;
  table[AR_NN_MATMUL].forward = matmul_forward;
  table[AR_NN_MATMUL].backward = matmul_backward;
  const ar_nn_op unary[] = {AR_NN_RELU, AR_NN_LEAKY_RELU, AR_NN_SIGMOID, AR_NN_TANH,
                            AR_NN_GELU, AR_NN_SQRT,       AR_NN_EXP,     AR_NN_LOG,
                            AR_NN_NEG,  AR_NN_ABS,        AR_NN_ERF,     AR_NN_CLIP};
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
    table[unary[i]].forward = unary_forward;
    table[unary[i]].backward = unary_backward;
  }
  const ar_nn_op binary[] = {AR_NN_ADD, AR_NN_SUB, AR_NN_MUL, AR_NN_DIV, AR_NN_POW};
  for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
    table[binary[i]].forward = bin_forward;
    table[binary[i]].backward = bin_backward;
  }
  table[AR_NN_MEAN].forward = table[AR_NN_SUM].forward = reduce_forward;
  table[AR_NN_MEAN].backward = table[AR_NN_SUM].backward = reduce_backward;
  table[AR_NN_SOFTMAX].forward = softmax_forward;
  table[AR_NN_SOFTMAX].backward = softmax_backward;
  table[AR_NN_LOG_SOFTMAX].forward = softmax_forward;
  table[AR_NN_LOG_SOFTMAX].backward = softmax_backward;
  table[AR_NN_LAYERNORM].forward = ln_forward;
  table[AR_NN_LAYERNORM].backward = ln_backward;
  table[AR_NN_XENT].forward = xent_forward;
  table[AR_NN_XENT].backward = xent_backward;
}
