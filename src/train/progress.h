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
/* A line is printed for step 1, every log_every steps and the last step
 * (on a terminal, every step in place). */
int progress_logs_step(const progress_state *p, int64_t step, int64_t total_steps);
/* The MoE load of an MoE model (0 for a dense one): the worst block's
 * busiest expert over the mean in this step (printed as "load") and over
 * the window_steps steps up to the last logged one (window_load, printed
 * after it when window_steps > 1). */
typedef struct progress_moe_load {
    double step_load, window_load;
    int64_t window_steps;
} progress_moe_load;
void progress_step(progress_state *p, int64_t step, int64_t total_steps, double loss, double lr,
                   double tokens_per_s, const progress_moe_load *moe, double eta_s);
/* End an open \r line before other output. */
void progress_break(progress_state *p);

/* Seconds since an arbitrary start (monotonic). */
double progress_now(void);

#endif /* BFP8_TRAIN_PROGRESS_H */
