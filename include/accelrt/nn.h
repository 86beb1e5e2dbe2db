/*
 * accelrt nn: the tensor operations of graph models (conv2d, pooling,
 * normalisation, element-wise math with broadcasting, shape ops,
 * embeddings, attention, losses), each with its shape rule, its forward
 * and its backward, behind one call shape so that the graph engine
 * (runtime/engine/net*.c) runs any of them the same way and a device
 * backend implements them one table at a time.
 *
 * The pieces:
 *   - ar_nn_op, the operations (AR_NN_OP_MAP: enum and the names job files
 *     use), and ar_nn_attr, their attributes (one plain struct: each op
 *     reads the fields it documents below and ignores the rest);
 *   - ar_nn_infer: from the op, its attributes and its data inputs' shapes,
 *     the shapes of everything else the op touches (its parameters with how
 *     to initialise them, its state, its outputs, and the "aux" tensors the
 *     forward saves for the backward), or an error naming the shapes;
 *   - ar_device_nn_prepare / _forward / _backward / _release (device.h
 *     style, through the device so that CUDA can fill its own table later):
 *     prepare once, before the training loop (oneDNN primitives are made
 *     there), with the workspace bytes it needs; then forward and backward
 *     as often as wanted, allocation-free.
 *
 * Conventions (every kernel keeps them):
 *   - tensors are dense and row-major; images NCHW; token sequences (N, T)
 *     of ids and (N, T, D) of features; the first dimension is the batch;
 *   - shapes are fixed at prepare: a call passes the same shapes (and the
 *     same dtypes) it was prepared with, only the pointers may change;
 *   - backward OVERWRITES every gradient it is given (gin[i].p != NULL):
 *     the graph engine sums gradients of tensors with several consumers
 *     itself.  A NULL gin[i].p means "not needed" (ids, labels, masks, or a
 *     tensor nothing upstream trains): skip its work;
 *   - parameter gradients (gparam) are overwritten too, always wanted;
 *   - the forward of an op in training mode may update its state (batch
 *     normalisation's running statistics) and writes its aux tensors; in
 *     evaluation mode it writes neither aux nor state (backward is then
 *     never called);
 *   - threads: every kernel uses at most a->threads OpenMP threads;
 *   - nothing is allocated in forward or backward: scratch comes from the
 *     workspace, whose size prepare returned.
 *
 * Tests: tests/device/test_nn_*.c (a finite-difference gradient check of
 * every op, tests/device/nn_check.h; outputs against PyTorch when
 * python3-torch is present).
 */
#ifndef ACCELRT_NN_H
#define ACCELRT_NN_H

#include "accelrt/base.h"
#include "accelrt/device.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AR_NN_MAX_DIMS 6
#define AR_NN_MAX_IO 8 /* data inputs, parameters, state, outputs, aux: each */

/* Element types. */
typedef enum ar_dtype {
  AR_DT_F32 = 0,
  AR_DT_I64,
  AR_DT_I32,
  AR_DT_U8,
  AR_DT_BOOL /* one byte, 0 or 1 */
} ar_dtype;
size_t ar_dtype_size(ar_dtype t);
const char *ar_dtype_name(ar_dtype t); /* "f32", "i64", ... */

typedef struct ar_shape {
  int nd;                     /* 0 (a scalar) .. AR_NN_MAX_DIMS */
  int64_t d[AR_NN_MAX_DIMS];
} ar_shape;
int64_t ar_shape_count(const ar_shape *s); /* product of the dims (1 for nd 0) */
bool ar_shape_eq(const ar_shape *a, const ar_shape *b);
/* NumPy's broadcast of a and b (aligned at their last dims, each pair
 * equal or one of them 1) into *out; false when they do not broadcast. */
bool ar_shape_broadcast(const ar_shape *a, const ar_shape *b, ar_shape *out);
/* "32x14x14" (nd 0: "scalar") into buf; returns buf. */
const char *ar_shape_str(const ar_shape *s, char *buf, size_t n);

/* A tensor as a kernel sees it. */
typedef struct ar_tref {
  void *p;
  ar_shape shape;
  ar_dtype dtype;
} ar_tref;

/* The operations, one table: X(ENUM, "job-file name", group).  The group
 * says which source file of the host backend holds the kernel
 * (runtime/device/host/nn_<group>.c). */
#define AR_NN_OP_MAP(X)                                                        \
  X(CONV2D, "conv", conv)                                                      \
  X(MAXPOOL, "maxpool", conv)                                                  \
  X(AVGPOOL, "avgpool", conv)                                                  \
  X(GAVGPOOL, "global_avgpool", conv)                                          \
  X(BATCHNORM, "batchnorm", conv)                                              \
  X(DENSE, "dense", math)                                                      \
  X(MATMUL, "matmul", math)                                                    \
  X(RELU, "relu", math)                                                        \
  X(LEAKY_RELU, "leaky_relu", math)                                            \
  X(SIGMOID, "sigmoid", math)                                                  \
  X(TANH, "tanh", math)                                                        \
  X(GELU, "gelu", math)                                                        \
  X(SOFTMAX, "softmax", math)                                                  \
  X(LOG_SOFTMAX, "log_softmax", math)                                          \
  X(LAYERNORM, "layernorm", math)                                              \
  X(ADD, "add", math)                                                          \
  X(SUB, "sub", math)                                                          \
  X(MUL, "mul", math)                                                          \
  X(DIV, "div", math)                                                          \
  X(POW, "pow", math)                                                          \
  X(SQRT, "sqrt", math)                                                        \
  X(EXP, "exp", math)                                                          \
  X(LOG, "log", math)                                                          \
  X(MEAN, "mean", math)                                                        \
  X(SUM, "sum", math)                                                          \
  X(XENT, "xent", math)                                                        \
  X(CONCAT, "concat", shape)                                                   \
  X(SPLIT, "split", shape)                                                     \
  X(SLICE, "slice", shape)                                                     \
  X(PAD, "pad", shape)                                                         \
  X(RESHAPE, "reshape", shape)                                                 \
  X(FLATTEN, "flatten", shape)                                                 \
  X(TRANSPOSE, "transpose", shape)                                             \
  X(EMBEDDING, "embedding", shape)                                             \
  X(POSEMBED, "posembed", shape)                                               \
  X(DROPOUT, "dropout", shape)                                                 \
  X(MASK, "mask", shape)                                                       \
  X(ATTENTION, "attention", shape)                                             \
  X(NEG, "neg", math)                                                          \
  X(ABS, "abs", math)                                                          \
  X(ERF, "erf", math)                                                          \
  X(CLIP, "clip", math)                                                        \
  X(WHERE, "where", math)                                                      \
  X(EXPAND, "expand", math)                                                    \
  X(CAST, "cast", math)                                                        \
  X(GATHER, "gather", shape)                                                   \
  X(BCE, "bce", math)                                                          \
  X(SPARSE_DENSE, "sparse_dense", sparse)                                      \
  X(XENT_MULTI, "xent_multi", sparse)

typedef enum ar_nn_op {
#define AR__NN_ENUM(e, name, group) AR_NN_##e,
  AR_NN_OP_MAP(AR__NN_ENUM)
#undef AR__NN_ENUM
      AR_NN_OP_COUNT
} ar_nn_op;
const char *ar_nn_op_name(ar_nn_op op);
/* The op named `name`, or -1. */
int ar_nn_op_from_name(const char *name);

/* Attributes.  Each op reads only the fields listed for it:
 *
 * CONV2D     x (N,C,H,W) -> y (N,out,Ho,Wo); params w (out, C/groups,
 *            kernel[0], kernel[1]), b (out) when bias.  out, kernel,
 *            stride, pad (top, left, bottom, right), dilation, groups,
 *            bias, act (NONE or RELU: fused), PyTorch's Conv2d arithmetic:
 *            Ho = (H + pad[0] + pad[2] - dilation[0]*(kernel[0]-1) - 1) /
 *            stride[0] + 1.
 * MAXPOOL, AVGPOOL  x (N,C,H,W) -> y (N,C,Ho,Wo): kernel, stride, pad
 *            (avg: padding counted in the divisor, PyTorch's default;
 *            exclude_pad: only the window's elements inside the input, as
 *            ONNX's count_include_pad 0).  Max: dilation; ties go to the
 *            first maximum in window order (row by row) and NaN
 *            propagates, as in PyTorch; aux (N,C,Ho,Wo): each output's
 *            offset within its window, u8 (i32 when the kernel has more
 *            than 256 elements); indices: a second output (N,C,Ho,Wo) i64,
 *            each maximum's flat index into x (ONNX's Indices), which
 *            takes no gradient.
 * GAVGPOOL   x (N,C,H,W) -> y (N,C).
 * BATCHNORM  x (N,C,H,W) or (N,C) -> y: params gamma (C) init ones, beta
 *            (C) zeros, both exempt from weight decay; state running_mean
 *            (C) zeros, running_var (C) ones; eps (default 1e-5), momentum
 *            (PyTorch's: running = (1-momentum) running + momentum batch,
 *            the variance unbiased; default 0.1); act (NONE or RELU: fused).
 *            Training: batch statistics; evaluation: running statistics.
 *            var_biased: the running variance moves by the biased batch
 *            variance (ONNX's rule) instead of the unbiased one.
 * DENSE      x (..., K) -> y (..., out): params w (out, K) (PyTorch's
 *            Linear), b (out) when bias; act (NONE, RELU, SIGMOID: fused).
 * MATMUL     a (B..., M, K), b (B..., K, N) -> (B..., M, N); trans_b: b is
 *            (B..., N, K).  Equal batch dims (no broadcasting).
 * RELU, SIGMOID, TANH, GELU (erf form), SQRT, EXP, LOG: element-wise.
 * LEAKY_RELU alpha (negative slope, default 0.01).
 * SOFTMAX, LOG_SOFTMAX over the last axis.
 * LAYERNORM  over the last axis: params gamma (D) ones, beta (D) zeros
 *            (exempt from weight decay); eps (default 1e-5).  stats: two
 *            more outputs, each row's mean and 1/sqrt(var + eps) (the
 *            input's shape without its last dim; ONNX's Mean and
 *            InvStdDev), whose gradients are not propagated.
 * ADD, SUB, MUL, DIV, POW  two inputs with NumPy broadcasting, or one
 *            input and the constant `scalar` as the second operand (POW:
 *            x^scalar; with two inputs x^y, x > 0 for y's gradient).
 *            ADD: act RELU fuses a relu (f32; the graph engine's fusion
 *            pass makes it from add + relu), the other ops ignore act.
 * MEAN, SUM  over axis (negative counts from the end; axis_all: every axis
 *            but the batch's), keepdims.
 * XENT       logits (N, C) f32, labels (N) i64 class ids -> loss (N) f32:
 *            softmax cross-entropy per row.  Backward ignores gout and
 *            writes dlogits = scale * (softmax - onehot) (the engine's
 *            scale: 1 / rows); a label outside [0, C) is a forward error
 *            the engine checks on the host beforehand.  aux: softmax (N,C).
 * BCE        logits (N, C) f32, targets (N, C) f32 (multi-hot, or any
 *            values in [0, 1]) -> loss (N) f32: the row's mean over its C
 *            classes of the sigmoid cross-entropy, max(x, 0) - x t +
 *            log(1 + exp(-|x|)), so that the engine's mean over rows is
 *            PyTorch's BCEWithLogitsLoss.  Backward ignores gout and writes
 *            dlogits = scale * (sigmoid(x) - t) / C.
 * CONCAT     n inputs -> one, along axis; SPLIT one input -> n_sizes
 *            outputs of sizes[i] along axis.
 * SLICE      axis, begin, end (end clamped; step 1).
 * PAD        pads: before pad_nd[i], after pad_nd[AR_NN_MAX_DIMS + i] per
 *            dim i, constant value `scalar`.
 * RESHAPE    shape (0 in a dim: copy the input's; one -1: inferred);
 *            FLATTEN (N, rest...) -> (N, product).  Both share no memory
 *            with the input in this version (a copy; the planner may alias
 *            them later).
 * TRANSPOSE  perm.
 * EMBEDDING  ids (N, T) i64 or i32 -> (N, T, out): param table (vocab,
 *            out), init normal(0, 1) as PyTorch; an id outside [0, vocab)
 *            is checked by the engine on the host.  sparse_grad: the
 *            training forward writes aux (R + 1) i64, R the number of ids:
 *            the count of distinct ids, then those ids ascending; the
 *            backward writes only those rows of the table's gradient
 *            (the others keep whatever they held: the graph engine steps
 *            only the listed rows).
 * POSEMBED   x (N, T, D) -> x + P: param P (T, D), init normal(0, 0.02).
 * DROPOUT    p (probability of dropping): training scales kept values by
 *            1/(1-p); aux mask (same shape, u8); seed in the call.
 *            Evaluation: identity.
 * MASK       ids (N, T) -> (N, T) f32: 1 where id != pad_id, else 0.
 * ATTENTION  x (N, T, D) [, mask (N, T) f32 from MASK: 0 keys ignored] ->
 *            (N, T, D): multi-head self-attention with `heads` heads
 *            (D % heads == 0): params wq, wk, wv, wo (D, D), bq, bk, bv, bo
 *            (D); causal.  aux: q, k, v (N, heads, T, D/heads), probs
 *            (N, heads, T, T), ctx (N, T, D).
 * ADD, SUB, MUL, DIV, POW also take two i64, i32 or u8 inputs of one type
 *            (forward only: the result in that type, wrapping as NumPy
 *            does; DIV truncates, a division by zero gives 0).
 * NEG, ABS, ERF  element-wise (ABS's gradient is 0 at 0, as PyTorch's).
 * CLIP       min(max(x, lo), hi) (defaults -inf, +inf); NaN stays NaN;
 *            the gradient passes where lo <= x <= hi.
 * WHERE      cond (bool or u8), x, y with NumPy broadcasting of the three
 *            -> x where cond, else y (x and y of one type; gradients to
 *            f32 x and y).
 * EXPAND     x broadcast with `shape` (NumPy's rule both ways: the output
 *            dims are the larger of each pair) -> the result; any type.
 * CAST       x -> `to` (any element types): float to integer truncates
 *            toward zero (NaN gives 0, beyond the range it saturates at
 *            i64's, then wraps to the narrower type), to bool is x != 0;
 *            f32 to f32 passes the gradient.
 * GATHER     data (any type), indices (i64 or i32, any shape; negative
 *            counts from the end) along axis -> data's dims before axis,
 *            indices' dims, data's dims after axis.  An index outside the
 *            axis gives zeros (the engine cannot stop a kernel; importers
 *            check ids).  Gradient to f32 data (summed where an index
 *            repeats).
 * SPARSE_DENSE  a CSR batch of N sparse rows: row_ptr (N+1) i64, idx (E)
 *            i32, val (E) f32 (row r's entries at row_ptr[r] ..
 *            row_ptr[r+1]-1, ids < vocab; E is room, only row_ptr[N] read)
 *            -> y (N, out) = x w + b: params w (vocab, out), one row per
 *            input feature (gathered whole, as an embedding bag; init
 *            FAN_IN_ROWS), b (out) when bias; act (NONE, RELU, SIGMOID:
 *            fused).  The chain engine's sparse-input layer with its
 *            kernels (ar_device_spmm, _spmm_t): dw is the whole (vocab,
 *            out), zero but for the rows the batch names.  No input takes a
 *            gradient.  An empty row gives act(b) (a padded batch's tail).
 * XENT_MULTI logits (N, C) f32, lab_ptr (N+1) i64, lab (E) i32 (row r's
 *            labels at lab_ptr[r] .. lab_ptr[r+1]-1, no duplicates, each <
 *            C) -> loss (N) f32: act SOFTMAX, the multi-label softmax
 *            cross-entropy with mass 1/|L_r| on each label
 *            (ar_device_softmax_xent); act SIGMOID, the sigmoid cross-entropy
 *            summed over the row's C classes (ar_device_sigmoid_bce).  A row
 *            without labels has loss 0 (softmax) and no gradient.  Backward
 *            ignores gout and writes dlogits = scale * dloss/dlogits.
 */
typedef struct ar_nn_attr {
  int64_t out;
  int64_t kernel[2], stride[2], pad[4], dilation[2];
  int64_t groups;
  bool bias;
  ar_act act;
  float eps, momentum, alpha, p, scalar;
  int axis;
  bool axis_all, keepdims;
  int64_t begin, end;
  int n_sizes;
  int64_t sizes[AR_NN_MAX_IO];
  int64_t pad_nd[2 * AR_NN_MAX_DIMS];
  ar_shape shape;
  int perm[AR_NN_MAX_DIMS];
  int64_t vocab, pad_id;
  int heads;
  bool causal, trans_b;
  float lo, hi;       /* CLIP */
  ar_dtype to;        /* CAST */
  bool exclude_pad;   /* AVGPOOL */
  bool indices;       /* MAXPOOL */
  bool var_biased;    /* BATCHNORM */
  bool stats;         /* LAYERNORM */
  bool sparse_grad;   /* EMBEDDING */
} ar_nn_attr;
/* The defaults every op starts from: stride 1, dilation 1, groups 1, bias
 * true, eps 1e-5, momentum 0.1, alpha 0.01, pad_id 0, perm identity, lo
 * -inf, hi +inf, to f32, the rest 0. */
void ar_nn_attr_defaults(ar_nn_attr *a);

/* How a parameter or state tensor starts. */
typedef enum ar_nn_init {
  AR_NN_INIT_ZEROS = 0,
  AR_NN_INIT_ONES,
  AR_NN_INIT_FAN_IN,  /* He (relu) or Xavier by the engine's rule, fan in
                         = the product of every dim but the first */
  AR_NN_INIT_NORMAL,  /* normal(0, init_std) */
  AR_NN_INIT_FAN_IN_ROWS /* as FAN_IN for a weight held (in, out): fan in =
                            the first dim (SPARSE_DENSE's w) */
} ar_nn_init;

/* What an op touches, from ar_nn_infer. */
typedef struct ar_nn_sig {
  int n_in;                      /* data inputs (as given) */
  int n_param;
  ar_shape param[AR_NN_MAX_IO];
  const char *param_name[AR_NN_MAX_IO]; /* "w", "b", "gamma", ... (static) */
  ar_nn_init param_init[AR_NN_MAX_IO];
  float param_std[AR_NN_MAX_IO];        /* AR_NN_INIT_NORMAL */
  bool param_decay[AR_NN_MAX_IO];       /* weight decay applies by default */
  int n_state;                          /* non-trained, persistent */
  ar_shape state[AR_NN_MAX_IO];
  const char *state_name[AR_NN_MAX_IO];
  ar_nn_init state_init[AR_NN_MAX_IO];
  int n_out;
  ar_shape out[AR_NN_MAX_IO];
  ar_dtype out_dtype[AR_NN_MAX_IO];
  int n_aux;                            /* saved by forward for backward */
  ar_shape aux[AR_NN_MAX_IO];
  ar_dtype aux_dtype[AR_NN_MAX_IO];
  /* Which data inputs the backward reads (besides gout): lets the engine
   * free activations early.  Bit i: input i; out_needed: the outputs. */
  unsigned in_needed;
  bool out_needed;
  /* Data inputs that take no gradient whatever happens (ids, labels,
   * masks): bit i. */
  unsigned no_grad;
  double flops; /* forward multiply-adds x 2, for the model summary */
} ar_nn_sig;

/* Fills *sig for `op` with data inputs of these shapes and types.  AR_OK;
 * AR_INVALID with what is wrong in err, naming the shapes and attributes
 * involved ("input 32x14x14, kernel 5, padding 0, stride 3: the output
 * would be empty"): the engine prefixes the node's op and name. */
ar_status ar_nn_infer(ar_nn_op op, const ar_nn_attr *attr, int n_in, const ar_shape *in,
                      const ar_dtype *in_dtype, ar_nn_sig *sig, ar_err *err);

/* One call of an op: the tensors as ar_nn_infer described them. */
typedef struct ar_nn_args {
  ar_nn_op op;
  const ar_nn_attr *attr;
  int n_in, n_param, n_state, n_out, n_aux;
  ar_tref in[AR_NN_MAX_IO];
  ar_tref param[AR_NN_MAX_IO];
  ar_tref state[AR_NN_MAX_IO];
  ar_tref out[AR_NN_MAX_IO];
  ar_tref aux[AR_NN_MAX_IO];
  /* backward only: */
  ar_tref gout[AR_NN_MAX_IO];   /* gradients of the outputs */
  ar_tref gin[AR_NN_MAX_IO];    /* gradients of the data inputs (p NULL:
                                   not wanted) */
  ar_tref gparam[AR_NN_MAX_IO]; /* gradients of the parameters */
  bool training;
  float scale;     /* XENT's gradient scale */
  int64_t rows;    /* XENT_MULTI: the rows that count (a padded batch's
                      real ones; the rest get loss 0 and no gradient); 0:
                      all */
  uint64_t seed;   /* DROPOUT: the engine gives seed ^ step per call */
  void *work;      /* the workspace prepare asked for */
  size_t work_bytes; /* at prepare: the most the caller can give (0: not
                        known; a backend then asks for no more than the
                        host's kernel would) */
  int threads;     /* set by the device wrapper from the handle */
  ar_device *dev;  /* set by the device wrappers (prepare, forward,
                      backward): the handle the call runs on, whose queue
                      and error record a GPU backend's kernels use */
} ar_nn_args;
/* Empty args for op with attr (counts 0, pointers NULL). */
void ar_nn_args_init(ar_nn_args *a, ar_nn_op op, const ar_nn_attr *attr);
/* Args as ar_nn_infer described them: the counts, and the shapes and types
 * of the parameters, state, outputs and aux (and of the outputs'
 * gradients); pointers NULL.  The data inputs' refs are the caller's. */
void ar_nn_args_from_sig(ar_nn_args *a, ar_nn_op op, const ar_nn_attr *attr,
                         const ar_nn_sig *sig);

/* A prepared op (opaque; the backend's primitives). */
typedef struct ar_nn_prim ar_nn_prim;

/* Prepares `a` (shapes and dtypes filled, pointers may be NULL) on dev:
 * *work_bytes receives the workspace forward and backward need (the
 * larger).  training: backward will be called.  AR_OK; AR_UNSUPPORTED when
 * the device has no kernel for the op (the reason in err); AR_NOMEM;
 * AR_INVALID.  Release with ar_device_nn_release. */
ar_status ar_device_nn_prepare(ar_device *dev, const ar_nn_args *a, bool training,
                               ar_nn_prim **out, size_t *work_bytes, ar_err *err);
/* Runs forward or backward of a prepared op (same shapes).  The device's
 * threads, at most those it was prepared with, are put into a->threads.  Errors are the device's (recorded in
 * the handle), as every op of device.h. */
void ar_device_nn_forward(ar_device *dev, ar_nn_prim *prim, ar_nn_args *a);
void ar_device_nn_backward(ar_device *dev, ar_nn_prim *prim, ar_nn_args *a);
void ar_device_nn_release(ar_device *dev, ar_nn_prim *prim); /* NULL: no-op */

/* ---- graphs built by a program --------------------------------------------
 * ar_nn_graph: a graph of these ops built by code rather than by a job
 * file (the ONNX importer, runtime/onnx/), each node's shapes inferred as
 * it is added so that the builder knows them for the next; the graph
 * engine makes a net of it (net.h: ar_net_build_graph).  Tensors are
 * inputs (fed at each run), constants (fixed values, no gradient),
 * parameters and state (with initial values, or made by an op with its
 * initialisation rule) and node outputs.  The structs are read-only for
 * callers; build with the functions below.  Not thread-safe.
 * Tests: tests/engine/test_net_graph.c (through the engine),
 * tests/onnx/test_onnx_load.c (through the importer). */
typedef enum ar_nn_tkind {
  AR_NN_T_INPUT = 0,
  AR_NN_T_CONST,
  AR_NN_T_PARAM,
  AR_NN_T_STATE,
  AR_NN_T_VALUE /* a node's output */
} ar_nn_tkind;

typedef struct ar_nn_gtensor {
  char *name;
  ar_shape shape;
  ar_dtype dtype;
  ar_nn_tkind kind;
  void *data;      /* CONST, PARAM, STATE: initial values (owned); NULL for
                      one an op made: `init` says how it starts */
  ar_nn_init init; /* PARAM, STATE made by an op */
  float std;
  bool decay;      /* PARAM: weight decay applies */
  bool transposed; /* PARAM (2-D): held as (d1, d0) of the model's (d0, d1)
                      tensor of this name (an imported MatMul's weight made a
                      sampled head's rows): checkpoints and export write the
                      model's layout */
  int producer;    /* VALUE: its node, else -1 */
} ar_nn_gtensor;

/* When a node runs in training mode. */
typedef enum ar_nn_mode {
  AR_NN_MODE_RUN = 0, /* as the run: training steps train, inference does not */
  AR_NN_MODE_TRAIN,   /* always (an ONNX BatchNormalization with training_mode) */
  AR_NN_MODE_EVAL     /* never */
} ar_nn_mode;

typedef struct ar_nn_gnode {
  char *name;
  ar_nn_op op;
  ar_nn_attr attr;
  ar_nn_sig sig;
  ar_nn_mode mode;
  int n_in;
  int in[AR_NN_MAX_IO];    /* tensors */
  int param[AR_NN_MAX_IO]; /* sig.n_param tensors */
  int state[AR_NN_MAX_IO]; /* sig.n_state tensors */
  int out[AR_NN_MAX_IO];   /* sig.n_out tensors (kind VALUE) */
} ar_nn_gnode;

typedef struct ar_nn_graph {
  int n_tensors, n_nodes, n_inputs, n_outputs;
  ar_nn_gtensor *tensors;
  ar_nn_gnode *nodes;
  int *inputs;  /* (n_inputs) tensors of kind INPUT, in the order added */
  int *outputs; /* (n_outputs) any tensors, in the order marked */
  int cap_tensors, cap_nodes, cap_inputs, cap_outputs;
} ar_nn_graph;

/* An empty graph.  AR_NOMEM. */
ar_status ar_nn_graph_create(ar_nn_graph **out, ar_err *err);
void ar_nn_graph_destroy(ar_nn_graph *g); /* NULL is a no-op */
/* A tensor of kind INPUT, CONST, PARAM or STATE (not VALUE): name and data
 * are copied (data: count elements of t; NULL for an input, or zeros).
 * PARAM and STATE are f32.  *out: its index.  AR_INVALID; AR_NOMEM. */
ar_status ar_nn_graph_tensor(ar_nn_graph *g, const char *name, ar_nn_tkind kind,
                             const ar_shape *s, ar_dtype t, const void *data, int *out,
                             ar_err *err);
/* A node of op reading tensors in[0..n_in): its shapes are inferred now.
 * params (sig.n_param entries) and states (sig.n_state) name existing
 * PARAM/STATE/CONST/INPUT tensors to use in the op's slots, each with as
 * many f32 elements as the slot (its shape may differ: a (3,4,5) scale in
 * a (60) slot); NULL, or -1 in an entry: a new tensor NAME.<slot> made by
 * the op's rule.  out (AR_NN_MAX_IO) receives the output tensors.  AR_OK;
 * AR_INVALID or AR_UNSUPPORTED from the op's shape rule, or for a bad
 * binding, the message naming the node; AR_NOMEM. */
ar_status ar_nn_graph_node(ar_nn_graph *g, const char *name, ar_nn_op op, const ar_nn_attr *attr,
                           int n_in, const int *in, const int *params, const int *states,
                           ar_nn_mode mode, int *out, ar_err *err);
/* Marks tensor t as the graph's next output.  AR_INVALID; AR_NOMEM. */
ar_status ar_nn_graph_output(ar_nn_graph *g, int t, ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_NN_H */
