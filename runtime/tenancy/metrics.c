/*
 * The service's operator metrics as text: Prometheus's text exposition
 * format (version 0.0.4: a HELP and a TYPE line before each family's
 * samples, counters ending in _total, units in the names, a histogram as
 * cumulative _bucket{le} lines ending at +Inf, then _sum and _count) and
 * the status page's JSON.  Only aggregates reach here (metrics.h).
 */
#include "metrics.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static const char *const mstate_names[AR__MS_COUNT] = {"pending", "queued", "running",
                                                       "done",    "failed", "cancelled"};

const char *ar__mstate_name(ar__mstate s) {
  return s < AR__MS_COUNT ? mstate_names[s] : "unknown";
}

ar__mstate ar__mstate_of(ar_tjob_state s) {
  switch (s) {
  case AR_TJ_PENDING:
    return AR__MS_PENDING;
  case AR_TJ_ADMITTED:
    return AR__MS_RUNNING;
  case AR_TJ_DONE:
    return AR__MS_DONE;
  case AR_TJ_FAILED:
    return AR__MS_FAILED;
  case AR_TJ_CANCELLED:
    return AR__MS_CANCELLED;
  case AR_TJ_QUEUED:
  case AR_TJ_STOPPED:
  default:
    return AR__MS_QUEUED;
  }
}

/* ---- history ---------------------------------------------------------------- */

static const ar__mpoint *point_at(const ar__mhist *h, size_t i) {
  return &h->p[(h->first + i) % AR__MHIST_CAP];
}

void ar__mhist_push(ar__mhist *h, const ar__msnap *s) {
  ar__mpoint p = {s->time,
                  s->run.persistent_bytes,
                  s->run.lane_bytes,
                  s->jobs[AR__MS_RUNNING],
                  s->jobs[AR__MS_QUEUED],
                  0.0};
  if (h->n > 0) {
    const ar__mpoint *prev = point_at(h, h->n - 1);
    double dt = s->time - prev->time;
    if (dt > 0 && s->run.samples >= h->last_samples)
      p.samples_per_s = (double)(s->run.samples - h->last_samples) / dt;
  }
  h->last_samples = s->run.samples;
  if (h->n == AR__MHIST_CAP) {
    h->p[h->first] = p;
    h->first = (h->first + 1) % AR__MHIST_CAP;
  } else {
    h->p[(h->first + h->n) % AR__MHIST_CAP] = p;
    h->n++;
  }
}

double ar__mhist_rate(const ar__mhist *h) {
  return h->n >= 2 ? point_at(h, h->n - 1)->samples_per_s : 0.0;
}

/* ---- Prometheus text ---------------------------------------------------------- */

/* A finite number as Go's parser reads it (and JSON too); 15 digits keep
 * a unix time's milliseconds. */
static void num(ar_sbuf *b, double x) {
  ar_sbuf_printf(b, "%.15g", isfinite(x) ? x : 0.0);
}

/* A label value: backslash, double quote and newline escaped. */
static void label_value(ar_sbuf *b, const char *v) {
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      ar_sbuf_printf(b, "\\%c", *v);
    else if (*v == '\n')
      ar_sbuf_printf(b, "\\n");
    else
      ar_sbuf_printf(b, "%c", *v);
  }
}

static void family(ar_sbuf *b, const char *name, const char *type, const char *help) {
  ar_sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one unlabelled sample: a count (printed exactly: a double
 * would round counts past 2^53), or, when `count` is false, a measure. */
typedef struct single {
  const char *name, *type, *help;
  bool count;
  uint64_t n;
  double x;
} single;

static void singles(ar_sbuf *b, const single *v, size_t nv) {
  for (size_t i = 0; i < nv; i++) {
    family(b, v[i].name, v[i].type, v[i].help);
    ar_sbuf_printf(b, "%s ", v[i].name);
    if (v[i].count)
      ar_sbuf_printf(b, "%llu", (unsigned long long)v[i].n);
    else
      num(b, v[i].x);
    ar_sbuf_printf(b, "\n");
  }
}

static void switch_histogram(ar_sbuf *b, const ar_runner_stats *r) {
  static const char name[] = "accelrt_lane_switch_latency_seconds";
  family(b, name, "histogram",
         "Time from the end of one job's iteration to the start of another job's "
         "iteration in the same lane.");
  uint64_t cum = 0;
  for (size_t i = 0; i <= AR_RUNNER_SWITCH_BOUNDS; i++) {
    cum += r->switch_buckets[i];
    if (i < AR_RUNNER_SWITCH_BOUNDS)
      ar_sbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, ar_runner_switch_bounds[i],
                     (unsigned long long)cum);
    else
      ar_sbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
  }
  ar_sbuf_printf(b, "%s_sum ", name);
  num(b, r->switch_sum_s);
  /* _count is the +Inf bucket by definition, not the runner's own count
   * (which could differ by a switch recorded between the two reads). */
  ar_sbuf_printf(b, "\n%s_count %llu\n", name, (unsigned long long)cum);
}

void ar__metrics_prometheus(const ar__msnap *s, double samples_per_s, ar_sbuf *out) {
  const ar_runner_stats *r = &s->run;
  family(out, "accelrt_info", "gauge", "The server's device and lanes policy (always 1).");
  ar_sbuf_printf(out, "accelrt_info{device=\"");
  label_value(out, s->device);
  ar_sbuf_printf(out, "\",policy=\"");
  label_value(out, s->policy);
  ar_sbuf_printf(out, "\"} 1\n");
  family(out, "accelrt_jobs", "gauge",
         "Jobs the server holds, by state (ended ones as long as --keep-ended keeps them).");
  for (int i = 0; i < AR__MS_COUNT; i++)
    ar_sbuf_printf(out, "accelrt_jobs{state=\"%s\"} %zu\n", mstate_names[i], s->jobs[i]);
  const single v[] = {
      {"accelrt_uptime_seconds", "gauge", "Seconds since the scheduler started.", false, 0,
       r->uptime_s},
      {"accelrt_iterations_total", "counter",
       "Training iterations completed by all jobs since the server started.", true,
       r->iterations, 0},
      {"accelrt_samples_total", "counter",
       "Training samples processed by all jobs since the server started.", true, r->samples, 0},
      {"accelrt_samples_per_second", "gauge",
       "Training samples per second of all jobs together over the last sampling period.", false,
       0, samples_per_s},
      {"accelrt_memory_capacity_bytes", "gauge", "Bytes of the lanes' arena (--memory).", true,
       r->capacity_bytes, 0},
      {"accelrt_memory_persistent_bytes", "gauge",
       "Bytes of the arena held by admitted jobs' persistent blocks (parameters, optimizer "
       "state).",
       true, r->persistent_bytes, 0},
      {"accelrt_memory_lane_bytes", "gauge",
       "Bytes of the arena held by lanes (the ephemeral memory their jobs' iterations take "
       "turns in).",
       true, r->lane_bytes, 0},
      {"accelrt_lanes", "gauge", "Lanes that exist now.", true, r->lanes, 0},
      {"accelrt_admission_waiting_jobs", "gauge",
       "Jobs that arrived and wait for memory (or for the policy) to be admitted.", true,
       r->queued, 0},
      {"accelrt_admission_waits_total", "counter",
       "Jobs that could not be admitted when they arrived and had to wait.", true,
       r->admission_waits, 0},
      {"accelrt_lanes_busy_seconds_total", "counter",
       "Seconds during which at least one lane ran an iteration.", false, 0, r->busy_s},
      {"accelrt_defragmentations_total", "counter",
       "Times the arena was compacted to admit a waiting job.", true, r->defrags, 0},
  };
  singles(out, v, sizeof v / sizeof v[0]);
  switch_histogram(out, r);
}

/* ---- the status page's JSON ---------------------------------------------------- */

typedef enum { F_TIME, F_PERSISTENT, F_LANE, F_RUNNING, F_QUEUED, F_RATE, F_COUNT } field;
static const char *const field_names[F_COUNT] = {"time",    "persistent_bytes", "lane_bytes",
                                                 "running", "queued",           "samples_per_s"};

static double field_of(const ar__mpoint *p, field f) {
  switch (f) {
  case F_TIME:
    return p->time;
  case F_PERSISTENT:
    return (double)p->persistent_bytes;
  case F_LANE:
    return (double)p->lane_bytes;
  case F_RUNNING:
    return (double)p->running;
  case F_QUEUED:
    return (double)p->queued;
  default:
    return p->samples_per_s;
  }
}

static void history_json(ar_sbuf *b, const ar__mhist *h, double period_s) {
  ar_sbuf_printf(b, "\"history\": {\"period_s\": ");
  num(b, period_s);
  for (int f = 0; f < F_COUNT; f++) {
    ar_sbuf_printf(b, ", \"%s\": [", field_names[f]);
    for (size_t i = 0; i < h->n; i++) {
      ar_sbuf_printf(b, i ? ", " : "");
      num(b, field_of(point_at(h, i), (field)f));
    }
    ar_sbuf_printf(b, "]");
  }
  ar_sbuf_printf(b, "}");
}

static void lanes_json(ar_sbuf *b, const ar_runner_stats *r) {
  size_t n = r->lanes < AR_RUNNER_STATS_LANES ? r->lanes : AR_RUNNER_STATS_LANES;
  ar_sbuf_printf(b, "\"lanes_total\": %zu, \"lanes\": [", r->lanes);
  for (size_t i = 0; i < n; i++) {
    const ar_runner_lane_stats *l = &r->lane[i];
    ar_sbuf_printf(b,
                   "%s{\"id\": %u, \"offset\": %zu, \"bytes\": %zu, \"jobs\": %zu, "
                   "\"running\": %s}",
                   i ? ", " : "", (unsigned)l->id, l->offset, l->bytes, l->jobs,
                   l->running ? "true" : "false");
  }
  ar_sbuf_printf(b, "]");
}

void ar__metrics_status_json(const ar__msnap *s, const ar__mhist *h, double period_s,
                             ar_sbuf *out) {
  const ar_runner_stats *r = &s->run;
  ar_sbuf_printf(out, "{\"time\": ");
  num(out, s->time);
  ar_sbuf_printf(out, ", \"device\": ");
  ar_sbuf_json_str(out, s->device);
  ar_sbuf_printf(out, ", \"policy\": ");
  ar_sbuf_json_str(out, s->policy);
  ar_sbuf_printf(out, ", \"uptime_s\": ");
  num(out, r->uptime_s);
  ar_sbuf_printf(out, ", \"jobs\": {");
  for (int i = 0; i < AR__MS_COUNT; i++)
    ar_sbuf_printf(out, "%s\"%s\": %zu", i ? ", " : "", mstate_names[i], s->jobs[i]);
  ar_sbuf_printf(out,
                 "}, \"iterations_total\": %llu, \"samples_total\": %llu, \"samples_per_s\": ",
                 (unsigned long long)r->iterations, (unsigned long long)r->samples);
  num(out, ar__mhist_rate(h));
  size_t used = r->persistent_bytes + r->lane_bytes;
  ar_sbuf_printf(out,
                 ", \"memory\": {\"capacity_bytes\": %zu, \"persistent_bytes\": %zu, "
                 "\"lane_bytes\": %zu, \"free_bytes\": %zu}, \"admission\": {\"waiting\": "
                 "%zu, \"waits_total\": %llu}, \"switches\": {\"count\": %llu, \"sum_s\": ",
                 r->capacity_bytes, r->persistent_bytes, r->lane_bytes,
                 r->capacity_bytes > used ? r->capacity_bytes - used : 0, r->queued,
                 (unsigned long long)r->admission_waits, (unsigned long long)r->switches);
  num(out, r->switch_sum_s);
  ar_sbuf_printf(out, "}, \"busy_s\": ");
  num(out, r->busy_s);
  ar_sbuf_printf(out, ", \"defrags\": %llu, ", (unsigned long long)r->defrags);
  lanes_json(out, r);
  ar_sbuf_printf(out, ", ");
  history_json(out, h, period_s);
  ar_sbuf_printf(out, "}\n");
}
