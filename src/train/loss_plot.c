/*
 * loss_plot.c - the loss-curve figure.
 */
#include "train/loss_plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "train/png_writer.h"
#include "train/raster.h"

static const rgb_color WHITE = {255, 255, 255}, BLACK = {20, 20, 20}, GRID = {226, 226, 226},
                       AXIS = {90, 90, 90};
static const rgb_color PALETTE[] = {{31, 119, 180}, {214, 39, 40},  {44, 160, 44},
                                    {255, 127, 14}, {148, 103, 189}, {140, 86, 75}};
enum { PALETTE_SIZE = 6 };

typedef struct panel { /* a plot area and its data ranges */
    int left, top, right, bottom;
    double x0, x1, y0, y1;
} panel;

static double px(const panel *p, double x) {
    return p->left + (x - p->x0) / (p->x1 - p->x0) * (p->right - p->left);
}
static double py(const panel *p, double y) {
    return p->bottom - (y - p->y0) / (p->y1 - p->y0) * (p->bottom - p->top);
}

static rgb_color faded(rgb_color c, double keep) {
    rgb_color f = {(uint8_t)(255 - (255 - c.r) * keep), (uint8_t)(255 - (255 - c.g) * keep),
                   (uint8_t)(255 - (255 - c.b) * keep)};
    return f;
}

/* A "nice" tick spacing: 1, 2 or 5 times a power of ten, about `count` ticks. */
static double tick_step(double range, int count) {
    const double raw = range / count, mag = pow(10.0, floor(log10(raw)));
    const double f = raw / mag;
    return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * mag;
}

static void format_tick(char *buf, size_t size, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0.0;
    if (step >= 1.0 && fabs(v) < 1e7) snprintf(buf, size, "%.0f", v);
    else snprintf(buf, size, "%.*f", (int)ceil(-log10(step) - 1e-9), v);
}

static void draw_axes(canvas *c, const panel *p, const char *x_label, const char *y_label) {
    char buf[32];
    const double xs = tick_step(p->x1 - p->x0, 8), ys = tick_step(p->y1 - p->y0, 6);
    for (double v = ceil(p->y0 / ys) * ys; v <= p->y1 + ys * 1e-9; v += ys) {
        const int y = (int)lround(py(p, v));
        canvas_fill_rect(c, p->left, y, p->right, y + 1, GRID);
        format_tick(buf, sizeof buf, v, ys);
        canvas_text(c, p->left - 8 - canvas_text_width(buf, 1), y - 3, buf, 1, BLACK);
    }
    for (double v = ceil(p->x0 / xs) * xs; v <= p->x1 + xs * 1e-9; v += xs) {
        const int x = (int)lround(px(p, v));
        canvas_fill_rect(c, x, p->top, x + 1, p->bottom, GRID);
        canvas_fill_rect(c, x, p->bottom, x + 1, p->bottom + 5, AXIS);
        format_tick(buf, sizeof buf, v, xs);
        canvas_text(c, x - canvas_text_width(buf, 1) / 2, p->bottom + 9, buf, 1, BLACK);
    }
    canvas_fill_rect(c, p->left, p->top, p->left + 1, p->bottom + 1, AXIS);
    canvas_fill_rect(c, p->left, p->bottom, p->right + 1, p->bottom + 1, AXIS);
    if (x_label)
        canvas_text(c, (p->left + p->right - canvas_text_width(x_label, 2)) / 2, p->bottom + 24,
                    x_label, 2, BLACK);
    canvas_text_vertical(c, p->left - 62, (p->top + p->bottom + canvas_text_width(y_label, 2)) / 2,
                         y_label, 2, BLACK);
}

/* Exponential moving average with the start-up bias removed. */
static void smooth_series(const loss_series *s, double factor, double *out) {
    double avg = 0.0, weight = 0.0;
    for (size_t i = 0; i < s->count; ++i) {
        avg = factor * avg + (1.0 - factor) * s->value[i];
        weight = factor * weight + (1.0 - factor);
        out[i] = factor > 0.0 ? avg / weight : s->value[i];
    }
}

static void draw_polyline(canvas *c, const panel *p, const double *x, const double *y, size_t n,
                          double width, rgb_color color) {
    for (size_t i = 1; i < n; ++i) {
        const double y0 = fmin(fmax(y[i - 1], p->y0), p->y1), y1 = fmin(fmax(y[i], p->y0), p->y1);
        canvas_line(c, px(p, x[i - 1]), py(p, y0), px(p, x[i]), py(p, y1), width, color);
    }
    if (n == 1) canvas_dot(c, px(p, x[0]), py(p, fmin(fmax(y[0], p->y0), p->y1)), width, color);
}

/* Value of series (x, y) at step (linear between points), NAN outside. */
static double value_at(const double *x, const double *y, size_t n, double step) {
    if (n == 0 || step < x[0] || step > x[n - 1]) return NAN;
    size_t lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        const size_t mid = (lo + hi) / 2;
        if (x[mid] <= step) lo = mid;
        else hi = mid;
    }
    if (x[hi] == x[lo]) return y[lo];
    return y[lo] + (y[hi] - y[lo]) * (step - x[lo]) / (x[hi] - x[lo]);
}

bfp8_status plot_losses(const char *png_path, const run_metrics *runs, int num_runs,
                        const plot_options *o) {
    if (num_runs < 1) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "plot: no runs");
    canvas c;
    if (!canvas_create(&c, o->width, o->height, WHITE))
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "plot: out of memory");
    double **smoothed = calloc((size_t)num_runs, sizeof *smoothed);
    if (!smoothed) {
        canvas_free(&c);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "plot: out of memory");
    }
    double xmax = 1.0, ymin = INFINITY, ymax = -INFINITY;
    for (int r = 0; r < num_runs; ++r) {
        const loss_series *t = &runs[r].train, *v = &runs[r].val;
        smoothed[r] = malloc((t->count ? t->count : 1) * sizeof(double));
        if (smoothed[r]) smooth_series(t, o->smooth, smoothed[r]);
        for (size_t i = 0; i < t->count; ++i) {
            xmax = fmax(xmax, t->step[i]);
            ymin = fmin(ymin, smoothed[r] ? smoothed[r][i] : t->value[i]);
            ymax = fmax(ymax, smoothed[r] ? smoothed[r][i] : t->value[i]);
        }
        for (size_t i = 0; i < v->count; ++i) {
            xmax = fmax(xmax, v->step[i]);
            ymin = fmin(ymin, v->value[i]);
            ymax = fmax(ymax, v->value[i]);
        }
    }
    if (!isnan(o->ymin)) ymin = o->ymin;
    if (!isnan(o->ymax)) ymax = o->ymax;
    if (!(ymax > ymin)) ymax = ymin + 1.0;
    const double pad = 0.04 * (ymax - ymin);
    const int with_gap = num_runs >= 2;
    const int gap_height = with_gap ? (o->height - 150) * 3 / 10 : 0;
    panel main = {90, 56, o->width - 24, o->height - 62 - (with_gap ? gap_height + 52 : 0), 0.0, xmax,
                  ymin - pad, ymax + pad};
    canvas_text(&c, (o->width - canvas_text_width(o->title, 2)) / 2, 16, o->title, 2, BLACK);
    draw_axes(&c, &main, with_gap ? NULL : "step", "loss");

    for (int r = 0; r < num_runs; ++r) { /* raw train loss first, faint, under everything */
        const loss_series *t = &runs[r].train;
        draw_polyline(&c, &main, t->step, t->value, t->count, 1.0, faded(PALETTE[r % PALETTE_SIZE], 0.25));
    }
    for (int r = 0; r < num_runs; ++r) {
        const rgb_color col = PALETTE[r % PALETTE_SIZE];
        const loss_series *t = &runs[r].train, *v = &runs[r].val;
        if (smoothed[r]) draw_polyline(&c, &main, t->step, smoothed[r], t->count, 2.0, col);
        draw_polyline(&c, &main, v->step, v->value, v->count, 1.5, faded(col, 0.8));
        for (size_t i = 0; i < v->count; ++i)
            canvas_dot(&c, px(&main, v->step[i]), py(&main, fmin(fmax(v->value[i], main.y0), main.y1)),
                       3.5, col);
    }
    /* legend, top right */
    char text[160];
    int legend_w = 0;
    for (int r = 0; r < num_runs; ++r) { /* the train line is the longer of a run's two */
        snprintf(text, sizeof text, "%s train%s", runs[r].label, o->smooth > 0.0 ? " (smoothed)" : "");
        const int w = canvas_text_width(text, 1);
        legend_w = w > legend_w ? w : legend_w;
    }
    const int lx = main.right - legend_w - 32 - 16, ly = main.top + 10;
    canvas_fill_rect(&c, lx - 8, ly - 8, main.right - 8, ly + num_runs * 32 + 2, WHITE);
    for (int r = 0; r < num_runs; ++r) {
        const rgb_color col = PALETTE[r % PALETTE_SIZE];
        const int y = ly + r * 32;
        canvas_line(&c, lx, y + 4, lx + 24, y + 4, 2.0, col);
        snprintf(text, sizeof text, "%s train%s", runs[r].label, o->smooth > 0.0 ? " (smoothed)" : "");
        canvas_text(&c, lx + 32, y + 1, text, 1, BLACK);
        canvas_dot(&c, lx + 12, y + 19, 3.5, col);
        snprintf(text, sizeof text, "%s val", runs[r].label);
        canvas_text(&c, lx + 32, y + 16, text, 1, BLACK);
    }
    if (with_gap) { /* the gap of each run to the first, at the first run's steps */
        const loss_series *base = &runs[0].train;
        double gmin = 0.0, gmax = 0.0;
        double **gap = calloc((size_t)num_runs, sizeof *gap);
        for (int r = 1; gap && r < num_runs; ++r) {
            gap[r] = malloc((base->count ? base->count : 1) * sizeof(double));
            if (!gap[r] || !smoothed[0] || !smoothed[r]) continue;
            for (size_t i = 0; i < base->count; ++i) {
                const double other = value_at(runs[r].train.step, smoothed[r], runs[r].train.count, base->step[i]);
                gap[r][i] = 100.0 * (other - smoothed[0][i]) / smoothed[0][i];
                if (isfinite(gap[r][i]) && base->step[i] >= 0.05 * xmax) {
                    gmin = fmin(gmin, gap[r][i]);
                    gmax = fmax(gmax, gap[r][i]);
                }
            }
        }
        const double gpad = fmax(0.1, 0.08 * (gmax - gmin));
        panel lower = {main.left, main.bottom + 52, main.right, o->height - 62, 0.0, xmax, gmin - gpad, gmax + gpad};
        draw_axes(&c, &lower, "step", "gap %");
        const int zero = (int)lround(py(&lower, 0.0));
        canvas_fill_rect(&c, lower.left, zero, lower.right, zero + 1, AXIS);
        for (int r = 1; gap && r < num_runs; ++r) {
            if (!gap[r]) continue;
            const rgb_color col = PALETTE[r % PALETTE_SIZE];
            size_t first = 0; /* skip NANs at the ends */
            while (first < base->count && !isfinite(gap[r][first])) ++first;
            size_t end = first;
            while (end < base->count && isfinite(gap[r][end])) ++end;
            draw_polyline(&c, &lower, base->step + first, gap[r] + first, end - first, 1.5, col);
            for (size_t i = 0; i < runs[0].val.count; ++i) {
                const double mine =
                    value_at(runs[r].val.step, runs[r].val.value, runs[r].val.count, runs[0].val.step[i]);
                const double g = 100.0 * (mine - runs[0].val.value[i]) / runs[0].val.value[i];
                if (isfinite(g))
                    canvas_dot(&c, px(&lower, runs[0].val.step[i]), py(&lower, fmin(fmax(g, lower.y0), lower.y1)), 3.0,
                               col);
            }
        }
        snprintf(text, sizeof text, "relative gap to %s: smoothed train (line), val (dots)", runs[0].label);
        canvas_text(&c, lower.left + 8, lower.top - 14, text, 1, BLACK);
        for (int r = 1; gap && r < num_runs; ++r) free(gap[r]);
        free(gap);
    }
    for (int r = 0; r < num_runs; ++r) free(smoothed[r]);
    free(smoothed);
    const bfp8_status st = png_write_file(png_path, c.pixels, c.width, c.height);
    canvas_free(&c);
    return st;
}
