/*
 * model_profile.c - the step profile by kind of work (model_profile.h):
 * marks kept in a buffer of MODEL_PROFILE_MARKS, read into per-class totals
 * (the older half when it fills, all when the totals are asked for).
 */
#include "model/model_profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "model/model_ops.h"

struct model_profile {
    int marks;  /* marks not yet read */
    int paused; /* model_profile_pause */
    model_profile_class cls[MODEL_PROFILE_MARKS];
    double wall_ms[MODEL_PROFILE_MARKS]; /* CPU: the wall clock at each mark */
    void *event[MODEL_PROFILE_MARKS];    /* CUDA: an event per mark, made on first use, reused */
    double total_ms[MODEL_PROFILE_NUM_CLASSES];
    int64_t steps;
};

static const char *const class_names[MODEL_PROFILE_NUM_CLASSES] = {
    "linear (GEMMs + quantizers)", "attention", "norms and elementwise", "head + loss", "optimizer", "communication",
    "mixture of experts"};

const char *model_profile_class_name(model_profile_class c) {
    return (int)c >= 0 && (int)c < MODEL_PROFILE_NUM_CLASSES ? class_names[c] : "none";
}

bfp8_status model_profile_create(model_ops_ctx *oc) {
    if (oc->profile) return BFP8_OK;
    oc->profile = calloc(1, sizeof *oc->profile);
    if (!oc->profile) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "model_profile_create: out of memory");
    return BFP8_OK;
}

void model_profile_destroy(model_ops_ctx *oc) {
    struct model_profile *p = oc->profile;
    if (!p) return;
#if defined(BFP8_WITH_CUDA)
    for (int i = 0; i < MODEL_PROFILE_MARKS; ++i)
        if (p->event[i]) model_cuda_event_destroy(p->event[i]);
#endif
    free(p);
    oc->profile = NULL;
}

static double wall_clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Add the intervals that start at marks [0, upto) to their classes and drop
 * those marks: mark `upto` then starts the rest (on CUDA this waits for
 * it). A full buffer reads its older half only, marks made long enough ago
 * that waiting for them stalls nothing. */
static void read_marks(model_ops_ctx *oc, int upto) {
    struct model_profile *p = oc->profile;
    for (int i = 0; i < upto; ++i) {
        if (p->cls[i] == MODEL_PROFILE_NONE) continue;
        double ms = p->wall_ms[i + 1] - p->wall_ms[i];
#if defined(BFP8_WITH_CUDA)
        float device_ms = 0.0f;
        if (oc->device) ms = model_cuda_event_elapsed(oc, p->event[i], p->event[i + 1], &device_ms) ? device_ms : 0.0;
#endif
        p->total_ms[p->cls[i]] += ms;
    }
    void *done[MODEL_PROFILE_MARKS]; /* the events of the dropped marks, reused at the end */
    memcpy(done, p->event, (size_t)upto * sizeof *done);
    const int rest = p->marks - upto;
    memmove(p->event, p->event + upto, (size_t)rest * sizeof *p->event);
    memcpy(p->event + rest, done, (size_t)upto * sizeof *done);
    memmove(p->cls, p->cls + upto, (size_t)rest * sizeof *p->cls);
    memmove(p->wall_ms, p->wall_ms + upto, (size_t)rest * sizeof *p->wall_ms);
    p->marks = rest;
    if (p->marks == 1 && p->cls[0] == MODEL_PROFILE_NONE) p->marks = 0;
}

void model_profile_mark_on(model_ops_ctx *oc, model_profile_class c) {
    struct model_profile *p = oc->profile;
    if (p->paused) return;
    if (p->marks > 0 && p->cls[p->marks - 1] == c) return; /* the running segment goes on */
    if (p->marks == 0 && c == MODEL_PROFILE_NONE) return;
    if (p->marks == MODEL_PROFILE_MARKS) read_marks(oc, MODEL_PROFILE_MARKS / 2);
    const int i = p->marks;
#if defined(BFP8_WITH_CUDA)
    if (oc->device && !model_cuda_event_record(oc, &p->event[i])) return;
#endif
    p->wall_ms[i] = oc->device ? 0.0 : wall_clock_ms();
    p->cls[i] = c;
    p->marks = i + 1;
}

void model_profile_pause(model_ops_ctx *oc, int paused) {
    if (!oc->profile) return;
    if (paused) model_profile_mark_on(oc, MODEL_PROFILE_NONE);
    oc->profile->paused = paused != 0;
}

void model_profile_count_step(model_ops_ctx *oc) {
    if (oc->profile) oc->profile->steps++;
}

bfp8_status model_profile_totals(model_ops_ctx *oc, double ms[MODEL_PROFILE_NUM_CLASSES], int64_t *steps) {
    struct model_profile *p = oc->profile;
    if (!p) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_profile_totals: the profile is off");
    if (p->marks > 0) read_marks(oc, p->marks - 1);
    BFP8_TRY(model_ops_status(oc));
    memcpy(ms, p->total_ms, sizeof p->total_ms);
    *steps = p->steps;
    return BFP8_OK;
}

void model_profile_reset(model_ops_ctx *oc) {
    struct model_profile *p = oc->profile;
    if (!p) return;
    if (p->marks > 0) read_marks(oc, p->marks - 1); /* the time so far is dropped below */
    memset(p->total_ms, 0, sizeof p->total_ms);
    p->steps = 0;
    if (p->marks == 1) { /* a segment is running: it restarts now */
        const model_profile_class running = p->cls[0];
        p->marks = 0;
        model_profile_mark_on(oc, running);
    }
}

bfp8_status model_profile_print(model_ops_ctx *oc, FILE *out) {
    double ms[MODEL_PROFILE_NUM_CLASSES];
    int64_t steps = 0;
    BFP8_TRY(model_profile_totals(oc, ms, &steps));
    double sum = 0.0;
    for (int c = 0; c < MODEL_PROFILE_NUM_CLASSES; ++c) sum += ms[c];
    const double per = steps > 0 ? 1.0 / (double)steps : 1.0;
    fprintf(out, "profile: %lld steps, %s time per step by kind of work\n", (long long)steps,
            oc->device ? "device (CUDA events)" : "wall-clock");
    fprintf(out, "  %-28s %12s %8s\n", "class", "ms / step", "share");
    for (int c = 0; c < MODEL_PROFILE_NUM_CLASSES; ++c)
        fprintf(out, "  %-28s %12.3f %7.1f%%\n", class_names[c], ms[c] * per, sum > 0.0 ? 100.0 * ms[c] / sum : 0.0);
    fprintf(out, "  %-28s %12.3f %7.1f%%\n", "total", sum * per, sum > 0.0 ? 100.0 : 0.0);
    return BFP8_OK;
}
