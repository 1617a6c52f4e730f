/*
 * test_dataset.c - the data loader: the train/validation split (disjoint,
 * every window inside its own split, validation fixed and non-overlapping),
 * targets = inputs shifted by one, a sampler that repeats exactly from the
 * same seed and from a saved state (what resume relies on), and the errors
 * for missing, empty and too-small data.
 *
 * The tokens are their own positions (token i = i), so a window tells where
 * it was cut from.
 *
 *   ctest --test-dir build -R train_dataset
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "train/dataset.h"

static int is_val_position(const token_dataset *d, size_t pos) {
    for (size_t w = 0; w < d->num_val_windows; ++w)
        if (pos >= d->val_windows[w] && pos <= d->val_windows[w] + (size_t)d->seq) return 1;
    return 0;
}

int main(void) {
    enum { COUNT = 20000, SEQ = 16, BATCH = 8 };
    int32_t *tokens = test_malloc(COUNT * sizeof *tokens);
    for (int i = 0; i < COUNT; ++i) tokens[i] = i;
    token_dataset d;
    CHECK_OK(dataset_from_tokens(&d, tokens, COUNT, SEQ));
    printf("  %zu tokens, blocks of %zu: %zu train blocks, %zu validation windows\n", d.num_tokens,
           d.block_tokens, d.num_train_blocks, d.num_val_windows);
    CHECK(d.num_train_blocks > 0 && d.num_val_windows > 0, "both splits must be non-empty");
    const size_t blocks = d.num_tokens / d.block_tokens;
    const size_t val_every = blocks < DATASET_VALIDATION_EVERY ? blocks : DATASET_VALIDATION_EVERY;
    CHECK(d.num_train_blocks == blocks - blocks / val_every,
          "every 10th block validates: %zu blocks, %zu train", blocks, d.num_train_blocks);

    /* Validation windows: in order, non-overlapping, each inside one block
     * that is not a training block. */
    int32_t in[BATCH * SEQ], tg[BATCH * SEQ], in2[BATCH * SEQ], tg2[BATCH * SEQ];
    for (size_t w = 0; w < d.num_val_windows; ++w) {
        const size_t start = d.val_windows[w], block = start / d.block_tokens;
        int ok = (start + SEQ) / d.block_tokens == block;
        for (size_t b = 0; ok && b < d.num_train_blocks; ++b) ok = d.train_blocks[b] != block * d.block_tokens;
        if (w > 0) ok = ok && start >= d.val_windows[w - 1] + SEQ;
        dataset_val_window(&d, w, in, tg);
        for (int t = 0; ok && t < SEQ; ++t) ok = in[t] == (int32_t)start + t && tg[t] == in[t] + 1;
        if (!ok) {
            CHECK(0, "validation window %zu (start %zu) is misplaced or wrong", w, start);
            break;
        }
    }

    /* Training batches: contiguous windows, targets shifted, never touching
     * a validation token; the same seed gives the same batches. */
    batch_sampler s1 = batch_sampler_start(5), s2 = batch_sampler_start(5), s3 = batch_sampler_start(6);
    int same_as_other_seed = 1;
    size_t min_pos = SIZE_MAX, max_pos = 0;
    for (int step = 0; step < 200; ++step) {
        dataset_next_batch(&d, &s1, BATCH, in, tg);
        dataset_next_batch(&d, &s2, BATCH, in2, tg2);
        if (memcmp(in, in2, sizeof in) != 0 || memcmp(tg, tg2, sizeof tg) != 0) {
            CHECK(0, "step %d: the same seed gave different batches", step);
            break;
        }
        dataset_next_batch(&d, &s3, BATCH, in2, tg2);
        same_as_other_seed &= memcmp(in, in2, sizeof in) == 0;
        for (int b = 0; b < BATCH; ++b) {
            const int32_t *x = in + b * SEQ, *y = tg + b * SEQ;
            int ok = !is_val_position(&d, (size_t)x[0]) && !is_val_position(&d, (size_t)y[SEQ - 1]);
            for (int t = 0; ok && t < SEQ; ++t) ok = x[t] == x[0] + t && y[t] == x[t] + 1;
            if (!ok) {
                CHECK(0, "step %d row %d: window at %d is not a clean training window", step, b, x[0]);
                step = 200;
                break;
            }
            min_pos = (size_t)x[0] < min_pos ? (size_t)x[0] : min_pos;
            max_pos = (size_t)x[0] > max_pos ? (size_t)x[0] : max_pos;
        }
    }
    CHECK(!same_as_other_seed, "another seed must give other batches");
    CHECK(s1.windows_drawn == 200 * BATCH, "windows drawn %llu", (unsigned long long)s1.windows_drawn);
    CHECK(min_pos < d.block_tokens && max_pos > d.num_tokens / 2, "windows cover the corpus (%zu .. %zu)",
          min_pos, max_pos);

    /* Resume: a sampler rebuilt from a saved state continues the same stream. */
    batch_sampler saved = {.rng = {s1.rng.state}, .windows_drawn = s1.windows_drawn};
    dataset_next_batch(&d, &s1, BATCH, in, tg);
    dataset_next_batch(&d, &saved, BATCH, in2, tg2);
    CHECK(memcmp(in, in2, sizeof in) == 0 && saved.windows_drawn == s1.windows_drawn,
          "a sampler restored from its state must continue identically");

    /* Data parallelism: the ranks' parts of a batch, each drawn by its own
     * copy of the sampler, are the whole batch in rank order, and every copy
     * ends where the whole draw ends. */
    {
        enum { kRanks = 2, kPart = BATCH / kRanks };
        batch_sampler whole = saved, part[kRanks];
        dataset_next_batch(&d, &whole, BATCH, in, tg);
        for (int r = 0; r < kRanks; ++r) {
            part[r] = saved;
            dataset_next_batch_part(&d, &part[r], BATCH, r * kPart, kPart, in2 + r * kPart * SEQ,
                                    tg2 + r * kPart * SEQ);
            CHECK(part[r].rng.state == whole.rng.state && part[r].windows_drawn == whole.windows_drawn,
                  "rank %d's sampler must advance as the whole batch's", r);
        }
        CHECK(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0,
              "the ranks' parts must be the whole batch in rank order");
    }
    dataset_free(&d);

    /* Too few tokens for both splits. */
    int32_t *few = test_malloc(3 * SEQ * sizeof *few);
    for (int i = 0; i < 3 * SEQ; ++i) few[i] = i;
    CHECK_STATUS(dataset_from_tokens(&d, few, 3 * SEQ, SEQ), BFP8_ERR_INVALID_VALUE);

    /* Files: missing, empty. */
    bpe_tokenizer tok;
    CHECK_OK(bpe_train(&tok, (const uint8_t *)"bytes only", 10, 256));
    CHECK(dataset_load(&d, "train_dataset_no_such_file.txt", &tok, SEQ) != BFP8_OK,
          "a missing file must fail");
    CHECK(strstr(bfp8_last_error(), "train_dataset_no_such_file.txt") != NULL, "message: %s",
          bfp8_last_error());
    FILE *fp = fopen("train_dataset_empty.txt", "wb");
    fclose(fp);
    CHECK_STATUS(dataset_load(&d, "train_dataset_empty.txt", &tok, SEQ), BFP8_ERR_INVALID_VALUE);
    CHECK(strstr(bfp8_last_error(), "empty") != NULL, "message: %s", bfp8_last_error());
    remove("train_dataset_empty.txt");
    bpe_free(&tok);
    return test_exit_code("train_dataset");
}
