/*
 * model_config.c - model presets and their validation. Widths are multiples
 * of 128 where possible, so the 128-wide fp8 scale groups are full.
 */
#include "model/model_config.h"

#include <string.h>

#include "internal.h"

static const model_preset presets[] = {
    {"tiny", "1.4M params: dim 128, 4 layers, 4 heads, seq 128, vocab 2048",
     {2048, 128, 4, 4, 384, 128, 1e-5f, 10000.0f}},
    {"small", "9.3M params: dim 256, 6 layers, 4 heads, seq 256, vocab 8192",
     {8192, 256, 6, 4, 768, 256, 1e-5f, 10000.0f}},
    {"medium", "42M params: dim 512, 8 layers, 8 heads, seq 512, vocab 16384",
     {16384, 512, 8, 8, 1408, 512, 1e-5f, 10000.0f}},
    {"large", "273M params: dim 1024, 16 layers, 16 heads, seq 1024, vocab 32768",
     {32768, 1024, 16, 16, 2816, 1024, 1e-5f, 10000.0f}},
    {"1b", "956M params: dim 2048, 16 layers, 16 heads, seq 2048, vocab 32768",
     {32768, 2048, 16, 16, 5632, 2048, 1e-5f, 10000.0f}},
};

const model_preset *model_preset_find(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; ++i)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

const model_preset *model_presets(int *count) {
    *count = (int)(sizeof presets / sizeof presets[0]);
    return presets;
}

bfp8_status model_config_validate(const model_config *c) {
    if (c->vocab_size < 2 || c->vocab_size > (1 << 24))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model: vocab_size %d out of range", c->vocab_size);
    if (c->dim < 2 || c->n_layers < 1 || c->n_heads < 1 || c->ffn_hidden < 1 || c->max_seq < 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "model: dim %d, layers %d, heads %d, ffn %d, max_seq %d must be positive",
                         c->dim, c->n_layers, c->n_heads, c->ffn_hidden, c->max_seq);
    if (c->dim % c->n_heads != 0 || (c->dim / c->n_heads) % 2 != 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "model: dim %d must split into %d heads of an even width", c->dim,
                         c->n_heads);
    if (!(c->norm_eps > 0.0f) || !(c->rope_theta > 1.0f))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model: norm_eps must be > 0 and rope_theta > 1");
    return BFP8_OK;
}

int64_t model_config_num_params(const model_config *c) {
    const int64_t d = c->dim, f = c->ffn_hidden, v = c->vocab_size;
    const int64_t per_layer = d + 3 * d * d + d * d + d + 2 * f * d + d * f;
    return v * d + c->n_layers * per_layer + d + v * d;
}
