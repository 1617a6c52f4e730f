/*
 * test_attention.c - bfp8_attention_forward / _backward against an fp64
 * reference of the same bf16 inputs (o, lse, dq, dk, dv), on ragged
 * sequence lengths, both head sizes, causal and not, grouped-query heads,
 * dense and fused (qkv in one buffer, padded) layouts; the CUDA backend also
 * against the CPU reference and against itself (bit-identical repeats:
 * the backward is deterministic), and the argument checks.
 *
 *   test_attention --backend cpu [--quick]       the CPU reference (ctest: attention_cpu)
 *   test_attention --backend cuda                the kernels (ctest: gpu_attention; exit 77 without a GPU)
 *   test_attention --backend cuda --sanitize     every shape through the kernels once, no host
 *                                                references: for compute-sanitizer memcheck / racecheck
 *   --case N      run case N only
 *
 * Outputs start as NaN and the padding of padded rows holds a sentinel that
 * must survive, so an unwritten element or a stray write fails.
 */
#include <math.h>
#include <string.h>

#include "formats/formats.h"
#include "internal.h"
#include "test_util.h"

/* A relative error of 1% is 40 dB. bf16 outputs alone cost ~50 dB; the
 * kernels also round P and dS to bf16 for their second products. */
#define BAR_DB 40.0
#define BAR_LSE_ABS 2e-3
#define BF16_NAN 0x7fc0u
#define SENTINEL 0x5a5au

typedef struct attn_case {
    int64_t batch, seq, heads, kv_heads, head_dim;
    int causal;
    int fused; /* q, k, v in one buffer and dq, dk, dv in another, o and d_o rows padded */
} attn_case;

static int g_sanitize = 0;

/* ------------------------------------------------------------------------ */
/* fp64 reference                                                            */

typedef struct ref_out {
    double *o, *lse, *dq, *dk, *dv; /* dense: o, dq [B][T][H][D]; dk, dv [B][T][Hk][D]; lse [B][H][T] */
} ref_out;

static double bf(uint16_t x) { return (double)bfp8_bf16_to_f32(x); }

static void reference(const attn_case *c, double scale, const uint16_t *q, int64_t qs, const uint16_t *k,
                      int64_t ks, const uint16_t *v, int64_t vs, const uint16_t *d_o, int64_t dos, ref_out *r) {
    const int64_t B = c->batch, T = c->seq, H = c->heads, Hk = c->kv_heads, D = c->head_dim, G = H / Hk;
    double *delta = test_malloc((size_t)(B * H * T) * sizeof(double));
    /* pass 1, a query row at a time: o, lse, delta, dq */
    #pragma omp parallel for schedule(dynamic, 4)
    for (int64_t row = 0; row < B * H * T; ++row) {
        const int64_t b = row / (H * T), h = (row / T) % H, t = row % T, hk = h / G, n = c->causal ? t + 1 : T;
        const uint16_t *qr = q + (b * T + t) * qs + h * D, *dor = d_o + (b * T + t) * dos + h * D;
        double *p = test_malloc((size_t)T * sizeof(double));
        double m = -INFINITY, l = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            const uint16_t *kr = k + (b * T + j) * ks + hk * D;
            double s = 0.0;
            for (int64_t i = 0; i < D; ++i) s += bf(qr[i]) * bf(kr[i]);
            p[j] = s * scale;
            if (p[j] > m) m = p[j];
        }
        for (int64_t j = 0; j < n; ++j) l += (p[j] = exp(p[j] - m));
        double *o = r->o + ((b * T + t) * H + h) * D;
        for (int64_t i = 0; i < D; ++i) o[i] = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            p[j] /= l;
            const uint16_t *vr = v + (b * T + j) * vs + hk * D;
            for (int64_t i = 0; i < D; ++i) o[i] += p[j] * bf(vr[i]);
        }
        r->lse[row] = m + log(l);
        double dl = 0.0;
        for (int64_t i = 0; i < D; ++i) dl += bf(dor[i]) * o[i];
        delta[row] = dl;
        double *dq = r->dq + ((b * T + t) * H + h) * D;
        for (int64_t i = 0; i < D; ++i) dq[i] = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            const uint16_t *kr = k + (b * T + j) * ks + hk * D, *vr = v + (b * T + j) * vs + hk * D;
            double s = 0.0;
            for (int64_t i = 0; i < D; ++i) s += bf(dor[i]) * bf(vr[i]);
            const double ds = p[j] * (s - dl) * scale;
            for (int64_t i = 0; i < D; ++i) dq[i] += ds * bf(kr[i]);
        }
        free(p);
    }
    /* pass 2, a key row at a time: dk, dv over the queries that see it in its heads */
    #pragma omp parallel for schedule(dynamic, 4)
    for (int64_t row = 0; row < B * Hk * T; ++row) {
        const int64_t b = row / (Hk * T), hk = (row / T) % Hk, j = row % T;
        const uint16_t *kr = k + (b * T + j) * ks + hk * D, *vr = v + (b * T + j) * vs + hk * D;
        double *dk = r->dk + ((b * T + j) * Hk + hk) * D, *dv = r->dv + ((b * T + j) * Hk + hk) * D;
        for (int64_t i = 0; i < D; ++i) dk[i] = dv[i] = 0.0;
        for (int64_t h = hk * G; h < (hk + 1) * G; ++h)
            for (int64_t t = c->causal ? j : 0; t < T; ++t) {
                const uint16_t *qr = q + (b * T + t) * qs + h * D, *dor = d_o + (b * T + t) * dos + h * D;
                double s = 0.0, dp = 0.0;
                for (int64_t i = 0; i < D; ++i) {
                    s += bf(qr[i]) * bf(kr[i]);
                    dp += bf(dor[i]) * bf(vr[i]);
                }
                const int64_t qrow = (b * H + h) * T + t;
                const double p = exp(s * scale - r->lse[qrow]), ds = p * (dp - delta[qrow]) * scale;
                for (int64_t i = 0; i < D; ++i) {
                    dk[i] += ds * bf(qr[i]);
                    dv[i] += p * bf(dor[i]);
                }
            }
    }
    free(delta);
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */

typedef struct layout {
    int64_t qkv_stride, q_off, k_off, v_off; /* q, k, v in `qkv` */
    int64_t o_stride, dqkv_stride, dq_off, dk_off, dv_off;
} layout;

static layout layout_of(const attn_case *c) {
    const int64_t H = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
    layout l;
    if (c->fused) {
        l = (layout){H + 2 * Hk + 8, 0, H, H + Hk, H + 16, H + 2 * Hk + 24, 0, H, H + Hk};
    } else { /* q, k, v (and dq, dk, dv) one after another, each dense */
        const int64_t rows = c->batch * c->seq;
        l = (layout){0, 0, rows * H, rows * (H + Hk), H, 0, 0, rows * H, rows * (H + Hk)};
    }
    return l;
}

/* Elements of a buffer of q, k, v (or dq, dk, dv) rows `stride` apart (0: one dense tensor after another). */
static int64_t qkv_elems(const attn_case *c, int64_t stride) {
    const int64_t rows = c->batch * c->seq, H = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
    return stride ? rows * stride : rows * (H + 2 * Hk);
}

static bfp8_attention_desc desc_of(const attn_case *c, const layout *l) {
    bfp8_attention_desc d;
    memset(&d, 0, sizeof d);
    d.batch = c->batch, d.seq = c->seq, d.n_heads = c->heads, d.n_kv_heads = c->kv_heads;
    d.head_dim = c->head_dim, d.causal = c->causal;
    d.q_row_stride = d.k_row_stride = d.v_row_stride = l->qkv_stride;
    d.o_row_stride = d.do_row_stride = l->o_stride;
    d.dq_row_stride = d.dk_row_stride = d.dv_row_stride = l->dqkv_stride;
    return d;
}

typedef struct dev_buf {
    void *ptr;
    size_t bytes;
} dev_buf;

static dev_buf to_backend(bfp8_context *ctx, const void *host, size_t bytes) {
    dev_buf b = {NULL, bytes};
    if (bfp8_malloc(ctx, &b.ptr, bytes ? bytes : 256) != BFP8_OK) test_fatal("bfp8_malloc: %s", bfp8_last_error());
    if (host && bfp8_copy_to_backend(ctx, b.ptr, host, bytes) != BFP8_OK)
        test_fatal("copy to backend: %s", bfp8_last_error());
    return b;
}

static void to_host(bfp8_context *ctx, void *host, const dev_buf *b) {
    if (bfp8_copy_to_host(ctx, host, b->ptr, b->bytes) != BFP8_OK) test_fatal("copy to host: %s", bfp8_last_error());
}

/* What one run of forward + backward produced, copied to the host. */
typedef struct run_out {
    uint16_t *o, *dqkv;
    float *lse;
} run_out;

/* The desc with its defaults filled in, as the backends' internal entry points take it. */
static bfp8_attention_desc resolved(const attn_case *c, bfp8_attention_desc d) {
    const int64_t H = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
    if (!d.q_row_stride) d.q_row_stride = H, d.k_row_stride = d.v_row_stride = Hk;
    if (!d.o_row_stride) d.o_row_stride = d.do_row_stride = H;
    if (!d.dq_row_stride) d.dq_row_stride = H, d.dk_row_stride = d.dv_row_stride = Hk;
    d.softmax_scale = 1.0f / sqrtf((float)c->head_dim);
    return d;
}

/* Forward and backward; bwd_variant >= 0: the CUDA backward's kernel variant
 * (bfp8_cuda_attention_backward_variant) instead of the public entry point. */
static void run_backend(bfp8_context *ctx, const attn_case *c, const layout *l, const uint16_t *qkv, size_t qkv_n,
                        const uint16_t *d_o, size_t o_n, int bwd_variant, run_out *out) {
    const bfp8_attention_desc d = desc_of(c, l);
    const int64_t lse_n = c->batch * c->heads * c->seq;
    const size_t dqkv_n = (size_t)qkv_elems(c, l->dqkv_stride);
    uint16_t *poison_o = test_malloc(o_n * 2), *poison_dqkv = test_malloc(dqkv_n * 2);
    float *poison_lse = test_malloc((size_t)lse_n * 4);
    for (size_t i = 0; i < o_n; ++i) poison_o[i] = SENTINEL;
    for (size_t i = 0; i < dqkv_n; ++i) poison_dqkv[i] = SENTINEL;
    const int64_t rows = c->batch * c->seq, H = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
    for (int64_t r = 0; r < rows; ++r) { /* the elements that must be written start as NaN */
        const int64_t os = l->o_stride;
        for (int64_t i = 0; i < H; ++i) poison_o[r * os + i] = BF16_NAN;
        const int64_t s = l->dqkv_stride ? l->dqkv_stride : H, sk = l->dqkv_stride ? l->dqkv_stride : Hk;
        for (int64_t i = 0; i < H; ++i) poison_dqkv[l->dq_off + r * s + i] = BF16_NAN;
        for (int64_t i = 0; i < Hk; ++i) {
            poison_dqkv[l->dk_off + r * sk + i] = BF16_NAN;
            poison_dqkv[l->dv_off + r * sk + i] = BF16_NAN;
        }
    }
    for (int64_t i = 0; i < lse_n; ++i) poison_lse[i] = NAN;
    dev_buf b_qkv = to_backend(ctx, qkv, qkv_n * 2), b_do = to_backend(ctx, d_o, o_n * 2);
    dev_buf b_o = to_backend(ctx, poison_o, o_n * 2), b_dqkv = to_backend(ctx, poison_dqkv, dqkv_n * 2);
    dev_buf b_lse = to_backend(ctx, poison_lse, (size_t)lse_n * 4);
    size_t ws_bytes = 0;
    CHECK_OK(bfp8_attention_backward_workspace_size(ctx, &d, &ws_bytes));
    dev_buf b_ws = to_backend(ctx, NULL, ws_bytes);
    const uint16_t *base = b_qkv.ptr;
    uint16_t *dbase = b_dqkv.ptr;
    CHECK_OK(bfp8_attention_forward(ctx, &d, base + l->q_off, base + l->k_off, base + l->v_off, b_o.ptr, b_lse.ptr));
    if (bwd_variant < 0) {
        CHECK_OK(bfp8_attention_backward(ctx, &d, base + l->q_off, base + l->k_off, base + l->v_off, b_o.ptr,
                                         b_do.ptr, b_lse.ptr, dbase + l->dq_off, dbase + l->dk_off, dbase + l->dv_off,
                                         ws_bytes ? b_ws.ptr : NULL, ws_bytes));
    } else {
        const bfp8_attention_desc r = resolved(c, d);
        CHECK_OK(bfp8_cuda_attention_backward_variant(ctx, &r, base + l->q_off, base + l->k_off, base + l->v_off,
                                                      b_o.ptr, b_do.ptr, b_lse.ptr, dbase + l->dq_off,
                                                      dbase + l->dk_off, dbase + l->dv_off, b_ws.ptr, bwd_variant));
    }
    CHECK_OK(bfp8_context_synchronize(ctx));
    out->o = poison_o, out->dqkv = poison_dqkv, out->lse = poison_lse;
    to_host(ctx, out->o, &b_o);
    to_host(ctx, out->dqkv, &b_dqkv);
    to_host(ctx, out->lse, &b_lse);
    bfp8_free(ctx, b_qkv.ptr), bfp8_free(ctx, b_do.ptr), bfp8_free(ctx, b_o.ptr);
    bfp8_free(ctx, b_dqkv.ptr), bfp8_free(ctx, b_lse.ptr), bfp8_free(ctx, b_ws.ptr);
}

static void free_run(run_out *r) {
    free(r->o), free(r->dqkv), free(r->lse);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------------ */
/* Comparisons                                                               */

/* rows x width bf16 values at x (row stride `stride`) as dense fp32. */
static float *gather(const uint16_t *x, int64_t rows, int64_t width, int64_t stride) {
    float *out = test_malloc((size_t)(rows * width) * sizeof(float));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < width; ++i) out[r * width + i] = bfp8_bf16_to_f32(x[r * stride + i]);
    return out;
}

/* SQNR >= BAR_DB, where the signal counts at least an rms of 1e-3: a gradient
 * that is exactly 0 in fp64 (one key: dq = dk = 0) comes out as rounding
 * noise of ~1e-7, which must not fail. */
static void check_db(const char *what, const char *tag, const double *ref, const float *out, int64_t n) {
    double signal = 0.0, noise = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double e = ref[i] - (double)out[i];
        signal += ref[i] * ref[i];
        noise += e * e;
    }
    const double floor_signal = (double)n * 1e-6;
    const double db = noise == 0.0 ? INFINITY : 10.0 * log10((signal > floor_signal ? signal : floor_signal) / noise);
    CHECK(db >= BAR_DB, "%s %s: %.1f dB < %.1f dB", tag, what, db, BAR_DB); /* NaN fails */
    printf(" %s %.1f", what, db);
}

static double *widen_f32(const float *x, int64_t n) {
    double *out = test_malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; ++i) out[i] = x[i];
    return out;
}

/* A run's outputs against a reference given as double (ref) or as another run (other). */
static void compare(const char *tag, const attn_case *c, const layout *l, const run_out *run, const ref_out *ref,
                    const run_out *other) {
    const int64_t rows = c->batch * c->seq, H = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
    const int64_t lse_n = c->batch * c->heads * c->seq;
    const int64_t s = l->dqkv_stride ? l->dqkv_stride : H, sk = l->dqkv_stride ? l->dqkv_stride : Hk;
    struct { const char *name; const uint16_t *x; int64_t width, stride; const double *ref; } t[4] = {
        {"o", run->o, H, l->o_stride, ref ? ref->o : NULL},
        {"dq", run->dqkv + l->dq_off, H, s, ref ? ref->dq : NULL},
        {"dk", run->dqkv + l->dk_off, Hk, sk, ref ? ref->dk : NULL},
        {"dv", run->dqkv + l->dv_off, Hk, sk, ref ? ref->dv : NULL},
    };
    printf("  %-5s", tag);
    for (int i = 0; i < 4; ++i) {
        float *out = gather(t[i].x, rows, t[i].width, t[i].stride);
        double *r = NULL;
        if (other) {
            const uint16_t *base = i == 0 ? other->o : other->dqkv;
            float *o2 = gather(base + (t[i].x - (i == 0 ? run->o : run->dqkv)), rows, t[i].width, t[i].stride);
            r = widen_f32(o2, rows * t[i].width);
            free(o2);
        }
        check_db(t[i].name, tag, other ? r : t[i].ref, out, rows * t[i].width);
        free(out);
        free(r);
    }
    double worst = 0.0;
    for (int64_t i = 0; i < lse_n; ++i) {
        const double want = other ? other->lse[i] : ref->lse[i], e = fabs(run->lse[i] - want);
        if (!(e <= worst)) worst = e; /* NaN sticks */
    }
    CHECK(worst <= BAR_LSE_ABS, "%s lse: max error %g > %g", tag, worst, BAR_LSE_ABS);
    printf(" lse %.1e\n", worst);
}

/* The padding between the rows of o, dq, dk, dv kept its sentinel. */
static void check_padding(const attn_case *c, const layout *l, const run_out *run) {
    const int64_t rows = c->batch * c->seq, H = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = H; i < l->o_stride; ++i) bad += run->o[r * l->o_stride + i] != SENTINEL;
    if (l->dqkv_stride)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = H + 2 * Hk; i < l->dqkv_stride; ++i) bad += run->dqkv[r * l->dqkv_stride + i] != SENTINEL;
    CHECK(bad == 0, "%lld padding elements overwritten", (long long)bad);
}

static int same_bits(const run_out *a, const run_out *b, size_t dqkv_n, size_t o_n, int64_t lse_n) {
    return memcmp(a->o, b->o, o_n * 2) == 0 && memcmp(a->dqkv, b->dqkv, dqkv_n * 2) == 0 &&
           memcmp(a->lse, b->lse, (size_t)lse_n * 4) == 0;
}

/* ------------------------------------------------------------------------ */

static void run_case(bfp8_context *ctx, bfp8_context *cpu, const attn_case *c, int index) {
    const layout l = layout_of(c);
    const int64_t rows = c->batch * c->seq, H = c->heads * c->head_dim, Hk = c->kv_heads * c->head_dim;
    const size_t qkv_n = (size_t)qkv_elems(c, l.qkv_stride), o_n = (size_t)(rows * l.o_stride);
    const int64_t lse_n = c->batch * c->heads * c->seq;
    printf("case %d: B %lld T %lld H %lld/%lld D %lld %s %s\n", index, (long long)c->batch, (long long)c->seq,
           (long long)c->heads, (long long)c->kv_heads, (long long)c->head_dim, c->causal ? "causal" : "full",
           c->fused ? "fused" : "dense");
    uint16_t *qkv = test_malloc(qkv_n * 2), *d_o = test_malloc(o_n * 2);
    const uint64_t seed = 100 + (uint64_t)index * 13;
    const int64_t width = l.qkv_stride ? l.qkv_stride : H + 2 * Hk;
    if (l.qkv_stride) {
        test_fill_bf16(qkv, rows, width, width, 1.0f, 0, seed);
    } else {
        test_fill_bf16(qkv, rows, H, H, 1.0f, 0, seed);
        test_fill_bf16(qkv + l.k_off, rows, Hk, Hk, 1.0f, 0, seed + 1);
        test_fill_bf16(qkv + l.v_off, rows, Hk, Hk, 1.0f, 0, seed + 2);
    }
    test_fill_bf16(d_o, rows, l.o_stride, l.o_stride, 1.0f, 0, seed + 3);
    /* sharper softmax rows: q at 2x (bf16 scaling by 2 is exact) */
    const int64_t qs = l.qkv_stride ? l.qkv_stride : H;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < H; ++i) {
            uint16_t *x = qkv + l.q_off + r * qs + i;
            *x = bfp8_f32_to_bf16(2.0f * bfp8_bf16_to_f32(*x));
        }

    run_out a = {0}, b = {0};
    run_backend(ctx, c, &l, qkv, qkv_n, d_o, o_n, -1, &a);
    if (g_sanitize && cpu) { /* the backward's other variant too, for the sanitizers */
        run_backend(ctx, c, &l, qkv, qkv_n, d_o, o_n, 1, &b);
        free_run(&b);
    }
    if (!g_sanitize) {
        check_padding(c, &l, &a);
        ref_out ref;
        const size_t nq = (size_t)(rows * H), nk = (size_t)(rows * Hk);
        ref.o = test_malloc(nq * 8), ref.dq = test_malloc(nq * 8), ref.dk = test_malloc(nk * 8);
        ref.dv = test_malloc(nk * 8), ref.lse = test_malloc((size_t)lse_n * 8);
        const int64_t ks = l.qkv_stride ? l.qkv_stride : Hk;
        reference(c, 1.0 / sqrt((double)c->head_dim), qkv + l.q_off, qs, qkv + l.k_off, ks, qkv + l.v_off, ks, d_o,
                  l.o_stride, &ref);
        compare(bfp8_context_backend(ctx) == BFP8_BACKEND_CUDA ? "cuda" : "cpu", c, &l, &a, &ref, NULL);
        if (cpu) { /* CUDA: against the CPU reference, bit-identical repeats, the backward's other variant */
            run_backend(cpu, c, &l, qkv, qkv_n, d_o, o_n, -1, &b);
            compare("~cpu", c, &l, &a, NULL, &b);
            free_run(&b);
            run_backend(ctx, c, &l, qkv, qkv_n, d_o, o_n, -1, &b);
            CHECK(same_bits(&a, &b, (size_t)qkv_elems(c, l.dqkv_stride), o_n, lse_n), "case %d: a second run differs",
                  index);
            free_run(&b);
            run_backend(ctx, c, &l, qkv, qkv_n, d_o, o_n, 1, &b); /* the backward in the time order */
            compare("timeo", c, &l, &b, &ref, NULL);
            free_run(&b);
        }
        free(ref.o), free(ref.dq), free(ref.dk), free(ref.dv), free(ref.lse);
    }
    free_run(&a);
    free(qkv);
    free(d_o);
}

/* Every argument check answers with its status and writes nothing. */
static void check_arguments(bfp8_context *ctx) {
    uint16_t *buf = NULL;
    float *lse = NULL;
    const size_t n = 4 * 64 * 128;
    CHECK_OK(bfp8_malloc(ctx, (void **)&buf, n * 2 * 8));
    CHECK_OK(bfp8_malloc(ctx, (void **)&lse, 4096));
    uint16_t *q = buf, *k = buf + n, *v = buf + 2 * n, *o = buf + 3 * n, *dq = buf + 4 * n;
    bfp8_attention_desc d;
    memset(&d, 0, sizeof d);
    d.batch = 1, d.seq = 64, d.n_heads = 2, d.head_dim = 64;
    CHECK_OK(bfp8_attention_forward(ctx, &d, q, k, v, o, lse));
    bfp8_attention_desc bad = d;
    bad.head_dim = 96;
    CHECK_STATUS(bfp8_attention_forward(ctx, &bad, q, k, v, o, lse), BFP8_ERR_UNSUPPORTED);
    bad = d, bad.n_kv_heads = 3, bad.n_heads = 4;
    CHECK_STATUS(bfp8_attention_forward(ctx, &bad, q, k, v, o, lse), BFP8_ERR_SHAPE);
    bad = d, bad.seq = 0;
    CHECK_STATUS(bfp8_attention_forward(ctx, &bad, q, k, v, o, lse), BFP8_ERR_INVALID_VALUE);
    bad = d, bad.q_row_stride = 64;
    CHECK_STATUS(bfp8_attention_forward(ctx, &bad, q, k, v, o, lse), BFP8_ERR_LAYOUT);
    bad = d, bad.k_row_stride = 132;
    CHECK_STATUS(bfp8_attention_forward(ctx, &bad, q, k, v, o, lse), BFP8_ERR_ALIGNMENT);
    bad = d, bad.causal = 2;
    CHECK_STATUS(bfp8_attention_forward(ctx, &bad, q, k, v, o, lse), BFP8_ERR_INVALID_VALUE);
    bad = d, bad.softmax_scale = -1.0f;
    CHECK_STATUS(bfp8_attention_forward(ctx, &bad, q, k, v, o, lse), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_attention_forward(ctx, &d, q + 4, k, v, o, lse), BFP8_ERR_ALIGNMENT);
    CHECK_STATUS(bfp8_attention_forward(ctx, &d, q, k, NULL, o, lse), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_attention_forward(NULL, &d, q, k, v, o, lse), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_attention_forward(ctx, NULL, q, k, v, o, lse), BFP8_ERR_NULL_POINTER);
    size_t ws = 0;
    CHECK_OK(bfp8_attention_backward_workspace_size(ctx, &d, &ws));
    if (ws > 0) {
        CHECK_STATUS(bfp8_attention_backward(ctx, &d, q, k, v, o, o, lse, dq, dq, dq, NULL, ws - 1),
                     BFP8_ERR_INVALID_VALUE);
    }
    bfp8_free(ctx, buf);
    bfp8_free(ctx, lse);
}

int main(int argc, char **argv) {
    int cuda = 0, quick = 0, only = -1;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) cuda = strcmp(argv[++i], "cuda") == 0;
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--sanitize") == 0) g_sanitize = 1;
        else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) only = atoi(argv[++i]);
        else test_fatal("usage: %s --backend cpu|cuda [--quick] [--sanitize] [--case N]", argv[0]);
    }
    if (cuda) TEST_REQUIRE_GPU();
    bfp8_context *ctx = NULL, *cpu = NULL;
    if (bfp8_context_create(&ctx, cuda ? BFP8_BACKEND_CUDA : BFP8_BACKEND_CPU, 0) != BFP8_OK)
        test_fatal("context: %s", bfp8_last_error());
    if (cuda && bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0) != BFP8_OK) test_fatal("cpu context");
    if (!g_sanitize) check_arguments(ctx);

    static const int64_t seqs[] = {1, 63, 64, 65, 127, 2048, 2049};
    int index = 0;
    for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; ++si)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int causal = 0; causal <= 1; ++causal, ++index) {
                const int64_t T = seqs[si];
                const int big = T >= 1024;
                if ((quick && big) || (only >= 0 && index != only)) continue;
                /* small T: 2 sequences, 4 query heads on 2 key heads; long: 1 sequence, 2 heads on 1 */
                const int fused = (index / 2 + index) % 2;
                attn_case c = {big ? 1 : 2, T, big ? 2 : 4, big ? 1 : 2, hd, causal, fused};
                run_case(ctx, cpu, &c, index);
            }
    bfp8_context_destroy(ctx);
    bfp8_context_destroy(cpu);
    return test_exit_code(cuda ? "gpu_attention" : "attention_cpu");
}
