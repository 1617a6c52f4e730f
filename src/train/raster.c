/*
 * raster.c - the canvas.
 */
#include "train/raster.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int canvas_create(canvas *c, int width, int height, rgb_color background) {
    c->width = width;
    c->height = height;
    c->pixels = malloc((size_t)width * (size_t)height * 3);
    if (!c->pixels) return 0;
    canvas_fill_rect(c, 0, 0, width, height, background);
    return 1;
}

void canvas_free(canvas *c) {
    free(c->pixels);
    c->pixels = NULL;
}

/* Mix color into the pixel with weight alpha in [0, 1]. */
static void blend(canvas *c, int x, int y, rgb_color color, double alpha) {
    if (x < 0 || y < 0 || x >= c->width || y >= c->height || alpha <= 0.0) return;
    if (alpha > 1.0) alpha = 1.0;
    uint8_t *p = c->pixels + ((size_t)y * (size_t)c->width + (size_t)x) * 3;
    p[0] = (uint8_t)lround(p[0] + (color.r - p[0]) * alpha);
    p[1] = (uint8_t)lround(p[1] + (color.g - p[1]) * alpha);
    p[2] = (uint8_t)lround(p[2] + (color.b - p[2]) * alpha);
}

void canvas_fill_rect(canvas *c, int x0, int y0, int x1, int y1, rgb_color color) {
    for (int y = y0 < 0 ? 0 : y0; y < y1 && y < c->height; ++y)
        for (int x = x0 < 0 ? 0 : x0; x < x1 && x < c->width; ++x) {
            uint8_t *p = c->pixels + ((size_t)y * (size_t)c->width + (size_t)x) * 3;
            p[0] = color.r, p[1] = color.g, p[2] = color.b;
        }
}

void canvas_line(canvas *c, double x0, double y0, double x1, double y1, double width, rgb_color color) {
    const double half = width / 2.0;
    const int xa = (int)floor(fmin(x0, x1) - half - 1), xb = (int)ceil(fmax(x0, x1) + half + 1);
    const int ya = (int)floor(fmin(y0, y1) - half - 1), yb = (int)ceil(fmax(y0, y1) + half + 1);
    const double dx = x1 - x0, dy = y1 - y0, len_sq = dx * dx + dy * dy;
    for (int y = ya; y <= yb; ++y)
        for (int x = xa; x <= xb; ++x) {
            /* distance from the pixel centre to the segment */
            const double px = x + 0.5 - x0, py = y + 0.5 - y0;
            double t = len_sq > 0.0 ? (px * dx + py * dy) / len_sq : 0.0;
            t = t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
            const double ex = px - t * dx, ey = py - t * dy;
            const double coverage = half + 0.5 - sqrt(ex * ex + ey * ey);
            if (coverage > 0.0) blend(c, x, y, color, coverage);
        }
}

void canvas_dot(canvas *c, double x, double y, double radius, rgb_color color) {
    canvas_line(c, x, y, x, y, 2.0 * radius, color);
}

static const uint8_t *glyph(char ch) {
    const unsigned char u = (unsigned char)ch;
    return font5x7[(u >= 32 && u <= 126 ? u : '?') - 32];
}

int canvas_text_width(const char *text, int scale) {
    const int n = (int)strlen(text);
    return n > 0 ? (n * FONT_ADVANCE - 1) * scale : 0;
}

void canvas_text(canvas *c, int x, int y, const char *text, int scale, rgb_color color) {
    for (int i = 0; text[i]; ++i) {
        const uint8_t *g = glyph(text[i]);
        for (int row = 0; row < FONT_HEIGHT; ++row)
            for (int col = 0; col < FONT_WIDTH; ++col)
                if (g[row] & (0x10 >> col))
                    canvas_fill_rect(c, x + (i * FONT_ADVANCE + col) * scale, y + row * scale,
                                     x + (i * FONT_ADVANCE + col + 1) * scale, y + (row + 1) * scale, color);
    }
}

void canvas_text_vertical(canvas *c, int x, int y, const char *text, int scale, rgb_color color) {
    for (int i = 0; text[i]; ++i) {
        const uint8_t *g = glyph(text[i]);
        for (int row = 0; row < FONT_HEIGHT; ++row)
            for (int col = 0; col < FONT_WIDTH; ++col)
                if (g[row] & (0x10 >> col)) {
                    /* glyph (col, row) -> canvas (x + row, y - along) */
                    const int along = i * FONT_ADVANCE + col;
                    canvas_fill_rect(c, x + row * scale, y - (along + 1) * scale,
                                     x + (row + 1) * scale, y - along * scale, color);
                }
    }
}
