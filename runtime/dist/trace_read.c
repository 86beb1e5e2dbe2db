/* Reading back what distributed runs write for the simulator: the time
 * oracle (oracle.tsv, opgraph.c writes it) and the trace (trace.tsv,
 * report.c), the latter through commsched's calibration.  See dist.h. */
#define _GNU_SOURCE
#include "accelrt/dist.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The graph's op named `name`, or AR_COMMSCHED_NONE. */
static ar_commsched_op op_named(const ar_commsched_graph *g, const char *name) {
  size_t n = ar_commsched_graph_op_count(g);
  for (size_t op = 0; op < n; op++)
    if (strcmp(ar_commsched_graph_name(g, (ar_commsched_op)op), name) == 0)
      return (ar_commsched_op)op;
  return AR_COMMSCHED_NONE;
}

ar_status ar_dist_read_oracle(const char *path, ar_commsched_graph *g, int *set, ar_err *err) {
  FILE *f = fopen(path, "r");
  if (!f)
    return ar_errf(err, AR_IO, "%s: cannot open the time oracle (written by a distributed "
                   "run into output.dir/oracle.tsv)", path);
  char line[512], name[256], kind[32];
  double secs;
  int lineno = 0;
  *set = 0;
  ar_status st = AR_OK;
  while (st == AR_OK && fgets(line, sizeof line, f)) {
    lineno++;
    if (line[0] == '#' || line[0] == '\n')
      continue;
    if (sscanf(line, "%255s %31s %lf", name, kind, &secs) != 3 || !(secs >= 0)) {
      st = ar_errf(err, AR_PARSE, "%s:%d: error: expected 'name kind seconds'", path, lineno);
      break;
    }
    if (strcmp(kind, "compute") != 0)
      continue;
    ar_commsched_op op = op_named(g, name);
    if (op != AR_COMMSCHED_NONE) {
      st = ar_commsched_graph_set_time(g, op, secs, err);
      (*set)++;
    }
  }
  fclose(f);
  return st;
}

/* One line of trace.tsv (see ar__dist_report_init). */
typedef struct trace_line {
  long iteration, worker;
  int warm;
  char name[128], kind[16];
  double bytes, start, end, link;
} trace_line;

/* Parses one data line; false for another line. */
static bool parse_line(const char *line, trace_line *t) {
  char wire[64];
  return sscanf(line, "%ld %d %ld %127s %15s %lf %lf %lf %63s %lf", &t->iteration, &t->warm,
                &t->worker, t->name, t->kind, &t->bytes, &t->start, &t->end, wire,
                &t->link) == 10;
}

ar_status ar_dist_read_trace(const char *path, ar_commsched_graph *g,
                             ar_commsched_calib_result *out, ar_err *err) {
  FILE *f = fopen(path, "r");
  if (!f)
    return ar_errf(err, AR_IO, "%s: cannot open the trace (written by a distributed run into "
                   "output.dir/trace.tsv)", path);
  size_t cap = ar_commsched_graph_op_count(g) + 1, n = 0;
  ar_commsched_trace_event *ev = ar_calloc(cap, sizeof *ev);
  ar_commsched_calib *cal = NULL;
  ar_status st = ev ? ar_commsched_calib_create(g, &cal, err)
                    : ar_errf(err, AR_NOMEM, "out of memory");
  char line[1024];
  long lit = -1, lw = -1;
  int lineno = 0;
  /* Events are grouped by (iteration, worker): a group ends when either
   * changes, and at the end of the file.  Warm-up iterations are left out. */
  while (st == AR_OK) {
    char *got = fgets(line, sizeof line, f);
    trace_line t;
    if (got) {
      lineno++;
      if (line[0] == '#' || strncmp(line, "iteration\t", 10) == 0 || line[0] == '\n')
        continue;
      if (!parse_line(line, &t)) {
        st = ar_errf(err, AR_PARSE, "%s:%d: error: expected 10 tab-separated fields", path,
                     lineno);
        break;
      }
      if (t.warm)
        continue;
    }
    if (!got || t.iteration != lit || t.worker != lw) {
      st = ar_commsched_calib_add(cal, ev, n, err);
      n = 0;
      lit = got ? t.iteration : lit;
      lw = got ? t.worker : lw;
    }
    if (!got || st != AR_OK)
      break;
    if (n == cap)
      continue; /* a group cannot hold more events than the graph has ops */
    bool compute = strcmp(t.kind, "compute") == 0;
    ev[n++] = (ar_commsched_trace_event){
        compute ? AR_COMMSCHED_COMPUTE : AR_COMMSCHED_RECV,
        compute ? op_named(g, t.name) : AR_COMMSCHED_NONE,
        t.bytes, t.start, t.end,
        strcmp(t.kind, "recv") == 0 ? t.link : NAN};
  }
  fclose(f);
  if (st == AR_OK)
    st = ar_commsched_calib_apply(cal, g, out, err);
  ar_commsched_calib_destroy(cal);
  ar_free(ev);
  return st;
}
