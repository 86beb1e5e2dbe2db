/* accelrt: the command-line entry point. */
#define _GNU_SOURCE
#include "accelrt/base.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *to) {
  fprintf(to,
          "usage: accelrt <command> [options]\n"
          "\n"
          "commands:\n"
          "  run JOB.yaml [--set KEY=VALUE]... [--resume] [--quiet]\n"
          "                      train the job; metrics and checkpoints go to output.dir\n"
          "  check JOB.yaml [--set KEY=VALUE]...\n"
          "                      validate the job (or jobs:, distributed or study file), print\n"
          "                      its exact memory plan and whether it fits; writes nothing\n"
          "  info                build features, machine topology, devices\n"
          "  gen-data --out DIR [options]\n"
          "                      write a synthetic XC-format dataset (see gen-data --help)\n"
          "  eval JOB.yaml [--checkpoint PATH] [--set KEY=VALUE]...\n"
          "                      score a checkpoint on the test split (all labels, and by LSH)\n"
          "  study STUDY.yaml [--dry-run] [--resume] [--out DIR]\n"
          "                      run a factorial study over a job (main effects, interactions,\n"
          "                      report.html; see accelrt study --help)\n"
          "  onnx-test DIR...    run ONNX backend-test folders through the importer and\n"
          "                      the engine (see accelrt onnx-test --help)\n"
          "  schema              print the job-file reference (Markdown)\n"
          "  help, --help        this text;  --version  the version\n"
          "\n"
          "exit status: 0 success, 1 runtime failure, 2 usage or job-file error\n");
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

int main(int argc, char **argv) {
  cli_argv = argv;
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "run"))
    return cli_run(argc - 1, argv + 1);
  if (!strcmp(cmd, "check"))
    return cli_check(argc - 1, argv + 1);
  if (!strcmp(cmd, "info"))
    return cli_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "gen-data"))
    return cli_gen_data(argc - 1, argv + 1);
  if (!strcmp(cmd, "schema"))
    return cli_schema(argc - 1, argv + 1);
  if (!strcmp(cmd, "eval"))
    return cli_eval(argc - 1, argv + 1);
  if (!strcmp(cmd, "study"))
    return cli_study(argc - 1, argv + 1);
  if (!strcmp(cmd, "onnx-test"))
    return cli_onnx_test(argc - 1, argv + 1);
  if (!strcmp(cmd, "simulate"))
    return cli_simulate(argc - 1, argv + 1);
  if (!strcmp(cmd, "serve") || !strcmp(cmd, "submit") || !strcmp(cmd, "ps") ||
      !strcmp(cmd, "logs") || !strcmp(cmd, "cancel"))
    return cli_service(argc - 1, argv + 1);
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("accelrt %s\n", ACCELRT_VERSION);
    return CLI_OK;
  }
  fprintf(stderr, "accelrt: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return CLI_USAGE;
}
