/*
 * accelrt lsh: locality-sensitive hash tables that pick the active neurons
 * of a wide layer (SLIDE, Chen et al., MLSys 2020).
 *
 * A leaf library on top of accelrt/base.h.  It knows float rows (a weight
 * row per neuron, an input vector) and index sets (neuron ids); it never
 * sees the job spec, the engine or a device.  Four pieces:
 *
 *   - ar_lsh_hash: a hash family (SRP/SimHash, WTA, DWTA, DOPH) with K codes
 *     per table and L tables.  It maps a dense row (float[dim]) or a sparse
 *     row (idx[nnz], val[nnz]) to L bucket ids, one per table, each in
 *     [0, 2^bits).  Sparse and dense rows of the same vector give the same
 *     bucket ids (bit for bit when the sparse indices are ascending).
 *   - ar_lsh_tables: L tables of buckets holding neuron ids, at most
 *     `capacity` per bucket, kept by a FIFO ring or by reservoir sampling.
 *     A bucket grows 4, 8, ... up to capacity inside a per-table pool whose
 *     size is fixed at create from the neuron count, so the memory of the
 *     tables is known before they exist (ar_lsh_tables_bytes) and never
 *     grows: a job's memory plan counts it exactly.  The directory (4 bytes
 *     per bucket) is calloc'ed and the pools malloc'ed, so untouched pages
 *     are never made resident.
 *   - sampling: the active set of one input from its L buckets (union up to
 *     a budget, top-k by frequency, threshold), with an always-include list,
 *     minimum and maximum counts, into a caller buffer.
 *   - ar_lsh_rehash: the schedule of table rebuilds (every N iterations, N
 *     growing by a factor) and of new hash functions.
 *
 * Randomness comes only from the seeds given here (ar_rng, never the clock);
 * table builds give the same tables for every thread count.
 *
 * Errors: create functions write into the ar_err they are given; a tables
 * handle keeps its own message (ar_lsh_tables_errmsg); hashing and sampling
 * write into the per-thread scratch's message (ar_lsh_scratch_errmsg).
 *
 * A fifth piece, the sparse kernels (forward, softmax over the active set,
 * backward, touched rows, Adam on touched rows), computes a layer for the
 * active set; it is described at its section below.
 *
 * Tests: tests/lsh/test_hash.c (families, sparse == dense, collision
 * probabilities, DWTA coverage), tests/lsh/test_tables.c (policies, lazy
 * memory, parallel build, re-insertion, retrieval), tests/lsh/test_sampling.c
 * (strategies on hand-built buckets), tests/lsh/test_rehash.c (schedule),
 * tests/lsh/test_kernels.c (kernels).
 */
#ifndef ACCELRT_LSH_H
#define ACCELRT_LSH_H

#include <stddef.h>
#include <stdint.h>

#include "accelrt/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- hash families --------------------------------------------------- */

typedef enum ar_lsh_family {
  /* Signed random projections (SimHash, Charikar 2002), with sparse
   * projections: each of the K*L projections has a +1 or -1 on a random
   * 1/srp_ratio of the coordinates and 0 elsewhere.  One bit per code.
   * Collides with probability 1 - angle/pi for dense projections. */
  AR_LSH_SRP = 0,
  /* Winner-take-all (Yagnik et al., ICCV 2011): each code looks at bin_size
   * random coordinates and records the position of the largest value
   * (ties: the first position).  Absent sparse entries count as 0. */
  AR_LSH_WTA = 1,
  /* Densified WTA (Chen & Shrivastava, 2018; SLIDE's default): as WTA over
   * the non-zero entries only; a code whose coordinates are all zero
   * borrows the code of another, chosen by a seeded hash of (code,
   * attempt), then the next non-empty one.  An all-zero row gives codes 0. */
  AR_LSH_DWTA = 2,
  /* Densified one-permutation minhash (Shrivastava, ICML 2017) of the set of
   * non-zero coordinates (binary inputs): each coordinate is hashed to one
   * of the K*L bins and a 32-bit value; a code is the minimum value of its
   * bin, mixed and cut to log2(bin_size) bits; empty bins borrow as DWTA. */
  AR_LSH_DOPH = 3
} ar_lsh_family;

typedef struct ar_lsh_hash_opts {
  ar_lsh_family family;
  uint32_t dim;       /* input dimension; required (> 0) */
  uint32_t K;         /* codes per table, 1..64 */
  uint32_t L;         /* tables, 1..1024 */
  /* Bits of a table index (2^bits buckets per table), 1..28.  0 chooses
   * K * (bits per code), at most 20.  When K codes fit in `bits` they are
   * concatenated (every bucket reachable); otherwise they are mixed by a
   * seeded 64-bit hash and the top `bits` bits kept. */
  uint32_t bits;
  /* WTA/DWTA: coordinates per code, 2..64; a code has ceil(log2(bin_size))
   * bits (SLIDE's DWTA kept 2 bits of its 3-bit codes: ~4% of buckets).
   * DOPH: 2^ceil(log2(bin_size)) values per code. */
  uint32_t bin_size;
  uint32_t srp_ratio; /* SRP: a projection touches 1 in srp_ratio coords */
  uint64_t seed;
} ar_lsh_hash_opts;

#define AR_LSH_HASH_OPTS_INIT {AR_LSH_DWTA, 0, 6, 50, 0, 8, 3, 0}

typedef struct ar_lsh_hash ar_lsh_hash;
typedef struct ar_lsh_scratch ar_lsh_scratch;
typedef struct ar_lsh_tables ar_lsh_tables;

/* Creates a hash family.  The options are copied.  Memory: SRP holds a
 * (dim, K*L) table of int8 signs; WTA/DWTA hold K*L*bin_size coordinates
 * and their transpose; DOPH holds nothing per coordinate.
 * Returns AR_OK, AR_INVALID (options out of range, message says which) or
 * AR_NOMEM.  *out is set only on success. */
ar_status ar_lsh_hash_create(const ar_lsh_hash_opts *opts, ar_lsh_hash **out,
                             ar_err *err);
/* Frees the family; NULL is a no-op. */
void ar_lsh_hash_destroy(ar_lsh_hash *h);
/* Checks opts as ar_lsh_hash_create does and writes them to *out with what
 * it would resolve (bits filled in; 2^bits is the buckets per table).
 * Returns AR_OK or AR_INVALID. */
ar_status ar_lsh_hash_opts_resolve(const ar_lsh_hash_opts *opts,
                                   ar_lsh_hash_opts *out, ar_err *err);
/* The bytes ar_lsh_hash_create allocates for opts (the handle, and SRP's
 * signs and float projections or WTA/DWTA's bins and their transpose; see
 * create).  Returns AR_OK, AR_INVALID or AR_RANGE. */
ar_status ar_lsh_hash_bytes(const ar_lsh_hash_opts *opts, size_t *out,
                            ar_err *err);

/* Getters (never fail): L, K, 2^bits (buckets per table), bits per code,
 * and the options as resolved (bits filled in). */
uint32_t ar_lsh_hash_L(const ar_lsh_hash *h);
uint32_t ar_lsh_hash_K(const ar_lsh_hash *h);
uint32_t ar_lsh_hash_buckets(const ar_lsh_hash *h);
uint32_t ar_lsh_hash_code_bits(const ar_lsh_hash *h);
const ar_lsh_hash_opts *ar_lsh_hash_opts_get(const ar_lsh_hash *h);

/* Hashes a dense row x (dim) into out (L) bucket ids, or, for the _codes
 * variants, into the raw codes out (L*K, table-major) before combining.
 * s is a scratch made for a family with at least this K*L; it is the only
 * thing written besides out, so a hash may be shared by threads that each
 * have their own scratch.  Returns AR_OK or AR_INVALID (scratch too small). */
ar_status ar_lsh_hash_dense(const ar_lsh_hash *h, const float *x,
                            ar_lsh_scratch *s, uint32_t *out);
ar_status ar_lsh_hash_dense_codes(const ar_lsh_hash *h, const float *x,
                                  ar_lsh_scratch *s, uint32_t *out);
/* The same for a sparse row: nnz distinct indices idx (any order, ascending
 * for bit-identical SRP sums) with values val; val may be NULL for a binary
 * row (all ones).  Returns AR_OK, AR_INVALID or AR_RANGE (an index >= dim;
 * out is then unspecified). */
ar_status ar_lsh_hash_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                             const float *val, size_t nnz, ar_lsh_scratch *s,
                             uint32_t *out);
ar_status ar_lsh_hash_sparse_codes(const ar_lsh_hash *h, const uint32_t *idx,
                                   const float *val, size_t nnz,
                                   ar_lsh_scratch *s, uint32_t *out);

/* ---- per-thread scratch ----------------------------------------------- */

/* Creates the scratch one thread uses for hashing (sized for h) and
 * sampling (sized for t's neuron count); either may be NULL.  Create one
 * per thread once; no hashing or sampling call allocates.
 * Returns AR_OK or AR_NOMEM. */
ar_status ar_lsh_scratch_create(const ar_lsh_hash *h, const ar_lsh_tables *t,
                                ar_lsh_scratch **out, ar_err *err);
void ar_lsh_scratch_destroy(ar_lsh_scratch *s);
/* The bytes ar_lsh_scratch_create allocates for a family of kl = K * L
 * codes and tables of `neurons` neurons (0 for either: made without it). */
size_t ar_lsh_scratch_bytes(uint32_t kl, uint32_t neurons);
/* The message of the last failed call that used s (borrowed). */
const char *ar_lsh_scratch_errmsg(const ar_lsh_scratch *s);

/* ---- tables ------------------------------------------------------------ */

typedef enum ar_lsh_policy {
  /* A full bucket overwrites its oldest entry: it keeps the most recent
   * `capacity` insertions (SLIDE's default). */
  AR_LSH_FIFO = 0,
  /* Reservoir sampling (Vitter's algorithm R): after N insertions into a
   * bucket, each of them is kept with probability capacity/N. */
  AR_LSH_RESERVOIR = 1
} ar_lsh_policy;

typedef struct ar_lsh_tables_opts {
  uint32_t neurons;  /* largest neuron count built; ids are < neurons */
  uint32_t capacity; /* ids per bucket, 1..65535 */
  ar_lsh_policy policy;
  uint64_t seed;     /* reservoir draws */
  int threads;       /* builds: OpenMP threads, 0 = OpenMP's default */
} ar_lsh_tables_opts;

#define AR_LSH_TABLES_OPTS_INIT {0, 128, AR_LSH_FIFO, 0, 0}

/* The bytes ar_lsh_tables_create allocates for tables of L tables of
 * `buckets` buckets (ar_lsh_hash_buckets of the family) with opts: the
 * handle, per table a directory (4 bytes per bucket) and a pool of
 * 4 * (6 * min(buckets, neurons) + 2 * neurons + 4 + capacity) bytes, and
 * one 4-byte bucket record per (neuron, table).  Builds, re-insertions and
 * insertions never allocate more for the tables themselves (a build or a
 * re-insertion briefly uses hashing scratch, see below).  Returns AR_OK,
 * AR_INVALID (the options, as at create) or AR_RANGE (neurons beyond the
 * pools' 32-bit offsets, about 2^31). */
ar_status ar_lsh_tables_bytes(uint32_t L, uint32_t buckets,
                              const ar_lsh_tables_opts *opts, size_t *out,
                              ar_err *err);

/* Creates empty tables shaped for h (L tables of ar_lsh_hash_buckets(h)
 * buckets); h is not kept.  Allocates everything the tables will hold,
 * ar_lsh_tables_bytes of them.  A table holds each neuron at most once as
 * builds and re-insertions keep it; that is what its pool is sized for.
 * Returns AR_OK, AR_INVALID, AR_RANGE or AR_NOMEM. */
ar_status ar_lsh_tables_create(const ar_lsh_hash *h,
                               const ar_lsh_tables_opts *opts,
                               ar_lsh_tables **out, ar_err *err);
void ar_lsh_tables_destroy(ar_lsh_tables *t);
const char *ar_lsh_tables_errmsg(const ar_lsh_tables *t);

/* Empties every bucket; the pools keep their memory for the next build. */
void ar_lsh_tables_clear(ar_lsh_tables *t);

/* Clears and inserts neurons 0..n-1, whose weight rows are w (n, dim) with
 * row stride ld floats (ld >= dim), hashed by h (same L and buckets as at
 * create; a new family for "new hash functions" is fine).  Rows are hashed
 * in parallel; each table is then filled by one thread in neuron order, so
 * the result does not depend on the thread count.  The tables do not grow;
 * the build allocates working memory while it runs (per thread: hashing
 * scratch and 4 bytes per bucket of counts).  Not to run concurrently with
 * anything else on t.
 * Returns AR_OK, AR_INVALID (shape mismatch, n > neurons) or AR_NOMEM (the
 * tables are then empty). */
ar_status ar_lsh_tables_build(ar_lsh_tables *t, const ar_lsh_hash *h,
                              const float *w, uint32_t n, size_t ld);

/* Re-hashes the neurons ids[count] from their current rows in w and moves
 * each, in each table, from its old bucket (if still there) to its new one;
 * ids in that order, so results do not depend on threads.  For the neurons
 * whose weights changed most.  Same rules and statuses as build, plus
 * AR_RANGE for an id >= the count built. */
ar_status ar_lsh_tables_reinsert(ar_lsh_tables *t, const ar_lsh_hash *h,
                                 const float *w, size_t ld,
                                 const uint32_t *ids, size_t count);

/* Inserts neuron id into bucket buckets[l] of each table l (L entries), as
 * if last in a build (for tests and callers with their own hashing).  It
 * does not remove id from where an earlier insertion put it: inserting
 * ids more often than once each can fill a table's fixed pool (AR_NOMEM).
 * Returns AR_OK, AR_RANGE or AR_NOMEM. */
ar_status ar_lsh_tables_insert(ar_lsh_tables *t, uint32_t id,
                               const uint32_t *buckets);

/* The ids in bucket b of table l, borrowed until the next change of t;
 * *count is 0 for an empty or out-of-range bucket.  Safe from many threads
 * while nothing changes t.  FIFO buckets are in ring order. */
const uint32_t *ar_lsh_tables_bucket(const ar_lsh_tables *t, uint32_t l,
                                     uint32_t b, uint32_t *count);

typedef struct ar_lsh_tables_stats {
  uint32_t L, buckets_per_table, capacity;
  uint32_t neurons_built;     /* n of the last build */
  uint64_t items;             /* ids stored, all tables */
  uint64_t nonempty_buckets;
  size_t directory_bytes;     /* 4 per bucket, calloc'ed */
  size_t record_bytes;        /* 4 per (neuron, table) */
  size_t pool_bytes;          /* bucket storage allocated (fixed) */
  size_t pool_used_bytes;     /* of it, carved into blocks now */
  uint64_t compactions;       /* pools compacted since create, all tables */
  size_t total_bytes;         /* all allocated: directory, records, pools
                                 and the handle; ar_lsh_tables_bytes */
} ar_lsh_tables_stats;

void ar_lsh_tables_stats_get(const ar_lsh_tables *t, ar_lsh_tables_stats *out);

/* ---- sampling ----------------------------------------------------------- */

typedef enum ar_lsh_strategy {
  /* Ids of the L buckets in table order, first come, until `budget`. */
  AR_LSH_UNION = 0,
  /* The `budget` ids found in most tables (ties: first found first). */
  AR_LSH_TOPK = 1,
  /* Ids found in at least `threshold` tables, first found first. */
  AR_LSH_THRESHOLD = 2
} ar_lsh_strategy;

typedef struct ar_lsh_sample_opts {
  ar_lsh_strategy strategy;
  uint32_t budget;     /* UNION/TOPK: ids taken from buckets; 0 = no limit */
  uint32_t threshold;  /* THRESHOLD: m >= 1 */
  /* Below min_active, random neurons not yet chosen are added (never more
   * than there are).  0 lets a small layer stay sparse. */
  uint32_t min_active;
  /* At most this many outputs (0 = neurons), unless the always-include list
   * alone is longer: it is output whole. */
  uint32_t max_active;
} ar_lsh_sample_opts;

#define AR_LSH_SAMPLE_OPTS_INIT {AR_LSH_UNION, 0, 2, 0, 0}

/* The active set of one input whose bucket ids are buckets (L): first the
 * always-include ids always[n_always] (e.g. true labels; duplicates
 * dropped), then candidates by the strategy, then random fill from rng.
 * Writes distinct ids < neurons into out (out_cap) and their number into
 * *out_count.  No allocation.  t is only read (many threads may sample
 * concurrently, each with its own s and rng).  Requires out_cap >=
 * max(max_active or neurons, n_always).  Returns AR_OK, AR_INVALID
 * (options, out_cap, scratch too small) or AR_RANGE (an always id >=
 * neurons); the message is in s. */
ar_status ar_lsh_sample(const ar_lsh_tables *t, const uint32_t *buckets,
                        const ar_lsh_sample_opts *opts, const uint32_t *always,
                        size_t n_always, ar_lsh_scratch *s, ar_rng *rng,
                        uint32_t *out, size_t out_cap, size_t *out_count);

/* Keeps the k ids with the highest values among ids[from..n) (vals[i]
 * belongs to ids[i]): they are moved, with their values, to positions
 * from..from+k-1 in no particular order; ids[0..from) stay where they are.
 * Returns the count kept, min(n, from + k).  A NaN value ranks below every
 * number.  Deterministic: the same input gives the same output.  For
 * re-scoring a wide candidate set by its exact outputs (sparse.rescore). */
size_t ar_lsh_keep_top(uint32_t *ids, float *vals, size_t from, size_t n, size_t k);

/* ---- rehash schedule ---------------------------------------------------- */

typedef struct ar_lsh_rehash_opts {
  uint64_t every;          /* first rebuild after this many iterations, >= 1 */
  double growth;           /* each gap is the previous one times this, >= 1 */
  uint64_t new_hash_every; /* new hash functions every M iterations, 0 never */
} ar_lsh_rehash_opts;

#define AR_LSH_REHASH_OPTS_INIT {50, 1.0, 1000}

typedef enum ar_lsh_rehash_action {
  AR_LSH_REHASH_NONE = 0,
  AR_LSH_REHASH_REBUILD = 1,  /* rebuild the tables with the same family */
  AR_LSH_REHASH_NEW_HASH = 2  /* draw a new family, then rebuild */
} ar_lsh_rehash_action;

/* Caller-owned schedule state (ar_lsh_rehash_init, nothing to free). */
typedef struct ar_lsh_rehash {
  ar_lsh_rehash_opts o;
  uint64_t next;   /* iteration of the next rebuild */
  double gap;      /* current gap between rebuilds, before rounding */
} ar_lsh_rehash;

/* Starts a schedule.  Rebuilds fall at t1 = every, t(k+1) = t(k) +
 * round(every * growth^k) (never less than 1 apart); new hash functions at
 * the positive multiples of new_hash_every.  Returns AR_OK or AR_INVALID. */
ar_status ar_lsh_rehash_init(ar_lsh_rehash *r, const ar_lsh_rehash_opts *opts,
                             ar_err *err);
/* Call after iteration `iter` (counting from 1) completed, with iter
 * increasing.  Says what to do now; a skipped rebuild point is caught up
 * once.  Never fails. */
ar_lsh_rehash_action ar_lsh_rehash_check(ar_lsh_rehash *r, uint64_t iter);

/* ---- sparse kernels ------------------------------------------------------
 * The compute of a SLIDE layer for one sample restricted to its active set
 * (Chen et al., MLSys 2020, §3): forward, softmax over the active outputs,
 * backward into caller-owned gradient rows, and Adam over the rows touched
 * in a batch.  Portable C vectorised with `#pragma omp simd`; the inner
 * loops run over the input dimension (dense input) or the input's non-zeros
 * (sparse input).  No call allocates except the _create functions.
 *
 * Layout: a layer of `neurons` rows with `in` inputs keeps its weights as
 * w (neurons, ld) row-major, ld >= in, and biases b (neurons).  Gradients
 * use the same layout in separate arrays (ar_lsh_rows).
 *
 * HOGWILD (SLIDE §4.1): SLIDE runs each sample of a batch in its own thread
 * and lets them add into the shared gradient rows without locks.  The
 * backward kernel does the same: concurrent calls for different samples may
 * race on a gradient row both touch.  That race is by design (updates may
 * be lost or interleaved, and the sum is then not bit-deterministic); it is
 * a data race in the C11 sense, tolerated as SLIDE tolerates it.  The
 * deterministic path is to call the kernels for the samples of a batch in
 * order from one thread: every result is then bit-identical from run to run.
 * The touched-row set is exact under concurrency (atomic marks).
 *
 * Tests: tests/lsh/test_kernels.c (naive double reference, sparse == dense
 * input, all-active == dense layer, finite differences of the loss, Adam
 * against a step-by-step scalar reference, touched-set clearing). */

typedef enum ar_lsh_act {
  AR_LSH_ACT_NONE = 0, /* out = z */
  AR_LSH_ACT_RELU = 1  /* out = max(z, 0); derivative 0 at z <= 0 */
} ar_lsh_act;

/* One layer's rows: weights or, with the same shapes, their gradients. */
typedef struct ar_lsh_rows {
  float *w;         /* (neurons, ld) row-major; only the first in of a row */
  float *b;         /* (neurons); NULL: the layer has no bias */
  uint32_t neurons; /* rows */
  uint32_t in;      /* inputs per row */
  size_t ld;        /* row stride in floats, >= in */
} ar_lsh_rows;

/* One input sample: dense (dense != NULL, `in` floats) or sparse (dense ==
 * NULL; nnz distinct indices idx, each < in, any order, with values val).
 * Distinct indices are required: the backward kernel scatters to them. */
typedef struct ar_lsh_input {
  const float *dense;  /* (in) or NULL */
  const uint32_t *idx; /* (nnz) */
  const float *val;    /* (nnz) */
  size_t nnz;
} ar_lsh_input;

/* Forward of one sample: for i < n, out[i] = act(dot(w[active[i]], x) +
 * b[active[i]]), where out (n) is caller-owned.  Reads only the n active
 * rows.  Re-entrant: any number of threads may run it on the same layer.
 * Returns AR_OK, AR_INVALID (a NULL array, ld < in) or AR_RANGE (an active
 * id >= neurons or an input index >= in; out is then unspecified); the
 * message goes to err (may be NULL). */
ar_status ar_lsh_forward(const ar_lsh_rows *layer, const ar_lsh_input *x,
                         const uint32_t *active, size_t n, ar_lsh_act act,
                         float *out, ar_err *err);

/* Softmax over the n active outputs only, with SLIDE's multi-label target:
 * each of the nlab labels (distinct ids, each in active) has target mass
 * 1/nlab, every other active neuron 0.  Writes dL/dlogit = p - target
 * into dlogit (n; may alias logit) and the cross-entropy -sum t log p,
 * computed in double with the maximum subtracted, into *loss.  O(n * nlab)
 * to locate the labels (SLIDE puts them first in the active set, so the
 * scan stops early there).  Returns AR_OK, AR_INVALID (n == 0, nlab == 0)
 * or AR_NOTFOUND (a label is not in active). */
ar_status ar_lsh_softmax_active(const float *logit, const uint32_t *active,
                                size_t n, const uint32_t *labels, size_t nlab,
                                float *dlogit, double *loss, ar_err *err);

typedef struct ar_lsh_touched ar_lsh_touched;

/* Backward of one sample, given dout (n) = dL/dout of the active outputs
 * and out (n) from the forward (read only for RELU: g_i = dout_i when
 * out_i > 0, else 0; NONE: g_i = dout_i).  For every i with g_i != 0:
 *   grad->w[active[i]] += g_i * x      (only at x's indices when sparse)
 *   grad->b[active[i]] += g_i          (when grad->b != NULL)
 *   dx += g_i * w[active[i]]           (when dx != NULL)
 * and, when touched != NULL, active[i] is marked in it (every active id,
 * also those with g_i == 0, so that Adam still decays their moments as
 * dense Adam would; the set only says which rows may have changed).
 * dx is dense (in floats) for a dense input; for a sparse input it has nnz
 * entries aligned with x->idx: the gradient with respect to x->val, i.e.
 * only at the input's non-zero positions, which is all an input layer or a
 * sparse upstream needs.  dx is accumulated into (the caller zeroes it).
 * grad must have layer's shape (neurons, in); it may have its own ld.
 * Thread-safety: HOGWILD, see above: concurrent calls for different
 * samples race on shared gradient rows by design; run from one thread in
 * sample order for bit-deterministic results.
 * Returns AR_OK, AR_INVALID (shapes, NULL arrays) or AR_RANGE (ids or
 * indices out of range; nothing is written then). */
ar_status ar_lsh_backward(const ar_lsh_rows *layer, const ar_lsh_input *x,
                          const uint32_t *active, size_t n, ar_lsh_act act,
                          const float *out, const float *dout,
                          const ar_lsh_rows *grad, float *dx,
                          ar_lsh_touched *touched, ar_err *err);

/* ---- touched rows ------------------------------------------------------ */

/* The rows changed in a batch: a bitmap (neurons bits) and the list of
 * marked ids in first-marked order.  Marking is thread-safe and exact (an
 * id enters the list once, by atomic test-and-set on its bitmap word and an
 * atomic list slot); clearing costs O(marked), not O(neurons).
 * Creates a set for ids < neurons.  Returns AR_OK, AR_INVALID or AR_NOMEM. */
ar_status ar_lsh_touched_create(uint32_t neurons, ar_lsh_touched **out,
                                ar_err *err);
void ar_lsh_touched_destroy(ar_lsh_touched *t);
/* The bytes ar_lsh_touched_create allocates for `neurons` rows. */
size_t ar_lsh_touched_bytes(uint32_t neurons);
/* Marks id (< neurons; larger ids are a bug: AR_ASSERT).  Thread-safe. */
void ar_lsh_touched_mark(ar_lsh_touched *t, uint32_t id);
/* Whether id is marked. */
int ar_lsh_touched_has(const ar_lsh_touched *t, uint32_t id);
/* The marked ids (borrowed, valid until the next mark or clear) and their
 * number.  The order depends on the marking threads' interleaving. */
const uint32_t *ar_lsh_touched_ids(const ar_lsh_touched *t, size_t *count);
/* Unmarks every marked id in O(marked).  Not concurrent with marks. */
void ar_lsh_touched_clear(ar_lsh_touched *t);

/* ---- sparse Adam --------------------------------------------------------- */

typedef struct ar_lsh_adam_opts {
  float lr, beta1, beta2, eps;
  int threads; /* rows of a step are split over OpenMP threads; 0 = default */
  uint64_t catch_up; /* steps t <= catch_up: a row's update first makes the
                        moves dense Adam would have made on the steps it
                        missed (see ar_lsh_adam_create); later steps, and
                        every step with 0: lazy, those moves dropped */
} ar_lsh_adam_opts;

/* ---- instruction sets ------------------------------------------------------
 * The inner loops of forward, backward and Adam are built three times
 * (portable C, AVX2+FMA, AVX-512F/BW/VL/DQ) and picked at run time: the
 * widest the CPU has, or ACCELRT_LSH_ISA=portable|avx2|avx512 in the
 * environment, or ar_lsh_isa_set.  All give the same results to float
 * tolerance (the association of sums differs). */
typedef enum ar_lsh_isa {
  AR_LSH_ISA_PORTABLE = 0,
  AR_LSH_ISA_AVX2 = 1,
  AR_LSH_ISA_AVX512 = 2
} ar_lsh_isa;
/* Whether this CPU runs the set (portable: always). */
int ar_lsh_isa_supported(ar_lsh_isa isa);
/* Uses that set from now on, for every thread; AR_UNSUPPORTED when the
 * CPU lacks it.  Not to be called while kernels run. */
ar_status ar_lsh_isa_set(ar_lsh_isa isa);
/* The set in use: "portable", "avx2" or "avx512". */
const char *ar_lsh_isa_name(void);

/* SLIDE's settings: Adam (0.9, 0.999, 1e-8), lr 1e-4; lazy throughout. */
#define AR_LSH_ADAM_OPTS_INIT                                                  \
  { 1e-4f, 0.9f, 0.999f, 1e-8f, 0, 0 }

typedef struct ar_lsh_adam ar_lsh_adam;

/* Adam (Kingma & Ba, 2015) applied only to the rows touched in a batch.
 *
 * Semantics, exactly: a global step t counts ar_lsh_adam_step calls (1, 2,
 * ...); each row r remembers the step s_r of its last update (0: never).
 * When r is touched at step t with gradient g (its row of grad):
 *   m = beta1^(t-s_r-1) * m;  v = beta2^(t-s_r-1) * v     (skipped steps)
 *   m = beta1 * m + (1-beta1) * g;  v = beta2 * v + (1-beta2) * g^2
 *   w -= lr * (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps)
 * so m and v are exactly those of dense Adam fed zero gradients on the
 * skipped steps (up to float rounding of the power), and the update at a
 * touched step equals dense Adam's update at that step, bias correction
 * with the global t included.  On the skipped steps dense Adam would still
 * move w by its decaying momentum, by lr * beta1^j m / (sqrt(beta2^j v) +
 * eps) on the j-th.  Lazy (the default, and every step after catch_up):
 * those moves are dropped, the "lazy" Adam of TF's LazyAdam / PyTorch's
 * SparseAdam for the parameters, but with the moments decayed for skipped
 * steps, which SparseAdam omits.  At a step t <= catch_up: before the
 * update above, with the row's moments as of s_r (k = t-s_r-1 skipped
 * steps, s_r > 0),
 *   w -= lr * S_k * (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps),
 *   S_k = q + q^2 + ... + q^k,  q = beta1 / sqrt(beta2)
 * which is the sum of dense Adam's k moves up to eps and to the skipped
 * steps' bias corrections (this step's are used): SLIDE applies Adam to
 * every weight after each batch, so this is its update at the cost of the
 * touched rows only (catching up early in training and lazy after it
 * reached a given top-1 in about half the iterations lazy Adam took on a
 * 100,000-class head, bench/lsh/README.md).  It needs q < 1 (beta1 < sqrt(beta2)), where the moves
 * shrink; create refuses it otherwise.  Biases follow the same rule with
 * their row's s_r.
 *
 * Creates the state for a layer of `neurons` rows of `in` inputs (has_bias:
 * keep bias moments too): m and v (neurons, in) and the step counters,
 * calloc'ed so rows never touched cost no memory.  The options are copied.
 * Returns AR_OK, AR_INVALID (shape, lr <= 0, betas outside [0, 1), eps <
 * 0, catch_up > 0 with beta1 >= sqrt(beta2)) or AR_NOMEM. */
ar_status ar_lsh_adam_create(uint32_t neurons, uint32_t in, int has_bias,
                             const ar_lsh_adam_opts *opts, ar_lsh_adam **out,
                             ar_err *err);
void ar_lsh_adam_destroy(ar_lsh_adam *a);
/* As create, but the state lives in caller-owned arrays (an engine's
 * planned, checkpointed memory): m and v (neurons, in), mb and vb
 * (neurons; both NULL for no bias), last (neurons).  They must hold a
 * valid state (zeros for a fresh layer) and outlive the handle, which
 * never frees them.  Returns AR_OK, AR_INVALID or AR_NOMEM. */
ar_status ar_lsh_adam_attach(uint32_t neurons, uint32_t in,
                             const ar_lsh_adam_opts *opts, float *m, float *v,
                             float *mb, float *vb, uint64_t *last,
                             ar_lsh_adam **out, ar_err *err);
/* Sets the step count (the next step is t + 1), e.g. after a resume. */
void ar_lsh_adam_set_t(ar_lsh_adam *a, uint64_t t);

/* One Adam step over the rows in touched: advances t, updates layer rows
 * (and biases when both layer->b and the state have them) from grad, then
 * zeroes those grad rows and clears touched, ready for the next batch.
 * Rows are split over threads; each row is owned by one thread, so the
 * result does not depend on the thread count.  Not concurrent with
 * backward calls on the same grad or touched.  Returns AR_OK or AR_INVALID
 * (shapes differ from the state's). */
ar_status ar_lsh_adam_step(ar_lsh_adam *a, const ar_lsh_rows *layer,
                           const ar_lsh_rows *grad, ar_lsh_touched *touched,
                           ar_err *err);

/* The state, borrowed (for tests and checkpoints): the step count, m and v
 * (neurons, in) as of each row's last update, bias moments (neurons, NULL
 * without bias) and the per-row step of the last update. */
uint64_t ar_lsh_adam_t(const ar_lsh_adam *a);
void ar_lsh_adam_state(const ar_lsh_adam *a, const float **m, const float **v,
                       const float **mb, const float **vb,
                       const uint64_t **last);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_LSH_H */
