/*
 * test_linear_gpu.c - the linear layer (bfp8_linear_*) on the CUDA backend:
 * fp8-blockwise's f32 forms (bfp8_linear_forward_f32 / _backward_f32)
 * against its bf16 forms on the same data, as test_linear_cpu does on the
 * CPU. With x and dy holding bf16 values both forms quantize the same
 * numbers, so dw must match bit for bit and y, dx must round (to nearest
 * even) to the bf16 forms' outputs bit for bit. Ragged shapes, token counts
 * below max_tokens, accumulate on and off, dx skipped.
 *
 *   build/tests/linear/test_linear_gpu
 */
#include <string.h>

#include "test_util.h"

typedef struct case_spec {
    int64_t m, n, k, max_tokens;
    int accumulate, skip_dx;
} case_spec;

static void *device_copy(bfp8_context *gpu, const void *host, size_t bytes) {
    void *d = NULL;
    CHECK_OK(bfp8_malloc(gpu, &d, bytes));
    if (d && host) CHECK_OK(bfp8_copy_to_backend(gpu, d, host, bytes));
    return d;
}

static void run_case(bfp8_context *gpu, case_spec cs, uint64_t seed) {
    const int64_t m = cs.m, n = cs.n, k = cs.k;
    char what[128];
    snprintf(what, sizeof what, "M=%lld N=%lld K=%lld max_tokens=%lld acc=%d skip_dx=%d", (long long)m,
             (long long)n, (long long)k, (long long)cs.max_tokens, cs.accumulate, cs.skip_dx);
    const bfp8_linear_config cfg = {k, n, cs.max_tokens, BFP8_RECIPE_FP8_BLOCKWISE, 0, NULL};
    bfp8_linear *lin = NULL;
    CHECK_OK(bfp8_linear_create(&lin, gpu, &cfg));
    if (!lin) return;

    /* host data: bf16 x and dy (with a zero row, a zero block, outliers), their f32 copies */
    const unsigned hard = TEST_FILL_OUTLIERS | TEST_FILL_ZERO_ROW | TEST_FILL_ZERO_BLOCK;
    uint16_t *x = test_malloc((size_t)(m * k) * 2), *dy = test_malloc((size_t)(m * n) * 2);
    test_fill_bf16(x, m, k, k, 1.0f, hard, seed);
    test_fill_bf16(dy, m, n, n, 1e-3f, hard, seed + 1);
    float *xf = test_malloc((size_t)(m * k) * 4), *dyf = test_malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * k; ++i) xf[i] = bfp8_bf16_to_f32(x[i]);
    for (int64_t i = 0; i < m * n; ++i) dyf[i] = bfp8_bf16_to_f32(dy[i]);
    float *w = test_malloc((size_t)(n * k) * 4), *dw0 = test_malloc((size_t)(n * k) * 4);
    test_fill_f32(w, n, k, k, 1.0f, TEST_FILL_OUTLIERS, seed + 2);
    test_fill_f32(dw0, n, k, k, 1e-2f, 0, seed + 3);

    void *d_x = device_copy(gpu, x, (size_t)(m * k) * 2), *d_dy = device_copy(gpu, dy, (size_t)(m * n) * 2);
    void *d_xf = device_copy(gpu, xf, (size_t)(m * k) * 4), *d_dyf = device_copy(gpu, dyf, (size_t)(m * n) * 4);
    void *d_w = device_copy(gpu, w, (size_t)(n * k) * 4);
    void *d_y = device_copy(gpu, NULL, (size_t)(m * n) * 2), *d_dx = device_copy(gpu, NULL, (size_t)(m * k) * 2);
    void *d_yf = device_copy(gpu, NULL, (size_t)(m * n) * 4), *d_dxf = device_copy(gpu, NULL, (size_t)(m * k) * 4);
    void *d_dw = device_copy(gpu, dw0, (size_t)(n * k) * 4), *d_dwf = device_copy(gpu, dw0, (size_t)(n * k) * 4);
    if (!d_x || !d_dy || !d_xf || !d_dyf || !d_w || !d_y || !d_dx || !d_yf || !d_dxf || !d_dw || !d_dwf) return;

    CHECK_OK(bfp8_linear_set_weight(lin, d_w));
    CHECK_OK(bfp8_linear_forward(lin, d_x, m, d_y));
    CHECK_OK(bfp8_linear_backward(lin, d_dy, cs.skip_dx ? NULL : d_dx, d_dw, cs.accumulate));
    CHECK_OK(bfp8_linear_forward_f32(lin, d_xf, m, d_yf));
    CHECK_OK(bfp8_linear_backward_f32(lin, d_dyf, cs.skip_dx ? NULL : d_dxf, d_dwf, cs.accumulate));
    CHECK_OK(bfp8_context_synchronize(gpu));

    uint16_t *y = test_malloc((size_t)(m * n) * 2), *dx = test_malloc((size_t)(m * k) * 2);
    float *yf = test_malloc((size_t)(m * n) * 4), *dxf = test_malloc((size_t)(m * k) * 4);
    float *dw = test_malloc((size_t)(n * k) * 4), *dwf = test_malloc((size_t)(n * k) * 4);
    CHECK_OK(bfp8_copy_to_host(gpu, y, d_y, (size_t)(m * n) * 2));
    CHECK_OK(bfp8_copy_to_host(gpu, yf, d_yf, (size_t)(m * n) * 4));
    CHECK_OK(bfp8_copy_to_host(gpu, dx, d_dx, (size_t)(m * k) * 2));
    CHECK_OK(bfp8_copy_to_host(gpu, dxf, d_dxf, (size_t)(m * k) * 4));
    CHECK_OK(bfp8_copy_to_host(gpu, dw, d_dw, (size_t)(n * k) * 4));
    CHECK_OK(bfp8_copy_to_host(gpu, dwf, d_dwf, (size_t)(n * k) * 4));

    int64_t differ_y = 0, differ_dx = 0, differ_dw = 0, nonzero_y = 0;
    for (int64_t i = 0; i < m * n; ++i) {
        differ_y += bfp8_f32_to_bf16(yf[i]) != y[i];
        nonzero_y += yf[i] != 0.0f;
    }
    for (int64_t i = 0; !cs.skip_dx && i < m * k; ++i) differ_dx += bfp8_f32_to_bf16(dxf[i]) != dx[i];
    for (int64_t i = 0; i < n * k; ++i) differ_dw += memcmp(&dwf[i], &dw[i], sizeof(float)) != 0;
    CHECK(differ_y == 0 && differ_dx == 0 && differ_dw == 0,
          "%s: the f32 forms differ from the bf16 forms in %lld y, %lld dx, %lld dw values", what,
          (long long)differ_y, (long long)differ_dx, (long long)differ_dw);
    CHECK(nonzero_y > 0, "%s: y is all zeros", what);

    void *device[] = {d_x, d_dy, d_xf, d_dyf, d_w, d_y, d_dx, d_yf, d_dxf, d_dw, d_dwf};
    for (size_t i = 0; i < sizeof device / sizeof device[0]; ++i) bfp8_free(gpu, device[i]);
    free(x); free(dy); free(xf); free(dyf); free(w); free(dw0);
    free(y); free(dx); free(yf); free(dxf); free(dw); free(dwf);
    bfp8_linear_destroy(lin);
}

int main(void) {
    TEST_REQUIRE_GPU();
    bfp8_context *gpu = NULL;
    CHECK_OK(bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0));
    if (!gpu) return test_exit_code("test_linear_gpu");
    const case_spec cases[] = {
        {1, 128, 128, 1, 0, 0},        {127, 256, 384, 200, 1, 0},  {129, 200, 136, 129, 0, 0},
        {300, 264, 384, 1000, 1, 1},   {1000, 128, 256, 1000, 0, 0}, {4096, 1024, 2048, 4096, 1, 0},
        {2048, 5632, 2048, 2048, 0, 0}, {2048, 2048, 5632, 2048, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_case(gpu, cases[i], 4000 + 11 * i);
    bfp8_context_destroy(gpu);
    return test_exit_code("test_linear_gpu");
}
