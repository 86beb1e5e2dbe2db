/*
 * lanes/ private header: the handle, jobs, lanes and the policy table.
 *
 * Bookkeeping: every job ever submitted lives in `jobs`, indexed by id - 1,
 * so ids resolve in O(1).  `live` holds the queued and admitted jobs only,
 * so admission passes and picks never walk finished jobs.  `lanes` holds the
 * lanes that exist, in no particular order.
 */
#ifndef ACCELRT_LANES_IMPL_H
#define ACCELRT_LANES_IMPL_H

#include "accelrt/lanes.h"

#define AR__LANES_REASON_MAX 256

/* Iteration times kept per job for its estimate (sched.c): the median of
 * the last few, so one iteration the operating system descheduled does
 * not make a short job look long. */
#define AR__LANES_RECENT 5
/* srtf measures this many iterations of a newcomer before trusting its
 * estimate (policy_srtf.c). */
#define AR__LANES_PROBE 3

typedef struct ar__job {
  ar_lanes_job_id id;
  char *name;                /* owned */
  size_t P, E;               /* rounded up to the alignment, >= align */
  uint64_t iters, done;
  int priority;
  double arrival;
  ar_lanes_job_state state;
  ar_lanes_lane_id lane;     /* 0 unless admitted */
  size_t poff;               /* persistent block offset while admitted */
  int running;
  double used_s;             /* measured device time */
  double vtime_s;            /* fair's virtual time (see policy_fair.c) */
  uint64_t measured;         /* iterations with a measured time */
  double recent_s[AR__LANES_RECENT]; /* the last measured times, a ring */
  uint64_t last_pick;        /* pick sequence number, 0 = never picked */
  uint64_t admit_seq;        /* order of admission, for stable ties */
  uint64_t pass;             /* last admission pass that considered it */
  char reason[AR__LANES_REASON_MAX];
} ar__job;

typedef struct ar__lane {
  ar_lanes_lane_id id;
  size_t off, size;
  size_t njobs;
  ar__job *running;          /* borrowed, NULL when idle */
} ar__lane;

/* Where a job would go: its persistent block and either an existing lane
 * (lane != NULL) or a new lane at new_off. */
typedef struct ar__placement {
  size_t poff;
  ar__lane *lane;
  size_t new_off;
} ar__placement;

/* A policy: admission/placement behaviour plus the pick rule.  A new
 * policy is one file defining one of these, plus its line in policies.c. */
typedef struct ar__lanes_policy {
  const char *name;
  /* Most jobs admitted at once; 0 = no limit (fifo: 1). */
  size_t max_admitted;
  /* 1: a waiting job is admitted only when every job that comes before it
   * in queue order was admitted (no overtaking, fifo); 0: any waiting job
   * that fits is admitted (Salus retried every waiting job). */
  int strict_order;
  /* Order of the admission queue: nonzero when a goes before b.  NULL:
   * arrival, then id. */
  int (*queue_before)(const ar__job *a, const ar__job *b);
  /* Finds a place for j; returns 1 and fills *pl, or 0 when it does not
   * fit now.  Built from ar__place_new_lane and ar__place_shared. */
  int (*place)(ar_lanes *l, const ar__job *j, ar__placement *pl);
  /* Called when j joins lane (optional). */
  void (*on_admit)(ar_lanes *l, ar__job *j, ar__lane *lane);
  /* Pick order among a lane's runnable jobs: nonzero when a runs before b. */
  int (*pick_before)(const ar_lanes *l, const ar__job *a, const ar__job *b);
} ar__lanes_policy;

struct ar_lanes {
  size_t capacity;           /* usable: rounded down to align */
  size_t raw_capacity;
  size_t align;
  double default_iter_s;
  const ar__lanes_policy *policy;

  ar__job **jobs;            /* (njobs) all jobs, index id - 1 */
  size_t njobs, cap_jobs;
  ar__job **live;            /* (nlive) queued and admitted jobs */
  size_t nlive, cap_live;
  ar__lane *lanes;           /* (nlanes) */
  size_t nlanes, cap_lanes;

  ar_lanes_lane_id next_lane_id;
  uint64_t pick_seq, admit_seq, pass;
  ar_err err;
};

extern const ar__lanes_policy ar__policy_fifo, ar__policy_pack,
    ar__policy_srtf, ar__policy_fair, ar__policy_priority;
/* policies.c: the table, looked up by name; NULL when unknown. */
const ar__lanes_policy *ar__lanes_policy_find(const char *name);
/* "fifo, pack, ..." for messages. */
/* The policies' names, comma separated, into buf (returned). */
const char *ar__lanes_policy_list(char *buf, size_t cap);

/* arena.c: layout helpers. */
ar__job *ar__lanes_job_get(const ar_lanes *l, ar_lanes_job_id id);
ar__lane *ar__lanes_lane_get(const ar_lanes *l, ar_lanes_lane_id id);
size_t ar__lanes_round_to(size_t align, size_t bytes); /* align: a power of two */
size_t ar__lanes_round(const ar_lanes *l, size_t bytes);
/* Lowest offset in [lo, hi) where `size` bytes overlap no block or lane. */
int ar__lanes_lowest_fit(const ar_lanes *l, size_t lo, size_t hi, size_t size,
                         size_t *off);
/* Highest such offset. */
int ar__lanes_highest_fit(const ar_lanes *l, size_t lo, size_t hi, size_t size,
                          size_t *off);
/* End of the highest persistent block (0 when none). */
size_t ar__lanes_persistent_top(const ar_lanes *l);
/* Offset of the lowest lane (capacity when none). */
size_t ar__lanes_ephemeral_base(const ar_lanes *l);
/* Largest ephemeral peak among the lane's admitted jobs. */
size_t ar__lanes_lane_peak(const ar_lanes *l, const ar__lane *lane);

/* admission.c: placement building blocks for the policies. */
/* A new lane of size E above the persistent region (highest free range). */
int ar__place_new_lane(ar_lanes *l, const ar__job *j, ar__placement *pl);
/* Best fit into an existing lane: the smallest lane with size >= E. */
int ar__place_shared(ar_lanes *l, const ar__job *j, ar__placement *pl);
/* Retries every waiting job in the policy's queue order. */
ar_status ar__lanes_admit_waiting(ar_lanes *l);

/* sched.c */
double ar__lanes_iter_estimate(const ar_lanes *l, const ar__job *j);
double ar__lanes_remaining(const ar_lanes *l, const ar__job *j);

#endif
