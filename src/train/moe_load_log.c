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
    l->step = calloc((size_t)m->config.n_layers, sizeof *l->step);
    return l->window && l->step ? BFP8_OK : bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "moe_load_log_init: out of memory");
}

void moe_load_log_free(moe_load_log *l) {
    free(l->window);
    free(l->step);
    l->window = l->step = NULL;
}

/* Appends ,"key":[v0,v1,...] to buf (used bytes so far; returns the new count, at most size). */
static size_t append_array(char *buf, size_t used, size_t size, const char *key, const double *v, int n) {
    if (used < size) used += (size_t)snprintf(buf + used, size - used, ",\"%s\":[", key);
    for (int i = 0; i < n && used < size; ++i)
        used += (size_t)snprintf(buf + used, size - used, "%s%.4f", i ? "," : "", v[i]);
    if (used < size) used += (size_t)snprintf(buf + used, size - used, "]");
    return used < size ? used : size;
}

void moe_load_log_step(moe_load_log *l, model *m, int window_ends, char *buf, size_t size) {
    double dropped;
    buf[0] = 0;
    const int blocks = model_moe_load_summary(m, &l->shown.step_load, &dropped);
    if (blocks == 0) return;
    for (int i = 0, k = 0; i < m->config.n_layers; ++i)
        if (m->blocks[i].moe) l->step[k++] = m->blocks[i].moe->load_max_over_mean;
    size_t used = append_array(buf, 0, size, "moe_load", l->step, blocks);
    if (used < size) used += (size_t)snprintf(buf + used, size - used, ",\"moe_dropped\":%.0f", dropped);
    ++l->window_steps;
    if (!window_ends) return;
    (void)model_moe_window_load(m, &l->shown.window_load, l->window);
    l->shown.window_steps = l->window_steps;
    used = append_array(buf, used < size ? used : size, size, "moe_load_window", l->window, blocks);
    if (used < size) snprintf(buf + used, size - used, ",\"moe_window_steps\":%lld", (long long)l->window_steps);
    l->window_steps = 0;
}
