/* The accelrt command line: one function per subcommand.  Each returns the
 * process exit status: 0 success, 1 runtime failure, 2 usage or job file. */
#ifndef ACCELRT_CLI_H
#define ACCELRT_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "accelrt/spec.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* main's argv, for re-executing. */
extern char **cli_argv;
/* Re-executes the process with OMP_WAIT_POLICY=passive unless the user set
 * it (returns when it did or cannot): for commands that run one thread
 * team per lane (a jobs: file, the service). */
void cli_passive_threads(void);
/* Re-executes the process with GOMP_SPINCOUNT=10000 unless the user set it
 * or OMP_WAIT_POLICY: waiting threads spin briefly, then sleep (a single
 * job's `accelrt run`, `accelrt eval`). */
void cli_short_spin(void);

/* getopt_long for a command (argv[0] is its name), with our own messages
 * on stderr: an unknown option with the nearest known one ("accelrt run:
 * unknown option '--resum'; did you mean '--resume'?"), an ambiguous
 * prefix with the options it could be, a missing or unwanted value.
 * Returns what getopt_long returns ('?' after such a message).
 * options.c. */
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longs);
/* For a command that takes no argument but --help (help: its text, to
 * stdout): -1 to go on, else the exit status.  options.c. */
int cli_no_args(int argc, char **argv, const char *help);

/* The arguments of run and check: "JOB.yaml [--set K=V]... [--resume |
 * --overwrite] [--quiet]" (run_flags) or "... [--print]" (check). */
typedef struct cli_job_args {
  const char *job;
  const char **sets; /* (n_sets) borrowed from argv; the array is the
                        caller's to ar_free, also on failure */
  int n_sets;
  bool resume, quiet, overwrite; /* run */
  bool print;                    /* check */
} cli_job_args;
/* Returns -1 on success, else the exit status (usage printed). */
int cli_parse_job_args(int argc, char **argv, const char *cmd, bool run_flags,
                       cli_job_args *a);

/* --set KEY=VALUE of command cmd: arg appended to sets; -1 to go on, else
 * the exit status (the message printed).  options.c. */
/* A whole number in [lo, hi] (all of s, base 10) into *out; false when s is
 * not one (the caller says what the option takes). */
bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_set_arg(const char *cmd, const char *arg, const char **sets, int *n_sets);
/* After the options (getopt's optind): -1 when one job file is left, else
 * the message, usage(stderr) and the exit status. */
int cli_one_job(const char *cmd, int argc, void (*usage)(FILE *to));

/* Prints why a job file did not load (its diagnostics, or the status) and
 * returns the exit status: 2, or 1 when out of memory. */
int cli_load_failed(const char *file, ar_status st, const ar_diags *diags);
/* ACCELRT_CHAIN_ENGINE=graph: lowers the chains of spec that can be onto
 * the graph engine (ar_chain_route; notes: accelrt check's engine lines).
 * -1 to go on, else the exit status after saying what is wrong. */
int cli_route_chain(ar_spec *spec, FILE *notes);

/* One build feature as `accelrt info` lists it (run.json's features). */
#define CLI_MAX_FEATURES 12
typedef struct cli_feature {
  const char *label; /* "SIMD" */
  char value[128];   /* "AVX2" */
} cli_feature;
/* Fills out with at most max features; returns their count (cmd_info.c). */
int cli_features(cli_feature *out, int max);

int cli_run(int argc, char **argv);
int cli_check(int argc, char **argv);  /* cmd_check.c */
int cli_info(int argc, char **argv);
int cli_gen_data(int argc, char **argv);
int cli_schema(int argc, char **argv);
int cli_eval(int argc, char **argv);     /* cmd_eval.c */
int cli_simulate(int argc, char **argv); /* cmd_simulate.c */
int cli_study(int argc, char **argv);    /* cmd_study.c */
int cli_onnx_test(int argc, char **argv); /* cmd_onnx.c */
int cli_export(int argc, char **argv);    /* cmd_export.c */
/* cmd_service.c: serve, submit, ps, logs, cancel (argv[0] is the command) */
int cli_service(int argc, char **argv);

#endif
