/*
 * How a distributed study run starts (see launcher.h): the launcher's words
 * from the study file's launcher:, else from $ACCELRT_MPIEXEC, else the
 * default mpiexec, with {ranks} replaced by the study's ranks.
 *
 * The one rule for every source: the words are the launcher's argv before
 * `accelrt run ...`; "{ranks}" anywhere inside a word becomes the number of
 * ranks; when no word has it, "-n {ranks}" is appended (mpiexec, mpirun and
 * srun all take -n).  A string is split at blanks and never goes through a
 * shell, so quotes in it are refused rather than kept as characters.  Only
 * the default mpiexec, when it is Open MPI's, gets Open MPI's flags
 * (--oversubscribe; --allow-run-as-root as root): a launcher the user gave
 * is run as given.
 */
#define _GNU_SOURCE
#include "launcher.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- words and placeholders ---------------------------------------------- */

/* Whether word has {ranks} (*has) and, in why, the first placeholder it
 * has that is not {ranks}; false then. */
static bool check_placeholders(const char *word, bool *has, char *why, size_t cap) {
  for (const char *p = strchr(word, '{'); p; p = strchr(p + 1, '{')) {
    size_t n = 1;
    while (p[n] && (isalnum((unsigned char)p[n]) || p[n] == '_'))
      n++;
    if (p[n] != '}' || n == 1)
      continue; /* not a placeholder: kept as written */
    if (n - 1 == 5 && !strncmp(p + 1, "ranks", 5)) {
      *has = true;
      continue;
    }
    snprintf(why, cap, "unknown placeholder '%.*s'; the only one is {ranks}, the number of "
             "ranks", (int)n + 1, p);
    return false;
  }
  return true;
}

/* Frees words[0..n) and the array. */
static void free_words(char **words, int n) {
  for (int i = 0; words && i < n; i++)
    ar_free(words[i]);
  ar_free(words);
}

/* Appends a copy of w to *words; false when out of memory. */
static bool push_word(char ***words, int *n, const char *w, size_t len) {
  char **grown = ar_realloc(*words, ((size_t)*n + 1) * sizeof **words);
  if (!grown)
    return false;
  *words = grown;
  char *copy = ar_malloc(len + 1);
  if (!copy)
    return false;
  memcpy(copy, w, len);
  copy[len] = '\0';
  grown[(*n)++] = copy;
  return true;
}

/* text split at blanks into *words (*n of them), or the problem in why
 * (false; *words may hold the words before it); quoted tells how to give a
 * word with blanks or quotes instead.  *nomem when out of memory. */
static bool split_words(const char *text, const char *quoted, char ***words, int *n, char *why,
                        size_t cap, bool *nomem) {
  bool has = false;
  for (const char *p = text; *p;) {
    while (*p == ' ' || *p == '\t')
      p++;
    size_t len = strcspn(p, " \t");
    if (!len)
      break;
    if (memchr(p, '"', len) || memchr(p, '\'', len) || memchr(p, '\\', len)) {
      snprintf(why, cap, "quotes and backslashes are not interpreted: no shell runs the "
               "launcher, its words are split at blanks; %s", quoted);
      return false;
    }
    if (*n >= STUDY_LAUNCH_MAX_WORDS) {
      snprintf(why, cap, "more than %d words", STUDY_LAUNCH_MAX_WORDS);
      return false;
    }
    if (!push_word(words, n, p, len)) {
      *nomem = true;
      return false;
    }
    if (!check_placeholders((*words)[*n - 1], &has, why, cap))
      return false;
    p += len;
  }
  if (*n == 0) {
    snprintf(why, cap, "it is empty; give a command such as \"srun --mpi=pmix -n {ranks}\"");
    return false;
  }
  return true;
}

/* ---- launcher: in the study file ----------------------------------------- */

static const char launcher_expect[] =
    "expected the command that starts the ranks, as a string (\"srun --mpi=pmix -n {ranks}\") "
    "or a list of its words ([srun, --mpi=pmix, -n, \"{ranks}\"])";

void ar__study_parse_launcher(study_diags *c, ar_study *s, const ar_ynode *n) {
  char why[512] = "";
  s->launch_line = n->line;
  s->launch_col = n->col;
  if (n->kind == AR_YNODE_SCALAR) {
    if (!split_words(n->text,
                     "for a word with blanks or quotes write the launcher as a list of its "
                     "words, e.g. [srun, \"--export=ALL,X=a b\", -n, \"{ranks}\"]",
                     &s->launch_given, &s->n_launch_given, why, sizeof why, &c->nomem) &&
        !c->nomem)
      ar__study_diag(c, n->line, n->col, "launcher", "%s", why);
    return;
  }
  if (n->kind != AR_YNODE_SEQ) {
    ar__study_diag(c, n->line, n->col, "launcher", "%s", launcher_expect);
    return;
  }
  if (n->n == 0 || n->n > STUDY_LAUNCH_MAX_WORDS) {
    ar__study_diag(c, n->line, n->col, "launcher", "%s, with 1 to %d words",
                   launcher_expect, STUDY_LAUNCH_MAX_WORDS);
    return;
  }
  bool has = false;
  for (int i = 0; i < n->n; i++) {
    const ar_ynode *w = n->vals[i];
    char path[32];
    snprintf(path, sizeof path, "launcher[%d]", i);
    if (!ar__study_scalar(c, w, path))
      continue;
    if (w->len == 0 || strlen(w->text) != w->len) {
      ar__study_diag(c, w->line, w->col, path, "a word of the launcher is empty or holds a NUL");
      continue;
    }
    if (!check_placeholders(w->text, &has, why, sizeof why))
      ar__study_diag(c, w->line, w->col, path, "%s", why);
    if (!push_word(&s->launch_given, &s->n_launch_given, w->text, w->len)) {
      c->nomem = true;
      return;
    }
  }
}

/* ---- the launcher a distributed run starts with -------------------------- */

/* Whether `mpiexec` on PATH is Open MPI's (its --version names it). */
static bool default_is_open_mpi(void) {
  FILE *p = popen("mpiexec --version 2>&1", "r");
  if (!p)
    return false;
  char line[512];
  bool ompi = false;
  while (fgets(line, sizeof line, p))
    ompi = ompi || strstr(line, "Open MPI") || strstr(line, "OpenRTE");
  pclose(p);
  return ompi;
}

/* The default's words: mpiexec, with Open MPI's flags when it is Open
 * MPI's (a study on a laptop or a small server runs more ranks than
 * cores, and root is refused without the flag). */
static bool default_words(ar_study *s, char ***words, int *n) {
  const char *w[4] = {"mpiexec", NULL, NULL, NULL};
  int k = 1;
  s->launch_ompi = default_is_open_mpi();
  if (s->launch_ompi) {
    w[k++] = "--oversubscribe";
    if (geteuid() == 0)
      w[k++] = "--allow-run-as-root";
  }
  for (int i = 0; i < k; i++)
    if (!push_word(words, n, w[i], strlen(w[i])))
      return false;
  return true;
}

/* words with {ranks} replaced, "-n RANKS" appended when none had it,
 * into s->launch. */
static bool substitute(ar_study *s, char *const *words, int n) {
  char ranks[16];
  snprintf(ranks, sizeof ranks, "%d", s->ranks);
  bool has = false;
  for (int i = 0; i < n; i++) {
    char why[8];
    check_placeholders(words[i], &has, why, sizeof why);
    size_t cap = strlen(words[i]) * (strlen(ranks) + 1) + 1, len = 0;
    char *out = ar_malloc(cap);
    if (!out)
      return false;
    for (const char *p = words[i]; *p;) {
      if (!strncmp(p, "{ranks}", 7)) {
        len += (size_t)snprintf(out + len, cap - len, "%s", ranks);
        p += 7;
      } else {
        out[len++] = *p++;
      }
    }
    out[len] = '\0';
    char **grown = ar_realloc(s->launch, ((size_t)s->n_launch + 1) * sizeof *grown);
    if (!grown) {
      ar_free(out);
      return false;
    }
    s->launch = grown;
    s->launch[s->n_launch++] = out;
  }
  return has || (push_word(&s->launch, &s->n_launch, "-n", 2) &&
                 push_word(&s->launch, &s->n_launch, ranks, strlen(ranks)));
}

void ar__study_resolve_launcher(study_diags *c, ar_study *s) {
  char **env_words = NULL, **def_words = NULL, why[512] = "";
  int n_env = 0, n_def = 0;
  const char *env = getenv("ACCELRT_MPIEXEC");
  char *const *words = s->launch_given;
  int n = s->n_launch_given;
  s->launch_from = LAUNCH_FILE;
  if (!s->n_launch_given && env && env[0]) {
    s->launch_from = LAUNCH_ENV;
    if (!split_words(env,
                     "a word with blanks or quotes can only be given in the study file's "
                     "launcher: list",
                     &env_words, &n_env, why, sizeof why, &c->nomem)) {
      if (!c->nomem)
        ar__study_diag(c, 0, 0, NULL, "the launcher in $ACCELRT_MPIEXEC ('%.200s'): %s; fix "
                       "the variable, or unset it for mpiexec", env, why);
      goto done;
    }
    words = env_words;
    n = n_env;
  } else if (!s->n_launch_given) {
    s->launch_from = LAUNCH_DEFAULT;
    if (!default_words(s, &def_words, &n_def)) {
      c->nomem = true;
      goto done;
    }
    words = def_words;
    n = n_def;
  }
  if (!substitute(s, words, n))
    c->nomem = true;
done:
  free_words(env_words, n_env);
  free_words(def_words, n_def);
}

const char *ar__study_launcher_text(const ar_study *s, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < s->n_launch && len < cap; i++) {
    bool q = strpbrk(s->launch[i], " \t") != NULL;
    int k = snprintf(buf + len, cap - len, "%s%s%s%s", i ? " " : "", q ? "'" : "",
                     s->launch[i], q ? "'" : "");
    len += k > 0 ? (size_t)k : 0;
  }
  const char *from = s->launch_from == LAUNCH_FILE ? " (launcher: in the study file)"
                     : s->launch_from == LAUNCH_ENV
                         ? " (from $ACCELRT_MPIEXEC)"
                         : s->launch_ompi ? " (the default: Open MPI's mpiexec, with its flags "
                                            "for more ranks than cores)"
                                          : " (the default mpiexec)";
  if (len < cap)
    snprintf(buf + len, cap - len, "%s", from);
  return buf;
}

void ar__study_launcher_free(ar_study *s) {
  free_words(s->launch_given, s->n_launch_given);
  free_words(s->launch, s->n_launch);
  s->launch_given = s->launch = NULL;
  s->n_launch_given = s->n_launch = 0;
}
