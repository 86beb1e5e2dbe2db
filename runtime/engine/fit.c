/* Whether a job's memory plan fits the memory its device can give it,
 * checked before anything of the plan is allocated (see graph.h). */
#include "engine_impl.h"

#include <stdio.h>
#include <string.h>

void ar_mem_limit_get(const ar_spec *spec, ar_device *dev, ar_mem_limit *out) {
  memset(out, 0, sizeof *out);
  out->on_host = dev ? !strcmp(ar_device_name(dev), "host")
                     : ar_spec_runs_on_host(spec);
  ar_host_memory hm;
  ar_host_memory_get(&hm);
  out->host = hm.limit;
  snprintf(out->host_source, sizeof out->host_source, "%s", hm.source);
  if (out->on_host)
    return;
  ar_device_mem mi;
  if (dev && ar_device_mem_info(dev, &mi) == AR_OK) {
    out->device = mi.capacity ? mi.available : mi.free;
    snprintf(out->device_source, sizeof out->device_source, "%s of %s%s",
             mi.capacity ? "what is left of the arena" : "the free memory",
             ar_device_name(dev),
             mi.capacity ? " (runtime.memory sizes it)" : "");
  } else if (spec->runtime.memory_bytes > 0) {
    out->device = spec->runtime.memory_bytes;
    snprintf(out->device_source, sizeof out->device_source,
             "runtime.memory, the arena of %s", spec->device);
  }
}

/* What to lower, from the plan's largest tensor. */
static void advice(const ar_plan *p, char *buf, size_t n) {
  const ar_plan_entry *big = NULL;
  for (int i = 0; i < p->count; i++)
    if (!big || p->entries[i].bytes > big->bytes)
      big = &p->entries[i];
  if (!big) {
    snprintf(buf, n, "lower the widths of model.layers or train.batch");
    return;
  }
  char layer[64];
  snprintf(layer, sizeof layer, "%s", big->name);
  char *dot = strchr(layer, '.');
  const char *what = dot ? big->name + (dot - layer) + 1 : "";
  if (dot)
    *dot = '\0';
  char b[32];
  ar__fmt_bytes(big->bytes, b, sizeof b);
  const char *lower;
  char own[160];
  if (big->cls == AR_MEM_EPHEMERAL || !strcmp(layer, "batch")) {
    lower = "train.batch";
  } else if (!strcmp(what, "lsh.scratch")) {
    lower = "train.threads";
  } else if (!strncmp(what, "lsh.", 4) && big->cls == AR_MEM_HOST) {
    snprintf(own, sizeof own, "model.layers.%s.sparse.L (or bucket, or its width)", layer);
    lower = own;
  } else {
    snprintf(own, sizeof own, "model.layers.%s.dense (or the width feeding it)", layer);
    lower = own;
  }
  snprintf(buf, n, "the largest part is %s (%s, %s): lower %s", big->name, b,
           ar_mem_class_name(big->cls), lower);
}

ar_status ar_plan_fit(const ar_plan *plan, const ar_spec *spec, const ar_mem_limit *lim,
                      ar_err *err) {
  char need[32], have[32], p[32], e[32], h[32], what[512];
  ar__fmt_bytes(plan->persistent_bytes, p, sizeof p);
  ar__fmt_bytes(plan->ephemeral_bytes, e, sizeof e);
  ar__fmt_bytes(plan->host_bytes, h, sizeof h);
  /* On the host all three parts are host memory; on a GPU the blocks are
   * device memory and the host entries host memory. */
  uint64_t dev_need = lim->on_host ? plan->total_bytes
                                   : (uint64_t)plan->persistent_bytes + plan->ephemeral_bytes;
  uint64_t dev_have = lim->on_host ? lim->host : lim->device;
  const char *src = lim->on_host ? lim->host_source : lim->device_source;
  if (dev_have > 0 && dev_need > dev_have) {
    ar__fmt_bytes(dev_need, need, sizeof need);
    ar__fmt_bytes(dev_have, have, sizeof have);
    advice(plan, what, sizeof what);
    return ar_errf(err, AR_NOMEM,
                   "job '%s' needs %s (%llu bytes: persistent %s for parameters and optimizer "
                   "state, ephemeral %s for one iteration%s%s%s) but %s can give it %s "
                   "(%llu bytes, from %s), so nothing was allocated; %s",
                   spec->name, need, (unsigned long long)dev_need, p, e,
                   lim->on_host ? ", host " : "", lim->on_host ? h : "",
                   lim->on_host ? " for hash tables and scratch" : "",
                   lim->on_host ? "this host" : spec->device, have,
                   (unsigned long long)dev_have, src, what);
  }
  if (!lim->on_host && lim->host > 0 && plan->host_bytes > lim->host) {
    ar__fmt_bytes(plan->host_bytes, need, sizeof need);
    ar__fmt_bytes(lim->host, have, sizeof have);
    return ar_errf(err, AR_NOMEM,
                   "job '%s' needs %s of host memory next to its device blocks (%llu bytes) "
                   "but this host can give it %s (from %s), so nothing was allocated; lower "
                   "train.batch", spec->name, need, (unsigned long long)plan->host_bytes,
                   have, lim->host_source);
  }
  return AR_OK;
}
