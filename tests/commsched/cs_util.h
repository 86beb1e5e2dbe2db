/* Shared helpers for the commsched tests: building graphs in one line per
 * op and reading schedules back as arrays indexed by transfer id. */
#ifndef TESTS_COMMSCHED_UTIL_H
#define TESTS_COMMSCHED_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accelrt/commsched.h"

static inline ar_commsched_graph *new_graph(void) {
  ar_commsched_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_graph_create(&g, &err), AR_OK);
  return g;
}

/* Adds a recv on `channel` taking t seconds; returns its op id. */
static inline ar_commsched_op recv_op(ar_commsched_graph *g, const char *name,
                                      uint32_t channel, double t) {
  ar_commsched_op op;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_graph_add_recv(g, name, 1000, channel, t, &op, &err) !=
      AR_OK)
    fail_msg("add_recv %s: %s", name ? name : "(null)", err.msg);
  return op;
}

/* Adds a compute op taking t seconds that needs the ops in deps[0..n). */
static inline ar_commsched_op compute_op(ar_commsched_graph *g,
                                         const char *name, double t, size_t n,
                                         const ar_commsched_op *deps) {
  ar_commsched_op op;
  ar_err err = AR_ERR_INIT;
  assert_int_equal(ar_commsched_graph_add_compute(g, name, t, &op, &err),
                   AR_OK);
  for (size_t i = 0; i < n; i++)
    if (ar_commsched_graph_add_edge(g, deps[i], op, &err) != AR_OK)
      fail_msg("add_edge: %s", err.msg);
  return op;
}

static inline void seal(ar_commsched_graph *g) {
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_graph_seal(g, &err) != AR_OK)
    fail_msg("seal: %s", err.msg);
}

static inline ar_commsched_schedule *schedule(const ar_commsched_graph *g,
                                              ar_commsched_order order,
                                              uint64_t seed, uint64_t iter) {
  ar_commsched_schedule_opts o = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
  o.order = order;
  o.seed = seed;
  o.iteration = iter;
  ar_commsched_schedule *s = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_schedule_create(g, &o, &s, &err) != AR_OK)
    fail_msg("schedule: %s", err.msg);
  return s;
}

/* Priority of transfer t (which must be listed). */
static inline uint32_t prio_of(const ar_commsched_schedule *s, uint32_t t) {
  const ar_commsched_entry *e = ar_commsched_schedule_find(s, t);
  if (!e)
    fail_msg("transfer %u not listed", t);
  return e->priority;
}

static inline uint32_t number_of(const ar_commsched_schedule *s, uint32_t t) {
  const ar_commsched_entry *e = ar_commsched_schedule_find(s, t);
  if (!e)
    fail_msg("transfer %u not listed", t);
  return e->number;
}

/* Transfer id of a recv op. */
static inline uint32_t tid(const ar_commsched_graph *g, ar_commsched_op op) {
  return ar_commsched_graph_transfer(g, op);
}

static inline void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

#endif /* TESTS_COMMSCHED_UTIL_H */
