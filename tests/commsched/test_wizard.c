/* commsched: TIC and TAC on DAGs worked out by hand, and on random DAGs
 * against a from-scratch reference implementation of the definitions. */
#include "cs_util.h"

/* ---- hand-worked DAGs ---------------------------------------------------- */

/* Johnson-style pair (the paper's motivating case): the recv that unlocks
 * a big compute op over a short transfer goes first.
 *
 *   B (id 0): transfer 3 s, unlocks cB (2 s)    M_B = 3, P_B = 2
 *   A (id 1): transfer 1 s, unlocks cA (10 s)   M_A = 1, P_A = 10
 *
 * A before B iff min(P_B, M_A) < min(P_A, M_B): min(2, 1) = 1 < min(10, 3)
 * = 3, so A goes first although B has the smaller id.  Check by hand: A
 * first finishes at max(1 + 10, 4 + 2) = 13; B first at max(3 + 2,
 * 4 + 10) = 15. */
static void test_tac_big_compute_first(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op B = recv_op(g, "B", 0, 3.0);
  ar_commsched_op A = recv_op(g, "A", 0, 1.0);
  compute_op(g, "cB", 2.0, 1, &B);
  compute_op(g, "cA", 10.0, 1, &A);
  seal(g);
  ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0);
  assert_int_equal(prio_of(s, tid(g, A)), 0);
  assert_int_equal(prio_of(s, tid(g, B)), 1);
  assert_string_equal(ar_commsched_schedule_entry(s, 0)->name, "A");
  assert_true(ar_commsched_schedule_compute_s(s) >= 0.0);
  ar_commsched_schedule_destroy(s);
  /* TIC ignores times: both M+ are +inf, one shared priority. */
  s = schedule(g, AR_COMMSCHED_ORDER_TIC, 0, 0);
  assert_int_equal(prio_of(s, 0), 0);
  assert_int_equal(prio_of(s, 1), 0);
  ar_commsched_schedule_destroy(s);
  ar_commsched_graph_destroy(g);
}

/* M+ decides.  X (id 0), Y (id 1), Z (id 2), 1 s each; c1 needs {Y, Z},
 * c2 needs {X, Y, Z}; no op needs a single recv, so every P is 0 and
 * every comparison min(P_B, M_A) vs min(P_A, M_B) is 0 vs 0: a tie.
 *   step 0: M(c1) = 2, M(c2) = 3; M+ X = 3, Y = 2, Z = 2.  Y and Z tie on
 *           M+ 2, Y has the smaller id: Y (priority 0).  By id alone X
 *           would have gone.
 *   step 1: R = {X, Z}.  c1 now waits on Z only: P_Z = Time(c1) = 1.
 *           Z before X iff min(P_X, M_Z) = min(0, 1) = 0 < min(P_Z, M_X)
 *           = min(1, 1) = 1: yes, Z (priority 1).
 *   step 2: X (priority 2). */
static void test_tac_mplus_decides(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op X = recv_op(g, "X", 0, 1.0);
  ar_commsched_op Y = recv_op(g, "Y", 0, 1.0);
  ar_commsched_op Z = recv_op(g, "Z", 0, 1.0);
  ar_commsched_op yz[] = {Y, Z}, xyz[] = {X, Y, Z};
  compute_op(g, "c1", 1.0, 2, yz);
  compute_op(g, "c2", 1.0, 3, xyz);
  seal(g);
  ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0);
  assert_int_equal(prio_of(s, tid(g, Y)), 0);
  assert_int_equal(prio_of(s, tid(g, Z)), 1);
  assert_int_equal(prio_of(s, tid(g, X)), 2);
  ar_commsched_schedule_destroy(s);
  /* TIC: M+ X = 3, Y = Z = 2: Y and Z share priority 0, X gets 1; on one
   * channel the numbers are 0, 0, 2. */
  s = schedule(g, AR_COMMSCHED_ORDER_TIC, 0, 0);
  assert_int_equal(prio_of(s, tid(g, Y)), 0);
  assert_int_equal(prio_of(s, tid(g, Z)), 0);
  assert_int_equal(prio_of(s, tid(g, X)), 1);
  assert_int_equal(number_of(s, tid(g, X)), 2);
  ar_commsched_schedule_destroy(s);
  ar_commsched_graph_destroy(g);
}

/* A three-layer forward chain with recvs added last layer first, so the
 * id order is the reverse of the right one:
 *   w3 (id 0, 3 s), w2 (id 1, 1 s), w1 (id 2, 2 s)
 *   f1 needs w1 (4 s); f2 needs f1, w2 (2 s); f3 needs f2, w3 (1 s)
 *   deps: f1 {w1}, f2 {w1, w2}, f3 {w1, w2, w3}
 * TAC step 0: P w1 = 4 (f1), w2 = w3 = 0; M+ w1 = w2 = M(f2) = 3,
 *   w3 = M(f3) = 6.  Scan from w3: w2 vs w3: min(P_w3, M_w2) = 0 and
 *   min(P_w2, M_w3) = 0 tie, M+ 3 < 6, w2 leads.  w1 vs w2: min(P_w2,
 *   M_w1) = 0 < min(P_w1, M_w2) = 1, w1 leads: w1 (priority 0).
 * Step 1: f2 waits on w2 only: P_w2 = 2; M+ w2 = w3 = M(f3) = 4.  w2 vs
 *   w3: min(P_w3, M_w2) = 0 < min(P_w2, M_w3) = 2: w2 (priority 1).
 * Step 2: w3 (priority 2).
 * TIC (costs 1/0): M(f2) = 2, M(f3) = 3; M+ w1 = w2 = 2, w3 = 3: w1 and
 *   w2 share priority 0, w3 gets 1. */
static void test_chain(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op w3 = recv_op(g, "w3", 0, 3.0);
  ar_commsched_op w2 = recv_op(g, "w2", 0, 1.0);
  ar_commsched_op w1 = recv_op(g, "w1", 0, 2.0);
  ar_commsched_op f1 = compute_op(g, "f1", 4.0, 1, &w1);
  ar_commsched_op d2[] = {f1, w2};
  ar_commsched_op f2 = compute_op(g, "f2", 2.0, 2, d2);
  ar_commsched_op d3[] = {f2, w3};
  compute_op(g, "f3", 1.0, 2, d3);
  seal(g);
  ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0);
  assert_int_equal(prio_of(s, tid(g, w1)), 0);
  assert_int_equal(prio_of(s, tid(g, w2)), 1);
  assert_int_equal(prio_of(s, tid(g, w3)), 2);
  ar_commsched_schedule_destroy(s);
  s = schedule(g, AR_COMMSCHED_ORDER_TIC, 0, 0);
  assert_int_equal(prio_of(s, tid(g, w1)), 0);
  assert_int_equal(prio_of(s, tid(g, w2)), 0);
  assert_int_equal(prio_of(s, tid(g, w3)), 1);
  ar_commsched_schedule_destroy(s);
  ar_commsched_graph_destroy(g);
}

/* Ties.  TIC: w4 (id 0), w3 (id 1), w2 (id 2), w1 (id 3), w5 (id 4);
 * c1 needs {w1, w2}, c2 needs c1 and w3, c3 needs c2 and w4, c5 needs w5
 * alone.  M(c1) = 2, M(c2) = 3, M(c3) = 4; M+ w1 = w2 = 2, w3 = 3, w4 = 4,
 * w5 = +inf.  Priorities 0, 0, 1, 2, 3; numbers on one channel 0, 0, 2, 3,
 * 4.
 * TAC full tie: two identical recvs (2 s, each unlocking a 5 s op): every
 * comparison ties and M+ is +inf for both, so the smaller id goes first;
 * swapping the insertion order swaps the result. */
static void test_ties(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op w4 = recv_op(g, "w4", 0, 1.0);
  ar_commsched_op w3 = recv_op(g, "w3", 0, 1.0);
  ar_commsched_op w2 = recv_op(g, "w2", 0, 1.0);
  ar_commsched_op w1 = recv_op(g, "w1", 0, 1.0);
  ar_commsched_op w5 = recv_op(g, "w5", 0, 1.0);
  ar_commsched_op d1[] = {w1, w2};
  ar_commsched_op c1 = compute_op(g, "c1", 1.0, 2, d1);
  ar_commsched_op d2[] = {c1, w3};
  ar_commsched_op c2 = compute_op(g, "c2", 1.0, 2, d2);
  ar_commsched_op d3[] = {c2, w4};
  compute_op(g, "c3", 1.0, 2, d3);
  compute_op(g, "c5", 1.0, 1, &w5);
  seal(g);
  ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_TIC, 0, 0);
  assert_int_equal(prio_of(s, tid(g, w1)), 0);
  assert_int_equal(prio_of(s, tid(g, w2)), 0);
  assert_int_equal(prio_of(s, tid(g, w3)), 1);
  assert_int_equal(prio_of(s, tid(g, w4)), 2);
  assert_int_equal(prio_of(s, tid(g, w5)), 3);
  assert_int_equal(number_of(s, tid(g, w1)), 0);
  assert_int_equal(number_of(s, tid(g, w2)), 0);
  assert_int_equal(number_of(s, tid(g, w3)), 2);
  assert_int_equal(number_of(s, tid(g, w4)), 3);
  assert_int_equal(number_of(s, tid(g, w5)), 4);
  ar_commsched_schedule_destroy(s);
  ar_commsched_graph_destroy(g);

  for (int swap = 0; swap < 2; swap++) {
    g = new_graph();
    ar_commsched_op a = recv_op(g, swap ? "b" : "a", 0, 2.0);
    ar_commsched_op b = recv_op(g, swap ? "a" : "b", 0, 2.0);
    compute_op(g, "ca", 5.0, 1, &a);
    compute_op(g, "cb", 5.0, 1, &b);
    seal(g);
    s = schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0);
    assert_int_equal(prio_of(s, 0), 0);
    assert_int_equal(prio_of(s, 1), 1);
    assert_string_equal(ar_commsched_schedule_entry(s, 0)->name,
                        swap ? "b" : "a");
    ar_commsched_schedule_destroy(s);
    ar_commsched_graph_destroy(g);
  }
}

/* Two channels: priorities are global, numbers per channel. */
static void test_channels(void **state) {
  (void)state;
  ar_commsched_graph *g = new_graph();
  ar_commsched_op r[4];
  /* Chain f0 <- r0, f1 <- f0 + r1, ... : TAC goes r0, r1, r2, r3. */
  ar_commsched_op prev = AR_COMMSCHED_NONE;
  char name[8];
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof name, "r%d", i);
    r[i] = recv_op(g, name, (uint32_t)i % 2, 1.0);
  }
  for (int i = 0; i < 4; i++) {
    ar_commsched_op d[2] = {r[i], prev};
    snprintf(name, sizeof name, "f%d", i);
    prev = compute_op(g, name, 1.0, i ? 2 : 1, d);
  }
  seal(g);
  ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0);
  for (uint32_t i = 0; i < 4; i++) {
    assert_int_equal(prio_of(s, i), i);
    assert_int_equal(number_of(s, i), i / 2); /* 0, 0 on ch 0; 1, 1 on ch 1 */
  }
  ar_commsched_schedule_destroy(s);
  ar_commsched_graph_destroy(g);
}

/* ---- random DAGs against a reference -------------------------------------
 * The reference recomputes every property from scratch at every step from
 * explicit dependency sets, exactly as the definitions read. */

#define MAXR 48
#define MAXC 64
typedef struct {
  int nr, nc;
  int64_t rt[MAXR], ct[MAXC]; /* ns */
  unsigned char dep[MAXC][MAXR]; /* dep[c][r]: r upstream of compute c */
  uint32_t chan[MAXR];
} ref_graph;

static const int64_t INF = INT64_MAX;

static void ref_props(const ref_graph *G, const int *inR, int unit,
                      int64_t *P, int64_t *Mp) {
  for (int r = 0; r < G->nr; r++) {
    P[r] = 0;
    Mp[r] = INF;
  }
  for (int c = 0; c < G->nc; c++) {
    int cnt = 0, last = -1;
    int64_t M = 0;
    for (int r = 0; r < G->nr; r++)
      if (G->dep[c][r] && inR[r]) {
        cnt++;
        last = r;
        M += unit ? 1 : G->rt[r];
      }
    if (cnt == 1)
      P[last] += unit ? 0 : G->ct[c];
    if (cnt >= 2)
      for (int r = 0; r < G->nr; r++)
        if (G->dep[c][r] && inR[r] && M < Mp[r])
          Mp[r] = M;
  }
}

static void ref_tac(const ref_graph *G, uint32_t *prio) {
  int inR[MAXR];
  int64_t P[MAXR], Mp[MAXR];
  for (int r = 0; r < G->nr; r++)
    inR[r] = 1;
  for (int step = 0; step < G->nr; step++) {
    ref_props(G, inR, 0, P, Mp);
    int best = -1;
    for (int b = 0; b < G->nr; b++) {
      if (!inR[b])
        continue;
      if (best < 0) {
        best = b;
        continue;
      }
      int a = best;
      int64_t lhs = P[a] < G->rt[b] ? P[a] : G->rt[b];
      int64_t rhs = P[b] < G->rt[a] ? P[b] : G->rt[a];
      if (lhs < rhs || (lhs == rhs && Mp[b] < Mp[a]))
        best = b;
    }
    prio[best] = (uint32_t)step;
    inR[best] = 0;
  }
}

static void ref_tic(const ref_graph *G, uint32_t *prio) {
  int inR[MAXR];
  int64_t P[MAXR], Mp[MAXR];
  for (int r = 0; r < G->nr; r++)
    inR[r] = 1;
  ref_props(G, inR, 1, P, Mp);
  /* Dense rank of M+. */
  for (int r = 0; r < G->nr; r++) {
    uint32_t rank = 0;
    for (int q = 0; q < G->nr; q++) {
      int smaller_distinct = Mp[q] < Mp[r];
      for (int z = 0; z < q && smaller_distinct; z++)
        if (Mp[z] == Mp[q])
          smaller_distinct = 0;
      rank += (uint32_t)smaller_distinct;
    }
    prio[r] = rank;
  }
}

/* Builds a random graph into both the library and the reference. */
static ar_commsched_graph *random_graph(ar_rng *rng, ref_graph *G) {
  memset(G, 0, sizeof *G);
  ar_commsched_graph *g = new_graph();
  G->nr = 1 + (int)ar_rng_below(rng, MAXR);
  G->nc = 1 + (int)ar_rng_below(rng, MAXC);
  int nchan = 1 + (int)ar_rng_below(rng, 3);
  int coarse = (int)ar_rng_below(rng, 2); /* few distinct times: many ties */
  ar_commsched_op ops[MAXR + MAXC];
  for (int r = 0; r < G->nr; r++) {
    G->rt[r] = (int64_t)(1 + ar_rng_below(rng, coarse ? 3 : 1000)) * 1000;
    G->chan[r] = (uint32_t)ar_rng_below(rng, (uint64_t)nchan);
    ops[r] = recv_op(g, NULL, G->chan[r], (double)G->rt[r] * 1e-9);
  }
  for (int c = 0; c < G->nc; c++) {
    G->ct[c] = (int64_t)ar_rng_below(rng, coarse ? 3 : 1000) * 1000;
    ar_commsched_op op;
    ar_err err = AR_ERR_INIT;
    assert_int_equal(ar_commsched_graph_add_compute(
                         g, NULL, (double)G->ct[c] * 1e-9, &op, &err),
                     AR_OK);
    ops[G->nr + c] = op;
    /* Edges from earlier ops only, so the graph is acyclic. */
    int npred = (int)ar_rng_below(rng, 4);
    for (int k = 0; k < npred; k++) {
      int from = (int)ar_rng_below(rng, (uint64_t)(G->nr + c));
      assert_int_equal(ar_commsched_graph_add_edge(g, ops[from], op, &err),
                       AR_OK);
      if (from < G->nr)
        G->dep[c][from] = 1;
      else
        for (int r = 0; r < G->nr; r++)
          G->dep[c][r] |= G->dep[from - G->nr][r];
    }
  }
  seal(g);
  return g;
}

static void check_schedule(const ar_commsched_schedule *s,
                           const ref_graph *G, const uint32_t *want,
                           const char *what, uint64_t seed) {
  assert_int_equal(ar_commsched_schedule_count(s), (size_t)G->nr);
  int seen[MAXR] = {0};
  for (size_t i = 0; i < ar_commsched_schedule_count(s); i++) {
    const ar_commsched_entry *e = ar_commsched_schedule_entry(s, i);
    assert_true(e->transfer < (uint32_t)G->nr);
    seen[e->transfer]++;
    if (e->priority != want[e->transfer])
      fail_msg("%s seed %llu: transfer %u priority %u, reference %u", what,
               (unsigned long long)seed, e->transfer, e->priority,
               want[e->transfer]);
    assert_int_equal(e->channel, G->chan[e->transfer]);
    if (i > 0) /* entries in priority order */
      assert_true(ar_commsched_schedule_entry(s, i - 1)->priority <=
                  e->priority);
  }
  for (int r = 0; r < G->nr; r++)
    assert_int_equal(seen[r], 1); /* exactly one priority each */
  /* Numbers: non-decreasing in priority order within a channel, equal
   * exactly for equal priorities, and each one counts the channel's
   * transfers with a strictly smaller priority. */
  for (size_t i = 0; i < ar_commsched_schedule_count(s); i++) {
    const ar_commsched_entry *e = ar_commsched_schedule_entry(s, i);
    uint32_t better = 0;
    for (size_t j = 0; j < ar_commsched_schedule_count(s); j++) {
      const ar_commsched_entry *f = ar_commsched_schedule_entry(s, j);
      if (f->channel == e->channel && f->priority < e->priority)
        better++;
      if (j < i && f->channel == e->channel)
        assert_true(f->number <= e->number);
    }
    assert_int_equal(e->number, better);
  }
}

static void test_random_dags(void **state) {
  (void)state;
  static ref_graph G;
  uint32_t want[MAXR];
  for (uint64_t seed = 1; seed <= 400; seed++) {
    ar_rng rng;
    ar_rng_seed(&rng, seed, 77);
    ar_commsched_graph *g = random_graph(&rng, &G);
    ar_commsched_schedule *s = schedule(g, AR_COMMSCHED_ORDER_TAC, 0, 0);
    ref_tac(&G, want);
    check_schedule(s, &G, want, "tac", seed);
    /* TAC priorities are a permutation of 0..n-1. */
    int hit[MAXR] = {0};
    for (int r = 0; r < G.nr; r++)
      hit[prio_of(s, (uint32_t)r)]++;
    for (int r = 0; r < G.nr; r++)
      assert_int_equal(hit[r], 1);
    ar_commsched_schedule_destroy(s);

    s = schedule(g, AR_COMMSCHED_ORDER_TIC, 0, 0);
    ref_tic(&G, want);
    check_schedule(s, &G, want, "tic", seed);
    ar_commsched_schedule_destroy(s);

    s = schedule(g, AR_COMMSCHED_ORDER_RANDOM, seed, 3);
    for (int r = 0; r < G.nr; r++)
      want[r] = prio_of(s, (uint32_t)r);
    check_schedule(s, &G, want, "random", seed);
    memset(hit, 0, sizeof hit);
    for (int r = 0; r < G.nr; r++)
      hit[want[r]]++;
    for (int r = 0; r < G.nr; r++)
      assert_int_equal(hit[r], 1);
    ar_commsched_schedule_destroy(s);
    ar_commsched_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tac_big_compute_first),
      cmocka_unit_test(test_tac_mplus_decides),
      cmocka_unit_test(test_chain),
      cmocka_unit_test(test_ties),
      cmocka_unit_test(test_channels),
      cmocka_unit_test(test_random_dags),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
