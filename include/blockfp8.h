/*
 * blockfp8.h - the one public header of blockfp8.
 *
 * FP8 training with fine-grained ("blockwise") scaling: e4m3 data with one
 * fp32 scale per 1x128 group (activations, gradients) or per 128x128 block
 * (weights), and GEMMs that promote every 128-wide k-block into fp32.
 * The numerical contract is docs/RECIPE.md; this header fixes the API and
 * the memory layouts.
 *
 * Conventions
 *  - Every function that can fail returns a bfp8_status. On failure nothing
 *    has been written to any output, and bfp8_last_error() returns a message
 *    for the calling thread.
 *  - Matrices are row-major. A matrix's "cols" is its contiguous dimension;
 *    "ld" is the distance between row starts, in elements.
 *  - Every operation runs on a context's backend (CPU or CUDA) and all the
 *    pointers it is given live in that backend's memory. On CUDA, work is
 *    enqueued on the context's stream and returns without synchronizing.
 *  - Sizes are int64_t; every entry point accepts any M, N, K >= 1.
 */
#ifndef BLOCKFP8_H
#define BLOCKFP8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BFP8_VERSION_MAJOR 0
#define BFP8_VERSION_MINOR 1
#define BFP8_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Status and errors                                                         */

typedef enum bfp8_status {
    BFP8_OK = 0,
    BFP8_ERR_NULL_POINTER = 1,   /* a required pointer is NULL */
    BFP8_ERR_INVALID_VALUE = 2,  /* bad enum, size < 1, unknown name */
    BFP8_ERR_SHAPE = 3,          /* operand shapes do not agree */
    BFP8_ERR_LAYOUT = 4,         /* ld / scale_ld / granularity / dtype not as documented */
    BFP8_ERR_ALIGNMENT = 5,      /* a pointer or leading dimension is misaligned */
    BFP8_ERR_UNSUPPORTED = 6,    /* valid, but not implemented on this backend */
    BFP8_ERR_NO_DEVICE = 7,      /* CUDA asked for, but not built in or no GPU */
    BFP8_ERR_CUDA = 8,           /* a CUDA / cuBLAS call failed */
    BFP8_ERR_OUT_OF_MEMORY = 9,
    BFP8_ERR_NONFINITE = 10,     /* NaN or Inf met where it is fatal */
    BFP8_ERR_IO = 11,            /* file read / write failed */
    BFP8_ERR_BAD_POINTER = 12    /* pointer is not in the context's backend memory */
} bfp8_status;

/* Name of a status, e.g. "BFP8_ERR_SHAPE". Never NULL. */
const char *bfp8_status_name(bfp8_status status);
/* Message of the last failing call on this thread ("" if none). */
const char *bfp8_last_error(void);

/* ------------------------------------------------------------------------ */
/* Formats                                                                   */

typedef enum bfp8_dtype {
    BFP8_F32 = 0,
    BFP8_BF16 = 1,
    BFP8_E4M3 = 2, /* e4m3 "fn": bias 7, max 448, NaN = 0x7f/0xff, no inf */
    BFP8_E5M2 = 3  /* IEEE-like: bias 15, max 57344, inf and NaN */
} bfp8_dtype;

#define BFP8_E4M3_MAX 448.0f
#define BFP8_E5M2_MAX 57344.0f

size_t bfp8_dtype_size(bfp8_dtype dtype);      /* 0 for an unknown dtype */
const char *bfp8_dtype_name(bfp8_dtype dtype); /* "f32", "bf16", "e4m3", "e5m2" */

/* Round to nearest even, saturating to +-max finite (infinities too),
 * NaN stays NaN: bit-exact with cvt.rn.satfinite.{e4m3,e5m2}x2.f32. */
uint8_t bfp8_f32_to_e4m3(float x);
uint8_t bfp8_f32_to_e5m2(float x);
float bfp8_e4m3_to_f32(uint8_t code);
float bfp8_e5m2_to_f32(uint8_t code);
/* Round to nearest even; NaN stays NaN (quiet). */
uint16_t bfp8_f32_to_bf16(float x);
float bfp8_bf16_to_f32(uint16_t bits);

/* Element-wise conversion of n host values; any pair of dtypes. */
bfp8_status bfp8_convert_host(bfp8_dtype dst_dtype, void *dst, bfp8_dtype src_dtype,
                              const void *src, size_t n);

/* ------------------------------------------------------------------------ */
/* Context: a backend, a device, a stream                                    */

typedef enum bfp8_backend { BFP8_BACKEND_CPU = 0, BFP8_BACKEND_CUDA = 1 } bfp8_backend;

typedef struct bfp8_context bfp8_context;

/* Number of usable CUDA devices; 0 without a GPU or without CUDA support. */
int bfp8_cuda_device_count(void);

/* device_ordinal is ignored on the CPU backend. */
bfp8_status bfp8_context_create(bfp8_context **ctx, bfp8_backend backend, int device_ordinal);
void bfp8_context_destroy(bfp8_context *ctx); /* NULL is fine */
bfp8_backend bfp8_context_backend(const bfp8_context *ctx);
/* CUDA: the cudaStream_t that work is enqueued on (NULL = legacy default). */
bfp8_status bfp8_context_set_stream(bfp8_context *ctx, void *cuda_stream);
bfp8_status bfp8_context_synchronize(bfp8_context *ctx);
/* CUDA: bytes of the context's GPU in use now (its total less its free
 * memory: every process's allocations and CUDA's own included);
 * BFP8_ERR_UNSUPPORTED on the CPU backend. */
bfp8_status bfp8_device_memory_in_use(const bfp8_context *ctx, size_t *bytes);

/*
 * Switches of a context, each 0 (off) or 1 (on). They change how work is
 * launched, never its result; the CPU backend keeps them and ignores them.
 *   BFP8_OPTION_QUANTIZE_PDL      (default 1) the CUDA quantizers start as
 *       programmatic dependents of the kernel before them on the stream: their
 *       CTAs are scheduled while that kernel drains and wait for it before
 *       touching memory.
 *   BFP8_OPTION_QUANTIZE_WARM_L2  (default 1) before that wait, the first
 *       resident CTAs of a quantizer ask L2 for the first rows of their tile.
 *   BFP8_OPTION_GEMM_PDL          (default 1) the CUDA FP8 GEMMs start the same
 *       way: their CTAs set up their barriers while the kernel before them
 *       drains, and the kernel after them may be scheduled as soon as they run.
 */
typedef enum bfp8_context_option {
    BFP8_OPTION_QUANTIZE_PDL = 0,
    BFP8_OPTION_QUANTIZE_WARM_L2 = 1,
    BFP8_OPTION_GEMM_PDL = 2
} bfp8_context_option;
bfp8_status bfp8_context_set_option(bfp8_context *ctx, bfp8_context_option option, int value);
bfp8_status bfp8_context_get_option(const bfp8_context *ctx, bfp8_context_option option, int *value);

/* Backend memory: host memory (64-byte aligned) on CPU, device memory on CUDA. */
bfp8_status bfp8_malloc(bfp8_context *ctx, void **ptr, size_t bytes);
void bfp8_free(bfp8_context *ctx, void *ptr);
bfp8_status bfp8_memset_zero(bfp8_context *ctx, void *ptr, size_t bytes);
bfp8_status bfp8_copy_to_backend(bfp8_context *ctx, void *dst, const void *host_src, size_t bytes);
bfp8_status bfp8_copy_to_host(bfp8_context *ctx, void *host_dst, const void *src, size_t bytes);

/* ------------------------------------------------------------------------ */
/* Tensor views                                                              */

/* A dense row-major matrix: rows x cols, row stride ld elements (ld >= cols). */
typedef struct bfp8_matrix {
    void *data;
    bfp8_dtype dtype;
    int64_t rows;
    int64_t cols;
    int64_t ld;
} bfp8_matrix;

typedef enum bfp8_granularity {
    BFP8_GRAN_1X128 = 1,  /* one scale per 1 x 128 group along cols */
    BFP8_GRAN_128X128 = 2 /* one scale per 128 x 128 block */
} bfp8_granularity;

/*
 * A quantized matrix: fp8 codes, row-major rows x cols, cols contiguous
 * (for a GEMM operand, cols is the contraction dimension: "K-major"),
 * plus fp32 dequantization scales (x ~ code * scale).
 *
 * Data:   data[r * ld + c], ld in bytes (= elements) with ld >= cols.
 *         The canonical ld is cols rounded up to 16, so every row starts on
 *         a 16-byte boundary (what the Hopper tensor-copy engine needs);
 *         bytes between cols and ld are padding that no kernel reads.
 *         Any ld that is a multiple of 16 works everywhere; one that is a
 *         multiple of 128 KiB (x^T of 131072 tokens) puts the rows of a
 *         128 x 128 tile on few DRAM channels, and writing such an x^T is
 *         ~2% slower on an H200 than with ld 128 bytes larger
 *         (bench/results/2026-12-02_quantize_pad_ld_h200.txt).
 *         The canonical layout does not pad: the canonical layout of
 *         fewer rows or columns must fit in the buffer of the most.
 * Scales, BFP8_GRAN_1X128 ("MN-major"):
 *         scales[kb * scale_ld + r] for row r and k-block kb = c / 128,
 *         kb < ceil(cols / 128); rows of one k-block are contiguous, and
 *         scale_ld >= rows is a multiple of 4 (16 bytes). Canonical:
 *         scale_ld = rows rounded up to 4.
 * Scales, BFP8_GRAN_128X128:
 *         scales[rb * scale_ld + kb] for block (rb = r / 128, kb = c / 128),
 *         scale_ld >= ceil(cols / 128). Canonical: scale_ld = ceil(cols/128).
 * Ragged tails: the last group / block along a dimension that is not a
 * multiple of 128 holds fewer elements; its scale covers the valid ones.
 */
typedef struct bfp8_qmatrix {
    uint8_t *data;
    float *scales;
    bfp8_dtype dtype; /* BFP8_E4M3 */
    bfp8_granularity granularity;
    int64_t rows;
    int64_t cols;
    int64_t ld;
    int64_t scale_ld;
} bfp8_qmatrix;

/* Fill q with the canonical layout for rows x cols (data, scales = NULL)
 * and return the bytes its data and scales need (either pointer may be NULL). */
bfp8_status bfp8_qmatrix_layout(bfp8_qmatrix *q, int64_t rows, int64_t cols,
                                bfp8_granularity granularity, size_t *data_bytes,
                                size_t *scale_bytes);

/* ------------------------------------------------------------------------ */
/* Quantization (docs/RECIPE.md section 3)                                   */

/*
 * Per group:  amax = max|x| (valid elements); mult = 448 / amax (amax == 0:
 * 1; overflow: FLT_MAX); with pow2, mult = 2^floor(log2(mult));
 * code = e4m3_rne_satfinite(x * mult); scale = 1 / mult.
 * A group whose amax is NaN or Inf gets every code 0x7f (NaN), its scale
 * is written as NaN (0x7fc00000), and *nonfinite_flag (if not NULL, in
 * backend memory) is set to 1. The flag is never cleared by a kernel.
 */
typedef struct bfp8_quantize_options {
    int pow2_scales;          /* 0 or 1 */
    uint32_t *nonfinite_flag; /* may be NULL */
} bfp8_quantize_options;

/*
 * Activations and gradients. x: R x C, bf16 or f32.
 *   out_rows (may be NULL): R x C, 1x128 groups along C          (x as stored)
 *   out_cols (may be NULL): C x R, 1x128 groups along R          (x transposed)
 * Both layouts come from one read of x. At least one output is required.
 * Both outputs use BFP8_GRAN_1X128 and any valid layout (see bfp8_qmatrix).
 */
bfp8_status bfp8_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);

/*
 * Weights. x: R x C, bf16 or f32, quantized in 128x128 blocks.
 *   out:   R x C (required)        out_t: C x R, the same blocks transposed
 *                                         (exact: same codes, same scales)
 * Both are BFP8_GRAN_128X128.
 */
bfp8_status bfp8_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out,
                                  bfp8_qmatrix *out_t, const bfp8_quantize_options *options);

/*
 * A stack of weights in one call (a mixture-of-experts layer's experts): x
 * holds G = x->rows / group_rows matrices of group_rows rows each
 * (group_rows and x->cols multiples of 128).
 *   out:   x->rows x x->cols, as bfp8_quantize_128x128 would write it
 *   out_t: (G x->cols) x group_rows, the G transposes stacked: rows
 *          [g C, (g + 1) C) hold matrix g's blocks transposed (may be NULL)
 */
bfp8_status bfp8_quantize_128x128_stacked(bfp8_context *ctx, const bfp8_matrix *x, int64_t group_rows,
                                          bfp8_qmatrix *out, bfp8_qmatrix *out_t,
                                          const bfp8_quantize_options *options);

/* out (f32 or bf16, rows x cols of q) = codes * scales. */
bfp8_status bfp8_dequantize(bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_matrix *out);

/* Element-wise dtype conversion of a matrix (same shape), e.g. f32 -> bf16. */
bfp8_status bfp8_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst);

/* ------------------------------------------------------------------------ */
/* GEMMs (docs/RECIPE.md section 4)                                          */

/*
 * 1D2D, for fprop and dgrad:  D[M, N] = A[M, K] . B[N, K]^T
 *   a: M x K, BFP8_GRAN_1X128     b: N x K, BFP8_GRAN_128X128
 *   d: M x N, bf16 or f32.
 * Every 128-wide k-block's partial sum is promoted into fp32 with
 * a.scale[m, kb] * b.scale[nb, kb]; D is rounded once at the end.
 */
bfp8_status bfp8_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           bfp8_matrix *d);

/*
 * 1D1D, for wgrad:  D[N, K] = C[N, K] + A[N, M] . B[K, M]^T
 *   a: N x M (dy transposed), b: K x M (x transposed), both BFP8_GRAN_1X128
 *   along M (the tokens); c: f32 or NULL (D = A.B^T); c may alias d.
 *   d: f32 or bf16 (bf16 only without c).
 * On the CUDA backend, c == d (gradient accumulation in place) with d 16-byte
 * aligned and ld a multiple of 4 adds A.B^T into d through the TMA unit: one
 * fp32 add per element as otherwise, except that it may flush subnormal
 * inputs and results (|x| < 2^-126) to zero, as the GPU's fp32 atomic adds do.
 */
bfp8_status bfp8_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           const bfp8_matrix *c, bfp8_matrix *d);

/*
 * Grouped GEMMs, for mixture-of-experts layers: G experts, the tokens routed
 * to expert g in rows [offsets[g], offsets[g+1]) of one token matrix.
 * group_offsets: G + 1 values in HOST memory, offsets[0] = 0, never
 * decreasing, each a multiple of 128 (BFP8_GROUP_ALIGN: pad every expert's
 * tokens with zero rows to a multiple of 128); an expert may have none.
 * The numerics are those of bfp8_gemm_1d2d / bfp8_gemm_1d1d, group by group.
 *
 * 1D2D, grouped along M (fprop, dgrad):
 *   D[rows of g, :] = A[rows of g, :] . B_g^T          for every g
 *   a: M x K (1x128), offsets[G] <= M;
 *   b: G*N x K (128x128), N a multiple of 128: the G weights quantized as
 *      one matrix, B_g is rows g*N .. g*N + N - 1;
 *   d: M x N, bf16 or f32; rows from offsets[G] on are not written.
 * 1D1D, grouped along the tokens (wgrad):
 *   D_g[N, K] = C_g + A[:, tokens of g] . B[:, tokens of g]^T   for every g
 *   a: N x M (dy transposed), b: K x M (x transposed), both 1x128 along M,
 *      offsets[G] <= M; c: f32 or NULL, may alias d;
 *   d: G*N x K (D_g is rows g*N .. g*N + N - 1), f32 or bf16 (bf16 only
 *      without c). An expert without tokens gets D_g = C_g (or zeros).
 */
#define BFP8_GROUP_ALIGN 128
bfp8_status bfp8_gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                   const int64_t *group_offsets, int num_groups, bfp8_matrix *d);
bfp8_status bfp8_gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                   const int64_t *group_offsets, int num_groups, const bfp8_matrix *c,
                                   bfp8_matrix *d);

/*
 * The same with the G + 1 offsets in the context's backend memory (device
 * memory on CUDA), e.g. written by a router kernel: no copy to the host and
 * no synchronization, so a training step can stay on the GPU (and, after a
 * first call of at least this size has made the context's table, be captured
 * in a CUDA graph). The offsets cannot be checked before the GEMM runs;
 * instead each is taken as clamped: offsets[0] as 0, then offsets[g + 1]
 * rounded down to a multiple of 128 and clamped to [offsets[g], tokens
 * rounded down to 128]. Bad offsets give other groups than meant, never an
 * access out of bounds.
 */
bfp8_status bfp8_gemm_1d2d_grouped_device_offsets(bfp8_context *ctx, const bfp8_qmatrix *a,
                                                  const bfp8_qmatrix *b, const int64_t *group_offsets,
                                                  int num_groups, bfp8_matrix *d);
bfp8_status bfp8_gemm_1d1d_grouped_device_offsets(bfp8_context *ctx, const bfp8_qmatrix *a,
                                                  const bfp8_qmatrix *b, const int64_t *group_offsets,
                                                  int num_groups, const bfp8_matrix *c, bfp8_matrix *d);

/*
 * bf16 GEMM (the baseline recipe):  D[M, N] = C + op(A)[M, K] . op(B)[N, K]^T
 *   a is stored M x K, or K x M when a_transposed;
 *   b is stored N x K, or K x N when b_transposed;
 *   c: f32 or NULL, may alias d; d: bf16 or f32 (f32 when c is given).
 * fp32 accumulation. CUDA: cuBLASLt.
 */
bfp8_status bfp8_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                           const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                           bfp8_matrix *d);

/* ------------------------------------------------------------------------ */
/* Linear layer (docs/RECIPE.md section 7)                                   */

typedef enum bfp8_recipe {
    BFP8_RECIPE_BF16 = 0,                   /* "bf16" */
    BFP8_RECIPE_FP8_BLOCKWISE = 1,          /* "fp8-blockwise" */
    BFP8_RECIPE_FP8_BLOCKWISE_BF16WGRAD = 2 /* "fp8-blockwise-bf16wgrad" */
} bfp8_recipe;

const char *bfp8_recipe_name(bfp8_recipe recipe); /* NULL for an unknown recipe */
bfp8_status bfp8_recipe_from_name(const char *name, bfp8_recipe *recipe);

/* Indices into bfp8_linear_config.nonfinite_flags. */
enum { BFP8_LINEAR_FLAG_X = 0, BFP8_LINEAR_FLAG_W = 1, BFP8_LINEAR_FLAG_DY = 2,
       BFP8_LINEAR_NUM_FLAGS = 3 };

typedef struct bfp8_linear_config {
    int64_t in_features;  /* K */
    int64_t out_features; /* N */
    int64_t max_tokens;   /* largest M passed to forward */
    bfp8_recipe recipe;
    int pow2_scales;
    /* BFP8_LINEAR_NUM_FLAGS uint32 in backend memory, or NULL: set to 1
     * when the quantized x, W or dy held a NaN/Inf (see bfp8_quantize_options). */
    uint32_t *nonfinite_flags;
} bfp8_linear_config;

/* y = x W^T, W: N x K. Holds the quantized weight and what backward needs;
 * the operands that live within one call (the quantized x, dy and dy^T) are
 * in a scratch that the layers of one context share, so the calls of a
 * context's layers run one after another on its stream. */
typedef struct bfp8_linear bfp8_linear;

bfp8_status bfp8_linear_create(bfp8_linear **lin, bfp8_context *ctx, const bfp8_linear_config *cfg);
void bfp8_linear_destroy(bfp8_linear *lin); /* NULL is fine */

/* Take a new fp32 master weight (N x K, contiguous, backend memory): quantizes
 * it 128x128 (fp8 recipes, both W and W^T) or converts it to bf16. Call it
 * after every optimizer step, before the next forward. */
bfp8_status bfp8_linear_set_weight(bfp8_linear *lin, const float *weight);

/* y[M, N] = x[M, K] . W^T, x and y bf16 contiguous, M = tokens <= max_tokens.
 * Saves what backward needs; in the bf16 and bf16-wgrad recipes that is the
 * pointer x itself, which must stay valid until bfp8_linear_backward. */
bfp8_status bfp8_linear_forward(bfp8_linear *lin, const uint16_t *x, int64_t tokens, uint16_t *y);

/* Backward of the last forward: dx[M, K] = dy . W (dx may be NULL: skipped),
 * dw[N, K] (f32) = dy^T . x, added to dw when accumulate, else stored. */
bfp8_status bfp8_linear_backward(bfp8_linear *lin, const uint16_t *dy, uint16_t *dx, float *dw,
                                 int accumulate);

/* The same with f32 activations (x, y, dy, dx f32 contiguous), for callers
 * that keep them in f32: the quantizers read f32 directly and the GEMMs
 * write f32, so nothing is converted or rounded to bf16 on the way. The
 * fp8-blockwise recipe only (the others keep a bf16 x for their bf16 wgrad:
 * BFP8_ERR_UNSUPPORTED). Forward and backward may mix the two forms. With x
 * holding bf16 values, the codes, scales and dw are those of the bf16 form
 * bit for bit, and y and dx round to its outputs (RECIPE.md section 7). */
bfp8_status bfp8_linear_forward_f32(bfp8_linear *lin, const float *x, int64_t tokens, float *y);
bfp8_status bfp8_linear_backward_f32(bfp8_linear *lin, const float *dy, float *dx, float *dw,
                                     int accumulate);

/* ------------------------------------------------------------------------ */
/* Attention                                                                 */

/*
 * Multi-head scaled dot-product attention, causal or not, with grouped-query
 * heads: O = softmax(scale . Q K^T) V per (sequence, head), bf16 in and out,
 * fp32 accumulation and softmax.
 *
 * Layouts, token-major with a row stride per tensor (elements between the
 * rows of two consecutive tokens), so a fused qkv buffer can be used in place:
 *   q[b, t, h, d]  at q + (b * seq + t) * q_row_stride + h * head_dim + d
 *   k, v           the same with n_kv_heads heads: query head h reads
 *                  key/value head h / (n_heads / n_kv_heads)
 *   o, d_o, dq     as q (o_row_stride, do_row_stride, dq_row_stride)
 *   dk, dv         as k (dk_row_stride, dv_row_stride)
 *   lse[b, h, t]   at lse + (b * n_heads + h) * seq + t, fp32: the natural
 *                  log of each query row's softmax denominator,
 *                  log(sum_s exp(scale * q.k_s)), what backward reads
 * A row stride of 0 means dense (n_heads * head_dim, or n_kv_heads *
 * head_dim for k, v, dk, dv); a given one must hold all heads of a row.
 * Pointers are 16-byte aligned and row strides multiples of 8 (what the
 * tensor-copy engine needs), on both backends. Causal: query t sees keys
 * 0..t. Any seq >= 1; head_dim 64 or 128.
 *
 * The backward is deterministic: the same inputs give the same bits, run
 * after run (on CUDA, dQ is summed over key blocks in fp32 in a workspace, in
 * a fixed order; letting those sums land in any order measured no faster).
 */
typedef struct bfp8_attention_desc {
    int64_t batch;       /* B >= 1 */
    int64_t seq;         /* T >= 1: queries = keys per sequence */
    int64_t n_heads;     /* H >= 1 query heads */
    int64_t n_kv_heads;  /* key / value heads, divides n_heads; 0: n_heads */
    int64_t head_dim;    /* 64 or 128 */
    int causal;          /* 0 or 1 */
    float softmax_scale; /* > 0, or 0 for 1 / sqrt(head_dim) */
    int64_t q_row_stride, k_row_stride, v_row_stride, o_row_stride;    /* 0: dense */
    int64_t do_row_stride, dq_row_stride, dk_row_stride, dv_row_stride; /* 0: dense */
} bfp8_attention_desc;

/* o (bf16) and lse (fp32) from q, k, v. */
bfp8_status bfp8_attention_forward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                   const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse);

/* Bytes of backend memory bfp8_attention_backward needs as its workspace
 * for this desc on ctx's backend (0 on the CPU). */
bfp8_status bfp8_attention_backward_workspace_size(const bfp8_context *ctx, const bfp8_attention_desc *desc,
                                                   size_t *bytes);

/* dq, dk, dv (bf16) from the forward's q, k, v, o, lse and the gradient
 * d_o of o. workspace: at least bfp8_attention_backward_workspace_size
 * bytes of backend memory, 256-byte aligned (NULL when that is 0); its
 * contents need no initialisation and are left undefined. */
bfp8_status bfp8_attention_backward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                    const uint16_t *k, const uint16_t *v, const uint16_t *o, const uint16_t *d_o,
                                    const float *lse, uint16_t *dq, uint16_t *dk, uint16_t *dv, void *workspace,
                                    size_t workspace_bytes);

/* ------------------------------------------------------------------------ */
/* Mixture of experts                                                        */

/*
 * A mixture-of-experts feed-forward layer and the small ops it is made of.
 * T tokens of width H; E routed experts, each a SwiGLU FFN of width F;
 * every token goes to k of them (top-k of the router's scores) and,
 * optionally, to one shared expert. Everything is deterministic: the same
 * inputs give the same bits, run after run (no order-dependent atomics).
 *
 * Routing tables (int32, backend memory):
 *   topk_expert[t * k + j]  the j-th expert of token t (j = 0 the highest score)
 *   slot s = t * k + j      one (token, expert) pair
 *   slot_row[s]             the row of slot s in the permuted matrix, -1 when
 *                           the slot was dropped (capacity)
 *   row_slot[r]             the slot of permuted row r, -1 for a padding row
 * The permuted matrix holds expert 0's tokens, then expert 1's, ..., each
 * expert's in token order and padded with zero rows to a multiple of 128
 * (BFP8_GROUP_ALIGN), as the grouped GEMMs take them: expert e's rows are
 * [offsets[e], offsets[e + 1]). An expert without tokens has no rows.
 */
typedef enum bfp8_moe_score_fn {
    BFP8_MOE_SCORE_SOFTMAX = 0, /* softmax over the E logits */
    BFP8_MOE_SCORE_SIGMOID = 1  /* sigmoid of each logit (DeepSeek-V3) */
} bfp8_moe_score_fn;

/* Rows of the permuted matrix for any routing of `tokens` tokens: every
 * expert's run padded to 128, at most round_down(T k + 127 min(T k, E), 128). */
int64_t bfp8_moe_max_rows(int64_t tokens, int top_k, int num_experts);

/*
 * Router. logits: T x E f32 (dense). scores = softmax or sigmoid of the
 * logits (T x E f32, written). The k experts of a token are those of the
 * largest score + bias[e] (bias: E f32 or NULL; ties to the lower index),
 * in decreasing order; their weights are
 *   w_j = scale * s_j / (normalize ? sum_i s_i : 1)
 * from the unbiased scores s, so the bias steers selection only.
 * score_sum (E f32, or NULL): sum over the tokens of each expert's score,
 * in token order (for a load-balancing loss).
 */
bfp8_status bfp8_moe_route(bfp8_context *ctx, const float *logits, const float *bias, int64_t tokens,
                           int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize, float scale,
                           float *scores, int32_t *topk_expert, float *topk_weight, float *score_sum);

/* d_logits (T x E f32) from the gradient of the weights (d_topk_weight,
 * T x k) and, when score_grad (E f32) is not NULL, dL/dscore[t, e] +=
 * score_grad[e] for every token (the gradient of a load-balancing loss). */
bfp8_status bfp8_moe_route_backward(bfp8_context *ctx, const float *scores, const int32_t *topk_expert,
                                    const float *d_topk_weight, const float *score_grad, int64_t tokens,
                                    int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize,
                                    float scale, float *d_logits);

/*
 * The permutation of a routing. capacity: 0 keeps every slot; else each
 * expert keeps its first `capacity` tokens (in token order) and drops the
 * rest. Writes slot_row (T k), offsets (E + 1 int64: offsets[0] = 0, each a
 * multiple of 128), routed (E int64: the tokens the router sent each expert,
 * dropped ones included: its load) and row_slot for rows [0, offsets[E]);
 * max_rows (>= offsets[E], e.g. bfp8_moe_max_rows) is row_slot's length.
 */
bfp8_status bfp8_moe_dispatch(bfp8_context *ctx, const int32_t *topk_expert, int64_t tokens, int top_k,
                              int num_experts, int64_t capacity, int64_t max_rows, int32_t *slot_row,
                              int32_t *row_slot, int64_t *offsets, int64_t *routed);

/*
 * xp[r] = x[token of row_slot[r]] (zeros for padding rows), for r < P, the
 * rows of xp / xp_q / xp_qt. x: T x H f32 or bf16; xp: P x H f32 or bf16
 * (either dtype: converted on the way), or NULL; xp_q: P x H 1x128, or
 * NULL: the same rows quantized as bfp8_quantize_1x128(xp in x's
 * precision) would, bit for bit, without a pass over xp; xp_qt: H x P
 * 1x128, or NULL: xp's columns quantized likewise (out_cols of
 * bfp8_quantize_1x128; P and H multiples of 128, and then the rows of x
 * and of every output starting at 16-byte boundaries), from the same read
 * of x. At least one output.
 */
bfp8_status bfp8_moe_permute(bfp8_context *ctx, const bfp8_matrix *x, const int32_t *row_slot, int top_k,
                             bfp8_matrix *xp, bfp8_qmatrix *xp_q, bfp8_qmatrix *xp_qt,
                             const bfp8_quantize_options *options);

/*
 * y[t] = (accumulate ? y[t] : 0) + sum_j w[t, j] yp[slot_row[t k + j]],
 * j ascending, one fp32 fused multiply-add per term, dropped slots skipped;
 * topk_weight NULL: every w = 1 (the backward of bfp8_moe_permute).
 * yp: P x H f32 or bf16, y: T x H f32 or bf16.
 */
bfp8_status bfp8_moe_combine(bfp8_context *ctx, const bfp8_matrix *yp, const int32_t *slot_row,
                             const float *topk_weight, int top_k, int accumulate, bfp8_matrix *y);

/*
 * Backward of bfp8_moe_combine (accumulate 0) at dy (T x H):
 *   dyp[r] = w[s] dy[token of s], s = row_slot[r] (zeros for padding rows),
 *     as dyp (P x H f32 / bf16) and / or quantized as permute's: rows dyp_q,
 *     columns dyp_qt (both quantized from the fp32 products w[s] dy);
 *   d_topk_weight[s] = dot(dy[token of s], yp[slot_row[s]]) (0 for a dropped
 *     slot), in a fixed order (128 fp32 partial sums: column c into sum
 *     (c / 128 mod 4, c mod 128 / 4), columns ascending; the four groups of
 *     32 each added by an xor butterfly, then in order); yp has dyp's rows;
 *     skipped when d_topk_weight is NULL (then yp may be NULL).
 * row_slot and slot_row are the two tables of one bfp8_moe_dispatch.
 * topk_weight NULL: every w = 1.
 */
bfp8_status bfp8_moe_combine_backward(bfp8_context *ctx, const bfp8_matrix *dy, const bfp8_matrix *yp,
                                      const int32_t *row_slot, const int32_t *slot_row, const float *topk_weight,
                                      int top_k, bfp8_matrix *dyp, bfp8_qmatrix *dyp_q, bfp8_qmatrix *dyp_qt,
                                      const bfp8_quantize_options *options, float *d_topk_weight);

/* SwiGLU on rows of [gate | up] (gu: R x 2F f32): h = silu(gate) * up,
 * h: R x F f32 or bf16. Backward: dgu (R x 2F, f32 or bf16) from gu, dh (R x F f32). */
bfp8_status bfp8_moe_swiglu(bfp8_context *ctx, const bfp8_matrix *gu, bfp8_matrix *h);
bfp8_status bfp8_moe_swiglu_backward(bfp8_context *ctx, const bfp8_matrix *gu, const bfp8_matrix *dh,
                                     bfp8_matrix *dgu);

/* How a layer keeps its experts' load even (bfp8_moe_config.balance). */
typedef enum bfp8_moe_balance {
    BFP8_MOE_BALANCE_NONE = 0,
    /* auxiliary-loss-free (DeepSeek-V3): a per-expert bias added to the
     * scores for selection only; bfp8_moe_update_bias moves it by
     * bias_update_rate towards the mean load after every step */
    BFP8_MOE_BALANCE_BIAS = 1,
    /* load-balancing loss  aux = coef * E * sum_e f_e P_e  (f_e: share of
     * the T k slots routed to e, P_e: mean score of e over the tokens),
     * its gradient added to the router's in backward (f_e held constant) */
    BFP8_MOE_BALANCE_AUX_LOSS = 2
} bfp8_moe_balance;

typedef struct bfp8_moe_config {
    int64_t hidden;        /* H: in and out features, a multiple of 128 */
    int64_t expert_hidden; /* F: each routed expert's SwiGLU width, a multiple of 128 */
    int64_t shared_hidden; /* the shared expert's width (a multiple of 128), 0: none */
    int num_experts;       /* E >= 1 */
    int top_k;             /* 1 <= k <= E, k <= 16 */
    int64_t max_tokens;    /* largest T passed to forward */
    bfp8_moe_score_fn score_fn;
    int normalize_weights; /* 0 or 1: top-k weights divided by their scores' sum */
    float route_scale;     /* > 0: multiplies the top-k weights (1 for none) */
    /* 0: no token is dropped. > 0: an expert keeps at most
     * ceil(capacity_factor * T * k / E) tokens, the first in token order;
     * a dropped (token, expert) pair contributes nothing to y */
    float capacity_factor;
    bfp8_moe_balance balance;
    float bias_update_rate; /* BALANCE_BIAS: the step of the bias (e.g. 1e-3) */
    float aux_loss_coef;    /* BALANCE_AUX_LOSS: coef (e.g. 1e-2) */
    bfp8_recipe recipe;     /* the experts' GEMMs, as bfp8_linear's */
    int pow2_scales;
    /* BFP8_LINEAR_NUM_FLAGS uint32 in backend memory, or NULL (as bfp8_linear's) */
    uint32_t *nonfinite_flags;
} bfp8_moe_config;

/*
 * The layer's fp32 master weights (backend memory, contiguous, owned by the
 * caller), or their gradients in the same layout:
 *   router:        E x H               logits = x router^T
 *   experts_w13:   E*2F x H            expert e's rows e*2F .. : gate (F rows), then up (F rows)
 *   experts_w2:    E*H x F             expert e's down projection, rows e*H ..
 *   shared_w13:    2Fs x H, shared_w2: H x Fs (NULL without a shared expert)
 */
typedef struct bfp8_moe_weights {
    float *router;
    float *experts_w13;
    float *experts_w2;
    float *shared_w13;
    float *shared_w2;
} bfp8_moe_weights;

/*
 * y[T, H] = shared(x) + sum_j w_j expert_{e_j}(x), x and y f32 contiguous,
 * expert(x) = W2_e (silu(x W1_e^T) * (x W3_e^T)). The router runs in bf16
 * GEMMs with fp32 accumulation and fp32 scores; the experts' GEMMs follow the
 * recipe (fp8: grouped 1D2D fprop and dgrad, grouped 1D1D wgrad in
 * fp8-blockwise; bf16: one bf16 GEMM per expert). A forward synchronizes
 * once with the host: the experts' offsets decide the GEMMs' shapes.
 */
typedef struct bfp8_moe bfp8_moe;

bfp8_status bfp8_moe_create(bfp8_moe **moe, bfp8_context *ctx, const bfp8_moe_config *cfg);
void bfp8_moe_destroy(bfp8_moe *moe); /* NULL is fine */

/* Take new master weights: quantizes (fp8 recipes) or converts (bf16) them.
 * Call after every optimizer step, before the next forward. */
bfp8_status bfp8_moe_set_weights(bfp8_moe *moe, const bfp8_moe_weights *weights);

/* y = layer(x) for T = tokens <= max_tokens. Keeps what backward needs
 * (its own copies: x may change after the call). */
bfp8_status bfp8_moe_forward(bfp8_moe *moe, const float *x, int64_t tokens, float *y);

/* Backward of the last forward: dx (T x H, may be NULL: skipped) and the
 * weights' gradients (every pointer of grads that the layer has), added to
 * them when accumulate, else stored. */
bfp8_status bfp8_moe_backward(bfp8_moe *moe, const float *dy, float *dx, const bfp8_moe_weights *grads,
                              int accumulate);

/* BALANCE_AUX_LOSS: the loss value of the last forward (0 otherwise). */
bfp8_status bfp8_moe_aux_loss(const bfp8_moe *moe, float *loss);

/*
 * Once per training step, after the optimizer: load[e] (E int64 host
 * memory, or NULL) gets the tokens routed to each expert by the forwards
 * since the last call (dropped ones included), which then restart from 0;
 * with BALANCE_BIAS, bias[e] += rate * sign(mean load - load[e]).
 * bias (E f32 host memory, or NULL) gets the bias after the update.
 */
bfp8_status bfp8_moe_update_bias(bfp8_moe *moe, int64_t *load, float *bias);

/* BALANCE_BIAS: replace the bias (E f32, host memory) that the next forwards
 * select with: a checkpoint's, or one a trainer moves itself (from the load
 * of several replicas, say). */
bfp8_status bfp8_moe_set_bias(bfp8_moe *moe, const float *bias);

/* The routing of the last forward: routed[e] (E int64 host memory, or NULL)
 * the tokens the router sent expert e, dropped ones included; *dropped (or
 * NULL) the (token, expert) pairs the capacity dropped. BFP8_ERR_INVALID_VALUE
 * before a forward. */
bfp8_status bfp8_moe_last_routing(const bfp8_moe *moe, int64_t *routed, int64_t *dropped);

#ifdef __cplusplus
}
#endif

#endif /* BLOCKFP8_H */
