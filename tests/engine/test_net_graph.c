/* Nets from graphs built by a program (include/accelrt/net.h, "graphs
 * built by a program"; nn.h's ar_nn_graph): a forward on named inputs
 * against values computed here by hand (a dense layer whose parameters are
 * given, an integer path, outputs that are an input and a constant), batch
 * normalisation in training mode updating the running statistics bound to
 * its inputs, the plan holding exactly the constants and parameters, the
 * graph builder's errors (a bad binding, a shape an op refuses), and
 * inference refused on a net that was not started. */
#define _GNU_SOURCE
#include "accelrt/net.h"

#include "net_fixture.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static ar_device *host(void) { return net_host(2); }

static int add_tensor(ar_nn_graph *g, const char *name, ar_nn_tkind kind, ar_shape s, ar_dtype t,
                      const void *data) {
  int id = -1;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_nn_graph_tensor(g, name, kind, &s, t, data, &id, &err), AR_OK);
  return id;
}

static int add_node(ar_nn_graph *g, const char *name, ar_nn_op op, const ar_nn_attr *a, int n_in,
                    const int *in, const int *params, const int *states, ar_nn_mode mode) {
  int out[AR_NN_MAX_IO];
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_nn_graph_node(g, name, op, a, n_in, in, params, states, mode, out, &err);
  if (st != AR_OK)
    printf("# %s\n", err.msg);
  assert_int_equal(st, AR_OK);
  return out[0];
}

/* y = relu(x W^T + b) + c with W, b given; k = ids * 3 (i64); outputs y,
 * k, x itself and the constant c. */
static void test_forward(void **state) {
  (void)state;
  ar_nn_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_nn_graph_create(&g, &err), AR_OK);
  const float W[6] = {1, -2, 0.5f, 3, 0, -1}, b[2] = {0.25f, -4}, c[2] = {10, 20};
  const int64_t three = 3;
  int x = add_tensor(g, "x", AR_NN_T_INPUT, (ar_shape){2, {2, 3}}, AR_DT_F32, NULL);
  int ids = add_tensor(g, "ids", AR_NN_T_INPUT, (ar_shape){1, {4}}, AR_DT_I64, NULL);
  int w = add_tensor(g, "w", AR_NN_T_PARAM, (ar_shape){2, {2, 3}}, AR_DT_F32, W);
  int bb = add_tensor(g, "b", AR_NN_T_PARAM, (ar_shape){1, {2}}, AR_DT_F32, b);
  int cc = add_tensor(g, "c", AR_NN_T_CONST, (ar_shape){1, {2}}, AR_DT_F32, c);
  int k3 = add_tensor(g, "three", AR_NN_T_CONST, (ar_shape){0}, AR_DT_I64, &three);
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.out = 2;
  a.act = AR_ACT_RELU;
  int params[2] = {w, bb};
  int h = add_node(g, "fc", AR_NN_DENSE, &a, 1, &x, params, NULL, AR_NN_MODE_RUN);
  ar_nn_attr_defaults(&a);
  int y = add_node(g, "y", AR_NN_ADD, &a, 2, (int[]){h, cc}, NULL, NULL, AR_NN_MODE_RUN);
  int k = add_node(g, "k", AR_NN_MUL, &a, 2, (int[]){ids, k3}, NULL, NULL, AR_NN_MODE_RUN);
  assert_int_equal(g->tensors[k].dtype, AR_DT_I64);
  for (int t = 0, outs[4] = {y, k, x, cc}; t < 4; t++)
    assert_int_equal(ar_nn_graph_output(g, outs[t], &err), AR_OK);

  ar_net *n = NULL;
  ar_net_graph_opts go = AR_NET_GRAPH_OPTS_INIT;
  assert_int_equal(ar_net_build_graph(g, &go, &n, &err), AR_OK);
  ar_nn_graph_destroy(g); /* the net keeps what it needs */
  /* The persistent block holds the parameters and constants (each
   * 64-byte aligned), nothing else: no gradients or optimizer state. */
  const ar_plan *p = ar_net_plan(n);
  assert_int_equal(p->persistent_bytes, 4 * 64);
  assert_int_equal(p->param_count, 8);

  float xin[6] = {1, 2, 3, -1, 0.5f, 2}, yout[4];
  int64_t idin[4] = {1, -2, 7, 0}, kout[4];
  float xout[6], cout[2];
  const void *in[2] = {xin, idin};
  void *out[4] = {yout, kout, xout, cout};
  assert_int_equal(ar_net_infer(n, in, out, &err), AR_STATE); /* not started */
  ar_device *dev = host();
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  assert_int_equal(ar_net_infer(n, in, out, &err), AR_OK);
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 2; j++) {
      float s = b[j];
      for (int q = 0; q < 3; q++)
        s += xin[r * 3 + q] * W[j * 3 + q];
      assert_float_equal(yout[r * 2 + j], (s > 0 ? s : 0) + c[j], 1e-5);
    }
  for (int i = 0; i < 4; i++)
    assert_true(kout[i] == 3 * idin[i]);
  assert_memory_equal(xout, xin, sizeof xin);
  assert_memory_equal(cout, c, sizeof c);
  ar_net_destroy(n);
  ar_device_close(dev);
}

/* Batch norm in training mode with its running statistics bound to
 * inputs: the outputs use the batch's statistics, and the statistics read
 * after the forward moved by ONNX's rule (momentum 0.9 on the old value,
 * the biased batch variance). */
static void test_batchnorm_train_mode(void **state) {
  (void)state;
  ar_nn_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_nn_graph_create(&g, &err), AR_OK);
  int x = add_tensor(g, "x", AR_NN_T_INPUT, (ar_shape){2, {4, 1}}, AR_DT_F32, NULL);
  int gam = add_tensor(g, "g", AR_NN_T_INPUT, (ar_shape){1, {1}}, AR_DT_F32, NULL);
  int bet = add_tensor(g, "b", AR_NN_T_INPUT, (ar_shape){1, {1}}, AR_DT_F32, NULL);
  int rm = add_tensor(g, "m", AR_NN_T_INPUT, (ar_shape){1, {1}}, AR_DT_F32, NULL);
  int rv = add_tensor(g, "v", AR_NN_T_INPUT, (ar_shape){1, {1}}, AR_DT_F32, NULL);
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.momentum = 0.1f;
  a.var_biased = true;
  int y = add_node(g, "bn", AR_NN_BATCHNORM, &a, 1, &x, (int[]){gam, bet}, (int[]){rm, rv},
                   AR_NN_MODE_TRAIN);
  assert_int_equal(ar_nn_graph_output(g, y, &err), AR_OK);
  assert_int_equal(ar_nn_graph_output(g, rm, &err), AR_OK);
  assert_int_equal(ar_nn_graph_output(g, rv, &err), AR_OK);
  ar_net *n = NULL;
  assert_int_equal(ar_net_build_graph(g, NULL, &n, &err), AR_OK);
  ar_device *dev = host();
  assert_int_equal(ar_net_start(n, dev, NULL, NULL, &err), AR_OK);
  const float xs[4] = {1, 2, 3, 6}, one = 1, zero = 0, m0 = 0.5f, v0 = 2;
  const void *in[5] = {xs, &one, &zero, &m0, &v0};
  float yo[4], mo, vo;
  void *out[3] = {yo, &mo, &vo};
  assert_int_equal(ar_net_infer(n, in, out, &err), AR_OK);
  const double mean = 3, var = (4 + 1 + 0 + 9) / 4.0;
  for (int i = 0; i < 4; i++)
    assert_float_equal(yo[i], (xs[i] - mean) / sqrt(var + 1e-5), 1e-5);
  assert_float_equal(mo, 0.9 * 0.5 + 0.1 * mean, 1e-6);
  assert_float_equal(vo, 0.9 * 2 + 0.1 * var, 1e-6);
  ar_nn_graph_destroy(g);
  ar_net_destroy(n);
  ar_device_close(dev);
}

/* The builder's errors name the node and what is wrong. */
static void test_errors(void **state) {
  (void)state;
  ar_nn_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_nn_graph_create(&g, &err), AR_OK);
  int x = add_tensor(g, "x", AR_NN_T_INPUT, (ar_shape){2, {2, 3}}, AR_DT_F32, NULL);
  int w = add_tensor(g, "w", AR_NN_T_PARAM, (ar_shape){2, {4, 4}}, AR_DT_F32, NULL);
  ar_nn_attr a;
  ar_nn_attr_defaults(&a);
  a.out = 4;
  a.bias = false;
  int out[AR_NN_MAX_IO];
  assert_int_equal(
      ar_nn_graph_node(g, "fc", AR_NN_DENSE, &a, 1, &x, &w, NULL, AR_NN_MODE_RUN, out, &err),
      AR_INVALID);
  printf("# %s\n", err.msg);
  assert_non_null(strstr(err.msg, "'fc'"));
  assert_non_null(strstr(err.msg, "4x3"));
  assert_non_null(strstr(err.msg, "4x4"));
  ar_nn_attr_defaults(&a);
  int y = add_tensor(g, "y", AR_NN_T_INPUT, (ar_shape){1, {5}}, AR_DT_F32, NULL);
  assert_int_equal(ar_nn_graph_node(g, "sum", AR_NN_ADD, &a, 2, (int[]){x, y}, NULL, NULL,
                                    AR_NN_MODE_RUN, out, &err),
                   AR_INVALID);
  assert_non_null(strstr(err.msg, "'sum'"));
  assert_non_null(strstr(err.msg, "2x3"));
  assert_int_equal(
      ar_nn_graph_tensor(g, "p", AR_NN_T_PARAM, &(ar_shape){1, {2}}, AR_DT_I64, NULL, &y, &err),
      AR_INVALID);
  assert_int_equal(ar_nn_graph_output(g, 99, &err), AR_INVALID);
  ar_nn_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_batchnorm_train_mode),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
