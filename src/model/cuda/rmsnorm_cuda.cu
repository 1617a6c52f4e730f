/*
 * rmsnorm_cuda.cu - RMSNorm on the GPU, forward (fp32 or bf16 out) and
 * backward (dx, and the weight gradient as fixed-order sums over token
 * chunks, in the same pass over dout and x for rows up to 4096). See
 * model_kernels.cuh.
 */
#include <math.h>

#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

/* out: fp32, or bf16 (the input of a bf16 linear layer, rounded here instead
 * of in a pass of its own). */
template <int V, typename Out>
__global__ void rmsnorm_forward_kernel(Out *__restrict__ out, float *__restrict__ rstd,
                                       const float *__restrict__ x, const float *__restrict__ weight,
                                       int64_t tokens, int64_t dim, float eps) {
    const int64_t vecs = dim / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *xt = x + t * dim;
        float sum_sq = 0.0f;
        for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
            const floats<V> a = load<V>(xt + j * V);
#pragma unroll
            for (int e = 0; e < V; ++e) sum_sq += a.v[e] * a.v[e];
        }
        sum_sq = block_reduce(sum_sq, sum_op());
        const float r = 1.0f / sqrtf(sum_sq / (float)dim + eps);
        if (threadIdx.x == 0) rstd[t] = r;
        Out *ot = out + t * dim;
        for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
            const floats<V> a = load<V>(xt + j * V), w = load<V>(weight + j * V);
            floats<V> o;
#pragma unroll
            for (int e = 0; e < V; ++e) o.v[e] = a.v[e] * r * w.v[e];
            store<V>(ot + j * V, o);
        }
    }
}

/* dx += rstd * (g - x * c),  g = dout * weight,  c = sum(g * x) * rstd^2 / dim. */
template <int V, typename D>
__global__ void rmsnorm_backward_dx_kernel(float *__restrict__ dx, const D *__restrict__ dout,
                                           const float *__restrict__ x, const float *__restrict__ weight,
                                           const float *__restrict__ rstd, int64_t tokens, int64_t dim) {
    const int64_t vecs = dim / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *xt = x + t * dim;
        const D *dt = dout + t * dim;
        float dot = 0.0f;
        for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
            const floats<V> a = load<V>(xt + j * V), d = load<V>(dt + j * V), w = load<V>(weight + j * V);
#pragma unroll
            for (int e = 0; e < V; ++e) dot += d.v[e] * w.v[e] * a.v[e];
        }
        dot = block_reduce(dot, sum_op());
        const float r = rstd[t];
        const float c = dot * r * r / (float)dim;
        float *dxt = dx + t * dim;
        for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
            const floats<V> a = load<V>(xt + j * V), d = load<V>(dt + j * V), w = load<V>(weight + j * V);
            floats<V> g = load<V>(dxt + j * V);
#pragma unroll
            for (int e = 0; e < V; ++e) g.v[e] += r * (d.v[e] * w.v[e] - a.v[e] * c);
            store<V>(dxt + j * V, g);
        }
    }
}

/* The backward in one pass over dout, x and dx: a block takes a chunk of
 * tokens (blockIdx.x, tokens in order), its threads own columns (up to
 * kMaxVecsPerThread accesses of V each) and keep them in registers: the
 * weight for the whole chunk, x and dout for a token while its row sum is
 * formed and dx updated, and the chunk's weight-gradient sums, written to
 * partial[chunk][column] at the end (then summed in chunk order). */
constexpr int kMaxVecsPerThread = 2;

template <int V, typename D>
__global__ void rmsnorm_backward_fused_kernel(float *__restrict__ dx, float *__restrict__ partial,
                                              const D *__restrict__ dout, const float *__restrict__ x,
                                              const float *__restrict__ weight, const float *__restrict__ rstd,
                                              int64_t tokens, int64_t dim, int64_t tokens_per_chunk) {
    const int64_t vecs = dim / V;
    const int64_t t0 = (int64_t)blockIdx.x * tokens_per_chunk;
    const int64_t t1 = t0 + tokens_per_chunk < tokens ? t0 + tokens_per_chunk : tokens;
    floats<V> w[kMaxVecsPerThread], acc[kMaxVecsPerThread];
#pragma unroll
    for (int k = 0; k < kMaxVecsPerThread; ++k) {
        const int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
#pragma unroll
        for (int e = 0; e < V; ++e) acc[k].v[e] = 0.0f, w[k].v[e] = 0.0f;
        if (j < vecs) w[k] = load<V>(weight + j * V);
    }
    for (int64_t t = t0; t < t1; ++t) {
        const float *xt = x + t * dim;
        const D *dt = dout + t * dim;
        float *dxt = dx + t * dim;
        floats<V> a[kMaxVecsPerThread], d[kMaxVecsPerThread], g[kMaxVecsPerThread];
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < kMaxVecsPerThread; ++k) {
            const int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
            if (j < vecs) { /* dx too, so that a token costs one round trip to memory */
                a[k] = load<V>(xt + j * V);
                d[k] = load<V>(dt + j * V);
                g[k] = load<V>(dxt + j * V);
#pragma unroll
                for (int e = 0; e < V; ++e) dot += d[k].v[e] * w[k].v[e] * a[k].v[e];
            }
        }
        dot = block_reduce(dot, sum_op());
        const float r = rstd[t];
        const float c = dot * r * r / (float)dim;
#pragma unroll
        for (int k = 0; k < kMaxVecsPerThread; ++k) {
            const int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
            if (j < vecs) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    g[k].v[e] += r * (d[k].v[e] * w[k].v[e] - a[k].v[e] * c);
                    acc[k].v[e] += d[k].v[e] * a[k].v[e] * r;
                }
                store<V>(dxt + j * V, g[k]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < kMaxVecsPerThread; ++k) {
        const int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
        if (j < vecs) store<V>(partial + (int64_t)blockIdx.x * dim + j * V, acc[k]);
    }
}

/* The weight gradient over one chunk of tokens (blockIdx.y), a thread per
 * column, tokens in order. partial == NULL (one chunk): added straight to
 * dweight; else the chunk's sums go to partial[chunk][column]. */
template <typename D>
__global__ void rmsnorm_dweight_chunk_kernel(float *__restrict__ partial, float *__restrict__ dweight,
                                             const D *__restrict__ dout, const float *__restrict__ x,
                                             const float *__restrict__ rstd, int64_t tokens, int64_t dim,
                                             int64_t tokens_per_chunk) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= dim) return;
    const int64_t t0 = (int64_t)blockIdx.y * tokens_per_chunk;
    const int64_t t1 = t0 + tokens_per_chunk < tokens ? t0 + tokens_per_chunk : tokens;
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t t = t0; t < t1; ++t) acc += load<1>(dout + t * dim + col).v[0] * x[t * dim + col] * rstd[t];
    if (partial)
        partial[(int64_t)blockIdx.y * dim + col] = acc;
    else
        dweight[col] += acc;
}

/* dweight += the chunks' sums, in chunk order. */
__global__ void rmsnorm_dweight_sum_kernel(float *__restrict__ dweight, const float *__restrict__ partial,
                                           int64_t chunks, int64_t dim) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= dim) return;
    float sum = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c * dim + col];
    dweight[col] += sum;
}

template <typename Out>
void rmsnorm_forward_launch(model_ops_ctx *oc, Out *out, float *rstd, const float *x, const float *weight,
                            int64_t tokens, int64_t dim, float eps, const char *what) {
    if (tokens <= 0 || dim <= 0) return;
    const bool vec = dim % 4 == 0 && aligned16(out) && aligned16(x) && aligned16(weight);
    const int64_t items = vec ? dim / 4 : dim;
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(items);
    if (vec)
        rmsnorm_forward_kernel<4><<<blocks, threads, 0, stream(oc)>>>(out, rstd, x, weight, tokens, dim, eps);
    else
        rmsnorm_forward_kernel<1><<<blocks, threads, 0, stream(oc)>>>(out, rstd, x, weight, tokens, dim, eps);
    check_launch(oc, what);
}

} /* namespace */

extern "C" void rmsnorm_forward_cuda(model_ops_ctx *oc, float *out, float *rstd, const float *x, const float *weight,
                                     int64_t tokens, int64_t dim, float eps) {
    rmsnorm_forward_launch(oc, out, rstd, x, weight, tokens, dim, eps, "rmsnorm_forward");
}

extern "C" void rmsnorm_forward_bf16_cuda(model_ops_ctx *oc, uint16_t *out, float *rstd, const float *x,
                                          const float *weight, int64_t tokens, int64_t dim, float eps) {
    rmsnorm_forward_launch(oc, out, rstd, x, weight, tokens, dim, eps, "rmsnorm_forward_bf16");
}

namespace {

/* Chunks of tokens of the fused backward: a fixed number (whatever the
 * device, so the weight gradient's sums are the same everywhere), enough to
 * keep an H100 / H200 several blocks deep (a block walks its tokens in turn,
 * one row sum each). */
constexpr int64_t kNormChunks = 1056;

/* The fused backward (rows of at most kMaxVecsPerThread * kMaxRowThreads
 * accesses: dim 4096 with float4; a thread takes two where it can, so that
 * more, smaller blocks share an SM): returns false when the row is too long
 * for it. */
template <typename D>
bool rmsnorm_backward_fused(model_ops_ctx *oc, float *dx, float *dweight, const D *dout, const float *x,
                            const float *weight, const float *rstd, int64_t tokens, int64_t dim, bool vec) {
    const int64_t items = vec ? dim / 4 : dim;
    if (items > (int64_t)kMaxVecsPerThread * kMaxRowThreads) return false;
    const int threads = row_threads((items + 1) / 2);
    const int64_t tokens_per_chunk = (tokens + kNormChunks - 1) / kNormChunks;
    const int64_t chunks = (tokens + tokens_per_chunk - 1) / tokens_per_chunk;
    float *partial = (float *)device_scratch(oc, &model_cuda_state::rmsnorm_partials,
                                             (size_t)(chunks * dim) * sizeof(float), "rmsnorm_backward (scratch)");
    if (!partial) return true;
    if (vec)
        rmsnorm_backward_fused_kernel<4><<<(unsigned)chunks, threads, 0, stream(oc)>>>(
            dx, partial, dout, x, weight, rstd, tokens, dim, tokens_per_chunk);
    else
        rmsnorm_backward_fused_kernel<1><<<(unsigned)chunks, threads, 0, stream(oc)>>>(
            dx, partial, dout, x, weight, rstd, tokens, dim, tokens_per_chunk);
    check_launch(oc, "rmsnorm_backward (fused)");
    const int64_t col_blocks = (dim + kThreads - 1) / kThreads;
    rmsnorm_dweight_sum_kernel<<<(unsigned)col_blocks, kThreads, 0, stream(oc)>>>(dweight, partial, chunks, dim);
    check_launch(oc, "rmsnorm_backward (dweight sum)");
    return true;
}


template <typename D>
void rmsnorm_backward_launch(model_ops_ctx *oc, float *dx, float *dweight, const D *dout, const float *x,
                             const float *weight, const float *rstd, int64_t tokens, int64_t dim) {
    if (tokens <= 0 || dim <= 0) return;
    const bool vec = dim % 4 == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) && aligned16(weight);
    if (rmsnorm_backward_fused(oc, dx, dweight, dout, x, weight, rstd, tokens, dim, vec)) return;
    /* longer rows: dx by rows, then the weight gradient by column chunks */
    const int64_t items = vec ? dim / 4 : dim;
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(items);
    if (vec)
        rmsnorm_backward_dx_kernel<4><<<blocks, threads, 0, stream(oc)>>>(dx, dout, x, weight, rstd, tokens, dim);
    else
        rmsnorm_backward_dx_kernel<1><<<blocks, threads, 0, stream(oc)>>>(dx, dout, x, weight, rstd, tokens, dim);
    check_launch(oc, "rmsnorm_backward (dx)");

    /* The weight gradient: enough token chunks to fill the GPU (about 2048
     * blocks), each at least 16 tokens long, then a fixed-order sum. */
    const int64_t col_blocks = (dim + kThreads - 1) / kThreads;
    int64_t chunks = (2048 + col_blocks - 1) / col_blocks;
    const int64_t max_chunks = (tokens + 15) / 16;
    if (chunks > max_chunks) chunks = max_chunks;
    if (chunks > kMaxGridY) chunks = kMaxGridY;
    if (chunks < 1) chunks = 1;
    const int64_t tokens_per_chunk = (tokens + chunks - 1) / chunks;
    chunks = (tokens + tokens_per_chunk - 1) / tokens_per_chunk;
    float *partial = nullptr;
    if (chunks > 1) {
        partial = (float *)device_scratch(oc, &model_cuda_state::rmsnorm_partials,
                                          (size_t)(chunks * dim) * sizeof(float), "rmsnorm_backward (scratch)");
        if (!partial) return;
    }
    rmsnorm_dweight_chunk_kernel<<<dim3((unsigned)col_blocks, (unsigned)chunks, 1), kThreads, 0, stream(oc)>>>(
        partial, dweight, dout, x, rstd, tokens, dim, tokens_per_chunk);
    check_launch(oc, "rmsnorm_backward (dweight chunks)");
    if (partial) {
        rmsnorm_dweight_sum_kernel<<<(unsigned)col_blocks, kThreads, 0, stream(oc)>>>(dweight, partial, chunks, dim);
        check_launch(oc, "rmsnorm_backward (dweight sum)");
    }
}

} /* namespace */

extern "C" void rmsnorm_backward_cuda(model_ops_ctx *oc, float *dx, float *dweight, const float *dout, const float *x,
                                      const float *weight, const float *rstd, int64_t tokens, int64_t dim) {
    rmsnorm_backward_launch(oc, dx, dweight, dout, x, weight, rstd, tokens, dim);
}

extern "C" void rmsnorm_backward_bf16_cuda(model_ops_ctx *oc, float *dx, float *dweight, const uint16_t *dout,
                                           const float *x, const float *weight, const float *rstd, int64_t tokens,
                                           int64_t dim) {
    rmsnorm_backward_launch(oc, dx, dweight, dout, x, weight, rstd, tokens, dim);
}
