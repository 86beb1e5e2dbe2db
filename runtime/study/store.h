/*
 * Private to runtime/study: the durable record of a study in its output
 * folder (store.c).
 *
 * OUT/design.txt holds the design the rows belong to (the factors and
 * their overrides, generators, response, replicates, seed, the base job's
 * contents), so that a changed study file is never mixed with old rows.
 * OUT/runs.csv holds one row per finished run.  The durability rule: a run
 * counts as done only once its row is in runs.csv, written with one write()
 * of the whole line and an fsync.  A row cut short by a crash is dropped on
 * the next start (the file is truncated to its last newline) and that run
 * redone.  runs.csv files of earlier versions load unchanged: the columns
 * and the status names are the same.
 */
#ifndef ACCELRT_STUDY_STORE_H
#define ACCELRT_STUDY_STORE_H

#include "study_impl.h"

/* Writes OUT/design.txt when there is none (AR_STATE instead when resume
 * is set: nothing to resume), or checks that the one there is this
 * study's (AR_STATE with the first differing line when not).  AR_IO,
 * AR_NOMEM. */
ar_status ar__study_store_check_design(const ar_study *s, bool resume, ar_err *err);

/* Reads OUT/runs.csv (absent: no rows): drops a partial last line (says so
 * on stderr, and truncates the file when repair is set), checks the header
 * against this study's, and returns the rows, a run's later row replacing
 * an earlier one, in *out (free with ar__study_rows_free) and their number
 * in *n.  AR_STATE for another study's file, AR_CORRUPT for a row that
 * does not parse or is not of this design (with FILE:LINE), AR_IO,
 * AR_NOMEM. */
ar_status ar__study_store_read(const ar_study *s, bool repair, study_row **out, int *n,
                               ar_err *err);

/* Appends r to OUT/runs.csv (creating it with its header) in one write,
 * then fsyncs.  AR_IO, AR_NOMEM. */
ar_status ar__study_store_append(const ar_study *s, const study_row *r, ar_err *err);

#endif /* ACCELRT_STUDY_STORE_H */
