/*
 * Inside the host kernels of the nn ops in group "math" (private to
 * runtime/device/host): the three files that hold them and the helpers
 * they share.
 *
 *   nn_math.c     DENSE, MATMUL (GEMM through ar__host_sgemm), and the
 *                 group's register function;
 *   nn_eltwise.c  the element-wise ops, unary (RELU .. LOG) and binary with
 *                 NumPy broadcasting (ADD .. POW), and MEAN, SUM;
 *   nn_norm.c     SOFTMAX, LOG_SOFTMAX, LAYERNORM, XENT (row-wise ops over
 *                 the last axis);
 *   nn_typed.c    WHERE, EXPAND, CAST: element-wise ops over any element
 *                 type with broadcasting of up to three operands.
 *
 * include/accelrt/nn.h states each op's contract.  Every kernel here runs on
 * at most a->threads OpenMP threads, allocates nothing, and gives the same
 * bits whatever the thread count: work is split by output elements (or by
 * rows), never by the terms of one sum.
 */
#ifndef ACCELRT_NN_MATH_IMPL_H
#define ACCELRT_NN_MATH_IMPL_H

#include "nn/nn_impl.h"

/* Below this many elements of work a kernel runs on the calling thread
 * alone (waking the team costs more), as PAR_MIN_WORK in host_kernels.c. */
#define AR__NN_PAR_MIN ((int64_t)1 << 15)

static inline int ar__nn_team(const ar_nn_args *a, int64_t work) {
  return a->threads > 1 && work >= AR__NN_PAR_MIN ? a->threads : 1;
}

/* "input 0 is i64; dense takes f32" unless every input in mask is f32. */
static inline ar_status ar__nn_want_f32(ar_nn_op op, int n_in, const ar_dtype *t, unsigned mask,
                                        ar_err *err) {
  for (int i = 0; i < n_in; i++)
    if ((mask >> i & 1u) && t[i] != AR_DT_F32)
      return ar_errf(err, AR_INVALID, "input %d is %s; %s takes f32", i, ar_dtype_name(t[i]),
                     ar_nn_op_name(op));
  return AR_OK;
}

/* "xent takes 2 inputs, got 1" unless lo <= n_in <= hi. */
static inline ar_status ar__nn_want_inputs(ar_nn_op op, int n_in, int lo, int hi, ar_err *err) {
  if (n_in >= lo && n_in <= hi)
    return AR_OK;
  if (lo == hi)
    return ar_errf(err, AR_INVALID, "%s takes %d input%s, got %d", ar_nn_op_name(op), lo,
                   lo == 1 ? "" : "s", n_in);
  return ar_errf(err, AR_INVALID, "%s takes %d to %d inputs, got %d", ar_nn_op_name(op), lo, hi,
                 n_in);
}

/* The shape without its last dimension (the rows of a row-wise op). */
static inline ar_shape ar__nn_rows_shape(const ar_shape *s) {
  ar_shape r = *s;
  r.nd = s->nd > 0 ? s->nd - 1 : 0;
  return r;
}

/* gin (the shape `shape`, broadcast to `out`) = w (out-shaped) summed over
 * the broadcast dims, in a fixed order per element (nn_eltwise.c). */
void ar__nn_reduce_to(const ar_nn_args *a, const ar_shape *out, const ar_shape *shape,
                      const float *w, float *gin);

void ar__nn_host_eltwise_register(ar_nn_kernel *table);
/* WHERE, EXPAND, CAST (nn_typed.c). */
void ar__nn_host_typed_register(ar_nn_kernel *table);
void ar__nn_host_norm_register(ar_nn_kernel *table);

#endif
