/*
 * fuzz_api.c - a property-based fuzz of the public C API on the CPU backend.
 *
 * Every iteration builds one call of an entry point from random, valid
 * parts: shapes (1 to ~300, around the 128 boundaries), padded strides (ld,
 * scale_ld), pointer offsets, dtypes, granularities, optional operands,
 * aliasing, group offsets, options. Each buffer is allocated to the exact
 * extent its view describes, so AddressSanitizer sees any access past it.
 * Then, most of the time, one to three mutations break the contract: a NULL
 * pointer or view, an unknown or a wrong dtype or granularity, a size < 1,
 * a shape that does not agree with the other operands (by a little or by
 * INT64_MAX), an ld or scale_ld too small, a misaligned pointer, bad group
 * offsets, bad options or flags.
 *
 * Properties:
 *   - a mutated call fails: a status other than BFP8_OK, a message that
 *     names the function, and every byte of every buffer it was given
 *     (inputs, outputs, offsets, flags, out-parameters) is unchanged;
 *   - the same call without mutation succeeds;
 *   - nothing crashes, and under -fsanitize=address,undefined (the
 *     sanitizer job of .ci/run) nothing is reported.
 *
 *   fuzz_api [--seed N] [--first I] [--iterations N] [--seconds S]
 *
 * Iteration i draws from a generator seeded with (seed, i) alone, so a
 * failure report's "--seed S --first I --iterations 1" replays it. Defaults:
 * seed 1, 2000 iterations; --seconds stops earlier when the time is up.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

enum { CANARY = 0xA5, MAX_REGIONS = 32, MAX_GROUPS = 4, MAX_DIM = 300 };

/* ------------------------------------------------------------------------ */
/* One call's buffers                                                        */

typedef struct region {
    unsigned char *block; /* what malloc returned */
    unsigned char *start; /* what the call sees */
    size_t bytes;
    unsigned char *expected; /* the content before the call */
} region;

typedef struct call {
    test_rng rng;
    region regions[MAX_REGIONS];
    int num_regions;
    int shape_mutated; /* at most one shape change per call: two could agree again */
    const void *mutated[8]; /* operands mutated once already: a second mutation could undo the first */
    int num_mutated;
    char what[512];    /* the call and its mutations, for a report */
    char wrong[256];   /* a wrong result of a successful call */
    int must_fail;     /* valid arguments the call cannot honour (a layout whose bytes overflow) */
} call;

static bfp8_context *ctx;
static int failures;
static int64_t valid_calls, rejected_calls; /* verdicts that held */

static int64_t range(call *c, int64_t lo, int64_t hi) { return test_rng_range(&c->rng, lo, hi); }

/* 1 the first time an operand is asked for (it may be mutated), 0 after. */
static int first_mutation_of(call *c, const void *operand) {
    for (int i = 0; i < c->num_mutated; ++i)
        if (c->mutated[i] == operand) return 0;
    if (c->num_mutated == (int)(sizeof c->mutated / sizeof c->mutated[0])) return 0;
    c->mutated[c->num_mutated++] = operand;
    return 1;
}
static int chance(call *c, double p) { return test_rng_uniform(&c->rng) < p; }

static void note(call *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void note(call *c, const char *fmt, ...) {
    const size_t used = strlen(c->what);
    if (used + 2 >= sizeof c->what) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(c->what + used, sizeof c->what - used, fmt, args);
    va_end(args);
}

/* `bytes` bytes (at least 1) at `offset` bytes past a fresh allocation, filled with the canary. */
static void *region_new(call *c, size_t bytes, size_t offset) {
    if (c->num_regions == MAX_REGIONS) test_fatal("fuzz_api: too many buffers in one call");
    region *r = &c->regions[c->num_regions++];
    r->bytes = bytes ? bytes : 1;
    r->block = test_malloc(offset + r->bytes);
    r->start = r->block + offset;
    r->expected = NULL;
    memset(r->block, CANARY, offset + r->bytes);
    return r->start;
}

/* Snapshot every buffer: what a failing call must leave as it is. */
static void regions_snapshot(call *c) {
    for (int i = 0; i < c->num_regions; ++i) {
        region *r = &c->regions[i];
        r->expected = test_malloc(r->bytes);
        memcpy(r->expected, r->start, r->bytes);
    }
}

static size_t regions_changed(const call *c) {
    size_t changed = 0;
    for (int i = 0; i < c->num_regions; ++i)
        for (size_t j = 0; j < c->regions[i].bytes; ++j)
            changed += c->regions[i].start[j] != c->regions[i].expected[j];
    return changed;
}

static void regions_free(call *c) {
    for (int i = 0; i < c->num_regions; ++i) {
        free(c->regions[i].block);
        free(c->regions[i].expected);
    }
    c->num_regions = 0;
}

/* ------------------------------------------------------------------------ */
/* Operands                                                                  */

static int64_t dim(call *c) {
    switch (range(c, 0, 3)) {
    case 0: return range(c, 1, 8);
    case 1: return range(c, 120, 136);
    case 2: return range(c, 1, 160);
    default: return range(c, 1, MAX_DIM);
    }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static bfp8_matrix new_matrix(call *c, bfp8_dtype dtype, int64_t rows, int64_t cols) {
    const int64_t ld = cols + (chance(c, 0.5) ? 0 : range(c, 1, 40));
    const size_t size = bfp8_dtype_size(dtype);
    bfp8_matrix m = {NULL, dtype, rows, cols, ld};
    m.data = region_new(c, (size_t)((rows - 1) * ld + cols) * size, size * (size_t)range(c, 0, 3));
    return m;
}

static bfp8_matrix new_high_precision(call *c, int64_t rows, int64_t cols) {
    return new_matrix(c, chance(c, 0.5) ? BFP8_F32 : BFP8_BF16, rows, cols);
}

static int64_t scale_span(const bfp8_qmatrix *q) {
    const int64_t kblocks = ceil_div(q->cols, 128);
    if (q->granularity == BFP8_GRAN_1X128) return (kblocks - 1) * q->scale_ld + q->rows;
    return (ceil_div(q->rows, 128) - 1) * q->scale_ld + kblocks;
}

static bfp8_qmatrix new_qmatrix(call *c, int64_t rows, int64_t cols, bfp8_granularity gran) {
    bfp8_qmatrix q = {NULL, NULL, BFP8_E4M3, gran, rows, cols, 0, 0};
    q.ld = chance(c, 0.4) ? (cols + 15) / 16 * 16 : cols + (chance(c, 0.5) ? 0 : range(c, 1, 40));
    q.scale_ld = gran == BFP8_GRAN_1X128 ? (rows + 3) / 4 * 4 + 4 * range(c, 0, 2)
                                         : ceil_div(cols, 128) + range(c, 0, 2);
    q.data = region_new(c, (size_t)((rows - 1) * q.ld + cols), (size_t)range(c, 0, 15));
    q.scales = region_new(c, (size_t)scale_span(&q) * sizeof(float), sizeof(float) * (size_t)range(c, 0, 3));
    return q;
}

/* ------------------------------------------------------------------------ */
/* Mutations: each one breaks the contract by itself, whatever else is mutated. */

static const int bad_enums[] = {-1, 4, 42, 1000, INT_MIN, INT_MAX};

static int64_t non_positive(call *c) {
    static const int64_t values[] = {0, -1, -128, INT64_MIN};
    return values[range(c, 0, 3)];
}

/* A different positive size: a little more or less, or INT64_MAX. */
static int64_t other_size(call *c, int64_t v) {
    if (chance(c, 0.2)) return INT64_MAX;
    if (v > 1 && chance(c, 0.4)) return v - range(c, 1, v - 1);
    return v + range(c, 1, 200);
}

/* hp: the operand must be f32 or bf16, so an fp8 dtype is wrong too.
 * Returns 0 (nothing done) for an operand mutated before. */
static int mutate_matrix(call *c, bfp8_matrix *m, const char *name, int hp) {
    if (!first_mutation_of(c, m)) return 0;
    for (;;) {
        switch (range(c, 0, 6)) {
        case 0:
            m->data = NULL;
            note(c, " %s.data=NULL", name);
            return 1;
        case 1:
            m->dtype = (bfp8_dtype)bad_enums[range(c, 0, 5)];
            note(c, " %s.dtype=%d", name, (int)m->dtype);
            return 1;
        case 2:
            if (!hp) continue;
            m->dtype = chance(c, 0.5) ? BFP8_E4M3 : BFP8_E5M2;
            note(c, " %s.dtype=%s", name, bfp8_dtype_name(m->dtype));
            return 1;
        case 3:
            if (chance(c, 0.5)) m->rows = non_positive(c);
            else m->cols = non_positive(c);
            note(c, " %s=%lldx%lld", name, (long long)m->rows, (long long)m->cols);
            return 1;
        case 4:
            m->ld = chance(c, 0.7) ? m->cols - range(c, 1, m->cols) : non_positive(c);
            note(c, " %s.ld=%lld (cols %lld)", name, (long long)m->ld, (long long)m->cols);
            return 1;
        case 5:
            if (bfp8_dtype_size(m->dtype) < 2) continue;
            m->data = (char *)m->data + range(c, 1, (int64_t)bfp8_dtype_size(m->dtype) - 1);
            note(c, " %s.data misaligned", name);
            return 1;
        default:
            if (c->shape_mutated) continue;
            c->shape_mutated = 1;
            if (chance(c, 0.5)) m->rows = other_size(c, m->rows);
            else m->cols = other_size(c, m->cols);
            note(c, " %s=%lldx%lld", name, (long long)m->rows, (long long)m->cols);
            return 1;
        }
    }
}

/* any_gran: the operand may have either granularity (bfp8_dequantize).
 * Returns 0 (nothing done) for an operand mutated before. */
static int mutate_qmatrix(call *c, bfp8_qmatrix *q, const char *name, int any_gran) {
    if (!first_mutation_of(c, q)) return 0;
    for (;;) {
        switch (range(c, 0, 8)) {
        case 0:
            if (chance(c, 0.5)) q->data = NULL;
            else q->scales = NULL;
            note(c, " %s.%s=NULL", name, q->data ? "scales" : "data");
            return 1;
        case 1: {
            static const int dtypes[] = {BFP8_E5M2, BFP8_F32, BFP8_BF16, 42, -1};
            q->dtype = (bfp8_dtype)dtypes[range(c, 0, 4)];
            note(c, " %s.dtype=%d", name, (int)q->dtype);
            return 1;
        }
        case 2:
            if (!any_gran && chance(c, 0.5))
                q->granularity = q->granularity == BFP8_GRAN_1X128 ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128;
            else
                q->granularity = (bfp8_granularity)(chance(c, 0.5) ? 0 : bad_enums[range(c, 0, 5)]);
            note(c, " %s.granularity=%d", name, (int)q->granularity);
            return 1;
        case 3:
            if (chance(c, 0.5)) q->rows = non_positive(c);
            else q->cols = non_positive(c);
            note(c, " %s=%lldx%lld", name, (long long)q->rows, (long long)q->cols);
            return 1;
        case 4:
            q->ld = chance(c, 0.7) ? q->cols - range(c, 1, q->cols) : non_positive(c);
            note(c, " %s.ld=%lld (cols %lld)", name, (long long)q->ld, (long long)q->cols);
            return 1;
        case 5:
            if (q->granularity == BFP8_GRAN_1X128)
                q->scale_ld = chance(c, 0.5) ? q->rows - range(c, 1, q->rows) : q->scale_ld + range(c, 1, 3);
            else
                q->scale_ld = ceil_div(q->cols, 128) - range(c, 1, ceil_div(q->cols, 128) + 1);
            note(c, " %s.scale_ld=%lld", name, (long long)q->scale_ld);
            return 1;
        case 6:
            q->scales = (float *)((char *)q->scales + range(c, 1, 3));
            note(c, " %s.scales misaligned", name);
            return 1;
        case 7:
            q->scale_ld = non_positive(c);
            note(c, " %s.scale_ld=%lld", name, (long long)q->scale_ld);
            return 1;
        default:
            if (c->shape_mutated) continue;
            c->shape_mutated = 1;
            if (chance(c, 0.5)) q->rows = other_size(c, q->rows);
            else q->cols = other_size(c, q->cols);
            note(c, " %s=%lldx%lld", name, (long long)q->rows, (long long)q->cols);
            return 1;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The verdict of one call                                                   */

static void report(call *c, int64_t seed, int64_t iteration, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void report(call *c, int64_t seed, int64_t iteration, const char *fmt, ...) {
    ++failures;
    if (failures > 20) return;
    fprintf(stderr, "FAIL (replay: --seed %lld --first %lld --iterations 1): %s: ", (long long)seed,
            (long long)iteration, c->what);
    va_list args;
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fputc('\n', stderr);
}

/* fn: the entry point, which a failure's message must name. */
static void verdict(call *c, int64_t seed, int64_t iteration, int mutated, bfp8_status st, const char *fn) {
    if (!mutated) {
        if (st != BFP8_OK)
            report(c, seed, iteration, "a valid call failed: %s: %s", bfp8_status_name(st), bfp8_last_error());
        else
            ++valid_calls;
        return;
    }
    if (st == BFP8_OK) {
        report(c, seed, iteration, "accepted");
        return;
    }
    if (!strstr(bfp8_last_error(), fn))
        report(c, seed, iteration, "%s, but the message does not name %s: \"%s\"", bfp8_status_name(st), fn,
               bfp8_last_error());
    const size_t changed = regions_changed(c);
    if (changed)
        report(c, seed, iteration, "failed (%s) but changed %zu bytes of its buffers", bfp8_status_name(st),
               changed);
    else if (strstr(bfp8_last_error(), fn))
        ++rejected_calls;
}

/* ------------------------------------------------------------------------ */
/* The entry points                                                          */

typedef struct options_draw {
    bfp8_quantize_options o;
    int given;
    uint32_t *flag; /* the valid flag, if any */
} options_draw;

static options_draw new_options(call *c) {
    options_draw d = {{(int)range(c, 0, 1), NULL}, chance(c, 0.6), NULL};
    if (d.given && chance(c, 0.5))
        d.o.nonfinite_flag = d.flag = region_new(c, sizeof(uint32_t), 4 * (size_t)range(c, 0, 2));
    return d;
}

static void mutate_options(call *c, options_draw *d) {
    d->given = 1;
    if (chance(c, 0.5) || !d->flag) {
        static const int values[] = {2, -1, 7, INT_MIN};
        d->o.pow2_scales = values[range(c, 0, 3)];
        note(c, " options.pow2_scales=%d", d->o.pow2_scales);
    } else {
        d->o.nonfinite_flag = (uint32_t *)((char *)d->flag + range(c, 1, 3));
        note(c, " options.nonfinite_flag misaligned");
    }
}

/* How many mutations this call gets: 0 for about a quarter of the calls. */
static int draw_mutations(call *c) {
    const double u = test_rng_uniform(&c->rng);
    return u < 0.25 ? 0 : u < 0.8 ? 1 : (int)range(c, 2, 3);
}

static bfp8_status call_quantize(call *c, int mutations, const char **fn) {
    const int64_t rows = dim(c), cols = dim(c);
    const int blockwise = chance(c, 0.5);
    *fn = blockwise ? "bfp8_quantize_128x128" : "bfp8_quantize_1x128";
    note(c, "%s x %lldx%lld:", *fn, (long long)rows, (long long)cols);
    bfp8_matrix x = new_high_precision(c, rows, cols);
    const bfp8_granularity gran = blockwise ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128;
    const int want_first = blockwise || chance(c, 0.7), want_second = chance(c, 0.5) || !want_first;
    bfp8_qmatrix first = new_qmatrix(c, rows, cols, gran), second = new_qmatrix(c, cols, rows, gran);
    bfp8_qmatrix *out = want_first ? &first : NULL, *out_t = want_second ? &second : NULL;
    options_draw opt = new_options(c);
    bfp8_context *context = ctx;
    for (int i = 0; i < mutations; ++i) {
        switch (range(c, 0, 5)) {
        case 0: context = NULL, note(c, " ctx=NULL"); break;
        case 1: if (!mutate_matrix(c, &x, "x", 1)) context = NULL, note(c, " ctx=NULL"); break;
        case 2:
            if (blockwise || !out_t) out = NULL, note(c, " out=NULL");
            else out = NULL, out_t = NULL, note(c, " both outputs NULL");
            break;
        case 3:
            if (!(out || out_t) || !mutate_qmatrix(c, out ? out : out_t, out ? "out" : "out_t", 0))
                context = NULL, note(c, " ctx=NULL");
            break;
        case 4:
            if (!(out || out_t) || !mutate_qmatrix(c, out_t ? out_t : out, out_t ? "out_t" : "out", 0))
                context = NULL, note(c, " ctx=NULL");
            break;
        default: mutate_options(c, &opt); break;
        }
    }
    regions_snapshot(c);
    const bfp8_quantize_options *options = opt.given ? &opt.o : NULL;
    return blockwise ? bfp8_quantize_128x128(context, &x, out, out_t, options)
                     : bfp8_quantize_1x128(context, &x, out, out_t, options);
}

static bfp8_status call_dequantize_or_convert(call *c, int mutations, const char **fn) {
    const int64_t rows = dim(c), cols = dim(c);
    const int dequantize = chance(c, 0.5);
    *fn = dequantize ? "bfp8_dequantize" : "bfp8_convert";
    note(c, "%s %lldx%lld:", *fn, (long long)rows, (long long)cols);
    bfp8_qmatrix q = new_qmatrix(c, rows, cols, chance(c, 0.5) ? BFP8_GRAN_1X128 : BFP8_GRAN_128X128);
    bfp8_matrix src = new_matrix(c, (bfp8_dtype)range(c, 0, 3), rows, cols);
    bfp8_matrix out = dequantize ? new_high_precision(c, rows, cols)
                                 : new_matrix(c, (bfp8_dtype)range(c, 0, 3), rows, cols);
    const bfp8_qmatrix *qp = &q;
    const bfp8_matrix *srcp = &src;
    bfp8_context *context = ctx;
    for (int i = 0; i < mutations; ++i) {
        switch (range(c, 0, 3)) {
        case 0: context = NULL, note(c, " ctx=NULL"); break;
        case 1:
            if (!(dequantize ? mutate_qmatrix(c, &q, "q", 1) : mutate_matrix(c, &src, "src", 0)))
                context = NULL, note(c, " ctx=NULL");
            break;
        case 2:
            if (dequantize) qp = NULL;
            else srcp = NULL;
            note(c, " input view NULL");
            break;
        default: if (!mutate_matrix(c, &out, "out", dequantize)) context = NULL, note(c, " ctx=NULL"); break;
        }
    }
    regions_snapshot(c);
    return dequantize ? bfp8_dequantize(context, qp, &out) : bfp8_convert(context, srcp, &out);
}

/* 1D2D: a M x K (1x128), b N x K (128x128), d M x N. */
static bfp8_status call_gemm_1d2d(call *c, int mutations, const char **fn) {
    const int64_t m = dim(c), n = dim(c), k = dim(c);
    *fn = "bfp8_gemm_1d2d";
    note(c, "%s %lldx%lldx%lld:", *fn, (long long)m, (long long)n, (long long)k);
    bfp8_qmatrix a = new_qmatrix(c, m, k, BFP8_GRAN_1X128), b = new_qmatrix(c, n, k, BFP8_GRAN_128X128);
    bfp8_matrix d = new_high_precision(c, m, n);
    const bfp8_qmatrix *ap = &a, *bp = &b;
    bfp8_matrix *dp = &d;
    bfp8_context *context = ctx;
    for (int i = 0; i < mutations; ++i) {
        switch (range(c, 0, 4)) {
        case 0: context = NULL, note(c, " ctx=NULL"); break;
        case 1: if (!mutate_qmatrix(c, &a, "a", 0)) context = NULL, note(c, " ctx=NULL"); break;
        case 2: if (!mutate_qmatrix(c, &b, "b", 0)) context = NULL, note(c, " ctx=NULL"); break;
        case 3: if (!mutate_matrix(c, &d, "d", 1)) context = NULL, note(c, " ctx=NULL"); break;
        default:
            if (chance(c, 0.4)) ap = NULL;
            else if (chance(c, 0.5)) bp = NULL;
            else dp = NULL;
            note(c, " a view NULL");
            break;
        }
    }
    regions_snapshot(c);
    return bfp8_gemm_1d2d(context, ap, bp, dp);
}

/* An f32 accumulator for d: none, d itself, or `own`, an f32 buffer of d's
 * shape that is always made (a mutation may give it to a bf16 d). */
static const bfp8_matrix *new_accumulator(call *c, bfp8_matrix *d, bfp8_matrix *own) {
    *own = new_matrix(c, BFP8_F32, d->rows, d->cols);
    if (d->dtype != BFP8_F32 || chance(c, 0.4)) return NULL;
    return chance(c, 0.5) ? d : own;
}

/* Break the accumulator c against its output d: c with a bf16 d, or a bad c.
 * Returns 0 (nothing done) when c or d was mutated before. */
static int mutate_accumulator(call *c, const bfp8_matrix **cp, bfp8_matrix *own, bfp8_matrix *d) {
    if (*cp == own && chance(c, 0.6)) {
        if (chance(c, 0.7)) return mutate_matrix(c, own, "c", 1);
        if (!first_mutation_of(c, own)) return 0;
        own->dtype = BFP8_BF16;
        note(c, " c.dtype=bf16");
        return 1;
    }
    if (!first_mutation_of(c, d)) return 0;
    if (*cp != d) *cp = own;
    d->dtype = BFP8_BF16; /* a bf16 d (an f32 buffer, so no byte past it) under an accumulator */
    note(c, " c with a bf16 d");
    return 1;
}

/* 1D1D: a N x M, b K x M (both 1x128), c, d N x K. */
static bfp8_status call_gemm_1d1d(call *c, int mutations, const char **fn) {
    const int64_t m = dim(c), n = dim(c), k = dim(c);
    *fn = "bfp8_gemm_1d1d";
    note(c, "%s %lldx%lldx%lld:", *fn, (long long)m, (long long)n, (long long)k);
    bfp8_qmatrix a = new_qmatrix(c, n, m, BFP8_GRAN_1X128), b = new_qmatrix(c, k, m, BFP8_GRAN_1X128);
    bfp8_matrix d = new_high_precision(c, n, k), own = {0};
    const bfp8_matrix *cp = new_accumulator(c, &d, &own);
    bfp8_context *context = ctx;
    for (int i = 0; i < mutations; ++i) {
        switch (range(c, 0, 4)) {
        case 0: context = NULL, note(c, " ctx=NULL"); break;
        case 1: if (!mutate_qmatrix(c, &a, "a", 0)) context = NULL, note(c, " ctx=NULL"); break;
        case 2: if (!mutate_qmatrix(c, &b, "b", 0)) context = NULL, note(c, " ctx=NULL"); break;
        case 3: if (!mutate_matrix(c, &d, "d", 1)) context = NULL, note(c, " ctx=NULL"); break;
        default: if (!mutate_accumulator(c, &cp, &own, &d)) context = NULL, note(c, " ctx=NULL"); break;
        }
    }
    regions_snapshot(c);
    return bfp8_gemm_1d1d(context, &a, &b, cp, &d);
}

/* G + 1 valid host offsets over `tokens`: 0, multiples of 128, never decreasing. */
static int64_t *new_offsets(call *c, int groups, int64_t tokens) {
    int64_t *off = region_new(c, (size_t)(groups + 1) * sizeof(int64_t), 0);
    const int64_t blocks = tokens / 128;
    off[0] = 0;
    for (int g = 1; g <= groups; ++g) off[g] = off[g - 1] + 128 * range(c, 0, blocks - off[g - 1] / 128);
    return off;
}

static void mutate_offsets(call *c, int64_t **off, int *groups, int64_t tokens, int on_backend) {
    const int kind = (int)range(c, 0, on_backend ? 2 : 5);
    const int g = (int)range(c, 1, *groups);
    switch (kind) {
    case 0:
        *groups = chance(c, 0.5) ? 0 : chance(c, 0.5) ? -(int)range(c, 1, 3) : INT_MIN;
        note(c, " num_groups=%d", *groups);
        break;
    case 1: *off = NULL, note(c, " group_offsets=NULL"); break;
    case 2:
        if (on_backend) {
            *off = (int64_t *)((char *)*off + range(c, 1, 7));
            note(c, " group_offsets misaligned");
        } else {
            (*off)[0] = chance(c, 0.5) ? 128 : -128;
            note(c, " group_offsets[0]=%lld", (long long)(*off)[0]);
        }
        break;
    case 3: (*off)[g] = (*off)[g - 1] - 128, note(c, " group_offsets[%d] decreasing", g); break;
    case 4: (*off)[g] += range(c, 1, 127), note(c, " group_offsets[%d]=%lld", g, (long long)(*off)[g]); break;
    default: (*off)[*groups] = tokens / 128 * 128 + 128, note(c, " group_offsets[G] past the tokens"); break;
    }
}

/* Garbage offsets in backend memory: the kernels clamp them, whatever they are. */
static int64_t *new_device_offsets(call *c, int groups) {
    int64_t *off = region_new(c, (size_t)(groups + 1) * sizeof(int64_t), 0);
    static const int64_t extremes[] = {INT64_MIN, -129, -1, 0, 127, 128, 129, INT64_MAX};
    for (int g = 0; g <= groups; ++g)
        off[g] = chance(c, 0.3) ? extremes[range(c, 0, 7)]
                                : 128 * range(c, -1, 4) + (chance(c, 0.2) ? range(c, 1, 127) : 0);
    return off;
}

static bfp8_status call_gemm_grouped(call *c, int mutations, const char **fn) {
    const int wgrad = chance(c, 0.5), on_backend = chance(c, 0.3);
    int groups = (int)range(c, 1, MAX_GROUPS);
    const int64_t m = range(c, 1, 3 * 128 + 40), n = 128 * range(c, 1, 2), k = dim(c) % 160 + 1;
    *fn = wgrad ? (on_backend ? "bfp8_gemm_1d1d_grouped_device_offsets" : "bfp8_gemm_1d1d_grouped")
                : (on_backend ? "bfp8_gemm_1d2d_grouped_device_offsets" : "bfp8_gemm_1d2d_grouped");
    note(c, "%s G %d, %lldx%lldx%lld:", *fn, groups, (long long)m, (long long)n, (long long)k);
    int64_t *off = on_backend ? new_device_offsets(c, groups) : new_offsets(c, groups, m);
    bfp8_qmatrix a, b;
    bfp8_matrix d, own = {0};
    const bfp8_matrix *cp = NULL;
    if (wgrad) { /* a N x M, b K x M, d G*N x K */
        a = new_qmatrix(c, n, m, BFP8_GRAN_1X128);
        b = new_qmatrix(c, k, m, BFP8_GRAN_1X128);
        d = new_high_precision(c, groups * n, k);
        cp = new_accumulator(c, &d, &own);
    } else { /* a M x K, b G*N x K, d M x N */
        a = new_qmatrix(c, m, k, BFP8_GRAN_1X128);
        b = new_qmatrix(c, groups * n, k, BFP8_GRAN_128X128);
        d = new_high_precision(c, m, n);
    }
    bfp8_context *context = ctx;
    for (int i = 0; i < mutations; ++i) {
        switch (range(c, 0, 5)) {
        case 0: context = NULL, note(c, " ctx=NULL"); break;
        case 1: if (!mutate_qmatrix(c, &a, "a", 0)) context = NULL, note(c, " ctx=NULL"); break;
        case 2: if (!mutate_qmatrix(c, &b, "b", 0)) context = NULL, note(c, " ctx=NULL"); break;
        case 3: if (!mutate_matrix(c, &d, "d", 1)) context = NULL, note(c, " ctx=NULL"); break;
        case 4:
            if (off && first_mutation_of(c, off)) mutate_offsets(c, &off, &groups, m, on_backend);
            else context = NULL, note(c, " ctx=NULL");
            break;
        default:
            if (!(wgrad ? mutate_accumulator(c, &cp, &own, &d) : mutate_matrix(c, &d, "d", 1)))
                context = NULL, note(c, " ctx=NULL");
            break;
        }
    }
    regions_snapshot(c);
    if (wgrad)
        return on_backend ? bfp8_gemm_1d1d_grouped_device_offsets(context, &a, &b, off, groups, cp, &d)
                          : bfp8_gemm_1d1d_grouped(context, &a, &b, off, groups, cp, &d);
    return on_backend ? bfp8_gemm_1d2d_grouped_device_offsets(context, &a, &b, off, groups, &d)
                      : bfp8_gemm_1d2d_grouped(context, &a, &b, off, groups, &d);
}

/* bf16: D[M, N] = C + op(A)[M, K] . op(B)[N, K]^T. */
static bfp8_status call_gemm_bf16(call *c, int mutations, const char **fn) {
    const int64_t m = dim(c), n = dim(c), k = dim(c);
    int at = (int)range(c, 0, 1), bt = (int)range(c, 0, 1);
    *fn = "bfp8_gemm_bf16";
    note(c, "%s %lldx%lldx%lld a^T %d b^T %d:", *fn, (long long)m, (long long)n, (long long)k, at, bt);
    bfp8_matrix a = at ? new_matrix(c, BFP8_BF16, k, m) : new_matrix(c, BFP8_BF16, m, k);
    bfp8_matrix b = bt ? new_matrix(c, BFP8_BF16, k, n) : new_matrix(c, BFP8_BF16, n, k);
    bfp8_matrix d = new_high_precision(c, m, n), own = {0};
    const bfp8_matrix *cp = new_accumulator(c, &d, &own);
    bfp8_context *context = ctx;
    for (int i = 0; i < mutations; ++i) {
        switch (range(c, 0, 5)) {
        case 0: context = NULL, note(c, " ctx=NULL"); break;
        case 1:
            if (!first_mutation_of(c, &a)) context = NULL, note(c, " ctx=NULL");
            else if (chance(c, 0.3)) a.dtype = BFP8_F32, note(c, " a.dtype=f32");
            else c->num_mutated--, mutate_matrix(c, &a, "a", 1);
            break;
        case 2:
            if (!first_mutation_of(c, &b)) context = NULL, note(c, " ctx=NULL");
            else if (chance(c, 0.3)) b.dtype = BFP8_F32, note(c, " b.dtype=f32");
            else c->num_mutated--, mutate_matrix(c, &b, "b", 1);
            break;
        case 3: if (!mutate_matrix(c, &d, "d", 1)) context = NULL, note(c, " ctx=NULL"); break;
        case 4:
            if (chance(c, 0.5)) at = chance(c, 0.5) ? 2 : -1;
            else bt = INT_MAX;
            note(c, " transposed flag %d/%d", at, bt);
            break;
        default: if (!mutate_accumulator(c, &cp, &own, &d)) context = NULL, note(c, " ctx=NULL"); break;
        }
    }
    regions_snapshot(c);
    return bfp8_gemm_bf16(context, &a, at, &b, bt, cp, &d);
}

/* The linear layer: create, set_weight, forward, backward; one stage mutated,
 * the stages before it run valid. */
static bfp8_status call_linear(call *c, int mutations, const char **fn) {
    bfp8_linear_config cfg = {dim(c) % 200 + 1, dim(c) % 200 + 1, range(c, 1, 160),
                              (bfp8_recipe)range(c, 0, 2), (int)range(c, 0, 1), NULL};
    const int f32 = cfg.recipe == BFP8_RECIPE_FP8_BLOCKWISE && chance(c, 0.5);
    const size_t act = f32 ? sizeof(float) : sizeof(uint16_t);
    if (chance(c, 0.4)) cfg.nonfinite_flags = region_new(c, BFP8_LINEAR_NUM_FLAGS * sizeof(uint32_t), 0);
    const int64_t n = cfg.out_features, k = cfg.in_features, tokens = range(c, 1, cfg.max_tokens);
    const int stage = mutations ? (int)range(c, 0, 3) : 4; /* the stage that gets the mutations */
    static const char *const names[] = {"bfp8_linear_create", "bfp8_linear_set_weight", "bfp8_linear_forward",
                                        "bfp8_linear_backward", "bfp8_linear"};
    *fn = names[stage];
    note(c, "linear K %lld N %lld max %lld %s%s tokens %lld, mutated %s:", (long long)k, (long long)n,
         (long long)cfg.max_tokens, bfp8_recipe_name(cfg.recipe), f32 ? " f32" : "", (long long)tokens, *fn);
    bfp8_linear *lin = NULL;
    bfp8_linear **lin_out = region_new(c, sizeof lin, 0); /* the out-parameter of a mutated create */
    const float *const good_weight = region_new(c, (size_t)(n * k) * sizeof(float), 4 * (size_t)range(c, 0, 3));
    const void *const good_x = region_new(c, (size_t)(tokens * k) * act, act * (size_t)range(c, 0, 3));
    void *const good_y = region_new(c, (size_t)(tokens * n) * act, act * (size_t)range(c, 0, 3));
    const void *const good_dy = region_new(c, (size_t)(tokens * n) * act, act * (size_t)range(c, 0, 3));
    void *const good_dx =
        chance(c, 0.2) ? NULL : region_new(c, (size_t)(tokens * k) * act, act * (size_t)range(c, 0, 3));
    float *const good_dw = region_new(c, (size_t)(n * k) * sizeof(float), 4 * (size_t)range(c, 0, 3));
    const void *dy = good_dy;
    void *dx = good_dx;
    float *dw = good_dw;
    const float *weight = good_weight;
    const void *x = good_x;
    void *y = good_y;
    int64_t count = tokens;
    int accumulate = (int)range(c, 0, 1), entry_f32 = f32;
    bfp8_context *context = ctx;
    bfp8_linear_config bad = cfg;
    for (int i = 0; i < mutations; ++i) {
        const int kind = (int)range(c, 0, 3);
        if (stage == 0) {
            if (kind == 0) context = NULL;
            else if (kind == 1) bad.in_features = non_positive(c);
            else if (kind == 2) bad.max_tokens = non_positive(c);
            else if (chance(c, 0.5)) bad.recipe = (bfp8_recipe)bad_enums[range(c, 0, 5)];
            else bad.pow2_scales = 2;
            note(c, " ctx %s, in_features %lld, max_tokens %lld, recipe %d, pow2_scales %d", context ? "ok" : "NULL",
                 (long long)bad.in_features, (long long)bad.max_tokens, (int)bad.recipe, bad.pow2_scales);
        } else if (stage == 1) {
            weight = kind < 2 ? NULL : (const float *)((const char *)good_weight + range(c, 1, 3));
            note(c, " weight %s", weight ? "misaligned" : "NULL");
        } else if (kind == 0 && cfg.recipe != BFP8_RECIPE_FP8_BLOCKWISE) {
            entry_f32 = 1; /* f32 activations for a layer of another recipe */
            note(c, " the f32 entry point");
        } else if (stage == 2) {
            if (kind <= 1) count = chance(c, 0.5) ? non_positive(c) : cfg.max_tokens + range(c, 1, 100);
            else if (kind == 2) x = chance(c, 0.5) ? NULL : (const char *)good_x + 1;
            else y = chance(c, 0.5) ? NULL : (char *)good_y + 1;
            note(c, " tokens %lld, x %s, y %s", (long long)count, x == good_x ? "ok" : "bad",
                 y == good_y ? "ok" : "bad");
        } else {
            if (kind <= 1) accumulate = chance(c, 0.5) ? 2 : -1, note(c, " accumulate=%d", accumulate);
            else if (kind == 2) dy = chance(c, 0.5) ? NULL : (const char *)good_dy + 1, note(c, " dy bad");
            else if (good_dx && chance(c, 0.5)) dx = (char *)good_dx + 1, note(c, " dx misaligned");
            else dw = chance(c, 0.5) ? NULL : (float *)((char *)good_dw + 2), note(c, " dw bad");
        }
    }
    regions_snapshot(c);
    bfp8_status st = bfp8_linear_create(stage == 0 ? lin_out : &lin, context, stage == 0 ? &bad : &cfg);
    if (stage == 0) {
        if (st == BFP8_OK) bfp8_linear_destroy(*lin_out);
        return st;
    }
    if (st != BFP8_OK) return st;
    if (stage > 1 && (st = bfp8_linear_set_weight(lin, good_weight)) != BFP8_OK) goto done;
    if (stage > 2) {
        st = f32 ? bfp8_linear_forward_f32(lin, good_x, tokens, good_y)
                 : bfp8_linear_forward(lin, good_x, tokens, good_y);
        if (st != BFP8_OK) goto done;
    }
    for (int i = 0; i < c->num_regions; ++i) /* what the mutated stage must leave as it is */
        memcpy(c->regions[i].expected, c->regions[i].start, c->regions[i].bytes);
    switch (stage) {
    case 1: st = bfp8_linear_set_weight(lin, weight); break;
    case 2: st = entry_f32 ? bfp8_linear_forward_f32(lin, x, count, y) : bfp8_linear_forward(lin, x, count, y); break;
    case 3:
        st = entry_f32 ? bfp8_linear_backward_f32(lin, dy, dx, dw, accumulate)
                       : bfp8_linear_backward(lin, dy, dx, dw, accumulate);
        break;
    default: /* no mutation: the whole sequence */
        st = bfp8_linear_set_weight(lin, weight);
        if (st == BFP8_OK) st = f32 ? bfp8_linear_forward_f32(lin, x, count, y) : bfp8_linear_forward(lin, x, count, y);
        if (st == BFP8_OK)
            st = f32 ? bfp8_linear_backward_f32(lin, dy, dx, dw, accumulate)
                     : bfp8_linear_backward(lin, dy, dx, dw, accumulate);
        break;
    }
done:
    bfp8_linear_destroy(lin);
    return st;
}

/* Small entry points: conversions, layouts, contexts, memory, names. */
static bfp8_status call_misc(call *c, int mutations, const char **fn) {
    switch (range(c, 0, 4)) {
    case 0: { /* bfp8_convert_host */
        *fn = "bfp8_convert_host";
        bfp8_dtype dst_t = (bfp8_dtype)range(c, 0, 3), src_t = (bfp8_dtype)range(c, 0, 3);
        const size_t n = (size_t)range(c, 0, 1000);
        note(c, "%s %zu %s <- %s:", *fn, n, bfp8_dtype_name(dst_t), bfp8_dtype_name(src_t));
        void *dst = region_new(c, n * bfp8_dtype_size(dst_t), 0);
        const void *src = region_new(c, n * bfp8_dtype_size(src_t), 0);
        if (mutations) {
            if (n > 0 && chance(c, 0.5)) {
                if (chance(c, 0.5)) dst = NULL;
                else src = NULL;
                note(c, " a NULL buffer");
            } else {
                if (chance(c, 0.5)) dst_t = (bfp8_dtype)bad_enums[range(c, 0, 5)];
                else src_t = (bfp8_dtype)bad_enums[range(c, 0, 5)];
                note(c, " dtypes %d <- %d", (int)dst_t, (int)src_t);
            }
        }
        regions_snapshot(c);
        return bfp8_convert_host(dst_t, dst, src_t, src, n);
    }
    case 1: { /* bfp8_qmatrix_layout: any sizes; the byte counts must be exact or the call must fail */
        *fn = "bfp8_qmatrix_layout";
        static const int64_t extremes[] = {1, 127, 128, 129, (int64_t)1 << 31, (int64_t)1 << 40, INT64_MAX / 2,
                                           INT64_MAX - 1, INT64_MAX};
        int64_t rows = chance(c, 0.5) ? dim(c) : extremes[range(c, 0, 8)];
        int64_t cols = chance(c, 0.5) ? dim(c) : extremes[range(c, 0, 8)];
        bfp8_granularity gran = chance(c, 0.5) ? BFP8_GRAN_1X128 : BFP8_GRAN_128X128;
        bfp8_qmatrix *q = region_new(c, sizeof *q, 0);
        size_t *bytes = region_new(c, 2 * sizeof(size_t), 0);
        if (mutations) {
            const int kind = (int)range(c, 0, 2);
            if (kind == 0) q = NULL;
            else if (kind == 1) rows = non_positive(c);
            else gran = (bfp8_granularity)bad_enums[range(c, 0, 5)];
        }
        note(c, "%s %lldx%lld gran %d%s:", *fn, (long long)rows, (long long)cols, (int)gran, q ? "" : " q=NULL");
        /* the exact sizes, in 128-bit arithmetic: a layout whose sizes pass INT64_MAX must be refused */
        typedef unsigned __int128 u128;
        const u128 ld = ((u128)cols + 15) / 16 * 16, kb = ((u128)cols + 127) / 128, rb = ((u128)rows + 127) / 128;
        const u128 data = (u128)rows * ld;
        const u128 scales =
            4 * (gran == BFP8_GRAN_1X128 ? (kb - 1) * (((u128)rows + 3) / 4 * 4) + (u128)rows : rb * kb);
        c->must_fail = rows >= 1 && cols >= 1 && (data > INT64_MAX || scales > INT64_MAX || ld > INT64_MAX);
        regions_snapshot(c);
        const bfp8_status st = bfp8_qmatrix_layout(q, rows, cols, gran, &bytes[0], &bytes[1]);
        if (st == BFP8_OK && !c->must_fail && (data != bytes[0] || scales != bytes[1] || ld != (u128)q->ld))
            snprintf(c->wrong, sizeof c->wrong, "data %zu bytes, scales %zu bytes, ld %lld: not the layout's",
                     bytes[0], bytes[1], (long long)q->ld);
        return st;
    }
    case 2: { /* contexts */
        *fn = "bfp8_context_create";
        bfp8_context **out = region_new(c, sizeof(bfp8_context *), 0);
        bfp8_backend backend = BFP8_BACKEND_CPU;
        if (mutations) {
            if (chance(c, 0.5)) out = NULL;
            else backend = (bfp8_backend)bad_enums[range(c, 0, 5)];
        }
        note(c, "%s backend %d%s:", *fn, (int)backend, out ? "" : " out=NULL");
        regions_snapshot(c);
        const bfp8_status st = bfp8_context_create(out, backend, (int)range(c, -2, 2));
        if (st == BFP8_OK) bfp8_context_destroy(*out);
        return st;
    }
    case 3: { /* backend memory */
        const int what = (int)range(c, 0, 3);
        static const char *const fns[] = {"bfp8_malloc", "bfp8_memset_zero", "bfp8_copy_to_backend",
                                          "bfp8_copy_to_host"};
        *fn = fns[what];
        size_t n = (size_t)range(c, 1, 4096);
        unsigned char *a = region_new(c, n, 0), *b = region_new(c, n, 0);
        void **out = region_new(c, sizeof(void *), 0);
        bfp8_context *context = ctx;
        if (mutations) {
            const int kind = (int)range(c, 0, 2);
            if (kind == 0) context = NULL;
            else if (what == 0 && kind == 1) out = NULL;
            else if (what == 0) n = SIZE_MAX - range(c, 0, 64); /* no such memory */
            else if (what == 1 || kind == 1) a = NULL;
            else b = NULL;
        }
        note(c, "%s %zu bytes%s%s%s%s:", *fn, n, context ? "" : " ctx=NULL", a ? "" : " a=NULL", b ? "" : " b=NULL",
             out ? "" : " out=NULL");
        regions_snapshot(c);
        switch (what) {
        case 0: {
            const bfp8_status st = bfp8_malloc(context, out, n);
            if (st == BFP8_OK) bfp8_free(context, *out);
            return st;
        }
        case 1: return bfp8_memset_zero(context, a, n);
        case 2: return bfp8_copy_to_backend(context, a, b, n);
        default: return bfp8_copy_to_host(context, a, b, n);
        }
    }
    default: { /* names: never NULL where documented, NULL arguments refused */
        *fn = "bfp8_recipe_from_name";
        const int value = chance(c, 0.5) ? (int)range(c, -5, 20) : bad_enums[range(c, 0, 5)];
        note(c, "names of %d:", value);
        if (!bfp8_status_name((bfp8_status)value)) snprintf(c->wrong, sizeof c->wrong, "bfp8_status_name is NULL");
        (void)bfp8_dtype_size((bfp8_dtype)value);
        (void)bfp8_dtype_name((bfp8_dtype)value);
        const char *name = bfp8_recipe_name((bfp8_recipe)value);
        bfp8_recipe *recipe = region_new(c, sizeof *recipe, 0);
        const char *asked = name ? name : "fp8-blockwise";
        if (mutations) {
            if (chance(c, 0.5)) asked = NULL;
            else if (chance(c, 0.5)) recipe = NULL;
            else asked = "fp9";
        }
        regions_snapshot(c);
        return bfp8_recipe_from_name(asked, recipe);
    }
    }
}

/* ------------------------------------------------------------------------ */

static void run_one(int64_t seed, int64_t iteration) {
    call c;
    memset(&c, 0, sizeof c);
    test_rng_seed(&c.rng, (uint64_t)seed * 0x9E3779B97F4A7C15ull + (uint64_t)iteration);
    int mutations = draw_mutations(&c);
    const char *fn = "?";
    bfp8_status st;
    switch (range(&c, 0, 9)) {
    case 0:
    case 1: st = call_quantize(&c, mutations, &fn); break;
    case 2: st = call_dequantize_or_convert(&c, mutations, &fn); break;
    case 3: st = call_gemm_1d2d(&c, mutations, &fn); break;
    case 4: st = call_gemm_1d1d(&c, mutations, &fn); break;
    case 5: st = call_gemm_grouped(&c, mutations, &fn); break;
    case 6: st = call_gemm_bf16(&c, mutations, &fn); break;
    case 7:
    case 8: st = call_linear(&c, mutations, &fn); break;
    default: st = call_misc(&c, mutations, &fn); break;
    }
    if (c.wrong[0])
        report(&c, seed, iteration, "%s", c.wrong);
    else
        verdict(&c, seed, iteration, mutations > 0 || c.must_fail, st, fn);
    regions_free(&c);
}

int main(int argc, char **argv) {
    int64_t seed = 1, first = 0, iterations = 2000;
    double seconds = 0.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seed") == 0) seed = strtoll(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--first") == 0) first = strtoll(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--iterations") == 0) iterations = strtoll(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--seconds") == 0) seconds = strtod(argv[i + 1], NULL);
        else test_fatal("usage: fuzz_api [--seed N] [--first I] [--iterations N] [--seconds S]");
    }
    if (bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0) != BFP8_OK) test_fatal("context: %s", bfp8_last_error());
    const time_t start = time(NULL);
    int64_t done = 0;
    for (int64_t i = first; i < first + iterations; ++i, ++done) {
        if (seconds > 0.0 && difftime(time(NULL), start) >= seconds) break;
        run_one(seed, i);
    }
    bfp8_context_destroy(ctx);
    printf("fuzz_api: seed %lld, iterations %lld..%lld: %lld valid calls succeeded, %lld broken calls refused "
           "cleanly, %d failures\n", (long long)seed, (long long)first, (long long)(first + done - 1),
           (long long)valid_calls, (long long)rejected_calls, failures);
    return failures == 0 && done > 0 ? 0 : 1;
}
