/* Each nn op as ONNX nodes for inference (ar__onnx_export_node): batch
 * normalisation with its running statistics, dropout as the identity,
 * fused activations as their own nodes, GELU and (before opset 17) layer
 * normalisation as their decompositions.  Shapes that follow the batch
 * (found by comparing the graph with the probe built for another batch)
 * become -1 in a Reshape and 1 in an Expand; anywhere else they are
 * refused, since ONNX would need them constant. */
#include "export_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NM(x)                                                                                      \
  do {                                                                                             \
    if (!(x))                                                                                      \
      return ar__onnx_ex_nomem(e);                                                                 \
  } while (0)

static const ar_nn_gnode *cur(const ar__onnx_ex *e) { return &e->g->nodes[e->cur]; }

static ar_status refuse(ar__onnx_ex *e, const char *why) {
  const ar_nn_gnode *d = cur(e);
  return ar_errf(e->err, AR_UNSUPPORTED, "node '%s' (%s): %s", d->name, ar_nn_op_name(d->op),
                 why);
}

static const char *in(ar__onnx_ex *e, int i) { return ar__onnx_ex_value(e, cur(e)->in[i]); }
static const char *out(ar__onnx_ex *e, int k) { return ar__onnx_ex_value(e, cur(e)->out[k]); }
static const char *tmp(ar__onnx_ex *e, const char *what) {
  char b[256];
  snprintf(b, sizeof b, "%.200s/%s", cur(e)->name, what);
  return ar__onnx_ex_fresh(e, b);
}

/* One node with one output; *made (may be NULL) for its attributes. */
static ar_status op1(ar__onnx_ex *e, const char *type, int n_in, const char *const *ins,
                     const char *o, Onnx__NodeProto **made) {
  for (int i = 0; i < n_in; i++)
    NM(ins[i]);
  NM(o);
  return ar__onnx_ex_node(e, type, n_in, ins, 1, &o, made);
}

static ar_status i64s(ar__onnx_ex *e, const char *what, const int64_t *v, int n, const char **o) {
  return ar__onnx_ex_const(e, what, AR_DT_I64, NULL, v, n, o);
}

/* A scalar of type t holding v (f32) or iv (integers). */
static ar_status scalar(ar__onnx_ex *e, ar_dtype t, double v, const char **o) {
  union {
    float f;
    int64_t i64;
    int32_t i32;
    uint8_t u8;
  } u;
  memset(&u, 0, sizeof u);
  if (t == AR_DT_F32)
    u.f = (float)v;
  else if (t == AR_DT_I64)
    u.i64 = (int64_t)v;
  else if (t == AR_DT_I32)
    u.i32 = (int32_t)v;
  else
    u.u8 = (uint8_t)v;
  ar_shape s = {0, {0}};
  return ar__onnx_ex_const(e, "scalar", t, &s, &u, 1, o);
}

/* Parameter or state slot k of the node, reshaped to the slot's shape when
 * the tensor bound there has another (an imported (3,4,5) scale). */
static ar_status slot(ar__onnx_ex *e, bool state, int k, const char **o) {
  const ar_nn_gnode *d = cur(e);
  int t = state ? d->state[k] : d->param[k];
  const ar_shape *want = state ? &d->sig.state[k] : &d->sig.param[k];
  *o = ar__onnx_ex_value(e, t);
  NM(*o);
  if (ar_shape_eq(&e->g->tensors[t].shape, want))
    return AR_OK;
  const char *shape, *src = *o;
  AR_CHECK(i64s(e, "shape", want->d, want->nd, &shape));
  const char *ins[2] = {src, shape};
  *o = tmp(e, "reshaped");
  return op1(e, "Reshape", 2, ins, *o, NULL);
}

/* A fused activation after the node's main op: the op writes into a
 * temporary, the activation into the output.  A softmax there is the
 * loss's (a written model's output layer): the graph's output is the
 * logits, without it. */
static ar_status with_act(ar__onnx_ex *e, ar_act act, const char **main_out) {
  bool none = act == AR_ACT_NONE || act == AR_ACT_SOFTMAX;
  *main_out = none ? out(e, 0) : tmp(e, "pre");
  NM(*main_out);
  return AR_OK;
}
static ar_status act_after(ar__onnx_ex *e, ar_act act, const char *x) {
  if (act == AR_ACT_NONE || act == AR_ACT_SOFTMAX)
    return AR_OK;
  if (act != AR_ACT_RELU && act != AR_ACT_SIGMOID)
    return refuse(e, "a fused activation other than relu or sigmoid has no ONNX form here");
  return op1(e, act == AR_ACT_RELU ? "Relu" : "Sigmoid", 1, &x, out(e, 0), NULL);
}

static ar_status conv_pool(ar__onnx_ex *e, const char *type) {
  const ar_nn_gnode *d = cur(e);
  const ar_nn_attr *a = &d->attr;
  const char *ins[3] = {in(e, 0), NULL, NULL}, *y;
  int n_in = 1;
  Onnx__NodeProto *n;
  ar_act act = d->op == AR_NN_CONV2D || d->op == AR_NN_BATCHNORM ? a->act : AR_ACT_NONE;
  AR_CHECK(with_act(e, act, &y));
  for (int k = 0; d->op == AR_NN_CONV2D && k < d->sig.n_param; k++)
    AR_CHECK(slot(e, false, k, &ins[n_in++]));
  if (d->op == AR_NN_MAXPOOL && d->sig.n_out > 1) {
    const char *outs[2] = {y, out(e, 1)};
    NM(ins[0] && outs[1]);
    AR_CHECK(ar__onnx_ex_node(e, type, 1, ins, 2, outs, &n));
  } else {
    AR_CHECK(op1(e, type, n_in, ins, y, &n));
  }
  int64_t ks[2] = {a->kernel[0], a->kernel[1]};
  if (d->op == AR_NN_CONV2D)
    ks[0] = d->sig.param[0].d[2], ks[1] = d->sig.param[0].d[3];
  AR_CHECK(ar__onnx_ex_attr_ints(e, n, "kernel_shape", ks, 2));
  AR_CHECK(ar__onnx_ex_attr_ints(e, n, "strides", a->stride, 2));
  AR_CHECK(ar__onnx_ex_attr_ints(e, n, "pads", a->pad, 4)); /* top, left, bottom, right */
  if (d->op != AR_NN_AVGPOOL)
    AR_CHECK(ar__onnx_ex_attr_ints(e, n, "dilations", a->dilation, 2));
  if (d->op == AR_NN_CONV2D)
    AR_CHECK(ar__onnx_ex_attr_i(e, n, "group", a->groups));
  if (d->op == AR_NN_AVGPOOL)
    AR_CHECK(ar__onnx_ex_attr_i(e, n, "count_include_pad", a->exclude_pad ? 0 : 1));
  return act_after(e, act, y);
}

static ar_status batchnorm(ar__onnx_ex *e) {
  const ar_nn_gnode *d = cur(e);
  const char *ins[5] = {in(e, 0)}, *y;
  AR_CHECK(with_act(e, d->attr.act, &y));
  AR_CHECK(slot(e, false, 0, &ins[1]));
  AR_CHECK(slot(e, false, 1, &ins[2]));
  AR_CHECK(slot(e, true, 0, &ins[3]));
  AR_CHECK(slot(e, true, 1, &ins[4]));
  Onnx__NodeProto *n;
  AR_CHECK(op1(e, "BatchNormalization", 5, ins, y, &n));
  AR_CHECK(ar__onnx_ex_attr_f(e, n, "epsilon", d->attr.eps));
  AR_CHECK(ar__onnx_ex_attr_f(e, n, "momentum", 1.0f - d->attr.momentum));
  return act_after(e, d->attr.act, y);
}

/* Dense: Gemm on 2-D inputs (the weight (out, K) with transB, PyTorch's
 * Linear); MatMul with the transposed weight and an Add on others. */
static ar_status dense(ar__onnx_ex *e) {
  const ar_nn_gnode *d = cur(e);
  const char *w, *b = NULL, *x = in(e, 0), *y;
  AR_CHECK(with_act(e, d->attr.act, &y));
  AR_CHECK(slot(e, false, 0, &w));
  if (d->sig.n_param > 1)
    AR_CHECK(slot(e, false, 1, &b));
  Onnx__NodeProto *n;
  /* A weight the model stores (in, out) (an imported MatMul's) is written
   * so: Gemm with transB=0, MatMul without the Transpose. */
  const bool tr = e->g->tensors[d->param[0]].transposed;
  if (e->g->tensors[d->in[0]].shape.nd == 2) {
    const char *ins[3] = {x, w, b};
    AR_CHECK(op1(e, "Gemm", b ? 3 : 2, ins, y, &n));
    if (!tr)
      AR_CHECK(ar__onnx_ex_attr_i(e, n, "transB", 1));
    return act_after(e, d->attr.act, y);
  }
  const char *wt = tr ? w : tmp(e, "wT"), *mm = b ? tmp(e, "mm") : y;
  if (!tr)
    AR_CHECK(op1(e, "Transpose", 1, &w, wt, NULL));
  const char *ins[2] = {x, wt};
  AR_CHECK(op1(e, "MatMul", 2, ins, mm, NULL));
  if (b) {
    const char *add[2] = {mm, b};
    AR_CHECK(op1(e, "Add", 2, add, y, NULL));
  }
  return act_after(e, d->attr.act, y);
}

static ar_status matmul(ar__onnx_ex *e) {
  const ar_nn_gnode *d = cur(e);
  const char *ins[2] = {in(e, 0), in(e, 1)};
  if (d->attr.trans_b) {
    int nd = e->g->tensors[d->in[1]].shape.nd;
    int64_t perm[AR_NN_MAX_DIMS];
    for (int k = 0; k < nd; k++)
      perm[k] = k;
    perm[nd - 2] = nd - 1;
    perm[nd - 1] = nd - 2;
    const char *bt = tmp(e, "bT");
    Onnx__NodeProto *n;
    AR_CHECK(op1(e, "Transpose", 1, &ins[1], bt, &n));
    AR_CHECK(ar__onnx_ex_attr_ints(e, n, "perm", perm, nd));
    ins[1] = bt;
  }
  return op1(e, "MatMul", 2, ins, out(e, 0), NULL);
}

/* gelu(x) = x/2 (1 + erf(x / sqrt 2)), PyTorch's exact form. */
static ar_status gelu(ar__onnx_ex *e) {
  const char *x = in(e, 0), *r2, *one, *half;
  AR_CHECK(scalar(e, AR_DT_F32, sqrt(2.0), &r2));
  AR_CHECK(scalar(e, AR_DT_F32, 1.0, &one));
  AR_CHECK(scalar(e, AR_DT_F32, 0.5, &half));
  const char *t1 = tmp(e, "scaled"), *t2 = tmp(e, "erf"), *t3 = tmp(e, "plus1"),
             *t4 = tmp(e, "half");
  const char *a[2] = {x, r2}, *b[2] = {t2, one}, *c[2] = {x, half}, *f[2] = {t4, t3};
  AR_CHECK(op1(e, "Div", 2, a, t1, NULL));
  AR_CHECK(op1(e, "Erf", 1, &t1, t2, NULL));
  AR_CHECK(op1(e, "Add", 2, b, t3, NULL));
  AR_CHECK(op1(e, "Mul", 2, c, t4, NULL));
  return op1(e, "Mul", 2, f, out(e, 0), NULL);
}

/* ReduceMean over the last axis, keeping it (axes an attribute through
 * opset 17). */
static ar_status mean_last(ar__onnx_ex *e, const char *x, const char *o) {
  Onnx__NodeProto *n;
  int64_t ax = -1;
  AR_CHECK(op1(e, "ReduceMean", 1, &x, o, &n));
  return ar__onnx_ex_attr_ints(e, n, "axes", &ax, 1);
}

/* The statistics outputs (the input's shape without its last dim) from
 * values that keep it. */
static ar_status squeeze_last(ar__onnx_ex *e, const char *x, const char *o) {
  const char *axes;
  int64_t ax = -1;
  AR_CHECK(i64s(e, "axes", &ax, 1, &axes));
  const char *ins[2] = {x, axes};
  return op1(e, "Squeeze", 2, ins, o, NULL);
}

static ar_status layernorm(ar__onnx_ex *e) {
  const ar_nn_gnode *d = cur(e);
  const char *x = in(e, 0), *g, *b, *mean = tmp(e, "mean"), *inv = tmp(e, "invstd");
  AR_CHECK(slot(e, false, 0, &g));
  AR_CHECK(slot(e, false, 1, &b));
  if (e->opset >= 17) {
    const char *ins[3] = {x, g, b}, *outs[3] = {out(e, 0), mean, inv};
    Onnx__NodeProto *n;
    NM(outs[0] && mean && inv);
    AR_CHECK(ar__onnx_ex_node(e, "LayerNormalization", 3, ins, d->attr.stats ? 3 : 1, outs, &n));
    AR_CHECK(ar__onnx_ex_attr_i(e, n, "axis", -1));
    AR_CHECK(ar__onnx_ex_attr_f(e, n, "epsilon", d->attr.eps));
  } else {
    const char *eps, *c = tmp(e, "centered"), *sq = tmp(e, "sq"), *var = tmp(e, "var"),
                     *ve = tmp(e, "var_eps"), *sd = tmp(e, "std"), *nrm = tmp(e, "normed"),
                     *sc = tmp(e, "scaled");
    AR_CHECK(scalar(e, AR_DT_F32, d->attr.eps, &eps));
    const char *s1[2] = {x, mean}, *s2[2] = {c, c}, *s3[2] = {var, eps}, *s4[2] = {c, inv},
               *s5[2] = {nrm, g}, *s6[2] = {sc, b};
    AR_CHECK(mean_last(e, x, mean));
    AR_CHECK(op1(e, "Sub", 2, s1, c, NULL));
    AR_CHECK(op1(e, "Mul", 2, s2, sq, NULL));
    AR_CHECK(mean_last(e, sq, var));
    AR_CHECK(op1(e, "Add", 2, s3, ve, NULL));
    AR_CHECK(op1(e, "Sqrt", 1, &ve, sd, NULL));
    AR_CHECK(op1(e, "Reciprocal", 1, &sd, inv, NULL));
    AR_CHECK(op1(e, "Mul", 2, s4, nrm, NULL));
    AR_CHECK(op1(e, "Mul", 2, s5, sc, NULL));
    AR_CHECK(op1(e, "Add", 2, s6, out(e, 0), NULL));
  }
  if (!d->attr.stats)
    return AR_OK;
  AR_CHECK(squeeze_last(e, mean, out(e, 1)));
  return squeeze_last(e, inv, out(e, 2));
}

static ar_status binary(ar__onnx_ex *e, const char *type) {
  const ar_nn_gnode *d = cur(e);
  const char *ins[2] = {in(e, 0), NULL};
  if (d->n_in > 1)
    ins[1] = in(e, 1);
  else
    AR_CHECK(scalar(e, e->g->tensors[d->in[0]].dtype, d->attr.scalar, &ins[1]));
  /* An add with a fused relu (the engine's fusion pass): Add, then Relu. */
  const ar_act act = d->op == AR_NN_ADD ? d->attr.act : AR_ACT_NONE;
  const char *y;
  AR_CHECK(with_act(e, act, &y));
  AR_CHECK(op1(e, type, 2, ins, y, NULL));
  return act_after(e, act, y);
}

static ar_status reduce(ar__onnx_ex *e, const char *type) {
  const ar_nn_gnode *d = cur(e);
  int nd = e->g->tensors[d->in[0]].shape.nd, n_ax = 0;
  int64_t axes[AR_NN_MAX_DIMS];
  if (d->attr.axis_all)
    for (int k = 1; k < nd; k++)
      axes[n_ax++] = k;
  else
    axes[n_ax++] = d->attr.axis;
  const char *ins[2] = {in(e, 0), NULL};
  bool as_input = !strcmp(type, "ReduceSum"); /* an input from opset 13, ReduceMean's at 18 */
  if (as_input)
    AR_CHECK(i64s(e, "axes", axes, n_ax, &ins[1]));
  Onnx__NodeProto *n;
  AR_CHECK(op1(e, type, as_input ? 2 : 1, ins, out(e, 0), &n));
  if (!as_input)
    AR_CHECK(ar__onnx_ex_attr_ints(e, n, "axes", axes, n_ax));
  return ar__onnx_ex_attr_i(e, n, "keepdims", d->attr.keepdims);
}

/* A shape attribute: where the probe's differs the dim follows the batch;
 * `follow` is what ONNX takes there (-1 for Reshape, 1 for Expand), or 0
 * when nothing may follow it. */
static ar_status shape_arg(ar__onnx_ex *e, int64_t follow, const char **o) {
  const ar_nn_gnode *d = cur(e);
  ar_shape s = d->attr.shape;
  int moved = 0;
  for (int k = 0; e->probe && k < s.nd; k++)
    if (e->probe->nodes[e->cur].attr.shape.d[k] != s.d[k]) {
      s.d[k] = follow;
      moved++;
    }
  if (moved && (follow == 0 || (follow == -1 && moved > 1)))
    return refuse(e, "its target shape changes with the batch size in a way ONNX cannot "
                     "express with a symbolic batch axis");
  for (int k = 0; follow == -1 && moved && k < s.nd; k++)
    if (d->attr.shape.d[k] == -1)
      return refuse(e, "its target shape has a -1 and a dim that follows the batch");
  return i64s(e, "shape", s.d, s.nd, o);
}

static ar_status shape_op(ar__onnx_ex *e, const char *type) {
  const char *ins[2] = {in(e, 0), NULL};
  if (!strcmp(type, "Expand")) {
    const ar_nn_gnode *d = cur(e);
    const ar_shape *x = &e->g->tensors[d->in[0]].shape;
    for (int k = 0; e->probe && k < d->attr.shape.nd; k++) {
      int xk = k - (d->attr.shape.nd - x->nd);
      if (e->probe->nodes[e->cur].attr.shape.d[k] != d->attr.shape.d[k] &&
          (xk < 0 || x->d[xk] != d->attr.shape.d[k]))
        return refuse(e, "it broadcasts to the batch size, which ONNX would need as a "
                         "constant");
    }
  }
  AR_CHECK(shape_arg(e, !strcmp(type, "Reshape") ? -1 : 1, &ins[1]));
  return op1(e, type, 2, ins, out(e, 0), NULL);
}

/* Whether the probe's attributes differ in f (begin, end, sizes). */
#define PROBE_DIFFERS(f)                                                                           \
  (e->probe && memcmp(&e->probe->nodes[e->cur].attr.f, &cur(e)->attr.f, sizeof cur(e)->attr.f))

static ar_status slice_split(ar__onnx_ex *e) {
  const ar_nn_gnode *d = cur(e);
  const ar_nn_attr *a = &d->attr;
  if (PROBE_DIFFERS(begin) || PROBE_DIFFERS(end) || PROBE_DIFFERS(sizes))
    return refuse(e, "it cuts along the batch, which ONNX would need as constant bounds");
  if (d->op == AR_NN_SLICE) {
    const char *ins[4] = {in(e, 0)};
    int64_t ax = a->axis;
    AR_CHECK(i64s(e, "starts", &a->begin, 1, &ins[1]));
    AR_CHECK(i64s(e, "ends", &a->end, 1, &ins[2]));
    AR_CHECK(i64s(e, "axes", &ax, 1, &ins[3]));
    return op1(e, "Slice", 4, ins, out(e, 0), NULL);
  }
  const char *ins[2] = {in(e, 0)}, *outs[AR_NN_MAX_IO];
  AR_CHECK(i64s(e, "split", a->sizes, a->n_sizes, &ins[1]));
  for (int k = 0; k < a->n_sizes; k++)
    NM(outs[k] = out(e, k));
  NM(ins[0]);
  Onnx__NodeProto *n;
  AR_CHECK(ar__onnx_ex_node(e, "Split", 2, ins, a->n_sizes, outs, &n));
  return ar__onnx_ex_attr_i(e, n, "axis", a->axis);
}

static ar_status pad(ar__onnx_ex *e) {
  const ar_nn_gnode *d = cur(e);
  int nd = e->g->tensors[d->in[0]].shape.nd;
  int64_t p[2 * AR_NN_MAX_DIMS];
  for (int k = 0; k < nd; k++) {
    p[k] = d->attr.pad_nd[k];
    p[nd + k] = d->attr.pad_nd[AR_NN_MAX_DIMS + k];
  }
  const char *ins[3] = {in(e, 0)};
  AR_CHECK(i64s(e, "pads", p, 2 * nd, &ins[1]));
  AR_CHECK(scalar(e, e->g->tensors[d->in[0]].dtype, d->attr.scalar, &ins[2]));
  return op1(e, "Pad", 3, ins, out(e, 0), NULL);
}

/* MASK: 1.0 where the id is not pad_id, as clip(|float(id) - pad_id|, 0, 1)
 * (exact for ids below 2^24): ops an importer takes on run-time values,
 * where Equal and Not are often folded only (accelrt's are). */
static ar_status mask(ar__onnx_ex *e) {
  const ar_nn_gnode *d = cur(e);
  const char *x = in(e, 0), *f = tmp(e, "ids"), *df = tmp(e, "diff"), *ab = tmp(e, "dist");
  const char *sub[2] = {f}, *clip[3] = {ab};
  Onnx__NodeProto *n;
  AR_CHECK(op1(e, "Cast", 1, &x, f, &n));
  AR_CHECK(ar__onnx_ex_attr_i(e, n, "to", ar__onnx_ex_dtype(AR_DT_F32)));
  AR_CHECK(scalar(e, AR_DT_F32, (double)d->attr.pad_id, &sub[1]));
  AR_CHECK(op1(e, "Sub", 2, sub, df, NULL));
  AR_CHECK(op1(e, "Abs", 1, &df, ab, NULL));
  AR_CHECK(scalar(e, AR_DT_F32, 0.0, &clip[1]));
  AR_CHECK(scalar(e, AR_DT_F32, 1.0, &clip[2]));
  return op1(e, "Clip", 3, clip, out(e, 0), NULL);
}

static ar_status clip_where(ar__onnx_ex *e) {
  const ar_nn_gnode *d = cur(e);
  const char *ins[3] = {in(e, 0)};
  if (d->op == AR_NN_CLIP) {
    AR_CHECK(scalar(e, AR_DT_F32, d->attr.lo, &ins[1]));
    AR_CHECK(scalar(e, AR_DT_F32, d->attr.hi, &ins[2]));
    return op1(e, "Clip", 3, ins, out(e, 0), NULL);
  }
  ins[1] = in(e, 1);
  ins[2] = in(e, 2);
  if (e->g->tensors[d->in[0]].dtype != AR_DT_BOOL) { /* u8 conditions */
    const char *c = tmp(e, "cond");
    Onnx__NodeProto *n;
    AR_CHECK(op1(e, "Cast", 1, &ins[0], c, &n));
    AR_CHECK(ar__onnx_ex_attr_i(e, n, "to", ar__onnx_ex_dtype(AR_DT_BOOL)));
    ins[0] = c;
  }
  return op1(e, "Where", 3, ins, out(e, 0), NULL);
}

/* Ops of one node and at most one integer attribute. */
static ar_status simple(ar__onnx_ex *e, const char *type, const char *attr, int64_t v) {
  const ar_nn_gnode *d = cur(e);
  const char *ins[AR_NN_MAX_IO];
  for (int i = 0; i < d->n_in; i++)
    ins[i] = in(e, i);
  Onnx__NodeProto *n;
  AR_CHECK(op1(e, type, d->n_in, ins, out(e, 0), &n));
  return attr ? ar__onnx_ex_attr_i(e, n, attr, v) : AR_OK;
}

ar_status ar__onnx_export_node(ar__onnx_ex *e, int i) {
  const ar_nn_gnode *d = &e->g->nodes[i];
  const ar_nn_attr *a = &d->attr;
  Onnx__NodeProto *n;
  switch (d->op) {
  case AR_NN_CONV2D:
    return conv_pool(e, "Conv");
  case AR_NN_MAXPOOL:
    return conv_pool(e, "MaxPool");
  case AR_NN_AVGPOOL:
    return conv_pool(e, "AveragePool");
  case AR_NN_GAVGPOOL: {
    const char *x = in(e, 0), *p = tmp(e, "pooled");
    AR_CHECK(op1(e, "GlobalAveragePool", 1, &x, p, NULL));
    AR_CHECK(op1(e, "Flatten", 1, &p, out(e, 0), &n));
    return ar__onnx_ex_attr_i(e, n, "axis", 1);
  }
  case AR_NN_BATCHNORM:
    return batchnorm(e);
  case AR_NN_DENSE:
    return dense(e);
  case AR_NN_MATMUL:
    return matmul(e);
  case AR_NN_RELU: return simple(e, "Relu", NULL, 0);
  case AR_NN_SIGMOID: return simple(e, "Sigmoid", NULL, 0);
  case AR_NN_TANH: return simple(e, "Tanh", NULL, 0);
  case AR_NN_SQRT: return simple(e, "Sqrt", NULL, 0);
  case AR_NN_EXP: return simple(e, "Exp", NULL, 0);
  case AR_NN_LOG: return simple(e, "Log", NULL, 0);
  case AR_NN_NEG: return simple(e, "Neg", NULL, 0);
  case AR_NN_ABS: return simple(e, "Abs", NULL, 0);
  case AR_NN_ERF: return simple(e, "Erf", NULL, 0);
  case AR_NN_LEAKY_RELU: {
    const char *x = in(e, 0);
    AR_CHECK(op1(e, "LeakyRelu", 1, &x, out(e, 0), &n));
    return ar__onnx_ex_attr_f(e, n, "alpha", a->alpha);
  }
  case AR_NN_GELU:
    return gelu(e);
  case AR_NN_SOFTMAX: return simple(e, "Softmax", "axis", -1);
  case AR_NN_LOG_SOFTMAX: return simple(e, "LogSoftmax", "axis", -1);
  case AR_NN_LAYERNORM:
    return layernorm(e);
  case AR_NN_ADD: return binary(e, "Add");
  case AR_NN_SUB: return binary(e, "Sub");
  case AR_NN_MUL: return binary(e, "Mul");
  case AR_NN_DIV: return binary(e, "Div");
  case AR_NN_POW: return binary(e, "Pow");
  case AR_NN_MEAN: return reduce(e, "ReduceMean");
  case AR_NN_SUM: return reduce(e, "ReduceSum");
  case AR_NN_CONCAT: return simple(e, "Concat", "axis", a->axis);
  case AR_NN_SPLIT:
  case AR_NN_SLICE:
    return slice_split(e);
  case AR_NN_PAD:
    return pad(e);
  case AR_NN_RESHAPE: return shape_op(e, "Reshape");
  case AR_NN_EXPAND: return shape_op(e, "Expand");
  case AR_NN_FLATTEN: return simple(e, "Flatten", "axis", 1);
  case AR_NN_TRANSPOSE: {
    int64_t perm[AR_NN_MAX_DIMS];
    int nd = e->g->tensors[d->in[0]].shape.nd;
    for (int k = 0; k < nd; k++)
      perm[k] = a->perm[k];
    const char *x = in(e, 0);
    AR_CHECK(op1(e, "Transpose", 1, &x, out(e, 0), &n));
    return ar__onnx_ex_attr_ints(e, n, "perm", perm, nd);
  }
  case AR_NN_EMBEDDING: {
    const char *ins[2];
    AR_CHECK(slot(e, false, 0, &ins[0]));
    ins[1] = in(e, 0);
    AR_CHECK(op1(e, "Gather", 2, ins, out(e, 0), &n));
    return ar__onnx_ex_attr_i(e, n, "axis", 0);
  }
  case AR_NN_POSEMBED: {
    const char *ins[2] = {in(e, 0)};
    AR_CHECK(slot(e, false, 0, &ins[1]));
    return op1(e, "Add", 2, ins, out(e, 0), NULL);
  }
  case AR_NN_DROPOUT: /* the identity in inference: its output is its input */
    NM(e->tname[d->out[0]] = (char *)in(e, 0));
    e->aliased[d->out[0]] = true;
    return AR_OK;
  case AR_NN_MASK:
    return mask(e);
  case AR_NN_CLIP:
  case AR_NN_WHERE:
    return clip_where(e);
  case AR_NN_CAST: return simple(e, "Cast", "to", ar__onnx_ex_dtype(a->to));
  case AR_NN_GATHER: return simple(e, "Gather", "axis", a->axis);
  case AR_NN_ATTENTION:
    return refuse(e, "the fused attention op has no ONNX form in this version; write it from "
                     "matmul, softmax and reshape items to export the model");
  case AR_NN_SPARSE_DENSE:
    return refuse(e, "a layer fed by sparse input has no ONNX form in this version; export "
                     "the model written as a chain of dense layers (without `inputs:`)");
  case AR_NN_XENT:
  case AR_NN_BCE:
  case AR_NN_XENT_MULTI:
  case AR_NN_OP_COUNT:
    break;
  }
  return refuse(e, "a loss has no place in an inference graph");
}
