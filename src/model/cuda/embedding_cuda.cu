/*
 * embedding_cuda.cu - the token embedding on the GPU, forward (a gather of
 * table rows) and backward (each id's rows of the output gradient summed in
 * token order, deterministic). See model_kernels.cuh.
 */
#include <cub/device/device_radix_sort.cuh>
#include <limits.h>

#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

template <int V>
__global__ void embedding_forward_kernel(float *__restrict__ out, const int32_t *__restrict__ tokens,
                                         const float *__restrict__ table, int64_t count, int64_t dim) {
    const int64_t vecs = dim / V;
    for (int64_t t = blockIdx.x; t < count; t += gridDim.x) {
        const float *src = table + (int64_t)tokens[t] * dim;
        float *dst = out + t * dim;
        for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < vecs;
             j += (int64_t)gridDim.y * blockDim.x)
            store<V>(dst + j * V, load<V>(src + j * V));
    }
}

__global__ void iota_kernel(int32_t *__restrict__ out, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = (int32_t)i;
}

/* sorted_tokens / sorted_positions: the token ids sorted stably with their
 * positions, so each id's positions form one run in increasing order. The
 * block at the start of a run adds the run's dout rows to that id's row in
 * that order: the CPU's additions exactly, and distinct runs write distinct
 * rows, so no two blocks touch the same floats. Other blocks leave at once. */
template <int V>
__global__ void embedding_backward_runs_kernel(float *__restrict__ dtable, const float *__restrict__ dout,
                                               const int32_t *__restrict__ sorted_tokens,
                                               const int32_t *__restrict__ sorted_positions, int64_t count,
                                               int64_t dim) {
    const int64_t vecs = dim / V;
    for (int64_t start = blockIdx.x; start < count; start += gridDim.x) {
        const int32_t token = sorted_tokens[start];
        if (start > 0 && sorted_tokens[start - 1] == token) continue; /* not a run start (block-uniform) */
        /* Equal ids are contiguous, so in a window that starts inside the
         * run the matches are a prefix: count them window by window. */
        int64_t end = start;
        for (;;) {
            const int64_t k = end + threadIdx.x;
            const int same = __syncthreads_count(k < count && sorted_tokens[k] == token);
            end += same;
            if (same < (int)blockDim.x) break;
        }
        float *row = dtable + (int64_t)token * dim;
        for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < vecs;
             j += (int64_t)gridDim.y * blockDim.x) {
            floats<V> acc = load<V>(row + j * V);
            /* A frequent id makes a long run that few threads walk: load
             * kBatch rows before adding them (in order), so that many loads
             * are in flight instead of one. */
            constexpr int kBatch = 8;
            int64_t k = start;
            for (; k + kBatch <= end; k += kBatch) {
                floats<V> d[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) d[u] = load<V>(dout + (int64_t)sorted_positions[k + u] * dim + j * V);
#pragma unroll
                for (int u = 0; u < kBatch; ++u)
#pragma unroll
                    for (int e = 0; e < V; ++e) acc.v[e] += d[u].v[e];
            }
            for (; k < end; ++k) {
                const floats<V> d = load<V>(dout + (int64_t)sorted_positions[k] * dim + j * V);
#pragma unroll
                for (int e = 0; e < V; ++e) acc.v[e] += d.v[e];
            }
            store<V>(row + j * V, acc);
        }
    }
}

} /* namespace */

extern "C" void embedding_forward_cuda(model_ops_ctx *oc, float *out, const int32_t *tokens, const float *table,
                                       int64_t count, int64_t dim) {
    if (count <= 0 || dim <= 0) return;
    const bool vec = dim % 4 == 0 && aligned16(out) && aligned16(table);
    const int64_t items = vec ? dim / 4 : dim;
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(count, items, threads);
    if (vec)
        embedding_forward_kernel<4><<<grid, threads, 0, stream(oc)>>>(out, tokens, table, count, dim);
    else
        embedding_forward_kernel<1><<<grid, threads, 0, stream(oc)>>>(out, tokens, table, count, dim);
    check_launch(oc, "embedding_forward");
}

/* Deterministic instead of a float atomicAdd per element: sort the ids
 * (CUB's radix sort is stable, so each id's positions stay in token order),
 * then one block per run of equal ids sums the run's rows in that order.
 * The sort costs a few short launches over `count` ints, little next to the
 * count x dim floats the sums read. The price of the CPU's order: a very
 * frequent id is one chain of additions per column, walked by dim / 4
 * threads, so a batch where one id fills a tenth of the tokens takes a few
 * times longer than one of distinct ids. */
extern "C" void embedding_backward_cuda(model_ops_ctx *oc, float *dtable, const float *dout, const int32_t *tokens,
                                        int64_t count, int64_t dim) {
    if (count <= 0 || dim <= 0) return;
    if (count > INT_MAX) { /* positions are int32 */
        failed(oc, cudaErrorInvalidValue, "embedding_backward (more than INT_MAX tokens)");
        return;
    }
    const int n = (int)count;
    size_t sort_bytes = 0;
    if (failed(oc,
               cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, tokens, (int32_t *)nullptr,
                                               (const int32_t *)nullptr, (int32_t *)nullptr, n, 0, 32, stream(oc)),
               "embedding_backward (sort size)"))
        return;
    const size_t ints = round_up_256((size_t)count * sizeof(int32_t));
    char *base = (char *)device_scratch(oc, &model_cuda_state::embedding_sort, 3 * ints + sort_bytes,
                                        "embedding_backward (scratch)");
    if (!base) return;
    int32_t *positions = (int32_t *)base, *sorted_tokens = (int32_t *)(base + ints),
            *sorted_positions = (int32_t *)(base + 2 * ints);
    iota_kernel<<<grid_for(count, kThreads), kThreads, 0, stream(oc)>>>(positions, count);
    check_launch(oc, "embedding_backward (positions)");
    if (failed(oc,
               cub::DeviceRadixSort::SortPairs(base + 3 * ints, sort_bytes, tokens, sorted_tokens, positions,
                                               sorted_positions, n, 0, 32, stream(oc)),
               "embedding_backward (sort)"))
        return;
    const bool vec = dim % 4 == 0 && aligned16(dtable) && aligned16(dout);
    const int64_t items = vec ? dim / 4 : dim;
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(count, items, threads);
    if (vec)
        embedding_backward_runs_kernel<4>
            <<<grid, threads, 0, stream(oc)>>>(dtable, dout, sorted_tokens, sorted_positions, count, dim);
    else
        embedding_backward_runs_kernel<1>
            <<<grid, threads, 0, stream(oc)>>>(dtable, dout, sorted_tokens, sorted_positions, count, dim);
    check_launch(oc, "embedding_backward");
}
