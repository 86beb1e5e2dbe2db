/* accelrt export: a trained graph model as an ONNX inference graph
 * (runtime.h: ar_export_onnx; docs/onnx.md, "Export"). */
#define _GNU_SOURCE
#include "accelrt/runtime.h"
#include "accelrt/spec.h"
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *to) {
  fprintf(to,
          "usage: accelrt export JOB.yaml --onnx OUT.onnx [--checkpoint PATH] [--opset N]\n"
          "                      [--test-data DIR] [--set KEY=VALUE]...\n"
          "  Writes the job's trained model (model.layers or model.onnx) as an ONNX\n"
          "  inference graph: the parameters and running statistics of PATH (default\n"
          "  OUTPUT_DIR/checkpoint.bin) as initializers, batch normalisation in\n"
          "  evaluation form, dropout removed, the batch axis symbolic ('N').  The input\n"
          "  is what the model sees: images after data.normalize; a chain model's sparse\n"
          "  rows as dense (N, features) f32.\n"
          "  --opset: 13 (default) to 17.  --test-data: also writes DIR/model.onnx and\n"
          "  DIR/test_data_set_0/{input_0,output_0}.pb (the first test batch and this\n"
          "  model's logits for it) for `accelrt onnx-test DIR` (graph models).\n"
          "  OUT.onnx is written whole or not at all.  Exit 2 when the job, the\n"
          "  checkpoint or the model cannot be exported (the message says why).\n");
}

static int export_job(const char *file, const char **sets, int n_sets, ar_export_opts *o) {
  ar_diags diags = {0, NULL};
  ar_spec *spec = NULL;
  ar_status st = ar_spec_load(file, sets, n_sets, &spec, &diags);
  int rc = CLI_OK;
  if (st != AR_OK) {
    rc = cli_load_failed(file, st, &diags);
  } else if (spec->n_jobs > 0) {
    fprintf(stderr, "accelrt export: %s lists several jobs; export one job file\n", file);
    rc = CLI_USAGE;
  } else if ((rc = cli_route_chain(spec, NULL)) < 0) {
    rc = CLI_OK;
    ar_err err = AR_ERR_INIT;
    o->version = ACCELRT_VERSION;
    st = ar_export_onnx(spec, o, &err);
    if (st != AR_OK) {
      fprintf(stderr, "accelrt export: error: %s\n", err.msg[0] ? err.msg : ar_status_str(st));
      rc = st == AR_NOMEM ? CLI_FAIL : CLI_USAGE;
    } else {
      printf("%s: wrote %s (opset %d)%s%s\n", spec->name, o->out, o->opset,
             o->test_dir ? " and the test folder " : "", o->test_dir ? o->test_dir : "");
    }
  }
  ar_diags_fini(&diags);
  ar_spec_destroy(spec);
  return rc;
}

int cli_export(int argc, char **argv) {
  static const struct option longs[] = {{"onnx", required_argument, NULL, 'o'},
                                        {"checkpoint", required_argument, NULL, 'c'},
                                        {"opset", required_argument, NULL, 'p'},
                                        {"test-data", required_argument, NULL, 't'},
                                        {"set", required_argument, NULL, 's'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  ar_export_opts o = {NULL, NULL, NULL, NULL, 13};
  const char **sets = ar_calloc((size_t)argc, sizeof *sets);
  int n_sets = 0, c, rc = -1;
  if (!sets)
    return CLI_FAIL;
  optind = 1;
  while (rc < 0 && (c = cli_getopt(argc, argv, "h", longs)) != -1) {
    int64_t v = 0;
    switch (c) {
    case 'o':
      o.out = optarg;
      break;
    case 'c':
      o.checkpoint = optarg;
      break;
    case 't':
      o.test_dir = optarg;
      break;
    case 'p':
      if (!cli_parse_i64(optarg, 13, 17, &v)) {
        fprintf(stderr, "accelrt export: --opset takes 13 to 17, got '%s'\n", optarg);
        rc = CLI_USAGE;
      }
      o.opset = (int)v;
      break;
    case 's':
      rc = cli_set_arg("export", optarg, sets, &n_sets);
      break;
    case 'h':
      usage(stdout);
      rc = CLI_OK;
      break;
    default:
      rc = CLI_USAGE;
    }
  }
  if (rc < 0)
    rc = cli_one_job("export", argc, usage);
  if (rc < 0 && !o.out) {
    fprintf(stderr, "accelrt export: --onnx OUT.onnx is required (where to write the model)\n");
    rc = CLI_USAGE;
  }
  if (rc < 0)
    rc = export_job(argv[optind], sets, n_sets, &o);
  ar_free(sets);
  return rc;
}
