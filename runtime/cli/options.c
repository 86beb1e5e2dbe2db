/* Option parsing the commands share: getopt_long with messages that name
 * the option and suggest the nearest one (cli.h). */
#define _GNU_SOURCE
#include "cli/cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The long option named exactly name (len bytes), or NULL. */
static const struct option *find_long(const struct option *longs, const char *name, size_t len) {
  for (const struct option *o = longs; o->name; o++)
    if (strlen(o->name) == len && memcmp(o->name, name, len) == 0)
      return o;
  return NULL;
}

/* Says what is wrong with the long option arg ("--name" or "--name=v"). */
static void long_option_error(const char *cmd, const char *arg, const struct option *longs) {
  const char *name = arg + 2;
  size_t len = strcspn(name, "=");
  const struct option *o = find_long(longs, name, len);
  if (o) {
    fprintf(stderr, "accelrt %s: option '--%s' %s\n", cmd, o->name,
            name[len] == '=' ? "takes no value" : "needs a value");
    return;
  }
  /* getopt_long takes an unambiguous prefix: one that is a prefix of
   * several options is its own mistake. */
  char list[512] = "";
  size_t used = 0, prefixed = 0;
  const char *names[128];
  size_t n = 0;
  for (const struct option *p = longs; p->name && n < 128; p++) {
    names[n++] = p->name;
    if (len > 0 && strncmp(p->name, name, len) == 0 && used < sizeof list) {
      used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s",
                               prefixed++ ? ", " : "", p->name);
    }
  }
  if (prefixed > 1) {
    fprintf(stderr, "accelrt %s: option '--%.*s' is ambiguous: %s\n", cmd, (int)len, name,
            list);
    return;
  }
  const char *near = ar_suggest(name, len, names, n);
  if (near)
    fprintf(stderr, "accelrt %s: unknown option '--%.*s'; did you mean '--%s'?\n", cmd,
            (int)len, name, near);
  else
    fprintf(stderr, "accelrt %s: unknown option '--%.*s'; see 'accelrt %s --help'\n", cmd,
            (int)len, name, cmd);
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longs) {
  opterr = 0; /* the messages are ours */
  int c = getopt_long(argc, argv, shortopts, longs, NULL);
  if (c != '?')
    return c;
  const char *cmd = argv[0];
  const char *last = optind > 0 && optind <= argc ? argv[optind - 1] : "";
  /* A long option was at fault when the element getopt just passed is one
   * and it reported no short option other than that one's own letter. */
  const struct option *o = NULL;
  if (!strncmp(last, "--", 2) && last[2])
    o = find_long(longs, last + 2, strcspn(last + 2, "="));
  if (!strncmp(last, "--", 2) && last[2] && (optopt == 0 || (o && o->val == optopt))) {
    long_option_error(cmd, last, longs);
  } else if (optopt && strchr(shortopts, optopt)) {
    fprintf(stderr, "accelrt %s: option '-%c' needs a value\n", cmd, optopt);
  } else {
    fprintf(stderr, "accelrt %s: unknown option '-%c'; see 'accelrt %s --help'\n", cmd,
            optopt > ' ' && optopt < 127 ? optopt : '?', cmd);
  }
  return '?';
}

int cli_no_args(int argc, char **argv, const char *help) {
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  optind = 1;
  int c = cli_getopt(argc, argv, "h", longs);
  if (c == 'h') {
    fputs(help, stdout);
    return CLI_OK;
  }
  if (c != -1)
    return CLI_USAGE;
  if (optind != argc) {
    fprintf(stderr, "accelrt %s: takes no argument, got '%s' (see accelrt %s --help)\n", argv[0],
            argv[optind], argv[0]);
    return CLI_USAGE;
  }
  return -1;
}

int cli_set_arg(const char *cmd, const char *arg, const char **sets, int *n_sets) {
  sets[(*n_sets)++] = arg;
  if (strchr(arg, '='))
    return -1;
  fprintf(stderr, "accelrt %s: --set needs KEY=VALUE, got '%s'\n", cmd, arg);
  return CLI_USAGE;
}

int cli_one_job(const char *cmd, int argc, void (*usage)(FILE *to)) {
  if (optind == argc - 1)
    return -1;
  fprintf(stderr, "accelrt %s: expected one job file\n", cmd);
  usage(stderr);
  return CLI_USAGE;
}

bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return false;
  *out = v;
  return true;
}
