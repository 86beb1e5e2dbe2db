/* LSH-sampled layers in the model (runtime/engine/sampled.c).
 *
 * - With every neuron active (min_active = width), sampled training is
 *   dense training: after several steps every parameter equals the dense
 *   model's (float tolerance), for a sampled output layer and for a
 *   sampled hidden layer feeding a sampled output layer.
 * - With a real budget, only the active rows (and the true labels') get
 *   gradients: rows never active keep their initial weights.
 * - One thread and a seed: two runs are bit-identical.
 * - The plan accounts for the sampled layer's own tensors, and for all its
 *   model allocates (hash tables and the rest, measured by the allocation
 *   wrapper). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accelrt/graph.h"
#include "engine_fixtures.h"

static const char *BASE =
    "name: s\nseed: 3\ndevice: host\n"
    "model:\n  input: {sparse: 60}\n  layers:\n"
    "    - {name: h, dense: 24, activation: relu}\n"
    "    - {name: h2, dense: 40, activation: relu%s}\n"
    "    - {name: out, dense: 50, activation: softmax%s}\n"
    "data: {train: x.txt}\n"
    "train: {batch: 16, iterations: 1, threads: %d, optimizer: {adam: {lr: 0.01}}}\n";

/* A model of the job in `yaml` on a host device of `threads` threads. */
static ar_model *model_of(const char *yaml, int threads, ar_spec **spec, ar_device **dev) {
  *spec = parse(yaml);
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = threads;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", &o, dev, &err), AR_OK);
  ar_model *m = NULL;
  ar_status st = ar_model_create(*dev, *spec, 6, 3, &m, &err);
  if (st != AR_OK)
    fail_msg("%s", err.msg);
  return m;
}

static ar_model *model(const char *h2_sparse, const char *out_sparse, int threads,
                       ar_spec **spec, ar_device **dev) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml, BASE, h2_sparse, out_sparse, threads);
  return model_of(yaml, threads, spec, dev);
}

/* `steps` iterations on random batches of 16 rows over 60 features and
 * `labels` labels. */
static void train_on(ar_model *m, int steps, uint64_t seed, int labels) {
  ar_rng rng;
  ar_rng_seed(&rng, seed, 0);
  for (int i = 0; i < steps; i++) {
    ar_batch b;
    make_batch(&b, 16, 60, labels, &rng);
    float loss = 0;
    assert_int_equal(ar_model_train_batch(m, &b, &loss), AR_OK);
    assert_true(isfinite(loss));
    ar_batch_fini(&b);
  }
}

static void train(ar_model *m, int steps, uint64_t seed) { train_on(m, steps, seed, 50); }

static float *tensor(ar_model *m, const char *name, int64_t *count) {
  const char *names[64];
  float *ptrs[64];
  int64_t counts[64];
  int n = ar_model_tensors(m, names, ptrs, counts, 64);
  for (int i = 0; i < n && i < 64; i++)
    if (!strcmp(names[i], name)) {
      *count = counts[i];
      return ptrs[i];
    }
  fail_msg("no tensor %s", name);
  return NULL;
}

static void expect_close(ar_model *a, ar_model *b, const char *name) {
  int64_t na, nb;
  float *pa = tensor(a, name, &na), *pb = tensor(b, name, &nb);
  assert_int_equal(na, nb);
  double worst = 0;
  for (int64_t i = 0; i < na; i++) {
    double d = fabs((double)pa[i] - pb[i]) / (1e-3 + fabs((double)pa[i]));
    worst = d > worst ? d : worst;
  }
  if (worst > 2e-3)
    fail_msg("%s differs: worst relative difference %g", name, worst);
}

static void all_active_equals_dense(const char *h2, const char *out) {
  ar_spec *sd, *ss;
  ar_device *dd, *ds;
  ar_model *md = model("", "", 1, &sd, &dd);
  ar_model *ms = model(h2, out, 1, &ss, &ds);
  assert_true(ms->n_sampled > 0);
  train(md, 6, 42);
  train(ms, 6, 42);
  static const char *const names[] = {"h.w", "h.b", "h2.w", "h2.b", "out.w", "out.b"};
  for (int i = 0; i < 6; i++)
    expect_close(md, ms, names[i]);
  ar_model_destroy(md);
  ar_model_destroy(ms);
  ar_device_close(dd);
  ar_device_close(ds);
  ar_spec_destroy(sd);
  ar_spec_destroy(ss);
}

static void test_output_all_active_equals_dense(void **state) {
  (void)state;
  all_active_equals_dense("", ", sparse: {mode: lsh, min_active: 50, K: 2, L: 4}");
}

static void test_two_sampled_layers_all_active_equal_dense(void **state) {
  (void)state;
  all_active_equals_dense(", sparse: {mode: lsh, min_active: 40, K: 2, L: 4}",
                          ", sparse: {mode: lsh, min_active: 50, hash: srp, K: 3, L: 4}");
}

/* With a budget of 2 of 50 output neurons and 1 step, the rows updated are
 * exactly the active ones (labels included): the others keep their
 * initial weights, and every label row moved. */
static void test_only_active_rows_change(void **state) {
  (void)state;
  ar_spec *sd, *ss;
  ar_device *dd, *ds;
  ar_model *md = model("", "", 1, &sd, &dd); /* untouched reference init */
  ar_model *ms = model("", ", sparse: {mode: lsh, active: 0.04, K: 2, L: 4}", 1, &ss, &ds);
  ar_rng rng;
  ar_rng_seed(&rng, 9, 0);
  ar_batch b;
  make_batch(&b, 16, 60, 50, &rng);
  float loss;
  assert_int_equal(ar_model_train_batch(ms, &b, &loss), AR_OK);
  int64_t n;
  float *w0 = tensor(md, "out.w", &n), *w1 = tensor(ms, "out.w", &n);
  int changed = 0;
  for (int r = 0; r < 50; r++) {
    bool moved = memcmp(w0 + r * 40, w1 + r * 40, 40 * sizeof(float)) != 0;
    bool label = false;
    for (int64_t q = 0; q < b.lab_ptr[16]; q++)
      label |= b.lab[q] == r;
    if (label)
      assert_true(moved);
    changed += moved;
  }
  /* At most labels + 2 per row, and well below all 50. */
  assert_true(changed < 50);
  assert_true(changed <= (int)b.lab_ptr[16] + 2 * 16);
  ar_batch_fini(&b);
  ar_model_destroy(md);
  ar_model_destroy(ms);
  ar_device_close(dd);
  ar_device_close(ds);
  ar_spec_destroy(sd);
  ar_spec_destroy(ss);
}

static void test_one_thread_repeats(void **state) {
  (void)state;
  ar_spec *s1, *s2;
  ar_device *d1, *d2;
  const char *o = ", sparse: {mode: lsh, active: 0.2, K: 3, L: 6, rehash: {every: 2}}";
  ar_model *a = model("", o, 1, &s1, &d1);
  ar_model *b = model("", o, 1, &s2, &d2);
  train(a, 7, 5);
  train(b, 7, 5);
  int64_t n;
  float *wa = tensor(a, "out.w", &n), *wb = tensor(b, "out.w", &n);
  assert_memory_equal(wa, wb, (size_t)n * sizeof(float));
  ar_sampled_stats st;
  ar_model_sampled_stats(a, 2, &st);
  assert_int_equal(st.samples, 7 * 16);
  assert_int_equal(st.rehashes, 3); /* rebuilt at 2, 4, 6 (the first build apart) */
  assert_true(st.first_build_s > 0.0);
  assert_true(st.active_sum > 0 && st.active_sum < st.samples * 50);
  ar_model_destroy(a);
  ar_model_destroy(b);
  ar_device_close(d1);
  ar_device_close(d2);
  ar_spec_destroy(s1);
  ar_spec_destroy(s2);
}

/* Between builds with the same hash functions, only the rows updated since
 * the last build are re-hashed (fewer than half of a 400-wide layer here),
 * and training goes on with finite losses. */
static void test_rebuilds_reinsert_changed_rows(void **state) {
  (void)state;
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: r\nseed: 3\ndevice: host\nmodel:\n  input: {sparse: 60}\n  layers:\n"
           "    - {name: h, dense: 24}\n"
           "    - {name: out, dense: 400, sparse: {mode: lsh, active: 0.01, K: 3, L: 8,"
           " rehash: {every: 2, growth: 1}}}\n"
           "data: {train: x.txt}\ntrain: {batch: 16, iterations: 1, threads: 1}\n");
  ar_spec *spec = NULL;
  ar_device *dev = NULL;
  ar_model *m = model_of(yaml, 1, &spec, &dev);
  train_on(m, 6, 1, 400);
  ar_sampled_stats st;
  ar_model_sampled_stats(m, 1, &st);
  assert_int_equal(st.rehashes, 3); /* at 2, 4, 6; the first build apart */
  assert_true(st.reinserted > 0);
  assert_true(st.reinserted < 3 * 200); /* fewer than half the rows each time */
  ar_model_destroy(m);
  ar_device_close(dev);
  ar_spec_destroy(spec);
}

/* sparse.rescore needs an output layer on a dense input: on a hidden
 * sampled layer the model is refused with what to change. */
static void test_rescore_needs_dense_input(void **state) {
  (void)state;
  char yaml[2048];
  snprintf(yaml, sizeof yaml, BASE, ", sparse: {mode: lsh, active: 0.2, rescore: 2}", "", 1);
  ar_spec *spec = parse(yaml);
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = 1;
  ar_err err = AR_ERR_INIT;
  ar_device *dev = NULL;
  assert_int_equal(ar_device_open("host", &o, &dev, &err), AR_OK);
  ar_model *m = NULL;
  assert_int_not_equal(ar_model_create(dev, spec, 6, 3, &m, &err), AR_OK);
  assert_null(m);
  if (!strstr(err.msg, "layer h2: sparse.rescore works on an output layer"))
    fail_msg("got: %s", err.msg);
  ar_device_close(dev);
  ar_spec_destroy(spec);
}

static void test_plan_has_sampled_tensors(void **state) {
  (void)state;
  char yaml[2048];
  snprintf(yaml, sizeof yaml, BASE, "", ", sparse: {mode: lsh, active: 0.1}", 1);
  ar_spec *s = parse(yaml);
  ar_plan host, gpu;
  assert_int_equal(ar_plan_compute_on(s, 6, 3, true, &host, NULL), AR_OK);
  assert_int_equal(ar_plan_compute_on(s, 6, 3, false, &gpu, NULL), AR_OK);
  bool found = false;
  for (int i = 0; i < host.count; i++)
    if (!strcmp(host.entries[i].name, "out.lsh.active")) {
      found = true;
      /* budget ceil(0.1 * 50) = 5, plus 3 labels, for 16 rows */
      assert_int_equal(host.entries[i].bytes, 16 * 8 * 4);
    }
  assert_true(found);
  for (int i = 0; i < gpu.count; i++)
    assert_null(strstr(gpu.entries[i].name, "lsh."));
  /* Sampled gradients are persistent (zeroed row by row by the update). */
  assert_true(host.persistent_bytes > gpu.persistent_bytes);
  ar_plan_fini(&host);
  ar_plan_fini(&gpu);
  ar_spec_destroy(s);
}

static size_t plan_bytes(const ar_plan *p, const char *name) {
  for (int i = 0; i < p->count; i++)
    if (!strcmp(p->entries[i].name, name))
      return p->entries[i].bytes;
  fail_msg("the plan has no %s", name);
  return 0;
}

/* The plan counts everything a sampled job's model allocates: what the
 * allocation wrapper sees live after ar_model_create is the plan's total
 * (the two device blocks and the host entries: hash tables, hash
 * functions, scratch for the plan's threads, touched sets, id lists) plus
 * only the handles' own small structs; each layer's tables (by their own
 * accounting) equal their plan entry; training with table rebuilds and
 * re-insertions allocates nothing that stays; destroying frees it all.
 * One sampled layer behind the sparse input (its full scoring keeps every
 * id), one output layer behind a dense one (shared negatives). */
static void test_allocated_equals_plan(void **state) {
  (void)state;
  const char *yaml =
      "name: a\nseed: 3\ndevice: host\nmodel:\n  input: {sparse: 60}\n  layers:\n"
      "    - {name: h, dense: 300, sparse: {mode: lsh, hash: dwta, L: 12, active: 0.1}}\n"
      "    - {name: h2, dense: 32}\n"
      "    - {name: out, dense: 6000, sparse: {mode: lsh, active: 0.02, L: 20,"
      " rehash: {every: 2, growth: 1}}}\n"
      "data: {train: x.txt}\ntrain: {batch: 16, iterations: 1, threads: 2}\n";
  ar_spec *spec = parse(yaml);
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = 2;
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_device_open("host", &o, &dev, &err), AR_OK);
  ar_plan plan;
  assert_int_equal(ar_plan_compute_on(spec, 6, 3, true, &plan, &err), AR_OK);
  assert_int_equal(plan.total_bytes,
                   plan.persistent_bytes + plan.ephemeral_bytes + plan.host_bytes);
  assert_int_equal(ar_alloc_count_start(), AR_OK);
  ar_model *m = NULL;
  if (ar_model_create(dev, spec, 6, 3, &m, &err) != AR_OK)
    fail_msg("%s", err.msg);
  int64_t blocks = 0, live = ar_alloc_count_live(&blocks);
  assert_int_equal(m->n_sampled, 2);
  assert_true(live >= 0);
  int64_t small = live - (int64_t)plan.total_bytes;
  print_message("plan: persistent %zu + ephemeral %zu + host %zu = %zu bytes; allocated %lld "
                "bytes in %lld blocks (%lld of them the handles' own structs)\n",
                plan.persistent_bytes, plan.ephemeral_bytes, plan.host_bytes, plan.total_bytes,
                (long long)live, (long long)blocks, (long long)small);
  print_message("  out.lsh.tables %zu, out.lsh.hash %zu, out.lsh.scratch %zu; h.lsh.tables "
                "%zu, h.lsh.ids %zu\n", plan_bytes(&plan, "out.lsh.tables"),
                plan_bytes(&plan, "out.lsh.hash"), plan_bytes(&plan, "out.lsh.scratch"),
                plan_bytes(&plan, "h.lsh.tables"), plan_bytes(&plan, "h.lsh.ids"));
  /* The structs: the model, its layers and plan entries, and per sampled
   * layer a handful of handles (a few KiB); the host entries alone are
   * megabytes, so any of them left out would show. */
  assert_true(small >= 0);
  assert_true(small < 32 * 1024);
  assert_true(plan_bytes(&plan, "out.lsh.tables") > 1000 * 1000);
  assert_true(ar_device_bytes_in_use(dev) == plan.persistent_bytes + plan.ephemeral_bytes);
  static const char *const layers[] = {"h", "out"};
  const int idx[] = {0, 2};
  for (int i = 0; i < 2; i++) {
    ar_sampled_stats ss;
    ar_model_sampled_stats(m, idx[i], &ss);
    char name[64];
    snprintf(name, sizeof name, "%s.lsh.tables", layers[i]);
    assert_int_equal(ss.tables_bytes, plan_bytes(&plan, name));
  }
  /* Training with rebuilds at steps 2, 4, 6 (re-insertions of the changed
   * rows in between) leaves exactly what was allocated. */
  train_on(m, 6, 5, 6000);
  ar_sampled_stats ss;
  ar_model_sampled_stats(m, 2, &ss);
  assert_int_equal(ss.rehashes, 3);
  assert_int_equal(ar_alloc_count_live(NULL), live);
  assert_int_equal(ss.tables_bytes, plan_bytes(&plan, "out.lsh.tables"));
  ar_model_destroy(m);
  assert_int_equal(ar_alloc_count_live(NULL), 0);
  ar_alloc_count_stop();
  ar_plan_fini(&plan);
  ar_device_close(dev);
  ar_spec_destroy(spec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_output_all_active_equals_dense),
      cmocka_unit_test(test_two_sampled_layers_all_active_equal_dense),
      cmocka_unit_test(test_only_active_rows_change),
      cmocka_unit_test(test_one_thread_repeats),
      cmocka_unit_test(test_rebuilds_reinsert_changed_rows),
      cmocka_unit_test(test_plan_has_sampled_tensors),
      cmocka_unit_test(test_rescore_needs_dense_input),
      cmocka_unit_test(test_allocated_equals_plan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
