/* The service's state folder: refused unless it is the server's own, then
 * opened only beneath its descriptor.  See state.h. */
#define _GNU_SOURCE
#include "state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct ar__state {
  char *path;
  int dirfd, lockfd;
  ar_fs *fs;
  uint64_t *jobs;
  size_t njobs, capjobs;
};

static const char *type_name(mode_t m) {
  return S_ISLNK(m) ? "a symbolic link"
         : S_ISDIR(m) ? "a folder"
         : S_ISREG(m) ? "a file"
                      : "a special file";
}

/* The rule for every entry: owned by the server, nobody else may write
 * it, and of the expected type. */
static ar_status check_entry(const ar__state *s, const char *rel, const struct stat *sb,
                             bool want_dir, ar_err *err) {
  uid_t self = geteuid();
  const char *fix = "the server did not write it; inspect it, remove it, or start the server "
                    "with another --state";
  if (S_ISLNK(sb->st_mode) || (want_dir ? !S_ISDIR(sb->st_mode) : !S_ISREG(sb->st_mode)))
    return ar_errf(err, AR_INVALID, "state folder %s: %s is %s, where the server keeps %s; %s",
                   s->path, rel, type_name(sb->st_mode), want_dir ? "a folder" : "a file", fix);
  if (sb->st_uid != self)
    return ar_errf(err, AR_INVALID, "state folder %s: %s belongs to uid %u, not to the server "
                   "(uid %u); %s", s->path, rel, (unsigned)sb->st_uid, (unsigned)self, fix);
  if (sb->st_mode & (S_IWGRP | S_IWOTH))
    return ar_errf(err, AR_INVALID, "state folder %s: group or others may write %s (mode %03o); "
                   "%s, or chmod go-w it", s->path, rel, (unsigned)(sb->st_mode & 0777), fix);
  return AR_OK;
}

static bool is_tmp(const char *name) { return strstr(name, ".tmp.") != NULL; }

static bool is_id(const char *name, uint64_t *id) {
  size_t n = strlen(name);
  if (n == 0 || n > 19 || name[0] == '0')
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (name[i] < '0' || name[i] > '9')
      return false;
    v = v * 10 + (uint64_t)(name[i] - '0');
  }
  *id = v;
  return true;
}

static bool one_of(const char *name, const char *const *names) {
  for (; *names; names++)
    if (!strcmp(name, *names))
      return true;
  return false;
}

typedef ar_status (*visit_fn)(ar__state *s, int dfd, const char *rel, const char *name,
                              const struct stat *sb, ar_err *err);

/* Calls fn for every entry of the folder `name` of parent (rel: its path
 * in the state folder, for messages). */
static ar_status each_entry(ar__state *s, int parent, const char *name, const char *rel,
                            visit_fn fn, ar_err *err) {
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return ar_errf(err, AR_IO, "state folder %s: cannot open %s: %s", s->path, rel,
                   strerror(errno));
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  ar_status st = AR_OK;
  struct dirent *e;
  while (st == AR_OK && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    struct stat sb;
    char sub[512];
    snprintf(sub, sizeof sub, "%s/%.300s", rel, e->d_name);
    if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
      st = ar_errf(err, AR_IO, "state folder %s: cannot examine %s: %s", s->path, sub,
                   strerror(errno));
    else
      st = fn(s, dirfd(d), sub, e->d_name, &sb, err);
  }
  closedir(d);
  return st;
}

static ar_status visit_any(ar__state *s, int dfd, const char *rel, const char *name,
                           const struct stat *sb, ar_err *err) {
  AR_CHECK(check_entry(s, rel, sb, S_ISDIR(sb->st_mode), err));
  if (S_ISDIR(sb->st_mode))
    return each_entry(s, dfd, name, rel, visit_any, err);
  return AR_OK;
}

/* A leftover temporary of an atomic write (a crash): removed once it is
 * known to be the server's own file. */
static ar_status drop_tmp(ar__state *s, int dfd, const char *rel, const char *name,
                          const struct stat *sb, ar_err *err) {
  AR_CHECK(check_entry(s, rel, sb, false, err));
  if (unlinkat(dfd, name, 0) != 0)
    return ar_errf(err, AR_IO, "state folder %s: cannot remove %s: %s", s->path, rel,
                   strerror(errno));
  return AR_OK;
}

static ar_status visit_job_file(ar__state *s, int dfd, const char *rel, const char *name,
                                const struct stat *sb, ar_err *err) {
  static const char *const files[] = {"meta", "job.yaml", "log", NULL};
  if (is_tmp(name))
    return drop_tmp(s, dfd, rel, name, sb, err);
  if (one_of(name, files))
    return check_entry(s, rel, sb, false, err);
  if (!strcmp(name, "out")) /* outputs of an earlier accelrt, kept as they are */
    return visit_any(s, dfd, rel, name, sb, err);
  return ar_errf(err, AR_INVALID, "state folder %s: %s is not an entry the server writes; "
                 "inspect it and remove it", s->path, rel);
}

static ar_status visit_job(ar__state *s, int dfd, const char *rel, const char *name,
                           const struct stat *sb, ar_err *err) {
  uint64_t id;
  if (!is_id(name, &id))
    return ar_errf(err, AR_INVALID, "state folder %s: %s is not a job of the server (job "
                   "folders are numbers); inspect it and remove it", s->path, rel);
  AR_CHECK(check_entry(s, rel, sb, true, err));
  if (s->njobs == s->capjobs) {
    size_t cap = s->capjobs ? 2 * s->capjobs : 64;
    uint64_t *nj = ar_realloc(s->jobs, cap * sizeof *nj);
    if (!nj)
      return ar_errf(err, AR_NOMEM, "out of memory");
    s->jobs = nj;
    s->capjobs = cap;
  }
  s->jobs[s->njobs++] = id;
  return each_entry(s, dfd, name, rel, visit_job_file, err);
}

static ar_status visit_runner(ar__state *s, int dfd, const char *rel, const char *name,
                              const struct stat *sb, ar_err *err) {
  static const char *const files[] = {"metrics.jsonl", "summary.json", "trace.json", NULL};
  if (is_tmp(name))
    return drop_tmp(s, dfd, rel, name, sb, err);
  if (one_of(name, files))
    return check_entry(s, rel, sb, false, err);
  return ar_errf(err, AR_INVALID, "state folder %s: %s is not an entry the server writes; "
                 "inspect it and remove it", s->path, rel);
}

static ar_status visit_top(ar__state *s, int dfd, const char *rel, const char *name,
                           const struct stat *sb, ar_err *err) {
  (void)dfd;
  if (!strcmp(name, "lock"))
    return check_entry(s, rel + 2, sb, false, err);
  if (!strcmp(name, "runner")) {
    AR_CHECK(check_entry(s, rel + 2, sb, true, err));
    return each_entry(s, s->dirfd, name, name, visit_runner, err);
  }
  if (!strcmp(name, "jobs")) {
    AR_CHECK(check_entry(s, rel + 2, sb, true, err));
    return each_entry(s, s->dirfd, name, name, visit_job, err);
  }
  return ar_errf(err, AR_INVALID, "state folder %s: %s is not an entry the server writes; "
                 "inspect it and remove it, or start the server with another --state",
                 s->path, rel + 2);
}

static int by_id(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* mkdir -p of the parents (0755) and the folder itself (0700). */
static ar_status make_folder(const char *path, ar_err *err) {
  char *p = ar_strdup(path);
  if (!p)
    return ar_errf(err, AR_NOMEM, "out of memory");
  ar_status st = AR_OK;
  for (char *c = p + 1; st == AR_OK; c++) {
    if (*c != '/' && *c != '\0')
      continue;
    char was = *c;
    *c = '\0';
    if (mkdir(p, was ? 0755 : 0700) != 0 && errno != EEXIST)
      st = ar_errf(err, AR_IO, "cannot create the state folder %s (at %s): %s; create it "
                   "(owned by the server's user, mode 0700) or give --state",
                   path, p, strerror(errno));
    *c = was;
    if (!was)
      break;
  }
  ar_free(p);
  return st;
}

ar_status ar__state_open(const char *path, ar__state **out, ar_err *err) {
  *out = NULL;
  if (!path || path[0] != '/')
    return ar_errf(err, AR_INVALID, "the state folder must be an absolute path, got '%s'",
                   path ? path : "");
  ar__state *s = ar_calloc(1, sizeof *s);
  if (!s || !(s->path = ar_strdup(path))) {
    ar_free(s);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  s->dirfd = s->lockfd = -1;
  ar_status st = make_folder(path, err);
  if (st != AR_OK)
    goto fail;
  s->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (s->dirfd < 0) {
    st = ar_errf(err, AR_INVALID, "cannot open the state folder %s: %s%s", path, strerror(errno),
                 errno == ELOOP || errno == ENOTDIR ? " (it must be a real folder, not a "
                                                      "symbolic link)" : "");
    goto fail;
  }
  struct stat sb;
  if (fstat(s->dirfd, &sb) != 0) {
    st = ar_errf(err, AR_IO, "cannot examine the state folder %s: %s", path, strerror(errno));
    goto fail;
  }
  if (sb.st_uid != geteuid()) {
    st = ar_errf(err, AR_INVALID, "the state folder %s belongs to uid %u, not to the server "
                 "(uid %u): someone else made it; remove it or give another --state", path,
                 (unsigned)sb.st_uid, (unsigned)geteuid());
    goto fail;
  }
  if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
    st = ar_errf(err, AR_INVALID, "group or others may write the state folder %s (mode %03o); "
                 "chmod 700 it, or give another --state", path, (unsigned)(sb.st_mode & 0777));
    goto fail;
  }
  s->lockfd = openat(s->dirfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (s->lockfd < 0) {
    st = ar_errf(err, AR_INVALID, "cannot open %s/lock: %s (it must be the server's own file)",
                 path, strerror(errno));
    goto fail;
  }
  if (flock(s->lockfd, LOCK_EX | LOCK_NB) != 0) {
    st = ar_errf(err, AR_STATE, "another server uses the state folder %s (%s/lock is locked)",
                 path, path);
    goto fail;
  }
  for (const char *const *d = (const char *const[]){"runner", "jobs", NULL}; *d; d++)
    if (mkdirat(s->dirfd, *d, 0700) != 0 && errno != EEXIST) {
      st = ar_errf(err, AR_IO, "cannot create %s/%s: %s", path, *d, strerror(errno));
      goto fail;
    }
  st = each_entry(s, s->dirfd, ".", ".", visit_top, err);
  if (st != AR_OK)
    goto fail;
  if (s->njobs > 1)
    qsort(s->jobs, s->njobs, sizeof *s->jobs, by_id);
  st = ar_fs_beneath(s->dirfd, NULL, &s->fs, err);
  if (st != AR_OK)
    goto fail;
  *out = s;
  return AR_OK;
fail:
  ar__state_close(s);
  return st;
}

const ar_fs *ar__state_fs(const ar__state *s) { return s->fs; }
const char *ar__state_path(const ar__state *s) { return s->path; }
const uint64_t *ar__state_jobs(const ar__state *s, size_t *n) {
  *n = s->njobs;
  return s->jobs;
}

void ar__state_close(ar__state *s) {
  if (!s)
    return;
  ar_fs_destroy(s->fs);
  if (s->lockfd >= 0)
    close(s->lockfd);
  if (s->dirfd >= 0)
    close(s->dirfd);
  ar_free(s->jobs);
  ar_free(s->path);
  ar_free(s);
}
