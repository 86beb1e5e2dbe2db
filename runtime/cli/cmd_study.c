/* accelrt study: factorial studies over a job file (runtime/study). */
#define _GNU_SOURCE
#include "accelrt/study.h"
#include "cli/cli.h"

#include <getopt.h>
#include <string.h>

static void study_usage(FILE *to) {
  fprintf(to,
          "usage: accelrt study STUDY.yaml [--out DIR] [--dry-run] [--resume] [--retry-failed]\n"
          "                     [--analyze] [--quiet]\n"
          "  runs the study's design (every cell x replicates, in an order randomised by its\n"
          "  seed), one 'accelrt run' per run (and 'accelrt eval' after it when the study\n"
          "  has eval:), and writes OUT/runs.csv, effects.csv and report.html.  Run it\n"
          "  again (or with --resume) to continue a stopped study.\n"
          "  --out DIR       output folder instead of the study's output key\n"
          "  --dry-run       print the design, the aliases of a fraction and the run order\n"
          "  --resume        continue a study, and fail when OUT holds none\n"
          "  --retry-failed  run again the runs recorded as failed, timeout or no response\n"
          "  --analyze       only analyse what runs.csv holds and write the report\n"
          "  --quiet         no line per run\n"
          "a distributed base's runs start under the study file's launcher:\n"
          "  (launcher: \"srun --mpi=pmix -n {ranks}\"), else $ACCELRT_MPIEXEC, else\n"
          "  mpiexec -n RANKS (--dry-run prints which).\n"
          "factors are --set paths of the job; base: [a.yaml, b.yaml] varies the job file\n"
          "  itself (model families), alongside: [none, jobs.yaml] runs a job beside each\n"
          "  run on this machine; a factor of 3+ levels is also analysed within each level.\n"
          "the study file: docs/study.md\n");
}

int cli_study(int argc, char **argv) {
  static const struct option longs[] = {{"out", required_argument, NULL, 'o'},
                                        {"dry-run", no_argument, NULL, 'n'},
                                        {"resume", no_argument, NULL, 'r'},
                                        {"retry-failed", no_argument, NULL, 'f'},
                                        {"analyze", no_argument, NULL, 'a'},
                                        {"quiet", no_argument, NULL, 'q'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  ar_study_opts opts = AR_STUDY_OPTS_INIT;
  bool dry = false, analyze = false;
  optind = 1;
  int c;
  while ((c = cli_getopt(argc, argv, "o:qh", longs)) != -1) {
    switch (c) {
    case 'o': opts.out_dir = optarg; break;
    case 'n': dry = true; break;
    case 'r': opts.resume = true; break;
    case 'f': opts.retry_failed = true; break;
    case 'a': analyze = true; break;
    case 'q': opts.quiet = true; break;
    case 'h': study_usage(stdout); return CLI_OK;
    default: study_usage(stderr); return CLI_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "accelrt study: expected one study file\n");
    study_usage(stderr);
    return CLI_USAGE;
  }
  const char *file = argv[optind];
  ar_diags diags = {0, NULL};
  ar_study *s = NULL;
  ar_status st = ar_study_load(file, &opts, &s, &diags);
  if (st != AR_OK) {
    ar_diags_print(&diags, file, stderr);
    if (diags.count > 1)
      fprintf(stderr, "%d errors in %s\n", diags.count, file);
    ar_diags_fini(&diags);
    return st == AR_NOMEM ? CLI_FAIL : CLI_USAGE;
  }
  ar_diags_fini(&diags);
  int rc = CLI_OK;
  if (dry) {
    ar_study_print_design(s, stdout);
  } else {
    ar_err err = AR_ERR_INIT;
    st = analyze ? ar_study_analyze(s, &opts, &err) : ar_study_run(s, &opts, &err);
    if (st != AR_OK) {
      fprintf(stderr, "accelrt study: %s\n", err.msg[0] ? err.msg : ar_status_str(st));
      rc = CLI_FAIL;
    }
  }
  ar_study_destroy(s);
  return rc;
}
