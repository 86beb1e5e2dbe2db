/* The file broker: opens, creates, renames and removes paths as a given
 * uid in a short-lived child, and passes descriptors back.  See broker.h. */
#define _GNU_SOURCE
#include "broker.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BROKER_MAGIC 0x61726272u /* "arbr" */
#define PATH_CAP 4096

enum { OP_OPEN = 1, OP_MKDIR, OP_RENAME, OP_UNLINK, OP_RMDIR };

/* A request: this header, then path1 and path2 with their NULs. */
typedef struct breq {
  uint32_t magic, op;
  uint64_t seq;
  uint32_t uid, gid, ngroups;
  uint32_t groups[AR__CRED_MAX_GROUPS];
  int32_t flags;
  uint32_t mode;
  uint32_t len1, len2; /* without the NULs */
} breq;

typedef struct brep {
  uint64_t seq;
  int32_t err; /* 0 or an errno */
  int32_t has_fd;
} brep;

#define REQ_MAX (sizeof(breq) + 2 * (PATH_CAP + 1))

/* A request waiting for its reply. */
typedef struct waiter {
  uint64_t seq;
  bool done;
  brep rep;
  int fd;
  struct waiter *next;
} waiter;

struct ar__broker {
  int sock;
  pid_t pid;
  uint64_t seq;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  waiter *waiting; /* requests sent and not answered */
  bool reading;    /* a waiting thread is reading replies for everyone */
};

/* ---- descriptors over a socket -------------------------------------------------- */

static int send_with_fd(int sock, const void *buf, size_t n, int fd) {
  struct iovec iov = {(void *)buf, n};
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (fd >= 0) {
    memset(&u, 0, sizeof u);
    mh.msg_control = u.b;
    mh.msg_controllen = sizeof u.b;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  ssize_t k;
  do
    k = sendmsg(sock, &mh, MSG_NOSIGNAL);
  while (k < 0 && errno == EINTR);
  return k == (ssize_t)n ? 0 : -1;
}

/* Receives one message; *fd is a passed descriptor or -1 (any extra ones
 * are closed).  Returns the bytes, 0 at the end, -1 on error. */
static ssize_t recv_with_fd(int sock, void *buf, size_t n, int *fd) {
  struct iovec iov = {buf, n};
  union {
    char b[CMSG_SPACE(4 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = u.b;
  mh.msg_controllen = sizeof u.b;
  *fd = -1;
  ssize_t k;
  do
    k = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  while (k < 0 && errno == EINTR);
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); k >= 0 && c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < nfd; i++) {
      int got;
      memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      if (*fd < 0)
        *fd = got;
      else
        close(got);
    }
  }
  return k;
}

/* ---- the child: one operation as one user ------------------------------------------ */

static int become(const breq *q) {
  if (geteuid() == 0) {
    gid_t g[AR__CRED_MAX_GROUPS];
    for (uint32_t i = 0; i < q->ngroups; i++)
      g[i] = (gid_t)q->groups[i];
    if (setgroups(q->ngroups, g) != 0 || setresgid(q->gid, q->gid, q->gid) != 0 ||
        setresuid(q->uid, q->uid, q->uid) != 0)
      return errno ? errno : EPERM;
  } else if (q->uid != geteuid()) {
    /* A server that is not root acts only as itself. */
    return EPERM;
  }
  uid_t r, e, s;
  if (getresuid(&r, &e, &s) != 0 || r != q->uid || e != q->uid || s != q->uid)
    return EPERM;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return errno;
  return 0;
}

/* Whether fd is on a file system any user may mount (FUSE): its reads and
 * writes could stall the server's threads for as long as its owner likes. */
static bool user_mounted(int fd) {
  struct statfs sf;
  return fstatfs(fd, &sf) == 0 && (unsigned long)sf.f_type == FUSE_SUPER_MAGIC;
}

static void child(const breq *q, const char *p1, const char *p2, int out) {
  /* A hung file system ends the child, not the broker: SIGALRM's default
   * action is fatal, which wakes even a killable wait in the kernel. */
  alarm(AR__BROKER_TIMEOUT_S);
  brep rep = {q->seq, 0, 0};
  int fd = -1;
  int e = become(q);
  if (!e) {
    switch (q->op) {
    case OP_OPEN:
      fd = open(p1, q->flags | O_CLOEXEC, (mode_t)q->mode);
      e = fd < 0 ? errno : 0;
      if (fd >= 0 && user_mounted(fd)) {
        close(fd);
        fd = -1;
        e = EMEDIUMTYPE;
      }
      break;
    case OP_MKDIR:
      e = mkdir(p1, (mode_t)q->mode) == 0 ? 0 : errno;
      break;
    case OP_RENAME:
      e = rename(p1, p2) == 0 ? 0 : errno;
      break;
    case OP_UNLINK:
      e = unlink(p1) == 0 ? 0 : errno;
      break;
    case OP_RMDIR:
      e = rmdir(p1) == 0 ? 0 : errno;
      break;
    default:
      e = EINVAL;
    }
  }
  rep.err = e;
  rep.has_fd = fd >= 0;
  send_with_fd(out, &rep, sizeof rep, fd);
  _exit(0);
}

/* ---- the broker process ---------------------------------------------------------- */

/* Checks a request from the server; the paths follow the header. */
static int valid(const char *buf, ssize_t n, const char **p1, const char **p2) {
  const breq *q = (const breq *)buf;
  if (n < (ssize_t)sizeof *q || q->magic != BROKER_MAGIC || q->ngroups > AR__CRED_MAX_GROUPS ||
      q->len1 > PATH_CAP || q->len2 > PATH_CAP ||
      (size_t)n != sizeof *q + q->len1 + 1 + q->len2 + 1)
    return 0;
  *p1 = buf + sizeof *q;
  *p2 = *p1 + q->len1 + 1;
  if ((*p1)[q->len1] || (*p2)[q->len2] || strlen(*p1) != q->len1 || (*p1)[0] != '/')
    return 0;
  if (q->op == OP_RENAME && (*p2)[0] != '/')
    return 0;
  return 1;
}

/* Starts one request: a child answers it on sock by itself, so requests
 * run side by side and a slow one delays nobody else's. */
static void serve_one(int sock, const char *buf, ssize_t n) {
  const breq *q = (const breq *)buf;
  brep rep = {n >= (ssize_t)(2 * sizeof(uint64_t)) ? q->seq : 0, EINVAL, 0};
  const char *p1, *p2;
  if (!valid(buf, n, &p1, &p2)) {
    send_with_fd(sock, &rep, sizeof rep, -1);
    return;
  }
  pid_t pid = fork();
  if (pid == 0)
    child(q, p1, p2, sock);
  if (pid < 0) {
    rep.err = errno;
    send_with_fd(sock, &rep, sizeof rep, -1);
  }
  /* SIGCHLD is ignored here, so the kernel reaps the child. */
}

static void broker_main(int sock) {
  prctl(PR_SET_NAME, "accelrt-broker", 0, 0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  signal(SIGCHLD, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);
  /* Only the request socket and the standard streams stay open. */
  if (sock != 3) {
    if (dup2(sock, 3) < 0)
      _exit(1);
    sock = 3;
  }
  syscall(SYS_close_range, 4u, ~0u, 0u);
  if (chdir("/") != 0)
    _exit(1);
  static char buf[REQ_MAX + 16];
  for (;;) {
    int fd;
    ssize_t n = recv_with_fd(sock, buf, sizeof buf, &fd);
    if (fd >= 0)
      close(fd);
    if (n <= 0)
      _exit(0);
    serve_one(sock, buf, n);
  }
}

ar_status ar__broker_start(ar__broker **out, ar_err *err) {
  *out = NULL;
  ar__broker *b = ar_calloc(1, sizeof *b);
  if (!b)
    return ar_errf(err, AR_NOMEM, "out of memory");
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
    ar_free(b);
    return ar_errf(err, AR_IO, "cannot make the file broker's socket: %s", strerror(errno));
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(sp[0]);
    close(sp[1]);
    ar_free(b);
    return ar_errf(err, AR_IO, "cannot start the file broker: %s", strerror(errno));
  }
  if (pid == 0) {
    close(sp[0]);
    broker_main(sp[1]);
  }
  close(sp[1]);
  b->sock = sp[0];
  b->pid = pid;
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  *out = b;
  return AR_OK;
}

void ar__broker_stop(ar__broker *b) {
  if (!b)
    return;
  close(b->sock);
  /* The broker ends when its socket closes; wait for it briefly. */
  for (int i = 0; i < 100; i++) {
    if (waitpid(b->pid, NULL, WNOHANG) != 0)
      break;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (i == 99) {
      kill(b->pid, SIGKILL);
      waitpid(b->pid, NULL, 0);
    }
  }
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  ar_free(b);
}

/* Reads one reply and hands it to its waiter (one that gave up is gone:
 * the reply and its descriptor are dropped).  Called with b->mu NOT held,
 * by the one reading thread.  false when the broker is gone. */
static bool read_reply(ar__broker *b, int timeout_ms) {
  struct pollfd p = {b->sock, POLLIN, 0};
  int k = poll(&p, 1, timeout_ms);
  if (k <= 0)
    return k == 0 || errno == EINTR;
  brep rep;
  int fd;
  ssize_t got = recv_with_fd(b->sock, &rep, sizeof rep, &fd);
  if (got != (ssize_t)sizeof rep) {
    if (fd >= 0)
      close(fd);
    return false;
  }
  pthread_mutex_lock(&b->mu);
  waiter *w = b->waiting;
  while (w && w->seq != rep.seq)
    w = w->next;
  if (w) {
    w->rep = rep;
    w->fd = fd;
    w->done = true;
  } else if (fd >= 0) {
    close(fd);
  }
  pthread_mutex_unlock(&b->mu);
  return true;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sends a request and waits for its reply; any number of threads at once.
 * Whoever finds no reader reads replies for all until its own came. */
static int exchange(ar__broker *b, char *buf, size_t n, waiter *w) {
  long long deadline = now_ms() + (AR__BROKER_TIMEOUT_S + 5) * 1000LL;
  breq *q = (breq *)buf;
  pthread_mutex_lock(&b->mu);
  q->seq = w->seq = ++b->seq;
  w->next = b->waiting;
  b->waiting = w;
  bool sent = send_with_fd(b->sock, buf, n, -1) == 0;
  bool broken = !sent;
  while (!w->done && !broken) {
    long long left = deadline - now_ms();
    if (left <= 0)
      break;
    if (!b->reading) {
      b->reading = true;
      pthread_mutex_unlock(&b->mu);
      bool alive = read_reply(b, left < 200 ? (int)left : 200);
      pthread_mutex_lock(&b->mu);
      b->reading = false;
      pthread_cond_broadcast(&b->cv);
      broken = !alive;
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000 * 1000;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    }
  }
  waiter **pp = &b->waiting;
  while (*pp != w)
    pp = &(*pp)->next;
  *pp = w->next;
  pthread_mutex_unlock(&b->mu);
  if (!w->done)
    return broken ? -EIO : -ETIMEDOUT;
  return 0;
}

/* One request: returns a descriptor or 0, or a negative errno. */
static int call(ar__broker *b, const ar__cred *c, uint32_t op, const char *p1, const char *p2,
                int flags, unsigned mode) {
  size_t l1 = strlen(p1), l2 = p2 ? strlen(p2) : 0;
  if (l1 > PATH_CAP || l2 > PATH_CAP)
    return -ENAMETOOLONG;
  if (p1[0] != '/' || (p2 && p2[0] != '/'))
    return -EINVAL; /* the service resolves every path first */
  char buf[REQ_MAX];
  breq *q = (breq *)buf;
  memset(q, 0, sizeof *q);
  q->magic = BROKER_MAGIC;
  q->op = op;
  q->uid = (uint32_t)c->uid;
  q->gid = (uint32_t)c->gid;
  q->ngroups = (uint32_t)(c->ngroups < 0 ? 0 : c->ngroups);
  for (uint32_t i = 0; i < q->ngroups && i < AR__CRED_MAX_GROUPS; i++)
    q->groups[i] = (uint32_t)c->groups[i];
  q->flags = flags;
  q->mode = mode;
  q->len1 = (uint32_t)l1;
  q->len2 = (uint32_t)l2;
  memcpy(buf + sizeof *q, p1, l1 + 1);
  if (p2)
    memcpy(buf + sizeof *q + l1 + 1, p2, l2 + 1);
  else
    buf[sizeof *q + l1 + 1] = '\0';
  waiter w;
  memset(&w, 0, sizeof w);
  w.fd = -1;
  int rc = exchange(b, buf, sizeof *q + l1 + 1 + l2 + 1, &w);
  if (rc < 0)
    return rc;
  if (w.rep.err || op != OP_OPEN) {
    if (w.fd >= 0)
      close(w.fd);
    return w.rep.err ? -w.rep.err : 0;
  }
  return w.fd >= 0 ? w.fd : -EIO;
}

/* ---- the ar_fs over the broker --------------------------------------------------- */

typedef struct bfs {
  ar__broker *b;
  ar__cred c;
} bfs;

static int b_open(void *ctx, const char *path, int flags, unsigned mode) {
  bfs *f = ctx;
  return call(f->b, &f->c, OP_OPEN, path, NULL, flags, mode);
}
static int b_mkdir(void *ctx, const char *path, unsigned mode) {
  bfs *f = ctx;
  return call(f->b, &f->c, OP_MKDIR, path, NULL, 0, mode);
}
static int b_rename(void *ctx, const char *from, const char *to) {
  bfs *f = ctx;
  return call(f->b, &f->c, OP_RENAME, from, to, 0, 0);
}
static int b_unlink(void *ctx, const char *path, bool dir) {
  bfs *f = ctx;
  return call(f->b, &f->c, dir ? OP_RMDIR : OP_UNLINK, path, NULL, 0, 0);
}
static void b_destroy(void *ctx) { ar_free(ctx); }
static const ar_fs_ops broker_ops = {b_open, b_mkdir, b_rename, b_unlink, b_destroy};

ar_status ar__broker_fs(ar__broker *b, const ar__cred *c, ar_fs **out, ar_err *err) {
  bfs *f = ar_calloc(1, sizeof *f);
  if (!f)
    return ar_errf(err, AR_NOMEM, "out of memory");
  f->b = b;
  f->c = *c;
  if (f->c.ngroups > AR__CRED_MAX_GROUPS)
    f->c.ngroups = AR__CRED_MAX_GROUPS;
  char who[48];
  snprintf(who, sizeof who, "as uid %u", (unsigned)c->uid);
  return ar_fs_create(&broker_ops, f, who, out, err);
}

ar_status ar__cred_of_uid(uid_t uid, gid_t fallback_gid, ar__cred *out) {
  memset(out, 0, sizeof *out);
  out->uid = uid;
  out->gid = fallback_gid;
  struct passwd pw, *res = NULL;
  char tmp[4096];
  if (getpwuid_r(uid, &pw, tmp, sizeof tmp, &res) != 0 || !res)
    return AR_OK;
  out->gid = pw.pw_gid;
  int n = AR__CRED_MAX_GROUPS;
  gid_t g[AR__CRED_MAX_GROUPS];
  if (getgrouplist(pw.pw_name, pw.pw_gid, g, &n) < 0)
    n = AR__CRED_MAX_GROUPS; /* more than fit: the first ones */
  out->ngroups = n;
  memcpy(out->groups, g, (size_t)n * sizeof *g);
  return AR_OK;
}

ar_status ar__drop_capabilities(ar_err *err) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  memset(d, 0, sizeof d);
  if (syscall(SYS_capset, &h, d) != 0)
    return ar_errf(err, AR_IO, "cannot give up capabilities: %s", strerror(errno));
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return ar_errf(err, AR_IO, "cannot set no_new_privs: %s", strerror(errno));
  return AR_OK;
}
