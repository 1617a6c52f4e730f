/*
 * test_attention_gpu.c - causal multi-head attention on the GPU
 * (attention_forward_cuda, attention_backward_cuda in
 * src/model/cuda/attention_cuda.cu) against the CPU reference
 * (src/model/attention.c) on ragged shapes: out, probs (with exact zeros
 * above the diagonal) and dqkv.
 *
 *   ctest --test-dir build -R test_attention_gpu --output-on-failure
 *   build/tests/model/test_attention_gpu        (exit 77: no GPU, skipped)
 *
 * Every device output and the scratch start as NaN bytes, so an element the
 * GPU leaves unwritten (or a read of scratch before it is written) fails the
 * comparison. Each case runs twice and the two results must agree bit for
 * bit: the products are cuBLAS fp32 GEMMs on one stream, which repeat exactly.
 * Then the same in TF32 and, for head_dim 64 and 128, flash attention
 * (flash_attention.cu: bf16 products, no probabilities kept; probs then holds
 * its log-sum-exps and a copy of out, and only out and dqkv are compared).
 */
#include <math.h>
#include <string.h>

#include "model/attention.h"
#include "model/model_ops.h"
#include "test_util.h"

static model_ops_ctx g_oc; /* what the CUDA ops run with */

/* max |gpu - cpu| <= TOLERANCE * (1 + max |cpu|) per tensor. Both sides are
 * fp32 with the same formulas; only the order of the sums differs (cuBLAS
 * against the CPU's blocked GEMM), which costs a few ulps of the largest
 * terms over sums of up to seq terms. On an H200 the worst case here is
 * 3.2e-7 (dqkv, seq 1024), so this bar leaves ~60x of headroom. */
#define TOLERANCE 2e-5
/* With model_ops_ctx.tf32 on the products round their inputs to TF32 (10
 * mantissa bits, ~5e-4 relative each): a bar that any indexing error would
 * still break by orders of magnitude. */
#define TF32_TOLERANCE 2e-2
/* Flash attention rounds q, k, v, dout and P to bf16 (8 mantissa bits, ~2e-3
 * relative each) before its products; the error grows with the head size
 * and the sums over the keys. An indexing error or a missing mask is O(1). */
#define FLASH_TOLERANCE 3e-2

/* q and k are N(0, 1) * QK_SCALE: the scaled scores then have a standard
 * deviation of QK_SCALE^2 (~1.6), so a row's softmax is neither flat nor
 * one-hot; v and dout are N(0, 1). */
#define QK_SCALE 1.25

typedef struct attention_case {
    int64_t batch, seq, n_heads, head_dim;
} attention_case;

/* The GPU products go in blocks of 256 query rows (kSeqBlock in
 * attention_cuda.cu): seq below one block, one row past one (257), several
 * with a ragged last one (600: 256 + 256 + 88) and several whole (1024). */
static const attention_case cases[] = {
    {1, 1, 1, 2},     {2, 7, 3, 6},    {1, 33, 2, 64},  {4, 65, 5, 18},
    {3, 130, 4, 32},  {2, 257, 2, 128}, {1, 600, 3, 64}, {2, 1024, 4, 64},
};

/* max |got - ref| / (1 + max |ref|); infinity when got holds a non-finite
 * value (the references are finite), so NaN garbage cannot slip through a
 * comparison that is false for NaN. */
static double scaled_max_error(const float *ref, const float *got, int64_t n) {
    double max_ref = 0.0, max_diff = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        if (!isfinite(got[i])) return INFINITY;
        const double diff = fabs((double)got[i] - (double)ref[i]);
        max_diff = diff > max_diff ? diff : max_diff;
        max_ref = fabs((double)ref[i]) > max_ref ? fabs((double)ref[i]) : max_ref;
    }
    return max_diff / (1.0 + max_ref);
}

/* Elements of probs above the diagonal (s > t) that are not exactly zero. */
static int64_t nonzero_above_diagonal(const float *probs, int64_t batch_heads, int64_t seq) {
    int64_t bad = 0;
    for (int64_t bh = 0; bh < batch_heads; ++bh)
        for (int64_t t = 0; t < seq; ++t)
            for (int64_t s = t + 1; s < seq; ++s)
                if (probs[(bh * seq + t) * seq + s] != 0.0f) ++bad;
    return bad;
}

static void *device_alloc(bfp8_context *ctx, size_t bytes) {
    void *ptr = NULL;
    if (bfp8_malloc(ctx, &ptr, bytes) != BFP8_OK)
        test_fatal("bfp8_malloc(%zu): %s", bytes, bfp8_last_error());
    return ptr;
}

static void upload(bfp8_context *ctx, void *dst, const void *host, size_t bytes) {
    if (bfp8_copy_to_backend(ctx, dst, host, bytes) != BFP8_OK)
        test_fatal("bfp8_copy_to_backend(%zu): %s", bytes, bfp8_last_error());
}

static void download(bfp8_context *ctx, void *host, const void *src, size_t bytes) {
    if (bfp8_copy_to_host(ctx, host, src, bytes) != BFP8_OK)
        test_fatal("bfp8_copy_to_host(%zu): %s", bytes, bfp8_last_error());
}

/* The device buffers of one case. */
typedef struct device_attention {
    float *qkv, *dout, *out, *probs, *scratch, *dqkv;
} device_attention;

/* Poison the outputs and scratch with NaN bytes (poison holds enough 0xFF
 * bytes), run forward then backward, and bring the outputs back. */
static void run_gpu(bfp8_context *ctx, const device_attention *d, const attention_case *tc,
                    const uint8_t *poison, size_t out_n, size_t probs_n, size_t scratch_n, size_t qkv_n,
                    float *out, float *probs, float *dqkv) {
    upload(ctx, d->out, poison, out_n * sizeof(float));
    upload(ctx, d->probs, poison, probs_n * sizeof(float));
    upload(ctx, d->scratch, poison, scratch_n * sizeof(float));
    upload(ctx, d->dqkv, poison, qkv_n * sizeof(float));

    attention_forward_cuda(&g_oc, d->out, d->probs, d->scratch, d->qkv, tc->batch, tc->seq, tc->n_heads, tc->head_dim);
    CHECK_OK(model_ops_status(&g_oc));
    attention_backward_cuda(&g_oc, d->dqkv, d->scratch, d->dout, d->qkv, d->probs, tc->batch, tc->seq, tc->n_heads,
                            tc->head_dim);
    CHECK_OK(model_ops_status(&g_oc));
    CHECK_OK(bfp8_context_synchronize(ctx));
    CHECK_OK(model_ops_status(&g_oc));

    download(ctx, out, d->out, out_n * sizeof(float));
    download(ctx, probs, d->probs, probs_n * sizeof(float));
    download(ctx, dqkv, d->dqkv, qkv_n * sizeof(float));
}

static void run_case(bfp8_context *ctx, const attention_case *tc, int index, double tolerance, int flash) {
    const int64_t batch = tc->batch, seq = tc->seq, n_heads = tc->n_heads, head_dim = tc->head_dim;
    const int64_t dim = n_heads * head_dim, tokens = batch * seq;
    const size_t qkv_n = (size_t)(tokens * 3 * dim), out_n = (size_t)(tokens * dim);
    const size_t square_n = (size_t)(batch * n_heads * seq * seq), flash_n = (size_t)(batch * n_heads * seq) + out_n;
    const size_t probs_n = flash && flash_n > square_n ? flash_n : square_n;
    size_t scratch_n = (size_t)attention_scratch_floats(batch, seq, n_heads, head_dim);
    const size_t flash_scratch_n = (size_t)flash_attention_scratch_floats(batch, seq, n_heads, head_dim);
    if (flash && flash_scratch_n > scratch_n) scratch_n = flash_scratch_n;

    /* Inputs. */
    float *qkv = test_malloc(qkv_n * sizeof(float)), *dout = test_malloc(out_n * sizeof(float));
    test_rng rng;
    test_rng_seed(&rng, 7000u + (uint64_t)index);
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < 3 * dim; ++i)
            qkv[t * 3 * dim + i] = (float)(test_rng_normal(&rng) * (i < 2 * dim ? QK_SCALE : 1.0));
    for (size_t i = 0; i < out_n; ++i) dout[i] = (float)test_rng_normal(&rng);

    /* CPU reference. */
    float *out_ref = test_malloc(out_n * sizeof(float)), *probs_ref = test_malloc(square_n * sizeof(float));
    float *dqkv_ref = test_malloc(qkv_n * sizeof(float));
    float *scratch_ref = test_malloc(scratch_n * sizeof(float));
    attention_forward(NULL, out_ref, probs_ref, scratch_ref, qkv, batch, seq, n_heads, head_dim);
    attention_backward(NULL, dqkv_ref, scratch_ref, dout, qkv, probs_ref, batch, seq, n_heads, head_dim);

    /* GPU, twice. */
    size_t poison_bytes = qkv_n > probs_n ? qkv_n : probs_n;
    poison_bytes = (poison_bytes > scratch_n ? poison_bytes : scratch_n) * sizeof(float);
    uint8_t *poison = test_malloc(poison_bytes);
    memset(poison, 0xff, poison_bytes);
    device_attention d = {
        .qkv = device_alloc(ctx, qkv_n * sizeof(float)),
        .dout = device_alloc(ctx, out_n * sizeof(float)),
        .out = device_alloc(ctx, out_n * sizeof(float)),
        .probs = device_alloc(ctx, probs_n * sizeof(float)),
        .scratch = device_alloc(ctx, scratch_n * sizeof(float)),
        .dqkv = device_alloc(ctx, qkv_n * sizeof(float)),
    };
    upload(ctx, d.qkv, qkv, qkv_n * sizeof(float));
    upload(ctx, d.dout, dout, out_n * sizeof(float));

    float *out = test_malloc(out_n * sizeof(float)), *probs = test_malloc(probs_n * sizeof(float));
    float *dqkv = test_malloc(qkv_n * sizeof(float));
    float *out2 = test_malloc(out_n * sizeof(float)), *probs2 = test_malloc(probs_n * sizeof(float));
    float *dqkv2 = test_malloc(qkv_n * sizeof(float));
    run_gpu(ctx, &d, tc, poison, out_n, probs_n, scratch_n, qkv_n, out, probs, dqkv);
    run_gpu(ctx, &d, tc, poison, out_n, probs_n, scratch_n, qkv_n, out2, probs2, dqkv2);

    /* Compare. */
    const double out_err = scaled_max_error(out_ref, out, (int64_t)out_n);
    const double probs_err = flash ? 0.0 : scaled_max_error(probs_ref, probs, (int64_t)probs_n);
    const double dqkv_err = scaled_max_error(dqkv_ref, dqkv, (int64_t)qkv_n);
    const int64_t above = flash ? 0 : nonzero_above_diagonal(probs, batch * n_heads, seq);
    printf("  batch %lld seq %lld heads %lld head_dim %lld: scaled max error out %.3g probs %.3g "
           "dqkv %.3g\n",
           (long long)batch, (long long)seq, (long long)n_heads, (long long)head_dim, out_err, probs_err,
           dqkv_err);
    CHECK(out_err <= tolerance, "case %d out error %.3g", index, out_err);
    CHECK(probs_err <= tolerance, "case %d probs error %.3g", index, probs_err);
    CHECK(dqkv_err <= tolerance, "case %d dqkv error %.3g", index, dqkv_err);
    CHECK(above == 0, "case %d: %lld probs above the diagonal are not 0", index, (long long)above);
    CHECK(test_compare_f32_bits("out rerun", out, out2, (int64_t)out_n) == 0, "case %d out not repeatable",
          index);
    CHECK(test_compare_f32_bits("probs rerun", probs, probs2, (int64_t)probs_n) == 0,
          "case %d probs not repeatable", index);
    CHECK(test_compare_f32_bits("dqkv rerun", dqkv, dqkv2, (int64_t)qkv_n) == 0,
          "case %d dqkv not repeatable", index);

    bfp8_free(ctx, d.qkv);
    bfp8_free(ctx, d.dout);
    bfp8_free(ctx, d.out);
    bfp8_free(ctx, d.probs);
    bfp8_free(ctx, d.scratch);
    bfp8_free(ctx, d.dqkv);
    free(qkv);
    free(dout);
    free(out_ref);
    free(probs_ref);
    free(dqkv_ref);
    free(scratch_ref);
    free(poison);
    free(out);
    free(probs);
    free(dqkv);
    free(out2);
    free(probs2);
    free(dqkv2);
}

/* The metric itself must flag a wrong value and NaN garbage. */
static void check_metric_catches_errors(void) {
    const float ref[3] = {1.0f, -2.0f, 0.5f};
    const float off[3] = {1.0f, -2.0f, 0.5f + 1e-3f};
    const float with_nan[3] = {1.0f, NAN, 0.5f};
    CHECK(scaled_max_error(ref, ref, 3) == 0.0, "equal arrays give an error");
    CHECK(scaled_max_error(ref, off, 3) > TOLERANCE, "a 1e-3 difference passes");
    CHECK(isinf(scaled_max_error(ref, with_nan, 3)), "NaN passes");
}

int main(void) {
    TEST_REQUIRE_GPU();
    check_metric_catches_errors();

    bfp8_context *ctx = NULL;
    CHECK_OK(bfp8_context_create(&ctx, BFP8_BACKEND_CUDA, 0));
    if (!ctx) return test_exit_code("test_attention_gpu");
    /* A fresh CUDA context works on the legacy default stream (NULL): the ops go there too. */
    model_ops_ctx_init(&g_oc, ctx, 0, 0);

    /* Empty shapes return at once, touching no pointer. */
    attention_forward_cuda(&g_oc, NULL, NULL, NULL, NULL, 0, 5, 2, 4);
    attention_backward_cuda(&g_oc, NULL, NULL, NULL, NULL, NULL, 2, 0, 2, 4);
    CHECK_OK(model_ops_status(&g_oc));

    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); ++i) run_case(ctx, &cases[i], i, TOLERANCE, 0);
    printf("the same in TF32 (model_ops_ctx.tf32):\n");
    g_oc.tf32 = 1;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); ++i) run_case(ctx, &cases[i], i, TF32_TOLERANCE, 0);
    g_oc.tf32 = 0;
    printf("flash attention (model_ops_ctx.flash_attention), head_dim 64 and 128:\n");
    g_oc.flash_attention = 1;
    int flash_cases = 0;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); ++i)
        if (model_cuda_flash_attention_supported(cases[i].head_dim)) {
            run_case(ctx, &cases[i], i, FLASH_TOLERANCE, 1);
            ++flash_cases;
        }
    /* tiles of 64 queries and keys: whole (64, 192), ragged (100, 130) */
    static const attention_case flash_only[] = {{3, 64, 1, 64}, {1, 130, 2, 128}, {2, 100, 3, 128}, {1, 192, 2, 64}};
    for (int i = 0; i < (int)(sizeof flash_only / sizeof flash_only[0]); ++i, ++flash_cases)
        run_case(ctx, &flash_only[i], 100 + i, FLASH_TOLERANCE, 1);
    CHECK(flash_cases >= 8, "only %d flash cases", flash_cases);
    g_oc.flash_attention = 0;

    model_ops_ctx_release(&g_oc);
    CHECK_OK(model_ops_status(&g_oc));
    bfp8_context_destroy(ctx);
    return test_exit_code("test_attention_gpu");
}
