/* Graph models built by a program (include/accelrt/net.h, "graphs built
 * by a program"): the net of an ar_nn_graph, planned like a job file's
 * model, and its forward on given inputs (inference).  Kept apart from
 * net_run.c: only the node loop of the forward is its own here (it honours
 * each node's mode), the rest is the engine's. */
#include "net_impl.h"

#include <stdio.h>
#include <string.h>

static ar_status nomem(ar_err *err) {
  return ar_errf(err, AR_NOMEM, "out of memory building the graph");
}

/* The net's tensor for each of the graph's non-VALUE tensors (map[i]),
 * with the values the graph gives copied. */
static ar_status add_tensors(ar_net *n, const ar_nn_graph *g, int *map, ar_err *err) {
  static const int kinds[] = {[AR_NN_T_INPUT] = T_INPUT,
                              [AR_NN_T_CONST] = T_CONST,
                              [AR_NN_T_PARAM] = T_PARAM,
                              [AR_NN_T_STATE] = T_STATE};
  for (int i = 0; i < g->n_tensors; i++) {
    const ar_nn_gtensor *x = &g->tensors[i];
    map[i] = -1;
    if (x->kind == AR_NN_T_VALUE)
      continue;
    int t = ar__net_tensor(n, x->name, &x->shape, x->dtype, kinds[x->kind]);
    if (t < 0)
      return nomem(err);
    ntensor *nt = &n->tensors[t];
    nt->init = x->init;
    nt->std = x->std;
    nt->decay = x->decay && x->shape.nd > 1;
    nt->tr = x->transposed && x->shape.nd == 2;
    if (x->data) {
      nt->init_data = ar_malloc(nt->bytes);
      if (!nt->init_data)
        return nomem(err);
      memcpy(nt->init_data, x->data, nt->bytes);
    }
    map[i] = t;
  }
  return AR_OK;
}

/* The net's node for graph node d; its outputs and aux get tensors. */
static ar_status add_node(ar_net *n, const ar_nn_graph *g, const ar_nn_gnode *d, int id, int *map,
                          ar_err *err) {
  nnode *x = ar__net_new_node(n);
  if (!x)
    return nomem(err);
  snprintf(x->name, sizeof x->name, "%s", d->name);
  snprintf(x->path, sizeof x->path, "node '%.180s'", d->name);
  x->op = d->op;
  x->attr = d->attr;
  x->sig = d->sig;
  x->mode = d->mode;
  x->n_in = d->n_in;
  for (int k = 0; k < d->n_in; k++)
    x->in[k] = map[d->in[k]];
  for (int k = 0; k < d->sig.n_param; k++)
    x->param[k] = map[d->param[k]];
  for (int k = 0; k < d->sig.n_state; k++)
    x->state[k] = map[d->state[k]];
  for (int k = 0; k < d->sig.n_out; k++) {
    const ar_nn_gtensor *o = &g->tensors[d->out[k]];
    int t = ar__net_tensor(n, o->name, &o->shape, o->dtype, T_ACT);
    if (t < 0)
      return nomem(err);
    n->tensors[t].producer = id;
    map[d->out[k]] = t;
    n->nodes[id].out[k] = t; /* x may have moved: new tensors do not move nodes */
  }
  char tn[400];
  for (int k = 0; k < d->sig.n_aux; k++) {
    snprintf(tn, sizeof tn, "%.300s.aux%d", d->name, k);
    int t = ar__net_tensor(n, tn, &d->sig.aux[k], d->sig.aux_dtype[k], T_AUX);
    if (t < 0)
      return nomem(err);
    n->tensors[t].producer = id;
    n->nodes[id].aux[k] = t;
  }
  n->flops += d->sig.flops;
  return AR_OK;
}

static ar_status build(ar_net *n, const ar_nn_graph *g, ar_err *err) {
  int *map = ar_malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *map);
  n->inputs = ar_malloc((size_t)(g->n_inputs ? g->n_inputs : 1) * sizeof *n->inputs);
  n->outputs = ar_malloc((size_t)(g->n_outputs ? g->n_outputs : 1) * sizeof *n->outputs);
  if (!map || !n->inputs || !n->outputs) {
    ar_free(map);
    return nomem(err);
  }
  ar_status st = add_tensors(n, g, map, err);
  for (int i = 0; i < g->n_nodes && st == AR_OK; i++)
    st = add_node(n, g, &g->nodes[i], i, map, err);
  for (int i = 0; i < g->n_inputs && st == AR_OK; i++)
    n->inputs[n->n_inputs++] = map[g->inputs[i]];
  for (int i = 0; i < g->n_outputs && st == AR_OK; i++) {
    int t = map[g->outputs[i]];
    n->tensors[t].keep = true;
    n->outputs[n->n_outputs++] = t;
  }
  ar_free(map);
  return st;
}

ar_status ar_net_build_graph(const ar_nn_graph *g, const ar_net_graph_opts *opts, ar_net **out,
                             ar_err *err) {
  *out = NULL;
  if (!g)
    return ar_errf(err, AR_INVALID, "ar_net_build_graph: no graph");
  ar_net_graph_opts o = AR_NET_GRAPH_OPTS_INIT;
  if (opts)
    o = *opts;
  ar_net *n = ar_calloc(1, sizeof *n);
  if (!n)
    return nomem(err);
  n->batch = 1;
  n->x = n->y = n->logits = n->loss = n->head = -1;
  n->sx[SX_PTR] = -1; /* not sparse input */
  n->xd = n->head_from = -1;
  n->seed = o.seed;
  n->threads = o.threads > 0 ? o.threads : 1;
  return ar__net_done(n, build(n, g, err), false, out, err);
}

/* The labels and the loss node: XENT of the logits against y (class
 * ids), or BCE against y (batch, classes) of targets (model.loss
 * sigmoid_bce). */
static ar_status add_loss(ar_net *n, bool bce, ar_err *err) {
  ar_shape ys = {1, {n->batch}};
  if (bce)
    ys = n->tensors[n->logits].shape;
  const ar_dtype yt = bce ? AR_DT_F32 : AR_DT_I64;
  n->y = ar__net_tensor(n, "batch.y", &ys, yt, T_INPUT);
  nnode *d = n->y >= 0 ? ar__net_new_node(n) : NULL;
  if (!d)
    return nomem(err);
  const int id = n->n_nodes - 1;
  snprintf(d->name, sizeof d->name, "loss");
  snprintf(d->path, sizeof d->path, "model");
  d->op = bce ? AR_NN_BCE : AR_NN_XENT;
  ar_nn_attr_defaults(&d->attr);
  d->n_in = 2;
  d->in[0] = n->logits;
  d->in[1] = n->y;
  ar_shape in[2] = {n->tensors[n->logits].shape, ys};
  ar_dtype dt[2] = {AR_DT_F32, yt};
  AR_CHECK(ar_nn_infer(d->op, &d->attr, 2, in, dt, &d->sig, err));
  n->loss = ar__net_tensor(n, "loss", &d->sig.out[0], AR_DT_F32, T_ACT);
  if (n->loss < 0)
    return nomem(err);
  n->nodes[id].out[0] = n->loss;
  n->tensors[n->loss].producer = id;
  for (int k = 0; k < d->sig.n_aux; k++) {
    char name[32];
    snprintf(name, sizeof name, "loss.aux%d", k);
    int aux = ar__net_tensor(n, name, &d->sig.aux[k], d->sig.aux_dtype[k], T_AUX);
    if (aux < 0)
      return nomem(err);
    n->nodes[id].aux[k] = aux;
    n->tensors[aux].producer = id;
  }
  return AR_OK;
}

ar_status ar_net_build_graph_train(const ar_nn_graph *g, const ar_spec *spec, ar_net **out,
                                   ar_err *err) {
  *out = NULL;
  const char *file = spec->file ? spec->file : "<string>";
  if (g->n_inputs != 1 || g->n_outputs != 1)
    return ar_errf(err, AR_SPEC,
                   "%s: error: model: a trained model has one input (the batch) and one output "
                   "(the logits); this one has %d and %d",
                   file, g->n_inputs, g->n_outputs);
  const ar_nn_gtensor *x = &g->tensors[g->inputs[0]], *lg = &g->tensors[g->outputs[0]];
  if (x->shape.nd < 1 || lg->shape.nd != 2 || lg->dtype != AR_DT_F32 ||
      lg->shape.d[0] != x->shape.d[0] || lg->kind != AR_NN_T_VALUE) {
    char a[64], b[64];
    return ar_errf(err, AR_SPEC,
                   "%s: error: model: the output is %s %s for an input of %s; a trained model's "
                   "output is computed from its input as f32 logits (batch, classes)",
                   file, ar_shape_str(&lg->shape, a, sizeof a), ar_dtype_name(lg->dtype),
                   ar_shape_str(&x->shape, b, sizeof b));
  }
  ar_net *n = ar_calloc(1, sizeof *n);
  if (!n)
    return nomem(err);
  n->spec = spec;
  n->batch = x->shape.d[0];
  n->x = n->y = n->logits = n->loss = n->head = -1;
  n->sx[SX_PTR] = -1; /* not sparse input */
  n->xd = n->head_from = -1;
  n->seed = spec->seed;
  n->threads = ar_job_threads(spec);
  ar_status st = build(n, g, err);
  if (st == AR_OK) {
    n->x = n->inputs[0];
    n->logits = n->outputs[0];
    n->tensors[n->logits].keep = false; /* the loss reads it; eval reads it in the forward */
    n->classes = lg->shape.d[1];
    n->n_inputs = n->n_outputs = 0; /* trained through ar_net_x / ar_net_y, not infer */
    st = add_loss(n, spec->bce, err);
  }
  if (st == AR_OK)
    st = ar__net_head_onnx(n, err);
  return ar__net_done(n, st, true, out, err);
}

ar_status ar_net_infer(ar_net *n, const void *const *in, void *const *out, ar_err *err) {
  if (!n || n->spec || !n->started || n->loss >= 0)
    return ar_errf(err, AR_STATE,
                   "ar_net_infer: the net was not built from a graph, or not "
                   "started (ar_net_start)");
  for (int i = 0; i < n->n_inputs; i++) {
    const ntensor *t = &n->tensors[n->inputs[i]];
    if (ar_device_copy_in(n->dev, t->p, in[i], t->bytes) != AR_OK)
      return ar_errf(err, ar_device_status(n->dev), "copying input '%s': %s", t->name,
                     ar_device_errmsg(n->dev));
  }
  for (int i = 0; i < n->n_nodes; i++) {
    nnode *d = &n->nodes[i];
    const bool train = d->mode == AR_NN_MODE_TRAIN;
    d->args.training = train;
    d->args.seed = n->seed ^ ((uint64_t)n->step * 0x9e3779b97f4a7c15ull) ^ (uint64_t)i;
    ar_device_nn_forward(n->dev, train ? d->ptrain : d->peval, &d->args);
  }
  n->step++;
  for (int i = 0; i < n->n_outputs; i++) {
    const ntensor *t = &n->tensors[n->outputs[i]];
    if (ar_device_copy_out(n->dev, out[i], t->p, t->bytes) != AR_OK)
      break;
  }
  ar_status st = ar_device_status(n->dev);
  if (st != AR_OK)
    return ar_errf(err, st, "%s", ar_device_errmsg(n->dev));
  return AR_OK;
}
