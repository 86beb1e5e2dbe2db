/*
 * runtime/tenancy private header: a job's log in the service's state
 * folder (jobs/<id>/log), what `accelrt logs` shows.
 *
 * Each line is one JSON object, written by the server with one write():
 *
 *   {"time": UNIX_SECONDS, "kind": KIND, "text": TEXT}
 *
 * KIND is one of submitted, queued, started, progress, done, failed,
 * cancelled, resumed, stopped, error; a progress line adds "iteration",
 * "iterations", "loss", "samples_per_s" and "eta_s" (numbers, null when
 * unknown).  Logs written before protocol version 3 hold plain lines
 * "[HH:MM:SS] text" (a multi-line error continues on lines of its own).
 *
 * A reader sees either kind of line in either form: plain, "[HH:MM:SS]
 * text" in the server's local time (old lines exactly as written); json,
 * one object per line as above (an old line becomes kind "event", its time
 * rebuilt from its clock and the log file's date).  A line that does not
 * parse is shown as an old one, so nothing a damaged log holds makes a
 * json reader fail.
 *
 * Tests: tests/tenancy/test_joblog.c.
 */
#ifndef ACCELRT_TENANCY_JOBLOG_H
#define ACCELRT_TENANCY_JOBLOG_H

#include "accelrt/base.h"
#include "accelrt/tenancy.h"

#include <stdbool.h>

/* Appends to b one log line (newline included): time in unix seconds, a
 * kind from the list above, any text (copied; bytes that are not UTF-8
 * become U+FFFD), p the figures of a progress line or NULL. */
void ar__joblog_line(ar_sbuf *b, double time, const char *kind, const char *text,
                     const ar_tjob_progress *p);

/* Appends the text of a progress line, as `accelrt run` prints progress
 * off a terminal: "iter 120/1000 (12%) loss 0.5123 3456 samples/s ETA
 * 00:42" (unknown figures left out). */
void ar__joblog_progress_text(const ar_tjob_progress *p, ar_sbuf *out);

/* Appends `, "key": v` to a JSON object being written, null when v is not
 * finite (unknown). */
void ar__json_num(ar_sbuf *b, const char *key, double v);

/* Seconds as "mm:ss" or "h:mm:ss"; "--:--" when unknown (NAN, negative or
 * absurdly large).  Returns buf. */
const char *ar__fmt_eta(double s, char *buf, size_t cap);

/* How one reader sees a log. */
typedef struct ar__joblog_view {
  bool json;
  double file_time; /* the log's modification time: the date of old lines */
  double last;      /* the time of the line before (0: none yet) */
} ar__joblog_view;

/* Appends line (NUL-terminated, without its newline) as the reader sees
 * it, with a newline. */
void ar__joblog_render(ar__joblog_view *v, const char *line, ar_sbuf *out);

#endif
