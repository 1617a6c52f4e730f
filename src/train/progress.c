/*
 * progress.c - the progress line.
 */
#define _POSIX_C_SOURCE 200809L
#include "train/progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

void progress_init(progress_state *p, int64_t log_every) {
    p->tty = isatty(fileno(stdout));
    p->line_open = 0;
    p->log_every = log_every > 0 ? log_every : 1;
}

static void format_duration(char *buf, size_t size, double s) {
    if (!(s >= 0.0) || s > 1e7) {
        snprintf(buf, size, "?");
        return;
    }
    const long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
}

int progress_logs_step(const progress_state *p, int64_t step, int64_t total_steps) {
    return step == total_steps || step % p->log_every == 0 || step == 1;
}

void progress_step(progress_state *p, int64_t step, int64_t total_steps, double loss, double lr,
                   double tokens_per_s, const progress_moe_load *moe, double eta_s) {
    if (!p->tty && !progress_logs_step(p, step, total_steps)) return;
    char eta[32], load[64] = "";
    format_duration(eta, sizeof eta, eta_s);
    if (moe && moe->step_load > 0.0) {
        if (moe->window_steps > 1)
            snprintf(load, sizeof load, " | load %.2f (%lld steps %.2f)", moe->step_load,
                     (long long)moe->window_steps, moe->window_load);
        else
            snprintf(load, sizeof load, " | load %.2f", moe->step_load);
    }
    printf("%sstep %5lld/%lld | loss %7.4f | lr %.2e | %7.0f tok/s%s | ETA %s%s", p->tty ? "\r" : "",
           (long long)step, (long long)total_steps, loss, lr, tokens_per_s, load, eta,
           p->tty ? "\033[K" : "\n");
    p->line_open = p->tty;
    fflush(stdout);
}

void progress_break(progress_state *p) {
    if (p->line_open) {
        putchar('\n');
        fflush(stdout);
    }
    p->line_open = 0;
}

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
