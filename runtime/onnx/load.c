/*
 * Reading and validating an ONNX model (include/accelrt/onnx.h): the file
 * within its size limit, the protobuf's nesting depth checked on the wire
 * before protobuf-c unpacks it (its unpacker recurses once per level), then
 * the model: IR version, the default domain's opset in 7..17, every node
 * of the default domain, names defined once and before use, initializers
 * decoded and checked against their dims, the graph's inputs and outputs
 * of importable element types.  The accessors and the attribute helpers
 * of onnx_impl.h are here too.
 */
#include "onnx_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- protobuf-c glue -------------------------------------------------------------- */

static void *pb_alloc(void *ctx, size_t n) {
  (void)ctx;
  return ar_malloc(n);
}
static void pb_free(void *ctx, void *p) {
  (void)ctx;
  ar_free(p);
}
ProtobufCAllocator ar__onnx_alloc = {pb_alloc, pb_free, NULL};

/* A varint at *p (below end): false when it runs past end or 10 bytes. */
static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*p >= end)
      return false;
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return true;
  }
  return false;
}

/* Walks the fields of a message of type d: sub-messages are walked with
 * one level more, at most max_depth. */
static bool depth_walk(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                       int depth, int max_depth) {
  if (depth > max_depth)
    return false;
  while (p < end) {
    uint64_t key, v;
    if (!varint(&p, end, &key))
      return false;
    switch (key & 7) {
    case 0: /* varint */
      if (!varint(&p, end, &v))
        return false;
      break;
    case 1: /* 64-bit */
      if (end - p < 8)
        return false;
      p += 8;
      break;
    case 5: /* 32-bit */
      if (end - p < 4)
        return false;
      p += 4;
      break;
    case 2: { /* length-delimited: bytes, string, packed, or a message */
      if (!varint(&p, end, &v) || v > (uint64_t)(end - p))
        return false;
      const ProtobufCFieldDescriptor *f =
          d ? protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3)) : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
          !depth_walk(f->descriptor, p, p + v, depth + 1, max_depth))
        return false;
      p += v;
      break;
    }
    default: /* groups (3, 4) are not in onnx.proto; anything else is not protobuf */
      return false;
    }
  }
  return true;
}

bool ar__onnx_depth_ok(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t n,
                       int max_depth) {
  return depth_walk(d, buf, buf + n, 1, max_depth);
}

/* ---- attributes, names -------------------------------------------------------------- */

const Onnx__AttributeProto *ar__onnx_attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name))
      return n->attribute[i];
  return NULL;
}

int64_t ar__onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = ar__onnx_attr(n, name);
  return a && a->has_i ? a->i : def;
}

float ar__onnx_attr_f(const Onnx__NodeProto *n, const char *name, float def) {
  const Onnx__AttributeProto *a = ar__onnx_attr(n, name);
  return a && a->has_f ? a->f : def;
}

const char *ar__onnx_attr_s(const Onnx__NodeProto *n, const char *name, const char *def, char *buf,
                            size_t size) {
  const Onnx__AttributeProto *a = ar__onnx_attr(n, name);
  if (!a || !a->has_s)
    return def;
  /* A string attribute is bytes: a copy with a terminator. */
  size_t len = a->s.len < size - 1 ? a->s.len : size - 1;
  if (len) /* an empty string has no data (NULL) */
    memcpy(buf, a->s.data, len);
  buf[len] = 0;
  return buf;
}

int ar__onnx_attr_ints(const Onnx__NodeProto *n, const char *name, const int64_t **v) {
  const Onnx__AttributeProto *a = ar__onnx_attr(n, name);
  if (!a || (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS && a->n_ints == 0))
    return -1;
  *v = a->ints;
  return (int)(a->n_ints > 64 ? 64 : a->n_ints);
}

/* The attributes the importer reads, with the type ONNX's operators give
 * them ("value" is Pad's float, else a Constant's or ConstantOfShape's
 * tensor). */
#define T_(x) ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__##x
static const struct {
  const char *name;
  Onnx__AttributeProto__AttributeType type;
} attr_types[] = {
    {"allowzero", T_(INT)},     {"axis", T_(INT)},
    {"ceil_mode", T_(INT)},     {"count_include_pad", T_(INT)},
    {"end", T_(INT)},           {"group", T_(INT)},
    {"keepdims", T_(INT)},      {"noop_with_empty_axes", T_(INT)},
    {"spatial", T_(INT)},       {"start", T_(INT)},
    {"storage_order", T_(INT)}, {"to", T_(INT)},
    {"training_mode", T_(INT)}, {"transA", T_(INT)},
    {"transB", T_(INT)},        {"value_int", T_(INT)},
    {"alpha", T_(FLOAT)},       {"beta", T_(FLOAT)},
    {"epsilon", T_(FLOAT)},     {"max", T_(FLOAT)},
    {"min", T_(FLOAT)},         {"momentum", T_(FLOAT)},
    {"ratio", T_(FLOAT)},       {"value_float", T_(FLOAT)},
    {"auto_pad", T_(STRING)},   {"mode", T_(STRING)},
    {"axes", T_(INTS)},         {"dilations", T_(INTS)},
    {"ends", T_(INTS)},         {"kernel_shape", T_(INTS)},
    {"pads", T_(INTS)},         {"perm", T_(INTS)},
    {"shape", T_(INTS)},        {"split", T_(INTS)},
    {"starts", T_(INTS)},       {"strides", T_(INTS)},
    {"value_ints", T_(INTS)},   {"value_floats", T_(FLOATS)},
};

static const char *attr_type_name(Onnx__AttributeProto__AttributeType t) {
  switch (t) {
  case T_(FLOAT):
    return "a float";
  case T_(INT):
    return "an int";
  case T_(STRING):
    return "a string";
  case T_(TENSOR):
    return "a tensor";
  case T_(FLOATS):
    return "a list of floats";
  case T_(INTS):
    return "a list of ints";
  default:
    return "of another type";
  }
}

/* Whether a is of type t and carries its value (the helpers read only
 * the field of their type: one of another type would read as absent). */
static bool attr_is(const Onnx__AttributeProto *a, Onnx__AttributeProto__AttributeType t) {
  if (a->type != t)
    return false;
  switch (t) {
  case T_(FLOAT):
    return a->has_f;
  case T_(INT):
    return a->has_i;
  case T_(STRING):
    return a->has_s;
  case T_(TENSOR):
    return a->t != NULL;
  default: /* a list may be empty */
    return true;
  }
}

const char *ar__onnx_attr_mistyped(const Onnx__NodeProto *n, const char **got, const char **want) {
  for (size_t i = 0; i < n->n_attribute; i++) {
    const Onnx__AttributeProto *a = n->attribute[i];
    if (!a->name)
      continue;
    Onnx__AttributeProto__AttributeType t = T_(UNDEFINED);
    if (!strcmp(a->name, "value"))
      t = !strcmp(n->op_type, "Pad") ? T_(FLOAT) : T_(TENSOR);
    for (size_t k = 0; t == T_(UNDEFINED) && k < sizeof attr_types / sizeof attr_types[0]; k++)
      if (!strcmp(attr_types[k].name, a->name))
        t = attr_types[k].type;
    if (t != T_(UNDEFINED) && !attr_is(a, t)) {
      *got = a->type == t ? "without its value" : attr_type_name(a->type);
      *want = attr_type_name(t);
      return a->name;
    }
  }
  return NULL;
}
#undef T_

bool ar__onnx_pytorch_rules(const ar_onnx_model *m) {
  const char *p = m->mp->producer_name;
  return p && (!strcmp(p, "pytorch") || !strcmp(p, "accelrt"));
}

const char *ar__onnx_node_str(const Onnx__NodeProto *n, int index, char *buf, size_t size) {
  const char *op = n->op_type ? n->op_type : "?";
  if (n->name && *n->name)
    snprintf(buf, size, "node '%.150s' (%.60s)", n->name, op);
  else if (n->n_output && n->output[0] && *n->output[0])
    snprintf(buf, size, "node %d (%.60s, output '%.100s')", index, op, n->output[0]);
  else
    snprintf(buf, size, "node %d (%.60s)", index, op);
  return buf;
}

/* ---- validation --------------------------------------------------------------------- */

static ar_status check_opset(ar_onnx_model *m, ar_err *err) {
  const Onnx__ModelProto *mp = m->mp;
  if (!mp->has_ir_version || mp->ir_version < 3)
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: IR version %" PRId64 " is older than any this version reads (3, ONNX "
                   "1.1, brought opset imports); export the model again with a newer exporter",
                   m->path, mp->has_ir_version ? mp->ir_version : 0);
  m->opset = -1;
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
    if (!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx"))
      m->opset = o->has_version ? o->version : 0;
  }
  if (m->opset < 0)
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: the model imports no opset of ONNX's default domain (only '%s'); "
                   "accelrt imports the default domain's ops",
                   m->path,
                   mp->n_opset_import && mp->opset_import[0]->domain ? mp->opset_import[0]->domain
                                                                     : "none");
  if (m->opset < AR_ONNX_OPSET_MIN || m->opset > AR_ONNX_OPSET_MAX)
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: opset %" PRId64 " is outside the %d..%d this version imports; export "
                   "with opset_version=%d (torch.onnx.export) or convert it "
                   "(onnx.version_converter)",
                   m->path, m->opset, AR_ONNX_OPSET_MIN, AR_ONNX_OPSET_MAX,
                   m->opset < AR_ONNX_OPSET_MIN ? AR_ONNX_OPSET_MIN : AR_ONNX_OPSET_MAX);
  if (!mp->graph)
    return ar_errf(err, AR_INVALID, "%s: the model has no graph", m->path);
  m->g = mp->graph;
  return AR_OK;
}

/* One declared input or output: its element type and dims. */
static ar_status check_io(const ar_onnx_model *m, const Onnx__ValueInfoProto *v, bool input,
                          ar_onnx_io *io, ar_err *err) {
  const char *kind = input ? "input" : "output";
  if (!v->name || !*v->name)
    return ar_errf(err, AR_INVALID, "%s: a graph %s has no name", m->path, kind);
  io->name = v->name;
  io->dtype = AR_DT_F32;
  io->nd = -1;
  const Onnx__TypeProto *t = v->type;
  if (!t || t->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) {
    if (input)
      return ar_errf(err, AR_INVALID, "%s: graph input '%s' has no type", m->path, v->name);
    return AR_OK; /* an output's type may be left to inference */
  }
  if (t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type)
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: graph %s '%s' is not a tensor (a sequence, map or optional); accelrt "
                   "imports tensors only",
                   m->path, kind, v->name);
  const Onnx__TypeProto__Tensor *tt = t->tensor_type;
  const char *tn;
  if (!tt->has_elem_type || !ar__onnx_dtype(tt->elem_type, &io->dtype, &tn)) {
    if (!input && (!tt->has_elem_type || tt->elem_type == 0))
      return AR_OK;
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: graph %s '%s' is of element type %s; accelrt imports f32, i64, i32, u8 "
                   "and bool",
                   m->path, kind, v->name, tt->has_elem_type ? tn : "(none)");
  }
  if (!tt->shape)
    return AR_OK;
  if (tt->shape->n_dim > AR_NN_MAX_DIMS)
    return ar_errf(err, AR_UNSUPPORTED,
                   "%s: graph %s '%s' has %zu dims; accelrt handles at "
                   "most %d",
                   m->path, kind, v->name, tt->shape->n_dim, AR_NN_MAX_DIMS);
  io->nd = (int)tt->shape->n_dim;
  for (int i = 0; i < io->nd; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    io->dim[i] =
        d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ? d->dim_value : -1;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value < 0)
      return ar_errf(err, AR_INVALID, "%s: graph %s '%s': dim %d is %" PRId64, m->path, kind,
                     v->name, i, d->dim_value);
  }
  return AR_OK;
}

/* Defines name once (SSA: ONNX's rule). */
static ar_status define(const ar_onnx_model *m, ar__onnx_map *defined, const char *name,
                        const char *what, ar_err *err) {
  if (ar__onnx_map_get(defined, name) >= 0)
    return ar_errf(err, AR_INVALID,
                   "%s: %s defines '%s' again (every value is defined once in ONNX); the "
                   "model is invalid",
                   m->path, what, name);
  if (ar__onnx_map_put(defined, name, 1) != AR_OK)
    return ar_errf(err, AR_NOMEM, "out of memory");
  return AR_OK;
}

static ar_status check_initializers(ar_onnx_model *m, ar__onnx_map *defined, ar_err *err) {
  const Onnx__GraphProto *g = m->g;
  if (g->n_sparse_initializer)
    return ar_errf(err, AR_UNSUPPORTED, "%s: the graph has sparse initializers; save them dense",
                   m->path);
  m->inits = ar_calloc(g->n_initializer ? g->n_initializer : 1, sizeof *m->inits);
  if (!m->inits)
    return ar_errf(err, AR_NOMEM, "out of memory");
  for (size_t i = 0; i < g->n_initializer; i++) {
    const Onnx__TensorProto *tp = g->initializer[i];
    if (!tp->name || !*tp->name)
      return ar_errf(err, AR_INVALID, "%s: initializer %zu has no name", m->path, i);
    char what[300];
    snprintf(what, sizeof what, "initializer '%.200s'", tp->name);
    AR_CHECK(ar__onnx_tensor_decode(m->path, m->dir, m->fs, &m->lim, tp, what, &m->inits[i], err));
    AR_CHECK(define(m, defined, tp->name, what, err));
    if (ar__onnx_map_put(&m->init_of, tp->name, (int)i) != AR_OK)
      return ar_errf(err, AR_NOMEM, "out of memory");
  }
  return AR_OK;
}

static ar_status check_inputs_outputs(ar_onnx_model *m, ar__onnx_map *defined, ar_err *err) {
  const Onnx__GraphProto *g = m->g;
  m->inputs = ar_calloc(g->n_input ? g->n_input : 1, sizeof *m->inputs);
  m->input_proto = ar_calloc(g->n_input ? g->n_input : 1, sizeof *m->input_proto);
  m->outputs = ar_calloc(g->n_output ? g->n_output : 1, sizeof *m->outputs);
  if (!m->inputs || !m->input_proto || !m->outputs)
    return ar_errf(err, AR_NOMEM, "out of memory");
  for (size_t i = 0; i < g->n_input; i++) {
    ar_onnx_io io;
    AR_CHECK(check_io(m, g->input[i], true, &io, err));
    /* An input that is also an initializer (IR < 4 listed them so) has
     * its default in the initializer: not an input of the model here. */
    if (ar__onnx_map_get(&m->init_of, io.name) >= 0)
      continue;
    char what[300];
    snprintf(what, sizeof what, "graph input '%.200s'", io.name);
    AR_CHECK(define(m, defined, io.name, what, err));
    m->input_proto[m->n_inputs] = (int)i;
    io.position = (int)i;
    m->inputs[m->n_inputs++] = io;
  }
  if (g->n_output == 0)
    return ar_errf(err, AR_INVALID, "%s: the graph has no outputs", m->path);
  for (size_t i = 0; i < g->n_output; i++) {
    AR_CHECK(check_io(m, g->output[i], false, &m->outputs[m->n_outputs], err));
    m->outputs[m->n_outputs++].position = (int)i;
  }
  return AR_OK;
}

static ar_status check_nodes(ar_onnx_model *m, ar__onnx_map *defined, ar_err *err) {
  const Onnx__GraphProto *g = m->g;
  if ((int64_t)g->n_node > m->lim.max_nodes)
    return ar_errf(err, AR_RANGE,
                   "%s: the graph has %zu nodes, more than the %" PRId64
                   " allowed here; the file is corrupt, or raise the limit",
                   m->path, g->n_node, m->lim.max_nodes);
  char ns[300];
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if (!n->op_type || !*n->op_type)
      return ar_errf(err, AR_INVALID, "%s: node %zu has no op_type", m->path, i);
    ar__onnx_node_str(n, (int)i, ns, sizeof ns);
    /* Every operator has an output; the importer computes into output 0. */
    if (n->n_output == 0)
      return ar_errf(err, AR_INVALID,
                     "%s: %s has no outputs (every ONNX operator has at least one); the model "
                     "is invalid",
                     m->path, ns);
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx"))
      return ar_errf(err, AR_UNSUPPORTED,
                     "%s: %s is of domain '%s'; accelrt imports ONNX's default domain only "
                     "(export without custom or contrib ops)",
                     m->path, ns, n->domain);
    for (size_t k = 0; k < n->n_input; k++) {
      const char *in = n->input[k];
      if (in && *in && ar__onnx_map_get(defined, in) < 0)
        return ar_errf(err, AR_INVALID,
                       "%s: %s reads '%s', which no graph input, initializer or earlier node "
                       "defines (ONNX lists nodes in topological order); the model is invalid",
                       m->path, ns, in);
    }
    for (size_t k = 0; k < n->n_attribute; k++) {
      const Onnx__AttributeProto *a = n->attribute[k];
      if (a->g || a->n_graphs)
        return ar_errf(err, AR_UNSUPPORTED,
                       "%s: %s has a subgraph (attribute '%s'): control flow (If, Loop, Scan) "
                       "is not imported; export the model without data-dependent control flow",
                       m->path, ns, a->name ? a->name : "?");
    }
    for (size_t k = 0; k < n->n_output; k++)
      if (n->output[k] && *n->output[k])
        AR_CHECK(define(m, defined, n->output[k], ns, err));
  }
  for (int i = 0; i < m->n_outputs; i++)
    if (ar__onnx_map_get(defined, m->outputs[i].name) < 0)
      return ar_errf(err, AR_INVALID, "%s: graph output '%s' is never defined", m->path,
                     m->outputs[i].name);
  return AR_OK;
}

/* Unpacks and validates buf into m. */
static ar_status parse(ar_onnx_model *m, const uint8_t *buf, size_t len, ar_err *err) {
  if (!ar__onnx_depth_ok(&onnx__model_proto__descriptor, buf, len, m->lim.max_depth))
    return ar_errf(err, AR_CORRUPT,
                   "%s: not an ONNX model: the protobuf does not parse or nests more than %d "
                   "deep (a truncated or corrupt file?); export it again",
                   m->path, m->lim.max_depth);
  m->mp = onnx__model_proto__unpack(&ar__onnx_alloc, len, buf);
  if (!m->mp)
    return ar_errf(err, AR_CORRUPT,
                   "%s: not an ONNX model: the protobuf does not parse (a truncated or corrupt "
                   "file, or out of memory); export it again",
                   m->path);
  AR_CHECK(check_opset(m, err));
  ar__onnx_map defined = {0};
  ar_status st = check_initializers(m, &defined, err);
  if (st == AR_OK)
    st = check_inputs_outputs(m, &defined, err);
  if (st == AR_OK)
    st = check_nodes(m, &defined, err);
  ar__onnx_map_fini(&defined);
  return st;
}

static ar_status model_new(const char *path, const ar_fs *fs, const ar_onnx_limits *limits,
                           ar_onnx_model **out, ar_err *err) {
  ar_onnx_model *m = ar_calloc(1, sizeof *m);
  if (!m || !(m->path = ar_strdup(path ? path : "<memory>"))) {
    ar_free(m);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  m->fs = fs;
  ar_onnx_limits def = AR_ONNX_LIMITS_INIT;
  m->lim = limits ? *limits : def;
  *out = m;
  return AR_OK;
}

ar_status ar_onnx_load_mem(const void *bytes, size_t n, const char *name,
                           const ar_onnx_limits *limits, ar_onnx_model **out, ar_err *err) {
  *out = NULL;
  ar_onnx_model *m = NULL;
  AR_CHECK(model_new(name, NULL, limits, &m, err));
  ar_status st = n > m->lim.max_file_bytes
                     ? ar_errf(err, AR_RANGE, "%s: %zu bytes, more than the %zu allowed", m->path,
                               n, m->lim.max_file_bytes)
                     : parse(m, bytes, n, err);
  if (st != AR_OK) {
    ar_onnx_destroy(m);
    return st;
  }
  *out = m;
  return AR_OK;
}

ar_status ar_onnx_load(const char *path, const ar_fs *fs, const ar_onnx_limits *limits,
                       ar_onnx_model **out, ar_err *err) {
  *out = NULL;
  ar_onnx_model *m = NULL;
  AR_CHECK(model_new(path, fs, limits, &m, err));
  const char *slash = strrchr(path, '/');
  m->dir = slash ? ar_malloc((size_t)(slash - path) + 2) : ar_strdup(".");
  if (!m->dir) {
    ar_onnx_destroy(m);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  if (slash) {
    size_t l = slash == path ? 1 : (size_t)(slash - path);
    memcpy(m->dir, path, l);
    m->dir[l] = 0;
  }
  char *buf = NULL;
  size_t len = 0;
  ar_status st = ar_fs_read_all(fs, path, m->lim.max_file_bytes, &buf, &len, err);
  if (st == AR_RANGE)
    ar_err_wrap(err, "the model is larger than the %zu bytes allowed", m->lim.max_file_bytes);
  if (st == AR_OK)
    st = parse(m, (const uint8_t *)buf, len, err);
  ar_free(buf);
  if (st != AR_OK) {
    ar_onnx_destroy(m);
    return st;
  }
  *out = m;
  return AR_OK;
}

void ar_onnx_destroy(ar_onnx_model *m) {
  if (!m)
    return;
  if (m->inits && m->g)
    for (size_t i = 0; i < m->g->n_initializer; i++)
      ar_onnx_tensor_fini(&m->inits[i]);
  ar_free(m->inits);
  ar__onnx_map_fini(&m->init_of);
  if (m->mp)
    onnx__model_proto__free_unpacked(m->mp, &ar__onnx_alloc);
  ar_free(m->inputs);
  ar_free(m->input_proto);
  ar_free(m->outputs);
  ar_free(m->path);
  ar_free(m->dir);
  ar_free(m);
}

const char *ar_onnx_path(const ar_onnx_model *m) { return m->path; }
int64_t ar_onnx_opset(const ar_onnx_model *m) { return m->opset; }
int ar_onnx_n_inputs(const ar_onnx_model *m) { return m->n_inputs; }
const ar_onnx_io *ar_onnx_input(const ar_onnx_model *m, int i) {
  return i >= 0 && i < m->n_inputs ? &m->inputs[i] : NULL;
}
int ar_onnx_n_outputs(const ar_onnx_model *m) { return m->n_outputs; }
const ar_onnx_io *ar_onnx_output(const ar_onnx_model *m, int i) {
  return i >= 0 && i < m->n_outputs ? &m->outputs[i] : NULL;
}
int ar_onnx_n_nodes(const ar_onnx_model *m) { return m->g ? (int)m->g->n_node : 0; }
