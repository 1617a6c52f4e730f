/*
 * moe_load_log.h - what the trainer shows of an MoE model's expert load
 * after each step: the step's (each block's busiest expert over the mean)
 * and, at the steps the progress line prints, the load of the steps since
 * the last of them together (model_moe_window_load), for the progress line
 * and metrics.jsonl. Nothing for a dense model.
 */
#ifndef BFP8_TRAIN_MOE_LOAD_LOG_H
#define BFP8_TRAIN_MOE_LOAD_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "train/progress.h"

typedef struct moe_load_log {
    double *step;           /* per MoE block, the last step's load */
    double *window;         /* per MoE block, the last window's load */
    int64_t window_steps;   /* steps in the window that is open */
    progress_moe_load shown; /* for progress_step: the step's load, the last window's */
} moe_load_log;

bfp8_status moe_load_log_init(moe_load_log *l, const model *m);
void moe_load_log_free(moe_load_log *l);

/* After a step of m: its load into l->shown; when window_ends (a printed
 * step), the window's too, and the window restarts. buf: the metrics
 * fields ,"moe_load":[per block],"moe_dropped":N and, when the window
 * ended, ,"moe_load_window":[per block],"moe_window_steps":N (empty for a
 * dense model). */
void moe_load_log_step(moe_load_log *l, model *m, int window_ends, char *buf, size_t size);

#endif /* BFP8_TRAIN_MOE_LOAD_LOG_H */
