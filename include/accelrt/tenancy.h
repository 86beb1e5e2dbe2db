/*
 * accelrt tenancy: many jobs on one device through lanes (lanes/): the
 * multi-job runner behind `accelrt run` of a file with `jobs:`, and the
 * execution service (`accelrt serve`, `submit`, `ps`, `logs`, `cancel`).
 */
#ifndef ACCELRT_TENANCY_H
#define ACCELRT_TENANCY_H

#include "accelrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs every job of spec->jobs on one device under spec->runtime (policy,
 * memory), each job writing to its own output.dir, and writes the run's
 * summary.json into spec->output.dir.  AR_OK when every job succeeded. */
ar_status ar_tenancy_run(const ar_spec *spec, const ar_run_opts *opts,
                         ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_TENANCY_H */
