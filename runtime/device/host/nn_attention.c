/*
 * Host kernel of ATTENTION (include/accelrt/nn.h): fused multi-head
 * self-attention, "Attention Is All You Need" (Vaswani et al., 2017) §3.2,
 * with PyTorch's Linear convention for the projections (w is (out, in):
 * q = x wq^T + bq), so that torch's multi_head_attention_forward with
 * in_proj_weight = [wq; wk; wv] and out_proj = (wo, bo) computes the same.
 *
 *   x (N, T, D), mask (N, T) optional, H heads of dk = D / H:
 *   q, k, v = x wq^T + bq, x wk^T + bk, x wv^T + bv   as (N, H, T, dk)
 *   probs   = softmax(q k^T / sqrt(dk)) per (n, h)   over the allowed keys
 *   ctx     = probs v                                 as (N, T, D)
 *   y       = ctx wo^T + bo
 *
 * A key j is allowed for query i unless mask[n, j] == 0, or causal and
 * j > i.  Where PyTorch gives NaN for a query with no allowed key (a fully
 * padded sequence under causal masking), this kernel gives probs 0, so ctx
 * 0 and y = bo, and no gradient flows through that row.
 *
 * Threads: the per-(n, h) work (projections of one head, scores, softmax,
 * context, and their backward) runs one (n, h) per thread, each with a
 * one-thread GEMM; the full-width GEMMs (output projection, weight
 * gradients, dx) use ar__host_sgemm's own split.  Each element is computed
 * by one thread in a fixed order, so results do not depend on the count.
 *
 * Workspace (floats), the same for forward and backward:
 *   4 N T D    evaluation: q, k, v, ctx (aux is not written);
 *              backward: dctx, dq, dk, dv as (N, T, D)
 *   S T^2      S = min(N H, SLOTS) score matrices, one per thread:
 *              evaluation: the scores; backward: dprobs.
 * A backward or forward runs at most S threads over the heads.
 */
#include "host/host_kernels.h"
#include "host/nn_shape_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Per-thread score matrices the workspace holds (bounds the threads of the
 * per-head loop; prepare does not know the device's thread count). */
#define SLOTS 64

/* The parameters in nn.h's order. */
enum { WQ, WK, WV, WO, BQ, BK, BV, BO, N_PARAMS };
static const char *const param_names[N_PARAMS] = {"wq", "wk", "wv", "wo",
                                                  "bq", "bk", "bv", "bo"};
/* The aux tensors in nn.h's order. */
enum { AUX_Q, AUX_K, AUX_V, AUX_PROBS, AUX_CTX, N_AUX };

typedef struct dims {
  int64_t n, t, d, h, dk, slots;
} dims;

static dims dims_of(const ar_nn_args *a) {
  const ar_shape *s = &a->in[0].shape;
  dims g = {s->d[0], s->d[1], s->d[2], a->attr->heads, 0, 0};
  g.dk = g.d / g.h;
  g.slots = g.n * g.h < SLOTS ? g.n * g.h : SLOTS;
  return g;
}

static size_t work_floats(const dims *g) {
  return (size_t)(4 * g->n * g->t * g->d + g->slots * g->t * g->t);
}

static ar_status attention_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                                 const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP], b1[AR__NN_SHP], b2[AR__NN_SHP];
  if (n_in != 1 && n_in != 2)
    return ar_errf(err, AR_INVALID, "attention takes x and an optional mask, got %d inputs",
                   n_in);
  const ar_shape *x = &in[0];
  if (dt[0] != AR_DT_F32 || x->nd != 3)
    return ar_errf(err, AR_INVALID, "attention: x is %s %s; it must be f32 (N, T, D)",
                   ar_dtype_name(dt[0]), ar__nn_shp(x, b0));
  int64_t n = x->d[0], t = x->d[1], d = x->d[2];
  if (attr->heads < 1)
    return ar_errf(err, AR_INVALID, "attention of %s with heads %d: heads must be at least 1",
                   ar__nn_shp(x, b0), attr->heads);
  if (d % attr->heads)
    return ar_errf(err, AR_INVALID, "attention of %s: D %lld is not divisible by heads %d",
                   ar__nn_shp(x, b0), (long long)d, attr->heads);
  if (n_in == 2) {
    ar_shape want = ar__nn_shape(2, (int64_t[]){n, t});
    if (dt[1] != AR_DT_F32 || !ar_shape_eq(&in[1], &want))
      return ar_errf(err, AR_INVALID,
                     "attention of x %s: the mask is %s %s; it must be f32 %s (N, T), as "
                     "the op mask makes it",
                     ar__nn_shp(x, b0), ar_dtype_name(dt[1]), ar__nn_shp(&in[1], b1),
                     ar__nn_shp(&want, b2));
  }
  ar__nn_sig_init(sig, n_in);
  sig->in_needed = 1u; /* x for the weight gradients; the mask is in probs */
  sig->out_needed = false;
  sig->no_grad = n_in == 2 ? 2u : 0u;
  /* Four D x D projections of N T rows, then q k^T and probs v. */
  sig->flops = 2.0 * (4.0 * (double)(n * t) * (double)d * (double)d +
                      2.0 * (double)n * (double)t * (double)t * (double)d);
  ar_shape w = ar__nn_shape(2, (int64_t[]){d, d}), b = ar__nn_shape(1, (int64_t[]){d});
  for (int i = WQ; i <= WO; i++)
    ar__nn_sig_param(sig, param_names[i], &w, AR_NN_INIT_FAN_IN, true);
  for (int i = BQ; i <= BO; i++)
    ar__nn_sig_param(sig, param_names[i], &b, AR_NN_INIT_ZEROS, false);
  ar__nn_sig_out(sig, x, AR_DT_F32);
  ar_shape qkv = ar__nn_shape(4, (int64_t[]){n, attr->heads, t, d / attr->heads});
  ar_shape pr = ar__nn_shape(4, (int64_t[]){n, attr->heads, t, t});
  ar__nn_sig_aux(sig, &qkv, AR_DT_F32);
  ar__nn_sig_aux(sig, &qkv, AR_DT_F32);
  ar__nn_sig_aux(sig, &qkv, AR_DT_F32);
  ar__nn_sig_aux(sig, &pr, AR_DT_F32);
  ar__nn_sig_aux(sig, x, AR_DT_F32);
  return AR_OK;
}

static ar_status attention_prepare(const ar_nn_args *a, bool training, void **state,
                                   size_t *work_bytes, ar_err *err) {
  (void)training; /* evaluation needs as much as the backward */
  (void)err;
  *state = NULL;
  dims g = dims_of(a);
  *work_bytes = work_floats(&g) * sizeof(float);
  return AR_OK;
}

/* The team for the per-head loop: one (n, h) per thread, at most the
 * workspace's slots. */
static int head_team(int threads, const dims *g) {
  double work = (double)(g->n * g->h) * (double)g->t * (double)g->dk * (double)(3 * g->d + 2 * g->t);
  int nt = threads > 1 && work >= (double)AR__NN_PAR_MIN ? threads : 1;
  return nt < g->slots ? nt : (int)g->slots;
}

/* rows x cols block c (leading dim ldc) += bias (cols) on every row. */
static void add_bias(int64_t rows, int64_t cols, const float *bias, float *c, int64_t ldc) {
  for (int64_t r = 0; r < rows; r++) {
    float *cr = c + r * ldc;
#pragma omp simd
    for (int64_t j = 0; j < cols; j++)
      cr[j] += bias[j];
  }
}

/* Scores s (T x T, already scaled) of sequence n to probabilities in place:
 * disallowed keys get 0; a row with no allowed key is all 0. */
static void softmax_rows(float *s, int64_t t, const float *mask, bool causal) {
  for (int64_t i = 0; i < t; i++) {
    float *r = s + i * t;
    int64_t last = causal ? i + 1 : t;
    float mx = -INFINITY;
    for (int64_t j = 0; j < last; j++)
      if ((!mask || mask[j] != 0.0f) && r[j] > mx)
        mx = r[j];
    if (mx == -INFINITY) {
      memset(r, 0, (size_t)t * sizeof(float));
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < t; j++) {
      bool ok = j < last && (!mask || mask[j] != 0.0f);
      r[j] = ok ? expf(r[j] - mx) : 0.0f;
      sum += r[j];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < last; j++)
      r[j] *= inv;
  }
}

static void attention_forward(void *state, ar_nn_args *a) {
  (void)state;
  const dims g = dims_of(a);
  const int64_t ntd = g.n * g.t * g.d, tt = g.t * g.t;
  const float *x = a->in[0].p, *mask = a->n_in == 2 ? a->in[1].p : NULL;
  const float *const *p = (const float *const[]){a->param[WQ].p, a->param[WK].p,
                                                 a->param[WV].p, a->param[WO].p,
                                                 a->param[BQ].p, a->param[BK].p,
                                                 a->param[BV].p, a->param[BO].p};
  AR_ASSERT(a->work_bytes >= work_floats(&g) * sizeof(float));
  float *ws = a->work, *q, *k, *v, *ctx, *probs;
  if (a->training) {
    q = a->aux[AUX_Q].p;
    k = a->aux[AUX_K].p;
    v = a->aux[AUX_V].p;
    probs = a->aux[AUX_PROBS].p;
    ctx = a->aux[AUX_CTX].p;
  } else {
    q = ws;
    k = ws + ntd;
    v = ws + 2 * ntd;
    ctx = ws + 3 * ntd;
    probs = NULL;
  }
  float *slots = ws + 4 * ntd;
  const float scale = (float)(1.0 / sqrt((double)g.dk));
  const bool causal = a->attr->causal;
  const int nt = head_team(a->threads, &g);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t nh = 0; nh < g.n * g.h; nh++) {
    const int64_t n = nh / g.h, h = nh % g.h;
    const float *xn = x + n * g.t * g.d;
    float *qkv[3] = {q + nh * g.t * g.dk, k + nh * g.t * g.dk, v + nh * g.t * g.dk};
    for (int j = 0; j < 3; j++) {
      /* Rows h dk .. (h+1) dk of w are head h's outputs. */
      ar__host_sgemm(1, false, true, g.t, g.dk, g.d, 1.0f, xn, g.d, p[WQ + j] + h * g.dk * g.d,
                     g.d, 0.0f, qkv[j], g.dk);
      add_bias(g.t, g.dk, p[BQ + j] + h * g.dk, qkv[j], g.dk);
    }
    float *s = probs ? probs + nh * tt : slots + (int64_t)omp_get_thread_num() * tt;
    ar__host_sgemm(1, false, true, g.t, g.t, g.dk, scale, qkv[0], g.dk, qkv[1], g.dk, 0.0f, s,
                   g.t);
    softmax_rows(s, g.t, mask ? mask + n * g.t : NULL, causal);
    ar__host_sgemm(1, false, false, g.t, g.dk, g.t, 1.0f, s, g.t, qkv[2], g.dk, 0.0f,
                   ctx + n * g.t * g.d + h * g.dk, g.d);
  }
  float *y = a->out[0].p;
  ar__host_sgemm(a->threads, false, true, g.n * g.t, g.d, g.d, 1.0f, ctx, g.d, p[WO], g.d, 0.0f,
                 y, g.d);
  add_bias(g.n * g.t, g.d, p[BO], y, g.d);
}

static void attention_backward(void *state, ar_nn_args *a) {
  (void)state;
  const dims g = dims_of(a);
  const int64_t ntd = g.n * g.t * g.d, tt = g.t * g.t, rows = g.n * g.t;
  const int th = a->threads;
  const float *x = a->in[0].p, *gy = a->gout[0].p;
  const float *q = a->aux[AUX_Q].p, *k = a->aux[AUX_K].p, *v = a->aux[AUX_V].p;
  const float *probs = a->aux[AUX_PROBS].p, *ctx = a->aux[AUX_CTX].p;
  AR_ASSERT(a->work_bytes >= work_floats(&g) * sizeof(float));
  float *ws = a->work;
  float *dctx = ws, *dz[3] = {ws + ntd, ws + 2 * ntd, ws + 3 * ntd}, *slots = ws + 4 * ntd;
  const float scale = (float)(1.0 / sqrt((double)g.dk));

  /* y = ctx wo^T + bo. */
  ar__host_sgemm(th, true, false, g.d, g.d, rows, 1.0f, gy, g.d, ctx, g.d, 0.0f,
                 a->gparam[WO].p, g.d);
  ar__nn_col_sum(th, rows, g.d, gy, a->gparam[BO].p);
  ar__host_sgemm(th, false, false, rows, g.d, g.d, 1.0f, gy, g.d, a->param[WO].p, g.d, 0.0f,
                 dctx, g.d);

  /* Per head: ctx_h = P v_h, P = softmax(scale q_h k_h^T). */
  const int nt = head_team(th, &g);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t nh = 0; nh < g.n * g.h; nh++) {
    const int64_t n = nh / g.h, h = nh % g.h, at = n * g.t * g.d + h * g.dk;
    const float *qh = q + nh * g.t * g.dk, *kh = k + nh * g.t * g.dk, *vh = v + nh * g.t * g.dk;
    const float *ph = probs + nh * tt, *dch = dctx + at;
    float *ds = slots + (int64_t)omp_get_thread_num() * tt;
    ar__host_sgemm(1, false, true, g.t, g.t, g.dk, 1.0f, dch, g.d, vh, g.dk, 0.0f, ds, g.t);
    ar__host_sgemm(1, true, false, g.t, g.dk, g.t, 1.0f, ph, g.t, dch, g.d, 0.0f, dz[2] + at,
                   g.d);
    /* Softmax backward: ds = P (dP - sum_j P dP), then the score scale. */
    for (int64_t i = 0; i < g.t; i++) {
      const float *pr = ph + i * g.t;
      float *dr = ds + i * g.t;
      double dot = 0;
      for (int64_t j = 0; j < g.t; j++)
        dot += (double)pr[j] * (double)dr[j];
      const float fd = (float)dot;
#pragma omp simd
      for (int64_t j = 0; j < g.t; j++)
        dr[j] = pr[j] * (dr[j] - fd) * scale;
    }
    ar__host_sgemm(1, false, false, g.t, g.dk, g.t, 1.0f, ds, g.t, kh, g.dk, 0.0f, dz[0] + at,
                   g.d);
    ar__host_sgemm(1, true, false, g.t, g.dk, g.t, 1.0f, ds, g.t, qh, g.dk, 0.0f, dz[1] + at,
                   g.d);
  }

  /* q, k, v = x w^T + b, with dq, dk, dv as (N T, D). */
  for (int j = 0; j < 3; j++) {
    ar__host_sgemm(th, true, false, g.d, g.d, rows, 1.0f, dz[j], g.d, x, g.d, 0.0f,
                   a->gparam[WQ + j].p, g.d);
    ar__nn_col_sum(th, rows, g.d, dz[j], a->gparam[BQ + j].p);
  }
  if (a->gin[0].p)
    for (int j = 0; j < 3; j++)
      ar__host_sgemm(th, false, false, rows, g.d, g.d, 1.0f, dz[j], g.d, a->param[WQ + j].p, g.d,
                     j ? 1.0f : 0.0f, a->gin[0].p, g.d);
}

void ar__nn_host_attention_register(ar_nn_kernel *table) {
  table[AR_NN_ATTENTION] = (ar_nn_kernel){.infer = attention_infer,
                                          .prepare = attention_prepare,
                                          .forward = attention_forward,
                                          .backward = attention_backward};
}
