/* Graph models (include/accelrt/net.h): building the graph from the job
 * file's items, shapes, the exact plan by lifetimes.  Running it (start,
 * train, eval) is net_run.c. */
#define _GNU_SOURCE
#include "net_impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- building ------------------------------------------------------------ */

ar_status ar__net_build_err(build_ctx *b, const ar_layer_spec *ls, const char *path,
                            const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ar_status st = ar_spec_item_verrf(b->net->spec, ls ? &ls->pos : NULL, path, b->err, AR_SPEC,
                                    fmt, ap);
  va_end(ap);
  return st;
}

int ar__net_tensor(ar_net *n, const char *name, const ar_shape *s_in, ar_dtype t, int kind) {
  /* Callers may pass another tensor's shape or name (a gradient's is its
   * tensor's): copied before the table may move. */
  const ar_shape shape = *s_in, *s = &shape;
  char nm[sizeof n->tensors[0].name];
  snprintf(nm, sizeof nm, "%.199s", name);
  uint64_t count = 1;
  for (int k = 0; k < s->nd; k++) { /* zeros skipped: the other dims still bounded */
    if (s->d[k] < 0 || (s->d[k] && count > AR__NET_MAX_ELEMENTS / (uint64_t)s->d[k])) {
      if (!n->too_big[0]) {
        char b[96];
        snprintf(n->too_big, sizeof n->too_big, "%s would be %s", nm,
                 ar_shape_str(s, b, sizeof b));
      }
      return -1;
    }
    if (s->d[k])
      count *= (uint64_t)s->d[k];
  }
  if (n->n_tensors == n->cap_tensors) {
    int cap = n->cap_tensors ? 2 * n->cap_tensors : 64;
    ntensor *nt = ar_realloc(n->tensors, (size_t)cap * sizeof *nt);
    if (!nt)
      return -1;
    n->tensors = nt;
    n->cap_tensors = cap;
  }
  ntensor *x = &n->tensors[n->n_tensors];
  memset(x, 0, sizeof *x);
  memcpy(x->name, nm, sizeof x->name);
  x->shape = *s;
  x->dtype = t;
  x->kind = kind;
  x->grad = -1;
  x->producer = -1;
  x->seed_index = n->n_tensors;
  x->bytes = kind == T_SHAPE ? 0 : (size_t)ar_shape_count(s) * ar_dtype_size(t);
  return n->n_tensors++;
}

nnode *ar__net_new_node(ar_net *n) {
  if (n->n_nodes == n->cap_nodes) {
    int cap = n->cap_nodes ? 2 * n->cap_nodes : 32;
    nnode *nn = ar_realloc(n->nodes, (size_t)cap * sizeof *nn);
    if (!nn)
      return NULL;
    n->nodes = nn;
    n->cap_nodes = cap;
  }
  nnode *x = &n->nodes[n->n_nodes++];
  memset(x, 0, sizeof *x);
  x->work[0] = x->work[1] = -1;
  x->copy = x->copy_work = x->redo = -1;
  for (int k = 0; k < AR_NN_MAX_IO; k++)
    x->again[k] = -1;
  return x;
}

/* The tensor an item's output name refers to, or -1. */
static int lookup(const build_ctx *b, const char *name) {
  for (int i = b->n_names - 1; i >= 0; i--)
    if (!strcmp(b->names[i].name, name))
      return b->names[i].tensor;
  return -1;
}

ar_status ar__net_bind_name(build_ctx *b, const char *name, int tensor) {
  if (b->n_names == b->cap_names) {
    int cap = b->cap_names ? 2 * b->cap_names : 64;
    named *nn = ar_realloc(b->names, (size_t)cap * sizeof *nn);
    if (!nn)
      return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
    b->names = nn;
    b->cap_names = cap;
  }
  snprintf(b->names[b->n_names].name, sizeof b->names[0].name, "%s", name);
  b->names[b->n_names++].tensor = tensor;
  return AR_OK;
}

/* The data inputs of item ls: its `inputs` (names resolved in the block
 * copy first, `prefix` being the copy's "BLOCK.I."), or the previous
 * output. */
static ar_status item_inputs(build_ctx *b, const ar_layer_spec *ls, const char *path,
                             const char *prefix, int prev, int block_in, int *in, int *n_in) {
  if (ls->n_inputs == 0) {
    in[0] = prev;
    *n_in = 1;
    return AR_OK;
  }
  for (int i = 0; i < ls->n_inputs; i++) {
    const char *nm = ls->inputs[i];
    int t = -1;
    if (block_in >= 0 && !strcmp(nm, "input"))
      t = block_in;
    if (t < 0 && prefix[0]) {
      char full[400];
      snprintf(full, sizeof full, "%s%s", prefix, nm);
      t = lookup(b, full);
    }
    if (t < 0)
      t = lookup(b, nm);
    if (t < 0)
      return ar__net_build_err(b, ls, path,
                       "inputs: no earlier item is named '%s'; an item may read the items "
                       "before it (by name)%s",
                       nm, block_in >= 0 ? " or `input`, its block's input" : "");
    in[i] = t;
  }
  *n_in = ls->n_inputs;
  return AR_OK;
}

/* One node for item ls reading `in`; its output becomes *out. */
static ar_status add_node(build_ctx *b, const ar_layer_spec *ls, const char *path,
                          const char *name, ar_nn_op op, const ar_nn_attr *attr, const int *in,
                          int n_in, int *out) {
  ar_net *n = b->net;
  nnode *d = ar__net_new_node(n);
  if (!d)
    return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
  int id = n->n_nodes - 1;
  snprintf(d->name, sizeof d->name, "%s", name);
  snprintf(d->path, sizeof d->path, "%s", path);
  d->ls = ls;
  d->op = op;
  d->attr = *attr;
  d->n_in = n_in;
  ar_shape shapes[AR_NN_MAX_IO];
  ar_dtype types[AR_NN_MAX_IO];
  for (int i = 0; i < n_in; i++) {
    d->in[i] = in[i];
    shapes[i] = n->tensors[in[i]].shape;
    types[i] = n->tensors[in[i]].dtype;
  }
  ar_err e = AR_ERR_INIT;
  ar_status st = ar_nn_infer(op, &d->attr, n_in, shapes, types, &d->sig, &e);
  if (st != AR_OK)
    return ar__net_build_err(b, ls, path, "%s %s: %s", ar_nn_op_name(op), name, e.msg);
  char tn[400];
  for (int i = 0; i < d->sig.n_param; i++) {
    snprintf(tn, sizeof tn, "%s.%s", name, d->sig.param_name[i]);
    d->param[i] = ar__net_tensor(n, tn, &d->sig.param[i], AR_DT_F32, T_PARAM);
    if (d->param[i] < 0)
      return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
    ntensor *p = &n->tensors[d->param[i]];
    p->init = d->sig.param_init[i];
    p->std = d->sig.param_std[i];
    /* Biases and normalisation parameters (1-D) never decay: the issue's
     * default, and what a tuned PyTorch recipe does.  A lowered chain's
     * biases decay as the chain's do (ar_model_step_layer: the same L2
     * penalty on every tensor; docs/graph.md, "Lowered chains"). */
    p->decay = d->sig.param_decay[i] &&
               (d->sig.param[i].nd > 1 || (n->spec && n->spec->lowered));
    p->producer = id;
    p->relu = attr->act == AR_ACT_RELU;
  }
  for (int i = 0; i < d->sig.n_state; i++) {
    snprintf(tn, sizeof tn, "%s.%s", name, d->sig.state_name[i]);
    d->state[i] = ar__net_tensor(n, tn, &d->sig.state[i], AR_DT_F32, T_STATE);
    if (d->state[i] < 0)
      return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
    n->tensors[d->state[i]].init = d->sig.state_init[i];
  }
  for (int i = 0; i < d->sig.n_out; i++) {
    snprintf(tn, sizeof tn, d->sig.n_out > 1 ? "%s.out%d" : "%s", name, i);
    d->out[i] = ar__net_tensor(n, tn, &d->sig.out[i], d->sig.out_dtype[i], T_ACT);
    if (d->out[i] < 0)
      return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
    n->tensors[d->out[i]].producer = id;
  }
  for (int i = 0; i < d->sig.n_aux; i++) {
    snprintf(tn, sizeof tn, "%s.aux%d", name, i);
    d->aux[i] = ar__net_tensor(n, tn, &d->sig.aux[i], d->sig.aux_dtype[i], T_AUX);
    if (d->aux[i] < 0)
      return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
    n->tensors[d->aux[i]].producer = id;
  }
  n->flops += d->sig.flops;
  *out = d->out[0];
  return AR_OK;
}

static ar_status build_items(build_ctx *b, const ar_layer_spec *items, int count,
                             const char *path0, const char *prefix, int block_in, int *cur,
                             bool top);

/* Item ls (of a block copy with names `prefix` when not ""), reading *cur
 * by default; *cur becomes its output. */
static ar_status build_item(build_ctx *b, const ar_layer_spec *ls, const char *path,
                            const char *prefix, int block_in, int *cur, bool last) {
  char name[200];
  snprintf(name, sizeof name, "%.99s%.99s", prefix, ls->name ? ls->name : "?");
  if (ls->op < 0) { /* repeat: block */
    for (int64_t r = 0; r < ls->repeat; r++) {
      char pre[200], p2[200];
      snprintf(pre, sizeof pre, "%.170s.%" PRId64 ".", name, r);
      snprintf(p2, sizeof p2, "%.180s.block", path);
      int copy_in = *cur;
      AR_CHECK(build_items(b, ls->block, ls->n_block, p2, pre, copy_in, cur, false));
    }
    return ar__net_bind_name(b, name, *cur);
  }
  int in[AR_NN_MAX_IO], n_in = 0, out = -1;
  AR_CHECK(item_inputs(b, ls, path, prefix, *cur, block_in, in, &n_in));
  ar_nn_op op = (ar_nn_op)ls->op;
  const bool top = !prefix[0] && block_in < 0;
  if (ls->sparse.mode != AR_SPARSE_NONE && !top)
    return ar__net_build_err(b, ls, path,
                     "sparse: only a top-level dense item of a graph model (the head before "
                     "the loss, or a hidden one) can be LSH-sampled; remove this item's "
                     "sparse section");
  if (ls->sparse.mode != AR_SPARSE_NONE && !last && ls->op != AR_NN_DENSE)
    return ar__net_build_err(b, ls, path,
                     "sparse: only a dense item can be LSH-sampled; remove this item's "
                     "sparse section");
  ar_nn_attr a = ls->attr;
  if (ls->op == AR_NN_EMBEDDING && a.vocab == 0)
    a.vocab = b->net->spec->input.vocab;
  const bool sparse = b->net->sx[SX_PTR] >= 0;
  if (last) {
    if (ls->op != AR_NN_DENSE ||
        (ls->act != AR_ACT_SOFTMAX && !(sparse && ls->act == AR_ACT_SIGMOID)))
      return ar__net_build_err(b, ls, path,
                       "the last item of a graph model is `dense: CLASSES` with activation "
                       "softmax (softmax cross-entropy over %s)",
                       sparse ? "the point's labels; or sigmoid: binary cross-entropy"
                              : "one class per point");
    a.act = AR_ACT_NONE;
  }
  if (sparse)
    AR_CHECK(ar__net_sparse_item(b, ls, path, &op, &a, in, &n_in));
  AR_CHECK(add_node(b, ls, path, name, op, &a, in, n_in, &out));
  if (!last && top && ar_layer_sampled(b->net->spec, (int)(ls - b->net->spec->layers), true))
    AR_CHECK(ar__net_hid_add(b, ls, path, b->net->n_nodes - 1));
  if (last && top && ar_layer_sampled(b->net->spec, b->net->spec->n_layers - 1, true)) {
    if (op == AR_NN_SPARSE_DENSE)
      return ar__net_build_err(b, ls, path,
                       "sparse: an LSH-sampled head reading the sparse input directly is not "
                       "built in this version (a graph's sampled head reads a dense hidden "
                       "item); write the model as a chain of dense items (without `inputs:`), "
                       "which samples it, or set sparse.mode to dense");
    const int prod = b->net->tensors[in[0]].producer;
    /* A lowered chain's head reading a sampled layer's active set, or the
     * sparse rows as the only layer (n->xd its shape only): the chain's
     * unshared scoring (net_sampled.c, head_rows). */
    const bool lowered = b->net->spec->lowered;
    b->net->head_from = lowered && prod >= 0 ? b->net->nodes[prod].hid1 - 1 : -1;
    b->net->head_csr = lowered && in[0] == b->net->xd && b->net->spec->input.kind == AR_INPUT_SPARSE;
    if (prod >= 0 && b->net->nodes[prod].hid1 && !lowered)
      return ar__net_build_err(b, ls, path,
                       "sparse: an LSH-sampled head reading an LSH-sampled item (%s) is not "
                       "built in this version (the chain reads the active set there); write "
                       "the model as a chain, or set one sparse.mode to dense",
                       b->net->nodes[prod].path);
    /* Its input must be one row per example (the chain's rows). */
    if (b->net->tensors[in[0]].shape.nd != 2)
      return ar__net_build_err(b, ls, path,
                       "sparse: an LSH-sampled head reads (batch, features); flatten its "
                       "input first");
    const ar_spec *sp = b->net->spec;
    if (sp->train.optimizer != AR_OPT_ADAM || sp->train.weight_decay > 0)
      return ar__net_build_err(b, ls, path,
                       "sparse: an LSH-sampled head trains with Adam without weight decay "
                       "(sparse Adam on the touched rows); set train.optimizer to adam with "
                       "weight_decay 0, or this item's sparse.mode to dense");
    if (ar_layer_catch_up_refused(sp, sp->n_layers - 1))
      return ar__net_build_err(b, ls, path,
                       "sparse: catch_up needs Adam's beta1 < "
                       "sqrt(beta2), here %g and %g; change the betas or set this item's "
                       "sparse.catch_up to 0", sp->train.beta1, sp->train.beta2);
    b->net->head = b->net->n_nodes - 1;
    b->net->head_l = sp->n_layers - 1;
    b->net->hspec = sp;
  }
  *cur = out;
  return ar__net_bind_name(b, name, out);
}

static ar_status build_items(build_ctx *b, const ar_layer_spec *items, int count,
                             const char *path0, const char *prefix, int block_in, int *cur,
                             bool top) {
  for (int i = 0; i < count; i++) {
    char path[200];
    snprintf(path, sizeof path, "%.180s[%d]", path0, i);
    AR_CHECK(build_item(b, &items[i], path, prefix, block_in, cur, top && i == count - 1));
  }
  return AR_OK;
}

/* The output must be (batch, classes). */
static ar_status set_logits(build_ctx *b, int cur) {
  ar_net *n = b->net;
  const ar_spec *s = n->spec;
  n->logits = cur;
  const ntensor *lt = &n->tensors[cur];
  if (lt->shape.nd != 2)
    return ar__net_build_err(b, &s->layers[s->n_layers - 1], "model.layers",
                             "the output must be (batch, classes); flatten before the last "
                             "dense");
  n->classes = lt->shape.d[1];
  return AR_OK;
}

/* A model over sparse input: the CSR batch, the items, the multi-label
 * loss of the last item's activation (net_sparse_in.c). */
static ar_status build_sparse(build_ctx *b) {
  ar_net *n = b->net;
  const ar_spec *s = n->spec;
  AR_CHECK(ar__net_sparse_inputs(b));
  int cur = n->xd >= 0 ? n->xd : n->sx[SX_PTR]; /* xd: a lowered chain's dense input */
  AR_CHECK(build_items(b, s->layers, s->n_layers, "model.layers", "", -1, &cur, true));
  AR_CHECK(set_logits(b, cur));
  ar_nn_attr xa;
  ar_nn_attr_defaults(&xa);
  xa.act = s->layers[s->n_layers - 1].act;
  int in[3] = {cur, n->sx[SX_LPTR], n->sx[SX_LAB]}, out = -1;
  AR_CHECK(add_node(b, NULL, "model", "loss", AR_NN_XENT_MULTI, &xa, in, 3, &out));
  n->loss = out;
  return AR_OK;
}

/* The input tensors and the loss node. */
static ar_status build_graph(build_ctx *b) {
  ar_net *n = b->net;
  const ar_spec *s = n->spec;
  ar_shape xs = {0};
  ar_dtype xt = AR_DT_F32;
  xs.d[0] = n->batch;
  if (s->input.kind == AR_INPUT_IMAGE) {
    xs.nd = 4;
    for (int i = 0; i < 3; i++)
      xs.d[1 + i] = s->input.image[i];
  } else if (s->input.kind == AR_INPUT_TOKENS) {
    xs.nd = 2;
    xs.d[1] = s->input.features;
    xt = AR_DT_I64;
  } else if (s->input.kind == AR_INPUT_DENSE && !ar_spec_reads_rows(s)) {
    xs.nd = 2;
    xs.d[1] = s->input.features;
  } else {
    return build_sparse(b);
  }
  n->x = ar__net_tensor(n, "batch.x", &xs, xt, T_INPUT);
  ar_shape ys = {1, {n->batch}};
  n->y = ar__net_tensor(n, "batch.y", &ys, AR_DT_I64, T_INPUT);
  if (n->x < 0 || n->y < 0)
    return ar_errf(b->err, AR_NOMEM, "out of memory building the graph");
  int cur = n->x;
  /* `input` names the model's input (inside a block: the block's). */
  AR_CHECK(ar__net_bind_name(b, "input", n->x));
  AR_CHECK(build_items(b, s->layers, s->n_layers, "model.layers", "", -1, &cur, true));
  AR_CHECK(set_logits(b, cur));
  ar_nn_attr xa;
  ar_nn_attr_defaults(&xa);
  int in[2] = {cur, n->y}, out = -1;
  AR_CHECK(add_node(b, NULL, "model", "loss", AR_NN_XENT, &xa, in, 2, &out));
  n->loss = out;
  return AR_OK;
}

/* ---- differentiation ------------------------------------------------------ */

/* Readers of tensor t among the nodes: how many, and the highest index of
 * one other than node `but`. */
static int readers(const ar_net *n, int t, int but, int *top) {
  int count = 0;
  *top = -1;
  for (int i = 0; i < n->n_nodes; i++)
    for (int k = 0; k < n->nodes[i].n_in; k++)
      if (n->nodes[i].in[k] == t) {
        count++;
        if (i != but && i > *top)
          *top = i;
      }
  return count;
}

/* An add (fused relu or not, no broadcasting) gives both its inputs the
 * same gradient; when it is the last reader of both, one input (s) is
 * read by it alone, and the other's (o) other readers all come no later
 * than s's producer, the two can be one tensor: s's producer reads it
 * (backward order) before any other reader of o adds its part (those add
 * through temporaries, after their own backward), and o's producer reads
 * the sum.  A residual block's add and its shortcut, as PyTorch's autograd
 * passes one tensor to both.  Returns s (the input the add need not
 * write), or -1. */
static int shared_add_grad(const ar_net *n, int i) {
  const nnode *d = &n->nodes[i];
  if (d->op != AR_NN_ADD || d->n_in != 2 || d->in[0] == d->in[1])
    return -1;
  const ntensor *out = &n->tensors[d->out[0]];
  for (int k = 0; k < 2; k++) {
    const ntensor *t = &n->tensors[d->in[k]];
    if (!t->needs_grad || t->grad >= 0 || (d->sig.no_grad & (1u << k)) ||
        t->dtype != AR_DT_F32 || !ar_shape_eq(&t->shape, &out->shape) || t->keep ||
        d->in[k] == n->logits)
      return -1;
  }
  for (int s = 0; s < 2; s++) {
    const int ts = d->in[s], to = d->in[1 - s], ps = n->tensors[ts].producer;
    int top_s, top_o;
    if (ps < 0 || readers(n, ts, i, &top_s) != 1)
      continue;
    readers(n, to, i, &top_o);
    if (top_o < i && top_o <= ps && n->tensors[to].producer < ps)
      return s;
  }
  return -1;
}

/* Which tensors take a gradient, their gradient tensors, and for a tensor
 * read by several nodes the temporaries its later contributions land in. */
static ar_status add_grads(ar_net *n, ar_err *err) {
  char tn[400];
  /* A parameter a node reads as a data input (a graph built by a program:
   * an imported MatMul's weight) takes its gradient there too. */
  for (int i = 0; i < n->n_tensors; i++)
    if (n->tensors[i].kind == T_PARAM)
      n->tensors[i].needs_grad = true;
  for (int i = 0; i < n->n_nodes; i++) {
    nnode *d = &n->nodes[i];
    bool any = d->sig.n_param > 0;
    for (int k = 0; k < d->n_in; k++)
      if (n->tensors[d->in[k]].needs_grad && !(d->sig.no_grad & (1u << k)))
        any = true;
    d->trains = any || d->op == AR_NN_XENT;
    /* The loss after a sampled head: the head computes it in training. */
    if (d->after_head || (ar__net_is_loss(d->op) && n->head >= 0 &&
                          (d->in[0] == n->nodes[n->head].out[0] || d->in[0] == n->logits)))
      d->trains = false;
    for (int k = 0; k < d->sig.n_out; k++)
      n->tensors[d->out[k]].needs_grad = any && d->sig.out_dtype[k] == AR_DT_F32;
  }
  /* Backward runs in reverse node order: the last reader of a tensor
   * writes its gradient, earlier readers add into it through a
   * temporary. */
  for (int i = n->n_nodes - 1; i >= 0; i--) {
    nnode *d = &n->nodes[i];
    if (!d->trains)
      continue;
    const int share = shared_add_grad(n, i);
    for (int k = 0; k < d->n_in; k++) {
      d->gin[k] = d->gtmp[k] = -1;
      ntensor *t = &n->tensors[d->in[k]];
      if (!t->needs_grad || (d->sig.no_grad & (1u << k)) || k == share)
        continue;
      if (t->grad < 0) {
        snprintf(tn, sizeof tn, "%s.grad", t->name);
        int g = ar__net_tensor(n, tn, &t->shape, AR_DT_F32, T_GRAD);
        if (g < 0)
          return ar_errf(err, AR_NOMEM, "out of memory building the graph");
        t = &n->tensors[d->in[k]];
        t->grad = g;
        d->gin[k] = g;
      } else {
        snprintf(tn, sizeof tn, "%.190s.grad.%.190s", t->name, d->name);
        int g = ar__net_tensor(n, tn, &t->shape, AR_DT_F32, T_GRAD);
        if (g < 0)
          return ar_errf(err, AR_NOMEM, "out of memory building the graph");
        d->gin[k] = g;
        d->gtmp[k] = n->tensors[d->in[k]].grad;
      }
    }
    if (share >= 0) /* the add writes the other input's gradient only */
      n->tensors[d->in[share]].grad = n->tensors[d->in[1 - share]].grad;
    for (int k = 0; k < d->sig.n_param; k++) {
      /* A parameter used by several nodes (or slots): the last in backward
       * order writes its gradient, the others add into it. */
      const int shared = n->tensors[d->param[k]].grad;
      d->gptmp[k] = shared;
      if (shared >= 0)
        snprintf(tn, sizeof tn, "%.190s.grad.%.190s", n->tensors[d->param[k]].name, d->name);
      else
        snprintf(tn, sizeof tn, "%s.grad", n->tensors[d->param[k]].name);
      int g = ar__net_tensor(n, tn, &d->sig.param[k], AR_DT_F32, T_GRAD);
      if (g < 0)
        return ar_errf(err, AR_NOMEM, "out of memory building the graph");
      if (shared < 0)
        n->tensors[d->param[k]].grad = g;
      d->gparam[k] = g;
    }
  }
  /* A parameter nothing differentiates (read only where no gradient
   * flows) is a constant. */
  for (int i = 0; i < n->n_tensors; i++)
    if (n->tensors[i].kind == T_PARAM && n->tensors[i].grad < 0)
      n->tensors[i].kind = T_CONST;
  return AR_OK;
}

/* ---- the plan ------------------------------------------------------------- */

static void live(ntensor *t, int64_t step) {
  if (t->first < 0 || step < t->first)
    t->first = step;
  if (step > t->last)
    t->last = step;
}

/* Steps: forward of node i is its place in the forward order (i but
 * under distributed:, net_order.c), backward of node i is 2N-1-i, the
 * optimizer 2N. */
static void lifetimes(ar_net *n) {
  int64_t N = n->n_nodes, end = 2 * N;
  for (int i = 0; i < n->n_tensors; i++) {
    n->tensors[i].first = -1;
    n->tensors[i].last = -1;
  }
  /* The batch, a graph's inputs and outputs: the whole iteration. */
  for (int i = 0; i < n->n_tensors; i++)
    if (n->tensors[i].kind == T_INPUT || n->tensors[i].keep) {
      live(&n->tensors[i], 0);
      live(&n->tensors[i], end);
    }
  /* The evaluation's top-5: the whole iteration. */
  live(&n->tensors[n->topk], 0);
  live(&n->tensors[n->topk], end);
  for (int i = 0; i < N; i++) {
    nnode *d = &n->nodes[i];
    int64_t f = ar__net_fstep(n, i), bw = 2 * N - 1 - i;
    /* A kernel's workspace: only while its forward or backward runs. */
    if (d->work[0] >= 0)
      live(&n->tensors[d->work[0]], f);
    if (d->work[1] >= 0)
      live(&n->tensors[d->work[1]], bw);
    if (d->redo >= 0 && n->nodes[d->redo].copy_work >= 0)
      live(&n->tensors[n->nodes[d->redo].copy_work], bw);
    for (int k = 0; k < d->n_in; k++) {
      live(&n->tensors[d->in[k]], f);
      /* (A recomputed input: its copy, written at the first such step.) */
      if (d->trains && (d->sig.in_needed & (1u << k)))
        live(&n->tensors[d->again[k] >= 0 ? d->again[k] : d->in[k]], bw);
      if (d->trains && d->gin[k] >= 0) {
        live(&n->tensors[d->gin[k]], bw);
        if (d->gtmp[k] >= 0)
          live(&n->tensors[d->gtmp[k]], bw);
      }
    }
    for (int k = 0; k < d->sig.n_out; k++) {
      ntensor *o = &n->tensors[d->out[k]];
      live(o, f);
      if (d->trains && d->sig.out_needed)
        live(o, bw);
      if (o->grad >= 0)
        live(&n->tensors[o->grad], bw);
    }
    for (int k = 0; k < d->sig.n_aux; k++) {
      live(&n->tensors[d->aux[k]], f);
      if (d->trains)
        live(&n->tensors[d->aux[k]], bw);
    }
    for (int k = 0; d->trains && k < d->sig.n_param; k++) {
      live(&n->tensors[d->gparam[k]], bw);
      live(&n->tensors[d->gparam[k]], end);
      if (d->gptmp[k] >= 0)
        live(&n->tensors[d->gptmp[k]], bw);
    }
  }
  if (n->loss >= 0)
    live(&n->tensors[n->loss], end); /* read back after the step */
  /* A sampled head's buffers: from its forward to its backward; it writes
   * the loss rows in its forward. */
  if (n->head >= 0 && n->loss >= 0)
    live(&n->tensors[n->loss], ar__net_fstep(n, n->head));
  for (int k = 0; n->head >= 0 && k < HS_COUNT; k++)
    if (n->hs[k] >= 0) {
      live(&n->tensors[n->hs[k]], ar__net_fstep(n, n->head));
      live(&n->tensors[n->hs[k]], 2 * N - 1 - n->head);
    }
  ar__net_hid_lifetimes(n, live);
  ar__net_fuse_lifetimes(n);
  ar__net_sparse_lifetimes(n);
  /* Parameters' gradients wait for the optimizer (those of parameters read
   * as data inputs too). */
  for (int i = 0; i < n->n_tensors; i++)
    if (n->tensors[i].kind == T_PARAM && n->tensors[i].grad >= 0)
      live(&n->tensors[n->tensors[i].grad], end);
}

static size_t align64(size_t v) { return (v + 63) & ~(size_t)63; }

/* Orders in which place() tries the tensors: largest first; longest
 * lifetime first (then largest); most bytes x steps first; earliest first
 * use first (then largest); the tensors alive at the step with the most
 * bytes alive first, then the rest, each group largest first (those
 * tensors, packed from 0, are the lower bound; the rest fit around
 * them).  Ties: the lower index first (deterministic). */
enum { ORDER_SIZE, ORDER_SPAN, ORDER_AREA, ORDER_START, ORDER_PEAK, N_ORDERS };
typedef struct order_ctx {
  const ntensor *t;
  int order;
  int64_t peak_step; /* ORDER_PEAK's step */
} order_ctx;

static int by_order(const void *pa, const void *pb, void *ctx) {
  const order_ctx *c = ctx;
  const int ia = *(const int *)pa, ib = *(const int *)pb;
  const ntensor *a = &c->t[ia], *b = &c->t[ib];
  double ka = (double)a->bytes, kb = (double)b->bytes;
  const double sa = (double)(a->last - a->first + 1), sb = (double)(b->last - b->first + 1);
  if (c->order == ORDER_SPAN && sa != sb)
    return sa < sb ? 1 : -1;
  if (c->order == ORDER_START && a->first != b->first)
    return a->first > b->first ? 1 : -1;
  if (c->order == ORDER_PEAK) {
    const bool pa = a->first <= c->peak_step && c->peak_step <= a->last;
    const bool pb = b->first <= c->peak_step && c->peak_step <= b->last;
    if (pa != pb)
      return pa ? -1 : 1;
  }
  if (c->order == ORDER_AREA) {
    ka *= sa;
    kb *= sb;
  }
  return ka < kb ? 1 : ka > kb ? -1 : (ia - ib);
}

/* Whether need bytes at offset o conflict with a tensor of ord[0..a)
 * placed at off[] whose lifetime overlaps t's; *above: the lowest start
 * of such a tensor at or above o + need (SIZE_MAX: none). */
static bool conflicts(const ntensor *ts, const int *ord, int a, const size_t *off,
                      const ntensor *t, size_t o, size_t need, size_t *above) {
  *above = SIZE_MAX;
  for (int q = 0; q < a; q++) {
    const ntensor *u = &ts[ord[q]];
    if (u->last < t->first || t->last < u->first)
      continue;
    size_t ue = off[q] + align64(u->bytes ? u->bytes : 1);
    if (o < ue && off[q] < o + need)
      return true;
    if (off[q] >= o + need && off[q] < *above)
      *above = off[q];
  }
  return false;
}

/* Places the tensors ord[0..m) in that order (offsets into off[]) and
 * returns the peak.  First fit: each at the lowest offset free over its
 * lifetime; best fit: in the free gap that leaves the least over (the
 * top when no gap holds it). */
static size_t place_in_order(const ntensor *ts, const int *ord, int m, size_t *off, bool best) {
  size_t peak = 0;
  for (int a = 0; a < m; a++) {
    const ntensor *t = &ts[ord[a]];
    size_t need = align64(t->bytes ? t->bytes : 1), o = 0, above;
    if (!best) {
      bool moved = true;
      while (moved) { /* first fit: restart after each conflict */
        moved = false;
        for (int q = 0; q < a; q++) {
          const ntensor *u = &ts[ord[q]];
          if (u->last < t->first || t->last < u->first)
            continue;
          size_t ue = off[q] + align64(u->bytes ? u->bytes : 1);
          if (o < ue && off[q] < o + need) {
            o = ue;
            moved = true;
          }
        }
      }
    } else {
      /* Candidates: 0 and the end of each overlapping placed tensor. */
      size_t top = 0, pick = SIZE_MAX, waste = SIZE_MAX;
      for (int q = -1; q < a; q++) {
        size_t c = 0;
        if (q >= 0) {
          const ntensor *u = &ts[ord[q]];
          if (u->last < t->first || t->last < u->first)
            continue;
          c = off[q] + align64(u->bytes ? u->bytes : 1);
          top = c > top ? c : top;
        }
        if (conflicts(ts, ord, a, off, t, c, need, &above) || above == SIZE_MAX)
          continue;
        size_t w = above - (c + need);
        if (w < waste || (w == waste && c < pick)) {
          waste = w;
          pick = c;
        }
      }
      o = pick != SIZE_MAX ? pick : top;
    }
    off[a] = o;
    if (o + need > peak)
      peak = o + need;
  }
  return peak;
}

/* Places ephemeral tensors by lifetime: first fit in each of the orders
 * above, keeping the placement with the lowest peak (first fit in one
 * order alone can leave gaps: a long-lived tensor above short-lived large
 * ones, such as the kernels' workspaces). */
static ar_status place(ar_net *n, ar_err *err) {
  int *ord = ar_malloc((size_t)(n->n_tensors + 1) * sizeof *ord);
  size_t *off = ar_malloc((size_t)(n->n_tensors + 1) * sizeof *off);
  size_t *best = ar_malloc((size_t)(n->n_tensors + 1) * sizeof *best);
  int *best_ord = ar_malloc((size_t)(n->n_tensors + 1) * sizeof *best_ord);
  if (!ord || !off || !best || !best_ord) {
    ar_free(ord);
    ar_free(off);
    ar_free(best);
    ar_free(best_ord);
    return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
  }
  int m = 0;
  for (int i = 0; i < n->n_tensors; i++)
    if (n->tensors[i].cls == AR_MEM_EPHEMERAL && n->tensors[i].kind != T_SHAPE)
      ord[m++] = i;
  size_t sum = 0, peak = SIZE_MAX, most = 0;
  int64_t last = 0, peak_step = 0;
  for (int a = 0; a < m; a++) {
    /* Every offset and every step's bytes alive are at most this sum:
     * checked once here, they cannot leave size_t below. */
    if (__builtin_add_overflow(sum, align64(n->tensors[ord[a]].bytes ? n->tensors[ord[a]].bytes : 1),
                               &sum) || sum > SIZE_MAX / 4) {
      ar_free(ord);
      ar_free(off);
      ar_free(best);
      ar_free(best_ord);
      return ar_errf(err, AR_RANGE, "the memory plan overflows: the iteration's tensors up to "
                     "%s take more than %zu bytes; lower the widths of model.layers, the "
                     "input's size or train.batch", n->tensors[ord[a]].name, SIZE_MAX / 4);
    }
    last = n->tensors[ord[a]].last > last ? n->tensors[ord[a]].last : last;
  }
  for (int64_t s = 0; s <= last; s++) { /* the step with the most bytes alive */
    size_t alive = 0;
    for (int a = 0; a < m; a++) {
      const ntensor *t = &n->tensors[ord[a]];
      if (t->first <= s && s <= t->last)
        alive += align64(t->bytes ? t->bytes : 1);
    }
    if (alive > most) {
      most = alive;
      peak_step = s;
    }
  }
  for (int k = 0; k < 2 * N_ORDERS; k++) {
    order_ctx c = {n->tensors, k / 2, peak_step};
    qsort_r(ord, (size_t)m, sizeof *ord, by_order, &c);
    size_t p = place_in_order(n->tensors, ord, m, off, k % 2);
    if (p < peak) {
      peak = p;
      memcpy(best, off, (size_t)m * sizeof *off);
      memcpy(best_ord, ord, (size_t)m * sizeof *ord);
    }
  }
  for (int a = 0; a < m; a++)
    n->tensors[best_ord[a]].offset = best[a];
  n->plan.ephemeral_bytes = m ? peak : 0;
  n->plan.ephemeral_sum_bytes = sum;
  ar_free(ord);
  ar_free(off);
  ar_free(best);
  ar_free(best_ord);
  return AR_OK;
}

/* The optimizer's state of every parameter. */
static ar_status add_optimizer(ar_net *n, ar_err *err) {
  const ar_spec *s = n->spec;
  int slots = s->train.optimizer == AR_OPT_ADAM ? 2 : s->train.momentum > 0 ? 1 : 0;
  int count = n->n_tensors;
  char tn[400];
  for (int i = 0; i < count; i++) {
    if (n->tensors[i].kind != T_PARAM)
      continue;
    for (int k = 0; k < slots; k++) {
      ntensor p = n->tensors[i];
      snprintf(tn, sizeof tn, "%s.%s", p.name,
               s->train.optimizer == AR_OPT_ADAM ? (k ? "adam_v" : "adam_m") : "velocity");
      int t = ar__net_tensor(n, tn, &p.shape, AR_DT_F32, T_OPT);
      if (t < 0)
        return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
      n->tensors[t].tr = p.tr;
      if (k == 0)
        n->tensors[i].opt1 = t;
      else
        n->tensors[i].opt2 = t;
    }
    if (slots < 2)
      n->tensors[i].opt2 = -1;
    if (slots < 1)
      n->tensors[i].opt1 = -1;
  }
  return AR_OK;
}

/* Classes, offsets and the plan's entries. */
static ar_status make_plan(ar_net *n, ar_err *err) {
  lifetimes(n);
  size_t pers = 0;
  for (int i = 0; i < n->n_tensors; i++) {
    ntensor *t = &n->tensors[i];
    bool persistent = t->kind == T_PARAM || t->kind == T_STATE || t->kind == T_OPT ||
                      t->kind == T_CONST || t->kind == T_SGRAD;
    t->cls = persistent ? AR_MEM_PERSISTENT : AR_MEM_EPHEMERAL;
    if (persistent) {
      t->offset = pers;
      if (__builtin_add_overflow(pers, align64(t->bytes ? t->bytes : 1), &pers) ||
          pers > SIZE_MAX / 4)
        return ar_errf(err, AR_RANGE, "the memory plan overflows: the persistent tensors up to "
                       "%s take more than %zu bytes; lower the widths of model.layers or the "
                       "input's size", t->name, SIZE_MAX / 4);
      if (t->kind == T_PARAM)
        n->plan.param_count += (size_t)ar_shape_count(&t->shape);
    } else if (t->first < 0) {
      t->first = t->last = 0; /* never read: a lone output (kept planned) */
    }
  }
  n->plan.persistent_bytes = pers;
  AR_CHECK(place(n, err));
  /* + staging and a sampled head's host entries (ar__net_head_host). */
  n->plan.entries = ar_calloc((size_t)n->n_tensors + 8 + 5 * (size_t)n->n_hid,
                              sizeof *n->plan.entries);
  if (!n->plan.entries)
    return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
  for (int i = 0; i < n->n_tensors; i++) {
    const ntensor *t = &n->tensors[i];
    if (t->kind == T_SHAPE)
      continue; /* holds nothing */
    ar_plan_entry *e = &n->plan.entries[n->plan.count++];
    snprintf(e->name, sizeof e->name, "%.63s", t->name);
    e->cls = t->cls;
    e->bytes = t->bytes;
    e->offset = t->offset;
    e->first_use = t->cls == AR_MEM_PERSISTENT ? 0 : t->first;
    e->last_use = t->cls == AR_MEM_PERSISTENT ? INT64_MAX : t->last;
  }
  return AR_OK;
}

/* The workspace every kernel shares (one node runs at a time): sized at
 * start, once the kernels are prepared; planned here as the largest
 * workspace of the ops, which start checks. */
static ar_status finish(ar_net *n, bool training, ar_err *err);

ar_status ar_net_build(const ar_spec *spec, int64_t batch, ar_net **out, ar_err *err) {
  *out = NULL;
  if (spec->onnx)
    return ar_net_build_onnx(spec, batch, NULL, out, err);
  if (ar_spec_reads_rows(spec))
    return ar_errf(err, AR_SPEC, "%s: error: model.input: a graph model over sparse input is "
                   "planned with its data's row bounds; this tool does not read them (a bug: "
                   "it should call ar_net_build_sparse)", spec->file ? spec->file : "<string>");
  return ar_net_build_sparse(spec, batch, 0, 0, out, err);
}

ar_status ar_net_build_sparse(const ar_spec *spec, int64_t batch, int64_t max_nnz,
                              int64_t max_labels, ar_net **out, ar_err *err) {
  *out = NULL;
  ar_net *n = ar_calloc(1, sizeof *n);
  if (!n)
    return ar_errf(err, AR_NOMEM, "out of memory building the graph");
  n->spec = spec;
  n->batch = batch;
  n->rows = batch;
  n->sx[SX_PTR] = -1;
  n->xd = n->head_from = -1;
  n->x = n->y = -1; /* sparse input: n->sx instead */
  n->max_nnz = max_nnz > 0 ? max_nnz : 1;
  n->max_labels = max_labels > 0 ? max_labels : 1;
  n->head = -1;
  n->seed = spec->seed;
  n->threads = ar_job_threads(spec);
  build_ctx b = {n, err, NULL, 0, 0};
  ar_status st = build_graph(&b);
  ar_free(b.names);
  return ar__net_done(n, st, true, out, err);
}

ar_status ar__net_done(ar_net *n, ar_status st, bool training, ar_net **out, ar_err *err) {
  if (st == AR_OK)
    st = finish(n, training, err);
  if (st != AR_OK && n->too_big[0]) /* the builder saw -1: say which and why */
    st = ar_errf(err, AR_RANGE, "the memory plan overflows: %s, more than 2^48 elements (a "
                 "tensor no device holds); lower the widths of model.layers, the input's "
                 "size or train.batch", n->too_big);
  if (st != AR_OK) {
    ar_net_destroy(n);
    return st;
  }
  *out = n;
  return AR_OK;
}

static ar_status finish(ar_net *n, bool training, ar_err *err) {
  ar_status st = ar__net_fuse(n, err);
  if (st == AR_OK)
    st = ar__net_sparse_check(n, training, err);
  if (st == AR_OK && training)
    st = add_grads(n, err);
  if (st == AR_OK && training)
    st = add_optimizer(n, err);
  if (st == AR_OK && training)
    st = ar__net_head_plan(n, err);
  else if (st == AR_OK)
    n->head = -1; /* an inference graph scores every class */
  if (st == AR_OK && training)
    st = ar__net_hid_plan(n, err); /* (and every neuron of a hidden sampled item) */
  if (st == AR_OK)
    st = ar__net_order(n, err);
  if (st == AR_OK)
    st = ar__net_workspace(n, err);
  if (st == AR_OK && training)
    st = ar__net_remat(n, err);
  if (st == AR_OK)
    st = make_plan(n, err);
  if (st == AR_OK) {
    n->plan.host_bytes = n->staging_bytes;
    if (n->staging_bytes) {
      ar_plan_entry *e = &n->plan.entries[n->plan.count++];
      snprintf(e->name, sizeof e->name, "batch.staging");
      e->cls = AR_MEM_HOST;
      e->bytes = n->staging_bytes;
      e->last_use = INT64_MAX;
    }
    st = ar__net_head_host(n, err);
    if (st == AR_OK)
      st = ar__net_hid_host(n, err);
    if (st == AR_OK &&
        (__builtin_add_overflow(n->plan.persistent_bytes, n->plan.ephemeral_bytes,
                                &n->plan.total_bytes) ||
         __builtin_add_overflow(n->plan.total_bytes, n->plan.host_bytes, &n->plan.total_bytes)))
      st = ar_errf(err, AR_RANGE, "the memory plan overflows: %zu persistent, %zu ephemeral and "
                   "%zu host bytes; lower the widths of model.layers, the input's size or "
                   "train.batch", n->plan.persistent_bytes, n->plan.ephemeral_bytes,
                   n->plan.host_bytes);
  }
  return st;
}

const ar_plan *ar_net_plan(const ar_net *n) { return &n->plan; }
int64_t ar_net_classes(const ar_net *n) { return n->classes; }
const ar_shape *ar_net_input_shape(const ar_net *n) { return &n->tensors[n->x].shape; }
ar_dtype ar_net_input_dtype(const ar_net *n) { return n->tensors[n->x].dtype; }

void ar_net_print(const ar_net *n, FILE *to) {
  fprintf(to, "graph model: %d nodes, %zu parameters, %.3g GFLOP per batch forward\n",
          n->n_nodes, n->plan.param_count, n->flops / 1e9);
  fprintf(to, "  %-28s %-14s %-18s %12s %12s\n", "node", "op", "output", "params", "MFLOP");
  for (int i = 0; i < n->n_nodes; i++) {
    const nnode *d = &n->nodes[i];
    char sh[64];
    int64_t params = 0;
    for (int k = 0; k < d->sig.n_param; k++)
      params += ar_shape_count(&d->sig.param[k]);
    char op[32]; /* a fused relu shows as conv+relu */
    snprintf(op, sizeof op, "%s%s", ar_nn_op_name(d->op),
             d->attr.act == AR_ACT_RELU && d->op != AR_NN_DENSE &&
                 d->op != AR_NN_SPARSE_DENSE
             ? "+relu" : "");
    fprintf(to, "  %-28s %-14s %-18s %12" PRId64 " %12.2f\n", d->name, op,
            ar_shape_str(&n->tensors[d->out[0]].shape, sh, sizeof sh), params,
            d->sig.flops / 1e6);
  }
  ar__net_order_print(n, to);
  ar__net_fuse_print(n, to);
}

void ar_net_destroy(ar_net *n) {
  if (!n)
    return;
  ar__net_stop(n);
  ar__net_fuse_free(n);
  for (int i = 0; i < n->n_tensors; i++)
    ar_free(n->tensors[i].init_data);
  ar_free(n->nodes);
  ar_free(n->order);
  ar_free(n->fstep);
  ar_free(n->hid);
  ar_free(n->tensors);
  ar_free(n->inputs);
  ar_free(n->outputs);
  ar_plan_fini(&n->plan);
  ar_free(n);
}
