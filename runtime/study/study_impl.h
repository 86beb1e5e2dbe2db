/*
 * Private to runtime/study: the parsed study, the rows of runs.csv, and
 * the report writer (report.c) that study.c calls.
 */
#ifndef ACCELRT_STUDY_IMPL_H
#define ACCELRT_STUDY_IMPL_H

#include "accelrt/study.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum study_kind { STUDY_SINGLE = 0, STUDY_JOBS, STUDY_DIST } study_kind;

/* Keys one factor may set together ("a+b: [1, 2]" sets a and b to each
 * level), for keys the job requires to agree (a layer's width and the
 * generated data's label count). */
#define STUDY_MAX_LINKED 4

typedef struct study_factor {
  char *path;        /* the factor's name: its --set key, or linked keys
                        joined by '+' as written */
  int n_keys;        /* keys set together, 1..STUDY_MAX_LINKED */
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
  char *base;        /* the base job, resolved against the study file's folder */
  char *base_given;  /* as written */
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
  int ranks;         /* > 0: under mpiexec */
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

/* One row of runs.csv. */
typedef struct study_row {
  char *run;
  int cell, rep, order;
  double y;          /* NaN when the run gave none */
  char *status;      /* ok, failed, timeout, skipped, no_response, not_reached */
  double wall_s;
  double started;    /* unix seconds */
  char *note;
} study_row;

/* "A0B1": each factor's letter and level index. */
void ar__study_cell_name(const ar_study *s, int cell, char *buf, size_t cap);
int ar__study_level(const ar_study *s, int cell, int f);

/* A number of a flat JSON object (a summary.json, a metrics.jsonl line)
 * by key; NaN when absent or null. */
double ar__study_json_num(const char *json, const char *key);

/* Writes OUT/report.html from the rows and the analysis (report.c). */
ar_status ar__study_report(const ar_study *s, const study_row *rows, int n_rows,
                           const ar_fx_design *d, const ar_fx_result *r, const char *path,
                           ar_err *err);

#endif /* ACCELRT_STUDY_IMPL_H */
