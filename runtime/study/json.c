/* Reading the runs' JSON with cJSON (see json.h). */
#define _GNU_SOURCE
#include "json.h"

#include "accelrt/fs.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* cJSON's allocations go through the project's wrapper.  The hooks are
 * process-wide; this module is cJSON's only user in accelrt. */
static void set_hooks(void) {
  cJSON_Hooks hooks = {ar_malloc, ar_free};
  cJSON_InitHooks(&hooks);
}

static void init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, set_hooks);
}

cJSON *ar__study_json_text(const char *text) {
  init();
  return text ? cJSON_ParseWithOpts(text, NULL, true) : NULL;
}

/* summary.json and eval.json are a few kilobytes; this only bounds what a
 * broken run could make the study read. */
#define JSON_FILE_MAX ((size_t)4 << 20)

cJSON *ar__study_json_file(const char *path) {
  char *text = NULL;
  size_t len = 0;
  ar_err quiet = AR_ERR_INIT;
  /* The run wrote the file: like the engine reading back its own files, a
   * symlink in its place is not followed. */
  if (ar_fs_read_own(NULL, path, JSON_FILE_MAX, &text, &len, &quiet) != AR_OK)
    return NULL;
  /* A NUL inside the file would end the text early: then it is not the
   * one JSON value the file should be. */
  cJSON *doc = strlen(text) == len ? ar__study_json_text(text) : NULL;
  ar_free(text);
  return doc;
}

cJSON *ar__study_json_next_line(FILE *f, char **line, size_t *cap) {
  ssize_t n;
  while ((n = getline(line, cap, f)) > 0) {
    if ((size_t)n != strlen(*line))
      continue; /* a NUL inside the line */
    cJSON *doc = ar__study_json_text(*line);
    if (doc)
      return doc;
  }
  return NULL;
}

double ar__study_json_num(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

bool ar__study_json_true(const cJSON *obj, const char *key) {
  return cJSON_IsObject(obj) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

bool ar__study_json_str_is(const cJSON *obj, const char *key, const char *want) {
  const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
  return cJSON_IsString(v) && !strcmp(v->valuestring, want);
}
