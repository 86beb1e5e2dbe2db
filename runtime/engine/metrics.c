/* JSON objects for metrics.jsonl and summary.json, and atomic file writes.
 * The objects are flat (numbers, strings, booleans), so a tiny writer is
 * enough; a JSON library would add a dependency for no gain here. */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ar_json {
  char *buf;
  size_t len, cap;
  int fields;
  int oom;
};

static void jput(ar_json *j, const char *fmt, ...) {
  if (j->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(j->buf + j->len, j->cap - j->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      j->oom = 1;
      return;
    }
    if ((size_t)n < j->cap - j->len) {
      j->len += (size_t)n;
      return;
    }
    size_t cap = j->cap * 2 + (size_t)n;
    char *b = ar_realloc(j->buf, cap);
    if (!b) {
      j->oom = 1;
      return;
    }
    j->buf = b;
    j->cap = cap;
  }
}

ar_json *ar_json_begin(void) {
  ar_json *j = ar_calloc(1, sizeof *j);
  if (!j)
    return NULL;
  j->cap = 256;
  j->buf = ar_malloc(j->cap);
  if (!j->buf) {
    ar_free(j);
    return NULL;
  }
  j->buf[0] = '\0';
  jput(j, "{");
  return j;
}

static void key(ar_json *j, const char *k) {
  jput(j, "%s\"%s\": ", j->fields++ ? ", " : "", k);
}

void ar_json_num(ar_json *j, const char *k, double v) {
  if (!j)
    return;
  key(j, k);
  if (isfinite(v))
    jput(j, "%.10g", v);
  else
    jput(j, "null");
}

void ar_json_int(ar_json *j, const char *k, int64_t v) {
  if (!j)
    return;
  key(j, k);
  jput(j, "%lld", (long long)v);
}

void ar_json_bool(ar_json *j, const char *k, bool v) {
  if (!j)
    return;
  key(j, k);
  jput(j, v ? "true" : "false");
}

void ar_json_str(ar_json *j, const char *k, const char *v) {
  if (!j)
    return;
  key(j, k);
  jput(j, "\"");
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (*p == '"' || *p == '\\')
      jput(j, "\\%c", *p);
    else if (*p < 0x20)
      jput(j, "\\u%04x", *p);
    else
      jput(j, "%c", *p);
  }
  jput(j, "\"");
}

const char *ar_json_end(ar_json *j) {
  if (!j)
    return NULL;
  jput(j, "}\n");
  return j->oom ? NULL : j->buf;
}

void ar_json_destroy(ar_json *j) {
  if (!j)
    return;
  ar_free(j->buf);
  ar_free(j);
}

ar_status ar_mkdirs(const char *path, ar_err *err) {
  char *p = ar_strdup(path);
  if (!p)
    return ar_errf(err, AR_NOMEM, "out of memory");
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == '\0') {
      char c = *s;
      *s = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        ar_status st = ar_errf(err, AR_IO, "cannot create directory '%s': %s", p,
                               strerror(errno));
        ar_free(p);
        return st;
      }
      *s = c;
      if (c == '\0')
        break;
    }
  }
  ar_free(p);
  return AR_OK;
}

ar_status ar_write_file_atomic(const char *path, const void *data, size_t len, ar_err *err) {
  size_t n = strlen(path) + 8;
  char *tmp = ar_malloc(n);
  if (!tmp)
    return ar_errf(err, AR_NOMEM, "out of memory");
  snprintf(tmp, n, "%s.tmp", path);
  ar_status st = AR_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0) {
    st = ar_errf(err, AR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    goto done;
  }
  const char *p = data;
  size_t left = len;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      st = ar_errf(err, AR_IO, "writing '%s' failed: %s", tmp, strerror(errno));
      break;
    }
    p += w;
    left -= (size_t)w;
  }
  if (st == AR_OK && fsync(fd) != 0)
    st = ar_errf(err, AR_IO, "fsync of '%s' failed: %s", tmp, strerror(errno));
  close(fd);
  if (st == AR_OK && rename(tmp, path) != 0)
    st = ar_errf(err, AR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
  if (st != AR_OK)
    unlink(tmp);
done:
  ar_free(tmp);
  return st;
}

char *ar_path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = ar_malloc(n);
  if (s)
    snprintf(s, n, "%s/%s", dir, name);
  return s;
}

ar_status ar_trim_lines(const char *path, int64_t upto, const char *key, ar_err *err) {
  FILE *f = fopen(path, "r");
  if (!f)
    return AR_OK;
  char *keep = NULL, *line = NULL;
  size_t klen = 0, lcap = 0, kl = strlen(key);
  FILE *mem = open_memstream(&keep, &klen);
  if (!mem) {
    fclose(f);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  ssize_t n;
  while ((n = getline(&line, &lcap, f)) > 0) {
    const char *p = kl ? strstr(line, key) : line;
    char *end = NULL;
    long long it = p ? strtoll(p + kl, &end, 10) : 0;
    if (!p || end == p + kl || it <= upto)
      fwrite(line, 1, (size_t)n, mem);
  }
  free(line);
  fclose(f);
  fclose(mem);
  ar_status st = ar_write_file_atomic(path, keep ? keep : "", klen, err);
  free(keep);
  return st;
}
