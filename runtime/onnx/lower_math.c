/*
 * ONNX ops lowered to nn ops: constants and the shapes of values, element-wise
 * ops, Cast, Clip, Expand, Where, and the matrix products MatMul and Gemm.
 * (lower_impl.h lists the four files of op lowerings.)
 */
#include "lower_impl.h"

#include <math.h>

/* ---- constants, shapes ------------------------------------------------------------- */

static ar_status l_constant(lower *L, val *const *in, int n_in) {
  (void)in;
  (void)n_in;
  const Onnx__NodeProto *n = L->node;
  ar_onnx_tensor t;
  const Onnx__AttributeProto *a;
  if ((a = ar__onnx_attr(n, "value")) && a->t) {
    AR_CHECK(ar__onnx_tensor_decode(L->m->path, NULL, NULL, &L->m->lim, a->t, "its attribute value",
                                    &t, L->err));
    ar_err_wrap(L->err, "%s", L->where);
    return ar__onnx_set_out_const(L, 0, &t);
  }
  ar_shape s = {0};
  const bool f = (a = ar__onnx_attr(n, "value_float")) || (a = ar__onnx_attr(n, "value_floats"));
  if (!a)
    a = ar__onnx_attr(n, "value_int");
  if (!a)
    a = ar__onnx_attr(n, "value_ints");
  if (!a)
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "a Constant without a tensor, float(s) or int(s) value "
                         "(sparse and string constants are not imported)");
  const bool list = a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS ||
                    a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  const size_t cnt = list ? (f ? a->n_floats : a->n_ints) : 1;
  if (list) {
    s.nd = 1;
    s.d[0] = (int64_t)cnt;
  }
  AR_CHECK(ar__onnx_const_new(L, &s, f ? AR_DT_F32 : AR_DT_I64, &t));
  for (size_t i = 0; i < cnt; i++) {
    if (f)
      ((float *)t.data)[i] = list ? a->floats[i] : a->f;
    else
      ((int64_t *)t.data)[i] = list ? a->ints[i] : a->i;
  }
  return ar__onnx_set_out_const(L, 0, &t);
}

static ar_status l_shape(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  const ar_shape *x = &in[0]->shape;
  int64_t b = ar__onnx_attr_i(L->node, "start", 0), e = ar__onnx_attr_i(L->node, "end", x->nd);
  b = b < 0 ? b + x->nd : b;
  e = e < 0 ? e + x->nd : e;
  b = b < 0 ? 0 : b > x->nd ? x->nd : b;
  e = e < 0 ? 0 : e > x->nd ? x->nd : e;
  ar_shape s = {1, {e > b ? e - b : 0}};
  ar_onnx_tensor t;
  AR_CHECK(ar__onnx_const_new(L, &s, AR_DT_I64, &t));
  for (int64_t i = b; i < e; i++)
    ((int64_t *)t.data)[i - b] = x->d[i];
  return ar__onnx_set_out_const(L, 0, &t);
}

static ar_status l_size(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  ar_shape s = {0};
  ar_onnx_tensor t;
  AR_CHECK(ar__onnx_const_new(L, &s, AR_DT_I64, &t));
  ((int64_t *)t.data)[0] = ar_shape_count(&in[0]->shape);
  return ar__onnx_set_out_const(L, 0, &t);
}

/* ---- element-wise ------------------------------------------------------------------ */

static const struct {
  const char *onnx;
  ar_nn_op op;
} unary_ops[] = {{"Relu", AR_NN_RELU}, {"Sigmoid", AR_NN_SIGMOID},
                 {"Tanh", AR_NN_TANH}, {"Sqrt", AR_NN_SQRT},
                 {"Exp", AR_NN_EXP},   {"Log", AR_NN_LOG},
                 {"Neg", AR_NN_NEG},   {"Abs", AR_NN_ABS},
                 {"Erf", AR_NN_ERF},   {"LeakyRelu", AR_NN_LEAKY_RELU}};

static ar_status l_unary(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  AR_CHECK(want_f32(L, in[0], "the input"));
  ar_nn_attr a = attr0();
  ar_nn_op op = AR_NN_RELU;
  for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++)
    if (!strcmp(unary_ops[i].onnx, L->node->op_type))
      op = unary_ops[i].op;
  a.alpha = ar__onnx_attr_f(L->node, "alpha", 0.01f);
  int t;
  AR_CHECK(tensor(L, in[0], &t));
  return emit1(L, op, &a, 1, &t);
}

static ar_status l_identity(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  int t;
  AR_CHECK(tensor(L, in[0], &t));
  return ar__onnx_set_out(L, 0, t);
}

static ar_status l_binary(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  AR_CHECK(need(L, in, n_in, 1));
  if (n_in > 2)
    return ar__onnx_fail(L, AR_INVALID, "%d inputs (%s takes two); the model is invalid", n_in,
                         L->node->op_type);
  const char *name = L->node->op_type;
  const ar_nn_op op = !strcmp(name, "Add")   ? AR_NN_ADD
                      : !strcmp(name, "Sub") ? AR_NN_SUB
                      : !strcmp(name, "Mul") ? AR_NN_MUL
                      : !strcmp(name, "Div") ? AR_NN_DIV
                                             : AR_NN_POW;
  val *x = in[0], *y = in[1];
  ar_shape o;
  if (!ar_shape_broadcast(&x->shape, &y->shape, &o))
    return ar__onnx_fail(L, AR_INVALID, "the inputs' shapes do not broadcast");
  if (op != AR_NN_POW && x->dtype != y->dtype)
    return ar__onnx_fail(L, AR_INVALID, "inputs of types %s and %s (ONNX wants one type)",
                         ar_dtype_name(x->dtype), ar_dtype_name(y->dtype));
  if (x->dtype == AR_DT_BOOL)
    return ar__onnx_fail(L, AR_UNSUPPORTED, "arithmetic on bool");
  ar_nn_attr a = attr0();
  int tx;
  /* A constant single f32 second operand that does not change the shape:
   * the op's scalar form (nothing to read, no gradient to reduce). */
  const bool one = y->c && !ar__onnx_trained(L, y) && ar_shape_count(&y->shape) == 1 &&
                   ar_shape_eq(&o, &x->shape);
  if (x->dtype == AR_DT_F32 && one && (y->dtype == AR_DT_F32 || op == AR_NN_POW)) {
    a.scalar = (float)ar__onnx_get_f(y->c, 0);
    AR_CHECK(tensor(L, x, &tx));
    return emit1(L, op, &a, 1, &tx);
  }
  int ty, in2[2];
  AR_CHECK(tensor(L, x, &tx));
  AR_CHECK(tensor(L, y, &ty));
  if (op == AR_NN_POW && x->dtype != y->dtype) {
    /* Pow(T, T1) gives T: an integer base is raised in f32 and cast back
     * (ONNX's reference computes in floating point, then casts). */
    if (x->dtype == AR_DT_F32) {
      AR_CHECK(cast_to(L, ty, AR_DT_F32, &ty));
    } else if (y->dtype == AR_DT_F32) {
      int r[AR_NN_MAX_IO];
      AR_CHECK(cast_to(L, tx, AR_DT_F32, &tx));
      in2[0] = tx;
      in2[1] = ty;
      AR_CHECK(ar__onnx_emit(L, "pow", AR_NN_POW, &a, 2, in2, NULL, NULL, AR_NN_MODE_RUN, r));
      AR_CHECK(cast_to(L, r[0], x->dtype, &tx));
      return ar__onnx_set_out(L, 0, tx);
    } else {
      AR_CHECK(cast_to(L, ty, x->dtype, &ty));
    }
  }
  in2[0] = tx;
  in2[1] = ty;
  return emit1(L, op, &a, 2, in2);
}

static ar_status l_where(lower *L, val *const *in, int n_in) {
  for (int k = 0; k < 3; k++)
    AR_CHECK(need(L, in, n_in, k));
  int t[3];
  for (int k = 0; k < 3; k++)
    AR_CHECK(tensor(L, in[k], &t[k]));
  ar_nn_attr a = attr0();
  return emit1(L, AR_NN_WHERE, &a, 3, t);
}

static ar_status l_cast(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  ar_dtype to;
  const char *tn;
  if (!strcmp(L->node->op_type, "CastLike")) {
    AR_CHECK(need(L, in, n_in, 1));
    to = in[1]->dtype;
  } else if (!ar__onnx_dtype((int32_t)ar__onnx_attr_i(L->node, "to", 0), &to, &tn)) {
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "a cast to %s (accelrt imports f32, i64, i32, u8 and bool)", tn);
  }
  int t;
  AR_CHECK(tensor(L, in[0], &t));
  AR_CHECK(cast_to(L, t, to, &t));
  return ar__onnx_set_out(L, 0, t);
}

static ar_status l_clip(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  AR_CHECK(want_f32(L, in[0], "the input"));
  ar_nn_attr a = attr0();
  double lo, hi;
  AR_CHECK(scalar(L, in, n_in, 1, ar__onnx_attr_f(L->node, "min", -INFINITY), &lo));
  AR_CHECK(scalar(L, in, n_in, 2, ar__onnx_attr_f(L->node, "max", INFINITY), &hi));
  a.lo = (float)lo;
  a.hi = (float)hi;
  int t;
  AR_CHECK(tensor(L, in[0], &t));
  return emit1(L, AR_NN_CLIP, &a, 1, &t);
}

static ar_status l_expand(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  int64_t v[AR_NN_MAX_DIMS];
  int n;
  AR_CHECK(ints(L, in, n_in, 1, NULL, v, AR_NN_MAX_DIMS, &n));
  if (n < 0)
    return ar__onnx_fail(L, AR_INVALID, "no shape");
  ar_nn_attr a = attr0();
  a.shape.nd = n;
  for (int k = 0; k < n; k++)
    a.shape.d[k] = v[k];
  int t;
  AR_CHECK(tensor(L, in[0], &t));
  return emit1(L, AR_NN_EXPAND, &a, 1, &t);
}

/* ---- matrix products ------------------------------------------------------------- */

/* The rows of s (B..., M, K) as a (rows, K) matrix: the product of its
 * dims but the last (not its count over K, which may be 0). */
static int64_t lead_count(const ar_shape *s) {
  int64_t r = 1;
  for (int k = 0; k + 1 < s->nd; k++)
    r *= s->d[k];
  return r;
}

/* ---- a sampled head's weight (opts->sparse_nodes) ---------------------------- */

/* How many inputs of the graph's nodes name `name`, and the last such node. */
static int uses(const lower *L, const char *name, int *last) {
  const Onnx__GraphProto *g = L->m->g;
  int c = 0;
  for (size_t i = 0; i < g->n_node; i++)
    for (size_t k = 0; k < g->node[i]->n_input; k++)
      if (g->node[i]->input[k] && !strcmp(g->node[i]->input[k], name)) {
        c++;
        *last = (int)i;
      }
  return c;
}

static bool named_sparse(const lower *L) {
  const char *nm = L->node->name;
  for (int i = 0; nm && i < L->o->n_sparse_nodes; i++)
    if (!strcmp(L->o->sparse_nodes[i], nm))
      return true;
  return false;
}

/* A trained f32 initializer that this node alone reads, not yet a tensor. */
static bool own_param(const lower *L, const val *v, int nd) {
  int last;
  return v && ar__onnx_trained(L, v) && v->t < 0 && v->shape.nd == nd && uses(L, v->name, &last) == 1;
}

/* B (K, N) as the parameter of its name held transposed, (N, K). */
static ar_status param_t(lower *L, val *B, int *t) {
  const int64_t K = B->shape.d[0], N = B->shape.d[1];
  const int64_t count = K * N;
  float *d = ar_malloc((size_t)(count > 0 ? count : 1) * sizeof *d);
  if (!d)
    return ar_errf(L->err, AR_NOMEM, "%s: out of memory transposing '%s'", L->where, B->name);
  const float *src = B->c->data;
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++)
      d[n * K + k] = src[k * N + n];
  ar_shape s = {2, {N, K}};
  ar_status st = ar_nn_graph_tensor(L->g, B->name, AR_NN_T_PARAM, &s, AR_DT_F32, d, t, L->err);
  ar_free(d);
  AR_CHECK(st);
  L->g->tensors[*t].transposed = true;
  B->t = *t;
  return AR_OK;
}

/* The node named in model.sparse as one DENSE over A's rows when its weight
 * B (K, N) is an initializer read only here: a MatMul (its bias from the
 * one Add of an (N) initializer that alone reads its output, lowered with
 * it), or a Gemm without transA, alpha 1 and C absent or an (N)
 * initializer with beta 1.  *done false: lowered as usual (the head's
 * check then says why the node cannot be sampled). */
static ar_status sparse_dense(lower *L, val *const *in, int n_in, bool gemm, bool *done) {
  *done = false;
  const Onnx__NodeProto *n = L->node;
  val *A = in[0], *B = in[1], *C = gemm && n_in > 2 ? in[2] : NULL;
  if (!named_sparse(L) || !A || A->dtype != AR_DT_F32 || A->shape.nd < 2 || !own_param(L, B, 2) ||
      A->shape.d[A->shape.nd - 1] != B->shape.d[0])
    return AR_OK;
  const int64_t K = B->shape.d[0], N = B->shape.d[1];
  int add = -1;
  if (gemm) {
    if (A->shape.nd != 2 || ar__onnx_attr_i(n, "transA", 0) || ar__onnx_attr_i(n, "transB", 0) ||
        ar__onnx_attr_f(n, "alpha", 1.0f) != 1.0f ||
        (C && (!own_param(L, C, 1) || C->shape.d[0] != N ||
               ar__onnx_attr_f(n, "beta", 1.0f) != 1.0f)))
      return AR_OK;
  } else if (n->n_output == 1 && *n->output[0] && uses(L, n->output[0], &add) == 1 &&
             !strcmp(L->m->g->node[add]->op_type, "Add") && L->m->g->node[add]->n_input == 2) {
    /* An Add of two inputs (one of them this output): a malformed Add of
     * one is left to its own lowering, which refuses it. */
    const Onnx__NodeProto *an = L->m->g->node[add];
    const char *other = strcmp(an->input[0], n->output[0]) ? an->input[0] : an->input[1];
    int v = ar__onnx_map_get(&L->val_of, other);
    C = v >= 0 ? &L->vals[v] : NULL;
    if (!own_param(L, C, 1) || C->shape.d[0] != N)
      C = NULL, add = -1;
  } else {
    add = -1;
  }
  int t, tw, tc = -1, o[AR_NN_MAX_IO];
  AR_CHECK(tensor(L, A, &t));
  if (A->shape.nd != 2) {
    ar_shape rows = {2, {lead_count(&A->shape), K}};
    AR_CHECK(ar__onnx_reshape_to(L, "rows", t, &rows, &t));
  }
  AR_CHECK(param_t(L, B, &tw));
  if (C)
    AR_CHECK(tensor(L, C, &tc));
  ar_nn_attr a = attr0();
  a.out = N;
  a.bias = C != NULL;
  int params[2] = {tw, tc};
  AR_CHECK(ar__onnx_emit(L, NULL, AR_NN_DENSE, &a, 1, &t, params, NULL, AR_NN_MODE_RUN, o));
  t = o[0];
  if (A->shape.nd != 2) {
    ar_shape out = A->shape;
    out.d[out.nd - 1] = N;
    AR_CHECK(ar__onnx_reshape_to(L, "out", t, &out, &t));
  }
  AR_CHECK(ar__onnx_set_out(L, 0, t));
  if (add >= 0) { /* the Add's output is this node's: the Add is done */
    const Onnx__NodeProto *self = L->node;
    L->node = L->m->g->node[add];
    ar_status st = ar__onnx_set_out(L, 0, t);
    L->node = self;
    AR_CHECK(st);
    L->skip = add;
  }
  *done = true;
  return AR_OK;
}

static ar_status l_matmul(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  AR_CHECK(need(L, in, n_in, 1));
  AR_CHECK(want_f32(L, in[0], "input A"));
  AR_CHECK(want_f32(L, in[1], "input B"));
  bool done;
  AR_CHECK(sparse_dense(L, in, n_in, false, &done));
  if (done)
    return AR_OK;
  ar_shape sa = in[0]->shape, sb = in[1]->shape;
  if (sa.nd == 0 || sb.nd == 0)
    return ar__onnx_fail(L, AR_INVALID, "MatMul of a scalar");
  int ta, tb;
  AR_CHECK(tensor(L, in[0], &ta));
  AR_CHECK(tensor(L, in[1], &tb));
  /* NumPy's vectors: (K) as (1, K) on the left, (K, 1) on the right, the
   * extra dim dropped from the result. */
  const bool va = sa.nd == 1, vb = sb.nd == 1;
  if (va) {
    ar_shape s = {2, {1, sa.d[0]}};
    AR_CHECK(ar__onnx_reshape_to(L, "vec", ta, &s, &ta));
    sa = s;
  }
  if (vb) {
    ar_shape s = {2, {sb.d[0], 1}};
    AR_CHECK(ar__onnx_reshape_to(L, "vec", tb, &s, &tb));
    sb = s;
  }
  const int64_t M = sa.d[sa.nd - 2], K = sa.d[sa.nd - 1], N = sb.d[sb.nd - 1];
  if (sb.d[sb.nd - 2] != K)
    return ar__onnx_fail(L, AR_INVALID, "A's last dim %lld and B's second-to-last %lld differ",
                         (long long)K, (long long)sb.d[sb.nd - 2]);
  ar_shape ba = sa, bb = sb, bo;
  ba.nd -= 2;
  bb.nd -= 2;
  if (!ar_shape_broadcast(&ba, &bb, &bo))
    return ar__onnx_fail(L, AR_INVALID, "the batch dims do not broadcast");
  ar_shape out = bo;
  out.d[out.nd++] = M;
  out.d[out.nd++] = N;
  ar_nn_attr a = attr0();
  int in2[2], o[AR_NN_MAX_IO];
  if (sb.nd == 2) {
    /* (B..., M, K) x (K, N): the batch folds into the rows. */
    ar_shape rows = {2, {lead_count(&sa), K}};
    AR_CHECK(ar__onnx_reshape_to(L, "rows", ta, &rows, &in2[0]));
    in2[1] = tb;
  } else {
    /* Batch dims broadcast to the result's (EXPAND), then equal. */
    ar_shape ea = bo, eb = bo;
    ea.d[ea.nd++] = M;
    ea.d[ea.nd++] = K;
    eb.d[eb.nd++] = K;
    eb.d[eb.nd++] = N;
    in2[0] = ta;
    in2[1] = tb;
    const ar_shape *want[2] = {&ea, &eb};
    for (int k = 0; k < 2; k++) {
      if (ar_shape_eq(&L->g->tensors[in2[k]].shape, want[k]))
        continue;
      ar_nn_attr e = attr0();
      e.shape = *want[k];
      AR_CHECK(
          ar__onnx_emit(L, "bcast", AR_NN_EXPAND, &e, 1, &in2[k], NULL, NULL, AR_NN_MODE_RUN, o));
      in2[k] = o[0];
    }
  }
  AR_CHECK(ar__onnx_emit(L, sb.nd == 2 && sa.nd != 2 ? "mm" : NULL, AR_NN_MATMUL, &a, 2, in2, NULL,
                         NULL, AR_NN_MODE_RUN, o));
  if (va || vb) { /* drop the vectors' dims */
    out.nd -= 2;
    if (!va)
      out.d[out.nd++] = M;
    if (!vb)
      out.d[out.nd++] = N;
  }
  int t;
  AR_CHECK(ar__onnx_reshape_to(L, "out", o[0], &out, &t));
  return ar__onnx_set_out(L, 0, t);
}

static ar_status l_gemm(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  AR_CHECK(need(L, in, n_in, 1));
  const Onnx__NodeProto *n = L->node;
  const float alpha = ar__onnx_attr_f(n, "alpha", 1.0f), beta = ar__onnx_attr_f(n, "beta", 1.0f);
  const bool ta_ = ar__onnx_attr_i(n, "transA", 0) != 0, tb_ = ar__onnx_attr_i(n, "transB", 0) != 0;
  val *A = in[0], *B = in[1], *C = n_in > 2 ? in[2] : NULL;
  AR_CHECK(want_f32(L, A, "input A"));
  AR_CHECK(want_f32(L, B, "input B"));
  if (A->shape.nd != 2 || B->shape.nd != 2)
    return ar__onnx_fail(L, AR_INVALID, "Gemm takes 2-D A and B");
  bool done;
  AR_CHECK(sparse_dense(L, in, n_in, true, &done));
  if (done)
    return AR_OK;
  const int64_t M = ta_ ? A->shape.d[1] : A->shape.d[0], K = ta_ ? A->shape.d[0] : A->shape.d[1];
  const int64_t N = tb_ ? B->shape.d[0] : B->shape.d[1];
  if ((tb_ ? B->shape.d[1] : B->shape.d[0]) != K)
    return ar__onnx_fail(L, AR_INVALID, "A and B do not multiply (K %lld)", (long long)K);
  int t, tb, o[AR_NN_MAX_IO];
  AR_CHECK(tensor(L, A, &t));
  AR_CHECK(tensor(L, B, &tb));
  ar_nn_attr a = attr0();
  /* PyTorch's Linear: Y = A B^T + C with B (N, K) and C (N) stored in the
   * model: one DENSE, whose parameters are B and C exactly. */
  int tc = -1;
  if (C)
    AR_CHECK(tensor(L, C, &tc));
  /* Stored: an initializer or an input, not computed by the graph. */
  const bool stored_b = L->g->tensors[tb].kind != AR_NN_T_VALUE;
  const bool stored_c = C && L->g->tensors[tc].kind != AR_NN_T_VALUE;
  if (!ta_ && tb_ && alpha == 1.0f && stored_b &&
      (!C || (beta == 1.0f && C->shape.nd == 1 && C->shape.d[0] == N && stored_c))) {
    a.out = N;
    a.bias = C != NULL;
    int params[2] = {tb, tc};
    AR_CHECK(ar__onnx_emit(L, NULL, AR_NN_DENSE, &a, 1, &t, params, NULL, AR_NN_MODE_RUN, o));
    return ar__onnx_set_out(L, 0, o[0]);
  }
  if (ta_) {
    ar_nn_attr p = attr0();
    p.perm[0] = 1;
    p.perm[1] = 0;
    AR_CHECK(ar__onnx_emit(L, "transA", AR_NN_TRANSPOSE, &p, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
    t = o[0];
  }
  a.trans_b = tb_;
  int in2[2] = {t, tb};
  AR_CHECK(ar__onnx_emit(L, C || alpha != 1.0f ? "mm" : NULL, AR_NN_MATMUL, &a, 2, in2, NULL, NULL,
                         AR_NN_MODE_RUN, o));
  t = o[0];
  if (alpha != 1.0f) {
    ar_nn_attr s = attr0();
    s.scalar = alpha;
    AR_CHECK(
        ar__onnx_emit(L, C ? "alpha" : NULL, AR_NN_MUL, &s, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
    t = o[0];
  }
  if (C) {
    AR_CHECK(want_f32(L, C, "input C"));
    if (beta != 1.0f) {
      ar_nn_attr s = attr0();
      s.scalar = beta;
      AR_CHECK(ar__onnx_emit(L, "beta", AR_NN_MUL, &s, 1, &tc, NULL, NULL, AR_NN_MODE_RUN, o));
      tc = o[0];
    }
    ar_shape want = {2, {M, N}}, got;
    if (!ar_shape_broadcast(&want, &C->shape, &got) || !ar_shape_eq(&got, &want))
      return ar__onnx_fail(L, AR_INVALID, "C does not broadcast to the %lldx%lld result",
                           (long long)M, (long long)N);
    int in3[2] = {t, tc};
    ar_nn_attr s = attr0();
    AR_CHECK(ar__onnx_emit(L, NULL, AR_NN_ADD, &s, 2, in3, NULL, NULL, AR_NN_MODE_RUN, o));
    t = o[0];
  }
  return ar__onnx_set_out(L, 0, t);
}

const ar__onnx_lowering ar__onnx_math_ops[] = {
    {"Constant", l_constant}, {"Shape", l_shape},     {"Size", l_size},  {"Identity", l_identity},
    {"Relu", l_unary},        {"Sigmoid", l_unary},   {"Tanh", l_unary}, {"Sqrt", l_unary},
    {"Exp", l_unary},         {"Log", l_unary},       {"Neg", l_unary},  {"Abs", l_unary},
    {"Erf", l_unary},         {"LeakyRelu", l_unary}, {"Add", l_binary}, {"Sub", l_binary},
    {"Mul", l_binary},        {"Div", l_binary},      {"Pow", l_binary}, {"Where", l_where},
    {"Cast", l_cast},         {"CastLike", l_cast},   {"Clip", l_clip},  {"Expand", l_expand},
    {"MatMul", l_matmul},     {"Gemm", l_gemm},
};
const int ar__onnx_n_math_ops = (int)(sizeof ar__onnx_math_ops / sizeof ar__onnx_math_ops[0]);
