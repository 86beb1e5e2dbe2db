/*
 * Folding of data movement (fold_impl.h): reshapes, slices, transposes,
 * concatenation, gathers, broadcasts, ConstantOfShape, Range, splits;
 * reductions, Clip, Size and Tile, on host tensors of any importable type.
 */
#include "fold_impl.h"

#include <math.h>
#include <string.h>

/* ---- data movement ---------------------------------------------------------------- */

/* out = x's data under a new shape. */
static ar_status same_data(fold_ctx *c, const ar_onnx_tensor *x, const ar_shape *s) {
  AR_CHECK(ar__onnx_tensor_new(c->m, s, x->dtype, &c->out[0], c->err));
  memcpy(c->out[0].data, x->data, x->bytes);
  return AR_OK;
}

ar_status ar__onnx_fold_reshape_like(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  int64_t v[AR_NN_MAX_DIMS + 1];
  int n;
  ar_shape s = x->shape;
  if (!strcmp(c->op, "Reshape")) {
    AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 1, "shape", v, AR_NN_MAX_DIMS, &n, c->err));
    AR_CHECK(ar__onnx_reshape_shape(&x->shape, v, n, ar__onnx_attr_i(c->node, "allowzero", 0) != 0,
                                    &s, c->err));
  } else if (!strcmp(c->op, "Flatten")) {
    AR_CHECK(ar__onnx_flatten_shape(&x->shape, ar__onnx_attr_i(c->node, "axis", 1), &s, c->err));
  } else if (!strcmp(c->op, "Unsqueeze")) {
    AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 1, "axes", v, AR_NN_MAX_DIMS, &n, c->err));
    AR_CHECK(ar__onnx_unsqueeze_shape(&x->shape, v, n < 0 ? 0 : n, &s, c->err));
  } else if (!strcmp(c->op, "Squeeze")) {
    AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 1, "axes", v, AR_NN_MAX_DIMS, &n, c->err));
    AR_CHECK(ar__onnx_squeeze_shape(&x->shape, v, n, &s, c->err));
  }
  AR_CHECK(same_data(c, x, &s));
  if (!strcmp(c->op, "Dropout") && c->n_out > 1) { /* inference: the mask is all true */
    AR_CHECK(ar__onnx_tensor_new(c->m, &x->shape, AR_DT_BOOL, &c->out[1], c->err));
    memset(c->out[1].data, 1, c->out[1].bytes);
  }
  return AR_OK;
}

/* Copies an n-d block: out element (i_0..) = x element (start_k + i_k
 * step_k), by a general index walk (or gathers indices along one axis
 * when idx is given). */
static void strided_copy(const ar_onnx_tensor *x, const int64_t *start, const int64_t *step,
                         ar_onnx_tensor *out) {
  const int nd = x->shape.nd;
  const size_t es = ar_dtype_size(x->dtype);
  int64_t xs[AR_NN_MAX_DIMS];
  int64_t acc = 1;
  for (int k = nd - 1; k >= 0; k--) {
    xs[k] = acc;
    acc *= x->shape.d[k];
  }
  const int64_t n = ar_shape_count(&out->shape);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, off = 0;
    for (int k = nd - 1; k >= 0; k--) {
      off += (start[k] + (r % out->shape.d[k]) * step[k]) * xs[k];
      r /= out->shape.d[k];
    }
    memcpy((char *)out->data + i * es, (const char *)x->data + off * es, es);
  }
}

ar_status ar__onnx_fold_slice(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  int64_t st[AR_NN_MAX_DIMS], en[AR_NN_MAX_DIMS], ax[AR_NN_MAX_DIMS], sp[AR_NN_MAX_DIMS];
  int ns, ne, na, np;
  AR_CHECK(
      ar__onnx_ints_arg(c->node, c->in, c->n_in, 1, "starts", st, AR_NN_MAX_DIMS, &ns, c->err));
  AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 2, "ends", en, AR_NN_MAX_DIMS, &ne, c->err));
  AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 3, "axes", ax, AR_NN_MAX_DIMS, &na, c->err));
  AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 4, NULL, sp, AR_NN_MAX_DIMS, &np, c->err));
  if (ns < 0 || ns != ne || (na >= 0 && na != ns) || (np >= 0 && np != ns))
    return ar_errf(c->err, AR_INVALID, "starts, ends, axes and steps differ in length");
  ar__onnx_slice_t s;
  AR_CHECK(
      ar__onnx_slice(&x->shape, st, en, na >= 0 ? ax : NULL, np >= 0 ? sp : NULL, ns, &s, c->err));
  ar_shape o = x->shape;
  for (int k = 0; k < o.nd; k++)
    o.d[k] = s.count[k];
  AR_CHECK(ar__onnx_tensor_new(c->m, &o, x->dtype, &c->out[0], c->err));
  strided_copy(x, s.start, s.step, &c->out[0]);
  return AR_OK;
}

ar_status ar__onnx_fold_transpose(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  const int nd = x->shape.nd;
  int64_t perm[AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(
      ar__onnx_ints_arg(c->node, c->in, c->n_in, -1, "perm", perm, AR_NN_MAX_DIMS, &n, c->err));
  if (n < 0)
    for (int k = 0; k < nd; k++)
      perm[k] = nd - 1 - k;
  else if (n != nd)
    return ar_errf(c->err, AR_INVALID, "perm has %d entries for %d dims", n, nd);
  ar_shape o = x->shape;
  int64_t xs[AR_NN_MAX_DIMS], acc = 1;
  for (int k = nd - 1; k >= 0; k--) {
    xs[k] = acc;
    acc *= x->shape.d[k];
  }
  bool seen[AR_NN_MAX_DIMS] = {false};
  for (int k = 0; k < nd; k++) {
    /* Each axis once: a repeated one would read past the data. */
    if (perm[k] < 0 || perm[k] >= nd || seen[perm[k]])
      return ar_errf(c->err, AR_INVALID, "perm is not a permutation of 0..%d", nd - 1);
    seen[perm[k]] = true;
    o.d[k] = x->shape.d[perm[k]];
  }
  AR_CHECK(ar__onnx_tensor_new(c->m, &o, x->dtype, &c->out[0], c->err));
  const size_t es = ar_dtype_size(x->dtype);
  for (int64_t i = 0; i < ar_shape_count(&o); i++) {
    int64_t r = i, off = 0;
    for (int k = nd - 1; k >= 0; k--) {
      off += (r % o.d[k]) * xs[perm[k]];
      r /= o.d[k];
    }
    memcpy((char *)c->out[0].data + i * es, (const char *)x->data + off * es, es);
  }
  return AR_OK;
}

ar_status ar__onnx_fold_concat(fold_ctx *c) {
  const ar_onnx_tensor *x0 = arg(c, 0);
  int ax = 0;
  if (x0->shape.nd == 0)
    return ar_errf(c->err, AR_INVALID, "Concat of scalars (its inputs have an axis to join)");
  AR_CHECK(ar__onnx_axis(ar__onnx_attr_i(c->node, "axis", 0), x0->shape.nd, &ax, c->err));
  ar_shape o = x0->shape;
  o.d[ax] = 0;
  for (int i = 0; i < c->n_in; i++) {
    const ar_onnx_tensor *x = arg(c, i);
    if (x->shape.nd != o.nd || x->dtype != x0->dtype)
      return ar_errf(c->err, AR_INVALID, "inputs of different ranks or types");
    for (int k = 0; k < o.nd; k++)
      if (k != ax && x->shape.d[k] != o.d[k])
        return ar_errf(c->err, AR_INVALID, "inputs differ in dims other than the axis");
    o.d[ax] += x->shape.d[ax];
  }
  AR_CHECK(ar__onnx_tensor_new(c->m, &o, x0->dtype, &c->out[0], c->err));
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < ax; k++)
    outer *= o.d[k];
  for (int k = ax + 1; k < o.nd; k++)
    inner *= o.d[k];
  const size_t es = ar_dtype_size(x0->dtype);
  char *dst = c->out[0].data;
  for (int64_t r = 0; r < outer; r++)
    for (int i = 0; i < c->n_in; i++) {
      const ar_onnx_tensor *x = arg(c, i);
      size_t len = (size_t)(x->shape.d[ax] * inner) * es;
      memcpy(dst, (const char *)x->data + (size_t)r * len, len);
      dst += len;
    }
  return AR_OK;
}

ar_status ar__onnx_fold_gather(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0), *idx = arg(c, 1);
  int ax = 0;
  if (x->shape.nd == 0)
    return ar_errf(c->err, AR_INVALID, "Gather from a scalar (the data needs an axis)");
  AR_CHECK(ar__onnx_axis(ar__onnx_attr_i(c->node, "axis", 0), x->shape.nd, &ax, c->err));
  if (idx->dtype != AR_DT_I64 && idx->dtype != AR_DT_I32)
    return ar_errf(c->err, AR_INVALID, "the indices are %s", ar_dtype_name(idx->dtype));
  ar_shape o = {0};
  o.nd = x->shape.nd - 1 + idx->shape.nd;
  if (o.nd > AR_NN_MAX_DIMS)
    return ar_errf(c->err, AR_UNSUPPORTED, "the result would have %d dims", o.nd);
  int q = 0;
  for (int k = 0; k < ax; k++)
    o.d[q++] = x->shape.d[k];
  for (int k = 0; k < idx->shape.nd; k++)
    o.d[q++] = idx->shape.d[k];
  for (int k = ax + 1; k < x->shape.nd; k++)
    o.d[q++] = x->shape.d[k];
  AR_CHECK(ar__onnx_tensor_new(c->m, &o, x->dtype, &c->out[0], c->err));
  int64_t outer = 1, inner = 1, D = x->shape.d[ax], K = ar_shape_count(&idx->shape);
  for (int k = 0; k < ax; k++)
    outer *= x->shape.d[k];
  for (int k = ax + 1; k < x->shape.nd; k++)
    inner *= x->shape.d[k];
  const size_t row = (size_t)inner * ar_dtype_size(x->dtype);
  for (int64_t j = 0; j < K; j++) {
    int64_t r = ar__onnx_get_i(idx, j);
    if (r < -D || r >= D)
      return ar_errf(c->err, AR_INVALID, "index %lld is outside an axis of %lld", (long long)r,
                     (long long)D);
    r = r < 0 ? r + D : r;
    for (int64_t o2 = 0; o2 < outer; o2++)
      memcpy((char *)c->out[0].data + (size_t)(o2 * K + j) * row,
             (const char *)x->data + (size_t)(o2 * D + r) * row, row);
  }
  return AR_OK;
}

ar_status ar__onnx_fold_expand(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  int64_t v[AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 1, NULL, v, AR_NN_MAX_DIMS, &n, c->err));
  ar_shape t = {0}, o;
  t.nd = n < 0 ? 0 : n;
  for (int k = 0; k < t.nd; k++)
    t.d[k] = v[k];
  if (!ar_shape_broadcast(&x->shape, &t, &o))
    return ar_errf(c->err, AR_INVALID, "the input does not broadcast to the shape");
  AR_CHECK(ar__onnx_tensor_new(c->m, &o, x->dtype, &c->out[0], c->err));
  int64_t sx[AR_NN_MAX_DIMS];
  ar__onnx_bc_strides(&o, &x->shape, sx);
  const size_t es = ar_dtype_size(x->dtype);
  for (int64_t i = 0; i < ar_shape_count(&o); i++)
    memcpy((char *)c->out[0].data + i * es, (const char *)x->data + ar__onnx_bc_offset(&o, sx, i) * es, es);
  return AR_OK;
}

ar_status ar__onnx_fold_constant_of_shape(fold_ctx *c) {
  int64_t v[AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 0, NULL, v, AR_NN_MAX_DIMS, &n, c->err));
  ar_shape s = {0};
  s.nd = n < 0 ? 0 : n;
  for (int k = 0; k < s.nd; k++) {
    if (v[k] < 0)
      return ar_errf(c->err, AR_INVALID, "dim %d is %lld", k, (long long)v[k]);
    s.d[k] = v[k];
  }
  const Onnx__AttributeProto *a = ar__onnx_attr(c->node, "value");
  ar_onnx_tensor val = {0};
  ar_dtype t = AR_DT_F32;
  if (a && a->t) {
    AR_CHECK(ar__onnx_tensor_decode(c->m->path, NULL, NULL, &c->m->lim, a->t, "its value", &val,
                                    c->err));
    t = val.dtype;
  }
  ar_status st = ar__onnx_tensor_new(c->m, &s, t, &c->out[0], c->err);
  const size_t es = ar_dtype_size(t);
  for (int64_t i = 0; st == AR_OK && val.data && val.bytes >= es && i < ar_shape_count(&s); i++)
    memcpy((char *)c->out[0].data + i * es, val.data, es);
  ar_onnx_tensor_fini(&val);
  return st;
}

ar_status ar__onnx_fold_range(fold_ctx *c) {
  const ar_onnx_tensor *a = arg(c, 0), *b = arg(c, 1), *d = arg(c, 2);
  if (ar_shape_count(&a->shape) != 1 || ar_shape_count(&b->shape) != 1 ||
      ar_shape_count(&d->shape) != 1)
    return ar_errf(c->err, AR_INVALID, "start, limit and delta must be single values");
  if (a->dtype != b->dtype || a->dtype != d->dtype)
    return ar_errf(c->err, AR_INVALID,
                   "start, limit and delta are %s, %s and %s (ONNX wants one type)",
                   ar_dtype_name(a->dtype), ar_dtype_name(b->dtype), ar_dtype_name(d->dtype));
  const bool flt = a->dtype == AR_DT_F32;
  double fa = ar__onnx_get_f(a, 0), fb = ar__onnx_get_f(b, 0), fd = ar__onnx_get_f(d, 0);
  if (fd == 0)
    return ar_errf(c->err, AR_INVALID, "Range with delta 0");
  double cnt = ceil((fb - fa) / fd);
  if (!(cnt <= (double)(1 << 30)))
    return ar_errf(c->err, AR_RANGE, "Range of more than 2^30 elements");
  ar_shape s = {1, {cnt > 0 ? (int64_t)cnt : 0}};
  AR_CHECK(ar__onnx_tensor_new(c->m, &s, a->dtype, &c->out[0], c->err));
  /* Integers step exactly, wrapping as the stored type does (the count
   * came from doubles, so the last step may pass int64's end). */
  const uint64_t ia = (uint64_t)ar__onnx_get_i(a, 0), id = (uint64_t)ar__onnx_get_i(d, 0);
  for (int64_t i = 0; i < s.d[0]; i++)
    ar__onnx_set(&c->out[0], i, fa + (double)i * fd, flt ? 0 : (int64_t)(ia + (uint64_t)i * id),
                 flt);
  return AR_OK;
}

ar_status ar__onnx_fold_split(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  int ax = 0;
  AR_CHECK(ar__onnx_axis(ar__onnx_attr_i(c->node, "axis", 0), x->shape.nd, &ax, c->err));
  int64_t sz[AR_NN_MAX_IO];
  int n;
  AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 1, "split", sz, AR_NN_MAX_IO, &n, c->err));
  const int64_t D = x->shape.d[ax];
  if (n < 0) {
    n = c->n_out;
    for (int i = 0; i < n; i++)
      sz[i] = D / n + (i < D % n ? 1 : 0);
  }
  /* Each size within the axis before they are summed (a negative one
   * would let a larger one read past the data; huge ones overflow). */
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (sz[i] < 0 || sz[i] > D)
      return ar_errf(c->err, AR_INVALID, "split size %lld is outside the axis of %lld",
                     (long long)sz[i], (long long)D);
    at += sz[i];
  }
  if (n != c->n_out || at != D)
    return ar_errf(c->err, AR_INVALID, "the split sizes do not match the outputs and the axis");
  at = 0;
  for (int i = 0; i < n; i++) {
    int64_t start[AR_NN_MAX_DIMS] = {0}, step[AR_NN_MAX_DIMS];
    ar_shape o = x->shape;
    for (int k = 0; k < o.nd; k++)
      step[k] = 1;
    start[ax] = at;
    o.d[ax] = sz[i];
    AR_CHECK(ar__onnx_tensor_new(c->m, &o, x->dtype, &c->out[i], c->err));
    strided_copy(x, start, step, &c->out[i]);
    at += sz[i];
  }
  return AR_OK;
}

/* ---- reductions, clip, size -------------------------------------------------------- */

ar_status ar__onnx_fold_reduce(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  int64_t axes[AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 1, "axes", axes, AR_NN_MAX_DIMS, &n, c->err));
  const bool keep = ar__onnx_attr_i(c->node, "keepdims", 1) != 0;
  bool red[AR_NN_MAX_DIMS] = {false};
  if (n <= 0 && ar__onnx_attr_i(c->node, "noop_with_empty_axes", 0))
    return same_data(c, x, &x->shape);
  for (int k = 0; k < x->shape.nd; k++)
    red[k] = n <= 0;
  for (int i = 0; i < n; i++) {
    int a = 0;
    AR_CHECK(ar__onnx_axis(axes[i], x->shape.nd, &a, c->err));
    red[a] = true;
  }
  ar_shape o = {0}, ok = x->shape;
  for (int k = 0; k < x->shape.nd; k++) {
    ok.d[k] = red[k] ? 1 : x->shape.d[k];
    if (!red[k] || keep)
      o.d[o.nd++] = ok.d[k];
  }
  AR_CHECK(ar__onnx_tensor_new(c->m, &o, x->dtype, &c->out[0], c->err));
  const int64_t no = ar_shape_count(&ok), nx = ar_shape_count(&x->shape);
  double *acc = ar_calloc((size_t)(no ? no : 1), sizeof *acc);
  int64_t *cnt = ar_calloc((size_t)(no ? no : 1), sizeof *cnt);
  if (!acc || !cnt) {
    ar_free(acc);
    ar_free(cnt);
    return ar_errf(c->err, AR_NOMEM, "out of memory folding a reduction");
  }
  const char *op = c->op;
  for (int64_t i = 0; i < nx; i++) {
    int64_t r = i, off = 0, mul = 1;
    for (int k = x->shape.nd - 1; k >= 0; k--) {
      int64_t ik = r % x->shape.d[k];
      r /= x->shape.d[k];
      off += (red[k] ? 0 : ik) * mul;
      mul *= ok.d[k];
    }
    double v = ar__onnx_get_f(x, i);
    if (!cnt[off])
      acc[off] = !strcmp(op, "ReduceProd")  ? 1.0
                 : !strcmp(op, "ReduceMax") ? -INFINITY
                 : !strcmp(op, "ReduceMin") ? INFINITY
                                            : 0.0;
    if (!strcmp(op, "ReduceProd"))
      acc[off] *= v;
    else if (!strcmp(op, "ReduceMax"))
      acc[off] = v > acc[off] ? v : acc[off];
    else if (!strcmp(op, "ReduceMin"))
      acc[off] = v < acc[off] ? v : acc[off];
    else
      acc[off] += v;
    cnt[off]++;
  }
  for (int64_t i = 0; i < no; i++) {
    double v = !strcmp(op, "ReduceMean") ? acc[i] / (double)(cnt[i] ? cnt[i] : 1) : acc[i];
    ar__onnx_set(&c->out[0], i, v, 0, true); /* from the double, clamped: no (int64_t)v */
  }
  ar_free(acc);
  ar_free(cnt);
  return AR_OK;
}

ar_status ar__onnx_fold_clip(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0), *lo = arg(c, 1), *hi = arg(c, 2);
  if ((lo && ar_shape_count(&lo->shape) != 1) || (hi && ar_shape_count(&hi->shape) != 1))
    return ar_errf(c->err, AR_INVALID, "min and max must be single values");
  AR_CHECK(ar__onnx_tensor_new(c->m, &x->shape, x->dtype, &c->out[0], c->err));
  double l = lo ? ar__onnx_get_f(lo, 0) : ar__onnx_attr_f(c->node, "min", -INFINITY);
  double h = hi ? ar__onnx_get_f(hi, 0) : ar__onnx_attr_f(c->node, "max", INFINITY);
  for (int64_t i = 0; i < ar_shape_count(&x->shape); i++) {
    double v = ar__onnx_get_f(x, i);
    v = v < l ? l : v;
    v = v > h ? h : v;
    ar__onnx_set(&c->out[0], i, v, 0, true); /* from the double, clamped: no (int64_t)v */
  }
  return AR_OK;
}

ar_status ar__onnx_fold_size(fold_ctx *c) {
  ar_shape s = {0};
  AR_CHECK(ar__onnx_tensor_new(c->m, &s, AR_DT_I64, &c->out[0], c->err));
  ((int64_t *)c->out[0].data)[0] = ar_shape_count(&arg(c, 0)->shape);
  return AR_OK;
}

ar_status ar__onnx_fold_tile(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  int64_t rep[AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(ar__onnx_ints_arg(c->node, c->in, c->n_in, 1, NULL, rep, AR_NN_MAX_DIMS, &n, c->err));
  if (n != x->shape.nd)
    return ar_errf(c->err, AR_INVALID, "repeats has %d entries for %d dims", n, x->shape.nd);
  ar_shape o = x->shape;
  for (int k = 0; k < o.nd; k++) {
    if (rep[k] < 0 || (rep[k] && o.d[k] > ((int64_t)1 << 40) / rep[k]))
      return ar_errf(c->err, AR_INVALID, "repeat %lld of dim %d is negative or too large",
                     (long long)rep[k], k);
    o.d[k] *= rep[k];
  }
  AR_CHECK(ar__onnx_tensor_new(c->m, &o, x->dtype, &c->out[0], c->err));
  const size_t es = ar_dtype_size(x->dtype);
  int64_t xs[AR_NN_MAX_DIMS], acc = 1;
  for (int k = o.nd - 1; k >= 0; k--) {
    xs[k] = acc;
    acc *= x->shape.d[k];
  }
  for (int64_t i = 0; i < ar_shape_count(&o); i++) {
    int64_t r = i, off = 0;
    for (int k = o.nd - 1; k >= 0; k--) {
      off += (r % o.d[k]) % x->shape.d[k] * xs[k];
      r /= o.d[k];
    }
    memcpy((char *)c->out[0].data + i * es, (const char *)x->data + off * es, es);
  }
  return AR_OK;
}

