/*
 * test_util.h - what every blockfp8 test shares: checks that count failures,
 * seeded random data with the hard cases planted (zero blocks, outliers,
 * non-finite values, ragged tails), error metrics (SQNR overall and per
 * 128x128 tile, calc_diff, bitwise compare) and fp64 reference GEMMs of the
 * same fp8 data and scales.
 *
 * A test's main returns test_exit_code(): 0 when every CHECK held, 1 otherwise.
 * GPU tests call TEST_REQUIRE_GPU() first: without a GPU it exits 77, which
 * ctest reports as "skipped".
 */
#ifndef BFP8_TEST_UTIL_H
#define BFP8_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "blockfp8.h"

/* ------------------------------------------------------------------------ */
/* Checks                                                                    */

extern int test_failures;
extern int test_checks;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        ++test_checks;                                                                       \
        if (!(cond)) {                                                                       \
            ++test_failures;                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                 \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
        }                                                                                    \
    } while (0)

/* A call that must return BFP8_OK; on failure prints the library's message. */
#define CHECK_OK(call)                                                                       \
    do {                                                                                     \
        bfp8_status check_ok_status_ = (call);                                               \
        CHECK(check_ok_status_ == BFP8_OK, "%s -> %s: %s", #call,                           \
              bfp8_status_name(check_ok_status_), bfp8_last_error());                       \
    } while (0)

/* A call that must fail with `expected`. */
#define CHECK_STATUS(call, expected)                                                         \
    do {                                                                                     \
        bfp8_status check_status_ = (call);                                                  \
        CHECK(check_status_ == (expected), "%s -> %s, expected %s (%s)", #call,             \
              bfp8_status_name(check_status_), bfp8_status_name(expected), bfp8_last_error()); \
    } while (0)

/* Exit 77 (skipped) when no CUDA device is usable. */
#define TEST_REQUIRE_GPU()                                                                   \
    do {                                                                                     \
        if (bfp8_cuda_device_count() < 1) {                                                  \
            printf("SKIP: no CUDA device\n");                                                \
            exit(77);                                                                        \
        }                                                                                    \
    } while (0)

/* Prints "<name>: N checks, F failed" and returns the exit code. */
int test_exit_code(const char *test_name);

/* Abort the whole test on a setup failure (allocation, missing file). */
void test_fatal(const char *fmt, ...);
void *test_malloc(size_t bytes); /* never NULL: aborts instead */

/* ------------------------------------------------------------------------ */
/* Random data                                                               */

typedef struct test_rng { uint64_t state; } test_rng;

void test_rng_seed(test_rng *rng, uint64_t seed);
uint64_t test_rng_next(test_rng *rng);
double test_rng_uniform(test_rng *rng);  /* [0, 1) */
double test_rng_normal(test_rng *rng);   /* mean 0, sd 1 */
int64_t test_rng_range(test_rng *rng, int64_t lo, int64_t hi); /* [lo, hi] */

/* What test_fill plants on top of N(0, 1) noise. */
enum {
    TEST_FILL_ZERO_BLOCK = 1 << 0,  /* one 128x128-aligned block (clipped) of zeros */
    TEST_FILL_ZERO_ROW = 1 << 1,    /* one whole row of zeros */
    TEST_FILL_OUTLIERS = 1 << 2,    /* a few values 1000x the rest */
    TEST_FILL_NONFINITE = 1 << 3,   /* one NaN, one +Inf, one -Inf */
    TEST_FILL_WIDE_RANGE = 1 << 4,  /* rows scaled by 2^[-20, 20]: tiny and huge groups */
    TEST_FILL_HARD = TEST_FILL_ZERO_BLOCK | TEST_FILL_ZERO_ROW | TEST_FILL_OUTLIERS
};

/* rows x cols fp32 matrix with row stride ld, N(0,1) * scale plus the planted cases. */
void test_fill_f32(float *x, int64_t rows, int64_t cols, int64_t ld, float scale, unsigned what,
                   uint64_t seed);
/* Same, rounded to bf16. */
void test_fill_bf16(uint16_t *x, int64_t rows, int64_t cols, int64_t ld, float scale, unsigned what,
                    uint64_t seed);

/* Sizes that hit every edge: 1, 127, 128, 129, ... (terminated by 0). */
extern const int64_t test_ragged_sizes[];

/* ------------------------------------------------------------------------ */
/* Metrics                                                                   */

/* 20 log10(||ref|| / ||ref - out||) in dB; +inf when equal, -inf when ref is 0 and out is not. */
double test_sqnr_db(const double *ref, int64_t ld_ref, const float *out, int64_t ld_out,
                    int64_t rows, int64_t cols);

typedef struct test_sqnr_report {
    double overall_db;
    double worst_tile_db; /* min over the tile x tile tiles */
    int64_t worst_tile_row, worst_tile_col; /* tile indices */
} test_sqnr_report;

test_sqnr_report test_sqnr_tiles(const double *ref, int64_t ld_ref, const float *out,
                                 int64_t ld_out, int64_t rows, int64_t cols, int64_t tile);

/* 1 - 2 sum(x y) / sum(x^2 + y^2) */
double test_calc_diff(const double *ref, int64_t ld_ref, const float *out, int64_t ld_out,
                      int64_t rows, int64_t cols);

/* Number of differing bytes in two rows x cols byte matrices (row strides lda, ldb);
 * prints the first few differences prefixed by `what`. */
int64_t test_compare_bytes(const char *what, const uint8_t *a, int64_t lda, const uint8_t *b,
                           int64_t ldb, int64_t rows, int64_t cols);
/* Bitwise compare of fp32 arrays (NaN bits too). */
int64_t test_compare_f32_bits(const char *what, const float *a, const float *b, int64_t n);

/* ------------------------------------------------------------------------ */
/* References                                                                */

/* bf16 / f32 host matrix to f32 (rows x cols, dense, ld = cols). */
void test_matrix_to_f32(const bfp8_matrix *m, float *out);

/* Exact dequantized value of a host qmatrix element, in double. */
double test_dequant(const bfp8_qmatrix *q, int64_t r, int64_t c);

/* fp64 GEMMs of the SAME fp8 data and scales, host qmatrices, for the output
 * rectangle rows [r0, r1) x cols [c0, c1), written to out[(r - r0) * ld_out + (c - c0)].
 *   1d2d: out[m, n] = sum_k a[m, k] b[n, k]     (a: M x K, b: N x K)
 *   1d1d: out[n, k] = sum_m a[n, m] b[k, m]     (a: N x M, b: K x M)   (same formula)
 * Both are "sum over the contraction of dequantized values", so one function serves. */
void test_ref_gemm_q_f64(const bfp8_qmatrix *a, const bfp8_qmatrix *b, int64_t r0, int64_t r1,
                         int64_t c0, int64_t c1, double *out, int64_t ld_out);

/* fp64 GEMM of unquantized f32 data: out[m, n] = sum_k a[m * lda + k] b[n * ldb + k]. */
void test_ref_gemm_f64(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t k,
                       int64_t r0, int64_t r1, int64_t c0, int64_t c1, double *out, int64_t ld_out);

#endif /* BFP8_TEST_UTIL_H */
