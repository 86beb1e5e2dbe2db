/* Placeholder until the MPI transport lands (issue 5). */
#include "accelrt/dist.h"

ar_status ar_dist_run(const ar_spec *spec, const ar_run_opts *opts,
                      ar_summary *summary, ar_err *err) {
  (void)spec;
  (void)opts;
  (void)summary;
  return ar_errf(err, AR_UNSUPPORTED, "distributed training is not in this build yet");
}
