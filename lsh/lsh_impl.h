/* Private to lsh/: the structs behind the opaque handles and the per-family
 * entry points that hash.c dispatches to. */
#ifndef ACCELRT_LSH_IMPL_H
#define ACCELRT_LSH_IMPL_H

#include "accelrt/lsh.h"

/* Largest K*L and bin size; codes use a uint8 position and a 64-bit mask. */
#define AR__LSH_MAX_BIN 64u
#define AR__LSH_EMPTY 0xFFu
/* SRP keeps float projections for GEMM hashing up to this many cells
 * (64 MiB); a wider input (a sampled layer fed by a huge sparse input)
 * hashes row by row (srp.c; counted by ar_lsh_hash_bytes). */
#define AR__LSH_SRP_PROJ_MAX ((size_t)16 << 20)

struct ar_lsh_hash {
  ar_lsh_hash_opts o;  /* resolved: bits filled in */
  uint32_t kl;         /* K * L codes */
  uint32_t cb;         /* bits per code */
  uint32_t nb;         /* buckets per table, 2^bits */
  int concat;          /* K*cb <= bits: codes are concatenated */
  uint64_t key;        /* seeds the combining and densification hashes */
  int8_t *sgn;         /* SRP: (dim, kl) signs in {-1, 0, +1} */
  float *proj;         /* SRP: the same as floats, for hashing many dense
                          rows by GEMM; NULL when dim * kl is too large */
  uint32_t *bin;       /* WTA/DWTA: (kl, bin_size) coordinates */
  uint32_t *tptr;      /* WTA/DWTA: (dim + 1) CSR row starts of the transpose */
  uint32_t *tent;      /* WTA/DWTA: (kl * bin_size) entries code*64 + pos */
};

struct ar_lsh_scratch {
  ar_err err;
  uint32_t kl;     /* hashing capacity in codes */
  float *acc;      /* (kl) SRP sums, WTA/DWTA best values */
  uint8_t *pos;    /* (kl) best position or AR__LSH_EMPTY */
  uint64_t *mask;  /* (kl) WTA: positions seen in a sparse row */
  uint32_t *code;  /* (kl) codes before combining, DOPH minima */
  uint32_t n;      /* sampling capacity in neurons */
  uint16_t *cnt;   /* (n) per neuron: tables found in (at most 0x7fff), high
                   * bit = chosen; 16 bits keep a wide layer's in the L2 */
  uint32_t *seen;  /* (n + 1) neurons with cnt != 0, first found first */
  uint32_t *tmp;   /* (n) ordering work */
};

/* Family entry points: fill s->code (kl codes, table-major). */
ar_status ar__lsh_srp_init(ar_lsh_hash *h, ar_err *err);
void ar__lsh_srp_dense(const ar_lsh_hash *h, const float *x, ar_lsh_scratch *s);
void ar__lsh_srp_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                        const float *val, size_t nnz, ar_lsh_scratch *s);
ar_status ar__lsh_bins_init(ar_lsh_hash *h, ar_err *err);
void ar__lsh_wta_dense(const ar_lsh_hash *h, const float *x, ar_lsh_scratch *s);
void ar__lsh_wta_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                        const float *val, size_t nnz, ar_lsh_scratch *s);
void ar__lsh_dwta_dense(const ar_lsh_hash *h, const float *x, ar_lsh_scratch *s);
void ar__lsh_dwta_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                         const float *val, size_t nnz, ar_lsh_scratch *s);
void ar__lsh_doph_dense(const ar_lsh_hash *h, const float *x, ar_lsh_scratch *s);
void ar__lsh_doph_sparse(const ar_lsh_hash *h, const uint32_t *idx,
                         const float *val, size_t nnz, ar_lsh_scratch *s);

/* Table indices (L) from a row's kl codes (hash.c). */
void ar__lsh_combine(const ar_lsh_hash *h, const uint32_t *code, uint32_t *out);
/* SRP: the L table indices of `count` dense rows (rows ids[i], or i when
 * ids is NULL, of w with stride ld) into out (count, L), by blocks of rows
 * times the projection matrix (one BLAS call each, nt threads).  AR_OK;
 * AR_UNSUPPORTED when the family keeps no float projections; AR_NOMEM. */
ar_status ar__lsh_srp_rows(const ar_lsh_hash *h, const float *w, size_t ld,
                           const uint32_t *ids, size_t count, uint32_t *out,
                           int nt);

/* Densification shared by DWTA and DOPH: every code i with
 * s->pos[i] == AR__LSH_EMPTY takes the code of a non-empty one. */
void ar__lsh_densify(const ar_lsh_hash *h, ar_lsh_scratch *s);


/* The sparse kernels' inner loops for one instruction set (kernels_isa.h). */
typedef struct ar__lsh_isa {
  const char *name;
  float (*dot_dense)(const float *w, const float *x, uint32_t in);
  float (*dot_sparse)(const float *w, const uint32_t *idx, const float *val, size_t nnz);
  void (*axpy_dense)(float g, const float *x, const float *w, float *gw, float *dx,
                     uint32_t in);
  void (*axpy_sparse)(float g, const uint32_t *idx, const float *val, const float *w,
                      float *gw, float *dx, size_t nnz);
  void (*adam_row)(float *w, float *g, float *m, float *v, uint32_t in, float d1, float d2,
                   float b1, float b2, float lr_t, float isq2, float eps, float c);
} ar__lsh_isa;
extern const ar__lsh_isa ar__lsh_isa_portable, ar__lsh_isa_avx2, ar__lsh_isa_avx512;

/* Tables geometry for sampling.c and the scratch (tables.c). */
uint32_t ar__lsh_tables_neurons(const ar_lsh_tables *t);
uint32_t ar__lsh_tables_L(const ar_lsh_tables *t);
uint32_t ar__lsh_tables_nb(const ar_lsh_tables *t);

#endif /* ACCELRT_LSH_IMPL_H */
