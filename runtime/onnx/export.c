/* The ONNX exporter (include/accelrt/onnx.h: ar_onnx_export): an nn graph
 * as a ModelProto for inference, built message by message with protobuf-c
 * and packed; the ops themselves are export_ops.c's. */
#include "export_impl.h"

#include <stdio.h>
#include <string.h>

void *ar__onnx_ex_alloc(ar__onnx_ex *e, size_t bytes) {
  if (e->n_mem == e->cap_mem) {
    size_t cap = e->cap_mem ? 2 * e->cap_mem : 256;
    void **m = ar_realloc(e->mem, cap * sizeof *m);
    if (!m)
      return NULL;
    e->mem = m;
    e->cap_mem = cap;
  }
  void *p = ar_calloc(1, bytes ? bytes : 1);
  if (p)
    e->mem[e->n_mem++] = p;
  return p;
}

ar_status ar__onnx_ex_nomem(ar__onnx_ex *e) {
  return ar_errf(e->err, AR_NOMEM, "out of memory exporting the model");
}

/* Appends p to a growing array of pointers. */
static bool push(void ***arr, size_t *n, size_t *cap, void *p) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 64;
    void **a = ar_realloc(*arr, c * sizeof *a);
    if (!a)
      return false;
    *arr = a;
    *cap = c;
  }
  (*arr)[(*n)++] = p;
  return true;
}

static char *ex_strdup(ar__onnx_ex *e, const char *s) {
  size_t n = strlen(s) + 1;
  char *c = ar__onnx_ex_alloc(e, n);
  if (c)
    memcpy(c, s, n);
  return c;
}

const char *ar__onnx_ex_fresh(ar__onnx_ex *e, const char *base) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", base && base[0] ? base : "v");
  for (int k = 1; ar__onnx_map_get(&e->used, buf) >= 0; k++)
    snprintf(buf, sizeof buf, "%.200s_%d", base && base[0] ? base : "v", k);
  char *c = ex_strdup(e, buf);
  if (!c || ar__onnx_map_put(&e->used, c, 1) != AR_OK)
    return NULL;
  return c;
}

int32_t ar__onnx_ex_dtype(ar_dtype t) {
  switch (t) {
  case AR_DT_F32:
    return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  case AR_DT_I64:
    return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  case AR_DT_I32:
    return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
  case AR_DT_U8:
    return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
  case AR_DT_BOOL:
    return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
  }
  return ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED;
}

/* A TensorProto named `name` of t and shape s from data (copied into raw_data:
 * little-endian, as this machine stores it). */
static Onnx__TensorProto *tensor_proto(ar__onnx_ex *e, const char *name, ar_dtype t,
                                       const ar_shape *s, const void *data) {
  Onnx__TensorProto *tp = ar__onnx_ex_alloc(e, sizeof *tp);
  size_t bytes = (size_t)ar_shape_count(s) * ar_dtype_size(t);
  int64_t *dims = ar__onnx_ex_alloc(e, (size_t)(s->nd ? s->nd : 1) * sizeof *dims);
  uint8_t *raw = ar__onnx_ex_alloc(e, bytes);
  if (!tp || !dims || !raw)
    return NULL;
  onnx__tensor_proto__init(tp);
  memcpy(dims, s->d, (size_t)s->nd * sizeof *dims);
  if (data)
    memcpy(raw, data, bytes);
  tp->n_dims = (size_t)s->nd;
  tp->dims = dims;
  tp->has_data_type = true;
  tp->data_type = ar__onnx_ex_dtype(t);
  tp->has_raw_data = true;
  tp->raw_data.len = bytes;
  tp->raw_data.data = raw;
  tp->name = (char *)name;
  return tp;
}

ar_status ar__onnx_ex_const(ar__onnx_ex *e, const char *base, ar_dtype t, const ar_shape *s,
                            const void *data, int64_t count, const char **out) {
  ar_shape v = {1, {count}};
  const char *name = ar__onnx_ex_fresh(e, base);
  Onnx__TensorProto *tp = name ? tensor_proto(e, name, t, s ? s : &v, data) : NULL;
  if (!tp || !push((void ***)&e->inits, &e->n_inits, &e->cap_inits, tp))
    return ar__onnx_ex_nomem(e);
  *out = name;
  return AR_OK;
}

const char *ar__onnx_ex_value(ar__onnx_ex *e, int t) {
  if (e->tname[t])
    return e->tname[t];
  const ar_nn_gtensor *x = &e->g->tensors[t];
  const char *name = ar__onnx_ex_fresh(e, x->name);
  if (!name)
    return NULL;
  if (x->kind == AR_NN_T_CONST || x->kind == AR_NN_T_PARAM || x->kind == AR_NN_T_STATE) {
    const bool tr = x->transposed && x->shape.nd == 2 && x->dtype == AR_DT_F32;
    ar_shape s = x->shape;
    if (tr) { /* held (R, C): the model's tensor is (C, R) */
      s.d[0] = x->shape.d[1];
      s.d[1] = x->shape.d[0];
    }
    Onnx__TensorProto *tp = tensor_proto(e, name, x->dtype, &s, tr ? NULL : x->data);
    if (!tp || !push((void ***)&e->inits, &e->n_inits, &e->cap_inits, tp))
      return NULL;
    if (tr && x->data) {
      const float *src = x->data;
      float *dst = (float *)tp->raw_data.data;
      const int64_t R = x->shape.d[0], C = x->shape.d[1];
      for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
          dst[c * R + r] = src[r * C + c];
    }
  }
  e->tname[t] = (char *)name;
  return name;
}

ar_status ar__onnx_ex_node(ar__onnx_ex *e, const char *op_type, int n_in, const char *const *in,
                           int n_out, const char *const *out, Onnx__NodeProto **made) {
  Onnx__NodeProto *n = ar__onnx_ex_alloc(e, sizeof *n);
  char **ins = ar__onnx_ex_alloc(e, (size_t)(n_in ? n_in : 1) * sizeof *ins);
  char **outs = ar__onnx_ex_alloc(e, (size_t)(n_out ? n_out : 1) * sizeof *outs);
  char name[256];
  const bool in_node = e->cur >= 0 && e->cur < e->g->n_nodes;
  snprintf(name, sizeof name, "%s/%s", in_node ? e->g->nodes[e->cur].name : "graph", op_type);
  const char *nm = n && ins && outs ? ex_strdup(e, name) : NULL;
  const char *op = nm ? ex_strdup(e, op_type) : NULL;
  if (!op || !push((void ***)&e->nodes, &e->n_nodes, &e->cap_nodes, n))
    return ar__onnx_ex_nomem(e);
  onnx__node_proto__init(n);
  for (int i = 0; i < n_in; i++)
    ins[i] = (char *)in[i]; /* names the exporter owns already */
  for (int i = 0; i < n_out; i++)
    outs[i] = (char *)out[i];
  n->n_input = (size_t)n_in;
  n->input = ins;
  n->n_output = (size_t)n_out;
  n->output = outs;
  n->name = (char *)nm;
  n->op_type = (char *)op;
  if (made)
    *made = n;
  return AR_OK;
}

/* A new attribute of node n, appended (NULL when out of memory). */
static Onnx__AttributeProto *new_attr(ar__onnx_ex *e, Onnx__NodeProto *n, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = ar__onnx_ex_alloc(e, sizeof *a);
  Onnx__AttributeProto **list =
      ar__onnx_ex_alloc(e, (n->n_attribute + 1) * sizeof *list);
  char *nm = a && list ? ex_strdup(e, name) : NULL;
  if (!nm)
    return NULL;
  onnx__attribute_proto__init(a);
  a->name = nm;
  a->has_type = true;
  a->type = type;
  if (n->n_attribute)
    memcpy(list, n->attribute, n->n_attribute * sizeof *list);
  list[n->n_attribute++] = a;
  n->attribute = list;
  return a;
}

/* An INT (is_float false) or FLOAT attribute. */
static ar_status scalar_attr(ar__onnx_ex *e, Onnx__NodeProto *n, const char *name, bool is_float,
                             int64_t i, float f) {
  Onnx__AttributeProto *a =
      new_attr(e, n, name, is_float ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT
                                    : ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (!a)
    return ar__onnx_ex_nomem(e);
  a->has_f = is_float;
  a->f = f;
  a->has_i = !is_float;
  a->i = i;
  return AR_OK;
}

ar_status ar__onnx_ex_attr_i(ar__onnx_ex *e, Onnx__NodeProto *n, const char *name, int64_t v) {
  return scalar_attr(e, n, name, false, v, 0);
}

ar_status ar__onnx_ex_attr_f(ar__onnx_ex *e, Onnx__NodeProto *n, const char *name, float v) {
  return scalar_attr(e, n, name, true, 0, v);
}

ar_status ar__onnx_ex_attr_ints(ar__onnx_ex *e, Onnx__NodeProto *n, const char *name,
                                const int64_t *v, int count) {
  Onnx__AttributeProto *a = new_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *c = a ? ar__onnx_ex_alloc(e, (size_t)(count ? count : 1) * sizeof *c) : NULL;
  if (!c)
    return ar__onnx_ex_nomem(e);
  memcpy(c, v, (size_t)count * sizeof *c);
  a->n_ints = (size_t)count;
  a->ints = c;
  return AR_OK;
}

/* A graph input or output: its name, element type and dims, the first
 * one symbolic ("N") when it follows the batch. */
static Onnx__ValueInfoProto *value_info(ar__onnx_ex *e, const char *name, int t) {
  const ar_nn_gtensor *x = &e->g->tensors[t];
  const ar_nn_gtensor *y = e->probe ? &e->probe->tensors[t] : NULL;
  Onnx__ValueInfoProto *v = ar__onnx_ex_alloc(e, sizeof *v);
  Onnx__TypeProto *tp = ar__onnx_ex_alloc(e, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = ar__onnx_ex_alloc(e, sizeof *tt);
  Onnx__TensorShapeProto *sp = ar__onnx_ex_alloc(e, sizeof *sp);
  Onnx__TensorShapeProto__Dimension **dims =
      ar__onnx_ex_alloc(e, (size_t)(x->shape.nd ? x->shape.nd : 1) * sizeof *dims);
  if (!v || !tp || !tt || !sp || !dims)
    return NULL;
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sp);
  for (int k = 0; k < x->shape.nd; k++) {
    Onnx__TensorShapeProto__Dimension *d = ar__onnx_ex_alloc(e, sizeof *d);
    if (!d)
      return NULL;
    onnx__tensor_shape_proto__dimension__init(d);
    if (y && y->shape.d[k] != x->shape.d[k]) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = "N";
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = x->shape.d[k];
    }
    dims[k] = d;
  }
  sp->n_dim = (size_t)x->shape.nd;
  sp->dim = dims;
  tt->has_elem_type = true;
  tt->elem_type = ar__onnx_ex_dtype(x->dtype);
  tt->shape = sp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  v->name = (char *)name;
  v->type = tp;
  return v;
}

/* The probe must be g for another batch: the same nodes and tensors. */
static ar_status check_probe(ar__onnx_ex *e) {
  const ar_nn_graph *g = e->g, *p = e->probe;
  bool same = p->n_nodes == g->n_nodes && p->n_tensors == g->n_tensors &&
              p->n_inputs == g->n_inputs && p->n_outputs == g->n_outputs;
  for (int i = 0; same && i < g->n_nodes; i++)
    same = p->nodes[i].op == g->nodes[i].op;
  if (!same)
    return ar_errf(e->err, AR_INVALID,
                   "the graph built for another batch size differs from the model's (%d and "
                   "%d nodes): it cannot tell which dims follow the batch",
                   p->n_nodes, g->n_nodes);
  for (int t = 0; t < g->n_tensors; t++) {
    const ar_nn_gtensor *x = &g->tensors[t];
    if (x->kind != AR_NN_T_VALUE && x->kind != AR_NN_T_INPUT &&
        !ar_shape_eq(&x->shape, &p->tensors[t].shape)) {
      char a[64];
      return ar_errf(e->err, AR_UNSUPPORTED,
                     "constant '%s' (%s) changes with the batch size (it was folded for the "
                     "training batch): the model cannot be exported with a symbolic batch axis",
                     x->name, ar_shape_str(&x->shape, a, sizeof a));
    }
  }
  return AR_OK;
}

/* The graph's inputs and outputs.  An output whose value is another
 * tensor's (a dropout removed) or an input gets an Identity of its own
 * name. */
static ar_status graph_io(ar__onnx_ex *e, Onnx__GraphProto *gp) {
  const ar_nn_graph *g = e->g;
  gp->input = ar__onnx_ex_alloc(e, (size_t)(g->n_inputs + 1) * sizeof *gp->input);
  gp->output = ar__onnx_ex_alloc(e, (size_t)(g->n_outputs + 1) * sizeof *gp->output);
  if (!gp->input || !gp->output)
    return ar__onnx_ex_nomem(e);
  for (int i = 0; i < g->n_inputs; i++) {
    int t = g->inputs[i];
    const char *name = ar__onnx_ex_value(e, t);
    gp->input[i] = name ? value_info(e, name, t) : NULL;
    if (!gp->input[i])
      return ar__onnx_ex_nomem(e);
  }
  gp->n_input = (size_t)g->n_inputs;
  for (int i = 0; i < g->n_outputs; i++) {
    int t = g->outputs[i];
    const ar_nn_gtensor *x = &g->tensors[t];
    const char *name = ar__onnx_ex_value(e, t);
    if (name && (e->aliased[t] || x->kind != AR_NN_T_VALUE)) {
      const char *src = name;
      name = ar__onnx_ex_fresh(e, x->name);
      e->cur = x->producer; /* -1: an input or a constant, named "graph/Identity" */
      if (name && ar__onnx_ex_node(e, "Identity", 1, &src, 1, &name, NULL) != AR_OK)
        return AR_NOMEM;
    }
    gp->output[i] = name ? value_info(e, name, t) : NULL;
    if (!gp->output[i])
      return ar__onnx_ex_nomem(e);
  }
  gp->n_output = (size_t)g->n_outputs;
  return AR_OK;
}

/* The model around the graph, packed into *bytes. */
static ar_status pack_model(ar__onnx_ex *e, Onnx__GraphProto *gp,
                            const ar_onnx_export_opts *o, void **bytes, size_t *n) {
  Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
  Onnx__OperatorSetIdProto op = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  Onnx__OperatorSetIdProto *ops[1] = {&op};
  op.domain = "";
  op.has_version = true;
  op.version = e->opset;
  /* The IR version of the ONNX release that brought the opset: 7 with
   * opsets 13-14 (ONNX 1.8-1.9), 8 with 15-17 (1.10-1.12). */
  mp.has_ir_version = true;
  mp.ir_version = e->opset <= 14 ? 7 : 8;
  mp.n_opset_import = 1;
  mp.opset_import = ops;
  mp.producer_name = (char *)(o->producer ? o->producer : "accelrt");
  mp.producer_version = (char *)o->version;
  mp.graph = gp;
  size_t len = onnx__model_proto__get_packed_size(&mp);
  uint8_t *buf = ar_malloc(len ? len : 1);
  if (!buf)
    return ar__onnx_ex_nomem(e);
  onnx__model_proto__pack(&mp, buf);
  *bytes = buf;
  *n = len;
  return AR_OK;
}

static ar_status export_graph(ar__onnx_ex *e, const ar_onnx_export_opts *o, void **bytes,
                              size_t *n) {
  const ar_nn_graph *g = e->g;
  e->tname = ar__onnx_ex_alloc(e, (size_t)(g->n_tensors + 1) * sizeof *e->tname);
  e->aliased = ar__onnx_ex_alloc(e, (size_t)(g->n_tensors + 1) * sizeof *e->aliased);
  if (!e->tname || !e->aliased)
    return ar__onnx_ex_nomem(e);
  if (e->probe)
    AR_CHECK(check_probe(e));
  /* The inputs first, so that they keep their names. */
  for (int i = 0; i < g->n_inputs; i++)
    if (!ar__onnx_ex_value(e, g->inputs[i]))
      return ar__onnx_ex_nomem(e);
  for (int i = 0; i < g->n_nodes; i++) {
    e->cur = i;
    ar_status st = ar__onnx_export_node(e, i);
    if (st != AR_OK)
      return st;
  }
  Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
  AR_CHECK(graph_io(e, &gp));
  gp.name = "accelrt";
  gp.n_node = e->n_nodes;
  gp.node = e->nodes;
  gp.n_initializer = e->n_inits;
  gp.initializer = e->inits;
  return pack_model(e, &gp, o, bytes, n);
}

ar_status ar_onnx_export(const ar_nn_graph *g, const ar_onnx_export_opts *o, void **bytes,
                         size_t *n, ar_err *err) {
  ar_onnx_export_opts def = AR_ONNX_EXPORT_OPTS_INIT;
  if (!o)
    o = &def;
  *bytes = NULL;
  *n = 0;
  if (o->opset < AR_ONNX_EXPORT_OPSET_MIN || o->opset > AR_ONNX_EXPORT_OPSET_MAX)
    return ar_errf(err, AR_INVALID, "opset %lld is not exported; choose %d to %d",
                   (long long)o->opset, AR_ONNX_EXPORT_OPSET_MIN, AR_ONNX_EXPORT_OPSET_MAX);
  ar__onnx_ex e;
  memset(&e, 0, sizeof e);
  e.g = g;
  e.probe = o->probe;
  e.opset = o->opset;
  e.err = err;
  ar_status st = export_graph(&e, o, bytes, n);
  for (size_t i = 0; i < e.n_mem; i++)
    ar_free(e.mem[i]);
  ar_free(e.mem);
  ar_free(e.nodes);
  ar_free(e.inits);
  ar__onnx_map_fini(&e.used);
  return st;
}

ar_status ar_onnx_pack_tensor(const ar_onnx_tensor *t, void **bytes, size_t *n, ar_err *err) {
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  tp.n_dims = (size_t)t->shape.nd;
  tp.dims = (int64_t *)t->shape.d;
  tp.has_data_type = true;
  tp.data_type = ar__onnx_ex_dtype(t->dtype);
  tp.has_raw_data = true;
  tp.raw_data.len = (size_t)ar_shape_count(&t->shape) * ar_dtype_size(t->dtype);
  tp.raw_data.data = t->data;
  tp.name = t->name;
  size_t len = onnx__tensor_proto__get_packed_size(&tp);
  *bytes = ar_malloc(len ? len : 1);
  if (!*bytes)
    return ar_errf(err, AR_NOMEM, "out of memory writing a tensor");
  onnx__tensor_proto__pack(&tp, *bytes);
  *n = len;
  return AR_OK;
}
