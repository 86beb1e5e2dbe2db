/*
 * runtime/tenancy private header: the file broker of `accelrt serve`.
 *
 * Every path a job names (data files, its output folder and the files in
 * it, generated data, checkpoints) is opened, created, renamed or removed
 * by a short-lived child process that switched to the submitter's uid and
 * groups (setgroups, setresgid, setresuid, no_new_privs) before touching
 * it; an opened file comes back to the server as a descriptor over a
 * socketpair (SCM_RIGHTS).  So the kernel, not a check of ours, decides
 * what a job may read and write, and output files belong to their user.
 *
 * The broker is a small process forked when the server starts, before it
 * has threads or large memory, so each request forks a tiny process; it
 * keeps the rights to change identity, the server can then give up every
 * capability (ar__drop_capabilities).  Requests run side by side (each
 * child answers on its own), so a slow one delays only its caller; a
 * child still busy after AR__BROKER_TIMEOUT_S (a hung file system) is
 * killed by its alarm and its caller told ETIMEDOUT.  Files on a file
 * system any user may mount (FUSE) are refused (EMEDIUMTYPE): reading
 * them could stall the server's threads at their owner's will.
 *
 * Tests: tests/tenancy/test_broker.c (as root with an unprivileged uid),
 * tests/tenancy/security.sh.
 */
#ifndef ACCELRT_TENANCY_BROKER_H
#define ACCELRT_TENANCY_BROKER_H

#include "accelrt/fs.h"

#include <stdbool.h>
#include <sys/types.h>

#define AR__CRED_MAX_GROUPS 64
#define AR__BROKER_TIMEOUT_S 10

/* Who a request acts as. */
typedef struct ar__cred {
  uid_t uid;
  gid_t gid;
  int ngroups; /* supplementary groups, at most AR__CRED_MAX_GROUPS */
  gid_t groups[AR__CRED_MAX_GROUPS];
} ar__cred;

/* The credentials of uid from the user database (primary group and
 * supplementary groups, getgrouplist); a uid without an entry gets
 * fallback_gid and no supplementary group.  AR_OK. */
ar_status ar__cred_of_uid(uid_t uid, gid_t fallback_gid, ar__cred *out);

typedef struct ar__broker ar__broker;

/* Forks the broker.  Call it while the process has one thread.  AR_IO. */
ar_status ar__broker_start(ar__broker **out, ar_err *err);
/* Ends the broker and frees the handle.  NULL is a no-op.  Every ar_fs
 * made from it must be destroyed first. */
void ar__broker_stop(ar__broker *b);
/* An ar_fs that acts as *c (copied) through b (borrowed: must outlive the
 * fs).  Paths given to it must be absolute.  AR_NOMEM. */
ar_status ar__broker_fs(ar__broker *b, const ar__cred *c, ar_fs **out, ar_err *err);

/* Drops every capability of the calling thread (effective, permitted,
 * inheritable) and sets no_new_privs, so the rest of the server runs with
 * only what its uid owns.  Call before creating threads (they inherit
 * it).  AR_IO. */
ar_status ar__drop_capabilities(ar_err *err);

#endif
