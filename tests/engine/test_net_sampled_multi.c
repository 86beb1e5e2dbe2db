/* A graph model's LSH-sampled head over sparse multi-label input
 * (runtime/engine/net_sampled.c over net_sparse_in.c's batch): the job
 * file written as a chain (its sampled output layer, sampled.c) and as a
 * graph (items with `inputs:`) is the same model: from the chain's initial
 * values and seeds the graph trains to the same parameters bit for bit on
 * one thread over full and padded batches (the labels of each row always
 * active, the same retrievals, shared negatives and rebuilds), with the
 * same losses to float rounding (the chain sums the rows' losses in
 * double, the graph reads them back as floats); and the head's gradients
 * are those of the sampled loss by finite differences on the active set,
 * every other row getting none. */
#define _GNU_SOURCE
#include "accelrt/graph.h"
#include "accelrt/net.h"

#include "engine_impl.h"
#include "net_fixture.h"
#include "net_impl.h"
#include "net_impl_fixture.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

enum { FEATURES = 20, HIDDEN = 8, CLASSES = 120, BATCH = 6, MAX_NNZ = 4, MAX_LABELS = 3 };

/* Quickstart's shape, small: a dense hidden layer over the sparse input, a
 * sampled softmax head; rebuilt every 3 steps, new hash functions every 2
 * rebuilds, so 12 steps cross both. */
static const char *const GRAPH =
    "name: t\n"
    "device: host\n"
    "seed: 5\n"
    "model:\n"
    "  input: {sparse: 20}\n"
    "  layers:\n"
    "    - {name: hidden, dense: 8, activation: relu, inputs: [input]}\n"
    "    - name: out\n"
    "      dense: 120\n"
    "      activation: softmax\n"
    "      sparse: {mode: lsh, hash: srp, K: 3, L: 5, rehash: {every: 3, "
    "new_hash_every: 2}, "
    "SAMPLING}\n"
    "data: {format: xc, train: x}\n"
    "train: {batch: 6, iterations: 1, threads: 1, optimizer: {adam: {lr: "
    "0.02}}}\n";

static ar_device *host1(void) { return net_host(1); }

/* A random batch: 1..MAX_NNZ features and 1..MAX_LABELS distinct labels a
 * row (row 1: none, as XC data may have). */
static void fill_batch(ar_batch *b, int64_t rows, unsigned *seed) {
  static const net_sparse_shape sh = {FEATURES, CLASSES, MAX_NNZ, MAX_LABELS, 1, 17};
  net_fill_sparse_batch(b, rows, seed, &sh);
}

#define tensor net_tensor

static char *yaml_with(const char *sampling) { return net_edit(GRAPH, "SAMPLING", sampling); }

/* A hidden sampled item between two dense ones (the chain scatters its
 * active neurons into y for the dense layer after it), the head dense.
 * K 6 and L 4 over 120 neurons retrieve fewer than the budget of 12: the
 * batch's random top-up is drawn too. */
static const char *const HIDDEN_SAMPLED =
    "name: t\n"
    "device: host\n"
    "seed: 7\n"
    "model:\n"
    "  input: {sparse: 20}\n"
    "  layers:\n"
    "    - {name: hidden, dense: 8, activation: relu, inputs: [input]}\n"
    "    - name: mid\n"
    "      dense: 120\n"
    "      activation: relu\n"
    "      sparse: {mode: lsh, hash: srp, K: 6, L: 4, rehash: {every: 3, "
    "new_hash_every: 2}, "
    "active: 0.1, catch_up: 1000}\n"
    "    - {name: out, dense: 120, activation: softmax}\n"
    "data: {format: xc, train: x}\n"
    "train: {batch: 6, iterations: 1, threads: 1, optimizer: {adam: {lr: "
    "0.02}}}\n";

/* The graph file gy and the chain it is without `inputs:` train 12 steps
 * on the same batches (every third short: padded in the graph); sampled
 * layer `sl` of the chain is the graph's node of that name. */
static void same_as_chain_yaml(const char *gy, int sl) {
  ar_err err = AR_ERR_INIT;
  ar_spec *gs = net_parse_any(gy);
  /* A chain file (no `inputs:`): the graph is the chain lowered. */
  if (!gs->graph)
    assert_int_equal(ar_chain_route(gs, AR_CHAIN_ENGINE_GRAPH, NULL), 1);
  char *cy = strstr(gy, ", inputs: [input]") ? net_edit(gy, ", inputs: [input]", "") : strdup(gy);
  ar_spec *cs = net_parse_any(cy);
  free(cy);
  assert_false(cs->graph);
  ar_device *dev = host1();
  ar_model *m = NULL;
  assert_int_equal(ar_model_create(dev, cs, MAX_NNZ, MAX_LABELS, &m, &err), AR_OK);
  assert_int_equal(m->n_sampled, 1);
  assert_non_null(m->layers[sl].smp);
  ar_net *n = NULL;
  ar_status st = ar_net_build_sparse(gs, BATCH, MAX_NNZ, MAX_LABELS, &n, &err);
  if (st != AR_OK)
    printf("# %s\n", err.msg);
  assert_int_equal(st, AR_OK);
  /* The plan is exact: start allocates its two blocks (the chain model
   * holds the device's other bytes), training nothing more (checked after
   * the steps). */
  const size_t chain_bytes = ar_device_bytes_in_use(dev);
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  const ar_plan *p = ar_net_plan(n);
  assert_int_equal(ar_device_bytes_in_use(dev) - chain_bytes,
                   p->persistent_bytes + p->ephemeral_bytes);
  const int L = m->n_layers;
  float *gw[8];
  const float *cw[8];
  int64_t cnt[8];
  for (int l = 0; l < L; l++) {
    char name[64];
    snprintf(name, sizeof name, "%s.w", m->layers[l].name);
    gw[2 * l] = tensor(n, name)->p;
    snprintf(name, sizeof name, "%s.b", m->layers[l].name);
    gw[2 * l + 1] = tensor(n, name)->p;
    cw[2 * l] = m->layers[l].w;
    cw[2 * l + 1] = m->layers[l].b;
    cnt[2 * l] = m->layers[l].in * m->layers[l].out;
    cnt[2 * l + 1] = m->layers[l].out;
  }
  for (int k = 0; k < 2 * L; k++)
    assert_memory_equal(gw[k], cw[k], (size_t)cnt[k] * sizeof(float));
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, BATCH, MAX_NNZ, MAX_LABELS), AR_OK);
  unsigned seed = 17u;
  double worst = 0, worst_loss = 0;
  for (int it = 0; it < 12; it++) {
    fill_batch(&b, it % 3 == 2 ? BATCH - 2 : BATCH, &seed);
    float closs = 0;
    assert_int_equal(ar_model_train_batch(m, &b, &closs), AR_OK);
    double gloss = 0, lr = 0;
    assert_int_equal(ar_net_stage_sparse(n, &b, &err), AR_OK);
    st = ar_net_train(n, &gloss, &lr, &err);
    if (st != AR_OK)
      printf("# %s\n", err.msg);
    assert_int_equal(st, AR_OK);
    assert_true(isfinite(gloss) && gloss > 0);
    worst_loss = fmax(worst_loss, fabs(gloss - closs) / fabs((double)closs));
    for (int k = 0; k < 2 * L; k++)
      for (int64_t j = 0; j < cnt[k]; j++)
        worst = fmax(worst, fabs((double)gw[k][j] - (double)cw[k][j]));
  }
  assert_int_equal(ar_device_bytes_in_use(dev) - chain_bytes,
                   p->persistent_bytes + p->ephemeral_bytes);
  if (worst != 0 || worst_loss > 1e-6)
    printf("# largest parameter difference %.3g, loss %.3g (relative)\n", worst, worst_loss);
  assert_true(worst == 0);
  assert_true(worst_loss <= 1e-6);
  /* The same sampling: as many ids scored and rows touched, as many
   * rebuilds; the rows' last update steps alike. */
  const char *lname = m->layers[sl].name;
  ar_sampled_stats ss, gss;
  ar_model_sampled_stats(m, sl, &ss);
  if (sl == L - 1) {
    assert_non_null(ar__net_head_stats(n, &gss));
  } else {
    assert_int_equal(n->n_hid, 1);
    ar__sampled_stats(n->hid[0].smp, &gss);
  }
  assert_int_equal(gss.active_sum, ss.active_sum);
  assert_int_equal(gss.touched_sum, ss.touched_sum);
  assert_int_equal(gss.rehashes, ss.rehashes);
  assert_int_equal(gss.samples, ss.samples);
  assert_true(ss.rehashes >= 3);
  assert_true(ss.touched_sum < 12 * m->layers[sl].out); /* sampled, not the whole layer */
  char last[64];
  snprintf(last, sizeof last, "%s.lsh_last", lname);
  assert_memory_equal(tensor(n, last)->p, ar__plan_ptr(m, lname, "lsh.last"),
                      (size_t)m->layers[sl].out * sizeof(uint64_t));
  ar_batch_fini(&b);
  ar_net_destroy(n);
  ar_model_destroy(m);
  ar_device_close(dev);
  ar_spec_destroy(cs);
  ar_spec_destroy(gs);
}

static void same_as_chain(const char *sampling) {
  char *gy = yaml_with(sampling);
  same_as_chain_yaml(gy, 1);
  free(gy);
}

/* The chain's defaults: no shared negatives beyond the min_active top-up,
 * no correction (a graph model's defaults are the budget's negatives and
 * log-Q, docs/graph.md: the graph file states the chain's to be its
 * model); then negatives, log-Q corrected, with Adam catching up the
 * steps a row skipped, in both. */
static void test_same_as_chain(void **state) {
  (void)state;
  same_as_chain("active: 0.05, negatives: 0, correction: none");
  same_as_chain("active: 0.05, negatives: 9, correction: logq, catch_up: 1000");
  same_as_chain("active: 0.05, negatives: 9, correction: logq, catch_up: 5");
}

/* A hidden sampled item: the same bits (its rows, the dense layers
 * around it). */
static void test_hidden_same_as_chain(void **state) {
  (void)state;
  same_as_chain_yaml(HIDDEN_SAMPLED, 1);
}

/* A resume of a hidden sampled item: a second net given the first's
 * tensors after 5 steps (rows, Adam's moments, each row's last update
 * step) and its step rebuilds the tables from the rows; with the tables
 * rebuilt with new hash functions after every step, the uninterrupted
 * run's tables are those too, so both train on alike, bit for bit. */
static void test_hidden_resume(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  char *y = net_edit(HIDDEN_SAMPLED, "rehash: {every: 3, new_hash_every: 2}",
                     "rehash: {every: 1, growth: 1.0, new_hash_every: 1}");
  ar_spec *s = net_parse_any(y);
  free(y);
  ar_device *dev = host1();
  ar_net *f = NULL, *g = NULL;
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &f, &err), AR_OK);
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &g, &err), AR_OK);
  assert_int_equal(ar_net_start(f, dev, NULL, NULL, &err), AR_OK);
  assert_int_equal(ar_net_start(g, dev, NULL, NULL, &err), AR_OK);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, BATCH, MAX_NNZ, MAX_LABELS), AR_OK);
  unsigned seed = 29u;
  double loss = 0, lr = 0;
  for (int it = 0; it < 5; it++) {
    fill_batch(&b, BATCH, &seed);
    assert_int_equal(ar_net_stage_sparse(f, &b, &err), AR_OK);
    assert_int_equal(ar_net_train(f, &loss, &lr, &err), AR_OK);
  }
  int nt = ar_net_tensors(f, NULL, NULL, NULL, NULL);
  const char **na = calloc((size_t)nt, sizeof *na), **nb = calloc((size_t)nt, sizeof *nb);
  float **pa = calloc((size_t)nt, sizeof *pa), **pb = calloc((size_t)nt, sizeof *pb);
  int64_t *ca = calloc((size_t)nt, sizeof *ca), *cb = calloc((size_t)nt, sizeof *cb);
  ar_net_tensors(f, na, pa, ca, NULL);
  assert_int_equal(ar_net_tensors(g, nb, pb, cb, NULL), nt);
  bool last = false;
  for (int i = 0; i < nt; i++) {
    assert_string_equal(na[i], nb[i]);
    memcpy(pb[i], pa[i], (size_t)ca[i] * sizeof(float));
    last |= !strcmp(na[i], "mid.lsh_last"); /* each row's last update is kept */
  }
  assert_true(last);
  ar_net_set_step(g, ar_net_step(f));
  assert_int_equal(ar_net_resumed(g, &err), AR_OK);
  for (int it = 0; it < 4; it++) {
    fill_batch(&b, BATCH, &seed);
    double lf = 0, lg = 0;
    assert_int_equal(ar_net_stage_sparse(f, &b, &err), AR_OK);
    assert_int_equal(ar_net_train(f, &lf, &lr, &err), AR_OK);
    assert_int_equal(ar_net_stage_sparse(g, &b, &err), AR_OK);
    assert_int_equal(ar_net_train(g, &lg, &lr, &err), AR_OK);
    assert_true(lf == lg);
  }
  for (int i = 0; i < nt; i++)
    assert_memory_equal(pa[i], pb[i], (size_t)ca[i] * sizeof(float));
  free(na);
  free(nb);
  free(pa);
  free(pb);
  free(ca);
  free(cb);
  ar_batch_fini(&b);
  ar_net_destroy(f);
  ar_net_destroy(g);
  ar_device_close(dev);
  ar_spec_destroy(s);
}

/* Few negatives, no correction, top-k retrieval: the tables decide. */
static void test_same_as_chain_retrieval(void **state) {
  (void)state;
  same_as_chain("active: 0.05, negatives: 3, correction: none, sampling: topk");
}

#define diff net_central_diff /* of the sampled loss */
#define close_to net_grad_close
#define copy_of net_copy_of

/* Each row of sampled layer `name` (width rows of HIDDEN, its gradients
 * gw, gb from the first pass) against finite differences: every weight of
 * a touched row, every fourth of an untouched one (no gradient: the loss
 * must not move either), and every bias.  Mismatches add to *bad; returns
 * the rows touched. */
static int check_rows(ar_net *n, const char *name, int64_t width, const float *gw, const float *gb,
                      int *bad) {
  char wn[64], bn[64];
  snprintf(wn, sizeof wn, "%s.w", name);
  snprintf(bn, sizeof bn, "%s.b", name);
  float *w = tensor(n, wn)->p, *b = tensor(n, bn)->p;
  int active = 0;
  for (int64_t row = 0; row < width; row++) {
    bool touched = gb[row] != 0.0f;
    for (int64_t k = 0; k < HIDDEN; k++)
      touched |= gw[row * HIDDEN + k] != 0.0f;
    active += touched;
    for (int64_t k = 0; k < HIDDEN; k += touched ? 1 : 4) {
      double num = diff(n, w, row * HIDDEN + k), an = gw[row * HIDDEN + k];
      if (!close_to(num, an) && (*bad)++ < 8)
        printf("# %s[%lld,%lld]: backward %.6g, finite difference %.6g\n", wn, (long long)row,
               (long long)k, an, num);
    }
    double num = diff(n, b, row);
    if (!close_to(num, gb[row]) && (*bad)++ < 8)
      printf("# %s[%lld]: backward %.6g, finite difference %.6g\n", bn, (long long)row, gb[row],
             num);
  }
  return active;
}

/* On a padded batch: each head row some row computed has the finite
 * difference's gradient, each label's row among them; the others none,
 * and the loss does not move with them; the hidden layer's weights and
 * bias (through the head's input gradient, the padded rows' zero) too. */
static void test_grads_on_active_set(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  char *y = yaml_with("active: 0.05, negatives: 5");
  ar_spec *s = net_parse_any(y);
  free(y);
  ar_net *n = NULL;
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_OK);
  ar_device *dev = host1();
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, BATCH, MAX_NNZ, MAX_LABELS), AR_OK);
  unsigned seed = 23u;
  fill_batch(&b, BATCH - 1, &seed);
  assert_int_equal(ar_net_stage_sparse(n, &b, &err), AR_OK);
  double loss = 0, again = 0;
  assert_int_equal(ar__net_grad(n, &loss, &err), AR_OK);
  assert_true(isfinite(loss) && loss > 0);
  ntensor *w = tensor(n, "out.w"), *ob = tensor(n, "out.b"), *hw = tensor(n, "hidden.w"),
          *hb = tensor(n, "hidden.b");
  float *gw = copy_of(&n->tensors[w->grad]), *gb = copy_of(&n->tensors[ob->grad]);
  float *ghw = copy_of(&n->tensors[hw->grad]), *ghb = copy_of(&n->tensors[hb->grad]);
  /* ar__net_grad adds into the persistent rows' gradients: zero them
   * between calls as the sparse step does. */
  memset(n->tensors[w->grad].p, 0, (size_t)HIDDEN * CLASSES * sizeof(float));
  memset(n->tensors[ob->grad].p, 0, CLASSES * sizeof(float));
  assert_int_equal(ar__net_grad(n, &again, &err), AR_OK);
  assert_true(again == loss);
  int bad = 0;
  const int active = check_rows(n, "out", CLASSES, gw, gb, &bad);
  for (int64_t e = 0; e < b.lab_ptr[b.rows]; e++) /* every label is active */
    assert_true(gb[b.lab[e]] != 0.0f);
  if (!(active > 5 && active < CLASSES / 2))
    printf("# %d of %d rows active\n", active, CLASSES);
  assert_true(active > 5 && active < CLASSES / 2);
  for (int64_t j = 0; j < FEATURES * HIDDEN; j++) {
    double num = diff(n, hw->p, j);
    if (!close_to(num, ghw[j]) && bad++ < 8)
      printf("# hidden.w[%lld]: backward %.6g, finite difference %.6g\n", (long long)j, ghw[j],
             num);
  }
  for (int64_t j = 0; j < HIDDEN; j++) {
    double num = diff(n, hb->p, j);
    if (!close_to(num, ghb[j]) && bad++ < 8)
      printf("# hidden.b[%lld]: backward %.6g, finite difference %.6g\n", (long long)j, ghb[j],
             num);
  }
  assert_int_equal(bad, 0);
  free(gw);
  free(gb);
  free(ghw);
  free(ghb);
  ar_batch_fini(&b);
  ar_net_destroy(n);
  ar_device_close(dev);
  ar_spec_destroy(s);
}

/* A hidden sampled item's plan, then on a padded batch: each of its rows some row
 * computed has the finite difference's gradient, the others none and the
 * loss does not move with them; the dense head's too. */
static void test_hidden_grads_on_active_set(void **state) {
  (void)state;
  ar_err err = AR_ERR_INIT;
  ar_spec *s = net_parse_any(HIDDEN_SAMPLED);
  ar_net *n = NULL;
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_OK);
  ar_device *dev = host1();
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  /* The plan is exact: start allocates its two blocks, nothing more; the
   * item's tables and scratch are host entries. */
  const ar_plan *p = ar_net_plan(n);
  assert_int_equal(ar_device_bytes_in_use(dev), p->persistent_bytes + p->ephemeral_bytes);
  bool tables = false;
  for (int k = 0; k < p->count; k++) {
    tables |= !strcmp(p->entries[k].name, "mid.lsh.tables") && p->entries[k].bytes > 0;
    /* It trains through its sampled kernels: no dense backward workspace. */
    if (!strcmp(p->entries[k].name, "mid.work_bwd"))
      fail_msg("the plan holds mid.work_bwd, %zu bytes nothing uses", p->entries[k].bytes);
  }
  assert_true(tables);
  ar_batch b;
  assert_int_equal(ar_batch_init(&b, BATCH, MAX_NNZ, MAX_LABELS), AR_OK);
  unsigned seed = 31u;
  fill_batch(&b, BATCH - 1, &seed);
  assert_int_equal(ar_net_stage_sparse(n, &b, &err), AR_OK);
  double loss = 0;
  assert_int_equal(ar__net_grad(n, &loss, &err), AR_OK);
  assert_true(isfinite(loss) && loss > 0);
  ntensor *w = tensor(n, "mid.w"), *mb = tensor(n, "mid.b"), *ow = tensor(n, "out.w");
  float *gw = copy_of(&n->tensors[w->grad]), *gb = copy_of(&n->tensors[mb->grad]);
  float *gow = copy_of(&n->tensors[ow->grad]);
  const int64_t W = 120;
  int bad = 0;
  const int active = check_rows(n, "mid", W, gw, gb, &bad);
  if (!(active > 5 && active < W))
    printf("# %d of %lld rows active\n", active, (long long)W);
  assert_true(active > 5 && active < W);
  for (int64_t j = 0; j < W * 120; j += 7) {
    double num = diff(n, ow->p, j);
    if (!close_to(num, gow[j]) && bad++ < 8)
      printf("# out.w[%lld]: backward %.6g, finite difference %.6g\n", (long long)j, gow[j], num);
  }
  assert_int_equal(bad, 0);
  free(gw);
  free(gb);
  free(gow);
  ar_batch_fini(&b);
  ar_net_destroy(n);
  ar_device_close(dev);
  ar_spec_destroy(s);
}

/* A chain whose first layer is LSH-sampled over the sparse input, lowered
 * (HIDDEN_SAMPLED without its first item: mid first, no `inputs:`): that
 * layer's node reads the CSR rows, so the (batch, features) floats of its
 * dense input are not planned (it was a tensor never filled: 70 MB at 135k
 * features and batch 128); the plan holds the CSR batch, and it trains as
 * the chain's, bit for bit, on full and padded batches. */
static void test_lowered_first_plan(void **state) {
  (void)state;
  char *y = net_edit(HIDDEN_SAMPLED,
                     "    - {name: hidden, dense: 8, activation: relu, inputs: [input]}\n", "");
  ar_spec *s = net_parse_any(y);
  assert_int_equal(ar_chain_route(s, AR_CHAIN_ENGINE_GRAPH, NULL), 1);
  ar_net *n = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_OK);
  assert_int_equal(n->n_hid, 1);
  assert_true(n->hid[0].csr);
  const ar_plan *p = ar_net_plan(n);
  bool csr = false;
  size_t ephemeral = 0;
  for (int i = 0; i < p->count; i++) {
    const ar_plan_entry *e = &p->entries[i];
    if (!strcmp(e->name, "batch.x"))
      fail_msg("the plan holds batch.x, %zu bytes: the (batch, features) input nothing fills",
               e->bytes);
    /* Trained and evaluated on the CSR rows by its sampled kernels: no
     * dense op's workspace. */
    if (!strcmp(e->name, "mid.work") || !strcmp(e->name, "mid.work_bwd"))
      fail_msg("the plan holds %s, %zu bytes nothing uses", e->name, e->bytes);
    csr |= !strcmp(e->name, "batch.idx");
    ephemeral += e->cls == AR_MEM_EPHEMERAL ? (e->bytes + 63) / 64 * 64 : 0;
  }
  assert_true(csr);
  /* The iteration's tensors are the entries: nothing unlisted is placed. */
  assert_int_equal(ephemeral, p->ephemeral_sum_bytes);
  ar_net_destroy(n);
  ar_spec_destroy(s);
  same_as_chain_yaml(y, 0);
  free(y);
}

/* A head reading the sparse input directly is refused at the item. */
static void test_head_on_input_refused(void **state) {
  (void)state;
  char *y0 = yaml_with("active: 0.05");
  char *y1 =
      net_edit(y0, "    - {name: hidden, dense: 8, activation: relu, inputs: [input]}\n", "");
  char *y = net_edit(y1, "      activation: softmax\n",
                     "      activation: softmax\n      inputs: [input]\n");
  free(y0);
  free(y1);
  ar_spec *s = net_parse_any(y);
  free(y);
  ar_net *n = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_SPEC);
  assert_null(n);
  if (!strstr(err.msg, "reading the sparse input directly"))
    printf("# %s\n", err.msg);
  assert_non_null(strstr(err.msg, "model.layers[0]"));
  assert_non_null(strstr(err.msg, "reading the sparse input directly"));
  ar_spec_destroy(s);
}

static void expect_build_error(const char *yaml, const char *want) {
  ar_spec *s = net_parse_any(yaml);
  ar_net *n = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_net_build_sparse(s, BATCH, MAX_NNZ, MAX_LABELS, &n, &err), AR_SPEC);
  assert_null(n);
  if (!strstr(err.msg, want))
    printf("# got: %s\n# want: %s\n", err.msg, want);
  assert_non_null(strstr(err.msg, want));
  ar_spec_destroy(s);
}

/* What a hidden sampled item cannot be, each refused naming the item: one
 * reading the sparse input, one read by a sampled head.  (Its activation
 * is relu or none already: the job file's schema refuses the others.) */
static void test_hidden_refused(void **state) {
  (void)state;
  char *y = net_edit(HIDDEN_SAMPLED,
                     "    - {name: hidden, dense: 8, activation: relu, inputs: [input]}\n", "");
  char *y2 =
      net_edit(y, "      activation: relu\n", "      activation: relu\n      inputs: [input]\n");
  expect_build_error(y2, "model.layers[0]: sparse: an LSH-sampled hidden item reading the sparse "
                         "input directly");
  free(y);
  free(y2);
  y = net_edit(HIDDEN_SAMPLED, "{name: out, dense: 120, activation: softmax}",
               "{name: out, dense: 120, activation: softmax, sparse: {mode: lsh}}");
  expect_build_error(y, "an LSH-sampled head reading an LSH-sampled item");
  free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_as_chain),
      cmocka_unit_test(test_same_as_chain_retrieval),
      cmocka_unit_test(test_hidden_same_as_chain),
      cmocka_unit_test(test_hidden_resume),
      cmocka_unit_test(test_grads_on_active_set),
      cmocka_unit_test(test_hidden_grads_on_active_set),
      cmocka_unit_test(test_lowered_first_plan),
      cmocka_unit_test(test_head_on_input_refused),
      cmocka_unit_test(test_hidden_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
