/*
 * Host kernels of the nn ops in group "shape" (AR_NN_OP_MAP's third column)
 * that only move data: concat, split, slice, pad, reshape, flatten,
 * transpose (include/accelrt/nn.h states each op).  The group's other ops
 * live in nn_embed.c and nn_attention.c; ar__nn_host_shape_register, at the
 * end, fills the table for all of them.
 *
 * Every op here is f32 only, reads neither its input nor its output in the
 * backward (in_needed 0, out_needed false), and writes each element of
 * each output or input gradient exactly once, so that results do not
 * depend on the thread count.  An axis attribute counts from the end when
 * negative.
 */
#include "host/nn_shape_impl.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

/* dst[r * dst_ld + j] = src[r * src_ld + j] for r < rows, j < len. */
static void copy_rows(int threads, int64_t rows, int64_t len, const float *src, int64_t src_ld,
                      float *dst, int64_t dst_ld) {
  if (rows <= 0 || len <= 0)
    return;
  if (rows == 1 || (src_ld == len && dst_ld == len)) {
    /* One contiguous block: split it into as many pieces as threads. */
    int64_t n = rows * len;
    int nt = ar__nn_team(threads, n);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      int tid = omp_get_thread_num(), nth = omp_get_num_threads();
      int64_t lo = n * tid / nth, hi = n * (tid + 1) / nth;
      if (hi > lo)
        memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
    }
    return;
  }
  int nt = ar__nn_team(threads, rows * len);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++)
    memcpy(dst + r * dst_ld, src + r * src_ld, (size_t)len * sizeof(float));
}

static void fill(int threads, float *x, int64_t n, float v) {
  int nt = ar__nn_team(threads, n);
#pragma omp parallel for simd schedule(static) num_threads(nt) if (parallel: nt > 1)
  for (int64_t i = 0; i < n; i++)
    x[i] = v;
}

/* The product of s's dims in [from, to). */
static int64_t dims_prod(const ar_shape *s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++)
    n *= s->d[i];
  return n;
}

/* axis (negative: from the end) as an index into nd dims, or -1. */
static int norm_axis(int axis, int nd) {
  int a = axis < 0 ? axis + nd : axis;
  return a >= 0 && a < nd ? a : -1;
}

static ar_status need_f32(const char *op, int n_in, const ar_dtype *dt, ar_err *err) {
  for (int i = 0; i < n_in; i++)
    if (dt[i] != AR_DT_F32)
      return ar_errf(err, AR_INVALID, "%s: input %d is %s; this op takes f32 only", op, i,
                     ar_dtype_name(dt[i]));
  return AR_OK;
}

static ar_status need_inputs(const char *op, int n_in, int want, ar_err *err) {
  if (n_in != want)
    return ar_errf(err, AR_INVALID, "%s takes %d input%s, got %d", op, want, want == 1 ? "" : "s",
                   n_in);
  return AR_OK;
}

/* A sig for a pure data-movement op: one output, nothing read back. */
static void sig_move(ar_nn_sig *sig, int n_in) {
  ar__nn_sig_init(sig, n_in);
  sig->in_needed = 0;
  sig->out_needed = false;
  sig->flops = 0;
}

/* ---- concat, split ------------------------------------------------------- */

static ar_status concat_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                              const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP], b1[AR__NN_SHP];
  if (n_in < 1)
    return ar_errf(err, AR_INVALID, "concat needs at least one input, got %d", n_in);
  AR_CHECK(need_f32("concat", n_in, dt, err));
  int nd = in[0].nd, ax = norm_axis(attr->axis, nd);
  if (ax < 0)
    return ar_errf(err, AR_INVALID, "concat along axis %d: input 0 is %s, which has no axis %d",
                   attr->axis, ar__nn_shp(&in[0], b0), attr->axis);
  ar_shape out = in[0];
  for (int i = 1; i < n_in; i++) {
    if (in[i].nd != nd)
      return ar_errf(err, AR_INVALID,
                     "concat along axis %d: input 0 is %s and input %d is %s: the ranks differ",
                     attr->axis, ar__nn_shp(&in[0], b0), i, ar__nn_shp(&in[i], b1));
    for (int d = 0; d < nd; d++)
      if (d != ax && in[i].d[d] != in[0].d[d])
        return ar_errf(err, AR_INVALID,
                       "concat along axis %d: input 0 is %s and input %d is %s: dims other "
                       "than %d must agree",
                       attr->axis, ar__nn_shp(&in[0], b0), i, ar__nn_shp(&in[i], b1), ax);
    out.d[ax] += in[i].d[ax];
  }
  sig_move(sig, n_in);
  ar__nn_sig_out(sig, &out, AR_DT_F32);
  return AR_OK;
}

/* Moves the parts (each of parts[i].shape) to or from the whole along axis
 * (to_whole: concat; else split).  A part with a NULL pointer is skipped,
 * or, when it is a source, reads as zeros. */
static void concat_move(int threads, int axis, int n, ar_tref *parts, float *whole,
                        const ar_shape *wshape, bool to_whole) {
  int ax = norm_axis(axis, wshape->nd);
  int64_t outer = dims_prod(wshape, 0, ax), inner = dims_prod(wshape, ax + 1, wshape->nd);
  int64_t wld = wshape->d[ax] * inner, off = 0;
  for (int i = 0; i < n; i++) {
    int64_t len = parts[i].shape.d[ax] * inner;
    if (!parts[i].p) {
      if (to_whole)
        for (int64_t r = 0; r < outer; r++)
          memset(whole + r * wld + off, 0, (size_t)len * sizeof(float));
    } else if (to_whole) {
      copy_rows(threads, outer, len, parts[i].p, len, whole + off, wld);
    } else {
      copy_rows(threads, outer, len, whole + off, wld, parts[i].p, len);
    }
    off += len;
  }
}

static void concat_forward(void *state, ar_nn_args *a) {
  (void)state;
  concat_move(a->threads, a->attr->axis, a->n_in, a->in, a->out[0].p, &a->out[0].shape, true);
}

static void concat_backward(void *state, ar_nn_args *a) {
  (void)state;
  concat_move(a->threads, a->attr->axis, a->n_in, a->gin, a->gout[0].p, &a->out[0].shape,
              false);
}

static ar_status split_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                             const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP];
  AR_CHECK(need_inputs("split", n_in, 1, err));
  AR_CHECK(need_f32("split", n_in, dt, err));
  int ax = norm_axis(attr->axis, in[0].nd);
  if (ax < 0)
    return ar_errf(err, AR_INVALID, "split along axis %d: the input is %s, which has no axis %d",
                   attr->axis, ar__nn_shp(&in[0], b0), attr->axis);
  if (attr->n_sizes < 1 || attr->n_sizes > AR_NN_MAX_IO)
    return ar_errf(err, AR_INVALID, "split of %s along axis %d into %d parts: give 1 to %d sizes",
                   ar__nn_shp(&in[0], b0), attr->axis, attr->n_sizes, AR_NN_MAX_IO);
  int64_t sum = 0;
  char sizes[AR_NN_MAX_IO * 24] = "";
  size_t at = 0;
  for (int i = 0; i < attr->n_sizes; i++)
    at += (size_t)snprintf(sizes + at, sizeof sizes - at, "%s%lld", i ? "+" : "",
                           (long long)attr->sizes[i]);
  /* Each size checked before the sum (huge ones would overflow it). */
  for (int i = 0; i < attr->n_sizes; i++) {
    if (attr->sizes[i] <= 0 || attr->sizes[i] > in[0].d[ax])
      return ar_errf(err, AR_INVALID,
                     "split of %s along axis %d into %s: size %d is not positive or "
                     "exceeds the axis",
                     ar__nn_shp(&in[0], b0), attr->axis, sizes, i);
    sum += attr->sizes[i];
  }
  if (sum != in[0].d[ax])
    return ar_errf(err, AR_INVALID,
                   "split of %s along axis %d into %s: the sizes sum to %lld, not %lld",
                   ar__nn_shp(&in[0], b0), attr->axis, sizes, (long long)sum,
                   (long long)in[0].d[ax]);
  sig_move(sig, 1);
  for (int i = 0; i < attr->n_sizes; i++) {
    ar_shape o = in[0];
    o.d[ax] = attr->sizes[i];
    ar__nn_sig_out(sig, &o, AR_DT_F32);
  }
  return AR_OK;
}

static void split_forward(void *state, ar_nn_args *a) {
  (void)state;
  concat_move(a->threads, a->attr->axis, a->n_out, a->out, a->in[0].p, &a->in[0].shape, false);
}

static void split_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  concat_move(a->threads, a->attr->axis, a->n_out, a->gout, a->gin[0].p, &a->in[0].shape, true);
}

/* ---- slice ------------------------------------------------------------- */

/* begin and end on a dim of size d: negative counts from the end, both
 * clamped to [0, d] (Python's rule for step 1). */
static void slice_range(const ar_nn_attr *attr, int64_t d, int64_t *b, int64_t *e) {
  int64_t lo = attr->begin < 0 ? attr->begin + d : attr->begin;
  int64_t hi = attr->end < 0 ? attr->end + d : attr->end;
  *b = lo < 0 ? 0 : lo > d ? d : lo;
  *e = hi < 0 ? 0 : hi > d ? d : hi;
}

static ar_status slice_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                             const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP];
  AR_CHECK(need_inputs("slice", n_in, 1, err));
  AR_CHECK(need_f32("slice", n_in, dt, err));
  int ax = norm_axis(attr->axis, in[0].nd);
  if (ax < 0)
    return ar_errf(err, AR_INVALID, "slice along axis %d: the input is %s, which has no axis %d",
                   attr->axis, ar__nn_shp(&in[0], b0), attr->axis);
  int64_t b, e;
  slice_range(attr, in[0].d[ax], &b, &e);
  if (e <= b)
    return ar_errf(err, AR_INVALID,
                   "slice of %s along axis %d from %lld to %lld is empty (dim %lld; begin and "
                   "end count from the end when negative)",
                   ar__nn_shp(&in[0], b0), attr->axis, (long long)attr->begin,
                   (long long)attr->end, (long long)in[0].d[ax]);
  ar_shape o = in[0];
  o.d[ax] = e - b;
  sig_move(sig, 1);
  ar__nn_sig_out(sig, &o, AR_DT_F32);
  return AR_OK;
}

static void slice_geom(const ar_nn_args *a, int64_t *outer, int64_t *len, int64_t *ld,
                       int64_t *off) {
  const ar_shape *s = &a->in[0].shape;
  int ax = norm_axis(a->attr->axis, s->nd);
  int64_t inner = dims_prod(s, ax + 1, s->nd), b, e;
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
  copy_rows(a->threads, outer, len, (const float *)a->in[0].p + off, ld, a->out[0].p, len);
}

static void slice_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (!a->gin[0].p)
    return;
  int64_t outer, len, ld, off;
  slice_geom(a, &outer, &len, &ld, &off);
  fill(a->threads, a->gin[0].p, ar_shape_count(&a->in[0].shape), 0.0f);
  copy_rows(a->threads, outer, len, a->gout[0].p, len, (float *)a->gin[0].p + off, ld);
}

/* ---- pad ------------------------------------------------------------------ */

static ar_status pad_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                           const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP];
  AR_CHECK(need_inputs("pad", n_in, 1, err));
  AR_CHECK(need_f32("pad", n_in, dt, err));
  const ar_shape *s = &in[0];
  if (s->nd < 1)
    return ar_errf(err, AR_INVALID, "pad: the input is a scalar; pad needs at least one dim");
  ar_shape o = *s;
  for (int i = 0; i < AR_NN_MAX_DIMS; i++) {
    int64_t lo = attr->pad_nd[i], hi = attr->pad_nd[AR_NN_MAX_DIMS + i];
    if (i >= s->nd && (lo || hi))
      return ar_errf(err, AR_INVALID, "pad of %s: dim %d is padded by %lld before and %lld "
                     "after, but the input has %d dims",
                     ar__nn_shp(s, b0), i, (long long)lo, (long long)hi, s->nd);
    if (lo < 0 || hi < 0)
      return ar_errf(err, AR_INVALID,
                     "pad of %s: dim %d is padded by %lld before and %lld after; pads must "
                     "not be negative (use slice to crop)",
                     ar__nn_shp(s, b0), i, (long long)lo, (long long)hi);
    if (i < s->nd)
      o.d[i] += lo + hi;
  }
  sig_move(sig, 1);
  ar__nn_sig_out(sig, &o, AR_DT_F32);
  return AR_OK;
}

/* Copies the input's rows (its last dim) to their place inside the padded
 * output (to_out), or back from there into the input's gradient. */
static void pad_move(int threads, const ar_nn_attr *attr, const ar_shape *s, const ar_shape *o,
                     float *inner, float *outer, bool to_out) {
  int nd = s->nd;
  int64_t ostr[AR_NN_MAX_DIMS];
  ostr[nd - 1] = 1;
  for (int i = nd - 2; i >= 0; i--)
    ostr[i] = ostr[i + 1] * o->d[i + 1];
  int64_t len = s->d[nd - 1], count = ar_shape_count(s);
  if (count == 0)
    return;
  int64_t rows = count / len;
  int nt = ar__nn_team(threads, count);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    int64_t rem = r, off = attr->pad_nd[nd - 1];
    for (int i = nd - 2; i >= 0; i--) {
      off += (rem % s->d[i] + attr->pad_nd[i]) * ostr[i];
      rem /= s->d[i];
    }
    if (to_out)
      memcpy(outer + off, inner + r * len, (size_t)len * sizeof(float));
    else
      memcpy(inner + r * len, outer + off, (size_t)len * sizeof(float));
  }
}

static void pad_forward(void *state, ar_nn_args *a) {
  (void)state;
  fill(a->threads, a->out[0].p, ar_shape_count(&a->out[0].shape), a->attr->scalar);
  pad_move(a->threads, a->attr, &a->in[0].shape, &a->out[0].shape, a->in[0].p, a->out[0].p,
           true);
}

static void pad_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    pad_move(a->threads, a->attr, &a->in[0].shape, &a->out[0].shape, a->gin[0].p, a->gout[0].p,
             false);
}

/* ---- reshape, flatten ------------------------------------------------------ */

static ar_status reshape_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP], b1[AR__NN_SHP];
  AR_CHECK(need_inputs("reshape", n_in, 1, err));
  AR_CHECK(need_f32("reshape", n_in, dt, err));
  const ar_shape *s = &in[0], *t = &attr->shape;
  if (t->nd < 0 || t->nd > AR_NN_MAX_DIMS)
    return ar_errf(err, AR_INVALID, "reshape: the target has %d dims (0 to %d)", t->nd,
                   AR_NN_MAX_DIMS);
  /* The target as written, for messages ("0x-1x16"). */
  char want[AR__NN_SHP];
  ar__nn_shp(t, want);
  ar_shape o = *t;
  int infer_at = -1;
  int64_t known = 1;
  for (int i = 0; i < t->nd; i++) {
    if (t->d[i] == 0) {
      if (i >= s->nd)
        return ar_errf(err, AR_INVALID,
                       "reshape of %s to %s: dim %d is 0 (copy the input's) but the input has "
                       "only %d dims",
                       ar__nn_shp(s, b0), want, i, s->nd);
      o.d[i] = s->d[i];
    } else if (t->d[i] == -1) {
      if (infer_at >= 0)
        return ar_errf(err, AR_INVALID, "reshape of %s to %s: only one dim may be -1",
                       ar__nn_shp(s, b0), want);
      infer_at = i;
      continue;
    } else if (t->d[i] < 0) {
      return ar_errf(err, AR_INVALID, "reshape of %s to %s: dim %d is %lld",
                     ar__nn_shp(s, b0), want, i, (long long)t->d[i]);
    }
    known *= o.d[i];
  }
  int64_t count = ar_shape_count(s);
  if (infer_at >= 0) {
    if (known == 0 || count % known)
      return ar_errf(err, AR_INVALID,
                     "reshape of %s (%lld elements) to %s: %lld is not a multiple of %lld",
                     ar__nn_shp(s, b0), (long long)count, want, (long long)count,
                     (long long)known);
    o.d[infer_at] = count / known;
  }
  if (ar_shape_count(&o) != count)
    return ar_errf(err, AR_INVALID, "reshape of %s (%lld elements) to %s (%lld elements)",
                   ar__nn_shp(s, b0), (long long)count, ar__nn_shp(&o, b1),
                   (long long)ar_shape_count(&o));
  sig_move(sig, 1);
  ar__nn_sig_out(sig, &o, AR_DT_F32);
  return AR_OK;
}

static ar_status flatten_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                               const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  (void)attr;
  AR_CHECK(need_inputs("flatten", n_in, 1, err));
  AR_CHECK(need_f32("flatten", n_in, dt, err));
  if (in[0].nd < 1)
    return ar_errf(err, AR_INVALID, "flatten: the input is a scalar; it needs a batch dim");
  ar_shape o = ar__nn_shape(2, (int64_t[]){in[0].d[0], dims_prod(&in[0], 1, in[0].nd)});
  sig_move(sig, 1);
  ar__nn_sig_out(sig, &o, AR_DT_F32);
  return AR_OK;
}

/* Reshape and flatten: the same elements in the same order. */
static void copy_forward(void *state, ar_nn_args *a) {
  (void)state;
  copy_rows(a->threads, 1, ar_shape_count(&a->in[0].shape), a->in[0].p, 0, a->out[0].p, 0);
}

static void copy_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    copy_rows(a->threads, 1, ar_shape_count(&a->in[0].shape), a->gout[0].p, 0, a->gin[0].p, 0);
}

/* ---- transpose ------------------------------------------------------------- */

static ar_status transpose_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                                 const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  char b0[AR__NN_SHP];
  AR_CHECK(need_inputs("transpose", n_in, 1, err));
  AR_CHECK(need_f32("transpose", n_in, dt, err));
  const ar_shape *s = &in[0];
  bool seen[AR_NN_MAX_DIMS] = {false};
  char perm[AR_NN_MAX_DIMS * 12] = "";
  size_t at = 0;
  for (int i = 0; i < s->nd; i++)
    at += (size_t)snprintf(perm + at, sizeof perm - at, "%s%d", i ? "," : "", attr->perm[i]);
  ar_shape o = *s;
  for (int i = 0; i < s->nd; i++) {
    int p = attr->perm[i];
    if (p < 0 || p >= s->nd || seen[p])
      return ar_errf(err, AR_INVALID, "transpose of %s with perm %s: not a permutation of 0..%d",
                     ar__nn_shp(s, b0), perm, s->nd - 1);
    seen[p] = true;
    o.d[i] = s->d[p];
  }
  sig_move(sig, 1);
  ar__nn_sig_out(sig, &o, AR_DT_F32);
  return AR_OK;
}

/* out = x permuted (scatter false), or gx = gout permuted back (scatter
 * true): element (i_0..i_{nd-1}) of the output is element i_k at dim
 * perm[k] of the input.  Each thread owns whole rows of the output. */
static void permute(int threads, const ar_shape *s, const int *perm, float *x, float *y,
                    bool scatter) {
  int nd = s->nd;
  int64_t count = ar_shape_count(s);
  if (count == 0)
    return;
  if (nd == 0) {
    if (scatter)
      x[0] = y[0];
    else
      y[0] = x[0];
    return;
  }
  int64_t istr[AR_NN_MAX_DIMS], od[AR_NN_MAX_DIMS], ps[AR_NN_MAX_DIMS];
  istr[nd - 1] = 1;
  for (int i = nd - 2; i >= 0; i--)
    istr[i] = istr[i + 1] * s->d[i + 1];
  for (int i = 0; i < nd; i++) {
    od[i] = s->d[perm[i]];
    ps[i] = istr[perm[i]];
  }
  int64_t len = od[nd - 1], step = ps[nd - 1], rows = count / len;
  int nt = ar__nn_team(threads, count);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; r++) {
    int64_t rem = r, off = 0;
    for (int i = nd - 2; i >= 0; i--) {
      off += (rem % od[i]) * ps[i];
      rem /= od[i];
    }
    float *yr = y + r * len, *xr = x + off;
    if (scatter)
      for (int64_t j = 0; j < len; j++)
        xr[j * step] = yr[j];
    else
      for (int64_t j = 0; j < len; j++)
        yr[j] = xr[j * step];
  }
}

static void transpose_forward(void *state, ar_nn_args *a) {
  (void)state;
  permute(a->threads, &a->in[0].shape, a->attr->perm, a->in[0].p, a->out[0].p, false);
}

static void transpose_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    permute(a->threads, &a->in[0].shape, a->attr->perm, a->gin[0].p, a->gout[0].p, true);
}

/* ---- the table ------------------------------------------------------------ */

/* dst (cols) = the sum of src's rows, in row order per column; columns
 * split among the threads. */
void ar__nn_col_sum(int threads, int64_t rows, int64_t cols, const float *src, float *dst) {
  int nt = ar__nn_team(threads, rows * cols);
  if (cols < 16 * nt)
    nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    int64_t c0 = cols * tid / nth, c1 = cols * (tid + 1) / nth;
    memset(dst + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
      const float *sr = src + r * cols;
#pragma omp simd
      for (int64_t j = c0; j < c1; j++)
        dst[j] += sr[j];
    }
  }
}

void ar__nn_host_shape_register(ar_nn_kernel *table) {
  table[AR_NN_CONCAT] = (ar_nn_kernel){
      .infer = concat_infer, .forward = concat_forward, .backward = concat_backward};
  table[AR_NN_SPLIT] =
      (ar_nn_kernel){.infer = split_infer, .forward = split_forward, .backward = split_backward};
  table[AR_NN_SLICE] =
      (ar_nn_kernel){.infer = slice_infer, .forward = slice_forward, .backward = slice_backward};
  table[AR_NN_PAD] =
      (ar_nn_kernel){.infer = pad_infer, .forward = pad_forward, .backward = pad_backward};
  table[AR_NN_RESHAPE] =
      (ar_nn_kernel){.infer = reshape_infer, .forward = copy_forward, .backward = copy_backward};
  table[AR_NN_FLATTEN] =
      (ar_nn_kernel){.infer = flatten_infer, .forward = copy_forward, .backward = copy_backward};
  table[AR_NN_TRANSPOSE] = (ar_nn_kernel){
      .infer = transpose_infer, .forward = transpose_forward, .backward = transpose_backward};
  ar__nn_host_embed_register(table);
  ar__nn_host_attention_register(table);
  ar__nn_host_gather_register(table);
}
