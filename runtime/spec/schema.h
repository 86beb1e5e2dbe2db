/*
 * Private to the spec module: the one table that describes a job file.
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ar__stype {
  AR__S_MAP = 0, /* mapping with the keys listed in kids */
  AR__S_LIST,    /* list; every item follows kids[0] */
  AR__S_VARIANT, /* a kid's key as a string (that kid with its defaults), or
                    a mapping with exactly one of the kids */
  AR__S_STRING,  /* any text without NUL characters */
  AR__S_NAME,    /* non-empty string without '/', control characters */
  AR__S_PATH,    /* non-empty file path; resolved by spec.c */
  AR__S_INT,     /* whole decimal number within [imin, imax] */
  AR__S_FLOAT,   /* finite decimal number within the float range */
  AR__S_ENUM,    /* one of values */
  AR__S_DEVICE,  /* "auto", "host" or "cuda:N" */
  AR__S_SIZE,    /* bytes with a unit ("8GiB", "512MiB", "1000000") or a
                    percentage ("90%"): sval.i bytes, or sval.f fraction */
  AR__S_RESERVED /* key accepted, reported as not available in this build */
} ar__stype;

typedef enum ar__srule_kind {
  AR__R_END = 0,
  AR__R_ONE_OF,  /* exactly one of a and b must be given */
  AR__R_CONFLICT /* a and b must not be given together */
} ar__srule_kind;

typedef struct ar__srule {
  ar__srule_kind kind;
  const char *a, *b;
  const char
      *why; /* completes the message, e.g. "test data comes from generate" */
} ar__srule;

typedef struct ar__schema ar__schema;
struct ar__schema {
  const char *key; /* NULL ends a kids array */
  ar__stype type;
  bool required;
  int64_t imin, imax;        /* AR__S_INT; imax INT64_MAX: no upper bound */
  double fmin, fmax;         /* AR__S_FLOAT; fmax INFINITY: no upper bound */
  bool fmin_open, fmax_open; /* AR__S_FLOAT: bound excluded */
  const char *const *values; /* AR__S_ENUM: NULL-terminated */
  int min_items;             /* AR__S_LIST */
  const char *def;           /* default as YAML text; NULL: none, or computed */
  const char *def_doc;       /* default shown in the docs when computed */
  const char *doc;           /* one or more sentences for the reference */
  const char *reserved_msg;  /* AR__S_RESERVED: the error message */
  const ar__schema *kids;    /* MAP, VARIANT: keys; LIST: the item entry */
  const ar__srule *rules;    /* MAP: AR__R_END-terminated, or NULL */
};

/* The top-level mapping of a job file. */
const ar__schema *ar__schema_root(void);

/* The entry for `key` (len bytes) among the kids of a MAP, VARIANT or LIST
 * item entry, or NULL. */
const ar__schema *ar__schema_kid(const ar__schema *parent, const char *key,
                                 size_t len);

/* Writes the allowed range of an INT or FLOAT entry as words
 * ("between 1 and 1048576", ">= 0 and < 1", "> 0") into buf; "" when
 * unbounded.  Returns buf. */
char *ar__schema_range_text(const ar__schema *s, char *buf, size_t cap);

/* The complete example job printed at the top of the reference; a test
 * checks that it is valid. */
extern const char ar__spec_example[];

#endif /* ACCELRT_SPEC_SCHEMA_H */
