/*
 * embedding.h - token embedding lookup, fp32, forward and backward.
 */
#ifndef BFP8_MODEL_EMBEDDING_H
#define BFP8_MODEL_EMBEDDING_H

#include <stdint.h>

#include "model/model_ops_ctx.h"

/* out[t] = table[tokens[t]], dim wide. Token ids are checked by the caller. */
void embedding_forward(model_ops_ctx *oc, float *out, const int32_t *tokens, const float *table, int64_t count,
                       int64_t dim);
/* dtable[tokens[t]] += dout[t]. */
void embedding_backward(model_ops_ctx *oc, float *dtable, const float *dout, const int32_t *tokens, int64_t count,
                        int64_t dim);

#endif /* BFP8_MODEL_EMBEDDING_H */
