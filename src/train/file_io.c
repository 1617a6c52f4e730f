/*
 * file_io.c - whole-file reads, atomic writes (temp file, fsync, rename).
 */
#define _POSIX_C_SOURCE 200809L
#include "train/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

bfp8_status read_whole_file(const char *path, uint8_t **data, size_t *size) {
    *data = NULL;
    *size = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return bfp8_fail(BFP8_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return bfp8_fail(BFP8_ERR_IO, "'%s' is not a regular file", path);
    }
    const size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n + 1);
    if (!buf) {
        fclose(fp);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "cannot hold '%s' (%zu bytes) in memory", path, n);
    }
    const size_t got = fread(buf, 1, n, fp);
    const int err = ferror(fp);
    fclose(fp);
    if (got != n || err) {
        free(buf);
        return bfp8_fail(BFP8_ERR_IO, "cannot read '%s': short read", path);
    }
    buf[n] = 0;
    *data = buf;
    *size = n;
    return BFP8_OK;
}

bfp8_status atomic_file_open(atomic_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    if (strlen(path) >= sizeof f->path)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "path too long: '%s'", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->temp_path, sizeof f->temp_path, "%s.tmp.%ld", path, (long)getpid());
    f->had_target = access(path, F_OK) == 0;
    f->fp = fopen(f->temp_path, "wb");
    if (!f->fp)
        return bfp8_fail(BFP8_ERR_IO, "cannot create '%s': %s", f->temp_path, strerror(errno));
    return BFP8_OK;
}

void atomic_file_write(atomic_file *f, const void *data, size_t n) {
    if (f->failed || n == 0) return;
    if (fwrite(data, 1, n, f->fp) != n) f->failed = errno ? errno : EIO;
}

void atomic_file_abort(atomic_file *f) {
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
    if (f->temp_path[0]) remove(f->temp_path);
}

static void sync_directory_of(const char *path) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    const int fd = open(dirname(copy), O_RDONLY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse it on directories */
        close(fd);
    }
}

bfp8_status atomic_file_commit(atomic_file *f) {
    int err = f->failed;
    if (!err && fflush(f->fp) != 0) err = errno;
    if (!err && fsync(fileno(f->fp)) != 0) err = errno;
    if (fclose(f->fp) != 0 && !err) err = errno;
    f->fp = NULL;
    if (!err && rename(f->temp_path, f->path) != 0) err = errno;
    if (err) {
        remove(f->temp_path);
        return bfp8_fail(BFP8_ERR_IO, "cannot write '%s': %s (%s)", f->path, strerror(err),
                         f->had_target ? "the previous file is untouched" : "there was none before");
    }
    sync_directory_of(f->path);
    return BFP8_OK;
}

bfp8_status atomic_file_write_all(const char *path, const void *data, size_t n) {
    atomic_file f;
    BFP8_TRY(atomic_file_open(&f, path));
    atomic_file_write(&f, data, n);
    return atomic_file_commit(&f);
}

bfp8_status make_directories(const char *path) {
    char buf[4096];
    if (strlen(path) >= sizeof buf) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "path too long");
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; ; ++p) {
        if (*p == '/' || *p == 0) {
            const char saved = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return bfp8_fail(BFP8_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
            *p = saved;
            if (!saved) break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return bfp8_fail(BFP8_ERR_IO, "'%s' is not a directory", path);
    return BFP8_OK;
}
