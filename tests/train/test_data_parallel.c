/*
 * test_data_parallel.c - the ranks of src/train/data_parallel.c on the CPU:
 * three forked workers average a buffer whose length does not divide by
 * three (the result must be the rank-ordered float sum over 3, the same bits
 * on every rank), reduce-scatter it (each rank's shard: the same bits as the
 * all-reduce; shards aligned, the last one taking the remainder) and
 * all-gather shards, broadcast rank 0's buffer, sum host scalars in rank order,
 * refuse a buffer longer than they connected for; a worker that dies while
 * the others wait in a barrier ends the run with a failure, promptly; bad
 * rank counts are refused.
 *
 *   ctest --test-dir build -R train_data_parallel
 *
 * Each worker checks its own results and reports through its exit code;
 * the supervisor (this process) sees them all through dp_launch's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "train/data_parallel.h"

enum { kRanks = 3, kCount = 997, kCapacity = 1000 };

static float value_of(int rank, int i) { return (float)rank * 0.37f + (float)i * 1e-3f + 1.0f / (float)(i + 1); }

/* A worker's checks; returns its exit code (0: all held). */
static int worker(dp_group *g) {
    bfp8_context *ctx = NULL;
    if (bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0) != BFP8_OK) return 10;
    if (dp_connect(g, ctx, kCapacity) != BFP8_OK) return 11;
    float *data = malloc(kCapacity * sizeof *data);
    if (!data) return 12;
    int bad = 0;

    /* mean: (v0 + v1 + v2) / 3 in float, in rank order */
    for (int i = 0; i < kCount; ++i) data[i] = value_of(g->rank, i);
    if (dp_allreduce_mean(g, data, kCount) != BFP8_OK) bad |= 1;
    for (int i = 0; i < kCount; ++i) {
        float sum = value_of(0, i);
        for (int r = 1; r < kRanks; ++r) sum += value_of(r, i);
        const float want = sum / (float)kRanks;
        if (memcmp(&data[i], &want, sizeof want) != 0) bad |= 2;
    }
    /* shards: contiguous, aligned, covering the buffer */
    size_t lo, hi, end = 0;
    for (int r = 0; r < kRanks; ++r) {
        dp_shard_range(g, r, kCount, &lo, &hi);
        if (lo != end || (r < kRanks - 1 && (hi - lo) % DP_SHARD_ALIGN != 0) || hi < lo) bad |= 64;
        end = hi;
    }
    if (end != kCount) bad |= 64;
    /* reduce-scatter: this rank's shard holds the all-reduce's bits */
    dp_shard_range(g, g->rank, kCount, &lo, &hi);
    for (int i = 0; i < kCount; ++i) data[i] = value_of(g->rank, i);
    if (dp_reduce_scatter_mean(g, data, kCount) != BFP8_OK) bad |= 128;
    for (size_t i = lo; i < hi; ++i) {
        float sum = value_of(0, (int)i);
        for (int r = 1; r < kRanks; ++r) sum += value_of(r, (int)i);
        const float want = sum / (float)kRanks;
        if (memcmp(&data[i], &want, sizeof want) != 0) bad |= 128;
    }
    /* all-gather: each rank's shard of its own values, put together */
    for (int i = 0; i < kCount; ++i) data[i] = -1.0f;
    for (size_t i = lo; i < hi; ++i) data[i] = value_of(g->rank, (int)i);
    if (dp_all_gather(g, data, kCount) != BFP8_OK) bad |= 256;
    for (int r = 0; r < kRanks; ++r) {
        dp_shard_range(g, r, kCount, &lo, &hi);
        for (size_t i = lo; i < hi; ++i)
            if (data[i] != value_of(r, (int)i)) bad |= 256;
    }
    /* broadcast: everyone ends with rank 0's values */
    for (int i = 0; i < kCount; ++i) data[i] = value_of(g->rank, i) * 3.0f;
    if (dp_broadcast(g, data, kCount) != BFP8_OK) bad |= 4;
    for (int i = 0; i < kCount; ++i)
        if (data[i] != value_of(0, i) * 3.0f) bad |= 8;
    /* scalars: sums in rank order */
    double v[2] = {(double)g->rank, 0.25 * (double)g->rank + 1.0};
    if (dp_sum_scalars(g, v, 2) != BFP8_OK) bad |= 16;
    if (v[0] != 3.0 || v[1] != 0.25 * 3.0 + 3.0) bad |= 16;
    /* more than the connection holds: refused, nothing else happens */
    if (dp_allreduce_mean(g, data, kCapacity + 1) != BFP8_ERR_INVALID_VALUE) bad |= 32;
    dp_barrier(g);
    free(data);
    dp_close(g);
    bfp8_context_destroy(ctx);
    if (bad) fprintf(stderr, "rank %d: failed checks 0x%x\n", g->rank, (unsigned)bad);
    return bad ? 1 : 0;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    dp_group g;
    int exit_code = -1;
    const int who = dp_launch(&g, kRanks, &exit_code);
    if (who == 0) _exit(worker(&g)); /* a worker never returns into the test */
    CHECK(who == 1, "dp_launch returned %d in the supervisor", who);
    CHECK(exit_code == 0, "the workers' checks failed (exit code %d)", exit_code);

    /* Rank 1 dies while rank 0 waits for it in a barrier: the run fails, and
     * soon (the supervisor stops rank 0 after its grace period). */
    const double t0 = now_seconds();
    exit_code = -1;
    const int who2 = dp_launch(&g, 2, &exit_code);
    if (who2 == 0) {
        if (g.rank == 1) _exit(5);
        dp_barrier(&g); /* never passes: rank 1 is gone */
        _exit(0);
    }
    const double waited = now_seconds() - t0;
    CHECK(who2 == 1 && exit_code == 1, "a dead rank: dp_launch %d, exit code %d (expected 1, 1)", who2, exit_code);
    CHECK(waited < 20.0, "a dead rank took %.1f s to end the run", waited);

    /* Bad rank counts: refused, nothing forked. */
    CHECK(dp_launch(&g, 0, &exit_code) == -1, "0 ranks accepted");
    CHECK(dp_launch(&g, DP_MAX_RANKS + 1, &exit_code) == -1, "%d ranks accepted", DP_MAX_RANKS + 1);
    return test_exit_code("train_data_parallel");
}
