/* The forward order (docs/graph.md, "Forward order").  A job file's list
 * order is a topological order of the graph, and the backward always runs
 * it last first.  The forward of a distributed job's worker runs another
 * topological order: a node whose inputs are ready and that reads no
 * parameter the forward has not read yet goes first, so that work that
 * waits for nothing fills the time the worker would spend waiting for the
 * next parameter on the link (issue 17: Inception's max pool branch, listed
 * after the convolutions, ran only once their weights were in, and in the
 * last block after the whole parameter stream had ended).  Among the other
 * ready nodes the one reading the most recently computed output goes
 * first, then the earliest listed: a branch continues until it joins, as a
 * file written branch by branch lists it, so the order does not depend on
 * where the file lists a branch.  The loss node stays last.
 *
 * Only the forward moves: every node's computation is the same whatever
 * runs beside it, and the backward (where the parts of a gradient several
 * nodes read are summed, in backward order) keeps the list order, so the
 * results are those of the list order bit for bit.  The memory plan, the
 * worker's hooks (ar_net_params' first readers), the op graph that TIC/TAC
 * order (runtime/dist/graph.c) and the simulator that runs it all take
 * this order.  One process keeps the list order (nothing waits there);
 * ACCELRT_NODE_ORDER=list keeps it under distributed: too. */
#include "net_impl.h"

#include <stdlib.h>
#include <string.h>

static bool list_order_forced(void) {
  const char *e = getenv("ACCELRT_NODE_ORDER");
  return e && strcmp(e, "list") == 0;
}

/* Whether the job's worker gets the ready-first order: a distributed job's
 * graph without sampled nodes or sparse input (those are lowered chains, a
 * line of nodes with one order). */
static bool reorder(const ar_net *n) {
  return n->spec && n->spec->distributed.enabled && n->head < 0 && n->n_hid == 0 &&
         n->sx[SX_PTR] < 0 && n->xd < 0 && n->n_nodes > 2 && !list_order_forced();
}

/* Whether node d reads no trainable parameter that `read` (by tensor) does
 * not mark: its forward waits for no transfer. */
static bool waits_for_nothing(const ar_net *n, const nnode *d, const bool *read) {
  for (int k = 0; k < d->sig.n_param; k++)
    if (n->tensors[d->param[k]].kind == T_PARAM && !read[d->param[k]])
      return false;
  return true;
}

ar_status ar__net_order(ar_net *n, ar_err *err) {
  const int N = n->n_nodes;
  ar_free(n->order);
  ar_free(n->fstep);
  n->order = ar_calloc((size_t)N + 1, sizeof *n->order);
  n->fstep = ar_calloc((size_t)N + 1, sizeof *n->fstep);
  if (!n->order || !n->fstep)
    return ar_errf(err, AR_NOMEM, "out of memory planning the graph");
  for (int i = 0; i < N; i++)
    n->order[i] = n->fstep[i] = i;
  if (!reorder(n))
    return AR_OK;
  /* left[i]: node i's inputs not computed yet; key[i]: the latest step
   * that computed one of them (-1: none); read: parameters read so far. */
  int *left = ar_calloc((size_t)N, sizeof *left), *key = ar_calloc((size_t)N, sizeof *key);
  bool *done = ar_calloc((size_t)N, sizeof *done);
  bool *read = ar_calloc((size_t)n->n_tensors, sizeof *read);
  ar_status st = AR_OK;
  if (!left || !key || !done || !read) {
    st = ar_errf(err, AR_NOMEM, "out of memory planning the graph");
    goto out;
  }
  for (int i = 0; i < N; i++) {
    key[i] = -1;
    for (int k = 0; k < n->nodes[i].n_in; k++)
      left[i] += n->tensors[n->nodes[i].in[k]].producer >= 0;
  }
  for (int s = 0; s < N; s++) {
    int best = -1;
    bool best_free = false;
    for (int i = 0; i < N; i++) {
      if (done[i] || left[i] || (i == N - 1 && s < N - 1))
        continue;
      const bool free = waits_for_nothing(n, &n->nodes[i], read);
      if (best < 0 || (free && !best_free) || (free == best_free && key[i] > key[best])) {
        best = i;
        best_free = free;
      }
    }
    /* The list order is topological: some node is always ready. */
    AR_ASSERT(best >= 0);
    const nnode *d = &n->nodes[best];
    n->order[s] = best;
    n->fstep[best] = s;
    done[best] = true;
    for (int k = 0; k < d->sig.n_param; k++)
      read[d->param[k]] = true;
    for (int j = 0; j < N; j++)
      for (int k = 0; k < n->nodes[j].n_in; k++)
        if (n->tensors[n->nodes[j].in[k]].producer == best) {
          left[j]--;
          key[j] = s;
        }
  }
out:
  ar_free(left);
  ar_free(key);
  ar_free(done);
  ar_free(read);
  return st;
}

int ar_net_forward_order(const ar_net *n, int *order) {
  if (order)
    for (int s = 0; s < n->n_nodes; s++)
      order[s] = n->order ? n->order[s] : s;
  return n->n_nodes;
}

void ar__net_order_print(const ar_net *n, FILE *to) {
  bool moved = false;
  for (int s = 0; s < n->n_nodes && n->order; s++)
    moved |= n->order[s] != s;
  if (!moved)
    return;
  fprintf(to, "  forward order (distributed: ready nodes that wait for no "
              "parameter first):");
  for (int s = 0; s < n->n_nodes; s++)
    fprintf(to, "%s%s", s ? ", " : " ", n->nodes[n->order[s]].name);
  fprintf(to, "\n");
}
