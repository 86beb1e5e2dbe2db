/*
 * Inside the ONNX exporter (private to runtime/onnx/):
 *
 *   export.c      the ModelProto: names, initializers, nodes and their
 *                 attributes built with protobuf-c, the batch axis, the
 *                 packing; the walk over the graph's nodes;
 *   export_ops.c  each nn op as ONNX nodes (ar__onnx_export_node).
 *
 * Every message and string of the model is allocated from the exporter
 * (ex_* below) and freed in one sweep when the model is packed, so a
 * failure half-way leaks nothing.
 */
#ifndef ACCELRT_ONNX_EXPORT_IMPL_H
#define ACCELRT_ONNX_EXPORT_IMPL_H

#include "onnx_impl.h"

typedef struct ar__onnx_ex {
  const ar_nn_graph *g;
  const ar_nn_graph *probe; /* g for another batch size, or NULL */
  int64_t opset;
  ar_err *err;
  void **mem; /* every allocation, freed at the end */
  size_t n_mem, cap_mem;
  Onnx__NodeProto **nodes;
  size_t n_nodes, cap_nodes;
  Onnx__TensorProto **inits;
  size_t n_inits, cap_inits;
  char **tname;      /* (g->n_tensors) the ONNX value of each tensor, NULL: none yet */
  bool *aliased;     /* (g->n_tensors) tname borrowed from another tensor (dropout) */
  ar__onnx_map used; /* every value name given out */
  int cur;           /* the node being exported, for messages */
} ar__onnx_ex;

/* Zeroed memory owned by the exporter, or NULL (the status is then set
 * in e->err by ar__onnx_ex_nomem). */
void *ar__onnx_ex_alloc(ar__onnx_ex *e, size_t bytes);
ar_status ar__onnx_ex_nomem(ar__onnx_ex *e);
/* A value name not given out before, from `base` (as is when free, else
 * with a counter); NULL when out of memory. */
const char *ar__onnx_ex_fresh(ar__onnx_ex *e, const char *base);
/* The ONNX value of graph tensor t (its initializer made on first use for
 * a constant, parameter or state); NULL when out of memory. */
const char *ar__onnx_ex_value(ar__onnx_ex *e, int t);
/* A new node of op_type reading in[0..n_in) and writing out[0..n_out)
 * (names copied; "" for an omitted optional input), in *out.  AR_NOMEM. */
ar_status ar__onnx_ex_node(ar__onnx_ex *e, const char *op_type, int n_in, const char *const *in,
                           int n_out, const char *const *out, Onnx__NodeProto **made);
/* Attributes of a node.  AR_NOMEM. */
ar_status ar__onnx_ex_attr_i(ar__onnx_ex *e, Onnx__NodeProto *n, const char *name, int64_t v);
ar_status ar__onnx_ex_attr_f(ar__onnx_ex *e, Onnx__NodeProto *n, const char *name, float v);
ar_status ar__onnx_ex_attr_ints(ar__onnx_ex *e, Onnx__NodeProto *n, const char *name,
                                const int64_t *v, int count);
/* An initializer of a fresh name from `base` holding count elements of t
 * (shape s; NULL: a 1-D tensor of count), its name in *out.  AR_NOMEM. */
ar_status ar__onnx_ex_const(ar__onnx_ex *e, const char *base, ar_dtype t, const ar_shape *s,
                            const void *data, int64_t count, const char **out);
/* ONNX's element type code of t. */
int32_t ar__onnx_ex_dtype(ar_dtype t);

/* Exports node i of e->g.  AR_UNSUPPORTED (an op or attribute with no
 * ONNX form at this opset, or a value that follows the batch where ONNX
 * needs a constant), naming the node; AR_NOMEM. */
ar_status ar__onnx_export_node(ar__onnx_ex *e, int i);

#endif
