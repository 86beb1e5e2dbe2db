/*
 * CUDA kernel of ATTENTION, composed as the host's (runtime/device/host/
 * nn_attention.c states the computation, the masking rule and the
 * workspace): per (n, h) head, cuBLAS products for the projections, the
 * scores and the context, and one kernel for the masked softmax (and its
 * backward) over the head's rows; full-width products for the output
 * projection and the weight gradients.  The heads run one after another
 * on the handle's stream, all through one score matrix of the workspace,
 * so the workspace is 4 N T D + T T floats, no more than the host's.
 */
#include "cuda/cuda_nn.h"

#include <math.h>

enum { WQ, WK, WV, WO, BQ, BK, BV, BO };
enum { AUX_Q, AUX_K, AUX_V, AUX_PROBS, AUX_CTX };

typedef struct att_g {
  int64_t n, t, d, h, dk;
} att_g;

static att_g att_geom(const ar_nn_args *a) {
  const ar_shape *s = &a->in[0].shape;
  att_g g = {s->d[0], s->d[1], s->d[2], a->attr->heads, 0};
  g.dk = g.d / g.h;
  return g;
}

static size_t att_work(const att_g *g) {
  return (size_t)(4 * g->n * g->t * g->d + g->t * g->t) * sizeof(float);
}

/* Head nh's scores s (T x T, scaled) to probabilities, one block per row
 * i: keys j with mask[n][j] == 0, or j > i when causal, get 0; a row with
 * no allowed key is all 0 (the host's softmax_rows). */
static __global__ void att_softmax_k(int64_t t, int64_t n, const float *mask, bool causal,
                                     float *s) {
  const int64_t i = blockIdx.x;
  float *r = s + i * t;
  const float *m = mask ? mask + n * t : NULL;
  const int64_t last = causal ? i + 1 : t;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < last; j += blockDim.x)
    if ((!m || m[j] != 0.0f) && r[j] > mx)
      mx = r[j];
  mx = nn_block_max(mx);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
    const bool ok = mx != -INFINITY && j < last && (!m || m[j] != 0.0f);
    sum += ok ? (double)expf(r[j] - mx) : 0.0;
  }
  sum = nn_block_sum(sum);
  const float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
    const bool ok = mx != -INFINITY && j < last && (!m || m[j] != 0.0f);
    r[j] = ok ? expf(r[j] - mx) * inv : 0.0f;
  }
}

/* The softmax's backward on head rows: ds = P (dP - sum_j P dP) scale,
 * in place over ds (holding dP), one block per row. */
static __global__ void att_softmax_bwd_k(int64_t t, float scale, const float *p, float *ds) {
  const int64_t i = blockIdx.x;
  const float *pr = p + i * t;
  float *dr = ds + i * t;
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x)
    dot += (double)pr[j] * (double)dr[j];
  const float fd = (float)nn_block_sum(dot);
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x)
    dr[j] = pr[j] * (dr[j] - fd) * scale;
}

static ar_status att_prepare(const ar_nn_args *a, bool training, void **state,
                             size_t *work_bytes, ar_err *err) {
  (void)training; /* evaluation needs as much as the backward */
  (void)err;
  *state = NULL;
  const att_g g = att_geom(a);
  *work_bytes = att_work(&g);
  return AR_OK;
}

static void gemm(ar_nn_args *a, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc, float alpha) {
  ar__cuda_gemm(a->dev, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void att_forward(void *state, ar_nn_args *a) {
  (void)state;
  const att_g g = att_geom(a);
  const int64_t ntd = g.n * g.t * g.d, tt = g.t * g.t, hd = g.t * g.dk;
  const float *x = (const float *)a->in[0].p;
  const float *mask = a->n_in == 2 ? (const float *)a->in[1].p : NULL;
  const float *w[4], *b[4];
  for (int j = 0; j < 4; j++) {
    w[j] = (const float *)a->param[WQ + j].p;
    b[j] = (const float *)a->param[BQ + j].p;
  }
  AR_ASSERT(a->work && a->work_bytes >= att_work(&g));
  float *ws = (float *)a->work, *q, *k, *v, *ctx, *probs;
  if (a->training) {
    q = (float *)a->aux[AUX_Q].p;
    k = (float *)a->aux[AUX_K].p;
    v = (float *)a->aux[AUX_V].p;
    probs = (float *)a->aux[AUX_PROBS].p;
    ctx = (float *)a->aux[AUX_CTX].p;
  } else {
    q = ws;
    k = ws + ntd;
    v = ws + 2 * ntd;
    ctx = ws + 3 * ntd;
    probs = NULL;
  }
  float *slot = ws + 4 * ntd;
  const float scale = (float)(1.0 / sqrt((double)g.dk));
  for (int64_t nh = 0; nh < g.n * g.h && a->dev->failed == AR_OK; nh++) {
    const int64_t n = nh / g.h, h = nh % g.h;
    const float *xn = x + n * g.t * g.d;
    float *qkv[3] = {q + nh * hd, k + nh * hd, v + nh * hd};
    for (int j = 0; j < 3; j++) {
      /* Rows h dk .. (h+1) dk of w are head h's outputs. */
      gemm(a, false, true, g.t, g.dk, g.d, xn, g.d, w[j] + h * g.dk * g.d, g.d, 0.0f, qkv[j],
           g.dk, 1.0f);
      ar__cuda_bias_act(a->dev, g.t, g.dk, b[j] + h * g.dk, AR_ACT_NONE, qkv[j]);
    }
    float *s = probs ? probs + nh * tt : slot;
    gemm(a, false, true, g.t, g.t, g.dk, qkv[0], g.dk, qkv[1], g.dk, 0.0f, s, g.t, scale);
    NN_LAUNCH_ROWS(a, g.t, "nn attention softmax", att_softmax_k, g.t, n, mask,
                   a->attr->causal, s);
    gemm(a, false, false, g.t, g.dk, g.t, s, g.t, qkv[2], g.dk, 0.0f,
         ctx + n * g.t * g.d + h * g.dk, g.d, 1.0f);
  }
  float *y = (float *)a->out[0].p;
  gemm(a, false, true, g.n * g.t, g.d, g.d, ctx, g.d, w[3], g.d, 0.0f, y, g.d, 1.0f);
  ar__cuda_bias_act(a->dev, g.n * g.t, g.d, b[3], AR_ACT_NONE, y);
}

static void att_backward(void *state, ar_nn_args *a) {
  (void)state;
  const att_g g = att_geom(a);
  const int64_t ntd = g.n * g.t * g.d, tt = g.t * g.t, hd = g.t * g.dk, rows = g.n * g.t;
  const float *x = (const float *)a->in[0].p, *gy = (const float *)a->gout[0].p;
  const float *q = (const float *)a->aux[AUX_Q].p, *k = (const float *)a->aux[AUX_K].p,
              *v = (const float *)a->aux[AUX_V].p;
  const float *probs = (const float *)a->aux[AUX_PROBS].p,
              *ctx = (const float *)a->aux[AUX_CTX].p;
  AR_ASSERT(a->work && a->work_bytes >= att_work(&g));
  float *ws = (float *)a->work;
  float *dctx = ws, *dz[3] = {ws + ntd, ws + 2 * ntd, ws + 3 * ntd}, *ds = ws + 4 * ntd;
  const float scale = (float)(1.0 / sqrt((double)g.dk));

  /* y = ctx wo^T + bo. */
  gemm(a, true, false, g.d, g.d, rows, gy, g.d, ctx, g.d, 0.0f, (float *)a->gparam[WO].p, g.d,
       1.0f);
  ar__cuda_col_sum(a->dev, rows, g.d, gy, false, (float *)a->gparam[BO].p);
  gemm(a, false, false, rows, g.d, g.d, gy, g.d, (const float *)a->param[WO].p, g.d, 0.0f,
       dctx, g.d, 1.0f);

  /* Per head: ctx_h = P v_h, P = softmax(scale q_h k_h^T). */
  for (int64_t nh = 0; nh < g.n * g.h && a->dev->failed == AR_OK; nh++) {
    const int64_t n = nh / g.h, h = nh % g.h, at = n * g.t * g.d + h * g.dk;
    const float *qh = q + nh * hd, *kh = k + nh * hd, *vh = v + nh * hd;
    const float *ph = probs + nh * tt, *dch = dctx + at;
    gemm(a, false, true, g.t, g.t, g.dk, dch, g.d, vh, g.dk, 0.0f, ds, g.t, 1.0f);
    gemm(a, true, false, g.t, g.dk, g.t, ph, g.t, dch, g.d, 0.0f, dz[2] + at, g.d, 1.0f);
    NN_LAUNCH_ROWS(a, g.t, "nn attention softmax backward", att_softmax_bwd_k, g.t, scale, ph,
                   ds);
    gemm(a, false, false, g.t, g.dk, g.t, ds, g.t, kh, g.dk, 0.0f, dz[0] + at, g.d, 1.0f);
    gemm(a, true, false, g.t, g.dk, g.t, ds, g.t, qh, g.dk, 0.0f, dz[1] + at, g.d, 1.0f);
  }

  /* q, k, v = x w^T + b, with dq, dk, dv as (N T, D). */
  for (int j = 0; j < 3; j++) {
    gemm(a, true, false, g.d, g.d, rows, dz[j], g.d, x, g.d, 0.0f,
         (float *)a->gparam[WQ + j].p, g.d, 1.0f);
    ar__cuda_col_sum(a->dev, rows, g.d, dz[j], false, (float *)a->gparam[BQ + j].p);
  }
  if (a->gin[0].p)
    for (int j = 0; j < 3; j++)
      gemm(a, false, false, rows, g.d, g.d, dz[j], g.d, (const float *)a->param[WQ + j].p, g.d,
           j ? 1.0f : 0.0f, (float *)a->gin[0].p, g.d, 1.0f);
}

void ar__cuda_nn_attention_register(ar_nn_kernel *table) {
  table[AR_NN_ATTENTION].prepare = att_prepare;
  table[AR_NN_ATTENTION].forward = att_forward;
  table[AR_NN_ATTENTION].backward = att_backward;
}
