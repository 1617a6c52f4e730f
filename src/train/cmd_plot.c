/*
 * cmd_plot.c - `blockfp8 plot`: loss curves of one or more runs into a PNG.
 *
 *   blockfp8 plot --out docs/loss.png runs/tiny-bf16/metrics.jsonl runs/tiny-fp8-blockwise/metrics.jsonl
 *
 * A run may be given as LABEL=FILE to name its curves (default: its recipe).
 */
#include <math.h>
#include <string.h>

#include "train/cli_args.h"
#include "train/commands.h"
#include "train/loss_plot.h"
#include "train/metrics.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
enum { MAX_RUNS = 6 };

int cmd_plot(int argc, char **argv) {
    const char *out = "loss.png", *title = "Loss";
    int64_t width = 960, height = 720;
    float smooth = 0.9f, ymin = NAN, ymax = NAN;
    cli_option options[] = {
        {"out", CLI_STRING, &out, "FILE", "the PNG to write (default loss.png)", 0},
        {"title", CLI_STRING, &title, "TEXT", "title of the figure (default \"Loss\")", 0},
        {"width", CLI_INT, &width, "PX", "image width (default 960)", 0},
        {"height", CLI_INT, &height, "PX", "image height (default 720)", 0},
        {"smooth", CLI_FLOAT, &smooth, "X", "EMA factor for the train curves, 0 = none (default 0.9)", 0},
        {"ymin", CLI_FLOAT, &ymin, "Y", "lower end of the loss axis (default: from the data)", 0},
        {"ymax", CLI_FLOAT, &ymax, "Y", "upper end of the loss axis (default: from the data)", 0},
    };
    const char *files[MAX_RUNS];
    int nfiles = 0;
    const int parsed = cli_parse("plot", options, COUNT(options), argc, argv, 2, files, MAX_RUNS, &nfiles);
    if (parsed == 2) {
        cli_print_help(stdout, "blockfp8 plot [options] [LABEL=]METRICS.jsonl...",
                       "Draw the train and validation loss of up to 6 runs into a PNG.", options,
                       COUNT(options));
        return 0;
    }
    if (parsed) return 2;
    if (nfiles == 0) {
        fprintf(stderr, "blockfp8 plot: give at least one metrics file (see blockfp8 plot --help)\n");
        return 2;
    }
    if (width < 320 || height < 240 || width > 8192 || height > 8192 || smooth < 0.0f || smooth >= 1.0f) {
        fprintf(stderr, "blockfp8 plot: size must be 320x240 .. 8192x8192 and --smooth in [0, 1)\n");
        return 2;
    }
    run_metrics runs[MAX_RUNS];
    int rc = 0, loaded = 0;
    for (int i = 0; i < nfiles && rc == 0; ++i) {
        const char *eq = strchr(files[i], '=');
        const char *path = eq ? eq + 1 : files[i];
        if (metrics_read(path, &runs[i]) != BFP8_OK) {
            fprintf(stderr, "blockfp8 plot: %s\n", bfp8_last_error());
            rc = 1;
            break;
        }
        ++loaded;
        if (eq) snprintf(runs[i].label, sizeof runs[i].label, "%.*s", (int)(eq - files[i]), files[i]);
    }
    if (rc == 0) {
        const plot_options po = {title, (int)width, (int)height, smooth, ymin, ymax};
        if (plot_losses(out, runs, nfiles, &po) != BFP8_OK) {
            fprintf(stderr, "blockfp8 plot: %s\n", bfp8_last_error());
            rc = 1;
        } else {
            printf("wrote %s\n", out);
        }
    }
    for (int i = 0; i < loaded; ++i) run_metrics_free(&runs[i]);
    return rc;
}
