/*
 * libFuzzer harness for the job-description parser.
 *
 * The input is a job file.  Its leading lines of the form "#set KEY=VALUE"
 * (YAML comments, so the document itself is unchanged) are also passed as
 * --set overrides, at most MAX_SETS of them, so the override code is
 * fuzzed too.  Data files are not checked (check_files = false).
 *
 * Besides crashes, leaks and undefined behaviour (the sanitizers), the
 * harness aborts when the result breaks the API's promises: AR_OK exactly
 * when there are no diagnostics, a spec only with AR_OK, and a valid spec
 * ends in a softmax or sigmoid layer.
 *
 * Built as `fuzz_spec` with clang and -DACCELRT_FUZZ=ON (ci/fuzz-spec runs
 * it); replay.c runs the same entry over tests/fuzz/corpus/spec with any
 * compiler as the ctest test fuzz.spec_corpus.
 */
#include "accelrt/spec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SETS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Copies the leading "#set " lines into sets[]; returns how many. */
static int take_sets(const char *text, size_t size, char *sets[MAX_SETS]) {
  int n = 0;
  size_t at = 0;
  while (n < MAX_SETS && size - at > 5 && !memcmp(text + at, "#set ", 5)) {
    const char *start = text + at + 5;
    const char *nl = memchr(start, '\n', size - at - 5);
    size_t len = nl ? (size_t)(nl - start) : size - at - 5;
    sets[n] = malloc(len + 1);
    if (!sets[n])
      break;
    memcpy(sets[n], start, len);
    sets[n][len] = '\0'; /* an inner NUL just ends the override early */
    n++;
    at = nl ? (size_t)(nl - text) + 1 : size;
  }
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  char *sets[MAX_SETS];
  int n_sets = take_sets(text, size, sets);

  ar_spec *spec = NULL;
  ar_diags diags;
  ar_status st =
      ar_spec_parse(text, size, "fuzz.yaml", "base", (const char *const *)sets,
                    n_sets, false, &spec, &diags);
  if (st != AR_OK && st != AR_SPEC)
    abort(); /* nothing here can run out of memory or be an invalid call */
  if ((st == AR_OK) != (diags.count == 0) || (st == AR_OK) != (spec != NULL))
    abort();
  if (spec) {
    if (spec->n_layers < 1 || !spec->name || !spec->device || !spec->output.dir)
      abort();
    ar_act last = spec->layers[spec->n_layers - 1].act;
    if (last != AR_ACT_SOFTMAX && last != AR_ACT_SIGMOID)
      abort();
    if (spec->data.generate == (spec->data.train != NULL))
      abort();
  }
  /* Every message must print (and be a C string). */
  static FILE *sink;
  if (!sink)
    sink = fopen("/dev/null", "w");
  if (sink)
    ar_diags_print(&diags, "fuzz.yaml", sink);

  ar_spec_destroy(spec);
  ar_diags_fini(&diags);
  for (int i = 0; i < n_sets; i++)
    free(sets[i]);
  return 0;
}
