/*
 * runtime/tenancy private header: the service's operator metrics as text.
 *
 * A snapshot (ar__msnap) holds the service's aggregates at one moment: the
 * runner's totals (ar_runner_stats, taken under the runner's lock) and the
 * number of jobs the server holds in each state.  Nothing in it names a
 * job, a user, an id or a path: the HTTP port that shows it is not
 * authenticated (docs/service.md, "Metrics for operators").  A history
 * (ar__mhist) keeps the last AR__MHIST_CAP snapshots' memory and rates for
 * the status page.  This file only formats; http.c serves.
 *
 * Tests: tests/tenancy/test_metrics.c (the formats, on synthetic
 * snapshots), tests/tenancy/metrics.sh (a live server scraped).
 */
#ifndef ACCELRT_TENANCY_METRICS_H
#define ACCELRT_TENANCY_METRICS_H

#include "accelrt/base.h"
#include "accelrt/tenancy.h"

#include <stddef.h>
#include <stdint.h>

/* The job states the gauge accelrt_jobs{state} reports, in this order. */
typedef enum ar__mstate {
  AR__MS_PENDING = 0,
  AR__MS_QUEUED,
  AR__MS_RUNNING,
  AR__MS_DONE,
  AR__MS_FAILED,
  AR__MS_CANCELLED,
  AR__MS_COUNT
} ar__mstate;

/* The state a job of the runner counts as (admitted: running; stopped:
 * queued, as the journal keeps it). */
ar__mstate ar__mstate_of(ar_tjob_state s);
/* Its label: "pending", "queued", "running", "done", "failed", "cancelled". */
const char *ar__mstate_name(ar__mstate s);

typedef struct ar__msnap {
  double time;      /* unix seconds when it was taken */
  char device[32];  /* "host", "cuda:0" */
  char policy[16];  /* the lanes policy */
  size_t jobs[AR__MS_COUNT];
  ar_runner_stats run;
} ar__msnap;

/* Recent snapshots, oldest first, at most AR__MHIST_CAP (a ring). */
#define AR__MHIST_CAP 300
typedef struct ar__mpoint {
  double time;                          /* unix seconds */
  size_t persistent_bytes, lane_bytes; /* in use */
  size_t running, queued;               /* jobs */
  double samples_per_s;                 /* since the point before (0 for the first) */
} ar__mpoint;
typedef struct ar__mhist {
  ar__mpoint p[AR__MHIST_CAP];
  size_t first, n;
  uint64_t last_samples; /* the newest point's snapshot's counter */
} ar__mhist;

/* Appends s, dropping the oldest point when full; the rate is the samples
 * trained since the previous point over the seconds between them. */
void ar__mhist_push(ar__mhist *h, const ar__msnap *s);
/* The newest point's samples/s; 0 when it holds fewer than two points. */
double ar__mhist_rate(const ar__mhist *h);

/* Prometheus text exposition format (version 0.0.4) of s; samples_per_s
 * is the gauge's value (ar__mhist_rate).  On out of memory out->oom. */
void ar__metrics_prometheus(const ar__msnap *s, double samples_per_s, ar_sbuf *out);
/* The status page's JSON: the same aggregates, the lanes, and h's points
 * as arrays (one per field), period_s apart. */
void ar__metrics_status_json(const ar__msnap *s, const ar__mhist *h, double period_s,
                             ar_sbuf *out);

#endif
