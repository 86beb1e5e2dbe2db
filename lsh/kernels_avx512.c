/* The sparse kernels' inner loops for the avx512 instruction set (see
 * kernels_isa.h; the -march of this file is set in lsh/CMakeLists.txt). */
#define AR__ISA_TABLE ar__lsh_isa_avx512
#define AR__ISA_NAME "avx512"
#include "kernels_isa.h"
