/* Active sets from the L buckets of one input: union, top-k by frequency,
 * threshold; always-include ids; minimum and maximum counts.
 *
 * The scratch holds a 16-bit word per neuron: the number of tables an id was
 * found in, with the high bit set once the id is chosen.  Every word set by
 * a call is in the call's output or its `seen` list and is reset before
 * returning, so a call costs O(candidates), not O(neurons).
 *
 * Departures from SLIDE: it padded every active set with random neurons to
 * 1,000, so a layer below ~1,000 neurons was never sparse; here the floor is
 * min_active (0 by default), and random fill never repeats an id. */
#include <math.h>
#include <string.h>

#include "lsh_impl.h"

#define CHOSEN 0x8000u
#define MOST 0x7fffu /* counts stop here (a hand-filled bucket may repeat an id) */

static void choose(ar_lsh_scratch *s, uint32_t id, uint32_t *out, size_t *k) {
  s->cnt[id] |= CHOSEN;
  out[(*k)++] = id;
}

/* The arguments of ar_lsh_sample against the tables; *maxa is the most
 * ids it may return. */
static ar_status sample_check(const ar_lsh_tables *t, const ar_lsh_sample_opts *o,
                              const uint32_t *always, size_t n_always, ar_lsh_scratch *s,
                              size_t out_cap, size_t *maxa) {
  uint32_t n = ar__lsh_tables_neurons(t);
  if (s->n < n)
    return ar_errf(&s->err, AR_INVALID,
                   "lsh sample: scratch made for %u neurons, the tables hold "
                   "%u; create it with these tables",
                   s->n, n);
  if ((unsigned)o->strategy > AR_LSH_THRESHOLD ||
      (o->strategy == AR_LSH_THRESHOLD && o->threshold < 1))
    return ar_errf(&s->err, AR_INVALID,
                   "lsh sample: bad strategy %d or threshold %u (must be >= 1)",
                   (int)o->strategy, o->threshold);
  *maxa = o->max_active && o->max_active < n ? o->max_active : n;
  if (out_cap < *maxa || out_cap < n_always)
    return ar_errf(&s->err, AR_INVALID,
                   "lsh sample: out holds %zu ids, needs max(max_active %zu, "
                   "always %zu)",
                   out_cap, *maxa, n_always);
  for (size_t i = 0; i < n_always; i++)
    if (always[i] >= n)
      return ar_errf(&s->err, AR_RANGE,
                     "lsh sample: always-include id %u >= %u neurons",
                     always[i], n);
  return AR_OK;
}

/* Tables whose buckets are located before any is read: their headers'
 * misses overlap instead of coming one after another. */
#define BUCKET_BATCH 64

/* Counting strategies (threshold, top-k): every id of the L buckets is
 * counted (s->cnt, s->seen), then up to `take` chosen by their counts.
 * Returns how many ids were seen (their counters are the caller's to
 * clear).
 *
 * The count loop has no data-dependent branch (whether an id is new is a
 * coin toss to the predictor: a mispredict per id cost more than the
 * counting): seen[nseen] is written for every id and kept when its word
 * was 0 (seen holds one slot past the neurons for that write); a chosen
 * id's word, and a count at MOST, keep their value. */
static size_t count_and_choose(const ar_lsh_tables *t, const uint32_t *buckets,
                               const ar_lsh_sample_opts *o, ar_lsh_scratch *s, size_t take,
                               uint32_t *out, size_t *k) {
  const uint32_t L = ar__lsh_tables_L(t);
  uint16_t *cnt = s->cnt;
  uint32_t *seen = s->seen;
  size_t nseen = 0;
  for (uint32_t l0 = 0; l0 < L; l0 += BUCKET_BATCH) {
    const uint32_t nl = L - l0 < BUCKET_BATCH ? L - l0 : BUCKET_BATCH;
    const uint32_t *ids[BUCKET_BATCH];
    uint32_t c[BUCKET_BATCH];
    for (uint32_t l = 0; l < nl; l++)
      ids[l] = ar_lsh_tables_bucket(t, l0 + l, buckets[l0 + l], &c[l]);
    for (uint32_t l = 0; l < nl; l++)
      for (uint32_t j = 0; j < c[l]; j++) {
        const uint32_t id = ids[l][j], w = cnt[id];
        seen[nseen] = id;
        nseen += w == 0;
        cnt[id] = (uint16_t)(w + (w < MOST)); /* a chosen id's word is above MOST */
      }
  }
  if (o->strategy == AR_LSH_THRESHOLD) {
    for (size_t i = 0, got = 0; i < nseen && got < take; i++)
      if (cnt[seen[i]] >= o->threshold) {
        choose(s, seen[i], out, k);
        got++;
      }
  } else if (take > 0 && nseen > 0) {
    /* The first `room` ids by count descending, in the order they were
     * seen among equal counts (counts clamp at L: a hand-filled bucket may
     * hold an id twice).  An id's rank is L - count; slot rank + 1 of
     * hist counts them, two histograms (even and odd positions) halving
     * the chain of increments to one slot. */
    const size_t room = take < nseen ? take : nseen;
    uint32_t hist[2][1026]; /* slots 0..L: L + 1 of each cleared */
    memset(hist[0], 0, (L + 1) * sizeof hist[0][0]);
    memset(hist[1], 0, (L + 1) * sizeof hist[1][0]);
    for (size_t i = 0; i < nseen; i++) {
      const uint32_t v = cnt[seen[i]];
      hist[i & 1][L - (v < L ? v : L) + 1]++;
    }
    /* hist[0][r + 1] becomes the ids ranked before r; the cut is the rank
     * at which the ids ranked before it and at it reach room. */
    uint32_t cut = L - 1;
    size_t before = 0;
    for (uint32_t r = 0; r < L; r++) {
      const size_t at = (size_t)hist[0][r + 1] + hist[1][r + 1];
      hist[0][r + 1] = (uint32_t)before;
      if (before < room && before + at >= room)
        cut = r;
      before += at;
    }
    /* Only ids ranked at or before the cut are placed: those before it at
     * their place, those at it after them while room is left. */
    size_t fill = hist[0][cut + 1];
    for (size_t i = 0; i < nseen; i++) {
      const uint32_t v = cnt[seen[i]], r = L - (v < L ? v : L);
      if (r < cut)
        s->tmp[hist[0][r + 1]++] = seen[i];
      else if (r == cut && fill < room)
        s->tmp[fill++] = seen[i];
    }
    for (size_t i = 0; i < room; i++)
      choose(s, s->tmp[i], out, k);
  }
  return nseen;
}

/* Random ids not chosen yet, until *k reaches target (of n neurons). */
static void top_up(ar_lsh_scratch *s, uint32_t n, size_t target, ar_rng *rng, uint32_t *out,
                   size_t *k) {
  if (*k >= target)
    return;
  size_t want = target - *k;
  if (2 * want > n - *k) { /* dense fill: partial Fisher-Yates of the rest */
    size_t m = 0;
    for (uint32_t id = 0; id < n; id++)
      if (!(s->cnt[id] & CHOSEN))
        s->tmp[m++] = id;
    for (size_t i = 0; i < want; i++) {
      size_t j = i + ar_rng_below(rng, m - i);
      uint32_t x = s->tmp[j];
      s->tmp[j] = s->tmp[i];
      s->tmp[i] = x;
      choose(s, x, out, k);
    }
    return;
  }
  while (*k < target) {
    uint32_t id = (uint32_t)ar_rng_below(rng, n);
    if (!(s->cnt[id] & CHOSEN))
      choose(s, id, out, k);
  }
}

ar_status ar_lsh_sample(const ar_lsh_tables *t, const uint32_t *buckets,
                        const ar_lsh_sample_opts *o, const uint32_t *always,
                        size_t n_always, ar_lsh_scratch *s, ar_rng *rng,
                        uint32_t *out, size_t out_cap, size_t *out_count) {
  size_t maxa = 0;
  AR_CHECK(sample_check(t, o, always, n_always, s, out_cap, &maxa));
  uint32_t n = ar__lsh_tables_neurons(t), L = ar__lsh_tables_L(t);
  size_t k = 0, nseen = 0;
  for (size_t i = 0; i < n_always; i++)
    if (!(s->cnt[always[i]] & CHOSEN))
      choose(s, always[i], out, &k);
  size_t limit = maxa > k ? maxa - k : 0, take = limit;
  if (o->strategy != AR_LSH_THRESHOLD && o->budget && o->budget < take)
    take = o->budget;
  if (o->strategy == AR_LSH_UNION) {
    size_t got = 0;
    for (uint32_t l = 0; l < L && got < take; l++) {
      uint32_t c;
      const uint32_t *ids = ar_lsh_tables_bucket(t, l, buckets[l], &c);
      for (uint32_t j = 0; j < c && got < take; j++)
        if (!(s->cnt[ids[j]] & CHOSEN)) {
          choose(s, ids[j], out, &k);
          got++;
        }
    }
  } else {
    nseen = count_and_choose(t, buckets, o, s, take, out, &k);
  }
  top_up(s, n, o->min_active < maxa ? o->min_active : maxa, rng, out, &k);
  for (size_t i = 0; i < k; i++)
    s->cnt[out[i]] = 0;
  for (size_t i = 0; i < nseen; i++)
    s->cnt[s->seen[i]] = 0;
  *out_count = k;
  return AR_OK;
}

/* ---- keeping the highest outputs (sparse.rescore) ------------------------ */

/* A NaN ranks below every number, so every comparison below is total. */
static float rank_of(float v) { return v != v ? -INFINITY : v; }

/* Moves the ids of [lo, hi) whose value passes (above p; equal to p when
 * eq) to the front, with their values; returns where they end.  Branch
 * free: each id is swapped with the first that did not pass, and the
 * count advances by the comparison's result. */
static size_t partition(uint32_t *ids, float *vals, size_t lo, size_t hi, float p, bool eq) {
  size_t w = lo;
  for (size_t i = lo; i < hi; i++) {
    const uint32_t id = ids[i];
    const float v = vals[i], r = rank_of(v);
    ids[i] = ids[w];
    vals[i] = vals[w];
    ids[w] = id;
    vals[w] = v;
    w += eq ? r == p : r > p;
  }
  return w;
}

/* A pivot for keeping want - lo of [lo, hi): in a long range the value at
 * that rank among 31 evenly spaced samples (the first split then lands
 * near the cut: on a 100,000-class head's 2,000 candidates this halves
 * the time of a median of three), else the median of three. */
static float pivot(const float *vals, size_t lo, size_t hi, size_t want) {
  const size_t len = hi - lo;
  if (len <= 64) {
    const float a = rank_of(vals[lo]), b = rank_of(vals[lo + len / 2]), c = rank_of(vals[hi - 1]);
    return a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
  }
  enum { SAMPLES = 31 };
  float smp[SAMPLES]; /* descending: insertion sort as they are read */
  for (size_t i = 0; i < SAMPLES; i++) {
    const float x = rank_of(vals[lo + (2 * i + 1) * len / (2 * SAMPLES)]);
    size_t j = i;
    for (; j > 0 && smp[j - 1] < x; j--)
      smp[j] = smp[j - 1];
    smp[j] = x;
  }
  const size_t r = (want - lo) * SAMPLES / len;
  return smp[r < SAMPLES ? r : SAMPLES - 1];
}

size_t ar_lsh_keep_top(uint32_t *ids, float *vals, size_t from, size_t n, size_t k) {
  if (from >= n || k >= n - from)
    return n;
  /* Quickselect: [lo, gt) above the pivot, [gt, eq) equal to it (many
   * equal values, e.g. relu's zeros, cost one pass), the rest below; the
   * pivot is a value of the range, so each round shrinks it. */
  size_t lo = from, hi = n;
  const size_t want = from + k;
  while (hi - lo > 1) {
    const float p = pivot(vals, lo, hi, want);
    const size_t gt = partition(ids, vals, lo, hi, p, false);
    if (want <= gt) {
      hi = gt;
      continue;
    }
    const size_t eq = partition(ids, vals, gt, hi, p, true);
    if (want <= eq)
      break; /* the cut falls among the values equal to p */
    lo = eq;
  }
  return want;
}
