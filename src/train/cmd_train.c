/*
 * cmd_train.c - `blockfp8 train`: the options table, then train_run.
 */
#include <stdio.h>

#include "train/cli_args.h"
#include "train/commands.h"
#include "train/trainer.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

int cmd_train(int argc, char **argv) {
    train_options o;
    train_options_init(&o);
    cli_option options[] = {
        {"model", CLI_STRING, &o.model_name, "NAME", "model preset: tiny (default), small, medium, large, 1b", 0},
        {"recipe", CLI_STRING, &o.recipe_name, "NAME", "bf16, fp8-blockwise (default), fp8-blockwise-bf16wgrad", 0},
        {"device", CLI_STRING, &o.device, "NAME",
         "cpu (default) or cuda (device 0; with --data-parallel, device r for rank r)", 0},
        {"data", CLI_STRING, &o.data_path, "FILE",
         "training text (default data/corpus.txt, from scripts/prepare_corpus.sh)", 0},
        {"tokenizer", CLI_STRING, &o.tokenizer_path, "FILE",
         "BPE tokenizer; trained on --data and saved here if missing (default data/tokenizer-<vocab>.bin)", 0},
        {"vocab-size", CLI_INT, &o.vocab_size, "N",
         "vocabulary when a tokenizer is trained (default: the preset's)", 0},
        {"steps", CLI_INT, &o.steps, "N", "optimizer steps (tiny: 300)", 0},
        {"batch", CLI_INT, &o.batch, "N", "sequences per micro-batch (tiny: 16)", 0},
        {"seq", CLI_INT, &o.seq, "N", "tokens per sequence (default: the preset's context, tiny 128)", 0},
        {"grad-accum", CLI_INT, &o.grad_accum, "N", "micro-batches per optimizer step (default 1)", 0},
        {"lr", CLI_FLOAT, &o.lr, "X", "peak learning rate (tiny: 2e-3)", 0},
        {"min-lr", CLI_FLOAT, &o.min_lr, "X", "final learning rate of the cosine (default lr/10)", 0},
        {"warmup", CLI_INT, &o.warmup, "N", "linear warmup steps (tiny: 30)", 0},
        {"weight-decay", CLI_FLOAT, &o.weight_decay, "X",
         "AdamW decoupled weight decay, not on norms (default 0.1)", 0},
        {"clip", CLI_FLOAT, &o.clip, "X", "clip the global gradient norm to X, 0 = off (default 1.0)", 0},
        {"seed", CLI_INT, &o.seed, "N", "seed of the initial weights and the batch order (default 1337)", 0},
        {"checkpoint-dir", CLI_STRING, &o.checkpoint_dir, "DIR",
         "where checkpoint.bin goes (default runs/<model>-<recipe>)", 0},
        {"checkpoint-every", CLI_INT, &o.checkpoint_every, "N",
         "write a checkpoint every N steps and at the end (default: --eval-every)", 0},
        {"resume", CLI_OPTIONAL_STRING, &o.resume, "FILE",
         "continue from FILE, or (no FILE) from <checkpoint-dir>/checkpoint.bin", 0},
        {"overwrite", CLI_FLAG, &o.overwrite, NULL,
         "start a fresh run over an existing <checkpoint-dir>/checkpoint.bin", 0},
        {"stop-at", CLI_INT, &o.stop_at, "STEP",
         "stop after STEP (checkpoint written); the schedule still spans --steps", 0},
        {"eval-every", CLI_INT, &o.eval_every, "N", "validation loss every N steps and at the end (tiny: 50)", 0},
        {"eval-batches", CLI_INT, &o.eval_batches, "N", "validation batches per evaluation (default 4)", 0},
        {"metrics", CLI_STRING, &o.metrics_path, "FILE",
         "JSON-lines metrics (default <checkpoint-dir>/metrics.jsonl)", 0},
        {"log-every", CLI_INT, &o.log_every, "N",
         "progress line every N steps when stdout is not a terminal (default 10)", 0},
        {"threads", CLI_INT, &o.threads, "N", "CPU threads (default: all)", 0},
        {"data-parallel", CLI_INT, &o.data_parallel, "N",
         "N ranks (processes) on this machine, each with --batch sequences of every micro-batch, gradients averaged: "
         "cuda over NCCL, cpu over shared memory (resume: as the checkpoint had it)", 0},
        {"flash-attention", CLI_FLAG, &o.flash_attention, NULL,
         "--device cuda, head_dim 64 or 128: attention without stored probabilities, its products in bf16 on the "
         "tensor cores (default: fp32 products, probabilities kept)", 0},
        {"profile", CLI_FLAG, &o.profile, NULL,
         "at the end, where a step's time went by kind of work (CUDA events on the GPU, wall clock on the CPU)", 0},
        {"tf32", CLI_FLAG, &o.tf32, NULL,
         "--device cuda: attention and output-head products in TF32 (default exact fp32)", 0},
        {"sample-tokens", CLI_INT, &o.sample_tokens, "N", "tokens to generate at the end, 0 = none (default 200)", 0},
        {"prompt", CLI_STRING, &o.prompt, "TEXT", "prompt of the final sample (default a newline)", 0},
        {"temperature", CLI_FLOAT, &o.temperature, "X", "sampling temperature, 0 = greedy (default 0.8)", 0},
        {"top-k", CLI_INT, &o.top_k, "N", "sample among the N likeliest tokens, 0 = all (default 40)", 0},
        {"inject-nonfinite", CLI_INT, &o.inject_nonfinite_at, "STEP", "testing: put a NaN into a weight at STEP", 0},
        {"inject-rank-exit", CLI_INT, &o.inject_rank_exit_at, "STEP",
         "testing: with --data-parallel, the last rank exits abruptly at STEP", 0},
    };
    const char *positional[1];
    int num_positional;
    const int parsed = cli_parse("train", options, COUNT(options), argc, argv, 2, positional, 0,
                                 &num_positional);
    if (parsed == 2) {
        cli_print_help(stdout, "blockfp8 train [options]",
                       "Train a Llama-style decoder on a text corpus, on the CPU or CUDA GPUs. Linear layers run "
                       "in the chosen recipe\n(RECIPE.md section 7); everything else in fp32.",
                       options, COUNT(options));
        return 0;
    }
    if (parsed) return 2;
    o.model_given = cli_find(options, COUNT(options), "model")->seen;
    o.batch_given = cli_find(options, COUNT(options), "batch")->seen;
    o.seq_given = cli_find(options, COUNT(options), "seq")->seen;
    o.steps_given = cli_find(options, COUNT(options), "steps")->seen;
    o.accum_given = cli_find(options, COUNT(options), "grad-accum")->seen;
    o.seed_given = cli_find(options, COUNT(options), "seed")->seen;
    o.data_parallel_given = cli_find(options, COUNT(options), "data-parallel")->seen;
    return train_run(&o);
}
