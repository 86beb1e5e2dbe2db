/*
 * libFuzzer harness for the ONNX importer (runtime/onnx/): the input is an
 * ONNX model, given to ar_onnx_load_mem and, when it loads, lowered for
 * small input shapes (each symbolic or large dim as 2) and built into a
 * net, which runs once on zeros when it is small.
 *
 * Besides crashes, leaks and undefined behaviour (the sanitizers), the
 * harness aborts when a result breaks the API's promises: loading answers
 * AR_OK, AR_CORRUPT, AR_UNSUPPORTED, AR_INVALID or AR_RANGE (AR_NOMEM
 * only for a real lack of memory) with the file's name in the message and
 * no model; lowering answers AR_OK, AR_UNSUPPORTED or AR_INVALID naming
 * the file; a lowered graph's outputs are one per graph output.
 *
 * Built as `fuzz_onnx` with clang and -DACCELRT_FUZZ=ON (ci/fuzz-spec runs
 * it); replay.c runs the same entry over tests/fuzz/corpus/onnx with any
 * compiler as the ctest test fuzz.onnx_corpus.
 */
#include "accelrt/net.h"
#include "accelrt/onnx.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAME "fuzz.onnx"

/* A small run: the net is built and run only below this many bytes. */
#define RUN_BYTES ((size_t)1 << 22)

static void lower_and_run(const ar_onnx_model *m) {
  const int ni = ar_onnx_n_inputs(m);
  ar_shape *shapes = calloc((size_t)ni + 1, sizeof *shapes);
  if (!shapes)
    return;
  for (int i = 0; i < ni; i++) {
    const ar_onnx_io *io = ar_onnx_input(m, i);
    shapes[i].nd = io->nd < 0 ? 1 : io->nd;
    for (int k = 0; k < shapes[i].nd; k++)
      shapes[i].d[k] = io->nd < 0 || io->dim[k] < 0 || io->dim[k] > 8 ? 2 : io->dim[k];
  }
  ar_onnx_lower_opts o = AR_ONNX_LOWER_OPTS_INIT;
  o.input_shapes = shapes;
  ar_nn_graph *g = NULL;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_onnx_lower(m, &o, &g, &err);
  if (st != AR_OK && st != AR_UNSUPPORTED && st != AR_INVALID && st != AR_RANGE && st != AR_NOMEM)
    abort();
  if (st != AR_OK && !strstr(err.msg, NAME))
    abort();
  if (st == AR_OK && g->n_outputs != ar_onnx_n_outputs(m))
    abort();
  ar_net *n = NULL;
  if (st == AR_OK && ar_net_build_graph(g, NULL, &n, &err) == AR_OK &&
      ar_net_plan(n)->total_bytes < RUN_BYTES) {
    ar_device *dev = NULL;
    ar_device_opts d = AR_DEVICE_OPTS_INIT;
    d.threads = 1;
    d.pin = false;
    if (ar_device_open("host", &d, &dev, &err) == AR_OK &&
        ar_net_start(n, dev, NULL, NULL, &err) == AR_OK) {
      const void **in = calloc((size_t)g->n_inputs + 1, sizeof *in);
      void **out = calloc((size_t)g->n_outputs + 1, sizeof *out);
      bool ok = in && out;
      for (int i = 0; ok && i < g->n_inputs; i++) {
        const ar_nn_gtensor *t = &g->tensors[g->inputs[i]];
        ok = (in[i] = calloc((size_t)ar_shape_count(&t->shape) * 8 + 1, 1)) != NULL;
      }
      for (int i = 0; ok && i < g->n_outputs; i++) {
        const ar_nn_gtensor *t = &g->tensors[g->outputs[i]];
        ok = (out[i] = calloc((size_t)ar_shape_count(&t->shape) * 8 + 1, 1)) != NULL;
      }
      if (ok)
        ar_net_infer(n, in, out, &err);
      for (int i = 0; in && i < g->n_inputs; i++)
        free((void *)in[i]);
      for (int i = 0; out && i < g->n_outputs; i++)
        free(out[i]);
      free(in);
      free(out);
    }
    ar_net_destroy(n);
    n = NULL;
    ar_device_close(dev);
  }
  ar_net_destroy(n);
  ar_nn_graph_destroy(g);
  free(shapes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ar_onnx_limits lim = AR_ONNX_LIMITS_INIT;
  lim.max_tensor_bytes = (size_t)1 << 24; /* a fuzzer's input cannot need more */
  ar_onnx_model *m = NULL;
  ar_err err = AR_ERR_INIT;
  ar_status st = ar_onnx_load_mem(data, size, NAME, &lim, &m, &err);
  if (st != AR_OK) {
    if ((st != AR_CORRUPT && st != AR_UNSUPPORTED && st != AR_INVALID && st != AR_RANGE &&
         st != AR_NOMEM) ||
        m || !strstr(err.msg, NAME))
      abort();
    return 0;
  }
  lower_and_run(m);
  ar_onnx_destroy(m);
  return 0;
}
