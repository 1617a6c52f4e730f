/*
 * cmd_sample.c - `blockfp8 sample`: generate text from a checkpoint.
 *
 *   blockfp8 sample --checkpoint runs/tiny-fp8-blockwise/checkpoint.bin --prompt "The" --tokens 200
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "train/checkpoint.h"
#include "train/cli_args.h"
#include "train/commands.h"
#include "train/sampler.h"
#include "train/tokenizer.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

int cmd_sample(int argc, char **argv) {
    const char *checkpoint = NULL, *tokenizer = NULL, *prompt = "\n", *recipe_name = NULL, *device = "cpu";
    int64_t tokens = 200, top_k = 40, seed = 1;
    float temperature = 0.8f;
    cli_option options[] = {
        {"checkpoint", CLI_STRING, &checkpoint, "FILE", .help = "the checkpoint to sample from (required)"},
        {"tokenizer", CLI_STRING, &tokenizer, "FILE", .help = "its tokenizer (default data/tokenizer-<vocab>.bin)"},
        {"prompt", CLI_STRING, &prompt, "TEXT", .help = "text to continue (default a newline)"},
        {"tokens", CLI_INT, &tokens, "N", "tokens to generate (default 200)", .min = 0, .max = 1000000},
        {"temperature", CLI_FLOAT, &temperature, "X", "0 = greedy (default 0.8)", .fmin = 0, .fmax = 100},
        {"top-k", CLI_INT, &top_k, "N", "sample among the N likeliest, 0 = all (default 40)", .min = 0,
         .max = 65536},
        {"seed", CLI_INT, &seed, "N", "sampling seed (default 1)", .min = 0, .max = INT64_MAX},
        {"recipe", CLI_STRING, &recipe_name, "NAME", .help = "linear-layer recipe (default: the checkpoint's)"},
        {"device", CLI_STRING, &device, "NAME", .help = "cpu (default) or cuda"},
    };
    const char *positional[1];
    int npos;
    const int parsed = cli_parse("sample", options, COUNT(options), argc, argv, 2, positional, 0, &npos);
    if (parsed == 2) {
        cli_print_help(stdout, "blockfp8 sample --checkpoint FILE [options]",
                       "Generate text from a trained checkpoint.", options, COUNT(options));
        return 0;
    }
    if (parsed) return CLI_EXIT_USAGE;
    if (!checkpoint) {
        fprintf(stderr, "blockfp8 sample: --checkpoint FILE is required\n");
        return CLI_EXIT_USAGE;
    }
    const int on_gpu = strcmp(device, "cuda") == 0;
    if (!on_gpu && strcmp(device, "cpu") != 0) {
        fprintf(stderr, "blockfp8 sample: unknown --device '%s' (cpu or cuda)\n", device);
        return CLI_EXIT_USAGE;
    }
    bfp8_recipe recipe = BFP8_RECIPE_FP8_BLOCKWISE;
    if (recipe_name && bfp8_recipe_from_name(recipe_name, &recipe) != BFP8_OK) {
        fprintf(stderr, "blockfp8 sample: unknown --recipe '%s' (bf16, fp8-blockwise, fp8-blockwise-bf16wgrad)\n",
                recipe_name);
        return CLI_EXIT_USAGE;
    }
    if (on_gpu && bfp8_cuda_device_count() < 1) {
        fprintf(stderr, "blockfp8 sample: --device cuda: no usable CUDA device (or a build without CUDA)\n");
        return CLI_EXIT_FAILURE;
    }
    checkpoint_info info;
    if (checkpoint_read_info(checkpoint, &info) != BFP8_OK) {
        fprintf(stderr, "blockfp8 sample: %s\n", bfp8_last_error());
        return CLI_EXIT_FAILURE;
    }
    if (!recipe_name) recipe = info.recipe;
    char default_tokenizer[64];
    if (!tokenizer) {
        snprintf(default_tokenizer, sizeof default_tokenizer, "data/tokenizer-%d.bin",
                 info.config.vocab_size);
        tokenizer = default_tokenizer;
    }
    bpe_tokenizer tok;
    if (bpe_load(&tok, tokenizer) != BFP8_OK) {
        fprintf(stderr, "blockfp8 sample: %s\n", bfp8_last_error());
        return CLI_EXIT_FAILURE;
    }
    int rc = CLI_EXIT_FAILURE;
    bfp8_context *ctx = NULL;
    model *m = NULL;
    int32_t *ids = NULL;
    if (tok.fingerprint != info.tokenizer_fingerprint) {
        fprintf(stderr, "blockfp8 sample: checkpoint '%s' was trained with another tokenizer than '%s'\n",
                checkpoint, tokenizer);
        goto done;
    }
    const model_options mo = {.recipe = recipe, .max_batch = 1, .max_seq = info.config.max_seq};
    if (bfp8_context_create(&ctx, on_gpu ? BFP8_BACKEND_CUDA : BFP8_BACKEND_CPU, 0) != BFP8_OK ||
        model_create(&m, ctx, &info.config, &mo) != BFP8_OK ||
        checkpoint_load(checkpoint, &info, m) != BFP8_OK) {
        fprintf(stderr, "blockfp8 sample: %s\n", bfp8_last_error());
        goto done;
    }
    const size_t plen = strlen(prompt);
    ids = malloc((plen + 1) * sizeof *ids);
    size_t count = 0;
    if (!ids) goto done;
    bpe_encode(&tok, (const uint8_t *)prompt, plen, ids, &count);
    if (count == 0) {
        fprintf(stderr, "blockfp8 sample: the prompt is empty\n");
        goto done;
    }
    const sample_options so = {.max_new_tokens = tokens, .temperature = temperature, .top_k = top_k};
    rng_state rng = rng_seeded((uint64_t)seed);
    fputs(prompt, stdout);
    if (sample_generate(m, ids, count, &so, &rng, sample_print_token, &tok) != BFP8_OK) {
        fprintf(stderr, "\nblockfp8 sample: %s\n", bfp8_last_error());
        goto done;
    }
    printf("\n");
    rc = CLI_EXIT_OK;
done:
    free(ids);
    model_destroy(m);
    bfp8_context_destroy(ctx);
    bpe_free(&tok);
    return rc;
}
