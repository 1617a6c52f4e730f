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
        {"out", CLI_STRING, &out, "FILE", .help = "the PNG to write (default loss.png)"},
        {"title", CLI_STRING, &title, "TEXT", .help = "title of the figure (default \"Loss\")"},
        {"width", CLI_INT, &width, "PX", "image width (default 960)", .min = 320, .max = 8192},
        {"height", CLI_INT, &height, "PX", "image height (default 720)", .min = 240, .max = 8192},
        {"smooth", CLI_FLOAT, &smooth, "X", "EMA factor for the train curves, 0 = none (default 0.9)", .fmin = 0,
         .fmax = 1, .open = CLI_OPEN_MAX},
        {"ymin", CLI_FLOAT, &ymin, "Y", "lower end of the loss axis (default: from the data)", .open = CLI_ANY_FINITE},
        {"ymax", CLI_FLOAT, &ymax, "Y", "upper end of the loss axis (default: from the data)", .open = CLI_ANY_FINITE},
    };
    const char *files[MAX_RUNS];
    int nfiles = 0;
    const int parsed = cli_parse("plot", options, COUNT(options), argc, argv, 2, files, MAX_RUNS, &nfiles);
    if (parsed == 2) {
        cli_print_help(stdout, "blockfp8 plot [options] [LABEL=]METRICS.jsonl...",
                       "Draw the train and validation loss of up to 6 runs into a PNG.", options,
                       COUNT(options));
        return CLI_EXIT_OK;
    }
    if (parsed) return CLI_EXIT_USAGE;
    if (nfiles == 0) {
        fprintf(stderr, "blockfp8 plot: give at least one metrics file (see blockfp8 plot --help)\n");
        return CLI_EXIT_USAGE;
    }
    run_metrics runs[MAX_RUNS];
    int rc = 0, loaded = 0;
    for (int i = 0; i < nfiles && rc == 0; ++i) {
        const char *eq = strchr(files[i], '=');
        const char *path = eq ? eq + 1 : files[i];
        if (metrics_read(path, &runs[i]) != BFP8_OK) {
            fprintf(stderr, "blockfp8 plot: %s\n", bfp8_last_error());
            rc = CLI_EXIT_FAILURE;
            break;
        }
        ++loaded;
        if (eq) snprintf(runs[i].label, sizeof runs[i].label, "%.*s", (int)(eq - files[i]), files[i]);
    }
    if (rc == 0) {
        const plot_options po = {title, (int)width, (int)height, smooth, ymin, ymax};
        if (plot_losses(out, runs, nfiles, &po) != BFP8_OK) {
            fprintf(stderr, "blockfp8 plot: %s\n", bfp8_last_error());
            rc = CLI_EXIT_FAILURE;
        } else {
            printf("wrote %s\n", out);
        }
    }
    for (int i = 0; i < loaded; ++i) run_metrics_free(&runs[i]);
    return rc;
}
