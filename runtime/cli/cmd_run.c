/* accelrt run / schema: the job-file commands (check: cmd_check.c). */
#define _GNU_SOURCE
#include "accelrt/data.h"
#include "accelrt/dist.h"
#include "accelrt/runtime.h"
#include "accelrt/spec.h"
#include "accelrt/tenancy.h"
#include "cli/cli.h"

#include <getopt.h>
#include <string.h>

int cli_parse_job_args(int argc, char **argv, const char *cmd, bool run_flags,
                       cli_job_args *a) {
  static const struct option longs[] = {{"set", required_argument, NULL, 's'},
                                        {"resume", no_argument, NULL, 'r'},
                                        {"quiet", no_argument, NULL, 'q'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  a->sets = ar_calloc((size_t)argc, sizeof *a->sets);
  if (!a->sets)
    return CLI_FAIL;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "s:qh", longs, NULL)) != -1) {
    switch (c) {
    case 's':
      if (!strchr(optarg, '=')) {
        fprintf(stderr, "accelrt %s: --set needs KEY=VALUE, got '%s'\n", cmd, optarg);
        return CLI_USAGE;
      }
      a->sets[a->n_sets++] = optarg;
      break;
    case 'r':
    case 'q':
      if (!run_flags) {
        fprintf(stderr, "accelrt %s: --%s is an option of 'accelrt run'\n", cmd,
                c == 'r' ? "resume" : "quiet");
        return CLI_USAGE;
      }
      if (c == 'r')
        a->resume = true;
      else
        a->quiet = true;
      break;
    case 'h':
      printf("usage: accelrt %s JOB.yaml [--set KEY=VALUE]...%s\n", cmd,
             run_flags ? " [--resume] [--quiet]" : "");
      return CLI_OK;
    default:
      return CLI_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "accelrt %s: expected one job file (usage: accelrt %s JOB.yaml "
            "[--set KEY=VALUE]...)\n", cmd, cmd);
    return CLI_USAGE;
  }
  a->job = argv[optind];
  return -1;
}

int cli_load_failed(const char *file, ar_status st, const ar_diags *diags) {
  if (diags->count)
    ar_diags_print(diags, file, stderr);
  else
    fprintf(stderr, "%s: error: %s\n", file, ar_status_str(st));
  if (diags->count > 1)
    fprintf(stderr, "%d errors in %s\n", diags->count, file);
  return st == AR_NOMEM ? CLI_FAIL : CLI_USAGE;
}

static int load_spec(const cli_job_args *a, ar_spec **spec) {
  ar_diags diags = {0, NULL};
  ar_status st = ar_spec_load(a->job, a->sets, a->n_sets, spec, &diags);
  int rc = st == AR_OK ? -1 : cli_load_failed(a->job, st, &diags);
  ar_diags_fini(&diags);
  return rc;
}

static void print_summary(const ar_spec *spec, const ar_summary *s) {
  printf("\n%s: %lld iterations, %lld samples (%.2f epochs) on %s, %d threads\n", spec->name,
         (long long)s->iterations, (long long)s->samples, s->epochs_done, s->device, s->threads);
  printf("  train loss     %.4f\n", s->train_loss);
  if (s->p_at[0] >= 0) {
    printf("  test loss      %.4f\n", s->loss);
    printf("  P@1 P@3 P@5    %.2f  %.2f  %.2f\n", s->p_at[0], s->p_at[1], s->p_at[2]);
  }
  printf("  samples/s      %.1f\n", s->samples_per_s);
  printf("  wall time      %.1f s (training %.1f s)\n", s->wall_s, s->train_s);
  printf("  peak RSS       %.1f MiB\n", (double)s->peak_rss_bytes / 1048576.0);
  printf("  output         %s/{summary.json,metrics.jsonl,checkpoint.bin}\n", spec->output.dir);
}

int cli_run(int argc, char **argv) {
  cli_job_args a;
  int rc = cli_parse_job_args(argc, argv, "run", true, &a);
  ar_spec *spec = NULL;
  if (rc < 0)
    rc = load_spec(&a, &spec);
  if (rc < 0) {
    ar_err err = AR_ERR_INIT;
    ar_run_opts opts = AR_RUN_OPTS_INIT;
    opts.resume = a.resume;
    opts.quiet = a.quiet;
    if (a.quiet && ar_log_get_level() > AR_LOG_WARN)
      ar_log_set_level(AR_LOG_WARN);
    ar_summary s;
    ar_status st;
    bool single = true;
    if (spec->n_jobs > 0) {
      cli_passive_threads();
      st = ar_tenancy_run(spec, &opts, &err);
      single = false;
    } else if (spec->distributed.enabled) {
      memset(&s, 0, sizeof s);
      s.iterations = -1; /* ranks other than 0 leave it: nothing to print */
      st = ar_dist_run(spec, &opts, &s, &err);
      single = s.iterations >= 0;
    } else {
      st = ar_run(spec, &opts, &s, &err);
    }
    if (st == AR_OK) {
      if (!a.quiet && single)
        print_summary(spec, &s);
      rc = CLI_OK;
    } else {
      fprintf(stderr, "accelrt run: error: %s\n", err.msg[0] ? err.msg : ar_status_str(st));
      rc = CLI_FAIL;
    }
  }
  ar_spec_destroy(spec);
  ar_free(a.sets);
  return rc;
}

int cli_schema(int argc, char **argv) {
  bool json = argc == 2 && !strcmp(argv[1], "--json");
  if (argc != 1 && !json) {
    fprintf(stderr, "usage: accelrt schema [--json]\n"
                    "  the job-file reference (Markdown, docs/job-file.md), or with --json a\n"
                    "  JSON Schema of job files for editors (docs/job-file.schema.json)\n");
    return argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? CLI_OK
                                                                                 : CLI_USAGE;
  }
  if (!json) {
    ar_spec_schema_markdown(stdout);
    return CLI_OK;
  }
  ar_status st = ar_spec_schema_json(stdout);
  if (st != AR_OK)
    fprintf(stderr, "accelrt schema: error: %s\n", ar_status_str(st));
  return st == AR_OK ? CLI_OK : CLI_FAIL;
}
