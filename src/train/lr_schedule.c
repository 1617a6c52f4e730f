/*
 * lr_schedule.c - warmup + cosine.
 */
#include "train/lr_schedule.h"

#include <math.h>

float lr_at_step(int64_t step, int64_t warmup, int64_t total_steps, float max_lr, float min_lr) {
    if (step <= warmup) return max_lr * (float)step / (float)warmup;
    if (step >= total_steps) return min_lr;
    const double progress = (double)(step - warmup) / (double)(total_steps - warmup);
    return min_lr + (max_lr - min_lr) * (float)(0.5 * (1.0 + cos(3.141592653589793 * progress)));
}
