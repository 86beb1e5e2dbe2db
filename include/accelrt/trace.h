/*
 * accelrt trace: timelines in the Chrome trace format (trace.json), which
 * ui.perfetto.dev and chrome://tracing open.  Part of the base library;
 * two layers:
 *
 *   - the writer (ar_ctrace_*): the text of a trace, the object
 *     {"displayTimeUnit": "ms", "traceEvents": [...], "otherData": {...}}
 *     with complete events ("X"), instants ("i"), counters ("C") and the
 *     metadata events that name processes and tracks, appended to an
 *     ar_sbuf with JSON escaping.  Every trace.json of accelrt is written
 *     through it: the lanes runner's, a single run's and a distributed
 *     run's.
 *   - the recorder (ar_trace): a buffer of spans allocated once, before a
 *     run's loop, so that recording allocates nothing and costs a clock
 *     read and a copy.  Its rule, the one the docs state: it holds
 *     opts.events spans; "detail" spans (a layer's or op's forward and
 *     backward, a transfer) are kept only in detailed iterations
 *     (the first detail_first the recorder sees -- 1..detail_first, or a
 *     resumed run's first ones -- and every detail_every-th) and only while the
 *     buffer is at most three quarters full; the per-iteration spans
 *     (iteration, batch, optimizer, evaluation, checkpoint, table rebuilds)
 *     while there is room.  An iteration gets detail only when as many
 *     spans as the largest iteration so far had still fit under the three
 *     quarters, so a detailed iteration is never cut short; from the first
 *     that does not fit on, no iteration gets detail (otherData's
 *     detail_stopped_at).  Whatever did not fit is counted (otherData).
 *
 * Times are seconds of ar_now() (CLOCK_MONOTONIC); a trace's ts and dur
 * are microseconds.  A recorder is used from one thread.
 *
 * Tests: tests/base/test_trace.c (the writer's text, the rule, the
 * bound), tests/e2e/trace.sh (the trace.json of each kind of run).
 */
#ifndef ACCELRT_TRACE_H
#define ACCELRT_TRACE_H

#include "accelrt/base.h"
#include "accelrt/fs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the writer ----------------------------------------------------------
 * Each call appends one event (or the object's head or tail) to b,
 * separated from the event before it; a buffer that holds only events (no
 * head) can be appended to a trace later with ar_ctrace_events.  Strings
 * are escaped; an allocation failure sets b->oom (check once at the end,
 * as for every ar_sbuf). */

/* One complete event ("X") or instant ("i").  The name is what and label
 * joined by a space (either may be NULL).  keys[0..nargs) with vals go
 * into args (nargs 0: no args). */
typedef struct ar_ctrace_event {
  int pid, tid;
  double ts, dur;   /* microseconds */
  const char *cat;  /* NULL: none */
  const char *what, *label;
  const char *const *keys;
  const int64_t *vals;
  int nargs;
} ar_ctrace_event;

/* {"displayTimeUnit": "ms", "traceEvents": [ */
void ar_ctrace_begin(ar_sbuf *b);
/* ], "otherData": {OTHER}} and a newline; other is the object's members
 * as JSON text ("\"a\": 1, \"b\": [2]"), or NULL for an empty object. */
void ar_ctrace_end(ar_sbuf *b, const char *other);
/* Events written into another buffer (len bytes at events; none: nothing). */
void ar_ctrace_events(ar_sbuf *b, const char *events, size_t len);
/* Metadata: process pid's name and its place among processes (sort),
 * track (thread) tid's name, placed by its tid. */
void ar_ctrace_process_name(ar_sbuf *b, int pid, const char *name, int sort);
void ar_ctrace_thread_name(ar_sbuf *b, int pid, int tid, const char *name);
void ar_ctrace_complete(ar_sbuf *b, const ar_ctrace_event *e);
/* An instant on its track (e->dur is ignored). */
void ar_ctrace_instant(ar_sbuf *b, const ar_ctrace_event *e);
/* A counter ("C"): series keys[i] of counter `name` at vals[i]. */
void ar_ctrace_counter(ar_sbuf *b, int pid, double ts, const char *name,
                       const char *const *keys, const int64_t *vals, int n);

/* ---- the recorder -------------------------------------------------------- */

typedef struct ar_trace ar_trace;

/* The tracks a run's recorder uses (the tid of its spans; none is 0,
 * which Perfetto treats as the kernel's idle thread, as it does pid 0). */
enum {
  AR_TRACE_ITERATIONS = 1, /* one span per iteration */
  AR_TRACE_STEPS = 2,      /* its parts: batch, forward/backward per layer
                              or op, loss, optimizer, evaluation,
                              checkpoint (never overlapping) */
  AR_TRACE_LSH = 3,        /* hash-table rebuilds of sampled layers */
  AR_TRACE_CHANNEL = 16    /* distributed: channel k is tid 16 + k */
};

typedef struct ar_trace_opts {
  size_t events;        /* spans the buffer holds; 0: no recorder */
  int64_t detail_first; /* detail in the first detail_first iterations seen */
  int64_t detail_every; /* and in every detail_every-th (0: no others) */
  int tracks;           /* tids 0..tracks-1 can be named */
} ar_trace_opts;
#define AR_TRACE_OPTS_INIT {131072, 10, 100, 64}

/* The environment's overrides: ACCELRT_TRACE_EVENTS=N (0: no trace) and
 * ACCELRT_TRACE_DETAIL=FIRST[:EVERY].  AR_INVALID naming the variable and
 * what it takes when one is malformed (o unchanged then). */
ar_status ar_trace_opts_env(ar_trace_opts *o, ar_err *err);

/* Allocates the buffer (every byte the recorder will use) and notes the
 * trace's start, ar_now().  *out is NULL when o->events is 0.  AR_NOMEM
 * naming the bytes; AR_INVALID for a negative detail rule or tracks < 1. */
ar_status ar_trace_create(const ar_trace_opts *o, ar_trace **out, ar_err *err);
void ar_trace_destroy(ar_trace *t); /* NULL is a no-op */

/* Names track tid (copied; 0 <= tid < tracks, others ignored).  A serial
 * track carries one thing at a time (a channel): a span added to it
 * starts no earlier than the previous one on it ended, and ends no
 * earlier than it starts.  Other tracks keep the times as given. */
void ar_trace_track(ar_trace *t, int tid, const char *name, bool serial);

/* The iteration (1-based) the following spans belong to; decides whether
 * it is detailed.  NULL t: nothing. */
void ar_trace_iteration(ar_trace *t, int64_t iteration);
/* Whether detail spans of the current iteration are kept (false for
 * NULL): callers read the clock for detail only when it is true. */
bool ar_trace_detail(const ar_trace *t);

#define AR_TRACE_ARGS 3
typedef struct ar_trace_span {
  int tid;
  const char *cat;   /* static storage */
  const char *what;  /* static storage, or NULL */
  const char *label; /* borrowed until the trace is written, or NULL */
  double t0, t1;     /* ar_now() seconds */
  bool detail;
  const char *const *keys; /* static: nargs names */
  int64_t vals[AR_TRACE_ARGS];
  int nargs;
} ar_trace_span;

/* Records a span (copied) of the current iteration, or counts it as
 * dropped under the rule above.  NULL t: nothing. */
void ar_trace_add(ar_trace *t, const ar_trace_span *s);
/* The same without args. */
void ar_trace_add_span(ar_trace *t, int tid, const char *cat, const char *what,
                       const char *label, double t0, double t1, bool detail);

/* ar_now() when the recorder was created. */
double ar_trace_start(const ar_trace *t);
/* Spans held, and dropped. */
size_t ar_trace_count(const ar_trace *t);
uint64_t ar_trace_dropped(const ar_trace *t);
/* The first iteration the rule would detail that got none for lack of
 * room (0: none). */
int64_t ar_trace_detail_stopped(const ar_trace *t);

/* Appends the named tracks' metadata and every span as complete events of
 * process pid, ts counted from zero (an ar_now() time); a span's args are
 * its iteration (when set) and its own. */
void ar_trace_render(const ar_trace *t, int pid, double zero, ar_sbuf *b);
/* Appends the recorder's otherData members: "events", "dropped_events",
 * "capacity", "detail_first", "detail_every", "detail_stopped_at" (null
 * when detail never stopped early). */
void ar_trace_render_other(const ar_trace *t, ar_sbuf *b);
/* A one-process trace.json at path (atomically, through fs): process 1
 * named `process`, the spans from the recorder's start.  AR_NOMEM, AR_IO. */
ar_status ar_trace_write(const ar_trace *t, const char *process, const ar_fs *fs,
                         const char *path, ar_err *err);

#ifdef __cplusplus
}
#endif
#endif /* ACCELRT_TRACE_H */
