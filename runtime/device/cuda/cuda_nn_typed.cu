/*
 * CUDA kernels of the ops over any element type and the last host-only
 * ones of the ONNX importer's set:
 *   - WHERE, EXPAND and CAST with the semantics of
 *     runtime/device/host/nn_typed.c: element-wise ops over any element
 *     type with NumPy broadcasting of up to three operands;
 *   - GATHER (host/nn_gather.c), PAD (host/nn_shape.c): one thread per
 *     element of the written tensor, so the gradients are written without
 *     atomics (GATHER's adds an element's repeated indices in index order,
 *     as the host does);
 *   - BCE (host/nn_norm.c): one block per row, the row's sum in double.
 *
 * WHERE, EXPAND, CAST.  One thread per output element finds its
 * operands' offsets from the output index and the operands' strides
 * (nn/nn_elem.h's nn_bcast_strides, the host's own), and CAST converts
 * with nn/nn_elem.h's nn_cast_elem, the host's own arithmetic.  The f32
 * gradients of a broadcast operand are gathered per operand element over
 * the dims it is broadcast along, in output order (no workspace, no
 * atomics), as the binary ops' are (cuda_nn_math.cu).
 */
#include "cuda/cuda_nn.h"
#include "nn/nn_elem.h"

#include <string.h>

/* The output's dims and up to three operands' element strides along them
 * (0 where an operand is broadcast or lacks the dim). */
typedef struct typed_g {
  int nd;
  int64_t out[AR_NN_MAX_DIMS];
  int64_t st[3][AR_NN_MAX_DIMS];
} typed_g;

static typed_g typed_geom(const ar_shape *out, int nops, const ar_shape *const *ops) {
  typed_g g;
  memset(&g, 0, sizeof g);
  g.nd = out->nd;
  for (int k = 0; k < out->nd; k++)
    g.out[k] = out->d[k];
  for (int q = 0; q < nops; q++)
    nn_bcast_strides(out, ops[q], g.st[q]);
  return g;
}

/* Operand q's offset at output element e. */
static __device__ __forceinline__ int64_t typed_off(const typed_g &g, int q, int64_t e) {
  int64_t o = 0;
  for (int k = g.nd - 1; k >= 0; k--) {
    o += e % g.out[k] * g.st[q][k];
    e /= g.out[k];
  }
  return o;
}

/* One element of es bytes (1, 4 or 8: every element type). */
static __device__ __forceinline__ void copy_elem(size_t es, const char *src, char *dst) {
  if (es == 8)
    *(uint64_t *)dst = *(const uint64_t *)src;
  else if (es == 4)
    *(uint32_t *)dst = *(const uint32_t *)src;
  else
    *(uint8_t *)dst = *(const uint8_t *)src;
}

/* One element of es bytes, all zero. */
static __device__ __forceinline__ void zero_elem(size_t es, char *dst) {
  if (es == 8)
    *(uint64_t *)dst = 0;
  else if (es == 4)
    *(uint32_t *)dst = 0;
  else
    *(uint8_t *)dst = 0;
}

/* d[j] (operand q, m elements) = the sum over the output elements e that
 * read element j of gy[e] (nn_bcast_coords, _elem: in output order), or
 * with a condition c (operand 0 of g) only those where (c != 0) == take,
 * the others adding 0. */
static __global__ void gather_sum_k(typed_g g, int q, int64_t m, const float *gy,
                                    const uint8_t *c, bool take, float *d) {
  NN_LOOP(j, m) {
    int64_t coord[AR_NN_MAX_DIMS], ce[AR_NN_MAX_DIMS];
    const int64_t reps = nn_bcast_coords(g.nd, g.out, g.st[q], j, coord);
    float s = 0.0f;
    for (int64_t r = 0; r < reps; r++) {
      const int64_t e = nn_bcast_elem(g.nd, g.out, g.st[q], coord, r, ce);
      if (!c || (c[typed_off(g, 0, e)] != 0) == take)
        s += gy[e];
    }
    d[j] = s;
  }
}

/* ---- WHERE -----------------------------------------------------------------
 * cond (bool or u8), x, y -> x where cond, else y; gradients to f32 x, y. */

static __global__ void where_fwd_k(typed_g g, int64_t n, size_t es, const uint8_t *c,
                                   const char *x, const char *y, char *dst) {
  NN_LOOP(e, n) {
    const char *src = c[typed_off(g, 0, e)] ? x + typed_off(g, 1, e) * es
                                             : y + typed_off(g, 2, e) * es;
    copy_elem(es, src, dst + e * es);
  }
}

static typed_g where_geom(const ar_nn_args *a) {
  const ar_shape *ops[3] = {&a->in[0].shape, &a->in[1].shape, &a->in[2].shape};
  return typed_geom(&a->out[0].shape, 3, ops);
}

static void where_forward(void *state, ar_nn_args *a) {
  (void)state;
  const typed_g g = where_geom(a);
  const int64_t n = ar_shape_count(&a->out[0].shape);
  NN_LAUNCH(a, n, "nn where forward", where_fwd_k, g, n, ar_dtype_size(a->out[0].dtype),
            (const uint8_t *)a->in[0].p, (const char *)a->in[1].p, (const char *)a->in[2].p,
            (char *)a->out[0].p);
}

static void where_backward(void *state, ar_nn_args *a) {
  (void)state;
  const typed_g g = where_geom(a);
  for (int i = 1; i <= 2; i++) {
    if (!a->gin[i].p)
      continue;
    const int64_t m = ar_shape_count(&a->in[i].shape);
    NN_LAUNCH(a, m, "nn where backward", gather_sum_k, g, i, m, (const float *)a->gout[0].p,
              (const uint8_t *)a->in[0].p, i == 1, (float *)a->gin[i].p);
  }
}

/* ---- EXPAND ------------------------------------------------------------------ */

static __global__ void expand_fwd_k(typed_g g, int64_t n, size_t es, const char *x, char *y) {
  NN_LOOP(e, n) {
    copy_elem(es, x + typed_off(g, 0, e) * es, y + e * es);
  }
}

static typed_g expand_geom(const ar_nn_args *a) {
  const ar_shape *ops[1] = {&a->in[0].shape};
  return typed_geom(&a->out[0].shape, 1, ops);
}

static void expand_forward(void *state, ar_nn_args *a) {
  (void)state;
  const typed_g g = expand_geom(a);
  const int64_t n = ar_shape_count(&a->out[0].shape);
  NN_LAUNCH(a, n, "nn expand forward", expand_fwd_k, g, n, ar_dtype_size(a->out[0].dtype),
            (const char *)a->in[0].p, (char *)a->out[0].p);
}

static void expand_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const typed_g g = expand_geom(a);
  const int64_t m = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, m, "nn expand backward", gather_sum_k, g, 0, m, (const float *)a->gout[0].p,
            (const uint8_t *)NULL, false, (float *)a->gin[0].p);
}

/* ---- CAST ---------------------------------------------------------------------- */

static __global__ void cast_k(int64_t n, ar_dtype from, ar_dtype to, const void *x, void *y) {
  NN_LOOP(i, n) {
    nn_cast_elem(from, to, x, y, i);
  }
}

static void cast_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  const ar_dtype from = a->in[0].dtype, to = a->out[0].dtype;
  if (from == to) {
    ar__cuda_nn_copy(a, a->out[0].p, a->in[0].p, (size_t)n * ar_dtype_size(to),
                     "nn cast forward copy");
    return;
  }
  NN_LAUNCH(a, n, "nn cast forward", cast_k, n, from, to, (const void *)a->in[0].p,
            a->out[0].p);
}

/* f32 to f32 only (the others take no gradient): the gradient passes. */
static void cast_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    ar__cuda_nn_copy(a, a->gin[0].p, a->gout[0].p,
                     (size_t)ar_shape_count(&a->in[0].shape) * sizeof(float),
                     "nn cast backward copy");
}

/* ---- GATHER ---------------------------------------------------------------------
 * data (outer, D, inner) along the axis, indices (K, any shape) -> (outer, K,
 * inner); an index outside [-D, D) gives zeros. */

typedef struct gather_g {
  int64_t outer, D, inner, K;
} gather_g;

static gather_g gather_geom(const ar_nn_args *a) {
  const ar_shape *s = &a->in[0].shape;
  const int ax = a->attr->axis < 0 ? a->attr->axis + s->nd : a->attr->axis; /* infer checked */
  gather_g g = {1, s->d[ax], 1, ar_shape_count(&a->in[1].shape)};
  for (int k = 0; k < ax; k++)
    g.outer *= s->d[k];
  for (int k = ax + 1; k < s->nd; k++)
    g.inner *= s->d[k];
  return g;
}

/* Index j as a row of the axis, or -1 outside it (the host's row_of). */
static __device__ __forceinline__ int64_t gather_row(const void *idx, bool i64, int64_t j,
                                                     int64_t D) {
  int64_t v = i64 ? ((const int64_t *)idx)[j] : ((const int32_t *)idx)[j];
  if (v < 0)
    v += D;
  return v >= 0 && v < D ? v : -1;
}

static __global__ void gather_fwd_k(gather_g g, int64_t n, size_t es, const char *x,
                                    const void *idx, bool i64, char *y) {
  NN_LOOP(e, n) {
    const int64_t t = e / g.inner, c = e % g.inner, o = t / g.K;
    const int64_t r = gather_row(idx, i64, t % g.K, g.D);
    if (r < 0)
      zero_elem(es, y + e * es);
    else
      copy_elem(es, x + ((o * g.D + r) * g.inner + c) * es, y + e * es);
  }
}

/* gx[o][r][c] = the sum of gy[o][j][c] over the j that name row r, in
 * index order (the host's order: it adds the j in turn into zeros). */
static __global__ void gather_bwd_k(gather_g g, int64_t m, const float *gy, const void *idx,
                                    bool i64, float *gx) {
  NN_LOOP(e, m) {
    const int64_t c = e % g.inner, r = e / g.inner % g.D, o = e / (g.inner * g.D);
    float s = 0.0f;
    for (int64_t j = 0; j < g.K; j++)
      if (gather_row(idx, i64, j, g.D) == r)
        s += gy[(o * g.K + j) * g.inner + c];
    gx[e] = s;
  }
}

static void gather_forward(void *state, ar_nn_args *a) {
  (void)state;
  const gather_g g = gather_geom(a);
  const int64_t n = g.outer * g.K * g.inner;
  NN_LAUNCH(a, n, "nn gather forward", gather_fwd_k, g, n, ar_dtype_size(a->in[0].dtype),
            (const char *)a->in[0].p, (const void *)a->in[1].p,
            a->in[1].dtype == AR_DT_I64, (char *)a->out[0].p);
}

static void gather_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const gather_g g = gather_geom(a);
  const int64_t m = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, m, "nn gather backward", gather_bwd_k, g, m, (const float *)a->gout[0].p,
            (const void *)a->in[1].p, a->in[1].dtype == AR_DT_I64, (float *)a->gin[0].p);
}

/* ---- PAD ---------------------------------------------------------------------------
 * f32 x -> y with pad_nd[i] before and pad_nd[AR_NN_MAX_DIMS + i] after each
 * dim i, the constant `scalar` in the padding. */

typedef struct pad_g {
  int nd;
  int64_t in[AR_NN_MAX_DIMS], out[AR_NN_MAX_DIMS], lo[AR_NN_MAX_DIMS];
  float value;
} pad_g;

static pad_g pad_geom(const ar_nn_args *a) {
  pad_g g;
  memset(&g, 0, sizeof g);
  g.nd = a->in[0].shape.nd;
  for (int k = 0; k < g.nd; k++) {
    g.in[k] = a->in[0].shape.d[k];
    g.out[k] = a->out[0].shape.d[k];
    g.lo[k] = a->attr->pad_nd[k];
  }
  g.value = a->attr->scalar;
  return g;
}

/* Output element e's input offset, or -1 in the padding. */
static __device__ __forceinline__ int64_t pad_src(const pad_g &g, int64_t e) {
  int64_t off = 0, stride = 1;
  for (int k = g.nd - 1; k >= 0; k--) {
    const int64_t c = e % g.out[k] - g.lo[k];
    e /= g.out[k];
    if (c < 0 || c >= g.in[k])
      return -1;
    off += c * stride;
    stride *= g.in[k];
  }
  return off;
}

/* Input element i's output offset. */
static __device__ __forceinline__ int64_t pad_dst(const pad_g &g, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int k = g.nd - 1; k >= 0; k--) {
    off += (i % g.in[k] + g.lo[k]) * stride;
    i /= g.in[k];
    stride *= g.out[k];
  }
  return off;
}

static __global__ void pad_fwd_k(pad_g g, int64_t n, const float *x, float *y) {
  NN_LOOP(e, n) {
    const int64_t s = pad_src(g, e);
    y[e] = s < 0 ? g.value : x[s];
  }
}

static __global__ void pad_bwd_k(pad_g g, int64_t m, const float *gy, float *gx) {
  NN_LOOP(i, m) {
    gx[i] = gy[pad_dst(g, i)];
  }
}

static void pad_forward(void *state, ar_nn_args *a) {
  (void)state;
  const pad_g g = pad_geom(a);
  const int64_t n = ar_shape_count(&a->out[0].shape);
  NN_LAUNCH(a, n, "nn pad forward", pad_fwd_k, g, n, (const float *)a->in[0].p,
            (float *)a->out[0].p);
}

static void pad_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const pad_g g = pad_geom(a);
  const int64_t m = ar_shape_count(&a->in[0].shape);
  NN_LAUNCH(a, m, "nn pad backward", pad_bwd_k, g, m, (const float *)a->gout[0].p,
            (float *)a->gin[0].p);
}

/* ---- BCE -------------------------------------------------------------------------
 * logits (N, C), targets (N, C) -> loss (N) = mean_j max(x, 0) - x t +
 * log1p(exp(-|x|)), in double as the host; dlogits = scale (sigmoid(x) - t)
 * / C. */

static __global__ void bce_fwd_k(int64_t n, const float *x, const float *t, float *loss) {
  const int64_t r = blockIdx.x;
  double s = 0.0;
  for (int64_t j = r * n + threadIdx.x; j < (r + 1) * n; j += blockDim.x) {
    const float v = x[j];
    s += (double)(v > 0 ? v : 0.0f) - (double)v * (double)t[j] + log1p(exp(-(double)fabsf(v)));
  }
  s = nn_block_sum(s);
  if (threadIdx.x == 0)
    loss[r] = (float)(s / (double)n);
}

static __global__ void bce_bwd_k(int64_t m, float scale, const float *x, const float *t,
                                 float *gx) {
  NN_LOOP(i, m) {
    gx[i] = scale * (1.0f / (1.0f + expf(-x[i])) - t[i]);
  }
}

static void bce_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t rows = a->in[0].shape.d[0], n = a->in[0].shape.d[1];
  NN_LAUNCH_ROWS(a, rows, "nn bce forward", bce_fwd_k, n, (const float *)a->in[0].p,
                 (const float *)a->in[1].p, (float *)a->out[0].p);
}

static void bce_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  const int64_t rows = a->in[0].shape.d[0], n = a->in[0].shape.d[1];
  NN_LAUNCH(a, rows * n, "nn bce backward", bce_bwd_k, rows * n, a->scale / (float)n,
            (const float *)a->in[0].p, (const float *)a->in[1].p, (float *)a->gin[0].p);
}

void ar__cuda_nn_typed_register(ar_nn_kernel *table) {
  table[AR_NN_GATHER].forward = gather_forward;
  table[AR_NN_GATHER].backward = gather_backward;
  table[AR_NN_PAD].forward = pad_forward;
  table[AR_NN_PAD].backward = pad_backward;
  table[AR_NN_BCE].forward = bce_forward;
  table[AR_NN_BCE].backward = bce_backward;
  table[AR_NN_WHERE].forward = where_forward;
  table[AR_NN_WHERE].backward = where_backward;
  table[AR_NN_EXPAND].forward = expand_forward;
  table[AR_NN_EXPAND].backward = expand_backward;
  table[AR_NN_CAST].forward = cast_forward;
  table[AR_NN_CAST].backward = cast_backward;
}
