/* A graph model over sparse input (runtime/engine/net_sparse_in.c): the
 * same network as a chain model (the job file without `inputs:`) starts
 * from the chain's initial parameters and trains to the same losses and
 * parameters step for step, bit for bit on one thread, on full and padded
 * (short) batches; its plan
 * is exact (start allocates the two blocks, the batch's tensors are the
 * data's bounds); start faults both blocks in, as the chain's model does;
 * and the located errors of what it does not build. */
#define _GNU_SOURCE
#include "accelrt/graph.h"
#include "accelrt/net.h"

#include "net_fixture.h"
#include "net_impl.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

enum { FEATURES = 20, HIDDEN = 8, CLASSES = 6, BATCH = 5, MAX_NNZ = 4, MAX_LABELS = 3 };

static const char *const GRAPH =
    "name: t\n"
    "device: host\n"
    "seed: 3\n"
    "model:\n"
    "  input: {sparse: 20}\n"
    "  layers:\n"
    "    - {name: hidden, dense: 8, activation: relu, inputs: [input]}\n"
    "    - {name: out, dense: 6, activation: softmax}\n"
    "data: {format: xc, train: x}\n"
    "train: {batch: 5, iterations: 1, threads: 1, optimizer: {adam: {lr: 0.01}}}\n";

static ar_device *host1(void) { return net_host(1); }

/* A random batch of `rows` rows: 1..MAX_NNZ distinct features, 1..MAX_LABELS
 * distinct labels each (row 0: no labels, as XC data may have). */
static void fill_batch(ar_batch *b, int64_t rows, unsigned *seed) {
  static const net_sparse_shape sh = {FEATURES, CLASSES, MAX_NNZ, MAX_LABELS, 0, 1};
  net_fill_sparse_batch(b, rows, seed, &sh);
}

/* The net's parameter named `name` (its values, host memory). */
static float *param(ar_net *n, const char *name, int64_t count) {
  ar_net_param ps[16];
  int np = ar_net_params(n, NULL);
  assert_true(np <= 16);
  ar_net_params(n, ps);
  for (int i = 0; i < np; i++)
    if (!strcmp(ps[i].name, name)) {
      assert_int_equal(ps[i].count, count);
      return ps[i].p;
    }
  fail_msg("no parameter %s", name);
  return NULL;
}

static void test_same_as_chain(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  ar_spec *gs = net_parse_any(GRAPH);
  assert_true(gs->graph);
  char *chain_yaml = net_edit(GRAPH, ", inputs: [input]", "");
  ar_spec *cs = net_parse_any(chain_yaml);
  free(chain_yaml);
  assert_false(cs->graph);
  ar_device *dev = host1();
  ar_model *m = NULL;
  assert_int_equal(ar_model_create(dev, cs, MAX_NNZ, MAX_LABELS, &m, &err), AR_OK);
  ar_net *n = NULL;
  assert_int_equal(ar_net_build_sparse(gs, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_OK);
  assert_true(ar_net_sparse_input(n));
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  /* The chain's initial values (its rule and streams), in the chain's
   * layouts: w (in, out) for the layer on the sparse input, (out, in)
   * after it. */
  float *gw[4] = {param(n, "hidden.w", FEATURES * HIDDEN), param(n, "hidden.b", HIDDEN),
                  param(n, "out.w", HIDDEN * CLASSES), param(n, "out.b", CLASSES)};
  const float *cw[4] = {m->layers[0].w, m->layers[0].b, m->layers[1].w, m->layers[1].b};
  const int64_t cnt[4] = {FEATURES * HIDDEN, HIDDEN, HIDDEN * CLASSES, CLASSES};
  for (int k = 0; k < 4; k++)
    assert_memory_equal(gw[k], cw[k], (size_t)cnt[k] * sizeof(float));
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, BATCH, MAX_NNZ, MAX_LABELS), AR_OK);
  unsigned seed = 11u;
  double worst = 0;
  for (int it = 0; it < 12; it++) {
    /* Every third batch is short: the graph pads it. */
    fill_batch(&b, it % 3 == 2 ? BATCH - 2 : BATCH, &seed);
    float closs = 0;
    assert_int_equal(ar_model_train_batch(m, &b, &closs), AR_OK);
    double gloss = 0, lr = 0;
    assert_int_equal(ar_net_stage_sparse(n, &b, &err), AR_OK);
    assert_int_equal(ar_net_train(n, &gloss, &lr, &err), AR_OK);
    /* One thread: the same kernels in the same order, so the same bits. */
    if ((float)gloss != closs)
      printf("# step %d: chain loss %.9g, graph %.9g\n", it + 1, closs, gloss);
    assert_true((float)gloss == closs);
    for (int k = 0; k < 4; k++)
      for (int64_t j = 0; j < cnt[k]; j++)
        worst = fmax(worst, fabs((double)gw[k][j] - (double)cw[k][j]));
  }
  if (worst != 0)
    printf("# largest parameter difference after 12 steps: %.3g\n", worst);
  assert_true(worst == 0);
  ar_batch_fini(&b);
  ar_net_destroy(n);
  ar_model_destroy(m);
  ar_device_close(dev);
  ar_spec_destroy(cs);
  ar_spec_destroy(gs);
}

/* start allocates exactly the two blocks; the batch's tensors hold the
 * data's bounds; the staging area is the plan's host bytes. */
static void test_plan_exact(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  ar_spec *gs = net_parse_any(GRAPH);
  ar_net *n = NULL;
  assert_int_equal(ar_net_build_sparse(gs, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_OK);
  const ar_plan *p = ar_net_plan(n);
  const struct {
    const char *name;
    size_t bytes;
  } want[] = {{"batch.row_ptr", (BATCH + 1) * 8}, {"batch.idx", BATCH * MAX_NNZ * 4},
              {"batch.val", BATCH * MAX_NNZ * 4}, {"batch.lab_ptr", (BATCH + 1) * 8},
              {"batch.lab", BATCH * MAX_LABELS * 4}, {"hidden.w", FEATURES * HIDDEN * 4}};
  size_t batch_bytes = 0, staging = 0;
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    bool found = false;
    for (int i = 0; i < p->count; i++)
      if (!strcmp(p->entries[i].name, want[k].name)) {
        assert_int_equal(p->entries[i].bytes, want[k].bytes);
        found = true;
      }
    assert_true(found);
    batch_bytes += k < 5 ? want[k].bytes : 0;
  }
  for (int i = 0; i < p->count; i++)
    if (!strcmp(p->entries[i].name, "batch.staging"))
      staging = p->entries[i].bytes;
  /* The batch, the loss rows and the top 5 of each row. */
  assert_int_equal(staging, batch_bytes + BATCH * (4 + 5 * 4));
  assert_int_equal(p->host_bytes, staging);
  ar_device *dev = host1();
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  assert_int_equal(ar_device_bytes_in_use(dev), p->persistent_bytes + p->ephemeral_bytes);
  /* A batch past the plan is refused with what to do. */
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, BATCH, MAX_NNZ + 1, MAX_LABELS), AR_OK);
  unsigned seed = 5u;
  fill_batch(&b, BATCH, &seed);
  b.row_ptr[BATCH] = BATCH * (MAX_NNZ + 1);
  assert_int_equal(ar_net_stage_sparse(n, &b, &err), AR_RANGE);
  assert_non_null(strstr(err.msg, "exceeds the plan"));
  fill_batch(&b, BATCH, &seed);
  b.idx[0] = FEATURES;
  assert_int_equal(ar_net_stage_sparse(n, &b, &err), AR_RANGE);
  assert_non_null(strstr(err.msg, "outside model.input.sparse 20"));
  ar_batch_fini(&b);
  ar_net_destroy(n);
  ar_device_close(dev);
  ar_spec_destroy(gs);
}

/* The pages of [p, p + bytes) that are not in memory (mincore). */
static size_t pages_out(const void *p, size_t bytes) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  const uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(pg - 1);
  const size_t len = (uintptr_t)p + bytes - lo, n = (len + pg - 1) / pg;
  unsigned char *in = malloc(n);
  assert_non_null(in);
  assert_int_equal(mincore((void *)lo, len, in), 0);
  size_t out = 0;
  for (size_t i = 0; i < n; i++)
    out += !(in[i] & 1u);
  free(in);
  return out;
}

/* start touches every page of the blocks it allocates, as the chain's
 * model does (model.c, own_blocks): a first iteration that faulted them
 * in was 10% slower than the chain's at the Amazon-670K shape
 * (bench/dense --chain-vs-graph), which pays that before its clock. The
 * logits and their gradient here (128 x 100,000) are past glibc's largest
 * mmap threshold, so the block is new pages, not reused heap. */
static void test_start_touches_blocks(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  char *y1 = net_edit(GRAPH, "dense: 6,", "dense: 100000,");
  char *yaml = net_edit(y1, "batch: 5,", "batch: 128,");
  free(y1);
  ar_spec *gs = net_parse_any(yaml);
  free(yaml);
  ar_net *n = NULL;
  assert_int_equal(ar_net_build_sparse(gs, 128, MAX_NNZ, MAX_LABELS, &n, &err), AR_OK);
  const ar_plan *p = ar_net_plan(n);
  assert_true(p->ephemeral_bytes > ((size_t)64 << 20));
  ar_device *dev = host1();
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  size_t eph = pages_out(n->ephemeral, p->ephemeral_bytes);
  size_t per = pages_out(n->persistent, p->persistent_bytes);
  if (eph || per)
    printf("# after start: %zu ephemeral and %zu persistent pages not in memory\n", eph, per);
  assert_true(eph == 0 && per == 0);
  ar_net_destroy(n);
  ar_device_close(dev);
  ar_spec_destroy(gs);
}

static void expect_sparse_error(const char *from, const char *to, const char *want) {
  char *yaml = net_edit(GRAPH, from, to);
  ar_spec *s = net_parse_any(yaml);
  free(yaml);
  ar_net *n = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_SPEC);
  assert_null(n);
  if (!strstr(err.msg, want))
    printf("# got: %s\n# want: %s\n", err.msg, want);
  assert_non_null(strstr(err.msg, want));
  ar_spec_destroy(s);
}

static void test_errors(void **state) {
  (void)state;
  expect_sparse_error("{name: hidden, dense: 8, activation: relu, inputs: [input]}",
                      "{name: hidden, op: relu, inputs: [input]}",
                      "net.yaml:7:7: error: model.layers[0]: the sparse input "
                      "(model.input.sparse) feeds dense items only");
  /* An LSH-sampled head over the hidden item builds (its training:
   * test_net_sampled_multi.c). */
  char *yaml = net_edit(GRAPH, "{name: out, dense: 6, activation: softmax}",
                        "{name: out, dense: 6, activation: softmax, sparse: {mode: lsh}}");
  ar_spec *s = net_parse_any(yaml);
  free(yaml);
  ar_net *n = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_OK);
  ar_net_destroy(n);
  ar_spec_destroy(s);
  /* A sigmoid output (binary cross-entropy over the labels) builds. */
  yaml = net_edit(GRAPH, "activation: softmax", "activation: sigmoid");
  s = net_parse_any(yaml);
  free(yaml);
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_OK);
  ar_net_destroy(n);
  /* The plain build cannot plan it: it does not know the data's bounds. */
  assert_int_equal(ar_net_build(s, BATCH, &n, &err), AR_SPEC);
  assert_non_null(strstr(err.msg, "row bounds"));
  ar_spec_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_as_chain),
      cmocka_unit_test(test_plan_exact),
      cmocka_unit_test(test_start_touches_blocks),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
