/*
 * trainer.h - `blockfp8 train`: options, their per-preset defaults, and the
 * training run (tokenizer, data, model, AdamW loop with warmup + cosine,
 * gradient accumulation and clipping, validation, metrics, checkpoints,
 * resume, non-finite checks, a sample at the end).
 */
#ifndef BFP8_TRAIN_TRAINER_H
#define BFP8_TRAIN_TRAINER_H

#include <stdint.h>

typedef struct train_options {
    const char *model_name;
    const char *recipe_name;
    const char *device;
    const char *data_path;
    const char *tokenizer_path;  /* NULL: data/tokenizer-<vocab>.bin */
    const char *checkpoint_dir;  /* NULL: runs/<model>-<recipe> */
    const char *resume;          /* NULL: fresh run; "": <checkpoint_dir>/checkpoint.bin */
    const char *metrics_path;    /* NULL: <checkpoint_dir>/metrics.jsonl */
    const char *prompt;
    /* -1 (or NAN for floats): not given, the preset's default (the command line takes only values in range) */
    int64_t steps, batch, seq, grad_accum, warmup, vocab_size;
    int64_t eval_every, eval_batches, checkpoint_every, log_every;
    int64_t stop_at, inject_nonfinite_at, inject_rank_exit_at, sample_tokens, top_k, threads, seed;
    float lr, min_lr, weight_decay, clip, temperature;
    /* which options were given on the command line (resume keeps the others) */
    int model_given, batch_given, seq_given, steps_given, accum_given, seed_given;
    int overwrite; /* a fresh run may replace <checkpoint_dir>/checkpoint.bin */
    int tf32;      /* --device cuda: attention and head products in TF32 */
    int flash_attention; /* --device cuda: attention without stored probabilities, bf16 products */
    int profile;   /* print where a step's time went by kind of work (model_profile.h) */
    int64_t data_parallel; /* ranks (worker processes); -1: none, one process */
    int data_parallel_given;
    int64_t zero;          /* ZeRO stage: 0 off, 1 the AdamW moments sharded over the ranks (zero_optimizer.h) */
    int64_t overlap_reduce; /* 1: CUDA data parallelism reduces each block's gradients during the backward */
} train_options;

/* Everything unset: the preset fills it in. */
void train_options_init(train_options *o);

/* Run; returns the process exit code (commands.h): 0 done, 1 failed, 2 a bad
 * command line (a message was printed for both), 128 + the signal when a
 * SIGINT or SIGTERM stopped it after a checkpoint. */
int train_run(train_options *o);

#endif /* BFP8_TRAIN_TRAINER_H */
