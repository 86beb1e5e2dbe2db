/* A job's log lines: written as JSON objects, shown plain or as JSON, old
 * plain lines included (joblog.h). */
#define _GNU_SOURCE
#include "joblog.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void ar__json_num(ar_sbuf *b, const char *key, double v) {
  if (isfinite(v))
    ar_sbuf_printf(b, ", \"%s\": %.10g", key, v);
  else
    ar_sbuf_printf(b, ", \"%s\": null", key);
}

void ar__joblog_line(ar_sbuf *b, double time, const char *kind, const char *text,
                     const ar_tjob_progress *p) {
  ar_sbuf_printf(b, "{\"time\": %.3f, \"kind\": ", time);
  ar_sbuf_json_str(b, kind);
  ar_sbuf_printf(b, ", \"text\": ");
  ar_sbuf_json_str(b, text);
  if (p) {
    ar_sbuf_printf(b, ", \"iteration\": %llu, \"iterations\": %llu",
                   (unsigned long long)p->iteration, (unsigned long long)p->iterations);
    ar__json_num(b, "loss", p->loss);
    ar__json_num(b, "samples_per_s", p->samples_per_s);
    ar__json_num(b, "eta_s", p->eta_s);
  }
  ar_sbuf_printf(b, "}\n");
}

const char *ar__fmt_eta(double s, char *buf, size_t cap) {
  if (!(s >= 0 && s <= 1e7)) {
    snprintf(buf, cap, "--:--");
    return buf;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
  return buf;
}

void ar__joblog_progress_text(const ar_tjob_progress *p, ar_sbuf *out) {
  ar_sbuf_printf(out, "iter %llu/%llu", (unsigned long long)p->iteration,
                 (unsigned long long)p->iterations);
  if (p->iterations > 0)
    ar_sbuf_printf(out, " (%.0f%%)", 100.0 * (double)p->iteration / (double)p->iterations);
  if (isfinite(p->loss))
    ar_sbuf_printf(out, " loss %.4f", p->loss);
  if (isfinite(p->samples_per_s))
    ar_sbuf_printf(out, " %.0f samples/s", p->samples_per_s);
  if (isfinite(p->eta_s)) {
    char eta[32];
    ar_sbuf_printf(out, " ETA %s", ar__fmt_eta(p->eta_s, eta, sizeof eta));
  }
}

/* ---- reading lines back ------------------------------------------------------ */

/* A line as the server wrote it. */
typedef struct parsed {
  double time;
  char kind[32];
  ar_sbuf text;
  bool progress;
  ar_tjob_progress p;
} parsed;

static bool eat(const char **s, const char *lit) {
  size_t n = strlen(lit);
  if (strncmp(*s, lit, n) != 0)
    return false;
  *s += n;
  return true;
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* Four hex digits of a \u escape; -1 when they are not. */
static long hex4(const char *s) {
  long v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(s[i]);
    if (h < 0)
      return -1;
    v = v * 16 + h;
  }
  return v;
}

/* Appends code point c as UTF-8 (NUL and lone surrogates as U+FFFD: a
 * reply's text may hold no NUL byte). */
static void put_utf8(ar_sbuf *b, long c) {
  if (c == 0 || (c >= 0xd800 && c <= 0xdfff))
    c = 0xfffd;
  if (c < 0x80)
    ar_sbuf_printf(b, "%c", (int)c);
  else if (c < 0x800)
    ar_sbuf_printf(b, "%c%c", (int)(0xc0 | c >> 6), (int)(0x80 | (c & 0x3f)));
  else if (c < 0x10000)
    ar_sbuf_printf(b, "%c%c%c", (int)(0xe0 | c >> 12), (int)(0x80 | ((c >> 6) & 0x3f)),
                   (int)(0x80 | (c & 0x3f)));
  else
    ar_sbuf_printf(b, "%c%c%c%c", (int)(0xf0 | c >> 18), (int)(0x80 | ((c >> 12) & 0x3f)),
                   (int)(0x80 | ((c >> 6) & 0x3f)), (int)(0x80 | (c & 0x3f)));
}

/* One \u escape (s after the 'u'), a surrogate pair taken whole; the
 * escape's length in *used. */
static long unicode_escape(const char *s, size_t *used) {
  long c = hex4(s);
  *used = 4;
  if (c >= 0xd800 && c <= 0xdbff && s[4] == '\\' && s[5] == 'u') {
    long lo = hex4(s + 6);
    if (lo >= 0xdc00 && lo <= 0xdfff) {
      *used = 10;
      return 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
    }
  }
  return c;
}

/* A JSON string at *s (after its opening quote) into out; *s past its
 * closing quote.  false when it is not one. */
static bool json_string(const char **s, ar_sbuf *out) {
  const char *p = *s;
  for (;;) {
    const char *q = p + strcspn(p, "\"\\");
    if (q > p)
      ar_sbuf_printf(out, "%.*s", (int)(q - p), p);
    p = q;
    if (*p == '"')
      break;
    if (*p != '\\')
      return false; /* the line ended inside the string */
    static const char esc[] = "\"\\/bfnrt", val[] = "\"\\/\b\f\n\r\t";
    const char *e = p[1] ? strchr(esc, p[1]) : NULL;
    if (e) {
      ar_sbuf_printf(out, "%c", val[e - esc]);
      p += 2;
      continue;
    }
    size_t used = 0;
    long c = p[1] == 'u' ? unicode_escape(p + 2, &used) : -1;
    if (c < 0)
      return false;
    put_utf8(out, c);
    p += 2 + used;
  }
  *s = p + 1;
  return true;
}

/* A number or null at *s; false when neither. */
static bool json_num(const char **s, double *v) {
  if (eat(s, "null")) {
    *v = NAN;
    return true;
  }
  char *end;
  *v = strtod(*s, &end);
  if (end == *s || !isfinite(*v))
    return false;
  *s = end;
  return true;
}

static bool json_count(const char **s, uint64_t *v) {
  double d;
  if (!json_num(s, &d) || !(d >= 0 && d < 1.8e19) || d != floor(d))
    return false;
  *v = (uint64_t)d;
  return true;
}

/* The progress fields after the text. */
static bool parse_progress(const char **s, ar_tjob_progress *p) {
  memset(p, 0, sizeof *p);
  return eat(s, ", \"iteration\": ") && json_count(s, &p->iteration) &&
         eat(s, ", \"iterations\": ") && json_count(s, &p->iterations) &&
         eat(s, ", \"loss\": ") && json_num(s, &p->loss) &&
         eat(s, ", \"samples_per_s\": ") && json_num(s, &p->samples_per_s) &&
         eat(s, ", \"eta_s\": ") && json_num(s, &p->eta_s);
}

/* A line of ar__joblog_line's form, exactly, or false. */
static bool parse_line(const char *line, parsed *out) {
  const char *s = line;
  if (!eat(&s, "{\"time\": ") || !json_num(&s, &out->time) || !isfinite(out->time) ||
      !eat(&s, ", \"kind\": \""))
    return false;
  size_t k = strspn(s, "abcdefghijklmnopqrstuvwxyz_");
  if (k == 0 || k >= sizeof out->kind || s[k] != '"')
    return false;
  memcpy(out->kind, s, k);
  out->kind[k] = '\0';
  s += k + 1;
  if (!eat(&s, ", \"text\": \"") || !json_string(&s, &out->text) || out->text.oom)
    return false;
  out->progress = strcmp(out->kind, "progress") == 0;
  if (out->progress && !parse_progress(&s, &out->p))
    return false;
  return eat(&s, "}") && *s == '\0';
}

/* An old line's "[HH:MM:SS] ": its time on the date of the log file (the
 * day before when that would put it after the file was last written). */
static bool old_clock(const char *line, double file_time, double *out) {
  static const char form[] = "[99:99:99] "; /* 9: a digit */
  for (size_t i = 0; i < sizeof form - 1; i++)
    if (form[i] == '9' ? line[i] < '0' || line[i] > '9' : line[i] != form[i])
      return false;
  int h = (line[1] - '0') * 10 + line[2] - '0', m = (line[4] - '0') * 10 + line[5] - '0',
      sec = (line[7] - '0') * 10 + line[8] - '0';
  if (h > 23 || m > 59 || sec > 60)
    return false;
  time_t ft = (time_t)file_time;
  struct tm tm;
  if (!localtime_r(&ft, &tm))
    return false;
  tm.tm_hour = h;
  tm.tm_min = m;
  tm.tm_sec = sec;
  tm.tm_isdst = -1;
  time_t t = mktime(&tm);
  if (t == (time_t)-1)
    return false;
  if ((double)t > file_time + 60)
    t -= 86400;
  *out = (double)t;
  return true;
}

void ar__joblog_render(ar__joblog_view *v, const char *line, ar_sbuf *out) {
  parsed p;
  memset(&p, 0, sizeof p);
  if (parse_line(line, &p)) {
    v->last = p.time;
    if (v->json) {
      ar__joblog_line(out, p.time, p.kind, p.text.buf ? p.text.buf : "",
                      p.progress ? &p.p : NULL);
    } else {
      time_t t = (time_t)p.time;
      struct tm tm;
      char ts[16] = "--:--:--";
      if (localtime_r(&t, &tm))
        strftime(ts, sizeof ts, "%H:%M:%S", &tm);
      ar_sbuf_printf(out, "[%s] %s\n", ts, p.text.buf ? p.text.buf : "");
    }
    ar_sbuf_fini(&p.text);
    return;
  }
  ar_sbuf_fini(&p.text);
  /* An old line (or one that does not parse): shown as it is, or as an
   * event of the time its clock says (a continuation line: the time of
   * the line before). */
  if (!v->json) {
    ar_sbuf_printf(out, "%s\n", line);
    return;
  }
  double t;
  const char *text = line;
  if (old_clock(line, v->file_time, &t)) {
    text = line + 11;
    v->last = t;
  } else {
    t = v->last > 0 ? v->last : v->file_time;
  }
  ar__joblog_line(out, t, "event", text, NULL);
}
