/*
 * Private to the spec module: the one table that describes a job file.
 * The entry type (ar_schema) is public, in accelrt/spec.h, so that other
 * modules describe their own YAML files in the same language and have them
 * checked by the same code (runtime/study/study_file.c).
 *
 * Each entry names a key, its type, range, enum values, default, whether it
 * is required, a sentence of documentation and, for mappings and lists, the
 * entries below it.  runtime/spec/spec.c validates and converts job files by
 * walking this table, and ar_spec_schema_markdown() prints it as the
 * job-file reference (docs/job-file.md), so the checks and the docs cannot
 * disagree.  Rules that tie several keys together (the last layer picks the
 * loss, generate.features must match model.input) live in spec.c; their
 * sentences are in the docs text of the keys involved.
 *
 * Tested through tests/spec/test_spec.c (every default is checked against
 * its own entry there).
 */
#ifndef ACCELRT_SPEC_SCHEMA_H
#define ACCELRT_SPEC_SCHEMA_H

#include "accelrt/spec.h" /* the entry types (ar_schema), public */

#include <stddef.h>

/* The top-level mapping of a job file. */
const ar_schema *ar__schema_root(void);

/* The entry for `key` (len bytes) among the kids of a MAP, VARIANT or LIST
 * item entry, or NULL. */
const ar_schema *ar__schema_kid(const ar_schema *parent, const char *key,
                                size_t len);

/* Writes the allowed range of an INT or FLOAT entry as words
 * ("between 1 and 1048576", ">= 0 and < 1", "> 0") into buf; "" when
 * unbounded.  Returns buf. */
char *ar__schema_range_text(const ar_schema *s, char *buf, size_t cap);

/* The complete example job printed at the top of the reference; a test
 * checks that it is valid. */
extern const char ar__spec_example[];

#endif /* ACCELRT_SPEC_SCHEMA_H */
