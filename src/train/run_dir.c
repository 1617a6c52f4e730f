/*
 * run_dir.c - the lock of a run directory and its stale temporary files.
 */
#define _DEFAULT_SOURCE /* flock, dirent's d_type */
#include "train/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "train/file_io.h"

bfp8_status run_dir_lock(run_dir *d, const char *path) {
    d->lock_fd = -1;
    BFP8_TRY(make_directories(path));
    char lock_path[4200];
    snprintf(lock_path, sizeof lock_path, "%s/run.lock", path);
    const int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return bfp8_fail(BFP8_ERR_IO, "cannot open the lock file '%s': %s", lock_path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char holder[32] = "";
        const ssize_t got = err == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
        close(fd);
        if (err != EWOULDBLOCK)
            return bfp8_fail(BFP8_ERR_IO, "cannot lock '%s': %s", lock_path, strerror(err));
        holder[got > 0 ? got : 0] = 0;
        const long pid = strtol(holder, NULL, 10);
        char who[48] = "";
        if (pid > 0) snprintf(who, sizeof who, " (pid %ld)", pid);
        return bfp8_fail(BFP8_ERR_IO, "run directory '%s' is in use by another run%s; wait for it to end, or "
                         "choose another --checkpoint-dir", path, who);
    }
    /* The holder's pid, for the message above: best effort, the lock is what counts. */
    char pid[32];
    const int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    const int pid_written = ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)len, 0) == len;
    (void)pid_written;
    d->lock_fd = fd;
    return BFP8_OK;
}

/* checkpoint.bin.tmp.DIGITS: the only file a run writes into its directory
 * through a temporary one (other names are left alone: the directory may
 * hold the user's files too). */
static int is_stale_name(const char *name) {
    static const char prefix[] = "checkpoint.bin.tmp.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0 || name[sizeof prefix - 1] == 0) return 0;
    for (const char *p = name + sizeof prefix - 1; *p; ++p)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

bfp8_status run_dir_remove_stale(const char *path, void (*report)(const char *path, const char *name)) {
    DIR *dir = opendir(path);
    if (!dir) return bfp8_fail(BFP8_ERR_IO, "cannot list '%s': %s", path, strerror(errno));
    bfp8_status st = BFP8_OK;
    for (struct dirent *e; st == BFP8_OK && (e = readdir(dir)) != NULL;) {
        if (!is_stale_name(e->d_name)) continue;
        char file[4400];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        struct stat sb;
        if (lstat(file, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (unlink(file) != 0)
            st = bfp8_fail(BFP8_ERR_IO, "cannot remove the stale temporary file '%s': %s", file, strerror(errno));
        else if (report)
            report(path, e->d_name);
    }
    closedir(dir);
    return st;
}

void run_dir_unlock(run_dir *d) {
    if (d->lock_fd >= 0) close(d->lock_fd);
    d->lock_fd = -1;
}
