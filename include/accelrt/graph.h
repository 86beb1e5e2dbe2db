/*
 * accelrt graph: the model a job trains (a chain of layers with named
 * parameter tensors), its exact memory plan, and one training iteration
 * split into steps (load batch, forward, loss, backward, optimizer step)
 * that run through the device abstraction.
 *
 * The memory plan is computed from shapes alone (the layer widths, the
 * batch size and the largest row of the data) and it is also what the model
 * allocates: one persistent block (parameters, optimizer state) and one
 * ephemeral block (everything one iteration needs), each carved by the
 * plan's offsets, and the host entries (a sampled layer's hash tables,
 * hash functions and scratch, whose sizes the lsh library computes before
 * it allocates them).  So the plan is exact by construction, and after
 * ar_model_create nothing is allocated again but the working memory of a
 * table rebuild: the training loop is allocation-free.  The lanes module
 * admits jobs on these numbers (host bytes with the persistent ones).
 *
 * Parameter layouts (row-major):
 *   layer fed by the sparse input: w (in, out) — one row per input
 *     feature, so a sparse row gathers whole rows (as an embedding bag);
 *   every other layer: w (out, in) — one row per neuron (as PyTorch's
 *     Linear and as the LSH module hashes neurons).
 *
 * Tests: tests/engine/test_gradcheck.c (finite differences for every layer
 * and loss), tests/engine/test_plan.c.
 */
#ifndef ACCELRT_GRAPH_H
#define ACCELRT_GRAPH_H

#include "accelrt/base.h"
#include "accelrt/data.h"
#include "accelrt/device.h"
#include "accelrt/spec.h"
#include "accelrt/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Persistent and ephemeral tensors live in the model's two device blocks;
 * host entries are what the model keeps on the host outside them, each its
 * own allocation made with the model and held until it is destroyed (a
 * sampled layer's hash tables, hash functions and scratch, which the lsh
 * library allocates; a dense batch's staging copy). */
typedef enum ar_mem_class {
  AR_MEM_PERSISTENT = 0,
  AR_MEM_EPHEMERAL = 1,
  AR_MEM_HOST = 2
} ar_mem_class;
/* "persistent", "ephemeral", "host". */
const char *ar_mem_class_name(ar_mem_class c);

/* One tensor of the plan. */
typedef struct ar_plan_entry {
  char name[64];    /* "out.w", "hidden.adam_m", "batch.idx", ... */
  ar_mem_class cls;
  size_t bytes;     /* exact size */
  size_t offset;    /* within its class's block, 64-byte aligned (host:
                       the bytes of the host entries before it) */
  int64_t first_use, last_use; /* ephemeral: steps of the iteration it lives
                                  between (see plan.c); persistent: 0, max */
  bool zero_between; /* persistent, but all zero between iterations (a
                        sampled layer's gradient rows): not checkpointed */
} ar_plan_entry;

typedef struct ar_plan {
  int count;
  ar_plan_entry *entries; /* (count) */
  size_t persistent_bytes; /* parameters + optimizer state */
  size_t ephemeral_bytes;  /* peak of one iteration: batch, activations,
                              gradients, loss scratch, placed by their
                              lifetimes (tensors never live together
                              share bytes) */
  size_t ephemeral_sum_bytes; /* the same without sharing */
  size_t host_bytes;       /* the host entries, summed (held as long as
                              the model) */
  size_t total_bytes;      /* persistent + ephemeral + host: what the job
                              holds, the figure admission and the device
                              limit compare (ar_plan_fit) */
  size_t param_count;      /* trainable scalars */
} ar_plan;

/* Computes the plan for `spec` with input rows of at most max_nnz features
 * and max_labels labels.  Every byte count is checked: sizes that leave
 * size_t are AR_RANGE with the tensor and what to lower in err (may be
 * NULL); AR_NOMEM.  *out is empty on failure.  Free with ar_plan_fini. */
ar_status ar_plan_compute(const ar_spec *spec, int64_t max_nnz,
                          int64_t max_labels, ar_plan *out, ar_err *err);
/* As ar_plan_compute for a device of the given kind (host: true), which
 * decides whether `sparse: {mode: auto}` layers are sampled;
 * ar_plan_compute takes the kind from spec->device (auto: host when no
 * CUDA device is present). */
ar_status ar_plan_compute_on(const ar_spec *spec, int64_t max_nnz, int64_t max_labels,
                             bool host, ar_plan *out, ar_err *err);
/* The threads the plan sizes per-thread scratch for (a sampled layer's):
 * train.threads, or the machine's cores when 0 (ar_job_device_opts opens
 * the device with as many). */
int ar_plan_threads(const ar_spec *spec);
/* Whether spec->device resolves to the host (auto probes for CUDA). */
bool ar_spec_runs_on_host(const ar_spec *spec);
/* Whether layer l runs LSH-sampled on a device of this kind: mode lsh on
 * a host; mode auto on a host when the layer is at least
 * sparse.auto_min_width wide; never on a GPU (the same job file runs
 * dense there). */
bool ar_layer_sampled(const ar_spec *spec, int l, bool host);
/* Neurons a sampled layer retrieves per input: ceil(active * width),
 * within [min_active, max_active] and at most the width. */
int64_t ar_layer_budget(const ar_spec *spec, int l);
/* Room for the batch's shared random negatives of a sampled output layer
 * with a dense input (computed by GEMM, runtime/engine/sampled.c): the
 * top-up target (min_active, default the budget), or the whole width when
 * that is half of it or more; 0 when the layer does not take that path. */
int64_t ar_layer_shared_cap(const ar_spec *spec, int l, int64_t max_labels);
/* Uniform random negatives such a layer's batch draws whatever the tables
 * retrieve (sparse.negatives or its default, at most the width: on a graph
 * model's head the budget, at least AR_SPARSE_MIN_NEGATIVES or an eighth
 * of the width; 0 on a chain's layer); 0 when the layer does not take that
 * path. */
int64_t ar_layer_negatives(const ar_spec *spec, int l);
/* A sampled layer asks its sparse Adam to catch up the steps a row missed
 * (sparse.catch_up > 0, ar_lsh_adam_opts) under betas where dense Adam's
 * moves on them would not shrink (beta1 >= sqrt(beta2)): refused. */
bool ar_layer_catch_up_refused(const ar_spec *spec, int l);
/* The default's floor (or an eighth of the width, below 2,048 neurons):
 * the loss's estimate of the softmax's normaliser needs some hundreds of
 * draws whatever the width. */
#define AR_SPARSE_MIN_NEGATIVES 256
/* Room per sample for active ids: the budget, plus max_labels for the
 * output layer (its true labels are always active in training). */
int64_t ar_layer_active_cap(const ar_spec *spec, int l, int64_t max_labels);
void ar_plan_fini(ar_plan *plan);
/* Adds bytes held as long as the job but outside the model (a graph job's
 * datasets, ar_job_data_bytes) to the plan's host and total bytes. */
void ar_plan_add_host(ar_plan *plan, size_t bytes);

/* The memory a job may take on its device (runtime/engine/fit.c). */
typedef struct ar_mem_limit {
  bool on_host;            /* the device is the host: all of the plan is
                              host memory */
  uint64_t host;           /* host: the lower of MemAvailable and the
                              process's cgroup limit; 0 unknown */
  char host_source[1200];  /* where it came from */
  uint64_t device;         /* a GPU: what its arena has left (or its free
                              memory); without a device handle,
                              runtime.memory in bytes; 0 unknown */
  char device_source[160];
} ar_mem_limit;
/* The limits for spec's device: dev's (may be NULL: then from spec alone,
 * as `accelrt check` does without opening a GPU).  A figure the device or
 * the host cannot tell stays 0 (unknown). */
void ar_mem_limit_get(const ar_spec *spec, ar_device *dev, ar_mem_limit *out);
/* AR_OK when the plan fits (an unknown limit is not checked); AR_NOMEM
 * when it does not, with the plan's bytes by part, the limit and where it
 * came from, and what to lower (from the largest tensor) in err.  On the
 * host the plan's total counts; on a GPU the two blocks against the
 * device and the host entries against the host. */
ar_status ar_plan_fit(const ar_plan *plan, const ar_spec *spec, const ar_mem_limit *lim,
                      ar_err *err);
/* Prints the model summary and the plan (used by `accelrt check`). */
void ar_plan_print(const ar_plan *plan, const ar_spec *spec, FILE *to);
/* Prints the plan alone, as ar_plan_print does after the summary: one line
 * per entry ("  CLASS NAME BYTES B  (HUMAN)", in the entries' order), then
 * the `persistent bytes:`, `ephemeral peak bytes:`, `host bytes:` and
 * `total:` lines that tools read (tests/python/test_readers.py,
 * tests/tenancy/metrics.sh; docs/graph.md, "Lowered chains"). */
void ar_plan_print_memory(const ar_plan *plan, int batch, FILE *to);

/* A sampled layer's hash tables, scratch and statistics (engine-private). */
typedef struct ar_sampled ar_sampled;

typedef struct ar_layer {
  const char *name; /* borrowed from the spec */
  int64_t in, out;
  ar_act act;
  bool sparse_in; /* fed by the sparse input: w is (in, out) */
  float *w;       /* sparse_in: (in, out); else (out, in) */
  float *b;       /* (out) */
  float *gw, *gb; /* gradients, shapes of w and b (ephemeral) */
  float *s1w, *s1b; /* adam first moment / sgd velocity (persistent) */
  float *s2w, *s2b; /* adam second moment (persistent) */
  float *y;  /* (batch, out) activated output; the last layer holds the
                logits, then the loss gradient */
  float *dy; /* (batch, out) gradient wrt y; hidden layers only */
  ar_sampled *smp; /* non-NULL: LSH-sampled on this device (w is (out, in)) */
} ar_layer;

typedef struct ar_model {
  ar_device *dev;       /* borrowed */
  const ar_spec *spec;  /* borrowed */
  int n_layers;
  ar_layer *layers;     /* (n_layers) */
  int64_t batch, max_nnz, max_labels;
  int64_t rows;         /* rows of the batch loaded now */
  int64_t grad_rows;    /* the training loss's gradient is its sum over the
                           loaded rows divided by this (0: by rows, the
                           mean); a distributed worker sets the global
                           batch's rows so that the workers' gradients sum
                           to the mean over the whole batch */
  /* Device copy of the batch. */
  int64_t *row_ptr;     /* (batch + 1) */
  int32_t *idx;         /* (batch * max_nnz) */
  float *val;           /* (batch * max_nnz) */
  int64_t *lab_ptr;     /* (batch + 1) */
  int32_t *lab;         /* (batch * max_labels) */
  float *x;             /* (batch, in) dense input; NULL for sparse input */
  float *loss_rows;     /* (batch) */
  int32_t *topk;        /* (batch, 5) */
  int64_t step;         /* optimizer steps taken (Adam's t) */
  ar_plan plan;
  void *persistent;     /* the two blocks carved by the plan */
  void *ephemeral;
  float *host_scratch;  /* (batch * in) host staging for dense input; else NULL */
  bool blocks_given;    /* the two blocks belong to the caller (lanes) */
  int n_sampled;        /* layers running LSH-sampled */
  ar_status loss_status; /* not AR_OK: ar_model_loss could not read the
                            loss (device error in err); it returned NaN */
  ar_err err;
  ar_trace *trace;      /* borrowed, NULL: none; the sampled layers' table
                           builds go there (AR_TRACE_LSH, trace.h) */
} ar_model;

/* Allocates the model on `dev` as planned and initialises the parameters
 * from spec->seed (He for relu layers, Xavier otherwise, or as
 * train.init says); optimizer state zero.  The spec and device must
 * outlive the model.  AR_NOMEM / device statuses with the reason in err. */
ar_status ar_model_create(ar_device *dev, const ar_spec *spec, int64_t max_nnz,
                          int64_t max_labels, ar_model **out, ar_err *err);
/* As ar_model_create, in caller-owned device blocks of the plan's sizes
 * (persistent NULL: allocate them as ar_model_create does). */
ar_status ar_model_create_in(ar_device *dev, const ar_spec *spec, int64_t max_nnz,
                             int64_t max_labels, void *persistent, void *ephemeral,
                             ar_model **out, ar_err *err);
/* Points the model at moved blocks (either NULL: unchanged); the caller
 * moved the persistent bytes.  Between iterations only. */
void ar_model_rebase(ar_model *m, void *persistent, void *ephemeral);
void ar_model_destroy(ar_model *m); /* NULL is a no-op */

/* Copies a host batch to the device.  AR_RANGE when the batch exceeds the
 * planned shape. */
ar_status ar_model_load(ar_model *m, const ar_batch *b);
/* Per-layer pieces of forward, backward and step, in the order the whole-
 * model calls use them (forward 0..n-1, backward n-1..0); for callers that
 * interleave them with communication (runtime/dist).  step_layer uses
 * m->step as Adam's t: advance it (ar_model_advance_step) once per
 * iteration before the layers. */
void ar_model_forward_layer(ar_model *m, int l);
void ar_model_backward_layer(ar_model *m, int l);
void ar_model_step_layer(ar_model *m, int l);
/* Forward pass over the loaded rows; the last layer's y holds logits. */
void ar_model_forward(ar_model *m);
/* Loss of the loaded rows (mean over rows, as in training).  With want_grad
 * the logits are replaced by the gradient of that mean loss. */
float ar_model_loss(ar_model *m, bool want_grad);
/* Back-propagates the gradient left by ar_model_loss(m, true) into every
 * layer's gw/gb. */
void ar_model_backward(ar_model *m);
/* Applies the optimizer to every parameter and increments m->step. */
void ar_model_step(ar_model *m);
/* The optimizer's step count m->step (Adam's t; it also numbers the
 * sampled layers' random streams and their rebuild schedule) belongs to
 * the engine; other modules read it and change it only through these.
 * advance_step: one more step, for callers that step a layer at a time
 * (ar_model_step_layer: runtime/dist, `accelrt simulate`), once per
 * iteration before the layers.  set_step: the count a resumed run's
 * checkpoint holds (step >= 0, AR_ASSERT).  Between iterations only; not
 * thread-safe, as every call on the model. */
void ar_model_advance_step(ar_model *m);
void ar_model_set_step(ar_model *m, int64_t step);
/* One whole training iteration on a host batch; returns the batch loss. */
ar_status ar_model_train_batch(ar_model *m, const ar_batch *b, float *loss_out);

/* Evaluation counters for P@k, k = 1, 3, 5. */
typedef struct ar_eval_acc {
  double loss_sum;
  double hits[3]; /* correct labels among the top 1, 3, 5 */
  int64_t rows;
} ar_eval_acc;
/* Scores the loaded rows (forward, loss, top-5) and adds them to acc;
 * `b` is the host copy of the same batch (for the labels). */
ar_status ar_model_eval_batch(ar_model *m, const ar_batch *b, ar_eval_acc *acc);

/* ---- LSH-sampled layers (runtime/engine/sampled.c) ----
 * ar_model_train_batch runs sampled layers per sample (SLIDE); evaluation
 * (ar_model_eval_batch) scores every neuron, so P@k is exact and
 * comparable with the dense path. */

/* Rebuilds every sampled layer's hash tables from the current weights
 * and replays the rebuild schedule to m->step (after loading a
 * checkpoint). */
ar_status ar_model_sampled_rebuild(ar_model *m);

/* One training iteration a layer at a time, for callers that interleave
 * it with communication (runtime/dist): as ar_model_train_batch does,
 * sampled layers per sample (SLIDE), dense layers through the device.
 * forward_layer in layer order after ar_model_load; an output layer that
 * is sampled computes its loss and gradient there and sets *loss_sum
 * (may be NULL) to the summed row losses; otherwise call ar_model_loss
 * with want_grad after the last layer.  backward_layer in reverse order.
 * AR_OK or a status with the reason in m->err. */
ar_status ar_model_train_forward_layer(ar_model *m, int l, double *loss_sum);
ar_status ar_model_train_backward_layer(ar_model *m, int l);
/* A sampled layer's gradient rows (l must be sampled; AR_ASSERT): the
 * rows the batch touched, i.e. every active id (borrowed, valid until the
 * next mark or clear; any order).  Their gw rows and gb entries hold the
 * gradient; every other row is zero. */
const uint32_t *ar_model_grad_rows(const ar_model *m, int l, size_t *n);
/* Marks row id as touched (a parameter server adding workers' rows). */
void ar_model_grad_rows_mark(ar_model *m, int l, uint32_t id);
/* Zeroes the touched gradient rows and unmarks them (a worker, once it
 * has sent them, instead of stepping). */
void ar_model_grad_rows_clear(ar_model *m, int l);
/* Notes that rows ids[0..n) of sampled layer l's weights changed (NULL:
 * all), so the next table rebuild re-hashes them (a worker whose replica
 * received new rows). */
void ar_model_rows_changed(ar_model *m, int l, const uint32_t *ids, size_t n);
/* Sparse Adam over the touched rows with t = m->step (the caller
 * advances it once per iteration first), clearing them; no table
 * rebuild.  AR_OK or AR_INVALID. */
ar_status ar_model_sampled_step(ar_model *m, int l);
/* The table rebuild SLIDE's schedule asks for at step m->step, once per
 * step (a second call at the same step does nothing). */
ar_status ar_model_sampled_rehash(ar_model *m, int l);

/* The bits per hash code of sampled layer l's tables (its K), and a way
 * to rebuild them from the current weights with another K (new hash
 * functions, new tables; accelrt eval picks K for inference with it).
 * AR_OK or a status with the reason in m->err. */
int ar_model_sampled_K(const ar_model *m, int l);
ar_status ar_model_sampled_set_K(ar_model *m, int l, int K);

/* What a sampled layer did since the last reset. */
typedef struct ar_sampled_stats {
  double query_s;    /* hashing the inputs and retrieving active sets
                        (CPU seconds: summed over threads) */
  double compute_s;  /* forward and backward over the active sets (CPU s) */
  double update_s;   /* sparse Adam over the touched rows (wall s) */
  double rehash_s;   /* table rebuilds during training (wall s) */
  double first_build_s; /* the build before training (or after a resume) */
  int64_t rehashes;   /* rebuilds during training */
  int64_t reinserted;  /* rows re-hashed in place instead of full rebuilds */
  int64_t active_sum;  /* active neurons summed over samples */
  int64_t samples;
  int64_t touched_sum; /* rows updated, summed over steps */
  int64_t steps;       /* sparse Adam steps those rows were summed over */
  size_t tables_bytes; /* hash tables now (not reset) */
} ar_sampled_stats;
void ar_model_sampled_stats(const ar_model *m, int l, ar_sampled_stats *out);
void ar_model_sampled_stats_reset(ar_model *m);

/* The model's parameters and optimizer state as named tensors, in a fixed
 * order, for checkpoints: tensor i is `count` floats at `ptr` (device
 * memory); entries marked zero_between are left out.  Returns the number
 * of tensors. */
int ar_model_tensors(const ar_model *m, const char **names, float **ptrs,
                     int64_t *counts, int max);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_GRAPH_H */
