/*
 * Folding (onnx_impl.h): ONNX ops evaluated on the host, on constant
 * tensors of any importable element type, for what is constant for the
 * input shapes (initializers, Constant nodes, Shape of a known shape, and
 * everything computed from those).  Floats are computed in double and
 * rounded once to f32 (so +, -, *, / give f32's own results); integers in
 * int64, wrapped to their type on the store, as NumPy does; x / 0 is 0 for
 * integers.  Only the ops of `ops` below fold; the message of an error
 * names no node (the caller adds it).  This file holds the element-wise
 * folds and the table; fold_move.c the data movement and reductions,
 * fold_values.c the elements and the argument rules (fold_impl.h).
 */
#include "fold_impl.h"

#include <math.h>
#include <string.h>

/* ---- element-wise ---------------------------------------------------------------- */

void ar__onnx_bc_strides(const ar_shape *out, const ar_shape *s, int64_t *st) {
  int64_t acc = 1;
  for (int k = out->nd - 1; k >= 0; k--) {
    int kk = k - (out->nd - s->nd);
    int64_t ext = kk >= 0 ? s->d[kk] : 1;
    st[k] = ext == 1 ? 0 : acc;
    acc *= ext;
  }
}

int64_t ar__onnx_bc_offset(const ar_shape *out, const int64_t *st, int64_t i) {
  int64_t off = 0;
  for (int k = out->nd - 1; k >= 0; k--) {
    off += (i % out->d[k]) * st[k];
    i /= out->d[k];
  }
  return off;
}

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
  AR_CHECK(ar__onnx_tensor_new(c->m, &x->shape, x->dtype, &c->out[0], c->err));
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
          : c->op[0] == 'A' ? (v < 0 ? (int64_t)(0u - (uint64_t)v) : v) /* INT64_MIN stays */
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
  if (z < 0) /* z % 2, not -z: -INT64_MIN overflows */
    return x == 1 ? 1 : x == -1 ? (z % 2 ? -1 : 1) : 0;
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
    /* Python's sign rule (fmod 0): the result takes the divisor's sign.
     * A divisor of -1 leaves 0 (INT64_MIN % -1 traps); a remainder of the
     * other sign moves by the divisor, a sum of opposite signs that
     * cannot overflow. */
    *ir = ib == 0 || ib == -1 ? 0 : ia % ib;
    if (*ir != 0 && (*ir < 0) != (ib < 0))
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
  AR_CHECK(ar__onnx_tensor_new(c->m, &o, pred ? AR_DT_BOOL : a->dtype, out, c->err));
  int64_t sa[AR_NN_MAX_DIMS], sb[AR_NN_MAX_DIMS];
  ar__onnx_bc_strides(&o, &a->shape, sa);
  ar__onnx_bc_strides(&o, &b->shape, sb);
  const bool flt = a->dtype == AR_DT_F32 || b->dtype == AR_DT_F32;
  const int64_t n = ar_shape_count(&o);
  for (int64_t i = 0; i < n; i++) {
    int64_t ia = ar__onnx_bc_offset(&o, sa, i), ib = ar__onnx_bc_offset(&o, sb, i);
    double fr;
    int64_t ir;
    binary_values(c->op, flt, ar__onnx_get_f(a, ia), ar__onnx_get_f(b, ib), ar__onnx_get_i(a, ia),
                  ar__onnx_get_i(b, ib), &fr, &ir);
    ar__onnx_set(out, i, fr, ir, flt && !pred);
  }
  return AR_OK;
}

static ar_status fold_binary(fold_ctx *c) {
  const bool variadic = !strcmp(c->op, "Min") || !strcmp(c->op, "Max") || !strcmp(c->op, "Sum");
  if (c->n_in < 2 || !arg(c, 0) || !arg(c, 1)) {
    if (c->n_in == 1 && variadic)
      return fold_unary(c);
    return ar_errf(c->err, AR_INVALID, "%s needs two inputs", c->op);
  }
  /* Only the variadic ops take more (ar__onnx_fold checked that each of
   * theirs is given); a third input of Add and the like is an error, not
   * an operand. */
  if (c->n_in > 2 && !variadic)
    return ar_errf(c->err, AR_INVALID, "%s takes two inputs, not %d; the model is invalid", c->op,
                   c->n_in);
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
  AR_CHECK(ar__onnx_tensor_new(c->m, &o2, x->dtype, &c->out[0], c->err));
  int64_t sk[AR_NN_MAX_DIMS], sx[AR_NN_MAX_DIMS], sy[AR_NN_MAX_DIMS];
  ar__onnx_bc_strides(&o2, &k->shape, sk);
  ar__onnx_bc_strides(&o2, &x->shape, sx);
  ar__onnx_bc_strides(&o2, &y->shape, sy);
  const size_t es = ar_dtype_size(x->dtype);
  for (int64_t i = 0; i < ar_shape_count(&o2); i++) {
    const bool take = ar__onnx_get_i(k, ar__onnx_bc_offset(&o2, sk, i)) != 0;
    const ar_onnx_tensor *src = take ? x : y;
    memcpy((char *)c->out[0].data + i * es,
           (const char *)src->data + ar__onnx_bc_offset(&o2, take ? sx : sy, i) * es, es);
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
  AR_CHECK(ar__onnx_tensor_new(c->m, &x->shape, to, &c->out[0], c->err));
  for (int64_t i = 0; i < ar_shape_count(&x->shape); i++)
    ar__onnx_set(&c->out[0], i, ar__onnx_get_f(x, i), ar__onnx_get_i(x, i), x->dtype == AR_DT_F32);
  return AR_OK;
}

/* ---- the table ------------------------------------------------------------------------ */

typedef ar_status (*fold_fn)(fold_ctx *c);

/* Concat, Min, Max, Sum: at least one input and no empty name among them
 * (an empty name means "not given", which a variadic input cannot be). */
#define VARIADIC (-1)

static const struct {
  const char *op;
  fold_fn f;
  int min_in; /* inputs that must be given; VARIADIC: every one named */
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
    {"Min", fold_binary, VARIADIC},
    {"Max", fold_binary, VARIADIC},
    {"Sum", fold_binary, VARIADIC},
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
    {"Reshape", ar__onnx_fold_reshape_like, 1},
    {"Flatten", ar__onnx_fold_reshape_like, 1},
    {"Unsqueeze", ar__onnx_fold_reshape_like, 1},
    {"Squeeze", ar__onnx_fold_reshape_like, 1},
    {"Dropout", ar__onnx_fold_reshape_like, 1},
    {"Slice", ar__onnx_fold_slice, 1},
    {"Transpose", ar__onnx_fold_transpose, 1},
    {"Concat", ar__onnx_fold_concat, VARIADIC},
    {"Gather", ar__onnx_fold_gather, 2},
    {"Expand", ar__onnx_fold_expand, 2},
    {"ConstantOfShape", ar__onnx_fold_constant_of_shape, 1},
    {"Range", ar__onnx_fold_range, 3},
    {"Split", ar__onnx_fold_split, 1},
    {"ReduceSum", ar__onnx_fold_reduce, 1},
    {"ReduceMean", ar__onnx_fold_reduce, 1},
    {"ReduceProd", ar__onnx_fold_reduce, 1},
    {"ReduceMax", ar__onnx_fold_reduce, 1},
    {"ReduceMin", ar__onnx_fold_reduce, 1},
    {"Clip", ar__onnx_fold_clip, 1},
    {"Size", ar__onnx_fold_size, 1},
    {"Tile", ar__onnx_fold_tile, 2},
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
    const int need = ops[i].min_in == VARIADIC ? (n_in > 0 ? n_in : 1) : ops[i].min_in;
    for (int k = 0; k < need; k++)
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
