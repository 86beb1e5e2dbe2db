/* A growable string and JSON string escaping (base.h). */
#define _GNU_SOURCE
#include "accelrt/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ar_sbuf_printf(ar_sbuf *b, const char *fmt, ...) {
  if (b->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->buf && (size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n + 64;
    char *nb = ar_realloc(b->buf, cap);
    if (!nb) {
      b->oom = true;
      return;
    }
    b->buf = nb;
    b->cap = cap;
  }
}

void ar_sbuf_json_str(ar_sbuf *b, const char *s) {
  ar_sbuf_printf(b, "\"");
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      ar_sbuf_printf(b, "\\%c", *p);
    else if (*p < 0x20)
      ar_sbuf_printf(b, "\\u%04x", *p);
    else
      ar_sbuf_printf(b, "%c", *p);
  }
  ar_sbuf_printf(b, "\"");
}

void ar_sbuf_fini(ar_sbuf *b) {
  ar_free(b->buf);
  memset(b, 0, sizeof *b);
}
