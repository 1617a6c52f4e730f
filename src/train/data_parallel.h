/*
 * data_parallel.h - data parallelism for `blockfp8 train --data-parallel N`:
 * N worker processes (ranks) on one machine, each with its own model replica
 * and its own share of every batch, the gradients averaged after each step.
 *
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
 * One machine only: the ranks are forked, not started remotely.
 */
#ifndef BFP8_TRAIN_DATA_PARALLEL_H
#define BFP8_TRAIN_DATA_PARALLEL_H

#include <stddef.h>

#include "blockfp8.h"

enum { DP_MAX_RANKS = 64, DP_MAX_SCALARS = 8 };

typedef struct dp_shared dp_shared;

typedef struct dp_group {
    int rank, world;
    dp_shared *shared;   /* the block all ranks map */
    int slots_fd;        /* CPU: the shared memory file behind slots */
    float *slots;        /* CPU: world + 1 slots of capacity floats */
    size_t capacity;
    bfp8_context *ctx;   /* dp_connect's */
    void *nccl;          /* CUDA: ncclComm_t */
} dp_group;

/* Fork `world` workers (1..DP_MAX_RANKS). Returns 0 in each worker, with
 * g->rank and g->world set; returns 1 in the calling process once every
 * worker has ended, with *exit_code 0 when all exited with 0 (128 + the
 * signal when they stopped on a SIGINT or SIGTERM, 1 on a failure). stdout and
 * stderr are flushed first (nothing printed before is printed twice).
 * Returns -1 (nothing forked, message in bfp8_last_error) on failure. */
int dp_launch(dp_group *g, int world, int *exit_code);

/* In a worker, once its context (and model) exist: the gradient transport
 * for up to max_floats floats (NCCL for a CUDA context, shared memory for a
 * CPU one). Every rank must call it; it returns when all have. */
bfp8_status dp_connect(dp_group *g, bfp8_context *ctx, size_t max_floats);

/* data (n floats in the context's memory) := the mean over the ranks of
 * their data; the same result on every rank. */
bfp8_status dp_allreduce_mean(dp_group *g, float *data, size_t n);

/* data (n floats in the context's memory) := rank 0's data. */
bfp8_status dp_broadcast(dp_group *g, float *data, size_t n);

/* v[0..n) := the sum over the ranks of their v (host doubles, n <=
 * DP_MAX_SCALARS), added in rank order: the same bits on every rank. */
void dp_sum_scalars(dp_group *g, double *v, int n);

/* Wait until every rank has arrived. */
void dp_barrier(dp_group *g);

/* Release what dp_connect and dp_launch set up (in a worker). */
void dp_close(dp_group *g);

#endif /* BFP8_TRAIN_DATA_PARALLEL_H */
