/*
 * Host kernels of the nn ops in group "conv" (AR_NN_OP_MAP's third column).
 * Not built yet: the table entries stay empty (AR_UNSUPPORTED).
 */
#include "nn/nn_impl.h"

void ar__nn_host_conv_register(ar_nn_kernel *table) { (void)table; }
