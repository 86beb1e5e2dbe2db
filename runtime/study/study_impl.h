/*
 * Private to runtime/study: the parsed study, its cells, and the rows of
 * runs.csv, which every file of the module shares.  Each concern has its
 * own header beside its files:
 *
 *   study_file.h  the study file and its checks:
 *     study_file.c  its keys (a table in the spec module's schema
 *                   language), loading, set: and eval:
 *     factors.c     factors and the fraction's generators
 *     validate.c    the study against its base job
 *   design.h      design.c   cells, run order, the printed design
 *   csv.h         csv.c      CSV fields
 *   store.h       store.c    OUT/design.txt and OUT/runs.csv, durable
 *   launcher.h    launcher.c the command a distributed run starts under
 *   child.h       child.c    one child process: start, timeout, stop, signals
 *                 runner.c   the runs (ar_study_run): resume, one row each
 *   json.h        json.c     reading what the runs write (cJSON)
 *   response.h    response.c the responses: names, response:, reading one
 *                 analyze.c  ar_study_analyze: effects.csv, the summary
 *   report.h      report.c   report.html
 *   accelrt/study.h effects.c the statistics (ar_fx_*, public)
 */
#ifndef ACCELRT_STUDY_IMPL_H
#define ACCELRT_STUDY_IMPL_H

#include "accelrt/study.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum study_kind { STUDY_SINGLE = 0, STUDY_JOBS, STUDY_DIST } study_kind;

/* Where a distributed run's launcher came from (launcher.h). */
typedef enum study_launch_from { LAUNCH_FILE = 0, LAUNCH_ENV, LAUNCH_DEFAULT } study_launch_from;

/* At most this many words in a launcher. */
#define STUDY_LAUNCH_MAX_WORDS 64

/* Keys one factor may set together ("a+b: [1, 2]" sets a and b to each
 * level), for keys the job requires to agree (a layer's width and the
 * generated data's label count). */
#define STUDY_MAX_LINKED 4

/* What a factor varies: job keys by --set, the base job itself
 * (`base: [a.yaml, b.yaml]`: a model family is a job file, not a key), or
 * a job run alongside each run on the same machine (`alongside: [none,
 * tenants.yaml]`: a device shared with another tenant, for any model). */
typedef enum study_factor_kind {
  FACTOR_SET = 0,
  FACTOR_BASE,
  FACTOR_ALONGSIDE
} study_factor_kind;

typedef struct study_factor {
  char *path;        /* the factor's name: its --set key, or linked keys
                        joined by '+' as written */
  study_factor_kind kind;
  int n_keys;        /* keys set together, 1..STUDY_MAX_LINKED; 0 for base
                        and alongside, which set no key */
  char **file;       /* (n_levels) base, alongside: each level's job file,
                        resolved against the study file's folder (NULL for
                        alongside's none); NULL for a --set factor */
  uint64_t *seed;    /* (n_levels) base: each base job's seed */
  int n_levels;
  char **set;        /* (n_levels * n_keys) "key=value" as passed to --set,
                        level-major: level l's are set[l * n_keys + i] */
  char **label;      /* (n_levels) the level as written, for tables */
  int line, col;     /* the factor's key in the study file */
  int *lline, *lcol; /* (n_levels) each level */
} study_factor;

typedef struct study_gen {
  int target;    /* the generated factor */
  unsigned word; /* base factors whose product gives it */
  int sign;      /* +1, or -1 for "D=-ABC" */
  char *text;    /* as written */
} study_gen;

struct ar_study {
  char *file;        /* the study file as given */
  char *name;
  char *base;        /* the base job, resolved against the study file's folder;
                        with a base factor its first level (ar__study_base
                        gives a cell's) */
  char *base_given;  /* as written */
  int base_factor;   /* the factor whose levels are base jobs, or -1 */
  int alongside_factor; /* the factor whose levels run alongside, or -1 */
  int n_sets;
  char **sets;       /* (n_sets) fixed overrides for every run */
  int *set_line, *set_col;
  int k;
  study_factor f[AR_FX_MAX_FACTORS];
  int n_gens;
  study_gen gens[AR_FX_MAX_FACTORS];
  ar_study_response_kind resp;
  double resp_x;     /* time_to_p1: the P@1 threshold in percent */
  char *resp_key;    /* AR_RESP_KEY: the summary key */
  char *resp_name;   /* column name in runs.csv, e.g. "samples_per_s" */
  int resp_line, resp_col; /* the response (its argument, if any) in the file */
  bool eval;         /* run `accelrt eval` after each run that trained */
  int eval_line, eval_col; /* the eval key in the study file */
  long eval_points;  /* --points: test points evaluated (0: all) */
  long eval_reps;    /* --reps: timed passes, the fastest kept */
  const char *unit;
  int better;        /* +1 higher is better, -1 lower */
  ar_fx_scale scale; /* scale: linear (default) or log; only the analysis
                        depends on it, so it is not part of design.txt */
  int replicates;
  uint64_t seed;
  bool vary_seed;    /* replicate r runs with the job's seed + r */
  bool keep_checkpoints;
  int ranks;         /* > 0: a distributed base, run under the launcher */
  char **launch_given; /* (n_launch_given) launcher: as written, {ranks} kept */
  int n_launch_given;
  int launch_line, launch_col; /* launcher: in the study file (0: absent) */
  char **launch;     /* (n_launch) a distributed run's argv before EXE run ...,
                        {ranks} replaced (launcher.c) */
  int n_launch;
  study_launch_from launch_from;
  bool launch_ompi;  /* the default mpiexec is Open MPI's */
  double timeout_s;  /* per run; 0 none */
  char *out;         /* output folder */
  study_kind kind;
  uint64_t job_seed; /* the base job's seed */
  int n_cells;       /* product of the levels */
  unsigned char *planned; /* (n_cells) */
  int n_planned;
  int n_runs;
  int *run_cell, *run_rep; /* (n_runs) in the randomised order */
};

/* How a run ended, as runs.csv spells it: one table, the name written to
 * and read from the file.  A run counts as done once it has a row, whatever
 * its status; only RUN_OK rows with a finite response are analysed. */
#define STUDY_RUN_STATUS_MAP(X)                                                \
  X(OK, "ok")                   /* the run gave its response */               \
  X(FAILED, "failed")           /* exit status, signal or interrupted */      \
  X(TIMEOUT, "timeout")         /* stopped after timeout_s */                 \
  X(SKIPPED, "skipped")         /* needs a device that is not there */        \
  X(NO_RESPONSE, "no_response") /* ran, but wrote no such number */           \
  X(NOT_REACHED, "not_reached") /* time_to_p1: never reached the threshold */

typedef enum run_status {
#define STUDY__RUN_STATUS_ENUM(name, text) RUN_##name,
  STUDY_RUN_STATUS_MAP(STUDY__RUN_STATUS_ENUM)
#undef STUDY__RUN_STATUS_ENUM
      RUN_STATUS_COUNT
} run_status;

/* The status's name in runs.csv ("no_response"). */
const char *ar__study_status_name(run_status st);
/* The status named text; false when none is. */
bool ar__study_status_parse(const char *text, run_status *out);

/* One row of runs.csv. */
typedef struct study_row {
  char *run;         /* "A0B1-r2" */
  int cell, rep, order;
  double y;          /* NaN when the run gave none */
  run_status status;
  double wall_s;
  double started;    /* unix seconds */
  char *note;        /* never NULL in a row that was read or made */
} study_row;

/* Frees the strings of rows[0..n) and the array.  NULL is a no-op. */
void ar__study_rows_free(study_row *rows, int n);

/* Level index of factor f in a cell (cells are numbered in Yates order,
 * factor 0 fastest; design.c). */
int ar__study_level(const ar_study *s, int cell, int f);
/* The base job of a cell: the base factor's level, else s->base
 * (design.c). */
const char *ar__study_base(const ar_study *s, int cell);
/* The job file run alongside a cell's runs, or NULL (design.c). */
const char *ar__study_alongside(const ar_study *s, int cell);

/* "A0B1": each factor's letter and level index (design.c). */
void ar__study_cell_name(const ar_study *s, int cell, char *buf, size_t cap);

#endif /* ACCELRT_STUDY_IMPL_H */
