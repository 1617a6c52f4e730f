/*
 * test_moe_layer.c - bfp8_moe on the CPU backend.
 *
 *   1. The fp64 reference (moe_reference.c): its analytic gradients against
 *      central differences of its loss L = sum dy . y + aux, for x, the
 *      router, the experts and the shared expert.
 *   2. The layer against the reference, every recipe: y, dx and every weight
 *      gradient by SQNR; routings: softmax / sigmoid, normalized, scaled,
 *      capacity drops, the load-balancing loss, and an adversarial load
 *      (every token to expert 0, experts 5-7 never chosen).
 *   3. The layer's own gradients by central differences (bf16 recipe,
 *      directions in the experts' weights, which leave the routing alone).
 *   4. Two runs give the same bits, also with another layer's forward and
 *      backward between one's forward and its backward; accumulate adds; the bias update and the
 *      per-expert load; a forward with the moved bias against the reference;
 *      the last forward's routing (bfp8_moe_last_routing) and a bias set
 *      from outside (bfp8_moe_set_bias).
 *
 *   build/tests/moe/test_moe_layer
 */
#include <math.h>
#include <string.h>

#include "moe_reference.h"
#include "test_util.h"

static bfp8_context *ctx;
static int64_t forwards; /* layer forwards since the last bias update */
static const char *array_names[6] = {"dx", "d_router", "d_w13", "d_w2", "d_shared_w13", "d_shared_w2"};

typedef struct layer_run {
    float *a[6]; /* x, router, w13, w2, shared_w13, shared_w2 (or their gradients: dx, ...) */
} layer_run;

static void run_alloc(const bfp8_moe_config *c, int64_t T, layer_run *r) {
    int64_t sizes[6];
    ref_params_sizes(c, T, sizes);
    for (int i = 0; i < 6; ++i) r->a[i] = test_malloc((size_t)(sizes[i] > 0 ? sizes[i] : 1) * 4);
}

static void run_free(layer_run *r) {
    for (int i = 0; i < 6; ++i) free(r->a[i]);
}

static bfp8_moe_weights weights_of(const layer_run *r, int shared) {
    const bfp8_moe_weights w = {r->a[1], r->a[2], r->a[3], shared ? r->a[4] : NULL, shared ? r->a[5] : NULL};
    return w;
}

/* Parameters: x ~ N(0, 1), weights ~ N(0, 1 / fan_in); adversarial: a
 * constant feature that sends every token to expert 0 and none to 5-7. */
static void make_params(const bfp8_moe_config *c, int64_t T, int adversarial, uint64_t seed, ref_params *p) {
    const int64_t H = c->hidden;
    int64_t sizes[6];
    ref_params_sizes(c, T, sizes);
    const double sd[6] = {1.0, 1.0 / sqrt((double)H), 1.0 / sqrt((double)H), 1.0 / sqrt((double)c->expert_hidden),
                          1.0 / sqrt((double)H), c->shared_hidden ? 1.0 / sqrt((double)c->shared_hidden) : 0};
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (int i = 0; i < 6; ++i)
        for (int64_t j = 0; j < sizes[i]; ++j)
            (*ref_params_array(p, i))[j] = (double)(float)(sd[i] * test_rng_normal(&rng));
    if (adversarial) {
        for (int64_t t = 0; t < T; ++t) p->x[t * H] = 3.0;
        for (int e = 0; e < c->num_experts; ++e) p->router[e * H] = e == 0 ? 5.0 : e >= 5 ? -5.0 : 0.0;
    }
}

static void to_float(const double *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = (float)in[i];
}

/* The layer's forward and backward at params p (dy given); returns y and the gradients. */
static void run_layer(bfp8_moe *m, const bfp8_moe_config *c, int64_t T, const layer_run *p, const float *dy, float *y,
                      layer_run *g, int accumulate) {
    const bfp8_moe_weights w = weights_of(p, c->shared_hidden > 0), gw = weights_of(g, c->shared_hidden > 0);
    CHECK_OK(bfp8_moe_set_weights(m, &w));
    CHECK_OK(bfp8_moe_forward(m, p->a[0], T, y));
    ++forwards;
    CHECK_OK(bfp8_moe_backward(m, dy, g->a[0], &gw, accumulate));
}

static double layer_loss(bfp8_moe *m, const bfp8_moe_config *c, int64_t T, const layer_run *p, const float *dy,
                         float *y) {
    const bfp8_moe_weights w = weights_of(p, c->shared_hidden > 0);
    CHECK_OK(bfp8_moe_set_weights(m, &w));
    CHECK_OK(bfp8_moe_forward(m, p->a[0], T, y));
    ++forwards;
    double l = 0.0;
    for (int64_t i = 0; i < T * c->hidden; ++i) l += (double)dy[i] * y[i];
    return l;
}

static double ref_loss(const ref_config *rc, int64_t T, const ref_params *p, const double *dy, double *y) {
    double aux;
    ref_moe(rc, T, p, NULL, NULL, y, &aux, NULL);
    double l = aux;
    for (int64_t i = 0; i < T * rc->cfg.hidden; ++i) l += dy[i] * y[i];
    return l;
}

/* 1. The reference's gradients by central differences along random directions. */
static void check_reference_gradients(const char *name, const bfp8_moe_config *c, int64_t T, int adversarial) {
    const ref_config rc = {*c, 0};
    ref_params p = {0}, g = {0};
    ref_params_alloc(c, T, &p), ref_params_alloc(c, T, &g);
    make_params(c, T, adversarial, 101, &p);
    const int64_t H = c->hidden;
    double *dy = test_malloc(sizeof(double) * (size_t)(T * H)), *y = test_malloc(sizeof(double) * (size_t)(T * H));
    test_rng rng;
    test_rng_seed(&rng, 5);
    for (int64_t i = 0; i < T * H; ++i) dy[i] = test_rng_normal(&rng);
    double aux;
    ref_moe(&rc, T, &p, NULL, dy, y, &aux, &g);
    int64_t sizes[6];
    ref_params_sizes(c, T, sizes);
    for (int i = 0; i < 6; ++i) {
        if (sizes[i] == 0) continue;
        double *a = *ref_params_array(&p, i), *ga = *ref_params_array(&g, i);
        double *d = test_malloc(sizeof(double) * (size_t)sizes[i]), analytic = 0.0, rms = 0.0;
        for (int64_t j = 0; j < sizes[i]; ++j) rms += a[j] * a[j];
        rms = sqrt(rms / sizes[i]); /* a direction of the array's own size */
        for (int64_t j = 0; j < sizes[i]; ++j) d[j] = rms * test_rng_normal(&rng), analytic += ga[j] * d[j];
        const double h = 1e-5;
        for (int64_t j = 0; j < sizes[i]; ++j) a[j] += h * d[j];
        const double lp = ref_loss(&rc, T, &p, dy, y);
        for (int64_t j = 0; j < sizes[i]; ++j) a[j] -= 2 * h * d[j];
        const double lm = ref_loss(&rc, T, &p, dy, y);
        for (int64_t j = 0; j < sizes[i]; ++j) a[j] += h * d[j];
        double magnitude = 1.0; /* of the loss's terms: the round-off of the difference scales with it */
        for (int64_t j = 0; j < T * H; ++j) magnitude += fabs(dy[j] * y[j]);
        const double fd = (lp - lm) / (2 * h);
        CHECK(fabs(fd - analytic) <= 1e-6 * fabs(analytic) + 1e-14 * magnitude / h,
              "%s: reference %s: central difference %.9g, analytic %.9g", name, array_names[i], fd,
              analytic);
        free(d);
    }
    ref_params_free(&p), ref_params_free(&g), free(dy), free(y);
}

/* 2-4. The layer against the reference, in one recipe. */
static void check_layer(const char *name, bfp8_moe_config c, int64_t T, int adversarial, bfp8_recipe recipe,
                        double min_db) {
    c.recipe = recipe;
    char what[160];
    snprintf(what, sizeof what, "%s, %s", name, bfp8_recipe_name(recipe));
    const ref_config rc = {c, 1};
    const int64_t H = c.hidden;
    ref_params p = {0}, g = {0};
    ref_params_alloc(&c, T, &p), ref_params_alloc(&c, T, &g);
    make_params(&c, T, adversarial, 202, &p);
    double *dy = test_malloc(sizeof(double) * (size_t)(T * H)), *y = test_malloc(sizeof(double) * (size_t)(T * H));
    float *dyf = test_malloc((size_t)(T * H) * 4), *yf = test_malloc((size_t)(T * H) * 4);
    float *yf2 = test_malloc((size_t)(T * H) * 4);
    test_rng rng;
    test_rng_seed(&rng, 9);
    for (int64_t i = 0; i < T * H; ++i) dyf[i] = (float)test_rng_normal(&rng), dy[i] = dyf[i];
    double aux_ref;
    ref_moe(&rc, T, &p, NULL, dy, y, &aux_ref, &g);

    bfp8_moe *m = NULL;
    CHECK_OK(bfp8_moe_create(&m, ctx, &c));
    if (!m) return;
    layer_run lp, lg, lg2;
    run_alloc(&c, T, &lp), run_alloc(&c, T, &lg), run_alloc(&c, T, &lg2);
    int64_t sizes[6];
    ref_params_sizes(&c, T, sizes);
    for (int i = 0; i < 6; ++i) to_float(*ref_params_array(&p, i), lp.a[i], sizes[i]);
    run_layer(m, &c, T, &lp, dyf, yf, &lg, 0);
    const double db_y = test_sqnr_db(y, H, yf, H, T, H);
    CHECK(db_y >= min_db, "%s: y %.1f dB against fp64 (want >= %.0f)", what, db_y, min_db);
    printf("%-44s y %5.1f dB", what, db_y);
    for (int i = 0; i < 6; ++i) {
        if (sizes[i] == 0) continue;
        const double db = test_sqnr_db(*ref_params_array(&g, i), sizes[i], lg.a[i], sizes[i], 1, sizes[i]);
        printf("  %s %5.1f", array_names[i] + 2, db);
        CHECK(db >= min_db - 4.0, "%s: %s %.1f dB against fp64 (want >= %.0f)", what, array_names[i], db, min_db - 4);
    }
    printf("\n");
    float aux = -1.0f;
    CHECK_OK(bfp8_moe_aux_loss(m, &aux));
    CHECK(fabs(aux - aux_ref) <= 1e-4 * fabs(aux_ref) + 1e-9, "%s: aux loss %.8g, reference %.8g", what, aux, aux_ref);

    /* the same bits again; then accumulate adds the same gradients once more */
    run_layer(m, &c, T, &lp, dyf, yf2, &lg2, 0);
    int64_t differ = test_compare_f32_bits("y", yf, yf2, T * H);
    for (int i = 0; i < 6; ++i) differ += test_compare_f32_bits(array_names[i], lg.a[i], lg2.a[i], sizes[i]);
    CHECK(differ == 0, "%s: a second run differs in %lld values", what, (long long)differ);
    run_layer(m, &c, T, &lp, dyf, yf2, &lg2, 1);
    double worst = 0.0;
    for (int i = 1; i < 6; ++i)
        for (int64_t j = 0; j < sizes[i]; ++j)
            worst = fmax(worst, fabs(lg2.a[i][j] - 2.0 * lg.a[i][j]) / (1e-6 + fabs(2.0 * lg.a[i][j])));
    CHECK(worst < 1e-5, "%s: accumulated gradients are not twice the stored ones (worst relative %.3g)", what, worst);

    /* another layer of the context runs between this one's forward and its backward (on other tokens): the
     * buffers the layers share in the context's call scratch carry nothing from a forward to its backward */
    bfp8_moe *other = NULL;
    CHECK_OK(bfp8_moe_create(&other, ctx, &c));
    if (other) {
        layer_run og;
        run_alloc(&c, T, &og);
        float *x_other = test_malloc((size_t)(T * H) * 4), *y_other = test_malloc((size_t)(T * H) * 4);
        for (int64_t i = 0; i < T * H; ++i) x_other[i] = -lp.a[0][i];
        const int shared = c.shared_hidden > 0;
        const bfp8_moe_weights w = weights_of(&lp, shared), ow = weights_of(&og, shared), gw = weights_of(&lg2, shared);
        CHECK_OK(bfp8_moe_set_weights(other, &w));
        CHECK_OK(bfp8_moe_set_weights(m, &w));
        CHECK_OK(bfp8_moe_forward(m, lp.a[0], T, yf2));
        ++forwards;
        CHECK_OK(bfp8_moe_forward(other, x_other, T, y_other));
        CHECK_OK(bfp8_moe_backward(other, dyf, og.a[0], &ow, 0));
        CHECK_OK(bfp8_moe_backward(m, dyf, lg2.a[0], &gw, 0));
        differ = test_compare_f32_bits("y", yf, yf2, T * H);
        for (int i = 0; i < 6; ++i) differ += test_compare_f32_bits(array_names[i], lg.a[i], lg2.a[i], sizes[i]);
        CHECK(differ == 0, "%s: another layer's forward and backward between this one's changed %lld values", what,
              (long long)differ);
        bfp8_moe_destroy(other);
        run_free(&og), free(x_other), free(y_other);
    }

    /* 3. central differences of the layer (bf16 recipe): the experts' weights */
    if (recipe == BFP8_RECIPE_BF16 && c.balance != BFP8_MOE_BALANCE_AUX_LOSS)
        for (int i = 2; i < 6; ++i) {
            if (sizes[i] == 0) continue;
            float *a = lp.a[i], *keep = test_malloc((size_t)sizes[i] * 4), *d = test_malloc((size_t)sizes[i] * 4);
            memcpy(keep, a, (size_t)sizes[i] * 4);
            /* along the gradient, 3% of the weights' size: the bf16 rounding of the
             * perturbed weights averages out, the curvature stays small */
            double analytic = 0.0, rms = 0.0, grad_rms = 0.0;
            for (int64_t j = 0; j < sizes[i]; ++j)
                rms += (double)a[j] * a[j], grad_rms += (double)lg.a[i][j] * lg.a[i][j];
            const double step = 0.03 * sqrt(rms / grad_rms);
            for (int64_t j = 0; j < sizes[i]; ++j)
                d[j] = (float)(step * lg.a[i][j]), analytic += (double)lg.a[i][j] * d[j];
            for (int64_t j = 0; j < sizes[i]; ++j) a[j] = keep[j] + d[j];
            const double lplus = layer_loss(m, &c, T, &lp, dyf, yf2);
            for (int64_t j = 0; j < sizes[i]; ++j) a[j] = keep[j] - d[j];
            const double lminus = layer_loss(m, &c, T, &lp, dyf, yf2);
            memcpy(a, keep, (size_t)sizes[i] * 4);
            const double fd = (lplus - lminus) / 2.0;
            CHECK(fabs(fd - analytic) <= 0.01 * fabs(analytic), "%s: layer %s: central difference %.6g, analytic %.6g",
                  what, array_names[i], fd, analytic);
            free(keep), free(d);
        }

    /* 4. the load and the bias: update, then a forward with the moved bias */
    int64_t load[1024], load_sum = 0;
    float bias[1024];
    CHECK_OK(bfp8_moe_update_bias(m, load, bias));
    for (int e = 0; e < c.num_experts; ++e) load_sum += load[e];
    CHECK(load_sum == forwards * T * c.top_k, "%s: load sums to %lld over %lld forwards, expected %lld", what,
          (long long)load_sum, (long long)forwards, (long long)(forwards * T * c.top_k));
    if (adversarial)
        CHECK(load[0] == forwards * T && load[5] == 0 && load[6] == 0 && load[7] == 0, "%s: load %lld %lld %lld %lld",
              what, (long long)load[0], (long long)load[5], (long long)load[6], (long long)load[7]);
    forwards = 0;
    if (c.balance == BFP8_MOE_BALANCE_BIAS) {
        double mean = (double)load_sum / c.num_experts, *bias_ref = test_malloc(sizeof(double) * 1024);
        int64_t bad = 0;
        for (int e = 0; e < c.num_experts; ++e) {
            const float want = load[e] < mean ? c.bias_update_rate : load[e] > mean ? -c.bias_update_rate : 0.0f;
            bad += bias[e] != want;
            bias_ref[e] = bias[e];
        }
        CHECK(bad == 0, "%s: %lld biases not moved by the rate towards the mean load", what, (long long)bad);
        const bfp8_moe_weights w = weights_of(&lp, c.shared_hidden > 0);
        CHECK_OK(bfp8_moe_set_weights(m, &w));
        CHECK_OK(bfp8_moe_forward(m, lp.a[0], T, yf));
        ref_moe(&rc, T, &p, bias_ref, NULL, y, &aux_ref, NULL);
        const double db = test_sqnr_db(y, H, yf, H, T, H);
        CHECK(db >= min_db, "%s: y with the moved bias %.1f dB against fp64", what, db);
        free(bias_ref);
    }
    /* the last forward's routing: the slots add up, the dropped ones are those past the capacity; a bias set
     * from outside (bfp8_moe_set_bias) that sends every token to the last expert */
    int64_t routed[1024], dropped = -1, routed_sum = 0, dropped_want = 0;
    CHECK_OK(bfp8_moe_forward(m, lp.a[0], T, yf));
    CHECK_OK(bfp8_moe_last_routing(m, routed, &dropped));
    const int64_t capacity =
        c.capacity_factor > 0.0f ? (int64_t)ceil((double)c.capacity_factor * (double)T * c.top_k / c.num_experts) : 0;
    for (int e = 0; e < c.num_experts; ++e) {
        routed_sum += routed[e];
        if (capacity > 0 && routed[e] > capacity) dropped_want += routed[e] - capacity;
    }
    CHECK(routed_sum == T * c.top_k && dropped == dropped_want, "%s: last routing: %lld slots (expected %lld), "
          "%lld dropped (expected %lld)", what, (long long)routed_sum, (long long)(T * c.top_k), (long long)dropped,
          (long long)dropped_want);
    if (c.capacity_factor > 0.0f) CHECK(dropped > 0, "%s: the capacity dropped nothing", what);
    if (c.balance == BFP8_MOE_BALANCE_BIAS) {
        for (int e = 0; e < c.num_experts; ++e) bias[e] = e == c.num_experts - 1 ? 10.0f : 0.0f;
        CHECK_OK(bfp8_moe_set_bias(m, bias));
        CHECK_OK(bfp8_moe_forward(m, lp.a[0], T, yf));
        CHECK_OK(bfp8_moe_last_routing(m, routed, NULL));
        CHECK(routed[c.num_experts - 1] == T, "%s: with the set bias the last expert has %lld of %lld tokens", what,
              (long long)routed[c.num_experts - 1], (long long)T);
    }
    CHECK_OK(bfp8_moe_update_bias(m, NULL, NULL));
    CHECK_OK(bfp8_moe_update_bias(m, load, NULL));
    int64_t left = 0;
    for (int e = 0; e < c.num_experts; ++e) left += load[e];
    CHECK(left == 0, "%s: the load does not restart from 0 after an update (%lld)", what, (long long)left);
    bfp8_moe_destroy(m);
    run_free(&lp), run_free(&lg), run_free(&lg2);
    ref_params_free(&p), ref_params_free(&g), free(dy), free(y), free(dyf), free(yf), free(yf2);
}

static void test_bad_arguments(void) {
    bfp8_moe_config c = {256, 128, 0, 8, 2, 64, BFP8_MOE_SCORE_SOFTMAX, 0, 1.0f, 0, 0, 0, 0, BFP8_RECIPE_BF16, 0, NULL};
    bfp8_moe *m = NULL;
    bfp8_moe_config bad = c;
    bad.hidden = 200;
    CHECK_STATUS(bfp8_moe_create(&m, ctx, &bad), BFP8_ERR_INVALID_VALUE);
    bad = c, bad.top_k = 9;
    CHECK_STATUS(bfp8_moe_create(&m, ctx, &bad), BFP8_ERR_INVALID_VALUE);
    bad = c, bad.route_scale = 0.0f;
    CHECK_STATUS(bfp8_moe_create(&m, ctx, &bad), BFP8_ERR_INVALID_VALUE);
    CHECK_OK(bfp8_moe_create(&m, ctx, &c));
    float x[256 * 65] = {0}, y[256 * 65];
    CHECK_STATUS(bfp8_moe_forward(m, x, 10, y), BFP8_ERR_INVALID_VALUE); /* no weights yet */
    CHECK_STATUS(bfp8_moe_backward(m, y, x, NULL, 0), BFP8_ERR_INVALID_VALUE); /* no forward */
    CHECK_STATUS(bfp8_moe_last_routing(m, NULL, NULL), BFP8_ERR_INVALID_VALUE);  /* no forward */
    float bias[8] = {0};
    CHECK_STATUS(bfp8_moe_set_bias(m, NULL), BFP8_ERR_NULL_POINTER);
    bias[3] = NAN;
    CHECK_STATUS(bfp8_moe_set_bias(m, bias), BFP8_ERR_INVALID_VALUE);
    bfp8_moe_destroy(m);
}

int main(void) {
    CHECK_OK(bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0));
    const bfp8_moe_config base = {256, 128, 128, 8, 2, 256, BFP8_MOE_SCORE_SOFTMAX, 0, 1.0f, 0.0f,
                                  BFP8_MOE_BALANCE_NONE, 0.0f, 0.0f, BFP8_RECIPE_BF16, 0, NULL};
    bfp8_moe_config sig = base, cap = base, adv = base;
    sig.shared_hidden = 0, sig.top_k = 3, sig.score_fn = BFP8_MOE_SCORE_SIGMOID, sig.normalize_weights = 1;
    sig.route_scale = 2.5f, sig.balance = BFP8_MOE_BALANCE_BIAS, sig.bias_update_rate = 0.5f;
    cap.capacity_factor = 0.6f, cap.balance = BFP8_MOE_BALANCE_AUX_LOSS, cap.aux_loss_coef = 0.05f;
    cap.normalize_weights = 1;
    struct { const char *name; const bfp8_moe_config *c; int64_t T; int adversarial; } cases[] = {
        {"softmax k=2 +shared", &base, 200, 0},
        {"sigmoid k=3 normalized, bias", &sig, 129, 0},
        {"capacity 0.6, aux loss", &cap, 250, 0},
        {"all tokens to expert 0", &adv, 256, 1},
    };
    const size_t n = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; ++i) check_reference_gradients(cases[i].name, cases[i].c, 40, cases[i].adversarial);
    const bfp8_recipe recipes[3] = {BFP8_RECIPE_BF16, BFP8_RECIPE_FP8_BLOCKWISE, BFP8_RECIPE_FP8_BLOCKWISE_BF16WGRAD};
    const double min_db[3] = {34.0, 22.0, 22.0};
    for (size_t i = 0; i < n; ++i)
        for (int r = 0; r < 3; ++r)
            check_layer(cases[i].name, *cases[i].c, cases[i].T, cases[i].adversarial, recipes[r], min_db[r]);
    test_bad_arguments();
    bfp8_context_destroy(ctx);
    return test_exit_code("test_moe_layer");
}
