/*
 * file_io.h - whole-file reads and atomic file writes. A write goes to a
 * temporary file beside the target, is flushed and fsync'ed, and only then
 * renamed over the target: a crash or a failed write never leaves a broken
 * file under the target's name. The temporary file is named
 * <target>.tmp.<pid>; one left by a process killed while writing is removed
 * by the next run on its directory (run_dir.h).
 */
#ifndef BFP8_TRAIN_FILE_IO_H
#define BFP8_TRAIN_FILE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "blockfp8.h"

/* Read a whole file into a malloc'ed buffer (NUL-terminated, not counted). */
bfp8_status read_whole_file(const char *path, uint8_t **data, size_t *size);

typedef struct atomic_file {
    FILE *fp;
    char path[4096];
    char temp_path[4096 + 32];
    int failed;
    int had_target; /* a file of that name was there at open: the messages say it is untouched */
} atomic_file;

bfp8_status atomic_file_open(atomic_file *f, const char *path);
/* Append bytes; errors are remembered and reported by atomic_file_commit. */
void atomic_file_write(atomic_file *f, const void *data, size_t n);
/* Flush, fsync, rename onto the target, fsync the directory. On any failure
 * the temporary file is removed and the target is left as it was. */
bfp8_status atomic_file_commit(atomic_file *f);
void atomic_file_abort(atomic_file *f);
/* The whole of data[0, n) as the new content of path, atomically. */
bfp8_status atomic_file_write_all(const char *path, const void *data, size_t n);

/* mkdir -p. */
bfp8_status make_directories(const char *path);

/* Little-endian packing. */
static inline void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t get_u64(const uint8_t *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

#endif /* BFP8_TRAIN_FILE_IO_H */
