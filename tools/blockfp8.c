/*
 * blockfp8.c - the blockfp8 command-line program.
 *
 *   blockfp8 train    [options]   train a model on a text corpus (CPU)
 *   blockfp8 tokenize ...         train / apply the BPE tokenizer
 *   blockfp8 sample   [options]   generate text from a checkpoint
 *   blockfp8 plot     [options]   draw loss curves into a PNG
 *   blockfp8 --version
 *
 * `blockfp8 <command> --help` lists a command's options. Exit codes:
 * src/train/commands.h.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "blockfp8.h"
#include "train/commands.h"

static void usage(FILE *out) {
    fprintf(out,
            "blockfp8 %d.%d.%d - FP8 training with blockwise scaling\n\n"
            "usage: blockfp8 <command> [options]\n\n"
            "commands:\n"
            "  train      train a Llama-style model on a text corpus (CPU)\n"
            "  tokenize   train the BPE tokenizer, encode or decode text\n"
            "  sample     generate text from a checkpoint\n"
            "  plot       draw loss curves of runs into a PNG\n\n"
            "`blockfp8 <command> --help` lists a command's options; `blockfp8 --version` prints the version.\n",
            BFP8_VERSION_MAJOR, BFP8_VERSION_MINOR, BFP8_VERSION_PATCH);
}

int main(int argc, char **argv) {
    /* A file or a pipe gets every line as it is printed (progress, banners),
     * not a buffer's worth at a time. */
    if (!isatty(STDOUT_FILENO)) setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "blockfp8: missing command (train, tokenize, sample, plot; see blockfp8 --help)\n");
        return 2;
    }
    const char *command = argv[1];
    if (strcmp(command, "train") == 0) return cmd_train(argc, argv);
    if (strcmp(command, "tokenize") == 0) return cmd_tokenize(argc, argv);
    if (strcmp(command, "sample") == 0) return cmd_sample(argc, argv);
    if (strcmp(command, "plot") == 0) return cmd_plot(argc, argv);
    if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 || strcmp(command, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(command, "--version") == 0) {
        printf("blockfp8 %d.%d.%d\n", BFP8_VERSION_MAJOR, BFP8_VERSION_MINOR, BFP8_VERSION_PATCH);
        return 0;
    }
    fprintf(stderr, "blockfp8: unknown command '%s' (train, tokenize, sample, plot; see blockfp8 --help)\n",
            command);
    return 2;
}
