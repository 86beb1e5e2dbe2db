/* accelrt export of a chain model (graph.h's ar_model: dense layers, the
 * first maybe fed by the sparse input, any maybe LSH-sampled): each layer
 * is a `dense` node of an nn graph (Gemm in ONNX), its weight (out, in) as
 * PyTorch's Linear keeps it (a layer behind the sparse input stores it
 * (in, out) and is transposed here), the input a dense (batch, features)
 * f32 tensor (the sparse rows written out), a sampled layer computed in
 * full.  The output is the logits (the softmax is the loss's). */
#include "engine_impl.h"
#include "accelrt/net.h"
#include "accelrt/onnx.h"

#include <stdio.h>
#include <string.h>

/* Layer l's weight (out, in) and bias from the device (values), or NULL
 * for zeros. */
static ar_status layer_values(const ar_model *m, int l, float **w, float **b, ar_err *err) {
  const ar_layer *L = &m->layers[l];
  size_t nw = (size_t)(L->in * L->out);
  float *raw = ar_malloc(nw * sizeof *raw);
  *w = ar_malloc(nw * sizeof **w);
  *b = ar_malloc((size_t)L->out * sizeof **b);
  ar_status st = raw && *w && *b ? AR_OK : ar_errf(err, AR_NOMEM, "out of memory");
  if (st == AR_OK)
    st = ar_device_copy_out(m->dev, raw, L->w, nw * sizeof *raw);
  if (st == AR_OK)
    st = ar_device_copy_out(m->dev, *b, L->b, (size_t)L->out * sizeof **b);
  if (st == AR_OK && L->sparse_in) /* (in, out) -> (out, in) */
    for (int64_t i = 0; i < L->in; i++)
      for (int64_t o = 0; o < L->out; o++)
        (*w)[o * L->in + i] = raw[i * L->out + o];
  else if (st == AR_OK)
    memcpy(*w, raw, nw * sizeof *raw);
  ar_free(raw);
  return st == AR_OK || st == AR_NOMEM ? st : ar_errf(err, st, "reading layer %d", l);
}

static ar_status add_layer(const ar_model *m, int l, bool values, ar_nn_graph *g, int *x,
                           ar_err *err) {
  const ar_layer *L = &m->layers[l];
  float *w = NULL, *b = NULL;
  ar_status st = values ? layer_values(m, l, &w, &b, err) : AR_OK;
  char name[200];
  ar_shape ws = {2, {L->out, L->in}}, bs = {1, {L->out}};
  int p[2] = {-1, -1}, out[AR_NN_MAX_IO];
  snprintf(name, sizeof name, "%s.w", L->name);
  if (st == AR_OK)
    st = ar_nn_graph_tensor(g, name, AR_NN_T_PARAM, &ws, AR_DT_F32, w, &p[0], err);
  snprintf(name, sizeof name, "%s.b", L->name);
  if (st == AR_OK)
    st = ar_nn_graph_tensor(g, name, AR_NN_T_PARAM, &bs, AR_DT_F32, b, &p[1], err);
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.out = L->out;
  a.act = L->act == AR_ACT_SOFTMAX ? AR_ACT_NONE : L->act; /* the loss's softmax */
  if (st == AR_OK)
    st = ar_nn_graph_node(g, L->name, AR_NN_DENSE, &a, 1, x, p, NULL, AR_NN_MODE_RUN, out, err);
  *x = out[0];
  ar_free(w);
  ar_free(b);
  return st;
}

ar_status ar__chain_graph(const ar_model *m, int64_t batch, bool values, ar_nn_graph **out,
                          ar_err *err) {
  ar_nn_graph *g = NULL;
  ar_shape xs = {2, {batch, m->layers[0].in}};
  int x = -1;
  ar_status st = ar_nn_graph_create(&g, err);
  if (st == AR_OK)
    st = ar_nn_graph_tensor(g, "x", AR_NN_T_INPUT, &xs, AR_DT_F32, NULL, &x, err);
  for (int l = 0; st == AR_OK && l < m->n_layers; l++)
    st = add_layer(m, l, values, g, &x, err);
  if (st == AR_OK)
    st = ar_nn_graph_output(g, x, err);
  if (st != AR_OK) {
    ar_nn_graph_destroy(g);
    return st;
  }
  *out = g;
  return AR_OK;
}
