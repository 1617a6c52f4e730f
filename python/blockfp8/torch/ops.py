"""blockfp8.torch.ops - libblockfp8's quantizers and GEMMs as PyTorch custom
operators (torch.library.custom_op), torch.ops.blockfp8.*:

    quantize_1x128(x, rows, cols, pow2, nonfinite_flag) -> (codes, scales, codes_t, scales_t)
    quantize_128x128(w, transposed, pow2, nonfinite_flag) -> (codes, scales, codes_t, scales_t)
    gemm_1d2d(a, a_scales, b, b_scales, k, out_dtype) -> d             D = A B^T, A 1x128, B 128x128
    gemm_1d1d(a, a_scales, b, b_scales, k, out_dtype) -> d             D = A B^T, both 1x128
    gemm_1d2d_grouped(a, a_scales, b, b_scales, k, offsets, out_dtype) -> d
    gemm_1d1d_grouped(a, a_scales, b, b_scales, k, offsets, out_dtype) -> d
    gemm_1d2d_grouped_device_offsets / gemm_1d1d_grouped_device_offsets: offsets as an int64 tensor

Each has a fake implementation (shapes, dtypes and strides without running
anything), so torch.compile traces through them without graph breaks; the
ctypes calls into the library run only inside the real implementations, on
CPU tensors (the CPU backend) or CUDA tensors (the tensor's device and
PyTorch's current stream). Every output is a new tensor from PyTorch's
allocator, so CUDA graphs capture them.

A quantized matrix is two tensors in the canonical layouts of blockfp8.h
(blockfp8.canonical_layout): uint8 e4m3 codes, rows x ld (ld = cols
rounded up to 16), and float32 scales, for 1x128 groups ceil(cols/128) x
(rows rounded up to 4) (scales[kb, r]: row r, k-block kb), for 128x128
blocks ceil(rows/128) x ceil(cols/128). Its cols (the GEMM's contraction
length k) is passed to the GEMMs, as the codes' ld rounds it up. A
quantizer's output that was not asked for is a 0 x 0 tensor.

nonfinite_flag: None or a one-element int32 tensor beside x, set to 1 (never
cleared) when a group holds NaN or Inf; the operator mutates it.
Offsets as a list of ints are host values (checked by the library, copied
to the GPU at each call, so not for CUDA graph capture); as an int64 tensor
beside the operands they stay on the device (clamped, not checked).
"""
from typing import List, Optional, Tuple

import torch

import blockfp8 as _bf
from blockfp8 import _ffi

__all__ = ["quantize_1x128", "quantize_128x128", "gemm_1d2d", "gemm_1d1d", "gemm_1d2d_grouped",
           "gemm_1d1d_grouped", "gemm_1d2d_grouped_device_offsets", "gemm_1d1d_grouped_device_offsets",
           "scale_shape"]

_U8, _F32 = torch.uint8, torch.float32
_OUT_DTYPES = {torch.bfloat16: "bf16", torch.float32: "f32"}


def _ceil(a, b):
    return (a + b - 1) // b


def scale_shape(rows, cols, granularity):
    """The (codes, scales) shapes of a quantized rows x cols matrix
    (granularity 1: 1x128, 2: 128x128); works on SymInts."""
    ld = _ceil(cols, 16) * 16
    if granularity == _ffi.GRAN_1X128:
        return (rows, ld), (_ceil(cols, 128), _ceil(rows, 4) * 4)
    return (rows, ld), (_ceil(rows, 128), _ceil(cols, 128))


def _empty_q(like, rows, cols, granularity):
    codes, scales = scale_shape(rows, cols, granularity)
    return like.new_empty(codes, dtype=_U8), like.new_empty(scales, dtype=_F32)


def _absent(like):
    return like.new_empty((0, 0), dtype=_U8), like.new_empty((0, 0), dtype=_F32)


def _rows_contiguous(t):
    """t with unit column stride and a non-negative row stride >= its columns."""
    if t.dim() == 2 and (t.shape[1] <= 1 or t.stride(1) == 1) and (t.shape[0] <= 1 or t.stride(0) >= t.shape[1]):
        return t
    return t.contiguous()


def _quantizer_input(t, name):
    if t.dim() != 2:
        raise ValueError("blockfp8: %s must be 2-D, got shape %s" % (name, tuple(t.shape)))
    if t.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError("blockfp8: %s has dtype %s (expected torch.float32 or torch.bfloat16)" % (name, t.dtype))
    return _rows_contiguous(t)


def _qtensor(codes, scales, granularity, cols):
    """A QTensor over op tensors (contiguous, canonical layout)."""
    codes, scales = codes.contiguous(), scales.contiguous()
    return _bf.QTensor(codes, scales, granularity, codes.shape[0], cols, codes.shape[1], scales.shape[1])


def _gemm_dtype(out_dtype):
    if out_dtype not in _OUT_DTYPES:
        raise ValueError("blockfp8: out_dtype %s (expected torch.bfloat16 or torch.float32)" % out_dtype)
    return _OUT_DTYPES[out_dtype]


# --------------------------------------------------------------------------
# Quantizers

@torch.library.custom_op("blockfp8::quantize_1x128", mutates_args=("nonfinite_flag",))
def quantize_1x128(x: torch.Tensor, rows: bool, cols: bool, pow2: bool,
                   nonfinite_flag: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                     torch.Tensor]:
    x = _quantizer_input(x, "x")
    r, c = x.shape
    out_rows = _empty_q(x, r, c, _ffi.GRAN_1X128) if rows else _absent(x)
    out_cols = _empty_q(x, c, r, _ffi.GRAN_1X128) if cols else _absent(x)
    if r == 0 or c == 0 or not (rows or cols):
        return out_rows + out_cols
    q_rows, q_cols = _bf.quantize_1x128(x, rows=rows, cols=cols, pow2=pow2, nonfinite_flag=nonfinite_flag)
    return ((q_rows.data, q_rows.scales) if rows else out_rows) + ((q_cols.data, q_cols.scales) if cols else out_cols)


@quantize_1x128.register_fake
def _(x, rows, cols, pow2, nonfinite_flag):
    r, c = x.shape
    out_rows = _empty_q(x, r, c, _ffi.GRAN_1X128) if rows else _absent(x)
    out_cols = _empty_q(x, c, r, _ffi.GRAN_1X128) if cols else _absent(x)
    return out_rows + out_cols


@torch.library.custom_op("blockfp8::quantize_128x128", mutates_args=("nonfinite_flag",))
def quantize_128x128(w: torch.Tensor, transposed: bool, pow2: bool,
                     nonfinite_flag: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                       torch.Tensor]:
    w = _quantizer_input(w, "w")
    r, c = w.shape
    if r == 0 or c == 0:
        return _empty_q(w, r, c, _ffi.GRAN_128X128) + (_empty_q(w, c, r, _ffi.GRAN_128X128) if transposed
                                                        else _absent(w))
    q, q_t = _bf.quantize_128x128(w, transposed=transposed, pow2=pow2, nonfinite_flag=nonfinite_flag)
    return (q.data, q.scales) + ((q_t.data, q_t.scales) if transposed else _absent(w))


@quantize_128x128.register_fake
def _(w, transposed, pow2, nonfinite_flag):
    r, c = w.shape
    return _empty_q(w, r, c, _ffi.GRAN_128X128) + (_empty_q(w, c, r, _ffi.GRAN_128X128) if transposed
                                                    else _absent(w))


# --------------------------------------------------------------------------
# GEMMs

@torch.library.custom_op("blockfp8::gemm_1d2d", mutates_args=())
def gemm_1d2d(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor, k: int,
              out_dtype: torch.dtype) -> torch.Tensor:
    kind = _gemm_dtype(out_dtype)
    m, n = a.shape[0], b.shape[0]
    if m == 0 or n == 0 or k == 0:
        return a.new_zeros((m, n), dtype=out_dtype)
    return _bf.gemm_1d2d(_qtensor(a, a_scales, _ffi.GRAN_1X128, k), _qtensor(b, b_scales, _ffi.GRAN_128X128, k),
                         out_dtype=kind)


@gemm_1d2d.register_fake
def _(a, a_scales, b, b_scales, k, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("blockfp8::gemm_1d1d", mutates_args=())
def gemm_1d1d(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor, k: int,
              out_dtype: torch.dtype) -> torch.Tensor:
    kind = _gemm_dtype(out_dtype)
    n, kk = a.shape[0], b.shape[0]
    if n == 0 or kk == 0 or k == 0:
        return a.new_zeros((n, kk), dtype=out_dtype)
    return _bf.gemm_1d1d(_qtensor(a, a_scales, _ffi.GRAN_1X128, k), _qtensor(b, b_scales, _ffi.GRAN_1X128, k),
                         out_dtype=kind)


@gemm_1d1d.register_fake
def _(a, a_scales, b, b_scales, k, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


# --------------------------------------------------------------------------
# Grouped GEMMs (mixture of experts)

def _host_offsets(offsets, like):
    if like.is_cuda and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("blockfp8: grouped GEMMs with offsets as a list copy them to the GPU at each call, "
                           "which a CUDA graph cannot capture: pass the offsets as an int64 tensor on the GPU")
    return [int(v) for v in offsets]


def _grouped_1d2d(a, a_scales, b, b_scales, k, offsets, groups, out_dtype):
    _gemm_dtype(out_dtype)
    m, n = a.shape[0], b.shape[0] // groups
    out = a.new_zeros((m, n), dtype=out_dtype)
    if m == 0 or n == 0 or k == 0:
        return out
    _bf.gemm_1d2d_grouped(_qtensor(a, a_scales, _ffi.GRAN_1X128, k), _qtensor(b, b_scales, _ffi.GRAN_128X128, k),
                          offsets, out=out)
    return out


def _grouped_1d1d(a, a_scales, b, b_scales, k, offsets, groups, out_dtype):
    kind = _gemm_dtype(out_dtype)
    n, kk = a.shape[0], b.shape[0]
    if n == 0 or kk == 0 or k == 0:
        return a.new_zeros((groups * n, kk), dtype=out_dtype)
    return _bf.gemm_1d1d_grouped(_qtensor(a, a_scales, _ffi.GRAN_1X128, k),
                                 _qtensor(b, b_scales, _ffi.GRAN_1X128, k), offsets, out_dtype=kind)


@torch.library.custom_op("blockfp8::gemm_1d2d_grouped", mutates_args=())
def gemm_1d2d_grouped(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor, k: int,
                      offsets: List[int], out_dtype: torch.dtype) -> torch.Tensor:
    return _grouped_1d2d(a, a_scales, b, b_scales, k, _host_offsets(offsets, a), len(offsets) - 1, out_dtype)


@gemm_1d2d_grouped.register_fake
def _(a, a_scales, b, b_scales, k, offsets, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty((a.shape[0], b.shape[0] // (len(offsets) - 1)), dtype=out_dtype)


@torch.library.custom_op("blockfp8::gemm_1d2d_grouped_device_offsets", mutates_args=())
def gemm_1d2d_grouped_device_offsets(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor,
                                     b_scales: torch.Tensor, k: int, offsets: torch.Tensor,
                                     out_dtype: torch.dtype) -> torch.Tensor:
    return _grouped_1d2d(a, a_scales, b, b_scales, k, offsets.contiguous(), offsets.shape[0] - 1, out_dtype)


@gemm_1d2d_grouped_device_offsets.register_fake
def _(a, a_scales, b, b_scales, k, offsets, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty((a.shape[0], b.shape[0] // (offsets.shape[0] - 1)), dtype=out_dtype)


@torch.library.custom_op("blockfp8::gemm_1d1d_grouped", mutates_args=())
def gemm_1d1d_grouped(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor, k: int,
                      offsets: List[int], out_dtype: torch.dtype) -> torch.Tensor:
    return _grouped_1d1d(a, a_scales, b, b_scales, k, _host_offsets(offsets, a), len(offsets) - 1, out_dtype)


@gemm_1d1d_grouped.register_fake
def _(a, a_scales, b, b_scales, k, offsets, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty(((len(offsets) - 1) * a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("blockfp8::gemm_1d1d_grouped_device_offsets", mutates_args=())
def gemm_1d1d_grouped_device_offsets(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor,
                                     b_scales: torch.Tensor, k: int, offsets: torch.Tensor,
                                     out_dtype: torch.dtype) -> torch.Tensor:
    return _grouped_1d1d(a, a_scales, b, b_scales, k, offsets.contiguous(), offsets.shape[0] - 1, out_dtype)


@gemm_1d1d_grouped_device_offsets.register_fake
def _(a, a_scales, b, b_scales, k, offsets, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty(((offsets.shape[0] - 1) * a.shape[0], b.shape[0]), dtype=out_dtype)
