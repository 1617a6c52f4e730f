/*
 * metrics.h - a run's metrics as JSON lines, one object per line:
 *   {"type":"run","model":"tiny","recipe":"fp8-blockwise",...}   once per start or resume
 *   {"type":"train","step":12,"loss":5.91,"lr":0.0012,"grad_norm":0.8,"tokens":24576,"tokens_per_s":3100,"step_s":0.66}
 *     (an MoE model's also end with "moe_load":[1.08,1.21,...],"moe_dropped":0: per MoE block the
 *     busiest expert's tokens over the mean in the step's training forwards, and the (token, expert)
 *     pairs the capacity dropped)
 *   {"type":"val","step":50,"val_loss":5.42}
 * and the reader that `blockfp8 plot` uses.
 */
#ifndef BFP8_TRAIN_METRICS_H
#define BFP8_TRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "blockfp8.h"

typedef struct metrics_writer {
    FILE *fp;
    const char *path;
} metrics_writer;

/* Open path for the run's lines; path NULL: a writer that writes nothing.
 * The file is locked (flock) for the run: a file another run writes is
 * refused. keep_through_step < 0: a fresh run, the file starts empty.
 * Otherwise (a resume from that step) the file keeps its lines up to the
 * first one that is past the step (a "train" or "val" line of a later step,
 * a "run" line that started later) or is not a whole line, and is cut
 * there: a step is never logged twice, and the half line of a run killed
 * while writing goes. Files that are not regular (a pipe, /dev/null) are
 * written as they are. */
bfp8_status metrics_open(metrics_writer *w, const char *path, int64_t keep_through_step);
void metrics_close(metrics_writer *w);
/* One line, flushed; fields is the inside of the object after "type", e.g.
 * "\"step\":3". A line that cannot be written (disk full) is an error. */
bfp8_status metrics_write(metrics_writer *w, const char *type, const char *fields_fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A loss curve read back. */
typedef struct loss_series {
    double *step, *value;
    size_t count, capacity;
} loss_series;

typedef struct run_metrics {
    char label[64];  /* the recipe of the last "run" line, or the file name */
    loss_series train, val;
} run_metrics;

/* Reads a metrics file; lines of a resumed run replace those they repeat
 * (a step at or before the last one restarts the curve from there). */
bfp8_status metrics_read(const char *path, run_metrics *run);
void run_metrics_free(run_metrics *run);

#endif /* BFP8_TRAIN_METRICS_H */
