/* accelrt info: what this build can do and what this machine has. */
#include "accelrt/device.h"
#include "accelrt/runtime.h"
#include "accelrt/tenancy.h"
#include "cli/cli.h"

#include <hwloc.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <string.h>
#include <yaml.h>
#include <zlib.h>

int cli_features(cli_feature *out, int max) {
  cli_feature f[CLI_MAX_FEATURES];
  int n = 0;
#define FEATURE(lbl, ...)                                                                  \
  do {                                                                                     \
    f[n].label = lbl;                                                                      \
    snprintf(f[n].value, sizeof f[n].value, __VA_ARGS__);                                  \
    n++;                                                                                   \
  } while (0)
  FEATURE("compiler", "%s", __VERSION__);
#ifdef __AVX512F__
  FEATURE("SIMD", "AVX-512 (compiled with -march=native)");
#elif defined(__AVX2__)
  FEATURE("SIMD", "AVX2");
#else
  FEATURE("SIMD", "portable");
#endif
#ifdef ACCELRT_HAVE_CUDA
  FEATURE("CUDA backend", "built");
#else
  FEATURE("CUDA backend", "not built");
#endif
  FEATURE("OpenMP", "%d (max threads %d)", _OPENMP, omp_get_max_threads());
  FEATURE("BLAS", "OpenBLAS (CBLAS)");
  FEATURE("libyaml", "%s", yaml_get_version_string());
  FEATURE("hwloc", "%s", HWLOC_VERSION);
  FEATURE("zlib", "%s", zlibVersion());
  const dnnl_version_t *dv = dnnl_version();
  FEATURE("oneDNN", "%d.%d.%d", dv->major, dv->minor, dv->patch);
  FEATURE("serve --http", "%s", ar_serve_http_available() ? "libmicrohttpd" : "not built");
#undef FEATURE
  for (int i = 0; i < n && i < max; i++)
    out[i] = f[i];
  return n < max ? n : max;
}

int cli_info(int argc, char **argv) {
  int rc = cli_no_args(argc, argv,
                       "usage: accelrt info\n"
                       "  Prints this build's features (SIMD, CUDA, libraries), the machine's\n"
                       "  topology (hwloc) and the devices a job may name.\n");
  if (rc >= 0)
    return rc;
  printf("accelrt %s\n", ACCELRT_VERSION);
  printf("build:\n");
  cli_feature f[CLI_MAX_FEATURES];
  int n = cli_features(f, CLI_MAX_FEATURES);
  for (int i = 0; i < n; i++)
    printf("  %-14s %s\n", f[i].label, f[i].value);
  ar_topology_print(stdout);
  printf("devices:\n");
  ar_device_describe_all(stdout);
  return CLI_OK;
}
