/*
 * data_parallel.c - forked worker processes, their shared-memory meeting
 * point, and the gradient transport (data_parallel.h); the ranks a launcher
 * started meet over TCP instead (dp_tcp.c).
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
#include "train/dp_tcp.h"
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
    g->world = g->local_world = world;
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
            g->rank = g->local_rank = r;
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

static void shared_barrier(dp_group *g) { pthread_barrier_wait(&g->shared->barrier); }

bfp8_status dp_barrier(dp_group *g) {
    if (g->peers) return dp_tcp_barrier(g);
    shared_barrier(g);
    return BFP8_OK;
}

bfp8_status dp_sum_scalars(dp_group *g, double *v, int n) {
    if (n > DP_MAX_SCALARS) n = DP_MAX_SCALARS;
    if (g->peers) return dp_tcp_sum_scalars(g, v, n);
    memcpy(g->shared->scalars[g->rank], v, (size_t)n * sizeof *v);
    shared_barrier(g);
    for (int i = 0; i < n; ++i) {
        double s = 0.0;
        for (int r = 0; r < g->world; ++r) s += g->shared->scalars[r][i];
        v[i] = s;
    }
    shared_barrier(g); /* nobody writes its row again before everyone has read */
    return BFP8_OK;
}

void dp_shard_range(const dp_group *g, int rank, size_t n, size_t *lo, size_t *hi) {
    const size_t size = n / (size_t)g->world / DP_SHARD_ALIGN * DP_SHARD_ALIGN;
    *lo = (size_t)rank * size;
    *hi = rank == g->world - 1 ? n : *lo + size;
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
        memset(&id, 0, sizeof id);
        bfp8_status st = BFP8_OK;
        if (g->rank == 0) st = nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
        double failed = st != BFP8_OK; /* rank 0's verdict reaches everyone */
        if (g->peers) {
            BFP8_TRY(dp_tcp_sum_scalars(g, &failed, 1));
            if (failed == 0.0) BFP8_TRY(dp_tcp_broadcast(g, &id, sizeof id));
        } else {
            if (g->rank == 0) memcpy(g->shared->nccl_id, &id, sizeof id);
            BFP8_TRY(dp_sum_scalars(g, &failed, 1));
            memcpy(&id, g->shared->nccl_id, sizeof id);
        }
        if (st != BFP8_OK) return st;
        if (failed != 0.0) return bfp8_fail(BFP8_ERR_CUDA, "data parallel: rank 0 could not make the NCCL id");
        if (cudaSetDevice(ctx->device) != cudaSuccess)
            return bfp8_fail(BFP8_ERR_CUDA, "data parallel: cudaSetDevice(%d) failed", ctx->device);
        ncclComm_t comm;
        BFP8_TRY(nccl_check(ncclCommInitRank(&comm, g->world, id, g->rank), "ncclCommInitRank"));
        g->nccl = comm;
        cudaStream_t stream;
        cudaEvent_t compute_done, comm_done;
        if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
            return bfp8_fail(BFP8_ERR_CUDA, "data parallel: no communication stream");
        g->comm_stream = stream;
        if (cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&comm_done, cudaEventDisableTiming) != cudaSuccess)
            return bfp8_fail(BFP8_ERR_CUDA, "data parallel: no events");
        g->compute_done = compute_done;
        g->comm_done = comm_done;
        return BFP8_OK;
#else
        (void)max_floats;
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "data parallel on CUDA devices needs NCCL, and this build has none");
#endif
    }
    g->capacity = max_floats;
    if (g->peers) return BFP8_OK; /* the gradients go through rank 0's sockets */
    const size_t bytes = (size_t)(g->world + 1) * max_floats * sizeof(float);
    int err = 0;
    if (g->rank == 0) {
        if (ftruncate(g->slots_fd, (off_t)bytes) != 0) err = errno;
        g->shared->scalars[0][0] = err; /* rank 0's verdict, read after the barrier */
    }
    shared_barrier(g);
    err = (int)g->shared->scalars[0][0];
    shared_barrier(g);
    if (err) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data parallel: %zu bytes of shared memory: %s", bytes,
                              strerror(err));
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g->slots_fd, 0);
    if (p == MAP_FAILED)
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "data parallel: mapping %zu bytes: %s", bytes, strerror(errno));
    g->slots = p;
    return BFP8_OK;
}

static bfp8_status check_capacity(const dp_group *g, size_t n) {
    if (n > g->capacity)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "data parallel: %zu floats, connected for %zu", n, g->capacity);
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
    BFP8_TRY(check_capacity(g, n));
    if (g->peers) return dp_tcp_reduce_mean(g, data, n, 0);
    const size_t cap = g->capacity;
    float *result = g->slots + (size_t)g->world * cap;
    memcpy(g->slots + (size_t)g->rank * cap, data, n * sizeof *data);
    shared_barrier(g);
    /* each rank reduces its share, adding the ranks' values in rank order */
    const size_t lo = n * (size_t)g->rank / (size_t)g->world, hi = n * (size_t)(g->rank + 1) / (size_t)g->world;
    const float world = (float)g->world;
    for (size_t i = lo; i < hi; ++i) {
        float s = g->slots[i];
        for (int r = 1; r < g->world; ++r) s += g->slots[(size_t)r * cap + i];
        result[i] = s / world;
    }
    shared_barrier(g);
    memcpy(data, result, n * sizeof *data);
    shared_barrier(g); /* the result stays put until everyone has it */
    return BFP8_OK;
}

bfp8_status dp_allreduce_mean_start(dp_group *g, float *data, size_t n) {
    if (!on_gpu(g)) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "data parallel: overlapped reductions need CUDA ranks");
#ifdef BFP8_WITH_NCCL
    const cudaStream_t compute = (cudaStream_t)g->ctx->stream, comm = (cudaStream_t)g->comm_stream;
    if (cudaEventRecord((cudaEvent_t)g->compute_done, compute) != cudaSuccess ||
        cudaStreamWaitEvent(comm, (cudaEvent_t)g->compute_done, 0) != cudaSuccess)
        return bfp8_fail(BFP8_ERR_CUDA, "data parallel: ordering a reduction after the backward");
    ++g->pending;
    return nccl_check(ncclAllReduce(data, data, n, ncclFloat, ncclAvg, (ncclComm_t)g->nccl, comm), "ncclAllReduce");
#else
    (void)data, (void)n;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "data parallel: no NCCL in this build");
#endif
}

bfp8_status dp_allreduce_wait(dp_group *g) {
    if (!g->pending) return BFP8_OK;
#ifdef BFP8_WITH_NCCL
    g->pending = 0;
    if (cudaEventRecord((cudaEvent_t)g->comm_done, (cudaStream_t)g->comm_stream) != cudaSuccess ||
        cudaStreamWaitEvent((cudaStream_t)g->ctx->stream, (cudaEvent_t)g->comm_done, 0) != cudaSuccess)
        return bfp8_fail(BFP8_ERR_CUDA, "data parallel: waiting for the reductions");
#endif
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
    BFP8_TRY(check_capacity(g, n));
    if (g->peers) return dp_tcp_broadcast(g, data, n * sizeof *data);
    if (g->rank == 0) memcpy(g->slots, data, n * sizeof *data);
    shared_barrier(g);
    if (g->rank != 0) memcpy(data, g->slots, n * sizeof *data);
    shared_barrier(g);
    return BFP8_OK;
}

/* NCCL's collectives take equal shards: those of the first world - 1 ranks
 * and as much of the last one's, plus the remainder (the last rank's), which
 * goes as a collective of its own in the same group. */
bfp8_status dp_reduce_scatter_mean(dp_group *g, float *data, size_t n) {
    size_t lo, hi;
    dp_shard_range(g, g->rank, n, &lo, &hi);
    if (on_gpu(g)) {
#ifdef BFP8_WITH_NCCL
        size_t shard, unused;
        dp_shard_range(g, 0, n, &unused, &shard);
        const size_t even = shard * (size_t)g->world; /* what NCCL reduce-scatters */
        const ncclComm_t comm = (ncclComm_t)g->nccl;
        const cudaStream_t s = (cudaStream_t)g->ctx->stream;
        BFP8_TRY(nccl_check(ncclGroupStart(), "ncclGroupStart"));
        ncclResult_t r = ncclSuccess;
        if (shard > 0) r = ncclReduceScatter(data, data + lo, shard, ncclFloat, ncclAvg, comm, s);
        if (r == ncclSuccess && n > even) r = ncclAllReduce(data + even, data + even, n - even, ncclFloat, ncclAvg,
                                                            comm, s);
        const ncclResult_t end = ncclGroupEnd();
        BFP8_TRY(nccl_check(r, "ncclReduceScatter"));
        return nccl_check(end, "ncclGroupEnd");
#else
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "data parallel: no NCCL in this build");
#endif
    }
    BFP8_TRY(check_capacity(g, n));
    if (g->peers) return dp_tcp_reduce_mean(g, data, n, 1);
    const size_t cap = g->capacity;
    memcpy(g->slots + (size_t)g->rank * cap, data, n * sizeof *data);
    shared_barrier(g);
    const float world = (float)g->world;
    for (size_t i = lo; i < hi; ++i) { /* dp_allreduce_mean's sum, element by element */
        float s = g->slots[i];
        for (int r = 1; r < g->world; ++r) s += g->slots[(size_t)r * cap + i];
        data[i] = s / world;
    }
    shared_barrier(g); /* the slots stay put until everyone has read them */
    return BFP8_OK;
}

bfp8_status dp_all_gather(dp_group *g, float *data, size_t n) {
    size_t lo, hi;
    dp_shard_range(g, g->rank, n, &lo, &hi);
    if (on_gpu(g)) {
#ifdef BFP8_WITH_NCCL
        size_t shard, unused;
        dp_shard_range(g, 0, n, &unused, &shard);
        const size_t even = shard * (size_t)g->world; /* what NCCL all-gathers */
        const ncclComm_t comm = (ncclComm_t)g->nccl;
        const cudaStream_t s = (cudaStream_t)g->ctx->stream;
        BFP8_TRY(nccl_check(ncclGroupStart(), "ncclGroupStart"));
        ncclResult_t r = ncclSuccess;
        if (shard > 0) r = ncclAllGather(data + lo, data, shard, ncclFloat, comm, s);
        if (r == ncclSuccess && n > even)
            r = ncclBroadcast(data + even, data + even, n - even, ncclFloat, g->world - 1, comm, s);
        const ncclResult_t end = ncclGroupEnd();
        BFP8_TRY(nccl_check(r, "ncclAllGather"));
        return nccl_check(end, "ncclGroupEnd");
#else
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "data parallel: no NCCL in this build");
#endif
    }
    BFP8_TRY(check_capacity(g, n));
    if (g->peers) return dp_tcp_all_gather(g, data, n);
    float *result = g->slots + (size_t)g->world * g->capacity;
    memcpy(result + lo, data + lo, (hi - lo) * sizeof *data);
    shared_barrier(g);
    memcpy(data, result, n * sizeof *data);
    shared_barrier(g);
    return BFP8_OK;
}

void dp_close(dp_group *g) {
#ifdef BFP8_WITH_NCCL
    if (g->comm_stream) cudaStreamSynchronize((cudaStream_t)g->comm_stream);
    if (g->nccl) ncclCommDestroy((ncclComm_t)g->nccl);
    if (g->comm_stream) cudaStreamDestroy((cudaStream_t)g->comm_stream);
    if (g->compute_done) cudaEventDestroy((cudaEvent_t)g->compute_done);
    if (g->comm_done) cudaEventDestroy((cudaEvent_t)g->comm_done);
#endif
    g->comm_stream = g->compute_done = g->comm_done = NULL;
    g->nccl = NULL;
    if (g->slots) munmap(g->slots, (size_t)(g->world + 1) * g->capacity * sizeof(float));
    g->slots = NULL;
    dp_tcp_close(g);
    release_shared(g);
}
