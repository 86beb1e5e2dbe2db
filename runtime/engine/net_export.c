/* A trained graph model's inference graph (net.h: ar_net_graph): the net's
 * nodes up to the logits as an ar_nn_graph, its tensors with the values the
 * net holds, for the ONNX exporter (onnx.h: ar_onnx_export). */
#include "net_impl.h"

#include <string.h>

typedef struct gctx {
  const ar_net *n;
  ar_nn_graph *g;
  int *map; /* (n->n_tensors) the graph tensor of each net tensor, or -1 */
  bool values;
  ar_err *err;
} gctx;

static const ar_nn_tkind kind_of[] = {
    [T_INPUT] = AR_NN_T_INPUT, [T_PARAM] = AR_NN_T_PARAM, [T_STATE] = AR_NN_T_STATE,
    [T_CONST] = AR_NN_T_CONST};

/* The graph tensor of net tensor t, made on first use (an input, or a
 * constant, parameter or state with its values). */
static ar_status tensor_of(gctx *c, int t, int *out) {
  if (c->map[t] >= 0) {
    *out = c->map[t];
    return AR_OK;
  }
  const ntensor *x = &c->n->tensors[t];
  if (x->kind != T_INPUT && x->kind != T_PARAM && x->kind != T_STATE && x->kind != T_CONST)
    return ar_errf(c->err, AR_INVALID, "tensor '%s' is read before a node makes it", x->name);
  size_t bytes = (size_t)ar_shape_count(&x->shape) * ar_dtype_size(x->dtype);
  void *data = NULL;
  if (x->kind != T_INPUT && c->values && c->n->started) {
    data = ar_malloc(bytes ? bytes : 1);
    if (!data)
      return ar_errf(c->err, AR_NOMEM, "out of memory reading '%s'", x->name);
    ar_status st = ar_device_copy_out(c->n->dev, data, x->p, bytes);
    if (st != AR_OK) {
      ar_free(data);
      return ar_errf(c->err, st, "reading '%s': %s", x->name, ar_device_errmsg(c->n->dev));
    }
  }
  const void *src = data ? data : x->init_data;
  ar_status st = ar_nn_graph_tensor(c->g, x->name, kind_of[x->kind], &x->shape, x->dtype,
                                    x->kind == T_INPUT ? NULL : src, &c->map[t], c->err);
  ar_free(data);
  if (st == AR_OK)
    c->g->tensors[c->map[t]].transposed = x->tr && x->kind == T_PARAM;
  *out = c->map[t];
  return st;
}

static ar_status add_node(gctx *c, const nnode *d) {
  int in[AR_NN_MAX_IO], params[AR_NN_MAX_IO], states[AR_NN_MAX_IO], outs[AR_NN_MAX_IO];
  for (int i = 0; i < d->n_in; i++)
    AR_CHECK(tensor_of(c, d->in[i], &in[i]));
  for (int k = 0; k < d->sig.n_param; k++)
    AR_CHECK(tensor_of(c, d->param[k], &params[k]));
  for (int k = 0; k < d->sig.n_state; k++)
    AR_CHECK(tensor_of(c, d->state[k], &states[k]));
  AR_CHECK(ar_nn_graph_node(c->g, d->name, d->op, &d->attr, d->n_in, in, params, states,
                            AR_NN_MODE_RUN, outs, c->err));
  for (int k = 0; k < d->sig.n_out; k++)
    c->map[d->out[k]] = outs[k];
  return AR_OK;
}

static ar_status build(gctx *c) {
  const ar_net *n = c->n;
  for (int i = 0; i < n->n_nodes; i++)
    if (n->nodes[i].op != AR_NN_XENT && n->nodes[i].op != AR_NN_BCE) /* the losses */
      AR_CHECK(add_node(c, &n->nodes[i]));
  int in, lg = c->map[n->logits];
  AR_CHECK(tensor_of(c, n->x, &in)); /* an input no node reads is still the input */
  if (lg < 0)
    return ar_errf(c->err, AR_INVALID, "the logits are not computed by the model's nodes");
  return ar_nn_graph_output(c->g, lg, c->err);
}

ar_status ar_net_graph(const ar_net *n, bool values, ar_nn_graph **out, ar_err *err) {
  *out = NULL;
  if (!n->spec || n->x < 0 || n->logits < 0)
    return ar_errf(err, AR_UNSUPPORTED, "only a trained graph model has an inference graph");
  gctx c = {n, NULL, ar_malloc((size_t)(n->n_tensors + 1) * sizeof(int)), values, err};
  if (!c.map)
    return ar_errf(err, AR_NOMEM, "out of memory");
  for (int t = 0; t < n->n_tensors; t++)
    c.map[t] = -1;
  ar_status st = ar_nn_graph_create(&c.g, err);
  if (st == AR_OK)
    st = build(&c);
  ar_free(c.map);
  if (st != AR_OK) {
    ar_nn_graph_destroy(c.g);
    return st;
  }
  *out = c.g;
  return AR_OK;
}
