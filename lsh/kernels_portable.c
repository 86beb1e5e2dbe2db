/* The sparse kernels' inner loops for the portable instruction set (see
 * kernels_isa.h; the -march of this file is set in lsh/CMakeLists.txt). */
#define AR__ISA_TABLE ar__lsh_isa_portable
#define AR__ISA_NAME "portable"
#include "kernels_isa.h"
