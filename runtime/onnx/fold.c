/*
 * Folding (onnx_impl.h): ONNX ops evaluated on the host, on constant
 * tensors of any importable element type, for what is constant for the
 * input shapes (initializers, Constant nodes, Shape of a known shape, and
 * everything computed from those).  Floats are computed in double and
 * rounded once to f32 (so +, -, *, / give f32's own results); integers in
 * int64, wrapped to their type on the store, as NumPy does; x / 0 is 0 for
 * integers.  Also the argument rules (axes, shapes, slices) that folding
 * and lowering share.  Only the ops of `ops` below fold; the message of
 * an error names no node (the caller adds it).
 */
#include "onnx_impl.h"

#include <math.h>
#include <string.h>

/* ---- elements ---------------------------------------------------------------- */

/* The largest constant folding makes: a model's shape arithmetic can ask
 * for any size (ConstantOfShape, Expand, Range), the host must not try. */
#define FOLD_MAX_BYTES ((uint64_t)1 << 30)

ar_status ar__onnx_tensor_new(const ar_shape *s, ar_dtype t, ar_onnx_tensor *out, ar_err *err) {
  memset(out, 0, sizeof *out);
  uint64_t count = 1;
  bool big = false, empty = false;
  for (int k = 0; k < s->nd; k++) {
    if (s->d[k] < 0)
      return ar_errf(err, AR_INVALID, "dim %d is %lld", k, (long long)s->d[k]);
    empty |= s->d[k] == 0;
  }
  for (int k = 0; k < s->nd && !empty && !big; k++) {
    if (count > FOLD_MAX_BYTES / (uint64_t)s->d[k])
      big = true;
    else
      count *= (uint64_t)s->d[k];
  }
  if (empty)
    count = 0;
  if (big || count * ar_dtype_size(t) > FOLD_MAX_BYTES) {
    char b[64];
    return ar_errf(err, AR_RANGE,
                   "a constant of %s elements would be made at import (more than %llu bytes)",
                   ar_shape_str(s, b, sizeof b), (unsigned long long)FOLD_MAX_BYTES);
  }
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
      memcpy(buf, v, (size_t)c * sizeof *buf);
      *n = c;
    }
  }
  return AR_OK;
}

/* ---- element-wise ---------------------------------------------------------------- */

/* Offsets of output element i into an operand broadcast into `out`
 * (strides precomputed by bc_strides). */
static void bc_strides(const ar_shape *out, const ar_shape *s, int64_t *st) {
  int64_t acc = 1;
  for (int k = out->nd - 1; k >= 0; k--) {
    int kk = k - (out->nd - s->nd);
    int64_t ext = kk >= 0 ? s->d[kk] : 1;
    st[k] = ext == 1 ? 0 : acc;
    acc *= ext;
  }
}

static int64_t bc_offset(const ar_shape *out, const int64_t *st, int64_t i) {
  int64_t off = 0;
  for (int k = out->nd - 1; k >= 0; k--) {
    off += (i % out->d[k]) * st[k];
    i /= out->d[k];
  }
  return off;
}

typedef struct fold_ctx {
  const ar_onnx_model *m;
  const Onnx__NodeProto *node;
  const char *op;
  const ar_onnx_tensor *const *in;
  int n_in;
  ar_onnx_tensor *out;
  int n_out;
  ar_err *err;
} fold_ctx;

static const ar_onnx_tensor *arg(const fold_ctx *c, int i) { return i < c->n_in ? c->in[i] : NULL; }

static double f_unary(const char *op, double x) {
  if (!strcmp(op, "Neg"))
    return -x;
  if (!strcmp(op, "Abs"))
    return fabs(x);
  if (!strcmp(op, "Sqrt"))
    return sqrt(x);
  if (!strcmp(op, "Exp"))
    return exp(x);
  if (!strcmp(op, "Log"))
    return log(x);
  if (!strcmp(op, "Erf"))
    return erf(x);
  if (!strcmp(op, "Relu"))
    return x > 0 ? x : 0;
  if (!strcmp(op, "Sigmoid"))
    return 1.0 / (1.0 + exp(-x));
  if (!strcmp(op, "Tanh"))
    return tanh(x);
  if (!strcmp(op, "Floor"))
    return floor(x);
  if (!strcmp(op, "Ceil"))
    return ceil(x);
  if (!strcmp(op, "Reciprocal"))
    return 1.0 / x;
  if (!strcmp(op, "Sign"))
    return x > 0 ? 1 : x < 0 ? -1 : 0;
  return x; /* Identity */
}

static ar_status fold_unary(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  AR_CHECK(ar__onnx_tensor_new(&x->shape, x->dtype, &c->out[0], c->err));
  const int64_t n = ar_shape_count(&x->shape);
  const bool is_not = !strcmp(c->op, "Not");
  for (int64_t i = 0; i < n; i++) {
    if (is_not)
      ar__onnx_set(&c->out[0], i, 0, !ar__onnx_get_i(x, i), false);
    else if (x->dtype == AR_DT_F32)
      ar__onnx_set(&c->out[0], i, f_unary(c->op, ar__onnx_get_f(x, i)), 0, true);
    else if (!strcmp(c->op, "Neg") || !strcmp(c->op, "Abs") || !strcmp(c->op, "Identity") ||
             !strcmp(c->op, "Relu") || !strcmp(c->op, "Sign")) {
      int64_t v = ar__onnx_get_i(x, i);
      v = c->op[0] == 'N'   ? (int64_t)(0u - (uint64_t)v)
          : c->op[0] == 'A' ? (v < 0 ? -v : v)
          : c->op[0] == 'R' ? (v > 0 ? v : 0)
          : c->op[0] == 'S' ? (v > 0) - (v < 0)
                            : v;
      ar__onnx_set(&c->out[0], i, 0, v, false);
    } else {
      return ar_errf(c->err, AR_UNSUPPORTED, "%s of %s constants is not folded", c->op,
                     ar_dtype_name(x->dtype));
    }
  }
  return AR_OK;
}

static int64_t i_pow(int64_t x, int64_t z) {
  if (z < 0)
    return x == 1 ? 1 : x == -1 ? ((-z) % 2 ? -1 : 1) : 0;
  uint64_t r = 1, b = (uint64_t)x;
  for (; z; z >>= 1, b *= b)
    if (z & 1)
      r *= b;
  return (int64_t)r;
}

/* op on two numbers; *is_bool: the result is a truth value. */
static void binary_values(const char *op, bool flt, double fa, double fb, int64_t ia, int64_t ib,
                          double *fr, int64_t *ir) {
  if (!strcmp(op, "Add")) {
    *fr = fa + fb;
    *ir = (int64_t)((uint64_t)ia + (uint64_t)ib);
  } else if (!strcmp(op, "Sub")) {
    *fr = fa - fb;
    *ir = (int64_t)((uint64_t)ia - (uint64_t)ib);
  } else if (!strcmp(op, "Mul")) {
    *fr = fa * fb;
    *ir = (int64_t)((uint64_t)ia * (uint64_t)ib);
  } else if (!strcmp(op, "Div")) {
    *fr = fa / fb;
    *ir = ib == 0 ? 0 : ib == -1 ? (int64_t)(0u - (uint64_t)ia) : ia / ib;
  } else if (!strcmp(op, "Pow")) {
    *fr = pow(fa, fb);
    *ir = i_pow(ia, ib);
  } else if (!strcmp(op, "Mod")) {
    *fr = fmod(fa, fb);
    /* Python's sign rule (fmod 0): the result takes the divisor's sign. */
    *ir = ib == 0 ? 0 : ((ia % ib) + ib) % ib;
    if (ib < 0 && *ir > 0)
      *ir += ib;
  } else if (!strcmp(op, "Min")) {
    *fr = fa < fb || isnan(fa) ? fa : fb;
    *ir = ia < ib ? ia : ib;
  } else if (!strcmp(op, "Max")) {
    *fr = fa > fb || isnan(fa) ? fa : fb;
    *ir = ia > ib ? ia : ib;
  } else {
    bool r;
    if (!strcmp(op, "Equal"))
      r = flt ? fa == fb : ia == ib;
    else if (!strcmp(op, "Less"))
      r = flt ? fa < fb : ia < ib;
    else if (!strcmp(op, "Greater"))
      r = flt ? fa > fb : ia > ib;
    else if (!strcmp(op, "LessOrEqual"))
      r = flt ? fa <= fb : ia <= ib;
    else if (!strcmp(op, "GreaterOrEqual"))
      r = flt ? fa >= fb : ia >= ib;
    else if (!strcmp(op, "And"))
      r = ia && ib;
    else if (!strcmp(op, "Or"))
      r = ia || ib;
    else /* Xor */
      r = !ia != !ib;
    *fr = r;
    *ir = r;
  }
}

static bool is_predicate(const char *op) {
  static const char *const p[] = {"Equal",          "Less", "Greater", "LessOrEqual",
                                  "GreaterOrEqual", "And",  "Or",      "Xor"};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
    if (!strcmp(op, p[i]))
      return true;
  return false;
}

/* out = a op b with broadcasting (Pow: b may be of another type). */
static ar_status binary(fold_ctx *c, const ar_onnx_tensor *a, const ar_onnx_tensor *b,
                        ar_onnx_tensor *out) {
  ar_shape o;
  if (!ar_shape_broadcast(&a->shape, &b->shape, &o)) {
    char sa[64], sb[64];
    return ar_errf(c->err, AR_INVALID, "shapes %s and %s do not broadcast",
                   ar_shape_str(&a->shape, sa, sizeof sa), ar_shape_str(&b->shape, sb, sizeof sb));
  }
  if (a->dtype != b->dtype && strcmp(c->op, "Pow"))
    return ar_errf(c->err, AR_INVALID, "inputs of types %s and %s (ONNX wants one type)",
                   ar_dtype_name(a->dtype), ar_dtype_name(b->dtype));
  const bool pred = is_predicate(c->op);
  AR_CHECK(ar__onnx_tensor_new(&o, pred ? AR_DT_BOOL : a->dtype, out, c->err));
  int64_t sa[AR_NN_MAX_DIMS], sb[AR_NN_MAX_DIMS];
  bc_strides(&o, &a->shape, sa);
  bc_strides(&o, &b->shape, sb);
  const bool flt = a->dtype == AR_DT_F32 || b->dtype == AR_DT_F32;
  const int64_t n = ar_shape_count(&o);
  for (int64_t i = 0; i < n; i++) {
    int64_t ia = bc_offset(&o, sa, i), ib = bc_offset(&o, sb, i);
    double fr;
    int64_t ir;
    binary_values(c->op, flt, ar__onnx_get_f(a, ia), ar__onnx_get_f(b, ib), ar__onnx_get_i(a, ia),
                  ar__onnx_get_i(b, ib), &fr, &ir);
    ar__onnx_set(out, i, fr, ir, flt && !pred);
  }
  return AR_OK;
}

static ar_status fold_binary(fold_ctx *c) {
  if (c->n_in < 2 || !arg(c, 0) || !arg(c, 1)) {
    if (c->n_in == 1 && (!strcmp(c->op, "Min") || !strcmp(c->op, "Max") || !strcmp(c->op, "Sum")))
      return fold_unary(c);
    return ar_errf(c->err, AR_INVALID, "%s needs two inputs", c->op);
  }
  const char *op = c->op;
  if (!strcmp(op, "Sum"))
    c->op = "Add";
  ar_status st = binary(c, arg(c, 0), arg(c, 1), &c->out[0]);
  /* Variadic Min, Max, Sum: the rest one by one. */
  for (int i = 2; i < c->n_in && st == AR_OK; i++) {
    ar_onnx_tensor acc = c->out[0];
    st = binary(c, &acc, arg(c, i), &c->out[0]);
    ar_onnx_tensor_fini(&acc);
  }
  c->op = op;
  return st;
}

static ar_status fold_where(fold_ctx *c) {
  const ar_onnx_tensor *k = arg(c, 0), *x = arg(c, 1), *y = arg(c, 2);
  ar_shape o, o2;
  if (!ar_shape_broadcast(&x->shape, &y->shape, &o) || !ar_shape_broadcast(&k->shape, &o, &o2))
    return ar_errf(c->err, AR_INVALID, "the condition, x and y do not broadcast");
  if (x->dtype != y->dtype)
    return ar_errf(c->err, AR_INVALID, "x is %s and y %s", ar_dtype_name(x->dtype),
                   ar_dtype_name(y->dtype));
  AR_CHECK(ar__onnx_tensor_new(&o2, x->dtype, &c->out[0], c->err));
  int64_t sk[AR_NN_MAX_DIMS], sx[AR_NN_MAX_DIMS], sy[AR_NN_MAX_DIMS];
  bc_strides(&o2, &k->shape, sk);
  bc_strides(&o2, &x->shape, sx);
  bc_strides(&o2, &y->shape, sy);
  const size_t es = ar_dtype_size(x->dtype);
  for (int64_t i = 0; i < ar_shape_count(&o2); i++) {
    const bool take = ar__onnx_get_i(k, bc_offset(&o2, sk, i)) != 0;
    const ar_onnx_tensor *src = take ? x : y;
    memcpy((char *)c->out[0].data + i * es,
           (const char *)src->data + bc_offset(&o2, take ? sx : sy, i) * es, es);
  }
  return AR_OK;
}

static ar_status fold_cast(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0);
  ar_dtype to;
  const char *tn;
  if (!strcmp(c->op, "CastLike")) {
    to = arg(c, 1)->dtype;
  } else if (!ar__onnx_dtype((int32_t)ar__onnx_attr_i(c->node, "to", 0), &to, &tn)) {
    return ar_errf(c->err, AR_UNSUPPORTED,
                   "a cast to %s (accelrt imports f32, i64, i32, u8 and "
                   "bool)",
                   tn);
  }
  AR_CHECK(ar__onnx_tensor_new(&x->shape, to, &c->out[0], c->err));
  for (int64_t i = 0; i < ar_shape_count(&x->shape); i++)
    ar__onnx_set(&c->out[0], i, ar__onnx_get_f(x, i), ar__onnx_get_i(x, i), x->dtype == AR_DT_F32);
  return AR_OK;
}

/* ---- data movement ---------------------------------------------------------------- */

/* out = x's data under a new shape. */
static ar_status same_data(fold_ctx *c, const ar_onnx_tensor *x, const ar_shape *s) {
  AR_CHECK(ar__onnx_tensor_new(s, x->dtype, &c->out[0], c->err));
  memcpy(c->out[0].data, x->data, x->bytes);
  return AR_OK;
}

static ar_status fold_reshape_like(fold_ctx *c) {
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
    AR_CHECK(ar__onnx_tensor_new(&x->shape, AR_DT_BOOL, &c->out[1], c->err));
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

static ar_status fold_slice(fold_ctx *c) {
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
  AR_CHECK(ar__onnx_tensor_new(&o, x->dtype, &c->out[0], c->err));
  strided_copy(x, s.start, s.step, &c->out[0]);
  return AR_OK;
}

static ar_status fold_transpose(fold_ctx *c) {
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
  for (int k = 0; k < nd; k++) {
    if (perm[k] < 0 || perm[k] >= nd)
      return ar_errf(c->err, AR_INVALID, "perm is not a permutation of 0..%d", nd - 1);
    o.d[k] = x->shape.d[perm[k]];
  }
  AR_CHECK(ar__onnx_tensor_new(&o, x->dtype, &c->out[0], c->err));
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

static ar_status fold_concat(fold_ctx *c) {
  const ar_onnx_tensor *x0 = arg(c, 0);
  int ax = 0;
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
  AR_CHECK(ar__onnx_tensor_new(&o, x0->dtype, &c->out[0], c->err));
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

static ar_status fold_gather(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0), *idx = arg(c, 1);
  int ax = 0;
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
  AR_CHECK(ar__onnx_tensor_new(&o, x->dtype, &c->out[0], c->err));
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

static ar_status fold_expand(fold_ctx *c) {
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
  AR_CHECK(ar__onnx_tensor_new(&o, x->dtype, &c->out[0], c->err));
  int64_t sx[AR_NN_MAX_DIMS];
  bc_strides(&o, &x->shape, sx);
  const size_t es = ar_dtype_size(x->dtype);
  for (int64_t i = 0; i < ar_shape_count(&o); i++)
    memcpy((char *)c->out[0].data + i * es, (const char *)x->data + bc_offset(&o, sx, i) * es, es);
  return AR_OK;
}

static ar_status fold_constant_of_shape(fold_ctx *c) {
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
  ar_status st = ar__onnx_tensor_new(&s, t, &c->out[0], c->err);
  const size_t es = ar_dtype_size(t);
  for (int64_t i = 0; st == AR_OK && val.data && val.bytes >= es && i < ar_shape_count(&s); i++)
    memcpy((char *)c->out[0].data + i * es, val.data, es);
  ar_onnx_tensor_fini(&val);
  return st;
}

static ar_status fold_range(fold_ctx *c) {
  const ar_onnx_tensor *a = arg(c, 0), *b = arg(c, 1), *d = arg(c, 2);
  const bool flt = a->dtype == AR_DT_F32;
  double fa = ar__onnx_get_f(a, 0), fb = ar__onnx_get_f(b, 0), fd = ar__onnx_get_f(d, 0);
  if (fd == 0)
    return ar_errf(c->err, AR_INVALID, "Range with delta 0");
  double cnt = ceil((fb - fa) / fd);
  if (!(cnt <= (double)(1 << 30)))
    return ar_errf(c->err, AR_RANGE, "Range of more than 2^30 elements");
  ar_shape s = {1, {cnt > 0 ? (int64_t)cnt : 0}};
  AR_CHECK(ar__onnx_tensor_new(&s, a->dtype, &c->out[0], c->err));
  int64_t ia = ar__onnx_get_i(a, 0), id = ar__onnx_get_i(d, 0);
  for (int64_t i = 0; i < s.d[0]; i++)
    ar__onnx_set(&c->out[0], i, fa + (double)i * fd, ia + i * id, flt);
  return AR_OK;
}

static ar_status fold_split(fold_ctx *c) {
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
  int64_t at = 0;
  for (int i = 0; i < n; i++)
    at += sz[i];
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
    AR_CHECK(ar__onnx_tensor_new(&o, x->dtype, &c->out[i], c->err));
    strided_copy(x, start, step, &c->out[i]);
    at += sz[i];
  }
  return AR_OK;
}

/* ---- reductions, clip, size -------------------------------------------------------- */

static ar_status fold_reduce(fold_ctx *c) {
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
  AR_CHECK(ar__onnx_tensor_new(&o, x->dtype, &c->out[0], c->err));
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
    ar__onnx_set(&c->out[0], i, v, (int64_t)v, true);
  }
  ar_free(acc);
  ar_free(cnt);
  return AR_OK;
}

static ar_status fold_clip(fold_ctx *c) {
  const ar_onnx_tensor *x = arg(c, 0), *lo = arg(c, 1), *hi = arg(c, 2);
  AR_CHECK(ar__onnx_tensor_new(&x->shape, x->dtype, &c->out[0], c->err));
  double l = lo ? ar__onnx_get_f(lo, 0) : ar__onnx_attr_f(c->node, "min", -INFINITY);
  double h = hi ? ar__onnx_get_f(hi, 0) : ar__onnx_attr_f(c->node, "max", INFINITY);
  for (int64_t i = 0; i < ar_shape_count(&x->shape); i++) {
    double v = ar__onnx_get_f(x, i);
    v = v < l ? l : v;
    v = v > h ? h : v;
    ar__onnx_set(&c->out[0], i, v, (int64_t)v, true);
  }
  return AR_OK;
}

static ar_status fold_size(fold_ctx *c) {
  ar_shape s = {0};
  AR_CHECK(ar__onnx_tensor_new(&s, AR_DT_I64, &c->out[0], c->err));
  ((int64_t *)c->out[0].data)[0] = ar_shape_count(&arg(c, 0)->shape);
  return AR_OK;
}

static ar_status fold_tile(fold_ctx *c) {
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
  AR_CHECK(ar__onnx_tensor_new(&o, x->dtype, &c->out[0], c->err));
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

/* ---- the table ------------------------------------------------------------------------ */

typedef ar_status (*fold_fn)(fold_ctx *c);

static const struct {
  const char *op;
  fold_fn f;
  int min_in; /* inputs that must be given */
} ops[] = {
    {"Identity", fold_unary, 1},
    {"Neg", fold_unary, 1},
    {"Abs", fold_unary, 1},
    {"Sqrt", fold_unary, 1},
    {"Exp", fold_unary, 1},
    {"Log", fold_unary, 1},
    {"Erf", fold_unary, 1},
    {"Relu", fold_unary, 1},
    {"Sigmoid", fold_unary, 1},
    {"Tanh", fold_unary, 1},
    {"Floor", fold_unary, 1},
    {"Ceil", fold_unary, 1},
    {"Reciprocal", fold_unary, 1},
    {"Sign", fold_unary, 1},
    {"Not", fold_unary, 1},
    {"Add", fold_binary, 2},
    {"Sub", fold_binary, 2},
    {"Mul", fold_binary, 2},
    {"Div", fold_binary, 2},
    {"Pow", fold_binary, 2},
    {"Mod", fold_binary, 2},
    {"Min", fold_binary, 1},
    {"Max", fold_binary, 1},
    {"Sum", fold_binary, 1},
    {"Equal", fold_binary, 2},
    {"Less", fold_binary, 2},
    {"Greater", fold_binary, 2},
    {"LessOrEqual", fold_binary, 2},
    {"GreaterOrEqual", fold_binary, 2},
    {"And", fold_binary, 2},
    {"Or", fold_binary, 2},
    {"Xor", fold_binary, 2},
    {"Where", fold_where, 3},
    {"Cast", fold_cast, 1},
    {"CastLike", fold_cast, 2},
    {"Reshape", fold_reshape_like, 1},
    {"Flatten", fold_reshape_like, 1},
    {"Unsqueeze", fold_reshape_like, 1},
    {"Squeeze", fold_reshape_like, 1},
    {"Dropout", fold_reshape_like, 1},
    {"Slice", fold_slice, 1},
    {"Transpose", fold_transpose, 1},
    {"Concat", fold_concat, 1},
    {"Gather", fold_gather, 2},
    {"Expand", fold_expand, 2},
    {"ConstantOfShape", fold_constant_of_shape, 1},
    {"Range", fold_range, 3},
    {"Split", fold_split, 1},
    {"ReduceSum", fold_reduce, 1},
    {"ReduceMean", fold_reduce, 1},
    {"ReduceProd", fold_reduce, 1},
    {"ReduceMax", fold_reduce, 1},
    {"ReduceMin", fold_reduce, 1},
    {"Clip", fold_clip, 1},
    {"Size", fold_size, 1},
    {"Tile", fold_tile, 2},
};

bool ar__onnx_foldable(const char *op_type) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (!strcmp(ops[i].op, op_type))
      return true;
  return false;
}

ar_status ar__onnx_fold(const ar_onnx_model *m, const Onnx__NodeProto *node,
                        const ar_onnx_tensor *const *in, int n_in, ar_onnx_tensor *out, int n_out,
                        ar_err *err) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    if (strcmp(ops[i].op, node->op_type))
      continue;
    for (int k = 0; k < ops[i].min_in; k++)
      if (k >= n_in || !in[k])
        return ar_errf(err, AR_INVALID, "%s needs input %d", node->op_type, k);
    fold_ctx c = {m, node, node->op_type, in, n_in, out, n_out, err};
    ar_status st = ops[i].f(&c);
    if (st != AR_OK)
      for (int k = 0; k < n_out; k++)
        ar_onnx_tensor_fini(&out[k]);
    return st;
  }
  return ar_errf(err, AR_UNSUPPORTED, "%s is not folded", node->op_type);
}
