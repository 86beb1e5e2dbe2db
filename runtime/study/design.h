/*
 * Private to runtime/study: the design of a parsed study (design.c) -- which
 * cells are planned (all, or those of a 2^(k-p) fraction), the randomised
 * run order, and the ar_fx_design the analysis and the printed aliases
 * work on.
 */
#ifndef ACCELRT_STUDY_DESIGN_H
#define ACCELRT_STUDY_DESIGN_H

#include "study_impl.h"

/* Fills s->n_cells, s->planned, s->n_planned, s->n_runs and the run order
 * s->run_cell, s->run_rep (Fisher-Yates from the study's seed) from the
 * factors, generators and replicates.  AR_OK or AR_NOMEM (what was
 * allocated stays in s for ar_study_destroy). */
ar_status ar__study_make_design(ar_study *s);

/* The study as an ar_fx_design.  levels, names and lnames are the
 * caller's arrays of AR_FX_MAX_FACTORS entries that *d points into; the
 * strings are borrowed from s. */
void ar__study_fx_design(const ar_study *s, ar_fx_design *d, int *levels, const char **names,
                         const char *const **lnames);

#endif /* ACCELRT_STUDY_DESIGN_H */
