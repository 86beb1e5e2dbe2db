/* accelrt serve / submit / ps / logs / cancel: the execution service and
 * its clients (runtime/tenancy/service.c; wire format in protocol.h). */
#define _GNU_SOURCE
#include "accelrt/spec.h"
#include "accelrt/tenancy.h"
#include "cli/cli.h"
#include "protocol.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *default_socket(void) {
  const char *e = getenv("ACCELRT_SOCKET");
  return e && *e ? e : "/tmp/accelrt.sock";
}

static const char *default_state(void) {
  const char *e = getenv("ACCELRT_STATE");
  return e && *e ? e : "/tmp/accelrt-state";
}

/* "8GiB", "512MiB", "4GB", "1000000" bytes or "90%".  Returns false on
 * anything else. */
static bool parse_memory(const char *s, uint64_t *bytes, double *fraction) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v > 0))
    return false;
  *bytes = 0;
  *fraction = 0;
  if (!strcmp(end, "%")) {
    if (v > 100)
      return false;
    *fraction = v / 100.0;
    return true;
  }
  static const struct {
    const char *unit;
    double mult;
  } units[] = {{"", 1},          {"B", 1},      {"KiB", 1024.0},     {"MiB", 1048576.0},
               {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3},
               {"MB", 1e6},      {"GB", 1e9},   {"TB", 1e12}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(end, units[i].unit)) {
      double b = v * units[i].mult;
      if (b < 1 || b > 1.8e19)
        return false;
      *bytes = (uint64_t)b;
      return true;
    }
  return false;
}

static int connect_server(const char *path) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a.sun_path) {
    fprintf(stderr, "accelrt: socket path '%s' is too long\n", path);
    return -1;
  }
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    fprintf(stderr, "accelrt: cannot reach the server at %s (%s); start it with 'accelrt "
            "serve' or give its --socket\n", path, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}

/* Sends a request and reads replies until ok/error/end; data chunks are
 * printed as they come.  Returns the exit status. */
static int request(const char *sock, const ar__msg *m, bool print_ok) {
  int fd = connect_server(sock);
  if (fd < 0)
    return CLI_FAIL;
  ar_err err = AR_ERR_INIT;
  if (ar__msg_write(fd, m, &err) != AR_OK) {
    fprintf(stderr, "accelrt: %s\n", err.msg);
    close(fd);
    return CLI_FAIL;
  }
  uint8_t *buf = NULL;
  size_t n = 0;
  int rc = CLI_FAIL;
  for (;;) {
    ar__msg r;
    if (ar__msg_read(fd, &buf, &n, &err) != AR_OK || ar__msg_decode(buf, n, &r, &err) != AR_OK) {
      fprintf(stderr, "accelrt: the server's reply: %s\n", err.msg);
      break;
    }
    if (r.op == AR__OP_DATA) {
      fwrite(r.text.p, 1, r.text.n, stdout);
      fflush(stdout);
      continue;
    }
    if (r.op == AR__OP_END) {
      rc = CLI_OK;
      break;
    }
    if (r.op == AR__OP_ERROR) {
      fprintf(stderr, "accelrt %s: error: %.*s\n", m->op == AR__OP_SUBMIT ? "submit"
                      : m->op == AR__OP_CANCEL ? "cancel"
                      : m->op == AR__OP_LOGS ? "logs" : "ps",
              (int)r.text.n, r.text.p);
      break;
    }
    if (r.op == AR__OP_OK) {
      if (print_ok && r.text.n) {
        fwrite(r.text.p, 1, r.text.n, stdout);
        if (r.text.p[r.text.n - 1] != '\n')
          fputc('\n', stdout);
      }
      rc = CLI_OK;
      break;
    }
  }
  ar_free(buf);
  close(fd);
  return rc;
}

static int serve(int argc, char **argv) {
  cli_passive_threads();
  static const struct option longs[] = {{"state", required_argument, NULL, 's'},
                                        {"socket", required_argument, NULL, 'k'},
                                        {"device", required_argument, NULL, 'd'},
                                        {"policy", required_argument, NULL, 'p'},
                                        {"memory", required_argument, NULL, 'm'},
                                        {"threads", required_argument, NULL, 't'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  ar_serve_opts o = AR_SERVE_OPTS_INIT;
  o.state_dir = default_state();
  o.socket_path = default_socket();
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (c) {
    case 's':
      o.state_dir = optarg;
      break;
    case 'k':
      o.socket_path = optarg;
      break;
    case 'd':
      o.device = optarg;
      break;
    case 'p':
      if (strcmp(optarg, "fifo") && strcmp(optarg, "pack") && strcmp(optarg, "srtf") &&
          strcmp(optarg, "fair") && strcmp(optarg, "priority")) {
        fprintf(stderr, "accelrt serve: --policy is fifo, pack, srtf, fair or priority, got "
                "'%s'\n", optarg);
        return CLI_USAGE;
      }
      o.policy = optarg;
      break;
    case 'm':
      if (!parse_memory(optarg, &o.memory_bytes, &o.memory_fraction)) {
        fprintf(stderr, "accelrt serve: --memory takes bytes with a unit (8GiB, 512MiB) or a "
                "percentage (90%%), got '%s'\n", optarg);
        return CLI_USAGE;
      }
      break;
    case 't':
      o.threads = atoi(optarg);
      if (o.threads < 0) {
        fprintf(stderr, "accelrt serve: --threads must be >= 0\n");
        return CLI_USAGE;
      }
      break;
    case 'h':
      printf("usage: accelrt serve [--state DIR] [--socket PATH] [--device auto|host|cuda:N]\n"
             "                     [--policy fifo|pack|srtf|fair|priority] [--memory 8GiB|90%%]\n"
             "                     [--threads N]\n"
             "defaults: --state $ACCELRT_STATE or /tmp/accelrt-state, --socket $ACCELRT_SOCKET\n"
             "or /tmp/accelrt.sock, --policy pack, --memory all free memory\n");
      return CLI_OK;
    default:
      return CLI_USAGE;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "accelrt serve: unexpected argument '%s'\n", argv[optind]);
    return CLI_USAGE;
  }
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_tenancy_serve(&o, &err);
  if (st != AR_OK) {
    fprintf(stderr, "accelrt serve: error: %s\n", err.msg);
    return CLI_FAIL;
  }
  return CLI_OK;
}

/* Common client options: --socket PATH, and -f / --set for some. */
static int client(int argc, char **argv) {
  const char *cmd = argv[0];
  static const struct option longs[] = {{"socket", required_argument, NULL, 'k'},
                                        {"set", required_argument, NULL, 's'},
                                        {"follow", no_argument, NULL, 'f'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  const char *sock = default_socket();
  ar__msg m;
  memset(&m, 0, sizeof m);
  optind = 1;
  int c;
  bool is_submit = !strcmp(cmd, "submit"), is_logs = !strcmp(cmd, "logs");
  while ((c = getopt_long(argc, argv, "fs:h", longs, NULL)) != -1) {
    switch (c) {
    case 'k':
      sock = optarg;
      break;
    case 's':
      if (!is_submit || !strchr(optarg, '=')) {
        fprintf(stderr, "accelrt %s: --set KEY=VALUE is an option of submit\n", cmd);
        return CLI_USAGE;
      }
      if (m.n_sets == AR__MSG_MAX_SETS) {
        fprintf(stderr, "accelrt submit: at most %d --set\n", AR__MSG_MAX_SETS);
        return CLI_USAGE;
      }
      m.sets[m.n_sets++] = (ar__mstr){optarg, strlen(optarg)};
      break;
    case 'f':
      if (!is_logs) {
        fprintf(stderr, "accelrt %s: -f is an option of logs\n", cmd);
        return CLI_USAGE;
      }
      m.follow = true;
      break;
    case 'h':
      printf("usage: accelrt submit JOB.yaml [--set KEY=VALUE]... [--socket PATH]\n"
             "       accelrt ps [--socket PATH]\n"
             "       accelrt logs ID [-f] [--socket PATH]\n"
             "       accelrt cancel ID [--socket PATH]\n");
      return CLI_OK;
    default:
      return CLI_USAGE;
    }
  }
  int want = !strcmp(cmd, "ps") ? 0 : 1;
  if (argc - optind != want) {
    fprintf(stderr, "accelrt %s: expected %s (see accelrt %s --help)\n", cmd,
            want ? (is_submit ? "one job file" : "one job id") : "no argument", cmd);
    return CLI_USAGE;
  }
  if (!strcmp(cmd, "ps"))
    m.op = AR__OP_PS;
  else if (is_submit)
    m.op = AR__OP_SUBMIT;
  else {
    char *end;
    errno = 0;
    unsigned long long id = strtoull(argv[optind], &end, 10);
    if (errno || *end || !*argv[optind]) {
      fprintf(stderr, "accelrt %s: '%s' is not a job id (a number, see accelrt ps)\n", cmd,
              argv[optind]);
      return CLI_USAGE;
    }
    m.op = is_logs ? AR__OP_LOGS : AR__OP_CANCEL;
    m.id = id;
    m.has_id = true;
  }
  if (!is_submit)
    return request(sock, &m, true);

  /* submit: the file's text travels; relative paths in it resolve against
   * its folder, output.dir against this working directory. */
  const char *path = argv[optind];
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "accelrt submit: cannot read '%s': %s\n", path, strerror(errno));
    return CLI_USAGE;
  }
  char *text = ar_malloc(AR_SPEC_MAX_BYTES + 1);
  size_t n = text ? fread(text, 1, AR_SPEC_MAX_BYTES + 1, f) : 0;
  fclose(f);
  if (!text || n > AR_SPEC_MAX_BYTES || n == 0) {
    fprintf(stderr, "accelrt submit: '%s' is %s\n", path,
            !text ? "too large for memory" : n == 0 ? "empty" : "larger than 1 MiB");
    ar_free(text);
    return CLI_USAGE;
  }
  char real[PATH_MAX], base[PATH_MAX], cwd[PATH_MAX];
  if (!realpath(path, real) || !getcwd(cwd, sizeof cwd)) {
    fprintf(stderr, "accelrt submit: cannot resolve '%s': %s\n", path, strerror(errno));
    ar_free(text);
    return CLI_FAIL;
  }
  snprintf(base, sizeof base, "%s", real);
  char *slash = strrchr(base, '/');
  if (slash == base)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  m.yaml = (ar__mstr){text, n};
  m.file = (ar__mstr){real, strlen(real)};
  m.base = (ar__mstr){base, strlen(base)};
  m.cwd = (ar__mstr){cwd, strlen(cwd)};
  int rc = request(sock, &m, true);
  ar_free(text);
  return rc;
}

int cli_service(int argc, char **argv) {
  if (!strcmp(argv[0], "serve"))
    return serve(argc, argv);
  return client(argc, argv);
}
