/*
 * Private to runtime/study: the child processes of a study (child.c) --
 * `accelrt run` and `accelrt eval` of one run, each in a process group of
 * its own with its output in the run's log.txt, stopped on the run's
 * timeout or when SIGINT or SIGTERM asks the study to stop.
 */
#ifndef ACCELRT_STUDY_CHILD_H
#define ACCELRT_STUDY_CHILD_H

#include "study_impl.h"

#include <signal.h>

/* How a child process ended. */
typedef enum child_end {
  CHILD_EXITED = 0, /* by itself: see its wait status */
  CHILD_TIMEOUT,    /* stopped when the run's timeout_s passed */
  CHILD_STOPPED     /* stopped because the study was asked to stop */
} child_end;

/* The handlers SIGINT and SIGTERM had before ar__study_signals_catch. */
typedef struct study_signals {
  struct sigaction old_int, old_term;
} study_signals;

/* From now on SIGINT and SIGTERM only ask the study to stop (see
 * ar__study_stop_requested); the old handlers go to *saved.  Not
 * reentrant: one study runs at a time in a process. */
void ar__study_signals_catch(study_signals *saved);
/* Puts the handlers of *saved back. */
void ar__study_signals_restore(const study_signals *saved);
/* Whether a signal asked the study to stop since it caught them. */
bool ar__study_stop_requested(void);

/* This program's path, for the children, in exe.  AR_STATE when the
 * binary was rebuilt since the study started (the link reads "PATH
 * (deleted)"): the runs of one study must not mix two builds.  AR_IO. */
ar_status ar__study_self_exe(char *exe, size_t cap, ar_err *err);

/* The argv of one child, NULL-terminated (ar_free it; the strings are
 * borrowed): [LAUNCHER...] EXE CMD BASE, every fixed override and the
 * run's own ones as --set, then tail.  launch: start with s->launch (a
 * distributed run; launcher.h).  NULL when out of memory. */
const char **ar__study_child_argv(const ar_study *s, const char *exe, const char *cmd,
                                  const char *base, bool launch, const char *const *sets,
                                  int ns, const char *const *tail, int nt);

/* Runs argv in a process group of its own with its output in logp
 * (appended when append), until it exits (CHILD_EXITED, its wait status
 * in *wst), timeout_s (0: none) counted from t0 passes (CHILD_TIMEOUT) or a
 * signal asks the study to stop (CHILD_STOPPED); in the last two the group
 * gets SIGTERM, and SIGKILL 10 s later.  `what` names it in messages.
 * AR_IO when it cannot start. */
ar_status ar__study_child_run(const char *const *argv, const char *logp, bool append, double t0,
                              double timeout_s, const char *what, int *wst, child_end *end,
                              ar_err *err);

/* A job alongside a run (an alongside factor): a supervising process in
 * a process group of its own runs `EXE run FILE --quiet --overwrite --set
 * output.dir=DIR`, and again each time it ends, so that the machine is
 * shared for the whole run however long the run takes; their output is
 * appended to logp.  The supervisor dies with the study (PDEATHSIG).
 * *pid is the supervisor's (its group's id).  AR_IO when it cannot
 * start. */
ar_status ar__study_alongside_start(const char *exe, const char *file, const char *dir,
                                    const char *logp, pid_t *pid, ar_err *err);
/* Waits until the job alongside trains (its metrics.jsonl in dir or in a
 * folder of dir, for a `jobs:` file's jobs, exists: a job opens it once
 * its data is read and its model built), so that the run that follows
 * shares the machine from its first iteration; returns false, with a line
 * in logp, when limit_s passed first (the job still loading, or failing
 * and started again), or at once when its group is gone or the study was
 * asked to stop (SIGINT, SIGTERM). */
bool ar__study_alongside_wait(pid_t pid, const char *dir, const char *logp, double limit_s);
/* Stops the group of ar__study_alongside_start: SIGTERM, SIGKILL after
 * 10 s, and waits until no process of it is left.  *starts: how many
 * times the job was started (read from the log's markers). */
void ar__study_alongside_stop(pid_t pid, const char *logp, int *starts);

#endif /* ACCELRT_STUDY_CHILD_H */
