/*
 * lr_schedule.h - the learning rate: linear warmup, then cosine decay.
 */
#ifndef BFP8_TRAIN_LR_SCHEDULE_H
#define BFP8_TRAIN_LR_SCHEDULE_H

#include <stdint.h>

/* step counts from 1. Rises linearly to max_lr over warmup steps, then
 * follows a half cosine down to min_lr at total_steps (and stays there). */
float lr_at_step(int64_t step, int64_t warmup, int64_t total_steps, float max_lr, float min_lr);

#endif /* BFP8_TRAIN_LR_SCHEDULE_H */
