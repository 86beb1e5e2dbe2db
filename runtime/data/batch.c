/* ar_batch: a CSR batch of sparse rows with fixed capacities. */
#include "accelrt/data.h"

#include <string.h>

/* Largest element count we accept for one array: the byte size must fit
 * in size_t and in int64 offsets. */
#define BATCH_MAX_ELEMS ((int64_t)1 << 40)

ar_status ar_batch_init(ar_batch *b, int64_t rows, int64_t max_nnz,
                        int64_t max_labels) {
  if (!b)
    return AR_INVALID;
  memset(b, 0, sizeof *b);
  if (rows < 0 || max_nnz < 0 || max_labels < 0)
    return AR_INVALID;
  if (rows > BATCH_MAX_ELEMS ||
      (rows > 0 && (max_nnz > BATCH_MAX_ELEMS / rows ||
                    max_labels > BATCH_MAX_ELEMS / rows)))
    return AR_NOMEM;

  int64_t cap_nnz = rows * max_nnz, cap_labels = rows * max_labels;
  b->row_ptr = ar_malloc((size_t)(rows + 1) * sizeof *b->row_ptr);
  b->lab_ptr = ar_malloc((size_t)(rows + 1) * sizeof *b->lab_ptr);
  b->idx = ar_malloc((size_t)cap_nnz * sizeof *b->idx);
  b->val = ar_malloc((size_t)cap_nnz * sizeof *b->val);
  b->lab = ar_malloc((size_t)cap_labels * sizeof *b->lab);
  if (!b->row_ptr || !b->lab_ptr || !b->idx || !b->val || !b->lab) {
    ar_batch_fini(b);
    return AR_NOMEM;
  }
  b->row_ptr[0] = 0;
  b->lab_ptr[0] = 0;
  b->rows = 0;
  b->cap_rows = rows;
  b->cap_nnz = cap_nnz;
  b->cap_labels = cap_labels;
  return AR_OK;
}

void ar_batch_fini(ar_batch *b) {
  if (!b)
    return;
  ar_free(b->row_ptr);
  ar_free(b->lab_ptr);
  ar_free(b->idx);
  ar_free(b->val);
  ar_free(b->lab);
  memset(b, 0, sizeof *b);
}
