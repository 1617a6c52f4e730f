/*
 * run_dir.h - a run directory (--checkpoint-dir) belongs to one run at a
 * time: the run holds an advisory lock on <dir>/run.lock (flock) from its
 * start to its end, and a second run on the same directory is refused. The
 * kernel drops the lock when the process ends, however it ends, so a run
 * that was killed never leaves the directory locked. Data-parallel ranks
 * are forked after the lock is taken and share it with their supervisor.
 *
 * With the lock held, a temporary checkpoint in the directory
 * (checkpoint.bin.tmp.PID, from file_io.h's atomic writes) was left by a run
 * that ended while writing it: run_dir_remove_stale removes such files, and
 * nothing else.
 */
#ifndef BFP8_TRAIN_RUN_DIR_H
#define BFP8_TRAIN_RUN_DIR_H

#include "blockfp8.h"

typedef struct run_dir {
    int lock_fd; /* -1: not held */
} run_dir;

/* Create the directory (mkdir -p) and take its lock. BFP8_ERR_IO with a
 * message naming the holder's pid when another run holds it. */
bfp8_status run_dir_lock(run_dir *d, const char *path);

/* Remove the directory's stale temporary files; report(name) for each. */
bfp8_status run_dir_remove_stale(const char *path, void (*report)(const char *path, const char *name));

/* Give the lock up (closing the lock file; the file stays). */
void run_dir_unlock(run_dir *d);

#endif /* BFP8_TRAIN_RUN_DIR_H */
