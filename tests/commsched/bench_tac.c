/* Times TAC and TIC on a model-shaped graph with 1,000 transfers (not part
 * of ctest): a chain of 500 layers, each with a weight and a bias transfer
 * spread over 4 channels, a forward op per layer and a backward op per
 * layer that needs every forward op.  Prints milliseconds per schedule. */
#include <stdio.h>
#include <stdlib.h>

#include "accelrt/commsched.h"

int main(int argc, char **argv) {
  int layers = argc > 1 ? atoi(argv[1]) : 500;
  ar_commsched_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_graph_create(&g, &err) != AR_OK)
    return 1;
  ar_rng r;
  ar_rng_seed(&r, 1, 2);
  ar_commsched_op prev = AR_COMMSCHED_NONE, w, b, f, bw;
  for (int l = 0; l < layers; l++) {
    ar_commsched_graph_add_recv(g, NULL, 4096, (uint32_t)l % 4,
                                1e-4 * (1 + (double)ar_rng_below(&r, 100)), &w,
                                &err);
    ar_commsched_graph_add_recv(g, NULL, 64, (uint32_t)(l + 1) % 4, 1e-5, &b,
                                &err);
    ar_commsched_graph_add_compute(
        g, NULL, 1e-4 * (1 + (double)ar_rng_below(&r, 100)), &f, &err);
    ar_commsched_graph_add_edge(g, w, f, &err);
    ar_commsched_graph_add_edge(g, b, f, &err);
    if (prev != AR_COMMSCHED_NONE)
      ar_commsched_graph_add_edge(g, prev, f, &err);
    prev = f;
  }
  for (int l = 0; l < layers; l++) {
    ar_commsched_graph_add_compute(g, NULL, 2e-4, &bw, &err);
    ar_commsched_graph_add_edge(g, prev, bw, &err);
  }
  if (ar_commsched_graph_seal(g, &err) != AR_OK) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const ar_commsched_order orders[] = {AR_COMMSCHED_ORDER_TAC,
                                       AR_COMMSCHED_ORDER_TIC};
  for (int k = 0; k < 2; k++) {
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
      ar_commsched_schedule_opts o = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
      o.order = orders[k];
      ar_commsched_schedule *s = NULL;
      if (ar_commsched_schedule_create(g, &o, &s, &err) != AR_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
      }
      double t = ar_commsched_schedule_compute_s(s);
      best = t < best ? t : best;
      ar_commsched_schedule_destroy(s);
    }
    printf("%s: %zu transfers, %zu ops: %.2f ms (best of 5)\n",
           ar_commsched_order_name(orders[k]),
           ar_commsched_graph_transfer_count(g),
           ar_commsched_graph_op_count(g), best * 1e3);
  }
  ar_commsched_graph_destroy(g);
  return 0;
}
