/*
 * trainer.c - the training run behind `blockfp8 train`: the run directory
 * taken, tokenizer and data, model, the loop, what is printed and logged.
 */
#define _POSIX_C_SOURCE 200809L
#include "train/trainer.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"
#include "model/adamw.h"
#include "model/model.h"
#include "model/model_moe.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/dataset.h"
#include "train/file_io.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/moe_load_log.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/sampler.h"
#include "train/stop_signal.h"
#include "train/tokenizer.h"
#include "train/tokenizer_setup.h"
#include "train/train_plan.h"
#include "train/train_step.h"
#include "train/zero_optimizer.h"

/* ------------------------------------------------------------------------ */
/* The run */

typedef struct run_state {
    train_options *o;
    train_plan plan;
    const model_preset *preset;
    bfp8_recipe recipe;
    run_dir dir;
    bfp8_context *ctx;
    size_t device_bytes_before; /* the GPU's memory in use before the model (CUDA) */
    bpe_tokenizer tok;
    token_dataset data;
    model *m;
    metrics_writer metrics;
    progress_state progress;
    batch_sampler sampler;
    int32_t *inputs, *targets;
    moe_load_log moe_load;
    char checkpoint_path[4200];
    int64_t checkpoint_step; /* step of the checkpoint on disk, -1: none */
    /* data parallel (--data-parallel, or a launcher's RANK and WORLD_SIZE):
     * this process is rank `rank` of `world` (0 of 1 without it); rank 0
     * prints, writes metrics and checkpoints */
    int data_parallel;
    int launched; /* started by a launcher, not forked */
    dp_group dp;
    int rank, world;
    int zero; /* ZeRO-1: the moments are zero_opt's shard, not the model's */
    zero_optimizer zero_opt;
} run_state;

static int report_failure(run_state *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* One line on stderr, and what became of the checkpoint. Returns 1. */
static int report_failure(run_state *r, const char *fmt, ...) {
    progress_break(&r->progress);
    fflush(stdout); /* what was printed so far comes before the message */
    char msg[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof msg, fmt, args);
    va_end(args);
    if (r->rank > 0)
        fprintf(stderr, "blockfp8 train: rank %d: %s\n", r->rank, msg);
    else if (r->checkpoint_step >= 0)
        fprintf(stderr, "blockfp8 train: %s; stopped. The last checkpoint, %s (step %lld), is intact.\n",
                msg, r->checkpoint_path, (long long)r->checkpoint_step);
    else
        fprintf(stderr, "blockfp8 train: %s\n", msg);
    return 1;
}

/* The mean loss over eval_batches x batch x world validation windows (all
 * there are, if fewer); with data parallelism each rank takes a contiguous
 * share and the sums meet in rank order. */
static bfp8_status evaluate(run_state *r, int64_t batch, int64_t seq, double *mean_loss) {
    const size_t wanted = (size_t)(r->o->eval_batches * batch * r->world);
    const size_t windows = wanted < r->data.num_val_windows ? wanted : r->data.num_val_windows;
    const size_t lo = windows * (size_t)r->rank / (size_t)r->world;
    const size_t hi = windows * (size_t)(r->rank + 1) / (size_t)r->world;
    double total = 0.0;
    model_profile_pause(&r->m->oc, 1); /* validation is no training step's work */
    for (size_t w0 = lo; w0 < hi; w0 += (size_t)batch) {
        const int64_t b = (int64_t)(hi - w0 < (size_t)batch ? hi - w0 : (size_t)batch);
        for (int64_t i = 0; i < b; ++i)
            dataset_val_window(&r->data, w0 + (size_t)i, r->inputs + i * seq, r->targets + i * seq);
        double loss;
        BFP8_TRY(model_forward(r->m, r->inputs, r->targets, b, seq, &loss));
        total += loss * (double)b;
    }
    model_profile_pause(&r->m->oc, 0);
    if (r->data_parallel) BFP8_TRY(dp_sum_scalars(&r->dp, &total, 1));
    *mean_loss = total / (double)windows;
    return BFP8_OK;
}

static int all_finite(const float *x, size_t n) {
    int ok = 1;
    for (size_t i = 0; i < n; ++i) ok &= isfinite(x[i]) != 0;
    return ok;
}

/* BFP8_ERR_NONFINITE when any weight is NaN or infinite (checked on a host copy). */
static bfp8_status model_weights_finite_or_fail(const model *m) {
    const int on_host = bfp8_context_backend(m->ctx) == BFP8_BACKEND_CPU;
    float *host = on_host ? m->params : malloc(m->num_params * sizeof *host);
    if (!host) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    bfp8_status st = on_host ? BFP8_OK : model_copy_state(m, host, NULL, NULL);
    if (st == BFP8_OK && !all_finite(host, m->num_params))
        st = bfp8_fail(BFP8_ERR_NONFINITE, "non-finite weights: refusing to write a checkpoint");
    if (!on_host) free(host);
    return st;
}

/* Every rank calls it; rank 0 writes (with ZeRO-1 the others send their
 * shards of the moments). */
static bfp8_status save_checkpoint(run_state *r, int64_t step, int64_t total_steps, int64_t batch,
                                   int64_t seq, int64_t accum) {
    if (r->zero) { /* the weights are the same everywhere: every rank sees what rank 0 sees */
        BFP8_TRY(model_weights_finite_or_fail(r->m));
        if (r->rank > 0) {
            BFP8_TRY(zero_gather_moment(&r->zero_opt, 1, NULL));
            return zero_gather_moment(&r->zero_opt, 2, NULL);
        }
    }
    if (r->rank > 0) return BFP8_OK;
    BFP8_TRY(model_weights_finite_or_fail(r->m));
    checkpoint_info info = {.config = r->m->config,
                            .recipe = r->recipe,
                            .tokenizer_fingerprint = r->tok.fingerprint,
                            .step = (uint64_t)step,
                            .seed = (uint64_t)r->o->seed,
                            .sampler_state = r->sampler.rng.state,
                            .windows_drawn = r->sampler.windows_drawn,
                            .num_params = r->m->num_params,
                            .total_steps = (uint64_t)total_steps,
                            .batch = (uint32_t)batch,
                            .seq = (uint32_t)seq,
                            .grad_accum = (uint32_t)accum,
                            .ranks = (uint32_t)r->world};
    snprintf(info.model_name, sizeof info.model_name, "%s", r->preset->name);
    const checkpoint_moments shards = zero_checkpoint_moments(&r->zero_opt);
    BFP8_TRY(checkpoint_save_with(r->checkpoint_path, &info, r->m, r->zero ? &shards : NULL));
    r->checkpoint_step = step;
    return BFP8_OK;
}

static void report_stale(const char *dir, const char *name) {
    printf("removed %s/%s, a temporary file of a run that ended while writing it\n", dir, name);
}

static void release(run_state *r) {
    metrics_close(&r->metrics);
    run_dir_unlock(&r->dir);
    zero_destroy(&r->zero_opt);
    if (r->data_parallel) dp_close(&r->dp);
    model_destroy(r->m);
    dataset_free(&r->data);
    bpe_free(&r->tok);
    bfp8_context_destroy(r->ctx);
    free(r->inputs);
    free(r->targets);
    moe_load_log_free(&r->moe_load);
}

static int train_loop(run_state *r, int64_t start_step);

/* The MoE blocks' expert loads of this step, added over the ranks: every rank then moves the same bias. */
static bfp8_status sum_moe_counts(run_state *r) {
    for (int l = 0; r->data_parallel && l < r->m->config.n_layers; ++l) {
        model_moe_block *b = r->m->blocks[l].moe;
        for (int i = 0; b && i <= b->num_experts; i += DP_MAX_SCALARS) {
            const int n = b->num_experts + 1 - i;
            BFP8_TRY(dp_sum_scalars(&r->dp, b->counts + i, n < DP_MAX_SCALARS ? n : DP_MAX_SCALARS));
        }
    }
    return BFP8_OK;
}

int train_run(train_options *o) {
    run_state r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.checkpoint_step = -1;
    r.dir.lock_fd = -1;
    int rc = train_plan_resolve(o, &r.plan);
    if (rc) return rc;
    r.preset = r.plan.preset;
    r.recipe = r.plan.recipe;
    checkpoint_info resume_info = r.plan.resume_info;
    const char *resume_path = r.plan.resume_path;
    progress_init(&r.progress, o->log_every);
    r.world = 1;
    r.zero = o->zero == 1;
    r.launched = dp_environment_present() == 1;
    if (r.launched) { /* one rank of a launcher's: meet the others first (a failure below ends them too) */
        if (dp_join_environment(&r.dp) != BFP8_OK) return report_failure(&r, "%s", bfp8_last_error());
        r.rank = r.dp.rank;
        r.world = r.dp.world;
        if (r.rank > 0 && !freopen("/dev/null", "w", stdout)) {
            dp_close(&r.dp);
            return report_failure(&r, "cannot silence stdout");
        }
    }
    r.data_parallel = o->data_parallel > 0 || r.launched;
    /* The directory is this run's from here on (forked ranks share the lock; a launcher's, rank 0's). */
    rc = 1;
    if (r.rank == 0 && run_dir_lock(&r.dir, o->checkpoint_dir) != BFP8_OK) goto failed;
    if (r.rank == 0 && (rc = train_plan_check_fresh(o)) != 0) goto done;
    rc = 1;
    if (r.rank == 0 && run_dir_remove_stale(o->checkpoint_dir, report_stale) != BFP8_OK) goto failed;
    const int on_gpu = strcmp(o->device, "cuda") == 0;
    /* (data parallel: each rank checks, after the fork; CUDA must not start before it) */
    if (on_gpu && !r.data_parallel && bfp8_cuda_device_count() < 1) {
        report_failure(&r, "--device cuda: no usable CUDA device (or a build without CUDA)");
        goto done;
    }
    const int64_t vocab_wanted = o->vocab_size > 0 ? o->vocab_size : r.preset->config.vocab_size;
    /* a launcher's ranks: rank 0 trains a missing tokenizer, the others then read it (or, on another
     * machine, train the same one) */
    if (r.launched && r.rank > 0 && dp_barrier(&r.dp) != BFP8_OK) goto failed;
    if (tokenizer_load_or_train(&r.tok, o->tokenizer_path, o->data_path, o->vocab_size, vocab_wanted) != BFP8_OK)
        goto failed;
    if (r.launched && r.rank == 0 && dp_barrier(&r.dp) != BFP8_OK) goto failed;
    if (dataset_load(&r.data, o->data_path, &r.tok, o->seq) != BFP8_OK) {
        report_failure(&r, "%s", bfp8_last_error());
        goto done;
    }
    if (r.data.non_text_fraction > DATASET_WARN_NON_TEXT)
        fprintf(stderr, "blockfp8 train: warning: data file '%s': %.1f%% of its bytes are control bytes or invalid "
                        "UTF-8\n", o->data_path, 100.0 * r.data.non_text_fraction);
    /* From here a SIGINT or SIGTERM ends the run after a step, with a checkpoint. */
    stop_signal_install(!r.data_parallel || r.launched);
    if (r.data_parallel && !r.launched) {
        /* the ranks inherit the tokenizer and the data; this process supervises them */
        int exit_code;
        const int who = dp_launch(&r.dp, (int)o->data_parallel, &exit_code);
        if (who != 0) {
            r.data_parallel = 0; /* nothing of the group is left to release here */
            if (who < 0) report_failure(&r, "%s", bfp8_last_error());
            else rc = exit_code;
            goto done;
        }
        r.rank = r.dp.rank;
        r.world = r.dp.world;
        if (r.rank > 0 && !freopen("/dev/null", "w", stdout)) {
            report_failure(&r, "cannot silence stdout");
            goto done;
        }
        if (on_gpu) {
            const int devices = bfp8_cuda_device_count();
            if (devices < r.world && r.rank == 0)
                report_failure(&r, "--data-parallel %d --device cuda: %d ranks need %d CUDA devices, this "
                                   "machine has %d", r.world, r.world, r.world, devices);
            dp_barrier(&r.dp); /* rank 0 has said why before anyone leaves */
            if (devices < r.world) goto done;
        }
    }
    if (r.launched && on_gpu && bfp8_cuda_device_count() <= r.dp.local_rank) {
        report_failure(&r, "--device cuda: LOCAL_RANK %d, and this machine has %d CUDA devices", r.dp.local_rank,
                       bfp8_cuda_device_count());
        goto done;
    }
#ifdef _OPENMP
    if (o->threads > 0) {
        omp_set_num_threads((int)o->threads);
    } else if (r.world > 1 && !on_gpu) { /* the cores shared among the ranks on this machine */
        const int share = omp_get_num_procs() / r.dp.local_world;
        omp_set_num_threads(share > 0 ? share : 1);
    }
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    if (bfp8_context_create(&r.ctx, on_gpu ? BFP8_BACKEND_CUDA : BFP8_BACKEND_CPU, on_gpu ? r.dp.local_rank : 0) !=
        BFP8_OK) {
        report_failure(&r, "%s", bfp8_last_error());
        goto done;
    }
    if (on_gpu && bfp8_device_memory_in_use(r.ctx, &r.device_bytes_before) != BFP8_OK) {
        report_failure(&r, "%s", bfp8_last_error());
        goto done;
    }
    model_config config = r.preset->config;
    config.vocab_size = r.tok.vocab_size;
    if (o->resume) {
        if (resume_info.tokenizer_fingerprint != r.tok.fingerprint) {
            report_failure(&r, "cannot resume: checkpoint '%s' was trained with another tokenizer "
                               "than '%s'", resume_path, o->tokenizer_path);
            goto done;
        }
        if (memcmp(&resume_info.config, &config, sizeof config) != 0) {
            report_failure(&r, "cannot resume: checkpoint '%s' holds a different model shape than "
                               "the '%s' preset with a %d-token vocabulary", resume_path,
                           r.preset->name, config.vocab_size);
            goto done;
        }
    }
    const model_options mopts = {.recipe = r.recipe, .max_batch = o->batch, .max_seq = o->seq,
                                 .exact_linears = 0, .tf32 = o->tf32, .flash_attention = o->flash_attention,
                                 .profile = o->profile, .no_adamw_state = r.zero};
    if (model_create(&r.m, r.ctx, &config, &mopts) != BFP8_OK ||
        (r.zero && zero_create(&r.zero_opt, r.m, &r.dp) != BFP8_OK)) {
        report_failure(&r, "%s", bfp8_last_error());
        goto done;
    }
    r.inputs = malloc((size_t)(o->batch * o->seq) * sizeof *r.inputs);
    r.targets = malloc((size_t)(o->batch * o->seq) * sizeof *r.targets);
    if (!r.inputs || !r.targets || moe_load_log_init(&r.moe_load, r.m) != BFP8_OK) {
        report_failure(&r, "out of memory");
        goto done;
    }
    snprintf(r.checkpoint_path, sizeof r.checkpoint_path, "%s/checkpoint.bin", o->checkpoint_dir);
    int64_t start_step = 0;
    if (o->resume) {
        const checkpoint_moments shards = zero_checkpoint_moments(&r.zero_opt);
        if (checkpoint_load_with(resume_path, &resume_info, r.m, r.zero ? &shards : NULL) != BFP8_OK) {
            report_failure(&r, "cannot resume: %s", bfp8_last_error());
            goto done;
        }
        if (resume_info.recipe != r.recipe)
            printf("note: the checkpoint was trained with recipe %s, continuing with %s\n",
                   bfp8_recipe_name(resume_info.recipe), bfp8_recipe_name(r.recipe));
        start_step = (int64_t)resume_info.step;
        r.sampler.rng.state = resume_info.sampler_state;
        r.sampler.windows_drawn = resume_info.windows_drawn;
        if (strcmp(resume_path, r.checkpoint_path) == 0) r.checkpoint_step = start_step;
    } else {
        r.sampler = batch_sampler_start((uint64_t)o->seed);
        if (model_init_weights(r.m, (uint64_t)o->seed) != BFP8_OK) {
            report_failure(&r, "%s", bfp8_last_error());
            goto done;
        }
    }
    if (r.data_parallel) { /* every rank starts from rank 0's weights */
        if (dp_connect(&r.dp, r.ctx, r.m->num_params) != BFP8_OK ||
            dp_broadcast(&r.dp, r.m->params, r.m->num_params) != BFP8_OK || model_sync_weights(r.m) != BFP8_OK) {
            report_failure(&r, "%s", bfp8_last_error());
            goto done;
        }
    }
    if (r.rank == 0 && metrics_open(&r.metrics, o->metrics_path, o->resume ? start_step : -1) != BFP8_OK) {
        report_failure(&r, "%s", bfp8_last_error());
        goto done;
    }
    char where[160];
    const char *zero = r.zero ? ", ZeRO-1" : "";
    if (on_gpu && r.launched)
        snprintf(where, sizeof where, "data parallel over %d launched ranks on cuda (NCCL)%s%s%s", r.world, zero,
                 o->tf32 ? ", tf32 products" : "", o->flash_attention ? ", flash attention" : "");
    else if (on_gpu && r.data_parallel)
        snprintf(where, sizeof where, "data parallel over cuda devices 0-%d (NCCL)%s%s%s", r.world - 1, zero,
                 o->tf32 ? ", tf32 products" : "", o->flash_attention ? ", flash attention" : "");
    else if (on_gpu)
        snprintf(where, sizeof where, "cuda device 0%s%s", o->tf32 ? ", tf32 products" : "",
                 o->flash_attention ? ", flash attention" : "");
    else if (r.launched)
        snprintf(where, sizeof where, "data parallel over %d launched cpu ranks (TCP) x %d threads%s", r.world,
                 threads, zero);
    else if (r.data_parallel)
        snprintf(where, sizeof where, "data parallel over %d cpu processes x %d threads%s", r.world, threads, zero);
    else
        snprintf(where, sizeof where, "cpu x %d threads", threads);
    printf("model: %s, %.2fM params (dim %d, %d layers, %d heads, ffn %d, vocab %d), recipe %s, %s\n",
           r.preset->name, (double)r.m->num_params / 1e6, config.dim, config.n_layers,
           config.n_heads, config.ffn_hidden, config.vocab_size, bfp8_recipe_name(r.recipe), where);
    const model_moe_config *moe = &config.moe;
    if (moe->num_experts > 0)
        printf("moe: blocks %d-%d, %d experts of %d (top-%d), shared expert %d, %.2fM active params, balancing "
               "bias rate %g\n", moe->dense_layers, config.n_layers - 1, moe->num_experts, moe->expert_hidden,
               moe->top_k, moe->shared_hidden, (double)model_config_active_params(&config) / 1e6,
               (double)moe->bias_update_rate);
    printf("data: %s, %.2f MB -> %zu tokens (%.2f bytes/token); %zu training blocks, %zu "
           "validation windows\n",
           o->data_path, (double)r.data.text_bytes / 1e6, r.data.num_tokens,
           (double)r.data.text_bytes / (double)r.data.num_tokens, r.data.num_train_blocks,
           r.data.num_val_windows);
    char ranks[32] = "";
    if (r.data_parallel) snprintf(ranks, sizeof ranks, " x %d ranks", r.world);
    printf("run: %lld steps x %lld x %lld tokens x %lld accum%s, lr %.2g (warmup %lld, cosine to "
           "%.2g), wd %.2g, clip %.2g, seed %lld; model arenas %.0f MB; checkpoints %s\n",
           (long long)o->steps, (long long)o->batch, (long long)o->seq, (long long)o->grad_accum, ranks,
           o->lr, (long long)o->warmup, o->min_lr, o->weight_decay, o->clip, (long long)o->seed,
           (double)(model_param_arena_bytes(r.m) + model_activation_arena_bytes(r.m) +
                    2 * (r.zero_opt.hi - r.zero_opt.lo) * sizeof(float)) / 1e6,
           r.checkpoint_path);
    if (o->resume) printf("resumed from %s at step %lld\n", resume_path, (long long)start_step);
    if (metrics_write(&r.metrics, "run",
                      "\"model\":\"%s\",\"recipe\":\"%s\",\"params\":%zu,\"steps\":%lld,\"batch\":%lld,"
                      "\"seq\":%lld,\"grad_accum\":%lld,\"lr\":%g,\"seed\":%lld,\"start_step\":%lld,"
                      "\"threads\":%d,\"ranks\":%d",
                      r.preset->name, bfp8_recipe_name(r.recipe), r.m->num_params, (long long)o->steps,
                      (long long)o->batch, (long long)o->seq, (long long)o->grad_accum, o->lr,
                      (long long)o->seed, (long long)start_step, threads, r.world) != BFP8_OK) {
        report_failure(&r, "%s", bfp8_last_error());
        goto done;
    }
    rc = train_loop(&r, start_step);
    goto done;
failed:
    report_failure(&r, "%s", bfp8_last_error());
done:
    stop_signal_restore();
    release(&r);
    return rc;
}

/* ------------------------------------------------------------------------ */

/* The end of a run stopped by a signal after `step`, its checkpoint written. */
static int report_stopped(run_state *r, int sig, int64_t step) {
    progress_break(&r->progress);
    if (r->rank == 0)
        fprintf(stderr, "blockfp8 train: stopped by %s after step %lld; checkpoint %s written (continue with "
                        "--resume)\n", stop_signal_name(sig), (long long)step, r->checkpoint_path);
    return 128 + sig;
}

static int train_loop(run_state *r, int64_t start_step) {
    train_options *o = r->o;
    model *m = r->m;
    const int64_t B = o->batch, T = o->seq, A = o->grad_accum;
    const int64_t last_step = o->stop_at > 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
    const int64_t tokens_per_step = B * T * A * r->world;
    const adamw_hparams base = {.lr = o->lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                .weight_decay = o->weight_decay};
    const int overlap = r->data_parallel && !r->zero && o->overlap_reduce &&
                        bfp8_context_backend(r->ctx) == BFP8_BACKEND_CUDA;
    const train_step_ranks ranks = {r->data_parallel ? &r->dp : NULL, r->zero ? &r->zero_opt : NULL, overlap};
    double train_seconds = 0.0, last_loss = NAN;
    int64_t steps_timed = 0;
    if (start_step >= last_step) {
        printf("nothing to train: the run is at step %lld of %lld\n", (long long)start_step,
               (long long)last_step);
    }
    for (int64_t step = start_step + 1; step <= last_step; ++step) {
        const double t0 = progress_now();
        if (step == o->inject_nonfinite_at) { /* a test hook: poison one weight */
            if (model_set_param(m, (size_t)(m->blocks[0].qkv.weight - m->params), NAN) != BFP8_OK ||
                model_sync_weights(m) != BFP8_OK)
                return report_failure(r, "%s", bfp8_last_error());
        }
        if (step == o->inject_rank_exit_at && r->world > 1 && r->rank == r->world - 1) { /* a test hook */
            fprintf(stderr, "blockfp8 train: rank %d: leaving at step %lld (--inject-rank-exit)\n", r->rank,
                    (long long)step);
            _exit(3); /* as a crash would: no goodbye to the other ranks */
        }
        double loss_sum = 0.0;
        for (int64_t micro = 0; micro < A; ++micro) {
            double loss;
            /* this rank's share of the global batch (every rank draws all of it) */
            dataset_next_batch_part(&r->data, &r->sampler, B * r->world, B * r->rank, B, r->inputs, r->targets);
            if (model_forward(m, r->inputs, r->targets, B, T, &loss) != BFP8_OK ||
                model_check_nonfinite(m) != BFP8_OK)
                return report_failure(r, "step %lld: %s", (long long)step, bfp8_last_error());
            if (!isfinite(loss))
                return report_failure(r, "step %lld: the loss is %s", (long long)step,
                                      isnan(loss) ? "NaN" : "infinite");
            train_step_last_backward(&ranks, m, micro == A - 1);
            const bfp8_status backward = model_backward(m, r->inputs, r->targets, 1.0f / (float)A, micro > 0);
            train_step_last_backward(&ranks, m, 0);
            if (backward != BFP8_OK || model_check_nonfinite(m) != BFP8_OK)
                return report_failure(r, "step %lld: %s", (long long)step, bfp8_last_error());
            loss_sum += loss;
        }
        /* the mean gradient and loss over the ranks; whether any rank has a signal */
        int stop_signal = stop_signal_received();
        double grad_norm;
        if (train_step_exchange(&ranks, m, &loss_sum, &stop_signal) != BFP8_OK || sum_moe_counts(r) != BFP8_OK ||
            train_step_gradient_norm(&ranks, m, &grad_norm) != BFP8_OK)
            return report_failure(r, "step %lld: %s", (long long)step, bfp8_last_error());
        if (!isfinite(grad_norm))
            return report_failure(r, "step %lld: the gradient norm is %s", (long long)step,
                                  isnan(grad_norm) ? "NaN" : "infinite");
        const float clip_scale =
            o->clip > 0.0f && grad_norm > o->clip ? (float)(o->clip / grad_norm) : 1.0f;
        adamw_hparams h = base;
        h.lr = lr_at_step(step, o->warmup, o->steps, o->lr, o->min_lr);
        if (train_step_adamw(&ranks, m, &h, clip_scale, step) != BFP8_OK || model_check_nonfinite(m) != BFP8_OK)
            return report_failure(r, "step %lld: after the update: %s", (long long)step,
                                  bfp8_last_error());
        last_loss = loss_sum / (double)A;
        const double dt = progress_now() - t0;
        train_seconds += dt;
        ++steps_timed;
        const double tok_s = (double)(tokens_per_step * steps_timed) / train_seconds;
        const double eta = train_seconds / (double)steps_timed * (double)(last_step - step);
        char moe_fields[4096];
        moe_load_log_step(&r->moe_load, m, progress_logs_step(&r->progress, step, last_step), moe_fields,
                          sizeof moe_fields);
        progress_step(&r->progress, step, last_step, last_loss, h.lr, tok_s, &r->moe_load.shown, eta);
        if (metrics_write(&r->metrics, "train",
                          "\"step\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"tokens\":%lld,"
                          "\"tokens_per_s\":%.1f,\"step_s\":%.4f%s",
                          (long long)step, last_loss, h.lr, grad_norm, (long long)(step * tokens_per_step), tok_s,
                          dt, moe_fields) != BFP8_OK)
            return report_failure(r, "step %lld: %s", (long long)step, bfp8_last_error());
        const int eval_now = (o->eval_every > 0 && step % o->eval_every == 0) || step == last_step;
        if (eval_now) {
            double val_loss;
            if (evaluate(r, B, T, &val_loss) != BFP8_OK)
                return report_failure(r, "validation at step %lld: %s", (long long)step,
                                      bfp8_last_error());
            if (!isfinite(val_loss))
                return report_failure(r, "step %lld: the validation loss is not finite", (long long)step);
            progress_break(&r->progress);
            printf("step %5lld | val_loss %.4f | train_loss %.4f\n", (long long)step, val_loss, last_loss);
            if (metrics_write(&r->metrics, "val", "\"step\":%lld,\"val_loss\":%.6f", (long long)step, val_loss) !=
                BFP8_OK)
                return report_failure(r, "step %lld: %s", (long long)step, bfp8_last_error());
        }
        const int checkpoint_now =
            (o->checkpoint_every > 0 && step % o->checkpoint_every == 0) || step == last_step || stop_signal;
        if (checkpoint_now && save_checkpoint(r, step, o->steps, B, T, A) != BFP8_OK)
            return report_failure(r, "step %lld: %s", (long long)step, bfp8_last_error());
        if (stop_signal) return report_stopped(r, stop_signal, step);
    }
    stop_signal_restore(); /* the sample below ends at a signal, as any program does */
    progress_break(&r->progress);
    if (steps_timed > 0)
        printf("done: %lld steps in %.1f s, %.0f tokens/s, final train loss %.4f; checkpoint %s\n",
               (long long)steps_timed, train_seconds,
               (double)(tokens_per_step * steps_timed) / train_seconds, last_loss, r->checkpoint_path);
    /* what the run holds on the GPU: its use now less before the model (workspaces included; another process's
     * allocations in between count too) */
    size_t device_bytes = 0;
    if (bfp8_context_backend(r->ctx) == BFP8_BACKEND_CUDA &&
        bfp8_device_memory_in_use(r->ctx, &device_bytes) == BFP8_OK) {
        if (device_bytes >= r->device_bytes_before)
            printf("device memory: %.0f MB in use by the run\n", (double)(device_bytes - r->device_bytes_before) / 1e6);
        else
            printf("device memory: unknown (the GPU holds %.0f MB less than before the model: another process freed "
                   "memory)\n", (double)(r->device_bytes_before - device_bytes) / 1e6);
    }
    if (o->profile && r->rank == 0 && model_profile_print(&m->oc, stdout) != BFP8_OK)
        return report_failure(r, "profile: %s", bfp8_last_error());
    if (o->sample_tokens > 0 && r->rank == 0) {
        int32_t *prompt = malloc((strlen(o->prompt) + 1) * sizeof *prompt);
        size_t prompt_len = 0;
        if (!prompt) return report_failure(r, "out of memory");
        bpe_encode(&r->tok, (const uint8_t *)o->prompt, strlen(o->prompt), prompt, &prompt_len);
        if (prompt_len == 0) prompt[prompt_len++] = '\n';
        const sample_options so = {.max_new_tokens = o->sample_tokens, .temperature = o->temperature,
                                   .top_k = o->top_k};
        rng_state rng = rng_seeded((uint64_t)o->seed + 1);
        printf("sample (temperature %.2g, top-k %lld):\n%s", o->temperature, (long long)o->top_k,
               o->prompt);
        const bfp8_status st = sample_generate(m, prompt, prompt_len, &so, &rng, sample_print_token, &r->tok);
        free(prompt);
        printf("\n");
        if (st != BFP8_OK) return report_failure(r, "sampling: %s", bfp8_last_error());
    }
    return 0;
}
