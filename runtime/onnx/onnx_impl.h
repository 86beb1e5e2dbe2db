/*
 * Inside the ONNX importer (private to runtime/onnx/):
 *
 *   load.c       the file, the protobuf (depth-checked, then unpacked by
 *                protobuf-c), the model's validation, its inputs/outputs;
 *   tensor.c     TensorProto to a host tensor (raw or typed fields,
 *                external data from the model's folder), tensor files;
 *   names.c      a string-to-index map (graph names);
 *   fold*.c      ops evaluated on host tensors of any element type: what
 *                is constant for the input shapes is folded with these
 *                (fold_impl.h);
 *   lower.c      the walk over the nodes: fold, or lower to nn ops;
 *   lower_*.c    each ONNX op's lowering (lower_impl.h);
 *   export*.c    nn graphs written as ONNX (export_impl.h).
 *
 * include/accelrt/onnx.h states the contracts.
 */
#ifndef ACCELRT_ONNX_IMPL_H
#define ACCELRT_ONNX_IMPL_H

#include "accelrt/onnx.h"

#include "onnx.pb-c.h"

/* ---- names ----------------------------------------------------------------- */

/* String keys (borrowed: they must outlive the map) to ints. */
typedef struct ar__onnx_map {
  const char **keys;
  int *vals;
  size_t cap, n;
} ar__onnx_map;
/* The value of key, or -1. */
int ar__onnx_map_get(const ar__onnx_map *m, const char *key);
/* Sets key to val (replacing).  AR_NOMEM. */
ar_status ar__onnx_map_put(ar__onnx_map *m, const char *key, int val);
void ar__onnx_map_fini(ar__onnx_map *m);

/* ---- the model ----------------------------------------------------------------- */

struct ar_onnx_model {
  char *path; /* as given, for messages */
  char *dir;  /* its folder (external data), NULL when read from memory */
  const ar_fs *fs;
  ar_onnx_limits lim;
  Onnx__ModelProto *mp;
  Onnx__GraphProto *g; /* mp->graph */
  int64_t opset;
  int n_inputs, n_outputs;
  ar_onnx_io *inputs, *outputs; /* inputs: those that are not initializers */
  int *input_proto;             /* (n_inputs) index into g->input */
  ar_onnx_tensor *inits;        /* (g->n_initializer) decoded */
  ar__onnx_map init_of;         /* initializer name -> index */
};

/* ONNX's element type code as ours: false (and its name in *name) when
 * not one of f32, i64, i32, u8, bool. */
bool ar__onnx_dtype(int32_t code, ar_dtype *out, const char **name);

/* Decodes tp into *out (owned by the caller); `what` names it in messages
 * ("initializer 'w'", "node 'c' (Constant) attribute value"); m gives the
 * file, the folder for external data (NULL: external data refused), and
 * the limits.  Statuses of ar_onnx_load. */
ar_status ar__onnx_tensor_decode(const char *file, const char *dir, const ar_fs *fs,
                                 const ar_onnx_limits *lim, const Onnx__TensorProto *tp,
                                 const char *what, ar_onnx_tensor *out, ar_err *err);

/* Whether the protobuf message of type d in buf nests at most max_depth
 * deep (protobuf-c unpacks recursively: a deep file must not reach it). */
bool ar__onnx_depth_ok(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t n,
                       int max_depth);
/* protobuf-c's allocator over ar_malloc (tests inject failures there). */
extern ProtobufCAllocator ar__onnx_alloc;

/* The name of an attribute of n that the importer reads but that is not
 * of the type ONNX gives it (an int axis, a string mode, ...), with what
 * it is and should be in *got and *want; NULL when all are right. */
const char *ar__onnx_attr_mistyped(const Onnx__NodeProto *n, const char **got, const char **want);

/* Whether the model's producer trains batch normalisation by PyTorch's
 * rules (producer_name "pytorch", or "accelrt": the running variance moves
 * by the unbiased batch variance), not by ONNX's (the biased one). */
bool ar__onnx_pytorch_rules(const ar_onnx_model *m);

/* "node 'name' (Op)" or "node 12 (Op)" into buf. */
const char *ar__onnx_node_str(const Onnx__NodeProto *n, int index, char *buf, size_t size);

/* ---- folding ------------------------------------------------------------------- */

/* A fresh tensor of shape s and type t (zeroed data), at most m's
 * limits.max_tensor_bytes (m NULL: 1 GiB, the most folding makes).
 * AR_RANGE (too large, or the product of the non-zero dims too large),
 * AR_INVALID (a negative dim), AR_NOMEM. */
ar_status ar__onnx_tensor_new(const ar_onnx_model *m, const ar_shape *s, ar_dtype t,
                              ar_onnx_tensor *out, ar_err *err);
/* Element i of t as a double / an int64 (any type). */
double ar__onnx_get_f(const ar_onnx_tensor *t, int64_t i);
int64_t ar__onnx_get_i(const ar_onnx_tensor *t, int64_t i);
/* Sets element i from a double (floats) or an int64 (others), with
 * NumPy's conversions (CAST's rules, include/accelrt/nn.h). */
void ar__onnx_set(ar_onnx_tensor *t, int64_t i, double f, int64_t v, bool from_float);

/* The ops fold.c evaluates: every op of the list in fold.c, on constant
 * inputs in[0..n_in) (a NULL entry: an omitted optional input), writing
 * n_out outputs.  AR_UNSUPPORTED when the op (or this element type) is
 * not folded; AR_INVALID with the reason.  The messages name no node (the
 * caller adds it). */
ar_status ar__onnx_fold(const ar_onnx_model *m, const Onnx__NodeProto *node,
                        const ar_onnx_tensor *const *in, int n_in, ar_onnx_tensor *out, int n_out,
                        ar_err *err);
/* Whether fold.c evaluates op_type. */
bool ar__onnx_foldable(const char *op_type);

/* Argument rules that folding and lowering share (fold.c). */
/* axis (negative from the end) into [0, nd). */
ar_status ar__onnx_axis(int64_t axis, int nd, int *out, ar_err *err);
/* ONNX Reshape's target t[0..n) (0: copy the input's dim unless
 * allowzero; one -1: inferred). */
ar_status ar__onnx_reshape_shape(const ar_shape *in, const int64_t *t, int n, bool allowzero,
                                 ar_shape *out, ar_err *err);
ar_status ar__onnx_unsqueeze_shape(const ar_shape *in, const int64_t *axes, int n, ar_shape *out,
                                   ar_err *err);
/* n < 0: every dim of 1. */
ar_status ar__onnx_squeeze_shape(const ar_shape *in, const int64_t *axes, int n, ar_shape *out,
                                 ar_err *err);
ar_status ar__onnx_flatten_shape(const ar_shape *in, int64_t axis, ar_shape *out, ar_err *err);
/* A Slice resolved per dim: the first index, the step and the count. */
typedef struct ar__onnx_slice_t {
  int64_t start[AR_NN_MAX_DIMS], step[AR_NN_MAX_DIMS], count[AR_NN_MAX_DIMS];
} ar__onnx_slice_t;
/* axes NULL: 0..n-1; steps NULL: 1. */
ar_status ar__onnx_slice(const ar_shape *in, const int64_t *starts, const int64_t *ends,
                         const int64_t *axes, const int64_t *steps, int n, ar__onnx_slice_t *s,
                         ar_err *err);
/* A list of at most cap ints from the node's input idx (when it has one;
 * in[idx] its constant value, NULL when not constant: AR_UNSUPPORTED) or
 * attribute attr (NULL: none); *n = -1 when neither is there. */
ar_status ar__onnx_ints_arg(const Onnx__NodeProto *node, const ar_onnx_tensor *const *in, int n_in,
                            int idx, const char *attr, int64_t *buf, int cap, int *n, ar_err *err);

/* ---- lowering (lower.c, lower_*.c) ---------------------------------------------- */

/* What the lowering knows of one ONNX value. */
typedef struct ar__onnx_val {
  const char *name;          /* borrowed from the model */
  const ar_onnx_tensor *c;   /* its value when constant (folded, an initializer) */
  const ar_onnx_tensor *pin; /* a graph input's value from opts->known */
  ar_onnx_tensor own;        /* storage of c when the lowering made it */
  bool init;                 /* c is an initializer */
  int t;                     /* its graph tensor, -1 until needed */
  ar_shape shape;
  ar_dtype dtype;
} ar__onnx_val;

typedef struct ar__onnx_lower {
  const ar_onnx_model *m;
  const ar_onnx_lower_opts *o;
  ar_nn_graph *g;
  ar__onnx_map val_of; /* name -> index into vals */
  ar__onnx_val *vals;
  int n_vals, cap_vals;
  /* The node being lowered. */
  const Onnx__NodeProto *node;
  int index, helpers;
  int skip;        /* a later node already lowered with this one (-1: none) */
  char where[320]; /* "FILE: node 'x' (Conv)" */
  ar_err *err;
} ar__onnx_lower;

/* Whether v is a parameter the net will train (an f32 initializer when
 * opts->training): its value is not a constant to fold with. */
static inline bool ar__onnx_trained(const ar__onnx_lower *L, const ar__onnx_val *v) {
  return L->o->training && v->init && v->dtype == AR_DT_F32;
}
/* The graph tensor of v, made (a constant, or a parameter for a trained
 * f32 initializer) when v is constant.  AR_NOMEM. */
ar_status ar__onnx_tensor_of(ar__onnx_lower *L, ar__onnx_val *v, int *out);
/* What the current node's helper tensors are named after: its first
 * output, else (a node may have none) its name, else its op. */
const char *ar__onnx_out_base(const ar__onnx_lower *L);
/* Adds an nn node for the current ONNX node (named after it; `part`
 * tells helpers apart).  Errors name the ONNX node. */
ar_status ar__onnx_emit(ar__onnx_lower *L, const char *part, ar_nn_op op, const ar_nn_attr *a,
                        int n_in, const int *in, const int *params, const int *states,
                        ar_nn_mode mode, int *out);
/* t reshaped to s (a RESHAPE node unless the shape is already s). */
ar_status ar__onnx_reshape_to(ar__onnx_lower *L, const char *part, int t, const ar_shape *s,
                              int *out);
/* A constant the lowering makes (ar__onnx_tensor_new within the model's
 * limits), its errors naming the node (or the file, before the walk). */
ar_status ar__onnx_const_new(ar__onnx_lower *L, const ar_shape *s, ar_dtype t,
                             ar_onnx_tensor *out);
/* Output k of the current node is graph tensor t / constant c (moved:
 * *c is left empty). */
ar_status ar__onnx_set_out(ar__onnx_lower *L, int k, int t);
ar_status ar__onnx_set_out_const(ar__onnx_lower *L, int k, ar_onnx_tensor *c);
/* Status st (AR_UNSUPPORTED, AR_INVALID) with a message naming the file
 * and the node. */
ar_status ar__onnx_fail(ar__onnx_lower *L, ar_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Lowers the current node (lower_shape.c): ins[i] its inputs (NULL where
 * omitted).  AR_UNSUPPORTED for an op it does not know. */
ar_status ar__onnx_lower_node(ar__onnx_lower *L, ar__onnx_val *const *ins, int n_in);

/* ---- attributes ---------------------------------------------------------------- */

const Onnx__AttributeProto *ar__onnx_attr(const Onnx__NodeProto *n, const char *name);
int64_t ar__onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def);
float ar__onnx_attr_f(const Onnx__NodeProto *n, const char *name, float def);
/* The string attribute copied into buf (truncated to size - 1), or def. */
const char *ar__onnx_attr_s(const Onnx__NodeProto *n, const char *name, const char *def, char *buf,
                            size_t size);
/* The ints attribute: its count (-1 when absent), its values in *v
 * (borrowed). */
int ar__onnx_attr_ints(const Onnx__NodeProto *n, const char *name, const int64_t **v);

#endif
