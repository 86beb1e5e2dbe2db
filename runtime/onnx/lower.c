/*
 * Lowering an ONNX model to nn ops (include/accelrt/onnx.h): the walk over
 * the nodes in file order.  Each value is either constant for the input
 * shapes (initializers, Constant nodes, Shape of a static shape, empty
 * tensors, and whatever fold.c computes from those) or a tensor of the
 * graph being built; a node whose inputs are all constant is folded, any
 * other is lowered by lower_ops.c.  Constants reach the graph only where
 * an nn op reads them (as constants, or as parameters when the net will
 * train).  The helpers lower_ops.c builds with are here too.
 */
#include "onnx_impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

ar_status ar__onnx_fail(ar__onnx_lower *L, ar_status st, const char *fmt, ...) {
  char msg[AR_ERR_MAX / 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ar_errf(L->err, st, "%s: %s", L->where, msg);
}

/* A new value named name (the array never moves: its room is reserved
 * for every value of the model up front). */
static ar_status new_val(ar__onnx_lower *L, const char *name, ar__onnx_val **out) {
  AR_ASSERT(L->n_vals < L->cap_vals);
  ar__onnx_val *v = &L->vals[L->n_vals];
  memset(v, 0, sizeof *v);
  v->name = name;
  v->t = -1;
  if (ar__onnx_map_put(&L->val_of, name, L->n_vals) != AR_OK)
    return ar_errf(L->err, AR_NOMEM, "out of memory lowering the model");
  L->n_vals++;
  *out = v;
  return AR_OK;
}

ar_status ar__onnx_tensor_of(ar__onnx_lower *L, ar__onnx_val *v, int *out) {
  if (v->t < 0) {
    AR_ASSERT(v->c);
    const bool param = L->o->training && v->init && v->c->dtype == AR_DT_F32;
    AR_CHECK(ar_nn_graph_tensor(L->g, v->name, param ? AR_NN_T_PARAM : AR_NN_T_CONST, &v->shape,
                                v->dtype, v->c->data, &v->t, L->err));
  }
  *out = v->t;
  return AR_OK;
}

const char *ar__onnx_out_base(const ar__onnx_lower *L) {
  const Onnx__NodeProto *n = L->node;
  if (n->n_output && n->output[0] && *n->output[0])
    return n->output[0];
  return n->name && *n->name ? n->name : n->op_type;
}

ar_status ar__onnx_emit(ar__onnx_lower *L, const char *part, ar_nn_op op, const ar_nn_attr *a,
                        int n_in, const int *in, const int *params, const int *states,
                        ar_nn_mode mode, int *out) {
  const Onnx__NodeProto *n = L->node;
  char name[400];
  const char *base = n->name && *n->name ? n->name : ar__onnx_out_base(L);
  if (part)
    snprintf(name, sizeof name, "%.300s/%.60s%d", base, part, L->helpers++);
  else
    snprintf(name, sizeof name, "%.300s", base);
  ar_err e = AR_ERR_INIT;
  ar_status st = ar_nn_graph_node(L->g, name, op, a, n_in, in, params, states, mode, out, &e);
  if (st != AR_OK)
    return ar_errf(L->err, st, "%s: lowered to %s: %s", L->where, ar_nn_op_name(op), e.msg);
  return AR_OK;
}

ar_status ar__onnx_reshape_to(ar__onnx_lower *L, const char *part, int t, const ar_shape *s,
                              int *out) {
  const ar_nn_gtensor *x = &L->g->tensors[t];
  if (ar_shape_eq(&x->shape, s)) {
    *out = t;
    return AR_OK;
  }
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.shape = *s;
  int o[AR_NN_MAX_IO];
  if (x->dtype != AR_DT_F32)
    return ar__onnx_fail(L, AR_UNSUPPORTED,
                         "a reshape of %s values at run time (the engine's shape ops "
                         "move f32)",
                         ar_dtype_name(x->dtype));
  AR_CHECK(ar__onnx_emit(L, part, AR_NN_RESHAPE, &a, 1, &t, NULL, NULL, AR_NN_MODE_RUN, o));
  *out = o[0];
  return AR_OK;
}

ar_status ar__onnx_const_new(ar__onnx_lower *L, const ar_shape *s, ar_dtype t,
                             ar_onnx_tensor *out) {
  ar_err e = AR_ERR_INIT;
  ar_status st = ar__onnx_tensor_new(L->m, s, t, out, &e);
  if (st != AR_OK)
    return ar_errf(L->err, st, "%s: %s", L->node ? L->where : L->m->path, e.msg);
  return AR_OK;
}

/* The value of output k of the current node. */
static ar_status out_val(ar__onnx_lower *L, int k, ar__onnx_val **out) {
  const Onnx__NodeProto *n = L->node;
  if (k >= (int)n->n_output || !n->output[k] || !*n->output[k]) {
    *out = NULL; /* an optional output nobody reads */
    return AR_OK;
  }
  return new_val(L, n->output[k], out);
}

ar_status ar__onnx_set_out(ar__onnx_lower *L, int k, int t) {
  ar__onnx_val *v = NULL;
  AR_CHECK(out_val(L, k, &v));
  if (v) {
    v->t = t;
    v->shape = L->g->tensors[t].shape;
    v->dtype = L->g->tensors[t].dtype;
    /* A graph tensor of no elements is constant too. */
    if (ar_shape_count(&v->shape) == 0) {
      AR_CHECK(ar__onnx_const_new(L, &v->shape, v->dtype, &v->own));
      v->c = &v->own;
    }
  }
  return AR_OK;
}

ar_status ar__onnx_set_out_const(ar__onnx_lower *L, int k, ar_onnx_tensor *c) {
  ar__onnx_val *v = NULL;
  ar_status st = out_val(L, k, &v);
  if (st == AR_OK && v) {
    v->own = *c;
    memset(c, 0, sizeof *c);
    v->c = &v->own;
    v->shape = v->own.shape;
    v->dtype = v->own.dtype;
    return AR_OK;
  }
  ar_onnx_tensor_fini(c);
  return st;
}

/* ---- set-up --------------------------------------------------------------------- */

static ar_status add_initializers(ar__onnx_lower *L) {
  const ar_onnx_model *m = L->m;
  for (size_t i = 0; i < m->g->n_initializer; i++) {
    ar__onnx_val *v = NULL;
    AR_CHECK(new_val(L, m->g->initializer[i]->name, &v));
    v->c = &m->inits[i];
    v->init = true;
    v->shape = v->c->shape;
    v->dtype = v->c->dtype;
  }
  return AR_OK;
}

/* The most elements a graph input may have (the nn graph's own bound). */
#define MAX_INPUT_ELEMENTS ((uint64_t)1 << 40)

static ar_status add_inputs(ar__onnx_lower *L) {
  const ar_onnx_model *m = L->m;
  for (int i = 0; i < m->n_inputs; i++) {
    const ar_onnx_io *io = &m->inputs[i];
    ar_shape s = {0};
    if (L->o->input_shapes) {
      s = L->o->input_shapes[i];
      if (io->nd >= 0 && s.nd != io->nd)
        return ar_errf(L->err, AR_INVALID, "%s: input '%s' is declared with %d dims, given %d",
                       m->path, io->name, io->nd, s.nd);
      for (int k = 0; k < s.nd && io->nd >= 0; k++)
        if (io->dim[k] >= 0 && io->dim[k] != s.d[k])
          return ar_errf(L->err, AR_INVALID,
                         "%s: input '%s' has dim %d of %" PRId64 " in the model, given %" PRId64,
                         m->path, io->name, k, io->dim[k], s.d[k]);
    } else {
      if (io->nd < 0)
        return ar_errf(L->err, AR_INVALID, "%s: input '%s' has no shape in the model; give it",
                       m->path, io->name);
      s.nd = io->nd;
      for (int k = 0; k < s.nd; k++) {
        if (io->dim[k] < 0)
          return ar_errf(L->err, AR_INVALID,
                         "%s: input '%s' has a symbolic dim %d; give the input's shape", m->path,
                         io->name, k);
        s.d[k] = io->dim[k];
      }
    }
    if (s.nd < 0 || s.nd > AR_NN_MAX_DIMS)
      return ar_errf(L->err, AR_UNSUPPORTED, "%s: input '%s' is given %d dims; at most %d", m->path,
                     io->name, s.nd, AR_NN_MAX_DIMS);
    /* The product of the dims other than 0 stays far from int64's end
     * (an empty input's shape still travels through shape arithmetic). */
    uint64_t count = 1;
    for (int k = 0; k < s.nd; k++) {
      if (s.d[k] < 0)
        return ar_errf(L->err, AR_INVALID, "%s: input '%s' is given dim %d of %" PRId64, m->path,
                       io->name, k, s.d[k]);
      if (s.d[k] && count > MAX_INPUT_ELEMENTS / (uint64_t)s.d[k])
        return ar_errf(L->err, AR_RANGE,
                       "%s: input '%s': dim %d of %" PRId64 " makes more than 2^40 elements; "
                       "give the input a smaller shape",
                       m->path, io->name, k, s.d[k]);
      if (s.d[k])
        count *= (uint64_t)s.d[k];
    }
    ar__onnx_val *v = NULL;
    AR_CHECK(new_val(L, io->name, &v));
    v->shape = s;
    v->dtype = io->dtype;
    v->pin = L->o->known ? L->o->known[i] : NULL;
    if (ar_shape_count(&s) == 0) { /* no elements: its value is its shape */
      AR_CHECK(ar__onnx_const_new(L, &s, io->dtype, &v->own));
      v->c = &v->own;
      continue;
    }
    AR_CHECK(ar_nn_graph_tensor(L->g, io->name, AR_NN_T_INPUT, &s, io->dtype, NULL, &v->t, L->err));
  }
  return AR_OK;
}

/* ---- the walk ---------------------------------------------------------------------- */

/* Whether node n folds: its first input is constant and so is each other
 * one (constant, or known from opts->known: an argument such as a
 * Reshape's shape), and none is a parameter being trained (PyTorch's
 * Transpose of a Linear's weight runs in the graph, so the weight
 * trains). */
static bool folds(const ar__onnx_lower *L, const Onnx__NodeProto *n, ar__onnx_val *const *ins) {
  if (!ar__onnx_foldable(n->op_type) || n->n_input == 0 || !ins[0] || !ins[0]->c)
    return false;
  for (size_t k = 0; k < n->n_input; k++)
    if (ins[k] && ((!ins[k]->c && !ins[k]->pin) || ar__onnx_trained(L, ins[k])))
      return false;
  /* Dropout in training mode draws a mask: never a constant.  Its
   * training_mode input may be known rather than constant, and may hold no
   * single value: the lowering then says what is wrong with it. */
  if (!strcmp(n->op_type, "Dropout")) {
    if (L->o->training)
      return false;
    const ar_onnx_tensor *tm =
        n->n_input > 2 && ins[2] ? (ins[2]->c ? ins[2]->c : ins[2]->pin) : NULL;
    if (tm && (ar_shape_count(&tm->shape) != 1 || ar__onnx_get_i(tm, 0)))
      return false;
  }
  return true;
}

static ar_status fold_node(ar__onnx_lower *L, ar__onnx_val *const *ins, int n_in) {
  const ar_onnx_tensor *in[64] = {0};
  ar_onnx_tensor out[AR_NN_MAX_IO];
  memset(out, 0, sizeof out);
  for (int k = 0; k < n_in; k++)
    in[k] = ins[k] ? (ins[k]->c ? ins[k]->c : ins[k]->pin) : NULL;
  const int n_out = (int)L->node->n_output;
  if (n_out > AR_NN_MAX_IO)
    return ar__onnx_fail(L, AR_UNSUPPORTED, "%d outputs (at most %d)", n_out, AR_NN_MAX_IO);
  ar_err e = AR_ERR_INIT;
  ar_status st = ar__onnx_fold(L->m, L->node, in, n_in, out, n_out, &e);
  if (st != AR_OK)
    return ar_errf(L->err, st, "%s: folding it: %s", L->where, e.msg);
  for (int k = 0; k < n_out && st == AR_OK; k++)
    st = ar__onnx_set_out_const(L, k, &out[k]);
  for (int k = 0; k < n_out; k++)
    ar_onnx_tensor_fini(&out[k]);
  return st;
}

static ar_status walk(ar__onnx_lower *L) {
  const Onnx__GraphProto *g = L->m->g;
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if ((int)i == L->skip)
      continue;
    L->node = n;
    L->index = (int)i;
    L->helpers = 0;
    char ns[256];
    snprintf(L->where, sizeof L->where, "%s: %s", L->m->path,
             ar__onnx_node_str(n, (int)i, ns, sizeof ns));
    if (n->n_input > 64)
      return ar__onnx_fail(L, AR_UNSUPPORTED, "%zu inputs (at most 64)", n->n_input);
    const char *got, *want, *bad = ar__onnx_attr_mistyped(n, &got, &want);
    if (bad)
      return ar__onnx_fail(L, AR_INVALID,
                           "attribute '%.100s' is %s, but ONNX defines it as %s; the model is "
                           "invalid (export it again)",
                           bad, got, want);
    ar__onnx_val *ins[64] = {0};
    for (size_t k = 0; k < n->n_input; k++) {
      if (!n->input[k] || !*n->input[k])
        continue;
      int v = ar__onnx_map_get(&L->val_of, n->input[k]);
      if (v < 0) /* the loader checked every name: an output left uncomputed */
        return ar__onnx_fail(L, AR_UNSUPPORTED,
                             "input %zu ('%s') is an output of an earlier node that accelrt "
                             "does not compute (BatchNormalization's saved statistics)",
                             k, n->input[k]);
      ins[k] = &L->vals[v];
    }
    if (folds(L, n, ins))
      AR_CHECK(fold_node(L, ins, (int)n->n_input));
    else
      AR_CHECK(ar__onnx_lower_node(L, ins, (int)n->n_input));
  }
  return AR_OK;
}

static ar_status add_outputs(ar__onnx_lower *L) {
  const ar_onnx_model *m = L->m;
  for (int i = 0; i < m->n_outputs; i++) {
    int v = ar__onnx_map_get(&L->val_of, m->outputs[i].name);
    if (v < 0)
      return ar_errf(L->err, AR_INVALID, "%s: graph output '%s' is not computed by any node",
                     m->path, m->outputs[i].name);
    int t;
    AR_CHECK(ar__onnx_tensor_of(L, &L->vals[v], &t));
    AR_CHECK(ar_nn_graph_output(L->g, t, L->err));
  }
  return AR_OK;
}

ar_status ar_onnx_lower(const ar_onnx_model *m, const ar_onnx_lower_opts *o, ar_nn_graph **out,
                        ar_err *err) {
  *out = NULL;
  ar_onnx_lower_opts def = AR_ONNX_LOWER_OPTS_INIT;
  ar__onnx_lower L;
  memset(&L, 0, sizeof L);
  L.skip = -1;
  L.m = m;
  L.o = o ? o : &def;
  L.err = err;
  size_t cap = m->g->n_initializer + (size_t)m->n_inputs;
  for (size_t i = 0; i < m->g->n_node; i++)
    cap += m->g->node[i]->n_output;
  L.cap_vals = (int)cap;
  L.vals = ar_calloc(cap ? cap : 1, sizeof *L.vals);
  ar_status st = L.vals ? ar_nn_graph_create(&L.g, err)
                        : ar_errf(err, AR_NOMEM, "out of memory lowering the model");
  if (st == AR_OK)
    st = add_initializers(&L);
  if (st == AR_OK)
    st = add_inputs(&L);
  if (st == AR_OK)
    st = walk(&L);
  if (st == AR_OK)
    st = add_outputs(&L);
  for (int i = 0; i < L.n_vals; i++)
    ar_onnx_tensor_fini(&L.vals[i].own);
  ar_free(L.vals);
  ar__onnx_map_fini(&L.val_of);
  if (st != AR_OK) {
    ar_nn_graph_destroy(L.g);
    return st;
  }
  *out = L.g;
  return AR_OK;
}
