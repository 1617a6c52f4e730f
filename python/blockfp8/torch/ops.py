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
import ctypes as C
from typing import List, Optional, Tuple

import torch

import blockfp8 as _bf
from blockfp8 import _ffi

__all__ = ["quantize_1x128", "quantize_128x128", "gemm_1d2d", "gemm_1d1d", "gemm_1d2d_grouped",
           "gemm_1d1d_grouped", "gemm_1d2d_grouped_device_offsets", "gemm_1d1d_grouped_device_offsets",
           "scale_shape"]

_U8, _F32 = torch.uint8, torch.float32
_OUT_DTYPES = {torch.bfloat16: "bf16", torch.float32: "f32"}
_DTYPE_CODES = {torch.float32: _ffi.F32, torch.bfloat16: _ffi.BF16}


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


def _new_q(like, rows, cols, granularity):
    """Room for a quantized matrix; the padding the quantizers skip (codes
    past cols, 1x128 scales past rows) is zero, so every byte is defined."""
    codes, scales = scale_shape(rows, cols, granularity)
    padded_scales = granularity == _ffi.GRAN_1X128 and scales[1] != rows
    return ((like.new_zeros if codes[1] != cols else like.new_empty)(codes, dtype=_U8),
            (like.new_zeros if padded_scales else like.new_empty)(scales, dtype=_F32))


def _absent(like):
    return like.new_empty((0, 0), dtype=_U8), like.new_empty((0, 0), dtype=_F32)


def _library():
    return _bf._library()


def _context(t):
    """The library context of t's device (CUDA: on PyTorch's current stream)."""
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError("blockfp8: tensors on %s (expected CPU or CUDA memory)" % t.device)
    return _bf._context_of(t)._handle


def _quantizer_input(t, name):
    """t as a matrix the quantizers read: 2-D f32 / bf16, unit column stride."""
    if t.dim() != 2:
        raise ValueError("blockfp8: %s must be 2-D, got shape %s" % (name, tuple(t.shape)))
    if t.dtype not in _DTYPE_CODES:
        raise TypeError("blockfp8: %s has dtype %s (expected torch.float32 or torch.bfloat16)" % (name, t.dtype))
    rows, cols = t.shape
    if not ((cols <= 1 or t.stride(1) == 1) and (rows <= 1 or t.stride(0) >= cols)):
        t = t.contiguous()
    return t


def _matrix(t):
    rows, cols = t.shape
    return _ffi.Matrix(t.data_ptr(), _DTYPE_CODES[t.dtype], rows, cols, t.stride(0) if rows > 1 else cols)


def _qmatrix(codes, scales, granularity, cols, name):
    """The bfp8_qmatrix of a quantized operand (canonical or wider ld /
    scale_ld), after checks that keep the library inside the tensors."""
    if codes.dtype != _U8 or scales.dtype != _F32 or codes.dim() != 2 or scales.dim() != 2:
        raise TypeError("blockfp8: %s must be 2-D uint8 codes and 2-D float32 scales, got %s %s and %s %s" % (
            name, codes.dtype, tuple(codes.shape), scales.dtype, tuple(scales.shape)))
    if codes.device != scales.device:
        raise ValueError("blockfp8: %s's codes are on %s, its scales on %s" % (name, codes.device, scales.device))
    codes, scales = codes.contiguous(), scales.contiguous()
    rows, ld = codes.shape
    blocks = _ceil(cols, 128)
    scale_rows, scale_cols = (blocks, rows) if granularity == _ffi.GRAN_1X128 else (_ceil(rows, 128), blocks)
    if ld < cols or scales.shape[0] < scale_rows or scales.shape[1] < scale_cols:
        raise ValueError("blockfp8: %s: codes %s and scales %s do not hold a %s quantized %d x %d matrix" % (
            name, tuple(codes.shape), tuple(scales.shape), "1x128" if granularity == _ffi.GRAN_1X128 else "128x128",
            rows, cols))
    return _ffi.QMatrix(codes.data_ptr(), scales.data_ptr(), _ffi.E4M3, granularity, rows, cols, ld,
                        scales.shape[1])


def _flag_pointer(flag, like):
    if flag is None:
        return None
    if flag.dtype not in (torch.int32, torch.uint32) or flag.numel() < 1 or flag.device != like.device:
        raise ValueError("blockfp8: nonfinite_flag must be an int32 tensor of at least one element on %s, got %s "
                         "%s on %s" % (like.device, flag.dtype, tuple(flag.shape), flag.device))
    return flag.data_ptr()


def _options(pow2, flag, like):
    return _ffi.QuantizeOptions(1 if pow2 else 0, _flag_pointer(flag, like))


def _gemm_dtype(out_dtype):
    if out_dtype not in _OUT_DTYPES:
        raise ValueError("blockfp8: out_dtype %s (expected torch.bfloat16 or torch.float32)" % out_dtype)
    return _OUT_DTYPES[out_dtype]


def _same_device(*tensors):
    device = tensors[0].device
    for t in tensors[1:]:
        if t.device != device:
            raise ValueError("blockfp8: operands on %s and %s" % (device, t.device))


# --------------------------------------------------------------------------
# Quantizers

@torch.library.custom_op("blockfp8::quantize_1x128", mutates_args=("nonfinite_flag",))
def quantize_1x128(x: torch.Tensor, rows: bool, cols: bool, pow2: bool,
                   nonfinite_flag: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                     torch.Tensor]:
    x = _quantizer_input(x, "x")
    r, c = x.shape
    out_rows = _new_q(x, r, c, _ffi.GRAN_1X128) if rows else _absent(x)
    out_cols = _new_q(x, c, r, _ffi.GRAN_1X128) if cols else _absent(x)
    if r == 0 or c == 0 or not (rows or cols):
        return out_rows + out_cols
    q_rows = _qmatrix(*out_rows, _ffi.GRAN_1X128, c, "rows") if rows else None
    q_cols = _qmatrix(*out_cols, _ffi.GRAN_1X128, r, "cols") if cols else None
    m, options = _matrix(x), _options(pow2, nonfinite_flag, x)
    _bf._check(_library().bfp8_quantize_1x128(_context(x), C.byref(m), C.byref(q_rows) if rows else None,
                                              C.byref(q_cols) if cols else None, C.byref(options)))
    return out_rows + out_cols


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
    out = _new_q(w, r, c, _ffi.GRAN_128X128)
    out_t = _new_q(w, c, r, _ffi.GRAN_128X128) if transposed else _absent(w)
    if r == 0 or c == 0:
        return out + out_t
    q = _qmatrix(*out, _ffi.GRAN_128X128, c, "out")
    q_t = _qmatrix(*out_t, _ffi.GRAN_128X128, r, "out_t") if transposed else None
    m, options = _matrix(w), _options(pow2, nonfinite_flag, w)
    _bf._check(_library().bfp8_quantize_128x128(_context(w), C.byref(m), C.byref(q),
                                                C.byref(q_t) if transposed else None, C.byref(options)))
    return out + out_t


@quantize_128x128.register_fake
def _(w, transposed, pow2, nonfinite_flag):
    r, c = w.shape
    return _empty_q(w, r, c, _ffi.GRAN_128X128) + (_empty_q(w, c, r, _ffi.GRAN_128X128) if transposed
                                                    else _absent(w))


# --------------------------------------------------------------------------
# GEMMs

def _gemm_operands(a, a_scales, b, b_scales, k, b_granularity):
    _same_device(a, a_scales, b, b_scales)
    return _qmatrix(a, a_scales, _ffi.GRAN_1X128, k, "a"), _qmatrix(b, b_scales, b_granularity, k, "b")


@torch.library.custom_op("blockfp8::gemm_1d2d", mutates_args=())
def gemm_1d2d(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor, k: int,
              out_dtype: torch.dtype) -> torch.Tensor:
    _gemm_dtype(out_dtype)
    m, n = a.shape[0], b.shape[0]
    if m == 0 or n == 0 or k == 0:
        return a.new_zeros((m, n), dtype=out_dtype)
    qa, qb = _gemm_operands(a, a_scales, b, b_scales, k, _ffi.GRAN_128X128)
    out = a.new_empty((m, n), dtype=out_dtype)
    d = _matrix(out)
    _bf._check(_library().bfp8_gemm_1d2d(_context(a), C.byref(qa), C.byref(qb), C.byref(d)))
    return out


@gemm_1d2d.register_fake
def _(a, a_scales, b, b_scales, k, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("blockfp8::gemm_1d1d", mutates_args=())
def gemm_1d1d(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor, k: int,
              out_dtype: torch.dtype) -> torch.Tensor:
    _gemm_dtype(out_dtype)
    n, kk = a.shape[0], b.shape[0]
    if n == 0 or kk == 0 or k == 0:
        return a.new_zeros((n, kk), dtype=out_dtype)
    qa, qb = _gemm_operands(a, a_scales, b, b_scales, k, _ffi.GRAN_1X128)
    out = a.new_empty((n, kk), dtype=out_dtype)
    d = _matrix(out)
    _bf._check(_library().bfp8_gemm_1d1d(_context(a), C.byref(qa), C.byref(qb), None, C.byref(d)))
    return out


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
    values = [int(v) for v in offsets]
    return (C.c_int64 * len(values))(*values)


def _device_offsets(offsets, like):
    if offsets.dtype != torch.int64 or offsets.dim() != 1 or offsets.device != like.device:
        raise ValueError("blockfp8: offsets must be a 1-D int64 tensor on %s, got %s %s on %s" % (
            like.device, offsets.dtype, tuple(offsets.shape), offsets.device))
    return offsets.contiguous()


def _grouped_1d2d(a, a_scales, b, b_scales, k, table, groups, out_dtype, on_device):
    _gemm_dtype(out_dtype)
    if groups < 1 or b.shape[0] % groups:
        raise ValueError("blockfp8: b has %d rows, not a multiple of the %d groups" % (b.shape[0], groups))
    m, n = a.shape[0], b.shape[0] // groups
    out = a.new_zeros((m, n), dtype=out_dtype)  # rows past the last group are not written
    if m == 0 or n == 0 or k == 0:
        return out
    qa, qb = _gemm_operands(a, a_scales, b, b_scales, k, _ffi.GRAN_128X128)
    d = _matrix(out)
    lib = _library()
    if on_device:
        _bf._check(lib.bfp8_gemm_1d2d_grouped_device_offsets(_context(a), C.byref(qa), C.byref(qb),
                                                             C.c_void_p(table.data_ptr()), groups, C.byref(d)))
    else:
        _bf._check(lib.bfp8_gemm_1d2d_grouped(_context(a), C.byref(qa), C.byref(qb), table, groups, C.byref(d)))
    return out


def _grouped_1d1d(a, a_scales, b, b_scales, k, table, groups, out_dtype, on_device):
    _gemm_dtype(out_dtype)
    n, kk = a.shape[0], b.shape[0]
    if n == 0 or kk == 0 or k == 0 or groups < 1:
        return a.new_zeros((max(groups, 0) * n, kk), dtype=out_dtype)
    qa, qb = _gemm_operands(a, a_scales, b, b_scales, k, _ffi.GRAN_1X128)
    out = a.new_empty((groups * n, kk), dtype=out_dtype)
    d = _matrix(out)
    lib = _library()
    if on_device:
        _bf._check(lib.bfp8_gemm_1d1d_grouped_device_offsets(_context(a), C.byref(qa), C.byref(qb),
                                                             C.c_void_p(table.data_ptr()), groups, None,
                                                             C.byref(d)))
    else:
        _bf._check(lib.bfp8_gemm_1d1d_grouped(_context(a), C.byref(qa), C.byref(qb), table, groups, None,
                                              C.byref(d)))
    return out


@torch.library.custom_op("blockfp8::gemm_1d2d_grouped", mutates_args=())
def gemm_1d2d_grouped(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor, k: int,
                      offsets: List[int], out_dtype: torch.dtype) -> torch.Tensor:
    return _grouped_1d2d(a, a_scales, b, b_scales, k, _host_offsets(offsets, a), len(offsets) - 1, out_dtype, False)


@gemm_1d2d_grouped.register_fake
def _(a, a_scales, b, b_scales, k, offsets, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty((a.shape[0], b.shape[0] // (len(offsets) - 1)), dtype=out_dtype)


@torch.library.custom_op("blockfp8::gemm_1d2d_grouped_device_offsets", mutates_args=())
def gemm_1d2d_grouped_device_offsets(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor,
                                     b_scales: torch.Tensor, k: int, offsets: torch.Tensor,
                                     out_dtype: torch.dtype) -> torch.Tensor:
    offsets = _device_offsets(offsets, a)
    return _grouped_1d2d(a, a_scales, b, b_scales, k, offsets, offsets.shape[0] - 1, out_dtype, True)


@gemm_1d2d_grouped_device_offsets.register_fake
def _(a, a_scales, b, b_scales, k, offsets, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty((a.shape[0], b.shape[0] // (offsets.shape[0] - 1)), dtype=out_dtype)


@torch.library.custom_op("blockfp8::gemm_1d1d_grouped", mutates_args=())
def gemm_1d1d_grouped(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor, b_scales: torch.Tensor, k: int,
                      offsets: List[int], out_dtype: torch.dtype) -> torch.Tensor:
    return _grouped_1d1d(a, a_scales, b, b_scales, k, _host_offsets(offsets, a), len(offsets) - 1, out_dtype, False)


@gemm_1d1d_grouped.register_fake
def _(a, a_scales, b, b_scales, k, offsets, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty(((len(offsets) - 1) * a.shape[0], b.shape[0]), dtype=out_dtype)


@torch.library.custom_op("blockfp8::gemm_1d1d_grouped_device_offsets", mutates_args=())
def gemm_1d1d_grouped_device_offsets(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor,
                                     b_scales: torch.Tensor, k: int, offsets: torch.Tensor,
                                     out_dtype: torch.dtype) -> torch.Tensor:
    offsets = _device_offsets(offsets, a)
    return _grouped_1d1d(a, a_scales, b, b_scales, k, offsets, offsets.shape[0] - 1, out_dtype, True)


@gemm_1d1d_grouped_device_offsets.register_fake
def _(a, a_scales, b, b_scales, k, offsets, out_dtype):
    _gemm_dtype(out_dtype)
    return a.new_empty(((offsets.shape[0] - 1) * a.shape[0], b.shape[0]), dtype=out_dtype)
