/*
 * Host tensors for folding (onnx_impl.h): a new tensor within the size
 * folding may make, an element of any type read as a double or an int64
 * and stored back (wrapped to its type, as NumPy does); and the argument
 * rules (axes, shapes, slices, ints from attributes or constant inputs)
 * that folding and lowering share.
 */
#include "onnx_impl.h"

#include <math.h>
#include <string.h>

/* ---- elements ---------------------------------------------------------------- */

/* The largest constant folding makes: a model's shape arithmetic can ask
 * for any size (ConstantOfShape, Expand, Range), the host must not try.
 * A model's own limit on a tensor (limits.max_tensor_bytes) bounds it
 * too: a few bytes of ConstantOfShape must not make more than the file
 * could hold, nor take longer to fold than to read. */
#define FOLD_MAX_BYTES ((uint64_t)1 << 30)

ar_status ar__onnx_tensor_new(const ar_onnx_model *m, const ar_shape *s, ar_dtype t,
                              ar_onnx_tensor *out, ar_err *err) {
  memset(out, 0, sizeof *out);
  const uint64_t most = m && m->lim.max_tensor_bytes < FOLD_MAX_BYTES
                            ? (uint64_t)m->lim.max_tensor_bytes
                            : FOLD_MAX_BYTES;
  uint64_t count = 1;
  bool big = false, empty = false;
  for (int k = 0; k < s->nd; k++) {
    if (s->d[k] < 0)
      return ar_errf(err, AR_INVALID, "dim %d is %lld", k, (long long)s->d[k]);
    empty |= s->d[k] == 0;
  }
  /* The non-zero dims count even in an empty tensor: the shape travels on
   * (Shape, Flatten, Reshape multiply its dims), so their product must
   * stay far from int64's end. */
  for (int k = 0; k < s->nd && !big; k++) {
    if (s->d[k] == 0)
      continue;
    if (count > most / (uint64_t)s->d[k])
      big = true;
    else
      count *= (uint64_t)s->d[k];
  }
  if (big || count * ar_dtype_size(t) > most) {
    char b[64];
    return ar_errf(err, AR_RANGE,
                   "a constant of %s elements would be made at import (more than %llu bytes); "
                   "the model's shape arithmetic asks for too much, or raise the tensor limit",
                   ar_shape_str(s, b, sizeof b), (unsigned long long)most);
  }
  if (empty)
    count = 0;
  out->shape = *s;
  out->dtype = t;
  out->bytes = (size_t)count * ar_dtype_size(t);
  out->data = ar_calloc(out->bytes ? out->bytes : 1, 1);
  return out->data ? AR_OK : ar_errf(err, AR_NOMEM, "out of memory folding a constant");
}

double ar__onnx_get_f(const ar_onnx_tensor *t, int64_t i) {
  return t->dtype == AR_DT_F32 ? (double)((const float *)t->data)[i] : (double)ar__onnx_get_i(t, i);
}

int64_t ar__onnx_get_i(const ar_onnx_tensor *t, int64_t i) {
  switch (t->dtype) {
  case AR_DT_F32: {
    double v = ((const float *)t->data)[i];
    return isnan(v) ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
  }
  case AR_DT_I64:
    return ((const int64_t *)t->data)[i];
  case AR_DT_I32:
    return ((const int32_t *)t->data)[i];
  default:
    return ((const uint8_t *)t->data)[i];
  }
}

void ar__onnx_set(ar_onnx_tensor *t, int64_t i, double f, int64_t v, bool from_float) {
  if (from_float && t->dtype != AR_DT_F32) {
    if (t->dtype == AR_DT_BOOL) {
      ((uint8_t *)t->data)[i] = f != 0.0;
      return;
    }
    v = isnan(f) ? 0 : f >= 9.2e18 ? INT64_MAX : f <= -9.2e18 ? INT64_MIN : (int64_t)f;
  }
  switch (t->dtype) {
  case AR_DT_F32:
    ((float *)t->data)[i] = (float)(from_float ? f : (double)v);
    break;
  case AR_DT_I64:
    ((int64_t *)t->data)[i] = v;
    break;
  case AR_DT_I32:
    ((int32_t *)t->data)[i] = (int32_t)(uint32_t)(uint64_t)v;
    break;
  case AR_DT_U8:
    ((uint8_t *)t->data)[i] = (uint8_t)(uint64_t)v;
    break;
  case AR_DT_BOOL:
    ((uint8_t *)t->data)[i] = v != 0;
    break;
  }
}

/* ---- argument rules shared with lowering ------------------------------------- */

ar_status ar__onnx_axis(int64_t axis, int nd, int *out, ar_err *err) {
  if (axis < -nd || axis >= (nd ? nd : 1) || (nd == 0 && axis != 0 && axis != -1))
    return ar_errf(err, AR_INVALID, "axis %lld is outside a tensor of %d dims", (long long)axis,
                   nd);
  *out = (int)(axis < 0 ? axis + nd : axis);
  return AR_OK;
}

ar_status ar__onnx_reshape_shape(const ar_shape *in, const int64_t *t, int n, bool allowzero,
                                 ar_shape *out, ar_err *err) {
  if (n < 0 || n > AR_NN_MAX_DIMS)
    return ar_errf(err, AR_UNSUPPORTED, "a reshape to %d dims (at most %d)", n, AR_NN_MAX_DIMS);
  ar_shape o = {0};
  o.nd = n;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < n; i++) {
    if (t[i] == -1) {
      if (infer >= 0)
        return ar_errf(err, AR_INVALID, "the target shape has more than one -1");
      infer = i;
      continue;
    }
    if (t[i] < -1 || t[i] > ((int64_t)1 << 40))
      return ar_errf(err, AR_INVALID, "dim %d of the target shape is %lld", i, (long long)t[i]);
    o.d[i] = t[i] == 0 && !allowzero ? (i < in->nd ? in->d[i] : -2) : t[i];
    if (o.d[i] == -2)
      return ar_errf(err, AR_INVALID,
                     "dim %d of the target is 0 (copy the input's), but the "
                     "input has %d dims",
                     i, in->nd);
    if (o.d[i] && known > ((int64_t)1 << 40) / o.d[i])
      return ar_errf(err, AR_INVALID, "the target shape has more than 2^40 elements");
    known *= o.d[i];
  }
  int64_t count = ar_shape_count(in);
  if (infer >= 0) {
    if (known == 0 || count % known)
      return ar_errf(err, AR_INVALID,
                     "%lld elements do not reshape with a -1 into dims of "
                     "product %lld",
                     (long long)count, (long long)known);
    o.d[infer] = count / known;
  }
  if (ar_shape_count(&o) != count) {
    char a[64], b[64];
    return ar_errf(err, AR_INVALID, "%s (%lld elements) does not reshape to %s",
                   ar_shape_str(in, a, sizeof a), (long long)count, ar_shape_str(&o, b, sizeof b));
  }
  *out = o;
  return AR_OK;
}

ar_status ar__onnx_unsqueeze_shape(const ar_shape *in, const int64_t *axes, int n, ar_shape *out,
                                   ar_err *err) {
  int nd = in->nd + n;
  if (nd > AR_NN_MAX_DIMS)
    return ar_errf(err, AR_UNSUPPORTED, "the result would have %d dims (at most %d)", nd,
                   AR_NN_MAX_DIMS);
  bool at[AR_NN_MAX_DIMS] = {false};
  for (int i = 0; i < n; i++) {
    int a = 0;
    AR_CHECK(ar__onnx_axis(axes[i], nd, &a, err));
    if (at[a])
      return ar_errf(err, AR_INVALID, "axis %lld appears twice", (long long)axes[i]);
    at[a] = true;
  }
  ar_shape o = {0};
  o.nd = nd;
  for (int k = 0, j = 0; k < nd; k++)
    o.d[k] = at[k] ? 1 : in->d[j++];
  *out = o;
  return AR_OK;
}

ar_status ar__onnx_squeeze_shape(const ar_shape *in, const int64_t *axes, int n, ar_shape *out,
                                 ar_err *err) {
  bool drop[AR_NN_MAX_DIMS] = {false};
  for (int i = 0; i < n; i++) {
    int a = 0;
    AR_CHECK(ar__onnx_axis(axes[i], in->nd, &a, err));
    if (in->d[a] != 1)
      return ar_errf(err, AR_INVALID, "axis %lld has %lld elements, not 1", (long long)axes[i],
                     (long long)in->d[a]);
    drop[a] = true;
  }
  ar_shape o = {0};
  for (int k = 0; k < in->nd; k++)
    if (!(n < 0 ? in->d[k] == 1 : drop[k]))
      o.d[o.nd++] = in->d[k];
  *out = o;
  return AR_OK;
}

ar_status ar__onnx_flatten_shape(const ar_shape *in, int64_t axis, ar_shape *out, ar_err *err) {
  if (axis < -in->nd || axis > in->nd)
    return ar_errf(err, AR_INVALID, "axis %lld is outside 0..%d", (long long)axis, in->nd);
  int a = (int)(axis < 0 ? axis + in->nd : axis);
  ar_shape o = {0};
  o.nd = 2;
  o.d[0] = o.d[1] = 1;
  for (int k = 0; k < in->nd; k++)
    o.d[k < a ? 0 : 1] *= in->d[k];
  *out = o;
  return AR_OK;
}

ar_status ar__onnx_slice(const ar_shape *in, const int64_t *starts, const int64_t *ends,
                         const int64_t *axes, const int64_t *steps, int n, ar__onnx_slice_t *s,
                         ar_err *err) {
  for (int k = 0; k < in->nd; k++) {
    s->start[k] = 0;
    s->step[k] = 1;
    s->count[k] = in->d[k];
  }
  bool seen[AR_NN_MAX_DIMS] = {false};
  for (int i = 0; i < n; i++) {
    int a = 0;
    AR_CHECK(ar__onnx_axis(axes ? axes[i] : i, in->nd, &a, err));
    if (seen[a])
      return ar_errf(err, AR_INVALID, "axis %d is sliced twice", a);
    seen[a] = true;
    const int64_t d = in->d[a], st = steps ? steps[i] : 1;
    if (st == 0)
      return ar_errf(err, AR_INVALID, "a step is 0");
    /* ONNX's rule (as NumPy's): negative counts from the end, then clamped
     * to [0, d] for a positive step, [-1, d-1] for a negative one. */
    int64_t b = starts[i], e = ends[i];
    if (b < 0)
      b = b < -d ? -1 : b + d;
    if (e < 0)
      e = e < -d ? -1 : e + d;
    if (st > 0) {
      b = b < 0 ? 0 : b > d ? d : b;
      e = e < 0 ? 0 : e > d ? d : e;
      s->count[a] = e > b ? (e - b - 1) / st + 1 : 0; /* no sum that can overflow */
    } else {
      b = b < -1 ? -1 : b > d - 1 ? d - 1 : b;
      e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
      s->count[a] = b > e ? (int64_t)((uint64_t)(b - e - 1) / (0u - (uint64_t)st)) + 1 : 0;
    }
    s->start[a] = b;
    s->step[a] = st;
  }
  return AR_OK;
}

/* ---- arguments from attributes or constant inputs ------------------------------ */

/* A list of ints from input idx (when the node has it) or attribute
 * attr (when not NULL): *n = -1 when neither is there.  An input that is
 * there but not constant is AR_UNSUPPORTED. */
ar_status ar__onnx_ints_arg(const Onnx__NodeProto *node, const ar_onnx_tensor *const *in, int n_in,
                            int idx, const char *attr, int64_t *buf, int cap, int *n, ar_err *err) {
  *n = -1;
  if (idx >= 0 && idx < (int)node->n_input && node->input[idx] && *node->input[idx]) {
    const ar_onnx_tensor *t = idx < n_in ? in[idx] : NULL;
    if (!t)
      return ar_errf(err, AR_UNSUPPORTED,
                     "input %d ('%s') must be constant for the input shapes (an initializer, "
                     "a Constant, or computed from shapes): accelrt builds a static graph",
                     idx, node->input[idx]);
    int64_t c = ar_shape_count(&t->shape);
    if (t->dtype == AR_DT_F32 || c > cap || t->shape.nd > 1)
      return ar_errf(err, AR_INVALID, "input %d ('%s') is not a list of at most %d integers", idx,
                     node->input[idx], cap);
    for (int64_t i = 0; i < c; i++)
      buf[i] = ar__onnx_get_i(t, i);
    *n = (int)c;
    return AR_OK;
  }
  if (attr) {
    const int64_t *v;
    int c = ar__onnx_attr_ints(node, attr, &v);
    if (c > cap)
      return ar_errf(err, AR_INVALID, "attribute %s has more than %d values", attr, cap);
    if (c >= 0) {
      if (c > 0) /* an empty list has no array (NULL) */
        memcpy(buf, v, (size_t)c * sizeof *buf);
      *n = c;
    }
  }
  return AR_OK;
}

