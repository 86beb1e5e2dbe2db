/*
 * The policy table.  A new policy is one file defining an ar__lanes_policy
 * plus its line here.
 */
#include <stdio.h>
#include <string.h>

#include "lanes_impl.h"

static const ar__lanes_policy *const table[] = {
    &ar__policy_fifo, &ar__policy_pack, &ar__policy_srtf, &ar__policy_fair,
    &ar__policy_priority,
};

const ar__lanes_policy *ar__lanes_policy_find(const char *name) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i]->name, name) == 0)
      return table[i];
  return NULL;
}

const char *ar__lanes_policy_list(char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    int n = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", table[i]->name);
    if (n < 0 || (size_t)n >= cap - at)
      break;
    at += (size_t)n;
  }
  return buf;
}
