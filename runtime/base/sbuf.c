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

void ar_sbuf_json_esc(ar_sbuf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  while (*p) {
    /* The run of characters that need no escape, in one append. */
    size_t n = 0;
    while (n < (1u << 30) && p[n] && p[n] != '"' && p[n] != '\\' && p[n] >= 0x20)
      n++;
    if (n) {
      ar_sbuf_printf(b, "%.*s", (int)n, (const char *)p);
      p += n;
      continue;
    }
    if (*p == '"' || *p == '\\')
      ar_sbuf_printf(b, "\\%c", *p);
    else
      ar_sbuf_printf(b, "\\u%04x", *p);
    p++;
  }
}

void ar_sbuf_json_str(ar_sbuf *b, const char *s) {
  ar_sbuf_printf(b, "\"");
  ar_sbuf_json_esc(b, s);
  ar_sbuf_printf(b, "\"");
}

void ar_sbuf_fini(ar_sbuf *b) {
  ar_free(b->buf);
  memset(b, 0, sizeof *b);
}
