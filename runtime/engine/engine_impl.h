/* Private to the engine: the sampled layers' hooks used by model.c. */
#ifndef ACCELRT_ENGINE_IMPL_H
#define ACCELRT_ENGINE_IMPL_H

#include "accelrt/graph.h"

/* model.c: the address of plan entry "LAYER.WHAT" ("LAYER" when what is
 * NULL) in the model's blocks, or NULL when the plan has none. */
void *ar__plan_ptr(ar_model *m, const char *layer, const char *what);

/* sampled.c */
ar_status ar__sampled_create(ar_model *m, int l); /* after the layers exist */
ar_status ar__sampled_init(ar_model *m);          /* after init_params */
void ar__sampled_bind(ar_model *m);               /* after a (re)bind */
void ar__sampled_destroy(ar_sampled *s);
ar_status ar__model_forward_eval(ar_model *m);    /* every neuron scored */

/* model.c: adds the hits of one row's top k (k <= 5) ids among its nl
 * labels to the P@1/3/5 counts. */
void ar__count_hits(ar_eval_acc *acc, const int32_t *top, int k, const int32_t *lab,
                    int64_t nl);

#endif
