/* commsched: the discrete-event simulator of one parameter-server
 * iteration. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "cs_model.h"
#include "cs_util.h"

static char path[256];

static const ar_commsched_order orders[] = {
    AR_COMMSCHED_ORDER_NONE, AR_COMMSCHED_ORDER_RANDOM, AR_COMMSCHED_ORDER_TIC,
    AR_COMMSCHED_ORDER_TAC};

static ar_commsched_sim_result run(const ar_commsched_graph *g,
                                   const ar_commsched_schedule *s,
                                   const ar_commsched_sim_opts *o) {
  ar_commsched_sim_result r;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_simulate(g, s, o, &r, &err) != AR_OK)
    fail_msg("simulate: %s", err.msg);
  return r;
}

/* A random DAG: recvs on channels < servers with 1 KB .. 1 MB, compute ops
 * each needing up to three earlier ops.  Compute times are multiples of
 * 1/1024 s below 1/16 s, so every sum of them is exact in a double. */
static ar_commsched_graph *random_dag(uint64_t seed, uint32_t servers,
                                      double *total_compute) {
  ar_rng r;
  ar_rng_seed(&r, seed, 3);
  ar_commsched_graph *g = new_graph();
  ar_err err = AR_ERR_INIT;
  size_t nrecv = 1 + (size_t)ar_rng_below(&r, 12);
  size_t ncomp = 1 + (size_t)ar_rng_below(&r, 30);
  ar_commsched_op ops[64];
  size_t n = 0;
  *total_compute = 0.0;
  for (size_t i = 0; i < nrecv; i++) {
    size_t bytes = 1000 + (size_t)ar_rng_below(&r, 1000000);
    assert_int_equal(ar_commsched_graph_add_recv(
                         g, NULL, bytes, (uint32_t)ar_rng_below(&r, servers),
                         0.0, &ops[n++], &err),
                     AR_OK);
  }
  for (size_t i = 0; i < ncomp; i++) {
    double t = (double)ar_rng_below(&r, 64) / 1024.0;
    ar_commsched_op c;
    assert_int_equal(ar_commsched_graph_add_compute(g, NULL, t, &c, &err),
                     AR_OK);
    size_t k = ar_rng_below(&r, 4);
    for (size_t j = 0; j < k; j++)
      assert_int_equal(
          ar_commsched_graph_add_edge(g, ops[ar_rng_below(&r, n)], c, &err),
          AR_OK);
    ops[n++] = c;
    *total_compute += t;
  }
  seal(g);
  return g;
}

/* With a free network every parameter is there at time 0 and gradients
 * cost nothing, so a worker computes without a gap: the makespan is the
 * sum of the compute times plus the update, exactly, with the update after
 * the barrier; with early updates at most that and at least the compute,
 * and for some graphs less (a gradient ready before the last op). */
static void test_infinite_bandwidth(void **state) {
  (void)state;
  int earlier = 0;
  for (uint64_t seed = 0; seed < 200; seed++) {
    ar_rng r;
    ar_rng_seed(&r, seed, 4);
    ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
    o.workers = 1 + (uint32_t)ar_rng_below(&r, 6);
    o.servers = 1 + (uint32_t)ar_rng_below(&r, 3);
    o.bandwidth_Bps = INFINITY;
    o.update_s = (double)ar_rng_below(&r, 16) / 1024.0;
    double total;
    ar_commsched_graph *g = random_dag(seed, o.servers, &total);
    for (int k = 0; k < 4; k++) {
      ar_commsched_schedule *s = schedule(g, orders[k], seed, 0);
      o.late_update = 1;
      ar_commsched_sim_result res = run(g, s, &o);
      assert_true(res.makespan_s == total + o.update_s);
      assert_true(res.compute_done_s == total);
      assert_true(res.metrics.comm_busy_s == 0.0);
      assert_true(res.straggler_s == 0.0);
      o.late_update = 0;
      ar_commsched_sim_result early = run(g, s, &o);
      assert_true(early.compute_done_s == total);
      assert_true(early.makespan_s >= total && early.makespan_s <= total + o.update_s);
      earlier += early.makespan_s < res.makespan_s;
      ar_commsched_schedule_destroy(s);
    }
    ar_commsched_graph_destroy(g);
  }
  assert_true(earlier > 100);
}

/* The hand graph below with a 4 s update (w1 and w2 the same bytes: 2 s
 * each) and w1 first: the gradient of w2 is in at 8 and its update runs
 * 8-10, w1's is in at 10, 10-12: makespan 12 where the whole update after
 * the barrier ends at 14.  w2 first: gradients in at 9 and 11, updates
 * 9-11 and 11-13, against 15. */
static ar_commsched_graph *hand_graph(void);

static void test_hand_early(void **state) {
  (void)state;
  ar_commsched_graph *g = hand_graph();
  ar_err err = AR_ERR_INIT;
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  o.bandwidth_Bps = 1000;
  o.update_s = 4.0;
  ar_commsched_sim_result r = run(g, NULL, &o); /* none: w1 first */
  assert_true(r.makespan_s == 12.0 && r.barrier_s == 10.0);
  assert_true(r.metrics.comp_busy_s == 4.0 + 4.0); /* the ops, the updates [8, 12] */
  o.late_update = 1;
  assert_true(run(g, NULL, &o).makespan_s == 14.0);
  snprintf(path, sizeof path, "/tmp/test_commsched_sim_e%d.txt", (int)getpid());
  write_file(path, "order random\n0 w1 0 1\n1 w2 0 0\n");
  ar_commsched_schedule *bad = NULL;
  assert_int_equal(ar_commsched_schedule_read(path, &bad, &err), AR_OK);
  unlink(path);
  assert_true(run(g, bad, &o).makespan_s == 15.0);
  o.late_update = 0;
  assert_true(run(g, bad, &o).makespan_s == 13.0);
  ar_commsched_schedule_destroy(bad);
  ar_commsched_graph_destroy(g);
}

/* The hand graph with a 4 s update, iterations overlapping.  w2 first:
 * each iteration alone takes 13 s (w2's update 9-11, w1's 11-13), and the
 * next one's w2 leaves at 11, w1 at 13: 2-4 s after the next one's first
 * offer, just as in the first iteration, so the next one ends 11 + 13 =
 * 24 and an iteration takes 11 s.  None (w1 first, its update last): the
 * next one cannot begin before 12 (the gate holds w2 behind w1), so 12 s
 * as alone. */
static void test_hand_overlap(void **state) {
  (void)state;
  ar_commsched_graph *g = hand_graph();
  ar_err err = AR_ERR_INIT;
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  o.bandwidth_Bps = 1000;
  o.update_s = 4.0;
  o.overlap = 1;
  ar_commsched_sim_result r = run(g, NULL, &o);
  assert_true(r.iteration_s == 12.0 && r.makespan_s == 14.0);
  snprintf(path, sizeof path, "/tmp/test_commsched_sim_o%d.txt", (int)getpid());
  write_file(path, "order random\n0 w1 0 1\n1 w2 0 0\n");
  ar_commsched_schedule *w2first = NULL;
  assert_int_equal(ar_commsched_schedule_read(path, &w2first, &err), AR_OK);
  unlink(path);
  r = run(g, w2first, &o);
  assert_true(r.iteration_s == 11.0 && r.makespan_s == 13.0);
  o.overlap = 0;
  r = run(g, w2first, &o);
  assert_true(r.iteration_s == 13.0 && r.makespan_s == 13.0);
  ar_commsched_schedule_destroy(w2first);
  ar_commsched_graph_destroy(g);
}

/* U_min <= makespan <= U_max on hundreds of random DAGs, every order, with
 * random cluster shapes, bandwidths, latencies and update times, with and
 * without overlapping iterations (not slower than one alone). */
static void test_bounds_random(void **state) {
  (void)state;
  int defined = 0, slow = 0;
  for (uint64_t seed = 0; seed < 400; seed++) {
    ar_rng r;
    ar_rng_seed(&r, seed, 5);
    ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
    o.workers = 1 + (uint32_t)ar_rng_below(&r, 8);
    o.servers = 1 + (uint32_t)ar_rng_below(&r, 3);
    o.bandwidth_Bps = 1e6 * (1 + (double)ar_rng_below(&r, 200));
    o.latency_s = 1e-3 * ar_rng_uniform(&r);
    o.update_s = 1e-2 * ar_rng_uniform(&r);
    double total;
    ar_commsched_graph *g = random_dag(1000 + seed, o.servers, &total);
    for (int k = 0; k < 12; k++) {
      ar_commsched_schedule *s = schedule(g, orders[k % 4], seed, 1);
      o.late_update = k >= 4 && k < 8;
      o.overlap = k >= 8;
      ar_commsched_sim_result res = run(g, s, &o);
      const ar_commsched_metrics *m = &res.metrics;
      double tol = 1e-12 * res.makespan_s;
      assert_true(m->u_min_s <= res.makespan_s + tol);
      assert_true(res.makespan_s <= m->u_max_s + tol || o.overlap); /* see commsched.h */
      assert_true(m->comp_busy_s >= total + (o.late_update ? o.update_s : 0.0) - tol);
      if (!o.late_update && !o.overlap) { /* early updates never end later than after the barrier */
        o.late_update = 1;
        assert_true(res.makespan_s <= run(g, s, &o).makespan_s + tol);
        o.late_update = 0;
      }
      if (o.overlap) { /* overlapping iterations take no longer with one server
                          * (with several, the list schedule's anomalies
                          * can put one a little behind, rarely) */
        o.overlap = 0;
        double alone = run(g, s, &o).makespan_s;
        o.overlap = 1;
        bool slower = res.iteration_s > alone + 1e-12 * alone;
        assert_true(!slower || o.servers > 1);
        slow += slower;
      } else {
        assert_true(res.iteration_s == res.makespan_s);
      }
      assert_true(res.params_done_s <= res.barrier_s);
      assert_true(res.compute_done_s <= res.barrier_s);
      assert_true(res.messages ==
                  2ull * o.workers * ar_commsched_graph_transfer_count(g));
      defined += m->efficiency_defined;
      ar_commsched_schedule_destroy(s);
    }
    ar_commsched_graph_destroy(g);
  }
  assert_true(defined > 3000); /* the bounds were not vacuous */
  assert_true(slow <= 16);      /* 1% of the 1600 runs with overlap */
}

/* Two layers, one worker, one server, 1000 bytes/s, no latency or update:
 *
 *   w1, w2: 2000 bytes each (2 s per message either way)
 *   f1 <- w1;  f2 <- f1, w2;  b2 <- f2, w2;  b1 <- b2, w1  (1 s each)
 *
 * w1 first: w1 arrives 2, w2 4; f1 2-3, f2 4-5, b2 5-6, b1 6-7; gradient
 *   w2 ready 6 (b2) goes 6-8, w1 ready 7 (b1) waits for the port, 8-10.
 *   Makespan 10; N = |[0,4] u [6,10]| = 8, C = |[2,3] u [4,7]| = 4,
 *   U_min 8, U_max 12, E = (12 - 10) / 4 = 0.5.
 * w2 first: w2 arrives 2, w1 4; f1 4-5, f2 5-6, b2 6-7, b1 7-8; gradient
 *   w2 7-9, w1 ready 8, goes 9-11.  Makespan 11; N = |[0,4] u [7,11]| = 8,
 *   C = 4, E = (12 - 11) / 4 = 0.25.
 *
 * TAC puts w1 first (P(w1) = 1 since f1 needs w1 alone, P(w2) = 0, so
 * min(P(w2), M(w1)) = 0 < min(P(w1), M(w2)) = 1). */
static ar_commsched_graph *hand_graph(void) {
  ar_commsched_graph *g = new_graph();
  ar_err err = AR_ERR_INIT;
  ar_commsched_op w1, w2;
  assert_int_equal(ar_commsched_graph_add_recv(g, "w1", 2000, 0, 2, &w1, &err),
                   AR_OK);
  assert_int_equal(ar_commsched_graph_add_recv(g, "w2", 2000, 0, 2, &w2, &err),
                   AR_OK);
  ar_commsched_op d[2] = {w1, 0};
  ar_commsched_op f1 = compute_op(g, "f1", 1, 1, d);
  d[0] = f1, d[1] = w2;
  ar_commsched_op f2 = compute_op(g, "f2", 1, 2, d);
  d[0] = f2;
  ar_commsched_op b2 = compute_op(g, "b2", 1, 2, d);
  d[0] = b2, d[1] = w1;
  compute_op(g, "b1", 1, 2, d);
  seal(g);
  return g;
}

static void test_hand_order(void **state) {
  (void)state;
  ar_commsched_graph *g = hand_graph();
  ar_err err = AR_ERR_INIT;
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  o.bandwidth_Bps = 1000;

  ar_commsched_schedule *tac = schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0);
  assert_true(prio_of(tac, 0) < prio_of(tac, 1));
  ar_commsched_sim_result rt = run(g, tac, &o);
  assert_true(rt.makespan_s == 10.0);
  assert_true(rt.metrics.comm_busy_s == 8.0 && rt.metrics.comp_busy_s == 4.0);
  assert_true(fabs(rt.metrics.efficiency - 0.5) < 1e-12);

  /* The bad order, from a file. */
  snprintf(path, sizeof path, "/tmp/test_commsched_sim_%d.txt", (int)getpid());
  write_file(path, "order random\n0 w1 0 1\n1 w2 0 0\n");
  ar_commsched_schedule *bad = NULL;
  assert_int_equal(ar_commsched_schedule_read(path, &bad, &err), AR_OK);
  unlink(path);
  ar_commsched_sim_result rb = run(g, bad, &o);
  assert_true(rb.makespan_s == 11.0);
  assert_true(fabs(rb.metrics.efficiency - 0.25) < 1e-12);
  assert_true(rt.makespan_s < rb.makespan_s);

  /* Random orders: both appear over 50 iterations; TAC and TIC are never
   * worse than the worst of them. */
  double worst = 0.0, best = INFINITY;
  for (uint64_t it = 0; it < 50; it++) {
    ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 9, it);
    ar_commsched_sim_result rr = run(g, s, &o);
    worst = rr.makespan_s > worst ? rr.makespan_s : worst;
    best = rr.makespan_s < best ? rr.makespan_s : best;
    ar_commsched_schedule_destroy(s);
  }
  assert_true(worst == 11.0 && best == 10.0);
  ar_commsched_schedule *tic = schedule(g, AR_COMMSCHED_ORDER_TIC, 0, 0);
  assert_true(run(g, tic, &o).makespan_s <= worst + 1e-9);
  assert_true(rt.makespan_s <= worst + 1e-9);
  /* none: transfer-id order, w1 first. */
  assert_true(run(g, NULL, &o).makespan_s == 10.0);
  ar_commsched_schedule_destroy(tic);
  ar_commsched_schedule_destroy(bad);
  ar_commsched_schedule_destroy(tac);
  ar_commsched_graph_destroy(g);
}

/* One server's out port, two workers: an op's inputs go to one worker
 * together before the next worker's turn.  a and b (1000 bytes, 1 s each
 * at 1000 B/s) feed fa, c feeds fb (after fa), each op 1 s.  The port
 * sends w0:a w0:b [0, 2], w1:a w1:b [2, 4], w0:c [4, 5], w1:c [5, 6]:
 * worker 0 runs fa 2-3 and fb 5-6, worker 1 fa 4-5 and fb 6-7.  Taken
 * one transfer each (w0:a, w1:a, w0:b, ...) worker 0 would have b only at
 * 3, fa 3-4, as late as worker 1 allows.  The gradients (ready when fa,
 * resp. fb, is done) then share the server's in port: w0's of a and b
 * 3-5, w1's 5-7, w0's of c 7-8, w1's 8-9, the makespan 9 (one each: 10).
 * With fa needing a and c and fb needing b, the order a b c groups
 * nothing: one each, as before. */
static void test_hand_port_groups(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_err err = AR_ERR_INIT;
  ar_commsched_op a, b, c;
  assert_int_equal(ar_commsched_graph_add_recv(g, "a", 1000, 0, 1, &a, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_recv(g, "b", 1000, 0, 1, &b, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_recv(g, "c", 1000, 0, 1, &c, &err), AR_OK);
  ar_commsched_op d[2] = {a, b};
  ar_commsched_op fa = compute_op(g, "fa", 1, 2, d);
  d[0] = fa, d[1] = c;
  ar_commsched_op fb = compute_op(g, "fb", 1, 2, d);
  seal(g);
  assert_true(ar_commsched_graph_first_use(g, 0) == fa);
  assert_true(ar_commsched_graph_first_use(g, 1) == fa);
  assert_true(ar_commsched_graph_first_use(g, 2) == fb);
  assert_true(ar_commsched_graph_first_use(g, 3) == AR_COMMSCHED_NONE);
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  o.bandwidth_Bps = 1000;
  o.workers = 2;
  for (size_t k = 0; k < 2; k++) {
    ar_commsched_schedule *s = k ? schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0) : NULL;
    ar_commsched_sim_result r = run(g, s, &o);
    assert_true(r.params_done_s == 6.0);
    assert_true(r.compute_done_s == 7.0);
    assert_true(r.makespan_s == 9.0);
    ar_commsched_schedule_destroy(s);
  }
  ar_commsched_graph_destroy(g);

  g = new_graph();
  assert_int_equal(ar_commsched_graph_add_recv(g, "a", 1000, 0, 1, &a, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_recv(g, "b", 1000, 0, 1, &b, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_recv(g, "c", 1000, 0, 1, &c, &err), AR_OK);
  d[0] = a, d[1] = c;
  fa = compute_op(g, "fa", 1, 2, d);
  d[0] = fa, d[1] = b;
  compute_op(g, "fb", 1, 2, d);
  seal(g);
  /* w0:a w1:a w0:b w1:b w0:c w1:c: fa at 5-6 and 6-7, fb 6-7 and 7-8. */
  ar_commsched_sim_result r = run(g, NULL, &o);
  assert_true(r.params_done_s == 6.0 && r.compute_done_s == 8.0);
  ar_commsched_graph_destroy(g);
}

/* The 20-layer model at 10 Gbit/s with two workers, where communication
 * about equals computation (bench_simulate.c): TAC and TIC beat the mean
 * of 20 random orders and are no worse than the worst one. */
static void test_model_orders(void **state) {
  (void)state;
  ar_commsched_graph *g = cs_model(20, 1, 0.5e-9, 1);
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  o.workers = 2;
  o.bandwidth_Bps = 1.25e9;
  o.latency_s = 50e-6;
  o.update_s = 1e-3;
  double mean = 0.0, worst = 0.0;
  for (uint64_t it = 0; it < 20; it++) {
    ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 1, it);
    double m = run(g, s, &o).makespan_s;
    mean += m / 20;
    worst = m > worst ? m : worst;
    ar_commsched_schedule_destroy(s);
  }
  for (int k = 2; k < 4; k++) {
    ar_commsched_schedule *s = schedule(g, orders[k], 0, 0);
    ar_commsched_sim_result r = run(g, s, &o);
    assert_true(r.makespan_s < mean);
    assert_true(r.makespan_s <= worst * (1 + 1e-9));
    assert_true(r.metrics.efficiency > 0.9);
    ar_commsched_schedule_destroy(s);
  }
  ar_commsched_graph_destroy(g);
}

/* More workers sharing one server's link: strictly more communication
 * time, and never a shorter iteration. */
static void test_monotonic_workers(void **state) {
  (void)state;
  ar_commsched_graph *g = cs_model(20, 1, 0.5e-9, 1);
  assert_non_null(g);
  for (int k = 0; k < 4; k++) {
    ar_commsched_schedule *s = schedule(g, orders[k], 1, 0);
    double prev_n = 0.0, prev_m = 0.0;
    for (uint32_t w = 1; w <= 64; w *= 2) {
      ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
      o.workers = w;
      o.bandwidth_Bps = 1.25e9;
      o.latency_s = 50e-6;
      ar_commsched_sim_result r = run(g, s, &o);
      assert_true(r.metrics.comm_busy_s > prev_n);
      assert_true(r.makespan_s >= prev_m);
      prev_n = r.metrics.comm_busy_s;
      prev_m = r.makespan_s;
    }
    ar_commsched_schedule_destroy(s);
  }
  ar_commsched_graph_destroy(g);
}

/* The same inputs give the same result bit for bit; a random order's
 * result depends only on its seed and iteration. */
static void test_deterministic(void **state) {
  (void)state;
  ar_commsched_graph *g = cs_model(12, 2, 1e-9, 5);
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  o.workers = 5;
  o.servers = 2;
  o.latency_s = 1e-5;
  o.update_s = 1e-3;
  int differs = 0;
  for (uint64_t it = 0; it < 10; it++) {
    ar_commsched_schedule *a = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 3, it);
    ar_commsched_schedule *b = schedule(g, AR_COMMSCHED_ORDER_RANDOM, 3, it);
    ar_commsched_sim_result ra = run(g, a, &o), rb = run(g, b, &o),
                            rc = run(g, a, &o);
    assert_memory_equal(&ra, &rb, sizeof ra);
    assert_memory_equal(&ra, &rc, sizeof ra);
    ar_commsched_schedule *c =
        schedule(g, AR_COMMSCHED_ORDER_RANDOM, 3, it + 100);
    differs += run(g, c, &o).makespan_s != ra.makespan_s;
    ar_commsched_schedule_destroy(c);
    ar_commsched_schedule_destroy(b);
    ar_commsched_schedule_destroy(a);
  }
  assert_true(differs > 0);
  ar_commsched_graph_destroy(g);
}

static void test_errors(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  recv_op(g, "a", 1, 0.0);
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  ar_commsched_sim_result r;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_simulate(g, NULL, &o, &r, &err), AR_STATE);
  seal(g);
  assert_int_equal(ar_commsched_simulate(g, NULL, &o, &r, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "channel 1"));
  o.servers = 2;
  assert_int_equal(ar_commsched_simulate(g, NULL, &o, &r, &err), AR_OK);
  o.workers = 0;
  assert_int_equal(ar_commsched_simulate(g, NULL, &o, &r, &err), AR_INVALID);
  o.workers = 1;
  o.bandwidth_Bps = 0;
  assert_int_equal(ar_commsched_simulate(g, NULL, &o, &r, &err), AR_INVALID);
  o.bandwidth_Bps = 1e9;
  o.latency_s = NAN;
  assert_int_equal(ar_commsched_simulate(g, NULL, &o, &r, &err), AR_INVALID);
  o.latency_s = 0;
  /* A schedule of another graph. */
  ar_commsched_graph *h = new_graph();
  recv_op(h, "zz", 0, 0.0);
  seal(h);
  ar_commsched_schedule *s = schedule(h, AR_COMMSCHED_ORDER_TAC, 0, 0);
  assert_int_equal(ar_commsched_simulate(g, s, &o, &r, &err), AR_INVALID);
  ar_commsched_schedule_destroy(s);
  ar_commsched_graph_destroy(h);
  ar_commsched_graph_destroy(g);

  /* Out of memory at every allocation: AR_NOMEM, nothing leaked (the
   * sanitizer build checks), then success. */
  g = cs_model(6, 2, 1e-9, 2);
  s = schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0);
  o = (ar_commsched_sim_opts)AR_COMMSCHED_SIM_OPTS_INIT;
  o.workers = 3;
  o.servers = 2;
  ar_status st = AR_NOMEM;
  int fails = 0;
  for (long k = 0; st == AR_NOMEM && k < 1000; k++) {
    ar_alloc_fail_after(k);
    st = ar_commsched_simulate(g, s, &o, &r, &err);
    ar_alloc_fail_after(-1);
    fails += st == AR_NOMEM;
  }
  assert_int_equal(st, AR_OK);
  assert_true(fails > 10);
  ar_commsched_schedule_destroy(s);
  ar_commsched_graph_destroy(g);
}

/* The calibration terms, worked by hand on a two-layer chain: recv a, b
 * (1024 B each, 1024 B/s, so a arrives at 1 s and b at 2 s), fwd1 (2 s)
 * needs a, fwd2 (1 s) needs b and fwd1.  Taking a message in costs its
 * receiver 1024 x 2^-12 = 0.25 s of copy, and 0.25 s (message_s) more
 * when it was waiting for it (asleep between polls), not busy.
 *   ideal:  fwd1 1-3, fwd2 3-4; gradient a ready 3, at the server 4; b
 *           ready 4, at 5: makespan 5.
 *   costs:  a comes to a waiting worker: 1-1.5; fwd1 1.5-3.5 (b arrived
 *           at 2 but waits for the op to end: the worker notices between
 *           ops, awake: the copy only), b 3.5-3.75, fwd2 3.75-4.75;
 *           gradient a 3.5 -> 4.5 + 0.5 = 5 (the server was waiting),
 *           b 4.75 -> 5.75 + 0.5 = 6.25: makespan 6.25.
 *   scale 2 as well: a 1-1.5, fwd1 1.5-5.5, b 5.5-5.75, fwd2 5.75-7.75;
 *           gradient a 5.5 -> 7, b 7.75 -> 9.25: makespan 9.25. */
static void test_calibration_terms(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_err err = AR_ERR_INIT;
  ar_commsched_op a, b, f1, f2;
  assert_int_equal(ar_commsched_graph_add_recv(g, "a", 1024, 0, 0.0, &a, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_recv(g, "b", 1024, 0, 0.0, &b, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_compute(g, "f1", 2.0, &f1, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_compute(g, "f2", 1.0, &f2, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_edge(g, a, f1, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_edge(g, b, f2, &err), AR_OK);
  assert_int_equal(ar_commsched_graph_add_edge(g, f1, f2, &err), AR_OK);
  seal(g);
  ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
  o.bandwidth_Bps = 1024.0;
  ar_commsched_sim_result r = run(g, NULL, &o);
  assert_true(r.makespan_s == 5.0);
  assert_true(r.compute_done_s == 4.0);
  o.message_s = 0.25;
  o.byte_s = 1.0 / 4096.0;
  r = run(g, NULL, &o);
  assert_true(r.params_done_s == 2.0); /* the link's arrival, not the copy */
  assert_true(r.compute_done_s == 4.75);
  assert_true(r.barrier_s == 6.25);
  assert_true(r.makespan_s == 6.25);
  assert_true(r.metrics.comp_busy_s == 3.0); /* copies are not compute */
  o.compute_scale = 2.0;
  r = run(g, NULL, &o);
  assert_true(r.compute_done_s == 7.75);
  assert_true(r.makespan_s == 9.25);
  assert_true(r.metrics.comp_busy_s == 6.0);
  /* Bad values are refused with a message. */
  o.compute_scale = 0.0;
  assert_int_equal(ar_commsched_simulate(g, NULL, &o, &r, &err), AR_INVALID);
  assert_non_null(strstr(err.msg, "compute scale"));
  o.compute_scale = 1.0;
  o.message_s = -1.0;
  assert_int_equal(ar_commsched_simulate(g, NULL, &o, &r, &err), AR_INVALID);
  ar_commsched_graph_destroy(g);
}

/* With the calibration terms on, the bounds still hold on random DAGs
 * (costs may shorten an iteration: list schedules have Graham's
 * anomalies, so no monotonicity is asserted), and zero costs give the
 * ideal model's result bit for bit. */
static void test_calibration_bounds(void **state) {
  (void)state;
  for (uint64_t seed = 0; seed < 300; seed++) {
    ar_rng r;
    ar_rng_seed(&r, seed, 9);
    ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
    o.workers = 1 + (uint32_t)ar_rng_below(&r, 6);
    o.servers = 1 + (uint32_t)ar_rng_below(&r, 3);
    o.bandwidth_Bps = 1e6 * (1 + (double)ar_rng_below(&r, 200));
    o.latency_s = 1e-3 * ar_rng_uniform(&r);
    o.update_s = 1e-2 * ar_rng_uniform(&r);
    double total;
    ar_commsched_graph *g = random_dag(5000 + seed, o.servers, &total);
    for (int k = 0; k < 4; k++) {
      ar_commsched_schedule *s = schedule(g, orders[k], seed, 1);
      ar_commsched_sim_result ideal = run(g, s, &o);
      ar_commsched_sim_opts c = o;
      c.message_s = 1e-3 * ar_rng_uniform(&r);
      c.byte_s = 1e-8 * ar_rng_uniform(&r);
      c.compute_scale = 1.0 + ar_rng_uniform(&r);
      ar_commsched_sim_result res = run(g, s, &c);
      const ar_commsched_metrics *m = &res.metrics;
      double tol = 1e-12 * res.makespan_s;
      assert_true(m->u_min_s <= res.makespan_s + tol);
      assert_true(res.makespan_s <= m->u_max_s + tol);
      assert_true(m->comp_busy_s >=
                  total * c.compute_scale - 1e-9 * (1.0 + m->comp_busy_s));
      c.late_update = 1;
      ar_commsched_sim_result late = run(g, s, &c);
      assert_true(late.metrics.comp_busy_s >= total * c.compute_scale + c.update_s -
                                                   1e-9 * (1.0 + late.metrics.comp_busy_s));
      assert_true(late.makespan_s <= late.metrics.u_max_s + tol);
      assert_true(res.makespan_s <= late.makespan_s + tol);
      c.late_update = 0;
      assert_true(res.params_done_s == ideal.params_done_s);
      c.message_s = c.byte_s = 0.0;
      c.compute_scale = 1.0;
      ar_commsched_sim_result same = run(g, s, &c);
      assert_true(same.makespan_s == ideal.makespan_s);
      assert_true(same.metrics.efficiency_raw == ideal.metrics.efficiency_raw ||
                  (isnan(same.metrics.efficiency_raw) && isnan(ideal.metrics.efficiency_raw)));
      ar_commsched_schedule_destroy(s);
    }
    ar_commsched_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_infinite_bandwidth),
      cmocka_unit_test(test_bounds_random),
      cmocka_unit_test(test_hand_order),
      cmocka_unit_test(test_hand_early),
      cmocka_unit_test(test_hand_overlap),
      cmocka_unit_test(test_hand_port_groups),
      cmocka_unit_test(test_model_orders),
      cmocka_unit_test(test_monotonic_workers),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_calibration_terms),
      cmocka_unit_test(test_calibration_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
