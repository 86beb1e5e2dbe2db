/*
 * Private to the spec module: the resolved job, the validated tree written
 * back as YAML (runtime/spec/resolved.c; ar_spec.resolved).
 */
#ifndef ACCELRT_SPEC_RESOLVED_H
#define ACCELRT_SPEC_RESOLVED_H

#include "accelrt/spec.h"

/* Sets sp->resolved from root, the validated tree (overrides applied) that
 * sp was converted from, and each job's of a jobs: file (a job file of its
 * own).  base_dir: the folder data paths of the file are relative to (NULL:
 * the working directory).  AR_OK or AR_NOMEM (texts already made stay in
 * sp, freed with it). */
ar_status ar__spec_resolve_text(const ar_ynode *root, ar_spec *sp, const char *base_dir);

#endif /* ACCELRT_SPEC_RESOLVED_H */
