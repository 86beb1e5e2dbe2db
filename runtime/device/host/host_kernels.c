/*
 * Host backend kernels: OpenMP over rows or column slices, loops written so
 * that GCC/Clang vectorise them (`omp simd`, no calls in the hot loops), and
 * CBLAS for GEMM.  See host_kernels.h for the determinism rules and
 * include/accelrt/device.h for each op's contract.
 *
 * Nothing here allocates: every op runs inside the training loop.
 */
#include "host/host_kernels.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* Below this many floats of work an op runs on the calling thread alone:
 * waking the OpenMP team costs a few microseconds, more than the work. */
#define PAR_MIN_WORK ((int64_t)1 << 15)

/* Column block of col_sum and bias_act: a block of the output (16 KiB)
 * stays in L1 while the rows stream past, each in a run long enough for the
 * hardware prefetcher (4 KiB runs made col_sum about 25% slower). */
#define COL_BLOCK 4096

/* The losses sum over chunks of this many floats in single precision
 * (vectorised: 8 or 16 partial sums of 32 or 16 terms each), then add the
 * chunk sums in double: a few 1e-7 relative over any row length. */
#define SUM_CHUNK 256

/* topk scans this many scores with one vector compare before looking at
 * any of them one by one. */
#define TOPK_BLOCK 64

static inline int team_size(const ar_device *dev, int64_t work) {
  int nt = dev->threads > 1 ? dev->threads : 1;
  return work >= PAR_MIN_WORK ? nt : 1;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The part [*lo, *hi) of [0, n) that thread `tid` of `nth` owns; bounds are
 * multiples of AR__HOST_ALIGN_FLOATS (except n itself). */
static inline void thread_slice(int64_t n, int tid, int nth, int64_t *lo,
                                int64_t *hi) {
  const int64_t a = AR__HOST_ALIGN_FLOATS;
  int64_t blocks = (n + a - 1) / a;
  *lo = min64(n, blocks * tid / nth * a);
  *hi = min64(n, blocks * (tid + 1) / nth * a);
}

/* ---- fast elementary functions -------------------------------------------
 * Written with plain float arithmetic, compares and a bit cast so that the
 * compiler vectorises the loops that call them (libm's expf and log1pf are
 * calls, which stop vectorisation).  The same operations run in the vector
 * body and in scalar remainders, so results do not depend on where a loop
 * is split. */

/* a * b + c, fused (one rounding) where the target has FMA: it halves the
 * instructions of the polynomials below.  Elsewhere fmaf would be a libm
 * call, so there it is a multiply and an add.  Either way every element
 * gets the same operations, vector body or scalar remainder. */
#if defined(FP_FAST_FMAF) || defined(__FP_FAST_FMAF)
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

static inline float bits_to_float(uint32_t u) {
  union {
    uint32_t u;
    float f;
  } c;
  c.u = u;
  return c.f;
}

/* exp(x) for x <= 0 (every caller passes x - max or -|x|), relative error
 * below 1e-7 (8.4e-8 measured over every float in (-87, 0]).  Range reduction x = n ln2 + r, |r| <= ln2/2, with ln2 split
 * in two parts (Cody & Waite) so r is exact to a few ulp; exp(r) by the
 * degree-7 minimax polynomial of Cephes' expf (1 + r + r^2 P(r)); 2^n
 * assembled in the exponent bits.  x < -87 gives 0 (the true value is
 * below 1.7e-38), NaN stays NaN.  Restricting the domain to x <= 0 saves
 * the upper clamp: about 25 vector instructions per 8 or 16 values. */
static inline float fast_expf_nonpos(float x) {
  const bool live = x > -87.0f;     /* false for NaN too */
  const float xc = live ? x : -87.0f; /* keeps the int conversion defined */
  /* Round x/ln2 to the nearest integer by adding and removing 1.5 * 2^23. */
  float n = MADD(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = MADD(n, -0.693359375f, xc);
  r = MADD(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = MADD(p, r, 1.3981999507e-3f);
  p = MADD(p, r, 8.3334519073e-3f);
  p = MADD(p, r, 4.1665795894e-2f);
  p = MADD(p, r, 1.6666665459e-1f);
  p = MADD(p, r, 5.0000001201e-1f);
  p = MADD(p, r * r, r) + 1.0f;
  float two_n = bits_to_float((uint32_t)((int32_t)n + 127) << 23);
  float y = live ? p * two_n : 0.0f;
  return x == x ? y : x;
}

/* log(1 + e) for e in [0, 1], relative error below 2.5e-7 (2.3e-7 measured
 * over every float in [1e-30, 1]): log(1+e) = 2 atanh(s) with
 * s = e / (2 + e) in [0, 1/3], summed as the odd series
 * 2 (s + s^3/3 + ... + s^13/13), whose first omitted term is below 1.5e-8
 * of the result; the rest is float rounding. */
static inline float log1p_unit(float e) {
  float s = e / (2.0f + e);
  float s2 = s * s;
  float q = 1.0f / 13.0f;
  q = MADD(q, s2, 1.0f / 11.0f);
  q = MADD(q, s2, 1.0f / 9.0f);
  q = MADD(q, s2, 1.0f / 7.0f);
  q = MADD(q, s2, 1.0f / 5.0f);
  q = MADD(q, s2, 1.0f / 3.0f);
  q = MADD(q, s2, 1.0f);
  return 2.0f * s * q;
}

/* sigmoid(x) from e = exp(-|x|) without overflow on either side. */
static inline float sigmoid_from(float x, float e) {
  /* Both candidates are computed before the select: an operation inside a
   * branch of ?: is not speculated (it could raise an FP exception), which
   * would keep the loop from being vectorised. */
  float inv = 1.0f / (1.0f + e);
  float e_inv = e * inv;
  return x >= 0.0f ? inv : e_inv;
}

/* ---- memory ---------------------------------------------------------------- */

void ar__host_fill(ar_device *dev, float *x, int64_t n, float value) {
  if (n <= 0)
    return;
  int nt = team_size(dev, n);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t lo, hi;
    thread_slice(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
#pragma omp simd
    for (int64_t i = lo; i < hi; i++)
      x[i] = value;
  }
}

/* ---- dense math ------------------------------------------------------------- */

/* Multiply-adds below which a GEMM runs on the calling thread alone. */
#define GEMM_PAR_MIN ((int64_t)1 << 22)

/* C = alpha op(A) op(B) + beta C through CBLAS, parallelised here rather
 * than by OpenBLAS: the device's OpenMP team (pinned, dev->threads of it)
 * splits the larger of C's two dimensions and each thread makes one
 * single-threaded cblas_sgemm call on its slice.  OpenBLAS's own pool is
 * kept at one thread (host_device.c) because its idle workers spin for up
 * to 2^28 cycles after each call, on the cores the OpenMP team needs next:
 * on the busy 2-core development VM that made the op after a GEMM
 * (softmax_xent, adam) 50-60 ms slower.  On the idle machine the split was
 * also faster for the engine's Amazon-670K GEMMs: 165 vs 170 ms forward,
 * 165 vs 193 ms for dW, 165 vs 187 ms for dX (2 threads). */
void ar__host_gemm(ar_device *dev, bool trans_a, bool trans_b, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc) {
  ar__host_sgemm(dev->threads, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void ar__host_sgemm(int threads, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0)
    return;
  if (k <= 0) {
    /* BLAS would reject lda = 0; the product is empty, so C = beta C, and
     * beta = 0 clears C without reading it (as BLAS does). */
    for (int64_t i = 0; i < m; i++) {
      float *ci = c + i * ldc;
      for (int64_t j = 0; j < n; j++)
        ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
    }
    return;
  }
  /* The OpenBLAS interface takes 32-bit sizes. */
  AR_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX &&
            ldb <= INT_MAX && ldc <= INT_MAX);
  const enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  const bool split_cols = n >= m;
  const double work = (double)m * (double)n * (double)k; /* no overflow */
  int nt = threads > 1 && work >= (double)GEMM_PAR_MIN ? threads : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t lo, hi;
    thread_slice(split_cols ? n : m, omp_get_thread_num(),
                 omp_get_num_threads(), &lo, &hi);
    if (hi > lo && split_cols) {
      /* Columns lo..hi of op(B) start at column lo of B, or row lo of B^T. */
      const float *bs = trans_b ? b + lo * ldb : b + lo;
      cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)(hi - lo), (int)k, alpha,
                  a, (int)lda, bs, (int)ldb, beta, c + lo, (int)ldc);
    } else if (hi > lo) {
      /* Rows lo..hi of op(A) start at row lo of A, or column lo of A^T. */
      const float *as = trans_a ? a + lo : a + lo * lda;
      cblas_sgemm(CblasRowMajor, ta, tb, (int)(hi - lo), (int)n, (int)k, alpha,
                  as, (int)lda, b, (int)ldb, beta, c + lo * ldc, (int)ldc);
    }
  }
}

/* ---- sparse input ------------------------------------------------------------ */

/* Y = X W: each batch row is one thread's, its nonzeros added in order. */
void ar__host_spmm(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                   const int32_t *idx, const float *val, const float *w,
                   int64_t out, float *y) {
  if (rows <= 0 || out <= 0)
    return;
  int64_t nnz = row_ptr[rows] - row_ptr[0];
  int nt = team_size(dev, (nnz + rows) * out);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    float *restrict yr = y + r * out;
#pragma omp simd
    for (int64_t j = 0; j < out; j++)
      yr[j] = 0.0f;
    for (int64_t e = row_ptr[r]; e < row_ptr[r + 1]; e++) {
      const float *restrict wr = w + (int64_t)idx[e] * out;
      const float v = val[e];
#pragma omp simd
      for (int64_t j = 0; j < out; j++)
        yr[j] += v * wr[j];
    }
  }
}

/* dW += X^T dY.  Several batch rows name the same feature, so splitting by
 * rows would race; each thread instead owns a slice of the `out` columns
 * and walks all nonzeros in order.  Every element of dW therefore receives
 * its contributions in nonzero order, whatever the thread count. */
void ar__host_spmm_t(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                     const int32_t *idx, const float *val, const float *dy,
                     int64_t out, float *dw) {
  if (rows <= 0 || out <= 0)
    return;
  int64_t nnz = row_ptr[rows] - row_ptr[0];
  int nt = team_size(dev, nnz * out);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t c0, c1;
    thread_slice(out, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
    const int64_t width = c1 - c0;
    if (width > 0) {
      for (int64_t r = 0; r < rows; r++) {
        const float *restrict dyr = dy + r * out + c0;
        for (int64_t e = row_ptr[r]; e < row_ptr[r + 1]; e++) {
          float *restrict dwr = dw + (int64_t)idx[e] * out + c0;
          const float v = val[e];
#pragma omp simd
          for (int64_t j = 0; j < width; j++)
            dwr[j] += v * dyr[j];
        }
      }
    }
  }
}

/* ---- elementwise and reductions -------------------------------------------- */

static void sigmoid_inplace(float *y, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    float x = y[j];
    y[j] = sigmoid_from(x, fast_expf_nonpos(-fabsf(x)));
  }
}

static void bias_act_block(float *restrict y, const float *restrict bias,
                           int64_t n, ar_act act) {
  if (bias) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      y[j] += bias[j];
  }
  switch (act) {
  case AR_ACT_RELU:
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
      y[j] = y[j] > 0.0f ? y[j] : 0.0f;
    break;
  case AR_ACT_SIGMOID:
    sigmoid_inplace(y, n);
    break;
  case AR_ACT_NONE:
  case AR_ACT_SOFTMAX: /* logits stay raw: the loss op applies softmax */
    break;
  }
}

/* Tiles of (row, COL_BLOCK columns) are spread over the threads, so one
 * wide row or many narrow ones both use the whole team. */
void ar__host_bias_act(ar_device *dev, int64_t rows, int64_t cols,
                       const float *bias, ar_act act, float *y) {
  if (rows <= 0 || cols <= 0)
    return;
  if (!bias && (act == AR_ACT_NONE || act == AR_ACT_SOFTMAX))
    return;
  const int64_t nb = (cols + COL_BLOCK - 1) / COL_BLOCK;
  const int64_t tiles = rows * nb;
  int nt = team_size(dev, rows * cols);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < tiles; t++) {
    int64_t r = t / nb, c0 = (t % nb) * COL_BLOCK;
    int64_t c1 = min64(cols, c0 + COL_BLOCK);
    bias_act_block(y + r * cols + c0, bias ? bias + c0 : NULL, c1 - c0, act);
  }
}

/* dY *= act'(.), written through the activated output y:
 * relu' = [y > 0], sigmoid' = y (1 - y).  NONE and SOFTMAX (whose gradient
 * the loss op already produced for the logits) leave dY unchanged. */
void ar__host_act_grad(ar_device *dev, int64_t n, ar_act act, const float *y,
                       float *dy) {
  if (n <= 0 || act == AR_ACT_NONE || act == AR_ACT_SOFTMAX)
    return;
  int nt = team_size(dev, n);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t lo, hi;
    thread_slice(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    if (act == AR_ACT_RELU) {
#pragma omp simd
      for (int64_t i = lo; i < hi; i++)
        dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    } else {
#pragma omp simd
      for (int64_t i = lo; i < hi; i++)
        dy[i] *= y[i] * (1.0f - y[i]);
    }
  }
}

/* db = (accumulate ? db : 0) + sum_r dY[r, :].  Threads own column slices;
 * within a slice, a COL_BLOCK of db stays in L1 while all rows are added
 * in row order (so the result does not depend on the thread count). */
void ar__host_col_sum(ar_device *dev, int64_t rows, int64_t cols,
                      const float *dy, bool accumulate, float *db) {
  if (cols <= 0)
    return;
  int nt = team_size(dev, rows * cols);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t c0, c1;
    thread_slice(cols, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
    for (int64_t c = c0; c < c1; c += COL_BLOCK) {
      const int64_t w = min64(c1, c + COL_BLOCK) - c;
      float *restrict d = db + c;
      if (!accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < w; j++)
          d[j] = 0.0f;
      }
      for (int64_t r = 0; r < rows; r++) {
        const float *restrict s = dy + r * cols + c;
#pragma omp simd
        for (int64_t j = 0; j < w; j++)
          d[j] += s[j];
      }
    }
  }
}

/* ---- losses ----------------------------------------------------------------------- */

/* Maxima and sums over a row are kept in LANES independent lanes, combined
 * in a fixed order at the end.  Written as element-wise updates of a small
 * array, both GCC and Clang vectorise them (Clang does not vectorise a float
 * max written as an OpenMP `reduction(max)`), and the order of additions is
 * fixed by the source, not by the vector width. */
#define LANES 16

static float lanes_max(const float *l) {
  float m = l[0];
  for (int q = 1; q < LANES; q++)
    m = l[q] > m ? l[q] : m;
  return m;
}

static float lanes_sum(const float *l) {
  float s = 0.0f;
  for (int q = 0; q < LANES; q++)
    s += l[q];
  return s;
}

/* l[q] = max(l[q], x[q]) for one group of LANES values. */
static inline void max_group(const float *restrict x, float *restrict l) {
#pragma omp simd
  for (int q = 0; q < LANES; q++)
    l[q] = x[q] > l[q] ? x[q] : l[q];
}

/* s[q] += exp(x[q] - mx) for one group, storing each term in e[q] unless e
 * is NULL.  e may alias x (each element is read before it is written, at
 * the same index), hence no `restrict` on them. */
static inline void exp_group(const float *x, float mx, float *e,
                             float *restrict s) {
  if (e) {
#pragma omp simd
    for (int q = 0; q < LANES; q++) {
      float t = fast_expf_nonpos(x[q] - mx);
      e[q] = t;
      s[q] += t;
    }
  } else {
#pragma omp simd
    for (int q = 0; q < LANES; q++)
      s[q] += fast_expf_nonpos(x[q] - mx);
  }
}

static float row_max(const float *x, int64_t n) {
  float l[LANES];
  for (int q = 0; q < LANES; q++)
    l[q] = -INFINITY;
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    max_group(x + j, l);
  float m = lanes_max(l);
  for (; j < n; j++)
    m = x[j] > m ? x[j] : m;
  return m;
}

/* Sum of exp(x[j] - mx) over one block of n values; when e is not NULL each
 * term is also stored in e[j] (e may alias x).  The same loop takes the max
 * of the next block, xn (nn <= n values): those loads come from memory
 * while the exponentials keep the core busy, so the row streams from DRAM
 * at the pace of the arithmetic instead of in separate bursts.  Terms are
 * summed in float lanes over chunks of SUM_CHUNK, the chunk sums in double
 * (one float sum over a whole block drifted by ~1e-6). */
static double block_sum_exp(const float *x, int64_t n, float mx, float *e,
                            const float *xn, int64_t nn, float *next_max) {
  float ml[LANES];
  for (int q = 0; q < LANES; q++)
    ml[q] = -INFINITY;
  int64_t covered = 0; /* values of xn already in ml */
  double total = 0.0;
  int64_t j = 0;
  while (j < n) {
    const int64_t ce = min64(n, j + SUM_CHUNK);
    float sl[LANES] = {0};
    for (; j + LANES <= ce; j += LANES) {
      exp_group(x + j, mx, e ? e + j : NULL, sl);
      if (j + LANES <= nn) {
        max_group(xn + j, ml);
        covered = j + LANES;
      }
    }
    float tail = 0.0f;
    for (; j < ce; j++) {
      float t = fast_expf_nonpos(x[j] - mx);
      if (e)
        e[j] = t;
      tail += t;
    }
    total += (double)(lanes_sum(sl) + tail);
  }
  float m2 = lanes_max(ml);
  for (int64_t k = covered; k < nn; k++)
    m2 = xn[k] > m2 ? xn[k] : m2;
  *next_max = m2;
  return total;
}

double ar__host_row_sum_exp(const float *x, int64_t n, float m, float *e) {
  float unused;
  return block_sum_exp(x, n, m, e, x, 0, &unused);
}

/* Blocks of the one-pass softmax: a block (8 KiB at the minimum size) is
 * loaded into L1 while its max is taken (during the previous block's
 * exponentials) and still there for its own; a row has at most
 * SMX_MAX_BLOCKS of them, so their maxima fit in a small stack array. */
#define SMX_MIN_BLOCK 2048
#define SMX_MAX_BLOCKS 1024

/* Multi-label softmax cross-entropy, one row per thread.  With L the labels
 * of the row, M its max logit and S = sum_j exp(x_j - M):
 *   p_j = exp(x_j - M) / S,   t_j = 1/|L| on L, 0 elsewhere,
 *   loss = -sum_j t_j log p_j = M + log S - (1/|L|) sum_{j in L} x_j
 * (log-sum-exp form: no log of a probability that underflowed), and
 *   grad_j = scale (p_j - t_j).
 * The row is read from memory once, in blocks, keeping a running max m
 * ("online softmax", Milakov & Gimelshein 2018, applied per block rather
 * than per element): a block whose max exceeds m rescales the sum so far
 * by exp(m_old - m_new), then adds exp(x - m) over the block, storing the
 * terms into grad.  The second pass multiplies each block by
 * scale / S * exp(m_block - M), correcting the terms of blocks stored
 * under an older, smaller max.  A 670,091-column row is 2.7 MB, so that
 * second pass reads from the last-level cache.  Logits must be finite
 * (NaN gives NaN loss and gradient; a row all -inf is not defined). */
void ar__host_softmax_xent(ar_device *dev, int64_t rows, int64_t cols,
                           const float *logits, const int64_t *lab_ptr,
                           const int32_t *lab, float scale, float *grad,
                           float *loss_rows) {
  if (rows <= 0 || cols <= 0)
    return;
  int64_t block = (cols + SMX_MAX_BLOCKS - 1) / SMX_MAX_BLOCKS;
  block = block < SMX_MIN_BLOCK ? SMX_MIN_BLOCK : (block + 15) / 16 * 16;
  int nt = team_size(dev, rows * cols);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    const float *x = logits + r * cols;
    float *g = grad ? grad + r * cols : NULL;
    const int64_t l0 = lab_ptr[r], nl = lab_ptr[r + 1] - l0;
    if (nl <= 0) {
      if (g)
        memset(g, 0, (size_t)cols * sizeof *g);
      loss_rows[r] = 0.0f;
      continue;
    }
    /* Label logits first: grad may alias logits and overwrite them. */
    double sum_tx = 0.0;
    for (int64_t l = l0; l < l0 + nl; l++) {
      AR_ASSERT(lab[l] >= 0 && lab[l] < cols);
      sum_tx += x[lab[l]];
    }
    float block_max[SMX_MAX_BLOCKS]; /* running max each block used */
    float m = -INFINITY;
    double s = 0.0;
    float bm = row_max(x, min64(cols, block)); /* max of the current block */
    for (int64_t b = 0, bi = 0; b < cols; b += block, bi++) {
      const int64_t n = min64(cols - b, block);
      const int64_t nn = min64(cols - (b + n), block); /* next block; <= n */
      if (bm > m) {
        s *= exp((double)m - (double)bm); /* exp(-inf) = 0 at the start */
        m = bm;
      }
      s += block_sum_exp(x + b, n, m, g ? g + b : NULL, x + b + n, nn, &bm);
      block_max[bi] = m;
    }
    loss_rows[r] = (float)((double)m + log(s) - sum_tx / (double)nl);
    if (g) {
      for (int64_t b = 0, bi = 0; b < cols; b += block, bi++) {
        const int64_t n = min64(cols - b, block);
        const float f =
            (float)((double)scale / s * exp((double)block_max[bi] - (double)m));
        float *restrict gb = g + b;
#pragma omp simd
        for (int64_t j = 0; j < n; j++)
          gb[j] *= f;
      }
      const float t = (float)((double)scale / (double)nl);
      for (int64_t l = l0; l < l0 + nl; l++)
        g[lab[l]] -= t;
    }
  }
}

/* Binary cross-entropy of sigmoid(x) against 0/1 targets (1 on the row's
 * labels), summed over the row, in the overflow-free form
 *   loss_j = max(x, 0) - x t + log(1 + exp(-|x|)),
 *   grad_j = scale (sigmoid(x) - t).
 * Unlike softmax_xent, a row without labels is an all-negative example and
 * does contribute loss and gradient. */
void ar__host_sigmoid_bce(ar_device *dev, int64_t rows, int64_t cols,
                          const float *logits, const int64_t *lab_ptr,
                          const int32_t *lab, float scale, float *grad,
                          float *loss_rows) {
  if (rows <= 0 || cols <= 0)
    return;
  int nt = team_size(dev, rows * cols);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    const float *x = logits + r * cols;
    float *g = grad ? grad + r * cols : NULL;
    const int64_t l0 = lab_ptr[r], l1 = lab_ptr[r + 1];
    double sum_tx = 0.0;
    for (int64_t l = l0; l < l1; l++) {
      AR_ASSERT(lab[l] >= 0 && lab[l] < cols);
      sum_tx += x[lab[l]];
    }
    double total = 0.0;
    for (int64_t b = 0; b < cols; b += SUM_CHUNK) {
      const int64_t be = min64(cols, b + SUM_CHUNK);
      float s = 0.0f;
      if (g) {
#pragma omp simd reduction(+ : s)
        for (int64_t j = b; j < be; j++) {
          float xj = x[j];
          float e = fast_expf_nonpos(-fabsf(xj));
          s += (xj > 0.0f ? xj : 0.0f) + log1p_unit(e);
          g[j] = scale * sigmoid_from(xj, e);
        }
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t j = b; j < be; j++) {
          float xj = x[j];
          s += (xj > 0.0f ? xj : 0.0f) + log1p_unit(fast_expf_nonpos(-fabsf(xj)));
        }
      }
      total += (double)s;
    }
    loss_rows[r] = (float)(total - sum_tx);
    if (g) {
      for (int64_t l = l0; l < l1; l++)
        g[lab[l]] -= scale;
    }
  }
}

/* ---- top-k -------------------------------------------------------------------------- */

/* Rank key: NaN ranks as -infinity (and then by index like any tie). */
static inline float rank_key(float v) { return v == v ? v : -INFINITY; }

/* a ranks below b: smaller key, or equal key and larger index. */
static inline int ranks_below(const float *s, int32_t a, int32_t b) {
  float ka = rank_key(s[a]), kb = rank_key(s[b]);
  return ka < kb || (ka == kb && a > b);
}

/* Restores the heap below position i; the heap's root is the lowest-ranked
 * of the k kept indices. */
static void heap_sift_down(const float *s, int32_t *h, int64_t n, int64_t i) {
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, w = i;
    if (l < n && ranks_below(s, h[l], h[w]))
      w = l;
    if (r < n && ranks_below(s, h[r], h[w]))
      w = r;
    if (w == i)
      return;
    int32_t tmp = h[i];
    h[i] = h[w];
    h[w] = tmp;
    i = w;
  }
}

/* Partial selection per row with a heap of k indices kept in the output
 * row itself (no scratch memory): O(cols + insertions * log k).  Columns are
 * scanned in order, so a later column beats the heap's root only with a
 * strictly larger key (ties go to the smaller index, which came first);
 * whole blocks whose scores are all <= that key are skipped with one vector
 * compare.  Finally a heap sort leaves the k indices in descending rank. */
void ar__host_topk(ar_device *dev, int64_t rows, int64_t cols,
                   const float *scores, int k, int32_t *idx) {
  if (rows <= 0 || k <= 0)
    return;
  int nt = team_size(dev, rows * cols);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    const float *s = scores + r * cols;
    int32_t *h = idx + r * (int64_t)k;
    for (int32_t j = 0; j < k; j++)
      h[j] = j;
    for (int64_t i = k / 2 - 1; i >= 0; i--)
      heap_sift_down(s, h, k, i);
    float thr = rank_key(s[h[0]]);
    for (int64_t b = k; b < cols; b += TOPK_BLOCK) {
      const int64_t be = min64(cols, b + TOPK_BLOCK);
      int any = 0;
#pragma omp simd reduction(| : any)
      for (int64_t j = b; j < be; j++)
        any |= s[j] > thr;
      if (!any)
        continue;
      for (int64_t j = b; j < be; j++) {
        if (s[j] > thr) {
          h[0] = (int32_t)j;
          heap_sift_down(s, h, k, 0);
          thr = rank_key(s[h[0]]);
        }
      }
    }
    for (int64_t end = k - 1; end > 0; end--) {
      int32_t tmp = h[0];
      h[0] = h[end];
      h[end] = tmp;
      heap_sift_down(s, h, end, 0);
    }
  }
}

/* ---- optimizers ------------------------------------------------------------------ */

/* Adam (Kingma & Ba, ICLR 2015, Algorithm 1) in PyTorch's formulation
 * (torch.optim.Adam, amsgrad off, L2 weight decay added to the gradient):
 *   g' = g + wd p
 *   m  = b1 m + (1 - b1) g'
 *   v  = b2 v + (1 - b2) g'^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * i.e. eps is added to the bias-corrected sqrt(v-hat), as PyTorch does,
 * not the paper's "epsilon-hat" form lr_t m / (sqrt(v) + eps).  The two
 * bias corrections are computed once per call in double.  One pass over
 * p, g, m, v (28 bytes per parameter), split in slices across threads. */
void ar__host_adam(ar_device *dev, int64_t n, float *p, const float *g,
                   float *m, float *v, float lr, float beta1, float beta2,
                   float eps, float weight_decay, int64_t t) {
  if (n <= 0)
    return;
  const double bc1 = 1.0 - pow((double)beta1, (double)t);
  const double bc2 = 1.0 - pow((double)beta2, (double)t);
  const float step = (float)((double)lr / bc1);
  const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
  const float c1 = 1.0f - beta1, c2 = 1.0f - beta2;
  const float wd = weight_decay;
  int nt = team_size(dev, n);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t lo, hi;
    thread_slice(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    float *restrict pp = p, *restrict mm = m, *restrict vv = v;
    const float *restrict gg = g;
    if (wd != 0.0f) {
#pragma omp simd
      for (int64_t i = lo; i < hi; i++) {
        float gi = gg[i] + wd * pp[i];
        float mi = beta1 * mm[i] + c1 * gi;
        float vi = beta2 * vv[i] + c2 * (gi * gi);
        mm[i] = mi;
        vv[i] = vi;
        pp[i] -= step * (mi / (sqrtf(vi) * inv_sqrt_bc2 + eps));
      }
    } else {
#pragma omp simd
      for (int64_t i = lo; i < hi; i++) {
        float gi = gg[i];
        float mi = beta1 * mm[i] + c1 * gi;
        float vi = beta2 * vv[i] + c2 * (gi * gi);
        mm[i] = mi;
        vv[i] = vi;
        pp[i] -= step * (mi / (sqrtf(vi) * inv_sqrt_bc2 + eps));
      }
    }
  }
}

/* SGD as torch.optim.SGD (dampening 0, no Nesterov):
 *   g' = g + wd p;  v = momentum v + g';  p -= lr v
 * and p -= lr g' when momentum is 0 (vel is then not touched). */
void ar__host_sgd(ar_device *dev, int64_t n, float *p, const float *g,
                  float *vel, float lr, float momentum, float weight_decay) {
  if (n <= 0)
    return;
  const float wd = weight_decay;
  int nt = team_size(dev, n);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t lo, hi;
    thread_slice(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    float *restrict pp = p;
    const float *restrict gg = g;
    if (momentum != 0.0f) {
      float *restrict vv = vel;
#pragma omp simd
      for (int64_t i = lo; i < hi; i++) {
        float vi = momentum * vv[i] + (gg[i] + wd * pp[i]);
        vv[i] = vi;
        pp[i] -= lr * vi;
      }
    } else {
#pragma omp simd
      for (int64_t i = lo; i < hi; i++)
        pp[i] -= lr * (gg[i] + wd * pp[i]);
    }
  }
}

/* The conv + batch-norm fold (one thread: a conv's weights are small next
 * to the evaluation batch it serves), s as the batch norm computes it. */
void ar__host_bn_fold(ar_device *dev, int64_t out, int64_t per, const float *w,
                      const float *bias, const float *gamma, const float *beta,
                      const float *mean, const float *var, float eps, float *wf,
                      float *bf) {
  (void)dev;
  for (int64_t o = 0; o < out; o++) {
    const float s = (float)((double)gamma[o] / sqrt((double)var[o] + (double)eps));
    for (int64_t j = 0; j < per; j++)
      wf[o * per + j] = w[o * per + j] * s;
    bf[o] = ((bias ? bias[o] : 0.0f) - mean[o]) * s + beta[o];
  }
}
