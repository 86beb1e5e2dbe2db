/* The graph engine's fusion pass (runtime/engine/net_fuse.c): the same job
 * built fused and with ACCELRT_FUSE=0, the fused net's parameters copied
 * from the unfused one by name, then trained side by side: the losses of
 * every step agree within 1e-5 relative, every parameter's gradient agrees,
 * and the evaluation (convs folded with their batch norms) gives the
 * unfused logits.  The rewrite is visible (fewer nodes, ops named
 * conv+relu, batchnorm+relu and add+relu, the folded tensors in the plan),
 * the plan stays exact (start allocates it, nothing more while training
 * and evaluating) and no two live tensors share bytes. */
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

/* A residual block with every relu a node of its own; `bn2` is read only
 * by the add, so the add takes the last relu; c1 and c2 fold with bn1 and
 * bn2 in evaluation, c3 (read by two nodes) does not. */
static const char *const RESY =
    "name: t\n"
    "device: host\n"
    "seed: 3\n"
    "model:\n"
    "  input: {image: [2, 6, 6]}\n"
    "  layers:\n"
    "    - {name: c1, conv: 4, kernel: 3, padding: 1, bias: false}\n"
    "    - {name: bn1, op: batchnorm}\n"
    "    - {name: r1, op: relu}\n"
    "    - {name: c2, conv: 4, kernel: 3, padding: 1}\n"
    "    - {name: bn2, op: batchnorm}\n"
    "    - {name: sum, op: add, inputs: [bn2, r1]}\n"
    "    - {name: r2, op: relu}\n"
    "    - {name: c3, conv: 4, kernel: 3, padding: 1}\n"
    "    - {name: r3, op: relu}\n"
    "    - {name: t3, op: tanh, inputs: [c3]}\n"
    "    - {name: j, op: add, inputs: [r3, t3]}\n"
    "    - {name: p, op: maxpool, kernel: 2}\n"
    "    - {name: flat, op: flatten}\n"
    "    - {name: out, dense: 3, activation: softmax}\n"
    "data: {format: idx, train: x}\n"
    "train: {batch: 8, iterations: 1, threads: 1, optimizer: {sgd: {lr: 0.05, momentum: 0.9}}}\n";

static void stage(ar_net *n, unsigned seed) {
  const ar_shape *xs = ar_net_input_shape(n);
  net_fill_x(n, seed);
  int64_t *y = ar_net_y(n);
  for (int64_t r = 0; r < xs->d[0]; r++)
    y[r] = (r + seed) % 3;
}

static void start_both(net_fix *fused, net_fix *plain, const char *yaml) {
  setenv("ACCELRT_FUSE", "0", 1);
  net_start(plain, yaml);
  unsetenv("ACCELRT_FUSE");
  net_start(fused, yaml);
  /* The same initial parameters (each tensor's stream survives the
   * rewrite's renumbering); copied anyway below. */
  int c = ar_net_tensors(fused->net, NULL, NULL, NULL, NULL);
  const char **names = calloc((size_t)c, sizeof *names);
  float **ptrs = calloc((size_t)c, sizeof *ptrs);
  int64_t *counts = calloc((size_t)c, sizeof *counts);
  ar_net_tensors(fused->net, names, ptrs, counts, NULL);
  for (int i = 0; i < c; i++) {
    int j = 0;
    while (j < plain->net->n_tensors && strcmp(plain->net->tensors[j].name, names[i]))
      j++;
    assert_true(j < plain->net->n_tensors);
    assert_memory_equal(ptrs[i], plain->net->tensors[j].p, (size_t)counts[i] * sizeof(float));
  }
  free(names), free(ptrs), free(counts);
  net_copy_tensors(fused->net, plain->net);
}

static char *printed(const ar_net *n) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  ar_net_print(n, m);
  fclose(m);
  return text;
}

static int count_plan(const ar_plan *p, const char *part) {
  int c = 0;
  for (int i = 0; i < p->count; i++)
    c += strstr(p->entries[i].name, part) != NULL;
  return c;
}

static bool has_entry(const ar_plan *p, const char *name) {
  for (int i = 0; i < p->count; i++)
    if (!strcmp(p->entries[i].name, name))
      return true;
  return false;
}

/* No two ephemeral tensors alive at one step share bytes. */
/* The most bytes of ephemeral tensors alive at one step (what any
 * placement needs at the least). */
static size_t most_alive(const ar_plan *p) {
  size_t most = 0;
  for (int i = 0; i < p->count; i++) {
    if (p->entries[i].cls != AR_MEM_EPHEMERAL)
      continue;
    size_t sum = 0;
    const int64_t s = p->entries[i].first_use;
    for (int j = 0; j < p->count; j++) {
      const ar_plan_entry *e = &p->entries[j];
      if (e->cls == AR_MEM_EPHEMERAL && e->first_use <= s && s <= e->last_use)
        sum += e->bytes;
    }
    most = sum > most ? sum : most;
  }
  return most;
}

static void check_placement(const ar_plan *p) {
  for (int i = 0; i < p->count; i++) {
    const ar_plan_entry *a = &p->entries[i];
    if (a->cls != AR_MEM_EPHEMERAL || !a->bytes)
      continue;
    assert_true(a->offset + a->bytes <= p->ephemeral_bytes);
    for (int j = i + 1; j < p->count; j++) {
      const ar_plan_entry *b = &p->entries[j];
      if (b->cls != AR_MEM_EPHEMERAL || !b->bytes || a->last_use < b->first_use ||
          b->last_use < a->first_use)
        continue;
      bool apart = a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset;
      if (!apart)
        printf("# %s and %s overlap while both alive\n", a->name, b->name);
      assert_true(apart);
    }
  }
}

static void test_rewrite_and_plan(void **state) {
  (void)state;
  net_fix f, u;
  start_both(&f, &u, RESY);
  /* r1 into bn1, r2 into the add, r3 stays (c3 has two readers). */
  assert_int_equal(ar_net_node_count(u.net) - ar_net_node_count(f.net), 2);
  assert_int_equal(f.net->fused_relus, 2);
  assert_int_equal(f.net->n_folds, 2);
  assert_int_equal(u.net->fused_relus + u.net->n_folds, 0);
  char *text = printed(f.net);
  assert_non_null(strstr(text, "batchnorm+relu"));
  assert_non_null(strstr(text, "add+relu"));
  assert_non_null(strstr(text, "c1+bn1, c2+bn2"));
  free(text);
  text = printed(u.net);
  assert_non_null(strstr(text, "fusion: none (ACCELRT_FUSE=0)"));
  free(text);
  const ar_plan *pf = ar_net_plan(f.net), *pu = ar_net_plan(u.net);
  assert_int_equal(count_plan(pf, ".folded"), 4);
  assert_int_equal(count_plan(pu, ".folded"), 0);
  /* The relus' outputs keep their names; bn1's and the sum's are gone. */
  assert_true(has_entry(pf, "r1.grad") && has_entry(pu, "bn1.grad"));
  assert_false(has_entry(pf, "bn1.grad") || has_entry(pf, "bn1") || has_entry(pf, "sum"));
  assert_true(has_entry(pu, "bn1") && has_entry(pu, "sum"));
  /* Fusion needs no more bytes alive at any step.  (The placements' peaks
   * are not compared: each kernel's workspace lives only at its own steps,
   * and first or best fit, whichever order does better, may leave a gap of
   * a few per cent in one graph and not the other.) */
  printf("# ephemeral bytes: fused %zu, unfused %zu; most alive at a step: fused %zu, "
         "unfused %zu\n",
         pf->ephemeral_bytes, pu->ephemeral_bytes, most_alive(pf), most_alive(pu));
  assert_true(most_alive(pf) <= most_alive(pu));
  assert_true(pf->ephemeral_sum_bytes < pu->ephemeral_sum_bytes);
  check_placement(pf);
  /* Exact: start allocated the plan's two blocks, and training and
   * evaluation allocate nothing on the device. */
  assert_int_equal(ar_device_bytes_in_use(f.dev), pf->persistent_bytes + pf->ephemeral_bytes);
  ar_err err = AR_ERR_INIT;
  double loss, lr;
  stage(f.net, 5);
  assert_int_equal(ar_net_train(f.net, &loss, &lr, &err), AR_OK);
  ar_eval_acc acc = {0};
  assert_int_equal(ar_net_eval(f.net, 8, &acc, &err), AR_OK);
  assert_int_equal(ar_device_bytes_in_use(f.dev), pf->persistent_bytes + pf->ephemeral_bytes);
  net_close(&f);
  net_close(&u);
}

static bool close_rel(double a, double b, double rel, double abs_tol) {
  return fabs(a - b) <= abs_tol + rel * fmax(fabs(a), fabs(b));
}

/* Every trained parameter's gradient, fused against unfused. */
static void check_grads(net_fix *f, net_fix *u) {
  int bad = 0, checked = 0;
  for (int i = 0; i < f->net->n_tensors; i++) {
    const ntensor *t = &f->net->tensors[i];
    if (t->kind != T_PARAM)
      continue;
    int j = 0;
    while (j < u->net->n_tensors && strcmp(u->net->tensors[j].name, t->name))
      j++;
    assert_true(j < u->net->n_tensors);
    const float *gf = f->net->tensors[t->grad].p, *gu = u->net->tensors[u->net->tensors[j].grad].p;
    for (int64_t k = 0; k < ar_shape_count(&t->shape); k++, checked++)
      if (!close_rel(gf[k], gu[k], 1e-4, 1e-6) && bad++ < 5)
        printf("# %s[%lld]: fused %.8g, unfused %.8g\n", t->name, (long long)k, gf[k], gu[k]);
  }
  assert_true(checked > 400);
  assert_int_equal(bad, 0);
}

static void run_side_by_side(const char *yaml) {
  net_fix f, u;
  start_both(&f, &u, yaml);
  ar_err err = AR_ERR_INIT;
  double lf, lu;
  stage(f.net, 9);
  stage(u.net, 9);
  assert_int_equal(ar__net_grad(f.net, &lf, &err), AR_OK);
  assert_int_equal(ar__net_grad(u.net, &lu, &err), AR_OK);
  assert_true(close_rel(lf, lu, 1e-5, 0));
  check_grads(&f, &u);
  for (int step = 0; step < 6; step++) {
    double lr;
    stage(f.net, 11 + (unsigned)step);
    stage(u.net, 11 + (unsigned)step);
    assert_int_equal(ar_net_train(f.net, &lf, &lr, &err), AR_OK);
    assert_int_equal(ar_net_train(u.net, &lu, &lr, &err), AR_OK);
    if (!close_rel(lf, lu, 1e-5, 0))
      printf("# step %d: fused loss %.9g, unfused %.9g\n", step, lf, lu);
    assert_true(close_rel(lf, lu, 1e-5, 0));
  }
  /* Evaluation: folded convs against conv, batch norm (running
   * statistics, moved by the steps) and relu. */
  int64_t rows = ar_net_input_shape(f.net)->d[0], cls = ar_net_classes(f.net);
  float *of = malloc((size_t)(rows * cls) * sizeof *of), *ou = malloc((size_t)(rows * cls) * sizeof *ou);
  stage(f.net, 40);
  stage(u.net, 40);
  assert_int_equal(ar_net_eval_logits(f.net, of, &err), AR_OK);
  assert_int_equal(ar_net_eval_logits(u.net, ou, &err), AR_OK);
  double most = 0;
  for (int64_t k = 0; k < rows * cls; k++) {
    most = fmax(most, fabs(of[k] - ou[k]));
    assert_true(close_rel(of[k], ou[k], 1e-4, 1e-5));
  }
  printf("# evaluation logits: largest difference %.3g\n", most);
  free(of);
  free(ou);
  net_close(&f);
  net_close(&u);
}

static void test_sgd_momentum(void **state) {
  (void)state;
  run_side_by_side(RESY);
}

static void test_adam(void **state) {
  (void)state;
  char *y = net_edit(RESY, "{sgd: {lr: 0.05, momentum: 0.9}}", "{adam: {lr: 0.01}}");
  run_side_by_side(y);
  free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rewrite_and_plan),
      cmocka_unit_test(test_sgd_momentum),
      cmocka_unit_test(test_adam),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
