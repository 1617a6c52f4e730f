/*
 * test_model_ops_gpu.c - the model's CUDA operations (src/model/cuda/
 * model_kernels.cu, declared in model_ops.h) against their CPU references,
 * op by op: embedding, RMSNorm, RoPE, SwiGLU (and the bf16 forms of RMSNorm
 * and SwiGLU), cross-entropy (row losses and gradients, fp32 or bf16, and
 * their mean), fp32 and bf16-operand matmul,
 * transpose, AdamW, the gradient norm, copies and bf16 conversions.
 * Attention has its own test (test_attention_gpu.c).
 *
 * Each case draws random inputs on ragged shapes, gives the CPU reference
 * and the CUDA op the same data, and compares. Outputs start from random
 * values on both sides, so an op that should add (+=) must add, and one that
 * should overwrite must write every element. One summary line per op gives
 * the largest error seen and the bound it was held to.
 *
 * Bounds:
 *   - bit-exact: copies, zeroing, transpose, bf16 conversions (formats.h's
 *     rounding, NaN -> 0x7fff), the embedding (a gather; its backward adds
 *     each id's rows in token order, as the CPU does);
 *   - AdamW: at most 2 ulp (the kernel rounds every operation as the CPU;
 *     the slack is for a CPU build that fuses multiply-adds);
 *   - the rest: per row, max |gpu - cpu| <= tol * (1 + max |cpu|). fp32
 *     sums taken in another order (a tree instead of a loop, cuBLAS's
 *     blocking) differ by some sqrt(n) ulp of the row's scale, and the
 *     CUDA expf / logf by an ulp or two; tol = 1e-5 for reductions (about
 *     10x the error of a sequential fp32 sum of 32768 terms), 2e-6 for the
 *     element-wise ops with exponentials, 1e-6 for RoPE's products.
 *   - bf16 dlogits: at most one bf16 step from the CPU's (both round fp32
 *     values an ulp or two apart);
 *   - the gradient norm (summed in double): relative 1e-10.
 *
 * Needs a GPU (exits 77, "skipped", without one). Run: ctest -R test_model_ops_gpu
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfp8.h"
#include "formats/formats.h"
#include "model/adamw.h"
#include "model/cross_entropy.h"
#include "model/embedding.h"
#include "model/matmul.h"
#include "model/matmul_bf16.h"
#include "model/model_ops.h"
#include "model/rmsnorm.h"
#include "model/rope.h"
#include "model/swiglu.h"
#include "test_util.h"

static bfp8_context *g_ctx;
static model_ops_ctx g_oc; /* what the CUDA ops run with; the CPU references take NULL */

/* ------------------------------------------------------------------------ */
/* Device buffers                                                            */

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    if (bfp8_malloc(g_ctx, &p, bytes ? bytes : 16) != BFP8_OK || !p)
        test_fatal("bfp8_malloc(%zu): %s", bytes, bfp8_last_error());
    return p;
}

static void *dev_copy_of(const void *host, size_t bytes) {
    void *d = dev_alloc(bytes);
    CHECK_OK(bfp8_copy_to_backend(g_ctx, d, host, bytes));
    return d;
}

static void to_host(void *host, const void *dev, size_t bytes) {
    CHECK_OK(bfp8_copy_to_host(g_ctx, host, dev, bytes));
}

static void *host_copy_of(const void *src, size_t bytes) {
    void *p = test_malloc(bytes ? bytes : 16);
    memcpy(p, src, bytes);
    return p;
}

/* After a CUDA op: it ran to the end, and kept no failure. */
static void finish_op(const char *op) {
    CHECK_OK(bfp8_context_synchronize(g_ctx));
    const bfp8_status s = model_ops_status(&g_oc);
    CHECK(s == BFP8_OK, "%s: %s", op, bfp8_last_error());
}

/* ------------------------------------------------------------------------ */
/* Data and metrics                                                          */

static void fill_normal(float *x, int64_t n, float scale, test_rng *rng) {
    for (int64_t i = 0; i < n; ++i) x[i] = (float)test_rng_normal(rng) * scale;
}

static float *random_floats(int64_t n, float scale, test_rng *rng) {
    float *x = test_malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    fill_normal(x, n, scale, rng);
    return x;
}

/* Both non-finite the same way: NaN and NaN (any payload), or the same Inf. */
static int same_nonfinite(float a, float b) { return (isnan(a) && isnan(b)) || (isinf(a) && a == b); }

/* Max over rows of max |out - ref| / (1 + max |ref|) in the row (rows x cols,
 * dense). A NaN or Inf must be matched by the same on the other side, else
 * the error is +inf. */
static double row_error(const float *ref, const float *out, int64_t rows, int64_t cols) {
    double worst = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        double scale = 0.0, err = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            const float a = ref[r * cols + c], b = out[r * cols + c];
            if (!isfinite(a) || !isfinite(b)) {
                if (!same_nonfinite(a, b)) return INFINITY;
                continue;
            }
            if (fabs(a) > scale) scale = fabs(a);
            if (fabs((double)a - b) > err) err = fabs((double)a - b);
        }
        if (err / (1.0 + scale) > worst) worst = err / (1.0 + scale);
    }
    return worst;
}

/* The bf16 form of an op (its output rounded to bf16 by the op itself): the
 * device's bf16 output must be the device's fp32 output of the same op,
 * rounded (bit for bit: one kernel source, only the store differs), and
 * within one bf16 step of the CPU's bf16 reference (row-relative 8e-3: the
 * fp32 values may differ by the op's tolerance, and a value near a rounding
 * boundary then rounds the other way). Returns the error against the CPU;
 * counts the differing bf16 in *diffs. */
static double bf16_output_error(const char *what, const uint16_t *ref16, const uint16_t *got16,
                                const float *got_f32, int64_t rows, int64_t cols, int64_t *diffs) {
    const int64_t n = rows * cols;
    float *ref = test_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    float *got = test_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    *diffs = 0;
    for (int64_t i = 0; i < n; ++i) {
        ref[i] = bfp8_decode_bf16(ref16[i]);
        got[i] = bfp8_decode_bf16(got16[i]);
        if (got16[i] != bfp8_encode_bf16(got_f32[i])) {
            if (*diffs < 5)
                fprintf(stderr, "  %s [%lld]: bf16 0x%04x, fp32 %a rounds to 0x%04x\n", what, (long long)i, got16[i],
                        got_f32[i], bfp8_encode_bf16(got_f32[i]));
            ++*diffs;
        }
    }
    const double err = row_error(ref, got, rows, cols);
    free(ref);
    free(got);
    return err;
}

/* Floats between a and b (+0 and -0 are one point; NaN and NaN are 0 apart). */
static int64_t ulp_distance(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
    const uint32_t ua = bfp8_bits_of(a), ub = bfp8_bits_of(b);
    const int64_t ka = ua & 0x80000000u ? -(int64_t)(ua & 0x7fffffffu) : (int64_t)ua;
    const int64_t kb = ub & 0x80000000u ? -(int64_t)(ub & 0x7fffffffu) : (int64_t)ub;
    return ka > kb ? ka - kb : kb - ka;
}

static int64_t max_ulp_distance(const float *a, const float *b, int64_t n) {
    int64_t worst = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t d = ulp_distance(a[i], b[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

/* The summary line of an op: its worst error over all cases. */
typedef struct op_summary {
    const char *name;
    const char *bound; /* how the error is measured and held */
    double worst;
    int cases;
} op_summary;

static void note(op_summary *s, double err) {
    ++s->cases;
    if (!(err <= s->worst)) s->worst = err; /* keeps a NaN */
}

static void print_summary(const op_summary *s) {
    printf("%-24s %4d cases  max error %-10.3g %s\n", s->name, s->cases, s->worst, s->bound);
}

static const int64_t kTokens[] = {1, 3, 127, 130};
#define COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------------------ */
/* Embedding                                                                 */

static void test_embedding(test_rng *rng) {
    op_summary fwd = {"embedding_forward", "(differing floats; must be 0)", 0, 0};
    op_summary bwd = {"embedding_backward", "(differing floats; must be 0)", 0, 0};
    const int64_t dims[] = {64, 96, 1000, 1001, 2048};
    const int64_t vocabs[] = {7, 1000};
    for (int ti = 0; ti < COUNT_OF(kTokens); ++ti)
        for (int di = 0; di < COUNT_OF(dims); ++di)
            for (int vi = 0; vi < COUNT_OF(vocabs); ++vi) {
                const int64_t count = kTokens[ti], dim = dims[di], vocab = vocabs[vi];
                int32_t *tokens = test_malloc((size_t)count * sizeof *tokens);
                for (int64_t t = 0; t < count; ++t) tokens[t] = (int32_t)test_rng_range(rng, 0, vocab - 1);
                for (int64_t t = 0; t < count; t += 3) tokens[t] = tokens[0]; /* one id all through: a long run */
                float *table = random_floats(vocab * dim, 1.0f, rng);
                float *out = random_floats(count * dim, 1.0f, rng);
                float *dout = random_floats(count * dim, 1.0f, rng);
                float *dtable = random_floats(vocab * dim, 1.0f, rng);
                int32_t *d_tokens = dev_copy_of(tokens, (size_t)count * sizeof *tokens);
                float *d_table = dev_copy_of(table, (size_t)(vocab * dim) * sizeof(float));
                float *d_out = dev_copy_of(out, (size_t)(count * dim) * sizeof(float));
                float *d_dout = dev_copy_of(dout, (size_t)(count * dim) * sizeof(float));
                float *d_dtable = dev_copy_of(dtable, (size_t)(vocab * dim) * sizeof(float));
                float *got = test_malloc((size_t)(vocab > count ? vocab : count) * (size_t)dim * sizeof(float));
                char what[96];
                snprintf(what, sizeof what, "embedding count %lld dim %lld vocab %lld", (long long)count,
                         (long long)dim, (long long)vocab);

                embedding_forward(NULL, out, tokens, table, count, dim);
                embedding_forward_cuda(&g_oc, d_out, d_tokens, d_table, count, dim);
                finish_op("embedding_forward_cuda");
                to_host(got, d_out, (size_t)(count * dim) * sizeof(float));
                int64_t diffs = test_compare_f32_bits(what, out, got, count * dim);
                CHECK(diffs == 0, "%s: forward, %lld floats differ", what, (long long)diffs);
                note(&fwd, (double)diffs);

                embedding_backward(NULL, dtable, dout, tokens, count, dim);
                embedding_backward_cuda(&g_oc, d_dtable, d_dout, d_tokens, count, dim);
                finish_op("embedding_backward_cuda");
                to_host(got, d_dtable, (size_t)(vocab * dim) * sizeof(float));
                diffs = test_compare_f32_bits(what, dtable, got, vocab * dim);
                CHECK(diffs == 0, "%s: backward, %lld floats differ", what, (long long)diffs);
                note(&bwd, (double)diffs);

                bfp8_free(g_ctx, d_tokens);
                bfp8_free(g_ctx, d_table);
                bfp8_free(g_ctx, d_out);
                bfp8_free(g_ctx, d_dout);
                bfp8_free(g_ctx, d_dtable);
                free(tokens);
                free(table);
                free(out);
                free(dout);
                free(dtable);
                free(got);
            }
    print_summary(&fwd);
    print_summary(&bwd);
}

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */

static void test_rmsnorm(test_rng *rng) {
    const double tol = 1e-5;
    op_summary fwd = {"rmsnorm_forward", "(row-relative; bound 1e-5)", 0, 0};
    op_summary bwd = {"rmsnorm_backward", "(row-relative; bound 1e-5)", 0, 0};
    op_summary fwd16 = {"rmsnorm_forward_bf16", "(row-relative; bound 8e-3; = fp32 op rounded)", 0, 0};
    op_summary bwd16 = {"rmsnorm_backward_bf16", "(row-relative; bound 1e-5; = fp32 op on widened)", 0, 0};
    /* the backward is one kernel for rows up to 4096 (float4) or 1024 (else), by
     * chunks of tokens (of 3 at 2113 tokens, the last one of 1), and two
     * kernels for longer rows (8192) */
    const int64_t dims[] = {64, 96, 1000, 1001, 2048, 8192};
    const int64_t token_counts[] = {1, 3, 127, 130, 2113};
    const float eps = 1e-5f;
    for (int ti = 0; ti < COUNT_OF(token_counts); ++ti)
        for (int di = 0; di < COUNT_OF(dims); ++di) {
            const int64_t tokens = token_counts[ti], dim = dims[di], n = tokens * dim;
            float *x = random_floats(n, 1.0f, rng);
            for (int64_t t = 0; t < tokens; ++t) { /* rows from 0.01 to 100 in scale, and a zero row */
                const float s = t == 1 ? 0.0f : powf(10.0f, (float)test_rng_range(rng, -2, 2));
                for (int64_t i = 0; i < dim; ++i) x[t * dim + i] *= s;
            }
            float *weight = random_floats(dim, 0.1f, rng);
            for (int64_t i = 0; i < dim; ++i) weight[i] += 1.0f;
            float *out = random_floats(n, 1.0f, rng), *rstd = random_floats(tokens, 1.0f, rng);
            float *dout = random_floats(n, 1.0f, rng), *dx = random_floats(n, 1.0f, rng);
            float *dweight = random_floats(dim, 1.0f, rng);
            float *d_x = dev_copy_of(x, (size_t)n * sizeof(float));
            float *d_weight = dev_copy_of(weight, (size_t)dim * sizeof(float));
            float *d_out = dev_copy_of(out, (size_t)n * sizeof(float));
            float *d_rstd = dev_copy_of(rstd, (size_t)tokens * sizeof(float));
            float *got = test_malloc((size_t)n * sizeof(float));
            char what[64];
            snprintf(what, sizeof what, "rmsnorm tokens %lld dim %lld", (long long)tokens, (long long)dim);

            rmsnorm_forward(NULL, out, rstd, x, weight, tokens, dim, eps);
            rmsnorm_forward_cuda(&g_oc, d_out, d_rstd, d_x, d_weight, tokens, dim, eps);
            finish_op("rmsnorm_forward_cuda");
            to_host(got, d_out, (size_t)n * sizeof(float));
            double err = row_error(out, got, tokens, dim);
            CHECK(err <= tol, "%s: forward out error %g", what, err);
            note(&fwd, err);
            to_host(got, d_rstd, (size_t)tokens * sizeof(float));
            err = row_error(rstd, got, tokens, 1);
            CHECK(err <= tol, "%s: forward rstd error %g", what, err);
            note(&fwd, err);

            /* the bf16 form, against the fp32 output just taken and the CPU's bf16 form */
            {
                float *out_f32 = test_malloc((size_t)n * sizeof(float));
                float *rstd16 = test_malloc((size_t)tokens * sizeof(float));
                uint16_t *ref16 = test_malloc((size_t)n * sizeof(uint16_t));
                uint16_t *got16 = test_malloc((size_t)n * sizeof(uint16_t));
                to_host(out_f32, d_out, (size_t)n * sizeof(float));
                memset(ref16, 0xab, (size_t)n * sizeof(uint16_t));
                uint16_t *d_out16 = dev_copy_of(ref16, (size_t)n * sizeof(uint16_t)); /* every value written? */
                rmsnorm_forward_bf16(NULL, ref16, rstd16, x, weight, tokens, dim, eps);
                rmsnorm_forward_bf16_cuda(&g_oc, d_out16, d_rstd, d_x, d_weight, tokens, dim, eps);
                finish_op("rmsnorm_forward_bf16_cuda");
                to_host(got16, d_out16, (size_t)n * sizeof(uint16_t));
                int64_t diffs = 0;
                err = bf16_output_error(what, ref16, got16, out_f32, tokens, dim, &diffs);
                CHECK(diffs == 0, "%s: forward bf16: %lld values are not the fp32 output rounded", what,
                      (long long)diffs);
                CHECK(err <= 8e-3, "%s: forward bf16 error %g", what, err);
                note(&fwd16, err);
                CHECK(memcmp(rstd16, rstd, (size_t)tokens * sizeof(float)) == 0, "%s: bf16 form's rstd differs",
                      what);
                bfp8_free(g_ctx, d_out16);
                free(out_f32), free(rstd16), free(ref16), free(got16);
            }

            /* backward from the CPU's rstd on both sides: the same inputs */
            float *d_dout = dev_copy_of(dout, (size_t)n * sizeof(float));
            float *d_dx = dev_copy_of(dx, (size_t)n * sizeof(float));
            float *d_dweight = dev_copy_of(dweight, (size_t)dim * sizeof(float));
            CHECK_OK(bfp8_copy_to_backend(g_ctx, d_rstd, rstd, (size_t)tokens * sizeof(float)));
            rmsnorm_backward(NULL, dx, dweight, dout, x, weight, rstd, tokens, dim);
            rmsnorm_backward_cuda(&g_oc, d_dx, d_dweight, d_dout, d_x, d_weight, d_rstd, tokens, dim);
            finish_op("rmsnorm_backward_cuda");
            to_host(got, d_dx, (size_t)n * sizeof(float));
            err = row_error(dx, got, tokens, dim);
            CHECK(err <= tol, "%s: backward dx error %g", what, err);
            note(&bwd, err);
            to_host(got, d_dweight, (size_t)dim * sizeof(float));
            err = row_error(dweight, got, 1, dim);
            CHECK(err <= tol, "%s: backward dweight error %g", what, err);
            note(&bwd, err);

            /* the bf16 form (dout in bf16): the fp32 form on dout widened, bit for bit (one kernel source), and
             * the CPU's bf16 form within the bound; dx and dweight start from the values just computed */
            {
                uint16_t *dout16 = test_malloc((size_t)n * sizeof(uint16_t));
                float *dout_w = test_malloc((size_t)n * sizeof(float));
                for (int64_t i = 0; i < n; ++i) {
                    dout16[i] = bfp8_encode_bf16(dout[i]);
                    dout_w[i] = bfp8_decode_bf16(dout16[i]);
                }
                float *dx_w = test_malloc((size_t)n * sizeof(float)), *dw_w = test_malloc((size_t)dim * sizeof(float));
                float *dx16 = test_malloc((size_t)n * sizeof(float)), *dw16 = test_malloc((size_t)dim * sizeof(float));
                uint16_t *d_dout16 = dev_copy_of(dout16, (size_t)n * sizeof(uint16_t));
                float *d_dout_w = dev_copy_of(dout_w, (size_t)n * sizeof(float));
                float *d_dx2 = dev_copy_of(dx, (size_t)n * sizeof(float));
                float *d_dw2 = dev_copy_of(dweight, (size_t)dim * sizeof(float));
                CHECK_OK(bfp8_copy_to_backend(g_ctx, d_dx, dx, (size_t)n * sizeof(float)));
                CHECK_OK(bfp8_copy_to_backend(g_ctx, d_dweight, dweight, (size_t)dim * sizeof(float)));
                rmsnorm_backward_cuda(&g_oc, d_dx, d_dweight, d_dout_w, d_x, d_weight, d_rstd, tokens, dim);
                rmsnorm_backward_bf16_cuda(&g_oc, d_dx2, d_dw2, d_dout16, d_x, d_weight, d_rstd, tokens, dim);
                finish_op("rmsnorm_backward_bf16_cuda");
                to_host(dx_w, d_dx, (size_t)n * sizeof(float));
                to_host(dw_w, d_dweight, (size_t)dim * sizeof(float));
                to_host(dx16, d_dx2, (size_t)n * sizeof(float));
                to_host(dw16, d_dw2, (size_t)dim * sizeof(float));
                int64_t diffs = test_compare_f32_bits(what, dx_w, dx16, n);
                diffs += test_compare_f32_bits(what, dw_w, dw16, dim);
                CHECK(diffs == 0, "%s: backward bf16: %lld floats differ from the fp32 form on dout widened", what,
                      (long long)diffs);
                rmsnorm_backward_bf16(NULL, dx, dweight, dout16, x, weight, rstd, tokens, dim);
                err = row_error(dx, dx16, tokens, dim);
                const double err_w = row_error(dweight, dw16, 1, dim);
                if (err_w > err) err = err_w;
                CHECK(err <= tol, "%s: backward bf16 error %g", what, err);
                note(&bwd16, err);
                bfp8_free(g_ctx, d_dout16);
                bfp8_free(g_ctx, d_dout_w);
                bfp8_free(g_ctx, d_dx2);
                bfp8_free(g_ctx, d_dw2);
                free(dout16), free(dout_w), free(dx_w), free(dw_w), free(dx16), free(dw16);
            }

            bfp8_free(g_ctx, d_x);
            bfp8_free(g_ctx, d_weight);
            bfp8_free(g_ctx, d_out);
            bfp8_free(g_ctx, d_rstd);
            bfp8_free(g_ctx, d_dout);
            bfp8_free(g_ctx, d_dx);
            bfp8_free(g_ctx, d_dweight);
            free(x);
            free(weight);
            free(out);
            free(rstd);
            free(dout);
            free(dx);
            free(dweight);
            free(got);
        }
    print_summary(&fwd);
    print_summary(&fwd16);
    print_summary(&bwd);
    print_summary(&bwd16);
}

/* ------------------------------------------------------------------------ */
/* RoPE                                                                      */

static void test_rope(test_rng *rng) {
    const double tol = 1e-6;
    op_summary fwd = {"rope_forward", "(row-relative; bound 1e-6)", 0, 0};
    op_summary bwd = {"rope_backward", "(row-relative; bound 1e-6)", 0, 0};
    /* batch, seq, heads, head_dim: vector and scalar paths, an odd head_dim
     * (its last element is not rotated), K at offset dim (misaligned when
     * dim is not a multiple of 4) */
    const int64_t cases[][4] = {{1, 1, 1, 2}, {2, 3, 4, 64}, {1, 130, 3, 96}, {3, 127, 2, 10}, {2, 5, 3, 7},
                                {1, 17, 32, 128}};
    for (int ci = 0; ci < COUNT_OF(cases); ++ci) {
        const int64_t batch = cases[ci][0], seq = cases[ci][1], heads = cases[ci][2], head_dim = cases[ci][3];
        const int64_t dim = heads * head_dim, row_stride = 3 * dim, n = batch * seq * row_stride;
        const int64_t half = head_dim / 2;
        float *cos_table = test_malloc((size_t)(seq * half) * sizeof(float));
        float *sin_table = test_malloc((size_t)(seq * half) * sizeof(float));
        rope_tables(cos_table, sin_table, seq, head_dim, 10000.0f);
        float *d_cos = dev_copy_of(cos_table, (size_t)(seq * half) * sizeof(float));
        float *d_sin = dev_copy_of(sin_table, (size_t)(seq * half) * sizeof(float));
        float *got = test_malloc((size_t)n * sizeof(float));
        char what[80];
        snprintf(what, sizeof what, "rope batch %lld seq %lld heads %lld head_dim %lld", (long long)batch,
                 (long long)seq, (long long)heads, (long long)head_dim);
        for (int backward = 0; backward < 2; ++backward) {
            float *qkv = random_floats(n, 1.0f, rng);
            float *d_qkv = dev_copy_of(qkv, (size_t)n * sizeof(float));
            for (int part = 0; part < 2; ++part) { /* Q, then K */
                if (backward) {
                    rope_backward(NULL, qkv + part * dim, batch, seq, heads, head_dim, row_stride, cos_table,
                                  sin_table);
                    rope_backward_cuda(&g_oc, d_qkv + part * dim, batch, seq, heads, head_dim, row_stride, d_cos,
                                       d_sin);
                    finish_op("rope_backward_cuda");
                } else {
                    rope_forward(NULL, qkv + part * dim, batch, seq, heads, head_dim, row_stride, cos_table, sin_table);
                    rope_forward_cuda(&g_oc, d_qkv + part * dim, batch, seq, heads, head_dim, row_stride, d_cos, d_sin);
                    finish_op("rope_forward_cuda");
                }
            }
            to_host(got, d_qkv, (size_t)n * sizeof(float));
            const double err = row_error(qkv, got, batch * seq, row_stride); /* V must be untouched too */
            CHECK(err <= tol, "%s: %s error %g", what, backward ? "backward" : "forward", err);
            note(backward ? &bwd : &fwd, err);
            bfp8_free(g_ctx, d_qkv);
            free(qkv);
        }
        bfp8_free(g_ctx, d_cos);
        bfp8_free(g_ctx, d_sin);
        free(cos_table);
        free(sin_table);
        free(got);
    }
    print_summary(&fwd);
    print_summary(&bwd);
}

/* ------------------------------------------------------------------------ */
/* SwiGLU                                                                    */

static void test_swiglu(test_rng *rng) {
    const double tol = 2e-6;
    op_summary fwd = {"swiglu_forward", "(row-relative; bound 2e-6)", 0, 0};
    op_summary bwd = {"swiglu_backward", "(row-relative; bound 2e-6)", 0, 0};
    op_summary fwd16 = {"swiglu_forward_bf16", "(row-relative; bound 8e-3; = fp32 op rounded)", 0, 0};
    op_summary bwd16 = {"swiglu_backward_bf16", "(row-relative; bound 8e-3; = fp32 op rounded)", 0, 0};
    const int64_t hiddens[] = {1, 100, 5632};
    for (int ti = 0; ti < COUNT_OF(kTokens); ++ti)
        for (int hi = 0; hi < COUNT_OF(hiddens); ++hi) {
            const int64_t tokens = kTokens[ti], hidden = hiddens[hi], n = tokens * hidden;
            float *gate_up = random_floats(2 * n, 3.0f, rng);
            if (hidden > 2) { /* exp(-gate) overflowing to Inf, and underflowing to 0 */
                gate_up[0] = -100.0f;
                gate_up[1] = 100.0f;
            }
            float *out = random_floats(n, 1.0f, rng), *dout = random_floats(n, 1.0f, rng);
            float *dgate_up = random_floats(2 * n, 1.0f, rng);
            float *d_gate_up = dev_copy_of(gate_up, (size_t)(2 * n) * sizeof(float));
            float *d_out = dev_copy_of(out, (size_t)n * sizeof(float));
            float *d_dout = dev_copy_of(dout, (size_t)n * sizeof(float));
            float *d_dgate_up = dev_copy_of(dgate_up, (size_t)(2 * n) * sizeof(float));
            float *got = test_malloc((size_t)(2 * n) * sizeof(float));
            char what[64];
            snprintf(what, sizeof what, "swiglu tokens %lld hidden %lld", (long long)tokens, (long long)hidden);

            swiglu_forward(NULL, out, gate_up, tokens, hidden);
            swiglu_forward_cuda(&g_oc, d_out, d_gate_up, tokens, hidden);
            finish_op("swiglu_forward_cuda");
            to_host(got, d_out, (size_t)n * sizeof(float));
            double err = row_error(out, got, tokens, hidden);
            CHECK(err <= tol, "%s: forward error %g", what, err);
            note(&fwd, err);

            swiglu_backward(NULL, dgate_up, dout, gate_up, tokens, hidden);
            swiglu_backward_cuda(&g_oc, d_dgate_up, d_dout, d_gate_up, tokens, hidden);
            finish_op("swiglu_backward_cuda");
            to_host(got, d_dgate_up, (size_t)(2 * n) * sizeof(float));
            err = row_error(dgate_up, got, tokens, 2 * hidden);
            CHECK(err <= tol, "%s: backward error %g", what, err);
            note(&bwd, err);

            /* the bf16 forms (gate_up and dout in bf16), against the fp32 forms on gate_up widened and the CPU's bf16
             * forms */
            {
                uint16_t *gu16 = test_malloc((size_t)(2 * n) * sizeof(uint16_t));
                uint16_t *dout16 = test_malloc((size_t)n * sizeof(uint16_t));
                float *widened = test_malloc((size_t)(2 * n) * sizeof(float));
                float *dout_w = test_malloc((size_t)n * sizeof(float));
                for (int64_t i = 0; i < 2 * n; ++i) {
                    gu16[i] = bfp8_encode_bf16(gate_up[i]);
                    widened[i] = bfp8_decode_bf16(gu16[i]);
                }
                for (int64_t i = 0; i < n; ++i) {
                    dout16[i] = bfp8_encode_bf16(dout[i]);
                    dout_w[i] = bfp8_decode_bf16(dout16[i]);
                }
                uint16_t *d_dout16 = dev_copy_of(dout16, (size_t)n * sizeof(uint16_t));
                float *d_dout_w = dev_copy_of(dout_w, (size_t)n * sizeof(float));
                uint16_t *d_gu16 = dev_copy_of(gu16, (size_t)(2 * n) * sizeof(uint16_t));
                float *d_widened = dev_copy_of(widened, (size_t)(2 * n) * sizeof(float));
                float *f32 = test_malloc((size_t)(2 * n) * sizeof(float));
                uint16_t *ref16 = test_malloc((size_t)(2 * n) * sizeof(uint16_t));
                uint16_t *got16 = test_malloc((size_t)(2 * n) * sizeof(uint16_t));
                memset(ref16, 0xab, (size_t)(2 * n) * sizeof(uint16_t));
                uint16_t *d_16 = dev_copy_of(ref16, (size_t)(2 * n) * sizeof(uint16_t)); /* every value written? */
                int64_t diffs = 0;
                swiglu_forward_cuda(&g_oc, d_out, d_widened, tokens, hidden);
                finish_op("swiglu_forward_cuda (widened)");
                to_host(f32, d_out, (size_t)n * sizeof(float));
                swiglu_forward_bf16(NULL, ref16, gu16, tokens, hidden);
                swiglu_forward_bf16_cuda(&g_oc, d_16, d_gu16, tokens, hidden);
                finish_op("swiglu_forward_bf16_cuda");
                to_host(got16, d_16, (size_t)n * sizeof(uint16_t));
                err = bf16_output_error(what, ref16, got16, f32, tokens, hidden, &diffs);
                CHECK(diffs == 0, "%s: forward bf16: %lld values are not the fp32 output rounded", what,
                      (long long)diffs);
                CHECK(err <= 8e-3, "%s: forward bf16 error %g", what, err);
                note(&fwd16, err);

                swiglu_backward_cuda(&g_oc, d_dgate_up, d_dout_w, d_widened, tokens, hidden);
                finish_op("swiglu_backward_cuda (widened)");
                to_host(f32, d_dgate_up, (size_t)(2 * n) * sizeof(float));
                swiglu_backward_bf16(NULL, ref16, dout16, gu16, tokens, hidden);
                swiglu_backward_bf16_cuda(&g_oc, d_16, d_dout16, d_gu16, tokens, hidden);
                finish_op("swiglu_backward_bf16_cuda");
                to_host(got16, d_16, (size_t)(2 * n) * sizeof(uint16_t));
                err = bf16_output_error(what, ref16, got16, f32, tokens, 2 * hidden, &diffs);
                CHECK(diffs == 0, "%s: backward bf16: %lld values are not the fp32 output rounded", what,
                      (long long)diffs);
                CHECK(err <= 8e-3, "%s: backward bf16 error %g", what, err);
                note(&bwd16, err);
                bfp8_free(g_ctx, d_16);
                bfp8_free(g_ctx, d_gu16);
                bfp8_free(g_ctx, d_widened);
                bfp8_free(g_ctx, d_dout16);
                bfp8_free(g_ctx, d_dout_w);
                free(gu16), free(widened), free(f32), free(ref16), free(got16), free(dout16), free(dout_w);
            }

            bfp8_free(g_ctx, d_gate_up);
            bfp8_free(g_ctx, d_out);
            bfp8_free(g_ctx, d_dout);
            bfp8_free(g_ctx, d_dgate_up);
            free(gate_up);
            free(out);
            free(dout);
            free(dgate_up);
            free(got);
        }
    print_summary(&fwd);
    print_summary(&bwd);
    print_summary(&fwd16);
    print_summary(&bwd16);
}

/* ------------------------------------------------------------------------ */
/* Cross-entropy                                                             */

/* bf16 steps between two bf16 values (their floats are 65536 float ulps per
 * bf16 ulp); NaN and NaN are 0 apart. */
static int64_t bf16_ulp_distance(uint16_t a, uint16_t b) {
    const int64_t d = ulp_distance(bfp8_decode_bf16(a), bfp8_decode_bf16(b));
    return d == INT64_MAX ? d : d / 65536;
}

/* One shape: the row losses with fp32 dlogits out of place, in place, with
 * bf16 dlogits and with none, and their mean. nonfinite plants a NaN, a +Inf
 * and a -Inf in rows 0, 1, 2 (off the target): NaN, NaN and a finite loss on
 * the CPU, which the GPU must match. The bf16 dlogits are roundings of fp32
 * values that differ by an ulp or two: at most one bf16 step apart. */
static void cross_entropy_case(test_rng *rng, int64_t tokens, int64_t vocab, float logit_scale, int nonfinite,
                               op_summary *rows_sum, op_summary *grad_sum, op_summary *bf16_sum,
                               op_summary *mean_sum) {
    const double tol = 1e-5;
    const int64_t n = tokens * vocab;
    float *logits = random_floats(n, logit_scale, rng);
    int32_t *targets = test_malloc((size_t)tokens * sizeof *targets);
    for (int64_t t = 0; t < tokens; ++t) targets[t] = (int32_t)test_rng_range(rng, 0, vocab - 1);
    if (nonfinite) {
        const float planted[3] = {NAN, INFINITY, -INFINITY};
        for (int64_t t = 0; t < 3 && t < tokens; ++t) logits[t * vocab + (targets[t] + 1) % vocab] = planted[t];
    }
    float *losses = random_floats(tokens, 1.0f, rng), *dlogits = random_floats(n, 1.0f, rng);
    const float scale = 1.0f / (float)tokens;
    float *d_logits = dev_copy_of(logits, (size_t)n * sizeof(float));
    int32_t *d_targets = dev_copy_of(targets, (size_t)tokens * sizeof *targets);
    float *d_losses = dev_copy_of(losses, (size_t)tokens * sizeof(float));
    float *d_dlogits = dev_copy_of(dlogits, (size_t)n * sizeof(float));
    uint16_t *bf16 = test_malloc((size_t)n * sizeof(uint16_t)), *got_bf16 = test_malloc((size_t)n * sizeof(uint16_t));
    uint16_t *d_bf16 = dev_alloc((size_t)n * sizeof(uint16_t));
    float *got = test_malloc((size_t)n * sizeof(float)), *got_losses = test_malloc((size_t)tokens * sizeof(float));
    char what[96];
    snprintf(what, sizeof what, "cross_entropy tokens %lld vocab %lld scale %g%s", (long long)tokens,
             (long long)vocab, logit_scale, nonfinite ? " non-finite" : "");

    cross_entropy_rows(NULL, losses, dlogits, BFP8_F32, logits, targets, tokens, vocab, scale);
    cross_entropy_rows_cuda(&g_oc, d_losses, d_dlogits, BFP8_F32, d_logits, d_targets, tokens, vocab, scale);
    finish_op("cross_entropy_rows_cuda");
    to_host(got_losses, d_losses, (size_t)tokens * sizeof(float));
    double err = row_error(losses, got_losses, tokens, 1);
    CHECK(err <= tol, "%s: row losses error %g", what, err);
    note(rows_sum, err);
    to_host(got, d_dlogits, (size_t)n * sizeof(float));
    err = row_error(dlogits, got, tokens, vocab);
    CHECK(err <= tol, "%s: dlogits error %g", what, err);
    note(grad_sum, err);

    const double mean = loss_mean(NULL, losses, tokens);
    const double mean_gpu = loss_mean_cuda(&g_oc, d_losses, tokens);
    finish_op("loss_mean_cuda");
    err = isnan(mean) ? (isnan(mean_gpu) ? 0.0 : INFINITY) : fabs(mean - mean_gpu) / (1.0 + fabs(mean));
    CHECK(err <= tol, "%s: mean %.9g vs %.9g", what, mean_gpu, mean);
    note(mean_sum, err);

    /* no gradient: the same losses, bit for bit */
    float *d_losses_only = dev_alloc((size_t)tokens * sizeof(float));
    float *losses_only = test_malloc((size_t)tokens * sizeof(float));
    cross_entropy_rows_cuda(&g_oc, d_losses_only, NULL, BFP8_F32, d_logits, d_targets, tokens, vocab, scale);
    finish_op("cross_entropy_rows_cuda (losses only)");
    to_host(losses_only, d_losses_only, (size_t)tokens * sizeof(float));
    CHECK(memcmp(losses_only, got_losses, (size_t)tokens * sizeof(float)) == 0,
          "%s: the losses without a gradient differ from those with one", what);

    /* bf16 dlogits */
    cross_entropy_rows(NULL, losses, bf16, BFP8_BF16, logits, targets, tokens, vocab, scale);
    cross_entropy_rows_cuda(&g_oc, d_losses, d_bf16, BFP8_BF16, d_logits, d_targets, tokens, vocab, scale);
    finish_op("cross_entropy_rows_cuda (bf16)");
    to_host(got_bf16, d_bf16, (size_t)n * sizeof(uint16_t));
    int64_t worst = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t d = bf16_ulp_distance(bf16[i], got_bf16[i]);
        if (d > worst) worst = d;
    }
    CHECK(worst <= 1, "%s: bf16 dlogits %lld bf16 steps apart", what, (long long)worst);
    note(bf16_sum, (double)worst);

    /* in place: dlogits is logits */
    cross_entropy_rows(NULL, losses, logits, BFP8_F32, logits, targets, tokens, vocab, scale);
    cross_entropy_rows_cuda(&g_oc, d_losses, d_logits, BFP8_F32, d_logits, d_targets, tokens, vocab, scale);
    finish_op("cross_entropy_rows_cuda (in place)");
    to_host(got, d_logits, (size_t)n * sizeof(float));
    err = row_error(logits, got, tokens, vocab);
    CHECK(err <= tol, "%s: in-place dlogits error %g", what, err);
    note(grad_sum, err);
    to_host(got_losses, d_losses, (size_t)tokens * sizeof(float));
    err = row_error(losses, got_losses, tokens, 1);
    CHECK(err <= tol, "%s: in-place row losses error %g", what, err);
    note(rows_sum, err);

    bfp8_free(g_ctx, d_logits);
    bfp8_free(g_ctx, d_targets);
    bfp8_free(g_ctx, d_losses);
    bfp8_free(g_ctx, d_losses_only);
    bfp8_free(g_ctx, d_dlogits);
    bfp8_free(g_ctx, d_bf16);
    free(logits), free(targets), free(losses), free(losses_only), free(dlogits);
    free(bf16), free(got_bf16), free(got), free(got_losses);
}

static void test_cross_entropy(test_rng *rng) {
    op_summary rows = {"cross_entropy_rows", "(losses, row-relative; bound 1e-5)", 0, 0};
    op_summary grad = {"cross_entropy_rows", "(fp32 dlogits, row-relative; bound 1e-5)", 0, 0};
    op_summary bf16 = {"cross_entropy_rows", "(bf16 dlogits, bf16 steps; bound 1)", 0, 0};
    op_summary mean = {"loss_mean", "(relative to 1 + |mean|; bound 1e-5)", 0, 0};
    const int64_t vocabs[] = {5, 1000, 1001, 32768};
    for (int ti = 0; ti < COUNT_OF(kTokens); ++ti)
        for (int vi = 0; vi < COUNT_OF(vocabs); ++vi)
            cross_entropy_case(rng, kTokens[ti], vocabs[vi], 2.0f, 0, &rows, &grad, &bf16, &mean);
    cross_entropy_case(rng, 130, 1000, 50.0f, 0, &rows, &grad, &bf16, &mean); /* the max shift matters */
    cross_entropy_case(rng, 4, 1000, 2.0f, 1, &rows, &grad, &bf16, &mean);
    cross_entropy_case(rng, 3, 1001, 2.0f, 1, &rows, &grad, &bf16, &mean);
    cross_entropy_case(rng, 5000, 37, 2.0f, 0, &rows, &grad, &bf16, &mean); /* many rows, a short vocabulary */
    print_summary(&rows);
    print_summary(&grad);
    print_summary(&bf16);
    print_summary(&mean);
}

/* ------------------------------------------------------------------------ */
/* Matrix products and transpose                                             */

static void test_matmul(test_rng *rng) {
    const double tol = 1e-5;
    op_summary sum = {"matmul_f32", "(row-relative; bound 1e-5)", 0, 0};
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {127, 64, 96}, {130, 1000, 127}, {64, 130, 2048}, {5, 3, 0}};
    for (int si = 0; si < COUNT_OF(shapes); ++si)
        for (int a_transposed = 0; a_transposed < 2; ++a_transposed)
            for (int accumulate = 0; accumulate < 2; ++accumulate) {
                const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                /* padded leading dimensions: the padding of C must stay as it was */
                const int64_t lda = (a_transposed ? M : K) + 3, ldb = N + 5, ldc = N + 2;
                const int64_t a_n = (a_transposed ? K : M) * lda, b_n = K * ldb, c_n = M * ldc;
                float *a = random_floats(a_n, 1.0f, rng), *b = random_floats(b_n, 1.0f, rng);
                float *c = random_floats(c_n, 1.0f, rng);
                float *d_a = dev_copy_of(a, (size_t)(a_n > 0 ? a_n : 1) * sizeof(float));
                float *d_b = dev_copy_of(b, (size_t)(b_n > 0 ? b_n : 1) * sizeof(float));
                float *d_c = dev_copy_of(c, (size_t)c_n * sizeof(float));
                float *got = test_malloc((size_t)c_n * sizeof(float));

                matmul_f32(NULL, c, ldc, a, lda, a_transposed, b, ldb, M, N, K, accumulate);
                matmul_f32_cuda(&g_oc, d_c, ldc, d_a, lda, a_transposed, d_b, ldb, M, N, K, accumulate);
                finish_op("matmul_f32_cuda");
                to_host(got, d_c, (size_t)c_n * sizeof(float));
                const double err = row_error(c, got, M, ldc);
                CHECK(err <= tol, "matmul M %lld N %lld K %lld a_transposed %d accumulate %d: error %g",
                      (long long)M, (long long)N, (long long)K, a_transposed, accumulate, err);
                note(&sum, err);

                bfp8_free(g_ctx, d_a);
                bfp8_free(g_ctx, d_b);
                bfp8_free(g_ctx, d_c);
                free(a);
                free(b);
                free(c);
                free(got);
            }
    print_summary(&sum);
}

/* bf16 operands: every product of two bf16 values is exact in fp32, so both
 * sides sum the same terms, in another order: the fp32 bound. */
static void test_matmul_bf16(test_rng *rng) {
    const double tol = 1e-5;
    op_summary sum = {"matmul_bf16", "(row-relative; bound 1e-5)", 0, 0};
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {127, 64, 96}, {130, 1000, 127}, {64, 130, 2048}, {5, 3, 0}};
    for (int si = 0; si < COUNT_OF(shapes); ++si)
        for (int form = 0; form < 8; ++form) {
            const int a_transposed = form & 1, b_transposed = form >> 1 & 1, accumulate = form >> 2 & 1;
            const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
            const float alpha = accumulate ? 0.75f : 1.0f;
            const int64_t lda = (a_transposed ? M : K) + 3, ldb = (b_transposed ? K : N) + 5, ldc = N + 2;
            const int64_t a_n = (a_transposed ? K : M) * lda, b_n = (b_transposed ? N : K) * ldb, c_n = M * ldc;
            float *af = random_floats(a_n, 1.0f, rng), *bf = random_floats(b_n, 1.0f, rng);
            float *c = random_floats(c_n, 1.0f, rng);
            uint16_t *a = test_malloc((size_t)(a_n > 0 ? a_n : 1) * sizeof(uint16_t));
            uint16_t *b = test_malloc((size_t)(b_n > 0 ? b_n : 1) * sizeof(uint16_t));
            for (int64_t i = 0; i < a_n; ++i) a[i] = bfp8_encode_bf16(af[i]);
            for (int64_t i = 0; i < b_n; ++i) b[i] = bfp8_encode_bf16(bf[i]);
            uint16_t *d_a = dev_copy_of(a, (size_t)(a_n > 0 ? a_n : 1) * sizeof(uint16_t));
            uint16_t *d_b = dev_copy_of(b, (size_t)(b_n > 0 ? b_n : 1) * sizeof(uint16_t));
            float *d_c = dev_copy_of(c, (size_t)c_n * sizeof(float));
            float *got = test_malloc((size_t)c_n * sizeof(float));

            matmul_bf16(NULL, c, ldc, a, lda, a_transposed, b, ldb, b_transposed, M, N, K, alpha, accumulate);
            matmul_bf16_cuda(&g_oc, d_c, ldc, d_a, lda, a_transposed, d_b, ldb, b_transposed, M, N, K, alpha,
                             accumulate);
            finish_op("matmul_bf16_cuda");
            to_host(got, d_c, (size_t)c_n * sizeof(float));
            const double err = row_error(c, got, M, ldc);
            CHECK(err <= tol, "matmul_bf16 M %lld N %lld K %lld a_t %d b_t %d accumulate %d: error %g", (long long)M,
                  (long long)N, (long long)K, a_transposed, b_transposed, accumulate, err);
            note(&sum, err);

            bfp8_free(g_ctx, d_a);
            bfp8_free(g_ctx, d_b);
            bfp8_free(g_ctx, d_c);
            free(af), free(bf), free(a), free(b), free(c), free(got);
        }
    print_summary(&sum);
}

static void test_transpose(test_rng *rng) {
    op_summary sum = {"transpose_f32", "(differing floats; must be 0)", 0, 0};
    const int64_t rows_list[] = {1, 3, 127, 130, 1000}, cols_list[] = {1, 33, 64, 1000};
    for (int ri = 0; ri < COUNT_OF(rows_list); ++ri)
        for (int ci = 0; ci < COUNT_OF(cols_list); ++ci) {
            const int64_t rows = rows_list[ri], cols = cols_list[ci], n = rows * cols;
            float *src = random_floats(n, 1.0f, rng), *dst = random_floats(n, 1.0f, rng);
            float *d_src = dev_copy_of(src, (size_t)n * sizeof(float));
            float *d_dst = dev_copy_of(dst, (size_t)n * sizeof(float));
            float *got = test_malloc((size_t)n * sizeof(float));
            char what[64];
            snprintf(what, sizeof what, "transpose %lld x %lld", (long long)rows, (long long)cols);
            transpose_f32(NULL, dst, src, rows, cols);
            transpose_f32_cuda(&g_oc, d_dst, d_src, rows, cols);
            finish_op("transpose_f32_cuda");
            to_host(got, d_dst, (size_t)n * sizeof(float));
            const int64_t diffs = test_compare_f32_bits(what, dst, got, n);
            CHECK(diffs == 0, "%s: %lld floats differ", what, (long long)diffs);
            note(&sum, (double)diffs);
            bfp8_free(g_ctx, d_src);
            bfp8_free(g_ctx, d_dst);
            free(src);
            free(dst);
            free(got);
        }
    print_summary(&sum);
}

/* ------------------------------------------------------------------------ */
/* AdamW and the gradient norm                                               */

static const int64_t kFlatSizes[] = {1, 1000, (1 << 20) + 3};

static void test_adamw(test_rng *rng) {
    op_summary sum = {"adamw_update", "(ulp of param, m, v; bound 2)", 0, 0};
    const adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    /* element offsets of param, m, v and of grad: aligned, a shared
     * misalignment (scalar head, then float4), and mismatched (all scalar) */
    const int offsets[][2] = {{0, 0}, {1, 1}, {3, 3}, {0, 1}};
    for (int ni = 0; ni < COUNT_OF(kFlatSizes); ++ni)
        for (int oi = 0; oi < COUNT_OF(offsets); ++oi)
            for (int decay = 0; decay < 2; ++decay) {
                const int64_t n = kFlatSizes[ni], total = n + 4;
                const int off = offsets[oi][0], goff = offsets[oi][1];
                const int64_t step = decay ? 1000 : 1;
                float *param = random_floats(total, 0.02f, rng), *grad = random_floats(total, 1e-3f, rng);
                float *m = random_floats(total, 1e-4f, rng), *v = random_floats(total, 1e-4f, rng);
                for (int64_t i = 0; i < total; ++i) v[i] *= v[i]; /* a second moment is >= 0 */
                float *d_param = dev_copy_of(param, (size_t)total * sizeof(float));
                float *d_grad = dev_copy_of(grad, (size_t)total * sizeof(float));
                float *d_m = dev_copy_of(m, (size_t)total * sizeof(float));
                float *d_v = dev_copy_of(v, (size_t)total * sizeof(float));
                float *got = test_malloc((size_t)total * sizeof(float));

                adamw_update(NULL, param + off, grad + goff, m + off, v + off, (size_t)n, &h, 0.7f, step, decay);
                adamw_update_cuda(&g_oc, d_param + off, d_grad + goff, d_m + off, d_v + off, (size_t)n, &h, 0.7f, step,
                                  decay);
                finish_op("adamw_update_cuda");
                int64_t worst = 0;
                const float *refs[3] = {param, m, v};
                const float *devs[3] = {d_param, d_m, d_v};
                for (int k = 0; k < 3; ++k) {
                    to_host(got, devs[k], (size_t)total * sizeof(float));
                    const int64_t d = max_ulp_distance(refs[k], got, total); /* the untouched ends too */
                    if (d > worst) worst = d;
                }
                CHECK(worst <= 2, "adamw n %lld offsets %d/%d decay %d: %lld ulp", (long long)n, off, goff, decay,
                      (long long)worst);
                note(&sum, (double)worst);

                bfp8_free(g_ctx, d_param);
                bfp8_free(g_ctx, d_grad);
                bfp8_free(g_ctx, d_m);
                bfp8_free(g_ctx, d_v);
                free(param);
                free(grad);
                free(m);
                free(v);
                free(got);
            }
    print_summary(&sum);
}

static void test_gradient_norm(test_rng *rng) {
    const double tol = 1e-10;
    op_summary sum = {"gradient_global_norm", "(relative; bound 1e-10)", 0, 0};
    for (int ni = 0; ni < COUNT_OF(kFlatSizes); ++ni)
        for (int off = 0; off < 2; ++off) {
            const int64_t n = kFlatSizes[ni];
            float *grad = random_floats(n + 1, 1e-2f, rng);
            if (n > 10) grad[7] = 300.0f; /* an outlier */
            float *d_grad = dev_copy_of(grad, (size_t)(n + 1) * sizeof(float));
            const double ref = gradient_global_norm(NULL, grad + off, (size_t)n);
            const double got = gradient_global_norm_cuda(&g_oc, d_grad + off, (size_t)n);
            finish_op("gradient_global_norm_cuda");
            const double again = gradient_global_norm_cuda(&g_oc, d_grad + off, (size_t)n);
            finish_op("gradient_global_norm_cuda");
            const double err = fabs(got - ref) / ref;
            CHECK(err <= tol, "norm n %lld offset %d: %.17g vs %.17g", (long long)n, off, got, ref);
            CHECK(memcmp(&got, &again, sizeof got) == 0, "norm n %lld: %.17g then %.17g (not deterministic)",
                  (long long)n, got, again);
            note(&sum, err);
            bfp8_free(g_ctx, d_grad);
            free(grad);
        }
    print_summary(&sum);
}

/* More than 2^31 floats (8.6 GB): zero them, plant a few values past 2^31,
 * and the norm must see exactly those. Skipped when the memory is not free. */
static void test_beyond_2_31(void) {
    const int64_t n = ((int64_t)1 << 31) + 5;
    float *d = NULL;
    if (bfp8_malloc(g_ctx, (void **)&d, (size_t)n * sizeof(float)) != BFP8_OK) {
        printf("%-24s skipped: %lld floats do not fit (%s)\n", "beyond 2^31 elements", (long long)n,
               bfp8_last_error());
        return;
    }
    zero_f32_cuda(&g_oc, d, n);
    finish_op("zero_f32_cuda (2^31 + 5)");
    const float tail[6] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}; /* elements n - 6 .. n - 1 */
    CHECK_OK(bfp8_copy_to_backend(g_ctx, d + n - 6, tail, sizeof tail));
    const double norm = gradient_global_norm_cuda(&g_oc, d, (size_t)n);
    finish_op("gradient_global_norm_cuda (2^31 + 5)");
    CHECK(norm == sqrt(91.0), "norm of 2^31 + 5 floats: %.17g, expected sqrt(91)", norm);
    printf("%-24s norm of 2^31 + 5 floats %.17g (expected %.17g)\n", "beyond 2^31 elements", norm, sqrt(91.0));
    bfp8_free(g_ctx, d);
}

/* ------------------------------------------------------------------------ */
/* Copies and bf16 conversions                                               */

static void test_copy_add_zero(test_rng *rng) {
    op_summary copy = {"copy_f32", "(differing floats; must be 0)", 0, 0};
    op_summary zero = {"zero_f32", "(differing floats; must be 0)", 0, 0};
    op_summary add = {"add_f32", "(differing floats; must be 0)", 0, 0};
    for (int ni = 0; ni < COUNT_OF(kFlatSizes); ++ni)
        for (int off = 0; off < 2; ++off) {
            const int64_t n = kFlatSizes[ni], total = n + 4;
            float *src = random_floats(total, 1.0f, rng), *dst = random_floats(total, 1.0f, rng);
            float *d_src = dev_copy_of(src, (size_t)total * sizeof(float));
            float *d_dst = dev_copy_of(dst, (size_t)total * sizeof(float));
            float *got = test_malloc((size_t)total * sizeof(float));
            char what[48];
            snprintf(what, sizeof what, "copy/zero n %lld offset %d", (long long)n, off);

            model_ops_cpu.copy_f32(NULL, dst + off, src + 1, n);
            copy_f32_cuda(&g_oc, d_dst + off, d_src + 1, n);
            finish_op("copy_f32_cuda");
            to_host(got, d_dst, (size_t)total * sizeof(float));
            int64_t diffs = test_compare_f32_bits(what, dst, got, total);
            CHECK(diffs == 0, "%s: copy, %lld floats differ", what, (long long)diffs);
            note(&copy, (double)diffs);

            /* dst += src, the source misaligned against dst when off = 0 (element-wise path) */
            model_ops_cpu.add_f32(NULL, dst + off, src + 1, n);
            add_f32_cuda(&g_oc, d_dst + off, d_src + 1, n);
            finish_op("add_f32_cuda");
            to_host(got, d_dst, (size_t)total * sizeof(float));
            diffs = test_compare_f32_bits(what, dst, got, total);
            CHECK(diffs == 0, "%s: add, %lld floats differ", what, (long long)diffs);
            note(&add, (double)diffs);
            model_ops_cpu.add_f32(NULL, dst + 2, src + 2, n); /* both at the same alignment (vector path) */
            add_f32_cuda(&g_oc, d_dst + 2, d_src + 2, n);
            finish_op("add_f32_cuda");
            to_host(got, d_dst, (size_t)total * sizeof(float));
            diffs = test_compare_f32_bits(what, dst, got, total);
            CHECK(diffs == 0, "%s: add (aligned alike), %lld floats differ", what, (long long)diffs);
            note(&add, (double)diffs);

            model_ops_cpu.zero_f32(NULL, dst + off, n);
            zero_f32_cuda(&g_oc, d_dst + off, n);
            finish_op("zero_f32_cuda");
            to_host(got, d_dst, (size_t)total * sizeof(float));
            diffs = test_compare_f32_bits(what, dst, got, total);
            CHECK(diffs == 0, "%s: zero, %lld floats differ", what, (long long)diffs);
            note(&zero, (double)diffs);

            bfp8_free(g_ctx, d_src);
            bfp8_free(g_ctx, d_dst);
            free(src);
            free(dst);
            free(got);
        }
    print_summary(&copy);
    print_summary(&add);
    print_summary(&zero);
}

/* Inputs for the bf16 rounding: the special cases first, then random bit
 * patterns (every exponent: NaNs, Infs, denormals included) and ordinary
 * values, alternating. */
static void fill_bf16_inputs(float *x, int64_t n, test_rng *rng) {
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, /* zeros, infinities */
        0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, /* quiet and signalling NaNs, both signs */
        0x7fffffffu, 0x7fa00000u,                           /* NaN payloads */
        0x00000001u, 0x80000001u, 0x007fffffu, 0x00008000u, /* denormals, one a tie */
        0x00018000u, 0x00007fffu,                           /* a tie that rounds up (odd), below a tie */
        0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu, /* near FLT_MAX: to Inf, tie to Inf, below */
        0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f807fffu, /* ties to even both ways, near ties */
    };
    for (int64_t i = 0; i < n; ++i) {
        if (i < (int64_t)(sizeof specials / sizeof specials[0]))
            x[i] = bfp8_float_of(specials[i]);
        else if (i % 2)
            x[i] = bfp8_float_of((uint32_t)test_rng_next(rng));
        else
            x[i] = (float)test_rng_normal(rng);
    }
}

static void test_bf16_conversions(test_rng *rng) {
    op_summary to16 = {"f32_to_bf16", "(differing bf16; must be 0)", 0, 0};
    op_summary from16 = {"bf16_to_f32", "(differing floats; must be 0)", 0, 0};
    op_summary add16 = {"add_bf16_f32", "(differing floats; must be 0)", 0, 0};
    for (int ni = 0; ni < COUNT_OF(kFlatSizes); ++ni)
        for (int off = 0; off < 2; ++off) {
            const int64_t n = kFlatSizes[ni] + 65536, total = n + 4; /* every bf16 pattern at least once */
            float *src = test_malloc((size_t)total * sizeof(float));
            fill_bf16_inputs(src, total, rng);
            uint16_t *half = test_malloc((size_t)total * sizeof(uint16_t));
            for (int64_t i = 0; i < total; ++i) half[i] = (uint16_t)(i < 65536 ? (uint64_t)i : test_rng_next(rng));
            float *dst = random_floats(total, 1.0f, rng);
            float *d_src = dev_copy_of(src, (size_t)total * sizeof(float));
            uint16_t *d_half = dev_copy_of(half, (size_t)total * sizeof(uint16_t));
            float *d_dst = dev_copy_of(dst, (size_t)total * sizeof(float));
            uint16_t *got16 = test_malloc((size_t)total * sizeof(uint16_t));
            float *got = test_malloc((size_t)total * sizeof(float));
            char what[48];
            snprintf(what, sizeof what, "bf16 n %lld offset %d", (long long)n, off);

            /* f32 -> bf16: src at offset 1 and dst at off, so the vector
             * path (both aligned alike) and the scalar one (not) both run */
            uint16_t *ref16 = host_copy_of(half, (size_t)total * sizeof(uint16_t));
            model_ops_cpu.f32_to_bf16(NULL, ref16 + off, src + 1, n);
            f32_to_bf16_cuda(&g_oc, d_half + off, d_src + 1, n);
            finish_op("f32_to_bf16_cuda");
            to_host(got16, d_half, (size_t)total * sizeof(uint16_t));
            int64_t diffs = test_compare_bytes(what, (const uint8_t *)ref16, 0, (const uint8_t *)got16, 0, 1,
                                               total * (int64_t)sizeof(uint16_t));
            CHECK(diffs == 0, "%s: f32_to_bf16, %lld bytes differ", what, (long long)diffs);
            note(&to16, (double)diffs);
            CHECK_OK(bfp8_copy_to_backend(g_ctx, d_half, half, (size_t)total * sizeof(uint16_t)));

            for (int add = 0; add < 2; ++add) {
                /* add = 0: bit for bit. add = 1: one IEEE addition, so the
                 * same bits too, except a NaN's payload (x86 and the GPU
                 * propagate different ones). */
                model_ops_cpu.bf16_to_f32(NULL, dst + off, half + 1, n, add);
                bf16_to_f32_cuda(&g_oc, d_dst + off, d_half + 1, n, add);
                finish_op("bf16_to_f32_cuda");
                to_host(got, d_dst, (size_t)total * sizeof(float));
                diffs = 0;
                for (int64_t i = 0; i < total; ++i)
                    if (bfp8_bits_of(dst[i]) != bfp8_bits_of(got[i]) && !(add && isnan(dst[i]) && isnan(got[i]))) {
                        if (diffs < 5)
                            fprintf(stderr, "  %s add %d [%lld]: %a vs %a\n", what, add, (long long)i, dst[i],
                                    got[i]);
                        ++diffs;
                    }
                CHECK(diffs == 0, "%s: bf16_to_f32 add %d, %lld floats differ", what, add, (long long)diffs);
                note(&from16, (double)diffs);
                /* the next round adds to what this one left, on both sides */
            }

            /* dst = a + f32(b): a out of place (at offset 1, so the scalar path runs when off = 0), then in
             * place (a = dst); one IEEE addition, the same bits except a NaN's payload */
            for (int in_place = 0; in_place < 2; ++in_place) {
                const float *a_host = in_place ? dst + off : src + 1;
                const float *a_dev = in_place ? d_dst + off : d_src + 1;
                model_ops_cpu.add_bf16_f32(NULL, dst + off, a_host, half + 1, n);
                add_bf16_f32_cuda(&g_oc, d_dst + off, a_dev, d_half + 1, n);
                finish_op("add_bf16_f32_cuda");
                to_host(got, d_dst, (size_t)total * sizeof(float));
                diffs = 0;
                for (int64_t i = 0; i < total; ++i)
                    if (bfp8_bits_of(dst[i]) != bfp8_bits_of(got[i]) && !(isnan(dst[i]) && isnan(got[i]))) {
                        if (diffs < 5)
                            fprintf(stderr, "  %s add_bf16_f32 [%lld]: %a vs %a\n", what, (long long)i, dst[i], got[i]);
                        ++diffs;
                    }
                CHECK(diffs == 0, "%s: add_bf16_f32 (in place %d), %lld floats differ", what, in_place,
                      (long long)diffs);
                note(&add16, (double)diffs);
            }

            bfp8_free(g_ctx, d_src);
            bfp8_free(g_ctx, d_half);
            bfp8_free(g_ctx, d_dst);
            free(src);
            free(half);
            free(dst);
            free(ref16);
            free(got16);
            free(got);
        }
    print_summary(&to16);
    print_summary(&from16);
    print_summary(&add16);
}

/* ------------------------------------------------------------------------ */
/* Empty sizes                                                               */

/* n <= 0 does nothing: no launch, no failure, whatever the pointers. */
static void test_empty_sizes(void) {
    embedding_forward_cuda(&g_oc, NULL, NULL, NULL, 0, 64);
    embedding_backward_cuda(&g_oc, NULL, NULL, NULL, 5, 0);
    rmsnorm_forward_cuda(&g_oc, NULL, NULL, NULL, NULL, 0, 64, 1e-5f);
    rmsnorm_backward_cuda(&g_oc, NULL, NULL, NULL, NULL, NULL, NULL, 3, 0);
    rope_forward_cuda(&g_oc, NULL, 0, 4, 2, 8, 48, NULL, NULL);
    rope_backward_cuda(&g_oc, NULL, 1, 4, 2, 1, 6, NULL, NULL); /* head_dim 1: no pairs */
    swiglu_forward_cuda(&g_oc, NULL, NULL, 0, 10);
    swiglu_backward_cuda(&g_oc, NULL, NULL, NULL, 3, 0);
    rmsnorm_forward_bf16_cuda(&g_oc, NULL, NULL, NULL, NULL, 0, 64, 1e-5f);
    rmsnorm_backward_bf16_cuda(&g_oc, NULL, NULL, NULL, NULL, NULL, NULL, 0, 64);
    swiglu_forward_bf16_cuda(&g_oc, NULL, NULL, 0, 10);
    swiglu_backward_bf16_cuda(&g_oc, NULL, NULL, NULL, 3, 0);
    const double mean = loss_mean_cuda(&g_oc, NULL, 0);
    CHECK(isnan(mean), "loss_mean_cuda of no tokens: %g, expected NaN (0 / 0, as the CPU)", mean);
    cross_entropy_rows_cuda(&g_oc, NULL, NULL, BFP8_BF16, NULL, NULL, 0, 10, 1.0f);
    matmul_f32_cuda(&g_oc, NULL, 4, NULL, 4, 0, NULL, 4, 0, 4, 4, 0);
    matmul_f32_cuda(&g_oc, NULL, 4, NULL, 4, 1, NULL, 4, 4, 0, 4, 1);
    matmul_bf16_cuda(&g_oc, NULL, 4, NULL, 4, 0, NULL, 4, 1, 0, 4, 4, 1.0f, 0);
    matmul_bf16_cuda(&g_oc, NULL, 4, NULL, 4, 1, NULL, 4, 0, 4, 0, 4, 1.0f, 1);
    transpose_f32_cuda(&g_oc, NULL, NULL, 0, 7);
    const adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    adamw_update_cuda(&g_oc, NULL, NULL, NULL, NULL, 0, &h, 1.0f, 1, 1);
    CHECK(gradient_global_norm_cuda(&g_oc, NULL, 0) == 0.0, "gradient_global_norm_cuda of nothing is not 0");
    copy_f32_cuda(&g_oc, NULL, NULL, 0);
    zero_f32_cuda(&g_oc, NULL, -1);
    f32_to_bf16_cuda(&g_oc, NULL, NULL, 0);
    bf16_to_f32_cuda(&g_oc, NULL, NULL, 0, 1);
    add_bf16_f32_cuda(&g_oc, NULL, NULL, NULL, 0);
    finish_op("empty sizes");
}

/* ------------------------------------------------------------------------ */

int main(void) {
    TEST_REQUIRE_GPU();
    if (bfp8_context_create(&g_ctx, BFP8_BACKEND_CUDA, 0) != BFP8_OK)
        test_fatal("bfp8_context_create: %s", bfp8_last_error());
    /* A fresh context runs on the legacy default stream (its stream is
     * NULL, src/cuda/runtime.cu): the ops go there too, so the context's
     * copies and synchronize order them. */
    model_ops_ctx_init(&g_oc, g_ctx, 0, 0);
    CHECK(g_oc.stream == NULL && g_oc.device, "model_ops_ctx_init: not the context's stream");
    const model_ops *ops = model_ops_for(g_ctx);
    CHECK(ops && ops->rmsnorm_forward == rmsnorm_forward_cuda, "model_ops_for(CUDA context) is not the CUDA table");

    test_rng rng;
    test_rng_seed(&rng, 20240611);
    test_empty_sizes();
    test_embedding(&rng);
    test_rmsnorm(&rng);
    test_rope(&rng);
    test_swiglu(&rng);
    test_cross_entropy(&rng);
    test_matmul(&rng);
    test_matmul_bf16(&rng);
    test_transpose(&rng);
    test_adamw(&rng);
    test_gradient_norm(&rng);
    test_copy_add_zero(&rng);
    test_bf16_conversions(&rng);
    test_beyond_2_31();

    model_ops_ctx_release(&g_oc);
    CHECK(g_oc.cuda == NULL, "model_ops_ctx_release left its CUDA state");
    CHECK_OK(model_ops_status(&g_oc));
    bfp8_context_destroy(g_ctx);
    return test_exit_code("test_model_ops_gpu");
}
