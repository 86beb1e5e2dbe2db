/* Gradients of every layer kind and both losses against central finite
 * differences of the model's own loss, and the memory plan against what the
 * model allocates.  Uses the host device, whose device pointers are host
 * pointers, so the test perturbs parameters in place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accelrt/graph.h"
#include "engine_fixtures.h"

static double loss_at(ar_model *m) {
  ar_model_forward(m);
  return ar_model_loss(m, false);
}

/* Checks `n_checks` random entries of every parameter tensor. */
static void gradcheck(const char *yaml) {
  ar_spec *spec = parse(yaml);
  ar_device *dev = NULL;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = 1;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_host_device_create(&o, &dev, &err), AR_OK);
  ar_model *m = NULL;
  assert_int_equal(ar_model_create(dev, spec, 6, 3, &m, &err), AR_OK);
  /* The plan is what was allocated, to the byte. */
  assert_int_equal(ar_device_bytes_in_use(dev), m->plan.persistent_bytes + m->plan.ephemeral_bytes);

  ar_rng rng;
  ar_rng_seed(&rng, 7, 0);
  ar_batch b;
  make_batch(&b, 5, (int)spec->input.features, (int)spec->layers[spec->n_layers - 1].width, &rng);
  /* Biases start at zero; give them values so their gradients matter. */
  for (int l = 0; l < m->n_layers; l++)
    for (int64_t i = 0; i < m->layers[l].out; i++)
      m->layers[l].b[i] = (float)(0.2 * ar_rng_normal(&rng));

  assert_int_equal(ar_model_load(m, &b), AR_OK);
  ar_model_forward(m);
  (void)ar_model_loss(m, true);
  ar_model_backward(m);
  /* Copy the analytic gradients: the memory plan lets the next forward
   * reuse their bytes (they are only live until the optimizer step). */
  float *ana_w[8], *ana_b[8];
  assert_true(m->n_layers <= 8);
  for (int l = 0; l < m->n_layers; l++) {
    ar_layer *L = &m->layers[l];
    ana_w[l] = malloc((size_t)(L->in * L->out) * sizeof(float));
    ana_b[l] = malloc((size_t)L->out * sizeof(float));
    memcpy(ana_w[l], L->gw, (size_t)(L->in * L->out) * sizeof(float));
    memcpy(ana_b[l], L->gb, (size_t)L->out * sizeof(float));
  }

  const double h = 1e-2;
  int checked = 0;
  for (int l = 0; l < m->n_layers; l++) {
    ar_layer *L = &m->layers[l];
    for (int which = 0; which < 2; which++) {
      float *p = which ? L->b : L->w;
      const float *g = which ? ana_b[l] : ana_w[l];
      int64_t n = which ? L->out : L->in * L->out;
      for (int c = 0; c < 12; c++) {
        int64_t i = (int64_t)ar_rng_below(&rng, (uint64_t)n);
        float keep = p[i];
        p[i] = keep + (float)h;
        double up = loss_at(m);
        p[i] = keep - (float)h;
        double down = loss_at(m);
        p[i] = keep;
        double num = (up - down) / (2 * h);
        double ana = g[i];
        if (fabs(num - ana) > 2e-3 + 3e-2 * fabs(ana))
          fail_msg("layer %s %s[%lld]: analytic %.6g vs finite difference %.6g", L->name,
                   which ? "b" : "w", (long long)i, ana, num);
        checked++;
      }
    }
  }
  assert_true(checked >= 24);
  for (int l = 0; l < m->n_layers; l++) {
    free(ana_w[l]);
    free(ana_b[l]);
  }
  ar_batch_fini(&b);
  ar_model_destroy(m);
  assert_int_equal(ar_device_bytes_in_use(dev), 0);
  ar_device_close(dev);
  ar_spec_destroy(spec);
}

static const char *common_tail =
    "data: {generate: {features: 40, labels: 12}}\n"
    "train: {batch: 8, iterations: 1}\n";

static void run_case(const char *model) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml, "name: g\nseed: 3\n%s%s", model, common_tail);
  gradcheck(yaml);
}

static void test_sparse_relu_softmax(void **state) {
  (void)state;
  run_case("model:\n  input: {sparse: 40}\n  layers:\n"
           "    - {name: h, dense: 9, activation: relu}\n"
           "    - {name: out, dense: 12, activation: softmax}\n");
}

static void test_sparse_sigmoid_none_softmax(void **state) {
  (void)state;
  run_case("model:\n  input: {sparse: 40}\n  layers:\n"
           "    - {name: h1, dense: 7, activation: sigmoid}\n"
           "    - {name: h2, dense: 5, activation: none}\n"
           "    - {name: out, dense: 12, activation: softmax}\n");
}

static void test_dense_input_sigmoid_bce(void **state) {
  (void)state;
  run_case("model:\n  input: {dense: 40}\n  layers:\n"
           "    - {name: h, dense: 6, activation: relu}\n"
           "    - {name: out, dense: 12, activation: sigmoid}\n");
}

static void test_single_layer_softmax(void **state) {
  (void)state;
  run_case("model:\n  input: {sparse: 40}\n  layers:\n"
           "    - {name: out, dense: 12, activation: softmax}\n");
}

/* One hand-sized plan where every tensor is a multiple of 64 bytes, so the
 * expected sizes are plain sums. */
static void test_plan_by_hand(void **state) {
  (void)state;
  ar_spec *spec = parse("name: p\nmodel:\n  input: {sparse: 64}\n  layers:\n"
                        "    - {name: h, dense: 32}\n    - {name: out, dense: 16}\n"
                        "data: {generate: {features: 64, labels: 16}}\n"
                        "train: {batch: 16, iterations: 1}\n");
  ar_plan plan;
  assert_int_equal(ar_plan_compute(spec, 4, 2, &plan, NULL), AR_OK);
  size_t params = 64 * 32 + 32 + 32 * 16 + 16;
  assert_int_equal(plan.param_count, params);
  /* Adam: parameters + two moments. */
  assert_int_equal(plan.persistent_bytes, 3 * params * 4);
  /* Ephemeral without sharing: row_ptr (17 x 8 -> 192 aligned), idx
   * 16*4*4, val 16*4*4, lab_ptr 192, lab 16*2*4 = 128, grads = params*4, y
   * of both layers, grad.y of the hidden layer, loss rows 64, topk
   * 16*5*4 = 320. */
  size_t sum = 192 + 256 + 256 + 192 + 128 + params * 4 + 16 * 32 * 4 + 16 * 16 * 4 +
               16 * 32 * 4 + 64 + 320;
  assert_int_equal(plan.ephemeral_sum_bytes, sum);
  /* With lifetimes (steps: load 0, forward h 1, out 2, loss 3, backward
   * out 4, h 5, step 6), the most live at once is at the backward of h:
   * the batch 1024, h's gradients 8192 + 128, h.y 2048, h.grad.y 2048,
   * out's gradients 2048 + 64 and the top-k 320 = 15872; loss.rows and
   * out.y are dead by then and share their bytes. */
  assert_int_equal(plan.ephemeral_bytes, 15872);
  /* No two tensors live at one step share a byte. */
  for (int i = 0; i < plan.count; i++)
    for (int j = i + 1; j < plan.count; j++) {
      const ar_plan_entry *a = &plan.entries[i], *c = &plan.entries[j];
      if (a->cls != AR_MEM_EPHEMERAL || c->cls != AR_MEM_EPHEMERAL)
        continue;
      bool together = a->first_use <= c->last_use && c->first_use <= a->last_use;
      bool apart = a->offset + a->bytes <= c->offset || c->offset + c->bytes <= a->offset;
      if (together && !apart)
        fail_msg("%s and %s are live together but overlap", a->name, c->name);
    }
  ar_plan_fini(&plan);
  /* SGD without momentum keeps no optimizer state. */
  ar_spec_destroy(spec);
  spec = parse("name: p\nmodel:\n  input: {sparse: 64}\n  layers:\n"
               "    - {name: h, dense: 32}\n    - {name: out, dense: 16}\n"
               "data: {generate: {features: 64, labels: 16}}\n"
               "train: {batch: 16, iterations: 1, optimizer: {sgd: {lr: 0.1, momentum: 0}}}\n");
  assert_int_equal(ar_plan_compute(spec, 4, 2, &plan, NULL), AR_OK);
  assert_int_equal(plan.persistent_bytes, params * 4);
  ar_plan_fini(&plan);
  ar_spec_destroy(spec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sparse_relu_softmax),
      cmocka_unit_test(test_sparse_sigmoid_none_softmax),
      cmocka_unit_test(test_dense_input_sigmoid_bce),
      cmocka_unit_test(test_single_layer_softmax),
      cmocka_unit_test(test_plan_by_hand),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
