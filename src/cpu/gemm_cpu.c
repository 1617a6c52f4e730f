/*
 * gemm_cpu.c - CPU reference GEMMs (docs/RECIPE.md section 4), fast enough
 * to train small models on a few cores.
 *
 * The three GEMMs share one driver computing
 *     out[m, n] = C[m, n] + sum over k-blocks b of sa[m, b] * sb[n, b] * P_b[m, n]
 *     P_b[m, n] = sum over k in block b of a[m, k] * b[n, k]      (fp32)
 * with unit scales for the bf16 GEMM. The operands are first decoded (fp8
 * through a 256-entry table, bf16 by a shift) into fp32 panels of MR rows
 * (a) or NR rows (b), k-major, so that the microkernel streams both. Output
 * tiles of TILE_M x TILE_N are shared among OpenMP threads; for each 128-wide
 * k-block the microkernel accumulates P_b for MR x NR outputs in registers and
 * then promotes it into the tile's fp32 accumulator with the two scales. The
 * output is rounded once, at the end.
 */
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "internal.h"

#define KBLOCK 128
#define MR 6   /* microkernel rows: 6 x 16 fp32 accumulators fill 12 AVX registers */
#define NR 16
#define TILE_M (16 * MR)
#define TILE_N (8 * NR)

typedef float vec8 __attribute__((vector_size(32)));

typedef enum operand_kind {
    OPERAND_FP8,             /* e4m3 codes, rows x k, k contiguous */
    OPERAND_BF16,            /* bf16, rows x k, k contiguous */
    OPERAND_BF16_TRANSPOSED  /* bf16 stored k x rows */
} operand_kind;

typedef enum scale_kind {
    SCALES_NONE,      /* unit scales (bf16 GEMM) */
    SCALES_1X128,     /* scales[kb * scale_ld + r] */
    SCALES_128X128    /* scales[(r / 128) * scale_ld + kb] */
} scale_kind;

typedef struct operand {
    operand_kind kind;
    const void *data;
    int64_t ld;
    int64_t rows; /* M for a, N for b */
    scale_kind scale_kind;
    const float *scales;
    int64_t scale_ld;
} operand;

typedef struct gemm_job {
    operand a, b;
    int64_t m, n, k;
    const float *c; /* f32 accumulator input or NULL; may alias d */
    int64_t ldc;
    void *d;
    bfp8_dtype d_dtype;
    int64_t ldd;
    float *a_panels, *b_panels; /* decoded operands, see pack_panels */
    float lut[256];             /* e4m3 code -> fp32 */
} gemm_job;

/* ------------------------------------------------------------------------ */
/* Decoding into panels: rows [p * width, (p + 1) * width) of an operand go  */
/* to panels[(p * k + kk) * width + i], rows past the end as zeros.          */

static void pack_panel(const gemm_job *job, const operand *op, int width, int64_t p, float *dst) {
    const int64_t k = job->k, r0 = p * width;
    const int valid = (int)(op->rows - r0 < width ? op->rows - r0 : width);
    if (valid < width)
        for (int64_t kk = 0; kk < k; ++kk)
            for (int i = valid; i < width; ++i) dst[kk * width + i] = 0.0f;
    if (op->kind == OPERAND_FP8) {
        for (int i = 0; i < valid; ++i) {
            const uint8_t *src = (const uint8_t *)op->data + (r0 + i) * op->ld;
            for (int64_t kk = 0; kk < k; ++kk) dst[kk * width + i] = job->lut[src[kk]];
        }
    } else if (op->kind == OPERAND_BF16) {
        for (int i = 0; i < valid; ++i) {
            const uint16_t *src = (const uint16_t *)op->data + (r0 + i) * op->ld;
            for (int64_t kk = 0; kk < k; ++kk) dst[kk * width + i] = bfp8_decode_bf16(src[kk]);
        }
    } else {
        for (int64_t kk = 0; kk < k; ++kk) {
            const uint16_t *src = (const uint16_t *)op->data + kk * op->ld + r0;
            for (int i = 0; i < valid; ++i) dst[kk * width + i] = bfp8_decode_bf16(src[i]);
        }
    }
}

static void fill_scales(const operand *op, int64_t r0, int count, int64_t kb, float *out) {
    for (int i = 0; i < count; ++i) {
        const int64_t r = r0 + i;
        if (op->scale_kind == SCALES_NONE || r >= op->rows)
            out[i] = 1.0f;
        else if (op->scale_kind == SCALES_1X128)
            out[i] = op->scales[kb * op->scale_ld + r];
        else
            out[i] = op->scales[(r / KBLOCK) * op->scale_ld + kb];
    }
}

/* ------------------------------------------------------------------------ */
/* The tile computation, compiled twice: for AVX2 and for the baseline ISA. */

/* acc[i][j] += sa[i] * sb[j] * P[i][j], P = sum over kc of a[k][i] b[k][j]. */
static inline __attribute__((always_inline)) void microkernel(int kc, const float *a, const float *b,
                                                              const float *sa, const float *sb,
                                                              float *acc, int64_t ld_acc) {
    vec8 p[MR][NR / 8];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NR / 8; ++v) p[i][v] = (vec8){0};
    for (int kk = 0; kk < kc; ++kk) {
        vec8 bv[NR / 8];
#pragma GCC unroll 4
        for (int v = 0; v < NR / 8; ++v) memcpy(&bv[v], b + kk * NR + 8 * v, sizeof(vec8));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const float ai = a[kk * MR + i];
#pragma GCC unroll 4
            for (int v = 0; v < NR / 8; ++v) p[i][v] += ai * bv[v];
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NR / 8; ++v) {
            vec8 s, out;
            memcpy(&s, sb + 8 * v, sizeof s);
            memcpy(&out, acc + i * ld_acc + 8 * v, sizeof out);
            out += (sa[i] * s) * p[i][v];
            memcpy(acc + i * ld_acc + 8 * v, &out, sizeof out);
        }
}

static inline __attribute__((always_inline)) void compute_tile_body(const gemm_job *job, int64_t tm,
                                                                    int64_t tn) {
    _Alignas(64) float acc[TILE_M * TILE_N];
    float sa[TILE_M], sb[TILE_N];
    const int64_t m0 = tm * TILE_M, n0 = tn * TILE_N, k = job->k;
    const int rows = (int)(job->m - m0 < TILE_M ? job->m - m0 : TILE_M);
    const int cols = (int)(job->n - n0 < TILE_N ? job->n - n0 : TILE_N);
    const int micro_rows = (rows + MR - 1) / MR, micro_cols = (cols + NR - 1) / NR;
    memset(acc, 0, sizeof acc);

    for (int64_t k0 = 0; k0 < k; k0 += KBLOCK) {
        const int kc = (int)(k - k0 < KBLOCK ? k - k0 : KBLOCK);
        fill_scales(&job->a, m0, micro_rows * MR, k0 / KBLOCK, sa);
        fill_scales(&job->b, n0, micro_cols * NR, k0 / KBLOCK, sb);
        for (int im = 0; im < micro_rows; ++im) {
            const float *a = job->a_panels + ((m0 / MR + im) * k + k0) * MR;
            for (int jn = 0; jn < micro_cols; ++jn) {
                const float *b = job->b_panels + ((n0 / NR + jn) * k + k0) * NR;
                microkernel(kc, a, b, sa + im * MR, sb + jn * NR, acc + im * MR * TILE_N + jn * NR,
                            TILE_N);
            }
        }
    }

    for (int i = 0; i < rows; ++i) {
        const float *row = acc + i * TILE_N;
        const int64_t m = m0 + i;
        if (job->d_dtype == BFP8_F32) {
            float *d = (float *)job->d + m * job->ldd + n0;
            if (job->c) {
                const float *c = job->c + m * job->ldc + n0;
                for (int j = 0; j < cols; ++j) d[j] = c[j] + row[j];
            } else {
                for (int j = 0; j < cols; ++j) d[j] = row[j];
            }
        } else {
            uint16_t *d = (uint16_t *)job->d + m * job->ldd + n0;
            for (int j = 0; j < cols; ++j) d[j] = bfp8_encode_bf16(row[j]);
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define BFP8_HAVE_AVX2_PATH 1
__attribute__((target("avx2"))) static void compute_tile_avx2(const gemm_job *job, int64_t tm,
                                                              int64_t tn) {
    compute_tile_body(job, tm, tn);
}
#endif

static void compute_tile_baseline(const gemm_job *job, int64_t tm, int64_t tn) {
    compute_tile_body(job, tm, tn);
}

/* ------------------------------------------------------------------------ */

static bfp8_status run_gemm(gemm_job *job, const char *fn) {
    const int64_t a_panels = bfp8_ceil_div(job->m, MR), b_panels = bfp8_ceil_div(job->n, NR);
    job->a_panels = malloc((size_t)(a_panels * MR * job->k) * sizeof(float));
    job->b_panels = malloc((size_t)(b_panels * NR * job->k) * sizeof(float));
    if (!job->a_panels || !job->b_panels) {
        free(job->a_panels);
        free(job->b_panels);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: out of host memory for the decoded operands", fn);
    }
    for (int i = 0; i < 256; ++i) job->lut[i] = bfp8_decode_e4m3((uint8_t)i);
    int use_avx2 = 0;
#ifdef BFP8_HAVE_AVX2_PATH
    use_avx2 = __builtin_cpu_supports("avx2");
#endif
    const int64_t tiles_n = bfp8_ceil_div(job->n, TILE_N);
    const int64_t tiles = bfp8_ceil_div(job->m, TILE_M) * tiles_n;
    const double flops = 2.0 * (double)job->m * (double)job->n * (double)job->k;

    #pragma omp parallel if (flops > 1e6)
    {
        #pragma omp for schedule(static)
        for (int64_t p = 0; p < a_panels; ++p)
            pack_panel(job, &job->a, MR, p, job->a_panels + p * MR * job->k);
        #pragma omp for schedule(static)
        for (int64_t p = 0; p < b_panels; ++p)
            pack_panel(job, &job->b, NR, p, job->b_panels + p * NR * job->k);
        #pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tiles; ++t) {
#ifdef BFP8_HAVE_AVX2_PATH
            if (use_avx2) {
                compute_tile_avx2(job, t / tiles_n, t % tiles_n);
                continue;
            }
#endif
            compute_tile_baseline(job, t / tiles_n, t % tiles_n);
        }
    }
    (void)use_avx2;
    free(job->a_panels);
    free(job->b_panels);
    return BFP8_OK;
}

static operand fp8_operand(const bfp8_qmatrix *q) {
    const operand op = {OPERAND_FP8, q->data, q->ld, q->rows,
                        q->granularity == BFP8_GRAN_1X128 ? SCALES_1X128 : SCALES_128X128,
                        q->scales, q->scale_ld};
    return op;
}

bfp8_status bfp8_cpu_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                               bfp8_matrix *d) {
    (void)ctx;
    gemm_job job = {.a = fp8_operand(a), .b = fp8_operand(b), .m = a->rows, .n = b->rows,
                    .k = a->cols, .d = d->data, .d_dtype = d->dtype, .ldd = d->ld};
    return run_gemm(&job, "bfp8_cpu_gemm_1d2d");
}

bfp8_status bfp8_cpu_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                               const bfp8_matrix *c, bfp8_matrix *d) {
    (void)ctx;
    gemm_job job = {.a = fp8_operand(a), .b = fp8_operand(b), .m = a->rows, .n = b->rows,
                    .k = a->cols, .c = c ? (const float *)c->data : NULL, .ldc = c ? c->ld : 0,
                    .d = d->data, .d_dtype = d->dtype, .ldd = d->ld};
    return run_gemm(&job, "bfp8_cpu_gemm_1d1d");
}

/* The rows [r0, r0 + rows) of a 1x128 operand (scales: column r of every k-block row). */
static bfp8_qmatrix qmatrix_rows_1x128(const bfp8_qmatrix *q, int64_t r0, int64_t rows) {
    bfp8_qmatrix v = *q;
    v.data = q->data + r0 * q->ld;
    v.scales = q->scales + r0;
    v.rows = rows;
    return v;
}

/* The rows [r0, r0 + rows) of a matrix. */
static bfp8_matrix matrix_rows(const bfp8_matrix *m, int64_t r0, int64_t rows) {
    bfp8_matrix v = *m;
    v.data = (uint8_t *)m->data + (size_t)(r0 * m->ld) * bfp8_dtype_size(m->dtype);
    v.rows = rows;
    return v;
}

/* Offsets from backend memory (the host, here) as the kernels take them:
 * clamped (bfp8_clamp_group_offsets) into *owned, which the caller frees. */
static bfp8_status offsets_to_use(const int64_t *offsets, int num_groups, int64_t tokens, int on_backend,
                                  const int64_t **use, int64_t **owned) {
    *use = offsets;
    *owned = NULL;
    if (!on_backend) return BFP8_OK;
    *owned = malloc((size_t)(num_groups + 1) * sizeof(int64_t));
    if (!*owned) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped GEMM: offsets");
    bfp8_clamp_group_offsets(offsets, num_groups, tokens, *owned);
    *use = *owned;
    return BFP8_OK;
}

/* Group by group: the 1D2D GEMM of the group's rows of a with its weight. */
static bfp8_status gemm_1d2d_groups(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                    const int64_t *group_offsets, int num_groups, bfp8_matrix *d) {
    const int64_t n = b->rows / num_groups;
    for (int g = 0; g < num_groups; ++g) {
        const int64_t r0 = group_offsets[g], rows = group_offsets[g + 1] - r0;
        if (rows == 0) continue;
        const bfp8_qmatrix ag = qmatrix_rows_1x128(a, r0, rows);
        bfp8_qmatrix bg = *b; /* rows g*n.., whole 128-row blocks */
        bg.data = b->data + g * n * b->ld;
        bg.scales = b->scales + (g * n / 128) * b->scale_ld;
        bg.rows = n;
        bfp8_matrix dg = matrix_rows(d, r0, rows);
        BFP8_TRY(bfp8_cpu_gemm_1d2d(ctx, &ag, &bg, &dg));
    }
    return BFP8_OK;
}

/* Group by group: the 1D1D GEMM over the group's tokens (columns of a and
 * b) into its rows of d; a group without tokens gets C (or zeros). */
static bfp8_status gemm_1d1d_groups(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                    const int64_t *group_offsets, int num_groups, const bfp8_matrix *c,
                                    bfp8_matrix *d) {
    const int64_t n = a->rows;
    for (int g = 0; g < num_groups; ++g) {
        const int64_t t0 = group_offsets[g], tokens = group_offsets[g + 1] - t0;
        bfp8_matrix dg = matrix_rows(d, g * n, n);
        const bfp8_matrix cg = c ? matrix_rows(c, g * n, n) : dg;
        if (tokens == 0) {
            const size_t esize = bfp8_dtype_size(d->dtype);
            for (int64_t r = 0; r < n; ++r) {
                uint8_t *row = (uint8_t *)dg.data + (size_t)(r * dg.ld) * esize;
                if (!c) memset(row, 0, (size_t)dg.cols * esize);
                else if (cg.data != dg.data) memmove(row, (const float *)cg.data + r * cg.ld, (size_t)dg.cols * esize);
            }
            continue;
        }
        bfp8_qmatrix ag = *a, bg = *b; /* columns [t0, t0 + tokens): whole k-blocks */
        ag.data = a->data + t0;
        ag.scales = a->scales + (t0 / 128) * a->scale_ld;
        ag.cols = tokens;
        bg.data = b->data + t0;
        bg.scales = b->scales + (t0 / 128) * b->scale_ld;
        bg.cols = tokens;
        BFP8_TRY(bfp8_cpu_gemm_1d1d(ctx, &ag, &bg, c ? &cg : NULL, &dg));
    }
    return BFP8_OK;
}

bfp8_status bfp8_cpu_gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                       const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                       bfp8_matrix *d) {
    const int64_t *use;
    int64_t *owned;
    BFP8_TRY(offsets_to_use(group_offsets, num_groups, a->rows, offsets_on_backend, &use, &owned));
    const bfp8_status st = gemm_1d2d_groups(ctx, a, b, use, num_groups, d);
    free(owned);
    return st;
}

bfp8_status bfp8_cpu_gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                       const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                       const bfp8_matrix *c, bfp8_matrix *d) {
    const int64_t *use;
    int64_t *owned;
    BFP8_TRY(offsets_to_use(group_offsets, num_groups, a->cols, offsets_on_backend, &use, &owned));
    const bfp8_status st = gemm_1d1d_groups(ctx, a, b, use, num_groups, c, d);
    free(owned);
    return st;
}

bfp8_status bfp8_cpu_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                               const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                               bfp8_matrix *d) {
    (void)ctx;
    const operand oa = {a_transposed ? OPERAND_BF16_TRANSPOSED : OPERAND_BF16, a->data, a->ld,
                        a_transposed ? a->cols : a->rows, SCALES_NONE, NULL, 0};
    const operand ob = {b_transposed ? OPERAND_BF16_TRANSPOSED : OPERAND_BF16, b->data, b->ld,
                        b_transposed ? b->cols : b->rows, SCALES_NONE, NULL, 0};
    gemm_job job = {.a = oa, .b = ob, .m = oa.rows, .n = ob.rows,
                    .k = a_transposed ? a->rows : a->cols,
                    .c = c ? (const float *)c->data : NULL, .ldc = c ? c->ld : 0,
                    .d = d->data, .d_dtype = d->dtype, .ldd = d->ld};
    return run_gemm(&job, "bfp8_cpu_gemm_bf16");
}
