/*
 * cmd_train.c - `blockfp8 train`: the options table, then train_run.
 */
#include <stdint.h>
#include <stdio.h>

#include "train/cli_args.h"
#include "train/commands.h"
#include "train/data_parallel.h"
#include "train/tokenizer.h"
#include "train/trainer.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
enum { MAX_STEPS = 1000000000 }; /* steps and step counts: enough for any run, far from overflow */

int cmd_train(int argc, char **argv) {
    train_options o;
    train_options_init(&o);
    cli_option options[] = {
        {"model", CLI_STRING, &o.model_name, "NAME",
         .help = "model preset: tiny (default), small, medium, large, 1b, moe-tiny, moe-1b"},
        {"recipe", CLI_STRING, &o.recipe_name, "NAME",
         .help = "bf16, fp8-blockwise (default), fp8-blockwise-bf16wgrad"},
        {"device", CLI_STRING, &o.device, "NAME",
         .help = "cpu (default) or cuda (device 0; with --data-parallel, device r for rank r; under a launcher, "
                 "device LOCAL_RANK)"},
        {"data", CLI_STRING, &o.data_path, "FILE",
         .help = "training text (default data/corpus.txt, from scripts/prepare_corpus.sh)"},
        {"tokenizer", CLI_STRING, &o.tokenizer_path, "FILE",
         .help = "BPE tokenizer; trained on --data and saved here if missing (default data/tokenizer-<vocab>.bin)"},
        {"vocab-size", CLI_INT, &o.vocab_size, "N", "vocabulary when a tokenizer is trained (default: the preset's)",
         .min = 256, .max = BPE_MAX_VOCAB},
        {"steps", CLI_INT, &o.steps, "N", "optimizer steps (tiny: 300)", .min = 1, .max = MAX_STEPS},
        {"batch", CLI_INT, &o.batch, "N", "sequences per micro-batch (tiny: 16)", .min = 1, .max = 4096},
        {"seq", CLI_INT, &o.seq, "N", "tokens per sequence (default: the preset's context, tiny 128)", .min = 1,
         .max = 65536},
        {"grad-accum", CLI_INT, &o.grad_accum, "N", "micro-batches per optimizer step (default 1)", .min = 1,
         .max = 1024},
        {"lr", CLI_FLOAT, &o.lr, "X", "peak learning rate (tiny: 2e-3)", .fmin = 0, .fmax = 10, .open = CLI_OPEN_MIN},
        {"min-lr", CLI_FLOAT, &o.min_lr, "X", "final learning rate of the cosine (default lr/10)", .fmin = 0,
         .fmax = 10},
        {"warmup", CLI_INT, &o.warmup, "N", "linear warmup steps (tiny: 30)", .min = 0, .max = MAX_STEPS},
        {"weight-decay", CLI_FLOAT, &o.weight_decay, "X", "AdamW decoupled weight decay, not on norms (default 0.1)",
         .fmin = 0, .fmax = 10},
        {"clip", CLI_FLOAT, &o.clip, "X", "clip the global gradient norm to X, 0 = off (default 1.0)", .fmin = 0,
         .fmax = 1e6},
        {"seed", CLI_INT, &o.seed, "N", "seed of the initial weights and the batch order (default 1337)", .min = 0,
         .max = INT64_MAX},
        {"checkpoint-dir", CLI_STRING, &o.checkpoint_dir, "DIR",
         .help = "the run directory: checkpoint.bin, metrics.jsonl, run.lock (default runs/<model>-<recipe>)"},
        {"checkpoint-every", CLI_INT, &o.checkpoint_every, "N",
         "write a checkpoint every N steps and at the end, 0 = at the end only (default: --eval-every)", .min = 0,
         .max = MAX_STEPS},
        {"resume", CLI_OPTIONAL_STRING, &o.resume, "FILE",
         .help = "continue from FILE, or (no FILE) from <checkpoint-dir>/checkpoint.bin"},
        {"overwrite", CLI_FLAG, &o.overwrite, NULL,
         .help = "start a fresh run over an existing <checkpoint-dir>/checkpoint.bin"},
        {"stop-at", CLI_INT, &o.stop_at, "STEP",
         "stop after STEP (checkpoint written); the schedule still spans --steps", .min = 1, .max = MAX_STEPS},
        {"eval-every", CLI_INT, &o.eval_every, "N",
         "validation loss every N steps and at the end, 0 = at the end only (tiny: 50)", .min = 0,
         .max = MAX_STEPS},
        {"eval-batches", CLI_INT, &o.eval_batches, "N", "validation batches per evaluation (default 4)", .min = 1,
         .max = 1000000},
        {"metrics", CLI_STRING, &o.metrics_path, "FILE",
         .help = "JSON-lines metrics (default <checkpoint-dir>/metrics.jsonl)"},
        {"log-every", CLI_INT, &o.log_every, "N",
         "progress line every N steps when stdout is not a terminal (default 10)", .min = 1, .max = MAX_STEPS},
        {"threads", CLI_INT, &o.threads, "N", "CPU threads, 0 = all cores (default 0)", .min = 0, .max = 1024},
        {"data-parallel", CLI_INT, &o.data_parallel, "N",
         "N ranks (processes) on this machine, each with --batch sequences of every micro-batch, gradients averaged: "
         "cuda over NCCL, cpu over shared memory (resume: as the checkpoint had it). Without it, RANK and WORLD_SIZE "
         "set by a launcher make this process one rank, meeting the others at MASTER_ADDR:MASTER_PORT", .min = 1,
         .max = DP_MAX_RANKS},
        {"zero", CLI_INT, &o.zero, "STAGE",
         "1: ZeRO-1, each data-parallel rank keeps the AdamW moments of its 1/N of the weights (gradients "
         "reduce-scattered, weights all-gathered); 0: off (default)", .min = 0, .max = 1},
        {"overlap-reduce", CLI_INT, &o.overlap_reduce, "0|1",
         "data parallelism on cuda without ZeRO: 1 (default) averages each block's gradients over NCCL as soon as "
         "its backward has made them, overlapped with the rest of the backward; 0: one all-reduce after it",
         .min = 0, .max = 1},
        {"flash-attention", CLI_FLAG, &o.flash_attention, NULL,
         .help = "--device cuda, head_dim 64 or 128: attention without stored probabilities, its products in bf16 "
                 "on the tensor cores (default: fp32 products, probabilities kept)"},
        {"profile", CLI_FLAG, &o.profile, NULL,
         .help = "at the end, where a step's time went by kind of work (CUDA events on the GPU, wall clock on the CPU)"},
        {"tf32", CLI_FLAG, &o.tf32, NULL,
         .help = "--device cuda: the fp32 attention products in TF32 (default exact fp32; the output head "
                 "takes bf16 operands on CUDA)"},
        {"sample-tokens", CLI_INT, &o.sample_tokens, "N", "tokens to generate at the end, 0 = none (default 200)",
         .min = 0, .max = 1000000},
        {"prompt", CLI_STRING, &o.prompt, "TEXT", .help = "prompt of the final sample (default a newline)"},
        {"temperature", CLI_FLOAT, &o.temperature, "X", "sampling temperature, 0 = greedy (default 0.8)",
         .fmin = 0, .fmax = 100},
        {"top-k", CLI_INT, &o.top_k, "N", "sample among the N likeliest tokens, 0 = all (default 40)", .min = 0,
         .max = BPE_MAX_VOCAB},
        {"inject-nonfinite", CLI_INT, &o.inject_nonfinite_at, "STEP", "testing: put a NaN into a weight at STEP",
         .min = 1, .max = MAX_STEPS},
        {"inject-rank-exit", CLI_INT, &o.inject_rank_exit_at, "STEP",
         "testing: with data parallelism, the last rank exits abruptly at STEP", .min = 1, .max = MAX_STEPS},
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
    if (parsed) return CLI_EXIT_USAGE;
    o.model_given = cli_find(options, COUNT(options), "model")->seen;
    o.batch_given = cli_find(options, COUNT(options), "batch")->seen;
    o.seq_given = cli_find(options, COUNT(options), "seq")->seen;
    o.steps_given = cli_find(options, COUNT(options), "steps")->seen;
    o.accum_given = cli_find(options, COUNT(options), "grad-accum")->seen;
    o.seed_given = cli_find(options, COUNT(options), "seed")->seen;
    o.data_parallel_given = cli_find(options, COUNT(options), "data-parallel")->seen;
    return train_run(&o);
}
