/* Sweeps the simulator (not part of ctest): the 20-layer model of
 * cs_model.h, one server, 2 to 256 workers, 1 and 10 Gbit/s with 50 us of
 * latency; makespan and E per order (random: mean over 20 iterations, and
 * the worst).  Usage: bench_commsched_simulate [layers] [s_per_byte]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cs_model.h"

static int sim(const ar_commsched_graph *g, ar_commsched_order order,
               uint64_t it, const ar_commsched_sim_opts *o,
               ar_commsched_sim_result *r) {
  ar_commsched_schedule_opts so = AR_COMMSCHED_SCHEDULE_OPTS_INIT;
  so.order = order;
  so.seed = 1;
  so.iteration = it;
  ar_commsched_schedule *s = NULL;
  ar_err err = AR_ERR_INIT;
  if (ar_commsched_schedule_create(g, &so, &s, &err) != AR_OK ||
      ar_commsched_simulate(g, s, o, r, &err) != AR_OK) {
    fprintf(stderr, "%s\n", err.msg);
    ar_commsched_schedule_destroy(s);
    return 1;
  }
  ar_commsched_schedule_destroy(s);
  return 0;
}

int main(int argc, char **argv) {
  int layers = argc > 1 ? atoi(argv[1]) : 20;
  double spb = argc > 2 ? atof(argv[2]) : 0.5e-9;
  ar_commsched_graph *g = cs_model(layers, 1, spb, 1);
  if (!g)
    return 1;
  size_t bytes = 0;
  double comp = 0.0;
  for (size_t t = 0; t < ar_commsched_graph_transfer_count(g); t++)
    bytes += ar_commsched_graph_bytes(g, (uint32_t)t);
  for (size_t i = 0; i < ar_commsched_graph_op_count(g); i++)
    comp += ar_commsched_graph_time(g, (ar_commsched_op)i);
  printf("# %d layers, %zu transfers, %.1f MB of parameters, %.2f ms of "
         "compute per worker\n",
         layers, ar_commsched_graph_transfer_count(g), bytes / 1e6, comp * 1e3);
  printf("%5s %4s | %-17s | %-17s | %-26s | %-17s | %-17s\n", "gbps", "W",
         "none ms / E", "tic ms / E", "random mean (worst) ms / E",
         "tac ms / E", "U_min..U_max ms");
  const double gbps[] = {1, 10};
  const uint32_t workers[] = {2, 8, 64, 256};
  for (int b = 0; b < 2; b++)
    for (int k = 0; k < 4; k++) {
      ar_commsched_sim_opts o = AR_COMMSCHED_SIM_OPTS_INIT;
      o.workers = workers[k];
      o.bandwidth_Bps = gbps[b] * 1e9 / 8;
      o.latency_s = 50e-6;
      o.update_s = 1e-3;
      ar_commsched_sim_result rn, rt, rc, rr;
      double t0 = ar_now();
      if (sim(g, AR_COMMSCHED_ORDER_NONE, 0, &o, &rn) ||
          sim(g, AR_COMMSCHED_ORDER_TIC, 0, &o, &rt) ||
          sim(g, AR_COMMSCHED_ORDER_TAC, 0, &o, &rc))
        return 1;
      double mean = 0.0, mean_e = 0.0, worst = 0.0;
      for (uint64_t it = 0; it < 20; it++) {
        if (sim(g, AR_COMMSCHED_ORDER_RANDOM, it, &o, &rr))
          return 1;
        mean += rr.makespan_s / 20;
        mean_e += rr.metrics.efficiency / 20;
        worst = rr.makespan_s > worst ? rr.makespan_s : worst;
      }
      double dt = ar_now() - t0;
      printf("%5g %4u | %8.2f / %5.3f | %8.2f / %5.3f | %8.2f (%8.2f) / %5.3f "
             "| %8.2f / %5.3f | %.2f..%.2f  (%.0f ms wall for 23 runs)\n",
             gbps[b], o.workers, rn.makespan_s * 1e3, rn.metrics.efficiency,
             rt.makespan_s * 1e3, rt.metrics.efficiency, mean * 1e3,
             worst * 1e3, mean_e, rc.makespan_s * 1e3, rc.metrics.efficiency,
             rc.metrics.u_min_s * 1e3, rc.metrics.u_max_s * 1e3, dt * 1e3);
    }
  ar_commsched_graph_destroy(g);
  return 0;
}
