/* "did you mean": the nearest name to a mistyped word (base.h). */
#include "accelrt/base.h"

#include <string.h>

static int lower(char c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

int ar_edit_distance(const char *a, size_t la, const char *b, size_t lb) {
  enum { MAXL = 64 };
  if (la > MAXL || lb > MAXL)
    return INT32_MAX;
  /* Three rows of the dynamic programme: i - 2, i - 1 and i. */
  int rows[3][MAXL + 1];
  for (size_t j = 0; j <= lb; j++)
    rows[1][j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int *cur = rows[(i + 1) % 3], *prev = rows[i % 3], *pprev = rows[(i + 2) % 3];
    cur[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int ca = lower(a[i - 1]), cb = lower(b[j - 1]);
      int best = prev[j - 1] + (ca != cb);
      if (prev[j] + 1 < best)
        best = prev[j] + 1;
      if (cur[j - 1] + 1 < best)
        best = cur[j - 1] + 1;
      /* Two neighbours swapped ("sumbit" for "submit") are one edit. */
      if (i > 1 && j > 1 && ca == lower(b[j - 2]) && lower(a[i - 2]) == cb &&
          pprev[j - 2] + 1 < best)
        best = pprev[j - 2] + 1;
      cur[j] = best;
    }
  }
  return rows[(la + 1) % 3][lb];
}

const char *ar_suggest(const char *word, size_t len, const char *const *cands, size_t n) {
  const char *best = NULL;
  int best_d = INT32_MAX;
  for (size_t i = 0; i < n; i++) {
    if (!cands[i])
      continue;
    size_t lc = strlen(cands[i]);
    int d = ar_edit_distance(word, len, cands[i], lc);
    int limit = lc >= 5 ? 2 : 1;
    if (d <= limit && (size_t)d < len + (len == 0) && d < best_d) {
      best = cands[i];
      best_d = d;
    }
  }
  return best;
}
