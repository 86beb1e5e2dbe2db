/* The nn ops of group "sparse" (runtime/device/host/nn_sparse.c): finite-
 * difference gradients, outputs and gradients against PyTorch
 * (tests/device/nn_torch_sparse.py: torch.sparse.mm, log_softmax, BCE),
 * the chain engine's kernels (ar_device_spmm, ar_device_softmax_xent) bit
 * for bit, and shape errors. */
#include "nn_check.h"

#include "accelrt/device.h"

#define TORCH_SCRIPT "tests/device/nn_torch_sparse.py"

enum { ROWS = 6, VOCAB = 11, OUT = 5, ROOM = 24, CLASSES = 7 };

/* Row r holds r % 4 entries (row 0 empty: a padded batch's tail), distinct
 * ids of the vocabulary; labels likewise, r % 3 distinct ids of CLASSES. */
static void fill_csr(nn_case *c, int input, void *p, int64_t n, int64_t range, int per) {
  unsigned s = 77u + (unsigned)input;
  if (input == 0 || (c->op == AR_NN_XENT_MULTI && input == 1)) {
    int64_t *ptr = p, at = 0;
    for (int64_t r = 0; r < n; r++) {
      ptr[r] = at;
      at += r < n - 1 ? r % per : 0;
    }
    return;
  }
  if (c->a.in[input].dtype == AR_DT_I32) {
    int32_t *ids = p;
    memset(ids, 0, (size_t)n * sizeof *ids);
    int64_t at = 0;
    for (int r = 0; r < ROWS; r++) /* consecutive ids from a random start */
      for (int j = 0, base = (int)(nn__rand(&s) % (unsigned)range); j < r % per; j++)
        ids[at++] = (int32_t)((base + j) % range);
    return;
  }
  float *v = p;
  for (int64_t e = 0; e < n; e++)
    v[e] = 2.0f * nn__uniform(&c->seed) - 1.0f;
}

static void fill_dense(nn_case *c, int input, void *p, int64_t n) {
  fill_csr(c, input, p, n, VOCAB, 4);
}

static void fill_labels(nn_case *c, int input, void *p, int64_t n) {
  if (input == 0) {
    float *z = p;
    for (int64_t j = 0; j < n; j++)
      z[j] = 4.0f * nn__uniform(&c->seed) - 2.0f;
    return;
  }
  fill_csr(c, input, p, n, CLASSES, 3);
}

static void dense_case(nn_case *c, ar_act act, bool bias) {
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.vocab = VOCAB;
  a.out = OUT;
  a.act = act;
  a.bias = bias;
  nn_case_init(c, AR_NN_SPARSE_DENSE, &a);
  nn_case_input(c, NN_SHAPE(ROWS + 1), AR_DT_I64);
  nn_case_input(c, NN_SHAPE(ROOM), AR_DT_I32);
  nn_case_input(c, NN_SHAPE(ROOM), AR_DT_F32);
  c->fill = fill_dense;
  assert_int_equal(nn_case_setup(c), AR_OK);
}

static void test_sparse_dense(void **state) {
  (void)state;
  const ar_act acts[] = {AR_ACT_NONE, AR_ACT_RELU, AR_ACT_SIGMOID};
  for (int k = 0; k < 3; k++) {
    nn_case c;
    dense_case(&c, acts[k], k != 2);
    assert_int_equal(c.sig.no_grad, 7u);
    assert_int_equal(c.sig.param[0].d[0], VOCAB);
    assert_int_equal(c.sig.param[0].d[1], OUT);
    assert_int_equal(c.sig.param_init[0], AR_NN_INIT_FAN_IN_ROWS);
    nn_tol t = {acts[k] == AR_ACT_RELU ? 1e-3 : 1e-2, 1e-2, 2e-2, 40}; /* relu: +-h off its kink */
    nn_check_grad(&c, &t);
    nn_check_torch(&c, TORCH_SCRIPT, 1e-5, 1e-5);
    nn_case_fini(&c);
  }
}

/* What the chain engine's first layer computes (ar_device_spmm, bias_act,
 * col_sum, spmm_t over a zeroed gw), bit for bit; the rows of dw the batch
 * does not name stay zero; the empty row's output is act(b). */
static void test_sparse_dense_chain(void **state) {
  (void)state;
  nn_case c;
  dense_case(&c, AR_ACT_RELU, true);
  ar_nn_args *a = &c.a;
  nn_case_forward(&c);
  nn_case_backward(&c);
  const int64_t *ptr = a->in[0].p;
  const int32_t *idx = a->in[1].p;
  const float *val = a->in[2].p, *w = a->param[0].p, *b = a->param[1].p;
  float y[ROWS * OUT], gz[ROWS * OUT], gb[OUT], gw[VOCAB * OUT];
  ar_device_spmm(c.dev, ROWS, ptr, idx, val, w, OUT, y);
  ar_device_bias_act(c.dev, ROWS, OUT, b, AR_ACT_RELU, y);
  assert_memory_equal(y, a->out[0].p, sizeof y);
  memcpy(gz, a->gout[0].p, sizeof gz);
  ar_device_act_grad(c.dev, ROWS * OUT, AR_ACT_RELU, y, gz);
  ar_device_col_sum(c.dev, ROWS, OUT, gz, false, gb);
  ar_device_fill(c.dev, gw, VOCAB * OUT, 0.0f);
  ar_device_spmm_t(c.dev, ROWS, ptr, idx, val, gz, OUT, gw);
  assert_memory_equal(gb, a->gparam[1].p, sizeof gb);
  assert_memory_equal(gw, a->gparam[0].p, sizeof gw);
  bool named[VOCAB] = {false};
  for (int64_t e = 0; e < ptr[ROWS]; e++)
    named[idx[e]] = true;
  for (int i = 0; i < VOCAB; i++)
    for (int j = 0; !named[i] && j < OUT; j++)
      assert_true(((float *)a->gparam[0].p)[i * OUT + j] == 0.0f);
  assert_int_equal(ptr[0], ptr[1]); /* row 0 is empty */
  for (int j = 0; j < OUT; j++)
    assert_true(((float *)a->out[0].p)[j] == (b[j] > 0 ? b[j] : 0.0f));
  nn_case_fini(&c);
}

static void test_xent_multi(void **state) {
  (void)state;
  const ar_act acts[] = {AR_ACT_SOFTMAX, AR_ACT_SIGMOID};
  for (int k = 0; k < 2; k++) {
    ar_nn_attr at;
    ar_nn_attr_defaults(&at);
    at.act = acts[k];
    nn_case c;
    nn_case_init(&c, AR_NN_XENT_MULTI, &at);
    nn_case_input(&c, NN_SHAPE(ROWS, CLASSES), AR_DT_F32);
    nn_case_input(&c, NN_SHAPE(ROWS + 1), AR_DT_I64);
    nn_case_input(&c, NN_SHAPE(ROOM), AR_DT_I32);
    c.fill = fill_labels;
    assert_int_equal(nn_case_setup(&c), AR_OK);
    c.a.scale = 0.25f;
    assert_int_equal(c.sig.no_grad, 6u);
    nn_case_forward(&c);
    nn_case_backward(&c);
    /* The chain's loss kernel, bit for bit. */
    float loss[ROWS], grad[ROWS * CLASSES];
    if (k == 0)
      ar_device_softmax_xent(c.dev, ROWS, CLASSES, c.a.in[0].p, c.a.in[1].p, c.a.in[2].p, 0.25f,
                             grad, loss);
    else
      ar_device_sigmoid_bce(c.dev, ROWS, CLASSES, c.a.in[0].p, c.a.in[1].p, c.a.in[2].p, 0.25f,
                            grad, loss);
    assert_memory_equal(loss, c.a.out[0].p, sizeof loss);
    assert_memory_equal(grad, c.a.gin[0].p, sizeof grad);
    if (k == 0) /* row 0 has no labels: no loss, no gradient */
      for (int j = 0; j < CLASSES; j++)
        assert_true(grad[j] == 0.0f);
    nn_tol t = {1e-2, 1e-3, 2e-2, 42};
    nn_check_grad(&c, &t);
    nn_check_torch(&c, TORCH_SCRIPT, 1e-5, 1e-5);
    nn_case_fini(&c);
  }
}

static void test_errors(void **state) {
  (void)state;
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.vocab = VOCAB;
  a.out = OUT;
  ar_shape in[3] = {NN_SHAPE(ROWS + 1), NN_SHAPE(ROOM), NN_SHAPE(ROOM - 1)};
  ar_dtype t[3] = {AR_DT_I64, AR_DT_I32, AR_DT_F32};
  ar_nn_sig sig;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_nn_infer(AR_NN_SPARSE_DENSE, &a, 3, in, t, &sig, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "idx 24, val 23"));
  in[2] = NN_SHAPE(ROOM);
  t[1] = AR_DT_I64;
  assert_int_equal(ar_nn_infer(AR_NN_SPARSE_DENSE, &a, 3, in, t, &sig, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "want row_ptr i64, idx i32"));
  t[1] = AR_DT_I32;
  a.vocab = 0;
  assert_int_equal(ar_nn_infer(AR_NN_SPARSE_DENSE, &a, 3, in, t, &sig, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "vocab (input features) 0"));
  a.vocab = VOCAB;
  assert_int_equal(ar_nn_infer(AR_NN_SPARSE_DENSE, &a, 3, in, t, &sig, &err), AR_OK);
  assert_int_equal(sig.out[0].d[0], ROWS);
  ar_shape li[3] = {NN_SHAPE(ROWS, CLASSES), NN_SHAPE(ROWS), NN_SHAPE(ROOM)};
  ar_dtype lt[3] = {AR_DT_F32, AR_DT_I64, AR_DT_I32};
  a.act = AR_ACT_SOFTMAX;
  assert_int_equal(ar_nn_infer(AR_NN_XENT_MULTI, &a, 3, li, lt, &sig, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "lab_ptr 6"));
  li[1] = NN_SHAPE(ROWS + 1);
  a.act = AR_ACT_RELU;
  assert_int_equal(ar_nn_infer(AR_NN_XENT_MULTI, &a, 3, li, lt, &sig, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "not softmax or sigmoid"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sparse_dense),
      cmocka_unit_test(test_sparse_dense_chain),
      cmocka_unit_test(test_xent_multi),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
