/*
 * The child processes of a study: signals, argv, fork and exec, waiting
 * with a timeout (see child.h).
 */
#define _GNU_SOURCE
#include "child.h"

#include "accelrt/runtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- signals ------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

void ar__study_signals_catch(study_signals *saved) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  stop_signal = 0;
  sigaction(SIGINT, &sa, &saved->old_int);
  sigaction(SIGTERM, &sa, &saved->old_term);
}

void ar__study_signals_restore(const study_signals *saved) {
  sigaction(SIGINT, &saved->old_int, NULL);
  sigaction(SIGTERM, &saved->old_term, NULL);
}

bool ar__study_stop_requested(void) { return stop_signal != 0; }

/* ---- one child ----------------------------------------------------------- */

ar_status ar__study_self_exe(char *exe, size_t cap, ar_err *err) {
  ssize_t el = readlink("/proc/self/exe", exe, cap - 1);
  if (el <= 0)
    return ar_errf(err, AR_IO, "cannot find this program's path (/proc/self/exe): %s",
                   strerror(errno));
  exe[el] = '\0';
  if (el > 10 && !strcmp(exe + el - 10, " (deleted)"))
    return ar_errf(err, AR_STATE,
                   "this program's binary (%.*s) was replaced while the study ran; start the "
                   "study again to resume with the new build",
                   (int)(el - 10), exe);
  return AR_OK;
}

const char **ar__study_child_argv(const ar_study *s, const char *exe, const char *cmd,
                                  const char *base, bool launch, const char *const *sets,
                                  int ns, const char *const *tail, int nt) {
  size_t n = 4 + (size_t)s->n_launch + 2 * ((size_t)s->n_sets + (size_t)ns) + (size_t)nt;
  const char **argv = ar_calloc(n, sizeof *argv);
  if (!argv)
    return NULL;
  int a = 0;
  for (int i = 0; launch && i < s->n_launch; i++)
    argv[a++] = s->launch[i];
  argv[a++] = exe;
  argv[a++] = cmd;
  argv[a++] = base;
  for (int i = 0; i < s->n_sets; i++) {
    argv[a++] = "--set";
    argv[a++] = s->sets[i];
  }
  for (int i = 0; i < ns; i++) {
    argv[a++] = "--set";
    argv[a++] = sets[i];
  }
  for (int i = 0; i < nt; i++)
    argv[a++] = tail[i];
  argv[a] = NULL;
  return argv;
}

ar_status ar__study_child_run(const char *const *argv, const char *logp, bool append, double t0,
                              double timeout_s, const char *what, int *wst, child_end *end,
                              ar_err *err) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return ar_errf(err, AR_IO, "cannot start %s: %s", what, strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int fd = open(logp, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0666);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "accelrt study: cannot execute %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  *wst = 0;
  bool timed_out = false;
  double kill_at = 0;
  for (;;) {
    pid_t w = waitpid(pid, wst, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR))
      break;
    double now = ar_now();
    if (!kill_at && (stop_signal || (timeout_s > 0 && now - t0 > timeout_s))) {
      timed_out = !stop_signal;
      kill(-pid, SIGTERM);
      kill_at = now + 10;
    } else if (kill_at && now > kill_at) {
      kill(-pid, SIGKILL);
      kill_at = now + 1e9;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  *end = timed_out ? CHILD_TIMEOUT : stop_signal ? CHILD_STOPPED : CHILD_EXITED;
  return AR_OK;
}

/* ---- a job alongside ------------------------------------------------------- */

/* The marker the supervisor writes to the log before each start. */
static const char alongside_mark[] = "accelrt study: alongside, start ";

/* The supervisor's loop (in the child): start the job, wait, start it
 * again; a job that fails at once is retried after a second, not in a
 * busy loop. */
static void alongside_loop(const char *const *argv, const char *logp) {
  for (int n = 1;; n++) {
    FILE *lf = fopen(logp, "a");
    if (lf) {
      fprintf(lf, "%s%d\n", alongside_mark, n);
      fclose(lf);
    }
    double t0 = ar_now();
    pid_t pid = fork();
    if (pid < 0)
      _exit(1);
    if (pid == 0) {
      int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0666);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
      execv(argv[0], (char *const *)argv);
      _exit(127);
    }
    int wst;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR)
      ;
    if (ar_now() - t0 < 1 && !(WIFEXITED(wst) && WEXITSTATUS(wst) == 0))
      sleep(1);
  }
}

ar_status ar__study_alongside_start(const char *exe, const char *file, const char *dir,
                                    const char *logp, pid_t *pid, ar_err *err) {
  char out[4200];
  snprintf(out, sizeof out, "output.dir=%s", dir);
  /* --overwrite: each start after the first replaces the finished run
   * the last one left in dir (its data stays and is reused). */
  const char *argv[] = {exe, "run", file, "--quiet", "--overwrite", "--set", out, NULL};
  pid_t parent = getpid();
  fflush(NULL);
  *pid = fork();
  if (*pid < 0)
    return ar_errf(err, AR_IO, "cannot start the job alongside (%s): %s", file, strerror(errno));
  if (*pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
      _exit(0); /* the study died before PDEATHSIG was armed */
    alongside_loop(argv, logp);
  }
  setpgid(*pid, *pid);
  return AR_OK;
}

/* dir/metrics.jsonl or dir/NAME/metrics.jsonl exists. */
static bool alongside_training(const char *dir) {
  char p[4400];
  snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
  if (access(p, F_OK) == 0)
    return true;
  DIR *d = opendir(dir);
  bool found = false;
  for (struct dirent *e; d && !found && (e = readdir(d));) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", dir, e->d_name);
    found = access(p, F_OK) == 0;
  }
  if (d)
    closedir(d);
  return found;
}

bool ar__study_alongside_wait(pid_t pid, const char *dir, const char *logp, double limit_s) {
  const double until = ar_now() + limit_s;
  for (;;) {
    if (alongside_training(dir))
      return true;
    /* Stopped (the run that follows sees it at once), or the group gone. */
    if (stop_signal || (kill(-pid, 0) != 0 && errno == ESRCH))
      return false;
    if (ar_now() > until) {
      FILE *f = fopen(logp, "a");
      if (f) {
        fprintf(f, "accelrt study: the job alongside was not training after %.0f s; the run "
                   "starts anyway\n", limit_s);
        fclose(f);
      }
      return false;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

void ar__study_alongside_stop(pid_t pid, const char *logp, int *starts) {
  kill(-pid, SIGTERM);
  double kill_at = ar_now() + 10;
  int wst;
  bool reaped = false;
  for (;;) {
    if (!reaped && waitpid(pid, &wst, WNOHANG) == pid)
      reaped = true;
    /* The job outlives the supervisor by its own clean-up; wait for the
     * whole group. */
    if (reaped && kill(-pid, 0) != 0 && errno == ESRCH)
      break;
    if (ar_now() > kill_at) {
      kill(-pid, SIGKILL);
      kill_at = ar_now() + 1e9;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  *starts = 0;
  FILE *f = fopen(logp, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    *starts += !strncmp(line, alongside_mark, sizeof alongside_mark - 1);
  if (f)
    fclose(f);
}
