/*
 * raster.h - a small RGB canvas for the plots: filled rectangles, anti-
 * aliased lines of any width (coverage from the distance to the segment),
 * dots, and text in a built-in 5 x 7 bitmap font, horizontal or rotated.
 */
#ifndef BFP8_TRAIN_RASTER_H
#define BFP8_TRAIN_RASTER_H

#include <stdint.h>

typedef struct rgb_color {
    uint8_t r, g, b;
} rgb_color;

typedef struct canvas {
    int width, height;
    uint8_t *pixels; /* height rows of width * 3 bytes */
} canvas;

extern const uint8_t font5x7[95][7];
enum { FONT_WIDTH = 5, FONT_HEIGHT = 7, FONT_ADVANCE = 6 };

/* Returns 0 when out of memory. */
int canvas_create(canvas *c, int width, int height, rgb_color background);
void canvas_free(canvas *c);

void canvas_fill_rect(canvas *c, int x0, int y0, int x1, int y1, rgb_color color); /* [x0, x1) x [y0, y1) */
void canvas_line(canvas *c, double x0, double y0, double x1, double y1, double width, rgb_color color);
void canvas_dot(canvas *c, double x, double y, double radius, rgb_color color);

/* Text with its top-left corner at (x, y), each font pixel scale x scale. */
void canvas_text(canvas *c, int x, int y, const char *text, int scale, rgb_color color);
/* Rotated a quarter turn counter-clockwise (reads bottom to top); (x, y) is the bottom-left. */
void canvas_text_vertical(canvas *c, int x, int y, const char *text, int scale, rgb_color color);
int canvas_text_width(const char *text, int scale);

#endif /* BFP8_TRAIN_RASTER_H */
