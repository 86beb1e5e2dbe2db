/*
 * runtime/tenancy private header: the reply to `accelrt ps`, as a table
 * or as JSON (docs/service.md gives both formats).  The service copies
 * what it shows of each job into an ar__ps_job under its lock and formats
 * the copies after releasing it, so a slow user database lookup never
 * holds up the scheduler (whose events take the same lock).
 *
 * Tests: tests/tenancy/test_joblog.c (formats), tests/tenancy/service.sh
 * (through the CLI).
 */
#ifndef ACCELRT_TENANCY_PS_H
#define ACCELRT_TENANCY_PS_H

#include "accelrt/base.h"
#include "accelrt/tenancy.h"

#include <stdint.h>

typedef struct ar__ps_job {
  uint64_t id;
  uint32_t uid;
  char name[128];
  const char *state; /* pending, queued, running, done, failed, cancelled (static) */
  ar_tjob_progress progress;
  uint32_t lane;     /* 0: never admitted */
  double submitted;  /* unix seconds */
  double started, ended; /* unix seconds; 0: not yet (or not known) */
  char error[AR_ERR_MAX + 64]; /* "" when none */
} ar__ps_job;

/* Appends the table: a header line, then per job ID USER STATE ITERATION
 * LOSS SAMPLES/S ETA MEMORY LANE NAME ("-" for what is unknown).  USER is
 * the account name of the uid (the user database is read here). */
void ar__ps_table(ar_sbuf *b, const ar__ps_job *jobs, size_t n);
/* Appends the JSON array, one object per job, and a newline. */
void ar__ps_json(ar_sbuf *b, const ar__ps_job *jobs, size_t n);

#endif
