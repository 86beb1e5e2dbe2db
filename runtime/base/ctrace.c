/* The Chrome trace format's text (trace.h): the object's head and tail,
 * complete events, instants, counters and the metadata that names
 * processes and tracks.  Format: the "Trace Event Format" document of the
 * Chromium project (JSON object form, times in microseconds). */
#include "accelrt/trace.h"

#include <string.h>

/* Events are separated by ",\n"; the first after the head ('[') or in an
 * empty buffer by nothing but a line break. */
static void sep(ar_sbuf *b) {
  if (b->oom || b->len == 0)
    return;
  ar_sbuf_printf(b, b->buf[b->len - 1] == '[' ? "\n" : ",\n");
}

void ar_ctrace_begin(ar_sbuf *b) {
  ar_sbuf_printf(b, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
}

void ar_ctrace_end(ar_sbuf *b, const char *other) {
  ar_sbuf_printf(b, "\n], \"otherData\": {%s}}\n", other ? other : "");
}

void ar_ctrace_events(ar_sbuf *b, const char *events, size_t len) {
  if (!events || len == 0)
    return;
  sep(b);
  for (size_t at = 0; at < len;) { /* "%.*s" takes an int */
    size_t n = len - at < ((size_t)1 << 30) ? len - at : ((size_t)1 << 30);
    ar_sbuf_printf(b, "%.*s", (int)n, events + at);
    at += n;
  }
}

void ar_ctrace_process_name(ar_sbuf *b, int pid, const char *name, int sort) {
  sep(b);
  ar_sbuf_printf(b, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": ",
                 pid);
  ar_sbuf_json_str(b, name);
  ar_sbuf_printf(b, "}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                 "\"args\": {\"sort_index\": %d}}", pid, sort);
}

void ar_ctrace_thread_name(ar_sbuf *b, int pid, int tid, const char *name) {
  sep(b);
  ar_sbuf_printf(b, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                 "\"args\": {\"name\": ", pid, tid);
  ar_sbuf_json_str(b, name);
  ar_sbuf_printf(b, "}},\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                 "\"tid\": %d, \"args\": {\"sort_index\": %d}}", pid, tid, tid);
}

static void args(ar_sbuf *b, const char *const *keys, const int64_t *vals, int n) {
  for (int i = 0; i < n; i++) {
    ar_sbuf_printf(b, "%s", i ? ", " : "");
    ar_sbuf_json_str(b, keys[i]);
    ar_sbuf_printf(b, ": %lld", (long long)vals[i]);
  }
}

/* The members every event of ar_ctrace_event has, from the name on. */
static void event(ar_sbuf *b, const ar_ctrace_event *e, const char *ph) {
  sep(b);
  ar_sbuf_printf(b, "{\"name\": \"");
  ar_sbuf_json_esc(b, e->what);
  ar_sbuf_printf(b, "%s", e->what && e->label ? " " : "");
  ar_sbuf_json_esc(b, e->label);
  ar_sbuf_printf(b, "\"");
  if (e->cat) {
    ar_sbuf_printf(b, ", \"cat\": ");
    ar_sbuf_json_str(b, e->cat);
  }
  ar_sbuf_printf(b, ", \"ph\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f", ph, e->pid,
                 e->tid, e->ts);
}

/* The event's args, when it has some, and its closing brace. */
static void close_event(ar_sbuf *b, const ar_ctrace_event *e) {
  if (e->nargs > 0) {
    ar_sbuf_printf(b, ", \"args\": {");
    args(b, e->keys, e->vals, e->nargs);
    ar_sbuf_printf(b, "}");
  }
  ar_sbuf_printf(b, "}");
}

void ar_ctrace_complete(ar_sbuf *b, const ar_ctrace_event *e) {
  event(b, e, "X");
  ar_sbuf_printf(b, ", \"dur\": %.3f", e->dur > 0 ? e->dur : 0.0);
  close_event(b, e);
}

void ar_ctrace_instant(ar_sbuf *b, const ar_ctrace_event *e) {
  event(b, e, "i");
  ar_sbuf_printf(b, ", \"s\": \"t\"");
  close_event(b, e);
}

void ar_ctrace_counter(ar_sbuf *b, int pid, double ts, const char *name,
                       const char *const *keys, const int64_t *vals, int n) {
  sep(b);
  ar_sbuf_printf(b, "{\"name\": ");
  ar_sbuf_json_str(b, name);
  ar_sbuf_printf(b, ", \"ph\": \"C\", \"pid\": %d, \"ts\": %.3f, \"args\": {", pid, ts);
  args(b, keys, vals, n);
  ar_sbuf_printf(b, "}}");
}
