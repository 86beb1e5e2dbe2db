/*
 * Host kernel of GATHER (group "shape"; include/accelrt/nn.h states it):
 * rows of data picked by run-time indices along one axis, any element
 * type, the gradient (f32) added back into the picked rows.
 *
 * data is (outer, D, inner) around the axis, the output (outer, K, inner)
 * for K indices.  The forward copies one inner row per (outer, index);
 * the backward zeroes the data's gradient and adds each output row into
 * its row, threads owning disjoint column blocks of the inner dim so that
 * repeated indices are summed by one thread in index order (the same bits
 * for any thread count).
 */
#include "host/nn_shape_impl.h"

#include <string.h>

typedef struct gather_geom {
  int64_t outer, D, inner, K;
} gather_geom;

static int gather_axis(const ar_nn_attr *attr, int nd) {
  int a = attr->axis < 0 ? attr->axis + nd : attr->axis;
  return a >= 0 && a < nd ? a : -1;
}

static gather_geom geom_of(const ar_nn_args *a) {
  const ar_shape *s = &a->in[0].shape;
  int ax = gather_axis(a->attr, s->nd);
  gather_geom g = {1, s->d[ax], 1, ar_shape_count(&a->in[1].shape)};
  for (int k = 0; k < ax; k++)
    g.outer *= s->d[k];
  for (int k = ax + 1; k < s->nd; k++)
    g.inner *= s->d[k];
  return g;
}

static ar_status gather_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                              const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP], b1[AR__NN_SHP];
  if (n_in != 2)
    return ar_errf(err, AR_INVALID, "gather takes 2 inputs (data, indices), got %d", n_in);
  if (dt[1] != AR_DT_I64 && dt[1] != AR_DT_I32)
    return ar_errf(err, AR_INVALID, "gather: the indices are %s; give i64 or i32",
                   ar_dtype_name(dt[1]));
  int ax = gather_axis(attr, in[0].nd);
  if (ax < 0)
    return ar_errf(err, AR_INVALID, "gather along axis %d: the data is %s, which has no axis %d",
                   attr->axis, ar__nn_shp(&in[0], b0), attr->axis);
  int nd = in[0].nd - 1 + in[1].nd;
  if (nd > AR_NN_MAX_DIMS)
    return ar_errf(err, AR_INVALID,
                   "gather of %s by indices %s along axis %d: the result would have %d dims "
                   "(at most %d)",
                   ar__nn_shp(&in[0], b0), ar__nn_shp(&in[1], b1), attr->axis, nd, AR_NN_MAX_DIMS);
  ar_shape o = {0};
  o.nd = nd;
  int k = 0;
  for (int i = 0; i < ax; i++)
    o.d[k++] = in[0].d[i];
  for (int i = 0; i < in[1].nd; i++)
    o.d[k++] = in[1].d[i];
  for (int i = ax + 1; i < in[0].nd; i++)
    o.d[k++] = in[0].d[i];
  ar__nn_sig_init(sig, 2);
  ar__nn_sig_out(sig, &o, dt[0]);
  sig->in_needed = 2u; /* the indices */
  sig->out_needed = false;
  sig->no_grad = dt[0] == AR_DT_F32 ? 2u : 3u;
  sig->flops = 0;
  return AR_OK;
}

/* Index j as a row of the axis, or -1 when outside it. */
static int64_t row_of(const ar_tref *idx, int64_t j, int64_t D) {
  int64_t v = idx->dtype == AR_DT_I64 ? ((const int64_t *)idx->p)[j] : ((const int32_t *)idx->p)[j];
  if (v < 0)
    v += D;
  return v >= 0 && v < D ? v : -1;
}

static void gather_forward(void *state, ar_nn_args *a) {
  (void)state;
  const gather_geom g = geom_of(a);
  const size_t es = ar_dtype_size(a->in[0].dtype), row = (size_t)g.inner * es;
  const char *x = a->in[0].p;
  char *y = a->out[0].p;
  const int64_t n = g.outer * g.K;
  const int nt = ar__nn_team(a->threads, n * g.inner);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < n; t++) {
    const int64_t o = t / g.K, r = row_of(&a->in[1], t % g.K, g.D);
    char *dst = y + (size_t)t * row;
    if (r < 0)
      memset(dst, 0, row);
    else
      memcpy(dst, x + ((size_t)o * (size_t)g.D + (size_t)r) * row, row);
  }
}

/* Columns of the inner dim a thread owns in the backward. */
#define GATHER_COLS 64

static void gather_backward(void *state, ar_nn_args *a) {
  (void)state;
  float *gx = a->gin[0].p;
  if (!gx)
    return;
  const gather_geom g = geom_of(a);
  const float *gy = a->gout[0].p;
  memset(gx, 0, (size_t)ar_shape_count(&a->in[0].shape) * sizeof(float));
  const int64_t nb = (g.inner + GATHER_COLS - 1) / GATHER_COLS, tasks = g.outer * nb;
  const int nt = ar__nn_team(a->threads, g.outer * g.K * g.inner);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < tasks; t++) {
    const int64_t o = t / nb, c0 = t % nb * GATHER_COLS;
    const int64_t w = g.inner - c0 < GATHER_COLS ? g.inner - c0 : GATHER_COLS;
    for (int64_t j = 0; j < g.K; j++) {
      const int64_t r = row_of(&a->in[1], j, g.D);
      if (r < 0)
        continue;
      const float *restrict src = gy + (o * g.K + j) * g.inner + c0;
      float *restrict dst = gx + (o * g.D + r) * g.inner + c0;
#pragma omp simd
      for (int64_t q = 0; q < w; q++)
        dst[q] += src[q];
    }
  }
}

void ar__nn_host_gather_register(ar_nn_kernel *table) {
  table[AR_NN_GATHER] =
      (ar_nn_kernel){.infer = gather_infer, .forward = gather_forward, .backward = gather_backward};
}
