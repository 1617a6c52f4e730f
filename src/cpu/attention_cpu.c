/*
 * attention_cpu.c - the CPU reference of multi-head attention
 * (bfp8_attention_forward / _backward, include/blockfp8.h): bf16 in and out,
 * fp32 math, one query row (or one key row, for dK and dV) at a time, the
 * rows spread over OpenMP threads. What the CUDA kernels are tested against,
 * beside the tests' own fp64 reference.
 *
 *   forward   s = scale . q.k over the visible keys, m = max s,
 *             o = sum exp(s - m) v / sum exp(s - m), lse = m + log(sum exp(s - m))
 *   backward  p = exp(scale . q.k - lse), dp = dO.v, delta = dO.o (per query row),
 *             ds = p (dp - delta); dq = scale sum_s ds k, dk = scale sum_t ds q,
 *             dv = sum_t p dO (dk, dv summed over the query heads sharing the key head)
 *
 * Inputs are widened to fp32 head-major copies [b][h][t][d] first, so every
 * row the loops read is contiguous.
 */
#include <math.h>
#include <stdlib.h>

#include "formats/formats.h"
#include "internal.h"

typedef struct heads_f32 {
    float *data; /* [batch][heads][seq][head_dim] */
    int64_t heads;
} heads_f32;

/* x (token-major bf16, row stride `stride`) widened to fp32, head-major. */
static bfp8_status widen(heads_f32 *out, const uint16_t *x, int64_t stride, const bfp8_attention_desc *d,
                         int64_t heads) {
    const int64_t B = d->batch, T = d->seq, D = d->head_dim;
    out->heads = heads;
    out->data = malloc((size_t)(B * heads * T * D) * sizeof(float));
    if (!out->data) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "attention (CPU): out of host memory");
    #pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < B * T; ++row) {
        const int64_t b = row / T, t = row % T;
        for (int64_t h = 0; h < heads; ++h) {
            const uint16_t *src = x + row * stride + h * D;
            float *dst = out->data + ((b * heads + h) * T + t) * D;
            for (int64_t i = 0; i < D; ++i) dst[i] = bfp8_bf16_to_f32(src[i]);
        }
    }
    return BFP8_OK;
}

static const float *row_of(const heads_f32 *x, const bfp8_attention_desc *d, int64_t b, int64_t h, int64_t t) {
    return x->data + ((b * x->heads + h) * d->seq + t) * d->head_dim;
}

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

/* Keys visible to query t: [0, key_end). */
static int64_t key_end(const bfp8_attention_desc *d, int64_t t) { return d->causal ? t + 1 : d->seq; }

/* ------------------------------------------------------------------------ */

bfp8_status bfp8_cpu_attention_forward(bfp8_context *ctx, const bfp8_attention_desc *d, const uint16_t *q,
                                       const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse) {
    (void)ctx;
    const int64_t B = d->batch, T = d->seq, H = d->n_heads, D = d->head_dim, group = H / d->n_kv_heads;
    heads_f32 qf = {0}, kf = {0}, vf = {0};
    bfp8_status st = widen(&qf, q, d->q_row_stride, d, H);
    if (st == BFP8_OK) st = widen(&kf, k, d->k_row_stride, d, d->n_kv_heads);
    if (st == BFP8_OK) st = widen(&vf, v, d->v_row_stride, d, d->n_kv_heads);
    if (st == BFP8_OK) {
        /* one pass over the keys with a running maximum: acc and l are
         * rescaled by exp(m_old - m_new) whenever the maximum grows */
        #pragma omp parallel for schedule(dynamic, 16)
        for (int64_t r = 0; r < B * H * T; ++r) {
            const int64_t b = r / (H * T), h = (r / T) % H, t = r % T, hk = h / group, n = key_end(d, t);
            const float *qr = row_of(&qf, d, b, h, t);
            float acc[128] = {0}, m = -INFINITY, l = 0.0f;
            for (int64_t j = 0; j < n; ++j) {
                const float s = d->softmax_scale * dot(qr, row_of(&kf, d, b, hk, j), D);
                if (s > m) {
                    const float alpha = expf(m - s);
                    l *= alpha;
                    for (int64_t i = 0; i < D; ++i) acc[i] *= alpha;
                    m = s;
                }
                const float p = expf(s - m);
                const float *vr = row_of(&vf, d, b, hk, j);
                l += p;
                for (int64_t i = 0; i < D; ++i) acc[i] += p * vr[i];
            }
            uint16_t *orow = o + (b * T + t) * d->o_row_stride + h * D;
            for (int64_t i = 0; i < D; ++i) orow[i] = bfp8_f32_to_bf16(acc[i] / l);
            lse[r] = m + logf(l);
        }
    }
    free(qf.data);
    free(kf.data);
    free(vf.data);
    return st;
}

/* ------------------------------------------------------------------------ */

bfp8_status bfp8_cpu_attention_backward(bfp8_context *ctx, const bfp8_attention_desc *d, const uint16_t *q,
                                        const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                        const uint16_t *d_o, const float *lse, uint16_t *dq, uint16_t *dk,
                                        uint16_t *dv, void *workspace, size_t workspace_bytes) {
    (void)ctx;
    (void)workspace;
    (void)workspace_bytes;
    const int64_t B = d->batch, T = d->seq, H = d->n_heads, Hk = d->n_kv_heads, D = d->head_dim, group = H / Hk;
    const float scale = d->softmax_scale;
    heads_f32 qf = {0}, kf = {0}, vf = {0}, of = {0}, dof = {0};
    float *delta = malloc((size_t)(B * H * T) * sizeof(float));
    bfp8_status st = delta ? BFP8_OK : bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "attention (CPU): out of host memory");
    if (st == BFP8_OK) st = widen(&qf, q, d->q_row_stride, d, H);
    if (st == BFP8_OK) st = widen(&kf, k, d->k_row_stride, d, Hk);
    if (st == BFP8_OK) st = widen(&vf, v, d->v_row_stride, d, Hk);
    if (st == BFP8_OK) st = widen(&of, o, d->o_row_stride, d, H);
    if (st == BFP8_OK) st = widen(&dof, d_o, d->do_row_stride, d, H);
    if (st == BFP8_OK) {
        #pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < B * H * T; ++r) {
            const int64_t b = r / (H * T), h = (r / T) % H, t = r % T;
            delta[r] = dot(row_of(&dof, d, b, h, t), row_of(&of, d, b, h, t), D);
        }
        /* dQ: one query row at a time */
        #pragma omp parallel for schedule(dynamic, 16)
        for (int64_t r = 0; r < B * H * T; ++r) {
            const int64_t b = r / (H * T), h = (r / T) % H, t = r % T, hk = h / group, n = key_end(d, t);
            const float *qr = row_of(&qf, d, b, h, t), *dor = row_of(&dof, d, b, h, t);
            float acc[128] = {0};
            for (int64_t j = 0; j < n; ++j) {
                const float *kr = row_of(&kf, d, b, hk, j);
                const float p = expf(scale * dot(qr, kr, D) - lse[r]);
                const float ds = p * (dot(dor, row_of(&vf, d, b, hk, j), D) - delta[r]);
                for (int64_t i = 0; i < D; ++i) acc[i] += ds * kr[i];
            }
            uint16_t *out = dq + (b * T + t) * d->dq_row_stride + h * D;
            for (int64_t i = 0; i < D; ++i) out[i] = bfp8_f32_to_bf16(scale * acc[i]);
        }
        /* dK, dV: one key row at a time, over the queries that see it in every head of its group */
        #pragma omp parallel for schedule(dynamic, 16)
        for (int64_t r = 0; r < B * Hk * T; ++r) {
            const int64_t b = r / (Hk * T), hk = (r / T) % Hk, j = r % T;
            const float *kr = row_of(&kf, d, b, hk, j), *vr = row_of(&vf, d, b, hk, j);
            float acc_k[128] = {0}, acc_v[128] = {0};
            for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
                for (int64_t t = d->causal ? j : 0; t < T; ++t) {
                    const int64_t row = (b * H + h) * T + t;
                    const float *qr = row_of(&qf, d, b, h, t), *dor = row_of(&dof, d, b, h, t);
                    const float p = expf(scale * dot(qr, kr, D) - lse[row]);
                    const float ds = p * (dot(dor, vr, D) - delta[row]);
                    for (int64_t i = 0; i < D; ++i) {
                        acc_k[i] += ds * qr[i];
                        acc_v[i] += p * dor[i];
                    }
                }
            uint16_t *out_k = dk + (b * T + j) * d->dk_row_stride + hk * D;
            uint16_t *out_v = dv + (b * T + j) * d->dv_row_stride + hk * D;
            for (int64_t i = 0; i < D; ++i) {
                out_k[i] = bfp8_f32_to_bf16(scale * acc_k[i]);
                out_v[i] = bfp8_f32_to_bf16(acc_v[i]);
            }
        }
    }
    free(qf.data);
    free(kf.data);
    free(vf.data);
    free(of.data);
    free(dof.data);
    free(delta);
    return st;
}
