/*
 * accelrt onnx: models from ONNX files (runtime/onnx/).
 *
 *   - ar_onnx_load reads a ModelProto with protobuf-c (the C code of
 *     onnx.proto is generated at build time by protoc-c from the proto
 *     Debian's libonnx-dev installs) and validates it strictly before
 *     anything trusts a field: size limits, nesting depth, opset 7..17 of
 *     the default domain, element types f32, i64, i32, u8 and bool, every
 *     tensor's data against its dims (raw_data or the typed fields),
 *     external data read only from files in the model's own folder, node
 *     inputs defined before use.  A corrupt or truncated file is an error
 *     (AR_CORRUPT), never a crash; every message names the file, the node
 *     and what to do;
 *   - ar_onnx_read_tensor reads one TensorProto file (the input_K.pb and
 *     output_K.pb of ONNX's backend tests);
 *   - ar_onnx_lower turns the model, for given input shapes, into an
 *     ar_nn_graph (nn.h) of the engine's ops: everything that is constant
 *     for those shapes (Constant, Shape, shape arithmetic, Cast of
 *     constants, ConstantOfShape, Range, Equal, ...) is folded on the host
 *     first, so only computation on the inputs reaches the engine.
 *
 * Tests: tests/onnx/test_onnx_load.c (validation, errors), tests/onnx/
 * conformance.sh (`accelrt onnx-test` over Debian's libonnx-testdata),
 * tests/fuzz/fuzz_onnx.c.
 */
#ifndef ACCELRT_ONNX_H
#define ACCELRT_ONNX_H

#include "accelrt/base.h"
#include "accelrt/fs.h"
#include "accelrt/nn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The opsets of the default domain (ai.onnx) this version imports. */
#define AR_ONNX_OPSET_MIN 7
#define AR_ONNX_OPSET_MAX 17

/* Bounds on what a file may ask for; AR_ONNX_LIMITS_INIT holds the
 * defaults. */
typedef struct ar_onnx_limits {
  size_t max_file_bytes;   /* the .onnx file (protobuf's own limit: 2 GiB) */
  size_t max_tensor_bytes; /* one tensor's data, inline or external */
  int64_t max_nodes;       /* nodes of the graph */
  int max_depth;           /* nesting of protobuf messages */
} ar_onnx_limits;
#define AR_ONNX_LIMITS_INIT                                                                        \
  { (size_t)2 << 30, (size_t)4 << 30, 1000000, 32 }

/* A tensor on the host: dense, row-major, `data` (count elements of
 * dtype) owned by whoever holds the struct (ar_onnx_tensor_fini). */
typedef struct ar_onnx_tensor {
  char *name; /* may be NULL */
  ar_dtype dtype;
  ar_shape shape;
  void *data;
  size_t bytes;
} ar_onnx_tensor;
void ar_onnx_tensor_fini(ar_onnx_tensor *t); /* frees name and data; NULL is a no-op */

/* A graph input or output as the file declares it. */
typedef struct ar_onnx_io {
  const char *name; /* borrowed from the model */
  int position;     /* among the graph's inputs (or outputs) in the file, where
                       old models list initializers as inputs too: the K of
                       a backend test's input_K.pb */
  ar_dtype dtype;
  int nd;
  int64_t dim[AR_NN_MAX_DIMS]; /* -1: symbolic (dim_param) or unknown */
} ar_onnx_io;

typedef struct ar_onnx_model ar_onnx_model;

/* Reads and validates the model at path through fs (NULL: this process's
 * rights); external data is opened through fs too, beside the model.
 * limits NULL: the defaults.  AR_OK; AR_NOTFOUND, AR_IO (the file);
 * AR_CORRUPT (not a parsable ONNX model: truncated, corrupt, nested too
 * deep); AR_UNSUPPORTED (an opset, element type or feature this version
 * does not import); AR_INVALID (a model that breaks ONNX's rules: a tensor
 * whose data does not match its dims, an input used before it is
 * defined); AR_RANGE (a limit); AR_NOMEM.  The message starts with the
 * path. */
ar_status ar_onnx_load(const char *path, const ar_fs *fs, const ar_onnx_limits *limits,
                       ar_onnx_model **out, ar_err *err);
/* The same from bytes in memory (copied as needed); `name` is used in
 * messages; external data is refused (there is no folder). */
ar_status ar_onnx_load_mem(const void *bytes, size_t n, const char *name,
                           const ar_onnx_limits *limits, ar_onnx_model **out, ar_err *err);
void ar_onnx_destroy(ar_onnx_model *m); /* NULL is a no-op */

/* What the model says about itself (borrowed, valid while m lives). */
const char *ar_onnx_path(const ar_onnx_model *m);
int64_t ar_onnx_opset(const ar_onnx_model *m);
/* The graph's inputs that are not initializers, and its outputs. */
int ar_onnx_n_inputs(const ar_onnx_model *m);
const ar_onnx_io *ar_onnx_input(const ar_onnx_model *m, int i);
int ar_onnx_n_outputs(const ar_onnx_model *m);
const ar_onnx_io *ar_onnx_output(const ar_onnx_model *m, int i);
int ar_onnx_n_nodes(const ar_onnx_model *m);

/* Reads a file holding one TensorProto (at most limits->max_file_bytes).
 * Statuses as ar_onnx_load; *out is the caller's (ar_onnx_tensor_fini). */
ar_status ar_onnx_read_tensor(const char *path, const ar_fs *fs, const ar_onnx_limits *limits,
                              ar_onnx_tensor *out, ar_err *err);
/* The same from bytes. */
ar_status ar_onnx_parse_tensor(const void *bytes, size_t n, const char *name,
                               const ar_onnx_limits *limits, ar_onnx_tensor *out, ar_err *err);

/* How to lower a model.  AR_ONNX_LOWER_OPTS_INIT holds the defaults. */
typedef struct ar_onnx_lower_opts {
  /* The shape of each input (ar_onnx_n_inputs of them) in this run; NULL:
   * the declared shapes, which must then be fixed. */
  const ar_shape *input_shapes;
  /* Values of inputs that the graph needs as constants at build time (a
   * Reshape's shape, a Slice's starts, a Clip's bounds...), one pointer per
   * input, NULL where none: `accelrt onnx-test` gives every data set's
   * values, since a node test feeds such arguments as inputs; an input
   * given here that the graph does not need as a constant still runs
   * through the engine.  NULL: none. */
  const ar_onnx_tensor *const *known;
  /* Whether the net will train: f32 initializers that reach the engine
   * become parameters (else constants), batch normalisation keeps its
   * running statistics as state. */
  bool training;
  /* Nodes named in the job's model.sparse: a MatMul (with the Add of its
   * bias after it) or a Gemm with transB=0 whose weight is an initializer
   * used only there lowers to one dense node whose weight is held
   * transposed, (out, in) rows as a sampled head needs (ar_nn_gtensor
   * transposed).  NULL: none. */
  const char *const *sparse_nodes;
  int n_sparse_nodes;
} ar_onnx_lower_opts;
#define AR_ONNX_LOWER_OPTS_INIT                                                                    \
  { NULL, NULL, false, NULL, 0 }

/* Lowers m into a new graph (*out, ar_nn_graph_destroy): the graph's inputs
 * are the model's inputs that still reach the engine, named as in the file
 * (an input folded away is not one); its outputs are the model's, in
 * order (a folded output is a constant tensor).  AR_OK; AR_UNSUPPORTED
 * naming the node, the op and what is not imported (an op, an attribute
 * value, an element type, an input that must be constant); AR_INVALID for
 * shapes or attributes that break the op's rules; AR_NOMEM. */
ar_status ar_onnx_lower(const ar_onnx_model *m, const ar_onnx_lower_opts *o, ar_nn_graph **out,
                        ar_err *err);


/* ---- export ----------------------------------------------------------------
 * ar_onnx_export writes an nn graph (nn.h; the engine makes one of a
 * trained net: net.h, ar_net_graph) as an ONNX inference graph: each op as
 * ONNX nodes (batch normalisation in evaluation form with its running
 * statistics, dropout removed, fused activations, GELU and, before opset
 * 17, layer normalisation as their decompositions), every constant,
 * parameter and state tensor an initializer of its name and values.
 * Tests: tests/onnx/export.sh, tests/onnx/torch_train.py. */
#define AR_ONNX_EXPORT_OPSET_MIN 13
#define AR_ONNX_EXPORT_OPSET_MAX 17

typedef struct ar_onnx_export_opts {
  int64_t opset; /* AR_ONNX_EXPORT_OPSET_MIN..MAX */
  /* The same model's graph built for another batch size (the same nodes
   * and tensors), or NULL: the dims and shape attributes that differ
   * between the two follow the batch, so the inputs' and outputs' first
   * axis is written symbolic ("N") and a Reshape's target gets -1 there.
   * NULL: every dim as in g. */
  const ar_nn_graph *probe;
  const char *producer; /* producer_name; NULL: "accelrt" */
  const char *version;  /* producer_version; NULL: none */
} ar_onnx_export_opts;
#define AR_ONNX_EXPORT_OPTS_INIT                                                                   \
  { 13, NULL, NULL, NULL }

/* The ModelProto of g packed into *bytes (n of them; ar_free).  AR_OK;
 * AR_UNSUPPORTED naming the node and its op when it has no ONNX form here
 * (the fused attention op; a loss), or when a constant or a shape
 * attribute follows the batch where ONNX needs it fixed; AR_INVALID (an
 * opset outside 13..17, a probe of another graph); AR_NOMEM. */
ar_status ar_onnx_export(const ar_nn_graph *g, const ar_onnx_export_opts *o, void **bytes,
                         size_t *n, ar_err *err);
/* One TensorProto of t (its name, dims, type, raw data) packed into *bytes
 * (ar_free): the input_K.pb and output_K.pb of a backend-test folder.
 * AR_NOMEM. */
ar_status ar_onnx_pack_tensor(const ar_onnx_tensor *t, void **bytes, size_t *n, ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_ONNX_H */
