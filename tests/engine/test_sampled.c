/* LSH-sampled layers in the model (runtime/engine/sampled.c).
 *
 * - With every neuron active (min_active = width), sampled training is
 *   dense training: after several steps every parameter equals the dense
 *   model's (float tolerance), for a sampled output layer and for a
 *   sampled hidden layer feeding a sampled output layer.
 * - With a real budget, only the active rows (and the true labels') get
 *   gradients: rows never active keep their initial weights.
 * - One thread and a seed: two runs are bit-identical.
 * - The plan accounts for the sampled layer's own tensors. */
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

static void train(ar_model *m, int steps, uint64_t seed) {
  ar_rng rng;
  ar_rng_seed(&rng, seed, 0);
  for (int i = 0; i < steps; i++) {
    ar_batch b;
    make_batch(&b, 16, 60, 50, &rng);
    float loss = 0;
    assert_int_equal(ar_model_train_batch(m, &b, &loss), AR_OK);
    assert_true(isfinite(loss));
    ar_batch_fini(&b);
  }
}

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
  ar_rng rng;
  ar_rng_seed(&rng, 1, 0);
  for (int i = 0; i < 6; i++) {
    ar_batch b;
    make_batch(&b, 16, 60, 400, &rng);
    float loss = 0;
    assert_int_equal(ar_model_train_batch(m, &b, &loss), AR_OK);
    assert_true(isfinite(loss));
    ar_batch_fini(&b);
  }
  ar_sampled_stats st;
  ar_model_sampled_stats(m, 1, &st);
  assert_int_equal(st.rehashes, 3); /* at 2, 4, 6; the first build apart */
  assert_true(st.reinserted > 0);
  assert_true(st.reinserted < 3 * 200); /* fewer than half the rows each time */
  ar_model_destroy(m);
  ar_device_close(dev);
  ar_spec_destroy(spec);
}

static void test_plan_has_sampled_tensors(void **state) {
  (void)state;
  char yaml[2048];
  snprintf(yaml, sizeof yaml, BASE, "", ", sparse: {mode: lsh, active: 0.1}", 1);
  ar_spec *s = parse(yaml);
  ar_plan host, gpu;
  assert_int_equal(ar_plan_compute_on(s, 6, 3, true, &host), AR_OK);
  assert_int_equal(ar_plan_compute_on(s, 6, 3, false, &gpu), AR_OK);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_output_all_active_equals_dense),
      cmocka_unit_test(test_two_sampled_layers_all_active_equal_dense),
      cmocka_unit_test(test_only_active_rows_change),
      cmocka_unit_test(test_one_thread_repeats),
      cmocka_unit_test(test_rebuilds_reinsert_changed_rows),
      cmocka_unit_test(test_plan_has_sampled_tensors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
