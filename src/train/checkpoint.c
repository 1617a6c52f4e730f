/*
 * checkpoint.c - checkpoint files: header, payload, checksums.
 */
#include "train/checkpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "internal.h"
#include "train/checksum.h"
#include "train/file_io.h"

static const char checkpoint_magic[8] = {'B', 'F', 'P', '8', 'C', 'K', 'P', 'T'};
/* Version 2 adds the number of data-parallel ranks (u32 at 132, the CRC moves
 * to 136); version 3 the MoE shape (10 x u32/f32 at 136, the CRC at 176).
 * Versions 1 and 2 still load: dense models, version 1 as runs of one rank. */
enum { CHECKPOINT_VERSION = 3, HEADER_BYTES = 180, HEADER_BYTES_V2 = 140, HEADER_BYTES_V1 = 136 };


static void encode_header(uint8_t *h, const checkpoint_info *info) {
    memset(h, 0, HEADER_BYTES);
    memcpy(h, checkpoint_magic, 8);
    put_u32(h + 8, CHECKPOINT_VERSION);
    put_u32(h + 12, HEADER_BYTES);
    const model_config *c = &info->config;
    put_u32(h + 16, (uint32_t)c->vocab_size);
    put_u32(h + 20, (uint32_t)c->dim);
    put_u32(h + 24, (uint32_t)c->n_layers);
    put_u32(h + 28, (uint32_t)c->n_heads);
    put_u32(h + 32, (uint32_t)c->ffn_hidden);
    put_u32(h + 36, (uint32_t)c->max_seq);
    put_u32(h + 40, bfp8_bits_of(c->norm_eps));
    put_u32(h + 44, bfp8_bits_of(c->rope_theta));
    put_u32(h + 48, (uint32_t)info->recipe);
    put_u32(h + 52, info->tokenizer_fingerprint);
    put_u64(h + 56, info->step);
    put_u64(h + 64, info->seed);
    put_u64(h + 72, info->sampler_state);
    put_u64(h + 80, info->windows_drawn);
    put_u64(h + 88, info->num_params);
    put_u64(h + 96, info->total_steps);
    put_u32(h + 104, info->batch);
    put_u32(h + 108, info->seq);
    put_u32(h + 112, info->grad_accum);
    memcpy(h + 116, info->model_name, 15);
    put_u32(h + 132, info->ranks);
    const model_moe_config *e = &c->moe;
    const uint32_t moe[10] = {(uint32_t)e->num_experts,       (uint32_t)e->dense_layers,
                              (uint32_t)e->top_k,             (uint32_t)e->expert_hidden,
                              (uint32_t)e->shared_hidden,     (uint32_t)e->score_fn,
                              (uint32_t)e->normalize_weights, bfp8_bits_of(e->route_scale),
                              bfp8_bits_of(e->capacity_factor), bfp8_bits_of(e->bias_update_rate)};
    for (int i = 0; i < 10; ++i) put_u32(h + 136 + 4 * i, moe[i]);
    put_u32(h + 176, crc32_update(0, h, 176));
}

static void decode_header(const uint8_t *h, uint32_t version, checkpoint_info *info) {
    memset(info, 0, sizeof *info);
    model_config *c = &info->config;
    c->vocab_size = (int32_t)get_u32(h + 16);
    c->dim = (int32_t)get_u32(h + 20);
    c->n_layers = (int32_t)get_u32(h + 24);
    c->n_heads = (int32_t)get_u32(h + 28);
    c->ffn_hidden = (int32_t)get_u32(h + 32);
    c->max_seq = (int32_t)get_u32(h + 36);
    c->norm_eps = bfp8_float_of(get_u32(h + 40));
    c->rope_theta = bfp8_float_of(get_u32(h + 44));
    info->recipe = (bfp8_recipe)get_u32(h + 48);
    info->tokenizer_fingerprint = get_u32(h + 52);
    info->step = get_u64(h + 56);
    info->seed = get_u64(h + 64);
    info->sampler_state = get_u64(h + 72);
    info->windows_drawn = get_u64(h + 80);
    info->num_params = get_u64(h + 88);
    info->total_steps = get_u64(h + 96);
    info->batch = get_u32(h + 104);
    info->seq = get_u32(h + 108);
    info->grad_accum = get_u32(h + 112);
    memcpy(info->model_name, h + 116, 15);
    info->model_name[15] = 0;
    info->ranks = version >= 2 ? get_u32(h + 132) : 1;
    if (version < 3) return; /* a dense model */
    model_moe_config *e = &c->moe;
    const uint8_t *p = h + 136;
    e->num_experts = (int32_t)get_u32(p);
    e->dense_layers = (int32_t)get_u32(p + 4);
    e->top_k = (int32_t)get_u32(p + 8);
    e->expert_hidden = (int32_t)get_u32(p + 12);
    e->shared_hidden = (int32_t)get_u32(p + 16);
    e->score_fn = (int32_t)get_u32(p + 20);
    e->normalize_weights = (int32_t)get_u32(p + 24);
    e->route_scale = bfp8_float_of(get_u32(p + 28));
    e->capacity_factor = bfp8_float_of(get_u32(p + 32));
    e->bias_update_rate = bfp8_float_of(get_u32(p + 36));
}

bfp8_status checkpoint_save(const char *path, const checkpoint_info *info, const model *m) {
    return checkpoint_save_with(path, info, m, NULL);
}

bfp8_status checkpoint_load(const char *path, checkpoint_info *info, model *m) {
    return checkpoint_load_with(path, info, m, NULL);
}

bfp8_status checkpoint_save_with(const char *path, const checkpoint_info *info, const model *m,
                                 const checkpoint_moments *moments) {
    uint8_t header[HEADER_BYTES];
    encode_header(header, info);
    atomic_file f;
    BFP8_TRY(atomic_file_open(&f, path));
    atomic_file_write(&f, header, sizeof header);
    const size_t bytes = m->num_params * sizeof(float);
    const float *parts[3] = {m->params, m->adam_m, m->adam_v};
    /* device memory goes through one host buffer, a part at a time */
    const int on_host = bfp8_context_backend(m->ctx) == BFP8_BACKEND_CPU;
    float *staging = on_host && !moments ? NULL : malloc(bytes);
    if (!staging && !(on_host && !moments)) {
        atomic_file_abort(&f);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    }
    uint32_t crc = 0;
    for (int i = 0; i < 3; ++i) {
        const float *part = parts[i];
        if (i > 0 && moments) {
            const bfp8_status st = moments->gather(moments->user, i, staging);
            if (st != BFP8_OK) {
                free(staging);
                atomic_file_abort(&f);
                return st;
            }
            part = staging;
        } else if (!on_host) {
            const bfp8_status st = model_copy_state(m, i == 0 ? staging : NULL, i == 1 ? staging : NULL,
                                                    i == 2 ? staging : NULL);
            if (st != BFP8_OK) {
                free(staging);
                atomic_file_abort(&f);
                return st;
            }
            part = staging;
        }
        atomic_file_write(&f, part, bytes);
        crc = crc32_update(crc, part, bytes);
    }
    free(staging);
    uint8_t tail[4];
    put_u32(tail, crc);
    atomic_file_write(&f, tail, sizeof tail);
    return atomic_file_commit(&f);
}

static bfp8_status read_header(FILE *fp, const char *path, checkpoint_info *info) {
    uint8_t h[HEADER_BYTES];
    const size_t got = fread(h, 1, 16, fp);
    if (got < 16 || memcmp(h, checkpoint_magic, 8) != 0)
        return bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': not a blockfp8 checkpoint", path);
    const uint32_t version = get_u32(h + 8), header_bytes = get_u32(h + 12);
    if (!(version == 3 && header_bytes == HEADER_BYTES) && !(version == 2 && header_bytes == HEADER_BYTES_V2) &&
        !(version == 1 && header_bytes == HEADER_BYTES_V1))
        return bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': version %u, this build reads versions 1 to %d",
                         path, version, CHECKPOINT_VERSION);
    if (fread(h + 16, 1, header_bytes - 16, fp) != header_bytes - 16)
        return bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': truncated header", path);
    if (crc32_update(0, h, header_bytes - 4) != get_u32(h + header_bytes - 4))
        return bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': header checksum mismatch (corrupt file)", path);
    decode_header(h, version, info);
    bfp8_status st = model_config_validate(&info->config);
    if (st != BFP8_OK) {
        char cause[512]; /* bfp8_fail overwrites what bfp8_last_error() points to */
        snprintf(cause, sizeof cause, "%s", bfp8_last_error());
        return bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': bad model shape: %s", path, cause);
    }
    if (info->num_params != (uint64_t)model_config_num_params(&info->config) ||
        bfp8_recipe_name(info->recipe) == NULL || info->ranks < 1)
        return bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': inconsistent header", path);
    return BFP8_OK;
}

bfp8_status checkpoint_read_info(const char *path, checkpoint_info *info) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return bfp8_fail(BFP8_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    const bfp8_status st = read_header(fp, path, info);
    fclose(fp);
    return st;
}

bfp8_status checkpoint_load_with(const char *path, checkpoint_info *info, model *m,
                                 const checkpoint_moments *moments) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return bfp8_fail(BFP8_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    bfp8_status st = read_header(fp, path, info);
    if (st == BFP8_OK && (memcmp(&info->config, &m->config, sizeof info->config) != 0 ||
                          info->num_params != m->num_params))
        st = bfp8_fail(BFP8_ERR_INVALID_VALUE,
                       "checkpoint '%s' holds a different model (dim %d, %d layers, %d heads, ffn "
                       "%d, vocab %d, %d experts) than requested (dim %d, %d layers, %d heads, ffn %d, "
                       "vocab %d, %d experts)",
                       path, info->config.dim, info->config.n_layers, info->config.n_heads,
                       info->config.ffn_hidden, info->config.vocab_size, info->config.moe.num_experts,
                       m->config.dim, m->config.n_layers, m->config.n_heads, m->config.ffn_hidden,
                       m->config.vocab_size, m->config.moe.num_experts);
    /* Read into a staging buffer: the model is only overwritten by a verified payload. */
    const size_t bytes = 3 * m->num_params * sizeof(float);
    float *staging = st == BFP8_OK ? malloc(bytes) : NULL;
    if (st == BFP8_OK && !staging) st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    if (st == BFP8_OK) {
        uint8_t tail[4];
        if (fread(staging, 1, bytes, fp) != bytes || fread(tail, 1, 4, fp) != 4)
            st = bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': truncated (expected %zu bytes of weights)",
                           path, bytes);
        else if (fgetc(fp) != EOF)
            st = bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': trailing bytes after the payload", path);
        else if (crc32_update(0, staging, bytes) != get_u32(tail))
            st = bfp8_fail(BFP8_ERR_IO, "checkpoint '%s': weights checksum mismatch (corrupt file)", path);
    }
    fclose(fp);
    if (st == BFP8_OK) {
        const size_t n = m->num_params;
        st = moments ? moments->scatter(moments->user, staging + n, staging + 2 * n) : BFP8_OK;
        if (st == BFP8_OK)
            st = model_load_state(m, staging, moments ? NULL : staging + n, moments ? NULL : staging + 2 * n);
    }
    free(staging);
    return st;
}
