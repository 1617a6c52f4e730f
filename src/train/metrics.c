/*
 * metrics.c - JSON-lines metrics: writing, and reading back the few fields
 * the plots need (our own files, so a small field scanner is enough).
 */
#define _DEFAULT_SOURCE /* flock, pread, fdopen */
#include "train/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

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

/* The bytes of buf[0, n) to keep on a resume from step keep_through (metrics.h). */
static size_t kept_prefix(const char *buf, size_t n, int64_t keep_through) {
    size_t start = 0;
    while (start < n) {
        const char *nl = memchr(buf + start, '\n', n - start);
        if (!nl) break; /* a half line */
        const size_t len = (size_t)(nl - (buf + start));
        char line[4096];
        if (len < 2 || len >= sizeof line || buf[start] != '{' || buf[start + len - 1] != '}') break;
        memcpy(line, buf + start, len);
        line[len] = 0;
        double step;
        if ((number_field(line, "step", &step) || number_field(line, "start_step", &step)) &&
            step > (double)keep_through)
            break;
        start += len + 1;
    }
    return start;
}

/* Cut the regular file behind fd to what a resume from keep_through keeps. */
static bfp8_status cut_for_resume(int fd, const char *path, size_t size, int64_t keep_through) {
    char *buf = malloc(size ? size : 1);
    if (!buf) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "metrics file '%s': out of memory", path);
    size_t got = 0;
    while (got < size) {
        const ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    const size_t keep = kept_prefix(buf, got, keep_through);
    free(buf);
    if (ftruncate(fd, (off_t)keep) != 0)
        return bfp8_fail(BFP8_ERR_IO, "cannot cut metrics file '%s' to step %lld: %s", path,
                         (long long)keep_through, strerror(errno));
    return BFP8_OK;
}

bfp8_status metrics_open(metrics_writer *w, const char *path, int64_t keep_through_step) {
    w->fp = NULL;
    w->path = path;
    if (!path) return BFP8_OK;
    const int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd < 0) return bfp8_fail(BFP8_ERR_IO, "cannot open metrics file '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(fd);
        return bfp8_fail(BFP8_ERR_IO, "metrics file '%s' is in use by another run", path);
    }
    struct stat st;
    bfp8_status status = BFP8_OK;
    if (fstat(fd, &st) != 0)
        status = bfp8_fail(BFP8_ERR_IO, "metrics file '%s': %s", path, strerror(errno));
    else if (S_ISREG(st.st_mode) && keep_through_step < 0 && ftruncate(fd, 0) != 0)
        status = bfp8_fail(BFP8_ERR_IO, "cannot empty metrics file '%s': %s", path, strerror(errno));
    else if (S_ISREG(st.st_mode) && keep_through_step >= 0)
        status = cut_for_resume(fd, path, (size_t)st.st_size, keep_through_step);
    if (status == BFP8_OK) {
        w->fp = fdopen(fd, "a");
        if (!w->fp) status = bfp8_fail(BFP8_ERR_IO, "metrics file '%s': %s", path, strerror(errno));
    }
    if (status != BFP8_OK) close(fd);
    return status;
}

void metrics_close(metrics_writer *w) {
    if (w->fp) fclose(w->fp);
    w->fp = NULL;
}

bfp8_status metrics_write(metrics_writer *w, const char *type, const char *fields_fmt, ...) {
    if (!w->fp) return BFP8_OK;
    fprintf(w->fp, "{\"type\":\"%s\",", type);
    va_list args;
    va_start(args, fields_fmt);
    vfprintf(w->fp, fields_fmt, args);
    va_end(args);
    fputs("}\n", w->fp);
    errno = 0;
    if (fflush(w->fp) != 0 || ferror(w->fp))
        return bfp8_fail(BFP8_ERR_IO, "cannot write metrics file '%s': %s", w->path,
                         strerror(errno ? errno : EIO));
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */

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
