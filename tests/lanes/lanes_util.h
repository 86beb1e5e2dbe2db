/* Shared checks for the lanes tests: they recompute, from the public
 * getters only, what the library promises. */
#ifndef TESTS_LANES_UTIL_H
#define TESTS_LANES_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>

#include "accelrt/lanes.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static inline ar_lanes *make(const char *policy, size_t capacity) {
  ar_lanes_opts o = AR_LANES_OPTS_INIT;
  o.policy = policy;
  o.capacity = capacity;
  ar_lanes *l = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_lanes_create(&o, &l, &err), AR_OK);
  return l;
}

static inline ar_lanes_job_id submit(ar_lanes *l, const char *name, size_t P,
                                     size_t E, uint64_t iters, double arrival) {
  ar_lanes_job_desc d = AR_LANES_JOB_DESC_INIT;
  d.name = name;
  d.persistent = P;
  d.ephemeral = E;
  d.iterations = iters;
  d.arrival = arrival;
  ar_lanes_job_id id = 0;
  assert_int_equal(ar_lanes_submit(l, &d, &id), AR_OK);
  return id;
}

static inline ar_lanes_job_info info(const ar_lanes *l, ar_lanes_job_id id) {
  ar_lanes_job_info ji;
  assert_int_equal(ar_lanes_job(l, id, &ji), AR_OK);
  return ji;
}

static inline void check_ok(const ar_lanes *l) {
  ar_err err = AR_ERR_INIT;
  ar_status s = ar_lanes_check(l, &err);
  if (s != AR_OK)
    fail_msg("ar_lanes_check: %s", err.msg);
}

/* Independent safety check over job ids 1..njobs: sum of P over admitted
 * jobs plus, per lane, the largest E among its jobs fits the capacity. */
static inline void check_safety(const ar_lanes *l, ar_lanes_job_id njobs) {
  ar_lanes_usage u;
  ar_lanes_usage_get(l, &u);
  size_t nl = ar_lanes_lane_count(l), sumP = 0, sumPeak = 0;
  for (size_t k = 0; k < nl; k++) {
    ar_lanes_lane_info li;
    assert_int_equal(ar_lanes_lane_at(l, k, &li), AR_OK);
    size_t peak = 0, n = 0;
    for (ar_lanes_job_id id = 1; id <= njobs; id++) {
      ar_lanes_job_info ji = info(l, id);
      if (ji.state == AR_LANES_ADMITTED && ji.lane == li.id) {
        n++;
        if (ji.ephemeral > peak)
          peak = ji.ephemeral;
      }
    }
    assert_int_equal(n, li.jobs);
    assert_true(peak <= li.size);
    sumPeak += peak;
  }
  for (ar_lanes_job_id id = 1; id <= njobs; id++) {
    ar_lanes_job_info ji = info(l, id);
    if (ji.state == AR_LANES_ADMITTED)
      sumP += ji.persistent;
  }
  assert_int_equal(sumP, u.persistent_bytes);
  assert_true(sumP + sumPeak <= u.capacity);
}

/* After defragmentation: persistent blocks tile [0, sumP) and lanes tile
 * [capacity - lane bytes, capacity), with no gaps, lanes at their peaks. */
static inline void check_compact(const ar_lanes *l, ar_lanes_job_id njobs) {
  ar_lanes_usage u;
  ar_lanes_usage_get(l, &u);
  size_t nl = ar_lanes_lane_count(l), top = u.capacity;
  for (size_t k = 0; k < nl; k++) { /* highest first */
    ar_lanes_lane_info li;
    assert_int_equal(ar_lanes_lane_at(l, k, &li), AR_OK);
    assert_int_equal(li.offset + li.size, top);
    top = li.offset;
  }
  assert_int_equal(u.capacity - top, u.lane_bytes);
  /* Blocks: walk upwards from 0, each must start where the last ended. */
  size_t next = 0, seen = 0;
  for (;;) {
    int found = 0;
    for (ar_lanes_job_id id = 1; id <= njobs; id++) {
      ar_lanes_job_info ji = info(l, id);
      if (ji.state == AR_LANES_ADMITTED && ji.persistent_offset == next) {
        next += ji.persistent;
        seen++;
        found = 1;
        break;
      }
    }
    if (!found)
      break;
  }
  assert_int_equal(seen, u.admitted);
  assert_int_equal(next, u.persistent_bytes);
  assert_false(ar_lanes_fragmented(l));
}

#endif
