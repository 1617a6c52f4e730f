/*
 * dataset.h - the token stream of a text corpus, split into training and
 * validation, and a deterministic batch sampler.
 *
 * The stream is cut into equal blocks; every 10th block is validation, so
 * both splits see every part of the corpus (the corpus is a concatenation
 * of unlike sources). Training windows are drawn at random offsets inside
 * training blocks by a generator whose state, with the count of windows
 * drawn, is all a checkpoint needs to resume the same sequence of batches.
 * Validation windows are fixed: consecutive, non-overlapping.
 */
#ifndef BFP8_TRAIN_DATASET_H
#define BFP8_TRAIN_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"
#include "model/rng.h"
#include "train/tokenizer.h"

enum { DATASET_VALIDATION_EVERY = 10 };

/* A corpus with more than this share of bytes that are not text (see
 * text_non_text_fraction) is refused; above DATASET_WARN_NON_TEXT it is
 * trained on with a warning. */
#define DATASET_MAX_NON_TEXT 0.10
#define DATASET_WARN_NON_TEXT 0.01

typedef struct token_dataset {
    int32_t *tokens;
    size_t num_tokens;
    int64_t seq;          /* window length (inputs); a window reads seq + 1 tokens */
    size_t block_tokens;
    size_t *train_blocks, num_train_blocks; /* block starts */
    size_t *val_windows, num_val_windows;   /* window starts */
    size_t text_bytes;
    double non_text_fraction; /* of the text's bytes (text_non_text_fraction) */
} token_dataset;

typedef struct batch_sampler {
    rng_state rng;
    uint64_t windows_drawn;
} batch_sampler;

/* The share of bytes of text[0, n) that are not text: control bytes other
 * than tab, newline, vertical tab, form feed and carriage return, DEL, and
 * bytes that are not part of a well-formed UTF-8 sequence. */
double text_non_text_fraction(const uint8_t *text, size_t n);

/* BFP8_ERR_INVALID_VALUE, naming path, when more than DATASET_MAX_NON_TEXT
 * of text[0, n) is not text; *fraction (may be NULL) gets the share. */
bfp8_status dataset_check_text(const char *path, const uint8_t *text, size_t n, double *fraction);

/* Read a text file, check that it is text, encode it, split it. Errors:
 * missing, empty, not text or too small. */
bfp8_status dataset_load(token_dataset *d, const char *path, const bpe_tokenizer *tok, int64_t seq);
/* Take ownership of tokens (malloc'ed) and split them. */
bfp8_status dataset_from_tokens(token_dataset *d, int32_t *tokens, size_t count, int64_t seq);
void dataset_free(token_dataset *d);

batch_sampler batch_sampler_start(uint64_t seed);
/* inputs, targets: batch x seq. */
void dataset_next_batch(const token_dataset *d, batch_sampler *s, int64_t batch, int32_t *inputs,
                        int32_t *targets);
/* Draw a batch of `batch` windows like dataset_next_batch, but keep only
 * windows [first, first + count) (inputs, targets: count x seq): a rank's
 * share of a data-parallel batch, the sampler advancing as for the whole. */
void dataset_next_batch_part(const token_dataset *d, batch_sampler *s, int64_t batch, int64_t first,
                             int64_t count, int32_t *inputs, int32_t *targets);
/* Validation window w (< num_val_windows). */
void dataset_val_window(const token_dataset *d, size_t w, int32_t *inputs, int32_t *targets);

#endif /* BFP8_TRAIN_DATASET_H */
