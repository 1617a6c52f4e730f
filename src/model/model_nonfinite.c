/*
 * model_nonfinite.c - the non-finite flags of the model's quantizers: which
 * layer and tensor held a NaN or Inf.
 */
#include "internal.h"
#include "model/model.h"

enum { LINEARS_PER_BLOCK = 4 }; /* flag slots per block: qkv, out, gate|up (or the MoE's), down */

bfp8_status model_check_nonfinite(model *m) {
    const size_t n = (size_t)m->config.n_layers * LINEARS_PER_BLOCK * BFP8_LINEAR_NUM_FLAGS;
    uint32_t host[4 * 64 * BFP8_LINEAR_NUM_FLAGS];
    static const char *const tensor_names[BFP8_LINEAR_NUM_FLAGS] = {
        "x (its input activations)", "W (its weight)", "dy (its output gradient)"};
    for (size_t first = 0; first < n; first += sizeof host / sizeof host[0]) {
        const size_t count = n - first < sizeof host / sizeof host[0] ? n - first
                                                                       : sizeof host / sizeof host[0];
        BFP8_TRY(bfp8_copy_to_host(m->ctx, host, m->nonfinite_flags + first, count * sizeof *host));
        for (size_t i = 0; i < count; ++i) {
            if (!host[i]) continue;
            const size_t flag = first + i;
            const size_t lin = flag / BFP8_LINEAR_NUM_FLAGS;
            const model_block *blk = &m->blocks[lin / LINEARS_PER_BLOCK];
            const model_linear *lins[LINEARS_PER_BLOCK] = {&blk->qkv, &blk->out, &blk->gate_up,
                                                           &blk->down};
            const model_linear *l = lins[lin % LINEARS_PER_BLOCK];
            return bfp8_fail(BFP8_ERR_NONFINITE,
                             "non-finite value (NaN/Inf) in layer %d %s: quantized tensor %s",
                             l->layer, l->name, tensor_names[flag % BFP8_LINEAR_NUM_FLAGS]);
        }
    }
    return BFP8_OK;
}

void model_clear_nonfinite(model *m) {
    const size_t n = (size_t)m->config.n_layers * LINEARS_PER_BLOCK * BFP8_LINEAR_NUM_FLAGS;
    bfp8_memset_zero(m->ctx, m->nonfinite_flags, n * sizeof(uint32_t));
}
