/*
 * Admission control and placement (Salus' lane design and its lane manager).
 *
 * A job is admitted when the policy allows it and both its persistent
 * block and its lane share fit as disjoint ranges of the arena, which
 * implies the safety condition: sum of P + sum over lanes of the largest E
 * <= capacity.  Waiting jobs are retried in the policy's queue order on
 * every submit, every departure and after every defragmentation, as Salus
 * retried its queue whenever a job left.
 *
 * Departures from Salus: sizes are exact (from the memory plan) rather than
 * profiled hints padded by 10% and 5%, and no 300 MiB reserve is kept; a
 * lane holds only ephemeral memory (Salus sized a new lane P + E and kept
 * the persistent bytes of its jobs inside it), so persistent blocks can be
 * compacted independently of lanes.
 */
#include <string.h>

#include "lanes_impl.h"

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 1;
  size_t ncap = *cap ? *cap * 2 : 16;
  while (ncap < need)
    ncap *= 2;
  void *p = ar_realloc(*arr, ncap * elem);
  if (!p)
    return 0;
  *arr = p;
  *cap = ncap;
  return 1;
}

/* ---- placement building blocks ------------------------------------------ */

int ar__place_new_lane(ar_lanes *l, const ar__job *j, ar__placement *pl) {
  size_t poff, loff;
  if (!ar__lanes_lowest_fit(l, 0, ar__lanes_ephemeral_base(l), j->P, &poff))
    return 0;
  size_t ptop = ar__lanes_persistent_top(l);
  if (poff + j->P > ptop)
    ptop = poff + j->P;
  if (!ar__lanes_highest_fit(l, ptop, l->capacity, j->E, &loff))
    return 0;
  pl->poff = poff;
  pl->lane = NULL;
  pl->new_off = loff;
  return 1;
}

/* Best fit: the smallest lane that holds the job's peak, so large lanes
 * stay free for large jobs (Salus: "the lane with the least free space
 * that still fits"). */
int ar__place_shared(ar_lanes *l, const ar__job *j, ar__placement *pl) {
  ar__lane *best = NULL;
  for (size_t i = 0; i < l->nlanes; i++) {
    ar__lane *ln = &l->lanes[i];
    if (ln->size < j->E)
      continue;
    if (!best || ln->size < best->size ||
        (ln->size == best->size && ln->id < best->id))
      best = ln;
  }
  if (!best)
    return 0;
  size_t poff;
  if (!ar__lanes_lowest_fit(l, 0, ar__lanes_ephemeral_base(l), j->P, &poff))
    return 0;
  pl->poff = poff;
  pl->lane = best;
  pl->new_off = 0;
  return 1;
}

/* ---- the queue ------------------------------------------------------------- */

static int arrival_before(const ar__job *a, const ar__job *b) {
  if (a->arrival != b->arrival)
    return a->arrival < b->arrival;
  return a->id < b->id;
}

static int queue_before(const ar_lanes *l, const ar__job *a, const ar__job *b) {
  return l->policy->queue_before ? l->policy->queue_before(a, b)
                                 : arrival_before(a, b);
}

/* The first queued job of this pass in queue order, or NULL. */
static ar__job *next_waiting(ar_lanes *l) {
  ar__job *best = NULL;
  for (size_t i = 0; i < l->nlive; i++) {
    ar__job *j = l->live[i];
    if (j->state == AR_LANES_QUEUED && j->pass != l->pass &&
        (!best || queue_before(l, j, best)))
      best = j;
  }
  return best;
}

static size_t admitted_count(const ar_lanes *l) {
  size_t n = 0;
  for (size_t i = 0; i < l->nlive; i++)
    n += l->live[i]->state == AR_LANES_ADMITTED;
  return n;
}

static ar_status admit(ar_lanes *l, ar__job *j, const ar__placement *pl) {
  ar__lane *lane = pl->lane;
  if (!lane) {
    AR_ASSERT(l->nlanes < l->cap_lanes); /* reserved by ar_lanes_submit */
    lane = &l->lanes[l->nlanes++];
    memset(lane, 0, sizeof *lane);
    lane->id = l->next_lane_id++;
    lane->off = pl->new_off;
    lane->size = j->E;
  }
  lane->njobs++;
  j->state = AR_LANES_ADMITTED;
  j->lane = lane->id;
  j->poff = pl->poff;
  j->admit_seq = ++l->admit_seq;
  j->reason[0] = '\0';
  if (l->policy->on_admit)
    l->policy->on_admit(l, j, lane);
  return AR_OK;
}

/* Says what a waiting job needs, with numbers, and what it waits for. */
static void explain(ar_lanes *l, ar__job *j, const ar__job *blocker,
                    int limit) {
  char p[32], e[32], f[32];
  ar_lanes_usage u;
  ar_lanes_usage_get(l, &u);
  size_t free_b = u.capacity - u.persistent_bytes - u.lane_bytes;
  ar_lanes_fmt_bytes(j->P, p, sizeof p);
  ar_lanes_fmt_bytes(j->E, e, sizeof e);
  ar_lanes_fmt_bytes(free_b, f, sizeof f);
  if (limit && blocker) {
    snprintf(j->reason, sizeof j->reason,
             "policy %s runs %zu job(s) at a time; waiting for '%s' to finish",
             l->policy->name, l->policy->max_admitted, blocker->name);
    return;
  }
  if (blocker) {
    snprintf(j->reason, sizeof j->reason,
             "policy %s admits in arrival order; waiting behind '%s'",
             l->policy->name, blocker->name);
    return;
  }
  const ar__lane *share = NULL;
  for (size_t i = 0; i < l->nlanes; i++)
    if (l->lanes[i].size >= j->E &&
        (!share || l->lanes[i].size < share->size))
      share = &l->lanes[i];
  size_t need = share ? j->P : j->P + j->E;
  const char *wait = need <= free_b
                         ? "free space is split by departed jobs; waiting for "
                           "defragmentation at the next iteration boundary"
                         : "waiting for a job to finish";
  if (share)
    snprintf(j->reason, sizeof j->reason,
             "needs %s persistent (its %s peak fits lane %u); %s free; %s", p, e,
             (unsigned)share->id, f, wait);
  else
    snprintf(j->reason, sizeof j->reason,
             "needs %s persistent + %s lane; %s free; %s", p, e, f, wait);
}

ar_status ar__lanes_admit_waiting(ar_lanes *l) {
  const ar__lanes_policy *pol = l->policy;
  size_t admitted = admitted_count(l);
  const ar__job *first_blocked = NULL;
  l->pass++;
  for (ar__job *j; (j = next_waiting(l)) != NULL;) {
    j->pass = l->pass;
    if (pol->max_admitted && admitted >= pol->max_admitted)
      continue;
    if (pol->strict_order && first_blocked)
      continue;
    ar__placement pl;
    if (pol->place(l, j, &pl)) {
      AR_CHECK(admit(l, j, &pl));
      admitted++;
    } else if (!first_blocked)
      first_blocked = j;
  }
  /* Reasons last, so the numbers in them describe the final state. */
  const ar__job *running = NULL;
  for (size_t i = 0; i < l->nlive; i++)
    if (l->live[i]->state == AR_LANES_ADMITTED &&
        (!running || l->live[i]->admit_seq < running->admit_seq))
      running = l->live[i];
  for (size_t i = 0; i < l->nlive; i++) {
    ar__job *j = l->live[i];
    if (j->state != AR_LANES_QUEUED)
      continue;
    if (pol->max_admitted && admitted >= pol->max_admitted)
      explain(l, j, running, 1);
    else if (pol->strict_order && first_blocked && j != first_blocked)
      explain(l, j, first_blocked, 0);
    else
      explain(l, j, NULL, 0);
  }
  return AR_OK;
}

/* ---- submit and leave ------------------------------------------------------- */

/* Rounded sizes P and E in a capacity rounded down: alone in the arena. */
static bool fits_alone(size_t capacity, size_t P, size_t E) {
  return P <= capacity && E <= capacity - P;
}

bool ar_lanes_fits_alone(const ar_lanes_opts *opts, size_t persistent, size_t ephemeral) {
  if (!opts || opts->align == 0 || (opts->align & (opts->align - 1)) != 0)
    return false;
  return fits_alone(opts->capacity & ~(opts->align - 1),
                    ar__lanes_round_to(opts->align, persistent),
                    ar__lanes_round_to(opts->align, ephemeral));
}

ar_status ar_lanes_submit(ar_lanes *l, const ar_lanes_job_desc *d,
                          ar_lanes_job_id *out) {
  if (!d || !out)
    return ar_errf(&l->err, AR_INVALID, "ar_lanes_submit: desc and out are required");
  ar_lanes_job_id id = (ar_lanes_job_id)l->njobs + 1;
  char fallback[32];
  snprintf(fallback, sizeof fallback, "job %llu", (unsigned long long)id);
  const char *name = d->name ? d->name : fallback;
  if (d->iterations == 0)
    return ar_errf(&l->err, AR_INVALID,
                   "job '%s' declares 0 iterations; it needs at least 1", name);
  size_t P = ar__lanes_round(l, d->persistent), E = ar__lanes_round(l, d->ephemeral);
  if (!fits_alone(l->capacity, P, E)) {
    char p[32], e[32], c[32];
    return ar_errf(&l->err, AR_INVALID,
                   "job '%s' needs %s persistent + %s ephemeral peak, more than "
                   "the whole arena of %s; raise runtime.memory or lower "
                   "train.batch",
                   name, ar_lanes_fmt_bytes(P, p, sizeof p),
                   ar_lanes_fmt_bytes(E, e, sizeof e),
                   ar_lanes_fmt_bytes(l->capacity, c, sizeof c));
  }
  if (!grow((void **)&l->jobs, &l->cap_jobs, l->njobs + 1, sizeof *l->jobs) ||
      !grow((void **)&l->live, &l->cap_live, l->nlive + 1, sizeof *l->live) ||
      /* At most one lane per live job: reserving it now means admission
       * (also on finish, cancel and defrag) never allocates. */
      !grow((void **)&l->lanes, &l->cap_lanes, l->nlive + 1, sizeof *l->lanes))
    return ar_errf(&l->err, AR_NOMEM, "lanes: out of memory submitting '%s'", name);
  ar__job *j = ar_calloc(1, sizeof *j);
  char *copy = ar_strdup(name);
  if (!j || !copy) {
    ar_free(j);
    ar_free(copy);
    return ar_errf(&l->err, AR_NOMEM, "lanes: out of memory submitting '%s'", name);
  }
  j->id = id;
  j->name = copy;
  j->P = P;
  j->E = E;
  j->iters = d->iterations;
  j->priority = d->priority;
  j->arrival = d->arrival;
  j->state = AR_LANES_QUEUED;
  l->jobs[l->njobs++] = j;
  l->live[l->nlive++] = j;
  *out = id;
  return ar__lanes_admit_waiting(l);
}

static void unlink_live(ar_lanes *l, ar__job *j) {
  for (size_t i = 0; i < l->nlive; i++)
    if (l->live[i] == j) {
      l->live[i] = l->live[--l->nlive];
      return;
    }
  AR_ASSERT(0 && "job not in the live list");
}

static ar_status leave(ar_lanes *l, ar__job *j, ar_lanes_job_state to) {
  if (j->state == AR_LANES_ADMITTED) {
    ar__lane *lane = ar__lanes_lane_get(l, j->lane);
    AR_ASSERT(lane && lane->njobs > 0);
    if (--lane->njobs == 0) /* Salus: a lane dies with its last job. */
      *lane = l->lanes[--l->nlanes];
  }
  j->state = to;
  j->reason[0] = '\0';
  unlink_live(l, j);
  return ar__lanes_admit_waiting(l);
}

ar_status ar_lanes_finish(ar_lanes *l, ar_lanes_job_id id) {
  ar__job *j = ar__lanes_job_get(l, id);
  if (!j)
    return ar_errf(&l->err, AR_NOTFOUND, "no job %llu", (unsigned long long)id);
  if (j->state != AR_LANES_ADMITTED || j->running)
    return ar_errf(&l->err, AR_STATE,
                   "job '%s' cannot finish: it is %s", j->name,
                   j->running ? "running an iteration; call "
                                "ar_lanes_iteration_done first"
                              : "not admitted");
  return leave(l, j, AR_LANES_FINISHED);
}

ar_status ar_lanes_cancel(ar_lanes *l, ar_lanes_job_id id) {
  ar__job *j = ar__lanes_job_get(l, id);
  if (!j)
    return ar_errf(&l->err, AR_NOTFOUND, "no job %llu", (unsigned long long)id);
  if ((j->state != AR_LANES_ADMITTED && j->state != AR_LANES_QUEUED) ||
      j->running)
    return ar_errf(&l->err, AR_STATE, "job '%s' cannot be cancelled: it %s",
                   j->name,
                   j->running ? "is running an iteration; cancel it after "
                                "ar_lanes_iteration_done"
                              : "has already left");
  return leave(l, j, AR_LANES_CANCELLED);
}
