/*
 * Private to runtime/study: reading the JSON that runs write -- summary.json,
 * eval.json and the lines of metrics.jsonl -- with cJSON (json.c).
 *
 * A real parser, so that a number is found by its key in the object it
 * belongs to whatever the writer's spacing ("key": 1, "key":1, one key per
 * line), and never inside a string or a nested object that happens to hold
 * the same text.  Lookups are of the top-level object's members only.
 * Allocations go through ar_malloc (cJSON's hooks), so out-of-memory tests
 * reach them.  Tested by tests/study/test_json.c against the project's
 * writers.
 */
#ifndef ACCELRT_STUDY_JSON_H
#define ACCELRT_STUDY_JSON_H

#include <cJSON.h>

#include <stdbool.h>
#include <stdio.h>

/* The JSON document in the file at path, or NULL when the file cannot be
 * read (missing, a symlink, over 4 MiB) or does not hold exactly one JSON
 * value (free with cJSON_Delete). */
cJSON *ar__study_json_file(const char *path);

/* The JSON document in text (NUL-terminated; one value and white space
 * only), or NULL (free with cJSON_Delete). */
cJSON *ar__study_json_text(const char *text);

/* The next non-blank line of a JSON-lines stream as a document: a line that
 * is not JSON is skipped.  NULL at the end of f.  *line and *cap are a
 * getline buffer the caller frees. */
cJSON *ar__study_json_next_line(FILE *f, char **line, size_t *cap);

/* The number under key in the object obj; NaN when obj is NULL or not an
 * object, the key is absent, or its value is not a number (null included,
 * as the writers put non-finite numbers). */
double ar__study_json_num(const cJSON *obj, const char *key);

/* Whether key holds true. */
bool ar__study_json_true(const cJSON *obj, const char *key);

/* Whether key holds the string want. */
bool ar__study_json_str_is(const cJSON *obj, const char *key, const char *want);

#endif /* ACCELRT_STUDY_JSON_H */
