/* accelrt info: what this build can do and what this machine has. */
#include "accelrt/device.h"
#include "accelrt/runtime.h"
#include "cli/cli.h"

#include <hwloc.h>
#include <omp.h>
#include <string.h>
#include <yaml.h>
#include <zlib.h>

int cli_info(int argc, char **argv) {
  int rc = cli_no_args(argc, argv,
                       "usage: accelrt info\n"
                       "  Prints this build's features (SIMD, CUDA, libraries), the machine's\n"
                       "  topology (hwloc) and the devices a job may name.\n");
  if (rc >= 0)
    return rc;
  printf("accelrt %s\n", ACCELRT_VERSION);
  printf("build:\n");
  printf("  compiler       %s\n", __VERSION__);
#ifdef __AVX512F__
  printf("  SIMD           AVX-512 (compiled with -march=native)\n");
#elif defined(__AVX2__)
  printf("  SIMD           AVX2\n");
#else
  printf("  SIMD           portable\n");
#endif
#ifdef ACCELRT_HAVE_CUDA
  printf("  CUDA backend   built\n");
#else
  printf("  CUDA backend   not built\n");
#endif
  printf("  OpenMP         %d (max threads %d)\n", _OPENMP, omp_get_max_threads());
  printf("  BLAS           OpenBLAS (CBLAS)\n");
  printf("  libyaml        %s\n", yaml_get_version_string());
  printf("  hwloc          %s\n", HWLOC_VERSION);
  printf("  zlib           %s\n", zlibVersion());
  ar_topology_print(stdout);
  printf("devices:\n");
  ar_device_describe_all(stdout);
  return CLI_OK;
}
