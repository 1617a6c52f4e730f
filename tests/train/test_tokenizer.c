/*
 * test_tokenizer.c - the byte-level BPE tokenizer: training, the encode /
 * decode round trip on English text, on every byte value, on invalid UTF-8
 * and on runs longer than a chunk; save and load (same merges, same
 * fingerprint, same encoding); corrupt, truncated and missing files; a text
 * too small for the vocabulary asked for.
 *
 *   ctest --test-dir build -R train_tokenizer
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "train/file_io.h"
#include "train/tokenizer.h"

static const char *const words[] = {
    "the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on",
    "are", "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one",
    "had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your", "can",
    "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if", "will",
    "package", "Debian", "kernel", "training", "gradient", "1984", "42", "e.g.", "--"};

/* Pseudo-English: words, spaces, punctuation and newlines from a seeded generator. */
static size_t make_text(uint8_t *out, size_t cap, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    size_t n = 0;
    const size_t num_words = sizeof words / sizeof words[0];
    while (n + 32 < cap) {
        const char *w = words[test_rng_range(&rng, 0, (int64_t)num_words - 1)];
        memcpy(out + n, w, strlen(w));
        n += strlen(w);
        const int64_t r = test_rng_range(&rng, 0, 99);
        out[n++] = r < 80 ? ' ' : r < 90 ? ',' : r < 97 ? '.' : '\n';
        if (out[n - 1] != ' ' && out[n - 1] != '\n') out[n++] = ' ';
    }
    return n;
}

static int round_trips(const bpe_tokenizer *tok, const uint8_t *text, size_t n, size_t *num_tokens) {
    int32_t *ids = test_malloc((n ? n : 1) * sizeof *ids);
    uint8_t *back = test_malloc(n + 1);
    size_t count = 0;
    bpe_encode(tok, text, n, ids, &count);
    int ok = count <= n;
    for (size_t i = 0; ok && i < count; ++i) ok = ids[i] >= 0 && ids[i] < tok->vocab_size;
    const size_t need = ok ? bpe_decode(tok, ids, count, back, n + 1) : 0;
    ok = ok && need == n && memcmp(back, text, n) == 0;
    if (num_tokens) *num_tokens = count;
    free(ids);
    free(back);
    return ok;
}

int main(void) {
    enum { TEXT_CAP = 200000, VOCAB = 400 }; /* the text yields 177 merges */
    uint8_t *text = test_malloc(TEXT_CAP);
    const size_t n = make_text(text, TEXT_CAP, 7);

    bpe_tokenizer tok, again, loaded;
    CHECK_OK(bpe_train(&tok, text, n, VOCAB));
    if (tok.vocab_size == 0) return test_exit_code("train_tokenizer");
    CHECK(tok.vocab_size == VOCAB, "vocab %d", tok.vocab_size);

    /* Every merged token spells its two parts. */
    for (int32_t m = 0; m < VOCAB - 256; ++m) {
        size_t len, la, lb;
        const uint8_t *t = bpe_token_bytes(&tok, 256 + m, &len);
        const uint8_t *a = bpe_token_bytes(&tok, tok.merges[m][0], &la);
        const uint8_t *b = bpe_token_bytes(&tok, tok.merges[m][1], &lb);
        if (len != la + lb || memcmp(t, a, la) != 0 || memcmp(t + la, b, lb) != 0) {
            CHECK(0, "token %d does not spell merge (%d, %d)", 256 + m, tok.merges[m][0],
                  tok.merges[m][1]);
            break;
        }
    }

    /* Round trip on the training text, and it compresses. */
    size_t count = 0;
    CHECK(round_trips(&tok, text, n, &count), "round trip of the training text");
    printf("  %zu bytes -> %zu tokens (%.2f bytes/token)\n", n, count, (double)n / (double)count);
    CHECK((double)n / (double)count > 3.3, /* measured 3.60 */ "the BPE should compress this text (%.2f bytes/token)",
          (double)n / (double)count);

    /* Unseen text, every byte value, invalid UTF-8, long runs, the empty string. */
    uint8_t other[5000];
    const size_t n_other = make_text(other, sizeof other, 99);
    CHECK(round_trips(&tok, other, n_other, NULL), "round trip of unseen text");
    uint8_t all_bytes[512];
    for (int i = 0; i < 512; ++i) all_bytes[i] = (uint8_t)(i * 37 + (i >> 8));
    CHECK(round_trips(&tok, all_bytes, sizeof all_bytes, NULL), "round trip of every byte value");
    const uint8_t utf8[] = "na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 \xff\xfe broken \xc3 tail \xe2\x82";
    CHECK(round_trips(&tok, utf8, sizeof utf8 - 1, NULL), "round trip of (invalid) UTF-8");
    uint8_t run[1000];
    memset(run, 'a', 400);
    memset(run + 400, ' ', 300);
    memset(run + 700, '.', 300);
    CHECK(round_trips(&tok, run, sizeof run, NULL), "round trip of runs longer than a chunk");
    CHECK(round_trips(&tok, text, 0, NULL), "round trip of the empty string");

    /* Chunks never exceed the limit and tile the text. */
    for (size_t pos = 0; pos < sizeof run;) {
        const size_t end = bpe_chunk_end(run, sizeof run, pos);
        if (end <= pos || end - pos > BPE_MAX_CHUNK) {
            CHECK(0, "chunk [%zu, %zu) is empty or longer than %d", pos, end, BPE_MAX_CHUNK);
            break;
        }
        pos = end;
    }

    /* Training is deterministic. */
    CHECK_OK(bpe_train(&again, text, n, VOCAB));
    CHECK(again.fingerprint == tok.fingerprint, "two trainings on the same text differ");
    bpe_free(&again);

    /* Save and load: the same merges, fingerprint and encoding. */
    const char *path = "train_tokenizer_test.bin";
    CHECK_OK(bpe_save(&tok, path));
    CHECK_OK(bpe_load(&loaded, path));
    CHECK(loaded.vocab_size == tok.vocab_size && loaded.fingerprint == tok.fingerprint,
          "loaded tokenizer: vocab %d fingerprint %08x, saved %d %08x", loaded.vocab_size,
          loaded.fingerprint, tok.vocab_size, tok.fingerprint);
    CHECK(memcmp(loaded.merges, tok.merges, (size_t)(VOCAB - 256) * sizeof *tok.merges) == 0,
          "loaded merges differ");
    {
        int32_t *a = test_malloc(n_other * sizeof *a), *b = test_malloc(n_other * sizeof *b);
        size_t ca, cb;
        bpe_encode(&tok, other, n_other, a, &ca);
        bpe_encode(&loaded, other, n_other, b, &cb);
        CHECK(ca == cb && memcmp(a, b, ca * sizeof *a) == 0, "loaded tokenizer encodes differently");
        free(a), free(b);
    }
    bpe_free(&loaded);

    /* Bad files: one flipped byte, truncation, not a tokenizer, missing. */
    uint8_t *file;
    size_t size;
    CHECK_OK(read_whole_file(path, &file, &size));
    FILE *fp = fopen(path, "wb");
    file[size / 2] ^= 0x10;
    fwrite(file, 1, size, fp);
    fclose(fp);
    CHECK_STATUS(bpe_load(&loaded, path), BFP8_ERR_IO);
    CHECK(strstr(bfp8_last_error(), "checksum") != NULL, "message: %s", bfp8_last_error());
    fp = fopen(path, "wb");
    file[size / 2] ^= 0x10;
    fwrite(file, 1, size - 9, fp);
    fclose(fp);
    CHECK_STATUS(bpe_load(&loaded, path), BFP8_ERR_IO);
    CHECK(strstr(bfp8_last_error(), "truncated") != NULL, "message: %s", bfp8_last_error());
    fp = fopen(path, "wb");
    fputs("hello, not a tokenizer at all\n", fp);
    fclose(fp);
    CHECK_STATUS(bpe_load(&loaded, path), BFP8_ERR_IO);
    free(file);
    remove(path);
    CHECK_STATUS(bpe_load(&loaded, path), BFP8_ERR_IO);

    /* Too little text for the vocabulary; a vocabulary below 256. */
    CHECK_STATUS(bpe_train(&again, (const uint8_t *)"abcabc", 6, 300), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bpe_train(&again, text, n, 100), BFP8_ERR_INVALID_VALUE);

    bpe_free(&tok);
    free(text);
    return test_exit_code("train_tokenizer");
}
