/* Built in session 18 like 2026-12-02_gemm_1d2d_s18_repeat_probe.c, against HEAD's library. Usage: THIS REPS. */
/* Session 18 probe: product paths, repeated bit for bit? 1D2D bf16 out (TMA stores, 4 stages) and 1D1D f32 with
 * 192x128 tiles (TMA reduce-add, 3 stages) and the auto choice, each R times against its first call. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockfp8.h"
#include "2026-12-02_gemm_s18_repeat_probe_common.h"
/* kind 0: 1D2D bf16 out; 1: 1D1D f32 out (D = A.B^T, no C) */
static int run(int kind, int64_t m, int64_t n, int64_t k, int reps, const char *config) {
    if (config) setenv("BFP8_GEMM_CONFIG", config, 1); else unsetenv("BFP8_GEMM_CONFIG");
    float *x = randf(m * k, 7 + m + n), *w = randf(n * k, 9 + k);
    bfp8_qmatrix a = quant(x, m, k, 0), b = quant(w, n, k, kind == 0);
    const size_t esz = kind == 0 ? 2 : 4, bytes = (size_t)(m * n) * esz;
    void *d = dev(bytes);
    unsigned char *first = malloc(bytes), *now = malloc(bytes);
    int differ = 0;
    for (int r = 0; r < reps; ++r) {
        T(bfp8_memset_zero(g, d, bytes));
        bfp8_matrix dm = {d, kind == 0 ? BFP8_BF16 : BFP8_F32, m, n, n};
        if (kind == 0) T(bfp8_gemm_1d2d(g, &a, &b, &dm)); else T(bfp8_gemm_1d1d(g, &a, &b, NULL, &dm));
        T(bfp8_context_synchronize(g));
        T(bfp8_copy_to_host(g, r ? now : first, d, bytes));
        if (r && memcmp(first, now, bytes)) {
            int64_t cnt = 0, i0 = -1;
            for (size_t i = 0; i < bytes / esz; ++i)
                if (memcmp(first + i * esz, now + i * esz, esz)) { cnt++; if (i0 < 0) i0 = (int64_t)i; }
            printf("  rep %d: %lld elements differ, first [%lld,%lld]\n", r, (long long)cnt, (long long)(i0 / n), (long long)(i0 % n));
            differ = 1;
        }
    }
    printf("%s %lldx%lldx%lld [%s] x%d: %s\n", kind == 0 ? "1d2d bf16" : "1d1d f32", (long long)m, (long long)n, (long long)k,
           config ? config : "auto", reps, differ ? "DIFFER" : "identical");
    free(first); free(now); bfp8_free(g, d); bfp8_free(g, x); bfp8_free(g, w);
    bfp8_free(g, a.data); bfp8_free(g, a.scales); bfp8_free(g, b.data); bfp8_free(g, b.scales);
    return differ;
}
int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 8;
    T(bfp8_context_create(&g, BFP8_BACKEND_CUDA, 0));
    int bad = 0;
    bad |= run(0, 16384, 11264, 2048, reps, NULL);
    bad |= run(0, 16384, 6144, 2048, reps, NULL);
    /* wgrad: dW (n x k) = dY^T (n x tokens) . X^T (k x tokens): a = n x tokens, b = k x tokens */
    bad |= run(1, 2048, 11264, 16384, reps, "bm=192,bn=128");
    bad |= run(1, 5632, 2048, 16384, reps, "bm=192,bn=128");
    bad |= run(1, 2048, 11264, 16384, reps, NULL);
    bfp8_context_destroy(g);
    return bad;
}
