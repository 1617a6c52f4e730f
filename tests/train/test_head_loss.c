/*
 * test_head_loss.c - the output head and loss layer (head_loss.h) on the
 * CPU, where both of its forms run on the CPU references:
 *   - the bf16 form in ragged chunks (100 + 100 + 57 tokens) gives the same
 *     bits as in one chunk: loss, row losses, dlogits, dx and d_head;
 *   - the bf16 form against the fp32 form (the cost of rounding x and the
 *     head to bf16): loss within 1e-3 relative, dx and d_head at least 30 dB
 *     SQNR (measured about 50);
 *   - after a forward without targets the bf16 form holds the logits of the
 *     last chunk only (the last row equal to the chunked forward's, an
 *     earlier row refused), the fp32 form all of them; a backward after it
 *     gives the dx of one after a forward with targets, bit for bit;
 *   - a CPU model with MODEL_HEAD_BF16 against the default (fp32) one: loss
 *     within 1e-3 relative, every gradient tensor at least 30 dB.
 * The same layer on the GPU against these references: test_head_loss_gpu.
 *
 *   ctest --test-dir build -R train_head_loss
 */
#include <math.h>
#include <string.h>

#include "model/head_loss.h"
#include "model/model.h"
#include "test_util.h"

enum { D = 48, V = 1001, M = 257 };

typedef struct run_out {
    double loss;
    float row_losses[M], dx[M * D], dweight[V * D];
    uint16_t dlogits[M * V];
} run_out;

static float weight[V * D], x[M * D], dweight0[V * D];
static int32_t targets[M];

static double sqnr_db(const float *ref, const float *y, const float *base, size_t n) {
    double s = 0.0, e = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double r = (double)ref[i] - (base ? base[i] : 0.0f), d = (double)ref[i] - y[i];
        s += r * r;
        e += d * d;
    }
    return e == 0.0 ? INFINITY : 10.0 * log10(s / e);
}

/* A layer in host memory (the CPU backend's memory is the host's). */
static head_loss make(int bf16, int64_t chunk, void **buffer) {
    head_loss h;
    head_loss_init(&h, D, V, M, bf16, chunk);
    *buffer = test_malloc(head_loss_buffer_bytes(&h) + 64);
    head_loss_carve(&h, (void *)(((uintptr_t)*buffer + 63) / 64 * 64));
    head_loss_sync_weight(&h, &model_ops_cpu, NULL, weight);
    return h;
}

static void run(head_loss *h, run_out *o) {
    memcpy(o->dweight, dweight0, sizeof dweight0);
    head_loss_forward(h, &model_ops_cpu, NULL, weight, x, targets, M, &o->loss);
    memcpy(o->row_losses, h->row_losses, sizeof o->row_losses);
    if (h->bf16) memcpy(o->dlogits, h->dlogits_bf16, sizeof o->dlogits);
    CHECK_OK(head_loss_backward(h, &model_ops_cpu, NULL, o->dx, o->dweight, weight, x, targets, 0.5f));
}

static void test_layer(bfp8_context *ctx) {
    static run_out chunked, whole, f32;
    void *b_chunked, *b_whole, *b_f32;
    head_loss hc = make(1, 100, &b_chunked), hw = make(1, 0, &b_whole), hf = make(0, 0, &b_f32);
    CHECK(hc.chunk_tokens == 100 && hw.chunk_tokens == M && hf.chunk_tokens == M, "chunks %lld, %lld, %lld",
          (long long)hc.chunk_tokens, (long long)hw.chunk_tokens, (long long)hf.chunk_tokens);
    run(&hc, &chunked);
    run(&hw, &whole);
    run(&hf, &f32);
    CHECK(chunked.loss == whole.loss && memcmp(chunked.row_losses, whole.row_losses, sizeof whole.row_losses) == 0 &&
              memcmp(chunked.dlogits, whole.dlogits, sizeof whole.dlogits) == 0 &&
              memcmp(chunked.dx, whole.dx, sizeof whole.dx) == 0 &&
              memcmp(chunked.dweight, whole.dweight, sizeof whole.dweight) == 0,
          "the bf16 form in chunks differs from one chunk");
    const double loss_rel = fabs(chunked.loss - f32.loss) / f32.loss;
    const double dx_db = sqnr_db(f32.dx, chunked.dx, NULL, M * D);
    const double dw_db = sqnr_db(f32.dweight, chunked.dweight, dweight0, (size_t)V * D);
    CHECK(loss_rel <= 1e-3 && dx_db >= 30.0 && dw_db >= 30.0,
          "bf16 against fp32: loss %.7f vs %.7f (rel %.1e), dx %.1f dB, d_head %.1f dB", chunked.loss, f32.loss,
          loss_rel, dx_db, dw_db);
    printf("bf16 against fp32 products: loss %.7f vs %.7f (rel %.1e), dx %.1f dB, d_head %.1f dB\n", chunked.loss,
           f32.loss, loss_rel, dx_db, dw_db);

    /* generation */
    float row[V], row_whole[V], *dx = test_malloc(sizeof chunked.dx);
    head_loss_forward(&hw, &model_ops_cpu, NULL, weight, x, targets, M, NULL);
    CHECK_OK(head_loss_logits_row(&hw, ctx, M - 1, row_whole));
    head_loss_forward(&hc, &model_ops_cpu, NULL, weight, x, NULL, M, NULL);
    CHECK(hc.logits_first_row == M - 100, "logits held from row %lld", (long long)hc.logits_first_row);
    CHECK_OK(head_loss_logits_row(&hc, ctx, M - 1, row));
    CHECK(memcmp(row, row_whole, sizeof row) == 0, "the last row's logits differ without targets");
    CHECK_STATUS(head_loss_logits_row(&hc, ctx, M - 101, row), BFP8_ERR_INVALID_VALUE);
    CHECK_OK(head_loss_backward(&hc, &model_ops_cpu, NULL, dx, chunked.dweight, weight, x, targets, 0.5f));
    CHECK(memcmp(dx, chunked.dx, sizeof chunked.dx) == 0, "a backward after a forward without targets differs");
    head_loss_forward(&hf, &model_ops_cpu, NULL, weight, x, NULL, M, NULL);
    CHECK_OK(head_loss_logits_row(&hf, ctx, 0, row));
    free(dx), free(b_chunked), free(b_whole), free(b_f32);
}

static void test_model(bfp8_context *ctx) {
    static const model_config config = {.vocab_size = 300, .dim = 64, .n_layers = 1, .n_heads = 2, .ffn_hidden = 96,
                                        .max_seq = 16, .norm_eps = 1e-5f, .rope_theta = 10000.0f};
    enum { B = 2, T = 16 };
    model_options opts = {.recipe = BFP8_RECIPE_BF16, .max_batch = B, .max_seq = T, .exact_linears = 1};
    model *f32 = NULL, *bf16 = NULL;
    CHECK_OK(model_create(&f32, ctx, &config, &opts));
    opts.head_products = MODEL_HEAD_BF16;
    CHECK_OK(model_create(&bf16, ctx, &config, &opts));
    opts.head_products = (model_head_products)7;
    model *bad = NULL;
    CHECK_STATUS(model_create(&bad, ctx, &config, &opts), BFP8_ERR_INVALID_VALUE);
    if (!f32 || !bf16) return;
    CHECK(!f32->head_layer.bf16 && bf16->head_layer.bf16, "head forms: default %d, asked bf16 %d",
          f32->head_layer.bf16, bf16->head_layer.bf16);
    CHECK_OK(model_init_weights(f32, 5));
    CHECK_OK(model_init_weights(bf16, 5));
    int32_t tokens[B * T], next[B * T];
    for (int i = 0; i < B * T; ++i) {
        tokens[i] = (int32_t)((i * 37 + 3) % config.vocab_size);
        next[i] = (int32_t)((i * 91 + 7) % config.vocab_size);
    }
    double loss_f32 = 0.0, loss_bf16 = 0.0;
    CHECK_OK(model_forward(f32, tokens, next, B, T, &loss_f32));
    CHECK_OK(model_forward(bf16, tokens, next, B, T, &loss_bf16));
    CHECK_OK(model_backward(f32, tokens, next, 1.0f, 0));
    CHECK_OK(model_backward(bf16, tokens, next, 1.0f, 0));
    const double loss_rel = fabs(loss_bf16 - loss_f32) / loss_f32;
    double worst = INFINITY;
    const char *worst_name = "";
    for (int i = 0; i < f32->num_tensors; ++i) {
        const model_tensor *t = &f32->tensors[i];
        const double db = sqnr_db(f32->grads + t->offset, bf16->grads + t->offset, NULL, t->count);
        if (db < worst) worst = db, worst_name = t->name;
    }
    CHECK(loss_rel <= 1e-3 && worst >= 30.0, "model with the bf16 head: loss %.7f vs %.7f (rel %.1e), worst "
          "gradient %s %.1f dB", loss_bf16, loss_f32, loss_rel, worst_name, worst);
    printf("model, bf16 head against fp32: loss rel %.1e, worst gradient %s %.1f dB\n", loss_rel, worst_name, worst);
    model_destroy(f32);
    model_destroy(bf16);
}

int main(void) {
    test_rng rng;
    test_rng_seed(&rng, 11);
    for (int i = 0; i < V * D; ++i) weight[i] = 0.4f * (float)test_rng_normal(&rng);
    for (int i = 0; i < V * D; ++i) dweight0[i] = 1e-3f * (float)test_rng_normal(&rng);
    for (int i = 0; i < M * D; ++i) x[i] = (float)test_rng_normal(&rng);
    for (int i = 0; i < M; ++i) targets[i] = (int32_t)test_rng_range(&rng, 0, V - 1);
    bfp8_context *ctx = NULL;
    CHECK_OK(bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0));
    if (!ctx) return test_exit_code("train_head_loss");
    test_layer(ctx);
    test_model(ctx);
    bfp8_context_destroy(ctx);
    return test_exit_code("train_head_loss");
}
