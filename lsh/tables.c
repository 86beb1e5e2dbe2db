/* L hash tables of neuron ids with buckets grown inside fixed pools.
 *
 * SLIDE allocated every bucket of every table up front and zero-filled it
 * (L * 2^bits * capacity ids: 6.7 GB for K=6 DWTA, L=50, capacity 128).
 * Here a table is a directory of 2^bits words (0 = empty bucket, else 1 +
 * the offset of the bucket's block) and a pool of blocks.  A block is
 *
 *   [class, count, aux, bucket, ids[cap(class)]]   aux: FIFO head / reservoir seen
 *
 * and its capacity grows 4, 8, 16, ... up to the bucket capacity: a full
 * block moves to a block of the next class and the old one goes to that
 * class's free list (the `count` word links it, the class word is marked
 * dead).
 *
 * Memory is fixed at create, so that a job's memory plan can count it
 * exactly (ar_lsh_tables_bytes): each pool holds POOL_WORDS(n, nb, cap)
 * words and never grows.  That is enough because a table holds each
 * neuron at most once (builds and re-insertions keep it so), and a bucket
 * of k ids needs a block of at most HDR + max(4, 2k - 2) <= 6 + 2k words
 * when its class is the smallest that holds k; so the live blocks of a
 * table never need more than 6 * min(nb, n) + 2 * n words, plus room for
 * the one block being moved.  When a pool runs out (dead blocks, classes
 * larger than their buckets now need after removals), it is compacted in
 * place: live blocks slide down in pool order, each shrunk to the smallest
 * class that holds its ids (the bucket word says whose directory entry to
 * update).  The directory is calloc'ed and the pools malloc'ed, so pages
 * no bucket touches are never made resident; the plan counts them all.
 *
 * Builds hash rows in parallel, then fill each table from one thread in
 * neuron order; the reservoir draws of table l come from a stream seeded by
 * (seed, l, build number).  Tables are therefore identical for any thread
 * count. */
#include <omp.h>
#include <string.h>

#include "lsh_impl.h"

#define NCLASS 16
#define HDR 4u
#define NONE UINT32_MAX
#define DEAD 0x80000000u /* in a block's class word: on a free list */
#define REINSERT_CHUNK ((size_t)4096)

/* Words of one table's pool for n neurons, nb buckets and bucket capacity
 * cap (see the top of this file). */
static uint64_t pool_words(uint32_t n, uint32_t nb, uint32_t cap) {
  uint64_t m = nb < n ? nb : n;
  return 6 * m + 2 * (uint64_t)n + HDR + cap;
}

typedef struct lsh_table {
  uint32_t *dir;   /* (nb) 0 or 1 + block offset */
  uint32_t *pool;  /* (size) words of blocks, fixed at create */
  size_t len, size; /* words carved, words allocated */
  uint32_t free_head[NCLASS]; /* 0 or 1 + offset of a free block */
  ar_rng rng;
  uint64_t items, nonempty;
  uint64_t compactions;
} lsh_table;

struct ar_lsh_tables {
  ar_err err;
  ar_lsh_tables_opts o;
  uint32_t L, nb;
  uint32_t nclass, ccap[NCLASS]; /* block capacity per class */
  uint32_t built;                /* neurons of the last build */
  uint64_t generation;
  uint32_t *rec;                 /* (neurons, L) bucket last hashed to */
  lsh_table *tab;                /* (L) */
};

uint32_t ar__lsh_tables_neurons(const ar_lsh_tables *t) {
  return t->o.neurons;
}

static ar_status check_opts(const ar_lsh_tables_opts *opts, ar_err *err) {
  if (opts->neurons == 0 || opts->neurons >= NONE)
    return ar_errf(err, AR_INVALID, "lsh tables: neurons=%u; set the layer width",
                   opts->neurons);
  if (opts->capacity < 1 || opts->capacity > 65535)
    return ar_errf(err, AR_INVALID, "lsh tables: capacity %u not in 1..65535",
                   opts->capacity);
  if ((unsigned)opts->policy > AR_LSH_RESERVOIR)
    return ar_errf(err, AR_INVALID, "lsh tables: unknown policy %d",
                   (int)opts->policy);
  return AR_OK;
}

ar_status ar_lsh_tables_bytes(uint32_t L, uint32_t buckets,
                              const ar_lsh_tables_opts *opts, size_t *out,
                              ar_err *err) {
  if (!opts || !out || L == 0 || buckets == 0)
    return ar_errf(err, AR_INVALID, "lsh tables bytes: need opts, out, L and buckets");
  AR_CHECK(check_opts(opts, err));
  uint64_t pw = pool_words(opts->neurons, buckets, opts->capacity);
  if (pw >= NONE - 1)
    return ar_errf(err, AR_RANGE,
                   "lsh tables: %u neurons need %llu words a table, beyond the tables' "
                   "32-bit offsets; sample a narrower layer", opts->neurons,
                   (unsigned long long)pw);
  /* Each term is below 2^62 (L <= 2^32, words < 2^32), and so the sum. */
  uint64_t words = (uint64_t)L * ((uint64_t)buckets + pw + opts->neurons);
  uint64_t bytes = words * sizeof(uint32_t) + sizeof(ar_lsh_tables) +
                   (uint64_t)L * sizeof(lsh_table);
  if (bytes > SIZE_MAX)
    return ar_errf(err, AR_RANGE, "lsh tables: %llu bytes do not fit in memory",
                   (unsigned long long)bytes);
  *out = (size_t)bytes;
  return AR_OK;
}

ar_status ar_lsh_tables_create(const ar_lsh_hash *h,
                               const ar_lsh_tables_opts *opts,
                               ar_lsh_tables **out, ar_err *err) {
  if (!h || !opts || !out)
    return ar_errf(err, AR_INVALID, "lsh tables: NULL argument");
  size_t bytes = 0;
  AR_CHECK(ar_lsh_tables_bytes(h->o.L, h->nb, opts, &bytes, err));
  ar_lsh_tables *t = ar_calloc(1, sizeof *t);
  if (!t)
    return ar_errf(err, AR_NOMEM, "lsh tables: out of memory");
  t->o = *opts;
  t->L = h->o.L;
  t->nb = h->nb;
  for (uint32_t c = 4;; c *= 2) {
    t->ccap[t->nclass++] = c < opts->capacity ? c : opts->capacity;
    if (c >= opts->capacity)
      break;
  }
  size_t nrec = (size_t)opts->neurons * t->L;
  size_t pw = (size_t)pool_words(opts->neurons, t->nb, opts->capacity);
  t->rec = ar_malloc(nrec * sizeof *t->rec);
  t->tab = ar_calloc(t->L, sizeof *t->tab);
  int ok = t->rec && t->tab;
  for (uint32_t l = 0; ok && l < t->L; l++) {
    lsh_table *b = &t->tab[l];
    ok = (b->dir = ar_calloc(t->nb, sizeof(uint32_t))) != NULL &&
         (b->pool = ar_malloc(pw * sizeof(uint32_t))) != NULL;
    b->size = b->pool ? pw : 0;
    ar_rng_seed3(&b->rng, opts->seed, l, 0);
  }
  if (!ok) {
    ar_lsh_tables_destroy(t);
    return ar_errf(err, AR_NOMEM,
                   "lsh tables: out of memory for %u tables of %u buckets and "
                   "%u neurons (%zu bytes)",
                   h->o.L, h->nb, opts->neurons, bytes);
  }
  memset(t->rec, 0xFF, nrec * sizeof *t->rec);
  *out = t;
  return AR_OK;
}

void ar_lsh_tables_destroy(ar_lsh_tables *t) {
  if (!t)
    return;
  for (uint32_t l = 0; t->tab && l < t->L; l++) {
    ar_free(t->tab[l].dir);
    ar_free(t->tab[l].pool);
  }
  ar_free(t->tab);
  ar_free(t->rec);
  ar_free(t);
}

const char *ar_lsh_tables_errmsg(const ar_lsh_tables *t) {
  return t ? t->err.msg : "";
}

static void clear_table(ar_lsh_tables *t, lsh_table *b) {
  if (b->len)
    memset(b->dir, 0, (size_t)t->nb * sizeof *b->dir);
  b->len = 0;
  b->items = b->nonempty = 0;
  memset(b->free_head, 0, sizeof b->free_head);
}

void ar_lsh_tables_clear(ar_lsh_tables *t) {
  for (uint32_t l = 0; l < t->L; l++)
    clear_table(t, &t->tab[l]);
  memset(t->rec, 0xFF, (size_t)t->o.neurons * t->L * sizeof *t->rec);
  t->built = 0;
}

/* The smallest block class that holds `keep` ids. */
static uint32_t class_for(const ar_lsh_tables *t, uint32_t keep) {
  uint32_t cls = 0;
  while (t->ccap[cls] < keep)
    cls++;
  return cls;
}

/* Slides the live blocks of b down in pool order, each shrunk to the
 * smallest class that holds its ids, and empties the free lists.  A FIFO
 * block that is not full has its ring's head at 0 (remove_id rotates it
 * there), so its first `count` words are all it holds. */
static void compact(const ar_lsh_tables *t, lsh_table *b) {
  size_t dst = 0;
  for (size_t off = 0; off < b->len;) {
    uint32_t *blk = b->pool + off, cls = blk[0] & ~DEAD;
    size_t words = HDR + t->ccap[cls];
    if (!(blk[0] & DEAD)) {
      uint32_t cnt = blk[1], bucket = blk[3], ncls = class_for(t, cnt);
      memmove(b->pool + dst, blk, (HDR + cnt) * sizeof *blk);
      b->pool[dst] = ncls;
      b->dir[bucket] = (uint32_t)dst + 1;
      dst += HDR + t->ccap[ncls];
    }
    off += words;
  }
  b->len = dst;
  memset(b->free_head, 0, sizeof b->free_head);
  b->compactions++;
}

/* Offset of a fresh block of class cls for `bucket`, or NONE when the pool
 * is full even after compaction (only when a neuron sits in a table more
 * than once: ar_lsh_tables_insert of an id twice).  Compaction moves
 * blocks: re-read the directory after a call. */
static uint32_t alloc_block(const ar_lsh_tables *t, lsh_table *b, uint32_t cls,
                            uint32_t bucket) {
  uint32_t off;
  if (b->free_head[cls]) {
    off = b->free_head[cls] - 1;
    b->free_head[cls] = b->pool[off + 1];
  } else {
    size_t need = HDR + t->ccap[cls];
    if (b->len + need > b->size)
      compact(t, b);
    if (b->len + need > b->size)
      return NONE;
    off = (uint32_t)b->len;
    b->len += need;
  }
  b->pool[off] = cls;
  b->pool[off + 1] = 0;
  b->pool[off + 2] = 0;
  b->pool[off + 3] = bucket;
  return off;
}

static void free_block(lsh_table *b, uint32_t off) {
  uint32_t cls = b->pool[off];
  b->pool[off] = cls | DEAD;
  b->pool[off + 1] = b->free_head[cls];
  b->free_head[cls] = off + 1;
}

static int insert(const ar_lsh_tables *t, lsh_table *b, uint32_t bucket,
                  uint32_t id) {
  uint32_t off;
  if (!b->dir[bucket]) {
    if ((off = alloc_block(t, b, 0, bucket)) == NONE)
      return 0;
    b->dir[bucket] = off + 1;
    b->nonempty++;
  } else {
    off = b->dir[bucket] - 1;
  }
  uint32_t cnt = b->pool[off + 1], cap = t->o.capacity;
  if (cnt < cap) {
    uint32_t cls = b->pool[off];
    if (cnt == t->ccap[cls]) { /* move to the next class */
      uint32_t noff = alloc_block(t, b, cls + 1, bucket);
      if (noff == NONE)
        return 0;
      off = b->dir[bucket] - 1; /* compaction may have moved it */
      memcpy(b->pool + noff + 1, b->pool + off + 1,
             (size_t)(HDR - 1 + cnt) * sizeof *b->pool);
      free_block(b, off);
      b->dir[bucket] = noff + 1;
      off = noff;
    }
    uint32_t *blk = b->pool + off;
    blk[HDR + cnt] = id;
    blk[1] = cnt + 1;
    if (t->o.policy == AR_LSH_RESERVOIR)
      blk[2]++;
    b->items++;
    return 1;
  }
  uint32_t *blk = b->pool + off;
  if (t->o.policy == AR_LSH_FIFO) {
    blk[HDR + blk[2]] = id; /* overwrite the oldest */
    blk[2] = (blk[2] + 1) % cap;
  } else { /* algorithm R: the (seen+1)-th item replaces a slot w.p. cap/(seen+1) */
    uint64_t j = ar_rng_below(&b->rng, (uint64_t)blk[2] + 1);
    if (j < cap)
      blk[HDR + j] = id;
    if (blk[2] < NONE)
      blk[2]++;
  }
  return 1;
}

/* Builds table l from the bucket records of neurons 0..n-1 (FIFO policy);
 * cnt is nb words of scratch.  The blocks fit the pool (each bucket gets
 * the smallest class that holds what it keeps; see the top). */
static void build_fifo_table(const ar_lsh_tables *t, lsh_table *b, uint32_t l, uint32_t n,
                             uint32_t *cnt) {
  const uint32_t L = t->L, cap = t->o.capacity;
  memset(cnt, 0, (size_t)t->nb * sizeof *cnt);
  for (uint32_t i = 0; i < n; i++)
    cnt[t->rec[(size_t)i * L + l]]++;
  size_t off = 0;
  for (uint32_t k = 0; k < t->nb; k++) {
    if (!cnt[k])
      continue;
    uint32_t keep = cnt[k] < cap ? cnt[k] : cap, cls = class_for(t, keep);
    AR_ASSERT(off + HDR + t->ccap[cls] <= b->size);
    uint32_t *blk = b->pool + off;
    blk[0] = cls;
    blk[1] = keep;
    blk[2] = cnt[k] > cap ? cnt[k] % cap : 0; /* the ring's head */
    blk[3] = k;
    b->dir[k] = (uint32_t)off + 1;
    b->items += keep;
    b->nonempty++;
    cnt[k] = 0; /* from here: the bucket's next insertion number */
    off += HDR + t->ccap[cls];
  }
  b->len = off;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t k = t->rec[(size_t)i * L + l];
    b->pool[b->dir[k] - 1 + HDR + cnt[k] % cap] = i;
    cnt[k]++;
  }
}

static void reverse(uint32_t *a, uint32_t n) {
  for (uint32_t i = 0; i < n / 2; i++) {
    uint32_t x = a[i];
    a[i] = a[n - 1 - i];
    a[n - 1 - i] = x;
  }
}

static void remove_id(const ar_lsh_tables *t, lsh_table *b, uint32_t bucket,
                      uint32_t id) {
  if (!b->dir[bucket])
    return;
  uint32_t off = b->dir[bucket] - 1, *blk = b->pool + off, cnt = blk[1];
  uint32_t *ids = blk + HDR, p = 0;
  while (p < cnt && ids[p] != id)
    p++;
  if (p == cnt)
    return; /* evicted already */
  if (t->o.policy == AR_LSH_FIFO) {
    uint32_t head = blk[2];
    if (head) { /* rotate the ring so that the oldest is first */
      reverse(ids, head);
      reverse(ids + head, cnt - head);
      reverse(ids, cnt);
      p = (p + cnt - head) % cnt;
      blk[2] = 0;
    }
    memmove(ids + p, ids + p + 1, (size_t)(cnt - p - 1) * sizeof *ids);
  } else {
    ids[p] = ids[cnt - 1];
    if (blk[2] > cnt - 1)
      blk[2]--;
  }
  blk[1] = cnt - 1;
  b->items--;
  if (cnt == 1) {
    free_block(b, off);
    b->dir[bucket] = 0;
    b->nonempty--;
  }
}

ar_status ar_lsh_tables_insert(ar_lsh_tables *t, uint32_t id,
                               const uint32_t *buckets) {
  if (id >= t->o.neurons)
    return ar_errf(&t->err, AR_RANGE, "lsh tables: id %u >= neurons %u", id,
                   t->o.neurons);
  for (uint32_t l = 0; l < t->L; l++)
    if (buckets[l] >= t->nb)
      return ar_errf(&t->err, AR_RANGE, "lsh tables: bucket %u >= %u (table %u)",
                     buckets[l], t->nb, l);
  for (uint32_t l = 0; l < t->L; l++) {
    if (!insert(t, &t->tab[l], buckets[l], id))
      return ar_errf(&t->err, AR_NOMEM,
                     "lsh tables: table %u's pool is full: an id was inserted into it "
                     "more often than once without being re-inserted", l);
    t->rec[(size_t)id * t->L + l] = buckets[l];
  }
  if (id >= t->built)
    t->built = id + 1;
  return AR_OK;
}

static ar_status check_hash(ar_lsh_tables *t, const ar_lsh_hash *h, size_t ld,
                            const char *what) {
  if (!h || h->o.L != t->L || h->nb != t->nb)
    return ar_errf(&t->err, AR_INVALID,
                   "lsh tables %s: the family must have L=%u and %u buckets "
                   "as at create",
                   what, t->L, t->nb);
  if (ld < h->o.dim)
    return ar_errf(&t->err, AR_INVALID, "lsh tables %s: ld %zu < dim %u", what,
                   ld, h->o.dim);
  return AR_OK;
}

/* Hashes rows ids[i] (or i when ids is NULL) of w into out (count, L). */
static ar_status hash_rows(ar_lsh_tables *t, const ar_lsh_hash *h,
                           const float *w, size_t ld, const uint32_t *ids,
                           size_t count, uint32_t *out, int nt) {
  if (h->o.family == AR_LSH_SRP) {
    ar_status bs = ar__lsh_srp_rows(h, w, ld, ids, count, out, nt);
    if (bs == AR_OK)
      return AR_OK;
    if (bs != AR_UNSUPPORTED)
      return ar_errf(&t->err, bs, "lsh tables: out of memory hashing rows");
  }
  ar_lsh_scratch **sc = ar_calloc((size_t)nt, sizeof *sc);
  ar_status st = sc ? AR_OK : AR_NOMEM;
  for (int i = 0; st == AR_OK && i < nt; i++)
    st = ar_lsh_scratch_create(h, NULL, &sc[i], NULL);
  if (st == AR_OK) {
#pragma omp parallel num_threads(nt)
    {
      ar_lsh_scratch *s = sc[omp_get_thread_num()];
#pragma omp for schedule(static)
      for (size_t i = 0; i < count; i++) {
        size_t r = ids ? ids[i] : i;
        ar_lsh_hash_dense(h, w + r * ld, s, out + i * t->L);
      }
    }
  }
  for (int i = 0; sc && i < nt; i++)
    ar_lsh_scratch_destroy(sc[i]);
  ar_free(sc);
  if (st != AR_OK)
    return ar_errf(&t->err, AR_NOMEM, "lsh tables: out of memory for scratch");
  return AR_OK;
}

static int nthreads(const ar_lsh_tables *t) {
  return t->o.threads > 0 ? t->o.threads : omp_get_max_threads();
}

ar_status ar_lsh_tables_build(ar_lsh_tables *t, const ar_lsh_hash *h,
                              const float *w, uint32_t n, size_t ld) {
  AR_CHECK(check_hash(t, h, ld, "build"));
  if (n > t->o.neurons)
    return ar_errf(&t->err, AR_INVALID,
                   "lsh tables build: %u rows but the tables hold %u neurons", n,
                   t->o.neurons);
  ar_lsh_tables_clear(t);
  int nt = nthreads(t);
  AR_CHECK(hash_rows(t, h, w, ld, NULL, n, t->rec, nt));
  t->generation++;
  int failed = 0;
  for (uint32_t l = 0; l < t->L; l++)
    ar_rng_seed3(&t->tab[l].rng, t->o.seed, l, t->generation);
  if (t->o.policy == AR_LSH_FIFO) {
    /* FIFO tables are built directly: count each bucket's ids, lay the
     * blocks out at the size the inserts would have grown them to, and
     * write every id at its ring slot (insertion k of a bucket goes to
     * slot k mod capacity, so the last writer is the one a FIFO keeps).
     * The same contents as inserting neuron by neuron, without moving
     * blocks as they grow. */
#pragma omp parallel num_threads(nt)
    {
      uint32_t *cnt = ar_malloc((size_t)t->nb * sizeof *cnt);
      if (!cnt) {
#pragma omp atomic write
        failed = 1;
      }
#pragma omp for schedule(dynamic, 1)
      for (uint32_t l = 0; l < t->L; l++)
        if (cnt)
          build_fifo_table(t, &t->tab[l], l, n, cnt);
      ar_free(cnt);
    }
  } else {
    /* Reservoir draws depend on the insertion sequence: insert in neuron
     * order, in blocks of neurons whose bucket records (block x L) stay in
     * cache while every table takes the block.  Each table gets its ids in
     * neuron order from one thread, so the result does not depend on the
     * thread count. */
    const uint32_t block = 4096;
    for (uint32_t lo = 0; lo < n && !failed; lo += block) {
      const uint32_t hi = n - lo < block ? n : lo + block;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
      for (uint32_t l = 0; l < t->L; l++) {
        lsh_table *b = &t->tab[l];
        for (uint32_t i = lo; i < hi; i++)
          if (!insert(t, b, t->rec[(size_t)i * t->L + l], i)) {
#pragma omp atomic write
            failed = 1;
            break;
          }
      }
    }
  }
  if (failed) {
    ar_lsh_tables_clear(t);
    return ar_errf(&t->err, AR_NOMEM,
                   "lsh tables build: out of memory for %u neurons x %u tables",
                   n, t->L);
  }
  t->built = n;
  return AR_OK;
}

ar_status ar_lsh_tables_reinsert(ar_lsh_tables *t, const ar_lsh_hash *h,
                                 const float *w, size_t ld,
                                 const uint32_t *ids, size_t count) {
  AR_CHECK(check_hash(t, h, ld, "reinsert"));
  for (size_t i = 0; i < count; i++)
    if (ids[i] >= t->built)
      return ar_errf(&t->err, AR_RANGE,
                     "lsh tables reinsert: id %u at %zu >= %u neurons built",
                     ids[i], i, t->built);
  if (count == 0)
    return AR_OK;
  /* The new buckets of REINSERT_CHUNK ids at a time: the working memory
   * stays small however many rows moved.  Each table still takes the ids in
   * their order, so the result is that of one pass. */
  const size_t chunk = count < REINSERT_CHUNK ? count : REINSERT_CHUNK;
  uint32_t *nw = ar_malloc(chunk * t->L * sizeof *nw);
  if (!nw)
    return ar_errf(&t->err, AR_NOMEM, "lsh tables reinsert: out of memory");
  int nt = nthreads(t);
  ar_status st = AR_OK;
  int failed = 0;
  for (size_t lo = 0; lo < count && st == AR_OK && !failed; lo += chunk) {
    const size_t n = count - lo < chunk ? count - lo : chunk;
    const uint32_t *cid = ids + lo;
    st = hash_rows(t, h, w, ld, cid, n, nw, nt);
    if (st != AR_OK)
      break;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (uint32_t l = 0; l < t->L; l++) {
      lsh_table *b = &t->tab[l];
      for (size_t i = 0; i < n; i++) {
        uint32_t *rec = &t->rec[(size_t)cid[i] * t->L + l];
        uint32_t nb = nw[i * t->L + l];
        if (*rec == nb)
          continue;
        if (*rec != NONE)
          remove_id(t, b, *rec, cid[i]);
        if (!insert(t, b, nb, cid[i])) {
#pragma omp atomic write
          failed = 1;
          break;
        }
        *rec = nb;
      }
    }
  }
  ar_free(nw);
  if (st != AR_OK)
    return st;
  if (failed) {
    ar_lsh_tables_clear(t);
    return ar_errf(&t->err, AR_NOMEM,
                   "lsh tables reinsert: a table's pool is full; tables emptied, rebuild");
  }
  return AR_OK;
}

const uint32_t *ar_lsh_tables_bucket(const ar_lsh_tables *t, uint32_t l,
                                     uint32_t b, uint32_t *count) {
  *count = 0;
  if (l >= t->L || b >= t->nb || !t->tab[l].dir[b])
    return NULL;
  const uint32_t *blk = t->tab[l].pool + (t->tab[l].dir[b] - 1);
  *count = blk[1];
  return blk + HDR;
}

void ar_lsh_tables_stats_get(const ar_lsh_tables *t, ar_lsh_tables_stats *out) {
  memset(out, 0, sizeof *out);
  out->L = t->L;
  out->buckets_per_table = t->nb;
  out->capacity = t->o.capacity;
  out->neurons_built = t->built;
  for (uint32_t l = 0; l < t->L; l++) {
    out->items += t->tab[l].items;
    out->nonempty_buckets += t->tab[l].nonempty;
    out->pool_bytes += t->tab[l].size * sizeof(uint32_t);
    out->pool_used_bytes += t->tab[l].len * sizeof(uint32_t);
    out->compactions += t->tab[l].compactions;
  }
  out->directory_bytes = (size_t)t->L * t->nb * sizeof(uint32_t);
  out->record_bytes = (size_t)t->o.neurons * t->L * sizeof(uint32_t);
  out->total_bytes = out->directory_bytes + out->record_bytes +
                     out->pool_bytes + sizeof *t + t->L * sizeof *t->tab;
}

/* For sampling.c. */
uint32_t ar__lsh_tables_L(const ar_lsh_tables *t) { return t->L; }
uint32_t ar__lsh_tables_nb(const ar_lsh_tables *t) { return t->nb; }
