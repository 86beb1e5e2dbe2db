/*
 * Host kernels of the token ops of the nn group "shape": embedding,
 * posembed, dropout, mask (include/accelrt/nn.h states each op).
 *
 * Determinism: every output element is written by one thread in a fixed
 * order.  The gradients that sum over rows (embedding's table, posembed's
 * P) give each thread a slice of columns and walk all rows in order, so
 * the sums do not depend on the thread count either.
 */
#include "host/nn_shape_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static ar_status need_ids(const char *op, int n_in, const ar_shape *in, const ar_dtype *dt,
                          ar_err *err) {
  char b0[AR__NN_SHP];
  if (n_in != 1)
    return ar_errf(err, AR_INVALID, "%s takes 1 input (the ids), got %d", op, n_in);
  if (dt[0] != AR_DT_I64 && dt[0] != AR_DT_I32)
    return ar_errf(err, AR_INVALID, "%s: the ids %s are %s; they must be i64 or i32", op,
                   ar__nn_shp(&in[0], b0), ar_dtype_name(dt[0]));
  if (in[0].nd < 1 || in[0].nd >= AR_NN_MAX_DIMS)
    return ar_errf(err, AR_INVALID, "%s: the ids are %s; they need 1 to %d dims", op,
                   ar__nn_shp(&in[0], b0), AR_NN_MAX_DIMS - 1);
  return AR_OK;
}

static inline int64_t id_at(const ar_tref *ids, int64_t i) {
  return ids->dtype == AR_DT_I64 ? ((const int64_t *)ids->p)[i]
                                 : (int64_t)((const int32_t *)ids->p)[i];
}

/* The columns [*c0, *c1) of `cols` that thread tid of nth owns. */
static void col_slice(int64_t cols, int tid, int nth, int64_t *c0, int64_t *c1) {
  *c0 = cols * tid / nth;
  *c1 = cols * (tid + 1) / nth;
}

/* ---- embedding ------------------------------------------------------------ */

static ar_status embedding_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                                 const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP];
  AR_CHECK(need_ids("embedding", n_in, in, dt, err));
  if (attr->vocab <= 0 || attr->out <= 0)
    return ar_errf(err, AR_INVALID,
                   "embedding of ids %s with vocab %lld and out %lld: both must be positive",
                   ar__nn_shp(&in[0], b0), (long long)attr->vocab, (long long)attr->out);
  ar__nn_sig_init(sig, 1);
  sig->in_needed = 1u; /* the ids say which rows of the table get gradient */
  sig->out_needed = false;
  sig->no_grad = 1u;
  sig->flops = 0; /* a gather */
  ar_shape t = ar__nn_shape(2, (int64_t[]){attr->vocab, attr->out});
  ar__nn_sig_param(sig, "table", &t, AR_NN_INIT_NORMAL, true);
  sig->param_std[0] = 1.0f;
  ar_shape o = in[0];
  o.d[o.nd++] = attr->out;
  ar__nn_sig_out(sig, &o, AR_DT_F32);
  if (attr->sparse_grad) { /* the distinct ids of the batch */
    ar_shape r = ar__nn_shape(1, (int64_t[]){ar_shape_count(&in[0]) + 1});
    ar__nn_sig_aux(sig, &r, AR_DT_I64);
  }
  return AR_OK;
}

static int cmp_i64(const void *pa, const void *pb) {
  const int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  return a < b ? -1 : a > b;
}

/* rows[0] = the count of distinct ids, rows[1..] those ids ascending. */
static void distinct_ids(const ar_tref *ids, int64_t n, int64_t *rows) {
  int64_t *r = rows + 1, k = 0;
  for (int64_t i = 0; i < n; i++)
    r[i] = id_at(ids, i);
  qsort(r, (size_t)n, sizeof *r, cmp_i64);
  for (int64_t i = 0; i < n; i++)
    if (k == 0 || r[i] != r[k - 1])
      r[k++] = r[i];
  rows[0] = k;
}

static void embedding_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_tref *ids = &a->in[0];
  int64_t rows = ar_shape_count(&ids->shape), d = a->attr->out, vocab = a->attr->vocab;
  const float *table = a->param[0].p;
  float *y = a->out[0].p;
  int nt = ar__nn_team(a->threads, rows * d);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    int64_t id = id_at(ids, r);
    /* The engine checked the ids on the host; one out of range here is a
     * bug, and reading past the table would hide it. */
    AR_ASSERT(id >= 0 && id < vocab);
    memcpy(y + r * d, table + id * d, (size_t)d * sizeof(float));
  }
  if (a->training && a->attr->sparse_grad)
    distinct_ids(ids, rows, a->aux[0].p);
}

static void embedding_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_tref *ids = &a->in[0];
  int64_t rows = ar_shape_count(&ids->shape), d = a->attr->out, vocab = a->attr->vocab;
  const float *gy = a->gout[0].p;
  float *gt = a->gparam[0].p;
  /* Zero, then add every row's gradient into its id's row, rows in order:
   * repeated ids sum.  Sparse: only the rows of the distinct ids are
   * zeroed (the forward listed them). */
  const int64_t *list = a->attr->sparse_grad ? a->aux[0].p : NULL;
  const int64_t zrows = list ? list[0] : vocab;
  int nt = ar__nn_team(a->threads, (zrows + rows) * d);
  if (d < 16 * nt)
    nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t c0, c1;
    col_slice(d, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
    for (int64_t v = 0; v < zrows; v++)
      memset(gt + (list ? list[1 + v] : v) * d + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
      float *dst = gt + id_at(ids, r) * d;
      const float *src = gy + r * d;
#pragma omp simd
      for (int64_t c = c0; c < c1; c++)
        dst[c] += src[c];
    }
  }
}

/* ---- posembed ------------------------------------------------------------- */

static ar_status posembed_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                                const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  (void)attr;
  char b0[AR__NN_SHP];
  if (n_in != 1)
    return ar_errf(err, AR_INVALID, "posembed takes 1 input, got %d", n_in);
  if (dt[0] != AR_DT_F32)
    return ar_errf(err, AR_INVALID, "posembed: the input is %s; it must be f32",
                   ar_dtype_name(dt[0]));
  if (in[0].nd != 3)
    return ar_errf(err, AR_INVALID, "posembed: the input is %s; it must be (N, T, D)",
                   ar__nn_shp(&in[0], b0));
  ar__nn_sig_init(sig, 1);
  sig->in_needed = 0;
  sig->out_needed = false;
  sig->flops = (double)ar_shape_count(&in[0]);
  ar_shape p = ar__nn_shape(2, (int64_t[]){in[0].d[1], in[0].d[2]});
  ar__nn_sig_param(sig, "P", &p, AR_NN_INIT_NORMAL, true);
  sig->param_std[0] = 0.02f;
  ar__nn_sig_out(sig, &in[0], AR_DT_F32);
  return AR_OK;
}

static void posembed_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *s = &a->in[0].shape;
  int64_t n = s->d[0], td = s->d[1] * s->d[2];
  const float *x = a->in[0].p, *p = a->param[0].p;
  float *y = a->out[0].p;
  int nt = ar__nn_team(a->threads, n * td);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t b = 0; b < n; b++) {
#pragma omp simd
    for (int64_t j = 0; j < td; j++)
      y[b * td + j] = x[b * td + j] + p[j];
  }
}

static void posembed_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *s = &a->in[0].shape;
  int64_t n = s->d[0], td = s->d[1] * s->d[2];
  const float *gy = a->gout[0].p;
  ar__nn_col_sum(a->threads, n, td, gy, a->gparam[0].p);
  if (a->gin[0].p)
    memcpy(a->gin[0].p, gy, (size_t)(n * td) * sizeof(float));
}

/* ---- dropout -------------------------------------------------------------- */

/* SplitMix64's finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom
 * number generators", OOPSLA 2014): a counter-based generator, so that
 * element i's draw depends on (seed, i) only, whatever the threads. */
static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static ar_status dropout_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP];
  if (n_in != 1)
    return ar_errf(err, AR_INVALID, "dropout takes 1 input, got %d", n_in);
  if (dt[0] != AR_DT_F32)
    return ar_errf(err, AR_INVALID, "dropout: the input is %s; it must be f32",
                   ar_dtype_name(dt[0]));
  if (!(attr->p >= 0.0f && attr->p < 1.0f))
    return ar_errf(err, AR_INVALID, "dropout of %s with p %g: p must be in [0, 1)",
                   ar__nn_shp(&in[0], b0), (double)attr->p);
  ar__nn_sig_init(sig, 1);
  sig->in_needed = 0; /* the mask says everything */
  sig->out_needed = false;
  sig->flops = (double)ar_shape_count(&in[0]);
  ar__nn_sig_out(sig, &in[0], AR_DT_F32);
  ar__nn_sig_aux(sig, &in[0], AR_DT_U8);
  return AR_OK;
}

static void dropout_forward(void *state, ar_nn_args *a) {
  (void)state;
  int64_t n = ar_shape_count(&a->in[0].shape);
  const float *x = a->in[0].p;
  float *y = a->out[0].p;
  int nt = ar__nn_team(a->threads, n);
  if (!a->training) {
#pragma omp parallel for simd schedule(static) num_threads(nt) if (parallel: nt > 1)
    for (int64_t i = 0; i < n; i++)
      y[i] = x[i];
    return;
  }
  uint8_t *mask = a->aux[0].p;
  /* Element i is dropped when the top 32 bits of its draw fall below
   * p * 2^32 (p < 1: the threshold fits). */
  const uint64_t thr = (uint64_t)((double)a->attr->p * 4294967296.0);
  const float scale = 1.0f / (1.0f - a->attr->p);
  const uint64_t key = mix64(a->seed ^ 0x5DEECE66Dull);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; i++) {
    uint64_t h = mix64(key + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1));
    uint8_t keep = (h >> 32) >= thr;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

static void dropout_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  int64_t n = ar_shape_count(&a->in[0].shape);
  const uint8_t *mask = a->aux[0].p;
  const float *gy = a->gout[0].p;
  float *gx = a->gin[0].p;
  const float scale = 1.0f / (1.0f - a->attr->p);
  int nt = ar__nn_team(a->threads, n);
#pragma omp parallel for simd schedule(static) num_threads(nt) if (parallel: nt > 1)
  for (int64_t i = 0; i < n; i++)
    gx[i] = mask[i] ? gy[i] * scale : 0.0f;
}

/* ---- mask ----------------------------------------------------------------- */

static ar_status mask_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                            const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  (void)attr;
  AR_CHECK(need_ids("mask", n_in, in, dt, err));
  ar__nn_sig_init(sig, 1);
  sig->in_needed = 0;
  sig->out_needed = false;
  sig->no_grad = 1u;
  sig->flops = 0;
  ar__nn_sig_out(sig, &in[0], AR_DT_F32);
  return AR_OK;
}

static void mask_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_tref *ids = &a->in[0];
  int64_t n = ar_shape_count(&ids->shape), pad = a->attr->pad_id;
  float *y = a->out[0].p;
  int nt = ar__nn_team(a->threads, n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; i++)
    y[i] = id_at(ids, i) != pad ? 1.0f : 0.0f;
}

/* The ids take no gradient: nothing to do. */
static void mask_backward(void *state, ar_nn_args *a) {
  (void)state;
  (void)a;
}

void ar__nn_host_embed_register(ar_nn_kernel *table) {
  table[AR_NN_EMBEDDING] = (ar_nn_kernel){
      .infer = embedding_infer, .forward = embedding_forward, .backward = embedding_backward};
  table[AR_NN_POSEMBED] = (ar_nn_kernel){
      .infer = posembed_infer, .forward = posembed_forward, .backward = posembed_backward};
  table[AR_NN_DROPOUT] = (ar_nn_kernel){
      .infer = dropout_infer, .forward = dropout_forward, .backward = dropout_backward};
  table[AR_NN_MASK] =
      (ar_nn_kernel){.infer = mask_infer, .forward = mask_forward, .backward = mask_backward};
}
