/* A graph model's LSH-sampled head (runtime/engine/net_sampled.c, the
 * chain's sampled output layer in sampled.c): gradients on the active set
 * against finite differences (inactive rows get none and do not move the
 * loss), the head with every neuron active against the dense head, the
 * plan's exactness with its buffers and host entries, sparse.rescore
 * keeping the highest-scoring candidates, training lowering
 * the loss, a resume rebuilding the tables from the rows, and job-file
 * errors for sparse sections a graph model cannot take. */
#define _GNU_SOURCE
#include "accelrt/net.h"

#include "net_fixture.h"
#include "engine_impl.h"
#include "net_impl.h"
#include "net_impl_fixture.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* 40 classes behind a hidden layer; `inputs` makes it a graph model. */
static const char *const HEAD =
    "name: t\n"
    "device: host\n"
    "seed: 3\n"
    "model:\n"
    "  input: {dense: 6}\n"
    "  layers:\n"
    "    - {name: hid, dense: 8, activation: none, inputs: [input]}\n"
    "    - {name: t, op: tanh}\n"
    "    - name: out\n"
    "      dense: 40\n"
    "      activation: softmax\n"
    "      sparse: {mode: lsh, hash: srp, K: 3, L: 6, SAMPLING}\n"
    "data: {format: npy, train: x}\n"
    "train: {batch: 4, iterations: 1, threads: 1, optimizer: {adam: {lr: 0.05}}}\n";

#define edit net_edit
typedef net_fix fix;

/* HEAD with its sampling keys, the head dense when `dense`. */
static void fix_open_as(fix *f, const char *sampling, bool dense) {
  char *y0 = edit(HEAD, "SAMPLING", sampling);
  char *y = edit(y0, "mode: lsh", dense ? "mode: dense" : "mode: lsh");
  free(y0);
  net_start(f, y);
  free(y);
  net_fill_x(f->net, 91); /* 4 x 6 */
  int64_t *y2 = ar_net_y(f->net);
  for (int64_t r = 0; r < 4; r++)
    y2[r] = 7 * r + 3;
}

static void fix_open(fix *f, const char *sampling) { fix_open_as(f, sampling, false); }

#define fix_close net_close

#define tensor net_tensor
#define copy_of net_copy_of
#define diff net_central_diff /* of the sampled loss */
#define close_to net_grad_close

/* The head's rows that some example of the batch computed (its labels,
 * retrieved and shared negatives): gradient = finite difference; every
 * other row: no gradient and a loss that does not depend on it.  The
 * hidden layer's weights (through the head's input gradient) too. */
static void check_grads(const char *sampling) {
  fix f;
  fix_open(&f, sampling);
  ar_net *n = f.net;
  ar_err err = AR_ERR_INIT;
  double loss = 0;
  assert_int_equal(ar__net_grad(n, &loss, &err), AR_OK);
  assert_true(isfinite(loss) && loss > 0);
  ntensor *w = tensor(n, "out.w"), *hw = tensor(n, "hid.w");
  float *gw = copy_of(&n->tensors[w->grad]), *ghw = copy_of(&n->tensors[hw->grad]);
  const int64_t in = w->shape.d[1];
  double again = 0;
  assert_int_equal(ar__net_grad(n, &again, &err), AR_OK);
  assert_true(again == loss); /* the same active sets: the same loss */
  int active = 0, idle = 0, bad = 0;
  for (int64_t row = 0; row < 40; row++) {
    bool touched = false;
    for (int64_t k = 0; k < in; k++)
      touched |= gw[row * in + k] != 0.0f;
    for (int64_t k = 0; k < in; k += 3) {
      double num = diff(n, w->p, row * in + k), an = gw[row * in + k];
      if (!close_to(num, an) && bad++ < 5)
        printf("# out.w[%lld,%lld]: backward %.6g, finite difference %.6g\n", (long long)row,
               (long long)k, an, num);
    }
    active += touched;
    idle += !touched;
  }
  /* The labels are active: their rows have gradients. */
  for (int r = 0; r < 4; r++) {
    double s = 0;
    for (int64_t k = 0; k < in; k++)
      s += fabs(gw[(7 * r + 3) * in + k]);
    assert_true(s > 0);
  }
  if (!(active >= 4 && idle > 5))
    printf("# %d rows active, %d idle\n", active, idle);
  assert_true(active >= 4 && idle > 5); /* a sample, not the whole layer */
  for (int64_t j = 0; j < ar_shape_count(&hw->shape); j++) {
    double num = diff(n, hw->p, j);
    if (!close_to(num, ghw[j]) && bad++ < 10)
      printf("# hid.w[%lld]: backward %.6g, finite difference %.6g\n", (long long)j, ghw[j],
             num);
  }
  assert_int_equal(bad, 0);
  free(gw);
  free(ghw);
  fix_close(&f);
}

static void test_grads_on_active_set(void **state) {
  (void)state;
  check_grads("active: 0.1, min_active: 6, negatives: 0");
}

/* Uniform random negatives beside what the tables retrieve, their logits
 * corrected by log(width / drawn) or not: the gradients are still those
 * of the loss computed. */
static void test_grads_with_negatives(void **state) {
  (void)state;
  check_grads("active: 0.05, negatives: 9");
  check_grads("active: 0.05, negatives: 9, correction: none");
}

/* sparse.rescore: the gradients are those of the loss over the rows'
 * kept ids (the kept logits travel with their ids). */
static void test_grads_with_rescore(void **state) {
  (void)state;
  check_grads("active: 0.125, negatives: 9, rescore: 2");
}

/* sparse.rescore: of the rescore x budget candidates the tables rank
 * highest, a row keeps its label and the budget with the highest logits.
 * The twin has that wider budget and no rescore: the same tables give it
 * the same candidates, all of them scored. */
static void test_rescore_keeps_highest(void **state) {
  (void)state;
  fix w, r;
  fix_open(&w, "active: 0.25, min_active: 0, negatives: 0");             /* 10 */
  fix_open(&r, "active: 0.125, min_active: 0, negatives: 0, rescore: 2"); /* 5 of 10 */
  ar_err err = AR_ERR_INIT;
  double lw = 0, lr = 0;
  assert_int_equal(ar__net_grad(w.net, &lw, &err), AR_OK);
  assert_int_equal(ar__net_grad(r.net, &lr, &err), AR_OK);
  for (int64_t row = 0; row < 4; row++) {
    const uint32_t *iw, *ir;
    const float *ow, *orr;
    const size_t nw = ar__sampled_row(w.net->smp, row, &iw, &ow);
    const size_t nr = ar__sampled_row(r.net->smp, row, &ir, &orr);
    assert_int_equal(iw[0], 7 * row + 3); /* the label first */
    assert_int_equal(ir[0], 7 * row + 3);
    assert_true(ow[0] == orr[0]);          /* the same model */
    assert_true(nw > 6);                   /* more candidates than the budget */
    assert_int_equal(nr, 6);               /* the label and the budget */
    bool kept[16] = {false};
    assert_true(nw <= 16);
    float low = INFINITY;
    for (size_t k = 1; k < nr; k++) {
      size_t j = 1;
      while (j < nw && iw[j] != ir[k])
        j++;
      if (j == nw)
        fail_msg("row %lld kept %u, not a candidate", (long long)row, ir[k]);
      assert_false(kept[j]);
      kept[j] = true;
      assert_true(orr[k] == ow[j]); /* its own logit */
      low = orr[k] < low ? orr[k] : low;
    }
    for (size_t j = 1; j < nw; j++)
      if (!kept[j] && ow[j] > low)
        fail_msg("row %lld dropped %u (logit %g) above a kept one (%g)", (long long)row, iw[j],
                 ow[j], low);
  }
  fix_close(&w);
  fix_close(&r);
}

/* The mean over many batches (each draws other negatives) of the sampled
 * loss with `negatives: 8` of 40 classes: with the log-Q correction it
 * estimates the dense head's loss (the logits are nearly uniform at the
 * start, so the estimate's spread is small); without it the normaliser
 * counts the retrieved and drawn classes alone and the loss is far lower.
 * A drawn class a row also retrieved counts once: counted twice, the
 * corrected estimate would come out above the dense loss. */
static double mean_sampled_loss(const char *sampling) {
  fix f;
  fix_open(&f, sampling);
  ar_err err = AR_ERR_INIT;
  double sum = 0;
  const int n = 300;
  for (int k = 0; k < n; k++) {
    double l = 0;
    ar_net_set_step(f.net, k);
    assert_int_equal(ar__net_grad(f.net, &l, &err), AR_OK);
    sum += l;
  }
  fix_close(&f);
  return sum / n;
}

static void test_logq_estimates_dense_loss(void **state) {
  (void)state;
  fix d;
  fix_open_as(&d, "active: 0.05", true);
  ar_err err = AR_ERR_INIT;
  double ld = 0;
  assert_int_equal(ar__net_grad(d.net, &ld, &err), AR_OK);
  fix_close(&d);
  const double lq = mean_sampled_loss("active: 0.05, negatives: 8");
  const double ln = mean_sampled_loss("active: 0.05, negatives: 8, correction: none");
  printf("# dense loss %.4f, sampled mean: logq %.4f, none %.4f\n", ld, lq, ln);
  assert_true(fabs(lq - ld) < 0.05 * ld);
  assert_true(ln < ld - 0.5);
}

/* With active: 1 every neuron is scored: the loss and the gradients are
 * the dense head's. */
static void test_all_active_is_dense(void **state) {
  (void)state;
  fix s, d;
  fix_open(&s, "active: 1.0");
  fix_open_as(&d, "active: 1.0", true); /* the twin: every class by the dense op */
  assert_true(s.net->smp != NULL);
  assert_null(d.net->smp);
  ar_err err = AR_ERR_INIT;
  double ls = 0, ld = 0;
  assert_int_equal(ar__net_grad(s.net, &ls, &err), AR_OK);
  assert_int_equal(ar__net_grad(d.net, &ld, &err), AR_OK);
  if (fabs(ls - ld) > 1e-5 * fabs(ld))
    printf("# sampled loss %.8g, dense %.8g\n", ls, ld);
  assert_true(fabs(ls - ld) <= 1e-5 * fabs(ld));
  static const char *const names[] = {"out.w", "out.b", "hid.w", "hid.b"};
  for (int k = 0; k < 4; k++) {
    ntensor *a = tensor(s.net, names[k]), *b = tensor(d.net, names[k]);
    const float *ga = s.net->tensors[a->grad].p, *gb = d.net->tensors[b->grad].p;
    for (int64_t j = 0; j < ar_shape_count(&a->shape); j++)
      if (fabsf(ga[j] - gb[j]) > 1e-5f + 1e-4f * fabsf(gb[j]))
        fail_msg("%s[%lld]: sampled %.8g, dense %.8g", names[k], (long long)j, ga[j], gb[j]);
  }
  /* Evaluation scores every class with the dense op in both. */
  ar_eval_acc ea = {0}, eb = {0};
  assert_int_equal(ar_net_eval(s.net, 4, &ea, &err), AR_OK);
  assert_int_equal(ar_net_eval(d.net, 4, &eb, &err), AR_OK);
  assert_true(fabs(ea.loss_sum - eb.loss_sum) < 1e-5 * fabs(eb.loss_sum));
  fix_close(&s);
  fix_close(&d);
}

/* The device holds exactly the plan; the head's buffers and the lsh
 * library's host memory are entries of it. */
static void test_plan(void **state) {
  (void)state;
  fix f;
  fix_open(&f, "active: 0.1");
  const ar_plan *p = ar_net_plan(f.net);
  assert_int_equal(ar_device_bytes_in_use(f.dev), p->persistent_bytes + p->ephemeral_bytes);
  static const char *const want[] = {"out.lsh.tables", "out.lsh.hash", "out.lsh.scratch",
                                     "out.lsh.active", "out.lsh.shared_w", "out.lsh_last",
                                     "out.w.grad"};
  size_t host = 0;
  for (int i = 0; i < p->count; i++)
    if (p->entries[i].cls == AR_MEM_HOST)
      host += p->entries[i].bytes;
  assert_int_equal(host, p->host_bytes);
  for (int k = 0; k < 7; k++) {
    bool found = false;
    for (int i = 0; i < p->count; i++)
      if (!strcmp(p->entries[i].name, want[k])) {
        found = true;
        assert_true(p->entries[i].bytes > 0);
        /* The gradient rows persist (the sparse Adam zeroes them). */
        if (k == 6)
          assert_int_equal(p->entries[i].cls, AR_MEM_PERSISTENT);
      }
    if (!found)
      fail_msg("no plan entry %s", want[k]);
  }
  assert_int_equal(p->total_bytes, p->persistent_bytes + p->ephemeral_bytes + p->host_bytes);
  fix_close(&f);
}

/* Adam steps on one batch lower its loss; a second model given the
 * first's tensors and step (a resume: tables rebuilt from the rows)
 * evaluates the same and keeps training. */
static void test_train_and_resume(void **state) {
  (void)state;
  fix f, g;
  fix_open(&f, "active: 0.1");
  net_train_halves(f.net, 40);
  ar_err err = AR_ERR_INIT;
  double lr = 0;
  fix_open(&g, "active: 0.1");
  int nt = ar_net_tensors(f.net, NULL, NULL, NULL, NULL);
  const char **na = calloc((size_t)nt, sizeof *na), **nb = calloc((size_t)nt, sizeof *nb);
  float **pa = calloc((size_t)nt, sizeof *pa), **pb = calloc((size_t)nt, sizeof *pb);
  int64_t *ca = calloc((size_t)nt, sizeof *ca), *cb = calloc((size_t)nt, sizeof *cb);
  ar_net_tensors(f.net, na, pa, ca, NULL);
  assert_int_equal(ar_net_tensors(g.net, nb, pb, cb, NULL), nt);
  bool last = false;
  for (int i = 0; i < nt; i++) {
    assert_string_equal(na[i], nb[i]);
    memcpy(pb[i], pa[i], (size_t)ca[i] * sizeof(float));
    last |= !strcmp(na[i], "out.lsh_last"); /* each row's last update is kept */
  }
  assert_true(last);
  ar_net_set_step(g.net, ar_net_step(f.net));
  assert_int_equal(ar_net_resumed(g.net, &err), AR_OK);
  ar_eval_acc ea = {0}, eb = {0};
  assert_int_equal(ar_net_eval(f.net, 4, &ea, &err), AR_OK);
  assert_int_equal(ar_net_eval(g.net, 4, &eb, &err), AR_OK);
  assert_true(ea.loss_sum == eb.loss_sum);
  /* The tables are not stored: rebuilt from the rows at the step.  The
   * first model rebuilt the same way trains on exactly as the resumed one
   * (one thread: no HOGWILD reordering). */
  assert_int_equal(ar_net_resumed(f.net, &err), AR_OK);
  for (int i = 0; i < 3; i++) {
    double lf = 0, lg = 0;
    assert_int_equal(ar_net_train(f.net, &lf, &lr, &err), AR_OK);
    assert_int_equal(ar_net_train(g.net, &lg, &lr, &err), AR_OK);
    if (lf != lg)
      printf("# step %d after the resume: loss %.9g, the original's %.9g\n", i, lg, lf);
    assert_true(isfinite(lg) && lf == lg);
  }
  free(na), free(nb), free(pa), free(pb), free(ca), free(cb);
  fix_close(&f);
  fix_close(&g);
}

/* A step moves only the rows it touched: a row whose last update step
 * (out.lsh_last) is not this step keeps its weights and bias exactly (no
 * dense optimizer step on the head). */
static void test_only_touched_rows_move(void **state) {
  (void)state;
  fix f;
  fix_open(&f, "active: 0.1, min_active: 0, negatives: 0");
  ar_err err = AR_ERR_INIT;
  double loss = 0, lr = 0;
  for (int i = 0; i < 3; i++)
    assert_int_equal(ar_net_train(f.net, &loss, &lr, &err), AR_OK);
  ntensor *w = tensor(f.net, "out.w"), *b = tensor(f.net, "out.b");
  float *w0 = copy_of(w), *b0 = copy_of(b);
  assert_int_equal(ar_net_train(f.net, &loss, &lr, &err), AR_OK);
  const uint64_t *last = tensor(f.net, "out.lsh_last")->p;
  const int64_t in = w->shape.d[1], step = ar_net_step(f.net);
  int moved = 0, kept = 0;
  for (int64_t r = 0; r < 40; r++) {
    bool same = ((const float *)b->p)[r] == b0[r];
    for (int64_t k = 0; k < in; k++)
      same &= ((const float *)w->p)[r * in + k] == w0[r * in + k];
    if ((int64_t)last[r] == step) {
      moved++;
    } else {
      kept++;
      if (!same)
        fail_msg("row %lld was not touched at step %lld but moved", (long long)r,
                 (long long)step);
    }
  }
  assert_true(moved >= 4 && kept > 0);
  free(w0);
  free(b0);
  fix_close(&f);
}

#define expect_spec_error net_expect_error

static void test_errors(void **state) {
  (void)state;
  char *y = edit(HEAD, "SAMPLING", "L: 0");
  expect_spec_error(y, "net.yaml:12:");
  expect_spec_error(y, "model.layers[2].sparse.L");
  free(y);
  y = edit(HEAD, "hash: srp", "hash: md5");
  expect_spec_error(y, "model.layers[2].sparse.hash");
  free(y);
  y = edit(HEAD, "SAMPLING", "active: 2");
  expect_spec_error(y, "model.layers[2].sparse.active");
  free(y);
  y = edit(HEAD, "SAMPLING", "rescore: 65");
  expect_spec_error(y, "model.layers[2].sparse.rescore");
  free(y);
  /* A sampled head reads a dense item (a sampled one: the chain reads
   * its active set, not built; test_net_sampled_multi.c). */
  y = edit(HEAD, "{name: hid, dense: 8, activation: none, inputs: [input]}",
           "{name: hid, dense: 8, activation: none, inputs: [input], sparse: {mode: lsh}}");
  char *y2 = edit(y, "    - {name: t, op: tanh}\n", "");
  char *y3 = edit(y2, "SAMPLING", "active: 0.5");
  expect_spec_error(y3, "net.yaml:8:7: error: model.layers[1]: sparse: an LSH-sampled head "
                        "reading an LSH-sampled item (model.layers[0])");
  free(y);
  free(y2);
  free(y3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grads_on_active_set),
      cmocka_unit_test(test_grads_with_negatives),
      cmocka_unit_test(test_logq_estimates_dense_loss), cmocka_unit_test(test_all_active_is_dense),
      cmocka_unit_test(test_plan),                cmocka_unit_test(test_train_and_resume),
      cmocka_unit_test(test_errors),              cmocka_unit_test(test_only_touched_rows_move),
      cmocka_unit_test(test_grads_with_rescore),  cmocka_unit_test(test_rescore_keeps_highest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
