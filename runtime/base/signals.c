/* SIGINT and SIGTERM as one process-wide stop request (base.h). */
#define _GNU_SOURCE
#include "accelrt/base.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t stop_sig;
static struct sigaction old_int, old_term, old_pipe;
static int depth;
static bool pipe_ignored;

static void on_stop(int sig) { stop_sig = sig; }

void ar_stop_signals_install(bool ignore_pipe) {
  if (depth++ == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    stop_sig = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  if (ignore_pipe && !pipe_ignored) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &old_pipe);
    pipe_ignored = true;
  }
}

void ar_stop_signals_restore(void) {
  if (depth == 0 || --depth > 0)
    return;
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (pipe_ignored) {
    sigaction(SIGPIPE, &old_pipe, NULL);
    pipe_ignored = false;
  }
}

int ar_stop_signal(void) { return stop_sig; }
