/*
 * Private to runtime/study: the CSV of runs.csv and effects.csv (csv.c).
 * A field with a comma, a quote or a line break is quoted, quotes doubled;
 * line breaks inside a field are written as spaces, so that one line is one
 * row (the store drops a partial last line after a crash).
 */
#ifndef ACCELRT_STUDY_CSV_H
#define ACCELRT_STUDY_CSV_H

#include <stdbool.h>
#include <stddef.h>

/* CSV text being written: buf holds len bytes and a NUL (NULL until the
 * first field).  Zero-initialise it; ar_free(buf) when done. */
typedef struct csv_buf {
  char *buf;
  size_t len, cap;
  int fields; /* fields in the current line so far */
  bool oom;   /* something did not fit in memory: the text is incomplete */
} csv_buf;

/* Appends one field, preceded by a comma unless it is its line's first.
 * Out of memory sets b->oom and leaves the text as it was. */
void ar__csv_field(csv_buf *b, const char *v);

/* Ends the line with a newline: the next field starts a new line. */
void ar__csv_end_line(csv_buf *b);

/* Empties the text, keeping its buffer and b->oom. */
void ar__csv_clear(csv_buf *b);

/* Splits a line in place into at most max fields (unquoting them); returns
 * the number of fields. */
int ar__csv_split(char *line, char **fields, int max);

#endif /* ACCELRT_STUDY_CSV_H */
