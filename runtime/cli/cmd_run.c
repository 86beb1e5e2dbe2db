/* accelrt run / schema: the job-file commands (check: cmd_check.c). */
#define _GNU_SOURCE
#include "accelrt/data.h"
#include "accelrt/dist.h"
#include "accelrt/net.h"
#include "accelrt/runtime.h"
#include "accelrt/spec.h"
#include "accelrt/tenancy.h"
#include "cli/cli.h"

#include <getopt.h>
#include <string.h>
#include <time.h>

static void job_usage(const char *cmd, bool run_flags) {
  if (!run_flags) {
    printf("usage: accelrt %s JOB.yaml [--set KEY=VALUE]... [--print]\n"
           "  --set KEY=VALUE  override a key of the job file (VALUE is YAML)\n"
           "  --print          print the resolved job (the YAML `accelrt run` writes as\n"
           "                   job.resolved.yaml) instead of the plan\n",
           cmd);
    return;
  }
  printf("usage: accelrt %s JOB.yaml [--set KEY=VALUE]... [--resume | --overwrite] [--quiet]\n"
         "  --set KEY=VALUE  override a key of the job file (VALUE is YAML), e.g.\n"
         "                   --set train.batch=256 --set model.layers.out.dense=983\n"
         "  --resume         continue from output.dir/checkpoint.bin (a job without one yet\n"
         "                   starts from the beginning and says so)\n"
         "  --overwrite      remove the outputs of the run already in output.dir (summary.json,\n"
         "                   metrics.jsonl, checkpoint.bin, trace.json, job.resolved.yaml,\n"
         "                   run.json, eval.json, trace.tsv, oracle.tsv; nothing else) and\n"
         "                   start afresh\n"
         "  --quiet          no progress output\n"
         "An output.dir that holds a finished run (its summary.json) is refused unless\n"
         "--resume or --overwrite is given.  Besides metrics.jsonl, checkpoint.bin,\n"
         "trace.json and summary.json, output.dir receives job.resolved.yaml (the job as\n"
         "it ran; run it again with accelrt run DIR/job.resolved.yaml --set\n"
         "output.dir=NEW_DIR) and run.json (version, build features, command line, start\n"
         "time).\n",
         cmd);
}

static int parse_job_args(int argc, char **argv, const char *cmd, bool run_flags,
                          cli_job_args *a);

int cli_parse_job_args(int argc, char **argv, const char *cmd, bool run_flags,
                       cli_job_args *a) {
  /* getopt permutes the array it parses: a copy keeps main's argv as
   * typed, for run.json and for re-executing. */
  char **copy = ar_calloc((size_t)argc + 1, sizeof *copy);
  if (!copy) {
    memset(a, 0, sizeof *a);
    return CLI_FAIL;
  }
  memcpy(copy, argv, (size_t)argc * sizeof *copy);
  int rc = parse_job_args(argc, copy, cmd, run_flags, a);
  ar_free(copy);
  return rc;
}

static int parse_job_args(int argc, char **argv, const char *cmd, bool run_flags,
                          cli_job_args *a) {
  static const struct option longs[] = {{"set", required_argument, NULL, 's'},
                                        {"resume", no_argument, NULL, 'r'},
                                        {"overwrite", no_argument, NULL, 'o'},
                                        {"quiet", no_argument, NULL, 'q'},
                                        {"print", no_argument, NULL, 'p'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof *a);
  a->sets = ar_calloc((size_t)argc, sizeof *a->sets);
  if (!a->sets)
    return CLI_FAIL;
  optind = 1;
  int c;
  while ((c = cli_getopt(argc, argv, "s:qh", longs)) != -1) {
    switch (c) {
    case 's':
      if (!strchr(optarg, '=')) {
        fprintf(stderr, "accelrt %s: --set needs KEY=VALUE, got '%s'\n", cmd, optarg);
        return CLI_USAGE;
      }
      a->sets[a->n_sets++] = optarg;
      break;
    case 'r':
    case 'o':
    case 'q':
      if (!run_flags) {
        fprintf(stderr, "accelrt %s: --%s is an option of 'accelrt run'\n", cmd,
                c == 'r' ? "resume" : c == 'o' ? "overwrite" : "quiet");
        return CLI_USAGE;
      }
      a->resume |= c == 'r';
      a->overwrite |= c == 'o';
      a->quiet |= c == 'q';
      break;
    case 'p':
      if (run_flags) {
        fprintf(stderr, "accelrt %s: --print is an option of 'accelrt check'\n", cmd);
        return CLI_USAGE;
      }
      a->print = true;
      break;
    case 'h':
      job_usage(cmd, run_flags);
      return CLI_OK;
    default:
      return CLI_USAGE;
    }
  }
  if (a->resume && a->overwrite) {
    fprintf(stderr, "accelrt %s: --resume continues the run in output.dir and --overwrite "
            "replaces it; give one of them\n", cmd);
    return CLI_USAGE;
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

int cli_route_chain(ar_spec *spec, FILE *notes) {
  ar_chain_engine e;
  ar_err err = AR_ERR_INIT;
  if (ar_chain_engine_env(&e, &err) != AR_OK) {
    fprintf(stderr, "accelrt: error: %s\n", err.msg);
    return CLI_USAGE;
  }
  ar_chain_route(spec, e, notes);
  return -1;
}

/* The OpenMP wait policy is read once at start: a run that wants another
 * re-executes itself here, before anything is printed or routed, so the
 * routing note and the log are written once. */
static void thread_policy(const ar_spec *spec) {
  if (spec->n_jobs > 0)
    cli_passive_threads(); /* lanes: several thread teams at once */
  else if (!spec->distributed.enabled)
    cli_short_spin();
}

static int load_spec(const cli_job_args *a, ar_spec **spec) {
  ar_diags diags = {0, NULL};
  ar_status st = ar_spec_load(a->job, a->sets, a->n_sets, spec, &diags);
  if (st == AR_OK)
    thread_policy(*spec);
  int rc = st == AR_OK ? cli_route_chain(*spec, NULL) : cli_load_failed(a->job, st, &diags);
  ar_diags_fini(&diags);
  return rc;
}

/* ---- the output folder ------------------------------------------------------ */

/* A folder this run keeps records in that already holds a finished run
 * (output.dir, and each job's of a jobs: file), or NULL. */
static const char *finished_folder(const ar_spec *spec) {
  if (ar_run_finished(NULL, spec->output.dir))
    return spec->output.dir;
  for (int i = 0; i < spec->n_jobs; i++)
    if (ar_run_finished(NULL, spec->jobs[i]->output.dir))
      return spec->jobs[i]->output.dir;
  return NULL;
}

/* A finished run is never overwritten by accident: -1 to go on, else the
 * exit status after saying which folder and what to do. */
static int refuse_finished(const ar_spec *spec, const cli_job_args *a) {
  const char *dir = a->resume || a->overwrite ? NULL : finished_folder(spec);
  if (!dir)
    return -1;
  fprintf(stderr, "accelrt run: error: %s already holds a finished run (its summary.json); "
          "give --resume to continue it, --overwrite to replace it (removing its", dir);
  for (int i = 0; ar_run_outputs[i]; i++)
    fprintf(stderr, "%s%s", i == 0 ? " " : ar_run_outputs[i + 1] ? ", " : " and ",
            ar_run_outputs[i]);
  fprintf(stderr, ", nothing else), or another folder with --set output.dir=DIR\n");
  return CLI_USAGE;
}

/* run.json: {"version", "features": [...], "argv": [...], "engine",
 * "started"}, the features as `accelrt info` lists them; "engine" (a
 * one-job file): "graph" or "chain", the engine that trains it (a
 * model.layers chain takes the graph engine unless it stays on the chain
 * engine, net_lower.c).  NULL when out of memory. */
static char *run_json(const ar_spec *spec) {
  ar_sbuf b = {0};
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  ar_sbuf_printf(&b, "{\"version\": ");
  ar_sbuf_json_str(&b, ACCELRT_VERSION);
  ar_sbuf_printf(&b, ", \"features\": [");
  cli_feature f[CLI_MAX_FEATURES];
  int n = cli_features(f, CLI_MAX_FEATURES);
  for (int i = 0; i < n; i++) {
    char line[160];
    snprintf(line, sizeof line, "%s %s", f[i].label, f[i].value);
    ar_sbuf_printf(&b, "%s", i ? ", " : "");
    ar_sbuf_json_str(&b, line);
  }
  ar_sbuf_printf(&b, "], \"argv\": [");
  for (int i = 0; cli_argv && cli_argv[i]; i++) {
    ar_sbuf_printf(&b, "%s", i ? ", " : "");
    ar_sbuf_json_str(&b, cli_argv[i]);
  }
  ar_sbuf_printf(&b, "]");
  if (spec->n_jobs == 0)
    ar_sbuf_printf(&b, ", \"engine\": \"%s\"", spec->graph ? "graph" : "chain");
  ar_sbuf_printf(&b, ", \"started\": %.3f}\n",
                 (double)now.tv_sec + (double)now.tv_nsec * 1e-9);
  if (b.oom) {
    ar_sbuf_fini(&b);
    return NULL;
  }
  return b.buf;
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
  printf("  output         %s/{summary.json,metrics.jsonl,checkpoint.bin,job.resolved.yaml,"
         "run.json}\n", spec->output.dir);
}

static void say_error(ar_status st, const ar_err *err) {
  fprintf(stderr, "accelrt run: error: %s\n", err->msg[0] ? err->msg : ar_status_str(st));
  fflush(stderr);
}

/* ar_dist_opts.on_end: the rank's line, said while every rank still runs. */
static void say_dist_end(void *ctx, ar_status st, const ar_err *err) {
  say_error(st, err);
  *(bool *)ctx = true;
}

int cli_run(int argc, char **argv) {
  cli_job_args a;
  int rc = cli_parse_job_args(argc, argv, "run", true, &a);
  ar_spec *spec = NULL;
  if (rc < 0)
    rc = load_spec(&a, &spec);
  if (rc < 0)
    rc = refuse_finished(spec, &a);
  char *description = NULL;
  if (rc < 0 && !(description = run_json(spec))) {
    fprintf(stderr, "accelrt run: error: out of memory\n");
    rc = CLI_FAIL;
  }
  if (rc < 0) {
    ar_err err = AR_ERR_INIT;
    ar_run_opts opts = AR_RUN_OPTS_INIT;
    opts.resume = a.resume;
    opts.quiet = a.quiet;
    opts.overwrite = a.overwrite;
    opts.run_json = description;
    if (a.quiet && ar_log_get_level() > AR_LOG_WARN)
      ar_log_set_level(AR_LOG_WARN);
    ar_summary s;
    ar_status st;
    bool single = true, said = false;
    if (spec->n_jobs > 0) {
      st = ar_tenancy_run(spec, &opts, &err);
      single = false;
    } else if (spec->distributed.enabled) {
      memset(&s, 0, sizeof s);
      s.iterations = -1; /* ranks other than 0 leave it: nothing to print */
      ar_dist_opts dopts = AR_DIST_OPTS_INIT;
      dopts.on_end = say_dist_end; /* every rank's line before the last barrier */
      dopts.ctx = &said;
      st = ar_dist_run_ex(spec, &opts, &dopts, &s, &err);
      single = s.iterations >= 0;
    } else {
      st = ar_run(spec, &opts, &s, &err);
    }
    if (st == AR_OK) {
      if (!a.quiet && single)
        print_summary(spec, &s);
      rc = CLI_OK;
    } else {
      if (!said)
        say_error(st, &err);
      rc = CLI_FAIL;
    }
  }
  ar_free(description);
  ar_spec_destroy(spec);
  ar_free(a.sets);
  return rc;
}

int cli_schema(int argc, char **argv) {
  static const struct option longs[] = {{"json", no_argument, NULL, 'j'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  bool json = false;
  optind = 1;
  int c;
  while ((c = cli_getopt(argc, argv, "h", longs)) != -1) {
    if (c == 'j') {
      json = true;
      continue;
    }
    if (c == 'h') {
      printf("usage: accelrt schema [--json]\n"
             "  Prints the job-file reference (every key, its type, default and meaning)\n"
             "  as Markdown (docs/job-file.md), or with --json a JSON Schema of job files\n"
             "  for editors (docs/job-file.schema.json).\n");
      return CLI_OK;
    }
    return CLI_USAGE;
  }
  if (optind < argc) {
    fprintf(stderr, "accelrt schema: unexpected argument '%s' (accelrt schema --help)\n",
            argv[optind]);
    return CLI_USAGE;
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
