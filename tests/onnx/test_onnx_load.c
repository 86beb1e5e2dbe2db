/* The ONNX importer (include/accelrt/onnx.h) on models written here byte by
 * byte (a small protobuf writer, so that broken files are as easy to make
 * as good ones): a Gemm + Relu model imported and run against values
 * computed by hand, PyTorch's flatten idiom (Shape, Gather, Concat,
 * Reshape) folded to one reshape, every prefix of a model and corrupted
 * copies refused without a crash, nesting too deep refused before
 * protobuf-c sees it, opsets outside 7..17, tensors whose data does not
 * match their dims or whose type is not imported, undefined names, an op
 * that is not imported, and external data: read from the model's folder,
 * refused outside it (.., absolute, a symlink out) or short; and what the
 * importer answers to the fuzzers' findings (tests/fuzz/corpus/onnx). */
#define _GNU_SOURCE
#include "accelrt/net.h"
#include "accelrt/onnx.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- a protobuf writer ------------------------------------------------------ */

typedef struct pb {
  uint8_t *p;
  size_t n, cap;
} pb;

static void put(pb *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void varint(pb *b, uint64_t v) {
  uint8_t t[10];
  int k = 0;
  do {
    t[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(b, t, (size_t)k);
}

static void f_int(pb *b, int field, int64_t v) {
  varint(b, (uint64_t)field << 3);
  varint(b, (uint64_t)v);
}

static void f_bytes(pb *b, int field, const void *d, size_t n) {
  varint(b, (uint64_t)field << 3 | 2);
  varint(b, n);
  put(b, d, n);
}

static void f_str(pb *b, int field, const char *s) { f_bytes(b, field, s, strlen(s)); }

/* Appends sub as a message field and frees it. */
static void f_msg(pb *b, int field, pb *sub) {
  f_bytes(b, field, sub->p, sub->n);
  free(sub->p);
  memset(sub, 0, sizeof *sub);
}

enum { FLOAT = 1, UINT8 = 2, INT32 = 6, INT64 = 7, BOOL = 9, DOUBLE = 11 };

/* A TensorProto: dims, type, raw data (raw non-NULL) or float_data. */
static pb tensor(const char *name, int type, int nd, const int64_t *dims, const void *raw,
                 size_t raw_n, const float *floats, int n_floats) {
  pb t = {0};
  for (int i = 0; i < nd; i++)
    f_int(&t, 1, dims[i]);
  f_int(&t, 2, type);
  if (floats) {
    pb packed = {0};
    put(&packed, floats, (size_t)n_floats * sizeof(float));
    f_msg(&t, 4, &packed);
  }
  if (name)
    f_str(&t, 8, name);
  if (raw)
    f_bytes(&t, 9, raw, raw_n);
  return t;
}

/* A ValueInfoProto of a tensor: name, type, dims (-1: a symbolic "N"). */
static pb value_info(const char *name, int type, int nd, const int64_t *dims) {
  pb shape = {0}, tt = {0}, ty = {0}, v = {0};
  for (int i = 0; i < nd; i++) {
    pb d = {0};
    if (dims[i] < 0)
      f_str(&d, 2, "N");
    else
      f_int(&d, 1, dims[i]);
    f_msg(&shape, 1, &d);
  }
  f_int(&tt, 1, type);
  f_msg(&tt, 2, &shape);
  f_msg(&ty, 1, &tt);
  f_str(&v, 1, name);
  f_msg(&v, 2, &ty);
  return v;
}

/* A NodeProto: op, inputs (NULL-terminated), outputs, an int attribute
 * when attr is not NULL. */
static pb node(const char *name, const char *op, const char *const *in, const char *const *out,
               const char *attr, int64_t attr_v) {
  pb n = {0};
  for (int i = 0; in && in[i]; i++)
    f_str(&n, 1, in[i]);
  for (int i = 0; out && out[i]; i++)
    f_str(&n, 2, out[i]);
  if (name)
    f_str(&n, 3, name);
  f_str(&n, 4, op);
  if (attr) {
    pb a = {0};
    f_str(&a, 1, attr);
    f_int(&a, 3, attr_v);
    f_int(&a, 20, 2); /* INT */
    f_msg(&n, 5, &a);
  }
  return n;
}

/* A ModelProto around graph (consumed) with opset `opset`. */
static pb model(pb *graph, int64_t opset) {
  pb m = {0}, os = {0};
  f_int(&m, 1, 8);
  f_str(&os, 1, "");
  f_int(&os, 2, opset);
  f_msg(&m, 8, &os);
  f_msg(&m, 7, graph);
  return m;
}

/* ---- the models ----------------------------------------------------------------- */

static const float W[12] = {1, 0, -1, 0.5f, 2, 0, -1, -1, -1, 0, 0, 3};
static const float B[4] = {0.5f, -1, 0, 2};

/* y = relu(x W^T + B), x (N, 3) with N symbolic; W raw, B float_data; W
 * kept in `ext` (an external file's name) when not NULL. */
static pb gemm_relu(int64_t opset, const char *ext) {
  pb g = {0}, t;
  const int64_t wd[2] = {4, 3}, bd[1] = {4}, xd[2] = {-1, 3}, yd[2] = {-1, 4};
  if (ext) {
    t = tensor("W", FLOAT, 2, wd, NULL, 0, NULL, 0);
    pb e = {0};
    f_str(&e, 1, "location");
    f_str(&e, 2, ext);
    f_msg(&t, 13, &e);
    f_int(&t, 14, 1); /* EXTERNAL */
  } else {
    t = tensor("W", FLOAT, 2, wd, W, sizeof W, NULL, 0);
  }
  f_msg(&g, 5, &t);
  t = tensor("B", FLOAT, 1, bd, NULL, 0, B, 4);
  f_msg(&g, 5, &t);
  pb n = node("fc", "Gemm", (const char *[]){"x", "W", "B", NULL}, (const char *[]){"h", NULL},
              "transB", 1);
  f_msg(&g, 1, &n);
  n = node(NULL, "Relu", (const char *[]){"h", NULL}, (const char *[]){"y", NULL}, NULL, 0);
  f_msg(&g, 1, &n);
  f_str(&g, 2, "g");
  pb v = value_info("x", FLOAT, 2, xd);
  f_msg(&g, 11, &v);
  v = value_info("y", FLOAT, 2, yd);
  f_msg(&g, 12, &v);
  return model(&g, opset);
}

/* Imports m for input shapes (N, ...) and runs it on x; out receives the
 * single output.  Returns the graph's node count. */
static int run_model(const ar_onnx_model *m, const ar_shape *xs, const float *x, float *out) {
  ar_nn_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  ar_onnx_lower_opts o = AR_ONNX_LOWER_OPTS_INIT;
  o.input_shapes = xs;
  ar_status st = ar_onnx_lower(m, &o, &g, &err);
  if (st != AR_OK)
    printf("# %s\n", err.msg);
  assert_int_equal(st, AR_OK);
  ar_net *n = NULL;
  assert_int_equal(ar_net_build_graph(g, NULL, &n, &err), AR_OK);
  ar_device *dev = NULL;
  ar_device_opts d = AR_DEVICE_OPTS_INIT;
  d.threads = 1;
  d.pin = false;
  assert_int_equal(ar_device_open("host", &d, &dev, &err), AR_OK);
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  const void *in[1] = {x};
  void *outs[1] = {out};
  assert_int_equal(ar_net_infer(n, in, outs, &err), AR_OK);
  int nodes = g->n_nodes;
  ar_net_destroy(n);
  ar_device_close(dev);
  ar_nn_graph_destroy(g);
  return nodes;
}

static void check_gemm_relu(const ar_onnx_model *m) {
  const float x[6] = {1, 2, 3, -2, 0.5f, 1};
  float y[8];
  ar_shape xs = {2, {2, 3}};
  /* A Gemm with transB and a 1-D bias is one dense layer; then relu. */
  assert_int_equal(run_model(m, &xs, x, y), 2);
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 4; j++) {
      float s = B[j];
      for (int k = 0; k < 3; k++)
        s += x[r * 3 + k] * W[j * 3 + k];
      assert_float_equal(y[r * 4 + j], s > 0 ? s : 0, 1e-5);
    }
}

static void test_gemm_relu(void **state) {
  (void)state;
  pb b = gemm_relu(13, NULL);
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_onnx_load_mem(b.p, b.n, "mem.onnx", NULL, &m, &err), AR_OK);
  assert_int_equal(ar_onnx_opset(m), 13);
  assert_int_equal(ar_onnx_n_inputs(m), 1);
  assert_int_equal(ar_onnx_input(m, 0)->dim[0], -1); /* symbolic */
  assert_int_equal(ar_onnx_n_nodes(m), 2);
  check_gemm_relu(m);
  /* Without input shapes, the symbolic batch is an error naming it. */
  ar_nn_graph *g = NULL;
  assert_int_equal(ar_onnx_lower(m, NULL, &g, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "'x'"));
  ar_onnx_destroy(m);
  free(b.p);
}

/* PyTorch's x.view(x.size(0), -1): Shape, Gather, Unsqueeze, Concat with a
 * Constant, Reshape; everything but the reshape is folded. */
static void test_fold_flatten(void **state) {
  (void)state;
  pb g = {0}, t;
  const int64_t one[1] = {1}, xd[3] = {2, 3, 4}, yd[2] = {2, 12};
  const int64_t zero = 0, minus1 = -1;
  t = tensor("i0", INT64, 0, NULL, &zero, 8, NULL, 0);
  f_msg(&g, 5, &t);
  t = tensor("m1", INT64, 1, one, &minus1, 8, NULL, 0);
  f_msg(&g, 5, &t);
  pb n = node(NULL, "Shape", (const char *[]){"x", NULL}, (const char *[]){"s", NULL}, NULL, 0);
  f_msg(&g, 1, &n);
  n = node(NULL, "Gather", (const char *[]){"s", "i0", NULL}, (const char *[]){"n", NULL}, "axis",
           0);
  f_msg(&g, 1, &n);
  n = node(NULL, "Unsqueeze", (const char *[]){"n", NULL}, (const char *[]){"n1", NULL}, NULL, 0);
  pb ax = {0};
  f_str(&ax, 1, "axes");
  f_int(&ax, 8, 0);
  f_int(&ax, 20, 7); /* INTS */
  f_msg(&n, 5, &ax);
  f_msg(&g, 1, &n);
  n = node(NULL, "Concat", (const char *[]){"n1", "m1", NULL}, (const char *[]){"shape", NULL},
           "axis", 0);
  f_msg(&g, 1, &n);
  n = node("flat", "Reshape", (const char *[]){"x", "shape", NULL}, (const char *[]){"y", NULL},
           NULL, 0);
  f_msg(&g, 1, &n);
  pb v = value_info("x", FLOAT, 3, xd);
  f_msg(&g, 11, &v);
  v = value_info("y", FLOAT, 2, yd);
  f_msg(&g, 12, &v);
  pb b = model(&g, 12);
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_onnx_load_mem(b.p, b.n, "flat.onnx", NULL, &m, &err), AR_OK);
  float x[24], y[24];
  for (int i = 0; i < 24; i++)
    x[i] = (float)i - 7.5f;
  assert_int_equal(run_model(m, NULL, x, y), 1);
  assert_memory_equal(x, y, sizeof x);
  ar_onnx_destroy(m);
  free(b.p);
}

/* Any prefix of a model, and copies with bytes changed, load or are
 * refused with a message naming the file; never a crash. */
static void test_truncated_and_corrupt(void **state) {
  (void)state;
  pb b = gemm_relu(13, NULL);
  int refused = 0;
  for (size_t len = 0; len < b.n; len++) {
    ar_onnx_model *m = NULL;
    ar_err err = AR_ERR_INIT;
    ar_status st = ar_onnx_load_mem(b.p, len, "cut.onnx", NULL, &m, &err);
    if (st != AR_OK) {
      assert_non_null(strstr(err.msg, "cut.onnx"));
      refused++;
    }
    ar_onnx_destroy(m);
  }
  assert_true(refused > (int)b.n / 2);
  unsigned seed = 7;
  uint8_t *c = malloc(b.n);
  for (int k = 0; k < 2000; k++) {
    memcpy(c, b.p, b.n);
    for (int j = 0; j < 3; j++) {
      seed = seed * 1103515245u + 12345u;
      c[(seed >> 8) % b.n] = (uint8_t)(seed >> 20);
    }
    ar_onnx_model *m = NULL;
    ar_err err = AR_ERR_INIT;
    if (ar_onnx_load_mem(c, b.n, "bad.onnx", NULL, &m, &err) == AR_OK) {
      /* What loads must also lower (or be refused) safely. */
      ar_nn_graph *g = NULL;
      ar_shape xs = {2, {2, 3}};
      ar_onnx_lower_opts o = AR_ONNX_LOWER_OPTS_INIT;
      o.input_shapes = ar_onnx_n_inputs(m) == 1 ? &xs : NULL;
      if (ar_onnx_lower(m, &o, &g, &err) == AR_OK)
        ar_nn_graph_destroy(g);
    } else {
      assert_non_null(strstr(err.msg, "bad.onnx"));
    }
    ar_onnx_destroy(m);
  }
  free(c);
  free(b.p);
}

/* Graphs nested in attributes 200 deep: refused before the recursive
 * unpacker sees them. */
static void test_too_deep(void **state) {
  (void)state;
  pb g = {0};
  f_str(&g, 2, "leaf");
  for (int i = 0; i < 200; i++) {
    pb a = {0}, n = {0}, outer = {0};
    f_str(&a, 1, "body");
    f_msg(&a, 6, &g);
    f_str(&n, 4, "If");
    f_msg(&n, 5, &a);
    f_msg(&outer, 1, &n);
    g = outer;
  }
  pb b = model(&g, 13);
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_onnx_load_mem(b.p, b.n, "deep.onnx", NULL, &m, &err), AR_CORRUPT);
  assert_non_null(strstr(err.msg, "deep"));
  assert_null(m);
  free(b.p);
}

static void expect_refused(pb *b, ar_status want, const char *s1, const char *s2) {
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_onnx_load_mem(b->p, b->n, "m.onnx", NULL, &m, &err);
  printf("# %s\n", err.msg);
  assert_int_equal(st, want);
  assert_null(m);
  assert_non_null(strstr(err.msg, "m.onnx"));
  assert_non_null(strstr(err.msg, s1));
  if (s2)
    assert_non_null(strstr(err.msg, s2));
  free(b->p);
}

static void test_opsets(void **state) {
  (void)state;
  pb b = gemm_relu(6, NULL);
  expect_refused(&b, AR_UNSUPPORTED, "opset 6", "7..17");
  b = gemm_relu(18, NULL);
  expect_refused(&b, AR_UNSUPPORTED, "opset 18", "7..17");
  for (int64_t v = AR_ONNX_OPSET_MIN; v <= AR_ONNX_OPSET_MAX; v += 10) {
    b = gemm_relu(v, NULL);
    ar_onnx_model *m = NULL;
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_onnx_load_mem(b.p, b.n, "m.onnx", NULL, &m, &err), AR_OK);
    ar_onnx_destroy(m);
    free(b.p);
  }
}

/* A model whose only initializer is t (consumed) feeding an Identity. */
static pb with_initializer(pb *t) {
  pb g = {0};
  const int64_t yd[1] = {2};
  f_msg(&g, 5, t);
  pb n = node(NULL, "Identity", (const char *[]){"t", NULL}, (const char *[]){"y", NULL}, NULL, 0);
  f_msg(&g, 1, &n);
  pb v = value_info("y", FLOAT, 1, yd);
  f_msg(&g, 12, &v);
  return model(&g, 13);
}

static void test_bad_tensors(void **state) {
  (void)state;
  const int64_t two[1] = {2}, neg[1] = {-3}, huge[3] = {1 << 30, 1 << 30, 1 << 30};
  const float f3[3] = {1, 2, 3};
  pb t = tensor("t", FLOAT, 1, two, f3, sizeof f3, NULL, 0);
  pb b = with_initializer(&t);
  expect_refused(&b, AR_INVALID, "initializer 't'", "raw_data has 12 bytes");
  t = tensor("t", FLOAT, 1, two, NULL, 0, f3, 3);
  b = with_initializer(&t);
  expect_refused(&b, AR_INVALID, "initializer 't'", "3 f32 values");
  const double d2[2] = {1, 2};
  t = tensor("t", DOUBLE, 1, two, d2, sizeof d2, NULL, 0);
  b = with_initializer(&t);
  expect_refused(&b, AR_UNSUPPORTED, "DOUBLE", "float32");
  t = tensor("t", FLOAT, 1, neg, NULL, 0, NULL, 0);
  b = with_initializer(&t);
  expect_refused(&b, AR_INVALID, "initializer 't'", "-3");
  t = tensor("t", FLOAT, 3, huge, NULL, 0, NULL, 0);
  b = with_initializer(&t);
  expect_refused(&b, AR_RANGE, "initializer 't'", "bytes");
  /* bool in int32_data: 0 or 1 only */
  t = (pb){0};
  f_int(&t, 1, 2);
  f_int(&t, 2, BOOL);
  pb packed = {0};
  varint(&packed, 1);
  varint(&packed, 2);
  f_msg(&t, 5, &packed);
  f_str(&t, 8, "t");
  b = with_initializer(&t);
  expect_refused(&b, AR_INVALID, "element 1 is 2", "bool");
}

static void test_undefined_and_unsupported(void **state) {
  (void)state;
  pb g = {0};
  const int64_t d[1] = {2};
  pb n =
      node("first", "Relu", (const char *[]){"nope", NULL}, (const char *[]){"y", NULL}, NULL, 0);
  f_msg(&g, 1, &n);
  pb v = value_info("y", FLOAT, 1, d);
  f_msg(&g, 12, &v);
  pb b = model(&g, 13);
  expect_refused(&b, AR_INVALID, "node 'first' (Relu)", "'nope'");
  /* An op the importer does not know: loads, lowering names it. */
  g = (pb){0};
  n = node("hm", "Hardmax", (const char *[]){"x", NULL}, (const char *[]){"y", NULL}, NULL, 0);
  f_msg(&g, 1, &n);
  v = value_info("x", FLOAT, 1, d);
  f_msg(&g, 11, &v);
  v = value_info("y", FLOAT, 1, d);
  f_msg(&g, 12, &v);
  b = model(&g, 13);
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_onnx_load_mem(b.p, b.n, "hm.onnx", NULL, &m, &err), AR_OK);
  ar_nn_graph *gr = NULL;
  assert_int_equal(ar_onnx_lower(m, NULL, &gr, &err), AR_UNSUPPORTED);
  printf("# %s\n", err.msg);
  assert_non_null(strstr(err.msg, "hm.onnx"));
  assert_non_null(strstr(err.msg, "node 'hm' (Hardmax)"));
  assert_non_null(strstr(err.msg, "not imported"));
  ar_onnx_destroy(m);
  free(b.p);
}

/* ---- external data ---------------------------------------------------------------- */

static void write_file(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(d, 1, n, f), n);
  fclose(f);
}

/* Writes the Gemm model with W in `loc` into dir; returns the load's
 * status (the model loaded into *out when AR_OK). */
static ar_status load_external(const char *dir, const char *loc, ar_onnx_model **out, ar_err *err) {
  char path[512];
  pb b = gemm_relu(13, loc);
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  write_file(path, b.p, b.n);
  free(b.p);
  ar_status st = ar_onnx_load(path, NULL, NULL, out, err);
  if (st != AR_OK)
    printf("# %s\n", err->msg);
  return st;
}

static void test_external_data(void **state) {
  (void)state;
  char root[] = "/tmp/onnx_ext_XXXXXX", dir[600], path[700];
  assert_non_null(mkdtemp(root));
  snprintf(dir, sizeof dir, "%s/model", root);
  assert_int_equal(mkdir(dir, 0700), 0);
  snprintf(path, sizeof path, "%s/w.bin", dir);
  write_file(path, W, sizeof W);
  snprintf(path, sizeof path, "%s/outside.bin", root);
  write_file(path, W, sizeof W);
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(load_external(dir, "w.bin", &m, &err), AR_OK);
  check_gemm_relu(m);
  ar_onnx_destroy(m);
  /* Outside the folder: by name, by path, by a link. */
  assert_int_equal(load_external(dir, "../outside.bin", &m, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "'../outside.bin'"));
  assert_non_null(strstr(err.msg, "initializer 'W'"));
  assert_int_equal(load_external(dir, path, &m, &err), AR_INVALID);
  char link[700];
  snprintf(link, sizeof link, "%s/link.bin", dir);
  assert_int_equal(symlink(path, link), 0);
  assert_int_not_equal(load_external(dir, "link.bin", &m, &err), AR_OK);
  assert_non_null(strstr(err.msg, "link.bin"));
  /* Short: fewer bytes than the dims need. */
  snprintf(path, sizeof path, "%s/short.bin", dir);
  write_file(path, W, sizeof W - 4);
  assert_int_equal(load_external(dir, "short.bin", &m, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "truncated"));
  /* From memory there is no folder. */
  pb b = gemm_relu(13, "w.bin");
  assert_int_equal(ar_onnx_load_mem(b.p, b.n, "mem.onnx", NULL, &m, &err), AR_UNSUPPORTED);
  free(b.p);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  assert_int_equal(system(cmd), 0);
}

/* A TensorProto file (ONNX's test data). */
static void test_tensor_file(void **state) {
  (void)state;
  const int64_t d[2] = {2, 2};
  const int64_t v[4] = {5, -6, 7, 1LL << 40};
  pb t = tensor("ids", INT64, 2, d, v, sizeof v, NULL, 0);
  ar_onnx_tensor out;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_onnx_parse_tensor(t.p, t.n, "t.pb", NULL, &out, &err), AR_OK);
  assert_int_equal(out.dtype, AR_DT_I64);
  assert_int_equal(out.shape.nd, 2);
  assert_string_equal(out.name, "ids");
  assert_memory_equal(out.data, v, sizeof v);
  ar_onnx_tensor_fini(&out);
  assert_int_equal(ar_onnx_parse_tensor(t.p, t.n - 3, "t.pb", NULL, &out, &err), AR_CORRUPT);
  assert_non_null(strstr(err.msg, "t.pb"));
  free(t.p);
}

/* ---- the fuzzers' findings --------------------------------------------------------- */

/* The inputs of tests/fuzz/corpus/onnx that once crashed the importer
 * (tests/fuzz/make_onnx_corpus.py writes them): fuzz.onnx_corpus replays
 * them under the sanitizers; here each gives its answer.  A refusal names
 * the file and says what is wrong (`says`); an accepted one folds to the
 * i64 or f32 values `want` (NumPy's: abs(INT64_MIN) wraps, (-1) to an even
 * power is 1, a float clipped from 1e30 stays 1e30).  The limits are
 * fuzz_onnx's (16 MiB a tensor). */
/* Range's element i from f32 9.3e18 by f32 1e12, as the fold computes it. */
#define RANGE_AT(i) ((double)9.3e18f + (i) * (double)1e12f)

typedef struct finding {
  const char *file;
  ar_status load, lower;
  const char *says;
  int n; /* values wanted, for an accepted one with a constant output */
  double want[3];
} finding;

static const finding findings[] = {
    {"no_output", AR_INVALID, AR_OK, "has no outputs", 0, {0}},
    {"empty_string_attr", AR_OK, AR_INVALID, "auto_pad ''", 0, {0}},
    {"empty_ints_attr", AR_OK, AR_INVALID, "perm has 0 entries", 0, {0}},
    {"binary_extra_input", AR_OK, AR_INVALID, "Add takes two inputs, not 3", 0, {0}},
    {"int_abs_min", AR_OK, AR_OK, NULL, 1, {(double)INT64_MIN}},
    {"int_mod_min", AR_OK, AR_OK, NULL, 1, {0}},
    {"int_pow_min", AR_OK, AR_OK, NULL, 1, {1}},
    {"clip_huge_float", AR_OK, AR_OK, NULL, 1, {(float)(1e30 + 3.0)}},
    {"clip_empty_min", AR_OK, AR_INVALID, "min and max must be single values", 0, {0}},
    {"range_huge", AR_OK, AR_OK, NULL, 3, {9.3e18f, RANGE_AT(1), RANGE_AT(2)}},
    {"dropout_empty_mode", AR_OK, AR_INVALID, "('none') is not a single value", 0, {0}},
    {"transpose_repeat", AR_OK, AR_INVALID, "not a permutation", 0, {0}},
    {"split_negative", AR_OK, AR_INVALID, "split size 5 is outside the axis of 2", 0, {0}},
    {"split_huge", AR_OK, AR_INVALID, "split size 9223372036854775807 is outside", 0, {0}},
    {"matmul_empty_k", AR_OK, AR_OK, NULL, 0, {0}},
    {"empty_huge_dims", AR_RANGE, AR_OK, "initializer 'e'", 0, {0}},
    {"constant_of_shape_huge", AR_OK, AR_RANGE, "would be made at import", 0, {0}},
    {"attr_wrong_type", AR_OK, AR_INVALID, "is a float, but ONNX defines it as an int", 0, {0}},
    {"fold_too_big", AR_OK, AR_RANGE, "16384x16384 elements would be made at import", 0, {0}},
};

static void check_finding(const finding *f) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.onnx", FUZZ_ONNX_CORPUS, f->file);
  printf("# %s\n", f->file);
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  ar_onnx_limits lim = AR_ONNX_LIMITS_INIT;
  lim.max_tensor_bytes = (size_t)1 << 24; /* fuzz_onnx's */
  ar_status st = ar_onnx_load(path, NULL, &lim, &m, &err);
  assert_int_equal(st, f->load);
  if (st != AR_OK) {
    printf("#   %s\n", err.msg);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, f->says));
    return;
  }
  ar_nn_graph *g = NULL;
  st = ar_onnx_lower(m, NULL, &g, &err);
  assert_int_equal(st, f->lower);
  if (st != AR_OK) {
    printf("#   %s\n", err.msg);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, f->says));
  } else if (f->n) {
    const ar_nn_gtensor *y = &g->tensors[g->outputs[0]];
    assert_int_equal(y->kind, AR_NN_T_CONST);
    assert_int_equal(ar_shape_count(&y->shape), f->n);
    for (int i = 0; i < f->n; i++) {
      if (y->dtype == AR_DT_I64)
        assert_true(((const int64_t *)y->data)[i] == (int64_t)f->want[i]);
      else
        assert_true(((const float *)y->data)[i] == (float)f->want[i]);
    }
  }
  ar_nn_graph_destroy(g);
  ar_onnx_destroy(m);
}

static void test_fuzz_findings(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof findings / sizeof findings[0]; i++)
    check_finding(&findings[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_relu),
      cmocka_unit_test(test_fold_flatten),
      cmocka_unit_test(test_truncated_and_corrupt),
      cmocka_unit_test(test_too_deep),
      cmocka_unit_test(test_opsets),
      cmocka_unit_test(test_bad_tensors),
      cmocka_unit_test(test_undefined_and_unsupported),
      cmocka_unit_test(test_external_data),
      cmocka_unit_test(test_tensor_file),
      cmocka_unit_test(test_fuzz_findings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
