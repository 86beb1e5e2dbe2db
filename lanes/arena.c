/*
 * The arena: the handle's lifecycle, lookups, the free-range search that
 * placement uses, the getters, and the invariant check.
 *
 * Allocations in the arena are the persistent blocks of admitted jobs and
 * the lanes.  The search helpers treat them as one set of ranges, so a
 * hole left by a departed job is reused before defragmentation whenever a
 * new block or lane fits in it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lanes_impl.h"

ar_status ar_lanes_create(const ar_lanes_opts *opts, ar_lanes **out,
                          ar_err *err) {
  if (!opts || !out)
    return ar_errf(err, AR_INVALID, "ar_lanes_create: opts and out are required");
  if (opts->align == 0 || (opts->align & (opts->align - 1)) != 0)
    return ar_errf(err, AR_INVALID,
                   "lanes: align %zu is not a power of two; use 256", opts->align);
  if (opts->capacity < opts->align)
    return ar_errf(err, AR_INVALID,
                   "lanes: capacity of %zu bytes is below one alignment unit "
                   "(%zu bytes); set runtime.memory",
                   opts->capacity, opts->align);
  const ar__lanes_policy *pol =
      ar__lanes_policy_find(opts->policy ? opts->policy : "pack");
  if (!pol) {
    char names[128];
    return ar_errf(err, AR_INVALID, "lanes: unknown policy '%s'; use one of %s",
                   opts->policy, ar__lanes_policy_list(names, sizeof names));
  }
  if (!(opts->default_iteration_s > 0) || !isfinite(opts->default_iteration_s))
    return ar_errf(err, AR_INVALID,
                   "lanes: default_iteration_s %g must be a positive number of "
                   "seconds",
                   opts->default_iteration_s);
  ar_lanes *l = ar_calloc(1, sizeof *l);
  if (!l)
    return ar_errf(err, AR_NOMEM, "lanes: out of memory creating the handle");
  l->raw_capacity = opts->capacity;
  l->align = opts->align;
  l->capacity = opts->capacity & ~(opts->align - 1);
  l->default_iter_s = opts->default_iteration_s;
  l->policy = pol;
  l->next_lane_id = 1;
  *out = l;
  return AR_OK;
}

void ar_lanes_destroy(ar_lanes *l) {
  if (!l)
    return;
  for (size_t i = 0; i < l->njobs; i++) {
    ar_free(l->jobs[i]->name);
    ar_free(l->jobs[i]);
  }
  ar_free(l->jobs);
  ar_free(l->live);
  ar_free(l->lanes);
  ar_free(l);
}

const char *ar_lanes_errmsg(const ar_lanes *l) { return l ? l->err.msg : ""; }

ar__job *ar__lanes_job_get(const ar_lanes *l, ar_lanes_job_id id) {
  if (id == 0 || id > l->njobs)
    return NULL;
  return l->jobs[id - 1];
}

ar__lane *ar__lanes_lane_get(const ar_lanes *l, ar_lanes_lane_id id) {
  for (size_t i = 0; i < l->nlanes; i++)
    if (l->lanes[i].id == id)
      return &l->lanes[i];
  return NULL;
}

size_t ar__lanes_round_to(size_t align, size_t bytes) {
  if (bytes == 0)
    return align;
  if (bytes > SIZE_MAX - align)
    return SIZE_MAX & ~(align - 1);
  return (bytes + align - 1) & ~(align - 1);
}

size_t ar__lanes_round(const ar_lanes *l, size_t bytes) {
  return ar__lanes_round_to(l->align, bytes);
}

/* 1 when [off, off + size) overlaps a persistent block or a lane. */
static int overlaps_any(const ar_lanes *l, size_t off, size_t size) {
  for (size_t i = 0; i < l->nlive; i++) {
    const ar__job *j = l->live[i];
    if (j->state == AR_LANES_ADMITTED && off < j->poff + j->P &&
        j->poff < off + size)
      return 1;
  }
  for (size_t i = 0; i < l->nlanes; i++) {
    const ar__lane *ln = &l->lanes[i];
    if (off < ln->off + ln->size && ln->off < off + size)
      return 1;
  }
  return 0;
}

/* The k-th allocation (live jobs' persistent blocks first, then lanes) as
 * [*start, *end); returns 0 for a job slot that holds no block. */
static int allocation(const ar_lanes *l, size_t k, size_t *start, size_t *end) {
  if (k < l->nlive) {
    const ar__job *j = l->live[k];
    if (j->state != AR_LANES_ADMITTED)
      return 0;
    *start = j->poff;
    *end = j->poff + j->P;
    return 1;
  }
  const ar__lane *ln = &l->lanes[k - l->nlive];
  *start = ln->off;
  *end = ln->off + ln->size;
  return 1;
}

/* Candidate offsets are the range's own ends and the ends of every
 * allocation: a free range always starts where an allocation (or the
 * range) ends, and ends where one begins.  O(n^2), fine for the tens to
 * hundreds of jobs one device holds. */
int ar__lanes_lowest_fit(const ar_lanes *l, size_t lo, size_t hi, size_t size,
                         size_t *off) {
  int found = 0;
  size_t best = 0;
  for (size_t k = 0; k <= l->nlive + l->nlanes; k++) {
    size_t c = lo, unused;
    if (k > 0 && !allocation(l, k - 1, &unused, &c))
      continue;
    if (c < lo || c > hi || hi - c < size || (found && c >= best))
      continue;
    if (!overlaps_any(l, c, size)) {
      best = c;
      found = 1;
    }
  }
  if (found)
    *off = best;
  return found;
}

int ar__lanes_highest_fit(const ar_lanes *l, size_t lo, size_t hi, size_t size,
                          size_t *off) {
  int found = 0;
  size_t best = 0;
  for (size_t k = 0; k <= l->nlive + l->nlanes; k++) {
    size_t end = hi, unused;
    if (k > 0 && !allocation(l, k - 1, &end, &unused))
      continue;
    if (end > hi || end < size || end - size < lo)
      continue;
    size_t c = end - size;
    if (found && c <= best)
      continue;
    if (!overlaps_any(l, c, size)) {
      best = c;
      found = 1;
    }
  }
  if (found)
    *off = best;
  return found;
}

size_t ar__lanes_persistent_top(const ar_lanes *l) {
  size_t top = 0;
  for (size_t i = 0; i < l->nlive; i++) {
    const ar__job *j = l->live[i];
    if (j->state == AR_LANES_ADMITTED && j->poff + j->P > top)
      top = j->poff + j->P;
  }
  return top;
}

size_t ar__lanes_ephemeral_base(const ar_lanes *l) {
  size_t base = l->capacity;
  for (size_t i = 0; i < l->nlanes; i++)
    if (l->lanes[i].off < base)
      base = l->lanes[i].off;
  return base;
}

size_t ar__lanes_lane_peak(const ar_lanes *l, const ar__lane *lane) {
  size_t peak = 0;
  for (size_t i = 0; i < l->nlive; i++) {
    const ar__job *j = l->live[i];
    if (j->state == AR_LANES_ADMITTED && j->lane == lane->id && j->E > peak)
      peak = j->E;
  }
  return peak;
}

/* ---- getters ------------------------------------------------------------ */

ar_status ar_lanes_job(const ar_lanes *l, ar_lanes_job_id id,
                       ar_lanes_job_info *out) {
  const ar__job *j = ar__lanes_job_get(l, id);
  if (!j)
    return AR_NOTFOUND;
  memset(out, 0, sizeof *out);
  out->state = j->state;
  out->lane = j->state == AR_LANES_ADMITTED ? j->lane : 0;
  out->persistent_offset = j->poff;
  out->persistent = j->P;
  out->ephemeral = j->E;
  out->iterations_done = j->done;
  out->iterations = j->iters;
  out->used_s = j->used_s;
  out->remaining_s = ar__lanes_remaining(l, j);
  out->running = j->running;
  out->reason = j->state == AR_LANES_QUEUED ? j->reason : "";
  return AR_OK;
}

static void lane_fill(const ar__lane *ln, ar_lanes_lane_info *out) {
  out->id = ln->id;
  out->offset = ln->off;
  out->size = ln->size;
  out->jobs = ln->njobs;
  out->running = ln->running ? ln->running->id : 0;
}

size_t ar_lanes_lane_count(const ar_lanes *l) { return l->nlanes; }

ar_status ar_lanes_lane_at(const ar_lanes *l, size_t index,
                           ar_lanes_lane_info *out) {
  if (index >= l->nlanes)
    return AR_RANGE;
  /* The index-th highest offset: lanes are few, a selection pass will do. */
  for (size_t i = 0; i < l->nlanes; i++) {
    size_t higher = 0;
    for (size_t k = 0; k < l->nlanes; k++)
      if (l->lanes[k].off > l->lanes[i].off)
        higher++;
    if (higher == index) {
      lane_fill(&l->lanes[i], out);
      return AR_OK;
    }
  }
  AR_ASSERT(0 && "lanes overlap");
  return AR_CORRUPT;
}

ar_status ar_lanes_lane(const ar_lanes *l, ar_lanes_lane_id id,
                        ar_lanes_lane_info *out) {
  const ar__lane *ln = ar__lanes_lane_get(l, id);
  if (!ln)
    return AR_NOTFOUND;
  lane_fill(ln, out);
  return AR_OK;
}

void ar_lanes_usage_get(const ar_lanes *l, ar_lanes_usage *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < l->nlive; i++) {
    if (l->live[i]->state == AR_LANES_ADMITTED) {
      out->admitted++;
      out->persistent_bytes += l->live[i]->P;
    } else
      out->queued++;
  }
  for (size_t i = 0; i < l->nlanes; i++)
    out->lane_bytes += l->lanes[i].size;
  out->capacity = l->capacity;
}

void ar_lanes_free_each(const ar_lanes *l, ar_lanes_range_fn fn, void *ctx) {
  /* Allocations are disjoint: the next one is the lowest that ends above
   * the cursor.  O(n^2), as the fit searches. */
  size_t at = 0;
  for (;;) {
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t k = 0; k < l->nlive + l->nlanes; k++) {
      size_t s, e;
      if (allocation(l, k, &s, &e) && e > at && s < lo) {
        lo = s;
        hi = e;
      }
    }
    if (lo == SIZE_MAX) {
      if (at < l->capacity)
        fn(ctx, at, l->capacity - at);
      return;
    }
    if (lo > at)
      fn(ctx, at, lo - at);
    at = hi;
  }
}

int ar_lanes_fragmented(const ar_lanes *l) {
  ar_lanes_usage u;
  ar_lanes_usage_get(l, &u);
  if (ar__lanes_persistent_top(l) != u.persistent_bytes)
    return 1;
  if (l->capacity - ar__lanes_ephemeral_base(l) != u.lane_bytes)
    return 1;
  for (size_t i = 0; i < l->nlanes; i++)
    if (l->lanes[i].size != ar__lanes_lane_peak(l, &l->lanes[i]))
      return 1;
  return 0;
}

const char *ar_lanes_fmt_bytes(size_t bytes, char *buf, size_t size) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, size, "%zu B", bytes);
  else if (v < 10.0)
    snprintf(buf, size, "%.1f %s", v, units[u]);
  else
    snprintf(buf, size, "%.0f %s", v, units[u]);
  return buf;
}

/* ---- invariants ----------------------------------------------------------- */

/* Every live job: its state, its persistent block, its lane. */
static ar_status check_jobs(const ar_lanes *l, size_t *admitted, size_t *sumP, ar_err *err) {
  const size_t a = l->align;
  for (size_t i = 0; i < l->nlive; i++) {
    const ar__job *j = l->live[i];
    if (j->state == AR_LANES_QUEUED) {
      if (j->running)
        return ar_errf(err, AR_CORRUPT, "queued job %llu is running",
                       (unsigned long long)j->id);
      continue;
    }
    if (j->state != AR_LANES_ADMITTED)
      return ar_errf(err, AR_CORRUPT, "job %llu in the live list has left",
                     (unsigned long long)j->id);
    (*admitted)++;
    *sumP += j->P;
    if (j->poff % a || j->P % a || j->P == 0 || j->poff > l->capacity ||
        l->capacity - j->poff < j->P)
      return ar_errf(err, AR_CORRUPT,
                     "job %llu: persistent block [%zu, +%zu) misaligned or "
                     "outside the arena of %zu",
                     (unsigned long long)j->id, j->poff, j->P, l->capacity);
    const ar__lane *ln = ar__lanes_lane_get(l, j->lane);
    if (!ln)
      return ar_errf(err, AR_CORRUPT, "job %llu is in lane %u, which is gone",
                     (unsigned long long)j->id, (unsigned)j->lane);
    if (j->E > ln->size)
      return ar_errf(err, AR_CORRUPT, "job %llu: peak %zu exceeds its lane %u of %zu",
                     (unsigned long long)j->id, j->E, (unsigned)ln->id, ln->size);
    if (j->running && ln->running != j)
      return ar_errf(err, AR_CORRUPT, "job %llu runs but lane %u does not say so",
                     (unsigned long long)j->id, (unsigned)ln->id);
  }
  return AR_OK;
}

/* Every lane: its job count, its block, the job it runs. */
static ar_status check_lanes(const ar_lanes *l, size_t *sum_peaks, size_t *sum_lanes,
                             ar_err *err) {
  const size_t a = l->align;
  for (size_t i = 0; i < l->nlanes; i++) {
    const ar__lane *ln = &l->lanes[i];
    size_t n = 0;
    for (size_t k = 0; k < l->nlive; k++)
      if (l->live[k]->state == AR_LANES_ADMITTED && l->live[k]->lane == ln->id)
        n++;
    if (n == 0 || n != ln->njobs)
      return ar_errf(err, AR_CORRUPT, "lane %u counts %zu jobs but holds %zu",
                     (unsigned)ln->id, ln->njobs, n);
    if (ln->off % a || ln->size % a || ln->size == 0 ||
        ln->off > l->capacity || l->capacity - ln->off < ln->size)
      return ar_errf(err, AR_CORRUPT,
                     "lane %u [%zu, +%zu) misaligned or outside the arena",
                     (unsigned)ln->id, ln->off, ln->size);
    if (ln->running && (ln->running->state != AR_LANES_ADMITTED ||
                        ln->running->lane != ln->id || !ln->running->running))
      return ar_errf(err, AR_CORRUPT, "lane %u runs a job that is not its own",
                     (unsigned)ln->id);
    *sum_peaks += ar__lanes_lane_peak(l, ln);
    *sum_lanes += ln->size;
  }
  return AR_OK;
}

/* Pairwise disjoint: every allocation against every other. */
static ar_status check_disjoint(const ar_lanes *l, ar_err *err) {
  for (size_t i = 0; i < l->nlive; i++) {
    const ar__job *x = l->live[i];
    if (x->state != AR_LANES_ADMITTED)
      continue;
    for (size_t k = i + 1; k < l->nlive; k++) {
      const ar__job *y = l->live[k];
      if (y->state == AR_LANES_ADMITTED && x->poff < y->poff + y->P &&
          y->poff < x->poff + x->P)
        return ar_errf(err, AR_CORRUPT, "persistent blocks of jobs %llu and %llu overlap",
                       (unsigned long long)x->id, (unsigned long long)y->id);
    }
    for (size_t k = 0; k < l->nlanes; k++) {
      const ar__lane *ln = &l->lanes[k];
      if (x->poff < ln->off + ln->size && ln->off < x->poff + x->P)
        return ar_errf(err, AR_CORRUPT, "persistent block of job %llu overlaps lane %u",
                       (unsigned long long)x->id, (unsigned)ln->id);
    }
  }
  for (size_t i = 0; i < l->nlanes; i++)
    for (size_t k = i + 1; k < l->nlanes; k++) {
      const ar__lane *x = &l->lanes[i], *y = &l->lanes[k];
      if (x->off < y->off + y->size && y->off < x->off + x->size)
        return ar_errf(err, AR_CORRUPT, "lanes %u and %u overlap", (unsigned)x->id,
                       (unsigned)y->id);
    }
  return AR_OK;
}

ar_status ar_lanes_check(const ar_lanes *l, ar_err *err) {
  size_t admitted = 0, sumP = 0, sum_peaks = 0, sum_lanes = 0;
  AR_CHECK(check_jobs(l, &admitted, &sumP, err));
  AR_CHECK(check_lanes(l, &sum_peaks, &sum_lanes, err));
  AR_CHECK(check_disjoint(l, err));
  size_t ptop = ar__lanes_persistent_top(l), ebase = ar__lanes_ephemeral_base(l);
  if (ptop > ebase)
    return ar_errf(err, AR_CORRUPT,
                   "persistent region ends at %zu, above the lowest lane at %zu",
                   ptop, ebase);
  /* The safety condition (Salus, memory safety of lanes). */
  if (sumP + sum_peaks > l->capacity || sumP + sum_lanes > l->capacity)
    return ar_errf(err, AR_CORRUPT,
                   "safety condition broken: persistent %zu + lane peaks %zu "
                   "(lanes %zu) > capacity %zu",
                   sumP, sum_peaks, sum_lanes, l->capacity);
  if (l->policy->max_admitted && admitted > l->policy->max_admitted)
    return ar_errf(err, AR_CORRUPT, "%s admits at most %zu jobs, %zu admitted",
                   l->policy->name, l->policy->max_admitted, admitted);
  return AR_OK;
}
