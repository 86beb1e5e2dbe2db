/*
 * Private to runtime/study: reading a study file (study_file.c: its keys,
 * declared in the spec module's schema language and checked by it;
 * factors.c: factors and fraction; response.c: the response) and checking
 * the study against its base job (validate.c: every level alone, every
 * planned cell, what the base job can measure).  Both report FILE:LINE:COL diagnostics into
 * one ar_diags.
 */
#ifndef ACCELRT_STUDY_FILE_H
#define ACCELRT_STUDY_FILE_H

#include "study_impl.h"

/* Where a study file's problems go. */
typedef struct study_diags {
  ar_diags *d;
  bool nomem; /* a diagnostic could not be stored: the load is AR_NOMEM */
} study_diags;

/* Adds a diagnostic at line:col of the study file about key path `path`
 * (NULL: the file as a whole); study_file.c. */
void ar__study_diag(study_diags *c, int line, int col, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Helpers for the parts of the file with a grammar of their own
 * (study_file.c): a single value, or false after reporting "expected a
 * single value"; a copy of text (NULL and c->nomem when out of memory);
 * "key=value" as --set receives the scalar n (plain as written, quoted
 * text quoted again so that YAML reads the same string). */
bool ar__study_scalar(study_diags *c, const ar_ynode *n, const char *key);
char *ar__study_strdup(study_diags *c, const char *text);
char *ar__study_override(study_diags *c, const char *key, const ar_ynode *n);

/* A job file named by node n of the study file, resolved against the
 * study file's folder (ar_free it); NULL after reporting at n (key) that
 * it cannot be read ("cannot read WHAT 'x' ..."), or on no memory. */
char *ar__study_file_path(study_diags *c, const ar_study *s, const ar_ynode *n,
                          const char *key, const char *what);

/* factors: (factors.c): s->k factors with their keys and levels, or
 * problems in c. */
void ar__study_parse_factors(study_diags *c, ar_study *s, const ar_ynode *n);
/* fraction: (factors.c), after the factors: s->gens. */
void ar__study_parse_fraction(study_diags *c, ar_study *s, const ar_ynode *n);

/* Checks the parsed study against its base job (validate.c): the base
 * alone with the fixed overrides (its problems at `base` or at the
 * override under set:), whether the job can give the response and take
 * eval: and ranks:, every level of every factor alone, then every planned
 * cell.  Fills s->kind and s->job_seed.  Problems go to c. */
void ar__study_validate(study_diags *c, ar_study *s, ar_srcpos base);

/* Loads the base job `base` (s->base, or a cell's: ar__study_base) with
 * the fixed overrides plus extra[0..n_extra); ar_spec_load's status,
 * *spec and *jd. */
ar_status ar__study_load_job(const ar_study *s, const char *base, const char *const *extra,
                             int n_extra, ar_spec **spec, ar_diags *jd);

/* Whether a device name is a CUDA device ("cuda:N"). */
bool ar__study_is_cuda(const char *device);

#endif /* ACCELRT_STUDY_FILE_H */
