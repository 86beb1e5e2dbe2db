/* The exact memory plan of a job, from shapes alone (see graph.h). */
#include "accelrt/graph.h"
#include "accelrt/lanes.h"

#include <math.h>
#include <string.h>

#define PLAN_ALIGN 64

static size_t align_up(size_t x) { return (x + PLAN_ALIGN - 1) & ~(size_t)(PLAN_ALIGN - 1); }

typedef struct plan_builder {
  ar_plan *plan;
  int cap;
  size_t next[2]; /* next free offset per class */
} plan_builder;

/* Steps of one iteration, for the ephemeral tensors' lifetimes: the batch
 * load (0), the forward of layer l (1 + l), the loss (n + 1), the backward
 * of layer l (n + 2 + (n - 1 - l)), the optimizer step (2n + 2).  The
 * evaluation (forward, top-k, loss) fits the same timeline. */
#define T_LOAD 0
#define T_FWD(l) (1 + (l))
#define T_LOSS(n) ((n) + 1)
#define T_BWD(n, l) ((n) + 2 + ((n) - 1 - (l)))
#define T_STEP(n) (2 * (n) + 2)

static ar_status add_live(plan_builder *pb, const char *a, const char *b, ar_mem_class cls,
                          size_t bytes, int64_t first, int64_t last);

/* A persistent entry (its lifetime is the job's). */
static ar_status add(plan_builder *pb, const char *a, const char *b, ar_mem_class cls,
                     size_t bytes) {
  return add_live(pb, a, b, cls, bytes, 0, INT64_MAX);
}

static ar_status add_live(plan_builder *pb, const char *a, const char *b, ar_mem_class cls,
                          size_t bytes, int64_t first, int64_t last) {
  ar_plan *p = pb->plan;
  if (p->count == pb->cap) {
    int cap = pb->cap ? pb->cap * 2 : 32;
    ar_plan_entry *e = ar_realloc(p->entries, (size_t)cap * sizeof *e);
    if (!e)
      return AR_NOMEM;
    p->entries = e;
    pb->cap = cap;
  }
  ar_plan_entry *e = &p->entries[p->count++];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s%s%s", a, b ? "." : "", b ? b : "");
  e->cls = cls;
  e->bytes = bytes;
  e->first_use = first;
  e->last_use = last;
  e->offset = pb->next[cls];
  pb->next[cls] = align_up(pb->next[cls] + bytes);
  return AR_OK;
}

/* Offsets of the ephemeral tensors from their lifetimes (lanes/offsets.c):
 * the lane an iteration runs in is the peak of what is live at once, not
 * the sum of everything. */
static ar_status place_ephemeral(ar_plan *p) {
  int n = 0;
  for (int i = 0; i < p->count; i++)
    n += p->entries[i].cls == AR_MEM_EPHEMERAL;
  ar_lanes_tensor *t = ar_malloc((size_t)(n ? n : 1) * sizeof *t);
  size_t *off = ar_malloc((size_t)(n ? n : 1) * sizeof *off);
  ar_status st = t && off ? AR_OK : AR_NOMEM;
  int k = 0;
  for (int i = 0; st == AR_OK && i < p->count; i++) {
    const ar_plan_entry *e = &p->entries[i];
    if (e->cls == AR_MEM_EPHEMERAL)
      t[k++] = (ar_lanes_tensor){e->bytes, e->first_use, e->last_use};
  }
  size_t peak = 0;
  if (st == AR_OK)
    st = ar_lanes_plan_offsets(t, (size_t)n, PLAN_ALIGN, off, &peak, NULL);
  k = 0;
  for (int i = 0; st == AR_OK && i < p->count; i++)
    if (p->entries[i].cls == AR_MEM_EPHEMERAL)
      p->entries[i].offset = off[k++];
  if (st == AR_OK)
    p->ephemeral_bytes = peak;
  ar_free(t);
  ar_free(off);
  return st;
}

bool ar_spec_runs_on_host(const ar_spec *spec) {
  if (!strcmp(spec->device, "host"))
    return true;
  if (strncmp(spec->device, "cuda:", 5) == 0)
    return false;
  char why[128];
  return ar_cuda_device_count(why, sizeof why) == 0; /* auto */
}

bool ar_layer_sampled(const ar_spec *spec, int l, bool host) {
  const ar_sparse_spec *sp = &spec->layers[l].sparse;
  switch (sp->mode) {
  case AR_SPARSE_LSH:
    return host;
  case AR_SPARSE_AUTO:
    return host && spec->layers[l].width >= sp->auto_min_width;
  default:
    return false;
  }
}

int64_t ar_layer_budget(const ar_spec *spec, int l) {
  const ar_layer_spec *ls = &spec->layers[l];
  int64_t b = (int64_t)ceil(ls->sparse.active * (double)ls->width);
  if (ls->sparse.max_active > 0 && b > ls->sparse.max_active)
    b = ls->sparse.max_active;
  if (b < ls->sparse.min_active)
    b = ls->sparse.min_active;
  if (b < 1)
    b = 1;
  return b > ls->width ? ls->width : b;
}

int64_t ar_layer_active_cap(const ar_spec *spec, int l, int64_t max_labels) {
  int64_t c = ar_layer_budget(spec, l);
  if (l == spec->n_layers - 1)
    c += max_labels < 1 ? 1 : max_labels; /* the true labels are always active */
  return c > spec->layers[l].width ? spec->layers[l].width : c;
}

int64_t ar_layer_shared_cap(const ar_spec *spec, int l, int64_t max_labels) {
  (void)max_labels;
  const ar_layer_spec *ls = &spec->layers[l];
  if (l + 1 != spec->n_layers)
    return 0; /* only an output layer */
  if (l == 0 && spec->input.sparse)
    return 0; /* its input must be a dense batch */
  if (l > 0 && ar_layer_sampled(spec, l - 1, true))
    return 0;
  int64_t target = ls->sparse.min_active < 0 ? ar_layer_budget(spec, l) : ls->sparse.min_active;
  if (target <= 0)
    return 0;
  return 2 * target >= ls->width ? ls->width : target;
}

ar_status ar_plan_compute(const ar_spec *spec, int64_t max_nnz, int64_t max_labels,
                          ar_plan *out) {
  return ar_plan_compute_on(spec, max_nnz, max_labels, ar_spec_runs_on_host(spec), out);
}

ar_status ar_plan_compute_on(const ar_spec *spec, int64_t max_nnz, int64_t max_labels,
                             bool host, ar_plan *out) {
  memset(out, 0, sizeof *out);
  plan_builder pb = {out, 0, {0, 0}};
  const size_t f = sizeof(float);
  const size_t B = (size_t)spec->train.batch;
  const int state_per_param = spec->train.optimizer == AR_OPT_ADAM ? 2
                              : spec->train.momentum > 0.0         ? 1
                                                                   : 0;
  if (max_nnz < 1)
    max_nnz = 1;
  if (max_labels < 1)
    max_labels = 1;

  /* Persistent: parameters and optimizer state, layer by layer. */
  int64_t in = spec->input.features;
  for (int l = 0; l < spec->n_layers; l++) {
    const ar_layer_spec *ls = &spec->layers[l];
    size_t nw = (size_t)in * (size_t)ls->width, nb = (size_t)ls->width;
    out->param_count += nw + nb;
    AR_CHECK(add(&pb, ls->name, "w", AR_MEM_PERSISTENT, nw * f));
    AR_CHECK(add(&pb, ls->name, "b", AR_MEM_PERSISTENT, nb * f));
    static const char *const state_names[2][2] = {{"state1.w", "state1.b"},
                                                  {"state2.w", "state2.b"}};
    for (int s = 0; s < state_per_param; s++) {
      AR_CHECK(add(&pb, ls->name, state_names[s][0], AR_MEM_PERSISTENT, nw * f));
      AR_CHECK(add(&pb, ls->name, state_names[s][1], AR_MEM_PERSISTENT, nb * f));
    }
    if (ar_layer_sampled(spec, l, host)) {
      /* A sampled layer's gradient rows are accumulated by the samples of
       * a batch and zeroed by the sparse Adam step row by row, so they
       * live across iterations; the step of each row's last update makes
       * the moments decay exactly for the steps it skipped. */
      AR_CHECK(add(&pb, ls->name, "grad.w", AR_MEM_PERSISTENT, nw * f));
      out->entries[out->count - 1].zero_between = true;
      AR_CHECK(add(&pb, ls->name, "grad.b", AR_MEM_PERSISTENT, nb * f));
      out->entries[out->count - 1].zero_between = true;
      AR_CHECK(add(&pb, ls->name, "lsh.last", AR_MEM_PERSISTENT, nb * sizeof(uint64_t)));
    }
    in = ls->width;
  }

  /* Ephemeral: the batch, activations, gradients, loss scratch, each with
   * the steps it lives between; offsets come from the liveness plan below,
   * so tensors that are never live together share bytes. */
  const int64_t n = spec->n_layers, end = T_STEP(n);
  AR_CHECK(add_live(&pb, "batch", "row_ptr", AR_MEM_EPHEMERAL, (B + 1) * sizeof(int64_t),
                    T_LOAD, end));
  AR_CHECK(add_live(&pb, "batch", "idx", AR_MEM_EPHEMERAL, B * (size_t)max_nnz * sizeof(int32_t),
                    T_LOAD, end));
  AR_CHECK(add_live(&pb, "batch", "val", AR_MEM_EPHEMERAL, B * (size_t)max_nnz * f, T_LOAD, end));
  AR_CHECK(add_live(&pb, "batch", "lab_ptr", AR_MEM_EPHEMERAL, (B + 1) * sizeof(int64_t),
                    T_LOAD, end));
  AR_CHECK(add_live(&pb, "batch", "lab", AR_MEM_EPHEMERAL,
                    B * (size_t)max_labels * sizeof(int32_t), T_LOAD, end));
  if (!spec->input.sparse)
    AR_CHECK(add_live(&pb, "batch", "x", AR_MEM_EPHEMERAL, B * (size_t)spec->input.features * f,
                      T_LOAD, end));
  in = spec->input.features;
  for (int l = 0; l < spec->n_layers; l++) {
    const ar_layer_spec *ls = &spec->layers[l];
    size_t nw = (size_t)in * (size_t)ls->width, nb = (size_t)ls->width;
    if (ar_layer_sampled(spec, l, host)) {
      /* Per sample: the active ids, their count, activations and
       * gradients; y stays for the dense evaluation and dense layers
       * after this one. */
      size_t cap = (size_t)ar_layer_active_cap(spec, l, max_labels);
      AR_CHECK(add_live(&pb, ls->name, "lsh.active", AR_MEM_EPHEMERAL,
                        B * cap * sizeof(uint32_t), T_FWD(l), T_BWD(n, l)));
      AR_CHECK(add_live(&pb, ls->name, "lsh.n", AR_MEM_EPHEMERAL, B * sizeof(uint32_t), T_FWD(l),
                        T_BWD(n, l)));
      AR_CHECK(add_live(&pb, ls->name, "lsh.out", AR_MEM_EPHEMERAL, B * cap * f, T_FWD(l),
                        T_BWD(n, l)));
      AR_CHECK(add_live(&pb, ls->name, "lsh.dout", AR_MEM_EPHEMERAL, B * cap * f, T_FWD(l),
                        T_BWD(n, l)));
      size_t sc = (size_t)ar_layer_shared_cap(spec, l, max_labels);
      if (sc) {
        /* The batch's shared negatives (sampled.c): ids, gathered rows and
         * their gradients, biases, and (batch, shared) logits. */
        AR_CHECK(add_live(&pb, ls->name, "lsh.shared_ids", AR_MEM_EPHEMERAL,
                          sc * sizeof(uint32_t), T_FWD(l), T_BWD(n, l)));
        AR_CHECK(add_live(&pb, ls->name, "lsh.shared_w", AR_MEM_EPHEMERAL, sc * (size_t)in * f,
                          T_FWD(l), T_BWD(n, l)));
        AR_CHECK(add_live(&pb, ls->name, "lsh.shared_gw", AR_MEM_EPHEMERAL, sc * (size_t)in * f,
                          T_BWD(n, l), T_BWD(n, l)));
        AR_CHECK(add_live(&pb, ls->name, "lsh.shared_b", AR_MEM_EPHEMERAL, sc * f, T_FWD(l),
                          T_BWD(n, l)));
        AR_CHECK(add_live(&pb, ls->name, "lsh.shared_gb", AR_MEM_EPHEMERAL, sc * f, T_BWD(n, l),
                          T_BWD(n, l)));
        AR_CHECK(add_live(&pb, ls->name, "lsh.shared_z", AR_MEM_EPHEMERAL, B * sc * f, T_FWD(l),
                          T_BWD(n, l)));
      }
    } else {
      /* Written by the layer's backward, read by the optimizer step. */
      AR_CHECK(add_live(&pb, ls->name, "grad.w", AR_MEM_EPHEMERAL, nw * f, T_BWD(n, l), end));
      AR_CHECK(add_live(&pb, ls->name, "grad.b", AR_MEM_EPHEMERAL, nb * f, T_BWD(n, l), end));
    }
    /* Made by the forward, read by the next layer's forward and backward
     * (the last layer's holds the loss gradient until its backward). */
    AR_CHECK(add_live(&pb, ls->name, "y", AR_MEM_EPHEMERAL, B * nb * f, T_FWD(l), T_BWD(n, l)));
    /* Made by the next layer's backward, read by this layer's. */
    if (l + 1 < spec->n_layers)
      AR_CHECK(add_live(&pb, ls->name, "grad.y", AR_MEM_EPHEMERAL, B * nb * f, T_BWD(n, l + 1),
                        T_BWD(n, l)));
    in = ls->width;
  }
  AR_CHECK(add_live(&pb, "loss", "rows", AR_MEM_EPHEMERAL, B * f, T_LOSS(n), T_LOSS(n)));
  /* Evaluation takes the top-k after the forward, then the loss. */
  AR_CHECK(add_live(&pb, "eval", "topk", AR_MEM_EPHEMERAL, B * 5 * sizeof(int32_t), T_LOSS(n),
                    end));

  out->persistent_bytes = pb.next[AR_MEM_PERSISTENT];
  out->ephemeral_sum_bytes = pb.next[AR_MEM_EPHEMERAL];
  return place_ephemeral(out);
}

void ar_plan_fini(ar_plan *plan) {
  if (!plan)
    return;
  ar_free(plan->entries);
  memset(plan, 0, sizeof *plan);
}

static void human(size_t bytes, char *buf, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

void ar_plan_print(const ar_plan *plan, const ar_spec *spec, FILE *to) {
  char h1[32], h2[32], h3[32];
  fprintf(to, "job '%s' on device %s\n", spec->name, spec->device);
  fprintf(to, "model: input %s %lld\n", spec->input.sparse ? "sparse" : "dense",
          (long long)spec->input.features);
  int64_t in = spec->input.features;
  for (int l = 0; l < spec->n_layers; l++) {
    const ar_layer_spec *ls = &spec->layers[l];
    fprintf(to, "  %-12s %10lld -> %-10lld %-8s params %lld\n", ls->name, (long long)in,
            (long long)ls->width, ar_act_name(ls->act),
            (long long)(in * ls->width + ls->width));
    in = ls->width;
  }
  fprintf(to, "parameters: %zu\n", plan->param_count);
  fprintf(to, "memory plan (exact, from shapes; batch %d):\n", spec->train.batch);
  for (int i = 0; i < plan->count; i++) {
    const ar_plan_entry *e = &plan->entries[i];
    human(e->bytes, h1, sizeof h1);
    fprintf(to, "  %-10s %-28s %14zu B  (%s)\n",
            e->cls == AR_MEM_PERSISTENT ? "persistent" : "ephemeral", e->name, e->bytes, h1);
  }
  human(plan->persistent_bytes, h1, sizeof h1);
  human(plan->ephemeral_bytes, h2, sizeof h2);
  human(plan->persistent_bytes + plan->ephemeral_bytes, h3, sizeof h3);
  fprintf(to, "persistent bytes: %zu (%s)\n", plan->persistent_bytes, h1);
  fprintf(to, "ephemeral peak bytes: %zu (%s; tensors share bytes when never live together, "
          "%zu without sharing)\n", plan->ephemeral_bytes, h2, plan->ephemeral_sum_bytes);
  fprintf(to, "total: %zu (%s)\n", plan->persistent_bytes + plan->ephemeral_bytes, h3);
}
