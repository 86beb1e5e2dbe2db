/*
 * Inside the lowering of ONNX ops (private to runtime/onnx/lower_*.c): the
 * helpers the four files of op lowerings share, and their tables.
 *
 *   lower_math.c   constants and shapes of values, element-wise ops, Cast,
 *                  Clip, Expand, Where, MatMul, Gemm;
 *   lower_image.c  Conv, the pools, GlobalAveragePool;
 *   lower_norm.c   BatchNormalization, LayerNormalization, Softmax,
 *                  LogSoftmax, Dropout;
 *   lower_shape.c  Reshape and its kin, Transpose, Concat, Split, Slice,
 *                  Pad, Gather, the reductions; and ar__onnx_lower_node,
 *                  which looks an op up in the four tables.
 *
 * Each lowering gets the node's inputs (NULL where omitted); arguments that
 * must be static come from constants, or in `accelrt onnx-test` from the
 * data set (opts->known); what cannot be lowered is AR_UNSUPPORTED naming
 * the node and what to do (ar__onnx_fail).
 */
#ifndef ACCELRT_ONNX_LOWER_IMPL_H
#define ACCELRT_ONNX_LOWER_IMPL_H

#include "onnx_impl.h"

#include <stdio.h>
#include <string.h>

typedef ar__onnx_lower lower;
typedef ar__onnx_val val;

static inline ar_nn_attr attr0(void) {
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  return a;
}

/* A constant value, or the value a graph input was given (opts->known). */
static inline const ar_onnx_tensor *cval(const val *v) { return v ? (v->c ? v->c : v->pin) : NULL; }

static inline ar_status need(lower *L, val *const *in, int n_in, int k) {
  if (k >= n_in || !in[k])
    return ar__onnx_fail(L, AR_INVALID, "input %d is missing", k);
  return AR_OK;
}

static inline ar_status tensor(lower *L, val *v, int *t) { return ar__onnx_tensor_of(L, v, t); }

/* The node's axis attribute (def when absent) as an index into nd dims. */
static inline ar_status axis_attr(lower *L, int64_t def, int nd, int *ax) {
  ar_err e = AR_ERR_INIT;
  if (ar__onnx_axis(ar__onnx_attr_i(L->node, "axis", def), nd, ax, &e) != AR_OK)
    return ar__onnx_fail(L, AR_INVALID, "%s", e.msg);
  return AR_OK;
}

/* A list of ints from input idx or attribute attr (see ar__onnx_ints_arg). */
static inline ar_status ints(lower *L, val *const *in, int n_in, int idx, const char *attr,
                             int64_t *buf, int cap, int *n) {
  const ar_onnx_tensor *c[64] = {0};
  for (int k = 0; k < n_in && k < 64; k++)
    c[k] = cval(in[k]);
  ar_err e = AR_ERR_INIT;
  ar_status st = ar__onnx_ints_arg(L->node, c, n_in, idx, attr, buf, cap, n, &e);
  if (st != AR_OK)
    return ar_errf(L->err, st, "%s: %s", L->where, e.msg);
  return AR_OK;
}

/* A scalar from input k (constant or known), or def when omitted. */
static inline ar_status scalar(lower *L, val *const *in, int n_in, int k, double def, double *out) {
  *out = def;
  if (k >= n_in || !in[k])
    return AR_OK;
  const ar_onnx_tensor *c = cval(in[k]);
  if (!c)
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "input %d ('%s') must be constant for the input shapes (an "
                         "initializer or a Constant): accelrt builds a static graph",
                         k, in[k]->name);
  if (ar_shape_count(&c->shape) != 1)
    return ar__onnx_fail(L, AR_INVALID, "input %d ('%s') is not a single value", k, in[k]->name);
  *out = ar__onnx_get_f(c, 0);
  return AR_OK;
}

static inline ar_status want_f32(lower *L, const val *v, const char *what) {
  if (v->dtype != AR_DT_F32)
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "%s is %s; the engine runs this op on f32 (cast the model's "
                         "input, or export in float32)",
                         what, ar_dtype_name(v->dtype));
  return AR_OK;
}

/* One nn op of one output, which becomes output 0 of the node. */
static inline ar_status emit1(lower *L, ar_nn_op op, const ar_nn_attr *a, int n_in, const int *in) {
  int o[AR_NN_MAX_IO];
  AR_CHECK(ar__onnx_emit(L, NULL, op, a, n_in, in, NULL, NULL, AR_NN_MODE_RUN, o));
  return ar__onnx_set_out(L, 0, o[0]);
}

/* t cast to `to` (a CAST node unless it already is). */
static inline ar_status cast_to(lower *L, int t, ar_dtype to, int *out) {
  if (L->g->tensors[t].dtype == to) {
    *out = t;
    return AR_OK;
  }
  ar_nn_attr a = attr0();
  a.to = to;
  int o[AR_NN_MAX_IO];
  AR_CHECK(ar__onnx_emit(L, "cast", AR_NN_CAST, &a, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
  *out = o[0];
  return AR_OK;
}

/* One op's lowering, and the tables of the four files (lower_math.c,
 * lower_image.c, lower_norm.c, lower_shape.c's own). */
typedef ar_status (*ar__onnx_lower_fn)(lower *L, val *const *in, int n_in);
typedef struct ar__onnx_lowering {
  const char *op;
  ar__onnx_lower_fn f;
} ar__onnx_lowering;
extern const ar__onnx_lowering ar__onnx_math_ops[], ar__onnx_image_ops[], ar__onnx_norm_ops[];
extern const int ar__onnx_n_math_ops, ar__onnx_n_image_ops, ar__onnx_n_norm_ops;

#endif
