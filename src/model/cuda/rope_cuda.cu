/*
 * rope_cuda.cu - rotary position embedding on the GPU, forward and backward
 * (the same rotation by the opposite angle), in place. See model_kernels.cuh.
 */
#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

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

void rope_rotate_cuda(model_ops_ctx *oc, float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                      int64_t row_stride, const float *cos_table, const float *sin_table, float sin_sign,
                      const char *what) {
    const int64_t half = head_dim / 2;
    if (batch <= 0 || seq <= 0 || n_heads <= 0 || half <= 0) return;
    if (head_dim > INT_MAX / n_heads) { /* the kernel indexes a row's heads in int */
        failed(oc, cudaErrorInvalidValue, what);
        return;
    }
    const bool vec = half % 4 == 0 && head_dim % 4 == 0 && row_stride % 4 == 0 && aligned16(x) &&
                     aligned16(cos_table) && aligned16(sin_table);
    const int64_t rows = batch * seq, items = n_heads * (vec ? half / 4 : half);
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(rows, items, threads);
    if (vec)
        rope_kernel<4><<<grid, threads, 0, stream(oc)>>>(x, rows, seq, (int)n_heads, (int)head_dim, row_stride,
                                                         cos_table, sin_table, sin_sign);
    else
        rope_kernel<1><<<grid, threads, 0, stream(oc)>>>(x, rows, seq, (int)n_heads, (int)head_dim, row_stride,
                                                         cos_table, sin_table, sin_sign);
    check_launch(oc, what);
}

} /* namespace */

extern "C" void rope_forward_cuda(model_ops_ctx *oc, float *x, int64_t batch, int64_t seq, int64_t n_heads,
                                  int64_t head_dim, int64_t row_stride, const float *cos_table,
                                  const float *sin_table) {
    rope_rotate_cuda(oc, x, batch, seq, n_heads, head_dim, row_stride, cos_table, sin_table, 1.0f, "rope_forward");
}

extern "C" void rope_backward_cuda(model_ops_ctx *oc, float *dx, int64_t batch, int64_t seq, int64_t n_heads,
                                   int64_t head_dim, int64_t row_stride, const float *cos_table,
                                   const float *sin_table) {
    rope_rotate_cuda(oc, dx, batch, seq, n_heads, head_dim, row_stride, cos_table, sin_table, -1.0f, "rope_backward");
}
