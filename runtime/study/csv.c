/* CSV fields for runs.csv and effects.csv (see csv.h). */
#include "csv.h"

#include "accelrt/base.h"

#include <string.h>

/* Room for `more` bytes and the NUL; false (and b->oom) when there is
 * none. */
static bool reserve(csv_buf *b, size_t more) {
  if (b->len + more + 1 <= b->cap)
    return true;
  size_t nc = 2 * (b->len + more + 1);
  char *grown = ar_realloc(b->buf, nc);
  if (!grown) {
    b->oom = true;
    return false;
  }
  b->buf = grown;
  b->cap = nc;
  return true;
}

void ar__csv_field(csv_buf *b, const char *v) {
  if (!reserve(b, 2 * strlen(v) + 3)) /* comma, quotes, doubled quotes */
    return;
  char *o = b->buf + b->len;
  if (b->fields++)
    *o++ = ',';
  bool q = strpbrk(v, ",\"\n\r") != NULL;
  if (q)
    *o++ = '"';
  for (const char *p = v; *p; p++) {
    if (*p == '"')
      *o++ = '"';
    *o++ = *p == '\n' || *p == '\r' ? ' ' : *p;
  }
  if (q)
    *o++ = '"';
  *o = '\0';
  b->len = (size_t)(o - b->buf);
}

void ar__csv_end_line(csv_buf *b) {
  if (!reserve(b, 1))
    return;
  b->buf[b->len++] = '\n';
  b->buf[b->len] = '\0';
  b->fields = 0;
}

void ar__csv_clear(csv_buf *b) {
  b->len = 0;
  b->fields = 0;
  if (b->buf)
    b->buf[0] = '\0';
}

int ar__csv_split(char *line, char **fields, int max) {
  int n = 0;
  char *p = line;
  while (n < max) {
    char *o = p;
    fields[n++] = o;
    if (*p == '"') {
      p++;
      for (;;) {
        if (*p == '"' && p[1] == '"') {
          *o++ = '"';
          p += 2;
        } else if (*p == '"') {
          p++;
          break;
        } else if (*p == '\0') {
          break;
        } else {
          *o++ = *p++;
        }
      }
    }
    while (*p && *p != ',')
      *o++ = *p++;
    bool more = *p == ',';
    *o = '\0';
    if (!more)
      break;
    p++;
  }
  return n;
}
