/* Built in session 18: gcc -O2 -std=c17 -Iinclude THIS.c <build>/libblockfp8.a -L/usr/local/cuda/lib64 -lcudart
 * -lcublasLt -lstdc++ -lm -fopenmp -lpthread -ldl (needs the library built with
 * 2026-12-02_gemm_1d2d_s17_tma_f32_experiment_switches.patch for its TMA runs). Usage: THIS REPS [TMA 0|1]. */
/* Session 18 probe: are lone 1D2D f32 GEMMs at the trainer's shapes bit-repeatable? Runs each shape R times into
 * separate outputs (with a quantize call between, as in a training step) and compares bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockfp8.h"
#include "2026-12-02_gemm_s18_repeat_probe_common.h"
int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 4;
    const int tma = argc > 2 ? atoi(argv[2]) : 1;
    T(bfp8_context_create(&g, BFP8_BACKEND_CUDA, 0));
    static const int64_t shapes[][3] = {{16384, 2048, 2048}, {16384, 6144, 2048}, {16384, 5632, 2048},
                                        {16384, 11264, 2048}, {16384, 2048, 5632}, {4096, 6144, 2048}, {16384, 11264, 2048}};
    int bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
        const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *x = randf(m * k, 1 + s), *w = randf(n * k, 100 + s);
        bfp8_qmatrix a = quant(x, m, k, 0), b = quant(w, n, k, 1);
        const size_t bytes = (size_t)(m * n) * 4;
        float *d = dev(bytes);
        unsigned char *first = malloc(bytes), *now = malloc(bytes);
        int differ = 0;
        /* reference: the register-store path */
        unsetenv("BFP8_EXP_1D2D_TMA_F32");
        {
            T(bfp8_memset_zero(g, d, bytes));
            bfp8_matrix dm = {d, BFP8_F32, m, n, n};
            T(bfp8_gemm_1d2d(g, &a, &b, &dm));
            T(bfp8_context_synchronize(g));
            T(bfp8_copy_to_host(g, first, d, bytes));
        }
        if (tma) setenv("BFP8_EXP_1D2D_TMA_F32", "1", 1);
        for (int r = 0; r < reps; ++r) {
            T(bfp8_memset_zero(g, d, bytes));
            bfp8_matrix dm = {d, BFP8_F32, m, n, n};
            T(bfp8_gemm_1d2d(g, &a, &b, &dm));
            bfp8_qmatrix tmp = quant(d, m, n, 0);
            T(bfp8_context_synchronize(g));
            T(bfp8_copy_to_host(g, now, d, bytes));
            bfp8_free(g, tmp.data); bfp8_free(g, tmp.scales);
            if (memcmp(first, now, bytes)) {
                const float *f = (const float *)first, *o = (const float *)now;
                int64_t cnt = 0, zeros = 0, i0 = -1, rmin = m, rmax = -1, cmin = n, cmax = -1;
                for (int64_t i = 0; i < m * n; ++i)
                    if (((const uint32_t *)first)[i] != ((const uint32_t *)now)[i]) {
                        cnt++; if (o[i] == 0.0f) zeros++; if (i0 < 0) i0 = i;
                        int64_t rr = i / n, cc = i % n;
                        if (rr < rmin) rmin = rr; if (rr > rmax) rmax = rr; if (cc < cmin) cmin = cc; if (cc > cmax) cmax = cc;
                    }
                /* is the wrong value some other element of the reference? (stale staging of another tile) */
                int found = -1;
                for (int64_t i = 0; i < m * n && found < 0; ++i) if (((const uint32_t *)first)[i] == ((const uint32_t *)now)[i0] && i != i0) found = (int)1;
                printf("  %lldx%lldx%lld rep %d: %lld words differ from the register path (%lld zero), rows %lld-%lld cols %lld-%lld; "
                       "first [%lld,%lld] ref %.6g got %.6g (value %s elsewhere in D)\n",
                       (long long)m, (long long)n, (long long)k, r, (long long)cnt, (long long)zeros, (long long)rmin,
                       (long long)rmax, (long long)cmin, (long long)cmax, (long long)(i0 / n), (long long)(i0 % n), f[i0], o[i0],
                       found > 0 ? "found" : "not found");
                differ = 1;
            }
        }
        printf("%lldx%lldx%lld f32 x%d: %s\n", (long long)m, (long long)n, (long long)k, reps, differ ? "DIFFER" : "identical");
        bad |= differ;
        free(first); free(now);
        bfp8_free(g, d); bfp8_free(g, x); bfp8_free(g, w);
        bfp8_free(g, a.data); bfp8_free(g, a.scales); bfp8_free(g, b.data); bfp8_free(g, b.scales);
    }
    bfp8_context_destroy(g);
    return bad;
}
