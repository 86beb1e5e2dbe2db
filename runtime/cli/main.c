/* accelrt: the command-line entry point. */
#define _GNU_SOURCE
#include "accelrt/base.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every command: how main dispatches it and how `accelrt --help` lists it
 * (each prints its own options with `accelrt CMD --help`). */
typedef struct command {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *args, *what;
} command;

static const command commands[] = {
    {"run", cli_run, "JOB.yaml [--set KEY=VALUE]... [--resume | --overwrite] [--quiet]",
     "train the job; metrics, checkpoints, the timeline and the resolved\n"
     "job go to output.dir (a finished run there: --resume or --overwrite;\n"
     "a `jobs:` file runs its jobs in lanes, a `distributed:` one under mpirun)"},
    {"check", cli_check, "JOB.yaml [--set KEY=VALUE]... [--print]",
     "validate the job (or jobs:, distributed or study file), print its\n"
     "exact memory plan and whether it fits (--print: the resolved job\n"
     "instead); writes nothing"},
    {"eval", cli_eval, "JOB.yaml [--checkpoint PATH] [--set KEY=VALUE]...",
     "score a checkpoint on the test split (all labels, and by LSH)"},
    {"export", cli_export, "JOB.yaml --onnx OUT.onnx [--checkpoint PATH] [--opset N]",
     "write the trained model as an ONNX inference graph"},
    {"info", cli_info, "", "build features, machine topology, devices"},
    {"gen-data", cli_gen_data, "--out DIR [options]",
     "write a synthetic dataset: XC format, or token sequences\n(--shape tokens)"},
    {"study", cli_study, "STUDY.yaml [--dry-run] [--resume] [--out DIR]",
     "run a factorial study over a job (main effects, interactions,\nreport.html)"},
    {"simulate", cli_simulate, "JOB.yaml --workers W --servers S --gbps B [options]",
     "predict a distributed iteration under each transfer order\n(TicTac)"},
    {"serve", cli_service, "[--state DIR] [--socket PATH] [--device D] [--policy P] [limits]",
     "run the execution service: many users' jobs on one device\n(docs/service.md)"},
    {"submit", cli_service, "JOB.yaml [--set KEY=VALUE]... [--keep-generated]",
     "send a job to the service; prints its id"},
    {"ps", cli_service, "[--json]",
     "the service's jobs: state, iteration, loss, samples/s, ETA,\nmemory, lane"},
    {"logs", cli_service, "ID [-f] [--json]", "a job's events and progress (-f: until it ends)"},
    {"cancel", cli_service, "ID...", "cancel jobs at their next iteration boundary"},
    {"onnx-test", cli_onnx_test, "DIR...",
     "run ONNX backend-test folders through the importer and the\n"
     "engine: pass, fail or skip each"},
    {"schema", cli_schema, "[--json]",
     "print the job-file reference (Markdown; --json: a JSON Schema of\n"
     "job files, for editors)"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *to) {
  fprintf(to, "usage: accelrt <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++) {
    const command *c = &commands[i];
    char head[128];
    snprintf(head, sizeof head, "%s%s%s", c->name, c->args[0] ? " " : "", c->args);
    /* The description from column 23, on the same line when the command
     * leaves room, one line of it at a time. */
    bool same_line = strlen(head) < 20;
    fprintf(to, same_line ? "  %-20s" : "  %s\n", head);
    for (const char *w = c->what; *w; same_line = false) {
      size_t n = strcspn(w, "\n");
      fprintf(to, "%s%.*s\n", same_line ? "" : "                      ", (int)n, w);
      w += n + (w[n] == '\n');
    }
  }
  fprintf(to, "  help [COMMAND], --help\n"
              "                      this text, or a command's options (accelrt COMMAND --help)\n"
              "  --version           the version\n"
              "\n"
              "environment: ACCELRT_CHAIN_ENGINE=chain trains model.layers chains on the\n"
              "chain engine instead of the graph engine (the default; docs/graph.md)\n"
              "\n"
              "exit status: 0 success, 1 runtime failure, 2 usage or job-file error\n");
}

static const command *find_command(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strcmp(name, commands[i].name))
      return &commands[i];
  return NULL;
}

/* "accelrt: unknown command 'sumbit'; did you mean 'submit'?" */
static int unknown_command(const char *name) {
  const char *names[N_COMMANDS + 2];
  for (size_t i = 0; i < N_COMMANDS; i++)
    names[i] = commands[i].name;
  names[N_COMMANDS] = "help";
  names[N_COMMANDS + 1] = "version";
  const char *near = ar_suggest(name, strlen(name), names, N_COMMANDS + 2);
  if (near)
    fprintf(stderr, "accelrt: unknown command '%s'; did you mean '%s'?\n", name, near);
  else
    fprintf(stderr, "accelrt: unknown command '%s'; the commands:\n\n", name);
  if (!near)
    usage(stderr);
  return CLI_USAGE;
}

char **cli_argv;

void cli_passive_threads(void) {
  /* libgomp reads OMP_WAIT_POLICY once, when the program starts, so a
   * process that runs several thread teams at once (lanes: one team per
   * lane) re-executes itself with the policy set: idle team threads then
   * sleep instead of spinning on cores the other lanes need.  A user's own
   * setting is kept. */
  if (getenv("OMP_WAIT_POLICY") || !cli_argv)
    return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", cli_argv);
  /* Not fatal: without /proc the lanes still run, only slower. */
}

void cli_short_spin(void) {
  /* libgomp's default lets a thread that waits at a barrier spin for
   * about 300,000 rounds before it sleeps.  On a machine with more work
   * than cores, the partner it waits for is often descheduled, and the
   * spinning burns the core it needs: on the shared 2-core machine at load
   * 20, a 100,000-class token model trained 2.9x slower by wall time with
   * the default than with GOMP_SPINCOUNT=10000, and the LSH-sampled head,
   * whose short loops leave one thread waiting more often, burned 4x the
   * CPU (bench/lsh/README.md).  A short spin keeps back-to-back loops'
   * hand-off fast and sleeps soon after.  A user's own setting is kept. */
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || !cli_argv)
    return;
  setenv("GOMP_SPINCOUNT", "10000", 1);
  execv("/proc/self/exe", cli_argv);
}

int main(int argc, char **argv) {
  cli_argv = argv;
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  const char *cmd = argv[1];
  const command *c = find_command(cmd);
  if (c)
    return c->fn(argc - 1, argv + 1);
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    if (argc < 3) {
      usage(stdout);
      return CLI_OK;
    }
    /* help COMMAND: the command's own --help. */
    c = find_command(argv[2]);
    if (!c)
      return unknown_command(argv[2]);
    char *help_argv[] = {argv[2], "--help", NULL};
    return c->fn(2, help_argv);
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("accelrt %s\n", ACCELRT_VERSION);
    return CLI_OK;
  }
  return unknown_command(cmd);
}
