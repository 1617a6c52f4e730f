/*
 * bench_attention.c - the trainer's causal attention on the GPU
 * (attention_forward_cuda / attention_backward_cuda, src/model/cuda), one
 * layer's shape, forward and backward timed apart:
 *
 *   bench_attention [--batch B] [--seq T] [--heads H] [--head-dim D]
 *                   [--reps N] [--no-flash] [--tf32]
 *
 * Defaults: the 1b preset's layer (8 x 2048 tokens, 16 heads of 128), flash
 * attention on. TFLOP/s count the causal products as FlashAttention does:
 * forward 2 * 2 * B * H * T^2 * D / 2 (S = Q K^T and O = P V over the lower
 * triangle), backward 2.5 times that. Inputs are N(0, 1) from a fixed seed;
 * the FNV-1a hash of every output is printed, so two builds can be checked
 * bit for bit against each other on the same inputs.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench_util.h"
#include "model/attention.h"
#include "model/model_ops.h"

static void fill_normal(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; ++k) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            u[k] = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
        }
        const double r = sqrt(-2.0 * log(u[0])), a = 6.283185307179586 * u[1];
        x[i] = (float)(r * cos(a));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(a));
    }
}

static uint64_t fnv1a(const void *p, size_t bytes) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t device_hash(const float *d, size_t n) {
    float *h = malloc(n * sizeof(float));
    if (!h) exit(2);
    BENCH_CUDA_OR_DIE(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    const uint64_t v = fnv1a(h, n * sizeof(float));
    free(h);
    return v;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int64_t batch = 8, seq = 2048, heads = 16, head_dim = 128;
    int reps = 10, flash = 1, tf32 = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--batch") == 0 && v) batch = atoll(argv[++i]);
        else if (strcmp(a, "--seq") == 0 && v) seq = atoll(argv[++i]);
        else if (strcmp(a, "--heads") == 0 && v) heads = atoll(argv[++i]);
        else if (strcmp(a, "--head-dim") == 0 && v) head_dim = atoll(argv[++i]);
        else if (strcmp(a, "--reps") == 0 && v) reps = atoi(argv[++i]);
        else if (strcmp(a, "--no-flash") == 0) flash = 0;
        else if (strcmp(a, "--tf32") == 0) tf32 = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--batch B] [--seq T] [--heads H] [--head-dim D] [--reps N] [--no-flash] [--tf32]\n",
                    argv[0]);
            return 2;
        }
    }
    if (batch < 1 || seq < 1 || heads < 1 || head_dim < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "bench_attention: sizes and --reps must be positive (reps <= 1000)\n");
        return 2;
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (flash && !model_cuda_flash_attention_supported(head_dim)) {
        fprintf(stderr, "bench_attention: flash attention needs head_dim 64 or 128 (got %lld)\n", (long long)head_dim);
        return 2;
    }
    /* the ops on the legacy default stream, where the events are recorded */
    model_ops_ctx oc = {.device = 1, .stream = NULL, .tf32 = tf32, .flash_attention = flash};

    const int64_t dim = heads * head_dim, tokens = batch * seq;
    const size_t qkv_n = (size_t)(tokens * 3 * dim), out_n = (size_t)(tokens * dim);
    const size_t probs_n = flash ? (size_t)flash_attention_saved_floats(batch, seq, heads, head_dim)
                                 : (size_t)(batch * heads * seq * seq);
    const size_t scratch_n = (size_t)(flash ? flash_attention_scratch_floats(batch, seq, heads, head_dim)
                                            : attention_scratch_floats(batch, seq, heads, head_dim));
    float *h_qkv = malloc(qkv_n * sizeof(float)), *h_dout = malloc(out_n * sizeof(float));
    if (!h_qkv || !h_dout) return 2;
    fill_normal(h_qkv, qkv_n, 1);
    fill_normal(h_dout, out_n, 2);
    float *qkv, *dout, *out, *probs, *scratch, *dqkv;
    BENCH_CUDA_OR_DIE(cudaMalloc((void **)&qkv, qkv_n * sizeof(float)));
    BENCH_CUDA_OR_DIE(cudaMalloc((void **)&dout, out_n * sizeof(float)));
    BENCH_CUDA_OR_DIE(cudaMalloc((void **)&out, out_n * sizeof(float)));
    BENCH_CUDA_OR_DIE(cudaMalloc((void **)&probs, probs_n * sizeof(float)));
    BENCH_CUDA_OR_DIE(cudaMalloc((void **)&scratch, scratch_n * sizeof(float)));
    BENCH_CUDA_OR_DIE(cudaMalloc((void **)&dqkv, qkv_n * sizeof(float)));
    BENCH_CUDA_OR_DIE(cudaMemcpy(qkv, h_qkv, qkv_n * sizeof(float), cudaMemcpyHostToDevice));
    BENCH_CUDA_OR_DIE(cudaMemcpy(dout, h_dout, out_n * sizeof(float), cudaMemcpyHostToDevice));

    cudaEvent_t ev[3];
    for (int i = 0; i < 3; ++i) BENCH_CUDA_OR_DIE(cudaEventCreate(&ev[i]));
    float fwd_ms[1000], bwd_ms[1000];
    for (int r = -2; r < reps; ++r) { /* two warm-up rounds */
        BENCH_CUDA_OR_DIE(cudaEventRecord(ev[0], NULL));
        attention_forward_cuda(&oc, out, probs, scratch, qkv, batch, seq, heads, head_dim);
        BENCH_CUDA_OR_DIE(cudaEventRecord(ev[1], NULL));
        attention_backward_cuda(&oc, dqkv, scratch, dout, qkv, probs, batch, seq, heads, head_dim);
        BENCH_CUDA_OR_DIE(cudaEventRecord(ev[2], NULL));
        BENCH_CUDA_OR_DIE(cudaEventSynchronize(ev[2]));
        if (model_ops_status(&oc) != BFP8_OK) {
            fprintf(stderr, "bench_attention: %s\n", bfp8_last_error());
            return 1;
        }
        if (r >= 0) {
            BENCH_CUDA_OR_DIE(cudaEventElapsedTime(&fwd_ms[r], ev[0], ev[1]));
            BENCH_CUDA_OR_DIE(cudaEventElapsedTime(&bwd_ms[r], ev[1], ev[2]));
        }
    }
    qsort(fwd_ms, (size_t)reps, sizeof(float), cmp_float);
    qsort(bwd_ms, (size_t)reps, sizeof(float), cmp_float);
    const double fwd_flop = 2.0 * 2.0 * (double)batch * heads * (double)seq * seq * head_dim / 2.0;
    const double f = fwd_ms[reps / 2], b = bwd_ms[reps / 2];
    printf("attention %s%s: batch %lld seq %lld heads %lld head_dim %lld, median of %d\n",
           flash ? "flash (bf16 products)" : "exact", tf32 ? ", tf32" : "", (long long)batch, (long long)seq,
           (long long)heads, (long long)head_dim, reps);
    printf("  forward   %8.3f ms  %6.1f TFLOP/s  (min %.3f ms)\n", f, fwd_flop / (f * 1e-3) / 1e12, fwd_ms[0]);
    printf("  backward  %8.3f ms  %6.1f TFLOP/s  (min %.3f ms)\n", b, 2.5 * fwd_flop / (b * 1e-3) / 1e12, bwd_ms[0]);
    printf("  hashes: out %016llx  dqkv %016llx\n", (unsigned long long)device_hash(out, out_n),
           (unsigned long long)device_hash(dqkv, qkv_n));
    model_ops_ctx_release(&oc);
    return 0;
}
