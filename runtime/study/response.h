/*
 * Private to runtime/study: what a study measures (response.c) -- the
 * responses a study file may name and the numbers of eval.json (one table
 * each), the study file's response: key, and reading a finished run's
 * response from its summary.json, eval.json or metrics.jsonl.  The names
 * are the study file's and runs.csv's; docs/study.md has the table of which
 * file and key each one reads.
 */
#ifndef ACCELRT_STUDY_RESPONSE_H
#define ACCELRT_STUDY_RESPONSE_H

#include "study_file.h"

/* Reads the study file's response: key n (a name, or a one-key mapping
 * {time_to_p1: P}, {key: K}, {eval: K}) into s: resp, resp_x, resp_key,
 * resp_name, better and unit by default, and where it is written.
 * Problems go to c. */
void ar__study_parse_response(study_diags *c, ar_study *s, const ar_ynode *n);

/* Whether the response is read from the run's eval.json. */
bool ar__study_resp_from_eval(ar_study_response_kind k);

/* Reads the response of the finished run in dir (r->run names it in
 * messages): sets r->y and RUN_OK, or RUN_NO_RESPONSE, RUN_NOT_REACHED or
 * RUN_FAILED (a summary that says it was interrupted), and r->note (for an
 * inference_ response, which path was measured).  r->note is NULL only
 * when out of memory. */
void ar__study_read_response(const ar_study *s, const char *dir, study_row *r);

#endif /* ACCELRT_STUDY_RESPONSE_H */
