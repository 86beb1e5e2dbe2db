/* Placeholder until this command lands. */
#include "cli/cli.h"

#include <stdio.h>

int cli_simulate(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "accelrt %s: not in this build yet\n", argv[0]);
  return CLI_USAGE;
}
