/*
 * Graphs of nn ops built by a program (include/accelrt/nn.h, "graphs built
 * by a program"): tensors, nodes whose shapes are inferred as they are
 * added, parameter and state slots bound to given tensors or made by the
 * op's rule, and the outputs.  The graph engine (runtime/engine/
 * net_graph.c) makes a net of it.
 */
#include "nn_impl.h"

#include <stdio.h>
#include <string.h>

/* Room for one more of an array of `size`-byte items. */
static bool grow(void **arr, int *cap, int n, size_t size) {
  if (n < *cap)
    return true;
  int c = *cap ? 2 * *cap : 16;
  void *p = ar_realloc(*arr, (size_t)c * size);
  if (!p)
    return false;
  *arr = p;
  *cap = c;
  return true;
}

ar_status ar_nn_graph_create(ar_nn_graph **out, ar_err *err) {
  *out = ar_calloc(1, sizeof **out);
  return *out ? AR_OK : ar_errf(err, AR_NOMEM, "out of memory making a graph");
}

void ar_nn_graph_destroy(ar_nn_graph *g) {
  if (!g)
    return;
  for (int i = 0; i < g->n_tensors; i++) {
    ar_free(g->tensors[i].name);
    ar_free(g->tensors[i].data);
  }
  for (int i = 0; i < g->n_nodes; i++)
    ar_free(g->nodes[i].name);
  ar_free(g->tensors);
  ar_free(g->nodes);
  ar_free(g->inputs);
  ar_free(g->outputs);
  ar_free(g);
}

/* The most elements a graph's tensor may have (2^40): far past any plan a
 * device holds, and far from where counts and bytes overflow. */
#define MAX_ELEMENTS ((uint64_t)1 << 40)

/* A new tensor; data copied (count elements) when given, else zeros for
 * a constant, parameter or state tensor. */
static ar_status new_tensor(ar_nn_graph *g, const char *name, ar_nn_tkind kind, const ar_shape *s,
                            ar_dtype t, const void *data, int *out, ar_err *err) {
  /* Zeros skipped: an empty tensor's other dims are held to the bound too
   * (they are multiplied together by shape arithmetic later). */
  uint64_t count = 1;
  for (int k = 0; k < s->nd; k++) {
    if (s->d[k] < 0 || (s->d[k] && count > MAX_ELEMENTS / (uint64_t)s->d[k])) {
      char b[64];
      return ar_errf(err, AR_RANGE, "tensor '%s' would be %s: more than 2^40 elements",
                     name ? name : "?", ar_shape_str(s, b, sizeof b));
    }
    if (s->d[k])
      count *= (uint64_t)s->d[k];
  }
  if (!grow((void **)&g->tensors, &g->cap_tensors, g->n_tensors, sizeof *g->tensors))
    return ar_errf(err, AR_NOMEM, "out of memory adding tensor '%s'", name);
  ar_nn_gtensor *x = &g->tensors[g->n_tensors];
  memset(x, 0, sizeof *x);
  x->name = ar_strdup(name ? name : "");
  if (!x->name)
    return ar_errf(err, AR_NOMEM, "out of memory adding tensor '%s'", name);
  x->shape = *s;
  x->dtype = t;
  x->kind = kind;
  x->producer = -1;
  x->decay = true;
  size_t bytes = (size_t)ar_shape_count(s) * ar_dtype_size(t);
  if (kind == AR_NN_T_CONST || ((kind == AR_NN_T_PARAM || kind == AR_NN_T_STATE) && data)) {
    x->data = ar_calloc(bytes ? bytes : 1, 1);
    if (!x->data) {
      ar_free(x->name);
      return ar_errf(err, AR_NOMEM, "out of memory for the %zu bytes of tensor '%s'", bytes, name);
    }
    if (data && bytes)
      memcpy(x->data, data, bytes);
  }
  *out = g->n_tensors++;
  return AR_OK;
}

ar_status ar_nn_graph_tensor(ar_nn_graph *g, const char *name, ar_nn_tkind kind, const ar_shape *s,
                             ar_dtype t, const void *data, int *out, ar_err *err) {
  if (!g || !s || !out || kind == AR_NN_T_VALUE || (unsigned)kind > AR_NN_T_VALUE || s->nd < 0 ||
      s->nd > AR_NN_MAX_DIMS)
    return ar_errf(err, AR_INVALID, "ar_nn_graph_tensor: bad arguments for '%s'",
                   name ? name : "?");
  for (int i = 0; i < s->nd; i++)
    if (s->d[i] < 0)
      return ar_errf(err, AR_INVALID, "tensor '%s': dim %d is %lld", name ? name : "?", i,
                     (long long)s->d[i]);
  if ((kind == AR_NN_T_PARAM || kind == AR_NN_T_STATE) && t != AR_DT_F32)
    return ar_errf(err, AR_INVALID, "tensor '%s': parameters and state are f32, not %s",
                   name ? name : "?", ar_dtype_name(t));
  if (kind == AR_NN_T_INPUT &&
      !grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs, sizeof *g->inputs))
    return ar_errf(err, AR_NOMEM, "out of memory adding input '%s'", name);
  AR_CHECK(new_tensor(g, name, kind, s, t, data, out, err));
  if (kind == AR_NN_T_INPUT)
    g->inputs[g->n_inputs++] = *out;
  return AR_OK;
}

/* Binds slot `slot` (named `sname`) of node `nm` to tensor `t`, which must
 * hold as many f32 elements as `want`. */
static ar_status check_binding(const ar_nn_graph *g, const char *nm, const char *sname, int t,
                               const ar_shape *want, ar_err *err) {
  if (t < 0 || t >= g->n_tensors)
    return ar_errf(err, AR_INVALID, "node '%s': %s is bound to tensor %d, which does not exist", nm,
                   sname, t);
  const ar_nn_gtensor *x = &g->tensors[t];
  if (x->dtype != AR_DT_F32 || ar_shape_count(&x->shape) != ar_shape_count(want)) {
    char a[64], b[64];
    return ar_errf(err, AR_INVALID, "node '%s': its %s is %s, but '%s' is %s %s", nm, sname,
                   ar_shape_str(want, a, sizeof a), x->name, ar_shape_str(&x->shape, b, sizeof b),
                   ar_dtype_name(x->dtype));
  }
  return AR_OK;
}

/* The tensor of a slot: bound (b >= 0) or made by the op's rule. */
static ar_status slot_tensor(ar_nn_graph *g, const char *nm, bool state, int i,
                             const ar_nn_sig *sig, int b, int *out, ar_err *err) {
  const char *sname = state ? sig->state_name[i] : sig->param_name[i];
  const ar_shape *want = state ? &sig->state[i] : &sig->param[i];
  if (b >= 0) {
    AR_CHECK(check_binding(g, nm, sname, b, want, err));
    *out = b;
    return AR_OK;
  }
  char tn[400];
  snprintf(tn, sizeof tn, "%.300s.%s", nm, sname);
  AR_CHECK(
      new_tensor(g, tn, state ? AR_NN_T_STATE : AR_NN_T_PARAM, want, AR_DT_F32, NULL, out, err));
  ar_nn_gtensor *x = &g->tensors[*out];
  x->init = state ? sig->state_init[i] : sig->param_init[i];
  x->std = state ? 1.0f : sig->param_std[i];
  x->decay = !state && sig->param_decay[i];
  return AR_OK;
}

ar_status ar_nn_graph_node(ar_nn_graph *g, const char *name, ar_nn_op op, const ar_nn_attr *attr,
                           int n_in, const int *in, const int *params, const int *states,
                           ar_nn_mode mode, int *out, ar_err *err) {
  const char *nm = name ? name : "?";
  if (!g || !attr || !out || n_in < 0 || n_in > AR_NN_MAX_IO || (n_in && !in) ||
      (unsigned)op >= AR_NN_OP_COUNT)
    return ar_errf(err, AR_INVALID, "ar_nn_graph_node: bad arguments for '%s'", nm);
  ar_shape shapes[AR_NN_MAX_IO];
  ar_dtype types[AR_NN_MAX_IO];
  for (int i = 0; i < n_in; i++) {
    if (in[i] < 0 || in[i] >= g->n_tensors)
      return ar_errf(err, AR_INVALID, "node '%s': input %d is tensor %d, which does not exist", nm,
                     i, in[i]);
    shapes[i] = g->tensors[in[i]].shape;
    types[i] = g->tensors[in[i]].dtype;
  }
  ar_nn_sig sig;
  ar_err e = AR_ERR_INIT;
  ar_status st = ar_nn_infer(op, attr, n_in, shapes, types, &sig, &e);
  if (st != AR_OK)
    return ar_errf(err, st, "node '%s' (%s): %s", nm, ar_nn_op_name(op), e.msg);
  if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes, sizeof *g->nodes))
    return ar_errf(err, AR_NOMEM, "out of memory adding node '%s'", nm);
  int id = g->n_nodes;
  ar_nn_gnode d;
  memset(&d, 0, sizeof d);
  d.op = op;
  d.attr = *attr;
  d.sig = sig;
  d.mode = mode;
  d.n_in = n_in;
  for (int i = 0; i < n_in; i++)
    d.in[i] = in[i];
  for (int i = 0; i < sig.n_param; i++)
    AR_CHECK(slot_tensor(g, nm, false, i, &sig, params ? params[i] : -1, &d.param[i], err));
  for (int i = 0; i < sig.n_state; i++)
    AR_CHECK(slot_tensor(g, nm, true, i, &sig, states ? states[i] : -1, &d.state[i], err));
  for (int i = 0; i < sig.n_out; i++) {
    char tn[400];
    snprintf(tn, sizeof tn, sig.n_out > 1 ? "%.300s.out%d" : "%.300s", nm, i);
    AR_CHECK(new_tensor(g, tn, AR_NN_T_VALUE, &sig.out[i], sig.out_dtype[i], NULL, &d.out[i], err));
    g->tensors[d.out[i]].producer = id;
    out[i] = d.out[i];
  }
  d.name = ar_strdup(nm);
  if (!d.name)
    return ar_errf(err, AR_NOMEM, "out of memory adding node '%s'", nm);
  g->nodes[g->n_nodes++] = d;
  return AR_OK;
}

ar_status ar_nn_graph_output(ar_nn_graph *g, int t, ar_err *err) {
  if (!g || t < 0 || t >= g->n_tensors)
    return ar_errf(err, AR_INVALID, "ar_nn_graph_output: tensor %d does not exist", t);
  if (!grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs, sizeof *g->outputs))
    return ar_errf(err, AR_NOMEM, "out of memory marking an output");
  g->outputs[g->n_outputs++] = t;
  return AR_OK;
}
