/*
 * Host kernels of WHERE, EXPAND and CAST (group "math";
 * include/accelrt/nn.h states each op): element-wise ops over any element
 * type, with NumPy broadcasting of up to three operands.  They move or
 * convert values rather than compute, and appear mostly where an imported
 * model selects (masks) or broadcasts; the loops are plain and walk the
 * output in order with an odometer of the operands' offsets, on one
 * thread.  Gradients (f32 only) are summed over broadcast dims by
 * ar__nn_reduce_to, as the binary ops' are.
 */
#include "host/nn_math_impl.h"
#include "nn/nn_elem.h"

#include <math.h>
#include <string.h>

/* ---- broadcasting of up to three operands ---------------------------------- */

/* Calls f(ctx, i, off[0..nops)) for each output element i in order, with
 * the operands' element offsets. */
typedef void (*elem_fn)(void *ctx, int64_t i, const int64_t *off);

static void odometer(const ar_shape *out, int nops, const ar_shape *const *ops, elem_fn f,
                     void *ctx) {
  int64_t st[3][AR_NN_MAX_DIMS], idx[AR_NN_MAX_DIMS] = {0}, off[3] = {0, 0, 0};
  for (int i = 0; i < nops; i++)
    nn_bcast_strides(out, ops[i], st[i]);
  const int64_t n = ar_shape_count(out);
  for (int64_t i = 0; i < n; i++) {
    f(ctx, i, off);
    for (int k = out->nd - 1; k >= 0; k--) {
      for (int q = 0; q < nops; q++)
        off[q] += st[q][k];
      if (++idx[k] < out->d[k])
        break;
      for (int q = 0; q < nops; q++)
        off[q] -= st[q][k] * out->d[k];
      idx[k] = 0;
    }
  }
}

static ar_status bcast_error(ar_nn_op op, const ar_shape *a, const ar_shape *b, ar_err *err) {
  char sa[64], sb[64];
  return ar_errf(err, AR_INVALID,
                 "%s: shapes %s and %s cannot be broadcast (each pair of dims, aligned at the "
                 "last, must be equal or have a 1)",
                 ar_nn_op_name(op), ar_shape_str(a, sa, sizeof sa), ar_shape_str(b, sb, sizeof sb));
}

/* ---- WHERE -------------------------------------------------------------------- */

static ar_status where_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                             const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  (void)attr;
  AR_CHECK(ar__nn_want_inputs(AR_NN_WHERE, n_in, 3, 3, err));
  if (dt[0] != AR_DT_BOOL && dt[0] != AR_DT_U8)
    return ar_errf(err, AR_INVALID, "where: the condition (input 0) is %s; give bool or u8",
                   ar_dtype_name(dt[0]));
  if (dt[1] != dt[2])
    return ar_errf(err, AR_INVALID, "where: x is %s and y is %s; give one type",
                   ar_dtype_name(dt[1]), ar_dtype_name(dt[2]));
  ar_shape o;
  if (!ar_shape_broadcast(&in[1], &in[2], &o))
    return bcast_error(AR_NN_WHERE, &in[1], &in[2], err);
  ar_shape o2;
  if (!ar_shape_broadcast(&in[0], &o, &o2))
    return bcast_error(AR_NN_WHERE, &in[0], &o, err);
  ar__nn_sig_init(sig, 3);
  ar__nn_sig_out(sig, &o2, dt[1]);
  sig->in_needed = 1u; /* the condition */
  sig->out_needed = false;
  sig->no_grad = dt[1] == AR_DT_F32 ? 1u : 7u;
  sig->flops = (double)ar_shape_count(&o2);
  return AR_OK;
}

/* The workspace: an output-sized buffer when x or y is broadcast. */
static ar_status where_prepare(const ar_nn_args *a, bool training, void **state, size_t *work_bytes,
                               ar_err *err) {
  (void)err;
  *state = NULL;
  *work_bytes = 0;
  const int64_t n = ar_shape_count(&a->out[0].shape);
  if (training && a->out[0].dtype == AR_DT_F32 &&
      (ar_shape_count(&a->in[1].shape) != n || ar_shape_count(&a->in[2].shape) != n))
    *work_bytes = (size_t)n * sizeof(float);
  return AR_OK;
}

typedef struct where_ctx {
  const uint8_t *c;
  const char *x, *y;
  char *dst;
  size_t es;
} where_ctx;

static void where_elem(void *vctx, int64_t i, const int64_t *off) {
  const where_ctx *w = vctx;
  const char *src = w->c[off[0]] ? w->x + off[1] * w->es : w->y + off[2] * w->es;
  memcpy(w->dst + i * w->es, src, w->es);
}

static void where_forward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *ops[3] = {&a->in[0].shape, &a->in[1].shape, &a->in[2].shape};
  where_ctx w = {a->in[0].p, a->in[1].p, a->in[2].p, a->out[0].p, ar_dtype_size(a->out[0].dtype)};
  odometer(&a->out[0].shape, 3, ops, where_elem, &w);
}

typedef struct where_grad {
  const uint8_t *c;
  const float *g;
  float *dst;
  bool take; /* copy where the condition is this */
} where_grad;

static void where_grad_elem(void *vctx, int64_t i, const int64_t *off) {
  const where_grad *w = vctx;
  w->dst[i] = (w->c[off[0]] != 0) == w->take ? w->g[i] : 0.0f;
}

static void where_backward(void *state, ar_nn_args *a) {
  (void)state;
  const ar_shape *out = &a->out[0].shape;
  const int64_t n = ar_shape_count(out);
  for (int i = 1; i <= 2; i++) {
    if (!a->gin[i].p)
      continue;
    const bool direct = ar_shape_count(&a->in[i].shape) == n;
    AR_ASSERT(direct || n == 0 || (a->work && a->work_bytes >= (size_t)n * sizeof(float)));
    where_grad w = {a->in[0].p, a->gout[0].p, direct ? a->gin[i].p : a->work, i == 1};
    odometer(out, 1, (const ar_shape *[]){&a->in[0].shape}, where_grad_elem, &w);
    if (!direct)
      ar__nn_reduce_to(a, out, &a->in[i].shape, a->work, a->gin[i].p);
  }
}

/* ---- EXPAND ------------------------------------------------------------------- */

static ar_status expand_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                              const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  AR_CHECK(ar__nn_want_inputs(AR_NN_EXPAND, n_in, 1, 1, err));
  if (attr->shape.nd < 0 || attr->shape.nd > AR_NN_MAX_DIMS)
    return ar_errf(err, AR_INVALID, "expand: the shape has %d dims (0 to %d)", attr->shape.nd,
                   AR_NN_MAX_DIMS);
  for (int k = 0; k < attr->shape.nd; k++)
    if (attr->shape.d[k] < 0)
      return ar_errf(err, AR_INVALID, "expand: dim %d of the shape is %lld", k,
                     (long long)attr->shape.d[k]);
  ar_shape o;
  if (!ar_shape_broadcast(&in[0], &attr->shape, &o))
    return bcast_error(AR_NN_EXPAND, &in[0], &attr->shape, err);
  ar__nn_sig_init(sig, 1);
  ar__nn_sig_out(sig, &o, dt[0]);
  sig->in_needed = 0;
  sig->out_needed = false;
  sig->no_grad = dt[0] == AR_DT_F32 ? 0u : 1u;
  return AR_OK;
}

typedef struct copy_ctx {
  const char *src;
  char *dst;
  size_t es;
} copy_ctx;

static void copy_elem(void *vctx, int64_t i, const int64_t *off) {
  const copy_ctx *c = vctx;
  memcpy(c->dst + i * c->es, c->src + off[0] * c->es, c->es);
}

static void expand_forward(void *state, ar_nn_args *a) {
  (void)state;
  copy_ctx c = {a->in[0].p, a->out[0].p, ar_dtype_size(a->out[0].dtype)};
  odometer(&a->out[0].shape, 1, (const ar_shape *[]){&a->in[0].shape}, copy_elem, &c);
}

static void expand_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    ar__nn_reduce_to(a, &a->out[0].shape, &a->in[0].shape, a->gout[0].p, a->gin[0].p);
}

/* ---- CAST ----------------------------------------------------------------------- */

static ar_status cast_infer(const ar_nn_attr *attr, int n_in, const ar_shape *in,
                            const ar_dtype *dt, ar_nn_sig *sig, ar_err *err) {
  AR_CHECK(ar__nn_want_inputs(AR_NN_CAST, n_in, 1, 1, err));
  if ((unsigned)attr->to > AR_DT_BOOL)
    return ar_errf(err, AR_INVALID, "cast: `to` is element type %d, which does not exist",
                   (int)attr->to);
  ar__nn_sig_init(sig, 1);
  ar__nn_sig_out(sig, &in[0], attr->to);
  sig->in_needed = 0;
  sig->out_needed = false;
  sig->no_grad = dt[0] == AR_DT_F32 && attr->to == AR_DT_F32 ? 0u : 1u;
  return AR_OK;
}

static void cast_forward(void *state, ar_nn_args *a) {
  (void)state;
  const int64_t n = ar_shape_count(&a->in[0].shape);
  const ar_dtype from = a->in[0].dtype, to = a->out[0].dtype;
  const void *x = a->in[0].p;
  void *y = a->out[0].p;
  if (from == to) {
    memcpy(y, x, (size_t)n * ar_dtype_size(to));
    return;
  }
  for (int64_t i = 0; i < n; i++)
    nn_cast_elem(from, to, x, y, i);
}

static void cast_backward(void *state, ar_nn_args *a) {
  (void)state;
  if (a->gin[0].p)
    memcpy(a->gin[0].p, a->gout[0].p, (size_t)ar_shape_count(&a->in[0].shape) * sizeof(float));
}

void ar__nn_host_typed_register(ar_nn_kernel *table) {
  table[AR_NN_WHERE] = (ar_nn_kernel){.infer = where_infer,
                                      .prepare = where_prepare,
                                      .forward = where_forward,
                                      .backward = where_backward};
  table[AR_NN_EXPAND] =
      (ar_nn_kernel){.infer = expand_infer, .forward = expand_forward, .backward = expand_backward};
  table[AR_NN_CAST] =
      (ar_nn_kernel){.infer = cast_infer, .forward = cast_forward, .backward = cast_backward};
}
