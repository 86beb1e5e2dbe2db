/* Inside folding (private to runtime/onnx/fold*.c): the call of one
 * folded node, and the folds that fold_move.c holds for fold.c's table.
 *
 *   fold_values.c  host tensors' elements (new, get, set) and the argument
 *                  rules folding and lowering share (axes, shapes, slices,
 *                  ints from attributes or constant inputs);
 *   fold.c         element-wise folds, the table of folded ops, the entry;
 *   fold_move.c    data movement (reshape, slice, transpose, concat,
 *                  gather, expand, split, ...), reductions, clip, size. */
#ifndef ACCELRT_ONNX_FOLD_IMPL_H
#define ACCELRT_ONNX_FOLD_IMPL_H

#include "onnx_impl.h"

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

static inline const ar_onnx_tensor *arg(const fold_ctx *c, int i) { return i < c->n_in ? c->in[i] : NULL; }

/* Offsets of output element i into an operand broadcast into `out`:
 * strides precomputed by ar__onnx_bc_strides, then per element. */
void ar__onnx_bc_strides(const ar_shape *out, const ar_shape *s, int64_t *st);
int64_t ar__onnx_bc_offset(const ar_shape *out, const int64_t *st, int64_t i);

/* fold_move.c: each folds c's node into c->out.  Statuses of ar__onnx_fold. */
ar_status ar__onnx_fold_reshape_like(fold_ctx *c);
ar_status ar__onnx_fold_slice(fold_ctx *c);
ar_status ar__onnx_fold_transpose(fold_ctx *c);
ar_status ar__onnx_fold_concat(fold_ctx *c);
ar_status ar__onnx_fold_gather(fold_ctx *c);
ar_status ar__onnx_fold_expand(fold_ctx *c);
ar_status ar__onnx_fold_constant_of_shape(fold_ctx *c);
ar_status ar__onnx_fold_range(fold_ctx *c);
ar_status ar__onnx_fold_split(fold_ctx *c);
ar_status ar__onnx_fold_reduce(fold_ctx *c);
ar_status ar__onnx_fold_clip(fold_ctx *c);
ar_status ar__onnx_fold_size(fold_ctx *c);
ar_status ar__onnx_fold_tile(fold_ctx *c);

#endif
