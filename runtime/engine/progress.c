/* Progress output: a bar redrawn in place on a terminal, a plain line every
 * few seconds elsewhere (logs, CI), nothing with --quiet. */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ar_progress {
  FILE *to;
  bool quiet, tty;
  int64_t total;
  double last;
  int drawn; /* a bar is on the current line */
  bool marked;
  ar_progress_mark first; /* this process's first update */
};

void ar_progress_pace(const ar_progress_mark *from, const ar_progress_mark *now, int64_t total,
                      double *samples_per_s, double *eta_s) {
  double dt = now->t - from->t;
  int64_t its = now->iter - from->iter;
  *samples_per_s = *eta_s = -1;
  if (!(dt > 0) || its <= 0)
    return;
  if (now->samples >= from->samples)
    *samples_per_s = (double)(now->samples - from->samples) / dt;
  if (total > 0)
    *eta_s = total > now->iter ? (double)(total - now->iter) * dt / (double)its : 0;
}

ar_progress *ar_progress_create(FILE *to, bool quiet, int64_t total_iters) {
  ar_progress *p = ar_calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->to = to ? to : stderr;
  p->quiet = quiet;
  p->tty = isatty(fileno(p->to)) && getenv("TERM") && strcmp(getenv("TERM"), "dumb") != 0;
  p->total = total_iters;
  p->last = -1e9;
  return p;
}

static void fmt_eta(double s, char *buf, size_t n) {
  if (s < 0 || s > 1e7) {
    snprintf(buf, n, "--:--");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

void ar_progress_update(ar_progress *p, int64_t iter, int64_t epoch, double loss,
                        int64_t samples) {
  if (!p || p->quiet)
    return;
  double now = ar_now();
  ar_progress_mark here = {now, iter, samples};
  if (!p->marked) { /* a resumed run's earlier iterations are not this pace */
    p->first = here;
    p->marked = true;
  }
  double every = p->tty ? 0.1 : 5.0;
  bool done = p->total > 0 && iter >= p->total;
  if (now - p->last < every && !done)
    return;
  p->last = now;
  double frac = p->total > 0 ? (double)iter / (double)p->total : 0.0;
  double rate, left;
  ar_progress_pace(&p->first, &here, p->total, &rate, &left);
  char eta[32], sps[32];
  fmt_eta(left, eta, sizeof eta);
  if (rate >= 0)
    snprintf(sps, sizeof sps, "%.0f", rate);
  else
    snprintf(sps, sizeof sps, "--");
  if (p->tty) {
    char bar[31];
    int fill = (int)(frac * 30.0);
    for (int i = 0; i < 30; i++)
      bar[i] = i < fill ? '#' : (i == fill ? '>' : '.');
    bar[30] = '\0';
    fprintf(p->to, "\r\033[K[%s] %3.0f%% epoch %lld iter %lld", bar, frac * 100.0,
            (long long)epoch, (long long)iter);
    if (p->total > 0)
      fprintf(p->to, "/%lld", (long long)p->total);
    fprintf(p->to, " loss %.4f %s samples/s ETA %s", loss, sps, eta);
    p->drawn = 1;
  } else {
    fprintf(p->to, "epoch %lld iter %lld", (long long)epoch, (long long)iter);
    if (p->total > 0)
      fprintf(p->to, "/%lld (%.0f%%)", (long long)p->total, frac * 100.0);
    fprintf(p->to, " loss %.4f %s samples/s ETA %s\n", loss, sps, eta);
  }
  fflush(p->to);
}

void ar_progress_note(ar_progress *p, const char *line) {
  if (!p || p->quiet)
    return;
  if (p->drawn) {
    fprintf(p->to, "\r\033[K");
    p->drawn = 0;
    p->last = -1e9; /* redraw the bar on the next update */
  }
  fprintf(p->to, "%s\n", line);
  fflush(p->to);
}

void ar_progress_finish(ar_progress *p) {
  if (!p || p->quiet)
    return;
  if (p->drawn) {
    fprintf(p->to, "\n");
    p->drawn = 0;
  }
  fflush(p->to);
}

void ar_progress_destroy(ar_progress *p) { ar_free(p); }
