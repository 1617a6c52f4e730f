/*
 * tokenizer_setup.c - the trainer's tokenizer: loaded from its file, or
 * trained on the corpus and saved there when the file does not exist yet.
 */
#include "train/tokenizer_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "train/dataset.h"
#include "train/file_io.h"
#include "train/progress.h"

static int path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

bfp8_status tokenizer_load_or_train(bpe_tokenizer *tok, const char *tokenizer_path, const char *data_path,
                                    int64_t vocab_wanted, int64_t vocab) {
    if (path_exists(tokenizer_path)) {
        BFP8_TRY(bpe_load(tok, tokenizer_path));
        if (vocab_wanted > 0 && tok->vocab_size != vocab_wanted)
            return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                             "tokenizer '%s' has %d tokens, --vocab-size asks for %lld",
                             tokenizer_path, tok->vocab_size, (long long)vocab_wanted);
        return BFP8_OK;
    }
    uint8_t *text;
    size_t n;
    bfp8_status st = read_whole_file(data_path, &text, &n);
    if (st != BFP8_OK) {
        char cause[512]; /* bfp8_fail overwrites what bfp8_last_error() points to */
        snprintf(cause, sizeof cause, "%s", bfp8_last_error());
        return bfp8_fail(st, "data: %s (the default corpus comes from: bash scripts/prepare_corpus.sh)",
                         cause);
    }
    if (n == 0) {
        free(text);
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "data file '%s' is empty", data_path);
    }
    st = dataset_check_text(data_path, text, n, NULL);
    if (st != BFP8_OK) {
        free(text);
        return st;
    }
    printf("tokenizer: training a %lld-token BPE on %s ...", (long long)vocab, data_path);
    fflush(stdout);
    const double t0 = progress_now();
    st = bpe_train(tok, text, n, (int32_t)vocab);
    free(text);
    if (st != BFP8_OK) {
        printf("\n");
        return st;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tokenizer_path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        BFP8_TRY(make_directories(dir));
    }
    BFP8_TRY(bpe_save(tok, tokenizer_path));
    printf(" %.1f s, saved %s\n", progress_now() - t0, tokenizer_path);
    return BFP8_OK;
}
