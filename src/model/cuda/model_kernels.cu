/*
 * model_kernels.cu - the model's element-wise, normalization, loss and
 * optimizer operations on the GPU: the CUDA versions (model_ops.h) of
 * embedding.c, rmsnorm.c, rope.c, swiglu.c, cross_entropy.c, adamw.c,
 * matmul.c and the copies and bf16 conversions of model_ops.c. Same
 * signatures, same layouts, same result within fp32 rounding; attention is
 * in attention_cuda.cu.
 *
 * Every function enqueues on bfp8_model_cuda::stream() and returns at once,
 * except cross_entropy_forward_cuda and gradient_global_norm_cuda, which
 * wait for their number. Failures are kept (model_cuda_common.cuh) and
 * reported by model_cuda_status().
 *
 * Shapes of the kernels:
 *   - per-row work (rmsnorm, cross-entropy, rope, swiglu, embedding): blocks
 *     over rows (x, grid-stride) and column chunks (y); a row's reduction is
 *     one block, so no atomics;
 *   - flat work (adamw, norm, conversions): grid-stride loops;
 *   - four floats per access (float4) where every pointer and row length
 *     allows it, else one (the kernels are templated on the width).
 *
 * Everything is deterministic: the same inputs give the same bits on every
 * run. Sums over tokens (the RMSNorm weight gradient, the global norm) go
 * through fixed per-block partials summed in a fixed order; the embedding
 * gradient sorts the token ids and adds each id's rows in token order, which
 * is also exactly the CPU's order, so that one is bit-exact with the CPU.
 *
 * Built with the project's CUDA flags (sm_90a, ptxas spills are errors).
 */
#include <cub/device/device_radix_sort.cuh>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "formats/formats.h"
#include "model/cuda/model_cuda_common.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

constexpr int kWarpSize = 32;
constexpr int kThreads = 256;        /* flat and column-chunk kernels */
constexpr int kMaxRowThreads = 512;  /* a block that reduces one row */
constexpr int64_t kMaxGridX = INT_MAX;
constexpr int64_t kMaxGridY = 65535;

/* ------------------------------------------------------------------------ */
/* Scratch memory                                                            */

/* Device and pinned host buffers that grow on demand and are never freed
 * (they live as long as the process, like the cuBLAS handle). Growing frees
 * the old buffer with cudaFree / cudaFreeHost, which wait for the device, so
 * work still reading it on any stream has finished. The ops share the one
 * stream, so a buffer is reused only after the work before it is done. */
struct scratch_buffer {
    void *ptr;
    size_t bytes;
};

scratch_buffer g_rmsnorm_partials; /* chunks x dim floats */
scratch_buffer g_embedding_sort;   /* positions, sorted ids and positions, CUB's temporary storage */
scratch_buffer g_norm_partials;    /* blocks + 1 doubles */
scratch_buffer g_host_result;      /* pinned: row losses or the norm, copied back */

/* Double on growth, so a slowly growing size reallocates rarely. */
size_t grown_size(size_t old_bytes, size_t bytes) { return bytes > 2 * old_bytes ? bytes : 2 * old_bytes; }

void *device_scratch(scratch_buffer &s, size_t bytes, const char *what) {
    if (bytes <= s.bytes) return s.ptr;
    const size_t size = grown_size(s.bytes, bytes);
    if (s.ptr) failed(cudaFree(s.ptr), what);
    s.ptr = nullptr;
    s.bytes = 0;
    if (failed(cudaMalloc(&s.ptr, size), what)) {
        s.ptr = nullptr;
        return nullptr;
    }
    s.bytes = size;
    return s.ptr;
}

void *host_scratch(scratch_buffer &s, size_t bytes, const char *what) {
    if (bytes <= s.bytes) return s.ptr;
    const size_t size = grown_size(s.bytes, bytes);
    if (s.ptr) failed(cudaFreeHost(s.ptr), what);
    s.ptr = nullptr;
    s.bytes = 0;
    if (failed(cudaMallocHost(&s.ptr, size), what)) {
        s.ptr = nullptr;
        return nullptr;
    }
    s.bytes = size;
    return s.ptr;
}

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* ------------------------------------------------------------------------ */
/* Vector accesses and launch shapes                                         */

template <int V> struct floats {
    float v[V];
};

template <int V> __device__ __forceinline__ floats<V> load(const float *p) {
    floats<V> r;
    if constexpr (V == 4) {
        const float4 q = *reinterpret_cast<const float4 *>(p);
        r.v[0] = q.x;
        r.v[1] = q.y;
        r.v[2] = q.z;
        r.v[3] = q.w;
    } else {
        static_assert(V == 1, "widths 1 and 4");
        r.v[0] = *p;
    }
    return r;
}

template <int V> __device__ __forceinline__ void store(float *p, const floats<V> &r) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4 *>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    } else {
        static_assert(V == 1, "widths 1 and 4");
        *p = r.v[0];
    }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Flat arrays that may start anywhere (a tensor inside the parameter
 * buffer): elements [0, head) and [head + 4 vecs, n) one at a time, the rest
 * four at a time. All arrays must reach a 16-byte boundary at the same
 * element, else everything goes one at a time (head = n, vecs = 0). */
struct vec4_split {
    int64_t head, vecs;
};

vec4_split split_for_vec4(int64_t n, const void *const *ptrs, const int *elem_bytes, int count) {
    int64_t head = -1;
    for (int i = 0; i < count; ++i) {
        const uintptr_t addr = (uintptr_t)ptrs[i];
        const int bytes = elem_bytes[i], boundary = 4 * bytes;
        if (addr % (uintptr_t)bytes != 0) return {n, 0};
        const int64_t h = (int64_t)((boundary - addr % (uintptr_t)boundary) % (uintptr_t)boundary) / bytes;
        if (head >= 0 && h != head) return {n, 0};
        head = h;
    }
    if (head > n) head = n;
    return {head, (n - head) / 4};
}

/* Threads of a block that reduces a row of `items` accesses: a multiple of
 * the warp size (block_reduce needs full warps), at most kMaxRowThreads. */
int row_threads(int64_t items) {
    const int64_t t = (items + kWarpSize - 1) / kWarpSize * kWarpSize;
    return (int)(t < kWarpSize ? kWarpSize : t > kMaxRowThreads ? kMaxRowThreads : t);
}

/* Rows on x (grid-stride beyond kMaxGridX), chunks of `threads` accesses of
 * a row on y (grid-stride beyond kMaxGridY). */
dim3 rows_by_chunks(int64_t rows, int64_t items, int threads) {
    const int64_t chunks = (items + threads - 1) / threads;
    return dim3((unsigned)(rows < kMaxGridX ? rows : kMaxGridX),
                (unsigned)(chunks < 1 ? 1 : chunks < kMaxGridY ? chunks : kMaxGridY), 1);
}

/* Threads of a column-chunk kernel: enough for a short row, kThreads for a long one. */
int chunk_threads(int64_t items) {
    const int64_t t = (items + kWarpSize - 1) / kWarpSize * kWarpSize;
    return (int)(t < kWarpSize ? kWarpSize : t > kThreads ? kThreads : t);
}

/* ------------------------------------------------------------------------ */
/* Block reductions                                                          */

struct sum_op {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};

struct max_op {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/* Reduce over the block (blockDim.x a multiple of 32, every thread calling):
 * warps by butterfly, then every thread combines the warp results in warp
 * order, so all threads get the same value and it is the same on every run. */
template <typename T, typename Op> __device__ __forceinline__ T block_reduce(T v, Op op) {
    __shared__ T warp_results[kMaxRowThreads / kWarpSize];
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    __syncthreads(); /* a previous call's readers are done with warp_results */
    if (threadIdx.x % kWarpSize == 0) warp_results[threadIdx.x / kWarpSize] = v;
    __syncthreads();
    v = warp_results[0];
    for (int w = 1; w < (int)(blockDim.x / kWarpSize); ++w) v = op(v, warp_results[w]);
    return v;
}

/* ------------------------------------------------------------------------ */
/* Embedding                                                                 */

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

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */

template <int V>
__global__ void rmsnorm_forward_kernel(float *__restrict__ out, float *__restrict__ rstd,
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
        float *ot = out + t * dim;
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
template <int V>
__global__ void rmsnorm_backward_dx_kernel(float *__restrict__ dx, const float *__restrict__ dout,
                                           const float *__restrict__ x, const float *__restrict__ weight,
                                           const float *__restrict__ rstd, int64_t tokens, int64_t dim) {
    const int64_t vecs = dim / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *xt = x + t * dim, *dt = dout + t * dim;
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

/* The weight gradient over one chunk of tokens (blockIdx.y), a thread per
 * column, tokens in order. partial == NULL (one chunk): added straight to
 * dweight; else the chunk's sums go to partial[chunk][column]. */
__global__ void rmsnorm_dweight_chunk_kernel(float *__restrict__ partial, float *__restrict__ dweight,
                                             const float *__restrict__ dout, const float *__restrict__ x,
                                             const float *__restrict__ rstd, int64_t tokens, int64_t dim,
                                             int64_t tokens_per_chunk) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= dim) return;
    const int64_t t0 = (int64_t)blockIdx.y * tokens_per_chunk;
    const int64_t t1 = t0 + tokens_per_chunk < tokens ? t0 + tokens_per_chunk : tokens;
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t t = t0; t < t1; ++t) acc += dout[t * dim + col] * x[t * dim + col] * rstd[t];
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

/* ------------------------------------------------------------------------ */
/* RoPE                                                                      */

/* Rotates the pairs (v[i], v[i + half]) of every head of every row, in
 * place; sin_sign -1 rotates back (backward). A thread takes V consecutive
 * i of one head, so V must divide half. */
template <int V>
__global__ void rope_kernel(float *x, int64_t rows, int64_t seq, int n_heads, int head_dim, int64_t row_stride,
                            const float *__restrict__ cos_table, const float *__restrict__ sin_table,
                            float sin_sign) {
    const int half = head_dim / 2;
    const int items = n_heads * (half / V);
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int64_t pos = row % seq;
        const float *c_row = cos_table + pos * half, *s_row = sin_table + pos * half;
        for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < items; j += gridDim.y * blockDim.x) {
            const int h = j / (half / V), i = (j - h * (half / V)) * V;
            float *v = x + row * row_stride + (int64_t)h * head_dim;
            floats<V> a = load<V>(v + i), b = load<V>(v + i + half);
            const floats<V> c = load<V>(c_row + i), s = load<V>(s_row + i);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float sn = sin_sign * s.v[e], ae = a.v[e], be = b.v[e];
                a.v[e] = ae * c.v[e] - be * sn;
                b.v[e] = ae * sn + be * c.v[e];
            }
            store<V>(v + i, a);
            store<V>(v + i + half, b);
        }
    }
}

void rope_rotate_cuda(float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                      int64_t row_stride, const float *cos_table, const float *sin_table, float sin_sign,
                      const char *what) {
    const int64_t half = head_dim / 2;
    if (batch <= 0 || seq <= 0 || n_heads <= 0 || half <= 0) return;
    if (head_dim > INT_MAX / n_heads) { /* the kernel indexes a row's heads in int */
        failed(cudaErrorInvalidValue, what);
        return;
    }
    const bool vec = half % 4 == 0 && head_dim % 4 == 0 && row_stride % 4 == 0 && aligned16(x) &&
                     aligned16(cos_table) && aligned16(sin_table);
    const int64_t rows = batch * seq, items = n_heads * (vec ? half / 4 : half);
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(rows, items, threads);
    if (vec)
        rope_kernel<4><<<grid, threads, 0, stream()>>>(x, rows, seq, (int)n_heads, (int)head_dim, row_stride,
                                                        cos_table, sin_table, sin_sign);
    else
        rope_kernel<1><<<grid, threads, 0, stream()>>>(x, rows, seq, (int)n_heads, (int)head_dim, row_stride,
                                                        cos_table, sin_table, sin_sign);
    check_launch(what);
}

/* ------------------------------------------------------------------------ */
/* SwiGLU                                                                    */

template <int V>
__global__ void swiglu_forward_kernel(float *__restrict__ out, const float *__restrict__ gate_up, int64_t tokens,
                                      int64_t hidden) {
    const int64_t vecs = hidden / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *gate = gate_up + t * 2 * hidden, *up = gate + hidden;
        for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < vecs;
             j += (int64_t)gridDim.y * blockDim.x) {
            const floats<V> g = load<V>(gate + j * V), u = load<V>(up + j * V);
            floats<V> o;
#pragma unroll
            for (int e = 0; e < V; ++e) o.v[e] = g.v[e] / (1.0f + expf(-g.v[e])) * u.v[e];
            store<V>(out + t * hidden + j * V, o);
        }
    }
}

template <int V>
__global__ void swiglu_backward_kernel(float *__restrict__ dgate_up, const float *__restrict__ dout,
                                       const float *__restrict__ gate_up, int64_t tokens, int64_t hidden) {
    const int64_t vecs = hidden / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *gate = gate_up + t * 2 * hidden, *up = gate + hidden;
        float *dgate = dgate_up + t * 2 * hidden, *dup = dgate + hidden;
        for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < vecs;
             j += (int64_t)gridDim.y * blockDim.x) {
            const floats<V> g = load<V>(gate + j * V), u = load<V>(up + j * V),
                            d = load<V>(dout + t * hidden + j * V);
            floats<V> dg, du;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float sig = 1.0f / (1.0f + expf(-g.v[e]));
                du.v[e] = d.v[e] * (g.v[e] * sig);
                dg.v[e] = d.v[e] * u.v[e] * sig * (1.0f + g.v[e] * (1.0f - sig));
            }
            store<V>(dup + j * V, du);
            store<V>(dgate + j * V, dg);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Cross-entropy                                                             */

/* log sum exp of a row, as the CPU: the max first, then the shifted sum (two
 * reads; the second mostly from L2). Max and sum are the CPU's for finite
 * rows; a NaN anywhere, or a +Inf, makes the sum NaN on both. */
template <int V> __device__ __forceinline__ float row_log_sum_exp(const float *row, int64_t vocab) {
    const int64_t vecs = vocab / V;
    float max_logit = -INFINITY;
    for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
        const floats<V> a = load<V>(row + j * V);
#pragma unroll
        for (int e = 0; e < V; ++e) max_logit = fmaxf(max_logit, a.v[e]);
    }
    max_logit = block_reduce(max_logit, max_op());
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
        const floats<V> a = load<V>(row + j * V);
#pragma unroll
        for (int e = 0; e < V; ++e) sum += expf(a.v[e] - max_logit);
    }
    sum = block_reduce(sum, sum_op());
    return max_logit + logf(sum);
}

template <int V>
__global__ void cross_entropy_forward_kernel(float *__restrict__ row_losses, const float *__restrict__ logits,
                                             const int32_t *__restrict__ targets, int64_t tokens, int64_t vocab) {
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *row = logits + t * vocab;
        const float lse = row_log_sum_exp<V>(row, vocab);
        if (threadIdx.x == 0) row_losses[t] = lse - row[targets[t]];
    }
}

/* In place allowed (dlogits == logits): a row is read in full before the
 * block's reductions end, and each element is then read and written by the
 * same thread. */
template <int V>
__global__ void cross_entropy_backward_kernel(float *dlogits, const float *logits,
                                              const int32_t *__restrict__ targets, int64_t tokens,
                                              int64_t vocab, float scale) {
    const int64_t vecs = vocab / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *row = logits + t * vocab;
        float *drow = dlogits + t * vocab;
        const float lse = row_log_sum_exp<V>(row, vocab);
        const int64_t target = targets[t];
        for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
            floats<V> a = load<V>(row + j * V);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                /* __fmul_rn: rounded before the target's "-= scale", as on the CPU, not fused into it */
                const float p = __fmul_rn(scale, expf(a.v[e] - lse));
                a.v[e] = j * V + e == target ? p - scale : p;
            }
            store<V>(drow + j * V, a);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Transpose                                                                 */

constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8; /* blockDim (32, 8) */

/* dst[c][r] = src[r][c] through a shared tile; the extra column keeps the
 * transposed reads off a single bank. */
__global__ void transpose_kernel(float *__restrict__ dst, const float *__restrict__ src, int64_t rows,
                                 int64_t cols) {
    __shared__ float tile[kTile][kTile + 1];
    const int64_t c0 = (int64_t)blockIdx.x * kTile;
    const int64_t row_tiles = (rows + kTile - 1) / kTile;
    for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
        const int64_t r0 = rt * kTile;
        for (int k = threadIdx.y; k < kTile; k += kTileRowsPerPass) {
            const int64_t r = r0 + k, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[k][threadIdx.x] = src[r * cols + c];
        }
        __syncthreads();
        for (int k = threadIdx.y; k < kTile; k += kTileRowsPerPass) {
            const int64_t c = c0 + k, r = r0 + threadIdx.x;
            if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][k];
        }
        __syncthreads(); /* the tile is refilled by the next pass */
    }
}

/* ------------------------------------------------------------------------ */
/* AdamW and the gradient norm                                               */

struct adamw_args {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
    float correction1, correction2, grad_scale;
};

/* The CPU's formula, operation by operation; the _rn intrinsics keep nvcc
 * from fusing multiplies and adds, so each result is rounded where the CPU
 * rounds it (bit-exact with a CPU build that does not fuse either). */
__device__ __forceinline__ void adamw_element(float &param, float grad, float &m, float &v, const adamw_args &a) {
    const float g = __fmul_rn(grad, a.grad_scale);
    m = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(a.one_minus_beta1, g));
    v = __fadd_rn(__fmul_rn(a.beta2, v), __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
    const float m_hat = __fdiv_rn(m, a.correction1), v_hat = __fdiv_rn(v, a.correction2);
    const float step =
        __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), a.eps)), __fmul_rn(a.weight_decay, param));
    param = __fsub_rn(param, __fmul_rn(a.lr, step));
}

__global__ void adamw_kernel(float *__restrict__ param, const float *__restrict__ grad, float *__restrict__ m,
                             float *__restrict__ v, int64_t n, vec4_split split, adamw_args args) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        floats<4> p = load<4>(param + at), mm = load<4>(m + at), vv = load<4>(v + at);
        const floats<4> g = load<4>(grad + at);
#pragma unroll
        for (int e = 0; e < 4; ++e) adamw_element(p.v[e], g.v[e], mm.v[e], vv.v[e], args);
        store<4>(param + at, p);
        store<4>(m + at, mm);
        store<4>(v + at, vv);
    }
    for (int64_t i = first; i < split.head; i += stride) adamw_element(param[i], grad[i], m[i], v[i], args);
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride)
        adamw_element(param[i], grad[i], m[i], v[i], args);
}

constexpr int kNormBlocks = 1024; /* partials; the final sum is one block of kMaxRowThreads */

/* partial[block] = this block's sum of squares in double (a float's square
 * is exact in double, as on the CPU). */
__global__ void sum_squares_kernel(double *__restrict__ partial, const float *__restrict__ grad, int64_t n,
                                   vec4_split split) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    double s = 0.0;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const floats<4> g = load<4>(grad + split.head + 4 * i);
#pragma unroll
        for (int e = 0; e < 4; ++e) s += (double)g.v[e] * g.v[e];
    }
    for (int64_t i = first; i < split.head; i += stride) s += (double)grad[i] * grad[i];
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride) s += (double)grad[i] * grad[i];
    s = block_reduce(s, sum_op());
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* *total = the sum of partial[0 .. count), one block, fixed order. */
__global__ void sum_partials_kernel(double *__restrict__ total, const double *__restrict__ partial, int count) {
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
    s = block_reduce(s, sum_op());
    if (threadIdx.x == 0) *total = s;
}

/* ------------------------------------------------------------------------ */
/* bf16 conversions                                                          */

/* formats.h's encoder itself (round to nearest even, NaN -> 0x7fff): the
 * CPU's bits by construction. */
__global__ void f32_to_bf16_kernel(uint16_t *__restrict__ dst, const float *__restrict__ src, int64_t n,
                                   vec4_split split) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        const floats<4> s = load<4>(src + at);
        uint2 packed;
        packed.x = (uint32_t)bfp8_encode_bf16(s.v[0]) | (uint32_t)bfp8_encode_bf16(s.v[1]) << 16;
        packed.y = (uint32_t)bfp8_encode_bf16(s.v[2]) | (uint32_t)bfp8_encode_bf16(s.v[3]) << 16;
        *reinterpret_cast<uint2 *>(dst + at) = packed;
    }
    for (int64_t i = first; i < split.head; i += stride) dst[i] = bfp8_encode_bf16(src[i]);
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride) dst[i] = bfp8_encode_bf16(src[i]);
}

__global__ void add_f32_kernel(float *__restrict__ dst, const float *__restrict__ src, int64_t n, vec4_split split) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        floats<4> d = load<4>(dst + at);
        const floats<4> s = load<4>(src + at);
#pragma unroll
        for (int e = 0; e < 4; ++e) d.v[e] += s.v[e];
        store<4>(dst + at, d);
    }
    for (int64_t i = first; i < split.head; i += stride) dst[i] += src[i];
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride) dst[i] += src[i];
}

__global__ void bf16_to_f32_kernel(float *__restrict__ dst, const uint16_t *__restrict__ src, int64_t n,
                                   vec4_split split, int add) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        const uint2 packed = *reinterpret_cast<const uint2 *>(src + at);
        floats<4> d;
        d.v[0] = bfp8_decode_bf16((uint16_t)(packed.x & 0xffffu));
        d.v[1] = bfp8_decode_bf16((uint16_t)(packed.x >> 16));
        d.v[2] = bfp8_decode_bf16((uint16_t)(packed.y & 0xffffu));
        d.v[3] = bfp8_decode_bf16((uint16_t)(packed.y >> 16));
        if (add) {
            const floats<4> old = load<4>(dst + at);
#pragma unroll
            for (int e = 0; e < 4; ++e) d.v[e] = old.v[e] + d.v[e];
        }
        store<4>(dst + at, d);
    }
    for (int64_t i = first; i < split.head; i += stride)
        dst[i] = add ? dst[i] + bfp8_decode_bf16(src[i]) : bfp8_decode_bf16(src[i]);
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride)
        dst[i] = add ? dst[i] + bfp8_decode_bf16(src[i]) : bfp8_decode_bf16(src[i]);
}

} /* namespace */

/* ------------------------------------------------------------------------ */
/* Embedding                                                                 */

extern "C" void embedding_forward_cuda(float *out, const int32_t *tokens, const float *table, int64_t count,
                                       int64_t dim) {
    if (count <= 0 || dim <= 0) return;
    const bool vec = dim % 4 == 0 && aligned16(out) && aligned16(table);
    const int64_t items = vec ? dim / 4 : dim;
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(count, items, threads);
    if (vec)
        embedding_forward_kernel<4><<<grid, threads, 0, stream()>>>(out, tokens, table, count, dim);
    else
        embedding_forward_kernel<1><<<grid, threads, 0, stream()>>>(out, tokens, table, count, dim);
    check_launch("embedding_forward");
}

/* Deterministic instead of a float atomicAdd per element: sort the ids
 * (CUB's radix sort is stable, so each id's positions stay in token order),
 * then one block per run of equal ids sums the run's rows in that order.
 * The sort costs a few short launches over `count` ints, little next to the
 * count x dim floats the sums read. The price of the CPU's order: a very
 * frequent id is one chain of additions per column, walked by dim / 4
 * threads, so a batch where one id fills a tenth of the tokens takes a few
 * times longer than one of distinct ids. */
extern "C" void embedding_backward_cuda(float *dtable, const float *dout, const int32_t *tokens, int64_t count,
                                        int64_t dim) {
    if (count <= 0 || dim <= 0) return;
    if (count > INT_MAX) { /* positions are int32 */
        failed(cudaErrorInvalidValue, "embedding_backward (more than INT_MAX tokens)");
        return;
    }
    const int n = (int)count;
    size_t sort_bytes = 0;
    if (failed(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, tokens, (int32_t *)nullptr,
                                               (const int32_t *)nullptr, (int32_t *)nullptr, n, 0, 32, stream()),
               "embedding_backward (sort size)"))
        return;
    const size_t ints = round_up_256((size_t)count * sizeof(int32_t));
    char *base = (char *)device_scratch(g_embedding_sort, 3 * ints + sort_bytes, "embedding_backward (scratch)");
    if (!base) return;
    int32_t *positions = (int32_t *)base, *sorted_tokens = (int32_t *)(base + ints),
            *sorted_positions = (int32_t *)(base + 2 * ints);
    iota_kernel<<<grid_for(count, kThreads), kThreads, 0, stream()>>>(positions, count);
    check_launch("embedding_backward (positions)");
    if (failed(cub::DeviceRadixSort::SortPairs(base + 3 * ints, sort_bytes, tokens, sorted_tokens, positions,
                                               sorted_positions, n, 0, 32, stream()),
               "embedding_backward (sort)"))
        return;
    const bool vec = dim % 4 == 0 && aligned16(dtable) && aligned16(dout);
    const int64_t items = vec ? dim / 4 : dim;
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(count, items, threads);
    if (vec)
        embedding_backward_runs_kernel<4>
            <<<grid, threads, 0, stream()>>>(dtable, dout, sorted_tokens, sorted_positions, count, dim);
    else
        embedding_backward_runs_kernel<1>
            <<<grid, threads, 0, stream()>>>(dtable, dout, sorted_tokens, sorted_positions, count, dim);
    check_launch("embedding_backward");
}

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */

extern "C" void rmsnorm_forward_cuda(float *out, float *rstd, const float *x, const float *weight,
                                     int64_t tokens, int64_t dim, float eps) {
    if (tokens <= 0 || dim <= 0) return;
    const bool vec = dim % 4 == 0 && aligned16(out) && aligned16(x) && aligned16(weight);
    const int64_t items = vec ? dim / 4 : dim;
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(items);
    if (vec)
        rmsnorm_forward_kernel<4><<<blocks, threads, 0, stream()>>>(out, rstd, x, weight, tokens, dim, eps);
    else
        rmsnorm_forward_kernel<1><<<blocks, threads, 0, stream()>>>(out, rstd, x, weight, tokens, dim, eps);
    check_launch("rmsnorm_forward");
}

extern "C" void rmsnorm_backward_cuda(float *dx, float *dweight, const float *dout, const float *x,
                                      const float *weight, const float *rstd, int64_t tokens, int64_t dim) {
    if (tokens <= 0 || dim <= 0) return;
    const bool vec = dim % 4 == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) && aligned16(weight);
    const int64_t items = vec ? dim / 4 : dim;
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(items);
    if (vec)
        rmsnorm_backward_dx_kernel<4><<<blocks, threads, 0, stream()>>>(dx, dout, x, weight, rstd, tokens, dim);
    else
        rmsnorm_backward_dx_kernel<1><<<blocks, threads, 0, stream()>>>(dx, dout, x, weight, rstd, tokens, dim);
    check_launch("rmsnorm_backward (dx)");

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
        partial = (float *)device_scratch(g_rmsnorm_partials, (size_t)(chunks * dim) * sizeof(float),
                                          "rmsnorm_backward (scratch)");
        if (!partial) return;
    }
    rmsnorm_dweight_chunk_kernel<<<dim3((unsigned)col_blocks, (unsigned)chunks, 1), kThreads, 0, stream()>>>(
        partial, dweight, dout, x, rstd, tokens, dim, tokens_per_chunk);
    check_launch("rmsnorm_backward (dweight chunks)");
    if (partial) {
        rmsnorm_dweight_sum_kernel<<<(unsigned)col_blocks, kThreads, 0, stream()>>>(dweight, partial, chunks, dim);
        check_launch("rmsnorm_backward (dweight sum)");
    }
}

/* ------------------------------------------------------------------------ */
/* RoPE                                                                      */

extern "C" void rope_forward_cuda(float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                                  int64_t row_stride, const float *cos_table, const float *sin_table) {
    rope_rotate_cuda(x, batch, seq, n_heads, head_dim, row_stride, cos_table, sin_table, 1.0f, "rope_forward");
}

extern "C" void rope_backward_cuda(float *dx, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                                   int64_t row_stride, const float *cos_table, const float *sin_table) {
    rope_rotate_cuda(dx, batch, seq, n_heads, head_dim, row_stride, cos_table, sin_table, -1.0f, "rope_backward");
}

/* ------------------------------------------------------------------------ */
/* SwiGLU                                                                    */

extern "C" void swiglu_forward_cuda(float *out, const float *gate_up, int64_t tokens, int64_t hidden) {
    if (tokens <= 0 || hidden <= 0) return;
    const bool vec = hidden % 4 == 0 && aligned16(out) && aligned16(gate_up);
    const int64_t items = vec ? hidden / 4 : hidden;
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(tokens, items, threads);
    if (vec)
        swiglu_forward_kernel<4><<<grid, threads, 0, stream()>>>(out, gate_up, tokens, hidden);
    else
        swiglu_forward_kernel<1><<<grid, threads, 0, stream()>>>(out, gate_up, tokens, hidden);
    check_launch("swiglu_forward");
}

extern "C" void swiglu_backward_cuda(float *dgate_up, const float *dout, const float *gate_up, int64_t tokens,
                                     int64_t hidden) {
    if (tokens <= 0 || hidden <= 0) return;
    const bool vec = hidden % 4 == 0 && aligned16(dgate_up) && aligned16(dout) && aligned16(gate_up);
    const int64_t items = vec ? hidden / 4 : hidden;
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(tokens, items, threads);
    if (vec)
        swiglu_backward_kernel<4><<<grid, threads, 0, stream()>>>(dgate_up, dout, gate_up, tokens, hidden);
    else
        swiglu_backward_kernel<1><<<grid, threads, 0, stream()>>>(dgate_up, dout, gate_up, tokens, hidden);
    check_launch("swiglu_backward");
}

/* ------------------------------------------------------------------------ */
/* Cross-entropy                                                             */

/* The row losses come back to the host and are summed there in double in
 * token order: the CPU's summation exactly. */
extern "C" double cross_entropy_forward_cuda(float *row_losses, const float *logits, const int32_t *targets,
                                             int64_t tokens, int64_t vocab) {
    if (tokens <= 0 || vocab <= 0) return NAN; /* the CPU's mean of nothing, 0 / 0 */
    const bool vec = vocab % 4 == 0 && aligned16(logits);
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(vec ? vocab / 4 : vocab);
    if (vec)
        cross_entropy_forward_kernel<4><<<blocks, threads, 0, stream()>>>(row_losses, logits, targets, tokens, vocab);
    else
        cross_entropy_forward_kernel<1><<<blocks, threads, 0, stream()>>>(row_losses, logits, targets, tokens, vocab);
    if (failed(cudaGetLastError(), "cross_entropy_forward")) return NAN;
    float *host =
        (float *)host_scratch(g_host_result, (size_t)tokens * sizeof(float), "cross_entropy_forward (host buffer)");
    if (!host) return NAN;
    if (failed(cudaMemcpyAsync(host, row_losses, (size_t)tokens * sizeof(float), cudaMemcpyDeviceToHost, stream()),
               "cross_entropy_forward (copy)") ||
        failed(cudaStreamSynchronize(stream()), "cross_entropy_forward (synchronize)"))
        return NAN;
    double total = 0.0;
    for (int64_t t = 0; t < tokens; ++t) total += host[t];
    return total / (double)tokens;
}

extern "C" void cross_entropy_backward_cuda(float *dlogits, const float *logits, const int32_t *targets,
                                            int64_t tokens, int64_t vocab, float scale) {
    if (tokens <= 0 || vocab <= 0) return;
    const bool vec = vocab % 4 == 0 && aligned16(logits) && aligned16(dlogits);
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(vec ? vocab / 4 : vocab);
    if (vec)
        cross_entropy_backward_kernel<4>
            <<<blocks, threads, 0, stream()>>>(dlogits, logits, targets, tokens, vocab, scale);
    else
        cross_entropy_backward_kernel<1>
            <<<blocks, threads, 0, stream()>>>(dlogits, logits, targets, tokens, vocab, scale);
    check_launch("cross_entropy_backward");
}

/* ------------------------------------------------------------------------ */
/* Matrix products                                                           */

/* cuBLAS is column-major, and a row-major matrix read column-major is its
 * transpose, so C^T = B^T A^T: B (row-major K x N) is the column-major
 * N x K operand as stored; A is K x M as stored when it is row-major M x K
 * (no transpose), and M x K, to be transposed, when a_transposed. */
extern "C" void matmul_f32_cuda(float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                                const float *b, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* an empty sum: C = C, or C = 0 (cuBLAS's handling of k = 0 is not relied on) */
        if (!accumulate)
            failed(cudaMemset2DAsync(c, (size_t)ldc * sizeof(float), 0, (size_t)N * sizeof(float), (size_t)M, stream()),
                   "matmul_f32 (zero)");
        return;
    }
    cublasHandle_t handle = cublas();
    if (!handle) return;
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f; /* beta 0: C is not read, as on the CPU */
    failed(cublasSgemm_64(handle, CUBLAS_OP_N, a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, b, ldb, a,
                          lda, &beta, c, ldc),
           "matmul_f32");
}

extern "C" void transpose_f32_cuda(float *dst, const float *src, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    const int64_t col_tiles = (cols + kTile - 1) / kTile, row_tiles = (rows + kTile - 1) / kTile;
    if (col_tiles > kMaxGridX) {
        failed(cudaErrorInvalidValue, "transpose_f32 (too many columns)");
        return;
    }
    const dim3 grid((unsigned)col_tiles, (unsigned)(row_tiles < kMaxGridY ? row_tiles : kMaxGridY), 1);
    transpose_kernel<<<grid, dim3(kTile, kTileRowsPerPass, 1), 0, stream()>>>(dst, src, rows, cols);
    check_launch("transpose_f32");
}

/* ------------------------------------------------------------------------ */
/* AdamW and the gradient norm                                               */

extern "C" void adamw_update_cuda(float *param, const float *grad, float *m, float *v, size_t n,
                                  const adamw_hparams *h, float grad_scale, int64_t step, int decay) {
    if (n == 0) return;
    /* h is host memory; the bias corrections are the CPU's own powf */
    adamw_args args;
    args.lr = h->lr;
    args.beta1 = h->beta1;
    args.beta2 = h->beta2;
    args.one_minus_beta1 = 1.0f - h->beta1;
    args.one_minus_beta2 = 1.0f - h->beta2;
    args.eps = h->eps;
    args.weight_decay = decay ? h->weight_decay : 0.0f;
    args.correction1 = 1.0f - powf(h->beta1, (float)step);
    args.correction2 = 1.0f - powf(h->beta2, (float)step);
    args.grad_scale = grad_scale;
    const void *ptrs[] = {param, grad, m, v};
    const int sizes[] = {4, 4, 4, 4};
    const vec4_split split = split_for_vec4((int64_t)n, ptrs, sizes, 4);
    adamw_kernel<<<grid_for(split.vecs > 0 ? split.vecs : (int64_t)n, kThreads), kThreads, 0, stream()>>>(
        param, grad, m, v, (int64_t)n, split, args);
    check_launch("adamw_update");
}

/* Fixed-size per-block partials (their number depends on n only) summed in
 * a fixed order: the same bits on every run. */
extern "C" double gradient_global_norm_cuda(const float *grad, size_t n) {
    if (n == 0) return 0.0;
    const void *ptrs[] = {grad};
    const int sizes[] = {4};
    const vec4_split split = split_for_vec4((int64_t)n, ptrs, sizes, 1);
    unsigned blocks = grid_for(split.vecs > 0 ? split.vecs : (int64_t)n, kThreads);
    if (blocks > kNormBlocks) blocks = kNormBlocks;
    double *partial = (double *)device_scratch(g_norm_partials, (blocks + 1) * sizeof(double),
                                               "gradient_global_norm (scratch)");
    double *host = (double *)host_scratch(g_host_result, sizeof(double), "gradient_global_norm (host buffer)");
    if (!partial || !host) return NAN;
    sum_squares_kernel<<<blocks, kThreads, 0, stream()>>>(partial, grad, (int64_t)n, split);
    if (failed(cudaGetLastError(), "gradient_global_norm (partials)")) return NAN;
    sum_partials_kernel<<<1, kMaxRowThreads, 0, stream()>>>(partial + blocks, partial, (int)blocks);
    if (failed(cudaGetLastError(), "gradient_global_norm (sum)")) return NAN;
    if (failed(cudaMemcpyAsync(host, partial + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream()),
               "gradient_global_norm (copy)") ||
        failed(cudaStreamSynchronize(stream()), "gradient_global_norm (synchronize)"))
        return NAN;
    return sqrt(*host);
}

/* ------------------------------------------------------------------------ */
/* Copies, sums and bf16 conversions                                         */

extern "C" void copy_f32_cuda(float *dst, const float *src, int64_t n) {
    if (n <= 0 || dst == src) return;
    failed(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, stream()), "copy_f32");
}

extern "C" void zero_f32_cuda(float *dst, int64_t n) {
    if (n <= 0) return;
    failed(cudaMemsetAsync(dst, 0, (size_t)n * sizeof(float), stream()), "zero_f32");
}

extern "C" void add_f32_cuda(float *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    const void *ptrs[] = {dst, src};
    const int sizes[] = {4, 4};
    const vec4_split split = split_for_vec4(n, ptrs, sizes, 2);
    add_f32_kernel<<<grid_for(split.vecs > 0 ? split.vecs : n, kThreads), kThreads, 0, stream()>>>(dst, src, n, split);
    check_launch("add_f32");
}

extern "C" void f32_to_bf16_cuda(uint16_t *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    const void *ptrs[] = {dst, src};
    const int sizes[] = {2, 4};
    const vec4_split split = split_for_vec4(n, ptrs, sizes, 2);
    f32_to_bf16_kernel<<<grid_for(split.vecs > 0 ? split.vecs : n, kThreads), kThreads, 0, stream()>>>(dst, src, n,
                                                                                                      split);
    check_launch("f32_to_bf16");
}

extern "C" void bf16_to_f32_cuda(float *dst, const uint16_t *src, int64_t n, int add) {
    if (n <= 0) return;
    const void *ptrs[] = {dst, src};
    const int sizes[] = {4, 2};
    const vec4_split split = split_for_vec4(n, ptrs, sizes, 2);
    bf16_to_f32_kernel<<<grid_for(split.vecs > 0 ? split.vecs : n, kThreads), kThreads, 0, stream()>>>(dst, src, n,
                                                                                                      split, add);
    check_launch("bf16_to_f32");
}
