/*
 * test_optimizer.c - AdamW with decoupled weight decay against a
 * double-precision evaluation of its formula over several steps (with and
 * without decay, with a clipping scale), the global gradient norm, and the
 * warmup + cosine learning-rate schedule (its ends, its peak, monotone).
 *
 *   ctest --test-dir build -R train_optimizer
 */
#include <math.h>
#include <string.h>

#include "model/adamw.h"
#include "test_util.h"
#include "train/lr_schedule.h"

int main(void) {
    enum { N = 5000, STEPS = 5 };
    float *p = test_malloc(N * sizeof *p), *g = test_malloc(N * sizeof *g);
    float *m = test_malloc(N * sizeof *m), *v = test_malloc(N * sizeof *v);
    double *rp = test_malloc(N * sizeof *rp), *rm = test_malloc(N * sizeof *rm), *rv = test_malloc(N * sizeof *rv);
    test_rng rng;
    test_rng_seed(&rng, 3);
    const adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (int decay = 0; decay <= 1; ++decay) {
        for (int i = 0; i < N; ++i) {
            p[i] = (float)test_rng_normal(&rng);
            rp[i] = p[i];
        }
        memset(m, 0, N * sizeof *m), memset(v, 0, N * sizeof *v);
        memset(rm, 0, N * sizeof *rm), memset(rv, 0, N * sizeof *rv);
        double worst = 0.0;
        for (int step = 1; step <= STEPS; ++step) {
            const float scale = step == 2 ? 0.25f : 1.0f; /* step 2: clipped */
            for (int i = 0; i < N; ++i) g[i] = (float)test_rng_normal(&rng) * (i % 7 == 0 ? 10.0f : 0.1f);
            adamw_update(NULL, p, g, m, v, N, &h, scale, step, decay);
            const double c1 = 1.0 - pow(0.9, step), c2 = 1.0 - pow(0.95, step);
            for (int i = 0; i < N; ++i) {
                const double gi = (double)g[i] * scale;
                rm[i] = 0.9 * rm[i] + 0.1 * gi;
                rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
                rp[i] -= 1e-2 * (rm[i] / c1 / (sqrt(rv[i] / c2) + 1e-8) + (decay ? 0.1 * rp[i] : 0.0));
                worst = fmax(worst, fabs(p[i] - rp[i]));
            }
        }
        printf("  adamw (decay %d): worst |p - ref| after %d steps %.2e\n", decay, STEPS, worst);
        CHECK(worst < 1e-5, "adamw (decay %d) differs from the formula by %g", decay, worst);
    }
    /* Decoupled decay: a zero gradient still shrinks decayed weights by lr * wd. */
    p[0] = 2.0f, g[0] = 0.0f, m[0] = v[0] = 0.0f;
    adamw_update(NULL, p, g, m, v, 1, &h, 1.0f, 1, 1);
    CHECK(fabsf(p[0] - 2.0f * (1.0f - 1e-3f)) < 1e-6f, "decoupled decay: %g", p[0]);
    p[0] = 2.0f, m[0] = v[0] = 0.0f;
    adamw_update(NULL, p, g, m, v, 1, &h, 1.0f, 1, 0);
    CHECK(p[0] == 2.0f, "no decay on a no-decay tensor: %g", p[0]);

    double ref = 0.0;
    for (int i = 0; i < N; ++i) ref += (double)g[i] * g[i];
    CHECK(fabs(gradient_global_norm(NULL, g, N) - sqrt(ref)) < 1e-9 * sqrt(ref), "gradient norm %g vs %g",
          gradient_global_norm(NULL, g, N), sqrt(ref));
    CHECK(gradient_global_norm(NULL, g, 0) == 0.0, "norm of nothing");

    /* Schedule: linear warmup to the peak, cosine down to min_lr at the end. */
    const int64_t warmup = 10, total = 100;
    const float lr = 1e-3f, min_lr = 1e-4f;
    CHECK(fabsf(lr_at_step(1, warmup, total, lr, min_lr) - lr / 10) < 1e-9f, "first warmup step");
    CHECK(fabsf(lr_at_step(5, warmup, total, lr, min_lr) - lr / 2) < 1e-9f, "mid warmup");
    CHECK(lr_at_step(warmup, warmup, total, lr, min_lr) == lr, "peak at the end of warmup");
    CHECK(fabsf(lr_at_step(55, warmup, total, lr, min_lr) - 0.5f * (lr + min_lr)) < 1e-8f,
          "half-way down the cosine: %g", lr_at_step(55, warmup, total, lr, min_lr));
    CHECK(lr_at_step(total, warmup, total, lr, min_lr) == min_lr, "min_lr at the last step");
    int monotone = 1;
    for (int64_t s = warmup + 1; s <= total; ++s)
        monotone &= lr_at_step(s, warmup, total, lr, min_lr) <= lr_at_step(s - 1, warmup, total, lr, min_lr);
    CHECK(monotone, "the cosine must not rise");
    CHECK(lr_at_step(1, 0, 1, lr, min_lr) == min_lr, "a one-step run without warmup ends at min_lr");
    CHECK(lr_at_step(1, 0, 1000, lr, min_lr) > 0.999f * lr, "no warmup: the first step near the peak");

    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
    return test_exit_code("train_optimizer");
}
