/*
 * metrics.h - a run's metrics as JSON lines, one object per line:
 *   {"type":"run","model":"tiny","recipe":"fp8-blockwise",...}   once per start or resume
 *   {"type":"train","step":12,"loss":5.91,"lr":0.0012,"grad_norm":0.8,"tokens":24576,"tokens_per_s":3100,"step_s":0.66}
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
} metrics_writer;

/* path NULL: a writer that writes nothing. append: keep earlier lines (resume). */
bfp8_status metrics_open(metrics_writer *w, const char *path, int append);
void metrics_close(metrics_writer *w);
/* One line; fields is the inside of the object after "type", e.g. "\"step\":3". */
void metrics_write(metrics_writer *w, const char *type, const char *fields_fmt, ...)
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
