/* The reply to `accelrt ps`: a table or JSON (ps.h). */
#define _GNU_SOURCE
#include "ps.h"

#include "joblog.h"

#include <math.h>
#include <pwd.h>
#include <string.h>

/* The account name of uid, or the number. */
static void user_name(uid_t uid, char *buf, size_t cap) {
  struct passwd pw, *res = NULL;
  char tmp[1024];
  if (getpwuid_r(uid, &pw, tmp, sizeof tmp, &res) == 0 && res)
    snprintf(buf, cap, "%s", res->pw_name);
  else
    snprintf(buf, cap, "%u", (unsigned)uid);
}

/* "1.2MiB": ar_lanes_fmt_bytes without its space, so a column is a word. */
static const char *bytes_word(size_t n, char *buf, size_t cap) {
  ar_lanes_fmt_bytes(n, buf, cap);
  char *sp = strchr(buf, ' ');
  if (sp)
    memmove(sp, sp + 1, strlen(sp));
  return buf;
}

static const char *num_or_dash(double v, const char *fmt, char *buf, size_t cap) {
  if (isfinite(v))
    snprintf(buf, cap, fmt, v);
  else
    snprintf(buf, cap, "-");
  return buf;
}

void ar__ps_table(ar_sbuf *b, const ar__ps_job *jobs, size_t n) {
  ar_sbuf_printf(b, "%-6s %-10s %-9s %17s %9s %10s %8s %-19s %4s  %s\n", "ID", "USER", "STATE",
                 "ITERATION", "LOSS", "SAMPLES/S", "ETA", "MEMORY", "LANE", "NAME");
  uid_t last_uid = (uid_t)-1;
  char who[64] = "";
  for (size_t i = 0; i < n; i++) {
    const ar__ps_job *j = &jobs[i];
    const ar_tjob_progress *p = &j->progress;
    /* Jobs of one user usually come together: one look-up for them. */
    if (i == 0 || j->uid != last_uid)
      user_name(j->uid, who, sizeof who);
    last_uid = j->uid;
    char it[48], loss[32], sps[32], eta[32], pb[24], lb[24], mem[64], lane[16];
    snprintf(it, sizeof it, "%llu/%llu", (unsigned long long)p->iteration,
             (unsigned long long)p->iterations);
    if (p->persistent_bytes || p->lane_bytes)
      snprintf(mem, sizeof mem, "%s+%s", bytes_word(p->persistent_bytes, pb, sizeof pb),
               bytes_word(p->lane_bytes, lb, sizeof lb));
    else
      snprintf(mem, sizeof mem, "-");
    if (j->lane)
      snprintf(lane, sizeof lane, "%u", (unsigned)j->lane);
    else
      snprintf(lane, sizeof lane, "-");
    if (!isfinite(p->eta_s))
      snprintf(eta, sizeof eta, "-");
    else
      ar__fmt_eta(p->eta_s, eta, sizeof eta);
    ar_sbuf_printf(b, "%-6llu %-10s %-9s %17s %9s %10s %8s %-19s %4s  %s\n",
                   (unsigned long long)j->id, who, j->state, it,
                   num_or_dash(p->loss, "%.4f", loss, sizeof loss),
                   num_or_dash(p->samples_per_s, "%.1f", sps, sizeof sps), eta, mem, lane,
                   j->name[0] ? j->name : "-");
  }
}

/* Unix seconds to the millisecond, or null for 0 (not yet). */
static void put_time(ar_sbuf *b, const char *key, double t) {
  if (t > 0)
    ar_sbuf_printf(b, ", \"%s\": %.3f", key, t);
  else
    ar_sbuf_printf(b, ", \"%s\": null", key);
}

void ar__ps_json(ar_sbuf *b, const ar__ps_job *jobs, size_t n) {
  ar_sbuf_printf(b, "[");
  for (size_t i = 0; i < n; i++) {
    const ar__ps_job *j = &jobs[i];
    const ar_tjob_progress *p = &j->progress;
    ar_sbuf_printf(b, "%s{\"id\": %llu, \"name\": ", i ? ",\n " : "", (unsigned long long)j->id);
    ar_sbuf_json_str(b, j->name);
    ar_sbuf_printf(b, ", \"uid\": %u, \"state\": \"%s\", \"iteration\": %llu, "
                   "\"iterations\": %llu", (unsigned)j->uid, j->state,
                   (unsigned long long)p->iteration, (unsigned long long)p->iterations);
    ar__json_num(b, "loss", p->loss);
    ar__json_num(b, "samples_per_s", p->samples_per_s);
    ar__json_num(b, "eta_s", p->eta_s);
    ar_sbuf_printf(b, ", \"persistent_bytes\": %zu, \"lane_bytes\": %zu", p->persistent_bytes,
                   p->lane_bytes);
    if (j->lane)
      ar_sbuf_printf(b, ", \"lane\": %u", (unsigned)j->lane);
    else
      ar_sbuf_printf(b, ", \"lane\": null");
    ar_sbuf_printf(b, ", \"submitted\": %.3f", j->submitted);
    put_time(b, "started", j->started);
    put_time(b, "ended", j->ended);
    ar_sbuf_printf(b, ", \"error\": ");
    if (j->error[0])
      ar_sbuf_json_str(b, j->error);
    else
      ar_sbuf_printf(b, "null");
    ar_sbuf_printf(b, "}");
  }
  ar_sbuf_printf(b, "]\n");
}
