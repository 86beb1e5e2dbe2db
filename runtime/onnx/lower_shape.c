/*
 * ONNX ops lowered to nn ops: Reshape, Flatten, Squeeze, Unsqueeze,
 * Transpose, Concat, Split, Slice (steps by gathering), Pad (edge and
 * reflect by gathering), Gather, ReduceMean and ReduceSum; and the lookup
 * of an op in the four files' tables.
 * (lower_impl.h lists the four files of op lowerings.)
 */
#include "lower_impl.h"

#include <math.h>

/* Ops whose inputs must all be constant (they are folded): here only when
 * one is not. */
static ar_status l_const_only(lower *L, val *const *in, int n_in) {
  for (int k = 0; k < n_in; k++)
    if (in[k] && !in[k]->c)
      return ar__onnx_fail(L, AR_UNSUPPORTED,
                           "input %d ('%s') is computed from the model's input at run "
                           "time; accelrt imports %s only on values constant for the "
                           "input shapes (they are folded at import)",
                           k, in[k]->name, L->node->op_type);
  return ar__onnx_fail(L, AR_UNSUPPORTED, "not lowered");
}

/* ---- shapes ------------------------------------------------------------------------ */

static ar_status l_reshape_like(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  const char *op = L->node->op_type;
  int64_t v[AR_NN_MAX_DIMS + 1];
  int n;
  ar_shape s;
  ar_err e = AR_ERR_INIT;
  ar_status st;
  if (!strcmp(op, "Reshape")) {
    AR_CHECK(ints(L, in, n_in, 1, "shape", v, AR_NN_MAX_DIMS, &n));
    st = ar__onnx_reshape_shape(&X->shape, v, n < 0 ? 0 : n,
                                ar__onnx_attr_i(L->node, "allowzero", 0) != 0, &s, &e);
  } else if (!strcmp(op, "Flatten")) {
    st = ar__onnx_flatten_shape(&X->shape, ar__onnx_attr_i(L->node, "axis", 1), &s, &e);
  } else if (!strcmp(op, "Unsqueeze")) {
    AR_CHECK(ints(L, in, n_in, 1, "axes", v, AR_NN_MAX_DIMS, &n));
    st = ar__onnx_unsqueeze_shape(&X->shape, v, n < 0 ? 0 : n, &s, &e);
  } else {
    AR_CHECK(ints(L, in, n_in, 1, "axes", v, AR_NN_MAX_DIMS, &n));
    st = ar__onnx_squeeze_shape(&X->shape, v, n, &s, &e);
  }
  if (st != AR_OK)
    return ar_errf(L->err, st, "%s: %s", L->where, e.msg);
  int t;
  AR_CHECK(tensor(L, X, &t));
  if (X->dtype != AR_DT_F32 && !ar_shape_eq(&s, &X->shape))
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "a %s of %s values computed at run time (the engine's shape "
                         "ops move f32)",
                         op, ar_dtype_name(X->dtype));
  AR_CHECK(ar__onnx_reshape_to(L, NULL, t, &s, &t));
  return ar__onnx_set_out(L, 0, t);
}

static ar_status l_transpose(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  AR_CHECK(want_f32(L, X, "the input"));
  int64_t perm[AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(ints(L, in, n_in, -1, "perm", perm, AR_NN_MAX_DIMS, &n));
  const int nd = X->shape.nd;
  if (n >= 0 && n != nd)
    return ar__onnx_fail(L, AR_INVALID, "perm has %d entries for %d dims", n, nd);
  ar_nn_attr a = attr0();
  for (int k = 0; k < nd; k++) {
    /* In range before it narrows to int (the op checks for repeats). */
    if (n >= 0 && (perm[k] < 0 || perm[k] >= nd))
      return ar__onnx_fail(L, AR_INVALID, "perm entry %lld is outside 0..%d", (long long)perm[k],
                           nd - 1);
    a.perm[k] = (int)(n < 0 ? nd - 1 - k : perm[k]);
  }
  int t;
  AR_CHECK(tensor(L, X, &t));
  return emit1(L, AR_NN_TRANSPOSE, &a, 1, &t);
}

static ar_status l_concat(lower *L, val *const *in, int n_in) {
  if (n_in < 1)
    return ar__onnx_fail(L, AR_INVALID, "no inputs");
  for (int k = 0; k < n_in; k++) {
    AR_CHECK(need(L, in, n_in, k));
    AR_CHECK(want_f32(L, in[k], "an input"));
  }
  ar_nn_attr a = attr0();
  int ax = 0;
  AR_CHECK(axis_attr(L, 0, in[0]->shape.nd, &ax));
  a.axis = ax;
  /* At most AR_NN_MAX_IO inputs per CONCAT: longer lists in steps. */
  int acc = -1, o[AR_NN_MAX_IO];
  for (int k = 0; k < n_in;) {
    int ts[AR_NN_MAX_IO], m = 0;
    if (acc >= 0)
      ts[m++] = acc;
    while (k < n_in && m < AR_NN_MAX_IO)
      AR_CHECK(tensor(L, in[k++], &ts[m++]));
    AR_CHECK(ar__onnx_emit(L, k < n_in ? "cat" : NULL, AR_NN_CONCAT, &a, m, ts, NULL, NULL,
                           AR_NN_MODE_RUN, o));
    acc = o[0];
  }
  return ar__onnx_set_out(L, 0, acc);
}

static ar_status l_split(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  AR_CHECK(want_f32(L, X, "the input"));
  int ax = 0;
  AR_CHECK(axis_attr(L, 0, X->shape.nd, &ax));
  const int n_out = (int)L->node->n_output;
  if (n_out > AR_NN_MAX_IO)
    return ar__onnx_fail(L, AR_UNSUPPORTED, "%d outputs (at most %d)", n_out, AR_NN_MAX_IO);
  ar_nn_attr a = attr0();
  int n;
  AR_CHECK(ints(L, in, n_in, 1, "split", a.sizes, AR_NN_MAX_IO, &n));
  const int64_t D = X->shape.d[ax];
  if (n < 0) {
    n = n_out;
    for (int i = 0; i < n; i++)
      a.sizes[i] = D / n + (i < D % n ? 1 : 0);
  }
  if (n != n_out)
    return ar__onnx_fail(L, AR_INVALID, "%d split sizes for %d outputs", n, n_out);
  for (int i = 0; i < n; i++)
    if (a.sizes[i] < 0 || a.sizes[i] > D)
      return ar__onnx_fail(L, AR_INVALID, "split size %lld is outside the axis of %lld",
                           (long long)a.sizes[i], (long long)D);
  a.axis = ax;
  a.n_sizes = n;
  int t, o[AR_NN_MAX_IO];
  AR_CHECK(tensor(L, X, &t));
  AR_CHECK(ar__onnx_emit(L, NULL, AR_NN_SPLIT, &a, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
  for (int k = 0; k < n; k++)
    AR_CHECK(ar__onnx_set_out(L, k, o[k]));
  return AR_OK;
}

/* Room for n i64 indices, a constant the import makes: held to the
 * model's tensor limit as folding is (a Pad of 2^30 must not ask the host
 * for 8 GiB). */
static ar_status index_list(lower *L, int64_t n, ar_onnx_tensor *out) {
  ar_shape s = {1, {n}};
  return ar__onnx_const_new(L, &s, AR_DT_I64, out);
}

/* t with `idx` (constant indices) gathered along axis: slices with steps,
 * edge and reflect padding. */
static ar_status gather_const(lower *L, const char *part, int t, int axis, const int64_t *idx,
                              int64_t n, int *out) {
  ar_shape s = {1, {n}};
  int ti, in2[2], o[AR_NN_MAX_IO];
  char nm[300];
  snprintf(nm, sizeof nm, "%.200s/%s_index%d", ar__onnx_out_base(L), part, L->helpers);
  AR_CHECK(ar_nn_graph_tensor(L->g, nm, AR_NN_T_CONST, &s, AR_DT_I64, idx, &ti, L->err));
  ar_nn_attr a = attr0();
  a.axis = axis;
  in2[0] = t;
  in2[1] = ti;
  AR_CHECK(ar__onnx_emit(L, part, AR_NN_GATHER, &a, 2, in2, NULL, NULL, AR_NN_MODE_RUN, o));
  *out = o[0];
  return AR_OK;
}

static ar_status l_slice(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  AR_CHECK(want_f32(L, X, "the input"));
  int64_t st[AR_NN_MAX_DIMS], en[AR_NN_MAX_DIMS], ax[AR_NN_MAX_DIMS], sp[AR_NN_MAX_DIMS];
  int ns, ne, na, np;
  AR_CHECK(ints(L, in, n_in, 1, "starts", st, AR_NN_MAX_DIMS, &ns));
  AR_CHECK(ints(L, in, n_in, 2, "ends", en, AR_NN_MAX_DIMS, &ne));
  AR_CHECK(ints(L, in, n_in, 3, "axes", ax, AR_NN_MAX_DIMS, &na));
  AR_CHECK(ints(L, in, n_in, 4, NULL, sp, AR_NN_MAX_DIMS, &np));
  if (ns < 0 || ns != ne || (na >= 0 && na != ns) || (np >= 0 && np != ns))
    return ar__onnx_fail(L, AR_INVALID, "starts, ends, axes and steps differ in length");
  ar__onnx_slice_t s;
  ar_err e = AR_ERR_INIT;
  if (ar__onnx_slice(&X->shape, st, en, na >= 0 ? ax : NULL, np >= 0 ? sp : NULL, ns, &s, &e))
    return ar__onnx_fail(L, AR_INVALID, "%s", e.msg);
  int t;
  AR_CHECK(tensor(L, X, &t));
  for (int k = 0; k < X->shape.nd; k++) {
    if (s.count[k] == 0) { /* an empty result: a constant */
      ar_shape o = X->shape;
      for (int q = 0; q < o.nd; q++)
        o.d[q] = s.count[q];
      ar_onnx_tensor z;
      AR_CHECK(ar__onnx_const_new(L, &o, X->dtype, &z));
      return ar__onnx_set_out_const(L, 0, &z);
    }
  }
  for (int k = 0; k < X->shape.nd; k++) {
    if (s.step[k] == 1 && s.count[k] == X->shape.d[k])
      continue;
    int o[AR_NN_MAX_IO];
    if (s.step[k] == 1) {
      ar_nn_attr a = attr0();
      a.axis = k;
      a.begin = s.start[k];
      a.end = s.start[k] + s.count[k];
      AR_CHECK(ar__onnx_emit(L, "slice", AR_NN_SLICE, &a, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
      t = o[0];
      continue;
    }
    ar_onnx_tensor ix;
    AR_CHECK(index_list(L, s.count[k], &ix));
    int64_t *idx = ix.data;
    for (int64_t i = 0; i < s.count[k]; i++)
      idx[i] = s.start[k] + i * s.step[k];
    ar_status r = gather_const(L, "step", t, k, idx, s.count[k], &t);
    ar_onnx_tensor_fini(&ix);
    AR_CHECK(r);
  }
  return ar__onnx_set_out(L, 0, t);
}

static ar_status l_pad(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  const int nd = X->shape.nd;
  int64_t pads[2 * AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(ints(L, in, n_in, 1, "pads", pads, 2 * AR_NN_MAX_DIMS, &n));
  if (n != 2 * nd)
    return ar__onnx_fail(L, AR_INVALID, "pads has %d values for %d dims", n, nd);
  int64_t axes_v[AR_NN_MAX_DIMS];
  int na;
  AR_CHECK(ints(L, in, n_in, 3, NULL, axes_v, AR_NN_MAX_DIMS, &na));
  if (na >= 0)
    return ar__onnx_fail(L, AR_UNSUPPORTED, "the axes input (opset 18)");
  double value;
  AR_CHECK(scalar(L, in, n_in, 2, ar__onnx_attr_f(L->node, "value", 0.0f), &value));
  char mb[32];
  const char *mode = ar__onnx_attr_s(L->node, "mode", "constant", mb, sizeof mb);
  for (int k = 0; k < 2 * nd; k++) {
    if (pads[k] < 0)
      return ar__onnx_fail(L, AR_UNSUPPORTED, "negative pads (cropping)");
    if (pads[k] > ((int64_t)1 << 30))
      return ar__onnx_fail(L, AR_INVALID, "pad %lld is beyond 2^30", (long long)pads[k]);
  }
  int t, o[AR_NN_MAX_IO];
  AR_CHECK(tensor(L, X, &t));
  if (!strcmp(mode, "constant")) {
    AR_CHECK(want_f32(L, X, "the input"));
    ar_nn_attr a = attr0();
    for (int k = 0; k < nd; k++) {
      a.pad_nd[k] = pads[k];
      a.pad_nd[AR_NN_MAX_DIMS + k] = pads[nd + k];
    }
    a.scalar = (float)value;
    AR_CHECK(ar__onnx_emit(L, NULL, AR_NN_PAD, &a, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
    return ar__onnx_set_out(L, 0, o[0]);
  }
  const bool edge = !strcmp(mode, "edge");
  if (!edge && strcmp(mode, "reflect"))
    return ar__onnx_fail(L, AR_INVALID, "mode '%s' (constant, reflect or edge)", mode);
  /* Edge and reflect: each padded axis gathers its indices. */
  for (int k = 0; k < nd; k++) {
    const int64_t d = X->shape.d[k], b = pads[k], e = pads[nd + k], m = d + b + e;
    if (!b && !e)
      continue;
    if (!edge && (b >= d || e >= d))
      return ar__onnx_fail(L, AR_INVALID, "reflect padding of %lld and %lld on a dim of %lld",
                           (long long)b, (long long)e, (long long)d);
    if (d == 0) /* edge: no element to repeat */
      return ar__onnx_fail(L, AR_INVALID, "edge padding of an empty dim %d", k);
    ar_onnx_tensor ix;
    AR_CHECK(index_list(L, m, &ix));
    int64_t *idx = ix.data;
    for (int64_t i = 0; i < m; i++) {
      int64_t j = i - b;
      if (edge)
        j = j < 0 ? 0 : j >= d ? d - 1 : j;
      else
        j = j < 0 ? -j : j >= d ? 2 * (d - 1) - j : j;
      idx[i] = j;
    }
    ar_status r = gather_const(L, mode, t, k, idx, m, &t);
    ar_onnx_tensor_fini(&ix);
    AR_CHECK(r);
  }
  return ar__onnx_set_out(L, 0, t);
}

static ar_status l_gather(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  AR_CHECK(need(L, in, n_in, 1));
  ar_nn_attr a = attr0();
  int ax = 0;
  AR_CHECK(axis_attr(L, 0, in[0]->shape.nd, &ax));
  a.axis = ax;
  int t[2];
  AR_CHECK(tensor(L, in[0], &t[0]));
  AR_CHECK(tensor(L, in[1], &t[1]));
  return emit1(L, AR_NN_GATHER, &a, 2, t);
}

/* ReduceMean, ReduceSum: one MEAN/SUM per reduced axis (keeping dims),
 * then the kept dims dropped unless keepdims. */
static ar_status l_reduce(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  AR_CHECK(want_f32(L, X, "the input"));
  const bool mean = !strcmp(L->node->op_type, "ReduceMean");
  int64_t axes[AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(ints(L, in, n_in, 1, "axes", axes, AR_NN_MAX_DIMS, &n));
  int t;
  AR_CHECK(tensor(L, X, &t));
  if (n <= 0 && ar__onnx_attr_i(L->node, "noop_with_empty_axes", 0))
    return ar__onnx_set_out(L, 0, t);
  const int nd = X->shape.nd;
  bool red[AR_NN_MAX_DIMS] = {false};
  for (int k = 0; k < nd; k++)
    red[k] = n <= 0;
  for (int i = 0; i < n; i++) {
    int a = 0;
    ar_err e = AR_ERR_INIT;
    if (ar__onnx_axis(axes[i], nd, &a, &e) != AR_OK)
      return ar__onnx_fail(L, AR_INVALID, "%s", e.msg);
    red[a] = true;
  }
  ar_shape out = {0};
  for (int k = 0; k < nd; k++) {
    if (red[k] && X->shape.d[k] != 1) {
      ar_nn_attr a = attr0();
      a.axis = k;
      a.keepdims = true;
      int o[AR_NN_MAX_IO];
      AR_CHECK(ar__onnx_emit(L, "reduce", mean ? AR_NN_MEAN : AR_NN_SUM, &a, 1, &t, NULL, NULL,
                             AR_NN_MODE_RUN, o));
      t = o[0];
    }
    if (!red[k] || ar__onnx_attr_i(L->node, "keepdims", 1))
      out.d[out.nd++] = red[k] ? 1 : X->shape.d[k];
  }
  AR_CHECK(ar__onnx_reshape_to(L, NULL, t, &out, &t));
  return ar__onnx_set_out(L, 0, t);
}

static const ar__onnx_lowering shape_ops[] = {
    {"Reshape", l_reshape_like}, {"Flatten", l_reshape_like}, {"Unsqueeze", l_reshape_like},
    {"Squeeze", l_reshape_like}, {"Transpose", l_transpose},  {"Concat", l_concat},
    {"Split", l_split},          {"Slice", l_slice},          {"Pad", l_pad},
    {"Gather", l_gather},        {"ReduceMean", l_reduce},    {"ReduceSum", l_reduce},
};

ar_status ar__onnx_lower_node(ar__onnx_lower *L, ar__onnx_val *const *ins, int n_in) {
  const struct {
    const ar__onnx_lowering *t;
    int n;
  } tables[] = {{ar__onnx_math_ops, ar__onnx_n_math_ops},
                {ar__onnx_image_ops, ar__onnx_n_image_ops},
                {ar__onnx_norm_ops, ar__onnx_n_norm_ops},
                {shape_ops, (int)(sizeof shape_ops / sizeof shape_ops[0])}};
  for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++)
    for (int i = 0; i < tables[k].n; i++)
      if (!strcmp(tables[k].t[i].op, L->node->op_type))
        return tables[k].t[i].f(L, ins, n_in);
  if (ar__onnx_foldable(L->node->op_type))
    return l_const_only(L, ins, n_in);
  return ar__onnx_fail(L, AR_UNSUPPORTED, "the op %s is not imported (docs/onnx.md lists the ops)",
                       L->node->op_type);
}
