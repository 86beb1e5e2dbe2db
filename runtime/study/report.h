/*
 * Private to runtime/study: report.html (report.c), one self-contained page
 * (inline CSS and SVG, no scripts, nothing loaded from anywhere) that opens
 * offline.
 */
#ifndef ACCELRT_STUDY_REPORT_H
#define ACCELRT_STUDY_REPORT_H

#include "study_impl.h"

/* Writes the report of the rows (as runs.csv holds them) and their
 * analysis r of design d to path, atomically; splits[f] (k entries, NULL
 * for most) is the analysis within each level of factor f.  AR_IO,
 * AR_NOMEM. */
ar_status ar__study_report(const ar_study *s, const study_row *rows, int n_rows,
                           const ar_fx_design *d, const ar_fx_result *r,
                           ar_fx_split *const *splits, const char *path, ar_err *err);

#endif /* ACCELRT_STUDY_REPORT_H */
