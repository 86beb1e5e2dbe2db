/* lsh tables: FIFO and reservoir policies, lazy memory, parallel builds
 * independent of the thread count, re-insertion, retrieval of planted
 * neighbours.  ACCELRT_LSH_AMAZON=1 also measures the Amazon-670K output
 * layer shape (670,091 x 128, DWTA K=6 L=50, bucket 128). */
#include <omp.h>
#include <stdio.h>

#include "lsh_util.h"

/* A one-table family whose bucket 0.. we fill by hand. */
static ar_lsh_hash *hand_hash(uint32_t L) {
  return mkhash(AR_LSH_SRP, 4, 1, L, 8, 1);
}

static int contains(const uint32_t *ids, uint32_t n, uint32_t id) {
  for (uint32_t i = 0; i < n; i++)
    if (ids[i] == id)
      return 1;
  return 0;
}

static void test_fifo_keeps_recent(void **st) {
  (void)st;
  ar_lsh_hash *h = hand_hash(1);
  ar_lsh_tables *t = mktables(h, 1000, 128, AR_LSH_FIFO, 0, 1);
  uint32_t b = 3, n;
  for (uint32_t id = 0; id < 1000; id++)
    assert_int_equal(ar_lsh_tables_insert(t, id, &b), AR_OK);
  const uint32_t *ids = ar_lsh_tables_bucket(t, 0, 3, &n);
  assert_int_equal(n, 128);
  for (uint32_t id = 872; id < 1000; id++)
    assert_true(contains(ids, n, id));
  ar_lsh_tables_stats s;
  ar_lsh_tables_stats_get(t, &s);
  assert_int_equal(s.items, 128);
  assert_int_equal(s.nonempty_buckets, 1);
  ar_lsh_tables_bucket(t, 0, 4, &n);
  assert_int_equal(n, 0);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
}

/* Algorithm R: after 100 insertions into a bucket of 10, each id is kept
 * with probability 1/10.  2000 buckets, counts ~ Binomial(2000, 0.1):
 * mean 200, sd 13.4; a FIFO would keep only ids 90..99.  Bucket b takes
 * ids 100 b + j (a neuron sits in one bucket of a table), counted as j. */
static void test_reservoir_uniform(void **st) {
  (void)st;
  ar_lsh_hash *h = hand_hash(1);
  ar_lsh_tables *t = mktables(h, 25000, 10, AR_LSH_RESERVOIR, 42, 1);
  assert_true(ar_lsh_hash_buckets(h) == 256);
  int count[100] = {0};
  for (int round = 0; round < 8; round++) {
    ar_lsh_tables_clear(t);
    for (uint32_t b = 0; b < 250; b++)
      for (uint32_t id = 0; id < 100; id++)
        assert_int_equal(ar_lsh_tables_insert(t, 100 * b + id, &b), AR_OK);
    for (uint32_t b = 0; b < 250; b++) {
      uint32_t n;
      const uint32_t *ids = ar_lsh_tables_bucket(t, 0, b, &n);
      assert_int_equal(n, 10);
      for (uint32_t i = 0; i < n; i++)
        count[ids[i] % 100]++;
    }
  }
  int early = 0, late = 0;
  for (int id = 0; id < 100; id++) {
    if (count[id] < 140 || count[id] > 260)
      fail_msg("id %d kept %d times of 2000 (expected ~200)", id, count[id]);
    *(id < 50 ? &early : &late) += count[id];
  }
  assert_true(abs(early - late) < 500); /* sd of the difference ~ 130 */
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
}

static float *randmat(uint32_t n, uint32_t dim, uint64_t seed, double zeros) {
  float *w = malloc((size_t)n * dim * sizeof *w);
  ar_rng r;
  ar_rng_seed(&r, seed, 77);
  for (uint32_t i = 0; i < n; i++)
    randrow(&r, w + (size_t)i * dim, dim, zeros);
  return w;
}

/* Memory is fixed at create and known before (ar_lsh_tables_bytes); what
 * the blocks use follows the items stored, not the bucket count. */
static void test_lazy_memory(void **st) {
  (void)st;
  ar_lsh_hash *h = mkhash(AR_LSH_DWTA, 32, 6, 50, 0, 3);
  ar_lsh_tables *t = mktables(h, 10000, 128, AR_LSH_FIFO, 0, 2);
  ar_lsh_tables_stats s;
  ar_lsh_tables_stats_get(t, &s);
  assert_int_equal(s.buckets_per_table, 1u << 18);
  assert_int_equal(s.pool_used_bytes, 0);
  ar_lsh_tables_opts o = AR_LSH_TABLES_OPTS_INIT;
  o.neurons = 10000;
  o.capacity = 128;
  size_t want = 0;
  assert_int_equal(ar_lsh_tables_bytes(50, 1u << 18, &o, &want, NULL), AR_OK);
  assert_int_equal(s.total_bytes, want);
  /* SLIDE's layout would be 50 * 2^18 * 128 * 4 bytes = 6.7 GB; here the
   * directory (52 MB, calloc'ed: untouched pages are not resident), the
   * records (2 MB) and the pools (16 MB). */
  size_t slide = (size_t)50 * (1u << 18) * 128 * 4;
  assert_true(s.total_bytes < slide / 50);
  float *w = randmat(10000, 32, 1, 0.3);
  assert_int_equal(ar_lsh_tables_build(t, h, w, 1000, 32), AR_OK);
  ar_lsh_tables_stats s1, s2;
  ar_lsh_tables_stats_get(t, &s1);
  assert_int_equal(s1.items, 50 * 1000);
  assert_int_equal(ar_lsh_tables_build(t, h, w, 10000, 32), AR_OK);
  ar_lsh_tables_stats_get(t, &s2);
  assert_int_equal(s2.items, 50 * 10000);
  assert_int_equal(s1.total_bytes, want);
  assert_int_equal(s2.total_bytes, want);
  print_message("pool bytes used: 1k neurons %zu, 10k neurons %zu, of %zu\n",
                s1.pool_used_bytes, s2.pool_used_bytes, s2.pool_bytes);
  assert_true(s2.pool_used_bytes > 4 * s1.pool_used_bytes);
  assert_true(s2.pool_used_bytes < 64 * s2.items); /* <= 16 words per id */
  assert_true(s1.pool_used_bytes < 64 * s1.items);
  assert_true(s2.pool_used_bytes <= s2.pool_bytes);
  /* Same items, 64x fewer buckets: about the same pool use. */
  ar_lsh_hash *h12 = mkhash(AR_LSH_DWTA, 32, 4, 50, 0, 3);
  ar_lsh_tables *t12 = mktables(h12, 10000, 128, AR_LSH_FIFO, 0, 2);
  assert_int_equal(ar_lsh_tables_build(t12, h12, w, 10000, 32), AR_OK);
  ar_lsh_tables_stats s3;
  ar_lsh_tables_stats_get(t12, &s3);
  assert_true(s3.pool_used_bytes * 4 > s2.pool_used_bytes &&
              s2.pool_used_bytes * 4 > s3.pool_used_bytes);
  ar_lsh_tables_destroy(t12);
  ar_lsh_hash_destroy(h12);
  free(w);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
}

/* Every bucket of a and b, contents and order, are equal. */
static void assert_same_tables(const ar_lsh_tables *a, const ar_lsh_tables *b,
                               uint32_t L, uint32_t nb) {
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t k = 0; k < nb; k++) {
      uint32_t na, nbb;
      const uint32_t *ia = ar_lsh_tables_bucket(a, l, k, &na);
      const uint32_t *ib = ar_lsh_tables_bucket(b, l, k, &nbb);
      assert_int_equal(na, nbb);
      if (na)
        assert_memory_equal(ia, ib, na * sizeof *ia);
    }
}

static void test_build_thread_determinism(void **st) {
  (void)st;
  const uint32_t n = 5000, dim = 48;
  float *w = randmat(n, dim, 2, 0.2);
  for (int p = 0; p < 2; p++) {
    ar_lsh_policy pol = p ? AR_LSH_RESERVOIR : AR_LSH_FIFO;
    ar_lsh_hash *h = mkhash(AR_LSH_SRP, dim, 5, 12, 0, 9);
    ar_lsh_tables *t1 = mktables(h, n, 16, pol, 5, 1);
    ar_lsh_tables *t2 = mktables(h, n, 16, pol, 5, 2);
    ar_lsh_tables *t3 = mktables(h, n, 16, pol, 5, 3);
    assert_int_equal(ar_lsh_tables_build(t1, h, w, n, dim), AR_OK);
    assert_int_equal(ar_lsh_tables_build(t2, h, w, n, dim), AR_OK);
    assert_int_equal(ar_lsh_tables_build(t3, h, w, n, dim), AR_OK);
    assert_same_tables(t1, t2, 12, ar_lsh_hash_buckets(h));
    assert_same_tables(t1, t3, 12, ar_lsh_hash_buckets(h));
    /* A rebuild of the same weights repeats the FIFO tables exactly. */
    if (pol == AR_LSH_FIFO) {
      assert_int_equal(ar_lsh_tables_build(t2, h, w, n, dim), AR_OK);
      assert_same_tables(t1, t2, 12, ar_lsh_hash_buckets(h));
    }
    ar_lsh_tables_destroy(t1);
    ar_lsh_tables_destroy(t2);
    ar_lsh_tables_destroy(t3);
    ar_lsh_hash_destroy(h);
  }
  free(w);
}

/* Each neuron's row as the query (exactly, or with 10% noise) finds that
 * neuron among the union of its buckets, over many seeds. */
static void test_retrieval(void **st) {
  (void)st;
  const uint32_t n = 2000, dim = 64, L = 20;
  const ar_lsh_family fams[] = {AR_LSH_SRP, AR_LSH_WTA, AR_LSH_DWTA};
  for (int f = 0; f < 3; f++)
    for (int noisy = 0; noisy < 2; noisy++) {
      int found = 0, trials = 0;
      for (uint64_t seed = 0; seed < 20; seed++) {
        float *w = randmat(n, dim, 100 + seed, 0.0);
        ar_lsh_hash *h = mkhash(fams[f], dim, fams[f] == AR_LSH_SRP ? 8 : 3,
                                L, 0, seed);
        ar_lsh_tables *t = mktables(h, n, 128, AR_LSH_FIFO, seed, 0);
        assert_int_equal(ar_lsh_tables_build(t, h, w, n, dim), AR_OK);
        ar_lsh_scratch *s = mkscratch(h, t);
        ar_rng r;
        ar_rng_seed(&r, seed, 5);
        uint32_t b[20], out[2000];
        float q[64];
        for (int k = 0; k < 10; k++) {
          uint32_t id = (uint32_t)ar_rng_below(&r, n);
          for (uint32_t j = 0; j < dim; j++)
            q[j] = w[(size_t)id * dim + j] +
                   (noisy ? 0.3f * (float)ar_rng_normal(&r) : 0.0f);
          assert_int_equal(ar_lsh_hash_dense(h, q, s, b), AR_OK);
          ar_lsh_sample_opts so = AR_LSH_SAMPLE_OPTS_INIT;
          size_t cnt;
          assert_int_equal(
              ar_lsh_sample(t, b, &so, NULL, 0, s, &r, out, n, &cnt), AR_OK);
          found += contains(out, (uint32_t)cnt, id);
          trials++;
        }
        ar_lsh_scratch_destroy(s);
        ar_lsh_tables_destroy(t);
        ar_lsh_hash_destroy(h);
        free(w);
      }
      print_message("retrieval family %d noisy %d: %d/%d\n", f, noisy, found,
                    trials);
      assert_true(found >= (noisy ? 0.9 : 1.0) * trials);
    }
}

/* Re-insertion moves a neuron whose weights changed; FIFO rings keep their
 * age order through a removal. */
static void test_reinsert_moves(void **st) {
  (void)st;
  /* dim 1, one +-1 projection: the bucket is the sign of w. */
  ar_lsh_hash_opts o = AR_LSH_HASH_OPTS_INIT;
  o.family = AR_LSH_SRP;
  o.dim = 1;
  o.K = 1;
  o.L = 1;
  o.srp_ratio = 1;
  ar_lsh_hash *h = NULL;
  assert_int_equal(ar_lsh_hash_create(&o, &h, NULL), AR_OK);
  ar_lsh_tables *t = mktables(h, 10, 4, AR_LSH_FIFO, 0, 1);
  float w[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
  assert_int_equal(ar_lsh_tables_build(t, h, w, 6, 1), AR_OK);
  ar_lsh_scratch *s = mkscratch(h, t);
  uint32_t pos, neg, n;
  ar_lsh_hash_dense(h, &w[0], s, &pos);
  neg = 1 - pos;
  const uint32_t *ids = ar_lsh_tables_bucket(t, 0, pos, &n);
  assert_int_equal(n, 4); /* 2,3,4,5 with the ring's head on 2 */
  w[3] = -1;
  uint32_t mv = 3;
  assert_int_equal(ar_lsh_tables_reinsert(t, h, w, 1, &mv, 1), AR_OK);
  ids = ar_lsh_tables_bucket(t, 0, neg, &n);
  assert_int_equal(n, 1);
  assert_int_equal(ids[0], 3);
  ids = ar_lsh_tables_bucket(t, 0, pos, &n);
  assert_int_equal(n, 3);
  assert_false(contains(ids, n, 3));
  /* Two more into pos: the oldest (2) must be the one to go. */
  uint32_t add[2] = {6, 7};
  for (int i = 0; i < 2; i++)
    assert_int_equal(ar_lsh_tables_insert(t, add[i], &pos), AR_OK);
  ids = ar_lsh_tables_bucket(t, 0, pos, &n);
  assert_int_equal(n, 4);
  uint32_t want[4] = {4, 5, 6, 7};
  for (int i = 0; i < 4; i++)
    assert_true(contains(ids, n, want[i]));
  uint32_t eight = 8; /* next to go is 4, not 6 */
  assert_int_equal(ar_lsh_tables_insert(t, eight, &pos), AR_OK);
  ids = ar_lsh_tables_bucket(t, 0, pos, &n);
  assert_false(contains(ids, n, 4));
  assert_true(contains(ids, n, 6) && contains(ids, n, 8));
  /* Moving back, and a neuron whose bucket did not change, stay consistent. */
  w[3] = 1;
  uint32_t two[2] = {3, 4};
  assert_int_equal(ar_lsh_tables_reinsert(t, h, w, 1, two, 2), AR_OK);
  ar_lsh_tables_bucket(t, 0, neg, &n);
  assert_int_equal(n, 0);
  ar_lsh_tables_stats ss;
  ar_lsh_tables_stats_get(t, &ss);
  assert_int_equal(ss.nonempty_buckets, 1);
  uint32_t bad = 9;
  assert_int_equal(ar_lsh_tables_reinsert(t, h, w, 1, &bad, 1), AR_RANGE);
  ar_lsh_scratch_destroy(s);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
}

/* After weights change, a rebuild (or re-insertion) finds the new
 * nearest neuron. */
static void test_reinsert_finds_new_neighbour(void **st) {
  (void)st;
  const uint32_t n = 3000, dim = 64;
  float *w = randmat(n, dim, 8, 0.0);
  ar_lsh_hash *h = mkhash(AR_LSH_DWTA, dim, 3, 20, 0, 4);
  ar_lsh_tables *t = mktables(h, n, 64, AR_LSH_RESERVOIR, 4, 2);
  assert_int_equal(ar_lsh_tables_build(t, h, w, n, dim), AR_OK);
  ar_lsh_tables_stats before;
  ar_lsh_tables_stats_get(t, &before);
  ar_lsh_scratch *s = mkscratch(h, t);
  ar_rng r;
  ar_rng_seed(&r, 8, 1);
  uint32_t moved[50], b[20], out[3000];
  float q[64];
  for (int i = 0; i < 50; i++) { /* 50 neurons get fresh random rows */
    moved[i] = (uint32_t)(i * 59);
    randrow(&r, w + (size_t)moved[i] * dim, dim, 0.0);
  }
  assert_int_equal(ar_lsh_tables_reinsert(t, h, w, dim, moved, 50), AR_OK);
  ar_lsh_tables_stats after;
  ar_lsh_tables_stats_get(t, &after);
  assert_true(after.items <= before.items + 50 * 20);
  int found = 0;
  for (int i = 0; i < 50; i++) {
    memcpy(q, w + (size_t)moved[i] * dim, sizeof q);
    ar_lsh_hash_dense(h, q, s, b);
    ar_lsh_sample_opts so = AR_LSH_SAMPLE_OPTS_INIT;
    size_t cnt;
    assert_int_equal(ar_lsh_sample(t, b, &so, NULL, 0, s, &r, out, n, &cnt),
                     AR_OK);
    found += contains(out, (uint32_t)cnt, moved[i]);
  }
  assert_int_equal(found, 50);
  ar_lsh_scratch_destroy(s);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
  free(w);
}

/* SRP builds hash the weight rows by GEMM (srp.c): every row must sit in
 * the bucket its own per-row hash names, in (nearly) every table; only a
 * projection within rounding of 0 may differ.  Both the build and the
 * re-insertion of a subset take that path. */
static void test_srp_gemm_build_matches_row_hashes(void **st) {
  (void)st;
  enum { N = 3000, D = 128, L = 8 };
  ar_lsh_hash *h = mkhash(AR_LSH_SRP, D, 12, L, 0, 77);
  ar_lsh_tables *t = mktables(h, N, 65535, AR_LSH_FIFO, 1, 2);
  ar_lsh_scratch *sc = mkscratch(h, NULL);
  float *w = malloc((size_t)N * D * sizeof(float));
  ar_rng g;
  ar_rng_seed(&g, 5, 0);
  for (size_t i = 0; i < (size_t)N * D; i++)
    w[i] = (float)ar_rng_normal(&g);
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0) {
      assert_int_equal(ar_lsh_tables_build(t, h, w, N, D), AR_OK);
    } else {
      /* Move every third row and re-insert those. */
      uint32_t ids[N / 3];
      for (uint32_t k = 0; k < N / 3; k++) {
        ids[k] = 3 * k;
        for (int j = 0; j < D; j++)
          w[(size_t)ids[k] * D + j] = (float)ar_rng_normal(&g);
      }
      assert_int_equal(ar_lsh_tables_reinsert(t, h, w, D, ids, N / 3), AR_OK);
    }
    int found = 0;
    for (uint32_t r = 0; r < N; r++) {
      uint32_t b[L];
      assert_int_equal(ar_lsh_hash_dense(h, w + (size_t)r * D, sc, b), AR_OK);
      for (uint32_t l = 0; l < L; l++) {
        uint32_t c;
        const uint32_t *ids = ar_lsh_tables_bucket(t, l, b[l], &c);
        for (uint32_t j = 0; j < c; j++)
          if (ids[j] == r) {
            found++;
            break;
          }
      }
    }
    /* Gaussian projections are never within rounding of 0 in practice. */
    assert_true(found >= N * L - 2);
  }
  free(w);
  ar_lsh_scratch_destroy(sc);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
}

/* A FIFO build lays buckets out directly (tables.c, build_fifo_table): its
 * buckets must hold exactly what inserting the neurons one by one keeps,
 * in the same ring order, with overflowing buckets (capacity 3 and 5,
 * several rows a bucket) and buckets that stay small. */
static void test_fifo_build_equals_inserts(void **st) {
  (void)st;
  enum { N = 2000, D = 16, L = 6 };
  for (uint32_t cap = 3; cap <= 5; cap += 2) {
    ar_lsh_hash *h = mkhash(AR_LSH_SRP, D, 7, L, 0, 91);
    ar_lsh_tables *a = mktables(h, N, cap, AR_LSH_FIFO, 1, 2);
    ar_lsh_tables *b = mktables(h, N, cap, AR_LSH_FIFO, 1, 1);
    ar_lsh_scratch *sc = mkscratch(h, NULL);
    float *w = malloc((size_t)N * D * sizeof(float));
    ar_rng g;
    ar_rng_seed(&g, 9, cap);
    for (size_t i = 0; i < (size_t)N * D; i++)
      w[i] = (float)ar_rng_normal(&g);
    assert_int_equal(ar_lsh_tables_build(a, h, w, N, D), AR_OK);
    for (uint32_t r = 0; r < N; r++) {
      uint32_t bk[L];
      assert_int_equal(ar_lsh_hash_dense(h, w + (size_t)r * D, sc, bk), AR_OK);
      assert_int_equal(ar_lsh_tables_insert(b, r, bk), AR_OK);
    }
    ar_lsh_tables_stats sa, sb;
    ar_lsh_tables_stats_get(a, &sa);
    ar_lsh_tables_stats_get(b, &sb);
    assert_int_equal(sa.items, sb.items);
    assert_int_equal(sa.nonempty_buckets, sb.nonempty_buckets);
    assert_true(sa.items < (uint64_t)N * L); /* some buckets overflowed */
    for (uint32_t l = 0; l < L; l++)
      for (uint32_t k = 0; k < 128; k++) {
        uint32_t ca, cb;
        const uint32_t *ia = ar_lsh_tables_bucket(a, l, k, &ca);
        const uint32_t *ib = ar_lsh_tables_bucket(b, l, k, &cb);
        assert_int_equal(ca, cb);
        if (ca)
          assert_memory_equal(ia, ib, ca * sizeof *ia);
      }
    free(w);
    ar_lsh_scratch_destroy(sc);
    ar_lsh_tables_destroy(a);
    ar_lsh_tables_destroy(b);
    ar_lsh_hash_destroy(h);
  }
}

/* A FIFO bucket as the tables keep it: slots in ring order and the head
 * (the oldest once full), for the reference below. */
typedef struct ref_bucket {
  uint32_t ids[32], n, head;
} ref_bucket;

static void ref_insert(ref_bucket *b, uint32_t id, uint32_t cap) {
  if (b->n < cap) {
    b->ids[b->n++] = id;
    return;
  }
  b->ids[b->head] = id;
  b->head = (b->head + 1) % cap;
}

static void ref_remove(ref_bucket *b, uint32_t id) {
  uint32_t p = 0;
  while (p < b->n && b->ids[p] != id)
    p++;
  if (p == b->n)
    return; /* evicted already */
  uint32_t ring[32];
  for (uint32_t i = 0; i < b->n; i++) /* oldest first */
    ring[i] = b->ids[(b->head + i) % b->n];
  uint32_t k = 0;
  for (uint32_t i = 0; i < b->n; i++)
    if (ring[i] != id)
      b->ids[k++] = ring[i];
  b->n = k;
  b->head = 0;
}

/* The pools are fixed at create: many rounds of re-insertions that move
 * neurons between half-full buckets (blocks growing and shrinking through
 * the classes, dead blocks, compactions) keep exactly the contents, in
 * ring order, of a plain reference, and never need more memory than
 * ar_lsh_tables_bytes says.  DWTA: the tables hash rows one by one, as the
 * reference does. */
static void test_fixed_pool_churn(void **st) {
  (void)st;
  enum { N = 1000, D = 16, L = 4, CAP = 32, ROUNDS = 40, MOVE = 300 };
  ar_lsh_hash *h = mkhash(AR_LSH_DWTA, D, 2, L, 0, 5);
  const uint32_t nb = ar_lsh_hash_buckets(h);
  assert_int_equal(nb, 64);
  ar_lsh_tables *t = mktables(h, N, CAP, AR_LSH_FIFO, 0, 2);
  ar_lsh_tables_opts o = AR_LSH_TABLES_OPTS_INIT;
  o.neurons = N;
  o.capacity = CAP;
  size_t want = 0;
  assert_int_equal(ar_lsh_tables_bytes(L, nb, &o, &want, NULL), AR_OK);
  ar_lsh_scratch *sc = mkscratch(h, NULL);
  float *w = randmat(N, D, 12, 0.0);
  ref_bucket *ref = calloc((size_t)L * nb, sizeof *ref);
  uint32_t *rec = malloc((size_t)N * L * sizeof *rec);
  assert_int_equal(ar_lsh_tables_build(t, h, w, N, D), AR_OK);
  for (uint32_t i = 0; i < N; i++) {
    assert_int_equal(ar_lsh_hash_dense(h, w + (size_t)i * D, sc, rec + (size_t)i * L), AR_OK);
    for (uint32_t l = 0; l < L; l++)
      ref_insert(&ref[l * nb + rec[(size_t)i * L + l]], i, CAP);
  }
  ar_rng g;
  ar_rng_seed(&g, 3, 4);
  uint32_t ids[MOVE], bk[L];
  for (int round = 0; round < ROUNDS; round++) {
    for (int k = 0; k < MOVE; k++) { /* any order, repeats allowed */
      ids[k] = (uint32_t)ar_rng_below(&g, N);
      randrow(&g, w + (size_t)ids[k] * D, D, 0.0);
    }
    assert_int_equal(ar_lsh_tables_reinsert(t, h, w, D, ids, MOVE), AR_OK);
    for (int k = 0; k < MOVE; k++) {
      assert_int_equal(ar_lsh_hash_dense(h, w + (size_t)ids[k] * D, sc, bk), AR_OK);
      for (uint32_t l = 0; l < L; l++) {
        uint32_t *r = &rec[(size_t)ids[k] * L + l];
        if (*r == bk[l])
          continue;
        ref_remove(&ref[l * nb + *r], ids[k]);
        ref_insert(&ref[l * nb + bk[l]], ids[k], CAP);
        *r = bk[l];
      }
    }
    uint64_t items = 0;
    for (uint32_t l = 0; l < L; l++)
      for (uint32_t b = 0; b < nb; b++) {
        uint32_t n;
        const uint32_t *got = ar_lsh_tables_bucket(t, l, b, &n);
        const ref_bucket *rb = &ref[l * nb + b];
        if (n != rb->n)
          fail_msg("round %d table %u bucket %u: %u ids, want %u", round, l, b, n, rb->n);
        if (n)
          assert_memory_equal(got, rb->ids, n * sizeof *got);
        items += n;
      }
    ar_lsh_tables_stats s;
    ar_lsh_tables_stats_get(t, &s);
    assert_int_equal(s.items, items);
    assert_int_equal(s.total_bytes, want);
    assert_true(s.pool_used_bytes <= s.pool_bytes);
  }
  ar_lsh_tables_stats s;
  ar_lsh_tables_stats_get(t, &s);
  print_message("churn: %llu compactions, pool %zu of %zu bytes used\n",
                (unsigned long long)s.compactions, s.pool_used_bytes, s.pool_bytes);
  assert_true(s.compactions > 0); /* the path above ran */
  free(rec);
  free(ref);
  free(w);
  ar_lsh_scratch_destroy(sc);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
}

/* Reservoir tables under the same churn: each bucket holds distinct ids,
 * each hashing there now, at most `capacity`; the memory never changes. */
static void test_fixed_pool_reservoir(void **st) {
  (void)st;
  enum { N = 1000, D = 16, L = 4, CAP = 32 };
  ar_lsh_hash *h = mkhash(AR_LSH_DWTA, D, 2, L, 0, 6);
  const uint32_t nb = ar_lsh_hash_buckets(h);
  ar_lsh_tables *t = mktables(h, N, CAP, AR_LSH_RESERVOIR, 7, 2);
  ar_lsh_tables_stats s0;
  ar_lsh_tables_stats_get(t, &s0);
  ar_lsh_scratch *sc = mkscratch(h, NULL);
  float *w = randmat(N, D, 13, 0.0);
  assert_int_equal(ar_lsh_tables_build(t, h, w, N, D), AR_OK);
  ar_rng g;
  ar_rng_seed(&g, 5, 6);
  uint32_t ids[300], bk[L];
  for (int round = 0; round < 40; round++) {
    for (int k = 0; k < 300; k++) {
      ids[k] = (uint32_t)ar_rng_below(&g, N);
      randrow(&g, w + (size_t)ids[k] * D, D, 0.0);
    }
    assert_int_equal(ar_lsh_tables_reinsert(t, h, w, D, ids, 300), AR_OK);
  }
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t b = 0; b < nb; b++) {
      uint32_t n;
      const uint32_t *got = ar_lsh_tables_bucket(t, l, b, &n);
      assert_true(n <= CAP);
      for (uint32_t i = 0; i < n; i++) {
        assert_false(contains(got, i, got[i]));
        assert_int_equal(ar_lsh_hash_dense(h, w + (size_t)got[i] * D, sc, bk), AR_OK);
        assert_int_equal(bk[l], b);
      }
    }
  ar_lsh_tables_stats s;
  ar_lsh_tables_stats_get(t, &s);
  assert_int_equal(s.total_bytes, s0.total_bytes);
  assert_true(s.compactions > 0);
  free(w);
  ar_lsh_scratch_destroy(sc);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
}

/* What each handle really allocates (counted by the allocation wrapper)
 * is what its _bytes function says, for every family; tables do not grow
 * through builds and re-insertions (their working memory is freed). */
static void test_bytes_measured(void **st) {
  (void)st;
  static const ar_lsh_family fams[] = {AR_LSH_SRP, AR_LSH_WTA, AR_LSH_DWTA, AR_LSH_DOPH};
  for (int f = 0; f < 4; f++) {
    ar_lsh_hash_opts ho = AR_LSH_HASH_OPTS_INIT;
    ho.family = fams[f];
    ho.dim = 40;
    ho.K = 4;
    ho.L = 10;
    size_t hb = 0, tb = 0;
    assert_int_equal(ar_lsh_hash_bytes(&ho, &hb, NULL), AR_OK);
    assert_int_equal(ar_alloc_count_start(), AR_OK);
    ar_lsh_hash *h = NULL;
    assert_int_equal(ar_lsh_hash_create(&ho, &h, NULL), AR_OK);
    assert_int_equal(ar_alloc_count_live(NULL), (int64_t)hb);
    ar_lsh_tables_opts o = AR_LSH_TABLES_OPTS_INIT;
    o.neurons = 3000;
    o.capacity = 16;
    o.policy = f % 2 ? AR_LSH_RESERVOIR : AR_LSH_FIFO;
    o.threads = 2;
    assert_int_equal(ar_lsh_tables_bytes(ho.L, ar_lsh_hash_buckets(h), &o, &tb, NULL), AR_OK);
    ar_lsh_tables *t = NULL;
    assert_int_equal(ar_lsh_tables_create(h, &o, &t, NULL), AR_OK);
    assert_int_equal(ar_alloc_count_live(NULL), (int64_t)(hb + tb));
    float *w = randmat(3000, 40, 20 + (uint64_t)f, 0.3);
    assert_int_equal(ar_lsh_tables_build(t, h, w, 3000, 40), AR_OK);
    uint32_t ids[600];
    for (uint32_t i = 0; i < 600; i++)
      ids[i] = 5 * i;
    for (size_t i = 0; i < (size_t)3000 * 40; i += 7)
      w[i] = -w[i];
    assert_int_equal(ar_lsh_tables_reinsert(t, h, w, 40, ids, 600), AR_OK);
    assert_int_equal(ar_alloc_count_live(NULL), (int64_t)(hb + tb));
    ar_lsh_scratch *sc = NULL;
    ar_lsh_touched *tt = NULL;
    assert_int_equal(ar_lsh_scratch_create(h, t, &sc, NULL), AR_OK);
    assert_int_equal(ar_lsh_touched_create(3000, &tt, NULL), AR_OK);
    assert_int_equal(ar_alloc_count_live(NULL),
                     (int64_t)(hb + tb + ar_lsh_scratch_bytes(40, 3000) +
                               ar_lsh_touched_bytes(3000)));
    ar_lsh_touched_destroy(tt);
    ar_lsh_scratch_destroy(sc);
    ar_lsh_tables_destroy(t);
    ar_lsh_hash_destroy(h);
    assert_int_equal(ar_alloc_count_live(NULL), 0);
    ar_alloc_count_stop();
    free(w);
  }
  /* Tables past the pools' 32-bit offsets are refused before allocating. */
  ar_lsh_tables_opts o = AR_LSH_TABLES_OPTS_INIT;
  o.neurons = 2147483647u;
  size_t tb = 0;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lsh_tables_bytes(50, 1u << 15, &o, &tb, &err), AR_RANGE);
  assert_non_null(strstr(err.msg, "narrower"));
}

static void test_errors(void **st) {
  (void)st;
  ar_lsh_hash *h = mkhash(AR_LSH_SRP, 8, 2, 3, 0, 1);
  ar_lsh_hash *h4 = mkhash(AR_LSH_SRP, 8, 2, 4, 0, 1);
  ar_lsh_tables_opts o = AR_LSH_TABLES_OPTS_INIT;
  ar_lsh_tables *t = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lsh_tables_create(h, &o, &t, &err), AR_INVALID);
  o.neurons = 10;
  o.capacity = 0;
  assert_int_equal(ar_lsh_tables_create(h, &o, &t, &err), AR_INVALID);
  o.capacity = 8;
  assert_int_equal(ar_lsh_tables_create(h, &o, &t, &err), AR_OK);
  float w[11 * 8] = {0};
  assert_int_equal(ar_lsh_tables_build(t, h4, w, 10, 8), AR_INVALID);
  assert_non_null(strstr(ar_lsh_tables_errmsg(t), "L=3"));
  assert_int_equal(ar_lsh_tables_build(t, h, w, 11, 8), AR_INVALID);
  assert_int_equal(ar_lsh_tables_build(t, h, w, 10, 4), AR_INVALID);
  uint32_t bk[3] = {0, 0, 99};
  assert_int_equal(ar_lsh_tables_insert(t, 1, bk), AR_RANGE);
  ar_lsh_tables_destroy(t);
  ar_lsh_tables_destroy(NULL);
  /* Out of memory at each allocation of create and build. */
  for (long k = 0; k < 40; k++) {
    t = NULL;
    ar_alloc_fail_after(k);
    ar_status r = ar_lsh_tables_create(h, &o, &t, &err);
    if (r == AR_OK)
      r = ar_lsh_tables_build(t, h, w, 10, 8);
    ar_alloc_fail_after(-1);
    assert_true(r == AR_OK || r == AR_NOMEM);
    ar_lsh_tables_destroy(t);
  }
  ar_lsh_hash_destroy(h);
  ar_lsh_hash_destroy(h4);
}

/* The Amazon-670K output layer: memory, build time, query time. */
static void test_amazon_shape(void **st) {
  (void)st;
  const char *e = getenv("ACCELRT_LSH_AMAZON");
  if (!e || strcmp(e, "1") != 0)
    skip();
  const uint32_t n = 670091, dim = 128;
  float *w = randmat(n, dim, 3, 0.0);
  ar_lsh_hash *h = mkhash(AR_LSH_DWTA, dim, 6, 50, 0, 1);
  ar_lsh_tables *t = mktables(h, n, 128, AR_LSH_FIFO, 1, 2);
  double t0 = ar_now();
  assert_int_equal(ar_lsh_tables_build(t, h, w, n, dim), AR_OK);
  double t1 = ar_now();
  ar_lsh_tables_stats s;
  ar_lsh_tables_stats_get(t, &s);
  ar_lsh_scratch *sc = mkscratch(h, t);
  ar_rng r;
  ar_rng_seed(&r, 1, 1);
  uint32_t b[50], *out = malloc(n * sizeof *out);
  float q[128];
  size_t total = 0, cnt;
  double th = 0, ts = 0;
  const int nq = 2000;
  ar_lsh_sample_opts so = AR_LSH_SAMPLE_OPTS_INIT;
  so.strategy = AR_LSH_TOPK;
  so.budget = 3000;
  for (int i = 0; i < nq; i++) {
    randrow(&r, q, dim, 0.5);
    double a = ar_now();
    ar_lsh_hash_dense(h, q, sc, b);
    double m = ar_now();
    ar_lsh_sample(t, b, &so, NULL, 0, sc, &r, out, n, &cnt);
    ts += ar_now() - m;
    th += m - a;
    total += cnt;
  }
  printf("amazon shape: %u x %u, DWTA K=6 L=50, bits %u, bucket 128, %d "
         "threads\n",
         n, dim, ar_lsh_hash_opts_get(h)->bits, 2);
  printf("  build %.3f s; items %llu, nonempty buckets %llu of %llu\n",
         t1 - t0, (unsigned long long)s.items,
         (unsigned long long)s.nonempty_buckets, 50ull << 18);
  printf("  bytes: directory %.1f MiB, records %.1f MiB, pool %.1f MiB, "
         "total %.1f MiB (SLIDE layout: %.2f GB)\n",
         s.directory_bytes / 1048576.0, s.record_bytes / 1048576.0,
         s.pool_bytes / 1048576.0, s.total_bytes / 1048576.0,
         50.0 * (1 << 18) * 128 * 4 / 1e9);
  printf("  query: hash %.1f us, topk sample %.1f us, mean %.0f candidates\n",
         th / nq * 1e6, ts / nq * 1e6, (double)total / nq);
  ar_lsh_scratch_destroy(sc);
  free(out);
  ar_lsh_tables_destroy(t);
  ar_lsh_hash_destroy(h);
  free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fifo_keeps_recent),
      cmocka_unit_test(test_reservoir_uniform),
      cmocka_unit_test(test_lazy_memory),
      cmocka_unit_test(test_build_thread_determinism),
      cmocka_unit_test(test_retrieval),
      cmocka_unit_test(test_reinsert_moves),
      cmocka_unit_test(test_reinsert_finds_new_neighbour),
      cmocka_unit_test(test_srp_gemm_build_matches_row_hashes),
      cmocka_unit_test(test_fifo_build_equals_inserts),
      cmocka_unit_test(test_fixed_pool_churn),
      cmocka_unit_test(test_fixed_pool_reservoir),
      cmocka_unit_test(test_bytes_measured),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_amazon_shape),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
