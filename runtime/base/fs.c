/* Files through an identity: the process's own, beneath a folder
 * (openat2), or another implementation (the service's broker).  See
 * include/accelrt/fs.h. */
#define _GNU_SOURCE
#include "accelrt/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct ar_fs {
  const ar_fs_ops *impl;
  void *ctx;
  char who[64];
};

/* ---- this process ------------------------------------------------------------ */

static int self_open(void *ctx, const char *path, int flags, unsigned mode) {
  (void)ctx;
  int fd = open(path, flags, (mode_t)mode);
  return fd >= 0 ? fd : -errno;
}
static int self_mkdir(void *ctx, const char *path, unsigned mode) {
  (void)ctx;
  return mkdir(path, (mode_t)mode) == 0 ? 0 : -errno;
}
static int self_rename(void *ctx, const char *from, const char *to) {
  (void)ctx;
  return rename(from, to) == 0 ? 0 : -errno;
}
static int self_unlink(void *ctx, const char *path, bool dir) {
  (void)ctx;
  return (dir ? rmdir(path) : unlink(path)) == 0 ? 0 : -errno;
}
static const ar_fs_ops self_ops = {self_open, self_mkdir, self_rename, self_unlink, NULL};
static const ar_fs self_fs = {&self_ops, NULL, ""};

static const ar_fs *resolve(const ar_fs *fs) { return fs ? fs : &self_fs; }

/* ---- beneath a folder ------------------------------------------------------------ */

typedef struct beneath {
  int dirfd;
} beneath;

static int openat2_beneath(int dirfd, const char *path, int flags, unsigned mode) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(unsigned)flags;
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
  return fd >= 0 ? (int)fd : -errno;
}

/* The folder holding path's last component, opened beneath, and that
 * component (".", ".." and empty names are refused). */
static int parent_of(int dirfd, const char *path, const char **leaf) {
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
    return -EINVAL;
  *leaf = name;
  if (!slash)
    return openat2_beneath(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  size_t n = (size_t)(slash - path);
  char *dir = ar_malloc(n + 1);
  if (!dir)
    return -ENOMEM;
  memcpy(dir, path, n);
  dir[n] = '\0';
  int fd = openat2_beneath(dirfd, n ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  ar_free(dir);
  return fd;
}

static int ben_open(void *ctx, const char *path, int flags, unsigned mode) {
  return openat2_beneath(((beneath *)ctx)->dirfd, path, flags, mode);
}
static int ben_mkdir(void *ctx, const char *path, unsigned mode) {
  const char *leaf;
  int p = parent_of(((beneath *)ctx)->dirfd, path, &leaf);
  if (p < 0)
    return p;
  int rc = mkdirat(p, leaf, (mode_t)mode) == 0 ? 0 : -errno;
  close(p);
  return rc;
}
static int ben_rename(void *ctx, const char *from, const char *to) {
  const char *lf, *lt;
  int pf = parent_of(((beneath *)ctx)->dirfd, from, &lf);
  if (pf < 0)
    return pf;
  int pt = parent_of(((beneath *)ctx)->dirfd, to, &lt);
  if (pt < 0) {
    close(pf);
    return pt;
  }
  int rc = renameat(pf, lf, pt, lt) == 0 ? 0 : -errno;
  close(pf);
  close(pt);
  return rc;
}
static int ben_unlink(void *ctx, const char *path, bool dir) {
  const char *leaf;
  int p = parent_of(((beneath *)ctx)->dirfd, path, &leaf);
  if (p < 0)
    return p;
  int rc = unlinkat(p, leaf, dir ? AT_REMOVEDIR : 0) == 0 ? 0 : -errno;
  close(p);
  return rc;
}
static void ben_destroy(void *ctx) {
  beneath *b = ctx;
  close(b->dirfd);
  ar_free(b);
}
static const ar_fs_ops beneath_ops = {ben_open, ben_mkdir, ben_rename, ben_unlink,
                                      ben_destroy};

/* ---- handles ----------------------------------------------------------------------- */

ar_status ar_fs_create(const ar_fs_ops *ops, void *ctx, const char *who, ar_fs **out,
                       ar_err *err) {
  *out = NULL;
  ar_fs *fs = ar_calloc(1, sizeof *fs);
  if (!fs) {
    if (ops->destroy)
      ops->destroy(ctx);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  fs->impl = ops;
  fs->ctx = ctx;
  snprintf(fs->who, sizeof fs->who, "%s", who ? who : "");
  *out = fs;
  return AR_OK;
}

ar_status ar_fs_beneath(int dirfd, const char *who, ar_fs **out, ar_err *err) {
  *out = NULL;
  beneath *b = ar_calloc(1, sizeof *b);
  if (!b)
    return ar_errf(err, AR_NOMEM, "out of memory");
  b->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (b->dirfd < 0) {
    ar_free(b);
    return ar_errf(err, AR_IO, "cannot duplicate a folder descriptor: %s", strerror(errno));
  }
  return ar_fs_create(&beneath_ops, b, who, out, err);
}

void ar_fs_destroy(ar_fs *fs) {
  if (!fs)
    return;
  if (fs->impl->destroy)
    fs->impl->destroy(fs->ctx);
  ar_free(fs);
}

/* ---- messages ---------------------------------------------------------------------- */

/* " (opened as uid 1000)" or "". */
static const char *as_who(const ar_fs *fs, char *buf, size_t cap) {
  if (!fs->who[0])
    return "";
  snprintf(buf, cap, " (opened %s)", fs->who);
  return buf;
}

static ar_status fail(const ar_fs *fs, ar_err *err, int e, const char *verb, const char *path) {
  char w[96];
  const char *hint = "";
  ar_status st = AR_IO;
  switch (e) {
  case ENOENT:
    st = AR_NOTFOUND;
    hint = "; check the path";
    break;
  case EACCES:
  case EPERM:
    hint = fs->who[0] ? "; the service opens files with your rights: make the file (and every "
                        "folder above it) accessible to you"
                      : "; check its permissions";
    break;
  case ELOOP:
    hint = "; a symbolic link is not followed here: remove it or name its target";
    break;
  case EXDEV:
    hint = "; the path leads outside the folder it must stay in";
    break;
  case EEXIST:
    hint = "; something else already exists there";
    break;
  case EMEDIUMTYPE:
    hint = " (a FUSE file system): the service does not use files on file systems users "
           "mount, whose reads could stall every job; copy it to a local disk";
    break;
  case ETIMEDOUT:
    hint = "; its file system did not answer in time";
    break;
  case ENOSPC:
  case EDQUOT:
    hint = "; free some disk space";
    break;
  default:
    break;
  }
  return ar_errf(err, st, "cannot %s '%s'%s: %s%s", verb, path, as_who(fs, w, sizeof w),
                 strerror(e), hint);
}

static const char *kind_of(mode_t m) {
  return S_ISDIR(m)    ? "a folder"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
         : S_ISLNK(m)  ? "a symbolic link"
                       : "not a regular file";
}

/* fd must be a regular file; then it is made blocking. */
static ar_status regular(const ar_fs *fs, int fd, const char *path, ar_err *err) {
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    return fail(fs, err, errno, "examine", path);
  if (!S_ISREG(sb.st_mode))
    return ar_errf(err, AR_IO, "'%s' is %s; a regular file is needed here", path,
                   kind_of(sb.st_mode));
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
    return fail(fs, err, errno, "set up", path);
  return AR_OK;
}

/* ---- operations -------------------------------------------------------------------- */

static ar_status open_read(const ar_fs *fs, const char *path, bool follow, int *fd,
                           ar_err *err) {
  fs = resolve(fs);
  *fd = -1;
  int f = fs->impl->open(fs->ctx, path,
                        O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW),
                        0);
  if (f < 0)
    return fail(fs, err, -f, "open", path);
  ar_status st = regular(fs, f, path, err);
  if (st != AR_OK) {
    close(f);
    return st;
  }
  *fd = f;
  return AR_OK;
}

ar_status ar_fs_open_read(const ar_fs *fs, const char *path, int *fd, ar_err *err) {
  return open_read(fs, path, true, fd, err);
}

ar_status ar_fs_open_own(const ar_fs *fs, const char *path, int *fd, ar_err *err) {
  return open_read(fs, path, false, fd, err);
}

static bool readable(const ar_fs *fs, const char *path, bool follow) {
  int fd;
  if (open_read(fs, path, follow, &fd, NULL) != AR_OK)
    return false;
  close(fd);
  return true;
}

bool ar_fs_readable(const ar_fs *fs, const char *path) { return readable(fs, path, true); }
bool ar_fs_readable_own(const ar_fs *fs, const char *path) { return readable(fs, path, false); }

static ar_status read_all(const ar_fs *fs, const char *path, bool follow, size_t max,
                          char **buf, size_t *len, ar_err *err) {
  *buf = NULL;
  *len = 0;
  int fd;
  AR_CHECK(open_read(fs, path, follow, &fd, err));
  /* The buffer starts at the file's size (not at max, which may be
   * gigabytes: an ONNX model's limit) and grows, up to max + 1 bytes, if
   * the file grows while it is read. */
  struct stat sb;
  size_t cap = fstat(fd, &sb) == 0 && sb.st_size > 0 ? (size_t)sb.st_size : 4096;
  if (cap > max)
    cap = max;
  cap += 1;
  char *b = ar_malloc(cap);
  if (!b) {
    close(fd);
    return ar_errf(err, AR_NOMEM, "out of memory reading '%s'", path);
  }
  size_t n = 0;
  ar_status st = AR_OK;
  while (n <= max) {
    if (n == cap) { /* one byte more than the size seen: the file grew */
      size_t ncap = cap > max / 2 ? max + 1 : 2 * cap;
      char *nb = ar_realloc(b, ncap);
      if (!nb) {
        st = ar_errf(err, AR_NOMEM, "out of memory reading '%s'", path);
        break;
      }
      b = nb;
      cap = ncap;
    }
    ssize_t k = read(fd, b + n, cap - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      st = fail(resolve(fs), err, errno, "read", path);
      break;
    }
    if (k == 0)
      break;
    n += (size_t)k;
  }
  close(fd);
  if (st == AR_OK && n > max)
    st = ar_errf(err, AR_RANGE, "'%s' is larger than %zu bytes", path, max);
  if (st == AR_OK && n == cap) { /* room for the terminating NUL */
    char *nb = ar_realloc(b, cap + 1);
    if (!nb)
      st = ar_errf(err, AR_NOMEM, "out of memory reading '%s'", path);
    else
      b = nb;
  }
  if (st != AR_OK) {
    ar_free(b);
    return st;
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  return AR_OK;
}

ar_status ar_fs_read_all(const ar_fs *fs, const char *path, size_t max, char **buf,
                         size_t *len, ar_err *err) {
  return read_all(fs, path, true, max, buf, len, err);
}

ar_status ar_fs_read_own(const ar_fs *fs, const char *path, size_t max, char **buf,
                         size_t *len, ar_err *err) {
  return read_all(fs, path, false, max, buf, len, err);
}

ar_status ar_fs_open_write(const ar_fs *fs, const char *path, bool append, FILE **out,
                           ar_err *err) {
  fs = resolve(fs);
  *out = NULL;
  int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
              (append ? O_APPEND : 0);
  int f = fs->impl->open(fs->ctx, path, flags, 0644);
  if (f < 0)
    return fail(fs, err, -f, "write", path);
  ar_status st = regular(fs, f, path, err);
  /* Truncate only once it is known to be a regular file. */
  if (st == AR_OK && !append && ftruncate(f, 0) != 0)
    st = fail(fs, err, errno, "truncate", path);
  FILE *s = st == AR_OK ? fdopen(f, append ? "a" : "w") : NULL;
  if (st == AR_OK && !s)
    st = fail(fs, err, errno, "write", path);
  if (st != AR_OK) {
    close(f);
    return st;
  }
  *out = s;
  return AR_OK;
}

ar_status ar_fs_mkdirs(const ar_fs *fs, const char *path, ar_err *err) {
  fs = resolve(fs);
  char *p = ar_strdup(path);
  if (!p)
    return ar_errf(err, AR_NOMEM, "out of memory");
  ar_status st = AR_OK;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0')
      continue;
    char c = *s;
    *s = '\0';
    int rc = fs->impl->mkdir(fs->ctx, p, 0777);
    if (rc != 0 && rc != -EEXIST) {
      st = fail(fs, err, -rc, "create the folder", p);
      break;
    }
    *s = c;
    if (c == '\0')
      break;
  }
  ar_free(p);
  return st;
}

ar_status ar_fs_unlink(const ar_fs *fs, const char *path, bool dir, ar_err *err) {
  fs = resolve(fs);
  int rc = fs->impl->unlink(fs->ctx, path, dir);
  if (rc != 0 && rc != -ENOENT)
    return fail(fs, err, -rc, "remove", path);
  return AR_OK;
}

void ar_fs_sync_dir(const ar_fs *fs, const char *dir) {
  fs = resolve(fs);
  int fd = fs->impl->open(fs->ctx, dir && *dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

/* The folder of path ("." when none), in a new string. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return ar_strdup(".");
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  char *d = ar_malloc(n + 1);
  if (d) {
    memcpy(d, path, n);
    d[n] = '\0';
  }
  return d;
}

ar_status ar_fs_atomic_begin(const ar_fs *fs, const char *path, ar_fs_atomic *a,
                             ar_err *err) {
  memset(a, 0, sizeof *a);
  a->fs = fs;
  const ar_fs *r = resolve(fs);
  size_t n = strlen(path) + 32;
  a->path = ar_strdup(path);
  a->tmp = ar_malloc(n);
  if (!a->path || !a->tmp) {
    ar_free(a->path);
    ar_free(a->tmp);
    memset(a, 0, sizeof *a);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  /* A fresh name each time; O_EXCL makes a planted file or link fail
   * instead of being written through, and the next name is tried. */
  static _Atomic uint64_t counter;
  int f = -EEXIST;
  for (int tries = 0; tries < 16 && f == -EEXIST; tries++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t k = ar_mix64((uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_nsec ^
                          atomic_fetch_add(&counter, 1));
    snprintf(a->tmp, n, "%s.tmp.%08llx", path, (unsigned long long)(k & 0xffffffffu));
    f = r->impl->open(r->ctx, a->tmp,
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0644);
  }
  ar_status st = AR_OK;
  if (f < 0)
    st = fail(r, err, -f, "create", a->tmp);
  else if (!(a->f = fdopen(f, "wb"))) {
    st = fail(r, err, errno, "write", a->tmp);
    close(f);
    r->impl->unlink(r->ctx, a->tmp, false);
  }
  if (st != AR_OK) {
    ar_free(a->path);
    ar_free(a->tmp);
    memset(a, 0, sizeof *a);
  }
  return st;
}

static void atomic_end(ar_fs_atomic *a) {
  ar_free(a->path);
  ar_free(a->tmp);
  memset(a, 0, sizeof *a);
}

void ar_fs_atomic_abort(ar_fs_atomic *a) {
  if (!a->tmp)
    return;
  const ar_fs *r = resolve(a->fs);
  if (a->f)
    fclose(a->f);
  r->impl->unlink(r->ctx, a->tmp, false);
  atomic_end(a);
}

ar_status ar_fs_atomic_commit(ar_fs_atomic *a, ar_err *err) {
  const ar_fs *r = resolve(a->fs);
  int e = 0;
  if (fflush(a->f) != 0 || fsync(fileno(a->f)) != 0)
    e = errno ? errno : EIO;
  if (fclose(a->f) != 0 && !e)
    e = errno ? errno : EIO;
  a->f = NULL;
  if (e) {
    ar_status st = ar_errf(err, AR_IO, "writing '%s' failed: %s (disk full?); the previous "
                           "'%s' is kept", a->tmp, strerror(e), a->path);
    ar_fs_atomic_abort(a);
    return st;
  }
  int rc = r->impl->rename(r->ctx, a->tmp, a->path);
  if (rc != 0) {
    ar_status st = fail(r, err, -rc, "rename a file to", a->path);
    ar_fs_atomic_abort(a);
    return st;
  }
  char *dir = dir_of(a->path);
  if (dir)
    ar_fs_sync_dir(a->fs, dir);
  ar_free(dir);
  atomic_end(a);
  return AR_OK;
}

ar_status ar_fs_write_atomic(const ar_fs *fs, const char *path, const void *data, size_t len,
                             ar_err *err) {
  ar_fs_atomic a;
  AR_CHECK(ar_fs_atomic_begin(fs, path, &a, err));
  if (len && fwrite(data, 1, len, a.f) != len) {
    ar_status st = ar_errf(err, AR_IO, "writing '%s' failed: %s (disk full?)", a.tmp,
                           strerror(errno));
    ar_fs_atomic_abort(&a);
    return st;
  }
  return ar_fs_atomic_commit(&a, err);
}

char *ar_path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = ar_malloc(n);
  if (s)
    snprintf(s, n, "%s/%s", dir, name);
  return s;
}
