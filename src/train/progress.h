/*
 * progress.h - the training progress line: rewritten in place (\r) on a
 * terminal, printed as plain lines every few steps otherwise.
 */
#ifndef BFP8_TRAIN_PROGRESS_H
#define BFP8_TRAIN_PROGRESS_H

#include <stdint.h>

typedef struct progress_state {
    int tty;          /* stdout is a terminal */
    int line_open;    /* a \r line is on screen and not ended yet */
    int64_t log_every;
} progress_state;

void progress_init(progress_state *p, int64_t log_every);
/* moe_load: an MoE model's worst expert load max/mean of the step (printed
 * as "load"), 0 for a dense one. */
void progress_step(progress_state *p, int64_t step, int64_t total_steps, double loss, double lr,
                   double tokens_per_s, double moe_load, double eta_s);
/* End an open \r line before other output. */
void progress_break(progress_state *p);

/* Seconds since an arbitrary start (monotonic). */
double progress_now(void);

#endif /* BFP8_TRAIN_PROGRESS_H */
