/*
 * test_gpu_quantize.c - the CUDA quantizers against the CPU reference, bit
 * for bit (codes and scale bits), through the public API:
 *
 *   bfp8_quantize_1x128   dual, rows only, cols only
 *   bfp8_quantize_128x128 W only, W and W^T
 *
 * on bf16 and f32 inputs of ragged shapes, with zero blocks and rows,
 * outliers, subnormal and huge groups, negative zeros, NaN/Inf (and the
 * non-finite flag), pow2 scales off and on, in three layouts: dense, padded
 * (every ld and scale_ld above canonical, still aligned: the fast path with
 * ragged edges) and odd (pointers and ld off 16-byte alignment: the general
 * path). Outputs sit in poisoned images with guard bytes; each run is done
 * twice with different poison bytes, and checks that every valid code and
 * scale equals the reference and every other byte is still the poison.
 *
 *   gpu_quantize            full run: R, C in {1, 127, 128, 129, 1000, 4160}
 *   gpu_quantize --small    for compute-sanitizer memcheck: every one of those
 *                           sizes as R and as C, one poison
 *   gpu_quantize --race     for racecheck / synccheck: one ragged shape with
 *                           more tiles than resident CTAs (CTAs of later
 *                           waves reuse the shared memory of earlier ones),
 *                           dense only
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quantize_cases.h"
#include "test_util.h"

enum { MODE_DUAL, MODE_ROWS, MODE_COLS, MODE_BLOCK, MODE_BLOCK_T, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"1x128 dual", "1x128 rows", "1x128 cols",
                                                   "128x128", "128x128+T"};

static bfp8_context *cpu, *gpu;
static int64_t runs = 0;

typedef struct reference {
    bfp8_qmatrix rows, cols, block, block_t;
    uint32_t flag;
} reference;

static void alloc_host_q(bfp8_qmatrix *q, int64_t rows, int64_t cols, bfp8_granularity g) {
    size_t db, sb;
    if (bfp8_qmatrix_layout(q, rows, cols, g, &db, &sb) != BFP8_OK) test_fatal("%s", bfp8_last_error());
    q->data = test_malloc(db);
    q->scales = test_malloc(sb);
}

static void make_reference(const bfp8_matrix *x, int pow2, reference *ref) {
    alloc_host_q(&ref->rows, x->rows, x->cols, BFP8_GRAN_1X128);
    alloc_host_q(&ref->cols, x->cols, x->rows, BFP8_GRAN_1X128);
    alloc_host_q(&ref->block, x->rows, x->cols, BFP8_GRAN_128X128);
    alloc_host_q(&ref->block_t, x->cols, x->rows, BFP8_GRAN_128X128);
    ref->flag = 0;
    const bfp8_quantize_options o = {pow2, &ref->flag};
    CHECK_OK(bfp8_quantize_1x128(cpu, x, &ref->rows, &ref->cols, &o));
    CHECK_OK(bfp8_quantize_128x128(cpu, x, &ref->block, &ref->block_t, &o));
}

static void free_reference(reference *ref) {
    bfp8_qmatrix *qs[4] = {&ref->rows, &ref->cols, &ref->block, &ref->block_t};
    for (int i = 0; i < 4; ++i) {
        free(qs[i]->data);
        free(qs[i]->scales);
    }
}

/* ------------------------------------------------------------------------ */
/* Device mirrors of host images                                             */

typedef struct device_q {
    bfp8_qmatrix q;
    uint8_t *data_img, *scale_img;
} device_q;

/* A device image of m (poisoned like it), with q pointing at the same offsets. */
static void device_q_init(device_q *d, const qimage *m) {
    d->data_img = device_image(gpu, m->data_img, m->data_size);
    d->scale_img = device_image(gpu, m->scale_img, m->scale_size);
    d->q = m->q;
    d->q.data = d->data_img + m->data_offset;
    d->q.scales = (float *)(d->scale_img + m->scale_offset);
}

/* Copy the device image back into m and free it. */
static void device_q_fetch(device_q *d, qimage *m) {
    CHECK_OK(bfp8_copy_to_host(gpu, m->data_img, d->data_img, m->data_size));
    CHECK_OK(bfp8_copy_to_host(gpu, m->scale_img, d->scale_img, m->scale_size));
    bfp8_free(gpu, d->data_img);
    bfp8_free(gpu, d->scale_img);
}

/* ------------------------------------------------------------------------ */

static void run_case(const ximage *xi, const bfp8_matrix *dx, int pow2, int mode, qlayout layout,
                     uint8_t poison, uint32_t flag_init, int with_options, const reference *ref) {
    const int64_t rows = xi->x.rows, cols = xi->x.cols;
    char what[200];
    snprintf(what, sizeof what, "%s %lldx%lld %s pow2=%d %s poison=0x%02x%s",
             bfp8_dtype_name(xi->x.dtype), (long long)rows, (long long)cols, mode_names[mode], pow2,
             qlayout_name(layout), poison, with_options ? "" : " options=NULL");
    const int block = mode == MODE_BLOCK || mode == MODE_BLOCK_T;
    const bfp8_granularity g = block ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128;
    const int want_q = mode != MODE_COLS;
    const int want_t = mode == MODE_DUAL || mode == MODE_COLS || mode == MODE_BLOCK_T;

    qimage q, t;
    qimage_init(&q, rows, cols, g, layout, poison);
    qimage_init(&t, cols, rows, g, layout, poison);
    device_q dq, dt;
    device_q_init(&dq, &q);
    device_q_init(&dt, &t);
    uint32_t *dflag = device_image(gpu, &flag_init, sizeof flag_init);
    const bfp8_quantize_options o = {pow2, dflag};
    const bfp8_quantize_options *op = with_options ? &o : NULL;

    bfp8_status st;
    if (block)
        st = bfp8_quantize_128x128(gpu, dx, &dq.q, want_t ? &dt.q : NULL, op);
    else
        st = bfp8_quantize_1x128(gpu, dx, want_q ? &dq.q : NULL, want_t ? &dt.q : NULL, op);
    CHECK(st == BFP8_OK, "%s: %s: %s", what, bfp8_status_name(st), bfp8_last_error());
    CHECK_OK(bfp8_context_synchronize(gpu));
    uint32_t flag = 0;
    CHECK_OK(bfp8_copy_to_host(gpu, &flag, dflag, sizeof flag));
    bfp8_free(gpu, dflag);
    device_q_fetch(&dq, &q);
    device_q_fetch(&dt, &t);

    char sub[240];
    if (want_q) {
        snprintf(sub, sizeof sub, "%s [q]", what);
        const int64_t e = qimage_check(&q, block ? &ref->block : &ref->rows, sub);
        CHECK(e == 0, "%s: %lld differences", sub, (long long)e);
    } else {
        snprintf(sub, sizeof sub, "%s [q unused]", what);
        CHECK(qimage_check_untouched(&q, sub) == 0, "%s: written", sub);
    }
    if (want_t) {
        snprintf(sub, sizeof sub, "%s [t]", what);
        const int64_t e = qimage_check(&t, block ? &ref->block_t : &ref->cols, sub);
        CHECK(e == 0, "%s: %lld differences", sub, (long long)e);
    } else {
        snprintf(sub, sizeof sub, "%s [t unused]", what);
        CHECK(qimage_check_untouched(&t, sub) == 0, "%s: written", sub);
    }
    /* The flag is set to 1 on a non-finite group and never cleared. */
    const uint32_t want_flag = !with_options ? flag_init : ref->flag ? 1u : flag_init;
    CHECK(flag == want_flag, "%s: non-finite flag %u (was %u), expected %u", what, flag, flag_init,
          want_flag);
    qimage_free(&q);
    qimage_free(&t);
    ++runs;
}

/* All modes and layouts of one input. */
static int layouts_to_run = QLAYOUT_COUNT; /* --race: the dense one only */

static void run_input(bfp8_dtype dtype, int64_t rows, int64_t cols, unsigned fill, int pow2,
                      uint64_t seed, int both_poisons) {
    void *dense = quantize_test_data(dtype, rows, cols, fill, seed);
    const bfp8_matrix hx = {dense, dtype, rows, cols, cols};
    reference ref;
    make_reference(&hx, pow2, &ref);
    for (int layout = 0; layout < layouts_to_run; ++layout) {
        ximage xi;
        ximage_init(&xi, dense, dtype, rows, cols, (qlayout)layout);
        uint8_t *dimg = device_image(gpu, xi.img, xi.size);
        bfp8_matrix dx = xi.x;
        dx.data = dimg + xi.offset;
        for (int mode = 0; mode < MODE_COUNT; ++mode) {
            const int variant = (int)((seed + (uint64_t)mode + (uint64_t)layout) % 3);
            run_case(&xi, &dx, pow2, mode, (qlayout)layout, 0xab, variant == 1 ? 7u : 0u,
                     variant != 2 || pow2, &ref); /* no options means pow2 off */
            if (both_poisons)
                run_case(&xi, &dx, pow2, mode, (qlayout)layout, 0x3c, 0u, 1, &ref);
        }
        bfp8_free(gpu, dimg);
        ximage_free(&xi);
    }
    free_reference(&ref);
    free(dense);
}

int main(int argc, char **argv) {
    TEST_REQUIRE_GPU();
    int small = 0, race = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--small") == 0)
            small = 1;
        else if (strcmp(argv[i], "--race") == 0)
            race = 1;
        else
            test_fatal("unknown argument %s (usage: gpu_quantize [--small | --race])", argv[i]);
    }
    if (bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0) != BFP8_OK ||
        bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0) != BFP8_OK)
        test_fatal("context: %s", bfp8_last_error());

    static const int64_t sizes[] = {1, 127, 128, 129, 1000};
    enum { kSizes = sizeof sizes / sizeof sizes[0] };
    static const int64_t small_shapes[][2] = {{1, 1},      {127, 129},  {129, 127}, {128, 128},
                                              {1000, 129}, {1, 1000},   {257, 4},   {4160, 127},
                                              {128, 4160}, {1000, 4160}, {4160, 1}};
    /* > 2 x 132 tiles (bf16 fits 2 CTAs per SM, f32 1): several tiles per CTA */
    static const int64_t race_shapes[][2] = {{2177, 2175}};
    static const int64_t big_shapes[][2] = {{4160, 4160}, {4160, 129}, {129, 4160}, {1000, 4160},
                                            {4160, 1}, {1, 4160}};
    uint64_t seed = 1;
    if (race) {
        layouts_to_run = 1;
        for (size_t s = 0; s < sizeof race_shapes / sizeof race_shapes[0]; ++s)
            for (int d = 0; d < 2; ++d, ++seed)
                run_input(d ? BFP8_F32 : BFP8_BF16, race_shapes[s][0], race_shapes[s][1],
                          TEST_FILL_HARD | TEST_FILL_NONFINITE, (int)(seed % 2), seed, 0);
    } else if (small) {
        for (size_t s = 0; s < sizeof small_shapes / sizeof small_shapes[0]; ++s)
            for (int d = 0; d < 2; ++d, ++seed)
                run_input(d ? BFP8_F32 : BFP8_BF16, small_shapes[s][0], small_shapes[s][1],
                          TEST_FILL_HARD | TEST_FILL_NONFINITE, (int)(seed % 2), seed, 0);
    } else {
        for (int i = 0; i < kSizes; ++i)
            for (int j = 0; j < kSizes; ++j)
                for (int d = 0; d < 2; ++d)
                    for (int pow2 = 0; pow2 < 2; ++pow2, ++seed)
                        run_input(d ? BFP8_F32 : BFP8_BF16, sizes[i], sizes[j],
                                  TEST_FILL_HARD | (seed % 2 ? TEST_FILL_NONFINITE : TEST_FILL_WIDE_RANGE),
                                  pow2, seed, 1);
        for (size_t s = 0; s < sizeof big_shapes / sizeof big_shapes[0]; ++s)
            for (int d = 0; d < 2; ++d, ++seed)
                run_input(d ? BFP8_F32 : BFP8_BF16, big_shapes[s][0], big_shapes[s][1],
                          TEST_FILL_HARD | (seed % 2 ? TEST_FILL_NONFINITE : TEST_FILL_WIDE_RANGE),
                          (int)(seed % 2), seed, 0);
        /* the launch options off (no programmatic dependent launch, no L2 warm-up): the same bits */
        CHECK_OK(bfp8_context_set_option(gpu, BFP8_OPTION_QUANTIZE_PDL, 0));
        CHECK_OK(bfp8_context_set_option(gpu, BFP8_OPTION_QUANTIZE_WARM_L2, 0));
        for (int d = 0; d < 2; ++d, ++seed)
            run_input(d ? BFP8_F32 : BFP8_BF16, 4160, 4160, TEST_FILL_HARD | TEST_FILL_NONFINITE, 0, seed, 0);
        CHECK_OK(bfp8_context_set_option(gpu, BFP8_OPTION_QUANTIZE_PDL, 1));
        CHECK_OK(bfp8_context_set_option(gpu, BFP8_OPTION_QUANTIZE_WARM_L2, 1));
    }
    printf("%lld kernel runs compared with the CPU reference\n", (long long)runs);
    bfp8_context_destroy(gpu);
    bfp8_context_destroy(cpu);
    return test_exit_code(race ? "gpu_quantize --race" : small ? "gpu_quantize --small" : "gpu_quantize");
}
