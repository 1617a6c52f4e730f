/*
 * tokenizer.h - a byte-level BPE tokenizer: 256 byte tokens plus learned
 * merges, trained on a corpus, saved to and loaded from a small binary file.
 *
 * Text is first cut into chunks (a word with its leading space, a number,
 * a run of punctuation, a run of whitespace; at most BPE_MAX_CHUNK bytes),
 * and merges never cross a chunk boundary. Any byte string encodes, and
 * decoding gives back exactly the same bytes (invalid UTF-8 included).
 *
 * File: "BFP8BPE" NUL, u32 version, u32 vocab_size, u32 max_chunk, then
 * vocab_size - 256 merges as (u32 left, u32 right), then a u32 CRC-32 of
 * everything before it. Little-endian.
 */
#ifndef BFP8_TRAIN_TOKENIZER_H
#define BFP8_TRAIN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"

#define BPE_MAX_CHUNK 64
#define BPE_MAX_VOCAB 65536

typedef struct bpe_tokenizer {
    int32_t vocab_size;
    int32_t (*merges)[2];     /* merge i turns (left, right) into token 256 + i */
    uint32_t *token_start;    /* vocab_size + 1 offsets into token_bytes */
    uint8_t *token_bytes;
    uint64_t *pair_keys;      /* open-addressing table: pair -> merge rank */
    int32_t *pair_ranks;
    size_t pair_slots;        /* a power of two */
    uint32_t fingerprint;     /* CRC-32 of the saved form: checkpoints record it */
} bpe_tokenizer;

/* Learn vocab_size - 256 merges from text. Fails when the text is too small
 * to yield that many merges. */
bfp8_status bpe_train(bpe_tokenizer *tok, const uint8_t *text, size_t n, int32_t vocab_size);

bfp8_status bpe_save(const bpe_tokenizer *tok, const char *path);
bfp8_status bpe_load(bpe_tokenizer *tok, const char *path);
void bpe_free(bpe_tokenizer *tok);

/* Encode n bytes into out (capacity >= n tokens: never more tokens than bytes). */
void bpe_encode(const bpe_tokenizer *tok, const uint8_t *text, size_t n, int32_t *out,
                size_t *count);

/* Bytes of one token. */
const uint8_t *bpe_token_bytes(const bpe_tokenizer *tok, int32_t id, size_t *len);

/* Decode into out (capacity bytes); returns the number of bytes the whole
 * decoding needs (write at most capacity). */
size_t bpe_decode(const bpe_tokenizer *tok, const int32_t *tokens, size_t count, uint8_t *out,
                  size_t capacity);

/* End of the chunk that starts at pos (pos < n): the pre-tokenizer. */
size_t bpe_chunk_end(const uint8_t *text, size_t n, size_t pos);

#endif /* BFP8_TRAIN_TOKENIZER_H */
