/* The span recorder of trace.h: one buffer allocated at create, spans
 * copied into it under the detail rule, rendered as Chrome trace events at
 * the end of a run. */
#define _GNU_SOURCE
#include "accelrt/trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The most spans a recorder may hold (about 1.4 GiB of buffer). */
#define MAX_EVENTS ((size_t)1 << 24)

typedef struct span {
  double t0, t1;
  const char *cat, *what, *label;
  const char *const *keys;
  int64_t vals[AR_TRACE_ARGS];
  int64_t iteration;
  int32_t tid;
  int32_t nargs;
} span;

typedef struct track {
  char name[64];
  bool named, serial;
  double last_end; /* serial tracks: when the last span on it ended */
} track;

struct ar_trace {
  ar_trace_opts o;
  span *spans;       /* (o.events) */
  size_t n;
  size_t detail_cap; /* detail spans only while n is below this */
  track *tracks;     /* (o.tracks) */
  double start;
  int64_t iteration;
  int64_t first;     /* the first iteration it saw (0: none yet): a resumed
                        run's first ones get detail too */
  bool rule;         /* the rule details the current iteration */
  bool detail;       /* and there is room: its detail is kept */
  size_t iter_spans; /* spans of the current iteration */
  size_t most_spans; /* the most of one iteration so far */
  int64_t stopped;   /* first iteration denied detail for room (0: none) */
  uint64_t dropped;
};

/* A non-negative integer: the whole string, at most `max`. */
static bool parse_count(const char *s, int64_t max, int64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+')
    return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < 0 || v > max)
    return false;
  *out = v;
  return true;
}

ar_status ar_trace_opts_env(ar_trace_opts *o, ar_err *err) {
  const char *ev = getenv("ACCELRT_TRACE_EVENTS");
  const char *dt = getenv("ACCELRT_TRACE_DETAIL");
  int64_t events = (int64_t)o->events, first = o->detail_first, every = o->detail_every;
  if (ev && !parse_count(ev, (int64_t)MAX_EVENTS, &events))
    return ar_errf(err, AR_INVALID,
                   "ACCELRT_TRACE_EVENTS='%s': give the spans trace.json may hold, an integer "
                   "from 0 (no trace) to %zu", ev, MAX_EVENTS);
  if (dt) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", dt);
    char *colon = strchr(buf, ':');
    if (colon)
      *colon = '\0';
    if (strlen(dt) >= sizeof buf || !parse_count(buf, INT64_MAX, &first) ||
        (colon && !parse_count(colon + 1, INT64_MAX, &every)))
      return ar_errf(err, AR_INVALID,
                     "ACCELRT_TRACE_DETAIL='%s': give FIRST or FIRST:EVERY (per-layer detail "
                     "in iterations 1..FIRST and every EVERY-th; EVERY 0: none after FIRST)",
                     dt);
  }
  o->events = (size_t)events;
  o->detail_first = first;
  o->detail_every = every;
  return AR_OK;
}

ar_status ar_trace_create(const ar_trace_opts *o, ar_trace **out, ar_err *err) {
  *out = NULL;
  if (o->events == 0)
    return AR_OK;
  if (o->detail_first < 0 || o->detail_every < 0 || o->tracks < 1 || o->events > MAX_EVENTS)
    return ar_errf(err, AR_INVALID, "trace options: detail %lld:%lld, %d tracks, %zu events",
                   (long long)o->detail_first, (long long)o->detail_every, o->tracks,
                   o->events);
  ar_trace *t = ar_calloc(1, sizeof *t);
  if (!t)
    return ar_errf(err, AR_NOMEM, "out of memory for the trace");
  t->o = *o;
  t->spans = ar_malloc(o->events * sizeof *t->spans);
  t->tracks = ar_calloc((size_t)o->tracks, sizeof *t->tracks);
  if (!t->spans || !t->tracks) {
    ar_trace_destroy(t);
    return ar_errf(err, AR_NOMEM, "out of memory for the trace's buffer (%zu bytes for %zu "
                   "spans); lower ACCELRT_TRACE_EVENTS", o->events * sizeof(span), o->events);
  }
  t->detail_cap = o->events - o->events / 4;
  t->start = ar_now();
  *out = t;
  return AR_OK;
}

void ar_trace_destroy(ar_trace *t) {
  if (!t)
    return;
  ar_free(t->spans);
  ar_free(t->tracks);
  ar_free(t);
}

void ar_trace_track(ar_trace *t, int tid, const char *name, bool serial) {
  if (!t || tid < 0 || tid >= t->o.tracks)
    return;
  track *k = &t->tracks[tid];
  snprintf(k->name, sizeof k->name, "%s", name ? name : "");
  k->named = true;
  k->serial = serial;
  k->last_end = 0.0;
}

void ar_trace_iteration(ar_trace *t, int64_t iteration) {
  if (!t || iteration == t->iteration)
    return;
  if (t->iter_spans > t->most_spans)
    t->most_spans = t->iter_spans;
  t->iter_spans = 0;
  t->iteration = iteration;
  const ar_trace_opts *o = &t->o;
  if (t->first == 0 && iteration >= 1)
    t->first = iteration;
  t->rule = iteration >= 1 && (iteration - t->first < o->detail_first ||
                               (o->detail_every > 0 && iteration % o->detail_every == 0));
  /* Detail only when all the spans of the largest iteration so far would
   * still fit under the detail bound (per-iteration spans come between
   * the detail ones): an iteration's detail is whole or absent, never cut
   * short (only a first one larger than the bound can be, and then detail
   * stops there). */
  t->detail = t->rule && t->stopped == 0 && t->n + t->most_spans <= t->detail_cap;
  if (t->rule && !t->detail && t->stopped == 0)
    t->stopped = iteration;
}

bool ar_trace_detail(const ar_trace *t) { return t && t->detail; }

void ar_trace_add(ar_trace *t, const ar_trace_span *s) {
  if (!t)
    return;
  AR_ASSERT(s->tid >= 0 && s->tid < t->o.tracks && s->nargs >= 0 && s->nargs <= AR_TRACE_ARGS);
  if (s->detail && !t->detail) {
    t->dropped += t->rule; /* refused for room, not by the rule */
    return;
  }
  if (s->detail && t->n >= t->detail_cap) {
    t->detail = false; /* the first iteration was larger than the room */
    if (t->stopped == 0)
      t->stopped = t->iteration;
    t->dropped++;
    return;
  }
  if (t->n >= t->o.events) {
    t->dropped++;
    return;
  }
  span *e = &t->spans[t->n++];
  double t0 = s->t0, t1 = s->t1;
  track *k = &t->tracks[s->tid];
  if (k->serial) {
    if (t0 < k->last_end)
      t0 = k->last_end;
    if (t1 < t0)
      t1 = t0;
    k->last_end = t1;
  }
  e->t0 = t0;
  e->t1 = t1;
  e->cat = s->cat;
  e->what = s->what;
  e->label = s->label;
  e->keys = s->keys;
  for (int i = 0; i < s->nargs; i++)
    e->vals[i] = s->vals[i];
  e->nargs = s->nargs;
  e->iteration = t->iteration;
  e->tid = s->tid;
  t->iter_spans++;
}

void ar_trace_add_span(ar_trace *t, int tid, const char *cat, const char *what,
                       const char *label, double t0, double t1, bool detail) {
  ar_trace_span s = {tid, cat, what, label, t0, t1, detail, NULL, {0}, 0};
  ar_trace_add(t, &s);
}

double ar_trace_start(const ar_trace *t) { return t->start; }
size_t ar_trace_count(const ar_trace *t) { return t->n; }
uint64_t ar_trace_dropped(const ar_trace *t) { return t->dropped; }
int64_t ar_trace_detail_stopped(const ar_trace *t) { return t->stopped; }

void ar_trace_render(const ar_trace *t, int pid, double zero, ar_sbuf *b) {
  for (int k = 0; k < t->o.tracks; k++)
    if (t->tracks[k].named)
      ar_ctrace_thread_name(b, pid, k, t->tracks[k].name);
  const char *keys[AR_TRACE_ARGS + 1];
  int64_t vals[AR_TRACE_ARGS + 1];
  for (size_t i = 0; i < t->n && !b->oom; i++) {
    const span *s = &t->spans[i];
    int n = 0;
    if (s->iteration >= 1) {
      keys[n] = "iteration";
      vals[n++] = s->iteration;
    }
    for (int a = 0; a < s->nargs; a++) {
      keys[n] = s->keys[a];
      vals[n++] = s->vals[a];
    }
    ar_ctrace_event e = {pid, s->tid, (s->t0 - zero) * 1e6, (s->t1 - s->t0) * 1e6, s->cat,
                         s->what, s->label, keys, vals, n};
    ar_ctrace_complete(b, &e);
  }
}

void ar_trace_render_other(const ar_trace *t, ar_sbuf *b) {
  ar_sbuf_printf(b, "\"events\": %zu, \"dropped_events\": %llu, \"capacity\": %zu, "
                 "\"detail_first\": %lld, \"detail_every\": %lld, \"detail_stopped_at\": ",
                 t->n, (unsigned long long)t->dropped, t->o.events,
                 (long long)t->o.detail_first, (long long)t->o.detail_every);
  if (t->stopped)
    ar_sbuf_printf(b, "%lld", (long long)t->stopped);
  else
    ar_sbuf_printf(b, "null");
}

ar_status ar_trace_write(const ar_trace *t, const char *process, const ar_fs *fs,
                         const char *path, ar_err *err) {
  ar_sbuf b = {0}, other = {0};
  ar_ctrace_begin(&b);
  ar_ctrace_process_name(&b, 1, process, 0);
  ar_trace_render(t, 1, t->start, &b);
  ar_trace_render_other(t, &other);
  ar_ctrace_end(&b, other.buf);
  ar_status st = b.oom || other.oom
                     ? ar_errf(err, AR_NOMEM, "out of memory writing '%s'", path)
                     : ar_fs_write_atomic(fs, path, b.buf, b.len, err);
  ar_sbuf_fini(&b);
  ar_sbuf_fini(&other);
  return st;
}
