/*
 * train_plan.c - the options of `blockfp8 train` settled against the preset
 * and, on --resume, the checkpoint.
 */
#define _POSIX_C_SOURCE 200809L
#include "train/train_plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "train/data_parallel.h"

/* Per-preset training defaults */
typedef struct train_defaults {
    const char *model;
    int64_t batch, steps, warmup, eval_every;
    float lr;
} train_defaults;

static const train_defaults preset_defaults[] = {
    {"tiny", 16, 300, 30, 50, 2e-3f},
    {"small", 16, 2000, 100, 200, 1e-3f},
    {"medium", 16, 5000, 200, 250, 6e-4f},
    {"large", 8, 10000, 500, 500, 3e-4f},
    {"1b", 8, 10000, 500, 500, 3e-4f},
    {"moe-tiny", 16, 300, 30, 50, 2e-3f},
    {"moe-1b", 4, 10000, 500, 500, 3e-4f},
};

void train_options_init(train_options *o) {
    memset(o, 0, sizeof *o);
    o->model_name = "tiny";
    o->recipe_name = "fp8-blockwise";
    o->device = "cpu";
    o->data_path = "data/corpus.txt";
    o->prompt = "\n";
    o->steps = o->batch = o->seq = o->warmup = o->vocab_size = o->eval_every = -1;
    o->grad_accum = 1;
    o->overlap_reduce = 1;
    o->eval_batches = 4;
    o->checkpoint_every = -1;
    o->log_every = 10;
    o->stop_at = -1;
    o->inject_nonfinite_at = -1;
    o->inject_rank_exit_at = -1;
    o->sample_tokens = 200;
    o->top_k = 40;
    o->threads = 0;
    o->seed = 1337;
    o->data_parallel = -1;
    o->lr = o->min_lr = NAN;
    o->weight_decay = 0.1f;
    o->clip = 1.0f;
    o->temperature = 0.8f;
}

static int usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* One line on stderr; returns the exit code of a bad command line. */
static int usage_error(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "blockfp8 train: ");
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    return 2;
}

/* Names and flags that need nothing but the command line. */
static int resolve_names(train_options *o, train_plan *plan) {
    if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0)
        return usage_error("unknown --device '%s' (cpu or cuda)", o->device);
    if (o->tf32 && strcmp(o->device, "cuda") != 0) return usage_error("--tf32 needs --device cuda");
    if (o->flash_attention && strcmp(o->device, "cuda") != 0)
        return usage_error("--flash-attention needs --device cuda");
    if (bfp8_recipe_from_name(o->recipe_name, &plan->recipe) != BFP8_OK)
        return usage_error("unknown --recipe '%s' (bf16, fp8-blockwise, fp8-blockwise-bf16wgrad)", o->recipe_name);
    plan->preset = model_preset_find(o->model_name);
    if (!plan->preset)
        return usage_error("unknown --model '%s' (tiny, small, medium, large, 1b, moe-tiny, moe-1b)", o->model_name);
    return 0;
}

/* What is not given again continues as the checkpoint had it. */
static int resolve_resume(train_options *o, train_plan *plan) {
    checkpoint_info *info = &plan->resume_info;
    const int len = o->resume[0]
                        ? snprintf(plan->resume_path, sizeof plan->resume_path, "%s", o->resume)
                        : snprintf(plan->resume_path, sizeof plan->resume_path, "%s/checkpoint.bin", o->checkpoint_dir);
    if (len < 0 || (size_t)len >= sizeof plan->resume_path)
        return usage_error("the --resume path is too long");
    if (checkpoint_read_info(plan->resume_path, info) != BFP8_OK) {
        fprintf(stderr, "blockfp8 train: cannot resume: %s\n", bfp8_last_error());
        return 1;
    }
    if (o->model_given && strcmp(o->model_name, info->model_name) != 0) {
        fprintf(stderr, "blockfp8 train: cannot resume: checkpoint '%s' is a '%s' model, --model asks for '%s'\n",
                plan->resume_path, info->model_name, o->model_name);
        return 1;
    }
    plan->preset = model_preset_find(info->model_name);
    if (!plan->preset) plan->preset = model_preset_find("tiny");
    o->model_name = plan->preset->name;
    if (!o->batch_given) o->batch = info->batch;
    if (!o->seq_given) o->seq = info->seq;
    if (!o->accum_given) o->grad_accum = info->grad_accum;
    if (!o->steps_given) o->steps = (int64_t)info->total_steps;
    if (!o->seed_given) o->seed = (int64_t)info->seed;
    if (!o->data_parallel_given && info->ranks > 1) o->data_parallel = info->ranks;
    return 0;
}

int train_plan_resolve(train_options *o, train_plan *plan) {
    memset(plan, 0, sizeof *plan);
    int rc = resolve_names(o, plan);
    if (rc) return rc;
    if (!o->checkpoint_dir) {
        snprintf(plan->checkpoint_dir, sizeof plan->checkpoint_dir, "runs/%s-%s", o->model_name, o->recipe_name);
        o->checkpoint_dir = plan->checkpoint_dir;
    }
    if (o->resume && (rc = resolve_resume(o, plan)) != 0) return rc;
    const train_defaults *d = &preset_defaults[0];
    for (size_t i = 0; i < sizeof preset_defaults / sizeof preset_defaults[0]; ++i)
        if (strcmp(preset_defaults[i].model, plan->preset->name) == 0) d = &preset_defaults[i];
    /* -1 (NAN): not given; the command line takes only values in range (cmd_train.c). */
    if (o->batch < 0) o->batch = d->batch;
    if (o->seq < 0) o->seq = plan->preset->config.max_seq;
    if (o->steps < 0) o->steps = d->steps;
    if (o->warmup < 0) o->warmup = d->warmup < o->steps / 10 + 1 ? d->warmup : o->steps / 10 + 1;
    if (o->eval_every < 0) o->eval_every = d->eval_every;
    if (isnan(o->lr)) o->lr = d->lr;
    if (isnan(o->min_lr)) o->min_lr = o->lr / 10.0f;
    if (o->checkpoint_every < 0) o->checkpoint_every = o->eval_every;
    const int64_t vocab = o->vocab_size > 0 ? o->vocab_size : plan->preset->config.vocab_size;
    if (!o->tokenizer_path) {
        snprintf(plan->tokenizer_path, sizeof plan->tokenizer_path, "data/tokenizer-%lld.bin", (long long)vocab);
        o->tokenizer_path = plan->tokenizer_path;
    }
    if (!o->metrics_path) {
        snprintf(plan->metrics_path, sizeof plan->metrics_path, "%s/metrics.jsonl", o->checkpoint_dir);
        o->metrics_path = plan->metrics_path;
    }
    if (o->data_parallel != -1 && (o->data_parallel < 1 || o->data_parallel > DP_MAX_RANKS))
        return usage_error("--data-parallel must be between 1 and %d (got %lld)", DP_MAX_RANKS,
                           (long long)o->data_parallel);
    const int launched = dp_environment_present();
    if (launched < 0) return usage_error("%s", bfp8_last_error());
    if (launched && o->data_parallel_given)
        return usage_error("--data-parallel forks ranks on this machine; under a launcher (RANK and WORLD_SIZE "
                           "set) each process is one rank: leave --data-parallel out");
    if (o->zero && o->data_parallel == -1 && !launched)
        return usage_error("--zero %lld shards the optimizer over data-parallel ranks: give --data-parallel N "
                           "(or start the ranks with a launcher)", (long long)o->zero);
    if (o->seq > plan->preset->config.max_seq)
        return usage_error("--seq %lld exceeds the %s model's %d", (long long)o->seq, plan->preset->name,
                           plan->preset->config.max_seq);
    return 0;
}

int train_plan_check_fresh(const train_options *o) {
    if (o->resume || o->overwrite) return 0;
    char existing[4200];
    snprintf(existing, sizeof existing, "%s/checkpoint.bin", o->checkpoint_dir);
    struct stat st;
    if (stat(existing, &st) != 0) return 0;
    checkpoint_info old;
    if (checkpoint_read_info(existing, &old) == BFP8_OK)
        fprintf(stderr, "blockfp8 train: %s already holds a run (step %llu of %llu); pass --resume to continue it, "
                        "--overwrite to start over, or another --checkpoint-dir\n", existing,
                (unsigned long long)old.step, (unsigned long long)old.total_steps);
    else
        fprintf(stderr, "blockfp8 train: %s already exists; pass --overwrite to start over or another "
                        "--checkpoint-dir\n", existing);
    return 2;
}
