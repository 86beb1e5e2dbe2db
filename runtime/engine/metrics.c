/* JSON objects for metrics.jsonl and summary.json (flat: numbers, strings,
 * booleans), on base's growable string and its JSON escaping, and the
 * resume-time trimming of metrics.jsonl. */
#define _GNU_SOURCE
#include "accelrt/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ar_json {
  ar_sbuf b;
  int fields;
};

ar_json *ar_json_begin(void) {
  ar_json *j = ar_calloc(1, sizeof *j);
  if (j)
    ar_sbuf_printf(&j->b, "{");
  return j;
}

static void key(ar_json *j, const char *k) {
  ar_sbuf_printf(&j->b, "%s", j->fields++ ? ", " : "");
  ar_sbuf_json_str(&j->b, k);
  ar_sbuf_printf(&j->b, ": ");
}

void ar_json_num(ar_json *j, const char *k, double v) {
  if (!j)
    return;
  key(j, k);
  if (isfinite(v))
    ar_sbuf_printf(&j->b, "%.10g", v);
  else
    ar_sbuf_printf(&j->b, "null");
}

void ar_json_int(ar_json *j, const char *k, int64_t v) {
  if (!j)
    return;
  key(j, k);
  ar_sbuf_printf(&j->b, "%lld", (long long)v);
}

void ar_json_bool(ar_json *j, const char *k, bool v) {
  if (!j)
    return;
  key(j, k);
  ar_sbuf_printf(&j->b, v ? "true" : "false");
}

void ar_json_str(ar_json *j, const char *k, const char *v) {
  if (!j)
    return;
  key(j, k);
  ar_sbuf_json_str(&j->b, v);
}

const char *ar_json_end(ar_json *j) {
  if (!j)
    return NULL;
  ar_sbuf_printf(&j->b, "}\n");
  return j->b.oom ? NULL : j->b.buf;
}

void ar_json_destroy(ar_json *j) {
  if (!j)
    return;
  ar_sbuf_fini(&j->b);
  ar_free(j);
}

ar_status ar_mkdirs(const char *path, ar_err *err) { return ar_fs_mkdirs(NULL, path, err); }

ar_status ar_write_file_atomic(const char *path, const void *data, size_t len, ar_err *err) {
  return ar_fs_write_atomic(NULL, path, data, len, err);
}

/* The iteration a line is about: the number member `key` of a JSON
 * object (parsed, whatever the writer's spacing), or with key NULL the
 * number that starts the line; -inf for a line without one (kept). */
static double line_iteration(const char *line, const char *key) {
  if (!key) {
    char *end;
    long long it = strtoll(line, &end, 10);
    return end == line ? -INFINITY : (double)it;
  }
  cJSON *doc = cJSON_Parse(line);
  const cJSON *v = cJSON_IsObject(doc) ? cJSON_GetObjectItemCaseSensitive(doc, key) : NULL;
  double it = cJSON_IsNumber(v) ? v->valuedouble : -INFINITY;
  cJSON_Delete(doc);
  return it;
}

ar_status ar_trim_lines(const ar_fs *fs, const char *path, int64_t upto, const char *key,
                        ar_err *err) {
  int fd;
  ar_err quiet = AR_ERR_INIT;
  ar_status os = ar_fs_open_own(fs, path, &fd, &quiet);
  if (os == AR_NOTFOUND)
    return AR_OK;
  if (os != AR_OK)
    return ar_errf(err, os, "%s", quiet.msg);
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return ar_errf(err, AR_IO, "cannot read '%s': %s", path, strerror(errno));
  }
  char *keep = NULL, *line = NULL;
  size_t klen = 0, lcap = 0;
  FILE *mem = open_memstream(&keep, &klen);
  if (!mem) {
    fclose(f);
    return ar_errf(err, AR_NOMEM, "out of memory");
  }
  ssize_t n;
  ar_status st = AR_OK;
  while ((n = getline(&line, &lcap, f)) > 0) {
    if (n > (1 << 20)) {
      st = ar_errf(err, AR_CORRUPT, "'%s' holds a line of over 1 MiB, which accelrt never "
                   "writes; move the file away and resume again", path);
      break;
    }
    if (line_iteration(line, key) <= (double)upto)
      fwrite(line, 1, (size_t)n, mem);
  }
  free(line);
  fclose(f);
  fclose(mem);
  if (st == AR_OK)
    st = ar_fs_write_atomic(fs, path, keep ? keep : "", klen, err);
  free(keep);
  return st;
}
