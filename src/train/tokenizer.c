/*
 * tokenizer.c - byte-level BPE: the pre-tokenizer, training by incremental
 * pair counts over the corpus's distinct chunks, encoding by lowest-rank
 * merge first, and the tokenizer file.
 */
#include "train/tokenizer.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "train/checksum.h"
#include "train/file_io.h"

static const char tokenizer_magic[8] = {'B', 'F', 'P', '8', 'B', 'P', 'E', 0};
enum { TOKENIZER_VERSION = 1, TOKENIZER_HEADER_BYTES = 20 };

/* ------------------------------------------------------------------------ */
/* Pre-tokenizer */

enum { CLASS_LETTER, CLASS_DIGIT, CLASS_SPACE, CLASS_PUNCT };

static int byte_class(uint8_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CLASS_LETTER;
    if (c >= '0' && c <= '9') return CLASS_DIGIT;
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f') return CLASS_SPACE;
    return CLASS_PUNCT;
}

static size_t run_end(const uint8_t *text, size_t n, size_t pos, int cls) {
    while (pos < n && byte_class(text[pos]) == cls) ++pos;
    return pos;
}

size_t bpe_chunk_end(const uint8_t *text, size_t n, size_t pos) {
    size_t end;
    const int cls = byte_class(text[pos]);
    if (text[pos] == ' ' && pos + 1 < n && byte_class(text[pos + 1]) != CLASS_SPACE) {
        end = run_end(text, n, pos + 1, byte_class(text[pos + 1])); /* " word", " 42", " --" */
    } else if (cls == CLASS_SPACE) {
        end = run_end(text, n, pos, CLASS_SPACE);
        /* leave a final space to the word after the run */
        if (end < n && end - pos > 1 && text[end - 1] == ' ') --end;
    } else {
        end = run_end(text, n, pos, cls);
    }
    return end - pos > BPE_MAX_CHUNK ? pos + BPE_MAX_CHUNK : end;
}

/* ------------------------------------------------------------------------ */
/* Hash tables (open addressing, linear probing, power-of-two sizes) */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint64_t pair_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1; /* 0 marks an empty slot */
}

static int32_t lookup_rank(const bpe_tokenizer *tok, int32_t left, int32_t right) {
    if (!tok->pair_slots) return -1;
    const uint64_t key = pair_key(left, right);
    for (size_t i = mix64(key) & (tok->pair_slots - 1);; i = (i + 1) & (tok->pair_slots - 1)) {
        if (tok->pair_keys[i] == key) return tok->pair_ranks[i];
        if (tok->pair_keys[i] == 0) return -1;
    }
}

/* Token bytes and the merge lookup table, from the merges. */
static bfp8_status build_tables(bpe_tokenizer *tok) {
    const int32_t V = tok->vocab_size, merges = V - 256;
    tok->token_start = malloc(((size_t)V + 1) * sizeof *tok->token_start);
    uint32_t total = 256;
    uint32_t *length = malloc((size_t)V * sizeof *length);
    if (!tok->token_start || !length) {
        free(length);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    for (int32_t i = 0; i < 256; ++i) length[i] = 1;
    for (int32_t i = 0; i < merges; ++i) {
        length[256 + i] = length[tok->merges[i][0]] + length[tok->merges[i][1]];
        total += length[256 + i];
    }
    tok->token_bytes = malloc(total);
    tok->pair_slots = 1;
    while (tok->pair_slots < 2 * (size_t)(merges + 1)) tok->pair_slots *= 2;
    tok->pair_keys = calloc(tok->pair_slots, sizeof *tok->pair_keys);
    tok->pair_ranks = malloc(tok->pair_slots * sizeof *tok->pair_ranks);
    if (!tok->token_bytes || !tok->pair_keys || !tok->pair_ranks) {
        free(length);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    uint32_t offset = 0;
    for (int32_t i = 0; i < V; ++i) {
        tok->token_start[i] = offset;
        if (i < 256) {
            tok->token_bytes[offset] = (uint8_t)i;
        } else {
            const int32_t a = tok->merges[i - 256][0], b = tok->merges[i - 256][1];
            memcpy(tok->token_bytes + offset, tok->token_bytes + tok->token_start[a], length[a]);
            memcpy(tok->token_bytes + offset + length[a], tok->token_bytes + tok->token_start[b], length[b]);
        }
        offset += length[i];
    }
    tok->token_start[V] = offset;
    free(length);
    for (int32_t r = 0; r < merges; ++r) {
        const uint64_t key = pair_key(tok->merges[r][0], tok->merges[r][1]);
        size_t i = mix64(key) & (tok->pair_slots - 1);
        while (tok->pair_keys[i] != 0 && tok->pair_keys[i] != key) i = (i + 1) & (tok->pair_slots - 1);
        if (tok->pair_keys[i] == key) continue; /* a duplicate merge never wins: keep the first */
        tok->pair_keys[i] = key;
        tok->pair_ranks[i] = r;
    }
    return BFP8_OK;
}

void bpe_free(bpe_tokenizer *tok) {
    if (!tok) return;
    free(tok->merges);
    free(tok->token_start);
    free(tok->token_bytes);
    free(tok->pair_keys);
    free(tok->pair_ranks);
    memset(tok, 0, sizeof *tok);
}

/* ------------------------------------------------------------------------ */
/* Encoding and decoding */

/* Merge every (left, right) in sym[0..len) into id, left to right; new length. */
static size_t merge_pair(int32_t *sym, size_t len, int32_t left, int32_t right, int32_t id) {
    size_t out = 0;
    for (size_t i = 0; i < len; ++i) {
        if (i + 1 < len && sym[i] == left && sym[i + 1] == right) {
            sym[out++] = id;
            ++i;
        } else {
            sym[out++] = sym[i];
        }
    }
    return out;
}

void bpe_encode(const bpe_tokenizer *tok, const uint8_t *text, size_t n, int32_t *out,
                size_t *count) {
    size_t written = 0;
    for (size_t pos = 0; pos < n;) {
        const size_t end = bpe_chunk_end(text, n, pos);
        int32_t *sym = out + written;
        size_t len = end - pos;
        for (size_t i = 0; i < len; ++i) sym[i] = text[pos + i];
        while (len > 1) {
            int32_t best = INT32_MAX;
            for (size_t i = 0; i + 1 < len; ++i) {
                const int32_t r = lookup_rank(tok, sym[i], sym[i + 1]);
                if (r >= 0 && r < best) best = r;
            }
            if (best == INT32_MAX) break;
            len = merge_pair(sym, len, tok->merges[best][0], tok->merges[best][1], 256 + best);
        }
        written += len;
        pos = end;
    }
    *count = written;
}

const uint8_t *bpe_token_bytes(const bpe_tokenizer *tok, int32_t id, size_t *len) {
    *len = tok->token_start[id + 1] - tok->token_start[id];
    return tok->token_bytes + tok->token_start[id];
}

size_t bpe_decode(const bpe_tokenizer *tok, const int32_t *tokens, size_t count, uint8_t *out,
                  size_t capacity) {
    size_t total = 0;
    for (size_t i = 0; i < count; ++i) {
        size_t len;
        const uint8_t *bytes = bpe_token_bytes(tok, tokens[i], &len);
        for (size_t k = 0; k < len; ++k, ++total)
            if (total < capacity) out[total] = bytes[k];
    }
    return total;
}

/* ------------------------------------------------------------------------ */
/* Training */

typedef struct chunk_table { /* distinct chunks of the corpus -> how often */
    size_t *offset;
    uint32_t *length;
    uint64_t *count;
    size_t slots, used;
} chunk_table;

typedef struct pair_counts {
    uint64_t *keys;
    int64_t *counts;
    size_t slots, used;
} pair_counts;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return mix64(h);
}

static int chunk_table_grow(chunk_table *t, const uint8_t *text) {
    chunk_table bigger = {calloc(t->slots * 2, sizeof(size_t)), calloc(t->slots * 2, sizeof(uint32_t)),
                          calloc(t->slots * 2, sizeof(uint64_t)), t->slots * 2, t->used};
    if (!bigger.offset || !bigger.length || !bigger.count) {
        free(bigger.offset), free(bigger.length), free(bigger.count);
        return 0;
    }
    for (size_t i = 0; i < t->slots; ++i) {
        if (!t->count[i]) continue;
        size_t j = hash_bytes(text + t->offset[i], t->length[i]) & (bigger.slots - 1);
        while (bigger.count[j]) j = (j + 1) & (bigger.slots - 1);
        bigger.offset[j] = t->offset[i], bigger.length[j] = t->length[i], bigger.count[j] = t->count[i];
    }
    free(t->offset), free(t->length), free(t->count);
    *t = bigger;
    return 1;
}

static int chunk_table_add(chunk_table *t, const uint8_t *text, size_t offset, uint32_t length) {
    if (2 * (t->used + 1) > t->slots && !chunk_table_grow(t, text)) return 0;
    size_t j = hash_bytes(text + offset, length) & (t->slots - 1);
    while (t->count[j]) {
        if (t->length[j] == length && memcmp(text + t->offset[j], text + offset, length) == 0) {
            t->count[j]++;
            return 1;
        }
        j = (j + 1) & (t->slots - 1);
    }
    t->offset[j] = offset, t->length[j] = length, t->count[j] = 1;
    t->used++;
    return 1;
}

static int pair_counts_grow(pair_counts *t) {
    pair_counts bigger = {calloc(t->slots * 2, sizeof(uint64_t)), calloc(t->slots * 2, sizeof(int64_t)),
                          t->slots * 2, t->used};
    if (!bigger.keys || !bigger.counts) {
        free(bigger.keys), free(bigger.counts);
        return 0;
    }
    for (size_t i = 0; i < t->slots; ++i) {
        if (!t->keys[i]) continue;
        size_t j = mix64(t->keys[i]) & (bigger.slots - 1);
        while (bigger.keys[j]) j = (j + 1) & (bigger.slots - 1);
        bigger.keys[j] = t->keys[i], bigger.counts[j] = t->counts[i];
    }
    free(t->keys), free(t->counts);
    *t = bigger;
    return 1;
}

static int pair_counts_add(pair_counts *t, int32_t left, int32_t right, int64_t delta) {
    if (2 * (t->used + 1) > t->slots && !pair_counts_grow(t)) return 0;
    const uint64_t key = pair_key(left, right);
    size_t j = mix64(key) & (t->slots - 1);
    while (t->keys[j] && t->keys[j] != key) j = (j + 1) & (t->slots - 1);
    if (!t->keys[j]) {
        t->keys[j] = key;
        t->used++;
    }
    t->counts[j] += delta;
    return 1;
}

static int add_word_pairs(pair_counts *pc, const int32_t *sym, uint32_t len, int64_t weight) {
    for (uint32_t i = 0; i + 1 < len; ++i)
        if (!pair_counts_add(pc, sym[i], sym[i + 1], weight)) return 0;
    return 1;
}

bfp8_status bpe_train(bpe_tokenizer *tok, const uint8_t *text, size_t n, int32_t vocab_size) {
    memset(tok, 0, sizeof *tok);
    if (vocab_size < 256 || vocab_size > BPE_MAX_VOCAB)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "tokenizer: vocab size %d out of range [256, %d]",
                         vocab_size, BPE_MAX_VOCAB);
    const int32_t merges = vocab_size - 256;
    bfp8_status st = BFP8_OK;
    chunk_table chunks = {calloc(1024, sizeof(size_t)), calloc(1024, sizeof(uint32_t)),
                          calloc(1024, sizeof(uint64_t)), 1024, 0};
    pair_counts pairs = {calloc(1024, sizeof(uint64_t)), calloc(1024, sizeof(int64_t)), 1024, 0};
    int32_t *symbols = NULL;
    size_t *word_start = NULL;
    uint32_t *word_len = NULL;
    uint64_t *word_count = NULL;
    size_t words = 0;
    tok->merges = malloc((size_t)(merges > 0 ? merges : 1) * sizeof *tok->merges);
    int ok = chunks.offset && chunks.length && chunks.count && pairs.keys && pairs.counts && tok->merges;
    for (size_t pos = 0; ok && pos < n;) {
        const size_t end = bpe_chunk_end(text, n, pos);
        ok = chunk_table_add(&chunks, text, pos, (uint32_t)(end - pos));
        pos = end;
    }
    if (ok) { /* the distinct chunks become words of symbols, in table order */
        size_t total = 0;
        for (size_t i = 0; i < chunks.slots; ++i) total += chunks.count[i] ? chunks.length[i] : 0;
        symbols = malloc((total ? total : 1) * sizeof *symbols);
        word_start = malloc((chunks.used ? chunks.used : 1) * sizeof *word_start);
        word_len = malloc((chunks.used ? chunks.used : 1) * sizeof *word_len);
        word_count = malloc((chunks.used ? chunks.used : 1) * sizeof *word_count);
        ok = symbols && word_start && word_len && word_count;
        size_t at = 0;
        for (size_t i = 0; ok && i < chunks.slots; ++i) {
            if (!chunks.count[i]) continue;
            word_start[words] = at;
            word_len[words] = chunks.length[i];
            word_count[words] = chunks.count[i];
            for (uint32_t k = 0; k < chunks.length[i]; ++k) symbols[at++] = text[chunks.offset[i] + k];
            ok = add_word_pairs(&pairs, symbols + word_start[words], word_len[words],
                                (int64_t)word_count[words]);
            ++words;
        }
    }
    for (int32_t m = 0; ok && m < merges; ++m) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < pairs.slots; ++i) {
            if (!pairs.keys[i] || pairs.counts[i] <= 0) continue;
            if (best == SIZE_MAX || pairs.counts[i] > pairs.counts[best] ||
                (pairs.counts[i] == pairs.counts[best] && pairs.keys[i] < pairs.keys[best]))
                best = i;
        }
        if (best == SIZE_MAX) {
            st = bfp8_fail(BFP8_ERR_INVALID_VALUE,
                           "tokenizer: the text (%zu bytes) yields only %d merges, %d needed for a "
                           "vocabulary of %d: use more text or a smaller vocabulary",
                           n, m, merges, vocab_size);
            break;
        }
        const uint64_t key = pairs.keys[best] - 1;
        const int32_t left = (int32_t)(key >> 32), right = (int32_t)(key & 0xffffffffu), id = 256 + m;
        tok->merges[m][0] = left;
        tok->merges[m][1] = right;
        for (size_t w = 0; ok && w < words; ++w) {
            int32_t *sym = symbols + word_start[w];
            uint32_t len = word_len[w], i = 0;
            while (i + 1 < len && !(sym[i] == left && sym[i + 1] == right)) ++i;
            if (i + 1 >= len) continue;
            ok = add_word_pairs(&pairs, sym, len, -(int64_t)word_count[w]);
            len = (uint32_t)merge_pair(sym, len, left, right, id);
            word_len[w] = len;
            ok = ok && add_word_pairs(&pairs, sym, len, (int64_t)word_count[w]);
        }
    }
    if (!ok && st == BFP8_OK) st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "tokenizer training: out of memory");
    free(chunks.offset), free(chunks.length), free(chunks.count);
    free(pairs.keys), free(pairs.counts);
    free(symbols), free(word_start), free(word_len), free(word_count);
    if (st != BFP8_OK) {
        bpe_free(tok);
        return st;
    }
    tok->vocab_size = vocab_size;
    st = build_tables(tok);
    if (st != BFP8_OK) {
        bpe_free(tok);
        return st;
    }
    /* the fingerprint is the CRC of the file form */
    uint8_t header[TOKENIZER_HEADER_BYTES];
    memcpy(header, tokenizer_magic, 8);
    put_u32(header + 8, TOKENIZER_VERSION);
    put_u32(header + 12, (uint32_t)vocab_size);
    put_u32(header + 16, BPE_MAX_CHUNK);
    uint32_t crc = crc32_update(0, header, sizeof header);
    for (int32_t m = 0; m < merges; ++m) {
        uint8_t pair[8];
        put_u32(pair, (uint32_t)tok->merges[m][0]);
        put_u32(pair + 4, (uint32_t)tok->merges[m][1]);
        crc = crc32_update(crc, pair, sizeof pair);
    }
    tok->fingerprint = crc;
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */
/* File */

bfp8_status bpe_save(const bpe_tokenizer *tok, const char *path) {
    const int32_t merges = tok->vocab_size - 256;
    const size_t size = TOKENIZER_HEADER_BYTES + 8 * (size_t)merges + 4;
    uint8_t *buf = malloc(size);
    if (!buf) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "tokenizer save: out of memory");
    memcpy(buf, tokenizer_magic, 8);
    put_u32(buf + 8, TOKENIZER_VERSION);
    put_u32(buf + 12, (uint32_t)tok->vocab_size);
    put_u32(buf + 16, BPE_MAX_CHUNK);
    for (int32_t m = 0; m < merges; ++m) {
        put_u32(buf + TOKENIZER_HEADER_BYTES + 8 * (size_t)m, (uint32_t)tok->merges[m][0]);
        put_u32(buf + TOKENIZER_HEADER_BYTES + 8 * (size_t)m + 4, (uint32_t)tok->merges[m][1]);
    }
    put_u32(buf + size - 4, crc32_update(0, buf, size - 4));
    const bfp8_status st = atomic_file_write_all(path, buf, size);
    free(buf);
    return st;
}

bfp8_status bpe_load(bpe_tokenizer *tok, const char *path) {
    memset(tok, 0, sizeof *tok);
    uint8_t *buf;
    size_t size;
    BFP8_TRY(read_whole_file(path, &buf, &size));
    bfp8_status st = BFP8_OK;
    if (size < TOKENIZER_HEADER_BYTES + 4 || memcmp(buf, tokenizer_magic, 8) != 0) {
        st = bfp8_fail(BFP8_ERR_IO, "tokenizer '%s': not a blockfp8 tokenizer file", path);
    } else if (get_u32(buf + 8) != TOKENIZER_VERSION || get_u32(buf + 16) != BPE_MAX_CHUNK) {
        st = bfp8_fail(BFP8_ERR_IO, "tokenizer '%s': version %u / chunk %u, this build reads %d / %d",
                       path, get_u32(buf + 8), get_u32(buf + 16), TOKENIZER_VERSION, BPE_MAX_CHUNK);
    } else {
        const uint32_t vocab = get_u32(buf + 12);
        if (vocab < 256 || vocab > BPE_MAX_VOCAB ||
            size != TOKENIZER_HEADER_BYTES + 8 * (size_t)(vocab - 256) + 4) {
            st = bfp8_fail(BFP8_ERR_IO, "tokenizer '%s': truncated or bad size (%zu bytes)", path, size);
        } else if (crc32_update(0, buf, size - 4) != get_u32(buf + size - 4)) {
            st = bfp8_fail(BFP8_ERR_IO, "tokenizer '%s': checksum mismatch (the file is corrupt)", path);
        } else {
            const int32_t merges = (int32_t)vocab - 256;
            tok->vocab_size = (int32_t)vocab;
            tok->merges = malloc((size_t)(merges > 0 ? merges : 1) * sizeof *tok->merges);
            if (!tok->merges) st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
            for (int32_t m = 0; st == BFP8_OK && m < merges; ++m) {
                const uint32_t a = get_u32(buf + TOKENIZER_HEADER_BYTES + 8 * (size_t)m);
                const uint32_t b = get_u32(buf + TOKENIZER_HEADER_BYTES + 8 * (size_t)m + 4);
                if (a >= 256u + (uint32_t)m || b >= 256u + (uint32_t)m)
                    st = bfp8_fail(BFP8_ERR_IO, "tokenizer '%s': merge %d refers to a later token", path, m);
                else
                    tok->merges[m][0] = (int32_t)a, tok->merges[m][1] = (int32_t)b;
            }
            if (st == BFP8_OK) st = build_tables(tok);
            tok->fingerprint = get_u32(buf + size - 4);
        }
    }
    free(buf);
    if (st != BFP8_OK) bpe_free(tok);
    return st;
}
