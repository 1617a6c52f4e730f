/*
 * test_gemm_grid.c - every FP8 GEMM kind on the shape grid of
 * bench_gemm_grid (M tokens in {1, 8, 64, ..., 32768} x N, K in {256, ...,
 * 7168}), against an fp64 GEMM of the same fp8 data on the GPU: each
 * 128 x 128 output tile >= 40 dB (RECIPE.md's bar for the GEMMs on their own
 * quantized inputs). The operands are views of one random pool of e4m3 codes
 * (every finite code, with a zero row group at the start) and of random
 * scales, so that the whole grid needs one upload.
 *
 *   build/tests/gemm/test_gemm_grid            the whole grid, three kinds
 *   build/tests/gemm/test_gemm_grid --small    M <= 128, N, K <= 1024 (sized for compute-sanitizer)
 */
#include <math.h>
#include <string.h>

#include "gemm_reference_fp64.h"
#include "test_util.h"

#include <cuda_runtime_api.h>

#define BAR_DB 40.0

static const int64_t kM[] = {1, 8, 64, 128, 512, 2048, 8192, 32768};
static const int64_t kNK[] = {256, 512, 1024, 2048, 4096, 7168};
static const int64_t kSmallM[] = {1, 8, 64, 128};
static const int64_t kSmallNK[] = {256, 512, 1024};

typedef struct pool {
    uint8_t *codes; /* device */
    float *scales;  /* device */
    size_t code_bytes, scale_count;
} pool;

static void make_pool(pool *p, size_t code_bytes, size_t scale_count) {
    test_rng rng;
    test_rng_seed(&rng, 12345);
    uint8_t *codes = test_malloc(code_bytes);
    for (size_t i = 0; i < code_bytes; ++i) {
        uint8_t c = (uint8_t)(test_rng_next(&rng) >> 56);
        if ((c & 0x7f) == 0x7f) c ^= 1; /* no NaN codes */
        codes[i] = c;
    }
    memset(codes, 0, 16384); /* a zero row group (or more) at the start of every operand */
    float *scales = test_malloc(scale_count * sizeof(float));
    for (size_t i = 0; i < scale_count; ++i) scales[i] = (float)exp2(-8.0 * test_rng_uniform(&rng));
    if (cudaMalloc((void **)&p->codes, code_bytes) != cudaSuccess ||
        cudaMalloc((void **)&p->scales, scale_count * sizeof(float)) != cudaSuccess)
        test_fatal("cudaMalloc of the operand pool failed");
    cudaMemcpy(p->codes, codes, code_bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(p->scales, scales, scale_count * sizeof(float), cudaMemcpyHostToDevice);
    p->code_bytes = code_bytes;
    p->scale_count = scale_count;
    free(codes);
    free(scales);
}

/* A canonical-layout view of the pool; offset varies the data between operands. */
static bfp8_qmatrix view(const pool *p, int64_t rows, int64_t cols, bfp8_granularity gran, size_t offset) {
    bfp8_qmatrix q;
    size_t data_bytes = 0, scale_bytes = 0;
    if (bfp8_qmatrix_layout(&q, rows, cols, gran, &data_bytes, &scale_bytes) != BFP8_OK)
        test_fatal("bfp8_qmatrix_layout(%lld, %lld): %s", (long long)rows, (long long)cols, bfp8_last_error());
    offset = (offset / 16) * 16;
    if (data_bytes + offset > p->code_bytes) offset = 0;
    if (data_bytes > p->code_bytes || scale_bytes / 4 > p->scale_count) test_fatal("the pool is too small");
    q.data = p->codes + offset;
    q.scales = p->scales + (offset / 16 + scale_bytes / 4 <= p->scale_count ? offset / 16 : 0);
    return q;
}

typedef enum kind { K_1D2D_BF16, K_1D2D_F32, K_1D1D } kind;
static const char *const kKindNames[] = {"1d2d-bf16", "1d2d-f32", "1d1d"};

static void check_cell(bfp8_context *ctx, const pool *p, kind k, int64_t m, int64_t n, int64_t kk, void *d) {
    const int wgrad = k == K_1D1D;
    const int64_t rows = wgrad ? n : m, cols = wgrad ? kk : n, depth = wgrad ? m : kk;
    const bfp8_qmatrix a = view(p, rows, depth, BFP8_GRAN_1X128, 0);
    const bfp8_qmatrix b = view(p, cols, depth, wgrad ? BFP8_GRAN_1X128 : BFP8_GRAN_128X128, 4096 + 16 * (size_t)kk);
    const bfp8_dtype dtype = k == K_1D2D_BF16 ? BFP8_BF16 : BFP8_F32;
    bfp8_matrix out = {d, dtype, rows, cols, cols};
    /* (wgrad accumulates into zeros: the in-place add path the trainer runs) */
    cudaMemset(d, 0, (size_t)(rows * cols) * bfp8_dtype_size(dtype));
    const bfp8_status s = wgrad ? bfp8_gemm_1d1d(ctx, &a, &b, &out, &out) : bfp8_gemm_1d2d(ctx, &a, &b, &out);
    CHECK(s == BFP8_OK, "%s M=%lld N=%lld K=%lld: %s: %s", kKindNames[k], (long long)m, (long long)n, (long long)kk,
          bfp8_status_name(s), bfp8_last_error());
    if (s != BFP8_OK) return;
    if (bfp8_context_synchronize(ctx) != BFP8_OK) test_fatal("the GEMM failed: %s", bfp8_last_error());
    double worst = 0.0;
    if (gemm_reference_worst_tile_db(&a, &b, d, dtype, cols, &worst) != 0) test_fatal("the fp64 reference failed");
    CHECK(worst >= BAR_DB, "%s M=%lld N=%lld K=%lld: worst tile %.1f dB < %.0f", kKindNames[k], (long long)m,
          (long long)n, (long long)kk, worst, BAR_DB);
}

int main(int argc, char **argv) {
    int small = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--small") == 0) small = 1;
        else {
            fprintf(stderr, "usage: %s [--small]\n", argv[0]);
            return 2;
        }
    }
    TEST_REQUIRE_GPU();
    const int64_t *ms = small ? kSmallM : kM, *nks = small ? kSmallNK : kNK;
    const int nm = small ? 4 : 8, nnk = small ? 3 : 6;
    const int64_t max_m = ms[nm - 1], max_nk = nks[nnk - 1];
    pool p;
    const int64_t max_rows = max_m > max_nk ? max_m : max_nk; /* of an operand: M or N rows of K */
    make_pool(&p, (size_t)(max_rows * max_nk) + 8192 + 16 * (size_t)max_nk,
              (size_t)((max_nk / 128 + 1) * (max_m + 4)) + (size_t)(max_m * max_nk) / 16 / 16 + 4096);
    void *d = NULL;
    if (cudaMalloc(&d, (size_t)max_rows * (size_t)max_nk * 4) != cudaSuccess)
        test_fatal("cudaMalloc of the output failed");
    bfp8_context *ctx = NULL;
    CHECK_OK(bfp8_context_create(&ctx, BFP8_BACKEND_CUDA, 0));
    if (!ctx) return test_exit_code("test_gemm_grid");
    int cells = 0;
    for (int k = 0; k < 3; ++k)
        for (int mi = 0; mi < nm; ++mi)
            for (int ni = 0; ni < nnk; ++ni)
                for (int ki = 0; ki < nnk; ++ki, ++cells) check_cell(ctx, &p, (kind)k, ms[mi], nks[ni], nks[ki], d);
    /* ragged cells around the bounds of the small kernel (1D2D M <= 16, 1D1D <= 16 tokens, and beyond):
     * N, K not multiples of 128 (nor of 16: masked last chunks); 1D1D 72 x 60 over 4095 tokens: its
     * k-blocks split over k-warps and the CTAs of a cluster (also under --small, for compute-sanitizer) */
    static const int64_t kRagged[][3] = {{2, 200, 1000}, {13, 1000, 136}, {17, 200, 1000}, {3, 136, 200},
                                         {32, 1000, 200}, {33, 200, 1000}, {16, 1000, 1000}, {13, 1000, 4104},
                                         {16, 7160, 136}, {1, 4104, 7160}, {4095, 72, 60}};
    for (int k = 0; k < 3; ++k)
        for (size_t i = 0; i < sizeof kRagged / sizeof kRagged[0]; ++i)
            if (kRagged[i][1] <= max_nk && kRagged[i][2] <= max_nk) { /* (--small: the pool's size) */
                check_cell(ctx, &p, (kind)k, kRagged[i][0], kRagged[i][1], kRagged[i][2], d);
                ++cells;
            }
    printf("%d cells, three kinds\n", cells);
    bfp8_context_destroy(ctx);
    cudaFree(d);
    cudaFree(p.codes);
    cudaFree(p.scales);
    return test_exit_code("test_gemm_grid");
}
