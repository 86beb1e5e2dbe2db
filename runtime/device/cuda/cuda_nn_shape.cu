/*
 * CUDA kernels of the nn ops in group "shape" with the semantics of
 * runtime/device/host/nn_shape.c and nn_embed.c: RESHAPE and FLATTEN (one
 * copy), SLICE, CONCAT and SPLIT (strided 2-D copies: the tensor seen as
 * (outer, axis x inner) rows), TRANSPOSE (one thread per output element),
 * EMBEDDING (a row gather; the table's gradient gathered per table element
 * over the batch's ids in order, so repeated ids sum without atomics;
 * sparse_grad: the batch's distinct ids listed ascending by a rank sort
 * and an in-place compaction, and only their rows of the gradient written),
 * POSEMBED, MASK and DROPOUT (the host's counter-based generator, so the
 * same seed drops the same elements on both devices).
 */
#include "cuda/cuda_nn.h"

#include <string.h>

static int norm_axis(int axis, int nd) { return axis < 0 ? axis + nd : axis; }

static int64_t dims_prod(const ar_shape *s, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    p *= s->d[i];
  return p;
}

/* dst[r * dld + j] = src[r * sld + j] for r < rows, j < len (floats), on
 * a's stream. */
static void copy_rows(ar_nn_args *a, int64_t rows, int64_t len, const float *src, int64_t sld,
                      float *dst, int64_t dld, const char *what) {
  ar__cuda_device *d = nn_dev(a);
  if (rows <= 0 || len <= 0 || !ar__cuda_enter(d))
    return;
  ar__cuda_note(d,
                cudaMemcpy2DAsync(dst, (size_t)dld * sizeof(float), src,
                                  (size_t)sld * sizeof(float), (size_t)len * sizeof(float),
                                  (size_t)rows, cudaMemcpyDeviceToDevice, d->stream),
                what);
}

static void zero(ar_nn_args *a, void *p, size_t bytes, const char *what) {
  ar__cuda_device *d = nn_dev(a);
  if (bytes == 0 || !ar__cuda_enter(d))
    return;
  ar__cuda_note(d, cudaMemsetAsync(p, 0, bytes, d->stream), what);
}

/* ---- RESHAPE, FLATTEN ------------------------------------------------------- */

static void copy_forward(void *state, ar_nn_args *a) {
  (void)state;
  ar__cuda_nn_copy(a, a->out[0].p, a->in[0].p,
                   (size_t)ar_shape_count(&a->in[0].shape) * sizeof(float),
                   "nn reshape forward (cudaMemcpyAsync)");
}

static void copy_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    ar__cuda_nn_copy(a, a->gin[0].p, a->gout[0].p,
                     (size_t)ar_shape_count(&a->in[0].shape) * sizeof(float),
                     "nn reshape backward (cudaMemcpyAsync)");
}

/* ---- SLICE ------------------------------------------------------------------ */

/* begin and end on a dim of size d: negative from the end, clamped. */
static void slice_range(const ar_nn_attr *attr, int64_t d, int64_t *b, int64_t *e) {
  int64_t lo = attr->begin < 0 ? attr->begin + d : attr->begin;
  int64_t hi = attr->end < 0 ? attr->end + d : attr->end;
  *b = lo < 0 ? 0 : lo > d ? d : lo;
  *e = hi < 0 ? 0 : hi > d ? d : hi;
}

static void slice_geom(const ar_nn_args *a, int64_t *outer, int64_t *len, int64_t *ld,
                       int64_t *off) {
  const ar_shape *s = &a->in[0].shape;
  const int ax = norm_axis(a->attr->axis, s->nd);
  const int64_t inner = dims_prod(s, ax + 1, s->nd);
  int64_t b, e;
  slice_range(a->attr, s->d[ax], &b, &e);
  *outer = dims_prod(s, 0, ax);
  *len = (e - b) * inner;
  *ld = s->d[ax] * inner;
  *off = b * inner;
}

static void slice_forward(void *state, ar_nn_args *a) {
  (void)state;
  int64_t outer, len, ld, off;
  slice_geom(a, &outer, &len, &ld, &off);
  copy_rows(a, outer, len, (const float *)a->in[0].p + off, ld, (float *)a->out[0].p, len,
            "nn slice forward (cudaMemcpy2DAsync)");
}

static void slice_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  int64_t outer, len, ld, off;
  slice_geom(a, &outer, &len, &ld, &off);
  zero(a, a->gin[0].p, (size_t)ar_shape_count(&a->in[0].shape) * sizeof(float),
       "nn slice backward (cudaMemsetAsync)");
  copy_rows(a, outer, len, (const float *)a->gout[0].p, len, (float *)a->gin[0].p + off, ld,
            "nn slice backward (cudaMemcpy2DAsync)");
}

/* ---- CONCAT, SPLIT -------------------------------------------------------------
 * The whole (outer, L) and the parts (outer, len_k) along the axis, L the
 * sum of the len_k: part k sits at column offset sum_{i<k} len_i.  A part
 * with a NULL pointer is skipped, or, as a source, reads as zeros (the
 * host's concat_move). */

static void parts_move(ar_nn_args *a, int n, const ar_tref *parts, const ar_shape *w,
                       float *whole, bool to_whole, const char *what) {
  const int ax = norm_axis(a->attr->axis, w->nd);
  const int64_t outer = dims_prod(w, 0, ax), inner = dims_prod(w, ax + 1, w->nd);
  const int64_t L = w->d[ax] * inner;
  ar__cuda_device *d = nn_dev(a);
  int64_t at = 0;
  for (int k = 0; k < n; k++) {
    const int64_t len = parts[k].shape.d[ax] * inner;
    if (!parts[k].p) {
      if (to_whole && outer > 0 && len > 0 && ar__cuda_enter(d))
        ar__cuda_note(d,
                      cudaMemset2DAsync(whole + at, (size_t)L * sizeof(float), 0,
                                        (size_t)len * sizeof(float), (size_t)outer, d->stream),
                      what);
    } else if (to_whole) {
      copy_rows(a, outer, len, (const float *)parts[k].p, len, whole + at, L, what);
    } else {
      copy_rows(a, outer, len, whole + at, L, (float *)parts[k].p, len, what);
    }
    at += len;
  }
}

static void concat_forward(void *state, ar_nn_args *a) {
  (void)state;
  parts_move(a, a->n_in, a->in, &a->out[0].shape, (float *)a->out[0].p, true,
             "nn concat forward (cudaMemcpy2DAsync)");
}

static void concat_backward(void *state, ar_nn_args *a) {
  (void)state;
  parts_move(a, a->n_in, a->gin, &a->out[0].shape, (float *)a->gout[0].p, false,
             "nn concat backward (cudaMemcpy2DAsync)");
}

static void split_forward(void *state, ar_nn_args *a) {
  (void)state;
  parts_move(a, a->n_out, a->out, &a->in[0].shape, (float *)a->in[0].p, false,
             "nn split forward (cudaMemcpy2DAsync)");
}

static void split_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    parts_move(a, a->n_out, a->gout, &a->in[0].shape, (float *)a->gin[0].p, true,
               "nn split backward (cudaMemcpy2DAsync)");
}

/* ---- TRANSPOSE ------------------------------------------------------------------ */

typedef struct perm_g {
  int nd;
  int64_t od[AR_NN_MAX_DIMS]; /* the output's dims */
  int64_t ps[AR_NN_MAX_DIMS]; /* the input's stride along output dim i */
} perm_g;

static perm_g perm_geom(const ar_nn_args *a) {
  const ar_shape *s = &a->in[0].shape;
  perm_g g;
  memset(&g, 0, sizeof g);
  g.nd = s->nd;
  int64_t istr[AR_NN_MAX_DIMS];
  int64_t st = 1;
  for (int i = s->nd - 1; i >= 0; i--) {
    istr[i] = st;
    st *= s->d[i];
  }
  for (int i = 0; i < s->nd; i++) {
    g.od[i] = s->d[a->attr->perm[i]];
    g.ps[i] = istr[a->attr->perm[i]];
  }
  return g;
}

/* Output element e is input element sum_i coord_i ps[i]; scatter: the
 * gradient goes back the same way (a bijection: each written once). */
static __global__ void permute_k(perm_g g, int64_t n, const float *src, float *dst,
                                 bool scatter) {
  NN_LOOP(e, n) {
    int64_t rem = e, off = 0;
    for (int i = g.nd - 1; i >= 0; i--) {
      off += rem % g.od[i] * g.ps[i];
      rem /= g.od[i];
    }
    if (scatter)
      dst[off] = src[e];
    else
      dst[e] = src[off];
  }
}

static void transpose_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, n, "nn transpose forward", permute_k, perm_geom(a), n,
            (const float *)a->in[0].p, (float *)a->out[0].p, false);
}

static void transpose_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, n, "nn transpose backward", permute_k, perm_geom(a), n,
            (const float *)a->gout[0].p, (float *)a->gin[0].p, true);
}

/* ---- EMBEDDING, POSEMBED, MASK ------------------------------------------------ */

static __device__ __forceinline__ int64_t id_at(const void *ids, bool i64, int64_t r) {
  return i64 ? ((const int64_t *)ids)[r] : (int64_t)((const int32_t *)ids)[r];
}

/* y (rows, d) = table[id of row]; an id outside the table (the engine
 * checks them on the host first) gives zeros rather than a stray read. */
static __global__ void embed_fwd_k(int64_t rows, int64_t d, int64_t vocab, const void *ids,
                                   bool i64, const float *table, float *y) {
  NN_LOOP(e, rows * d) {
    const int64_t id = id_at(ids, i64, e / d);
    y[e] = id >= 0 && id < vocab ? table[id * d + e % d] : 0.0f;
  }
}

/* gtable[v][c] = the sum of gout[r][c] over the rows r whose id is v, in
 * row order. */
static __global__ void embed_bwd_k(int64_t rows, int64_t d, int64_t vocab, const void *ids,
                                   bool i64, const float *gy, float *gt) {
  NN_LOOP(e, vocab * d) {
    const int64_t v = e / d, c = e % d;
    float s = 0.0f;
    for (int64_t r = 0; r < rows; r++)
      if (id_at(ids, i64, r) == v)
        s += gy[r * d + c];
    gt[e] = s;
  }
}

/* sparse_grad, step 1: list[1 + rank] = the ids ascending, rank = the
 * ids smaller than this one plus the equal ones before it (a stable rank
 * sort: every position is written once). */
static __global__ void ids_sort_k(int64_t rows, const void *ids, bool i64, int64_t *list) {
  NN_LOOP(i, rows) {
    const int64_t v = id_at(ids, i64, i);
    int64_t rank = 0;
    for (int64_t j = 0; j < rows; j++) {
      const int64_t u = id_at(ids, i64, j);
      rank += u < v || (u == v && j < i);
    }
    list[1 + rank] = v;
  }
}

/* Step 2, one block: the sorted ids' distinct values moved to the front in
 * place, their count into list[0] (the host's distinct_ids).  A chunk of
 * NN_BLOCK ids at a time: each thread reads its id and the one before
 * (the previous chunk's last from `prev`), a scan of the keep flags gives
 * each kept id its slot, and the writes (to slots at or before the ids'
 * own, so never to a later chunk's) follow a barrier after every read. */
static __global__ void ids_unique_k(int64_t rows, int64_t *list) {
  __shared__ int sc[NN_BLOCK];
  __shared__ int64_t last;
  int64_t *v = list + 1, kept = 0, prev = 0;
  const int t = (int)threadIdx.x;
  for (int64_t base = 0; base < rows; base += NN_BLOCK) {
    const int64_t i = base + t, end = base + NN_BLOCK < rows ? base + NN_BLOCK : rows;
    const bool in = i < rows;
    const int64_t x = in ? v[i] : 0;
    const int64_t before = t == 0 ? prev : (in ? v[i - 1] : 0);
    const int keep = in && (i == 0 || x != before);
    sc[t] = keep;
    if (i == end - 1)
      last = x;
    __syncthreads();
    for (int off = 1; off < NN_BLOCK; off <<= 1) {
      const int y = t >= off ? sc[t - off] : 0;
      __syncthreads();
      sc[t] += y;
      __syncthreads();
    }
    if (keep)
      v[kept + sc[t] - 1] = x;
    kept += sc[NN_BLOCK - 1];
    prev = last;
    __syncthreads(); /* sc and last are read before the next chunk writes them */
  }
  if (t == 0)
    list[0] = kept;
}

/* The sparse backward: gtable[v][c] for the listed ids v only (list[0] of
 * them, at most rows), the sum of gout[r][c] over the rows whose id is v,
 * in row order (the host's zeroed row plus each row in turn). */
static __global__ void embed_bwd_rows_k(int64_t rows, int64_t d, const void *ids, bool i64,
                                        const int64_t *list, const float *gy, float *gt) {
  const int64_t cnt = list[0];
  NN_LOOP(e, rows * d) {
    const int64_t k = e / d, c = e % d;
    if (k >= cnt)
      continue;
    const int64_t v = list[1 + k];
    float s = 0.0f;
    for (int64_t r = 0; r < rows; r++)
      if (id_at(ids, i64, r) == v)
        s += gy[r * d + c];
    gt[v * d + c] = s;
  }
}

static void embedding_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t rows = ar_shape_count(&a->in[0].shape), d = a->attr->out;
  const bool i64 = a->in[0].dtype == AR_DT_I64;
  NN_LAUNCH(a, rows * d, "nn embedding forward", embed_fwd_k, rows, d, a->attr->vocab,
            (const void *)a->in[0].p, i64, (const float *)a->param[0].p,
            (float *)a->out[0].p);
  if (a->training && a->attr->sparse_grad) {
    int64_t *list = (int64_t *)a->aux[0].p;
    NN_LAUNCH(a, rows, "nn embedding sparse ids", ids_sort_k, rows, (const void *)a->in[0].p,
              i64, list);
    ar__cuda_device *dv = nn_dev(a);
    if (rows == 0 && ar__cuda_enter(dv)) /* no ids: an empty list */
      ar__cuda_note(dv, cudaMemsetAsync(list, 0, sizeof *list, dv->stream),
                    "nn embedding sparse ids");
    NN_LAUNCH_ROWS(a, rows > 0 ? 1 : 0, "nn embedding sparse ids", ids_unique_k, rows, list);
  }
}

static void embedding_backward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t rows = ar_shape_count(&a->in[0].shape), d = a->attr->out;
  const bool i64 = a->in[0].dtype == AR_DT_I64;
  if (a->attr->sparse_grad) {
    NN_LAUNCH(a, rows * d, "nn embedding backward", embed_bwd_rows_k, rows, d,
              (const void *)a->in[0].p, i64, (const int64_t *)a->aux[0].p,
              (const float *)a->gout[0].p, (float *)a->gparam[0].p);
    return;
  }
  NN_LAUNCH(a, a->attr->vocab * d, "nn embedding backward", embed_bwd_k, rows, d,
            a->attr->vocab, (const void *)a->in[0].p, i64, (const float *)a->gout[0].p,
            (float *)a->gparam[0].p);
}

/* y (n, td) = x + P (td) on every batch row. */
static __global__ void posembed_fwd_k(int64_t n, int64_t td, const float *x, const float *p,
                                      float *y) {
  NN_LOOP(e, n * td) { y[e] = x[e] + p[e % td]; }
}

/* dP[j] = the sum over the batch of gout[b][j], in batch order. */
static __global__ void col_sum_k(int64_t n, int64_t td, const float *gy, float *dp) {
  NN_LOOP(j, td) {
    float s = 0.0f;
    for (int64_t b = 0; b < n; b++)
      s += gy[b * td + j];
    dp[j] = s;
  }
}

static void posembed_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *s = &a->in[0].shape;
  const int64_t n = s->d[0], td = s->d[1] * s->d[2];
  NN_LAUNCH(a, n * td, "nn posembed forward", posembed_fwd_k, n, td, (const float *)a->in[0].p,
            (const float *)a->param[0].p, (float *)a->out[0].p);
}

static void posembed_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *s = &a->in[0].shape;
  const int64_t n = s->d[0], td = s->d[1] * s->d[2];
  NN_LAUNCH(a, td, "nn posembed backward", col_sum_k, n, td, (const float *)a->gout[0].p,
            (float *)a->gparam[0].p);
  if (a->gin[0].p)
    ar__cuda_nn_copy(a, a->gin[0].p, a->gout[0].p, (size_t)(n * td) * sizeof(float),
                     "nn posembed backward (cudaMemcpyAsync)");
}

static __global__ void mask_k(int64_t n, const void *ids, bool i64, int64_t pad, float *y) {
  NN_LOOP(e, n) { y[e] = id_at(ids, i64, e) != pad ? 1.0f : 0.0f; }
}

static void mask_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, n, "nn mask forward", mask_k, n, (const void *)a->in[0].p,
            a->in[0].dtype == AR_DT_I64, a->attr->pad_id, (float *)a->out[0].p);
}

/* The ids take no gradient: nothing to do. */
static void mask_backward(void *state, ar_nn_args *a) {
  (void)state;
  (void)a;
}

/* ---- DROPOUT ----------------------------------------------------------------------
 * The host's generator (nn_embed.c): SplitMix64's finaliser on (seed, i);
 * element i is dropped when the top 32 bits of its draw are below
 * p 2^32. */

static __host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static __global__ void dropout_fwd_k(int64_t n, uint64_t key, uint64_t thr, float scale,
                                     const float *x, uint8_t *mask, float *y) {
  NN_LOOP(i, n) {
    const uint64_t h = mix64(key + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1));
    const uint8_t keep = (h >> 32) >= thr;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

static __global__ void dropout_bwd_k(int64_t n, float scale, const uint8_t *mask,
                                     const float *gy, float *gx) {
  NN_LOOP(i, n) { gx[i] = mask[i] ? gy[i] * scale : 0.0f; }
}

static void dropout_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  if (!a->training) {
    ar__cuda_nn_copy(a, a->out[0].p, a->in[0].p, (size_t)n * sizeof(float),
                     "nn dropout forward (cudaMemcpyAsync)");
    return;
  }
  const uint64_t thr = (uint64_t)((double)a->attr->p * 4294967296.0);
  const float scale = 1.0f / (1.0f - a->attr->p);
  NN_LAUNCH(a, n, "nn dropout forward", dropout_fwd_k, n, mix64(a->seed ^ 0x5DEECE66Dull), thr,
            scale, (const float *)a->in[0].p, (uint8_t *)a->aux[0].p, (float *)a->out[0].p);
}

static void dropout_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, n, "nn dropout backward", dropout_bwd_k, n, 1.0f / (1.0f - a->attr->p),
            (const uint8_t *)a->aux[0].p, (const float *)a->gout[0].p, (float *)a->gin[0].p);
}

void ar__cuda_nn_shape_register(ar_nn_kernel *table) {
  table[AR_NN_RESHAPE].forward = table[AR_NN_FLATTEN].forward = copy_forward;
  table[AR_NN_RESHAPE].backward = table[AR_NN_FLATTEN].backward = copy_backward;
  table[AR_NN_SLICE].forward = slice_forward;
  table[AR_NN_SLICE].backward = slice_backward;
  table[AR_NN_CONCAT].forward = concat_forward;
  table[AR_NN_CONCAT].backward = concat_backward;
  table[AR_NN_SPLIT].forward = split_forward;
  table[AR_NN_SPLIT].backward = split_backward;
  table[AR_NN_TRANSPOSE].forward = transpose_forward;
  table[AR_NN_TRANSPOSE].backward = transpose_backward;
  table[AR_NN_EMBEDDING].forward = embedding_forward;
  table[AR_NN_EMBEDDING].backward = embedding_backward;
  table[AR_NN_POSEMBED].forward = posembed_forward;
  table[AR_NN_POSEMBED].backward = posembed_backward;
  table[AR_NN_MASK].forward = mask_forward;
  table[AR_NN_MASK].backward = mask_backward;
  table[AR_NN_DROPOUT].forward = dropout_forward;
  table[AR_NN_DROPOUT].backward = dropout_backward;
}
