/*
 * runtime/tenancy private header: the service's state folder.
 *
 * Layout (everything written by the server, owned by its uid, no group or
 * other write bit, no symlink anywhere):
 *
 *   lock                  flock'ed while a server uses the folder
 *   runner/               the runner's metrics.jsonl, summary.json, trace.json
 *   jobs/<id>/meta        the journal entry (key value lines, a crc line last)
 *   jobs/<id>/job.yaml    the submitted job file
 *   jobs/<id>/log         the job's event log
 *
 * ar__state_open refuses a folder that is a symlink, is not owned by the
 * server's uid, or is writable by group or others, and one holding any
 * entry the server did not write (another owner, a symlink, a group- or
 * other-writable entry, an unknown name), with a message saying what to
 * fix; temporary files left by a crash are removed.  Afterwards every file
 * inside is opened relative to the folder's descriptor with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) through ar__state_fs.
 *
 * Tests: tests/tenancy/security.sh.
 */
#ifndef ACCELRT_TENANCY_STATE_H
#define ACCELRT_TENANCY_STATE_H

#include "accelrt/fs.h"

#include <stdint.h>

typedef struct ar__state ar__state;

/* Creates the folder (0700, parents 0755) when missing, checks it, takes
 * its lock and scans it.  AR_STATE when another server holds the lock;
 * AR_INVALID for a folder it refuses; AR_IO.  path is copied. */
ar_status ar__state_open(const char *path, ar__state **out, ar_err *err);
/* Relative paths beneath the folder (borrowed). */
const ar_fs *ar__state_fs(const ar__state *s);
const char *ar__state_path(const ar__state *s);
/* The job ids found under jobs/ at open, ascending (borrowed). */
const uint64_t *ar__state_jobs(const ar__state *s, size_t *n);
/* Releases the lock.  NULL is a no-op. */
void ar__state_close(ar__state *s);

#endif
