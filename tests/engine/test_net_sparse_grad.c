/* Sparse embedding gradients (runtime/engine/net_sparse_grad.c): an embedding
 * with sparse_grad lists the batch's distinct ids; its gradient rows equal
 * the dense twin's; plain SGD gives the dense result (within float rounding: the rows are
 * stepped one by one, the dense tensor in vector blocks); Adam follows
 * the lazy rule (a reference here: only the listed rows' moments and
 * values move, with the global step's bias correction) where dense Adam
 * moves absent rows; SGD with momentum and weight decay leaves absent rows
 * alone; the plan stays exact; misuse is refused at the item. */
#define _GNU_SOURCE
#include "accelrt/net.h"

#include "net_fixture.h"
#include "net_impl.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define VOCAB 40
#define WIDTH 5
#define SEQ 6
#define BATCH 4
#define USED 20 /* ids drawn from [0, USED): rows USED.. are never seen */

static const char *const TOKY =
    "name: t\n"
    "device: host\n"
    "seed: 8\n"
    "model:\n"
    "  input: {tokens: 6, vocab: 40}\n"
    "  layers:\n"
    "    - {name: emb, op: embedding, width: 5, sparse_grad: true}\n"
    "    - {name: m, op: mean, axis: 1}\n"
    "    - {name: h, dense: 7, activation: sigmoid}\n"
    "    - {name: out, dense: 3, activation: softmax}\n"
    "data: {format: npy, train: x}\n"
    "train: {batch: 4, iterations: 1, threads: 1, optimizer: {sgd: {lr: 0.5, momentum: 0}}}\n";

/* A batch of ids in [0, USED) drawn from seed; its distinct ids, ascending,
 * into want (their count returned). */
static int stage(ar_net *n, unsigned seed, int64_t *want) {
  int64_t *x = ar_net_x(n);
  bool seen[USED] = {false};
  unsigned s = seed;
  for (int i = 0; i < BATCH * SEQ; i++) {
    s = s * 1103515245u + 12345u;
    x[i] = (int64_t)((s >> 8) % USED);
    seen[x[i]] = true;
  }
  int64_t *y = ar_net_y(n);
  for (int r = 0; r < BATCH; r++)
    y[r] = (r + seed) % 3;
  int k = 0;
  for (int i = 0; i < USED; i++)
    if (seen[i] && want)
      want[k++] = i;
  return k;
}

static int tensor_named(const ar_net *n, const char *name) {
  for (int i = 0; i < n->n_tensors; i++)
    if (!strcmp(n->tensors[i].name, name))
      return i;
  fail_msg("no tensor %s", name);
  return -1;
}

static float *tp(const ar_net *n, const char *name) {
  return n->tensors[tensor_named(n, name)].p;
}

/* The embedding node's id list (its aux). */
static const int64_t *id_list(const ar_net *n) {
  const ntensor *t = &n->tensors[tensor_named(n, "emb.table")];
  assert_true(t->sparse);
  return n->tensors[n->nodes[t->producer].aux[0]].p;
}

static void start_pair(net_fix *sp, net_fix *dense, const char *yaml) {
  char *dy = net_edit(yaml, "sparse_grad: true", "sparse_grad: false");
  net_start(dense, dy);
  free(dy);
  net_start(sp, yaml);
  net_copy_tensors(sp->net, dense->net);
  /* Exact: start allocated the plan, the list included. */
  const ar_plan *p = ar_net_plan(sp->net);
  assert_int_equal(ar_device_bytes_in_use(sp->dev), p->persistent_bytes + p->ephemeral_bytes);
}

static void test_rows_and_plain_sgd(void **state) {
  (void)state;
  net_fix s, d;
  start_pair(&s, &d, TOKY);
  float *t0 = malloc(VOCAB * WIDTH * sizeof *t0);
  memcpy(t0, tp(s.net, "emb.table"), VOCAB * WIDTH * sizeof *t0);
  ar_err err = AR_ERR_INIT;
  int64_t want[USED];
  double ls, ld, lr;
  /* The gradient rows: the listed ones equal the dense gradient's. */
  int k = stage(s.net, 3, want);
  stage(d.net, 3, NULL);
  assert_int_equal(ar__net_grad(s.net, &ls, &err), AR_OK);
  assert_int_equal(ar__net_grad(d.net, &ld, &err), AR_OK);
  assert_true(ls == ld);
  const int64_t *list = id_list(s.net);
  assert_int_equal(list[0], k);
  assert_true(k < USED); /* some seen rows are absent from this batch */
  const float *gs = tp(s.net, "emb.table.grad"), *gd = tp(d.net, "emb.table.grad");
  for (int i = 0; i < k; i++) {
    assert_int_equal(list[1 + i], want[i]);
    for (int j = 0; j < WIDTH; j++)
      assert_true(gs[want[i] * WIDTH + j] == gd[want[i] * WIDTH + j]);
  }
  /* Plain SGD: every tensor as the dense run's, steps on. */
  for (int step = 0; step < 5; step++) {
    stage(s.net, 20 + (unsigned)step, NULL);
    stage(d.net, 20 + (unsigned)step, NULL);
    assert_int_equal(ar_net_train(s.net, &ls, &lr, &err), AR_OK);
    assert_int_equal(ar_net_train(d.net, &ld, &lr, &err), AR_OK);
    assert_true(fabs(ls - ld) <= 1e-6 * fabs(ld));
  }
  const char *names[] = {"emb.table", "h.w", "h.b", "out.w", "out.b"};
  for (size_t q = 0; q < sizeof names / sizeof names[0]; q++) {
    const ntensor *t = &s.net->tensors[tensor_named(s.net, names[q])];
    const float *a = t->p, *b = tp(d.net, names[q]);
    for (int64_t j = 0; j < ar_shape_count(&t->shape); j++)
      if (fabs(a[j] - b[j]) > 1e-6 * fmax(1e-3, fabs(b[j])))
        fail_msg("%s[%lld]: %.9g sparse, %.9g dense", names[q], (long long)j, a[j], b[j]);
  }
  /* Rows never seen never moved; seen ones did. */
  const float *t1 = tp(s.net, "emb.table");
  assert_memory_equal(t1 + USED * WIDTH, t0 + USED * WIDTH, (VOCAB - USED) * WIDTH * sizeof *t0);
  assert_memory_not_equal(t1, t0, USED * WIDTH * sizeof *t0);
  free(t0);
  net_close(&s);
  net_close(&d);
}

/* Adam: each step against the lazy rule computed here from the step's
 * listed rows and their gradients; the dense twin moves absent rows. */
static void test_lazy_adam(void **state) {
  (void)state;
  char *y = net_edit(TOKY, "{sgd: {lr: 0.5, momentum: 0}}", "{adam: {lr: 0.1}}");
  net_fix s, d;
  start_pair(&s, &d, y);
  free(y);
  const size_t bytes = VOCAB * WIDTH * sizeof(float);
  float *w = malloc(bytes), *m = calloc(1, bytes), *v = calloc(1, bytes), *dw = malloc(bytes);
  memcpy(w, tp(s.net, "emb.table"), bytes);
  ar_err err = AR_ERR_INIT;
  double loss, lr;
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  int absent_moved_dense = 0;
  for (int step = 1; step <= 6; step++) {
    stage(s.net, 50 + (unsigned)step, NULL);
    stage(d.net, 50 + (unsigned)step, NULL);
    memcpy(dw, tp(d.net, "emb.table"), bytes);
    assert_int_equal(ar_net_train(s.net, &loss, &lr, &err), AR_OK);
    assert_int_equal(ar_net_train(d.net, &loss, &lr, &err), AR_OK);
    const int64_t *list = id_list(s.net);
    const float *g = tp(s.net, "emb.table.grad");
    bool listed[VOCAB] = {false};
    for (int64_t i = 0; i < list[0]; i++) {
      const int64_t r = list[1 + i];
      listed[r] = true;
      for (int j = 0; j < WIDTH; j++) {
        const int64_t e = r * WIDTH + j;
        m[e] = (float)(b1 * m[e] + (1 - b1) * g[e]);
        v[e] = (float)(b2 * v[e] + (1 - b2) * (double)g[e] * g[e]);
        const double mh = m[e] / (1 - pow(b1, step)), vh = v[e] / (1 - pow(b2, step));
        w[e] = (float)(w[e] - 0.1 * mh / (sqrt(vh) + eps));
      }
    }
    const float *ws = tp(s.net, "emb.table"), *ms = tp(s.net, "emb.table.adam_m");
    const float *vs = tp(s.net, "emb.table.adam_v"), *wd = tp(d.net, "emb.table");
    for (int e = 0; e < VOCAB * WIDTH; e++) {
      if (fabs(ws[e] - w[e]) > 1e-5 * fmax(1.0, fabs(w[e])) || fabs(ms[e] - m[e]) > 1e-6 ||
          fabs(vs[e] - v[e]) > 1e-7)
        fail_msg("step %d, table[%d][%d]: %g (m %g, v %g), lazy Adam gives %g (m %g, v %g)",
                 step, e / WIDTH, e % WIDTH, ws[e], ms[e], vs[e], w[e], m[e], v[e]);
      if (!listed[e / WIDTH] && wd[e] != dw[e])
        absent_moved_dense++;
    }
  }
  /* The reference is not the dense rule: dense Adam moved rows the batch
   * did not hold (their moments were not zero). */
  assert_true(absent_moved_dense > 0);
  free(w), free(m), free(v), free(dw);
  net_close(&s);
  net_close(&d);
}

/* SGD with momentum and weight decay: rows absent from a step keep their
 * values and velocity. */
static void test_momentum_absent_rows(void **state) {
  (void)state;
  char *y = net_edit(TOKY, "{sgd: {lr: 0.5, momentum: 0}}", "{sgd: {lr: 0.1, momentum: 0.9, weight_decay: 0.01}}");
  net_fix s, d;
  start_pair(&s, &d, y);
  free(y);
  const size_t bytes = VOCAB * WIDTH * sizeof(float);
  float *w0 = malloc(bytes), *v0 = malloc(bytes);
  ar_err err = AR_ERR_INIT;
  double loss, lr;
  int checked = 0;
  for (int step = 0; step < 5; step++) {
    memcpy(w0, tp(s.net, "emb.table"), bytes);
    memcpy(v0, tp(s.net, "emb.table.velocity"), bytes);
    int64_t want[USED];
    int k = stage(s.net, 90 + (unsigned)step, want);
    assert_int_equal(ar_net_train(s.net, &loss, &lr, &err), AR_OK);
    const float *w = tp(s.net, "emb.table"), *v = tp(s.net, "emb.table.velocity");
    bool in[VOCAB] = {false};
    for (int i = 0; i < k; i++)
      in[want[i]] = true;
    for (int r = 0; r < VOCAB; r++) {
      if (in[r])
        continue;
      assert_memory_equal(w + r * WIDTH, w0 + r * WIDTH, WIDTH * sizeof *w);
      assert_memory_equal(v + r * WIDTH, v0 + r * WIDTH, WIDTH * sizeof *v);
      checked++;
    }
    assert_memory_not_equal(w, w0, bytes);
  }
  assert_true(checked > 5 * (VOCAB - USED));
  free(w0), free(v0);
  net_close(&s);
  net_close(&d);
}

static void test_refused(void **state) {
  (void)state;
  char *y = net_edit(TOKY, "{name: m, op: mean, axis: 1}",
                     "{name: m, op: mean, axis: 1}\n    - {name: z, dense: 4, sparse_grad: true}");
  net_expect_error(y, "net.yaml:9:7: error: model.layers[2]: sparse_grad: only an `embedding`");
  free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_and_plain_sgd),
      cmocka_unit_test(test_lazy_adam),
      cmocka_unit_test(test_momentum_absent_rows),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
