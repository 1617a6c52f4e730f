/*
 * data_parallel.h - data parallelism for `blockfp8 train`: N processes
 * (ranks), each with its own model replica and its own share of every batch,
 * the gradients averaged after each step (or, with ZeRO-1, reduce-scattered
 * and the updated weights all-gathered: zero_optimizer.h). The ranks come
 * about in one of two ways:
 *
 * Forked (`--data-parallel N`), one machine:
 *   - dp_launch forks the N workers; the calling process becomes their
 *     supervisor: it waits for them and, when one fails, stops the others
 *     (a rank that is gone would leave the rest waiting in a collective); a
 *     SIGINT or SIGTERM it gets goes on to the workers (stop_signal.h), and
 *     a worker never outlives it;
 *   - ranks meet in a small block of shared memory (a process-shared
 *     barrier, the NCCL id, scalar sums);
 *   - the gradients go through NCCL between GPUs (rank r on CUDA device r,
 *     in place on the context's stream) and through shared memory between
 *     CPU processes (every rank sums the ranks' slots in rank order, so the
 *     result is the same bits on every rank and from run to run);
 *   - host scalars (losses, counts) are summed through shared memory, in
 *     rank order, on either backend.
 *
 * Started by a launcher (torchrun, mpirun -x, a job script), any machines:
 * RANK and WORLD_SIZE in the environment make the process one rank
 * (dp_join_environment, dp_tcp.c); the ranks meet over TCP at
 * MASTER_ADDR:MASTER_PORT, where rank 0 listens. Barrier, scalar sums and the
 * NCCL id go through rank 0 (a star); CPU ranks send their gradients the same
 * way, and rank 0 adds them in rank order, so the results are the bits of
 * forked CPU ranks. A rank that exits closes its connection: the others stop
 * with an error naming it at their next exchange (rank 0 at once; the rest
 * when rank 0 has gone), and every wait has a timeout (BLOCKFP8_DP_TIMEOUT
 * seconds, default 900).
 *
 * Shards (ZeRO-1): the n floats of a buffer are cut into world contiguous
 * shards of equal size rounded down to DP_SHARD_ALIGN floats; the last rank
 * takes the remainder too (dp_shard_range).
 */
#ifndef BFP8_TRAIN_DATA_PARALLEL_H
#define BFP8_TRAIN_DATA_PARALLEL_H

#include <stddef.h>

#include "blockfp8.h"

enum { DP_MAX_RANKS = 64, DP_MAX_SCALARS = 8, DP_SHARD_ALIGN = 64 };

typedef struct dp_shared dp_shared;

typedef struct dp_group {
    int rank, world;
    int local_rank;      /* launcher: LOCAL_RANK, the CUDA device; forked: rank */
    int local_world;     /* ranks on this machine (launcher: LOCAL_WORLD_SIZE, else WORLD_SIZE) */
    dp_shared *shared;   /* forked: the block all ranks map */
    int *peers;          /* launcher: rank 0: the sockets of ranks 1..world-1 (peers[r]); others: peers[0] */
    double timeout_s;    /* launcher: the longest wait for a peer */
    float *net_buffer;   /* launcher, rank 0: a chunk of a peer's gradients */
    int slots_fd;        /* CPU: the shared memory file behind slots */
    float *slots;        /* CPU: world + 1 slots of capacity floats */
    size_t capacity;
    bfp8_context *ctx;   /* dp_connect's */
    void *nccl;          /* CUDA: ncclComm_t */
    /* CUDA: the stream the overlapped reductions run on, and the events between it and the context's */
    void *comm_stream, *compute_done, *comm_done; /* cudaStream_t, cudaEvent_t, cudaEvent_t */
    int pending;         /* reductions started since the last dp_allreduce_wait */
} dp_group;

/* Fork `world` workers (1..DP_MAX_RANKS). Returns 0 in each worker, with
 * g->rank and g->world set; returns 1 in the calling process once every
 * worker has ended, with *exit_code 0 when all exited with 0 (128 + the
 * signal when they stopped on a SIGINT or SIGTERM, 1 on a failure). stdout and
 * stderr are flushed first (nothing printed before is printed twice).
 * Returns -1 (nothing forked, message in bfp8_last_error) on failure. */
int dp_launch(dp_group *g, int world, int *exit_code);

/* Whether a launcher started this process as one rank: RANK and WORLD_SIZE
 * are set (either alone is an error: -1 with the message). 0: neither. */
int dp_environment_present(void);

/* Join the ranks a launcher started (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT): rank 0 listens, the others connect; returns
 * when all are there (or with an error after the timeout). */
bfp8_status dp_join_environment(dp_group *g);

/* In a worker, once its context (and model) exist: the gradient transport
 * for up to max_floats floats (NCCL for a CUDA context, shared memory for a
 * CPU one). Every rank must call it; it returns when all have. */
bfp8_status dp_connect(dp_group *g, bfp8_context *ctx, size_t max_floats);

/* data (n floats in the context's memory) := the mean over the ranks of
 * their data; the same result on every rank. */
bfp8_status dp_allreduce_mean(dp_group *g, float *data, size_t n);
/* CUDA: the same for a part of the gradients, overlapped with the work that
 * follows: it starts on the communication stream once what the context's
 * stream holds so far is done (a block's backward, say), while that stream
 * goes on. dp_allreduce_wait makes the context's stream wait for every
 * reduction started since the last wait. The same sums as one
 * dp_allreduce_mean over the whole, element by element. */
bfp8_status dp_allreduce_mean_start(dp_group *g, float *data, size_t n);
bfp8_status dp_allreduce_wait(dp_group *g);

/* data (n floats in the context's memory) := rank 0's data. */
bfp8_status dp_broadcast(dp_group *g, float *data, size_t n);

/* Rank r's shard of n floats: [*lo, *hi). */
void dp_shard_range(const dp_group *g, int rank, size_t n, size_t *lo, size_t *hi);

/* data[lo, hi) of this rank's shard := the mean over the ranks of their data
 * there (the bits of dp_allreduce_mean); the rest of data is left undefined. */
bfp8_status dp_reduce_scatter_mean(dp_group *g, float *data, size_t n);

/* data (n floats) := every rank's shard of its own data, put together. */
bfp8_status dp_all_gather(dp_group *g, float *data, size_t n);

/* v[0..n) := the sum over the ranks of their v (host doubles, n <=
 * DP_MAX_SCALARS), added in rank order: the same bits on every rank. */
bfp8_status dp_sum_scalars(dp_group *g, double *v, int n);

/* Wait until every rank has arrived. */
bfp8_status dp_barrier(dp_group *g);

/* Release what dp_connect, dp_launch and dp_join_environment set up (in a rank). */
void dp_close(dp_group *g);

#endif /* BFP8_TRAIN_DATA_PARALLEL_H */
