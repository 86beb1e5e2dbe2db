/* A job file's chain (model.layers of dense layers over model.input.sparse,
 * or .dense over XC rows) lowered onto the graph engine: which chains can
 * be, the switch
 * (ACCELRT_CHAIN_ENGINE), and the map between the two engines' tensor
 * names and orders that keeps a lowered job's checkpoints the chain's.
 *
 * The lowering itself is small because the graph engine already reads a
 * chain's items: without `inputs:` item i reads item i-1 and item 0 the
 * sparse input, which makes it the op sparse_dense (weight (features,
 * width), the chain's first layer, its kernels and initial values); the
 * later items are dense (weight (width, inputs), as the chain's), and the
 * last item's activation picks xent_multi, the chain's loss
 * (net_sparse_in.c).  Over model.input.dense the rows are scattered into
 * a dense batch as the chain does and item 0 is a dense node.  Every
 * parameter of a lowered chain decays under train.weight_decay, biases
 * too, as the chain's (net.c; a written graph exempts 1-D ones).  What is
 * left is the checkpoint: the graph lists its
 * parameters, then their optimizer slots ("L.w.adam_m"), in plan order;
 * the chain lists each layer's w, b and their slots ("L.state1.w").  A
 * lowered job writes and reads the chain's list, so either engine resumes
 * the other's file (versions 1 and 2), and export, which reads that file,
 * stays the chain's.  docs/graph.md, "Lowered chains". */
#include "engine_impl.h"

#include <stdlib.h>
#include <string.h>

ar_status ar_chain_engine_env(ar_chain_engine *out, ar_err *err) {
  const char *v = getenv("ACCELRT_CHAIN_ENGINE");
  *out = AR_CHAIN_ENGINE_GRAPH;
  if (!v || !*v || !strcmp(v, "graph"))
    return AR_OK;
  if (!strcmp(v, "chain")) {
    *out = AR_CHAIN_ENGINE_CHAIN;
    return AR_OK;
  }
  return ar_errf(err, AR_INVALID,
                 "ACCELRT_CHAIN_ENGINE=%s: use `graph` (chains lowered onto the graph engine, "
                 "the default) or `chain` (the chain engine)",
                 v);
}

const char *ar_chain_lower_refusal(const ar_spec *s, char *buf, size_t cap) {
  if (s->graph || s->onnx || s->n_jobs > 0 || s->n_layers == 0) {
    snprintf(buf, cap, "not a chain of model.layers");
    return buf;
  }
  if (!ar_spec_runs_on_host(s)) {
    snprintf(buf, cap, "device %s is a GPU (the CUDA kernels of sparse_dense and xent_multi "
                       "have not yet run on a GPU)", s->device);
    return buf;
  }
  for (int w = 0; w < s->distributed.n_workers; w++) {
    ar_spec one = *s;
    one.device = s->distributed.workers[w].device;
    if (one.device && !ar_spec_runs_on_host(&one)) {
      snprintf(buf, cap, "distributed.workers[%d].device %s is a GPU (the CUDA kernels of "
                         "sparse_dense and xent_multi have not yet run on a GPU)", w,
               one.device);
      return buf;
    }
  }
  /* Staging is a GPU worker's path (runtime/dist/stage.c), which the
   * chain engine takes; ACCELRT_DIST_STAGE=1 puts host workers on it, so
   * their chain stays there too (a lowered net is never staged). */
  const char *stage = getenv("ACCELRT_DIST_STAGE");
  if (s->distributed.enabled && stage && !strcmp(stage, "1")) {
    snprintf(buf, cap, "ACCELRT_DIST_STAGE=1 (the workers stage their tensors as GPU workers "
                       "do, on the chain engine)");
    return buf;
  }
  if (s->input.kind != AR_INPUT_SPARSE && s->input.kind != AR_INPUT_DENSE) {
    snprintf(buf, cap, "not a chain over model.input.sparse or .dense");
    return buf;
  }
  for (int l = 0; l < s->n_layers; l++) {
    if (!ar_layer_sampled(s, l, true))
      continue;
    const char *nm = s->layers[l].name;
    if (s->train.optimizer != AR_OPT_ADAM) {
      snprintf(buf, cap, "layer %s is LSH-sampled and train.optimizer is not adam (neither "
                         "engine trains a sampled layer without sparse Adam)", nm);
      return buf;
    }
    const ar_act a = s->layers[l].act;
    if (l + 1 < s->n_layers && a != AR_ACT_RELU && a != AR_ACT_NONE) {
      snprintf(buf, cap, "layer %s is LSH-sampled with activation %s (the graph's hidden "
                         "sampled items compute relu or identity)", nm, ar_act_name(a));
      return buf;
    }
  }
  return NULL;
}

bool ar_spec_reads_rows(const ar_spec *s) {
  return !s->onnx && (s->input.kind == AR_INPUT_SPARSE ||
                      (s->lowered && s->input.kind == AR_INPUT_DENSE));
}

static bool lower_one(ar_spec *s, ar_chain_engine e, FILE *notes) {
  char why[256];
  if (s->graph && !s->lowered) /* a graph model: nothing to route */
    return false;
  const char *no = s->lowered ? NULL : ar_chain_lower_refusal(s, why, sizeof why);
  if (notes) {
    if (no)
      fprintf(notes, "engine: chain (job '%s' stays on it: %s)\n", s->name, no);
    else if (e == AR_CHAIN_ENGINE_GRAPH)
      fprintf(notes, "engine: graph (job '%s', a chain lowered onto the graph engine)\n",
              s->name);
    else
      fprintf(notes, "engine: chain (job '%s', kept there by ACCELRT_CHAIN_ENGINE=chain; "
                     "without it the chain is lowered onto the graph engine)\n", s->name);
  } else if (no && e == AR_CHAIN_ENGINE_GRAPH) {
    ar_log(AR_LOG_INFO, "job '%s' stays on the chain engine: %s", s->name, no);
  }
  if (no || e != AR_CHAIN_ENGINE_GRAPH)
    return false;
  s->graph = s->lowered = true;
  return true;
}

int ar_chain_route(ar_spec *s, ar_chain_engine e, FILE *notes) {
  int n = 0;
  if (s->n_jobs == 0)
    return lower_one(s, e, notes);
  for (int i = 0; i < s->n_jobs; i++)
    n += lower_one(s->jobs[i], e, notes);
  return n;
}

/* ---- the checkpoint's names ---------------------------------------------- */

/* The chain's suffixes of a layer's tensors, in its order, and the graph's
 * for the same tensor under each optimizer (plan.c, plan_persistent;
 * net.c, add_optimizer). */
static const char *const chain_sfx[6] = {"w", "b", "state1.w", "state1.b", "state2.w",
                                         "state2.b"};
static const char *const adam_sfx[6] = {"w", "b", "w.adam_m", "b.adam_m", "w.adam_v",
                                        "b.adam_v"};
static const char *const sgd_sfx[4] = {"w", "b", "w.velocity", "b.velocity"};

enum { NAME_ROOM = 320 };

/* The tensors a layer of the chain's checkpoint lists: its w, b and their
 * optimizer slots, then (a sampled layer) its rows' last steps. */
static int slots_per_layer(const ar_spec *s) {
  const int slots = s->train.optimizer == AR_OPT_ADAM ? 2 : s->train.momentum > 0 ? 1 : 0;
  return 2 + 2 * slots;
}

/* Tensor q of layer l (q < per: the parameters and slots, q == per: the
 * sampled layer's last steps, per + 1 and per + 2: its gradient rows,
 * persistent but not checkpointed), named as the graph names it (graph)
 * and as the chain does (chain). */
static void slot_names(const ar_spec *s, int l, int q, int per, char *graph, char *chain,
                       size_t cap) {
  const char *const *gsfx = s->train.optimizer == AR_OPT_ADAM ? adam_sfx : sgd_sfx;
  static const char *const g_rest[3] = {"lsh_last", "w.grad", "b.grad"};
  static const char *const c_rest[3] = {"lsh.last", "grad.w", "grad.b"};
  snprintf(graph, cap, "%s.%s", s->layers[l].name, q < per ? gsfx[q] : g_rest[q - per]);
  snprintf(chain, cap, "%s.%s", s->layers[l].name, q < per ? chain_sfx[q] : c_rest[q - per]);
}

int ar_chain_lowered_slot(const ar_spec *s, const char *name, char *buf, size_t cap) {
  const int per = slots_per_layer(s);
  for (int l = 0, k = 0; l < s->n_layers; l++) {
    /* The chain's plan lists a sampled layer's gradient rows between its
     * slots and its last steps (plan.c, plan_persistent). */
    const int i_end = per + (ar_layer_sampled(s, l, true) ? 3 : 0);
    for (int i = 0; i < i_end; i++, k++) {
      const int q = i < per ? i : i == i_end - 1 ? per : i + 1;
      char g[NAME_ROOM], c[NAME_ROOM];
      slot_names(s, l, q, per, g, c, sizeof g);
      if (!strcmp(g, name)) {
        snprintf(buf, cap, "%s", c);
        return k;
      }
    }
  }
  return -1;
}

ar_status ar__lower_ckpt_list(const ar_spec *s, ar__ckpt_tensors *t, ar_err *err) {
  const int per = slots_per_layer(s), n = t->n;
  int want_n = 0;
  for (int l = 0; l < s->n_layers; l++)
    want_n += per + (ar_layer_sampled(s, l, true) ? 1 : 0);
  if (n != want_n)
    return ar_errf(err, AR_STATE,
                   "job '%s': the lowered graph holds %d tensors, the chain %d; run it with "
                   "ACCELRT_CHAIN_ENGINE=chain",
                   s->name, n, want_n);
  /* One block: the names' pointers and their text (ar_free(t->names)
   * frees both), then the old arrays' copies, freed here. */
  char **names = ar_malloc((size_t)n * (sizeof(char *) + NAME_ROOM));
  float **ptrs = ar_malloc((size_t)n * sizeof *ptrs);
  int64_t *counts = ar_malloc((size_t)n * sizeof *counts);
  ar__ckpt_shape *shapes = ar_malloc((size_t)n * sizeof *shapes);
  if (!names || !ptrs || !counts || !shapes) {
    ar_free(names);
    ar_free(ptrs);
    ar_free(counts);
    ar_free(shapes);
    return ar_errf(err, AR_NOMEM, "out of memory listing the checkpoint's tensors");
  }
  char *text = (char *)(names + n);
  ar_status st = AR_OK;
  for (int l = 0, k = 0; l < s->n_layers && st == AR_OK; l++) {
    /* A sampled layer's rows' last steps follow its slots: the graph's
     * LAYER.lsh_last (u64 as two floats each), the chain's LAYER.lsh.last. */
    const int q_end = per + (ar_layer_sampled(s, l, true) ? 1 : 0);
    for (int q = 0; q < q_end; q++, k++) {
      char want[NAME_ROOM];
      names[k] = text + (size_t)k * NAME_ROOM;
      slot_names(s, l, q, per, want, names[k], NAME_ROOM);
      int j = 0;
      while (j < n && strcmp(t->names[j], want) != 0)
        j++;
      if (j == n) {
        st = ar_errf(err, AR_STATE, "job '%s': the lowered graph has no tensor '%s'",
                     s->name, want);
        break;
      }
      ptrs[k] = t->ptrs[j];
      counts[k] = t->counts[j];
      shapes[k] = t->shapes[j];
      if (q == per) { /* the chain's shape of it (ar__model_tensor_shapes) */
        memset(&shapes[k], 0, sizeof shapes[k]);
        shapes[k].dtype = AR__CKPT_U64;
        shapes[k].nd = 1;
        shapes[k].d[0] = s->layers[l].width;
      }
    }
  }
  if (st != AR_OK) {
    ar_free(names);
    ar_free(ptrs);
    ar_free(counts);
    ar_free(shapes);
    return st;
  }
  ar_free(t->names);
  ar_free(t->ptrs);
  ar_free(t->counts);
  ar_free((void *)t->shapes);
  t->names = (const char **)names;
  t->ptrs = ptrs;
  t->counts = counts;
  t->shapes = shapes;
  return AR_OK;
}
