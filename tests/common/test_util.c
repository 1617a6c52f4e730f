/*
 * test_util.c - see test_util.h.
 */
#include "test_util.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "formats/formats.h"

int test_failures = 0;
int test_checks = 0;

int test_exit_code(const char *test_name) {
    printf("%s: %d checks, %d failed\n", test_name, test_checks, test_failures);
    return test_failures == 0 ? 0 : 1;
}

void test_fatal(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "FATAL: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    exit(2);
}

void *test_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) test_fatal("out of memory (%zu bytes)", bytes);
    return p;
}

/* ------------------------------------------------------------------------ */

void test_rng_seed(test_rng *rng, uint64_t seed) {
    rng->state = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    (void)test_rng_next(rng);
}

uint64_t test_rng_next(test_rng *rng) { /* splitmix64 */
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double test_rng_uniform(test_rng *rng) { return (double)(test_rng_next(rng) >> 11) * 0x1.0p-53; }

double test_rng_normal(test_rng *rng) {
    double u1 = test_rng_uniform(rng), u2 = test_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t test_rng_range(test_rng *rng, int64_t lo, int64_t hi) {
    return lo + (int64_t)(test_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

const int64_t test_ragged_sizes[] = {1, 2, 16, 127, 128, 129, 255, 256, 1000, 0};

void test_fill_f32(float *x, int64_t rows, int64_t cols, int64_t ld, float scale, unsigned what,
                   uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (int64_t r = 0; r < rows; ++r) {
        float row_scale = scale;
        if (what & TEST_FILL_WIDE_RANGE) row_scale *= ldexpf(1.0f, (int)test_rng_range(&rng, -20, 20));
        for (int64_t c = 0; c < cols; ++c) x[r * ld + c] = (float)test_rng_normal(&rng) * row_scale;
    }
    if (what & TEST_FILL_ZERO_BLOCK) {
        const int64_t br = test_rng_range(&rng, 0, (rows - 1) / 128) * 128;
        const int64_t bc = test_rng_range(&rng, 0, (cols - 1) / 128) * 128;
        for (int64_t r = br; r < br + 128 && r < rows; ++r)
            for (int64_t c = bc; c < bc + 128 && c < cols; ++c) x[r * ld + c] = 0.0f;
    }
    if (what & TEST_FILL_ZERO_ROW) {
        const int64_t r = test_rng_range(&rng, 0, rows - 1);
        for (int64_t c = 0; c < cols; ++c) x[r * ld + c] = 0.0f;
    }
    if (what & TEST_FILL_OUTLIERS) {
        const int64_t n = 1 + rows * cols / 100000;
        for (int64_t i = 0; i < n; ++i) {
            const int64_t r = test_rng_range(&rng, 0, rows - 1), c = test_rng_range(&rng, 0, cols - 1);
            x[r * ld + c] = (test_rng_uniform(&rng) < 0.5 ? -1000.0f : 1000.0f) * scale;
        }
    }
    if (what & TEST_FILL_NONFINITE) {
        const float specials[3] = {NAN, INFINITY, -INFINITY};
        for (int i = 0; i < 3; ++i) {
            const int64_t r = test_rng_range(&rng, 0, rows - 1), c = test_rng_range(&rng, 0, cols - 1);
            x[r * ld + c] = specials[i];
        }
    }
}

void test_fill_bf16(uint16_t *x, int64_t rows, int64_t cols, int64_t ld, float scale, unsigned what,
                    uint64_t seed) {
    float *tmp = test_malloc((size_t)(rows * cols) * sizeof(float));
    test_fill_f32(tmp, rows, cols, cols, scale, what, seed);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) x[r * ld + c] = bfp8_f32_to_bf16(tmp[r * cols + c]);
    free(tmp);
}

/* ------------------------------------------------------------------------ */

static double sqnr_from_sums(double signal, double noise) {
    if (noise == 0.0) return INFINITY;
    if (signal == 0.0) return -INFINITY;
    return 10.0 * log10(signal / noise);
}

double test_sqnr_db(const double *ref, int64_t ld_ref, const float *out, int64_t ld_out,
                    int64_t rows, int64_t cols) {
    double signal = 0.0, noise = 0.0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const double x = ref[r * ld_ref + c], e = x - (double)out[r * ld_out + c];
            signal += x * x;
            noise += e * e;
        }
    if (isnan(noise)) return -INFINITY;
    return sqnr_from_sums(signal, noise);
}

test_sqnr_report test_sqnr_tiles(const double *ref, int64_t ld_ref, const float *out,
                                 int64_t ld_out, int64_t rows, int64_t cols, int64_t tile) {
    test_sqnr_report rep = {test_sqnr_db(ref, ld_ref, out, ld_out, rows, cols), INFINITY, 0, 0};
    for (int64_t tr = 0; tr * tile < rows; ++tr)
        for (int64_t tc = 0; tc * tile < cols; ++tc) {
            const int64_t r0 = tr * tile, c0 = tc * tile;
            const int64_t nr = rows - r0 < tile ? rows - r0 : tile;
            const int64_t nc = cols - c0 < tile ? cols - c0 : tile;
            const double db = test_sqnr_db(ref + r0 * ld_ref + c0, ld_ref, out + r0 * ld_out + c0,
                                           ld_out, nr, nc);
            if (db < rep.worst_tile_db || (isnan(db) && !isnan(rep.worst_tile_db))) {
                rep.worst_tile_db = db;
                rep.worst_tile_row = tr;
                rep.worst_tile_col = tc;
            }
        }
    return rep;
}

double test_calc_diff(const double *ref, int64_t ld_ref, const float *out, int64_t ld_out,
                      int64_t rows, int64_t cols) {
    double xy = 0.0, sq = 0.0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const double x = ref[r * ld_ref + c], y = out[r * ld_out + c];
            xy += x * y;
            sq += x * x + y * y;
        }
    if (sq == 0.0) return 0.0;
    return 1.0 - 2.0 * xy / sq;
}

int64_t test_compare_bytes(const char *what, const uint8_t *a, int64_t lda, const uint8_t *b,
                           int64_t ldb, int64_t rows, int64_t cols) {
    int64_t diffs = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            if (a[r * lda + c] != b[r * ldb + c]) {
                if (diffs < 5)
                    fprintf(stderr, "  %s[%lld, %lld]: 0x%02x vs 0x%02x\n", what, (long long)r,
                            (long long)c, a[r * lda + c], b[r * ldb + c]);
                ++diffs;
            }
    return diffs;
}

int64_t test_compare_f32_bits(const char *what, const float *a, const float *b, int64_t n) {
    int64_t diffs = 0;
    for (int64_t i = 0; i < n; ++i)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (diffs < 5) fprintf(stderr, "  %s[%lld]: %a vs %a\n", what, (long long)i, a[i], b[i]);
            ++diffs;
        }
    return diffs;
}

/* ------------------------------------------------------------------------ */

void test_matrix_to_f32(const bfp8_matrix *m, float *out) {
    for (int64_t r = 0; r < m->rows; ++r)
        for (int64_t c = 0; c < m->cols; ++c) {
            const int64_t i = r * m->ld + c;
            out[r * m->cols + c] = m->dtype == BFP8_F32 ? ((const float *)m->data)[i]
                                                        : bfp8_bf16_to_f32(((const uint16_t *)m->data)[i]);
        }
}

static double scale_of(const bfp8_qmatrix *q, int64_t r, int64_t c) {
    if (q->granularity == BFP8_GRAN_1X128) return q->scales[(c / 128) * q->scale_ld + r];
    return q->scales[(r / 128) * q->scale_ld + c / 128];
}

double test_dequant(const bfp8_qmatrix *q, int64_t r, int64_t c) {
    return (double)bfp8_e4m3_to_f32(q->data[r * q->ld + c]) * scale_of(q, r, c);
}

void test_ref_gemm_q_f64(const bfp8_qmatrix *a, const bfp8_qmatrix *b, int64_t r0, int64_t r1,
                         int64_t c0, int64_t c1, double *out, int64_t ld_out) {
    const int64_t k = a->cols;
    float lut[256];
    for (int i = 0; i < 256; ++i) lut[i] = bfp8_e4m3_to_f32((uint8_t)i);
    #pragma omp parallel for schedule(dynamic)
    for (int64_t r = r0; r < r1; ++r) {
        double *arow = test_malloc((size_t)k * sizeof(double));
        for (int64_t kk = 0; kk < k; ++kk) arow[kk] = (double)lut[a->data[r * a->ld + kk]] * scale_of(a, r, kk);
        for (int64_t c = c0; c < c1; ++c) {
            double acc = 0.0;
            for (int64_t kb = 0; kb < k; kb += 128) {
                const double sb = scale_of(b, c, kb);
                double part = 0.0;
                const int64_t kend = kb + 128 < k ? kb + 128 : k;
                for (int64_t kk = kb; kk < kend; ++kk) part += arow[kk] * (double)lut[b->data[c * b->ld + kk]];
                acc += part * sb;
            }
            out[(r - r0) * ld_out + (c - c0)] = acc;
        }
        free(arow);
    }
}

void test_ref_gemm_f64(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t k,
                       int64_t r0, int64_t r1, int64_t c0, int64_t c1, double *out, int64_t ld_out) {
    #pragma omp parallel for schedule(dynamic)
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
            double acc = 0.0;
            for (int64_t kk = 0; kk < k; ++kk) acc += (double)a[r * lda + kk] * (double)b[c * ldb + kk];
            out[(r - r0) * ld_out + (c - c0)] = acc;
        }
}
