/*
 * accelrt files: every path a job names is opened through an ar_fs, the
 * identity the job's files are touched with.
 *
 *   - NULL: this process, with its own rights (accelrt run, eval, check).
 *   - ar_fs_beneath(dirfd): relative paths inside one folder, resolved by
 *     the kernel with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): no
 *     symlink and no ".." ever leads out (the service's own state).
 *   - ar_fs_create(ops, ctx): another implementation; the service's opens
 *     run in a short-lived child that switched to the submitter's uid and
 *     groups (runtime/tenancy/broker.c), so a job never touches a path
 *     its submitter could not.
 *
 * What every implementation gets, because the wrappers below ask for it:
 * descriptors are close-on-exec; input files must be regular files (a
 * FIFO, a device or a folder is refused, and opening never blocks);
 * created files never follow a symlink in their last component, and
 * temporary files are created exclusively (O_EXCL), so a link planted in
 * an output folder is refused instead of written through; atomic writes
 * fsync the file, rename it into place and fsync the folder.
 *
 * Errors follow base.h: the message names the path and what to do.
 * Tests: tests/base/test_fs.c.
 */
#ifndef ACCELRT_FS_H
#define ACCELRT_FS_H

#include "accelrt/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ar_fs ar_fs;

/* An implementation: each slot returns a descriptor (open) or 0, or a
 * negative errno.  Flags and modes are those of open(2); the wrappers
 * have already added O_CLOEXEC, O_NOFOLLOW and O_NONBLOCK where they
 * apply.  Slots are called from any thread; ctx must allow that. */
typedef struct ar_fs_ops {
  int (*open)(void *ctx, const char *path, int flags, unsigned mode);
  int (*mkdir)(void *ctx, const char *path, unsigned mode);
  int (*rename)(void *ctx, const char *from, const char *to);
  int (*unlink)(void *ctx, const char *path, bool dir);
  void (*destroy)(void *ctx); /* (optional) frees ctx */
} ar_fs_ops;

/* An ar_fs over ops (borrowed: static storage) and ctx (owned from now on
 * when ops->destroy is set).  `who` names the identity in messages ("as
 * uid 1000"; copied).  AR_NOMEM. */
ar_status ar_fs_create(const ar_fs_ops *ops, void *ctx, const char *who, ar_fs **out,
                       ar_err *err);
/* Relative paths beneath the folder dirfd (duplicated; the caller keeps
 * its own).  AR_IO when dup fails. */
ar_status ar_fs_beneath(int dirfd, const char *who, ar_fs **out, ar_err *err);
/* NULL is a no-op. */
void ar_fs_destroy(ar_fs *fs);

/* Opens an input file for reading: a regular file, or AR_IO/AR_NOTFOUND
 * with why (and whose rights) in err.  *fd is blocking again. */
ar_status ar_fs_open_read(const ar_fs *fs, const char *path, int *fd, ar_err *err);
/* The same for a file the job wrote itself (metrics.jsonl, generated
 * data): a symlink there is refused, since the job never makes one and a
 * planted one would make the job read (and copy) a file of the link's
 * choosing. */
ar_status ar_fs_open_own(const ar_fs *fs, const char *path, int *fd, ar_err *err);
/* Whether path names a regular file this identity can open for reading
 * (_own: and is not a symlink). */
bool ar_fs_readable(const ar_fs *fs, const char *path);
bool ar_fs_readable_own(const ar_fs *fs, const char *path);
/* Reads a whole regular file of at most max bytes into *buf (NUL added;
 * free with ar_free).  AR_RANGE when larger.  _own: with ar_fs_open_own. */
ar_status ar_fs_read_all(const ar_fs *fs, const char *path, size_t max, char **buf,
                         size_t *len, ar_err *err);
ar_status ar_fs_read_own(const ar_fs *fs, const char *path, size_t max, char **buf,
                         size_t *len, ar_err *err);
/* Opens a file for writing as a stream: truncated, or appended to with
 * append.  A symlink or anything but a regular file there is refused. */
ar_status ar_fs_open_write(const ar_fs *fs, const char *path, bool append, FILE **out,
                           ar_err *err);
/* mkdir -p (0777 before the umask); existing folders are kept. */
ar_status ar_fs_mkdirs(const ar_fs *fs, const char *path, ar_err *err);
/* Removes a file (dir false) or an empty folder; a missing one is fine. */
ar_status ar_fs_unlink(const ar_fs *fs, const char *path, bool dir, ar_err *err);
/* fsync of a folder, best effort (some file systems cannot). */
void ar_fs_sync_dir(const ar_fs *fs, const char *dir);

/* An atomic write in progress: ar_fs_atomic_begin creates a fresh
 * temporary file beside path (exclusively) and gives its stream; commit
 * flushes, fsyncs, renames it over path and fsyncs the folder; abort
 * removes it.  Exactly one of commit or abort ends it. */
typedef struct ar_fs_atomic {
  const ar_fs *fs;
  FILE *f;
  char *path, *tmp;
} ar_fs_atomic;
ar_status ar_fs_atomic_begin(const ar_fs *fs, const char *path, ar_fs_atomic *a,
                             ar_err *err);
ar_status ar_fs_atomic_commit(ar_fs_atomic *a, ar_err *err);
void ar_fs_atomic_abort(ar_fs_atomic *a);
/* begin + one write + commit. */
ar_status ar_fs_write_atomic(const ar_fs *fs, const char *path, const void *data,
                             size_t len, ar_err *err);

/* "DIR/NAME" (ar_free it), or NULL when out of memory. */
char *ar_path_join(const char *dir, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_FS_H */
