/*
 * The execution service: `accelrt serve` runs one multi-job runner (the
 * same scheduler, lanes and records as `accelrt run` of a `jobs:` file) and
 * takes jobs over a Unix socket from `accelrt submit`; `ps`, `logs` and
 * `cancel` ask about them.
 *
 * Who is asking: the kernel's SO_PEERCRED uid of the connection, never a
 * claim in the message.  A user sees and cancels only their own jobs; root
 * (uid 0) sees and cancels all.  A job of a user other than the server's
 * writes its outputs under the state directory and may read only data
 * files that user could read (owned by them, or world-readable): jobs run
 * inside the server, with its rights.  (Salus listened on an open TCP port
 * without authentication.)
 *
 * Messages are length-prefixed and bounded (protocol.h); a malformed or
 * oversized message is answered with an error when possible, logged with
 * the sender's uid, and the connection closed; the server goes on.  Each
 * connection has its own thread, at most MAX_CONNS at once, and a read
 * timeout.
 *
 * Journal: STATE/jobs/<id>/ holds the submitted job file (job.yaml), the
 * request (meta: uid, state, paths, overrides) rewritten atomically on
 * every state change, and the job's event log.  At start the server reads
 * every journal: queued and running jobs are submitted again, a running one
 * resuming from the last checkpoint in its output folder (written every
 * train.checkpoint_every iterations, and when the server stops cleanly).
 */
#define _GNU_SOURCE
#include "accelrt/tenancy.h"

#include "protocol.h"
#include "tenancy_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 64
#define PATH_CAP 4096

typedef struct sjob {
  uint64_t id;
  uid_t uid;
  char name[128];
  char dir[PATH_CAP];  /* STATE/jobs/<id> */
  char out[PATH_CAP];  /* its output.dir */
  char file[PATH_CAP], base[PATH_CAP], cwd[PATH_CAP];
  char **sets;
  int n_sets;
  ar__tjob_state state;
  bool in_runner;
  size_t ridx;
  ar_spec *spec; /* lives as long as the server (the engine borrows it) */
  ar__tjob_result res;
} sjob;

typedef struct server {
  ar_serve_opts o;
  char state[PATH_CAP], socket[PATH_CAP];
  ar__runner *r;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* Held across reserving a runner index and adding the job, so indexes
   * and runner order agree; never taken inside on_event (which runs under
   * the runner's lock) or under mu. */
  pthread_mutex_t add_mu;
  sjob **jobs;
  size_t njobs, capjobs;
  sjob **by_ridx;
  size_t nridx, capridx;
  uint64_t next_id;
  int conns;
  uid_t self;
  volatile sig_atomic_t *quit;
} server;

static volatile sig_atomic_t quit_flag;
static void on_quit(int sig) {
  (void)sig;
  quit_flag = 1;
}

static void slog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void slog(const char *fmt, ...) {
  char ts[32];
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%s] accelrt serve: ", ts);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- journal -------------------------------------------------------------- */

static const char *jstate_name(ar__tjob_state s) {
  return s == AR__TJ_ADMITTED ? "running" : ar__tjob_state_name(s);
}

static void job_log(const sjob *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void job_log(const sjob *j, const char *fmt, ...) {
  char path[PATH_CAP + 16];
  snprintf(path, sizeof path, "%s/log", j->dir);
  FILE *f = fopen(path, "a");
  if (!f)
    return;
  char ts[32];
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(ts, sizeof ts, "%H:%M:%S", &tm);
  fprintf(f, "[%s] ", ts);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

/* meta: one "key value" line each; paths and overrides hold no newline
 * (the decoder refuses NUL, the writer refuses newlines). */
static void write_meta(const sjob *j, const char *state) {
  ar__sbuf b = {0};
  ar__sb_printf(&b, "id %llu\nuid %u\nstate %s\nname %s\nout %s\nfile %s\nbase %s\ncwd %s\n",
                (unsigned long long)j->id, (unsigned)j->uid, state, j->name, j->out, j->file,
                j->base, j->cwd);
  for (int i = 0; i < j->n_sets; i++)
    ar__sb_printf(&b, "set %s\n", j->sets[i]);
  if (j->res.error[0]) {
    char e[sizeof j->res.error];
    snprintf(e, sizeof e, "%s", j->res.error);
    for (char *p = e; *p; p++)
      if (*p == '\n')
        *p = ' ';
    ar__sb_printf(&b, "error %s\n", e);
  }
  if (!b.oom) {
    char path[PATH_CAP + 16];
    snprintf(path, sizeof path, "%s/meta", j->dir);
    ar_err err = AR_ERR_INIT;
    if (ar_write_file_atomic(path, b.buf, b.len, &err) != AR_OK)
      slog("job %llu: cannot write its journal: %s", (unsigned long long)j->id, err.msg);
  }
  ar__sb_fini(&b);
}

static bool has_newline(const char *s) { return strchr(s, '\n') != NULL; }

/* dst = a + "/" + b; false when it does not fit. */
static bool pjoin(char *dst, size_t cap, const char *a, const char *b) {
  int n = snprintf(dst, cap, "%s/%s", a, b);
  return n >= 0 && (size_t)n < cap;
}

/* ---- runner events ---------------------------------------------------------- */

static void on_event(void *ctx, size_t ridx, const ar__tjob_result *res) {
  server *s = ctx;
  pthread_mutex_lock(&s->mu);
  sjob *j = ridx < s->nridx ? s->by_ridx[ridx] : NULL;
  if (j) {
    ar__tjob_state old = j->state;
    j->res = *res;
    if (res->state == AR__TJ_STOPPED) {
      /* The server is stopping: the journal keeps the job queued, so the
       * next server runs it again (from its checkpoint). */
      job_log(j, "stopped with the server after %llu iterations; it resumes when the "
                 "server starts again",
              (unsigned long long)res->iterations);
      write_meta(j, "queued");
    } else if (res->state != old || res->state == AR__TJ_QUEUED) {
      j->state = res->state;
      switch (res->state) {
      case AR__TJ_QUEUED:
        if (old != AR__TJ_QUEUED)
          job_log(j, "queued");
        else if (res->reason[0])
          job_log(j, "waiting: %s", res->reason);
        break;
      case AR__TJ_ADMITTED:
        job_log(j, "admitted to lane %u after %.3f s in the queue", (unsigned)res->lane,
                res->queue_s);
        break;
      case AR__TJ_DONE:
        job_log(j, "done: %llu iterations, JCT %.3f s; outputs in %s",
                (unsigned long long)res->iterations, res->jct_s, j->out);
        break;
      case AR__TJ_FAILED:
        job_log(j, "failed: %s", res->error);
        break;
      case AR__TJ_CANCELLED:
        job_log(j, "cancelled after %llu iterations", (unsigned long long)res->iterations);
        break;
      default:
        break;
      }
      if (res->state != AR__TJ_PENDING)
        write_meta(j, jstate_name(res->state));
    }
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
}

/* ---- jobs ------------------------------------------------------------------- */

static void sjob_free(sjob *j) {
  if (!j)
    return;
  for (int i = 0; i < j->n_sets; i++)
    ar_free(j->sets[i]);
  ar_free(j->sets);
  ar_spec_destroy(j->spec);
  ar_free(j);
}

/* Whether `uid` could read `path`: its own file, or a world-readable one. */
static bool uid_may_read(uid_t uid, const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return false;
  if (uid == 0)
    return true;
  return (sb.st_uid == uid && (sb.st_mode & S_IRUSR)) || (sb.st_mode & S_IROTH);
}


/* Parses the job text of j (its journal), fixes its output folder, opens
 * it and hands it to the runner.  Called with s->mu NOT held. */
static ar_status start_job(server *s, sjob *j, const char *yaml, size_t n, bool resume,
                           ar_err *err) {
  ar_diags diags;
  ar_spec *spec = NULL;
  ar_status st =
      ar_spec_parse(yaml, n, j->file[0] ? j->file : "job.yaml", j->base[0] ? j->base : NULL,
                    (const char *const *)j->sets, j->n_sets, true, &spec, &diags);
  if (st != AR_OK) {
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    if (mf) {
      ar_diags_print(&diags, j->file[0] ? j->file : "job.yaml", mf);
      fclose(mf);
    }
    ar_errf(err, st == AR_NOMEM ? AR_NOMEM : AR_SPEC, "%s",
            text && len ? text : "the job file is not valid");
    free(text);
    ar_diags_fini(&diags);
    return err ? err->status : AR_SPEC;
  }
  ar_diags_fini(&diags);
  if (spec->n_jobs > 0 || spec->distributed.enabled) {
    ar_spec_destroy(spec);
    return ar_errf(err, AR_SPEC,
                   "the service takes single jobs; submit each job of a `jobs:` file "
                   "(or run it with accelrt run), and distributed jobs with mpirun");
  }
  if (j->uid != s->self) {
    /* Data the user could not read themselves is refused. */
    const char *paths[2] = {spec->data.train, spec->data.test};
    for (int k = 0; k < 2; k++)
      if (paths[k] && !uid_may_read(j->uid, paths[k])) {
        ar_spec_destroy(spec);
        return ar_errf(err, AR_SPEC,
                       "data file '%s' is not readable by uid %u; make it readable by you "
                       "(or by all) and submit again",
                       paths[k], (unsigned)j->uid);
      }
  }
  if (!j->out[0]) {
    bool fits = true;
    if (j->uid != s->self)
      fits = pjoin(j->out, sizeof j->out, j->dir, "out");
    else if (spec->output.dir[0] == '/' || !j->cwd[0])
      fits = strlen(spec->output.dir) < sizeof j->out &&
             snprintf(j->out, sizeof j->out, "%s", spec->output.dir) >= 0;
    else
      fits = pjoin(j->out, sizeof j->out, j->cwd, spec->output.dir);
    if (!fits) {
      ar_spec_destroy(spec);
      j->out[0] = '\0';
      return ar_errf(err, AR_SPEC, "output.dir is too long");
    }
  }
  if (has_newline(j->out) || has_newline(spec->name)) {
    ar_spec_destroy(spec);
    return ar_errf(err, AR_SPEC, "names and output folders must not hold newlines");
  }
  char *dir = ar_strdup(j->out);
  if (!dir) {
    ar_spec_destroy(spec);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  ar_free(spec->output.dir);
  spec->output.dir = dir;
  snprintf(j->name, sizeof j->name, "%s", spec->name);
  if (resume) {
    char *ck = ar_path_join(j->out, "checkpoint.bin");
    struct stat sb;
    resume = ck && stat(ck, &sb) == 0;
    ar_free(ck);
  }
  ar__tjob_desc d;
  ar_run_opts ro = AR_RUN_OPTS_INIT;
  ro.resume = resume;
  st = ar__tenancy_open_job(spec, &ro, &d, err);
  if (st == AR_STATE) {
    /* Its checkpoint was already at the end. */
    ar_spec_destroy(spec);
    return st;
  }
  if (st != AR_OK) {
    ar_spec_destroy(spec);
    return st;
  }
  d.arrival_s = ar__runner_now(s->r);
  pthread_mutex_lock(&s->add_mu);
  pthread_mutex_lock(&s->mu);
  if (s->nridx == s->capridx) {
    size_t cap = s->capridx ? 2 * s->capridx : 64;
    sjob **nb = ar_realloc(s->by_ridx, cap * sizeof *nb);
    if (!nb) {
      pthread_mutex_unlock(&s->mu);
      pthread_mutex_unlock(&s->add_mu);
      d.ops->close(d.job);
      ar_spec_destroy(spec);
      return ar_errf(err, AR_NOMEM, "out of memory");
    }
    s->by_ridx = nb;
    s->capridx = cap;
  }
  /* The runner's next index is nridx: jobs are only added here, under
   * s->mu, so the two counts stay equal. */
  j->spec = spec;
  j->ridx = s->nridx;
  s->by_ridx[s->nridx++] = j;
  j->in_runner = true;
  j->state = AR__TJ_PENDING;
  pthread_mutex_unlock(&s->mu);
  size_t idx = 0;
  st = ar__runner_add(s->r, &d, &idx, err);
  if (st != AR_OK) {
    pthread_mutex_lock(&s->mu);
    s->nridx--;
    j->in_runner = false;
    j->spec = NULL;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->add_mu);
    d.ops->close(d.job);
    ar_spec_destroy(spec);
    return st;
  }
  pthread_mutex_unlock(&s->add_mu);
  AR_ASSERT(idx == j->ridx);
  if (resume)
    job_log(j, "resuming from %s/checkpoint.bin", j->out);
  return AR_OK;
}

static sjob *new_sjob(server *s, uid_t uid) {
  sjob *j = ar_calloc(1, sizeof *j);
  if (!j)
    return NULL;
  pthread_mutex_lock(&s->mu);
  if (s->njobs == s->capjobs) {
    size_t cap = s->capjobs ? 2 * s->capjobs : 64;
    sjob **nj = ar_realloc(s->jobs, cap * sizeof *nj);
    if (!nj) {
      pthread_mutex_unlock(&s->mu);
      ar_free(j);
      return NULL;
    }
    s->jobs = nj;
    s->capjobs = cap;
  }
  j->id = s->next_id++;
  j->uid = uid;
  j->state = AR__TJ_PENDING;
  char idtext[64];
  snprintf(idtext, sizeof idtext, "jobs/%llu", (unsigned long long)j->id);
  if (!pjoin(j->dir, sizeof j->dir, s->state, idtext))
    j->dir[0] = '\0'; /* the state path's length is checked at start */
  s->jobs[s->njobs++] = j;
  pthread_mutex_unlock(&s->mu);
  return j;
}

static sjob *find_job(server *s, uint64_t id) {
  for (size_t i = 0; i < s->njobs; i++)
    if (s->jobs[i]->id == id)
      return s->jobs[i];
  return NULL;
}

/* ---- requests ------------------------------------------------------------------ */

static void reply(int fd, ar__msg_op op, const char *text, uint64_t id, bool has_id) {
  ar__msg m;
  memset(&m, 0, sizeof m);
  m.op = op;
  m.text = (ar__mstr){text, text ? strlen(text) : 0};
  m.id = id;
  m.has_id = has_id;
  ar_err e = AR_ERR_INIT;
  ar__msg_write(fd, &m, &e);
}

static void do_submit(server *s, int fd, uid_t uid, const ar__msg *m) {
  sjob *j = new_sjob(s, uid);
  if (!j) {
    reply(fd, AR__OP_ERROR, "the server is out of memory", 0, false);
    return;
  }
  ar_err err = AR_ERR_INIT;
  ar_status st = AR_OK;
  if (!ar__mstr_copy(m->file, j->file, sizeof j->file) ||
      !ar__mstr_copy(m->base, j->base, sizeof j->base) ||
      !ar__mstr_copy(m->cwd, j->cwd, sizeof j->cwd) || has_newline(j->file) ||
      has_newline(j->base) || has_newline(j->cwd))
    st = ar_errf(&err, AR_SPEC, "a path of the request is too long or holds a newline");
  if (st == AR_OK && m->n_sets > 0) {
    j->sets = ar_calloc((size_t)m->n_sets, sizeof *j->sets);
    if (!j->sets)
      st = ar_errf(&err, AR_NOMEM, "out of memory");
    for (int i = 0; st == AR_OK && i < m->n_sets; i++) {
      j->sets[i] = ar_malloc(m->sets[i].n + 1);
      if (!j->sets[i]) {
        st = ar_errf(&err, AR_NOMEM, "out of memory");
        break;
      }
      ar__mstr_copy(m->sets[i], j->sets[i], m->sets[i].n + 1);
      j->n_sets = i + 1;
      if (has_newline(j->sets[i]))
        st = ar_errf(&err, AR_SPEC, "an override holds a newline");
    }
  }
  if (st == AR_OK) {
    ar_status ms = ar_mkdirs(j->dir, &err);
    if (ms == AR_OK) {
      char path[PATH_CAP + 16];
      snprintf(path, sizeof path, "%s/job.yaml", j->dir);
      ms = ar_write_file_atomic(path, m->yaml.p, m->yaml.n, &err);
    }
    st = ms;
  }
  if (st == AR_OK)
    st = start_job(s, j, m->yaml.p, m->yaml.n, false, &err);
  if (st != AR_OK) {
    pthread_mutex_lock(&s->mu);
    j->state = AR__TJ_FAILED;
    snprintf(j->res.error, sizeof j->res.error, "%s", err.msg);
    pthread_mutex_unlock(&s->mu);
    struct stat sb;
    if (stat(j->dir, &sb) == 0) {
      job_log(j, "refused: %s", err.msg);
      write_meta(j, "failed");
    }
    slog("uid %u: job %llu refused: %s", (unsigned)uid, (unsigned long long)j->id, err.msg);
    reply(fd, AR__OP_ERROR, err.msg, j->id, true);
    return;
  }
  job_log(j, "submitted by uid %u from %s", (unsigned)uid, j->file[0] ? j->file : "?");
  slog("uid %u: job %llu '%s' submitted", (unsigned)uid, (unsigned long long)j->id, j->name);
  char id[32];
  snprintf(id, sizeof id, "%llu", (unsigned long long)j->id);
  reply(fd, AR__OP_OK, id, j->id, true);
}

static void user_name(uid_t uid, char *buf, size_t cap) {
  struct passwd pw, *res = NULL;
  char tmp[1024];
  if (getpwuid_r(uid, &pw, tmp, sizeof tmp, &res) == 0 && res)
    snprintf(buf, cap, "%s", res->pw_name);
  else
    snprintf(buf, cap, "%u", (unsigned)uid);
}

static void do_ps(server *s, int fd, uid_t uid) {
  ar__sbuf b = {0};
  ar__sb_printf(&b, "%-6s %-10s %-9s %-24s %5s %8s %9s %9s\n", "ID", "USER", "STATE", "NAME",
                "LANE", "ITERS", "QUEUE_S", "JCT_S");
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->njobs; i++) {
    const sjob *j = s->jobs[i];
    if (uid != 0 && j->uid != uid)
      continue;
    char who[64];
    user_name(j->uid, who, sizeof who);
    ar__sb_printf(&b, "%-6llu %-10s %-9s %-24s %5u %8llu %9.2f %9.2f\n",
                  (unsigned long long)j->id, who, jstate_name(j->state),
                  j->name[0] ? j->name : "-", (unsigned)j->res.lane,
                  (unsigned long long)j->res.iterations, j->res.queue_s, j->res.jct_s);
  }
  pthread_mutex_unlock(&s->mu);
  reply(fd, b.oom ? AR__OP_ERROR : AR__OP_OK, b.oom ? "out of memory" : b.buf, 0, false);
  ar__sb_fini(&b);
}

/* Finds the job and checks the asker may touch it; replies on failure. */
static sjob *owned_job(server *s, int fd, uid_t uid, uint64_t id) {
  pthread_mutex_lock(&s->mu);
  sjob *j = find_job(s, id);
  bool ok = j && (uid == 0 || j->uid == uid);
  pthread_mutex_unlock(&s->mu);
  if (!ok) {
    /* The same answer for "not yours" and "does not exist": another
     * user's job ids are not disclosed. */
    char msg[96];
    snprintf(msg, sizeof msg, "no job %llu of yours; see accelrt ps", (unsigned long long)id);
    reply(fd, AR__OP_ERROR, msg, id, true);
    return NULL;
  }
  return j;
}

static void do_cancel(server *s, int fd, uid_t uid, uint64_t id) {
  sjob *j = owned_job(s, fd, uid, id);
  if (!j)
    return;
  pthread_mutex_lock(&s->mu);
  bool in = j->in_runner && !ar__tjob_ended(j->state);
  size_t ridx = j->ridx;
  pthread_mutex_unlock(&s->mu);
  if (!in) {
    reply(fd, AR__OP_ERROR, "the job has already ended", id, true);
    return;
  }
  ar_status st = ar__runner_cancel(s->r, ridx);
  if (st != AR_OK) {
    reply(fd, AR__OP_ERROR, "the job has already ended", id, true);
    return;
  }
  job_log(j, "cancel requested by uid %u", (unsigned)uid);
  slog("uid %u: job %llu cancelled", (unsigned)uid, (unsigned long long)id);
  reply(fd, AR__OP_OK, "cancelling at the next iteration boundary", id, true);
}

static void do_logs(server *s, int fd, uid_t uid, const ar__msg *m) {
  sjob *j = owned_job(s, fd, uid, m->id);
  if (!j)
    return;
  char path[PATH_CAP + 16];
  snprintf(path, sizeof path, "%s/log", j->dir);
  uint64_t off = m->offset;
  char buf[16384];
  for (;;) {
    int f = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t k = 0;
    if (f >= 0) {
      for (;;) {
        k = pread(f, buf, sizeof buf - 1, (off_t)off);
        if (k <= 0)
          break;
        buf[k] = '\0';
        ar__msg d;
        memset(&d, 0, sizeof d);
        d.op = AR__OP_DATA;
        d.text = (ar__mstr){buf, (size_t)k};
        ar_err e = AR_ERR_INIT;
        if (ar__msg_write(fd, &d, &e) != AR_OK) {
          close(f);
          return; /* the client left */
        }
        off += (uint64_t)k;
      }
      close(f);
    }
    pthread_mutex_lock(&s->mu);
    bool ended = ar__tjob_ended(j->state) || !j->in_runner;
    pthread_mutex_unlock(&s->mu);
    if (!m->follow || ended || quit_flag)
      break;
    /* Poll for more; a client that went away is noticed by the write. */
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 250) > 0 && (p.revents & (POLLHUP | POLLERR)))
      return;
    if (p.revents & POLLIN) {
      char c;
      if (recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) == 0)
        return;
    }
  }
  reply(fd, AR__OP_END, NULL, m->id, true);
}

typedef struct conn {
  server *s;
  int fd;
} conn;

static void *conn_main(void *arg) {
  conn *c = arg;
  server *s = c->s;
  int fd = c->fd;
  ar_free(c);
  struct ucred cred;
  socklen_t cl = sizeof cred;
  uint8_t *buf = NULL;
  size_t n = 0;
  ar_err err = AR_ERR_INIT;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
    slog("a connection without peer credentials was refused");
    goto done;
  }
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ar_status st = ar__msg_read(fd, &buf, &n, &err);
  if (st != AR_OK) {
    slog("rejected a message from uid %u (pid %d): %s", (unsigned)cred.uid, (int)cred.pid,
         err.msg);
    if (st == AR_RANGE)
      reply(fd, AR__OP_ERROR, err.msg, 0, false);
    goto done;
  }
  ar__msg m;
  st = ar__msg_decode(buf, n, &m, &err);
  if (st == AR_OK && m.op > AR__OP_CANCEL)
    st = ar_errf(&err, AR_PARSE, "a reply is not a request");
  if (st != AR_OK) {
    slog("rejected a malformed message from uid %u (pid %d, %zu bytes): %s",
         (unsigned)cred.uid, (int)cred.pid, n, err.msg);
    reply(fd, AR__OP_ERROR, err.msg, 0, false);
    goto done;
  }
  switch (m.op) {
  case AR__OP_SUBMIT:
    do_submit(s, fd, cred.uid, &m);
    break;
  case AR__OP_PS:
    do_ps(s, fd, cred.uid);
    break;
  case AR__OP_LOGS:
    do_logs(s, fd, cred.uid, &m);
    break;
  case AR__OP_CANCEL:
    do_cancel(s, fd, cred.uid, m.id);
    break;
  default:
    break;
  }
done:
  ar_free(buf);
  close(fd);
  pthread_mutex_lock(&s->mu);
  s->conns--;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- start-up: the journal ------------------------------------------------------ */

static char *read_file(const char *path, size_t max, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *b = ar_malloc(max + 1);
  size_t n = b ? fread(b, 1, max + 1, f) : 0;
  fclose(f);
  if (!b || n > max) {
    ar_free(b);
    return NULL;
  }
  b[n] = '\0';
  *len = n;
  return b;
}

/* Reads one job's journal; resubmits it when it was queued or running. */
static void recover_job(server *s, const char *name) {
  char *end;
  unsigned long long id = strtoull(name, &end, 10);
  if (*end || id == 0)
    return;
  char dir[PATH_CAP], rel[300];
  snprintf(rel, sizeof rel, "jobs/%.280s", name);
  if (!pjoin(dir, sizeof dir, s->state, rel))
    return;
  char path[PATH_CAP + 16];
  snprintf(path, sizeof path, "%s/meta", dir);
  size_t len = 0;
  char *meta = read_file(path, 1 << 20, &len);
  if (!meta) {
    slog("job %llu: no readable journal in %s; skipped", id, dir);
    return;
  }
  sjob *j = ar_calloc(1, sizeof *j);
  if (!j) {
    ar_free(meta);
    return;
  }
  j->id = id;
  snprintf(j->dir, sizeof j->dir, "%s", dir);
  char state[32] = "";
  int cap_sets = 0;
  for (char *line = strtok(meta, "\n"); line; line = strtok(NULL, "\n")) {
    char *v = strchr(line, ' ');
    if (!v)
      continue;
    *v++ = '\0';
    if (!strcmp(line, "uid"))
      j->uid = (uid_t)strtoul(v, NULL, 10);
    else if (!strcmp(line, "state"))
      snprintf(state, sizeof state, "%s", v);
    else if (!strcmp(line, "name"))
      snprintf(j->name, sizeof j->name, "%s", v);
    else if (!strcmp(line, "out"))
      snprintf(j->out, sizeof j->out, "%s", v);
    else if (!strcmp(line, "file"))
      snprintf(j->file, sizeof j->file, "%s", v);
    else if (!strcmp(line, "base"))
      snprintf(j->base, sizeof j->base, "%s", v);
    else if (!strcmp(line, "cwd"))
      snprintf(j->cwd, sizeof j->cwd, "%s", v);
    else if (!strcmp(line, "error"))
      snprintf(j->res.error, sizeof j->res.error, "%s", v);
    else if (!strcmp(line, "set") && j->n_sets < AR__MSG_MAX_SETS) {
      if (j->n_sets == cap_sets) {
        cap_sets = cap_sets ? 2 * cap_sets : 8;
        char **ns = ar_realloc(j->sets, (size_t)cap_sets * sizeof *ns);
        if (!ns)
          break;
        j->sets = ns;
      }
      j->sets[j->n_sets] = ar_strdup(v);
      if (j->sets[j->n_sets])
        j->n_sets++;
    }
  }
  ar_free(meta);
  pthread_mutex_lock(&s->mu);
  if (id >= s->next_id)
    s->next_id = id + 1;
  bool room = true;
  if (s->njobs == s->capjobs) {
    size_t cap = s->capjobs ? 2 * s->capjobs : 64;
    sjob **nj = ar_realloc(s->jobs, cap * sizeof *nj);
    if (nj) {
      s->jobs = nj;
      s->capjobs = cap;
    } else {
      room = false;
    }
  }
  if (room)
    s->jobs[s->njobs++] = j;
  pthread_mutex_unlock(&s->mu);
  if (!room) {
    sjob_free(j);
    return;
  }
  bool was_running = !strcmp(state, "running");
  if (!was_running && strcmp(state, "queued") != 0 && strcmp(state, "pending") != 0) {
    /* Ended: kept for ps and logs. */
    j->state = !strcmp(state, "done")        ? AR__TJ_DONE
               : !strcmp(state, "cancelled") ? AR__TJ_CANCELLED
                                             : AR__TJ_FAILED;
    return;
  }
  snprintf(path, sizeof path, "%s/job.yaml", dir);
  char *yaml = read_file(path, AR_SPEC_MAX_BYTES, &len);
  ar_err err = AR_ERR_INIT;
  ar_status st = yaml ? start_job(s, j, yaml, len, true, &err)
                      : ar_errf(&err, AR_IO, "its job file %s cannot be read", path);
  ar_free(yaml);
  if (st == AR_STATE) {
    j->state = AR__TJ_DONE;
    write_meta(j, "done");
    job_log(j, "its checkpoint was complete: done");
  } else if (st != AR_OK) {
    j->state = AR__TJ_FAILED;
    snprintf(j->res.error, sizeof j->res.error, "after a restart: %s", err.msg);
    write_meta(j, "failed");
    job_log(j, "failed after a restart: %s", err.msg);
    slog("job %llu could not be recovered: %s", id, err.msg);
  } else {
    job_log(j, "requeued after a server restart (was %s)", state);
    slog("job %llu '%s' requeued (was %s)", id, j->name, state);
  }
}

static int by_number(const void *a, const void *b) {
  unsigned long long x = strtoull(*(char *const *)a, NULL, 10);
  unsigned long long y = strtoull(*(char *const *)b, NULL, 10);
  return x < y ? -1 : x > y;
}

static void recover(server *s) {
  char dir[PATH_CAP + 8];
  snprintf(dir, sizeof dir, "%s/jobs", s->state);
  DIR *d = opendir(dir);
  if (!d)
    return;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nn = ar_realloc(names, cap * sizeof *nn);
      if (!nn)
        break;
      names = nn;
    }
    if (!(names[n] = ar_strdup(e->d_name)))
      break;
    n++;
  }
  closedir(d);
  if (n > 1)
    qsort(names, n, sizeof *names, by_number);
  for (size_t i = 0; i < n; i++) {
    recover_job(s, names[i]);
    ar_free(names[i]);
  }
  ar_free(names);
}

/* ---- the server ------------------------------------------------------------------- */

static void *runner_main(void *arg) {
  server *s = arg;
  ar_err err = AR_ERR_INIT;
  if (ar__runner_run(s->r, &err) != AR_OK)
    slog("the scheduler stopped: %s", err.msg);
  return NULL;
}

static ar_status open_socket(server *s, int *out, ar_err *err) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(s->socket) >= sizeof a.sun_path)
    return ar_errf(err, AR_INVALID, "socket path '%s' is longer than %zu bytes; use a shorter "
                   "--socket", s->socket, sizeof a.sun_path - 1);
  snprintf(a.sun_path, sizeof a.sun_path, "%s", s->socket);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return ar_errf(err, AR_IO, "socket: %s", strerror(errno));
  /* A socket file left by a server that died is replaced; a live one is
   * not (the state lock already proved no server uses this state). */
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe >= 0) {
    if (connect(probe, (struct sockaddr *)&a, sizeof a) == 0) {
      close(probe);
      close(fd);
      return ar_errf(err, AR_STATE, "another server listens on %s; stop it or use another "
                     "--socket", s->socket);
    }
    close(probe);
  }
  unlink(s->socket);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0) {
    ar_status st = ar_errf(err, AR_IO, "cannot listen on %s: %s", s->socket, strerror(errno));
    close(fd);
    return st;
  }
  /* Every user may connect; SO_PEERCRED says who they are. */
  chmod(s->socket, 0666);
  *out = fd;
  return AR_OK;
}

ar_status ar_tenancy_serve(const ar_serve_opts *o, ar_err *err) {
  server s;
  memset(&s, 0, sizeof s);
  s.o = *o;
  s.self = geteuid();
  s.next_id = 1;
  if (!o->state_dir || !o->socket_path || strlen(o->state_dir) > 2048 ||
      strlen(o->socket_path) >= sizeof s.socket)
    return ar_errf(err, AR_INVALID, "the state folder and the socket need paths of at most "
                   "2048 bytes");
  snprintf(s.state, sizeof s.state, "%s", o->state_dir);
  snprintf(s.socket, sizeof s.socket, "%s", o->socket_path);
  AR_CHECK(ar_mkdirs(s.state, err));
  chmod(s.state, 0700);
  char path[PATH_CAP + 16];
  snprintf(path, sizeof path, "%s/lock", s.state);
  int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) != 0) {
    if (lock >= 0)
      close(lock);
    return ar_errf(err, AR_STATE, "another server uses the state folder %s (%s is locked)",
                   s.state, path);
  }
  snprintf(path, sizeof path, "%s/jobs", s.state);
  ar_status st = ar_mkdirs(path, err);
  if (st != AR_OK) {
    close(lock);
    return st;
  }
  ar__runner_opts ro = AR__RUNNER_OPTS_INIT;
  ro.policy = o->policy;
  ro.device = o->device;
  /* The server's one device, opened once with its memory options. */
  ro.device_opts.memory_bytes = o->memory_bytes;
  ro.device_opts.memory_fraction = o->memory_fraction;
  ro.device_opts.threads = o->threads;
  ro.threads = o->threads;
  ro.service = true;
  ro.on_event = on_event;
  ro.ctx = &s;
  snprintf(path, sizeof path, "%s/runner", s.state);
  ro.out_dir = path;
  st = ar__runner_create(&ro, &s.r, err);
  if (st != AR_OK) {
    close(lock);
    return st;
  }
  pthread_mutex_init(&s.mu, NULL);
  pthread_mutex_init(&s.add_mu, NULL);
  pthread_cond_init(&s.cv, NULL);
  int lfd = -1;
  pthread_t rt;
  bool runner_started = false;
  st = open_socket(&s, &lfd, err);
  if (st == AR_OK) {
    if (pthread_create(&rt, NULL, runner_main, &s) != 0)
      st = ar_errf(err, AR_NOMEM, "cannot start the scheduler thread");
    else
      runner_started = true;
  }
  if (st == AR_OK) {
    struct sigaction sa, old_int, old_term, old_pipe;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_quit;
    quit_flag = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &old_pipe);
    recover(&s);
    char cap[32];
    slog("listening on %s (state %s; %s under %s, %s)", s.socket, s.state,
         ar__runner_device_name(s.r), o->policy,
         ar_lanes_fmt_bytes(ar__runner_capacity(s.r), cap, sizeof cap));
    while (!quit_flag) {
      struct pollfd p = {lfd, POLLIN, 0};
      int k = poll(&p, 1, 200);
      if (k <= 0 || !(p.revents & POLLIN))
        continue;
      int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      if (fd < 0)
        continue;
      pthread_mutex_lock(&s.mu);
      bool full = s.conns >= MAX_CONNS;
      if (!full)
        s.conns++;
      pthread_mutex_unlock(&s.mu);
      conn *c = full ? NULL : ar_malloc(sizeof *c);
      pthread_t t;
      pthread_attr_t at;
      pthread_attr_init(&at);
      pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
      if (c) {
        c->s = &s;
        c->fd = fd;
      }
      if (!c || pthread_create(&t, &at, conn_main, c) != 0) {
        if (!full) {
          slog("cannot serve a connection (%s); refused", c ? "no thread" : "out of memory");
          pthread_mutex_lock(&s.mu);
          s.conns--;
          pthread_mutex_unlock(&s.mu);
        } else {
          slog("%d connections at once; one refused", MAX_CONNS);
        }
        ar_free(c);
        close(fd);
      }
      pthread_attr_destroy(&at);
    }
    slog("stopping: running jobs write their checkpoints");
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
  }
  if (lfd >= 0) {
    close(lfd);
    unlink(s.socket);
  }
  if (runner_started) {
    ar__runner_stop(s.r);
    pthread_join(rt, NULL);
  }
  /* Connection threads end on their own (read timeouts, ended logs). */
  pthread_mutex_lock(&s.mu);
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 15;
  while (s.conns > 0)
    if (pthread_cond_timedwait(&s.cv, &s.mu, &dl) != 0)
      break;
  bool conns_left = s.conns > 0;
  pthread_mutex_unlock(&s.mu);
  if (!conns_left) {
    ar__runner_destroy(s.r);
    for (size_t i = 0; i < s.njobs; i++)
      sjob_free(s.jobs[i]);
    ar_free(s.jobs);
    ar_free(s.by_ridx);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    pthread_mutex_destroy(&s.add_mu);
  }
  close(lock);
  return st;
}
