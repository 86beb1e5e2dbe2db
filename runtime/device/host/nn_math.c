/*
 * Host kernels of the nn ops in group "math" (AR_NN_OP_MAP's third column):
 * DENSE and MATMUL here, the element-wise ops in nn_eltwise.c, the row-wise
 * ones in nn_norm.c (nn_math_impl.h lists them).  GEMMs go through
 * ar__host_sgemm, which splits one product over the team itself.
 */
#include "host/nn_math_impl.h"

#include "host/host_kernels.h"

#include <math.h>
#include <string.h>

/* ---- DENSE ----------------------------------------------------------------
 * x (M..., K) -> y (M..., out) = x w^T + b, w (out, K), then the fused
 * activation.  The leading dims are flattened into M rows. */

static ar_status dense_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                             const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  char b[64];
  AR_CHECK(ar__nn_want_inputs(AR_NN_DENSE, n_in, 1, 1, err));
  AR_CHECK(ar__nn_want_f32(AR_NN_DENSE, n_in, in_dtype, 1u, err));
  if (in[0].nd < 1 || in[0].d[in[0].nd - 1] <= 0)
    return ar_errf(err, AR_INVALID, "dense: input %s has no feature axis (want (..., K), K > 0)",
                   ar_shape_str(&in[0], b, sizeof b));
  if (attr->out <= 0)
    return ar_errf(err, AR_INVALID, "dense: out is %lld; give out > 0", (long long)attr->out);
  if (attr->act != AR_ACT_NONE && attr->act != AR_ACT_RELU && attr->act != AR_ACT_SIGMOID)
    return ar_errf(err, AR_INVALID, "dense: act %d is not none, relu or sigmoid", (int)attr->act);
  const int64_t k = in[0].d[in[0].nd - 1];
  const int64_t m = ar_shape_count(&in[0]) / k;
  ar__nn_sig_init(sig, n_in);
  ar_shape y = in[0];
  y.d[y.nd - 1] = attr->out;
  ar__nn_sig_out(sig, &y, AR_DT_F32);
  ar_shape w = ar__nn_shape(2, (int64_t[]){attr->out, k});
  ar__nn_sig_param(sig, "w", &w, AR_NN_INIT_FAN_IN, true);
  if (attr->bias) {
    ar_shape bs = ar__nn_shape(1, (int64_t[]){attr->out});
    ar__nn_sig_param(sig, "b", &bs, AR_NN_INIT_ZEROS, true);
  }
  sig->in_needed = 1u; /* dw = gz^T x */
  sig->out_needed = attr->act != AR_ACT_NONE;
  sig->flops = 2.0 * (double)m * (double)k * (double)attr->out;
  return AR_OK;
}

/* The backward of an activated dense layer needs gz = gout * act'(y), which
 * must not be written over gout (the engine may still read it). */
static ar_status dense_prepare(const ar_nn_args *a, bool training, void **state,
                               size_t *work_bytes, ar_err *err) {
  (void)err;
  *state = NULL;
  *work_bytes = training && a->attr->act != AR_ACT_NONE
                    ? (size_t)ar_shape_count(&a->out[0].shape) * sizeof(float)
                    : 0;
  return AR_OK;
}

/* The rows of a dense op's input that count: a->rows of a padded batch
 * (its real rows; the products then have the chain's shapes, so OpenBLAS
 * sums them in the chain's order, net_sparse_in.c), else all *all. */
static int64_t dense_rows(const ar_nn_args *a, int64_t all) {
  return a->rows > 0 && a->rows < all ? a->rows : all;
}

static void dense_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_nn_attr *at = a->attr;
  const int64_t k = a->in[0].shape.d[a->in[0].shape.nd - 1];
  const int64_t all = ar_shape_count(&a->in[0].shape) / k, m = dense_rows(a, all), n = at->out;
  const float *x = a->in[0].p, *w = a->param[0].p;
  const float *bias = at->bias ? a->param[1].p : NULL;
  float *y = a->out[0].p;
  ar__host_sgemm(a->threads, false, true, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
  if (m < all) /* the padding rows: zeros */
    memset(y + m * n, 0, (size_t)((all - m) * n) * sizeof *y);
  if (!bias && at->act == AR_ACT_NONE)
    return;
  const int nt = ar__nn_team(a, m * n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < m; r++) {
    float *restrict yr = y + r * n;
    if (bias) {
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        yr[j] += bias[j];
    }
    if (at->act == AR_ACT_RELU) {
#pragma omp simd
      for (int64_t j = 0; j < n; j++)
        yr[j] = yr[j] > 0.0f ? yr[j] : 0.0f;
    } else if (at->act == AR_ACT_SIGMOID) {
      for (int64_t j = 0; j < n; j++) {
        /* exp of a non-positive argument: no overflow either side. */
        float e = expf(-fabsf(yr[j]));
        yr[j] = yr[j] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      }
    }
  }
}

static void dense_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_nn_attr *at = a->attr;
  const int64_t k = a->in[0].shape.d[a->in[0].shape.nd - 1];
  const int64_t all = ar_shape_count(&a->in[0].shape) / k, m = dense_rows(a, all), n = at->out;
  const float *x = a->in[0].p, *w = a->param[0].p, *g = a->gout[0].p;
  if (at->act != AR_ACT_NONE) {
    AR_ASSERT(a->work && a->work_bytes >= (size_t)(m * n) * sizeof(float));
    const float *restrict y = a->out[0].p, *restrict gg = g;
    float *restrict gz = a->work;
    const int64_t mn = m * n;
    const int nt = ar__nn_team(a, mn);
    if (at->act == AR_ACT_RELU) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
      for (int64_t i = 0; i < mn; i++) {
        const float gi = gg[i]; /* loaded either way: a select, not a branch */
        gz[i] = y[i] > 0.0f ? gi : 0.0f;
      }
    } else {
#pragma omp parallel for simd schedule(static) num_threads(nt) if (parallel: nt > 1)
      for (int64_t i = 0; i < mn; i++)
        gz[i] = gg[i] * y[i] * (1.0f - y[i]);
    }
    g = gz;
  }
  if (a->gin[0].p) { /* dx = gz w (the padding rows: zeros) */
    float *gx = a->gin[0].p;
    ar__host_sgemm(a->threads, false, false, m, k, n, 1.0f, g, n, w, k, 0.0f, gx, k);
    if (m < all)
      memset(gx + m * k, 0, (size_t)((all - m) * k) * sizeof *gx);
  }
  /* dw = gz^T x */
  ar__host_sgemm(a->threads, true, false, n, k, m, 1.0f, g, n, x, k, 0.0f, a->gparam[0].p, k);
  /* db = column sums of gz, each column's rows added in order: the chain's
   * kernel, whose 4096-column tiles stream each row; this loop's own
   * 256-column tiles (1 KiB of each row, rows 2.7 MB apart at 670,091
   * outputs) took 1.7x its time. */
  if (at->bias)
    ar__host_col_sum(a->dev, m, n, g, false, a->gparam[1].p);
}

/* ---- MATMUL ---------------------------------------------------------------
 * a (B..., M, K), b (B..., K, N) (trans_b: (B..., N, K)) -> (B..., M, N),
 * the batch dims equal. */

typedef struct mm_dims {
  int64_t batch, m, k, n;
} mm_dims;

static mm_dims mm_dims_of(const ar_shape *a, bool trans_b, const ar_shape *b) {
  mm_dims d;
  d.m = a->d[a->nd - 2];
  d.k = a->d[a->nd - 1];
  d.n = trans_b ? b->d[b->nd - 2] : b->d[b->nd - 1];
  d.batch = ar_shape_count(a) / (d.m * d.k > 0 ? d.m * d.k : 1);
  if (d.m * d.k == 0) { /* empty matrices: count the batch from the dims */
    d.batch = 1;
    for (int i = 0; i < a->nd - 2; i++)
      d.batch *= a->d[i];
  }
  return d;
}

static ar_status matmul_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                              const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err) {
  char sa[64], sb[64];
  AR_CHECK(ar__nn_want_inputs(AR_NN_MATMUL, n_in, 2, 2, err));
  AR_CHECK(ar__nn_want_f32(AR_NN_MATMUL, n_in, in_dtype, 3u, err));
  ar_shape_str(&in[0], sa, sizeof sa);
  ar_shape_str(&in[1], sb, sizeof sb);
  const ar_shape *a = &in[0], *b = &in[1];
  if (a->nd < 2 || b->nd < 2 || a->nd != b->nd)
    return ar_errf(err, AR_INVALID,
                   "matmul: inputs %s and %s: both need the same rank, at least 2 "
                   "(B..., M, K) and (B..., K, N)",
                   sa, sb);
  for (int i = 0; i < a->nd - 2; i++)
    if (a->d[i] != b->d[i])
      return ar_errf(err, AR_INVALID,
                     "matmul: inputs %s and %s: batch dim %d is %lld and %lld (matmul does "
                     "not broadcast)",
                     sa, sb, i, (long long)a->d[i], (long long)b->d[i]);
  const bool tb = attr->trans_b;
  const int64_t kb = tb ? b->d[b->nd - 1] : b->d[b->nd - 2];
  if (a->d[a->nd - 1] != kb)
    return ar_errf(err, AR_INVALID,
                   "matmul: inputs %s and %s%s: inner dims %lld and %lld differ", sa, sb,
                   tb ? " (trans_b)" : "", (long long)a->d[a->nd - 1], (long long)kb);
  mm_dims d = mm_dims_of(a, tb, b);
  ar__nn_sig_init(sig, n_in);
  ar_shape y = *a;
  y.d[y.nd - 1] = d.n;
  ar__nn_sig_out(sig, &y, AR_DT_F32);
  sig->in_needed = 3u;
  sig->out_needed = false;
  sig->flops = 2.0 * (double)d.batch * (double)d.m * (double)d.k * (double)d.n;
  return AR_OK;
}

/* C_i = op(A_i) op(B_i) for every batch i.  Big products are split by
 * ar__host_sgemm; many small ones go one per thread instead. */
static void batched_gemm(int threads, int64_t batch, bool ta, bool tb, int64_t m, int64_t n,
                         int64_t k, const float *a, int64_t lda, int64_t stride_a,
                         const float *b, int64_t ldb, int64_t stride_b, float *c,
                         int64_t stride_c) {
  const double per = (double)m * (double)n * (double)k;
  if (batch > 1 && threads > 1 && per < (double)(1 << 22) &&
      per * (double)batch >= (double)AR__NN_PAR_MIN) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < batch; i++)
      ar__host_sgemm(1, ta, tb, m, n, k, 1.0f, a + i * stride_a, lda, b + i * stride_b, ldb,
                     0.0f, c + i * stride_c, n);
    return;
  }
  for (int64_t i = 0; i < batch; i++)
    ar__host_sgemm(threads, ta, tb, m, n, k, 1.0f, a + i * stride_a, lda, b + i * stride_b, ldb,
                   0.0f, c + i * stride_c, n);
}

static void matmul_forward(void *state, ar_nn_args *a) {
  (void)state;
  const bool tb = a->attr->trans_b;
  mm_dims d = mm_dims_of(&a->in[0].shape, tb, &a->in[1].shape);
  batched_gemm(a->threads, d.batch, false, tb, d.m, d.n, d.k, a->in[0].p, d.k, d.m * d.k,
               a->in[1].p, tb ? d.k : d.n, d.k * d.n, a->out[0].p, d.m * d.n);
}

static void matmul_backward(void *state, ar_nn_args *a) {
  (void)state;
  const bool tb = a->attr->trans_b;
  mm_dims d = mm_dims_of(&a->in[0].shape, tb, &a->in[1].shape);
  const float *g = a->gout[0].p; /* (M, N) per batch */
  if (a->gin[0].p) {
    /* dA (M, K) = G B^T, or G B with trans_b (B stored (N, K)). */
    batched_gemm(a->threads, d.batch, false, !tb, d.m, d.k, d.n, g, d.n, d.m * d.n, a->in[1].p,
                 tb ? d.k : d.n, d.k * d.n, a->gin[0].p, d.m * d.k);
  }
  if (a->gin[1].p) {
    if (tb) /* dB (N, K) = G^T A */
      batched_gemm(a->threads, d.batch, true, false, d.n, d.k, d.m, g, d.n, d.m * d.n,
                   a->in[0].p, d.k, d.m * d.k, a->gin[1].p, d.n * d.k);
    else /* dB (K, N) = A^T G */
      batched_gemm(a->threads, d.batch, true, false, d.k, d.n, d.m, a->in[0].p, d.k, d.m * d.k,
                   g, d.n, d.m * d.n, a->gin[1].p, d.k * d.n);
  }
}

void ar__nn_host_math_register(ar_nn_kernel *table) {
  table[AR_NN_DENSE] = (ar_nn_kernel){.infer = dense_infer,
                                      .prepare = dense_prepare,
                                      .forward = dense_forward,
                                      .backward = dense_backward};
  table[AR_NN_MATMUL] = (ar_nn_kernel){
      .infer = matmul_infer, .forward = matmul_forward, .backward = matmul_backward};
  ar__nn_host_eltwise_register(table);
  ar__nn_host_norm_register(table);
  ar__nn_host_typed_register(table);
}
