/*
 * CUDA backend kernels: cuBLAS for GEMM, one kernel per other op, each with
 * exactly the semantics of the host backend (runtime/device/host/
 * host_kernels.c is the reference; include/accelrt/device.h the contract).
 *
 * Where the results may differ from the host's in the last bits:
 *   - the GPU fuses multiplies and adds (FMA) where the host does not;
 *   - spmm_t adds the contributions of different batch rows to one weight
 *     row with atomics, so their order (and the rounding) varies from run
 *     to run; every other op is deterministic;
 *   - softmax_xent and sigmoid_bce sum a row in double per thread and
 *     combine the threads in a fixed order; the host sums float chunks in
 *     double.  Both are within a few 1e-7 relative of the exact sum;
 *   - exp, log1p are CUDA's (expf, log1pf: 2 ulp), the host's own
 *     polynomials are within 1e-7 relative.
 * tests/device/test_cuda_parity.c bounds every difference.
 *
 * Launches: grid-stride loops whose grid is capped at 16 blocks per SM, or
 * one block per batch row for the row reductions (losses, top-k).  Nothing
 * here allocates; an op after a failure does nothing (see cuda_impl.h).
 */
#include "cuda/cuda_impl.h"

#include <limits.h>
#include <math.h>

#define FULL_MASK 0xffffffffu
#define EW_BLOCK 256   /* element-wise kernels */
#define ROW_BLOCK 1024 /* one block per row: losses and top-k */
#define UNROLL 4       /* independent loads in flight per thread (rows) */

/* ---- launch helpers ------------------------------------------------------------- */

/* One block per row, up to the grid limit; kernels loop over the rest. */
static unsigned grid_rows(int64_t rows) {
  return (unsigned)(rows < INT_MAX ? (rows < 1 ? 1 : rows) : INT_MAX);
}

/* Column blocks x row blocks for the (rows, cols) element-wise kernels. */
static dim3 grid_2d(int64_t rows, int64_t cols, int block) {
  int64_t gx = (cols + block - 1) / block;
  int64_t gy = rows < 65535 ? rows : 65535;
  if (gx > INT_MAX)
    gx = INT_MAX;
  return dim3((unsigned)(gx < 1 ? 1 : gx), (unsigned)(gy < 1 ? 1 : gy), 1);
}

/* ---- block reductions -------------------------------------------------------------
 * Every thread of the block gets the result.  Warps reduce with shuffles;
 * the warp results are then combined by every thread in warp order, so the
 * result does not depend on timing.  Each call begins with a barrier, which
 * also orders all earlier reads of the block before later writes. */

template <typename T> struct Sum {
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

template <typename T, typename Op>
__device__ T block_reduce(T v, T *sh, Op op) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(FULL_MASK, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0)
    sh[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = sh[0];
  const int nw = blockDim.x >> 5;
  for (int w = 1; w < nw; w++)
    r = op(r, sh[w]);
  return r;
}

/* ---- fill -------------------------------------------------------------------------- */

__global__ void fill_k(float *x, int64_t n, float v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = v;
}

void ar__cuda_fill(ar_device *dev, float *x, int64_t n, float value) {
  ar__cuda_device *d = ar__cuda(dev);
  if (n <= 0 || !ar__cuda_enter(d))
    return;
  fill_k<<<ar__cuda_grid(d, n, EW_BLOCK), EW_BLOCK, 0, d->stream>>>(x, n, value);
  ar__cuda_launched(d, "fill kernel");
}

/* ---- gemm -------------------------------------------------------------------------- */

/* C (m, n) = beta C, with beta = 0 clearing C without reading it (the host
 * and BLAS semantics of an empty product). */
__global__ void scale_k(float *c, int64_t m, int64_t n, int64_t ldc,
                        float beta) {
  const int64_t total = m * n;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    float *p = c + (t / n) * ldc + t % n;
    *p = beta == 0.0f ? 0.0f : beta * *p;
  }
}

/* Row-major C = alpha op(A) op(B) + beta C is, read column-major, C^T =
 * op(B)^T op(A)^T: cuBLAS is called with the operands swapped, each with
 * its own transpose flag, and the row strides as leading dimensions. */
void ar__cuda_gemm(ar_device *dev, bool trans_a, bool trans_b, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta,
                   float *c, int64_t ldc) {
  ar__cuda_device *d = ar__cuda(dev);
  if (m <= 0 || n <= 0 || !ar__cuda_enter(d))
    return;
  if (k <= 0) {
    scale_k<<<ar__cuda_grid(d, m * n, EW_BLOCK), EW_BLOCK, 0, d->stream>>>(c, m, n,
                                                                      ldc, beta);
    ar__cuda_launched(d, "gemm scale kernel (k = 0)");
    return;
  }
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX &&
      ldb <= INT_MAX && ldc <= INT_MAX)
    ar__cublas_note(d,
                    ar__blas.sgemm(d->blas, tb, ta, (int)n, (int)m, (int)k, &alpha,
                                b, (int)ldb, a, (int)lda, &beta, c, (int)ldc),
                    "cublasSgemm");
  else
    ar__cublas_note(d,
                    ar__blas.sgemm_64(d->blas, tb, ta, n, m, k, &alpha, b, ldb,
                                      a, lda, &beta, c, ldc),
                    "cublasSgemm_64");
}

/* ---- sparse input -------------------------------------------------------------------- */

/* Y = X W: thread j of a row owns column j and adds the row's nonzeros in
 * order, as the host does. */
__global__ void spmm_k(int64_t rows, const int64_t *row_ptr,
                       const int32_t *idx, const float *val, const float *w,
                       int64_t out, float *y) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= out)
    return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float acc = 0.0f;
    for (int64_t e = row_ptr[r]; e < row_ptr[r + 1]; e++)
      acc += val[e] * w[(int64_t)idx[e] * out + j];
    y[r * out + j] = acc;
  }
}

/* dW += X^T dY: several rows name one feature, so their contributions meet
 * in atomics. */
__global__ void spmm_t_k(int64_t rows, const int64_t *row_ptr,
                         const int32_t *idx, const float *val, const float *dy,
                         int64_t out, float *dw) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= out)
    return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float g = dy[r * out + j];
    for (int64_t e = row_ptr[r]; e < row_ptr[r + 1]; e++)
      atomicAdd(&dw[(int64_t)idx[e] * out + j], val[e] * g);
  }
}

static int col_block(int64_t cols) {
  return cols >= 256 ? 256 : (int)((cols + 31) / 32 * 32);
}

void ar__cuda_spmm(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                   const int32_t *idx, const float *val, const float *w,
                   int64_t out, float *y) {
  ar__cuda_device *d = ar__cuda(dev);
  if (rows <= 0 || out <= 0 || !ar__cuda_enter(d))
    return;
  const int bs = col_block(out);
  spmm_k<<<grid_2d(rows, out, bs), bs, 0, d->stream>>>(rows, row_ptr, idx, val,
                                                       w, out, y);
  ar__cuda_launched(d, "spmm kernel");
}

void ar__cuda_spmm_t(ar_device *dev, int64_t rows, const int64_t *row_ptr,
                     const int32_t *idx, const float *val, const float *dy,
                     int64_t out, float *dw) {
  ar__cuda_device *d = ar__cuda(dev);
  if (rows <= 0 || out <= 0 || !ar__cuda_enter(d))
    return;
  const int bs = col_block(out);
  spmm_t_k<<<grid_2d(rows, out, bs), bs, 0, d->stream>>>(rows, row_ptr, idx,
                                                         val, dy, out, dw);
  ar__cuda_launched(d, "spmm_t kernel");
}

/* ---- elementwise and reductions ------------------------------------------------------ */

/* sigmoid(x) from e = exp(-|x|), without overflow on either side (the
 * host's sigmoid_from). */
__device__ __forceinline__ float sigmoid_from(float x, float e) {
  const float inv = 1.0f / (1.0f + e);
  return x >= 0.0f ? inv : e * inv;
}

__global__ void bias_act_k(int64_t rows, int64_t cols, const float *bias,
                           int act, float *y) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= cols)
    return;
  const float b = bias ? bias[j] : 0.0f;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float v = y[r * cols + j];
    if (bias)
      v += b;
    if (act == AR_ACT_RELU)
      v = v > 0.0f ? v : 0.0f;
    else if (act == AR_ACT_SIGMOID)
      v = sigmoid_from(v, expf(-fabsf(v)));
    y[r * cols + j] = v;
  }
}

void ar__cuda_bias_act(ar_device *dev, int64_t rows, int64_t cols,
                       const float *bias, ar_act act, float *y) {
  ar__cuda_device *d = ar__cuda(dev);
  if (rows <= 0 || cols <= 0)
    return;
  if (!bias && (act == AR_ACT_NONE || act == AR_ACT_SOFTMAX))
    return;
  if (!ar__cuda_enter(d))
    return;
  const int a = act == AR_ACT_SOFTMAX ? (int)AR_ACT_NONE : (int)act;
  bias_act_k<<<grid_2d(rows, cols, EW_BLOCK), EW_BLOCK, 0, d->stream>>>(
      rows, cols, bias, a, y);
  ar__cuda_launched(d, "bias_act kernel");
}

__global__ void act_grad_k(int64_t n, int act, const float *y, float *dy) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (act == AR_ACT_RELU)
      dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    else
      dy[i] *= y[i] * (1.0f - y[i]);
  }
}

void ar__cuda_act_grad(ar_device *dev, int64_t n, ar_act act, const float *y,
                       float *dy) {
  ar__cuda_device *d = ar__cuda(dev);
  if (n <= 0 || act == AR_ACT_NONE || act == AR_ACT_SOFTMAX || !ar__cuda_enter(d))
    return;
  act_grad_k<<<ar__cuda_grid(d, n, EW_BLOCK), EW_BLOCK, 0, d->stream>>>(n, (int)act,
                                                                   y, dy);
  ar__cuda_launched(d, "act_grad kernel");
}

/* db = (accumulate ? db : 0) + sum_r dY[r, :]: one thread per column adds
 * the rows in order, as the host does (same operations, same result);
 * neighbouring threads read neighbouring columns, so each row is one
 * coalesced sweep. */
__global__ void col_sum_k(int64_t rows, int64_t cols, const float *dy,
                          bool accumulate, float *db) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols;
       j += (int64_t)gridDim.x * blockDim.x) {
    float s = accumulate ? db[j] : 0.0f;
    for (int64_t r = 0; r < rows; r++)
      s += dy[r * cols + j];
    db[j] = s;
  }
}

void ar__cuda_col_sum(ar_device *dev, int64_t rows, int64_t cols,
                      const float *dy, bool accumulate, float *db) {
  ar__cuda_device *d = ar__cuda(dev);
  if (cols <= 0 || !ar__cuda_enter(d))
    return;
  const int bs = col_block(cols) < 128 ? col_block(cols) : 128;
  int64_t g = (cols + bs - 1) / bs;
  col_sum_k<<<(unsigned)(g < INT_MAX ? g : INT_MAX), bs, 0, d->stream>>>(
      rows, cols, dy, accumulate, db);
  ar__cuda_launched(d, "col_sum kernel");
}

/* ---- losses ------------------------------------------------------------------------- */

/* One element of the online softmax sum: *s holds sum exp(x - *m) over
 * the elements seen so far, rescaled when the max grows. */
__device__ __forceinline__ void online_add(float v, float *m, double *s) {
  if (v > *m) {
    *s = *s * (double)expf(*m - v) + 1.0;
    *m = v;
  } else if (!(v == -INFINITY)) { /* -inf adds 0; NaN propagates */
    *s += (double)expf(v - *m);
  }
}

/* Multi-label softmax cross-entropy, one block per row (the host's
 * formulas: loss = M + log S - (1/|L|) sum_{j in L} x_j and
 * grad_j = scale (p_j - t_j)).  Each thread keeps a running max and a sum
 * of exp(x - max) rescaled when the max grows (online softmax, Milakov &
 * Gimelshein 2018); the block combines the pairs.  Label logits are read
 * first: grad may alias logits, and the reductions' barriers order those
 * reads before the first write. */
__global__ void __launch_bounds__(ROW_BLOCK)
    softmax_xent_k(int64_t rows, int64_t cols, const float *logits,
                   const int64_t *lab_ptr, const int32_t *lab, float scale,
                   float *grad, float *loss_rows) {
  __shared__ double shd[32];
  __shared__ float shf[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *x = logits + r * cols;
    float *g = grad ? grad + r * cols : NULL;
    const int64_t l0 = lab_ptr[r], nl = lab_ptr[r + 1] - l0;
    if (nl <= 0) {
      if (g)
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
          g[j] = 0.0f;
      if (threadIdx.x == 0)
        loss_rows[r] = 0.0f;
      __syncthreads();
      continue;
    }
    double tx = 0.0;
    for (int64_t l = l0 + threadIdx.x; l < l0 + nl; l += blockDim.x) {
      const int32_t c = lab[l];
      if (c >= 0 && c < cols)
        tx += (double)x[c];
    }
    tx = block_reduce(tx, shd, Sum<double>());
    /* With one block per row, a thread's loads must overlap to keep the
     * memory busy: UNROLL independent loads, then their updates. */
    float m = -INFINITY;
    double s = 0.0;
    const int64_t step = blockDim.x;
    int64_t j = threadIdx.x;
    for (; j + (UNROLL - 1) * step < cols; j += UNROLL * step) {
      float v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; u++)
        v[u] = x[j + u * step];
#pragma unroll
      for (int u = 0; u < UNROLL; u++)
        online_add(v[u], &m, &s);
    }
    for (; j < cols; j += step)
      online_add(x[j], &m, &s);
    const float mx = block_reduce(m, shf, Max());
    const double part = m == -INFINITY ? 0.0 : s * (double)expf(m - mx);
    const double sum = block_reduce(part, shd, Sum<double>());
    if (threadIdx.x == 0)
      loss_rows[r] = (float)((double)mx + log(sum) - tx / (double)nl);
    if (g) {
      const float f = (float)((double)scale / sum);
      int64_t i = threadIdx.x;
      for (; i + (UNROLL - 1) * step < cols; i += UNROLL * step) {
        float v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
          v[u] = x[i + u * step];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
          g[i + u * step] = expf(v[u] - mx) * f;
      }
      for (; i < cols; i += step)
        g[i] = expf(x[i] - mx) * f;
      __syncthreads();
      const float t = (float)((double)scale / (double)nl);
      for (int64_t l = l0 + threadIdx.x; l < l0 + nl; l += blockDim.x) {
        const int32_t c = lab[l];
        if (c >= 0 && c < cols)
          g[c] -= t;
      }
    }
    __syncthreads();
  }
}

void ar__cuda_softmax_xent(ar_device *dev, int64_t rows, int64_t cols,
                           const float *logits, const int64_t *lab_ptr,
                           const int32_t *lab, float scale, float *grad,
                           float *loss_rows) {
  ar__cuda_device *d = ar__cuda(dev);
  if (rows <= 0 || cols <= 0 || !ar__cuda_enter(d))
    return;
  softmax_xent_k<<<grid_rows(rows), ROW_BLOCK, 0, d->stream>>>(
      rows, cols, logits, lab_ptr, lab, scale, grad, loss_rows);
  ar__cuda_launched(d, "softmax_xent kernel");
}

/* Binary cross-entropy of sigmoid(x) against the row's 0/1 targets, in the
 * host's overflow-free form: loss = sum_j [max(x,0) + log(1 + exp(-|x|))]
 * - sum_{j in L} x_j, grad_j = scale (sigmoid(x_j) - t_j).  A row without
 * labels is an all-negative example. */
__global__ void __launch_bounds__(ROW_BLOCK)
    sigmoid_bce_k(int64_t rows, int64_t cols, const float *logits,
                  const int64_t *lab_ptr, const int32_t *lab, float scale,
                  float *grad, float *loss_rows) {
  __shared__ double shd[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *x = logits + r * cols;
    float *g = grad ? grad + r * cols : NULL;
    const int64_t l0 = lab_ptr[r], l1 = lab_ptr[r + 1];
    double tx = 0.0;
    for (int64_t l = l0 + threadIdx.x; l < l1; l += blockDim.x) {
      const int32_t c = lab[l];
      if (c >= 0 && c < cols)
        tx += (double)x[c];
    }
    tx = block_reduce(tx, shd, Sum<double>());
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = x[j];
      const float e = expf(-fabsf(v));
      s += (double)((v > 0.0f ? v : 0.0f) + log1pf(e));
      if (g)
        g[j] = scale * sigmoid_from(v, e);
    }
    s = block_reduce(s, shd, Sum<double>());
    if (threadIdx.x == 0)
      loss_rows[r] = (float)(s - tx);
    if (g) {
      __syncthreads();
      for (int64_t l = l0 + threadIdx.x; l < l1; l += blockDim.x) {
        const int32_t c = lab[l];
        if (c >= 0 && c < cols)
          g[c] -= scale;
      }
    }
    __syncthreads();
  }
}

void ar__cuda_sigmoid_bce(ar_device *dev, int64_t rows, int64_t cols,
                          const float *logits, const int64_t *lab_ptr,
                          const int32_t *lab, float scale, float *grad,
                          float *loss_rows) {
  ar__cuda_device *d = ar__cuda(dev);
  if (rows <= 0 || cols <= 0 || !ar__cuda_enter(d))
    return;
  sigmoid_bce_k<<<grid_rows(rows), ROW_BLOCK, 0, d->stream>>>(
      rows, cols, logits, lab_ptr, lab, scale, grad, loss_rows);
  ar__cuda_launched(d, "sigmoid_bce kernel");
}

/* ---- top-k --------------------------------------------------------------------------- */

/* The host's order: a larger key first, NaN as -infinity, ties to the
 * smaller index.  (ka, ia) ranks above (kb, ib): */
__device__ __forceinline__ bool ranks_above(float ka, int64_t ia, float kb,
                                            int64_t ib) {
  return ka > kb || (ka == kb && ia < ib);
}

struct Cand {
  float key;
  int64_t idx; /* -1: none */
};

struct Best {
  __device__ Cand operator()(Cand a, Cand b) const {
    if (a.idx < 0)
      return b;
    if (b.idx < 0)
      return a;
    return ranks_above(b.key, b.idx, a.key, a.idx) ? b : a;
  }
};

__device__ __forceinline__ Cand shfl_xor(unsigned mask, Cand c, int o) {
  Cand r;
  r.key = __shfl_xor_sync(mask, c.key, o);
  r.idx = __shfl_xor_sync(mask, c.idx, o);
  return r;
}

/* block_reduce for Cand (shuffles of a struct go field by field). */
__device__ Cand block_best(Cand v, Cand *sh) {
  Best op;
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, shfl_xor(FULL_MASK, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0)
    sh[threadIdx.x >> 5] = v;
  __syncthreads();
  Cand r = sh[0];
  const int nw = blockDim.x >> 5;
  for (int w = 1; w < nw; w++)
    r = op(r, sh[w]);
  return r;
}

/* k rounds per row; round i finds, in one sweep of the row, the best
 * element ranking below the one round i-1 chose.  O(k cols) per row: meant
 * for the engine's k <= 5 (P@1/3/5), exact for any k <= cols. */
__global__ void __launch_bounds__(ROW_BLOCK)
    topk_k(int64_t rows, int64_t cols, const float *scores, int k,
           int32_t *idx) {
  __shared__ Cand sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *s = scores + r * cols;
    Cand prev = {INFINITY, -1}; /* ranks above every element */
    for (int i = 0; i < k; i++) {
      Cand best = {-INFINITY, -1};
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        const float v = s[j];
        const float key = v == v ? v : -INFINITY;
        if (ranks_above(prev.key, prev.idx, key, j) &&
            (best.idx < 0 || ranks_above(key, j, best.key, best.idx))) {
          best.key = key;
          best.idx = j;
        }
      }
      prev = block_best(best, sh);
      if (threadIdx.x == 0)
        idx[r * k + i] = (int32_t)prev.idx;
    }
  }
}

void ar__cuda_topk(ar_device *dev, int64_t rows, int64_t cols,
                   const float *scores, int k, int32_t *idx) {
  ar__cuda_device *d = ar__cuda(dev);
  if (rows <= 0 || k <= 0)
    return;
  if (!ar__cuda_enter(d))
    return;
  topk_k<<<grid_rows(rows), ROW_BLOCK, 0, d->stream>>>(rows, cols, scores, k,
                                                       idx);
  ar__cuda_launched(d, "topk kernel");
}

/* ---- optimizers --------------------------------------------------------------------- */

/* Adam in PyTorch's formulation, as the host (ar__host_adam): eps is added
 * to the bias-corrected sqrt(v-hat); step = lr / (1 - b1^t) and
 * 1 / sqrt(1 - b2^t) are computed once per call in double on the host. */
__global__ void adam_k(int64_t n, float *p, const float *g, float *m, float *v,
                       float step, float inv_sqrt_bc2, float beta1, float beta2,
                       float c1, float c2, float eps, float wd) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float gi = g[i];
    if (wd != 0.0f)
      gi += wd * p[i];
    const float mi = beta1 * m[i] + c1 * gi;
    const float vi = beta2 * v[i] + c2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * (mi / (sqrtf(vi) * inv_sqrt_bc2 + eps));
  }
}

void ar__cuda_adam(ar_device *dev, int64_t n, float *p, const float *g,
                   float *m, float *v, float lr, float beta1, float beta2,
                   float eps, float weight_decay, int64_t t) {
  ar__cuda_device *d = ar__cuda(dev);
  if (n <= 0)
    return;
  if (!ar__cuda_enter(d))
    return;
  const double bc1 = 1.0 - pow((double)beta1, (double)t);
  const double bc2 = 1.0 - pow((double)beta2, (double)t);
  const float step = (float)((double)lr / bc1);
  const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
  adam_k<<<ar__cuda_grid(d, n, EW_BLOCK), EW_BLOCK, 0, d->stream>>>(
      n, p, g, m, v, step, inv_sqrt_bc2, beta1, beta2, 1.0f - beta1,
      1.0f - beta2, eps, weight_decay);
  ar__cuda_launched(d, "adam kernel");
}

/* SGD as torch.optim.SGD (dampening 0, no Nesterov), as the host. */
__global__ void sgd_k(int64_t n, float *p, const float *g, float *vel,
                      float lr, float momentum, float wd) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float gi = g[i] + wd * p[i];
    if (momentum != 0.0f) {
      const float vi = momentum * vel[i] + gi;
      vel[i] = vi;
      p[i] -= lr * vi;
    } else {
      p[i] -= lr * gi;
    }
  }
}

void ar__cuda_sgd(ar_device *dev, int64_t n, float *p, const float *g,
                  float *vel, float lr, float momentum, float weight_decay) {
  ar__cuda_device *d = ar__cuda(dev);
  if (n <= 0)
    return;
  if (!ar__cuda_enter(d))
    return;
  sgd_k<<<ar__cuda_grid(d, n, EW_BLOCK), EW_BLOCK, 0, d->stream>>>(
      n, p, g, vel, lr, momentum, weight_decay);
  ar__cuda_launched(d, "sgd kernel");
}

/* ---- conv + batch-norm fold ------------------------------------------------------- */

/* One thread per weight: its channel's s as the host computes it (double,
 * rounded to float), then the product; the first `out` threads also write
 * the folded bias. */
__global__ void bn_fold_k(int64_t out, int64_t per, const float *w,
                          const float *bias, const float *gamma,
                          const float *beta, const float *mean,
                          const float *var, double eps, float *wf, float *bf) {
  const int64_t n = out * per > out ? out * per : out;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (i < out * per) {
      const int64_t o = i / per;
      wf[i] = w[i] * (float)((double)gamma[o] / sqrt((double)var[o] + eps));
    }
    if (i < out) {
      const float s = (float)((double)gamma[i] / sqrt((double)var[i] + eps));
      /* No contraction into an FMA: the host rounds the product first. */
      bf[i] = __fadd_rn(__fmul_rn((bias ? bias[i] : 0.0f) - mean[i], s), beta[i]);
    }
  }
}

void ar__cuda_bn_fold(ar_device *dev, int64_t out, int64_t per, const float *w,
                      const float *bias, const float *gamma, const float *beta,
                      const float *mean, const float *var, float eps, float *wf,
                      float *bf) {
  ar__cuda_device *d = ar__cuda(dev);
  const int64_t n = out * per > out ? out * per : out;
  if (out <= 0 || !ar__cuda_enter(d))
    return;
  bn_fold_k<<<ar__cuda_grid(d, n, EW_BLOCK), EW_BLOCK, 0, d->stream>>>(
      out, per, w, bias, gamma, beta, mean, var, (double)eps, wf, bf);
  ar__cuda_launched(d, "bn_fold kernel");
}
