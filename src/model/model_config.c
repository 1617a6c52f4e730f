/*
 * model_config.c - model presets and their validation. Widths are multiples
 * of 128 where possible, so the 128-wide fp8 scale groups are full.
 */
#include "model/model_config.h"

#include <string.h>

#include "internal.h"

static const model_preset presets[] = {
    {"tiny", "1.4M params: dim 128, 4 layers, 4 heads, seq 128, vocab 2048",
     {2048, 128, 4, 4, 384, 128, 1e-5f, 10000.0f, {0}}},
    {"small", "9.3M params: dim 256, 6 layers, 4 heads, seq 256, vocab 8192",
     {8192, 256, 6, 4, 768, 256, 1e-5f, 10000.0f, {0}}},
    {"medium", "42M params: dim 512, 8 layers, 8 heads, seq 512, vocab 16384",
     {16384, 512, 8, 8, 1408, 512, 1e-5f, 10000.0f, {0}}},
    {"large", "273M params: dim 1024, 16 layers, 16 heads, seq 1024, vocab 32768",
     {32768, 1024, 16, 16, 2816, 1024, 1e-5f, 10000.0f, {0}}},
    {"1b", "956M params: dim 2048, 16 layers, 16 heads, seq 2048, vocab 32768",
     {32768, 2048, 16, 16, 5632, 2048, 1e-5f, 10000.0f, {0}}},
    /* DeepSeek-V3's feed-forward: a dense first block, then routed experts by sigmoid scores (top-k
     * normalized), one shared expert, auxiliary-loss-free balancing */
    {"moe-tiny", "2.3M params, 1.4M active: dim 128, 4 layers (3 MoE: 8 experts of 128, top-2, 1 shared), "
     "seq 128, vocab 2048",
     {2048, 128, 4, 4, 384, 128, 1e-5f, 10000.0f,
      {8, 1, 2, 128, 128, BFP8_MOE_SCORE_SIGMOID, 1, 1.0f, 0.0f, 1e-2f}}},
    {"moe-1b", "2.7B params, 869M active: dim 2048, 16 layers (14 MoE: 32 experts of 768, top-4, "
     "1 shared of 1536), seq 2048, vocab 32768",
     {32768, 2048, 16, 16, 5632, 2048, 1e-5f, 10000.0f,
      {32, 2, 4, 768, 1536, BFP8_MOE_SCORE_SIGMOID, 1, 1.0f, 0.0f, 1e-2f}}},
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

static bfp8_status validate_moe(const model_config *c) {
    const model_moe_config *e = &c->moe;
    if (e->num_experts == 0) {
        const model_moe_config none = {0};
        if (memcmp(e, &none, sizeof none) != 0)
            return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model: MoE fields set without experts");
        return BFP8_OK;
    }
    if (e->num_experts < 1 || e->num_experts > 1024 || e->top_k < 1 || e->top_k > 16 || e->top_k > e->num_experts)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model: %d experts, top-%d (1 <= top_k <= min(experts, 16), "
                         "experts <= 1024)", e->num_experts, e->top_k);
    if (c->dim % 128 || e->expert_hidden < 128 || e->expert_hidden % 128 || e->expert_hidden > (1 << 20) ||
        e->shared_hidden < 0 || e->shared_hidden % 128 || e->shared_hidden > (1 << 20))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model: an MoE model's dim %d, expert width %d and shared "
                         "width %d must be multiples of 128 (shared may be 0)", c->dim, e->expert_hidden,
                         e->shared_hidden);
    if (e->dense_layers < 0 || e->dense_layers >= c->n_layers)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model: %d dense layers of %d leave no MoE block", e->dense_layers,
                         c->n_layers);
    if ((e->score_fn != BFP8_MOE_SCORE_SOFTMAX && e->score_fn != BFP8_MOE_SCORE_SIGMOID) ||
        (e->normalize_weights != 0 && e->normalize_weights != 1) || !(e->route_scale > 0.0f) ||
        !(e->route_scale < 1e6f) || !(e->capacity_factor >= 0.0f) || !(e->capacity_factor <= 1e6f) ||
        !(e->bias_update_rate >= 0.0f) || !(e->bias_update_rate <= 1.0f))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model: MoE score function %d, normalize %d, route scale %g, "
                         "capacity factor %g or bias update rate %g out of range", e->score_fn,
                         e->normalize_weights, (double)e->route_scale, (double)e->capacity_factor,
                         (double)e->bias_update_rate);
    return BFP8_OK;
}

int model_config_moe_layer(const model_config *c, int layer) {
    return c->moe.num_experts > 0 && layer >= c->moe.dense_layers;
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
    return validate_moe(c);
}

/* experts_taken: the routed experts counted (E for all of them, k for a token's) */
static int64_t count_params(const model_config *c, int64_t experts_taken, int with_bias) {
    const int64_t d = c->dim, f = c->ffn_hidden, v = c->vocab_size;
    const int64_t attention = d + 3 * d * d + d * d + d, dense_mlp = 3 * f * d;
    const model_moe_config *e = &c->moe;
    const int64_t moe_mlp = (int64_t)e->num_experts * (d + (with_bias && e->bias_update_rate > 0.0f)) +
                            experts_taken * 3 * e->expert_hidden * d + 3 * (int64_t)e->shared_hidden * d;
    int64_t total = v * d + d + v * d;
    for (int l = 0; l < c->n_layers; ++l) total += attention + (model_config_moe_layer(c, l) ? moe_mlp : dense_mlp);
    return total;
}

int64_t model_config_num_params(const model_config *c) { return count_params(c, c->moe.num_experts, 1); }

int64_t model_config_active_params(const model_config *c) { return count_params(c, c->moe.top_k, 0); }
