/*
 * swiglu_cuda.cu - the SwiGLU activation on the GPU, forward and backward.
 * See model_kernels.cuh.
 */
#include <math.h>

#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"
#include "nn/swiglu_math.h"

using namespace bfp8_model_cuda;

namespace {

/* gate_up (and dout): fp32, or bf16 (a bf16 linear layer's output as it is); out
 * (dgate_up): fp32, or bf16 (the input, or the output gradient, of a bf16
 * linear layer, rounded here instead of in a pass of its own). */
template <int V, typename In, typename Out>
__global__ void swiglu_forward_kernel(Out *__restrict__ out, const In *__restrict__ gate_up, int64_t tokens,
                                      int64_t hidden) {
    const int64_t vecs = hidden / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const In *gate = gate_up + t * 2 * hidden, *up = gate + hidden;
        for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < vecs;
             j += (int64_t)gridDim.y * blockDim.x) {
            const floats<V> g = load<V>(gate + j * V), u = load<V>(up + j * V);
            floats<V> o;
#pragma unroll
            for (int e = 0; e < V; ++e) o.v[e] = bfp8_swiglu_value(g.v[e], u.v[e]);
            store<V>(out + t * hidden + j * V, o);
        }
    }
}

template <int V, typename In, typename Out>
__global__ void swiglu_backward_kernel(Out *__restrict__ dgate_up, const In *__restrict__ dout,
                                       const In *__restrict__ gate_up, int64_t tokens, int64_t hidden) {
    const int64_t vecs = hidden / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const In *gate = gate_up + t * 2 * hidden, *up = gate + hidden;
        Out *dgate = dgate_up + t * 2 * hidden, *dup = dgate + hidden;
        for (int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; j < vecs;
             j += (int64_t)gridDim.y * blockDim.x) {
            const floats<V> g = load<V>(gate + j * V), u = load<V>(up + j * V),
                            d = load<V>(dout + t * hidden + j * V);
            floats<V> dg, du;
#pragma unroll
            for (int e = 0; e < V; ++e) bfp8_swiglu_grads(g.v[e], u.v[e], d.v[e], &dg.v[e], &du.v[e]);
            store<V>(dup + j * V, du);
            store<V>(dgate + j * V, dg);
        }
    }
}

template <typename In, typename Out>
void swiglu_forward_launch(model_ops_ctx *oc, Out *out, const In *gate_up, int64_t tokens, int64_t hidden,
                           const char *what) {
    if (tokens <= 0 || hidden <= 0) return;
    const bool vec = hidden % 4 == 0 && aligned16(out) && aligned16(gate_up);
    const int64_t items = vec ? hidden / 4 : hidden;
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(tokens, items, threads);
    if (vec)
        swiglu_forward_kernel<4><<<grid, threads, 0, stream(oc)>>>(out, gate_up, tokens, hidden);
    else
        swiglu_forward_kernel<1><<<grid, threads, 0, stream(oc)>>>(out, gate_up, tokens, hidden);
    check_launch(oc, what);
}

template <typename In, typename Out>
void swiglu_backward_launch(model_ops_ctx *oc, Out *dgate_up, const In *dout, const In *gate_up, int64_t tokens,
                            int64_t hidden, const char *what) {
    if (tokens <= 0 || hidden <= 0) return;
    const bool vec = hidden % 4 == 0 && aligned16(dgate_up) && aligned16(dout) && aligned16(gate_up);
    const int64_t items = vec ? hidden / 4 : hidden;
    const int threads = chunk_threads(items);
    const dim3 grid = rows_by_chunks(tokens, items, threads);
    if (vec)
        swiglu_backward_kernel<4><<<grid, threads, 0, stream(oc)>>>(dgate_up, dout, gate_up, tokens, hidden);
    else
        swiglu_backward_kernel<1><<<grid, threads, 0, stream(oc)>>>(dgate_up, dout, gate_up, tokens, hidden);
    check_launch(oc, what);
}

} /* namespace */

extern "C" void swiglu_forward_cuda(model_ops_ctx *oc, float *out, const float *gate_up, int64_t tokens,
                                    int64_t hidden) {
    swiglu_forward_launch(oc, out, gate_up, tokens, hidden, "swiglu_forward");
}

extern "C" void swiglu_forward_bf16_cuda(model_ops_ctx *oc, uint16_t *out, const uint16_t *gate_up, int64_t tokens,
                                         int64_t hidden) {
    swiglu_forward_launch(oc, out, gate_up, tokens, hidden, "swiglu_forward_bf16");
}

extern "C" void swiglu_backward_cuda(model_ops_ctx *oc, float *dgate_up, const float *dout, const float *gate_up,
                                     int64_t tokens, int64_t hidden) {
    swiglu_backward_launch(oc, dgate_up, dout, gate_up, tokens, hidden, "swiglu_backward");
}

extern "C" void swiglu_backward_bf16_cuda(model_ops_ctx *oc, uint16_t *dgate_up, const uint16_t *dout,
                                          const uint16_t *gate_up, int64_t tokens, int64_t hidden) {
    swiglu_backward_launch(oc, dgate_up, dout, gate_up, tokens, hidden, "swiglu_backward_bf16");
}
