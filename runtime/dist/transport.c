/* Waiting on MPI without hanging: every wait in runtime/dist is a polling
 * loop that also watches the abort channel, signals and a dead-peer timer,
 * because a blocking MPI call on a dead peer never returns (MPI_ERRORS_RETURN
 * only helps when the library notices the failure, which TCP and shared
 * memory often do not). */
#define _GNU_SOURCE
#include "dist_impl.h"

#include <limits.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Polling interval when nothing progressed: short enough not to delay a
 * transfer noticeably at 10 Gbps, long enough not to steal the cores the
 * workers compute on (ranks are often oversubscribed).  A known deadline
 * (c->wake_at: the next paced send) shortens it, and the thread's timer
 * slack is cut to 1 us while a job runs (Linux's default of 50 us would
 * double every sleep). */
#define POLL_SLEEP_NS 50000L

static int old_slack = -1;

void ar__dist_install_signals(void) {
  ar_stop_signals_install(false);
  old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  if (old_slack >= 0)
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

void ar__dist_restore_signals(void) {
  ar_stop_signals_restore();
  if (old_slack >= 0)
    prctl(PR_SET_TIMERSLACK, (unsigned long)old_slack, 0, 0, 0);
}

double ar__dist_clock(const ar__dist *c) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - c->clock0;
}

ar_status ar__dist_mpi_err(ar__dist *c, int rc, const char *fmt, ...) {
  char what[512], text[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "MPI error %d", rc);
  else
    text[len] = '\0';
  return ar_errf(c->err, AR_IO, "rank %d: %s: %s", c->rank, what, text);
}

static const char *role(const ar__dist *c, int rank, char *buf, size_t n) {
  if (rank < 0)
    snprintf(buf, n, "a peer");
  else if (rank < c->S)
    snprintf(buf, n, "rank %d (server %d)", rank, rank);
  else
    snprintf(buf, n, "rank %d (worker %d)", rank, rank - c->S);
  return buf;
}

void ar__dist_poll_reset(ar__dist *c) { c->last_progress = ar__dist_clock(c); }

ar_status ar__dist_poll(ar__dist *c, bool progressed, int peer, const char *what) {
  char who[64], dead[64];
  int64_t iter = c->iter + 1;
  int flag = 0;
  if (c->abort_req != MPI_REQUEST_NULL &&
      MPI_Test(&c->abort_req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
    int failed = (int)c->abort_msg[1], by = (int)c->abort_msg[2];
    return ar_errf(c->err, AR_IO,
                   "iteration %lld: %s failed (reported by rank %d at its iteration %lld); "
                   "rank %d stops. The last checkpoint in '%s' is intact: fix the failed "
                   "rank and rerun with --resume",
                   (long long)iter, role(c, failed, dead, sizeof dead), by,
                   (long long)c->abort_msg[0], c->rank, c->spec->output.dir);
  }
  if (ar_stop_signal() && !c->defer_stop)
    return ar_errf(c->err, AR_INTERRUPTED,
                   "iteration %lld: rank %d stopped by signal %d while waiting for %s from %s "
                   "(under mpirun this means another rank died or the job was cancelled; "
                   "mpirun names the rank). The last checkpoint in '%s' is intact",
                   (long long)iter, c->rank, ar_stop_signal(), what,
                   role(c, peer, who, sizeof who), c->spec->output.dir);
  double now = ar__dist_clock(c);
  if (progressed) {
    c->last_progress = now;
    return AR_OK;
  }
  if (now - c->last_progress > c->timeout_s) {
    ar_status st = ar_errf(c->err, AR_IO,
                           "iteration %lld: rank %d got no %s from %s for %.0f s: that rank "
                           "died or hangs. The last checkpoint in '%s' is intact; rerun with "
                           "--resume (ACCELRT_DIST_TIMEOUT sets the wait)",
                           (long long)iter, c->rank, what, role(c, peer, who, sizeof who),
                           c->timeout_s, c->spec->output.dir);
    ar__dist_notify_failure(c, peer);
    return st;
  }
  long ns = POLL_SLEEP_NS;
  if (c->wake_at > 0) {
    double left = c->wake_at - now;
    if (left <= 0)
      return AR_OK;
    if (left * 1e9 < (double)ns)
      ns = (long)(left * 1e9);
  }
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
  c->idle_s += ar__dist_clock(c) - now;
  return AR_OK;
}

void ar__dist_notify_failure(ar__dist *c, int failed) {
  if (c->cctl == MPI_COMM_NULL)
    return;
  int64_t msg[3] = {c->iter + 1, failed, c->rank};
  /* Small messages go eagerly: the sends complete locally even when a
   * receiver is gone.  Wait a bounded time, then leave them. */
  for (int r = 0; r < c->size; r++) {
    if (r == c->rank || r == failed)
      continue;
    MPI_Request q;
    if (MPI_Isend(msg, 3, MPI_INT64_T, r, AR__DIST_TAG_ABORT, c->cctl, &q) != MPI_SUCCESS)
      continue;
    double t0 = ar__dist_clock(c);
    int flag = 0;
    while (!flag && ar__dist_clock(c) - t0 < 1.0) {
      if (MPI_Test(&q, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        break;
      if (!flag) {
        struct timespec ts = {0, POLL_SLEEP_NS};
        nanosleep(&ts, NULL);
      }
    }
    if (!flag)
      MPI_Request_free(&q);
  }
}

ar_status ar__dist_wait(ar__dist *c, MPI_Request *r, int peer, const char *what) {
  ar__dist_poll_reset(c);
  for (;;) {
    int flag = 0;
    MPI_Status s;
    int rc = MPI_Test(r, &flag, &s);
    if (rc != MPI_SUCCESS) {
      ar__dist_notify_failure(c, peer);
      return ar__dist_mpi_err(c, rc, "iteration %lld: waiting for %s from rank %d",
                              (long long)c->iter + 1, what, peer);
    }
    if (flag)
      return AR_OK;
    AR_CHECK(ar__dist_poll(c, false, peer, what));
  }
}

ar_status ar__dist_bcast(ar__dist *c, void *buf, int n, MPI_Datatype type, const char *what) {
  MPI_Request q;
  int rc = MPI_Ibcast(buf, n, type, 0, c->cctl, &q);
  if (rc != MPI_SUCCESS)
    return ar__dist_mpi_err(c, rc, "broadcast of %s", what);
  return ar__dist_wait(c, &q, 0, what);
}

ar_status ar__dist_bcast_bytes(ar__dist *c, void *buf, size_t bytes, const char *what) {
  for (size_t off = 0; off < bytes; off += c->piece) {
    size_t n = bytes - off < c->piece ? bytes - off : c->piece;
    AR_CHECK(ar__dist_bcast(c, (char *)buf + off, (int)n, MPI_BYTE, what));
  }
  return AR_OK;
}

ar_status ar__dist_post(ar__dist *c, bool send, void *buf, size_t bytes, int pieces, int peer,
                        int tag, MPI_Comm comm, MPI_Request *req, const char *what,
                        const char *name) {
  for (int k = 0; k < pieces; k++) {
    size_t off = (size_t)k * c->piece;
    size_t n = bytes > off ? bytes - off : 0;
    if (n > c->piece)
      n = c->piece;
    /* A piece past the message's end is empty but still goes, so that
     * the receiver's count of pieces holds. */
    char *p = (char *)buf + (n ? off : 0);
    int rc = send ? MPI_Isend(p, (int)n, MPI_BYTE, peer, tag, comm, &req[k])
                  : MPI_Irecv(p, (int)n, MPI_BYTE, peer, tag, comm, &req[k]);
    if (rc != MPI_SUCCESS)
      return ar__dist_mpi_err(c, rc, "iteration %lld: %s '%s' %s rank %d",
                              (long long)c->iter + 1, what, name, send ? "to" : "from", peer);
  }
  return AR_OK;
}

ar_status ar__dist_count(ar__dist *c, size_t n, const char *what, int *out) {
  if (n > (size_t)INT_MAX)
    return ar_errf(c->err, AR_UNSUPPORTED, "%s: %zu items do not fit one MPI message (at most "
                   "%d)", what, n, INT_MAX);
  *out = (int)n;
  return AR_OK;
}
