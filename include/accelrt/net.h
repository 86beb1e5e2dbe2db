/*
 * accelrt net: graph models — any directed acyclic graph of the tensor ops
 * of nn.h, built from a job file's `model` (ar_spec.graph), trained on a
 * device with the same guarantees as the chain of graph.h:
 *
 *   - the graph: tensors with shapes and element types, nodes (op, data
 *     inputs, parameters, state, outputs, aux), a topological order (the
 *     items' order; `inputs` may only name earlier items), shapes inferred
 *     node by node, errors naming the item, its place in the file and the
 *     shapes;
 *   - reverse-mode differentiation: each node's backward rule (its
 *     kernel's backward) in reverse order, gradients of tensors read by
 *     several nodes summed;
 *   - the exact memory plan: persistent (parameters, optimizer state,
 *     running statistics), ephemeral (the batch, activations, aux,
 *     gradients and the kernels' workspace, each placed by its lifetime over
 *     the forward+backward steps of one iteration), allocated as planned in
 *     two blocks; nothing is allocated in the training loop;
 *   - the optimizers of the job file (Adam, SGD with momentum; weight decay
 *     not applied to biases and normalisation parameters) and its learning-
 *     rate schedule (constant, step, cosine, linear warm-up).
 *
 * The batch size is fixed: training steps take full batches; evaluation
 * pads a short last batch and counts only its real rows.
 *
 * Tests: tests/engine/test_net.c (shape errors, plan exactness, training
 * a small CNN, gradients of whole graphs by finite differences);
 * tests/engine/test_net_graph.c (nets of graphs built by a program);
 * tests/onnx/torch_train.py (imported models trained against PyTorch).
 */
#ifndef ACCELRT_NET_H
#define ACCELRT_NET_H

#include "accelrt/base.h"
#include "accelrt/device.h"
#include "accelrt/graph.h" /* ar_plan */
#include "accelrt/nn.h"
#include "accelrt/spec.h"
#include "accelrt/trace.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ar_net ar_net;

/* Builds the graph of spec (spec->graph) for batches of `batch` rows and
 * `classes` output classes (the last item's width must equal it; 0: not
 * checked), infers every shape and computes the plan.  No device memory
 * yet.  AR_SPEC with "FILE:LINE:COL: error: model.layers[i]: ..." in err
 * for a graph that does not fit together; AR_NOMEM.  A model.onnx job is
 * ar_net_build_onnx's with this process's rights. */
ar_status ar_net_build(const ar_spec *spec, int64_t batch, ar_net **out, ar_err *err);
/* As ar_net_build, for any model.input, a sparse one (XC data) too: its
 * rows hold at most max_nnz features and max_labels labels (the data's
 * bounds, ar_job_row_bounds; ignored for other inputs).  The batch is
 * staged with ar_net_stage_sparse instead of ar_net_x/ar_net_y. */
ar_status ar_net_build_sparse(const ar_spec *spec, int64_t batch, int64_t max_nnz,
                              int64_t max_labels, ar_net **out, ar_err *err);
/* Whether the net reads sparse input (ar_net_build_sparse). */
bool ar_net_sparse_input(const ar_net *n);
/* Copies a host batch of at most the planned rows, features and labels
 * into the net's staging area (rows past b->rows padded empty: they count
 * in neither the loss nor the gradient); the next ar_net_train or
 * ar_net_eval loads it.  AR_RANGE (what to raise in err) when the batch
 * exceeds the plan.  Only for a net over sparse input. */
ar_status ar_net_stage_sparse(ar_net *n, const ar_batch *b, ar_err *err);
void ar_net_destroy(ar_net *n); /* NULL is a no-op */

/* The plan (valid while the net lives). */
const ar_plan *ar_net_plan(const ar_net *n);
/* Prints the model summary (each node: name, op, output shape,
 * parameters, FLOPs) and totals. */
void ar_net_print(const ar_net *n, FILE *to);
/* The classes of the output, and the shape of one input (the batch's
 * dimension first). */
int64_t ar_net_classes(const ar_net *n);
const ar_shape *ar_net_input_shape(const ar_net *n);
ar_dtype ar_net_input_dtype(const ar_net *n);

/* Allocates the two blocks on dev (or uses the caller's, when persistent
 * is not NULL: the lanes'), prepares every kernel, initialises parameters
 * from spec->seed.  AR_UNSUPPORTED when the device lacks an op (the reason
 * names the op); AR_NOMEM; device statuses. */
ar_status ar_net_start(ar_net *n, ar_device *dev, void *persistent, void *ephemeral,
                       ar_err *err);
/* The blocks moved (between iterations). */
void ar_net_rebase(ar_net *n, void *persistent, void *ephemeral);

/* Where a batch goes: x (batch x input elements) f32 or i64 as
 * ar_net_input_dtype says, y (batch) i64 class ids.  Host pointers into
 * the net's own staging (allocated by start); copy the batch there, then
 * call train or eval. */
void *ar_net_x(ar_net *n);
int64_t *ar_net_y(ar_net *n);
/* With model.loss sigmoid_bce, the targets (batch x classes f32) instead
 * of y: the same staging. */
float *ar_net_targets(ar_net *n);

/* One training step on the staged batch: forward, loss, backward, the
 * optimizer.  *loss: the batch's mean loss; *lr: the rate used.  AR_OK;
 * AR_RANGE for a class id outside the output (named).  With a trace (see
 * ar_net_set_trace) each op's forward and backward are detail spans and
 * the optimizer a span, on AR_TRACE_STEPS. */
ar_status ar_net_train(ar_net *n, double *loss, double *lr, ar_err *err);
/* Forward in evaluation mode on the staged batch; the first `rows` rows
 * count: adds their loss and top-1/top-5 hits into acc (hits[0] top 1,
 * hits[2] top 5; hits[1] top 3). */
ar_status ar_net_eval(ar_net *n, int64_t rows, ar_eval_acc *acc, ar_err *err);

/* Forward in evaluation mode on the staged batch; out (batch x classes)
 * receives the logits.  AR_OK; device statuses. */
ar_status ar_net_eval_logits(ar_net *n, float *out, ar_err *err);

/* The inference graph of a graph model's net (runtime/engine/net_export.c;
 * the ONNX exporter writes it, onnx.h: ar_onnx_export): its input, every
 * node but the loss, its output the logits; parameters, state and
 * constants hold the net's values when `values` and the net is started
 * (read from its device), else their initial values or zeros.  Names are
 * the net's (an imported model's are its file's).  *out: the caller's
 * (ar_nn_graph_destroy).  AR_OK; AR_UNSUPPORTED for a job file's chain
 * model; AR_NOMEM; device statuses. */
ar_status ar_net_graph(const ar_net *n, bool values, ar_nn_graph **out, ar_err *err);

/* The optimizer's step count (checkpoints) and the tensors a checkpoint
 * keeps: parameters, optimizer state, running statistics, in plan order,
 * f32.  names/ptrs/counts (and shapes, which may be NULL) have room for
 * ar_net_tensors(n, NULL, NULL, NULL, NULL). */
int64_t ar_net_step(const ar_net *n);
/* The run's iterations, for schedules that span it (cosine). */
void ar_net_set_total(ar_net *n, int64_t total);
void ar_net_set_step(ar_net *n, int64_t step);
/* After a checkpoint's tensors and step are loaded into a started model:
 * an LSH-sampled head's hash tables are rebuilt from the loaded rows (they
 * are not stored) and its rebuild schedule replayed to the step.  AR_OK,
 * or the lsh library's status with the reason in err. */
ar_status ar_net_resumed(ar_net *n, ar_err *err);
/* Tensors an imported model stores transposed (an LSH-sampled MatMul head's
 * weight, held as (out, in) rows, and its optimizer state) put into the
 * model's layout (model true: before writing a checkpoint, whose shapes
 * ar_net_tensors gives as the model's) or back (false: after writing one,
 * or after loading one).  AR_OK; AR_NOMEM; device statuses. */
ar_status ar_net_model_layout(ar_net *n, bool model, ar_err *err);
int ar_net_tensors(const ar_net *n, const char **names, float **ptrs, int64_t *counts,
                   ar_shape *shapes);
ar_device *ar_net_device(const ar_net *n);
/* Where training steps record their spans (borrowed; NULL: nowhere). */
void ar_net_set_trace(ar_net *n, ar_trace *t);

/* ---- a graph model trained by parameter servers (runtime/dist) -----------
 * A worker computes part of each global batch with its net and sends the
 * gradients of its parameters; the servers sum them and step the same
 * optimizer per parameter.  Nodes are numbered in list order, a
 * topological order the backward runs last first; the forward runs them in
 * ar_net_forward_order, which under distributed: moves ready nodes that
 * wait for no parameter first (docs/graph.md, "Forward order"). */
typedef struct ar_net_param {
  const char *name;
  ar_shape shape;
  int64_t count;        /* floats */
  int tensor;           /* its index among the net's tensors */
  float *p, *g;         /* parameter, its gradient (bound addresses) */
  float *s1, *s2;       /* optimizer state (NULL: none) */
  int first;            /* the first node (forward order) that reads it:
                           it must be in before that node's forward */
  int ready;            /* the node after whose backward (and the adding
                           of its temporaries) the gradient is final */
} ar_net_param;
/* The trainable parameters, in plan order (out may be NULL: the count).
 * After ar_net_start for the addresses. */
int ar_net_params(const ar_net *n, ar_net_param *out);
/* The running statistics (state tensors such as batch norm's): names,
 * addresses, floats (arrays may be NULL: the count). */
int ar_net_states(const ar_net *n, const char **names, float **ptrs, int64_t *counts);
int ar_net_node_count(const ar_net *n);
/* The forward order: order[s] is the node whose forward runs s-th (order
 * may be NULL; room for ar_net_node_count).  Returns the node count. */
int ar_net_forward_order(const ar_net *n, int *order);
const char *ar_net_node_name(const ar_net *n, int node);
/* Whether the node's backward runs (a training node). */
bool ar_net_node_trains(const ar_net *n, int node);
/* The nodes whose outputs node reads (deps, room for `cap`; duplicates
 * possible); returns their count. */
int ar_net_node_inputs(const ar_net *n, int node, int *deps, int cap);
/* The parameters node reads, as ar_net_param.tensor (room for `cap`). */
int ar_net_node_params(const ar_net *n, int node, int *tensors, int cap);
/* The loss gradient is divided by `rows` instead of the net's batch (a
 * worker's part of a global batch: the parts' gradients sum to the batch
 * mean).  0: the batch. */
void ar_net_set_grad_rows(ar_net *n, int64_t rows);
/* Calls hooks around each node's forward and backward of a training step
 * (struct ar_job_hooks of runtime.h: phase AR_JOB_FORWARD / AR_JOB_BACKWARD,
 * `layer` the node), and its step instead of the optimizer (the step still
 * counts).  NULL: none.  Copied. */
struct ar_job_hooks;
void ar_net_set_hooks(ar_net *n, const struct ar_job_hooks *h);
/* The optimizer of ar_net_train in pieces, for a server that steps some
 * parameters: begin counts the step and returns its learning rate; param
 * steps the parameter whose ar_net_param.tensor is `tensor` with its
 * gradient (the very code of the whole step). */
double ar_net_opt_begin(ar_net *n);
void ar_net_opt_param(ar_net *n, int tensor, double lr);
/* A started net's LSH-sampled items under distributed: (runtime/dist, a
 * chain lowered onto the graph engine), the head or a hidden item, named
 * by the item's index in spec->layers, as ar_model_grad_rows and the
 * others of graph.h do for a chain's sampled layer: whether item `layer`
 * is sampled in this net; the rows its gradient holds since the last
 * clear or step; a row marked (a server summing workers' rows); those
 * rows' gradients zeroed and the set cleared (a worker, which does not
 * step); rows whose parameters came from a server (ids NULL: all),
 * re-hashed at the next rebuild; the rebuild due at the net's step;
 * sparse Adam over the marked rows of w and b at the net's step
 * (ar_net_opt_begin counts it; the dense parameters are
 * ar_net_opt_param's); the rows' last update steps (u64 per row, the
 * checkpoint's LAYER.lsh.last).  All but the first need a sampled item. */
bool ar_net_sampled(const ar_net *n, int layer);
const uint32_t *ar_net_sampled_grad_rows(const ar_net *n, int layer, size_t *count);
void ar_net_sampled_grad_rows_mark(ar_net *n, int layer, uint32_t id);
void ar_net_sampled_grad_rows_clear(ar_net *n, int layer);
void ar_net_sampled_rows_changed(ar_net *n, int layer, const uint32_t *ids, size_t count);
ar_status ar_net_sampled_rehash(ar_net *n, int layer, ar_err *err);
ar_status ar_net_sampled_step(ar_net *n, int layer, ar_err *err);
void *ar_net_sampled_last(const ar_net *n, int layer);
/* Whether the started net has a sampled head; the last training step's
 * loss summed over its rows as the head sums it (a double per row, the
 * chain's sum; the loss tensor holds floats). */
bool ar_net_head_sampled(const ar_net *n);
double ar_net_head_loss_sum(const ar_net *n);

/* ---- graphs built by a program ---------------------------------------------
 * A net from an ar_nn_graph (nn.h; the ONNX importer makes them), for
 * inference: every tensor placed by the same exact plan, the graph's
 * constants, parameters and state with the values it gives (or their
 * ops' initialisation from opts->seed), and a forward on named inputs of
 * any shape and element type giving every output.  Nodes run in
 * evaluation mode unless the graph marks them AR_NN_MODE_TRAIN (then with
 * batch statistics, their running statistics updated in the net). */
typedef struct ar_net_graph_opts {
  int threads;   /* the kernels' threads (prepared for this many) */
  uint64_t seed; /* parameters without values, dropout in training mode */
} ar_net_graph_opts;
#define AR_NET_GRAPH_OPTS_INIT {1, 0}

/* Builds the net of g (which may be destroyed afterwards: what the net
 * needs is copied) and its plan; no device memory yet (ar_net_start, with
 * the device's own blocks).  AR_OK; AR_UNSUPPORTED when an op has no host
 * kernel; AR_NOMEM. */
ar_status ar_net_build_graph(const ar_nn_graph *g, const ar_net_graph_opts *opts, ar_net **out,
                             ar_err *err);
/* A trainable net of g for the job `spec` (its optimizer, schedule, seed
 * and threads): g's one input is the batch (its first dim the batch size,
 * f32, or i64 token ids), g's one output the logits (batch, classes); the
 * loss is softmax cross-entropy against class ids, and gradients reach
 * every parameter of g, also those nodes read as data inputs (summed where
 * several read one).  With spec->bce the loss is BCE (nn.h) against targets
 * (ar_net_targets) instead.  Then as ar_net_build: ar_net_x/ar_net_y, train,
 * eval, checkpoints.  spec must outlive the net; g may be destroyed.
 * AR_SPEC naming what does not fit (inputs, outputs, shapes); AR_NOMEM. */
ar_status ar_net_build_graph_train(const ar_nn_graph *g, const ar_spec *spec, ar_net **out,
                                   ar_err *err);
/* A job's ONNX model (spec->onnx, read through fs as the job's data files
 * are) imported for batches of `batch` rows and built with
 * ar_net_build_graph_train.  AR_SPEC ("FILE: error: model.onnx: ...",
 * the importer's message naming the model file, the node and the op) for
 * a model that cannot be imported or does not fit model.input; the load's
 * own statuses for the file (AR_NOTFOUND, AR_IO). */
ar_status ar_net_build_onnx(const ar_spec *spec, int64_t batch, const ar_fs *fs, ar_net **out,
                            ar_err *err);

/* One forward of a started net built by ar_net_build_graph: in[i] holds
 * the graph's input i (g->inputs[i]: its shape and element type, host
 * memory), out[i] receives output i (g->outputs[i]).  AR_OK; AR_STATE when
 * the net was not built from a graph or not started; device statuses. */
ar_status ar_net_infer(ar_net *n, const void *const *in, void *const *out, ar_err *err);

/* ---- chains lowered onto the graph engine (runtime/engine/net_lower.c) ----
 * A job file's chain (model.layers without `inputs:`, over model.input.
 * sparse) is the graph the graph engine builds when ar_spec.graph is set:
 * item 0 reads the sparse input (op sparse_dense, w (features, width) as
 * the chain's first layer; over model.input.dense the rows scattered into
 * a dense batch and op dense, as the chain's), each later item the previous one (op dense,
 * w (width, inputs) as the chain's), the last item's activation the loss
 * (xent_multi).  Parameters are named as the chain's ("LAYER.w",
 * "LAYER.b"); the optimizer's slots "LAYER.w.adam_m" / ".adam_v" /
 * ".velocity" are the chain's "LAYER.state1.w" / "LAYER.state2.w" (and .b),
 * and a lowered job's checkpoints list them in the chain's order under the
 * chain's names, so a checkpoint of either engine resumes on the other
 * (docs/graph.md, "Lowered chains"). */
typedef enum ar_chain_engine { AR_CHAIN_ENGINE_CHAIN = 0, AR_CHAIN_ENGINE_GRAPH } ar_chain_engine;
/* The engine ACCELRT_CHAIN_ENGINE asks for ("graph", the default when
 * unset or empty, or "chain", the escape hatch).  AR_INVALID naming the
 * value otherwise. */
ar_status ar_chain_engine_env(ar_chain_engine *out, ar_err *err);
/* NULL when spec is a chain the graph engine can train as the chain
 * engine does (and not already a graph model), else why not: a
 * sentence in buf (cap bytes), which is returned. */
const char *ar_chain_lower_refusal(const ar_spec *spec, char *buf, size_t cap);
/* Under engine `e`, lowers spec (and each job of a jobs: file) when it can
 * be (ar_spec.graph and .lowered set); a chain that stays on the chain
 * engine under AR_CHAIN_ENGINE_GRAPH says why once, at info level.  With
 * `notes` (accelrt check), each chain's engine line goes there instead.
 * Returns the number of jobs lowered. */
int ar_chain_route(ar_spec *spec, ar_chain_engine e, FILE *notes);
/* A lowered chain's persistent tensor `name` (the graph's name:
 * "LAYER.w.adam_m", "LAYER.lsh_last", "LAYER.w.grad") in the chain's plan:
 * its place among the chain's persistent entries (0-based; the
 * checkpoint's order, with a sampled layer's gradient rows, which are not
 * checkpointed, before its last steps) with its chain name
 * ("LAYER.state1.w", "LAYER.lsh.last", "LAYER.grad.w") in buf (cap bytes),
 * or -1, buf untouched, when the chain has no such tensor. */
int ar_chain_lowered_slot(const ar_spec *spec, const char *name, char *buf, size_t cap);
/* Whether spec's model reads XC or LibSVM rows in batches (ar_reader, the
 * net built by ar_net_build_sparse): model.input.sparse, or a lowered
 * chain's model.input.dense (its rows scattered into a dense batch as the
 * chain does). */
bool ar_spec_reads_rows(const ar_spec *spec);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_NET_H */
