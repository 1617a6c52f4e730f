/*
 * cmd_tokenize.c - `blockfp8 tokenize`: train a BPE tokenizer on a corpus,
 * encode text to token ids, decode ids back to text.
 *
 *   blockfp8 tokenize train  --data data/corpus.txt --vocab-size 2048 --out data/tokenizer-2048.bin
 *   blockfp8 tokenize encode --tokenizer data/tokenizer-2048.bin --text "Hello world"
 *   blockfp8 tokenize decode --tokenizer data/tokenizer-2048.bin 15 1023 7
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "train/cli_args.h"
#include "train/commands.h"
#include "train/dataset.h"
#include "train/file_io.h"
#include "train/progress.h"
#include "train/tokenizer.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
enum { MAX_IDS = 4096 };

static int fail(const char *what) {
    fprintf(stderr, "blockfp8 tokenize: %s\n", what);
    return CLI_EXIT_FAILURE;
}

static int usage_error(const char *what) {
    fprintf(stderr, "blockfp8 tokenize: %s (see blockfp8 tokenize --help)\n", what);
    return CLI_EXIT_USAGE;
}

int cmd_tokenize(int argc, char **argv) {
    const char *data = "data/corpus.txt", *out = NULL, *tokenizer = NULL, *text = NULL;
    int64_t vocab = 2048;
    cli_option options[] = {
        {"data", CLI_STRING, &data, "FILE", .help = "train: the corpus (default data/corpus.txt)"},
        {"vocab-size", CLI_INT, &vocab, "N", "train: vocabulary size (default 2048)", .min = 256,
         .max = BPE_MAX_VOCAB},
        {"out", CLI_STRING, &out, "FILE", .help = "train: where to save (default data/tokenizer-<vocab>.bin)"},
        {"tokenizer", CLI_STRING, &tokenizer, "FILE", .help = "encode, decode: the tokenizer file"},
        {"text", CLI_STRING, &text, "TEXT", .help = "encode: this text (otherwise the FILE argument)"},
    };
    const char *positional[MAX_IDS];
    int npos = 0;
    const int parsed = cli_parse("tokenize", options, COUNT(options), argc, argv, 2, positional,
                                 MAX_IDS, &npos);
    if (parsed == 2) {
        cli_print_help(stdout, "blockfp8 tokenize train|encode|decode [options] [FILE | IDS...]",
                       "Byte-level BPE: train it on a corpus, encode text (ids on stdout), decode "
                       "ids (bytes on stdout).",
                       options, COUNT(options));
        return CLI_EXIT_OK;
    }
    if (parsed) return CLI_EXIT_USAGE;
    if (npos == 0) return usage_error("say train, encode or decode");
    const char *action = positional[0];
    bpe_tokenizer tok;
    if (strcmp(action, "train") == 0) {
        if (npos != 1) return usage_error("train takes no positional arguments");
        char default_out[64];
        if (!out) {
            snprintf(default_out, sizeof default_out, "data/tokenizer-%lld.bin", (long long)vocab);
            out = default_out;
        }
        uint8_t *bytes;
        size_t n;
        if (read_whole_file(data, &bytes, &n) != BFP8_OK) return fail(bfp8_last_error());
        if (n == 0) {
            free(bytes);
            return fail("the data file is empty");
        }
        if (dataset_check_text(data, bytes, n, NULL) != BFP8_OK) {
            free(bytes);
            return fail(bfp8_last_error());
        }
        const double t0 = progress_now();
        const bfp8_status st = bpe_train(&tok, bytes, n, (int32_t)vocab);
        free(bytes);
        if (st != BFP8_OK) return fail(bfp8_last_error());
        if (bpe_save(&tok, out) != BFP8_OK) {
            bpe_free(&tok);
            return fail(bfp8_last_error());
        }
        printf("trained a %d-token BPE on %s (%zu bytes) in %.1f s: %s\n", tok.vocab_size, data, n,
               progress_now() - t0, out);
        bpe_free(&tok);
        return CLI_EXIT_OK;
    }
    const int encode = strcmp(action, "encode") == 0;
    if (!encode && strcmp(action, "decode") != 0) {
        fprintf(stderr, "blockfp8 tokenize: unknown action '%s' (train, encode, decode)\n", action);
        return CLI_EXIT_USAGE;
    }
    if (!tokenizer) return usage_error("--tokenizer FILE is required");
    if (encode && !text && npos != 2) return usage_error("encode needs --text TEXT or one FILE");
    if (bpe_load(&tok, tokenizer) != BFP8_OK) return fail(bfp8_last_error());
    int rc = CLI_EXIT_OK;
    if (encode) {
        uint8_t *bytes = NULL;
        size_t n;
        if (text) {
            n = strlen(text);
        } else if (read_whole_file(positional[1], &bytes, &n) != BFP8_OK) {
            bpe_free(&tok);
            return fail(bfp8_last_error());
        }
        const uint8_t *src = text ? (const uint8_t *)text : bytes;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        size_t count = 0;
        if (!ids) {
            rc = fail("out of memory");
        } else {
            bpe_encode(&tok, src, n, ids, &count);
            for (size_t i = 0; i < count; ++i) printf(i + 1 < count ? "%d " : "%d\n", ids[i]);
            fprintf(stderr, "%zu bytes -> %zu tokens (%.2f bytes/token)\n", n, count,
                    count ? (double)n / (double)count : 0.0);
        }
        free(ids);
        free(bytes);
    } else {
        for (int i = 1; i < npos && rc == 0; ++i) {
            char *end;
            errno = 0;
            const long id = strtol(positional[i], &end, 10);
            if (*end || errno || id < 0 || id >= tok.vocab_size) {
                fprintf(stderr, "blockfp8 tokenize: '%s' is not a token id in [0, %d)\n",
                        positional[i], tok.vocab_size);
                rc = CLI_EXIT_USAGE;
                break;
            }
            size_t len;
            const uint8_t *b = bpe_token_bytes(&tok, (int32_t)id, &len);
            fwrite(b, 1, len, stdout);
        }
    }
    bpe_free(&tok);
    return rc;
}
