/*
 * Private to runtime/study: the command a distributed run starts under
 * (launcher.c) -- the study file's launcher:, else $ACCELRT_MPIEXEC, else
 * mpiexec (with --oversubscribe, and --allow-run-as-root as root, only when
 * that default is Open MPI's) -- with {ranks} replaced by ranks:.  The rule
 * is docs/study.md's "Launcher"; tests/study/study.sh (case launcher) runs
 * a study under a launcher that records its argv.
 */
#ifndef ACCELRT_STUDY_LAUNCHER_H
#define ACCELRT_STUDY_LAUNCHER_H

#include "study_file.h"

/* Reads launcher: (a string split at blanks, or a list of words) into
 * s->launch_given, checking its placeholders; problems at its place. */
void ar__study_parse_launcher(study_diags *c, ar_study *s, const ar_ynode *n);

/* For a distributed base, after s->ranks is known: picks the launcher
 * (launcher:, $ACCELRT_MPIEXEC, the default, which runs `mpiexec
 * --version` to tell Open MPI's) and fills s->launch with {ranks}
 * replaced ("-n RANKS" appended when no word has it).  A bad
 * $ACCELRT_MPIEXEC is reported in c without a place in the file. */
void ar__study_resolve_launcher(study_diags *c, ar_study *s);

/* "srun --mpi=pmix -n 3 (launcher: in the study file)": s->launch and
 * where it came from, in buf; returns buf. */
const char *ar__study_launcher_text(const ar_study *s, char *buf, size_t cap);

/* Frees the launcher's words (ar_study_destroy). */
void ar__study_launcher_free(ar_study *s);

#endif /* ACCELRT_STUDY_LAUNCHER_H */
