/*
 * embedding.c - token embedding, fp32. The backward scatter-adds rows that
 * may repeat, so threads split the columns, not the tokens: no races, and
 * the sums happen in token order for any thread count.
 */
#include "model/embedding.h"
#include "model/parallel.h"

#include <string.h>

void embedding_forward(model_ops_ctx *oc, float *out, const int32_t *tokens, const float *table, int64_t count,
                       int64_t dim) {
    (void)oc;
#pragma omp parallel for schedule(static) if (count * dim >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < count; ++t)
        memcpy(out + t * dim, table + (int64_t)tokens[t] * dim, (size_t)dim * sizeof *out);
}

void embedding_backward(model_ops_ctx *oc, float *dtable, const float *dout, const int32_t *tokens, int64_t count,
                        int64_t dim) {
    (void)oc;
    enum { COLUMNS = 16 };
    const int64_t blocks = (dim + COLUMNS - 1) / COLUMNS;
#pragma omp parallel for schedule(static) if (count * dim >= PARALLEL_MIN_WORK)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t i0 = blk * COLUMNS, i1 = i0 + COLUMNS < dim ? i0 + COLUMNS : dim;
        for (int64_t t = 0; t < count; ++t) {
            float *row = dtable + (int64_t)tokens[t] * dim;
            for (int64_t i = i0; i < i1; ++i) row[i] += dout[t * dim + i];
        }
    }
}
