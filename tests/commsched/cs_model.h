/* A model-shaped op graph for the simulator's tests and sweep (no cmocka):
 * `layers` dense layers with a weight and a bias transfer each, weights of
 * varied sizes, a residual edge every third layer, a forward chain and a
 * backward chain in reverse.  Each recv feeds the forward op that uses it
 * and the backward op that produces its gradient.  Forward time is
 * s_per_byte x weight bytes, backward twice that.  Transfers are spread
 * round-robin over `servers` channels; returns NULL on failure. */
#ifndef TESTS_COMMSCHED_MODEL_H
#define TESTS_COMMSCHED_MODEL_H

#include <stdio.h>

#include "accelrt/commsched.h"

static inline ar_commsched_graph *cs_model(int layers, uint32_t servers,
                                           double s_per_byte, uint64_t seed) {
  ar_commsched_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_graph_create(&g, &err) != AR_OK)
    return NULL;
  ar_rng r;
  ar_rng_seed(&r, seed, 77);
  ar_commsched_op w[256], b[256], f[256], prev = AR_COMMSCHED_NONE, bw;
  size_t wb[256];
  char name[32];
  ar_status st = AR_OK;
  if (layers > 256)
    layers = 256;
  for (int l = 0; l < layers && st == AR_OK; l++) {
    /* 64 KiB .. 4 MiB of float weights, in whole KiB. */
    wb[l] = (size_t)(64 + ar_rng_below(&r, 4033)) * 1024;
    snprintf(name, sizeof name, "w%d", l);
    st = ar_commsched_graph_add_recv(
        g, name, wb[l], (uint32_t)(2 * l) % servers, 0.0, &w[l], &err);
    snprintf(name, sizeof name, "b%d", l);
    if (st == AR_OK)
      st = ar_commsched_graph_add_recv(
          g, name, 4096, (uint32_t)(2 * l + 1) % servers, 0.0, &b[l], &err);
    snprintf(name, sizeof name, "fwd%d", l);
    if (st == AR_OK)
      st = ar_commsched_graph_add_compute(g, name, s_per_byte * (double)wb[l],
                                          &f[l], &err);
    if (st == AR_OK)
      st = ar_commsched_graph_add_edge(g, w[l], f[l], &err);
    if (st == AR_OK)
      st = ar_commsched_graph_add_edge(g, b[l], f[l], &err);
    if (st == AR_OK && prev != AR_COMMSCHED_NONE)
      st = ar_commsched_graph_add_edge(g, prev, f[l], &err);
    if (st == AR_OK && l >= 3 && l % 3 == 0)
      st = ar_commsched_graph_add_edge(g, f[l - 3], f[l], &err);
    prev = f[l];
  }
  for (int l = layers - 1; l >= 0 && st == AR_OK; l--) {
    snprintf(name, sizeof name, "bwd%d", l);
    st = ar_commsched_graph_add_compute(
        g, name, 2.0 * s_per_byte * (double)wb[l], &bw, &err);
    if (st == AR_OK)
      st = ar_commsched_graph_add_edge(g, prev, bw, &err);
    if (st == AR_OK)
      st = ar_commsched_graph_add_edge(g, w[l], bw, &err);
    if (st == AR_OK)
      st = ar_commsched_graph_add_edge(g, b[l], bw, &err);
    prev = bw;
  }
  if (st == AR_OK)
    st = ar_commsched_graph_seal(g, &err);
  if (st != AR_OK) {
    fprintf(stderr, "cs_model: %s\n", err.msg);
    ar_commsched_graph_destroy(g);
    return NULL;
  }
  return g;
}

#endif /* TESTS_COMMSCHED_MODEL_H */
