/* The files of a run's output folder, by name: whether it holds a finished
 * run, clearing them for `accelrt run --overwrite`, and the two files that
 * describe a run (job.resolved.yaml, run.json).  Every write goes through
 * ar_fs (temporary file, fsync, rename, no symlink followed). */
#include "accelrt/runtime.h"

#include <string.h>

/* eval.json (accelrt eval) and a distributed run's trace.tsv and
 * oracle.tsv describe the run too: left behind, they would sit beside a
 * new run as if they were its own. */
const char *const ar_run_outputs[] = {"summary.json", "metrics.jsonl",     "checkpoint.bin",
                                      "trace.json",   "job.resolved.yaml", "run.json",
                                      "eval.json",    "trace.tsv",         "oracle.tsv",
                                      NULL};

bool ar_run_finished(const ar_fs *fs, const char *dir) {
  char *p = ar_path_join(dir, "summary.json");
  bool done = p && ar_fs_readable(fs, p);
  ar_free(p);
  return done;
}

ar_status ar_run_clear_outputs(const ar_fs *fs, const char *dir, ar_err *err) {
  for (int i = 0; ar_run_outputs[i]; i++) {
    char *p = ar_path_join(dir, ar_run_outputs[i]);
    if (!p)
      return ar_errf(err, AR_NOMEM, "out of memory");
    ar_status st = ar_fs_unlink(fs, p, false, err);
    ar_free(p);
    AR_CHECK(st);
  }
  return AR_OK;
}

/* dir/name, written atomically. */
static ar_status write_named(const ar_fs *fs, const char *dir, const char *name,
                             const char *text, ar_err *err) {
  char *p = ar_path_join(dir, name);
  if (!p)
    return ar_errf(err, AR_NOMEM, "out of memory");
  ar_status st = ar_fs_write_atomic(fs, p, text, strlen(text), err);
  ar_free(p);
  return st;
}

ar_status ar_run_describe(const ar_fs *fs, const char *dir, const char *resolved,
                          const char *run_json, ar_err *err) {
  if (resolved)
    AR_CHECK(write_named(fs, dir, "job.resolved.yaml", resolved, err));
  return run_json ? write_named(fs, dir, "run.json", run_json, err) : AR_OK;
}
