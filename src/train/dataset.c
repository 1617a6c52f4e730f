/*
 * dataset.c - corpus to tokens, the train/validation split, batches.
 */
#include "train/dataset.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "train/file_io.h"

bfp8_status dataset_from_tokens(token_dataset *d, int32_t *tokens, size_t count, int64_t seq) {
    memset(d, 0, sizeof *d);
    d->tokens = tokens;
    d->num_tokens = count;
    d->seq = seq;
    const size_t window = (size_t)seq + 1;
    size_t block = count / (2 * DATASET_VALIDATION_EVERY);
    if (block > 8192) block = 8192;
    if (block < 2 * window) block = 2 * window;
    const size_t blocks = count / block; /* a ragged tail is dropped */
    if (blocks < 2) {
        dataset_free(d);
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "the data has %zu tokens: too few for training and validation windows of "
                         "%lld tokens (need at least %zu)",
                         count, (long long)seq, 4 * window);
    }
    d->block_tokens = block;
    /* Every 10th block validates; with fewer than 10 blocks, the last one. */
    const size_t val_every = blocks < DATASET_VALIDATION_EVERY ? blocks : DATASET_VALIDATION_EVERY;
    const size_t windows_per_block = (block - 1) / (size_t)seq;
    d->train_blocks = malloc(blocks * sizeof *d->train_blocks);
    d->val_windows = malloc(blocks * windows_per_block * sizeof *d->val_windows);
    if (!d->train_blocks || !d->val_windows) {
        dataset_free(d);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "dataset: out of memory");
    }
    for (size_t b = 0; b < blocks; ++b) {
        if (b % val_every == val_every - 1)
            for (size_t w = 0; w < windows_per_block; ++w)
                d->val_windows[d->num_val_windows++] = b * block + w * (size_t)seq;
        else
            d->train_blocks[d->num_train_blocks++] = b * block;
    }
    return BFP8_OK;
}

/* Bytes of the well-formed UTF-8 sequence (of 2 to 4 bytes) at p[0, n), or 0. */
static size_t utf8_sequence_length(const uint8_t *p, size_t n) {
    const uint8_t b = p[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (b >= 0xc2 && b <= 0xdf) len = 2;
    else if (b >= 0xe0 && b <= 0xef) len = 3, lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
    else if (b >= 0xf0 && b <= 0xf4) len = 4, lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
    else return 0;
    if (n < len || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < len; ++i)
        if ((p[i] & 0xc0) != 0x80) return 0;
    return len;
}

double text_non_text_fraction(const uint8_t *text, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n;) {
        const uint8_t b = text[i];
        if (b < 0x80) {
            bad += (b < 0x20 && !(b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r')) || b == 0x7f;
            ++i;
            continue;
        }
        const size_t len = utf8_sequence_length(text + i, n - i);
        bad += len == 0;
        i += len ? len : 1;
    }
    return n ? (double)bad / (double)n : 0.0;
}

bfp8_status dataset_check_text(const char *path, const uint8_t *text, size_t n, double *fraction) {
    const double f = text_non_text_fraction(text, n);
    if (fraction) *fraction = f;
    if (f > DATASET_MAX_NON_TEXT)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "data file '%s' does not look like text: %.1f%% of its bytes are control bytes or "
                         "invalid UTF-8 (at most %.0f%% are accepted)", path, 100.0 * f, 100.0 * DATASET_MAX_NON_TEXT);
    return BFP8_OK;
}

bfp8_status dataset_load(token_dataset *d, const char *path, const bpe_tokenizer *tok, int64_t seq) {
    memset(d, 0, sizeof *d);
    uint8_t *text;
    size_t n;
    bfp8_status st = read_whole_file(path, &text, &n);
    char cause[512];
    if (st != BFP8_OK) {
        /* bfp8_fail writes the buffer that bfp8_last_error() reads: copy the cause first. */
        snprintf(cause, sizeof cause, "%s", bfp8_last_error());
        return bfp8_fail(st, "data: %s (the default corpus comes from: bash scripts/prepare_corpus.sh)",
                         cause);
    }
    if (n == 0) {
        free(text);
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "data file '%s' is empty", path);
    }
    double non_text;
    st = dataset_check_text(path, text, n, &non_text);
    if (st != BFP8_OK) {
        free(text);
        return st;
    }
    int32_t *tokens = malloc(n * sizeof *tokens);
    if (!tokens) {
        free(text);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data: cannot hold %zu tokens", n);
    }
    size_t count;
    bpe_encode(tok, text, n, tokens, &count);
    free(text);
    int32_t *shrunk = realloc(tokens, (count ? count : 1) * sizeof *tokens);
    st = dataset_from_tokens(d, shrunk ? shrunk : tokens, count, seq);
    if (st != BFP8_OK) {
        snprintf(cause, sizeof cause, "%s", bfp8_last_error());
        return bfp8_fail(st, "data file '%s': %s", path, cause);
    }
    d->text_bytes = n;
    d->non_text_fraction = non_text;
    return BFP8_OK;
}

void dataset_free(token_dataset *d) {
    free(d->tokens);
    free(d->train_blocks);
    free(d->val_windows);
    memset(d, 0, sizeof *d);
}

batch_sampler batch_sampler_start(uint64_t seed) {
    batch_sampler s = {rng_seeded(seed ^ 0x5eedda7aull), 0};
    return s;
}

static void copy_window(const token_dataset *d, size_t start, int32_t *inputs, int32_t *targets) {
    memcpy(inputs, d->tokens + start, (size_t)d->seq * sizeof *inputs);
    memcpy(targets, d->tokens + start + 1, (size_t)d->seq * sizeof *targets);
}

void dataset_next_batch(const token_dataset *d, batch_sampler *s, int64_t batch, int32_t *inputs,
                        int32_t *targets) {
    dataset_next_batch_part(d, s, batch, 0, batch, inputs, targets);
}

void dataset_next_batch_part(const token_dataset *d, batch_sampler *s, int64_t batch, int64_t first,
                             int64_t count, int32_t *inputs, int32_t *targets) {
    const size_t span = d->block_tokens - ((size_t)d->seq + 1) + 1; /* offsets that fit */
    for (int64_t b = 0; b < batch; ++b) {
        const size_t block = d->train_blocks[rng_below(&s->rng, d->num_train_blocks)];
        const size_t offset = (size_t)rng_below(&s->rng, span);
        if (b >= first && b < first + count)
            copy_window(d, block + offset, inputs + (b - first) * d->seq, targets + (b - first) * d->seq);
        s->windows_drawn++;
    }
}

void dataset_val_window(const token_dataset *d, size_t w, int32_t *inputs, int32_t *targets) {
    copy_window(d, d->val_windows[w], inputs, targets);
}
