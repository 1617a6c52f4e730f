/*
 * data_parallel.c - worker processes, their shared-memory meeting point, and
 * the gradient transport (data_parallel.h).
 */
#define _GNU_SOURCE /* memfd_create */
#include "train/data_parallel.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "train/stop_signal.h"

#ifdef BFP8_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

struct dp_shared {
    pthread_barrier_t barrier;
    unsigned char nccl_id[128]; /* ncclUniqueId, from rank 0 */
    double scalars[DP_MAX_RANKS][DP_MAX_SCALARS];
};

/* ------------------------------------------------------------------------ */
/* The workers and their supervisor                                          */

static void release_shared(dp_group *g) {
    if (g->shared) {
        munmap(g->shared, sizeof *g->shared);
        g->shared = NULL;
    }
    if (g->slots_fd >= 0) close(g->slots_fd);
    g->slots_fd = -1;
}

/* A rank that exits with 128 + SIGINT or SIGTERM stopped on request, with
 * the others, after writing its share of the final checkpoint (stop_signal.h). */
static int stopped_on_request(int status) {
    return WIFEXITED(status) && (WEXITSTATUS(status) == 128 + SIGINT || WEXITSTATUS(status) == 128 + SIGTERM);
}

/* Wait for every worker. When one fails, the others get a moment to end on
 * their own (a failure every rank sees, such as a NaN loss, ends them all);
 * whoever is still running then (waiting for the failed rank in a
 * collective) is stopped. A SIGINT or SIGTERM to this process goes on to the
 * ranks, which stop together after a step (a second one stops them at once).
 * Returns the run's exit code. */
static int supervise(pid_t *pids, int world) {
    enum { kGraceMs = 3000, kPollMs = 10 };
    int alive = world, failed_rank = -1, failed_status = 0, stopped_others = 0, waited_ms = 0;
    int forwarded = 0, killed = 0, stop_code = 0;
    while (alive > 0) {
        int status;
        const pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pid == 0) { /* everyone still running */
            const int sig = stop_signal_received();
            if (sig && !forwarded) {
                for (int r = 0; r < world; ++r)
                    if (pids[r] > 0) kill(pids[r], sig);
                forwarded = 1;
            }
            if (stop_signal_count() >= 2 && !killed) {
                for (int r = 0; r < world; ++r)
                    if (pids[r] > 0) kill(pids[r], SIGKILL);
                killed = 1;
            }
            if (failed_rank >= 0 && waited_ms >= kGraceMs && !stopped_others) {
                for (int r = 0; r < world; ++r) /* not SIGTERM: a rank notes it only between steps */
                    if (pids[r] > 0) kill(pids[r], SIGKILL);
                stopped_others = 1;
            }
            const struct timespec pause = {0, kPollMs * 1000000L};
            nanosleep(&pause, NULL);
            if (failed_rank >= 0) waited_ms += kPollMs;
            continue;
        }
        int rank = -1;
        for (int r = 0; r < world; ++r)
            if (pids[r] == pid) rank = r;
        if (rank < 0) continue;
        pids[rank] = 0;
        --alive;
        if (stopped_on_request(status) && !stopped_others) {
            stop_code = WEXITSTATUS(status);
            continue;
        }
        const int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0) {
            failed_rank = rank;
            failed_status = status;
        }
    }
    if (killed) {
        fflush(stdout);
        fprintf(stderr, "blockfp8 train: a second %s: the ranks were stopped at once (the last checkpoint on disk "
                        "is intact)\n", stop_signal_name(stop_signal_received()));
        return 128 + stop_signal_received();
    }
    if (failed_rank < 0) return stop_code ? (stop_signal_received() ? 128 + stop_signal_received() : stop_code) : 0;
    fflush(stdout);
    if (WIFSIGNALED(failed_status))
        fprintf(stderr, "blockfp8 train: rank %d was killed by signal %d%s\n", failed_rank,
                WTERMSIG(failed_status), stopped_others ? "; the other ranks were stopped" : "");
    else if (stopped_others)
        fprintf(stderr, "blockfp8 train: rank %d failed (exit code %d); the other ranks were stopped\n",
                failed_rank, WEXITSTATUS(failed_status));
    return 1;
}

int dp_launch(dp_group *g, int world, int *exit_code) {
    memset(g, 0, sizeof *g);
    g->slots_fd = -1;
    *exit_code = 1;
    if (world < 1 || world > DP_MAX_RANKS) {
        bfp8_fail(BFP8_ERR_INVALID_VALUE, "--data-parallel %d: between 1 and %d ranks", world, DP_MAX_RANKS);
        return -1;
    }
    g->shared = mmap(NULL, sizeof *g->shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g->shared == MAP_FAILED) {
        g->shared = NULL;
        bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data parallel: shared memory: %s", strerror(errno));
        return -1;
    }
    memset(g->shared, 0, sizeof *g->shared);
    pthread_barrierattr_t attr;
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    const int barrier_err = pthread_barrier_init(&g->shared->barrier, &attr, (unsigned)world);
    pthread_barrierattr_destroy(&attr);
    if (barrier_err) {
        release_shared(g);
        bfp8_fail(BFP8_ERR_INVALID_VALUE, "data parallel: barrier: %s", strerror(barrier_err));
        return -1;
    }
    g->slots_fd = memfd_create("blockfp8-data-parallel", 0);
    if (g->slots_fd < 0) {
        pthread_barrier_destroy(&g->shared->barrier);
        release_shared(g);
        bfp8_fail(BFP8_ERR_IO, "data parallel: memfd_create: %s", strerror(errno));
        return -1;
    }
    g->world = world;
    fflush(stdout);
    fflush(stderr);
    pid_t pids[DP_MAX_RANKS] = {0};
    const pid_t supervisor = getpid();
    for (int r = 0; r < world; ++r) {
        const pid_t pid = fork();
        if (pid == 0) {
            /* a worker: never outlive the supervisor (it stops everyone when one fails) */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != supervisor) _exit(1);
            g->rank = r;
            return 0;
        }
        if (pid < 0) {
            const int err = errno;
            for (int k = 0; k < r; ++k) kill(pids[k], SIGKILL);
            for (int k = 0; k < r; ++k) waitpid(pids[k], NULL, 0);
            release_shared(g);
            bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data parallel: fork: %s", strerror(err));
            return -1;
        }
        pids[r] = pid;
    }
    *exit_code = supervise(pids, world);
    /* no pthread_barrier_destroy: it waits for ranks that were killed inside the barrier */
    release_shared(g);
    return 1;
}

void dp_barrier(dp_group *g) { pthread_barrier_wait(&g->shared->barrier); }

void dp_sum_scalars(dp_group *g, double *v, int n) {
    if (n > DP_MAX_SCALARS) n = DP_MAX_SCALARS;
    memcpy(g->shared->scalars[g->rank], v, (size_t)n * sizeof *v);
    dp_barrier(g);
    for (int i = 0; i < n; ++i) {
        double s = 0.0;
        for (int r = 0; r < g->world; ++r) s += g->shared->scalars[r][i];
        v[i] = s;
    }
    dp_barrier(g); /* nobody writes its row again before everyone has read */
}

/* ------------------------------------------------------------------------ */
/* Gradient transport                                                        */

static int on_gpu(const dp_group *g) { return bfp8_context_backend(g->ctx) == BFP8_BACKEND_CUDA; }

#ifdef BFP8_WITH_NCCL
static bfp8_status nccl_check(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return BFP8_OK;
    return bfp8_fail(BFP8_ERR_CUDA, "data parallel: %s: %s", what, ncclGetErrorString(r));
}
#endif

bfp8_status dp_connect(dp_group *g, bfp8_context *ctx, size_t max_floats) {
    g->ctx = ctx;
    if (on_gpu(g)) {
#ifdef BFP8_WITH_NCCL
        ncclUniqueId id;
        bfp8_status st = BFP8_OK;
        if (g->rank == 0) {
            st = nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
            memcpy(g->shared->nccl_id, &id, sizeof id);
        }
        dp_barrier(g);
        if (st != BFP8_OK) return st;
        memcpy(&id, g->shared->nccl_id, sizeof id);
        if (cudaSetDevice(ctx->device) != cudaSuccess)
            return bfp8_fail(BFP8_ERR_CUDA, "data parallel: cudaSetDevice(%d) failed", ctx->device);
        ncclComm_t comm;
        BFP8_TRY(nccl_check(ncclCommInitRank(&comm, g->world, id, g->rank), "ncclCommInitRank"));
        g->nccl = comm;
        return BFP8_OK;
#else
        (void)max_floats;
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "data parallel on CUDA devices needs NCCL, and this build has none");
#endif
    }
    const size_t bytes = (size_t)(g->world + 1) * max_floats * sizeof(float);
    int err = 0;
    if (g->rank == 0) {
        if (ftruncate(g->slots_fd, (off_t)bytes) != 0) err = errno;
        g->shared->scalars[0][0] = err; /* rank 0's verdict, read after the barrier */
    }
    dp_barrier(g);
    err = (int)g->shared->scalars[0][0];
    dp_barrier(g);
    if (err) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data parallel: %zu bytes of shared memory: %s", bytes,
                              strerror(err));
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g->slots_fd, 0);
    if (p == MAP_FAILED)
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data parallel: mapping %zu bytes: %s", bytes, strerror(errno));
    g->slots = p;
    g->capacity = max_floats;
    return BFP8_OK;
}

bfp8_status dp_allreduce_mean(dp_group *g, float *data, size_t n) {
    if (on_gpu(g)) {
#ifdef BFP8_WITH_NCCL
        return nccl_check(ncclAllReduce(data, data, n, ncclFloat, ncclAvg, (ncclComm_t)g->nccl,
                                        (cudaStream_t)g->ctx->stream),
                          "ncclAllReduce");
#else
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "data parallel: no NCCL in this build");
#endif
    }
    if (n > g->capacity)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "data parallel: %zu floats, connected for %zu", n, g->capacity);
    const size_t cap = g->capacity;
    float *result = g->slots + (size_t)g->world * cap;
    memcpy(g->slots + (size_t)g->rank * cap, data, n * sizeof *data);
    dp_barrier(g);
    /* each rank reduces its share, adding the ranks' values in rank order */
    const size_t lo = n * (size_t)g->rank / (size_t)g->world, hi = n * (size_t)(g->rank + 1) / (size_t)g->world;
    const float world = (float)g->world;
    for (size_t i = lo; i < hi; ++i) {
        float s = g->slots[i];
        for (int r = 1; r < g->world; ++r) s += g->slots[(size_t)r * cap + i];
        result[i] = s / world;
    }
    dp_barrier(g);
    memcpy(data, result, n * sizeof *data);
    dp_barrier(g); /* the result stays put until everyone has it */
    return BFP8_OK;
}

bfp8_status dp_broadcast(dp_group *g, float *data, size_t n) {
    if (on_gpu(g)) {
#ifdef BFP8_WITH_NCCL
        return nccl_check(ncclBroadcast(data, data, n, ncclFloat, 0, (ncclComm_t)g->nccl,
                                        (cudaStream_t)g->ctx->stream),
                          "ncclBroadcast");
#else
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "data parallel: no NCCL in this build");
#endif
    }
    if (n > g->capacity)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "data parallel: %zu floats, connected for %zu", n, g->capacity);
    if (g->rank == 0) memcpy(g->slots, data, n * sizeof *data);
    dp_barrier(g);
    if (g->rank != 0) memcpy(data, g->slots, n * sizeof *data);
    dp_barrier(g);
    return BFP8_OK;
}

void dp_close(dp_group *g) {
#ifdef BFP8_WITH_NCCL
    if (g->nccl) ncclCommDestroy((ncclComm_t)g->nccl);
#endif
    g->nccl = NULL;
    if (g->slots) munmap(g->slots, (size_t)(g->world + 1) * g->capacity * sizeof(float));
    g->slots = NULL;
    release_shared(g);
}
