/*
 * The policy table.  A new policy is one file defining an ar__lanes_policy
 * plus its line here.
 */
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

const char *ar__lanes_policy_list(void) {
  return "fifo, pack, srtf, fair, priority";
}
