/*
 * Private to runtime/study: what a study measures (response.c) -- the
 * responses a study file may name, the numbers of eval.json, and reading a
 * finished run's response from its summary.json, eval.json or
 * metrics.jsonl.  The names here are the study file's and runs.csv's;
 * docs/study.md has the table of which file and key each one reads.
 */
#ifndef ACCELRT_STUDY_RESPONSE_H
#define ACCELRT_STUDY_RESPONSE_H

#include "study_impl.h"

typedef struct study_response {
  const char *name; /* as the study file names it */
  ar_study_response_kind kind;
  int better;       /* +1 higher is better, -1 lower, 0 the file says */
  const char *unit;
} study_response;

typedef struct study_eval_key {
  const char *key;  /* a number accelrt eval writes to eval.json */
  int better;
  const char *unit;
} study_eval_key;

/* The response the scalar n names, or NULL. */
const study_response *ar__study_response_named(const ar_ynode *n);

/* The eval.json number the scalar n names ({eval: KEY}), or NULL. */
const study_eval_key *ar__study_eval_key_named(const ar_ynode *n);

/* Whether the response is read from the run's eval.json. */
bool ar__study_resp_from_eval(ar_study_response_kind k);

/* Reads the response of the finished run in dir (r->run names it in
 * messages): sets r->y and RUN_OK, or RUN_NO_RESPONSE, RUN_NOT_REACHED or
 * RUN_FAILED (a summary that says it was interrupted), and r->note (for an
 * inference_ response, which path was measured).  r->note is NULL only
 * when out of memory. */
void ar__study_read_response(const ar_study *s, const char *dir, study_row *r);

#endif /* ACCELRT_STUDY_RESPONSE_H */
