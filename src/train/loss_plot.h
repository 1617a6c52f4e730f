/*
 * loss_plot.h - draw the loss curves of one or more runs into a PNG: train
 * loss (raw, faint, and smoothed) and validation loss per run, labelled axes,
 * a legend; with two or more runs, a lower panel with each run's relative
 * gap to the first one, in percent.
 */
#ifndef BFP8_TRAIN_LOSS_PLOT_H
#define BFP8_TRAIN_LOSS_PLOT_H

#include "blockfp8.h"
#include "train/metrics.h"

typedef struct plot_options {
    const char *title;
    int width, height;
    double smooth;     /* EMA factor of the train curve, 0 = none */
    double ymin, ymax; /* NAN: from the data */
} plot_options;

bfp8_status plot_losses(const char *png_path, const run_metrics *runs, int num_runs,
                        const plot_options *o);

#endif /* BFP8_TRAIN_LOSS_PLOT_H */
