/*
 * ONNX ops lowered to nn ops: BatchNormalization, LayerNormalization,
 * Softmax, LogSoftmax and Dropout.
 * (lower_impl.h lists the four files of op lowerings.)
 */
#include "lower_impl.h"

#include <math.h>
#include <string.h>

/* ---- normalisation --------------------------------------------------------------------- */

/* x as 2-D or 4-D for BATCHNORM: (N, C, rest..., 1). */
static ar_status l_batchnorm(lower *L, val *const *in, int n_in) {
  for (int k = 0; k < 5; k++)
    AR_CHECK(need(L, in, n_in, k));
  const Onnx__NodeProto *n = L->node;
  val *X = in[0];
  AR_CHECK(want_f32(L, X, "the input"));
  if (X->shape.nd < 2)
    return ar__onnx_fail(L, AR_INVALID, "input of %d dims (N, C, ...)", X->shape.nd);
  if (ar__onnx_attr_i(n, "spatial", 1) != 1)
    return ar__onnx_fail(L, AR_UNSUPPORTED, "spatial 0 (statistics per element, opset 7-8)");
  /* Training mode: the attribute (opset 14 on), or opsets 7-13's extra
   * outputs (running mean and variance, then the saved batch statistics,
   * which nothing here computes: a node reading them is refused). */
  const int n_out = (int)n->n_output;
  const bool train_mode =
      L->m->opset >= 14 ? ar__onnx_attr_i(n, "training_mode", 0) != 0 : n_out > 1;
  if (n_out > 1 && !train_mode)
    return ar__onnx_fail(L, AR_UNSUPPORTED, "%d outputs outside training mode", n_out);
  if (n_out > 5)
    return ar__onnx_fail(L, AR_UNSUPPORTED, "%d outputs", n_out);
  int tx, p[2], s[2], o[AR_NN_MAX_IO];
  AR_CHECK(tensor(L, X, &tx));
  for (int k = 0; k < 2; k++) {
    AR_CHECK(tensor(L, in[1 + k], &p[k]));
    AR_CHECK(tensor(L, in[3 + k], &s[k]));
  }
  /* The running statistics are state when the net trains. */
  for (int k = 0; k < 2 && L->o->training; k++) {
    ar_nn_gtensor *st = &L->g->tensors[s[k]];
    if (st->kind == AR_NN_T_PARAM)
      st->kind = AR_NN_T_STATE;
  }
  if (X->shape.nd != 2 && X->shape.nd != 4) {
    ar_shape img = {4, {X->shape.d[0], X->shape.d[1], 1, 1}};
    for (int k = 2; k < X->shape.nd; k++)
      img.d[2] *= X->shape.d[k];
    AR_CHECK(ar__onnx_reshape_to(L, "as2d", tx, &img, &tx));
  }
  ar_nn_attr a = attr0();
  a.eps = ar__onnx_attr_f(n, "epsilon", 1e-5f);
  /* ONNX: running = momentum running + (1 - momentum) batch, with the
   * biased batch variance; nn's momentum is the batch's weight.  A model
   * PyTorch (or accelrt) exported was trained with PyTorch's rule, the
   * unbiased batch variance, and keeps it here (ar__onnx_pytorch_rules). */
  a.momentum = 1.0f - ar__onnx_attr_f(n, "momentum", 0.9f);
  a.var_biased = !ar__onnx_pytorch_rules(L->m);
  const ar_nn_mode mode = L->o->training ? AR_NN_MODE_RUN
                          : train_mode   ? AR_NN_MODE_TRAIN
                                         : AR_NN_MODE_EVAL;
  AR_CHECK(ar__onnx_emit(L, X->shape.nd == 2 || X->shape.nd == 4 ? NULL : "bn", AR_NN_BATCHNORM, &a,
                         1, &tx, p, s, mode, o));
  int y;
  AR_CHECK(ar__onnx_reshape_to(L, NULL, o[0], &X->shape, &y));
  AR_CHECK(ar__onnx_set_out(L, 0, y));
  /* Training mode's running statistics: the state after the forward. */
  for (int k = 1; k < n_out && k < 3; k++)
    AR_CHECK(ar__onnx_set_out(L, k, s[k - 1]));
  return AR_OK;
}

static ar_status l_layernorm(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  AR_CHECK(need(L, in, n_in, 1));
  const Onnx__NodeProto *n = L->node;
  val *X = in[0];
  AR_CHECK(want_f32(L, X, "the input"));
  int ax = 0;
  AR_CHECK(axis_attr(L, -1, X->shape.nd, &ax));
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < X->shape.nd; k++)
    *(k < ax ? &outer : &inner) *= X->shape.d[k];
  int tx, p[2], o[AR_NN_MAX_IO];
  AR_CHECK(tensor(L, X, &tx));
  AR_CHECK(tensor(L, in[1], &p[0]));
  if (n_in > 2 && in[2]) {
    AR_CHECK(tensor(L, in[2], &p[1]));
  } else { /* no bias: zeros, never trained */
    ar_shape bs = {1, {inner}};
    float *z = ar_calloc((size_t)(inner ? inner : 1), sizeof *z);
    if (!z)
      return ar_errf(L->err, AR_NOMEM, "out of memory");
    char nm[300];
    snprintf(nm, sizeof nm, "%.280s/zero_bias", ar__onnx_out_base(L));
    ar_status st = ar_nn_graph_tensor(L->g, nm, AR_NN_T_CONST, &bs, AR_DT_F32, z, &p[1], L->err);
    ar_free(z);
    AR_CHECK(st);
  }
  ar_shape rows = {2, {outer, inner}};
  AR_CHECK(ar__onnx_reshape_to(L, "rows", tx, &rows, &tx));
  ar_nn_attr a = attr0();
  a.eps = ar__onnx_attr_f(n, "epsilon", 1e-5f);
  const bool stats = n->n_output > 1;
  if (stats && L->o->training)
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "the Mean and InvStdDev outputs when training (their "
                         "gradients are not propagated)");
  a.stats = stats;
  AR_CHECK(ar__onnx_emit(L, "ln", AR_NN_LAYERNORM, &a, 1, &tx, p, NULL, AR_NN_MODE_RUN, o));
  int y;
  AR_CHECK(ar__onnx_reshape_to(L, NULL, o[0], &X->shape, &y));
  AR_CHECK(ar__onnx_set_out(L, 0, y));
  ar_shape ss = X->shape;
  for (int k = ax; k < ss.nd; k++)
    ss.d[k] = 1;
  for (int k = 1; k < (int)n->n_output && k < 3; k++) {
    AR_CHECK(ar__onnx_reshape_to(L, k == 1 ? "mean" : "rstd", o[k], &ss, &y));
    AR_CHECK(ar__onnx_set_out(L, k, y));
  }
  return AR_OK;
}

/* Softmax and LogSoftmax: over the last axis, or transposed there and
 * back (opset 13), or over the 2-D coercion at axis (opsets 7-12). */
static ar_status l_softmax(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  AR_CHECK(want_f32(L, X, "the input"));
  const ar_nn_op op = !strcmp(L->node->op_type, "Softmax") ? AR_NN_SOFTMAX : AR_NN_LOG_SOFTMAX;
  const int nd = X->shape.nd;
  const bool coerce = L->m->opset < 13;
  int ax, t, o[AR_NN_MAX_IO];
  AR_CHECK(axis_attr(L, coerce ? 1 : -1, nd, &ax));
  AR_CHECK(tensor(L, X, &t));
  ar_nn_attr a = attr0();
  if (coerce || ax == nd - 1) {
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < nd; k++)
      *(k < ax ? &outer : &inner) *= X->shape.d[k];
    ar_shape s2 = {2, {outer, inner}};
    if (ax != nd - 1)
      AR_CHECK(ar__onnx_reshape_to(L, "rows", t, &s2, &t));
    AR_CHECK(
        ar__onnx_emit(L, ax != nd - 1 ? "sm" : NULL, op, &a, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
    AR_CHECK(ar__onnx_reshape_to(L, NULL, o[0], &X->shape, &t));
    return ar__onnx_set_out(L, 0, t);
  }
  ar_nn_attr p = attr0();
  p.perm[ax] = nd - 1;
  p.perm[nd - 1] = ax;
  AR_CHECK(ar__onnx_emit(L, "to_last", AR_NN_TRANSPOSE, &p, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
  AR_CHECK(ar__onnx_emit(L, "sm", op, &a, 1, &o[0], NULL, NULL, AR_NN_MODE_RUN, o));
  AR_CHECK(ar__onnx_emit(L, NULL, AR_NN_TRANSPOSE, &p, 1, &o[0], NULL, NULL, AR_NN_MODE_RUN, o));
  return ar__onnx_set_out(L, 0, o[0]);
}

static ar_status l_dropout(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  double ratio, train;
  AR_CHECK(scalar(L, in, n_in, 1, ar__onnx_attr_f(L->node, "ratio", 0.5f), &ratio));
  AR_CHECK(scalar(L, in, n_in, 2, 0.0, &train));
  const bool mask = L->node->n_output > 1 && L->node->output[1] && *L->node->output[1];
  int t;
  AR_CHECK(tensor(L, X, &t));
  if (L->o->training && ratio > 0) {
    AR_CHECK(want_f32(L, X, "the input"));
    if (mask)
      return ar__onnx_fail(L, AR_UNSUPPORTED, "the mask output when training (export it unused)");
    ar_nn_attr a = attr0();
    a.p = (float)ratio;
    return emit1(L, AR_NN_DROPOUT, &a, 1, &t);
  }
  if (train != 0 && ratio > 0)
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "Dropout in training mode with ratio %g draws a random mask "
                         "(accelrt's generator is not NumPy's): its outputs cannot match "
                         "another framework's",
                         ratio);
  /* Evaluation, or a ratio of 0: the identity, and a mask of ones. */
  AR_CHECK(ar__onnx_set_out(L, 0, t));
  if (!mask)
    return AR_OK;
  ar_onnx_tensor ones;
  AR_CHECK(ar__onnx_const_new(L, &X->shape, AR_DT_BOOL, &ones));
  memset(ones.data, 1, ones.bytes);
  return ar__onnx_set_out_const(L, 1, &ones);
}

const ar__onnx_lowering ar__onnx_norm_ops[] = {
    {"BatchNormalization", l_batchnorm},
    {"LayerNormalization", l_layernorm},
    {"Softmax", l_softmax},
    {"LogSoftmax", l_softmax},
    {"Dropout", l_dropout},
};
const int ar__onnx_n_norm_ops = (int)(sizeof ar__onnx_norm_ops / sizeof ar__onnx_norm_ops[0]);
