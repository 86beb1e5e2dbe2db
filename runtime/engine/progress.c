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
  double start, last;
  int drawn; /* a bar is on the current line */
};

ar_progress *ar_progress_create(FILE *to, bool quiet, int64_t total_iters) {
  ar_progress *p = ar_calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->to = to ? to : stderr;
  p->quiet = quiet;
  p->tty = isatty(fileno(p->to)) && getenv("TERM") && strcmp(getenv("TERM"), "dumb") != 0;
  p->total = total_iters;
  p->start = ar_now();
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
                        double samples_per_s) {
  if (!p || p->quiet)
    return;
  double now = ar_now();
  double every = p->tty ? 0.1 : 5.0;
  bool done = p->total > 0 && iter >= p->total;
  if (now - p->last < every && !done)
    return;
  p->last = now;
  double elapsed = now - p->start;
  double frac = p->total > 0 ? (double)iter / (double)p->total : 0.0;
  char eta[32];
  fmt_eta(frac > 0 ? elapsed * (1.0 - frac) / frac : -1, eta, sizeof eta);
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
    fprintf(p->to, " loss %.4f %.0f samples/s ETA %s", loss, samples_per_s, eta);
    p->drawn = 1;
  } else {
    fprintf(p->to, "epoch %lld iter %lld", (long long)epoch, (long long)iter);
    if (p->total > 0)
      fprintf(p->to, "/%lld (%.0f%%)", (long long)p->total, frac * 100.0);
    fprintf(p->to, " loss %.4f %.0f samples/s ETA %s\n", loss, samples_per_s, eta);
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
