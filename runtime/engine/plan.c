/* The exact memory plan of a job, from shapes alone (see graph.h). */
#include "engine_impl.h"

#include "accelrt/lanes.h"
#include "accelrt/runtime.h"

#include <math.h>
#include <string.h>

#define PLAN_ALIGN 64

typedef struct plan_builder {
  ar_plan *plan;
  int cap;
  size_t next[3]; /* next free offset per class */
  ar_err *err;    /* may be NULL */
  bool overflow;  /* a byte count left size_t: the message is in err */
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

/* a * b * c bytes, or 0 with the builder marked when that leaves size_t
 * (widths up to 2^31 make single tensors of up to 2^64 bytes). */
static size_t bytes3(plan_builder *pb, const char *a, const char *b, uint64_t x, uint64_t y,
                     uint64_t z) {
  uint64_t r;
  if (__builtin_mul_overflow(x, y, &r) || __builtin_mul_overflow(r, z, &r) || r > SIZE_MAX) {
    if (!pb->overflow)
      ar_errf(pb->err, AR_RANGE, "the memory plan overflows: %s%s%s alone would take more "
              "than %zu bytes (%llu x %llu x %llu); lower the widths of model.layers or "
              "train.batch", a, b ? "." : "", b ? b : "", SIZE_MAX, (unsigned long long)x,
              (unsigned long long)y, (unsigned long long)z);
    pb->overflow = true;
    return 0;
  }
  return (size_t)r;
}

static ar_status add_live(plan_builder *pb, const char *a, const char *b, ar_mem_class cls,
                          size_t bytes, int64_t first, int64_t last);

/* A persistent entry (its lifetime is the job's). */
static ar_status add(plan_builder *pb, const char *a, const char *b, ar_mem_class cls,
                     size_t bytes) {
  return add_live(pb, a, b, cls, bytes, 0, INT64_MAX);
}

static ar_status add_live(plan_builder *pb, const char *a, const char *b, ar_mem_class cls,
                          size_t bytes, int64_t first, int64_t last) {
  if (pb->overflow)
    return AR_RANGE;
  ar_plan *p = pb->plan;
  /* The blocks are 64-byte aligned; host entries are separate allocations
   * of exactly their bytes, summed. */
  const size_t align = cls == AR_MEM_HOST ? 1 : PLAN_ALIGN;
  size_t end;
  if (__builtin_add_overflow(pb->next[cls], bytes, &end) ||
      __builtin_add_overflow(end, align - 1, &end)) {
    pb->overflow = true;
    return ar_errf(pb->err, AR_RANGE, "the memory plan overflows: %s%s%s (%zu bytes) after "
                   "%zu bytes of %s memory exceeds %zu bytes; lower the widths of "
                   "model.layers or train.batch", a, b ? "." : "", b ? b : "", bytes,
                   pb->next[cls], cls == AR_MEM_HOST ? "host" : cls == AR_MEM_PERSISTENT
                   ? "persistent" : "ephemeral", SIZE_MAX);
  }
  if (p->count == pb->cap) {
    int cap = pb->cap ? pb->cap * 2 : 32;
    ar_plan_entry *e = ar_realloc(p->entries, (size_t)cap * sizeof *e);
    if (!e)
      return ar_errf(pb->err, AR_NOMEM, "out of host memory computing the memory plan");
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
  pb->next[cls] = end & ~(align - 1);
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
  const int32_t rescore = spec->layers[l].sparse.rescore;
  if (rescore > 1)
    c *= rescore; /* the candidates scored before the budget is kept */
  if (l == spec->n_layers - 1)
    c += max_labels < 1 ? 1 : max_labels; /* the true labels are always active */
  return c > spec->layers[l].width ? spec->layers[l].width : c;
}

/* Whether sampled layer l computes its output by the shared path: the
 * output layer on a dense batch (the job's dense input or a dense layer). */
static bool takes_shared_path(const ar_spec *spec, int l) {
  if (l + 1 != spec->n_layers)
    return false; /* only an output layer */
  if (l == 0 && spec->input.sparse)
    return false; /* its input must be a dense batch */
  return l == 0 || !ar_layer_sampled(spec, l - 1, true);
}

int64_t ar_layer_negatives(const ar_spec *spec, int l) {
  const ar_layer_spec *ls = &spec->layers[l];
  if (!takes_shared_path(spec, l))
    return 0;
  int64_t n = ls->sparse.negatives;
  if (n < 0 && (!spec->graph || spec->lowered))
    return 0; /* a chain's layer (lowered too): the min_active top-up alone, as before */
  if (n < 0) { /* the budget, at least AR_SPARSE_MIN_NEGATIVES or an eighth of the width */
    int64_t floor = ls->width / 8 < AR_SPARSE_MIN_NEGATIVES ? ls->width / 8
                                                           : AR_SPARSE_MIN_NEGATIVES;
    n = ar_layer_budget(spec, l);
    n = n < floor ? floor : n;
  }
  return n > ls->width ? ls->width : n;
}

bool ar_layer_catch_up_refused(const ar_spec *spec, int l) {
  return spec->layers[l].sparse.catch_up > 0 && !(spec->train.beta1 < sqrt(spec->train.beta2));
}

int64_t ar_layer_shared_cap(const ar_spec *spec, int l, int64_t max_labels) {
  (void)max_labels;
  const ar_layer_spec *ls = &spec->layers[l];
  if (!takes_shared_path(spec, l))
    return 0;
  int64_t target = ls->sparse.min_active < 0 ? ar_layer_budget(spec, l) : ls->sparse.min_active;
  const int64_t neg = ar_layer_negatives(spec, l);
  if (neg > target)
    target = neg;
  if (target <= 0)
    return 0;
  return 2 * target >= ls->width ? ls->width : target;
}

int ar_plan_threads(const ar_spec *spec) {
  return ar_job_threads(spec);
}

ar_status ar_plan_compute(const ar_spec *spec, int64_t max_nnz, int64_t max_labels,
                          ar_plan *out, ar_err *err) {
  return ar_plan_compute_on(spec, max_nnz, max_labels, ar_spec_runs_on_host(spec), out, err);
}

static ar_status plan_build(plan_builder *pb, const ar_spec *spec, int64_t max_nnz,
                            int64_t max_labels, bool host);

/* What the lsh library allocates on the host for sampled layer l. */
static ar_status add_sampled_host(plan_builder *pb, const ar_spec *spec, int l, int64_t in,
                                  int64_t max_labels) {
  const char *n = spec->layers[l].name;
  AR_CHECK(ar__sampled_check_train(spec, l, n, pb->err));
  ar__sampled_mem sb;
  AR_CHECK(ar__sampled_bytes(spec, l, in, 0, ar_plan_threads(spec),
                             ar_layer_shared_cap(spec, l, max_labels), &sb, pb->err));
  AR_CHECK(add(pb, n, "lsh.tables", AR_MEM_HOST, sb.tables));
  AR_CHECK(add(pb, n, "lsh.hash", AR_MEM_HOST, sb.hash));
  AR_CHECK(add(pb, n, "lsh.scratch", AR_MEM_HOST, sb.scratch));
  AR_CHECK(add(pb, n, "lsh.touched", AR_MEM_HOST, sb.touched));
  if (sb.ids)
    AR_CHECK(add(pb, n, "lsh.ids", AR_MEM_HOST, sb.ids));
  return AR_OK;
}

ar_status ar_plan_compute_on(const ar_spec *spec, int64_t max_nnz, int64_t max_labels,
                             bool host, ar_plan *out, ar_err *err) {
  memset(out, 0, sizeof *out);
  plan_builder pb = {out, 0, {0, 0, 0}, err, false};
  ar_status st = plan_build(&pb, spec, max_nnz, max_labels, host);
  if (st != AR_OK)
    ar_plan_fini(out);
  return st;
}

/* Persistent: parameters and optimizer state, layer by layer, and the
 * host memory a sampled layer's lsh library allocates. */
static ar_status plan_persistent(plan_builder *pb, const ar_spec *spec, int64_t max_labels,
                                 bool host) {
  ar_plan *out = pb->plan;
  const uint64_t f = sizeof(float);
  const uint64_t B = (uint64_t)spec->train.batch;
  const int state_per_param = spec->train.optimizer == AR_OPT_ADAM ? 2
                              : spec->train.momentum > 0.0         ? 1
                                                                   : 0;
  uint64_t in = (uint64_t)spec->input.features;
  for (int l = 0; l < spec->n_layers; l++) {
    const ar_layer_spec *ls = &spec->layers[l];
    const char *n = ls->name;
    const uint64_t width = (uint64_t)ls->width;
    /* Widths are below 2^31 (the schema), so in * width + width < 2^63;
     * the sum over layers is checked. */
    if (__builtin_add_overflow(out->param_count, (size_t)(in * width + width),
                               &out->param_count))
      return ar_errf(pb->err, AR_RANGE, "the model's parameter count overflows at layer %s; "
                     "lower the widths of model.layers", n);
    const size_t wb = bytes3(pb, n, "w", in, width, f), bb = bytes3(pb, n, "b", width, f, 1);
    AR_CHECK(add(pb, n, "w", AR_MEM_PERSISTENT, wb));
    AR_CHECK(add(pb, n, "b", AR_MEM_PERSISTENT, bb));
    static const char *const state_names[2][2] = {{"state1.w", "state1.b"},
                                                  {"state2.w", "state2.b"}};
    for (int s = 0; s < state_per_param; s++) {
      AR_CHECK(add(pb, n, state_names[s][0], AR_MEM_PERSISTENT, wb));
      AR_CHECK(add(pb, n, state_names[s][1], AR_MEM_PERSISTENT, bb));
    }
    if (ar_layer_sampled(spec, l, host)) {
      /* A sampled layer's gradient rows are accumulated by the samples of
       * a batch and zeroed by the sparse Adam step row by row, so they
       * live across iterations; the step of each row's last update makes
       * the moments decay exactly for the steps it skipped. */
      AR_CHECK(add(pb, n, "grad.w", AR_MEM_PERSISTENT, wb));
      out->entries[out->count - 1].zero_between = true;
      AR_CHECK(add(pb, n, "grad.b", AR_MEM_PERSISTENT, bb));
      out->entries[out->count - 1].zero_between = true;
      AR_CHECK(add(pb, n, "lsh.last", AR_MEM_PERSISTENT,
                   bytes3(pb, n, "lsh.last", width, sizeof(uint64_t), 1)));
      /* Its hash tables, hash functions and scratch: host memory the lsh
       * library allocates itself, fixed when the model is made. */
      AR_CHECK(add_sampled_host(pb, spec, l, (int64_t)in, max_labels));
    }
    in = width;
  }
  if (!spec->input.sparse) /* model.c: the host copy a dense batch is staged in */
    AR_CHECK(add(pb, "batch", "stage", AR_MEM_HOST,
                 bytes3(pb, "batch", "stage", B, (uint64_t)spec->input.features, f)));

  return AR_OK;
}

/* Ephemeral: the batch, activations, gradients, loss scratch, each with
 * the steps it lives between; offsets come from the liveness plan
 * (place_ephemeral), so tensors that are never live together share bytes.
 * One linear list of the iteration's tensors, kept in one piece so that it
 * reads in the order the iteration uses them. */
static ar_status plan_ephemeral(plan_builder *pb, const ar_spec *spec, uint64_t nnz,
                                uint64_t nlab, int64_t max_labels, bool host) {
  const uint64_t f = sizeof(float), i32 = sizeof(int32_t), i64 = sizeof(int64_t);
  const uint64_t B = (uint64_t)spec->train.batch;
  const int64_t nl = spec->n_layers, end = T_STEP(nl);
  const ar_mem_class E = AR_MEM_EPHEMERAL;
  AR_CHECK(add_live(pb, "batch", "row_ptr", E, bytes3(pb, "batch", "row_ptr", B + 1, i64, 1),
                    T_LOAD, end));
  AR_CHECK(add_live(pb, "batch", "idx", E, bytes3(pb, "batch", "idx", B, nnz, i32), T_LOAD, end));
  AR_CHECK(add_live(pb, "batch", "val", E, bytes3(pb, "batch", "val", B, nnz, f), T_LOAD, end));
  AR_CHECK(add_live(pb, "batch", "lab_ptr", E, bytes3(pb, "batch", "lab_ptr", B + 1, i64, 1),
                    T_LOAD, end));
  AR_CHECK(add_live(pb, "batch", "lab", E, bytes3(pb, "batch", "lab", B, nlab, i32), T_LOAD,
                    end));
  if (!spec->input.sparse)
    AR_CHECK(add_live(pb, "batch", "x", E,
                      bytes3(pb, "batch", "x", B, (uint64_t)spec->input.features, f), T_LOAD,
                      end));
  uint64_t in = (uint64_t)spec->input.features;
  for (int l = 0; l < spec->n_layers; l++) {
    const ar_layer_spec *ls = &spec->layers[l];
    const char *n = ls->name;
    const uint64_t width = (uint64_t)ls->width;
    const int64_t fw = T_FWD(l), bw = T_BWD(nl, l);
    if (ar_layer_sampled(spec, l, host)) {
      /* Per sample: the active ids, their count, activations and
       * gradients; y stays for the dense evaluation and dense layers
       * after this one. */
      const uint64_t cap = (uint64_t)ar_layer_active_cap(spec, l, max_labels);
      AR_CHECK(add_live(pb, n, "lsh.active", E, bytes3(pb, n, "lsh.active", B, cap, 4), fw, bw));
      AR_CHECK(add_live(pb, n, "lsh.n", E, bytes3(pb, n, "lsh.n", B, 4, 1), fw, bw));
      AR_CHECK(add_live(pb, n, "lsh.out", E, bytes3(pb, n, "lsh.out", B, cap, f), fw, bw));
      AR_CHECK(add_live(pb, n, "lsh.dout", E, bytes3(pb, n, "lsh.dout", B, cap, f), fw, bw));
      const uint64_t sc = (uint64_t)ar_layer_shared_cap(spec, l, max_labels);
      if (sc) {
        /* The batch's shared negatives (sampled.c): ids, gathered rows and
         * their gradients, biases, and (batch, shared) logits. */
        const size_t rows = bytes3(pb, n, "lsh.shared_w", sc, in, f);
        AR_CHECK(add_live(pb, n, "lsh.shared_ids", E, bytes3(pb, n, "lsh.shared_ids", sc, 4, 1),
                          fw, bw));
        AR_CHECK(add_live(pb, n, "lsh.shared_w", E, rows, fw, bw));
        AR_CHECK(add_live(pb, n, "lsh.shared_gw", E, rows, bw, bw));
        AR_CHECK(add_live(pb, n, "lsh.shared_b", E, bytes3(pb, n, "lsh.shared_b", sc, f, 1), fw,
                          bw));
        AR_CHECK(add_live(pb, n, "lsh.shared_gb", E, bytes3(pb, n, "lsh.shared_gb", sc, f, 1),
                          bw, bw));
        AR_CHECK(add_live(pb, n, "lsh.shared_z", E, bytes3(pb, n, "lsh.shared_z", B, sc, f), fw,
                          bw));
      }
    } else {
      /* Written by the layer's backward, read by the optimizer step. */
      AR_CHECK(add_live(pb, n, "grad.w", E, bytes3(pb, n, "grad.w", in, width, f), bw, end));
      AR_CHECK(add_live(pb, n, "grad.b", E, bytes3(pb, n, "grad.b", width, f, 1), bw, end));
    }
    /* Made by the forward, read by the next layer's forward and backward
     * (the last layer's holds the loss gradient until its backward). */
    const size_t yb = bytes3(pb, n, "y", B, width, f);
    AR_CHECK(add_live(pb, n, "y", E, yb, fw, bw));
    /* Made by the next layer's backward, read by this layer's. */
    if (l + 1 < spec->n_layers)
      AR_CHECK(add_live(pb, n, "grad.y", E, yb, T_BWD(nl, l + 1), bw));
    in = width;
  }
  AR_CHECK(add_live(pb, "loss", "rows", E, bytes3(pb, "loss", "rows", B, f, 1), T_LOSS(nl),
                    T_LOSS(nl)));
  /* Evaluation takes the top-k after the forward, then the loss. */
  AR_CHECK(add_live(pb, "eval", "topk", E, bytes3(pb, "eval", "topk", B, 5, i32), T_LOSS(nl),
                    end));

  return AR_OK;
}

static ar_status plan_build(plan_builder *pb, const ar_spec *spec, int64_t max_nnz,
                            int64_t max_labels, bool host) {
  ar_plan *out = pb->plan;
  if (max_nnz < 1)
    max_nnz = 1;
  if (max_labels < 1)
    max_labels = 1;
  AR_CHECK(plan_persistent(pb, spec, max_labels, host));
  AR_CHECK(plan_ephemeral(pb, spec, (uint64_t)max_nnz, (uint64_t)max_labels, max_labels, host));
  out->persistent_bytes = pb->next[AR_MEM_PERSISTENT];
  out->ephemeral_sum_bytes = pb->next[AR_MEM_EPHEMERAL];
  out->host_bytes = pb->next[AR_MEM_HOST];
  ar_status st = place_ephemeral(out);
  if (st != AR_OK)
    return ar_errf(pb->err, st, "out of host memory placing the plan's tensors");
  if (__builtin_add_overflow(out->persistent_bytes, out->ephemeral_bytes, &out->total_bytes) ||
      __builtin_add_overflow(out->total_bytes, out->host_bytes, &out->total_bytes))
    return ar_errf(pb->err, AR_RANGE, "the memory plan overflows: %zu persistent, %zu "
                   "ephemeral and %zu host bytes exceed %zu in all; lower the widths of "
                   "model.layers or train.batch", out->persistent_bytes, out->ephemeral_bytes,
                   out->host_bytes, SIZE_MAX);
  return AR_OK;
}

void ar_plan_add_host(ar_plan *plan, size_t bytes) {
  plan->host_bytes += bytes;
  plan->total_bytes += bytes;
}

void ar_plan_fini(ar_plan *plan) {
  if (!plan)
    return;
  ar_free(plan->entries);
  memset(plan, 0, sizeof *plan);
}

void ar__fmt_bytes(uint64_t bytes, char *buf, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", v, units[u]);
}

static void human(size_t bytes, char *buf, size_t n) { ar__fmt_bytes(bytes, buf, n); }

void ar_plan_print(const ar_plan *plan, const ar_spec *spec, FILE *to) {
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
  ar_plan_print_memory(plan, spec->train.batch, to);
}

void ar_plan_print_memory(const ar_plan *plan, int batch, FILE *to) {
  char h1[32], h2[32], h3[32];
  fprintf(to, "memory plan (exact, from shapes; batch %d):\n", batch);
  for (int i = 0; i < plan->count; i++) {
    const ar_plan_entry *e = &plan->entries[i];
    human(e->bytes, h1, sizeof h1);
    fprintf(to, "  %-10s %-28s %14zu B  (%s)\n", ar_mem_class_name(e->cls), e->name, e->bytes,
            h1);
  }
  human(plan->persistent_bytes, h1, sizeof h1);
  human(plan->ephemeral_bytes, h2, sizeof h2);
  fprintf(to, "persistent bytes: %zu (%s)\n", plan->persistent_bytes, h1);
  fprintf(to, "ephemeral peak bytes: %zu (%s; tensors share bytes when never live together, "
          "%zu without sharing)\n", plan->ephemeral_bytes, h2, plan->ephemeral_sum_bytes);
  human(plan->host_bytes, h1, sizeof h1);
  fprintf(to, "host bytes: %zu (%s; outside the device blocks: sampled layers' hash tables, "
          "hash functions and scratch, the batch's staging copy)\n", plan->host_bytes, h1);
  human(plan->total_bytes, h3, sizeof h3);
  fprintf(to, "total: %zu (%s)\n", plan->total_bytes, h3);
}

const char *ar_mem_class_name(ar_mem_class c) {
  static const char *const names[] = {"persistent", "ephemeral", "host"};
  return (unsigned)c < 3 ? names[c] : "?";
}
