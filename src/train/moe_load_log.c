/*
 * moe_load_log.c - the expert load the trainer prints and logs (moe_load_log.h).
 */
#include "train/moe_load_log.h"

#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "model/model_moe.h"

bfp8_status moe_load_log_init(moe_load_log *l, const model *m) {
    *l = (moe_load_log){0};
    l->window = calloc((size_t)m->config.n_layers, sizeof *l->window);
    return l->window ? BFP8_OK : bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "moe_load_log_init: out of memory");
}

void moe_load_log_free(moe_load_log *l) {
    free(l->window);
    l->window = NULL;
}

void moe_load_log_step(moe_load_log *l, model *m, int window_ends, char *buf, size_t size) {
    double dropped;
    buf[0] = 0;
    const int blocks = model_moe_load_summary(m, &l->shown.step_load, &dropped);
    if (blocks == 0) return;
    ++l->window_steps;
    if (window_ends) {
        (void)model_moe_window_load(m, &l->shown.window_load, l->window);
        l->shown.window_steps = l->window_steps;
    }
    size_t used = (size_t)snprintf(buf, size, ",\"moe_load\":[");
    for (int i = 0; i < m->config.n_layers && used < size; ++i)
        if (m->blocks[i].moe)
            used += (size_t)snprintf(buf + used, size - used, "%s%.4f", buf[used - 1] == '[' ? "" : ",",
                                     m->blocks[i].moe->load_max_over_mean);
    if (used < size) used += (size_t)snprintf(buf + used, size - used, "],\"moe_dropped\":%.0f", dropped);
    if (!window_ends) return;
    if (used < size) used += (size_t)snprintf(buf + used, size - used, ",\"moe_load_window\":[");
    for (int i = 0; i < blocks && used < size; ++i)
        used += (size_t)snprintf(buf + used, size - used, "%s%.4f", i ? "," : "", l->window[i]);
    if (used < size)
        snprintf(buf + used, size - used, "],\"moe_window_steps\":%lld", (long long)l->window_steps);
    l->window_steps = 0;
}
