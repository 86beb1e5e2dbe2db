/*
 * Host kernel of BATCHNORM (group "conv"): native C and OpenMP on the
 * caller's (N,C,H,W) or (N,C) tensors, seen as (N, C, S) with S = H*W
 * (1 for 2-D input).
 *
 * Training normalises with the batch's mean and biased variance, which
 * the forward saves in the aux tensors for the backward, and moves the
 * running statistics PyTorch's way: running = (1 - momentum) running +
 * momentum batch, with the variance unbiased (times m / (m - 1), m = N*S
 * the values per channel).  Evaluation normalises with the running ones.
 *
 * Statistics (4-D): each (n, c) plane's mean and sum of squared deviations
 * in double, the second pass over the plane reading it from L1, then per
 * channel the planes combined in n order with Chan et al.'s pairwise
 * update ("Algorithms for computing the sample variance", 1979, eq. 2.1,
 * for equal-sized parts): M2 = sum M2_p + S sum (mean_p - mean)^2.  So x
 * is read from memory once for the statistics and once for the
 * normalisation, and 100k values per channel keep float accuracy.  2-D
 * input: threads own blocks of columns and take the two passes (mean, then
 * squared deviations) down the rows, in double.
 *
 * Backward: the two reductions per channel, sum g and sum g (x - mean)
 * (the same plane / column split; float sums of 256 terms added in
 * double), give dbeta and dgamma =
 * rstd sum g (x - mean); then one element-wise pass
 *   dx = gamma rstd (g - sum g / m - xhat rstd sum g (x - mean) / m).
 * Fused relu (act RELU): y = max(0, .) in the forward; the backward reads
 * g as gout masked where the pre-activation is > 0, recomputing it from x
 * (the forward's float expression, preact, and its scale) inside both
 * passes: no masked copy is made, y is not read (two fewer streams over
 * memory, and the engine may free y once its consumers have run).
 *
 * The workspace holds the per-plane (or per-column) partial sums and the
 * per-channel coefficients: nothing is allocated per call, and every sum
 * is taken by one thread in a fixed order, so one thread and several give
 * the same bits.
 */
#include "host/nn_conv_impl.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Columns a thread owns at a time in the 2-D reductions. */
#define BN_COLS 256

/* Terms summed in float before a double sum takes over (see
 * plane_grad_sums). */
#define BN_CHUNK 256

/* Partial sums of plane_stats: eight doubles, two AVX2 vectors. */
#define LANES 8

/* The lanes added in a fixed order (in double). */
static inline double sum_lanes_d(const double *v) {
  double s = 0.0;
  for (int l = 0; l < LANES; l++)
    s += v[l];
  return s;
}

#define WS_ALIGN 64

typedef struct bnorm_geom {
  int64_t N, C, S; /* x seen as (N, C, S) */
  bool relu;
} bnorm_geom;

static bnorm_geom geom_of(const ar_nn_args *a) {
  const ar_shape *xs = &a->in[0].shape;
  bnorm_geom g = {xs->d[0], xs->d[1], xs->nd == 4 ? xs->d[2] * xs->d[3] : 1,
                  a->attr->act == AR_ACT_RELU};
  return g;
}

/* Partial sums: two doubles per plane (S > 1) or per channel (S == 1). */
static int64_t n_part(const bnorm_geom *g) { return g->S > 1 ? g->N * g->C : g->C; }

static size_t work_size(const bnorm_geom *g) {
  return WS_ALIGN + (size_t)(2 * n_part(g)) * sizeof(double) +
         (size_t)(4 * g->C) * sizeof(float) + WS_ALIGN;
}

/* The workspace, carved: part (n_part, 2) doubles; coef (4, C) floats. */
static void work_carve(const bnorm_geom *g, void *work, double **part, float **coef) {
  char *w = (char *)(((uintptr_t)work + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN);
  *part = (double *)w;
  *coef = (float *)(w + (size_t)(2 * n_part(g)) * sizeof(double));
}

static ar_status bnorm_infer(const ar_nn_attr *t, int n_in, const ar_shape *in, const ar_dtype *dt,
                             ar_nn_sig *sig, ar_err *err) {
  char xs[96];
  if (n_in != 1)
    return ar_errf(err, AR_INVALID, "batchnorm takes one input, not %d", n_in);
  ar_shape_str(&in[0], xs, sizeof xs);
  if ((in[0].nd != 2 && in[0].nd != 4) || dt[0] != AR_DT_F32)
    return ar_errf(err, AR_INVALID,
                   "input %s %s: batchnorm takes f32 (N,C,H,W) or (N,C), not %d dimensions", xs,
                   ar_dtype_name(dt[0]), in[0].nd);
  for (int i = 0; i < in[0].nd; i++)
    if (in[0].d[i] < 1)
      return ar_errf(err, AR_INVALID, "input %s: batchnorm needs every dimension at least 1", xs);
  if (!(t->eps > 0.0f) || !(t->momentum >= 0.0f && t->momentum <= 1.0f))
    return ar_errf(err, AR_INVALID,
                   "input %s: batchnorm needs eps > 0 and momentum in [0, 1] (eps %g, momentum "
                   "%g)",
                   xs, (double)t->eps, (double)t->momentum);
  if (t->act != AR_ACT_NONE && t->act != AR_ACT_RELU)
    return ar_errf(err, AR_INVALID, "batchnorm fuses only act none or relu (got act %d)",
                   (int)t->act);
  ar__nn_sig_init(sig, 1);
  ar__nn_sig_out(sig, &in[0], AR_DT_F32);
  ar_shape cs = ar__nn_shape(1, &in[0].d[1]);
  ar__nn_sig_param(sig, "gamma", &cs, AR_NN_INIT_ONES, false);
  ar__nn_sig_param(sig, "beta", &cs, AR_NN_INIT_ZEROS, false);
  ar__nn_sig_state(sig, "running_mean", &cs, AR_NN_INIT_ZEROS);
  ar__nn_sig_state(sig, "running_var", &cs, AR_NN_INIT_ONES);
  ar__nn_sig_aux(sig, &cs, AR_DT_F32); /* the batch mean */
  ar__nn_sig_aux(sig, &cs, AR_DT_F32); /* the batch variance (biased) */
  sig->in_needed = 1u;
  /* The backward takes the relu's mask from x (preact), not from y. */
  sig->out_needed = false;
  /* Statistics (two passes) and the affine normalisation, per element. */
  sig->flops = 4.0 * (double)ar_shape_count(&in[0]);
  return AR_OK;
}

static ar_status bnorm_prepare(const ar_nn_args *a, bool training, void **state, size_t *work_bytes,
                               ar_err *err) {
  (void)state;
  bnorm_geom g = geom_of(a);
  if (training && g.N * g.S < 2) {
    char buf[96];
    return ar_errf(err, AR_INVALID,
                   "input %s: batchnorm in training needs more than one value per channel "
                   "(the batch variance of one value is undefined); use a larger batch",
                   ar_shape_str(&a->in[0].shape, buf, sizeof buf));
  }
  *work_bytes = work_size(&g);
  return AR_OK;
}

/* 1 / sqrt(var + eps), from the float variance both passes see. */
static inline double rstd_of(float var, float eps) { return 1.0 / sqrt((double)var + (double)eps); }

/* ---- forward ------------------------------------------------------------- */

/* Mean and sum of squared deviations of one plane, in double, over
 * LANES partial sums (the compiler makes each lane loop one vector
 * operation; `omp simd reduction` kept its lanes on the stack, a store and
 * a reload per iteration).  The deviations are taken from the float mean
 * mf and corrected to the exact one: sum (x - m)^2 = sum (x - mf)^2 -
 * S (m - mf)^2. */
static void plane_stats(const float *restrict x, int64_t S, double *mean, double *m2) {
  double s[LANES] = {0}, q[LANES] = {0};
  const int64_t body = S / LANES * LANES;
  for (int64_t j = 0; j < body; j += LANES)
    for (int l = 0; l < LANES; l++)
      s[l] += (double)x[j + l];
  for (int64_t j = body; j < S; j++)
    s[0] += (double)x[j];
  const double m = sum_lanes_d(s) / (double)S;
  const float mf = (float)m;
  for (int64_t j = 0; j < body; j += LANES)
    for (int l = 0; l < LANES; l++) {
      const float d = x[j + l] - mf;
      q[l] += (double)(d * d);
    }
  for (int64_t j = body; j < S; j++) {
    const float d = x[j] - mf;
    q[0] += (double)(d * d);
  }
  const double dm = m - (double)mf;
  *mean = m;
  *m2 = sum_lanes_d(q) - (double)S * dm * dm;
}

/* The normalised value before the relu.  The forward and the backward
 * (which takes the relu's mask from it instead of reading y back) use
 * this one expression, so they agree on its sign. */
static inline float preact(float x, float mean, float scale, float beta) {
  return (x - mean) * scale + beta;
}

/* y = (x - mean) scale + beta over n values, relu when asked. */
static inline __attribute__((always_inline)) void apply(const float *restrict x,
                                                        float *restrict y, int64_t n, float mean,
                                                        float scale, float beta, bool relu) {
  if (relu) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
      const float v = preact(x[j], mean, scale, beta);
      y[j] = v > 0.0f ? v : 0.0f;
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      y[j] = preact(x[j], mean, scale, beta);
  }
}

/* One row of 2-D input: y[j] = (x[j] - mean[j]) scale[j] + beta[j]. */
static inline __attribute__((always_inline)) void apply_row(
    const float *restrict x, float *restrict y, int64_t C, const float *restrict mean,
    const float *restrict scale, const float *restrict beta, bool relu) {
  if (relu) {
#pragma omp simd
    for (int64_t j = 0; j < C; j++) {
      const float v = preact(x[j], mean[j], scale[j], beta[j]);
      y[j] = v > 0.0f ? v : 0.0f;
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < C; j++)
      y[j] = preact(x[j], mean[j], scale[j], beta[j]);
  }
}

/* The batch statistics of 2-D input, columns [c0, c1): into mean[], var[]
 * (floats), with s (C, 2) doubles as the accumulators. */
static void column_stats(const float *x, int64_t N, int64_t C, int64_t c0, int64_t c1, double *s,
                         float *mean, float *var) {
  double *restrict s1 = s + c0, *restrict s2 = s + C + c0;
  const int64_t w = c1 - c0;
  for (int64_t j = 0; j < w; j++)
    s1[j] = s2[j] = 0.0;
  for (int64_t r = 0; r < N; r++) {
    const float *restrict xr = x + r * C + c0;
#pragma omp simd
    for (int64_t j = 0; j < w; j++)
      s1[j] += (double)xr[j];
  }
  for (int64_t j = 0; j < w; j++)
    mean[c0 + j] = (float)(s1[j] / (double)N);
  const float *restrict mf = mean + c0;
  for (int64_t r = 0; r < N; r++) {
    const float *restrict xr = x + r * C + c0;
#pragma omp simd
    for (int64_t j = 0; j < w; j++) {
      const float d = xr[j] - mf[j];
      s2[j] += (double)(d * d);
    }
  }
  for (int64_t j = 0; j < w; j++) {
    /* Deviations from the float mean: sum (x - m)^2 = that - N (m - mf)^2. */
    const double dm = s1[j] / (double)N - (double)mf[j];
    const double m2 = s2[j] - (double)N * dm * dm;
    var[c0 + j] = (float)((m2 > 0.0 ? m2 : 0.0) / (double)N);
  }
}

static void bnorm_forward(void *state, ar_nn_args *a) {
  (void)state;
  const bnorm_geom g = geom_of(a);
  const int64_t N = g.N, C = g.C, S = g.S, P = N * C;
  const float *x = a->in[0].p, *gamma = a->param[0].p, *beta = a->param[1].p;
  float *y = a->out[0].p, *rm = a->state[0].p, *rv = a->state[1].p;
  const bool train = a->training;
  /* Training: the batch's statistics go to the aux tensors; evaluation
   * reads the running ones. */
  float *mean = train ? a->aux[0].p : rm, *var = train ? a->aux[1].p : rv;
  const float eps = a->attr->eps, mo = a->attr->momentum;
  const double unbias = a->attr->var_biased
                            ? 1.0
                            : (double)(N * S) / (double)(N * S - 1 > 0 ? N * S - 1 : 1);
  AR_ASSERT(a->work && a->work_bytes >= work_size(&g));
  double *part;
  float *coef;
  work_carve(&g, a->work, &part, &coef);
  float *scale = coef;
  const int nt = ar__nn_conv_team(a, N * C * S);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    if (train && S > 1) {
#pragma omp for schedule(static)
      for (int64_t p = 0; p < P; p++)
        plane_stats(x + p * S, S, &part[2 * p], &part[2 * p + 1]);
#pragma omp for schedule(static)
      for (int64_t c = 0; c < C; c++) {
        double m = 0.0;
        for (int64_t n = 0; n < N; n++)
          m += part[2 * (n * C + c)];
        m /= (double)N;
        double m2 = 0.0, dev = 0.0;
        for (int64_t n = 0; n < N; n++) {
          const double d = part[2 * (n * C + c)] - m;
          m2 += part[2 * (n * C + c) + 1];
          dev += d * d;
        }
        m2 += (double)S * dev;
        mean[c] = (float)m;
        var[c] = (float)((m2 > 0.0 ? m2 : 0.0) / (double)(N * S));
      }
    } else if (train) {
      const int64_t nb = (C + BN_COLS - 1) / BN_COLS;
#pragma omp for schedule(static)
      for (int64_t b = 0; b < nb; b++) {
        const int64_t c0 = b * BN_COLS, c1 = c0 + BN_COLS < C ? c0 + BN_COLS : C;
        column_stats(x, N, C, c0, c1, part, mean, var);
      }
    }
#pragma omp for schedule(static)
    for (int64_t c = 0; c < C; c++) {
      scale[c] = (float)((double)gamma[c] * rstd_of(var[c], eps));
      if (train) {
        rm[c] = (1.0f - mo) * rm[c] + mo * mean[c];
        rv[c] = (1.0f - mo) * rv[c] + mo * (float)((double)var[c] * unbias);
      }
    }
    if (S > 1) {
#pragma omp for schedule(static)
      for (int64_t p = 0; p < P; p++) {
        const int64_t c = p % C;
        if (g.relu)
          apply(x + p * S, y + p * S, S, mean[c], scale[c], beta[c], true);
        else
          apply(x + p * S, y + p * S, S, mean[c], scale[c], beta[c], false);
      }
    } else {
#pragma omp for schedule(static)
      for (int64_t r = 0; r < N; r++) {
        if (g.relu)
          apply_row(x + r * C, y + r * C, C, mean, scale, beta, true);
        else
          apply_row(x + r * C, y + r * C, C, mean, scale, beta, false);
      }
    }
  }
}

/* ---- backward ------------------------------------------------------------ */

/* gout through the fused relu: g where the pre-activation v > 0, else 0,
 * as a bit mask.  g is a value, read whatever v is (a load under the
 * condition is a masked load, slow on AMD), and the AND keeps the loops
 * below vectorisable (GCC turns a select there into a branch per
 * element). */
static inline float relu_grad(float g, float v) {
  uint32_t b;
  memcpy(&b, &g, sizeof b);
  b &= -(uint32_t)(v > 0.0f);
  memcpy(&g, &b, sizeof g);
  return g;
}

/* sum g and sum g (x - mean) over one plane, g masked by the relu:
 * float sums over chunks of BN_CHUNK (8 vector lanes of 32 terms), added
 * in double.  (A select feeding a double sum directly is compiled to a
 * branch per element; LANES partial sums as in plane_stats are vectorised
 * badly here, with shuffles.) */
static inline __attribute__((always_inline)) void plane_grad_sums(
    const float *restrict x, const float *restrict gy, int64_t S, float mean, float scale,
    float beta, double *sg, double *sgx, bool relu) {
  double s1 = 0.0, s2 = 0.0;
  for (int64_t j0 = 0; j0 < S; j0 += BN_CHUNK) {
    const int64_t j1 = j0 + BN_CHUNK < S ? j0 + BN_CHUNK : S;
    float a1 = 0.0f, a2 = 0.0f;
    if (relu) {
#pragma omp simd reduction(+ : a1, a2)
      for (int64_t j = j0; j < j1; j++) {
        const float gv = relu_grad(gy[j], preact(x[j], mean, scale, beta));
        a1 += gv;
        a2 += gv * (x[j] - mean);
      }
    } else {
#pragma omp simd reduction(+ : a1, a2)
      for (int64_t j = j0; j < j1; j++) {
        a1 += gy[j];
        a2 += gy[j] * (x[j] - mean);
      }
    }
    s1 += (double)a1;
    s2 += (double)a2;
  }
  *sg = s1;
  *sgx = s2;
}

/* dx = A g + B (x - mean) + D over one plane (g masked for relu). */
static inline __attribute__((always_inline)) void plane_dx(
    const float *restrict x, const float *restrict gy, float *restrict dx, int64_t S, float mean,
    float scale, float beta, float A, float B, float D, bool relu) {
  if (relu) {
#pragma omp simd
    for (int64_t j = 0; j < S; j++) {
      const float gv = relu_grad(gy[j], preact(x[j], mean, scale, beta));
      dx[j] = A * gv + B * (x[j] - mean) + D;
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < S; j++)
      dx[j] = A * gy[j] + B * (x[j] - mean) + D;
  }
}

/* The same two sums for 2-D input, columns [c0, c1) (at most BN_COLS),
 * into s (C, 2): float sums over BN_CHUNK rows at a time, added in
 * double. */
static inline __attribute__((always_inline)) void column_grad_sums(
    const float *x, const float *gy, int64_t N, int64_t C, int64_t c0, int64_t c1,
    const float *mean, const float *scale, const float *beta, double *s, bool relu) {
  double *restrict s1 = s + c0, *restrict s2 = s + C + c0;
  const float *restrict mf = mean + c0, *restrict sc = scale + c0, *restrict bt = beta + c0;
  const int64_t w = c1 - c0;
  float a1[BN_COLS], a2[BN_COLS];
  for (int64_t j = 0; j < w; j++)
    s1[j] = s2[j] = 0.0;
  for (int64_t r0 = 0; r0 < N; r0 += BN_CHUNK) {
    const int64_t r1 = r0 + BN_CHUNK < N ? r0 + BN_CHUNK : N;
    for (int64_t j = 0; j < w; j++)
      a1[j] = a2[j] = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
      const float *restrict xr = x + r * C + c0, *restrict gr = gy + r * C + c0;
      if (relu) {
#pragma omp simd
        for (int64_t j = 0; j < w; j++) {
          const float gv = relu_grad(gr[j], preact(xr[j], mf[j], sc[j], bt[j]));
          a1[j] += gv;
          a2[j] += gv * (xr[j] - mf[j]);
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < w; j++) {
          a1[j] += gr[j];
          a2[j] += gr[j] * (xr[j] - mf[j]);
        }
      }
    }
    for (int64_t j = 0; j < w; j++) {
      s1[j] += (double)a1[j];
      s2[j] += (double)a2[j];
    }
  }
}

/* One row of 2-D input: dx[j] = A[j] g[j] + B[j] (x[j] - mean[j]) + D[j]. */
static inline __attribute__((always_inline)) void row_dx(
    const float *restrict x, const float *restrict gy, float *restrict dx, int64_t C,
    const float *restrict mean, const float *restrict scale, const float *restrict beta,
    const float *restrict A, const float *restrict B, const float *restrict D, bool relu) {
  if (relu) {
#pragma omp simd
    for (int64_t j = 0; j < C; j++) {
      const float gv = relu_grad(gy[j], preact(x[j], mean[j], scale[j], beta[j]));
      dx[j] = A[j] * gv + B[j] * (x[j] - mean[j]) + D[j];
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < C; j++)
      dx[j] = A[j] * gy[j] + B[j] * (x[j] - mean[j]) + D[j];
  }
}

static void bnorm_backward(void *state, ar_nn_args *a) {
  (void)state;
  const bnorm_geom g = geom_of(a);
  const int64_t N = g.N, C = g.C, S = g.S, P = N * C;
  const double m = (double)(N * S);
  const float *x = a->in[0].p, *gamma = a->param[0].p, *beta = a->param[1].p;
  const float *gy = a->gout[0].p, *mean = a->aux[0].p, *var = a->aux[1].p;
  float *dx = a->gin[0].p, *dgamma = a->gparam[0].p, *dbeta = a->gparam[1].p;
  const float eps = a->attr->eps;
  AR_ASSERT(a->work && a->work_bytes >= work_size(&g));
  double *part;
  float *coef;
  work_carve(&g, a->work, &part, &coef);
  float *cA = coef, *cB = coef + C, *cD = coef + 2 * C, *scale = coef + 3 * C;
  const int nt = ar__nn_conv_team(a, N * C * S);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    /* The forward's scale, for the relu's mask. */
#pragma omp for schedule(static)
    for (int64_t c = 0; c < C; c++)
      scale[c] = (float)((double)gamma[c] * rstd_of(var[c], eps));
    if (S > 1) {
#pragma omp for schedule(static)
      for (int64_t p = 0; p < P; p++) {
        const int64_t c = p % C;
        if (g.relu)
          plane_grad_sums(x + p * S, gy + p * S, S, mean[c], scale[c], beta[c], &part[2 * p],
                          &part[2 * p + 1], true);
        else
          plane_grad_sums(x + p * S, gy + p * S, S, mean[c], scale[c], beta[c], &part[2 * p],
                          &part[2 * p + 1], false);
      }
    } else {
      const int64_t nb = (C + BN_COLS - 1) / BN_COLS;
#pragma omp for schedule(static)
      for (int64_t b = 0; b < nb; b++) {
        const int64_t c0 = b * BN_COLS, c1 = c0 + BN_COLS < C ? c0 + BN_COLS : C;
        if (g.relu)
          column_grad_sums(x, gy, N, C, c0, c1, mean, scale, beta, part, true);
        else
          column_grad_sums(x, gy, N, C, c0, c1, mean, scale, beta, part, false);
      }
    }
#pragma omp for schedule(static)
    for (int64_t c = 0; c < C; c++) {
      double sg = 0.0, sgx = 0.0;
      if (S > 1) {
        for (int64_t n = 0; n < N; n++) {
          sg += part[2 * (n * C + c)];
          sgx += part[2 * (n * C + c) + 1];
        }
      } else {
        sg = part[c];
        sgx = part[C + c];
      }
      const double rs = rstd_of(var[c], eps), gr = (double)gamma[c] * rs;
      dgamma[c] = (float)(sgx * rs);
      dbeta[c] = (float)sg;
      cA[c] = (float)gr;
      cB[c] = (float)(-gr * rs * rs * sgx / m);
      cD[c] = (float)(-gr * sg / m);
    }
    if (dx && S > 1) {
#pragma omp for schedule(static)
      for (int64_t p = 0; p < P; p++) {
        const int64_t c = p % C;
        if (g.relu)
          plane_dx(x + p * S, gy + p * S, dx + p * S, S, mean[c], scale[c], beta[c], cA[c], cB[c],
                   cD[c], true);
        else
          plane_dx(x + p * S, gy + p * S, dx + p * S, S, mean[c], scale[c], beta[c], cA[c], cB[c],
                   cD[c], false);
      }
    } else if (dx) {
#pragma omp for schedule(static)
      for (int64_t r = 0; r < N; r++) {
        if (g.relu)
          row_dx(x + r * C, gy + r * C, dx + r * C, C, mean, scale, beta, cA, cB, cD, true);
        else
          row_dx(x + r * C, gy + r * C, dx + r * C, C, mean, scale, beta, cA, cB, cD, false);
      }
    }
  }
}

void ar__nn_host_bnorm_register(ar_nn_kernel *table) {
  table[AR_NN_BATCHNORM] = (ar_nn_kernel){
      .infer = bnorm_infer,
      .prepare = bnorm_prepare,
      .forward = bnorm_forward,
      .backward = bnorm_backward,
  };
}
