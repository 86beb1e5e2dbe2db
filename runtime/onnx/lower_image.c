/*
 * ONNX ops lowered to nn ops: Conv, the pools (1-D as 2-D, 3-D as two 2-D
 * ones) and GlobalAveragePool; the normalisations are lower_norm.c's.
 * (lower_impl.h lists the four files of op lowerings.)
 */
#include "lower_impl.h"

#include <math.h>

/* ---- images ------------------------------------------------------------------------- */

/* The padding of one spatial dim: explicit pads, or auto_pad's. */
static ar_status spatial_pads(lower *L, const char *autopad, int64_t in, int64_t k, int64_t s,
                              int64_t d, bool ceil_mode, int64_t *p0, int64_t *p1) {
  const int64_t ek = d * (k - 1) + 1;
  if (!strcmp(autopad, "SAME_UPPER") || !strcmp(autopad, "SAME_LOWER")) {
    const int64_t out = (in + s - 1) / s, total = (out - 1) * s + ek - in;
    const int64_t t = total > 0 ? total : 0;
    *p0 = !strcmp(autopad, "SAME_UPPER") ? t / 2 : (t + 1) / 2;
    *p1 = t - *p0;
  } else if (!strcmp(autopad, "VALID")) {
    *p0 = *p1 = 0;
  } else if (strcmp(autopad, "NOTSET")) {
    return ar__onnx_fail(L, AR_INVALID, "auto_pad '%s' (NOTSET, SAME_UPPER, SAME_LOWER or VALID)",
                         autopad);
  }
  if (ceil_mode) {
    /* ONNX's output size with ceil: extra padding at the end makes the nn
     * op's floor rule give it. */
    const int64_t span = in + *p0 + *p1 - ek;
    if (span >= 0) {
      const int64_t out = (span + s - 1) / s + 1, need = (out - 1) * s + ek - (in + *p0 + *p1);
      *p1 += need > 0 ? need : 0;
    }
  }
  return AR_OK;
}

/* The 2-D geometry of a Conv or pool on x (N, C, H[, W]): kernel,
 * strides, pads (top, left, bottom, right), dilations into a. */
static ar_status geometry(lower *L, const ar_shape *x, const int64_t *kernel, bool pool,
                          ar_nn_attr *a) {
  const Onnx__NodeProto *n = L->node;
  const int sp = x->nd - 2;
  const int64_t *v;
  int64_t st[2] = {1, 1}, dl[2] = {1, 1}, pads[4] = {0, 0, 0, 0};
  int c;
  if ((c = ar__onnx_attr_ints(n, "strides", &v)) >= 0) {
    if (c != sp)
      return ar__onnx_fail(L, AR_INVALID, "strides has %d values for %d spatial dims", c, sp);
    for (int i = 0; i < sp; i++)
      st[i] = v[i];
  }
  if ((c = ar__onnx_attr_ints(n, "dilations", &v)) >= 0) {
    if (c != sp)
      return ar__onnx_fail(L, AR_INVALID, "dilations has %d values for %d spatial dims", c, sp);
    for (int i = 0; i < sp; i++)
      dl[i] = v[i];
  }
  if ((c = ar__onnx_attr_ints(n, "pads", &v)) >= 0) {
    if (c != 2 * sp)
      return ar__onnx_fail(L, AR_INVALID, "pads has %d values for %d spatial dims", c, sp);
    for (int i = 0; i < sp; i++) {
      pads[i] = v[i];
      pads[2 + i] = v[sp + i];
    }
  }
  const int64_t most = (int64_t)1 << 24; /* far past any image, far from overflow */
  for (int i = 0; i < sp; i++)
    if (st[i] < 1 || dl[i] < 1 || pads[i] < 0 || pads[2 + i] < 0 || kernel[i] < 1 || st[i] > most ||
        dl[i] > most || pads[i] > most || pads[2 + i] > most || kernel[i] > most)
      return ar__onnx_fail(L, AR_INVALID,
                           "kernel, strides and dilations must be 1 to 2^24, pads 0 to 2^24");
  if (pool && (dl[0] != 1 || dl[1] != 1) && strcmp(n->op_type, "MaxPool"))
    return ar__onnx_fail(L, AR_UNSUPPORTED, "dilations in %s", n->op_type);
  char ap[32];
  const char *autopad = ar__onnx_attr_s(n, "auto_pad", "NOTSET", ap, sizeof ap);
  const bool ceil_mode = pool && ar__onnx_attr_i(n, "ceil_mode", 0) != 0;
  /* 1-D data runs as (N, C, 1, L): the first spatial dim of the 2-D op
   * is that 1. */
  const int off = sp == 1 ? 1 : 0;
  a->kernel[0] = a->kernel[1] = 1;
  a->stride[0] = a->stride[1] = 1;
  a->dilation[0] = a->dilation[1] = 1;
  for (int i = 0; i < sp; i++) {
    int64_t p0 = pads[i], p1 = pads[2 + i];
    AR_CHECK(spatial_pads(L, autopad, x->d[2 + i], kernel[i], st[i], dl[i], ceil_mode, &p0, &p1));
    a->kernel[off + i] = kernel[i];
    a->stride[off + i] = st[i];
    a->dilation[off + i] = dl[i];
    a->pad[off + i] = p0;
    a->pad[2 + off + i] = p1;
  }
  return AR_OK;
}

/* x as a 4-D image batch: 1-D data as (N, C, 1, L). */
static ar_status as_image(lower *L, val *x, int *t) {
  AR_CHECK(tensor(L, x, t));
  if (x->shape.nd == 4)
    return AR_OK;
  if (x->shape.nd != 3)
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "%d-D data: accelrt's convolution and pooling take 1-D and "
                         "2-D images ((N, C, L) or (N, C, H, W))",
                         x->shape.nd - 2);
  ar_shape s = {4, {x->shape.d[0], x->shape.d[1], 1, x->shape.d[2]}};
  return ar__onnx_reshape_to(L, "as2d", *t, &s, t);
}

/* The node's output k from a 4-D result, back to 1-D data's rank. */
static ar_status image_out(lower *L, int k, int t, int nd) {
  if (nd == 3) {
    const ar_shape *s = &L->g->tensors[t].shape;
    ar_shape o = {3, {s->d[0], s->d[1], s->d[3]}};
    AR_CHECK(ar__onnx_reshape_to(L, "as1d", t, &o, &t));
  }
  return ar__onnx_set_out(L, k, t);
}

static ar_status l_conv(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  AR_CHECK(need(L, in, n_in, 1));
  val *X = in[0], *W = in[1], *B = n_in > 2 ? in[2] : NULL;
  AR_CHECK(want_f32(L, X, "the input"));
  AR_CHECK(want_f32(L, W, "the weights"));
  if (X->shape.nd != W->shape.nd || X->shape.nd < 3)
    return ar__onnx_fail(L, AR_INVALID, "X and W ranks differ");
  int tx, tw, tb = -1, o[AR_NN_MAX_IO];
  AR_CHECK(as_image(L, X, &tx));
  AR_CHECK(tensor(L, W, &tw));
  if (B)
    AR_CHECK(tensor(L, B, &tb));
  int64_t kernel[2] = {W->shape.d[2], W->shape.nd > 3 ? W->shape.d[3] : 1};
  const int64_t *v;
  int c = ar__onnx_attr_ints(L->node, "kernel_shape", &v);
  if (c >= 0) {
    if (c != X->shape.nd - 2)
      return ar__onnx_fail(L, AR_INVALID, "kernel_shape has %d values", c);
    for (int i = 0; i < c; i++)
      if (v[i] != W->shape.d[2 + i])
        return ar__onnx_fail(L, AR_INVALID, "kernel_shape disagrees with W's dims");
  }
  ar_nn_attr a = attr0();
  AR_CHECK(geometry(L, &X->shape, kernel, false, &a));
  a.out = W->shape.d[0];
  a.groups = ar__onnx_attr_i(L->node, "group", 1);
  a.bias = B != NULL;
  int params[2] = {tw, tb};
  AR_CHECK(ar__onnx_emit(L, X->shape.nd == 3 ? "conv" : NULL, AR_NN_CONV2D, &a, 1, &tx, params,
                         NULL, AR_NN_MODE_RUN, o));
  return image_out(L, 0, o[0], X->shape.nd);
}

/* out = t op c for an i64 constant c (index arithmetic in the graph). */
static ar_status int_op(lower *L, ar_nn_op op, int t, int64_t c, int *out) {
  char nm[300];
  snprintf(nm, sizeof nm, "%.200s/const%d", ar__onnx_out_base(L), L->helpers);
  ar_shape s = {0};
  int tc, in2[2], o[AR_NN_MAX_IO];
  AR_CHECK(ar_nn_graph_tensor(L->g, nm, AR_NN_T_CONST, &s, AR_DT_I64, &c, &tc, L->err));
  ar_nn_attr a = attr0();
  in2[0] = t;
  in2[1] = tc;
  AR_CHECK(ar__onnx_emit(L, "index", op, &a, 2, in2, NULL, NULL, AR_NN_MODE_RUN, o));
  *out = o[0];
  return AR_OK;
}

/* Column-major indices (storage_order 1) from row-major ones of an image
 * H x W: plane + w H + h, with plane = idx - idx mod HW, by integer ops. */
static ar_status col_major(lower *L, int idx, int64_t H, int64_t W, int *out) {
  int q, plane, r, h, hw, w, wh, s1;
  AR_CHECK(int_op(L, AR_NN_DIV, idx, H * W, &q));
  AR_CHECK(int_op(L, AR_NN_MUL, q, H * W, &plane));
  int in2[2] = {idx, plane}, o[AR_NN_MAX_IO];
  ar_nn_attr a = attr0();
  AR_CHECK(ar__onnx_emit(L, "index", AR_NN_SUB, &a, 2, in2, NULL, NULL, AR_NN_MODE_RUN, o));
  r = o[0];
  AR_CHECK(int_op(L, AR_NN_DIV, r, W, &h));
  AR_CHECK(int_op(L, AR_NN_MUL, h, W, &hw));
  in2[0] = r;
  in2[1] = hw;
  AR_CHECK(ar__onnx_emit(L, "index", AR_NN_SUB, &a, 2, in2, NULL, NULL, AR_NN_MODE_RUN, o));
  w = o[0];
  AR_CHECK(int_op(L, AR_NN_MUL, w, H, &wh));
  in2[0] = plane;
  in2[1] = wh;
  AR_CHECK(ar__onnx_emit(L, "index", AR_NN_ADD, &a, 2, in2, NULL, NULL, AR_NN_MODE_RUN, o));
  s1 = o[0];
  in2[0] = s1;
  in2[1] = h;
  AR_CHECK(ar__onnx_emit(L, "index", AR_NN_ADD, &a, 2, in2, NULL, NULL, AR_NN_MODE_RUN, o));
  *out = o[0];
  return AR_OK;
}

/* A 3-D pool as two 2-D ones: over (H, W) with the depth folded into the
 * channels, then over D with H x W flattened.  Max and average (with or
 * without the padding in the divisor: the count of a box is the product
 * of its counts per axis) are separable so. */
static ar_status pool3d(lower *L, val *X, int tx, bool max) {
  const Onnx__NodeProto *n = L->node;
  const int64_t *v;
  int64_t k[3], st[3] = {1, 1, 1}, dl[3] = {1, 1, 1}, p0[3] = {0, 0, 0}, p1[3] = {0, 0, 0};
  if (ar__onnx_attr_ints(n, "kernel_shape", &v) != 3)
    return ar__onnx_fail(L, AR_INVALID, "kernel_shape needs 3 values");
  memcpy(k, v, sizeof k);
  if (ar__onnx_attr_ints(n, "strides", &v) == 3)
    memcpy(st, v, sizeof st);
  if (ar__onnx_attr_ints(n, "dilations", &v) == 3)
    memcpy(dl, v, sizeof dl);
  if (ar__onnx_attr_ints(n, "pads", &v) == 6)
    for (int i = 0; i < 3; i++) {
      p0[i] = v[i];
      p1[i] = v[3 + i];
    }
  if (!max && (dl[0] != 1 || dl[1] != 1 || dl[2] != 1))
    return ar__onnx_fail(L, AR_UNSUPPORTED, "dilations in AveragePool");
  char ap[32];
  const char *autopad = ar__onnx_attr_s(n, "auto_pad", "NOTSET", ap, sizeof ap);
  const bool ceil_mode = ar__onnx_attr_i(n, "ceil_mode", 0) != 0;
  for (int i = 0; i < 3; i++) {
    if (k[i] < 1 || st[i] < 1 || dl[i] < 1 || p0[i] < 0 || p1[i] < 0 || k[i] > (1 << 24) ||
        st[i] > (1 << 24) || dl[i] > (1 << 24) || p0[i] > (1 << 24) || p1[i] > (1 << 24))
      return ar__onnx_fail(L, AR_INVALID,
                           "kernel, strides and dilations must be 1 to 2^24, pads 0 to 2^24");
    AR_CHECK(
        spatial_pads(L, autopad, X->shape.d[2 + i], k[i], st[i], dl[i], ceil_mode, &p0[i], &p1[i]));
  }
  const int64_t N = X->shape.d[0], C = X->shape.d[1], D = X->shape.d[2];
  ar_nn_attr a = attr0();
  a.exclude_pad = !max && ar__onnx_attr_i(n, "count_include_pad", 0) == 0;
  a.kernel[0] = k[1];
  a.kernel[1] = k[2];
  a.stride[0] = st[1];
  a.stride[1] = st[2];
  a.dilation[0] = dl[1];
  a.dilation[1] = dl[2];
  a.pad[0] = p0[1];
  a.pad[1] = p0[2];
  a.pad[2] = p1[1];
  a.pad[3] = p1[2];
  const ar_nn_op op = max ? AR_NN_MAXPOOL : AR_NN_AVGPOOL;
  ar_shape s1 = {4, {N, C * D, X->shape.d[3], X->shape.d[4]}};
  int t, o[AR_NN_MAX_IO];
  AR_CHECK(ar__onnx_reshape_to(L, "hw", tx, &s1, &t));
  AR_CHECK(ar__onnx_emit(L, "pool_hw", op, &a, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
  const ar_shape *r1 = &L->g->tensors[o[0]].shape;
  const int64_t Ho = r1->d[2], Wo = r1->d[3];
  ar_shape s2 = {4, {N, C, D, Ho * Wo}};
  AR_CHECK(ar__onnx_reshape_to(L, "d", o[0], &s2, &t));
  ar_nn_attr b = a;
  b.kernel[0] = k[0];
  b.kernel[1] = 1;
  b.stride[0] = st[0];
  b.stride[1] = 1;
  b.dilation[0] = dl[0];
  b.dilation[1] = 1;
  b.pad[0] = p0[0];
  b.pad[2] = p1[0];
  b.pad[1] = b.pad[3] = 0;
  AR_CHECK(ar__onnx_emit(L, "pool_d", op, &b, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
  ar_shape out = {5, {N, C, L->g->tensors[o[0]].shape.d[2], Ho, Wo}};
  AR_CHECK(ar__onnx_reshape_to(L, NULL, o[0], &out, &t));
  return ar__onnx_set_out(L, 0, t);
}

static ar_status l_pool(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  const Onnx__NodeProto *n = L->node;
  const bool max = !strcmp(n->op_type, "MaxPool");
  int tx, o[AR_NN_MAX_IO];
  if (X->shape.nd == 5) {
    AR_CHECK(want_f32(L, X, "the input"));
    if (n->n_output > 1 && n->output[1] && *n->output[1])
      return ar__onnx_fail(L, AR_UNSUPPORTED, "the Indices output of a 3-D max pool");
    AR_CHECK(tensor(L, X, &tx));
    return pool3d(L, X, tx, max);
  }
  AR_CHECK(as_image(L, X, &tx));
  /* The max of u8 values is exact in f32: cast there and back. */
  const ar_dtype dt = X->dtype;
  if (dt != AR_DT_F32 && !(max && dt == AR_DT_U8))
    return want_f32(L, X, "the input");
  AR_CHECK(cast_to(L, tx, AR_DT_F32, &tx));
  const int64_t *v;
  int c = ar__onnx_attr_ints(n, "kernel_shape", &v);
  if (c != X->shape.nd - 2)
    return ar__onnx_fail(L, AR_INVALID, "kernel_shape has %d values for %d spatial dims", c,
                         X->shape.nd - 2);
  int64_t kernel[2] = {v[0], c > 1 ? v[1] : 1};
  ar_nn_attr a = attr0();
  AR_CHECK(geometry(L, &X->shape, kernel, true, &a));
  const bool col = max && ar__onnx_attr_i(n, "storage_order", 0) != 0;
  if (max) {
    a.indices = n->n_output > 1 && n->output[1] && *n->output[1];
  } else {
    a.exclude_pad = ar__onnx_attr_i(n, "count_include_pad", 0) == 0;
  }
  AR_CHECK(ar__onnx_emit(L, X->shape.nd == 3 || dt != AR_DT_F32 ? "pool" : NULL,
                         max ? AR_NN_MAXPOOL : AR_NN_AVGPOOL, &a, 1, &tx, NULL, NULL,
                         AR_NN_MODE_RUN, o));
  int y = o[0];
  AR_CHECK(cast_to(L, y, dt, &y));
  AR_CHECK(image_out(L, 0, y, X->shape.nd));
  if (a.indices) {
    if (X->shape.nd == 3)
      return ar__onnx_fail(L, AR_UNSUPPORTED, "the Indices output of a 1-D max pool");
    int idx = o[1];
    if (col)
      AR_CHECK(col_major(L, idx, X->shape.d[2], X->shape.d[3], &idx));
    AR_CHECK(ar__onnx_set_out(L, 1, idx));
  }
  return AR_OK;
}

static ar_status l_global_avg(lower *L, val *const *in, int n_in) {
  AR_CHECK(need(L, in, n_in, 0));
  val *X = in[0];
  AR_CHECK(want_f32(L, X, "the input"));
  if (X->shape.nd < 3)
    return ar__onnx_fail(L, AR_INVALID, "input of %d dims (N, C, spatial...)", X->shape.nd);
  int t, o[AR_NN_MAX_IO];
  AR_CHECK(tensor(L, X, &t));
  const int64_t planes = X->shape.d[0] * X->shape.d[1];
  ar_shape img = {
      4, {X->shape.d[0], X->shape.d[1], planes > 0 ? ar_shape_count(&X->shape) / planes : 0, 1}};
  AR_CHECK(ar__onnx_reshape_to(L, "as2d", t, &img, &t));
  ar_nn_attr a = attr0();
  AR_CHECK(ar__onnx_emit(L, "gap", AR_NN_GAVGPOOL, &a, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
  ar_shape out = X->shape;
  for (int k = 2; k < out.nd; k++)
    out.d[k] = 1;
  AR_CHECK(ar__onnx_reshape_to(L, NULL, o[0], &out, &t));
  return ar__onnx_set_out(L, 0, t);
}

const ar__onnx_lowering ar__onnx_image_ops[] = {
    {"Conv", l_conv},
    {"MaxPool", l_pool},
    {"AveragePool", l_pool},
    {"GlobalAveragePool", l_global_avg},
};
const int ar__onnx_n_image_ops = (int)(sizeof ar__onnx_image_ops / sizeof ar__onnx_image_ops[0]);
