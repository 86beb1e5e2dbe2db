/*
 * accelrt dist: synchronous parameter-server training over MPI with
 * TicTac-ordered transfers (commsched/).  `mpirun -np N accelrt run JOB`
 * with a `distributed:` section in the job: ranks 0..servers-1 are
 * parameter servers, the others workers.
 */
#ifndef ACCELRT_DIST_H
#define ACCELRT_DIST_H

#include "accelrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs spec (distributed.enabled) as this MPI rank's part of the job.
 * Initialises and finalises MPI.  Rank 0 writes summary.json and prints
 * the summary when summary_out is given.  AR_OK, or a status with the
 * reason (naming the rank and iteration of a dead peer) in err. */
ar_status ar_dist_run(const ar_spec *spec, const ar_run_opts *opts,
                      ar_summary *summary, ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_DIST_H */
