/* Private to the engine: the sampled layers' hooks used by model.c. */
#ifndef ACCELRT_ENGINE_IMPL_H
#define ACCELRT_ENGINE_IMPL_H

#include "accelrt/data.h"
#include "accelrt/graph.h"
#include "accelrt/runtime.h"
#include "accelrt/lsh.h"
#include "accelrt/net.h"
#include "accelrt/tdata.h"

#include <stdio.h>

/* plan.c: bytes for messages, "1.50 GiB" (two decimals from KiB on). */
void ar__fmt_bytes(uint64_t bytes, char *buf, size_t n);

/* model.c: the address of plan entry "LAYER.WHAT" ("LAYER" when what is
 * NULL) in the model's blocks, or NULL when the plan has none. */
void *ar__plan_ptr(ar_model *m, const char *layer, const char *what);

/* The training settings a sampled layer needs (Adam, no weight decay,
 * catch_up's betas), refused at the layer's item in the job file: checked
 * when the chain's plan is made (so `accelrt check` refuses them too) and
 * when the layer is (sampled.c). */
ar_status ar__sampled_check_train(const ar_spec *spec, int l, const char *name, ar_err *err);
/* sampled.c: the lsh options of sampled layer l fed by `in` inputs, as
 * the model makes its hash family (before its seed) and tables; K 0 takes
 * the layer's sparse.K (or the automatic one). */
void ar__sampled_opts(const ar_spec *spec, int l, int64_t in, int K, ar_lsh_hash_opts *ho,
                      ar_lsh_tables_opts *to);
/* The host bytes the lsh library allocates for sampled layer l (see
 * ar__sampled_opts) with `threads` scratch sets, by piece, as the plan
 * lists them (plan.c) and the model allocates them (sampled.c);
 * shared_cap < 0: the shared path without room (a graph model's head).  AR_OK,
 * or AR_RANGE / AR_INVALID with the reason in err. */
typedef struct ar__sampled_mem {
  size_t tables;  /* the L hash tables */
  size_t hash;    /* the hash functions */
  size_t scratch; /* per thread: hashing and sampling scratch, bucket ids */
  size_t touched; /* the rows touched in a step and since the last build */
  size_t ids;     /* positions among the shared negatives; all ids for
                     scoring every neuron of a layer fed by the sparse input */
} ar__sampled_mem;
ar_status ar__sampled_bytes(const ar_spec *spec, int l, int64_t in, int K, int threads,
                            int64_t shared_cap, ar__sampled_mem *out, ar_err *err);

/* One LSH-sampled layer, whichever engine holds it (the chain model's
 * layers, a graph model's sampled head, net_run.c): its hash tables,
 * sampling, sparse Adam and rebuild schedule.  The engine owns the rows
 * and the planned buffers; ar_sampled points into them. */
typedef struct ar__sampled_ptrs {
  float *w, *b, *gw, *gb;   /* (neurons, in), (neurons): rows and gradient rows
                               (the gradients persist: zeroed row by row by
                               the sparse Adam step) */
  uint32_t *active, *n_active; /* (batch, cap), (batch) */
  float *out, *dout;        /* (batch, cap) */
  uint32_t *sids;           /* the shared negatives (NULL without room):
                               (scap) ids, */
  float *sw, *sgw, *sb, *sgb, *sz; /* (scap, in) rows and gradients, (scap)
                                      biases and gradients, (batch, scap) */
} ar__sampled_ptrs;
typedef struct ar__sampled_cfg {
  const ar_spec *spec; /* borrowed while the layer lives: spec->layers[l] */
  int l;               /* settings (sparse:) and seeds */
  const char *name;    /* borrowed */
  ar_device *dev;      /* borrowed */
  int64_t in, neurons, max_labels;
  int64_t step;        /* iterations done (the rebuild schedule's point) */
  bool shared;         /* runs the shared path even without shared room */
  bool all_ids;        /* keeps 0..neurons-1 (scoring from a sparse input) */
  ar__sampled_ptrs ptrs;
  float *s1w, *s2w, *s1b, *s2b; /* Adam's moments, shapes of w and b */
  uint64_t *last;      /* (neurons) each row's last update step */
} ar__sampled_cfg;
/* Makes the layer (*out, to ar__sampled_destroy even on failure) with
 * empty tables; ar__sampled_reset builds them.  Only Adam without weight
 * decay trains it (AR_UNSUPPORTED otherwise, with what to change). */
ar_status ar__sampled_new(const ar__sampled_cfg *c, ar_sampled **out, ar_err *err);
/* The engine's blocks moved. */
void ar__sampled_set_mem(ar_sampled *s, const ar__sampled_ptrs *p);
/* Hash functions and tables for the rows as they are at `step` (a new
 * model or one resumed from a checkpoint: tables are never stored). */
ar_status ar__sampled_reset(ar_sampled *s, int64_t step, ar_trace *trace, ar_err *err);
/* One batch as an output layer with a dense input sees it. */
typedef struct ar__sbatch {
  int64_t rows;
  float inv_rows;         /* the loss is a mean over 1 / inv_rows rows */
  const float *X;         /* (rows, in) */
  float *dX;              /* (rows, in) written by backward, or NULL */
  const int32_t *lab;     /* labels of row r: lab[lab_ptr[r] .. lab_ptr[r+1]) */
  const int64_t *lab_ptr; /* (rows + 1) */
  int64_t step;           /* iterations done: the shared negatives' stream */
  float *row_loss;        /* (rows) each row's loss, or NULL */
  /* A hidden layer reading the sparse input instead of X (a lowered
   * chain's first layer): row r's features idx/val[row_ptr[r] ..
   * row_ptr[r+1]); NULL otherwise. */
  const int64_t *row_ptr;
  const int32_t *idx;
  const float *val;
  /* A hidden layer reading another sampled layer's active set instead of
   * X (a lowered chain's sampled layer after a sampled layer, as the
   * chain's input_of): row r's ids and values in from's buffers; backward
   * writes their gradient into from's dout rows, as the chain does, and
   * scatters it into dX at the ids.  NULL otherwise. */
  ar_sampled *from;
} ar__sbatch;
/* The sampled softmax output layer (SLIDE with the batch's shared
 * negatives, sampled.c): forward and loss (*loss_sum, summed over rows),
 * then backward into the touched gradient rows and dX; then the sparse
 * Adam step on the touched rows (step: iterations done, this one counted)
 * and the rebuild schedule. */
ar_status ar__sampled_head_forward(ar_sampled *s, const ar__sbatch *b, double *loss_sum,
                                   ar_err *err);
ar_status ar__sampled_head_backward(ar_sampled *s, const ar__sbatch *b, ar_err *err);
/* The output layer reading a sampled layer's active set or the sparse
 * rows (b->from, b->row_ptr): the chain's per-row scoring there
 * (sampled_forward: the labels, the retrieved ids and the row's top-up
 * from the batch's stream, no shared negatives), its loss and the active
 * outputs' gradients; backward is ar__sampled_hidden_backward's with no
 * dY and no activation. */
ar_status ar__sampled_head_rows_forward(ar_sampled *s, const ar__sbatch *b, double *loss_sum,
                                        ar_err *err);
/* A graph model's hidden sampled layer on a dense batch (b->X, b->dX;
 * labels unused): forward into Y (rows, neurons), each row's active
 * neurons (relu or identity) and zeros elsewhere, the chain's draws; then
 * backward from dY (rows, neurons; NULL: the active outputs' gradients
 * are in place, an output layer's) into the touched gradient rows and dX. */
ar_status ar__sampled_hidden_forward(ar_sampled *s, const ar__sbatch *b, bool relu, float *Y,
                                     ar_err *err);
ar_status ar__sampled_hidden_backward(ar_sampled *s, const ar__sbatch *b, bool relu,
                                      const float *dY, ar_err *err);
/* Every neuron of a hidden layer reading the sparse input (b->row_ptr; a
 * layer made with all_ids) into Y (rows, neurons): the chain's evaluation
 * of it (sampled_full), the sampled kernels with every id active. */
ar_status ar__sampled_hidden_full(ar_sampled *s, const ar__sbatch *b, bool relu, float *Y,
                                  ar_err *err);
ar_status ar__sampled_step(ar_sampled *s, int64_t step, ar_err *err);
/* Row r's active ids of the last forward and their outputs (logits for
 * an output layer); their count.  For tests. */
size_t ar__sampled_row(const ar_sampled *s, int64_t r, const uint32_t **ids, const float **out);
/* The rows whose gradients the last batches touched (not yet stepped), a
 * row marked touched, those rows' gradients zeroed and the set cleared (a
 * distributed worker, which does not step), and rows whose parameters
 * changed elsewhere (ids NULL: every row) for the next table rebuild. */
const uint32_t *ar__sampled_grad_rows(const ar_sampled *s, size_t *n);
void ar__sampled_grad_rows_mark(ar_sampled *s, uint32_t id);
void ar__sampled_grad_rows_clear(ar_sampled *s);
void ar__sampled_rows_changed(ar_sampled *s, const uint32_t *ids, size_t n);
ar_status ar__sampled_rehash(ar_sampled *s, int64_t step, ar_trace *trace, ar_err *err);

/* The layer's statistics since the start (or the last reset of them). */
void ar__sampled_stats(const ar_sampled *s, ar_sampled_stats *out);
/* net_sampled.c: a started graph model's sampled head, its statistics into
 * *out; its node's name (borrowed), or NULL without one. */
const char *ar__net_head_stats(const ar_net *n, ar_sampled_stats *out);
/* net_sampled_hidden.c: the same for its hidden sampled item i (in the
 * model's order), NULL past the last started one. */
const char *ar__net_hid_stats(const ar_net *n, int i, ar_sampled_stats *out);

ar_status ar__sampled_create(ar_model *m, int l); /* after the layers exist */
ar_status ar__sampled_init(ar_model *m);          /* after init_params */
void ar__sampled_bind(ar_model *m);               /* after a (re)bind */
void ar__sampled_destroy(ar_sampled *s);
ar_status ar__model_forward_eval(ar_model *m);    /* every neuron scored */
ar_status ar__sampled_full(ar_model *m, int l);   /* layer l, every neuron scored */

/* model.c: adds the hits of one row's top k (k <= 5) ids among its nl
 * labels to the P@1/3/5 counts. */
void ar__count_hits(ar_eval_acc *acc, const int32_t *top, int k, const int32_t *lab,
                    int64_t nl);

/* job_data.c: whether the stamp file a generator wrote at `path` (never
 * through a link) says exactly `stamp`, i.e. the data beside it was made
 * with these parameters and can be reused. */
bool ar__stamp_matches(const ar_fs *fs, const char *path, const char *stamp);

/* job_data.c: how a job opens its data files (the test split in file
 * order, a generated file without following links). */
ar_reader_opts ar__job_reader_opts(const ar_spec *s, const ar_run_opts *o, bool test);

/* lsh_infer.c: inference tables over the output layer of a sampled model
 * (see there).  choose: measures settings on training points from
 * `train` and returns the chosen tables in *ix, what it chose and tried
 * in out; recall: the chosen tables' recall on up to max_points of r;
 * eval_batch: P@k of b by the candidates; scored: candidates scored per
 * point since the last reset. */
typedef struct ar_lsh_index ar_lsh_index;
ar_status ar__lsh_infer_choose(ar_model *m, ar_reader *train, const ar_eval_opts *o,
                               ar_eval_report *out, ar_lsh_index **ix, ar_err *err);
ar_status ar__lsh_infer_recall(ar_model *m, ar_lsh_index *ix, ar_reader *r, ar_batch *b,
                               int64_t max_points, ar_eval_report *out, ar_err *err);
ar_status ar__lsh_index_eval_batch(ar_model *m, ar_lsh_index *ix, const ar_batch *b,
                                   ar_eval_acc *acc);
double ar__lsh_index_scored(ar_lsh_index *ix, bool reset);
void ar__lsh_index_destroy(ar_lsh_index *ix);

/* eval.c: one pass over r, at most max_points rows (0: all), through b,
 * scoring every neuron or (ix) the output layer's candidates from the
 * inference tables; *seconds is the scoring time.  P@k in percent of
 * acc's rows (-1 when none), k = 1, 3, 5 for i = 0, 1, 2. */
ar_status ar__eval_pass(ar_model *m, ar_reader *r, ar_batch *b, int64_t max_points,
                        ar_lsh_index *ix, ar_eval_acc *acc, double *seconds, ar_err *err);
double ar__p_at(const ar_eval_acc *a, int i);

/* train.c: the job (include/accelrt/runtime.h), shared with net_job.c. */
struct ar_job {
  const ar_spec *spec; /* borrowed: the data it reads, its outputs */
  ar_spec mspec;       /* *spec with train.batch = the rows the model holds */
  ar_run_opts opts;
  ar_job_opts jo;
  ar_job_hooks hooks;  /* jo.hooks' copy (all NULL: none) */
  ar_device *dev;      /* borrowed */
  ar_model *model;
  ar_reader *train, *test;
  ar_batch batch;      /* a global batch as read; evaluation batches */
  ar_batch part;       /* parts > 1: this part's rows of it */
  int64_t max_nnz, max_labels;
  ar_plan plan; /* computed at open, before the model exists */
  FILE *metrics;
  ar_progress *progress;
  ar_ckpt_state st;
  double train_cpu_s; /* this process's CPU seconds (all threads) in ar_job_step */
  char *ckpt_path, *metrics_path, *summary_path, *data_storage;
  double loss_window;
  int64_t loss_window_n;
  double last_train_loss;
  double last_iter_loss; /* the last iteration's mean loss (ar_job_last_loss) */
  double last_loss_sum; /* the rows this job computed in its last step */
  int64_t last_rows;    /* their count (ar_job_last_rows) */
  ar_eval_acc last_eval;
  int64_t last_eval_iter;
  int64_t total; /* iterations the job runs */
  double wall0;
  bool started;
  ar_err *err; /* the caller's, for the call at hand */
  /* A graph model (spec->graph; net_job.c): */
  ar_net *net;
  ar_tdata *ttrain, *ttest;
  int64_t *order;       /* this epoch's order of the training examples */
  int64_t order_epoch;  /* the epoch `order` is for (-1: none yet) */
  float *mean, *std;    /* per channel: images are normalised (NULL: not) */
  double last_lr;
  int64_t eval_max;     /* accelrt eval's --points (0: train.eval_points) */
  int64_t *eval_idx;    /* (train.batch) an evaluation batch's examples */
  /* The timeline (jo.trace, borrowed; NULL: none). */
  ar_trace *trace;
  bool sync_layers; /* wait for each layer in detailed iterations (a GPU) */
};
typedef struct ar_job run_ctx;

/* train.c: rows [lo, hi) of src copied into dst (a part's rows of a
 * global batch). */
void ar__job_slice_batch(const ar_batch *src, int64_t lo, int64_t hi, ar_batch *dst);

/* net_job.c: a graph model's part of the job's life cycle. */
ar_status ar__netjob_open_data(run_ctx *c);
ar_status ar__netjob_fit(run_ctx *c, ar_device *dev, const void *persistent);
ar_status ar__netjob_start(run_ctx *c, ar_device *dev, void *persistent, void *ephemeral);
ar_status ar__netjob_step(run_ctx *c);
/* Stages the first batch of the test split (the training split when the
 * job has none) as evaluation sees it (accelrt export's test data). */
void ar__netjob_stage_first(run_ctx *c);
ar_status ar__netjob_eval(run_ctx *c, ar_eval_acc *acc);
ar_status ar__netjob_save(run_ctx *c);
ar_status ar__netjob_load(run_ctx *c);
void ar__netjob_close(run_ctx *c);
/* train.c: the next global batch of the training reader into c->batch, a
 * new epoch when the data ran out (c->st's epoch and position follow). */
ar_status ar__job_read_batch(run_ctx *c);
/* net_job.c: c->plan, a copy of the net's. */
ar_status ar__netjob_copy_plan(run_ctx *c);
/* net_job_sparse.c: the same for a graph model over sparse input (the
 * chain's readers and batches; net_job.c's functions call these). */
ar_status ar__netjob_open_sparse(run_ctx *c);
/* The reader at c->st's position (resumed), or at the start. */
ar_status ar__netjob_seek_sparse(run_ctx *c, bool resumed);
ar_status ar__netjob_step_sparse(run_ctx *c);
ar_status ar__netjob_eval_sparse(run_ctx *c, ar_eval_acc *acc);
void ar__netjob_close_sparse(run_ctx *c);
/* export_chain.c: the inference graph of chain model m for batches of
 * `batch` rows (its parameters when values, else zeros).  *out: the
 * caller's (ar_nn_graph_destroy).  AR_NOMEM; device statuses. */
ar_status ar__chain_graph(const ar_model *m, int64_t batch, bool values, ar_nn_graph **out,
                          ar_err *err);
/* A context of its own (accelrt eval, export) closed: the net, the device
 * it opened, the plan, the data and checkpoint paths, c itself. */
void ar__netjob_free(run_ctx *c);
/* The device a job opens: spec->device, but `auto` is the host for a
 * graph model (its ops run there in this version). */
const char *ar__job_device_name(const ar_spec *spec);
/* accelrt eval of a graph model (ar_eval_checkpoint). */
ar_status ar__netjob_eval_checkpoint(const ar_spec *spec, const char *ckpt, int64_t max_points,
                                     int reps, ar_eval_report *out, ar_err *err);

/* A checkpoint tensor's element type and shape (format version 2,
 * docs/checkpoint.md).  The tensor still occupies `count` floats' bytes of
 * device memory: a u64 tensor of n elements is 2n floats. */
#define AR__CKPT_MAX_DIMS 8
enum { AR__CKPT_F32 = 0, AR__CKPT_U64 = 1 };
typedef struct ar__ckpt_shape {
  int dtype; /* AR__CKPT_* */
  int nd;    /* 0 (a scalar) .. AR__CKPT_MAX_DIMS */
  int64_t d[AR__CKPT_MAX_DIMS];
} ar__ckpt_shape;
/* model.c: the shapes of ar_model_tensors' tensors, in its order (at most
 * max). */
void ar__model_tensor_shapes(const ar_model *m, ar__ckpt_shape *shapes, int max);

/* checkpoint.c: the format over any list of tensors (graph models,
 * runtime/engine/net*.c), on dev. */
typedef struct ar__ckpt_tensors {
  ar_device *dev;
  int n;
  const char **names;
  float **ptrs;
  int64_t *counts;              /* floats of device memory */
  const ar__ckpt_shape *shapes; /* (n) */
} ar__ckpt_tensors;
ar_status ar__checkpoint_save_tensors(const ar__ckpt_tensors *t, int64_t step,
                                      const ar_ckpt_state *st, const ar_fs *fs,
                                      const char *path, ar_err *err);
ar_status ar__checkpoint_load_tensors(const ar__ckpt_tensors *t, int64_t *step,
                                      ar_ckpt_state *st, const ar_fs *fs, const char *path,
                                      ar_err *err);
/* net_lower.c: a lowered chain's list (ar_spec.lowered) in the chain's
 * order and under its names (ar_model_tensors'), replacing t's arrays. */
ar_status ar__lower_ckpt_list(const ar_spec *s, ar__ckpt_tensors *t, ar_err *err);

#endif
