/*
 * quantize_cases.h - what the quantizer tests share (test_gpu_quantize.c on
 * the GPU, quantize_emulated.cpp on CPU threads): host images of inputs and
 * outputs in three layouts, with poisoned guard zones around them, the
 * check of an output image against the CPU reference, and the test data.
 *
 * An image is a byte buffer that holds the matrix at some offset, with
 * guard bytes before and after; the GPU test mirrors an image in device
 * memory at the same alignment (cudaMalloc gives 256 bytes), so the kernels
 * see the same layout and the same pointer alignment.
 */
#ifndef BFP8_QUANTIZE_CASES_H
#define BFP8_QUANTIZE_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qlayout {
    QLAYOUT_DENSE = 0,  /* x: ld = cols; codes and scales: canonical */
    QLAYOUT_PADDED = 1, /* every ld larger than canonical, still 16-byte aligned */
    QLAYOUT_ODD = 2,    /* pointers and ld off 16-byte alignment: the general path */
    QLAYOUT_COUNT = 3
} qlayout;

const char *qlayout_name(qlayout layout);

/* A copy of `bytes` host bytes in ctx's device memory (fatal on failure):
 * the GPU tests mirror their images with it. */
void *device_image(bfp8_context *ctx, const void *host, size_t bytes);

/* x with the layout's ld and alignment, copied from a dense rows x cols source. */
typedef struct ximage {
    bfp8_matrix x; /* x.data points into img */
    uint8_t *img;
    size_t size, offset;
} ximage;

void ximage_init(ximage *m, const void *dense, bfp8_dtype dtype, int64_t rows, int64_t cols,
                 qlayout layout);
void ximage_free(ximage *m);

/* A quantized output: data and scale images, every byte `poison`. */
typedef struct qimage {
    bfp8_qmatrix q; /* q.data / q.scales point into the images */
    uint8_t *data_img;
    size_t data_size, data_offset;
    uint8_t *scale_img; /* bytes; scales start at scale_offset (a multiple of 4) */
    size_t scale_size, scale_offset;
    uint8_t poison;
} qimage;

void qimage_init(qimage *m, int64_t rows, int64_t cols, bfp8_granularity gran, qlayout layout,
                 uint8_t poison);
void qimage_free(qimage *m);

/* Differences of m from ref (a host qmatrix of the same shape and granularity,
 * any layout): every valid code and scale bit-equal, every other byte of the
 * images still the poison. Prints the first few, prefixed by `what`. */
int64_t qimage_check(const qimage *m, const bfp8_qmatrix *ref, const char *what);
/* Bytes of m's images that are no longer the poison (an output that must not be written). */
int64_t qimage_check_untouched(const qimage *m, const char *what);

/* Test data: N(0, 1) with the planted cases of test_fill (what), plus
 * groups of fp32 subnormals, of huge values, of negative zeros and values
 * exactly at 448 * 2^k. f32 or bf16 (rounded), dense. */
void *quantize_test_data(bfp8_dtype dtype, int64_t rows, int64_t cols, unsigned what, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif /* BFP8_QUANTIZE_CASES_H */
