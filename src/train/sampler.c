/*
 * sampler.c - temperature / top-k sampling, and printing what it draws.
 */
#include "train/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct scored_token {
    float logit;
    int32_t id;
} scored_token;

static int by_logit_descending(const void *a, const void *b) {
    const scored_token *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* a fixed order for ties */
}

/* Pick a token from one row of logits. scratch: vocab entries. */
static int32_t pick_token(const float *logits, int64_t vocab, const sample_options *o,
                          rng_state *rng, scored_token *scratch) {
    for (int64_t v = 0; v < vocab; ++v) scratch[v] = (scored_token){logits[v], (int32_t)v};
    qsort(scratch, (size_t)vocab, sizeof *scratch, by_logit_descending);
    if (o->temperature <= 0.0f) return scratch[0].id;
    const int64_t k = o->top_k > 0 && o->top_k < vocab ? o->top_k : vocab;
    double total = 0.0;
    for (int64_t i = 0; i < k; ++i) total += exp((double)(scratch[i].logit - scratch[0].logit) / o->temperature);
    double r = (double)rng_uniform(rng) * total;
    for (int64_t i = 0; i < k; ++i) {
        r -= exp((double)(scratch[i].logit - scratch[0].logit) / o->temperature);
        if (r <= 0.0) return scratch[i].id;
    }
    return scratch[k - 1].id;
}

bfp8_status sample_generate(model *m, const int32_t *prompt, size_t prompt_len,
                            const sample_options *o, rng_state *rng,
                            void (*emit)(int32_t token, void *arg), void *arg) {
    if (prompt_len == 0) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "sample: the prompt is empty");
    const int64_t window = m->options.max_seq, vocab = m->config.vocab_size;
    const size_t capacity = prompt_len + (size_t)o->max_new_tokens;
    int32_t *context = malloc(capacity * sizeof *context);
    scored_token *scratch = malloc((size_t)vocab * sizeof *scratch);
    float *last = malloc((size_t)vocab * sizeof *last); /* the last position's logits, on the host */
    if (!context || !scratch || !last) {
        free(context), free(scratch), free(last);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "sample: out of memory");
    }
    memcpy(context, prompt, prompt_len * sizeof *context);
    size_t len = prompt_len;
    bfp8_status st = BFP8_OK;
    for (int64_t t = 0; t < o->max_new_tokens && st == BFP8_OK; ++t) {
        const int64_t n = (int64_t)len < window ? (int64_t)len : window;
        st = model_forward(m, context + len - (size_t)n, NULL, 1, n, NULL);
        if (st == BFP8_OK) st = model_logits_row(m, n - 1, last);
        if (st != BFP8_OK) break;
        if (!isfinite(last[0])) {
            st = bfp8_fail(BFP8_ERR_NONFINITE, "sample: the model produced non-finite logits");
            break;
        }
        const int32_t next = pick_token(last, vocab, o, rng, scratch);
        context[len++] = next;
        emit(next, arg);
    }
    free(context);
    free(scratch);
    free(last);
    return st;
}

void sample_print_token(int32_t token, void *arg) {
    size_t len;
    const uint8_t *bytes = bpe_token_bytes(arg, token, &len);
    for (size_t i = 0; i < len; ++i) {
        const uint8_t b = bytes[i];
        if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7f)
            printf("\\x%02x", b);
        else
            putchar(b);
    }
    fflush(stdout);
}
