/*
 * moe_reference.c - see moe_reference.h.
 */
#include "moe_reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

void ref_params_sizes(const bfp8_moe_config *c, int64_t T, int64_t sizes[6]) {
    const int64_t H = c->hidden, F = c->expert_hidden, Fs = c->shared_hidden, E = c->num_experts;
    sizes[0] = T * H, sizes[1] = E * H, sizes[2] = E * 2 * F * H, sizes[3] = E * H * F;
    sizes[4] = 2 * Fs * H, sizes[5] = H * Fs;
}

double **ref_params_array(ref_params *p, int i) {
    double **a[] = {&p->x, &p->router, &p->w13, &p->w2, &p->shared_w13, &p->shared_w2};
    return a[i];
}

void ref_params_alloc(const bfp8_moe_config *c, int64_t T, ref_params *p) {
    int64_t sizes[6];
    ref_params_sizes(c, T, sizes);
    for (int i = 0; i < 6; ++i) *ref_params_array(p, i) = calloc((size_t)(sizes[i] > 0 ? sizes[i] : 1), sizeof(double));
}

void ref_params_free(ref_params *p) {
    for (int i = 0; i < 6; ++i) free(*ref_params_array(p, i));
}

static double bf16_round(double v) { return bfp8_bf16_to_f32(bfp8_f32_to_bf16((float)v)); }
static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* One SwiGLU expert on token row x: out (H) = W2 (silu(W1 x) * W3 x); with
 * d_out, adds the gradients into dx, dw13, dw2. */
static void expert(int64_t H, int64_t F, const double *x, const double *w13, const double *w2, double *out,
                   const double *d_out, double *dx, double *dw13, double *dw2) {
    double *gu = malloc(sizeof(double) * 2 * F), *h = malloc(sizeof(double) * F), *dh = malloc(sizeof(double) * F);
    for (int64_t i = 0; i < 2 * F; ++i) {
        double s = 0.0;
        for (int64_t c = 0; c < H; ++c) s += w13[i * H + c] * x[c];
        gu[i] = s;
    }
    for (int64_t i = 0; i < F; ++i) h[i] = gu[i] * sigmoid(gu[i]) * gu[F + i];
    for (int64_t o = 0; o < H; ++o) {
        double s = 0.0;
        for (int64_t i = 0; i < F; ++i) s += w2[o * F + i] * h[i];
        out[o] = s;
    }
    if (d_out) {
        for (int64_t i = 0; i < F; ++i) {
            double s = 0.0;
            for (int64_t o = 0; o < H; ++o) {
                s += d_out[o] * w2[o * F + i];
                dw2[o * F + i] += d_out[o] * h[i];
            }
            dh[i] = s;
        }
        for (int64_t i = 0; i < F; ++i) {
            const double g = gu[i], u = gu[F + i], sg = sigmoid(g);
            const double dg = dh[i] * u * (sg * (1.0 + g * (1.0 - sg))), du = dh[i] * g * sg;
            for (int64_t c = 0; c < H; ++c) {
                dw13[i * H + c] += dg * x[c], dw13[(F + i) * H + c] += du * x[c];
                dx[c] += dg * w13[i * H + c] + du * w13[(F + i) * H + c];
            }
        }
    }
    free(gu), free(h), free(dh);
}

void ref_moe(const ref_config *rc, int64_t T, const ref_params *p, const double *bias, const double *dy, double *y,
             double *aux_loss, ref_params *g) {
    const bfp8_moe_config *c = &rc->cfg;
    const int64_t H = c->hidden, F = c->expert_hidden, Fs = c->shared_hidden;
    const int E = c->num_experts, k = c->top_k;
    if (g) {
        int64_t sizes[6];
        ref_params_sizes(c, T, sizes);
        for (int i = 0; i < 6; ++i) memset(*ref_params_array(g, i), 0, sizeof(double) * (size_t)sizes[i]);
    }
    double *s = calloc((size_t)(T * E), sizeof(double)), *w = calloc((size_t)(T * k), sizeof(double));
    int *ex = calloc((size_t)(T * k), sizeof(int)), *kept = calloc((size_t)(T * k), sizeof(int));
    int64_t *count = calloc((size_t)E, sizeof(int64_t)), *used = calloc((size_t)E, sizeof(int64_t));
    double *out = malloc(sizeof(double) * (size_t)(T * k * H)), *tmp = malloc(sizeof(double) * (size_t)H);
    double *rx = malloc(sizeof(double) * (size_t)(T * H)), *rw = malloc(sizeof(double) * (size_t)(E * H));
    for (int64_t i = 0; i < T * H; ++i) rx[i] = rc->round_router ? bf16_round(p->x[i]) : p->x[i];
    for (int64_t i = 0; i < E * H; ++i) rw[i] = rc->round_router ? bf16_round(p->router[i]) : p->router[i];
    for (int64_t t = 0; t < T; ++t) { /* scores, top-k, weights */
        double *st = s + t * E, m = -INFINITY, sum = 0.0;
        for (int e = 0; e < E; ++e) {
            double l = 0.0;
            for (int64_t h = 0; h < H; ++h) l += rx[t * H + h] * rw[e * H + h];
            st[e] = l, m = fmax(m, l);
        }
        if (c->score_fn == BFP8_MOE_SCORE_SOFTMAX) {
            for (int e = 0; e < E; ++e) sum += (st[e] = exp(st[e] - m));
            for (int e = 0; e < E; ++e) st[e] /= sum;
        } else {
            for (int e = 0; e < E; ++e) st[e] = sigmoid(st[e]);
        }
        int taken[1024] = {0};
        double denom = 0.0;
        for (int j = 0; j < k; ++j) {
            int best = -1;
            for (int e = 0; e < E; ++e)
                if (!taken[e] && (best < 0 || st[e] + (bias ? bias[e] : 0) > st[best] + (bias ? bias[best] : 0)))
                    best = e;
            taken[best] = 1, ex[t * k + j] = best, denom += st[best];
            ++count[best];
        }
        for (int j = 0; j < k; ++j)
            w[t * k + j] = c->route_scale * st[ex[t * k + j]] / (c->normalize_weights ? denom : 1);
    }
    int64_t capacity = 0;
    if (c->capacity_factor > 0) {
        capacity = (int64_t)ceil((double)c->capacity_factor * (double)T * k / E);
        if (capacity < 1) capacity = 1;
    }
    for (int64_t i = 0; i < T * k; ++i) kept[i] = capacity == 0 || used[ex[i]]++ < capacity;
    /* forward */
    for (int64_t i = 0; i < T * H; ++i) y[i] = 0.0;
    for (int64_t t = 0; t < T; ++t) {
        for (int j = 0; j < k; ++j) {
            const int64_t sl = t * k + j;
            if (!kept[sl]) continue;
            const int e = ex[sl];
            expert(H, F, p->x + t * H, p->w13 + e * 2 * F * H, p->w2 + e * H * F, out + sl * H, NULL, NULL, NULL, NULL);
            for (int64_t h = 0; h < H; ++h) y[t * H + h] += w[sl] * out[sl * H + h];
        }
        if (Fs > 0) {
            expert(H, Fs, p->x + t * H, p->shared_w13, p->shared_w2, tmp, NULL, NULL, NULL, NULL);
            for (int64_t h = 0; h < H; ++h) y[t * H + h] += tmp[h];
        }
    }
    const int aux = c->balance == BFP8_MOE_BALANCE_AUX_LOSS;
    double loss = 0.0;
    for (int e = 0; aux && e < E; ++e) {
        double mean = 0.0;
        for (int64_t t = 0; t < T; ++t) mean += s[t * E + e] / T;
        loss += (double)count[e] / ((double)T * k) * mean;
    }
    *aux_loss = aux ? c->aux_loss_coef * E * loss : 0.0;
    if (g && dy) {
        double *gs = malloc(sizeof(double) * (size_t)E), *d_out = malloc(sizeof(double) * (size_t)H);
        for (int64_t t = 0; t < T; ++t) {
            const double *st = s + t * E, *dyt = dy + t * H;
            double *dxt = g->x + t * H;
            for (int e = 0; e < E; ++e)
                gs[e] = aux ? c->aux_loss_coef * E * ((double)count[e] / ((double)T * k)) / T : 0;
            double dwj[16] = {0}, denom = 0.0, dot = 0.0;
            for (int j = 0; j < k; ++j) {
                const int64_t sl = t * k + j;
                if (!kept[sl]) continue;
                const int e = ex[sl];
                for (int64_t h = 0; h < H; ++h) dwj[j] += dyt[h] * out[sl * H + h], d_out[h] = w[sl] * dyt[h];
                expert(H, F, p->x + t * H, p->w13 + e * 2 * F * H, p->w2 + e * H * F, tmp, d_out, dxt,
                       g->w13 + e * 2 * F * H, g->w2 + e * H * F);
            }
            if (Fs > 0)
                expert(H, Fs, p->x + t * H, p->shared_w13, p->shared_w2, tmp, dyt, dxt, g->shared_w13, g->shared_w2);
            for (int j = 0; j < k; ++j) denom += st[ex[t * k + j]], dot += dwj[j] * st[ex[t * k + j]];
            for (int j = 0; j < k; ++j)
                gs[ex[t * k + j]] += c->normalize_weights ? c->route_scale * (dwj[j] - dot / denom) / denom
                                                          : c->route_scale * dwj[j];
            double sdot = 0.0;
            for (int e = 0; e < E; ++e) sdot += gs[e] * st[e];
            for (int e = 0; e < E; ++e) {
                const double dl = c->score_fn == BFP8_MOE_SCORE_SOFTMAX ? st[e] * (gs[e] - sdot)
                                                                        : gs[e] * st[e] * (1 - st[e]);
                for (int64_t h = 0; h < H; ++h) {
                    g->router[e * H + h] += dl * rx[t * H + h];
                    dxt[h] += dl * rw[e * H + h];
                }
            }
        }
        free(gs), free(d_out);
    }
    free(s), free(w), free(ex), free(kept), free(count), free(used), free(out), free(tmp), free(rx), free(rw);
}
