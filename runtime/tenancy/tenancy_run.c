/* Placeholder until the multi-job runner lands (issue 4). */
#include "accelrt/tenancy.h"

ar_status ar_tenancy_run(const ar_spec *spec, const ar_run_opts *opts, ar_err *err) {
  (void)spec;
  (void)opts;
  return ar_errf(err, AR_UNSUPPORTED, "multi-job files are not in this build yet");
}
