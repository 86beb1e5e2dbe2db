/* The op graph of a graph model under distributed: (ar_dist_net_op_graph)
 * for an Inception-style block — a stem, then four parallel branches (1x1;
 * 1x1 then 3x3; 3x3 max pool then 1x1; a 5x5 reading the stem) joined by
 * concat, batch norm, pooling, a dense layer — with one and two servers:
 *   - one recv per trainable parameter, a fwd per node, a bwd per training
 *     node, and no other op;
 *   - every recv precedes (an edge) every forward that reads it and the
 *     backward of its first reader, after which the gradient is final: no
 *     backward of a reader runs later in the worker's order;
 *   - the graph is acyclic and follows the net's own edges, and the
 *     worker's execution order too: it runs the nodes one at a time in
 *     list order (backward: last first), so a block's branches, parallel
 *     in the net, follow one another in the op graph, and still join at
 *     the concat;
 *   - random, TIC and TAC schedules list every transfer, and TAC never puts
 *     a transfer before one on its channel whose first reader must run
 *     earlier (a strict ancestor in the DAG);
 *   - the parameters are sharded over two servers within the largest
 *     tensor's bytes of each other;
 *   - under distributed: the worker's forward runs the max pool, listed
 *     after two branches, right after the stem (it waits for no
 *     parameter), then its 1x1 and the other branches; the op graph's
 *     worker order, the first readers and TAC's order follow that order,
 *     and one process keeps the list order. */
#define _GNU_SOURCE
#include "accelrt/commsched.h"
#include "accelrt/dist.h"
#include "accelrt/net.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *const INCEPTION =
    "name: br\n"
    "device: host\n"
    "seed: 1\n"
    "model:\n"
    "  input: {image: [1, 8, 8]}\n"
    "  layers:\n"
    "    - {name: stem, conv: 4, kernel: 3, padding: 1}\n"
    "    - {name: a1, conv: 4, kernel: 1, inputs: [stem]}\n"
    "    - {name: b1, conv: 3, kernel: 1, inputs: [stem]}\n"
    "    - {name: b2, conv: 4, kernel: 3, padding: 1}\n"
    "    - {name: p, op: maxpool, kernel: 3, stride: 1, padding: 1, inputs: [stem]}\n"
    "    - {name: p1, conv: 2, kernel: 1}\n"
    "    - {name: c5, conv: 2, kernel: 5, padding: 2, inputs: [stem]}\n"
    "    - {name: cat, op: concat, axis: 1, inputs: [a1, b2, p1, c5]}\n"
    "    - {name: bn, op: batchnorm, activation: relu}\n"
    "    - {name: pool, op: global_avgpool}\n"
    "    - {name: out, dense: 4, activation: softmax}\n"
    "data: {format: npy, train: train, test: test}\n"
    "train: {batch: 8, iterations: 1}\n";

typedef struct fixture {
  ar_spec *spec;
  ar_net *net;
  int P, N;
  ar_net_param *ps;
  ar_commsched_graph *g;
  ar_commsched_op *fwd, *bwd;
  uint8_t *reach; /* (ops, ops): reach[a * ops + b]: a path a -> b */
  size_t nops;
} fixture;

static int node_of(const fixture *f, const char *name) {
  for (int i = 0; i < f->N; i++)
    if (strcmp(ar_net_node_name(f->net, i), name) == 0)
      return i;
  fail_msg("no node '%s'", name);
  return -1;
}

static bool reads(const fixture *f, int node, int tensor) {
  int prm[16];
  int n = ar_net_node_params(f->net, node, prm, 16);
  for (int k = 0; k < n; k++)
    if (prm[k] == tensor)
      return true;
  return false;
}

static bool has_edge(const fixture *f, ar_commsched_op a, ar_commsched_op b) {
  size_t m = ar_commsched_graph_edge_count(f->g);
  for (size_t i = 0; i < m; i++) {
    ar_commsched_op x, y;
    ar_commsched_graph_edge(f->g, i, &x, &y);
    if (x == a && y == b)
      return true;
  }
  return false;
}

static void build_text(fixture *f, const char *text, int servers) {
  memset(f, 0, sizeof *f);
  ar_diags d;
  ar_status st = ar_spec_parse(text, strlen(text), "br.yaml", NULL, NULL, 0, false,
                               &f->spec, &d);
  if (st != AR_OK)
    ar_diags_print(&d, "br.yaml", stdout);
  ar_diags_fini(&d);
  assert_int_equal(st, AR_OK);
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_net_build(f->spec, 8, &f->net, &err), AR_OK);
  f->P = ar_net_params(f->net, NULL);
  f->N = ar_net_node_count(f->net);
  f->ps = calloc((size_t)f->P, sizeof *f->ps);
  f->fwd = calloc((size_t)f->N, sizeof *f->fwd);
  f->bwd = calloc((size_t)f->N, sizeof *f->bwd);
  ar_net_params(f->net, f->ps);
  st = ar_dist_net_op_graph(f->net, servers, &f->g, f->fwd, f->bwd, &err);
  if (st != AR_OK)
    fail_msg("%s", err.msg);
  f->nops = ar_commsched_graph_op_count(f->g);
  size_t n = f->nops;
  f->reach = calloc(n * n, 1);
  size_t m = ar_commsched_graph_edge_count(f->g);
  for (size_t i = 0; i < m; i++) {
    ar_commsched_op a, b;
    ar_commsched_graph_edge(f->g, i, &a, &b);
    f->reach[a * n + b] = 1;
  }
  for (size_t k = 0; k < n; k++) /* Warshall */
    for (size_t i = 0; i < n; i++)
      if (f->reach[i * n + k])
        for (size_t j = 0; j < n; j++)
          if (f->reach[k * n + j])
            f->reach[i * n + j] = 1;
}

static void build(fixture *f, int servers) { build_text(f, INCEPTION, servers); }

static void teardown_f(fixture *f) {
  ar_commsched_graph_destroy(f->g);
  ar_net_destroy(f->net);
  ar_spec_destroy(f->spec);
  free(f->ps);
  free(f->fwd);
  free(f->bwd);
  free(f->reach);
}

static void test_structure(void **state) {
  (void)state;
  fixture f;
  build(&f, 1);
  int trains = 0;
  for (int i = 0; i < f.N; i++)
    trains += ar_net_node_trains(f.net, i);
  /* stem, a1, b1, b2, p1, c5: w and b; bn: gamma, beta; out: w, b. */
  assert_int_equal(f.P, 16);
  assert_int_equal(f.nops, (size_t)(f.P + f.N + trains));
  assert_int_equal(ar_commsched_graph_transfer_count(f.g), (size_t)f.P);
  size_t n = f.nops;
  for (size_t i = 0; i < n; i++)
    assert_false(f.reach[i * n + i]); /* acyclic */
  for (int p = 0; p < f.P; p++) {
    assert_int_equal(ar_commsched_graph_kind(f.g, (ar_commsched_op)p), AR_COMMSCHED_RECV);
    int first = f.ps[p].first, ready = f.ps[p].ready;
    assert_true(first >= 0 && ready >= 0);
    for (int i = 0; i < f.N; i++) {
      if (!reads(&f, i, f.ps[p].tensor))
        continue;
      /* Received before every forward that reads it ... */
      assert_true(has_edge(&f, (ar_commsched_op)p, f.fwd[i]));
      assert_true(i >= first);
      /* ... and its gradient final only after the worker's last
       * backward that contributes (backward runs last node first). */
      if (ar_net_node_trains(f.net, i))
        assert_true(i >= ready);
    }
    assert_true(reads(&f, first, f.ps[p].tensor));
    assert_true(has_edge(&f, (ar_commsched_op)p, f.bwd[ready]));
  }
  /* The net's edges, forward and back. */
  for (int i = 0; i < f.N; i++) {
    int deps[16];
    int nd = ar_net_node_inputs(f.net, i, deps, 16);
    for (int k = 0; k < nd; k++) {
      assert_true(has_edge(&f, f.fwd[deps[k]], f.fwd[i]));
      if (ar_net_node_trains(f.net, i) && ar_net_node_trains(f.net, deps[k]))
        assert_true(has_edge(&f, f.bwd[i], f.bwd[deps[k]]));
    }
    if (ar_net_node_trains(f.net, i))
      assert_true(f.reach[f.fwd[i] * n + f.bwd[i]]);
  }
  /* The branches run in the worker's order: a branch listed earlier
   * reaches a later one forward, and the later one reaches it backward. */
  const char *br[] = {"a1", "b2", "p1", "c5"};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++) {
      int x = node_of(&f, br[a]), y = node_of(&f, br[b]);
      if (x >= y)
        continue;
      assert_true(f.reach[f.fwd[x] * n + f.fwd[y]]);
      assert_false(f.reach[f.fwd[y] * n + f.fwd[x]]);
      assert_true(f.reach[f.bwd[y] * n + f.bwd[x]]);
      assert_false(f.reach[f.bwd[x] * n + f.bwd[y]]);
    }
  /* Every node's forward, then every backward, one at a time. */
  for (int i = 1; i < f.N; i++)
    assert_true(f.reach[f.fwd[i - 1] * n + f.fwd[i]]);
  for (int i = 0; i < f.N; i++)
    if (ar_net_node_trains(f.net, i))
      assert_true(f.reach[f.fwd[f.N - 1] * n + f.bwd[i]]);
  /* Yet they join: every branch reaches the concat. */
  for (int a = 0; a < 4; a++)
    assert_true(f.reach[f.fwd[node_of(&f, br[a])] * n + f.fwd[node_of(&f, "cat")]]);
  teardown_f(&f);
}

static void test_orders(void **state) {
  (void)state;
  fixture f;
  build(&f, 1);
  size_t n = f.nops;
  ar_commsched_order orders[3] = {AR_COMMSCHED_ORDER_RANDOM, AR_COMMSCHED_ORDER_TIC,
                                  AR_COMMSCHED_ORDER_TAC};
  for (int o = 0; o < 3; o++) {
    ar_commsched_schedule_opts so = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
    so.order = orders[o];
    so.seed = 3;
    ar_commsched_schedule *s = NULL;
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_commsched_schedule_create(f.g, &so, &s, &err), AR_OK);
    assert_int_equal(ar_commsched_schedule_count(s), (size_t)f.P);
    for (int p = 0; p < f.P; p++)
      assert_non_null(ar_commsched_schedule_find(s, (uint32_t)p));
    if (orders[o] == AR_COMMSCHED_ORDER_TAC) {
      /* The transfers in TAC's order, with the compute ops as soon as
       * their inputs are in, form a topological order: no transfer comes
       * after one whose first reader depends on its own first reader. */
      for (int p = 0; p < f.P; p++)
        for (int q = 0; q < f.P; q++) {
          ar_commsched_op fp = f.fwd[f.ps[p].first], fq = f.fwd[f.ps[q].first];
          if (fp != fq && f.reach[fq * n + fp]) /* q's reader runs strictly first */
            assert_true(ar_commsched_schedule_find(s, (uint32_t)q)->priority <
                        ar_commsched_schedule_find(s, (uint32_t)p)->priority);
        }
    }
    ar_commsched_schedule_destroy(s);
  }
  teardown_f(&f);
}

static void test_shards(void **state) {
  (void)state;
  fixture f;
  build(&f, 2);
  size_t load[2] = {0, 0}, most = 0;
  for (int p = 0; p < f.P; p++) {
    uint32_t ch = ar_commsched_graph_channel(f.g, (uint32_t)p);
    assert_true(ch < 2);
    size_t b = ar_commsched_graph_bytes(f.g, (uint32_t)p);
    assert_int_equal(b, (size_t)f.ps[p].count * sizeof(float));
    load[ch] += b;
    most = b > most ? b : most;
  }
  assert_true(load[0] > 0 && load[1] > 0);
  assert_true((load[0] > load[1] ? load[0] - load[1] : load[1] - load[0]) <= most);
  teardown_f(&f);
}

/* The worker's forward order under distributed: (issue 17).  The block
 * lists its max pool after the 1x1 and 3x3 branches; the pool reads only
 * the stem and no parameter, so the worker runs it right after the stem,
 * then its 1x1 (the branch goes on), then the branches whose weights it
 * would otherwise wait for first.  Without the reorder the pool runs after
 * b2 and its weights, as listed. */
static void test_ready_first(void **state) {
  (void)state;
  fixture one, f;
  build(&one, 1);
  int N = one.N, *order = calloc((size_t)N, sizeof *order);
  /* One process: the list order. */
  assert_int_equal(ar_net_forward_order(one.net, order), N);
  for (int s = 0; s < N; s++)
    assert_int_equal(order[s], s);
  teardown_f(&one);
  char text[4096];
  snprintf(text, sizeof text, "%sdistributed: {servers: 1, order: tac}\n", INCEPTION);
  build_text(&f, text, 1);
  assert_int_equal(ar_net_forward_order(f.net, order), N);
  int *step = calloc((size_t)N, sizeof *step);
  for (int s = 0; s < N; s++)
    step[order[s]] = s;
  const char *want[] = {"stem", "p", "p1", "a1", "b1", "b2", "c5", "cat", "bn", "pool", "out"};
  for (int s = 0; s < 11; s++)
    assert_string_equal(ar_net_node_name(f.net, order[s]), want[s]);
  assert_int_equal(order[N - 1], N - 1); /* the loss last */
  size_t n = f.nops;
  for (int i = 0; i < N; i++) { /* topological */
    int deps[16];
    int nd = ar_net_node_inputs(f.net, i, deps, 16);
    for (int k = 0; k < nd; k++)
      assert_true(step[deps[k]] < step[i]);
  }
  /* The op graph carries the worker's order: each forward reaches the
   * next, and b2 (listed before the pool) never reaches the pool. */
  for (int s = 1; s < N; s++)
    assert_true(has_edge(&f, f.fwd[order[s - 1]], f.fwd[order[s]]));
  assert_true(f.reach[f.fwd[node_of(&f, "p1")] * n + f.fwd[node_of(&f, "b2")]]);
  assert_false(f.reach[f.fwd[node_of(&f, "b2")] * n + f.fwd[node_of(&f, "p")]]);
  /* A parameter's first reader is the earliest in the forward order; the
   * gradient is final after the backward of its first listed reader
   * (backward keeps the list order). */
  for (int p = 0; p < f.P; p++)
    for (int i = 0; i < N; i++)
      if (reads(&f, i, f.ps[p].tensor)) {
        assert_true(step[i] >= step[f.ps[p].first]);
        assert_true(has_edge(&f, (ar_commsched_op)p, f.fwd[i]));
        if (ar_net_node_trains(f.net, i))
          assert_true(i >= f.ps[p].ready);
      }
  /* TAC sends in the worker's order (one server: one channel): every
   * receive before the first consumer of any later one; p1's weights
   * come before the 1x1 and 3x3 branches' they were listed after. */
  ar_commsched_schedule_opts so = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
  so.order = AR_COMMSCHED_ORDER_TAC;
  ar_commsched_schedule *s = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_schedule_create(f.g, &so, &s, &err), AR_OK);
  for (int p = 0; p < f.P; p++)
    for (int q = 0; q < f.P; q++)
      if (step[f.ps[q].first] < step[f.ps[p].first])
        assert_true(ar_commsched_schedule_find(s, (uint32_t)q)->priority <
                    ar_commsched_schedule_find(s, (uint32_t)p)->priority);
  int p1w = -1;
  for (int p = 0; p < f.P; p++)
    if (strcmp(f.ps[p].name, "p1.w") == 0)
      p1w = p;
  assert_true(p1w >= 0);
  for (int p = 0; p < f.P; p++)
    if (strncmp(f.ps[p].name, "a1.", 3) == 0 || strncmp(f.ps[p].name, "b1.", 3) == 0 ||
        strncmp(f.ps[p].name, "b2.", 3) == 0 ||
        strncmp(f.ps[p].name, "c5.", 3) == 0)
      assert_true(ar_commsched_schedule_find(s, (uint32_t)p1w)->priority <
                  ar_commsched_schedule_find(s, (uint32_t)p)->priority);
  ar_commsched_schedule_destroy(s);
  free(order);
  free(step);
  teardown_f(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_structure),
      cmocka_unit_test(test_orders),
      cmocka_unit_test(test_shards),
      cmocka_unit_test(test_ready_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
