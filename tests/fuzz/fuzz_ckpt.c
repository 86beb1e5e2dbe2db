/*
 * libFuzzer harness for the checkpoint reader (runtime/engine/checkpoint.c):
 * the input is a checkpoint file, given to ar_checkpoint_peek and to
 * ar_checkpoint_load against a small fixed model on the host device (two
 * dense layers, Adam: 12 tensors, 81 floats; FIXTURE_YAML below).
 *
 * Random bytes almost never carry a valid CRC-32, and the reader checks
 * it before anything else, so every input runs twice: as it is, and with
 * its last 4 bytes replaced by the CRC-32 of the rest, which lets the
 * fuzzer reach the header and tensor checks behind the checksum.
 *
 * Besides crashes, leaks and undefined behaviour (the sanitizers), the
 * harness aborts when a result breaks the API's promises: peek answers
 * AR_OK or AR_CORRUPT, load AR_OK, AR_CORRUPT or AR_SPEC (a shape the
 * model does not have), and load is AR_CORRUPT exactly when peek is; a
 * refusal's message names the file; an accepted position is one a run
 * can write (counters in [0, 2^53], iterations <= samples, optimizer steps
 * <= iterations, train_s finite and >= 0), and peek and load agree on it.
 *
 * Built as `fuzz_ckpt` with clang and -DACCELRT_FUZZ=ON (ci/fuzz-spec runs
 * it); replay.c runs the same entry over tests/fuzz/corpus/ckpt with any
 * compiler as the ctest test fuzz.ckpt_corpus.
 */
#include "memfile.h"

#include "accelrt/runtime.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define FIXTURE_YAML                                                                         \
  "name: fuzz\n"                                                                             \
  "model:\n  input: {sparse: 8}\n  layers:\n"                                                \
  "    - {name: h, dense: 2, activation: relu}\n"                                            \
  "    - {name: out, dense: 3, activation: softmax}\n"                                       \
  "data: {train: unused.txt}\n"                                                              \
  "train: {batch: 4, iterations: 1, threads: 1, optimizer: {adam: {lr: 0.01}}}\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The model every input is loaded into, made once per process. */
static ar_model *fixture(void) {
  static ar_model *m;
  if (m)
    return m;
  ar_spec *spec = NULL;
  ar_diags d;
  ar_device *dev = NULL;
  ar_err err = AR_ERR_INIT;
  ar_device_opts o = AR_DEVICE_OPTS_INIT;
  o.threads = 1;
  if (ar_spec_parse(FIXTURE_YAML, strlen(FIXTURE_YAML), "fuzz.yaml", NULL, NULL, 0, false,
                    &spec, &d) != AR_OK ||
      ar_device_open("host", &o, &dev, &err) != AR_OK ||
      ar_model_create(dev, spec, 4, 2, &m, &err) != AR_OK) {
    ar_diags_print(&d, "fuzz.yaml", stderr);
    fprintf(stderr, "fuzz_ckpt: cannot make the model: %s\n", err.msg);
    abort();
  }
  ar_diags_fini(&d);
  /* The spec and the device live as long as the model: the process. */
  return m;
}

static void check_position(const ar_ckpt_state *s, int64_t step) {
  const int64_t max = (int64_t)1 << 53;
  const int64_t c[] = {s->iteration, s->epoch, s->rows_in_epoch, s->samples, step};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
    if (c[i] < 0 || c[i] > max)
      abort();
  if (s->iteration > s->samples || s->rows_in_epoch > s->samples || step > s->iteration ||
      !isfinite(s->train_s) || s->train_s < 0)
    abort();
}

/* Peek and load one file, and check what they answer. */
static void check_file(ar_model *m, const char *path) {
  ar_ckpt_state peeked, loaded;
  memset(&peeked, 0, sizeof peeked);
  memset(&loaded, 0, sizeof loaded);
  ar_err err = AR_ERR_INIT;
  ar_status ps = ar_checkpoint_peek(NULL, path, &peeked, &err);
  if (ps != AR_OK && (ps != AR_CORRUPT || !strstr(err.msg, path)))
    abort();
  int64_t step_before = m->step;
  ar_status ls = ar_checkpoint_load(m, &loaded, NULL, path, &err);
  if (ls != AR_OK && ((ls != AR_CORRUPT && ls != AR_SPEC) || !strstr(err.msg, path)))
    abort();
  if ((ps == AR_CORRUPT) != (ls == AR_CORRUPT))
    abort();
  if (ps == AR_OK)
    check_position(&peeked, 0);
  if (ls == AR_OK) {
    check_position(&loaded, m->step);
    if (memcmp(&peeked, &loaded, sizeof peeked) != 0)
      abort();
  } else if (m->step != step_before) {
    abort(); /* a refused file left its step in the model */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ar_model *m = fixture();
  check_file(m, memfile_write(data, size, NULL, 0));
  if (size >= 4) {
    uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), data, (uInt)(size - 4));
    check_file(m, memfile_write(data, size - 4, &crc, 4));
  }
  return 0;
}
