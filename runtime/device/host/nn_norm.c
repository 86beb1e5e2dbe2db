/*
 * Host kernels of the row-wise nn ops over the last axis
 * (include/accelrt/nn.h): SOFTMAX, LOG_SOFTMAX, LAYERNORM, XENT and BCE.  Each
 * row is one thread's; sums over a row are taken in double (softmax and
 * xent: float lanes over short chunks, the chunks in double, as the
 * chain's losses), so rows of thousands of classes keep float accuracy,
 * and exponentials always see x - max(x) <= 0 (no overflow for any finite
 * input); softmax and xent take them vectorised (ar__host_row_sum_exp).
 */
#include "host/host_kernels.h"
#include "host/nn_math_impl.h"

#include <math.h>
#include <string.h>

/* max over a row (NaN-free input assumed; -inf for an empty row).  No simd
 * request: clang cannot vectorise the select and warns; GCC's -O3 does. */
static inline float row_max(const float *restrict x, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; j++)
    m = x[j] > m ? x[j] : m;
  return m;
}

/* ---- SOFTMAX, LOG_SOFTMAX ----------------------------------------------------- */

static ar_status softmax_infer_op(ar_nn_op op, int n_in, const ar_shape *in,
                                  const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  AR_CHECK(ar__nn_want_inputs(op, n_in, 1, 1, err));
  AR_CHECK(ar__nn_want_f32(op, n_in, in_dtype, 1u, err));
  if (in[0].nd < 1)
    return ar_errf(err, AR_INVALID, "%s: input is a scalar; it needs a last axis to normalise",
                   ar_nn_op_name(op));
  ar__nn_sig_init(sig, n_in);
  ar__nn_sig_out(sig, &in[0], AR_DT_F32);
  sig->in_needed = 0; /* both gradients are functions of the output */
  sig->out_needed = true;
  sig->flops = 5.0 * (double)ar_shape_count(&in[0]);
  return AR_OK;
}

static ar_status softmax_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                               const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  (void)attr;
  return softmax_infer_op(AR_NN_SOFTMAX, n_in, in, in_dtype, sig, err);
}
static ar_status log_softmax_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                                   const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  (void)attr;
  return softmax_infer_op(AR_NN_LOG_SOFTMAX, n_in, in, in_dtype, sig, err);
}

static void softmax_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *s = &a->in[0].shape;
  const int64_t n = s->d[s->nd - 1], rows = n > 0 ? ar_shape_count(s) / n : 0;
  const bool lg = a->op == AR_NN_LOG_SOFTMAX;
  const float *x = a->in[0].p;
  float *y = a->out[0].p;
  const int nt = ar__nn_team(a, rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict xr = x + r * n;
    float *restrict yr = y + r * n;
    const float m = row_max(xr, n);
    const double sum = ar__host_row_sum_exp(xr, n, m, yr);
    if (lg) {
      /* (x - m) - log(sum), not x - (m + log(sum)): the latter rounds the
       * log-sum-exp at the magnitude of m (an ulp of 1000 is 6e-5). */
      const float ls = (float)log(sum);
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        yr[j] = (xr[j] - m) - ls;
    } else {
      const float inv = (float)(1.0 / sum);
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        yr[j] *= inv;
    }
  }
}

/* softmax: gx = y (g - <g, y>); log_softmax: gx = g - exp(y) sum(g). */
static void softmax_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const ar_shape *s = &a->in[0].shape;
  const int64_t n = s->d[s->nd - 1], rows = n > 0 ? ar_shape_count(s) / n : 0;
  const bool lg = a->op == AR_NN_LOG_SOFTMAX;
  const float *y = a->out[0].p, *g = a->gout[0].p;
  float *gx = a->gin[0].p;
  const int nt = ar__nn_team(a, rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict yr = y + r * n, *restrict gr = g + r * n;
    float *restrict dr = gx + r * n;
    double dot = 0.0;
    if (lg) {
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < n; j++)
        dot += gr[j];
      const float sg = (float)dot;
      for (int64_t j = 0; j < n; j++)
        dr[j] = gr[j] - expf(yr[j]) * sg;
    } else {
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < n; j++)
        dot += (double)(gr[j] * yr[j]);
      const float d = (float)dot;
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        dr[j] = yr[j] * (gr[j] - d);
    }
  }
}

/* ---- LAYERNORM ------------------------------------------------------------------
 * y = (x - mean) rstd gamma + beta per row of D, rstd = 1/sqrt(var + eps)
 * with the biased variance (PyTorch's).  aux: mean, rstd, one per row;
 * with attr.stats the same two are outputs 1 and 2 as well. */

static ar_status layernorm_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                                 const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  char b[64];
  AR_CHECK(ar__nn_want_inputs(AR_NN_LAYERNORM, n_in, 1, 1, err));
  AR_CHECK(ar__nn_want_f32(AR_NN_LAYERNORM, n_in, in_dtype, 1u, err));
  if (in[0].nd < 1 || in[0].d[in[0].nd - 1] <= 0)
    return ar_errf(err, AR_INVALID, "layernorm: input %s has no last axis to normalise",
                   ar_shape_str(&in[0], b, sizeof b));
  if (!(attr->eps > 0.0f))
    return ar_errf(err, AR_INVALID, "layernorm: eps is %g; give eps > 0", (double)attr->eps);
  ar__nn_sig_init(sig, n_in);
  ar__nn_sig_out(sig, &in[0], AR_DT_F32);
  ar_shape d = ar__nn_shape(1, (int64_t[]){in[0].d[in[0].nd - 1]});
  ar__nn_sig_param(sig, "gamma", &d, AR_NN_INIT_ONES, false);
  ar__nn_sig_param(sig, "beta", &d, AR_NN_INIT_ZEROS, false);
  ar_shape rows = ar__nn_rows_shape(&in[0]);
  if (attr->stats) { /* the mean and rstd as outputs too (ONNX's) */
    ar__nn_sig_out(sig, &rows, AR_DT_F32);
    ar__nn_sig_out(sig, &rows, AR_DT_F32);
  }
  ar__nn_sig_aux(sig, &rows, AR_DT_F32); /* mean */
  ar__nn_sig_aux(sig, &rows, AR_DT_F32); /* rstd */
  sig->in_needed = 1u;
  sig->out_needed = false;
  sig->flops = 8.0 * (double)ar_shape_count(&in[0]);
  return AR_OK;
}

static void layernorm_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *s = &a->in[0].shape;
  const int64_t n = s->d[s->nd - 1], rows = ar_shape_count(s) / n;
  const float *x = a->in[0].p, *gamma = a->param[0].p, *beta = a->param[1].p;
  float *y = a->out[0].p;
  float *mean_out = a->training ? a->aux[0].p : NULL, *rstd_out = a->training ? a->aux[1].p : NULL;
  float *mean_y = a->n_out > 2 ? a->out[1].p : NULL, *rstd_y = a->n_out > 2 ? a->out[2].p : NULL;
  const float eps = a->attr->eps;
  const int nt = ar__nn_team(a, rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict xr = x + r * n;
    float *restrict yr = y + r * n;
    double s1 = 0.0;
#pragma omp simd reduction(+ : s1)
    for (int64_t j = 0; j < n; j++)
      s1 += xr[j];
    const float mean = (float)(s1 / (double)n);
    double s2 = 0.0;
#pragma omp simd reduction(+ : s2)
    for (int64_t j = 0; j < n; j++) {
      const float c = xr[j] - mean;
      s2 += (double)(c * c);
    }
    const float rstd = (float)(1.0 / sqrt(s2 / (double)n + (double)eps));
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
    if (mean_out) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
    if (mean_y) {
      mean_y[r] = mean;
      rstd_y[r] = rstd;
    }
  }
}

/* Columns of dgamma and dbeta a thread owns at a time. */
#define LN_COLS 256

static void layernorm_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *s = &a->in[0].shape;
  const int64_t n = s->d[s->nd - 1], rows = ar_shape_count(s) / n;
  const float *x = a->in[0].p, *gamma = a->param[0].p, *g = a->gout[0].p;
  const float *mean = a->aux[0].p, *rstd = a->aux[1].p;
  const int nt = ar__nn_team(a, rows * n);
  /* gx = rstd (gh - mean(gh) - xhat mean(gh xhat)), gh = g gamma. */
  float *gx = a->gin[0].p;
  if (gx) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict xr = x + r * n, *restrict gr = g + r * n;
      float *restrict dr = gx + r * n;
      const float mu = mean[r], rs = rstd[r];
      double s1 = 0.0, s2 = 0.0;
#pragma omp simd reduction(+ : s1, s2)
      for (int64_t j = 0; j < n; j++) {
        const float gh = gr[j] * gamma[j];
        s1 += gh;
        s2 += (double)(gh * (xr[j] - mu) * rs);
      }
      const float m1 = (float)(s1 / (double)n), m2 = (float)(s2 / (double)n);
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        dr[j] = rs * (gr[j] * gamma[j] - m1 - (xr[j] - mu) * rs * m2);
    }
  }
  /* dgamma = sum_r g xhat, dbeta = sum_r g: threads own column blocks and
   * add the rows in order. */
  float *dgamma = a->gparam[0].p, *dbeta = a->gparam[1].p;
  const int64_t nb = (n + LN_COLS - 1) / LN_COLS;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t blk = 0; blk < nb; blk++) {
    const int64_t c0 = blk * LN_COLS, w = n - c0 < LN_COLS ? n - c0 : LN_COLS;
    float *restrict dgm = dgamma + c0, *restrict dbt = dbeta + c0;
    for (int64_t j = 0; j < w; j++)
      dgm[j] = dbt[j] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict xr = x + r * n + c0, *restrict gr = g + r * n + c0;
      const float mu = mean[r], rs = rstd[r];
#pragma omp simd
      for (int64_t j = 0; j < w; j++) {
        dgm[j] += gr[j] * (xr[j] - mu) * rs;
        dbt[j] += gr[j];
      }
    }
  }
}

/* ---- XENT -------------------------------------------------------------------------
 * logits (N, C), labels (N) -> loss (N) = logsumexp(x) - x[label]; aux
 * softmax (N, C); backward: dlogits = scale (softmax - onehot). */

static ar_status xent_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                            const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  (void)attr;
  char sx[64], sl[64];
  AR_CHECK(ar__nn_want_inputs(AR_NN_XENT, n_in, 2, 2, err));
  AR_CHECK(ar__nn_want_f32(AR_NN_XENT, n_in, in_dtype, 1u, err));
  if (in_dtype[1] != AR_DT_I64 && in_dtype[1] != AR_DT_I32)
    return ar_errf(err, AR_INVALID, "xent: labels (input 1) are %s; give class ids as i64 or i32",
                   ar_dtype_name(in_dtype[1]));
  ar_shape_str(&in[0], sx, sizeof sx);
  ar_shape_str(&in[1], sl, sizeof sl);
  if (in[0].nd != 2 || in[1].nd != 1 || in[0].d[0] != in[1].d[0] || in[0].d[1] <= 0)
    return ar_errf(err, AR_INVALID,
                   "xent: logits %s and labels %s: want logits (N, C), C > 0, and labels (N)",
                   sx, sl);
  ar__nn_sig_init(sig, n_in);
  ar_shape loss = ar__nn_shape(1, (int64_t[]){in[0].d[0]});
  ar__nn_sig_out(sig, &loss, AR_DT_F32);
  ar__nn_sig_aux(sig, &in[0], AR_DT_F32);
  sig->no_grad = 2u;
  sig->in_needed = 2u; /* the labels; the softmax is in aux */
  sig->out_needed = false;
  sig->flops = 4.0 * (double)ar_shape_count(&in[0]);
  return AR_OK;
}

static inline int64_t label_at(const ar_tref *t, int64_t r) {
  return t->dtype == AR_DT_I64 ? ((const int64_t *)t->p)[r] : ((const int32_t *)t->p)[r];
}

static void xent_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t rows = a->in[0].shape.d[0], n = a->in[0].shape.d[1];
  const float *x = a->in[0].p;
  float *loss = a->out[0].p, *p = a->training ? a->aux[0].p : NULL;
  const int nt = ar__nn_team(a, rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t lab = label_at(&a->in[1], r);
    /* The engine checked the labels on the host (nn.h): a bad one here is
     * a bug. */
    AR_ASSERT(lab >= 0 && lab < n);
    const float *restrict xr = x + r * n;
    const float m = row_max(xr, n);
    float *restrict pr = p ? p + r * n : NULL;
    const double sum = ar__host_row_sum_exp(xr, n, m, pr);
    if (pr) {
      const float inv = (float)(1.0 / sum);
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        pr[j] *= inv;
    }
    loss[r] = (float)(log(sum) + (double)(m - xr[lab]));
  }
}

static void xent_backward(void *state, ar_nn_args *a) {
  (void)state;
  float *gx = a->gin[0].p;
  if (!gx)
    return;
  const int64_t rows = a->in[0].shape.d[0], n = a->in[0].shape.d[1];
  const float *p = a->aux[0].p;
  const float scale = a->scale;
  const int nt = ar__nn_team(a, rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict pr = p + r * n;
    float *restrict dr = gx + r * n;
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      dr[j] = scale * pr[j];
    dr[label_at(&a->in[1], r)] -= scale;
  }
}

/* ---- BCE --------------------------------------------------------------------------
 * logits (N, C), targets (N, C) -> loss (N) = mean_j softplus(x) - x t, in
 * the stable form max(x, 0) - x t + log1p(exp(-|x|)); backward: dlogits =
 * scale (sigmoid(x) - t) / C. */

static ar_status bce_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                           const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  (void)attr;
  char sx[64], st[64];
  AR_CHECK(ar__nn_want_inputs(AR_NN_BCE, n_in, 2, 2, err));
  AR_CHECK(ar__nn_want_f32(AR_NN_BCE, n_in, in_dtype, 3u, err));
  if (in[0].nd != 2 || !ar_shape_eq(&in[0], &in[1]) || in[0].d[1] <= 0)
    return ar_errf(err, AR_INVALID,
                   "bce: logits %s and targets %s: want both (N, C), C > 0",
                   ar_shape_str(&in[0], sx, sizeof sx), ar_shape_str(&in[1], st, sizeof st));
  ar__nn_sig_init(sig, n_in);
  ar_shape loss = ar__nn_shape(1, (int64_t[]){in[0].d[0]});
  ar__nn_sig_out(sig, &loss, AR_DT_F32);
  sig->no_grad = 2u;
  sig->in_needed = 3u; /* logits and targets */
  sig->out_needed = false;
  sig->flops = 6.0 * (double)ar_shape_count(&in[0]);
  return AR_OK;
}

static void bce_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t rows = a->in[0].shape.d[0], n = a->in[0].shape.d[1];
  const float *x = a->in[0].p, *t = a->in[1].p;
  float *loss = a->out[0].p;
  const int nt = ar__nn_team(a, rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    double sum = 0.0;
    for (int64_t j = r * n; j < (r + 1) * n; j++) {
      const float v = x[j];
      sum += (double)(v > 0 ? v : 0.0f) - (double)v * (double)t[j] +
             log1p(exp(-(double)fabsf(v)));
    }
    loss[r] = (float)(sum / (double)n);
  }
}

static void bce_backward(void *state, ar_nn_args *a) {
  (void)state;
  float *gx = a->gin[0].p;
  if (!gx)
    return;
  const int64_t rows = a->in[0].shape.d[0], n = a->in[0].shape.d[1];
  const float *x = a->in[0].p, *t = a->in[1].p;
  const float scale = a->scale / (float)n;
  const int nt = ar__nn_team(a, rows * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < rows * n; i++)
    gx[i] = scale * (1.0f / (1.0f + expf(-x[i])) - t[i]);
}

void ar__nn_host_norm_register(ar_nn_kernel *table) {
  table[AR_NN_BCE] =
      (ar_nn_kernel){.infer = bce_infer, .forward = bce_forward, .backward = bce_backward};
  table[AR_NN_SOFTMAX] = (ar_nn_kernel){
      .infer = softmax_infer, .forward = softmax_forward, .backward = softmax_backward};
  table[AR_NN_LOG_SOFTMAX] = (ar_nn_kernel){
      .infer = log_softmax_infer, .forward = softmax_forward, .backward = softmax_backward};
  table[AR_NN_LAYERNORM] = (ar_nn_kernel){
      .infer = layernorm_infer, .forward = layernorm_forward, .backward = layernorm_backward};
  table[AR_NN_XENT] =
      (ar_nn_kernel){.infer = xent_infer, .forward = xent_forward, .backward = xent_backward};
}
