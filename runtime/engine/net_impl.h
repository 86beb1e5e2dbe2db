/* Private to the graph engine (runtime/engine/net*.c). */
#ifndef ACCELRT_NET_IMPL_H
#define ACCELRT_NET_IMPL_H

#include "accelrt/net.h"
#include "accelrt/runtime.h"

/* T_CONST: fixed values of a graph built by a program (net_graph.c),
 * persistent and never trained. */
/* T_SGRAD: a sampled head's gradient rows, persistent (zeroed row by row
 * by its sparse Adam); T_SAMP: its per-batch buffers, live from its
 * forward to its backward. */
/* T_SHAPE: a node input that gives the node its shape and holds nothing:
 * no bytes, no plan entry, bound to NULL (a lowered chain's batch.x under
 * a sampled first layer, which reads the CSR rows instead). */
enum { T_INPUT = 0, T_ACT, T_AUX, T_PARAM, T_STATE, T_GRAD, T_OPT, T_WORK, T_CONST, T_SGRAD,
       T_SAMP, T_SHAPE };

/* A sparse input's batch (tensors, net_sparse_in.c), in this order: the
 * features' CSR (row_ptr, idx, val) and the labels' (lab_ptr, lab). */
enum { SX_PTR = 0, SX_IDX, SX_VAL, SX_LPTR, SX_LAB, SX_COUNT };

/* A sampled head's buffers (tensors), in this order. */
enum { HS_ACTIVE = 0, HS_N, HS_OUT, HS_DOUT, HS_SIDS, HS_SW, HS_SGW, HS_SB, HS_SGB, HS_SZ,
       HS_LAB, HS_LABPTR, HS_ZB, HS_ZGB, HS_ZM1, HS_ZM2, HS_COUNT };

typedef struct ntensor {
  char name[200];
  ar_shape shape;
  ar_dtype dtype;
  int kind;         /* T_* */
  int producer;     /* node, or -1 */
  bool needs_grad;  /* activations: something upstream trains */
  int grad;         /* its gradient tensor, or -1 */
  int opt1, opt2;   /* parameters: optimizer state (-1: none) */
  ar_nn_init init;  /* parameters and state */
  float std;
  bool decay, relu; /* parameters: weight decay applies; its node is relu */
  bool sparse;      /* parameters: an embedding table stepped by rows
                       (net_sparse_grad.c) */
  int seed_index;   /* its index when made: its initial values' stream
                       (kept when the fusion pass renumbers tensors, so
                       fused and unfused graphs start alike) */
  size_t bytes, offset;
  ar_mem_class cls;
  int64_t first, last; /* ephemeral: steps it lives between */
  void *p;          /* bound address */
  void *init_data;  /* initial values given by the graph's builder (owned;
                       freed once start has copied them), or NULL */
  bool keep;        /* read after the iteration (a graph's output) */
  bool tr;          /* 2-D, held (d0, d1) of the model's (d1, d0) tensor of
                       its name (ar_nn_gtensor transposed; its optimizer
                       state too): checkpoints hold the model's layout */
} ntensor;

typedef struct nnode {
  char name[200];
  char path[200];   /* model.layers[i]... */
  const ar_layer_spec *ls;
  ar_nn_op op;
  ar_nn_attr attr;
  ar_nn_sig sig;
  int n_in;
  int in[AR_NN_MAX_IO], param[AR_NN_MAX_IO], state[AR_NN_MAX_IO];
  int out[AR_NN_MAX_IO], aux[AR_NN_MAX_IO];
  int gin[AR_NN_MAX_IO];   /* gradient written by backward, or -1 */
  int gtmp[AR_NN_MAX_IO];  /* >= 0: gin is a temporary to add into this */
  int gparam[AR_NN_MAX_IO];
  int gptmp[AR_NN_MAX_IO]; /* >= 0: gparam is a temporary to add into this
                              (a parameter several nodes use) */
  bool trains;             /* backward runs */
  bool after_head;         /* a reshape between a sampled head and the logits
                              (an imported MatMul's rows back to the batch's
                              shape): skipped in training like the loss */
  int hid1;                /* a hidden LSH-sampled node: its index in
                              n->hid + 1 (0: none; net_sampled_hidden.c) */
  ar_nn_mode mode;         /* graphs built by a program: when it trains */
  /* The kernel's workspace: the most its prepared kernels (training,
   * evaluation, a folded conv's) ask for, and its tensors: work[0] lives
   * at the node's forward step, work[1] at its backward step (-1: none),
   * so the plan places them by lifetime like any tensor. */
  size_t work_bytes;
  int work[2];
  /* Recomputation (net_remat.c), -1 where none: a batch norm whose output
   * is written again in the backward: that copy (copy) and the workspace
   * of the step that writes it (copy_work); on a node whose backward reads
   * such an output: the batch norm to run just before its backward (redo,
   * on the first of them in backward order) and, per input, the copy its
   * backward reads in place of the input (again). */
  int copy, copy_work, redo;
  int again[AR_NN_MAX_IO];
  ar_nn_prim *ptrain, *peval;
  ar_nn_args args;
} nnode;

struct ar_net {
  /* The first tensor refused for its size (ar__net_tensor: more than
   * AR__NET_MAX_ELEMENTS elements), as "NAME would be SHAPE"; its builder
   * saw -1 and failed, and ar__net_done reports this instead. */
  char too_big[320];
  const ar_spec *spec;
  int64_t batch, classes;
  int n_nodes, cap_nodes;
  nnode *nodes;
  int n_tensors, cap_tensors;
  ntensor *tensors;
  int x, y, logits, loss, topk; /* tensors (topk: the evaluation's top 5) */
  double flops;
  ar_plan plan;
  size_t staging_bytes;   /* host: x, y, loss rows, top-5 */
  void *staging;
  int64_t *sparse_rows;   /* host: a copy of a sparse table's row list on a
                             device other than the host (net_sparse_grad.c) */
  ar_device *dev;
  void *persistent, *ephemeral;
  bool own_blocks, started;
  int64_t step;
  int64_t total; /* iterations of the run (the cosine schedule's length) */
  ar_trace *trace; /* borrowed, NULL: none (ar_net_set_trace) */
  double loss_t0;  /* a detailed iteration: when the loss node's forward began
                      (its forward and backward are one `loss` span) */
  uint64_t seed;  /* initialisation and dropout (the spec's, or the graph's options) */
  int threads;    /* the kernels are prepared for this many */
  /* A graph built by a program (net_graph.c): its inputs and outputs
   * (tensors), in the graph's order; 0 for a job file's model. */
  int n_inputs, n_outputs;
  int *inputs, *outputs;
  /* A distributed worker (runtime/dist): the loss gradient's divisor (0:
   * batch) and the hooks around each node (ar_net_set_hooks). */
  int64_t grad_rows;
  ar_job_hooks hooks;
  /* An LSH-sampled head (the last dense node with a sparse: section that
   * samples on this device; net_sampled.c): its node (-1: none), its
   * index in spec->layers (settings, seeds), its buffers (HS_*; -1: not
   * planned), its rows' last-update steps (a state tensor), and the layer
   * once started. */
  int head, head_l, hs[HS_COUNT], head_last;
  struct ar_sampled *smp;
  /* The training batch's summed row losses as the head adds them (in
   * double, as the chain's; the loss tensor holds them as floats). */
  double head_loss_sum;
  /* A lowered chain's head that reads hidden sampled node head_from's
   * active set (index in hid; -1: none), or the sparse rows (head_csr: a
   * one-layer chain): it scores as the chain's sampled_forward does there,
   * without shared negatives (net_sampled.c). */
  int head_from;
  bool head_csr;
  /* Hidden LSH-sampled dense nodes (net_sampled_hidden.c), in graph order. */
  int n_hid;
  struct net_hid *hid; /* (n_hid) */
  /* The spec whose layers[head_l] holds the head's settings: spec, or for
   * an imported model hspec_own, spec with one layer, hlayer (a copy of
   * model.sparse's entry with the graph's width). */
  const ar_spec *hspec;
  ar_spec hspec_own;
  ar_layer_spec hlayer;
  /* Sparse input (model.input.sparse over XC data; net_sparse_in.c): the
   * batch's tensors (SX_*; sx[SX_PTR] -1: the input is not sparse), the
   * features and labels a row may hold (the plan's bounds), and the rows
   * of the batch staged now (the rest padded empty; n->batch for other
   * inputs). */
  int sx[SX_COUNT];
  /* A lowered chain over model.input.dense (XC rows read as sparse input):
   * batch.x (batch, features), the staged rows scattered into a dense
   * batch as the chain's ar_model_load does; `input` names it, and item 0
   * is a dense node.  Over model.input.sparse with an LSH-sampled first
   * layer: a T_SHAPE tensor of that shape, the input of that layer's dense
   * node, which reads the CSR rows instead (net_hid.csr).  -1 otherwise. */
  int xd;
  int64_t max_nnz, max_labels;
  int64_t rows;
  /* The fusion pass (net_fuse.c): relus made their producers' act, and the
   * conv + batch norm pairs folded for evaluation. */
  int fused_relus, n_folds;
  bool fuse_off; /* ACCELRT_FUSE=0 when it was built */
  struct net_fold *folds;
  /* The forward order (net_order.c): order[s] the node whose forward is
   * step s, fstep[i] node i's step; the list order but under
   * distributed: (NULL before ar__net_order: the list order). */
  int *order, *fstep; /* (n_nodes) */
};

typedef struct named {
  char name[200];
  int tensor;
} named;

typedef struct build_ctx {
  ar_net *net;
  ar_err *err;
  named *names;
  int n_names, cap_names;
} build_ctx;

/* "FILE:LINE:COL: error: PATH: message" (AR_SPEC) for item ls. */
ar_status ar__net_build_err(build_ctx *b, const ar_layer_spec *ls, const char *path,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Binds an item's output name (AR_NOMEM). */
ar_status ar__net_bind_name(build_ctx *b, const char *name, int tensor);
/* The most elements one tensor of a net may have (2^48): far past any plan
 * a device holds (larger ones are refused by the plan's fit against the
 * device, which says how much it can give), and far from where a tensor's
 * bytes leave size_t; the plan's sums are checked (make_plan, place). */
#define AR__NET_MAX_ELEMENTS ((uint64_t)1 << 48)
/* A new tensor (its index), or -1: out of memory, or a shape over
 * AR__NET_MAX_ELEMENTS (n->too_big says which). */
int ar__net_tensor(ar_net *n, const char *name, const ar_shape *s, ar_dtype t, int kind);
/* A new zeroed node (NULL when out of memory). */
nnode *ar__net_new_node(ar_net *n);
/* Ends a build: when st is AR_OK, gradients (training), optimizer state,
 * the kernels' workspace and the plan, and *out = n; otherwise (or when
 * those fail) n is destroyed.  Returns the status. */
ar_status ar__net_done(ar_net *n, ar_status st, bool training, ar_net **out, ar_err *err);
/* net_run.c: prepares every kernel (on a host device of its own: the
 * host's kernels do not depend on the handle), adds the shared workspace
 * tensor and the staging size. */
ar_status ar__net_workspace(ar_net *n, ar_err *err);
/* Forward and backward on the staged batch without the optimizer: every
 * gradient of the iteration, *loss the batch's mean (tests). */
ar_status ar__net_grad(ar_net *n, double *loss, ar_err *err);
/* Releases kernels and the blocks. */
void ar__net_stop(ar_net *n);
/* After node d's backward: its temporary gradients added into the
 * gradients they belong to (a tensor or parameter several nodes read). */
void ar__net_add_temps(ar_net *n, const nnode *d, int threads);

/* net_order.c: the forward order (docs/graph.md, "Forward order"), set
 * once the graph is final (after the gradients: a parameter nothing
 * differentiates is no transfer); AR_NOMEM.  _print: check's line naming
 * the order where it is not the list's. */
ar_status ar__net_order(ar_net *n, ar_err *err);
void ar__net_order_print(const ar_net *n, FILE *to);
/* Node i's forward step in the plan's lifetimes (its backward's is
 * 2N-1-i: the backward runs in list order, last first). */
static inline int64_t ar__net_fstep(const ar_net *n, int i) {
  return n->fstep ? n->fstep[i] : i;
}

/* net_remat.c: batch norm outputs recomputed in the backward (docs/graph.md,
 * "Recomputed batch norm outputs").  ar__net_remat (training, after the
 * workspaces) picks them and adds their copies; ACCELRT_RECOMPUTE=0: none.
 * ar__net_recompute: before node r's backward, writes the copy it is the
 * first to read (nothing when none). */
ar_status ar__net_remat(ar_net *n, ar_err *err);
void ar__net_recompute(ar_net *n, const nnode *r);

/* The loss ops a sampled head computes itself in training: the softmax
 * cross-entropy over one class a row, the multi-label one (sparse input). */
static inline bool ar__net_is_loss(ar_nn_op op) {
  return op == AR_NN_XENT || op == AR_NN_XENT_MULTI;
}

/* net_sampled.c: the sampled head (docs/graph.md, "An LSH-sampled head").
 * ar__net_head_plan: after add_grads, its buffers, persistent gradients
 * and last-update steps; ar__net_head_host: its host entries of the plan
 * (lsh tables, hash, scratch, touched sets) added to n->plan. */
ar_status ar__net_head_plan(ar_net *n, ar_err *err);
/* An imported model's model.sparse: the named node becomes the head (it
 * must be the Gemm producing the logits: AR_SPEC naming it otherwise). */
ar_status ar__net_head_onnx(ar_net *n, ar_err *err);
ar_status ar__net_head_host(ar_net *n, ar_err *err);
/* A sampled node's host bytes (*sb) as plan entries NODE.lsh.* (the room
 * is the plan's: n_tensors + 8 + 5 a hidden sampled node). */
struct ar__sampled_mem;
void ar__net_lsh_host(ar_net *n, const char *node, const struct ar__sampled_mem *sb);
/* After start (or a checkpoint's load: tables are rebuilt, never stored):
 * the layer with its tables for the rows as they are. */
ar_status ar__net_head_start(ar_net *n, ar_err *err);
void ar__net_head_bind(ar_net *n);
void ar__net_head_stop(ar_net *n);
/* A training iteration's forward (loss rows into the loss tensor) and
 * backward of the head node d, and its sparse step after the optimizer's
 * (n->step already counts this iteration). */
ar_status ar__net_head_forward(ar_net *n, const nnode *d, ar_err *err);
ar_status ar__net_head_backward(ar_net *n, const nnode *d, ar_err *err);
ar_status ar__net_head_step(ar_net *n, ar_err *err);

/* net_sampled_hidden.c: a job file's top-level dense item, not the last,
 * with a `sparse:` section that samples on this device: the chain's
 * hidden sampled layer (docs/graph.md, "Hidden LSH-sampled items").  Its
 * node, the item's index in spec->layers, its per-batch buffers (HH_*,
 * ephemeral), its rows' last-update steps (state) and the layer once
 * started. */
enum { HH_ACTIVE = 0, HH_N, HH_OUT, HH_DOUT, HH_COUNT };
typedef struct net_hid {
  int node, l, buf[HH_COUNT], last;
  /* It reads the batch's sparse rows, not its dense input (a lowered
   * chain's first layer: its input is n->xd, never filled). */
  bool csr;
  /* The hidden sampled node it reads (its index in n->hid; -1: none): a
   * lowered chain's sampled layer after a sampled layer reads that one's
   * active set, as the chain's does. */
  int from;
  struct ar_sampled *smp;
} net_hid;
/* hid_add: node (just added for item ls at path) becomes one, or AR_SPEC
 * naming the item when it cannot (its input, activation, optimizer).
 * hid_plan (after add_grads, training only): buffers, persistent
 * gradients, last steps; hid_host: its host entries of the plan;
 * hid_lifetimes: live(t, step) over its buffers.  start/bind/stop as the
 * head's; forward/backward: node d's training pass (d->hid1 > 0); step:
 * the sparse Adam steps and rebuilds after the optimizer's; hid_param:
 * whether tensor t is one's row table or bias (the optimizer skips them). */
ar_status ar__net_hid_add(build_ctx *b, const ar_layer_spec *ls, const char *path, int node);
ar_status ar__net_hid_plan(ar_net *n, ar_err *err);
ar_status ar__net_hid_host(ar_net *n, ar_err *err);
void ar__net_hid_lifetimes(ar_net *n, void (*live)(ntensor *, int64_t));
ar_status ar__net_hid_start(ar_net *n, ar_err *err);
void ar__net_hid_bind(ar_net *n);
void ar__net_hid_stop(ar_net *n);
ar_status ar__net_hid_forward(ar_net *n, const nnode *d, ar_err *err);
ar_status ar__net_hid_backward(ar_net *n, const nnode *d, ar_err *err);
/* Evaluation of node d when it reads the sparse rows (net_hid.csr): every
 * neuron by the sampled kernels, as the chain evaluates it; false (nothing
 * done) for any other node. */
bool ar__net_hid_eval(ar_net *n, const nnode *d, ar_status *st, ar_err *err);
/* The same for the head of a one-layer chain over the sparse rows
 * (ar_net.head_csr). */
bool ar__net_head_eval(ar_net *n, const nnode *d, ar_status *st, ar_err *err);
ar_status ar__net_hid_step(ar_net *n, ar_err *err);
bool ar__net_hid_param(const ar_net *n, int t);

/* net_sparse_in.c: a model over sparse input (docs/graph.md, "Sparse
 * input").  sparse_inputs: the batch's tensors, `input` bound to them.
 * sparse_item: an item reading them (in[0] = sx[SX_PTR]) must be a dense
 * one; it becomes SPARSE_DENSE over the three CSR tensors (*op, *a, in,
 * *n_in rewritten); AR_SPEC naming the item otherwise.  sparse_loss: the
 * XENT_MULTI node on the logits (act: the last item's).  */
ar_status ar__net_sparse_inputs(build_ctx *b);
ar_status ar__net_sparse_item(build_ctx *b, const ar_layer_spec *ls, const char *path,
                              ar_nn_op *op, ar_nn_attr *a, int *in, int *n_in);
/* Tensor t initialised (host memory) by the chain's rule when it is the
 * weight of a top-level dense item of a model over sparse input; false
 * (untouched) otherwise. */
bool ar__net_sparse_init(const ar_net *n, int t);
/* The staged batch's bytes (the five tensors, contiguous at the start of
 * the staging area). */
size_t ar__net_sparse_bytes(const ar_net *n);
/* Copies the staged batch to the device and sets the loss node's rows and
 * scale for it. */
ar_status ar__net_sparse_load(ar_net *n, ar_err *err);
/* Adds the staged rows' P@k hits and losses (loss: the staged rows'
 * losses, top: (batch, k) ids) to acc. */
void ar__net_sparse_hits(const ar_net *n, const float *loss, const int32_t *top, int k,
                         ar_eval_acc *acc);
/* net_fuse.c: the fusion pass (docs/graph.md, "Fusion").  ar__net_fuse
 * rewrites the built graph before differentiation (ACCELRT_FUSE=0: not);
 * the others keep its evaluation folds: their lifetimes in the plan, their
 * kernels (prepared on the planning host, the workspace's most raised;
 * again on the net's device when that is not the host, within the plan's
 * workspace), their pointers after binding, and an evaluation forward's
 * node i run folded (true: done, including a folded batch norm's skip). */
ar_status ar__net_fuse(ar_net *n, ar_err *err);
void ar__net_fuse_lifetimes(ar_net *n);
/* Raises each folded conv's node work_bytes to what its folded kernel asks;
 * _device: the same kernels again on the net's device, each within its
 * conv node's planned workspace. */
ar_status ar__net_fuse_prepare(ar_net *n, ar_device *host, ar_err *err);
ar_status ar__net_fuse_prepare_device(ar_net *n, ar_err *err);
void ar__net_fuse_bind(ar_net *n);
bool ar__net_fold_forward(ar_net *n, int node);
void ar__net_fuse_release(ar_net *n);
void ar__net_fuse_free(ar_net *n);
void ar__net_fuse_print(const ar_net *n, FILE *to);

/* net_sparse_grad.c: sparse embedding gradients (docs/graph.md).  The check
 * refuses sparse_grad where it cannot run (AR_SPEC, located) and marks the
 * tables; the lifetimes keep each id list to the optimizer; start (on a
 * device other than the host) makes the host buffer the lists are copied
 * to; opt_sparse steps a marked table's listed rows. */
ar_status ar__net_sparse_check(ar_net *n, bool training, ar_err *err);
void ar__net_sparse_lifetimes(ar_net *n);
ar_status ar__net_sparse_start(ar_net *n, ar_err *err);
void ar__net_opt_sparse(ar_net *n, int tensor, double lr);

#endif
