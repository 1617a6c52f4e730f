/*
 * test_layer_gradients.c - every fp32 layer's backward against central
 * finite differences of its forward: rmsnorm, rope, attention, swiglu,
 * embedding, cross-entropy and the fp32 matmul of the head.
 *
 * Each layer is probed through a scalar L = sum(w * out) with fixed random
 * w, so dout = w. Differences are taken in fp32 with L summed in double; the
 * error is the norm-wise relative error ||analytic - numeric|| / ||numeric||
 * over all inputs. RECIPE.md section 5 asks for < 1e-3; measured: at most
 * 7e-5 (cross-entropy), 3e-5 or less elsewhere, so the bar is 3e-4.
 *
 *   ctest --test-dir build -R train_layer_gradients
 */
#include <math.h>
#include <string.h>

#include "formats/formats.h"
#include "model/attention.h"
#include "model/cross_entropy.h"
#include "model/embedding.h"
#include "model/matmul.h"
#include "model/rmsnorm.h"
#include "model/rope.h"
#include "model/swiglu.h"
#include "test_util.h"

static const double GRAD_REL_BAR = 3e-4;

static void fill(float *x, int64_t n, float scale, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; ++i) x[i] = scale * (float)test_rng_normal(&rng);
}

/* A layer under test: recompute its output into out from the current inputs. */
typedef void (*forward_fn)(void *state, float *out);

static double weighted_sum(const float *out, const float *w, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += (double)out[i] * w[i];
    return s;
}

/* Central differences of L = sum(w * out) with respect to x[0..n), compared
 * with the analytic gradient. Returns the norm-wise relative error. */
static double check_input(const char *what, forward_fn forward, void *state, float *x, int64_t n,
                          const float *analytic, float *out, const float *w, int64_t out_count,
                          float eps) {
    double diff_sq = 0.0, ref_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float saved = x[i];
        x[i] = saved + eps;
        forward(state, out);
        const double plus = weighted_sum(out, w, out_count);
        x[i] = saved - eps;
        forward(state, out);
        const double minus = weighted_sum(out, w, out_count);
        x[i] = saved;
        const double numeric = (plus - minus) / (2.0 * (double)eps);
        diff_sq += (analytic[i] - numeric) * (analytic[i] - numeric);
        ref_sq += numeric * numeric;
    }
    const double rel = sqrt(diff_sq / ref_sq);
    printf("  %-28s rel err %.2e (|grad| %.3g)\n", what, rel, sqrt(ref_sq));
    CHECK(rel < GRAD_REL_BAR, "%s: relative error %.3e >= %.0e", what, rel, GRAD_REL_BAR);
    CHECK(ref_sq > 0.0, "%s: the numeric gradient is all zero: the check proves nothing", what);
    return rel;
}

/* ------------------------------------------------------------------------ */

typedef struct rmsnorm_case {
    int64_t tokens, dim;
    float *x, *weight, *rstd;
} rmsnorm_case;

static void rmsnorm_fwd(void *p, float *out) {
    rmsnorm_case *c = p;
    rmsnorm_forward(NULL, out, c->rstd, c->x, c->weight, c->tokens, c->dim, 1e-5f);
}

static void test_rmsnorm(void) {
    rmsnorm_case c = {5, 37, NULL, NULL, NULL};
    const int64_t n = c.tokens * c.dim;
    c.x = test_malloc(n * sizeof(float));
    c.weight = test_malloc(c.dim * sizeof(float));
    c.rstd = test_malloc(c.tokens * sizeof(float));
    float *out = test_malloc(n * sizeof(float)), *w = test_malloc(n * sizeof(float));
    float *dx = calloc(n, sizeof(float)), *dweight = calloc(c.dim, sizeof(float));
    fill(c.x, n, 1.0f, 1);
    fill(c.weight, c.dim, 0.5f, 2);
    for (int64_t i = 0; i < c.dim; ++i) c.weight[i] += 1.0f;
    fill(w, n, 1.0f, 3);
    rmsnorm_fwd(&c, out);
    rmsnorm_backward(NULL, dx, dweight, w, c.x, c.weight, c.rstd, c.tokens, c.dim);
    check_input("rmsnorm dx", rmsnorm_fwd, &c, c.x, n, dx, out, w, n, 1e-2f);
    check_input("rmsnorm dweight", rmsnorm_fwd, &c, c.weight, c.dim, dweight, out, w, n, 1e-2f);
    /* dx accumulates: a second backward doubles it. */
    float first = dx[7];
    rmsnorm_backward(NULL, dx, dweight, w, c.x, c.weight, c.rstd, c.tokens, c.dim);
    CHECK(fabsf(dx[7] - 2.0f * first) <= 1e-6f * fabsf(first), "rmsnorm dx must accumulate");
    free(c.x), free(c.weight), free(c.rstd), free(out), free(w), free(dx), free(dweight);
}

/* ------------------------------------------------------------------------ */

typedef struct rope_case {
    int64_t batch, seq, heads, head_dim, stride;
    float *x, *cos_t, *sin_t;
} rope_case;

static void rope_fwd(void *p, float *out) {
    rope_case *c = p;
    memcpy(out, c->x, (size_t)(c->batch * c->seq * c->stride) * sizeof(float));
    rope_forward(NULL, out, c->batch, c->seq, c->heads, c->head_dim, c->stride, c->cos_t, c->sin_t);
}

static void test_rope(void) {
    rope_case c = {2, 6, 3, 8, 3 * 8 + 5, NULL, NULL, NULL}; /* padded rows: only heads rotate */
    const int64_t n = c.batch * c.seq * c.stride;
    c.x = test_malloc(n * sizeof(float));
    c.cos_t = test_malloc(c.seq * c.head_dim / 2 * sizeof(float));
    c.sin_t = test_malloc(c.seq * c.head_dim / 2 * sizeof(float));
    rope_tables(c.cos_t, c.sin_t, c.seq, c.head_dim, 10000.0f);
    float *out = test_malloc(n * sizeof(float)), *w = test_malloc(n * sizeof(float));
    float *dx = test_malloc(n * sizeof(float));
    fill(c.x, n, 1.0f, 4);
    fill(w, n, 1.0f, 5);
    memcpy(dx, w, n * sizeof(float));
    rope_backward(NULL, dx, c.batch, c.seq, c.heads, c.head_dim, c.stride, c.cos_t, c.sin_t);
    check_input("rope dx", rope_fwd, &c, c.x, n, dx, out, w, n, 1e-2f);
    /* position 0 is not rotated; a later one is, and keeps the norm */
    rope_fwd(&c, out);
    CHECK(out[0] == c.x[0] && out[4] == c.x[4], "rope must leave position 0 unchanged");
    double in_sq = 0.0, out_sq = 0.0;
    for (int64_t i = 0; i < c.head_dim; ++i) {
        in_sq += (double)c.x[3 * c.stride + i] * c.x[3 * c.stride + i];
        out_sq += (double)out[3 * c.stride + i] * out[3 * c.stride + i];
    }
    CHECK(fabs(in_sq - out_sq) < 1e-5 * in_sq, "rope must preserve each head's norm");
    free(c.x), free(c.cos_t), free(c.sin_t), free(out), free(w), free(dx);
}

/* ------------------------------------------------------------------------ */

typedef struct attention_case {
    int64_t batch, seq, heads, head_dim;
    float *qkv, *probs, *scratch;
} attention_case;

static void attention_fwd(void *p, float *out) {
    attention_case *c = p;
    attention_forward(NULL, out, c->probs, c->scratch, c->qkv, c->batch, c->seq, c->heads, c->head_dim);
}

static void test_attention(void) {
    attention_case c = {2, 39, 3, 4, NULL, NULL, NULL}; /* seq 39: two row blocks, ragged */
    const int64_t dim = c.heads * c.head_dim, tokens = c.batch * c.seq;
    const int64_t n_in = tokens * 3 * dim, n_out = tokens * dim;
    c.qkv = test_malloc(n_in * sizeof(float));
    c.probs = test_malloc(c.batch * c.heads * c.seq * c.seq * sizeof(float));
    float *out = test_malloc(n_out * sizeof(float)), *w = test_malloc(n_out * sizeof(float));
    float *dqkv = test_malloc(n_in * sizeof(float));
    float *scratch = test_malloc(attention_scratch_floats(c.batch, c.seq, c.heads, c.head_dim) * sizeof(float));
    c.scratch = scratch;
    fill(c.qkv, n_in, 1.0f, 6);
    fill(w, n_out, 1.0f, 7);
    attention_fwd(&c, out);
    attention_backward(NULL, dqkv, scratch, w, c.qkv, c.probs, c.batch, c.seq, c.heads, c.head_dim);
    check_input("attention dqkv", attention_fwd, &c, c.qkv, n_in, dqkv, out, w, n_out, 1e-2f);
    /* causality: the first token's output is its own v */
    for (int64_t i = 0; i < c.head_dim; ++i)
        CHECK(fabsf(out[i] - c.qkv[2 * dim + i]) < 1e-6f, "attention: token 0 must attend to itself only");
    /* against a direct evaluation of one output in double */
    const int64_t tb = 1, th = 2, tt = 37;
    const double sc = 1.0 / sqrt((double)c.head_dim);
    double ref[4] = {0}, weights[64], wsum = 0.0, mx = -1e300;
    const float *qt = c.qkv + (tb * c.seq + tt) * 3 * dim + th * c.head_dim;
    for (int64_t s = 0; s <= tt; ++s) {
        const float *ks = c.qkv + (tb * c.seq + s) * 3 * dim + dim + th * c.head_dim;
        double d = 0.0;
        for (int64_t i = 0; i < c.head_dim; ++i) d += (double)qt[i] * ks[i];
        weights[s] = d * sc;
        mx = fmax(mx, weights[s]);
    }
    for (int64_t s = 0; s <= tt; ++s) wsum += (weights[s] = exp(weights[s] - mx));
    for (int64_t s = 0; s <= tt; ++s)
        for (int64_t i = 0; i < c.head_dim; ++i)
            ref[i] += weights[s] / wsum * c.qkv[(tb * c.seq + s) * 3 * dim + 2 * dim + th * c.head_dim + i];
    attention_fwd(&c, out);
    for (int64_t i = 0; i < c.head_dim; ++i)
        CHECK(fabs(out[(tb * c.seq + tt) * dim + th * c.head_dim + i] - ref[i]) < 1e-5,
              "attention output %lld: %g vs %g", (long long)i,
              out[(tb * c.seq + tt) * dim + th * c.head_dim + i], ref[i]);
    free(c.qkv), free(c.probs), free(out), free(w), free(dqkv), free(scratch);
}

/* ------------------------------------------------------------------------ */

typedef struct swiglu_case {
    int64_t tokens, hidden;
    float *gate_up;
} swiglu_case;

static void swiglu_fwd(void *p, float *out) {
    swiglu_case *c = p;
    swiglu_forward(NULL, out, c->gate_up, c->tokens, c->hidden);
}

static void test_swiglu(void) {
    swiglu_case c = {4, 19, NULL};
    const int64_t n_in = c.tokens * 2 * c.hidden, n_out = c.tokens * c.hidden;
    c.gate_up = test_malloc(n_in * sizeof(float));
    float *out = test_malloc(n_out * sizeof(float)), *w = test_malloc(n_out * sizeof(float));
    float *d = test_malloc(n_in * sizeof(float));
    fill(c.gate_up, n_in, 2.0f, 8);
    fill(w, n_out, 1.0f, 9);
    swiglu_backward(NULL, d, w, c.gate_up, c.tokens, c.hidden);
    check_input("swiglu dgate_up", swiglu_fwd, &c, c.gate_up, n_in, d, out, w, n_out, 1e-2f);
    free(c.gate_up), free(out), free(w), free(d);
}

/* ------------------------------------------------------------------------ */

typedef struct embedding_case {
    int64_t count, dim;
    const int32_t *tokens;
    float *table;
} embedding_case;

static void embedding_fwd(void *p, float *out) {
    embedding_case *c = p;
    embedding_forward(NULL, out, c->tokens, c->table, c->count, c->dim);
}

static void test_embedding(void) {
    static const int32_t tokens[] = {3, 0, 3, 5, 1, 3}; /* repeats: the scatter-add must sum */
    const int64_t vocab = 7;
    embedding_case c = {6, 20, tokens, NULL};
    const int64_t n_out = c.count * c.dim;
    c.table = test_malloc(vocab * c.dim * sizeof(float));
    float *out = test_malloc(n_out * sizeof(float)), *w = test_malloc(n_out * sizeof(float));
    float *dtable = calloc(vocab * c.dim, sizeof(float));
    fill(c.table, vocab * c.dim, 1.0f, 10);
    fill(w, n_out, 1.0f, 11);
    embedding_backward(NULL, dtable, w, tokens, c.count, c.dim);
    /* rows 2, 4 and 6 are never used: their numeric gradient is 0 too */
    check_input("embedding dtable", embedding_fwd, &c, c.table, vocab * c.dim, dtable, out, w, n_out, 1e-2f);
    free(c.table), free(out), free(w), free(dtable);
}

/* ------------------------------------------------------------------------ */

typedef struct cross_entropy_case {
    int64_t tokens, vocab;
    const int32_t *targets;
    float *logits, *row_losses;
} cross_entropy_case;

static void cross_entropy_fwd(void *p, float *out) {
    cross_entropy_case *c = p;
    /* the loss as a float pair (hi + lo): one float would round away what eps changes */
    cross_entropy_rows(NULL, c->row_losses, NULL, BFP8_F32, c->logits, c->targets, c->tokens, c->vocab, 0.0f);
    const double loss = loss_mean(NULL, c->row_losses, c->tokens);
    out[0] = (float)loss;
    out[1] = (float)(loss - (double)out[0]);
}

static void test_cross_entropy(void) {
    static const int32_t targets[] = {0, 12, 5, 5, 30};
    cross_entropy_case c = {5, 31, targets, NULL, NULL};
    const int64_t n = c.tokens * c.vocab;
    c.logits = test_malloc(n * sizeof(float));
    c.row_losses = test_malloc(c.tokens * sizeof(float));
    float *dlogits = test_malloc(n * sizeof(float)), out[2], w[2] = {1.0f, 1.0f};
    fill(c.logits, n, 3.0f, 12);
    c.logits[3] = 60.0f; /* a dominant logit: the max shift must keep exp finite */
    cross_entropy_rows(NULL, c.row_losses, dlogits, BFP8_F32, c.logits, targets, c.tokens, c.vocab,
                       1.0f / (float)c.tokens);
    check_input("cross_entropy dlogits", cross_entropy_fwd, &c, c.logits, n, dlogits, out, w, 2, 1e-2f);
    /* in place gives the same */
    float *inplace = test_malloc(n * sizeof(float));
    memcpy(inplace, c.logits, n * sizeof(float));
    cross_entropy_rows(NULL, c.row_losses, inplace, BFP8_F32, inplace, targets, c.tokens, c.vocab,
                       1.0f / (float)c.tokens);
    CHECK(test_compare_f32_bits("in-place dlogits", inplace, dlogits, n) == 0,
          "cross_entropy_rows in place must match");
    /* bf16 gradients: the fp32 ones rounded to nearest even */
    uint16_t *dlogits_bf16 = test_malloc(n * sizeof(uint16_t));
    cross_entropy_rows(NULL, c.row_losses, dlogits_bf16, BFP8_BF16, c.logits, targets, c.tokens, c.vocab,
                       1.0f / (float)c.tokens);
    int64_t bf16_mismatches = 0;
    for (int64_t i = 0; i < n; ++i) bf16_mismatches += dlogits_bf16[i] != bfp8_encode_bf16(dlogits[i]);
    CHECK(bf16_mismatches == 0, "bf16 dlogits: %lld of %lld are not the fp32 ones rounded",
          (long long)bf16_mismatches, (long long)n);
    free(dlogits_bf16);
    /* uniform logits: loss = log(vocab) */
    for (int64_t i = 0; i < n; ++i) c.logits[i] = 0.25f;
    cross_entropy_fwd(&c, out);
    CHECK(fabsf(out[0] - logf((float)c.vocab)) < 1e-5f, "uniform logits: loss %g, expected log(%lld)",
          out[0], (long long)c.vocab);
    free(c.logits), free(c.row_losses), free(dlogits), free(inplace);
}

/* ------------------------------------------------------------------------ */

typedef struct matmul_case {
    int64_t M, N, K;
    float *x, *w, *w_t; /* x: M x K, w: N x K */
} matmul_case;

static void matmul_fwd(void *p, float *out) {
    matmul_case *c = p;
    transpose_f32(NULL, c->w_t, c->w, c->N, c->K);
    matmul_f32(NULL, out, c->N, c->x, c->K, 0, c->w_t, c->N, c->M, c->N, c->K, 0);
}

static void test_matmul(void) {
    matmul_case c = {21, 35, 18, NULL, NULL, NULL}; /* ragged against the 4 x 16 tiles */
    float *x = test_malloc(c.M * c.K * 4), *w = test_malloc(c.N * c.K * 4);
    c.x = x, c.w = w, c.w_t = test_malloc(c.N * c.K * 4);
    float *out = test_malloc(c.M * c.N * 4), *dy = test_malloc(c.M * c.N * 4);
    float *dx = test_malloc(c.M * c.K * 4), *dw = test_malloc(c.N * c.K * 4);
    fill(x, c.M * c.K, 1.0f, 13);
    fill(w, c.N * c.K, 1.0f, 14);
    fill(dy, c.M * c.N, 1.0f, 15);
    matmul_f32(NULL, dx, c.K, dy, c.N, 0, w, c.K, c.M, c.K, c.N, 0); /* dx = dy W */
    matmul_f32(NULL, dw, c.K, dy, c.N, 1, x, c.K, c.N, c.K, c.M, 0); /* dW = dy^T x */
    check_input("matmul dx", matmul_fwd, &c, x, c.M * c.K, dx, out, dy, c.M * c.N, 1e-2f);
    check_input("matmul dW", matmul_fwd, &c, w, c.N * c.K, dw, out, dy, c.M * c.N, 1e-2f);
    /* against a plain double loop */
    matmul_fwd(&c, out);
    double worst = 0.0;
    for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
            double ref = 0.0;
            for (int64_t k = 0; k < c.K; ++k) ref += (double)x[m * c.K + k] * w[n * c.K + k];
            worst = fmax(worst, fabs(ref - out[m * c.N + n]));
        }
    CHECK(worst < 1e-4, "matmul vs double: max abs error %g", worst);
    /* accumulate adds */
    memcpy(dy, out, c.M * c.N * 4);
    matmul_f32(NULL, out, c.N, x, c.K, 0, c.w_t, c.N, c.M, c.N, c.K, 1);
    CHECK(fabsf(out[5] - 2.0f * dy[5]) <= 1e-5f * fabsf(dy[5]) + 1e-6f, "matmul accumulate");
    free(x), free(w), free(c.w_t), free(out), free(dy), free(dx), free(dw);
}

int main(void) {
    test_rmsnorm();
    test_rope();
    test_attention();
    test_swiglu();
    test_embedding();
    test_cross_entropy();
    test_matmul();
    return test_exit_code("train_layer_gradients");
}
