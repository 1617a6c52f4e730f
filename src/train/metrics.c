/*
 * metrics.c - JSON-lines metrics: writing, and reading back the few fields
 * the plots need (our own files, so a small field scanner is enough).
 */
#include "train/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

bfp8_status metrics_open(metrics_writer *w, const char *path, int append) {
    w->fp = NULL;
    if (!path) return BFP8_OK;
    w->fp = fopen(path, append ? "a" : "w");
    if (!w->fp) return bfp8_fail(BFP8_ERR_IO, "cannot open metrics file '%s': %s", path, strerror(errno));
    return BFP8_OK;
}

void metrics_close(metrics_writer *w) {
    if (w->fp) fclose(w->fp);
    w->fp = NULL;
}

void metrics_write(metrics_writer *w, const char *type, const char *fields_fmt, ...) {
    if (!w->fp) return;
    fprintf(w->fp, "{\"type\":\"%s\",", type);
    va_list args;
    va_start(args, fields_fmt);
    vfprintf(w->fp, fields_fmt, args);
    va_end(args);
    fputs("}\n", w->fp);
    fflush(w->fp);
}

/* ------------------------------------------------------------------------ */

/* The text after "key": in line, or NULL. */
static const char *field(const char *line, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = strstr(line, pattern);
    return p ? p + strlen(pattern) : NULL;
}

static int number_field(const char *line, const char *key, double *out) {
    const char *p = field(line, key);
    if (!p) return 0;
    char *end;
    *out = strtod(p, &end);
    return end != p;
}

static int series_push(loss_series *s, double step, double value) {
    while (s->count > 0 && s->step[s->count - 1] >= step) s->count--; /* a resumed run repeats steps */
    if (s->count == s->capacity) {
        const size_t cap = s->capacity ? 2 * s->capacity : 256;
        double *st = realloc(s->step, cap * sizeof *st);
        if (!st) return 0;
        s->step = st;
        double *v = realloc(s->value, cap * sizeof *v);
        if (!v) return 0;
        s->value = v;
        s->capacity = cap;
    }
    s->step[s->count] = step;
    s->value[s->count++] = value;
    return 1;
}

bfp8_status metrics_read(const char *path, run_metrics *run) {
    memset(run, 0, sizeof *run);
    const char *base = strrchr(path, '/');
    snprintf(run->label, sizeof run->label, "%s", base ? base + 1 : path);
    FILE *fp = fopen(path, "r");
    if (!fp) return bfp8_fail(BFP8_ERR_IO, "cannot open metrics file '%s': %s", path, strerror(errno));
    char line[4096];
    size_t lines = 0;
    int ok = 1;
    while (ok && fgets(line, sizeof line, fp)) {
        ++lines;
        const char *type = field(line, "type");
        double step, value;
        if (!type) continue;
        if (strncmp(type, "\"run\"", 5) == 0) {
            const char *recipe = field(line, "recipe");
            if (recipe && *recipe == '"') {
                const char *end = strchr(recipe + 1, '"');
                if (end && end - recipe - 1 < (long)sizeof run->label)
                    snprintf(run->label, sizeof run->label, "%.*s", (int)(end - recipe - 1), recipe + 1);
            }
        } else if (strncmp(type, "\"train\"", 7) == 0 && number_field(line, "step", &step) &&
                   number_field(line, "loss", &value) && isfinite(value)) {
            ok = series_push(&run->train, step, value);
        } else if (strncmp(type, "\"val\"", 5) == 0 && number_field(line, "step", &step) &&
                   number_field(line, "val_loss", &value) && isfinite(value)) {
            ok = series_push(&run->val, step, value);
        }
    }
    fclose(fp);
    if (!ok) {
        run_metrics_free(run);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "metrics: out of memory");
    }
    if (run->train.count == 0 && run->val.count == 0) {
        run_metrics_free(run);
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "metrics file '%s' has no loss values (%zu lines)",
                         path, lines);
    }
    return BFP8_OK;
}

void run_metrics_free(run_metrics *run) {
    free(run->train.step), free(run->train.value);
    free(run->val.step), free(run->val.value);
    memset(&run->train, 0, sizeof run->train);
    memset(&run->val, 0, sizeof run->val);
}
