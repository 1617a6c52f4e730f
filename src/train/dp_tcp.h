/*
 * dp_tcp.h - the ranks' transport over TCP when a launcher started them
 * (data_parallel.h): a star through rank 0, every exchange in a fixed order
 * and of sizes both sides know, every wait bounded by g->timeout_s.
 */
#ifndef BFP8_TRAIN_DP_TCP_H
#define BFP8_TRAIN_DP_TCP_H

#include <stddef.h>

#include "train/data_parallel.h"

bfp8_status dp_tcp_barrier(dp_group *g);
bfp8_status dp_tcp_sum_scalars(dp_group *g, double *v, int n);
/* bytes of rank 0's data to every rank (host memory) */
bfp8_status dp_tcp_broadcast(dp_group *g, void *data, size_t bytes);
/* the rank-ordered mean of n host floats: to every rank (scatter 0), or each
 * rank's shard to it (scatter 1) */
bfp8_status dp_tcp_reduce_mean(dp_group *g, float *data, size_t n, int scatter);
bfp8_status dp_tcp_all_gather(dp_group *g, float *data, size_t n);
void dp_tcp_close(dp_group *g);

#endif /* BFP8_TRAIN_DP_TCP_H */
