"""blockfp8 from Python: the blockwise FP8 quantizers, GEMMs and linear layer
of libblockfp8 (include/blockfp8.h) over numpy arrays (CPU backend) and
PyTorch tensors (CPU backend, or the CUDA backend for CUDA tensors, on the
tensor's device and PyTorch's current stream).

    import blockfp8 as bf
    qx, qxt = bf.quantize_1x128(x, rows=True, cols=True)   # x: M x K, bf16 or f32
    qw, qwt = bf.quantize_128x128(w, transposed=True)       # w: N x K
    y  = bf.gemm_1d2d(qx, qw)                               # y  = x W^T   (M x N, bf16)
    dx = bf.gemm_1d2d(qdy, qwt)                             # dx = dy W    (M x K)
    dw = bf.gemm_1d1d(qdyt, qxt)                            # dw = dy^T x  (N x K, f32)

Matrices are 2-D and row-major with contiguous rows (a padded row stride is
fine). bf16 arrays are torch.bfloat16 tensors, or numpy arrays of
ml_dtypes.bfloat16 or of uint16 bit patterns. Arrays the binding cannot
pass (wrong rank, dtype or strides, GPU and host memory mixed) raise
ValueError or TypeError; a call the library refuses raises blockfp8.Error
with its status and message. Either way nothing is written.
On CUDA, calls are asynchronous on the current stream, as PyTorch's own.

blockfp8.torch has Float8BlockwiseLinear, an nn.Module running all three
GEMMs of a linear layer in FP8 with these kernels.
"""
import ctypes as C

from . import _ffi

__all__ = ["Error", "Context", "QTensor", "Linear", "cuda_device_count", "quantize_1x128", "quantize_128x128",
           "dequantize", "gemm_1d2d", "gemm_1d1d", "gemm_1d2d_grouped", "gemm_1d1d_grouped"]

_lib = None


def _library():
    global _lib
    if _lib is None:
        _lib = _ffi.load()
    return _lib


class Error(RuntimeError):
    """A call into libblockfp8 failed: .status is the BFP8_* name, the message says why."""

    def __init__(self, status, message):
        super().__init__("%s: %s" % (status, message))
        self.status = status


def _check(status):
    if status != _ffi.OK:
        lib = _library()
        raise Error(lib.bfp8_status_name(status).decode(), lib.bfp8_last_error().decode())


def cuda_device_count():
    """Usable CUDA devices (0 without a GPU or a library built without CUDA)."""
    return _library().bfp8_cuda_device_count()


# --------------------------------------------------------------------------
# Arrays: numpy or torch, and the context (backend, device) they live on

def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _np():
    import numpy
    return numpy


def _numpy_bf16():
    try:
        import ml_dtypes
        return _np().dtype(ml_dtypes.bfloat16)
    except ImportError:
        return _np().dtype(_np().uint16)


def _dtype_code(x):
    if _is_torch(x):
        import torch
        codes = {torch.float32: _ffi.F32, torch.bfloat16: _ffi.BF16}
        if x.dtype not in codes:
            raise TypeError("blockfp8: tensor dtype %s (expected float32 or bfloat16)" % x.dtype)
        return codes[x.dtype]
    name = x.dtype.name
    if name == "float32":
        return _ffi.F32
    if name in ("bfloat16", "uint16"):
        return _ffi.BF16
    raise TypeError("blockfp8: array dtype %s (expected float32, ml_dtypes.bfloat16 or uint16 bf16 bits)" % name)


def _pointer(x):
    return x.data_ptr() if _is_torch(x) else x.ctypes.data


def _place(x):
    """Where an array's memory is: ("cuda", index) for CUDA tensors, else ("cpu",)."""
    return ("cuda", x.device.index) if _is_torch(x) and x.is_cuda else ("cpu",)


def _same_place(*named):
    """(name, array or None) pairs: every given array in one place, or ValueError
    (the CPU backend cannot tell a device pointer from a host one)."""
    given = [(name, _place(a)) for name, a in named if a is not None]
    for name, place in given[1:]:
        if place != given[0][1]:
            raise ValueError("blockfp8: %s is on %s but %s on %s" % (name, ":".join(map(str, place)), given[0][0],
                                                                     ":".join(map(str, given[0][1]))))


def _matrix(x, what):
    """The bfp8_matrix view of a 2-D array with contiguous rows."""
    if len(x.shape) != 2:
        raise ValueError("blockfp8: %s must be 2-D, got shape %s" % (what, tuple(x.shape)))
    rows, cols = int(x.shape[0]), int(x.shape[1])
    if _is_torch(x):
        row_step, col_step = x.stride(0), x.stride(1)
    else:
        size = x.itemsize
        if x.strides[0] % size or x.strides[1] % size:
            raise ValueError("blockfp8: %s has strides not a multiple of its element size" % what)
        row_step, col_step = x.strides[0] // size, x.strides[1] // size
    if cols > 1 and col_step != 1:
        raise ValueError("blockfp8: %s must have contiguous rows (column stride %d)" % (what, col_step))
    ld = row_step if rows > 1 else max(row_step, cols)
    return _ffi.Matrix(_pointer(x), _dtype_code(x), rows, cols, ld)


def _empty(like, shape, kind):
    """A new array beside `like` (same library, device): kind u8, f32 or bf16."""
    if _is_torch(like):
        import torch
        dtype = {"u8": torch.uint8, "f32": torch.float32, "bf16": torch.bfloat16}[kind]
        return torch.empty(shape, dtype=dtype, device=like.device)
    np = _np()
    dtype = {"u8": np.uint8, "f32": np.float32, "bf16": _numpy_bf16()}[kind]
    return np.empty(shape, dtype=dtype)


class Context:
    """A libblockfp8 context: a backend and, on CUDA, a device and a stream."""

    def __init__(self, backend="cpu", device=0):
        if backend not in ("cpu", "cuda"):
            raise ValueError("blockfp8: backend %r (expected 'cpu' or 'cuda')" % (backend,))
        self.backend, self.device = backend, device
        self._handle = C.c_void_p()
        _check(_library().bfp8_context_create(
            C.byref(self._handle), _ffi.BACKEND_CUDA if backend == "cuda" else _ffi.BACKEND_CPU, device))

    def set_stream(self, stream):
        """CUDA: enqueue work on this cudaStream_t (an int; 0 = the legacy default stream)."""
        _check(_library().bfp8_context_set_stream(self._handle, C.c_void_p(stream or None)))

    def synchronize(self):
        _check(_library().bfp8_context_synchronize(self._handle))

    def __del__(self):
        if getattr(self, "_handle", None) and _lib is not None:
            _lib.bfp8_context_destroy(self._handle)
            self._handle = None


_contexts = {}


def _context_of(x):
    """The context for an array's memory: CPU for numpy and CPU tensors, the
    tensor's device for CUDA tensors (on PyTorch's current stream)."""
    if _is_torch(x) and x.is_cuda:
        import torch
        key = ("cuda", x.device.index)
        if key not in _contexts:
            _contexts[key] = Context("cuda", x.device.index)
        ctx = _contexts[key]
        ctx.set_stream(torch.cuda.current_stream(x.device).cuda_stream)
        return ctx
    if ("cpu", 0) not in _contexts:
        _contexts[("cpu", 0)] = Context("cpu")
    return _contexts[("cpu", 0)]


# --------------------------------------------------------------------------
# Quantized matrices

class QTensor:
    """A quantized matrix in the layouts of include/blockfp8.h.

    data:   uint8 e4m3 codes, rows x ld (ld = cols rounded up to 16)
    scales: float32 dequantization factors (x ~ code * scale); 1x128:
            ceil(cols/128) x scale_ld, scales[kb, r] for row r (MN-major);
            128x128: ceil(rows/128) x ceil(cols/128)
    """

    def __init__(self, data, scales, granularity, rows, cols, ld, scale_ld):
        self.data, self.scales = data, scales
        self.granularity = granularity
        self.rows, self.cols, self.ld, self.scale_ld = rows, cols, ld, scale_ld

    @property
    def shape(self):
        return (self.rows, self.cols)

    @classmethod
    def empty(cls, like, rows, cols, granularity):
        q = _ffi.QMatrix()
        _check(_library().bfp8_qmatrix_layout(C.byref(q), rows, cols, granularity, None, None))
        blocks = -(-cols // 128)
        scale_rows = blocks if granularity == _ffi.GRAN_1X128 else -(-rows // 128)
        return cls(_empty(like, (rows, q.ld), "u8"), _empty(like, (scale_rows, q.scale_ld), "f32"),
                   granularity, rows, cols, q.ld, q.scale_ld)

    def _struct(self):
        return _ffi.QMatrix(_pointer(self.data), _pointer(self.scales), _ffi.E4M3, self.granularity,
                            self.rows, self.cols, self.ld, self.scale_ld)

    def __repr__(self):
        gran = "1x128" if self.granularity == _ffi.GRAN_1X128 else "128x128"
        return "QTensor(%d x %d, %s, %s)" % (self.rows, self.cols, gran, type(self.data).__module__)


def _options(pow2, flag):
    return _ffi.QuantizeOptions(1 if pow2 else 0, _pointer(flag) if flag is not None else None)


def quantize_1x128(x, rows=True, cols=False, pow2=False, nonfinite_flag=None):
    """Activations and gradients, 1x128 groups, from one read of x (R x C, bf16 or f32).

    Returns (q_rows, q_cols): q_rows is x (R x C) grouped along C, q_cols is
    x^T (C x R) grouped along R; each None unless asked for. nonfinite_flag:
    an optional one-element uint32/int32 array beside x, set to 1 when a
    group holds NaN or Inf (that group's codes become NaN)."""
    if not rows and not cols:
        raise ValueError("blockfp8: quantize_1x128 needs rows=True or cols=True")
    _same_place(("x", x), ("nonfinite_flag", nonfinite_flag))
    m = _matrix(x, "x")
    q_rows = QTensor.empty(x, m.rows, m.cols, _ffi.GRAN_1X128) if rows else None
    q_cols = QTensor.empty(x, m.cols, m.rows, _ffi.GRAN_1X128) if cols else None
    out_rows = q_rows._struct() if q_rows else None
    out_cols = q_cols._struct() if q_cols else None
    _check(_library().bfp8_quantize_1x128(_context_of(x)._handle, C.byref(m),
                                          C.byref(out_rows) if out_rows else None,
                                          C.byref(out_cols) if out_cols else None,
                                          C.byref(_options(pow2, nonfinite_flag))))
    return q_rows, q_cols


def quantize_128x128(w, transposed=False, pow2=False, nonfinite_flag=None):
    """Weights, 128x128 blocks: (q, q_t) with q_t = the same blocks transposed
    (C x R; None unless transposed=True). W^T serves the dgrad GEMM."""
    _same_place(("w", w), ("nonfinite_flag", nonfinite_flag))
    m = _matrix(w, "w")
    q = QTensor.empty(w, m.rows, m.cols, _ffi.GRAN_128X128)
    q_t = QTensor.empty(w, m.cols, m.rows, _ffi.GRAN_128X128) if transposed else None
    out, out_t = q._struct(), q_t._struct() if q_t else None
    _check(_library().bfp8_quantize_128x128(_context_of(w)._handle, C.byref(m), C.byref(out),
                                            C.byref(out_t) if out_t else None,
                                            C.byref(_options(pow2, nonfinite_flag))))
    return q, q_t


def dequantize(q, dtype="f32"):
    """codes * scales as a new rows x cols array, f32 or bf16."""
    out = _empty(q.data, (q.rows, q.cols), dtype)
    s, d = q._struct(), _matrix(out, "out")
    _check(_library().bfp8_dequantize(_context_of(q.data)._handle, C.byref(s), C.byref(d)))
    return out


def gemm_1d2d(a, b, out=None, out_dtype="bf16"):
    """D[M, N] = A[M, K] . B[N, K]^T with A 1x128 (activations, gradients) and
    B 128x128 (a weight or its transpose): fprop and dgrad. Every 128-wide
    k-block is promoted into fp32. out: an M x N bf16/f32 array, or a new one."""
    _same_place(("a", a.data), ("b", b.data), ("out", out))
    if out is None:
        out = _empty(a.data, (a.rows, b.rows), out_dtype)
    sa, sb, d = a._struct(), b._struct(), _matrix(out, "out")
    _check(_library().bfp8_gemm_1d2d(_context_of(a.data)._handle, C.byref(sa), C.byref(sb), C.byref(d)))
    return out


def gemm_1d1d(a, b, out=None, accumulate=False, out_dtype="f32"):
    """D[N, K] = A[N, M] . B[K, M]^T with both 1x128 along M (the tokens):
    the weight gradient dy^T x from quantize_1x128(..., cols=True) of dy and x.
    accumulate: out += A.B^T (out f32, given), else out = A.B^T."""
    if accumulate and out is None:
        raise ValueError("blockfp8: gemm_1d1d(accumulate=True) needs out")
    _same_place(("a", a.data), ("b", b.data), ("out", out))
    if out is None:
        out = _empty(a.data, (a.rows, b.rows), out_dtype)
    sa, sb, d = a._struct(), b._struct(), _matrix(out, "out")
    _check(_library().bfp8_gemm_1d1d(_context_of(a.data)._handle, C.byref(sa), C.byref(sb),
                                     C.byref(d) if accumulate else None, C.byref(d)))
    return out


def _group_offsets(offsets, like):
    """The G + 1 offsets of a grouped GEMM: a list or tuple (host values,
    checked by the library), or an int64 array/tensor beside the operands
    (backend memory, e.g. a router's output on the GPU: no synchronization;
    the library clamps what it cannot check). Returns (pointer or ctypes
    array, G, whether the offsets are in backend memory)."""
    if isinstance(offsets, (list, tuple)):
        values = [int(v) for v in offsets]
        if len(values) < 2:
            raise ValueError("blockfp8: group offsets need at least two values (0 and the end of group 0)")
        return (C.c_int64 * len(values))(*values), len(values) - 1, False
    if len(offsets.shape) != 1 or offsets.shape[0] < 2 or str(offsets.dtype).split(".")[-1] != "int64":
        raise ValueError("blockfp8: group offsets as an array must be 1-D int64 with G + 1 >= 2 values")
    if _is_torch(offsets) and not offsets.is_contiguous():
        raise ValueError("blockfp8: group offsets must be contiguous")
    _same_place(("the operands", like), ("offsets", offsets))
    return C.c_void_p(_pointer(offsets)), offsets.shape[0] - 1, True


def gemm_1d2d_grouped(a, b, offsets, out=None, out_dtype="bf16"):
    """Mixture of experts, fprop and dgrad: D[rows of g] = A[rows of g] . B_g^T
    for every expert g, whose tokens are rows offsets[g]..offsets[g+1] of A
    (multiples of 128; a list of host values, or an int64 array/tensor
    beside A, see _group_offsets). b stacks the G weights (G*N x K, 128x128,
    N a multiple of 128). D rows past the last group are not written."""
    table, groups, on_backend = _group_offsets(offsets, a.data)
    _same_place(("a", a.data), ("b", b.data), ("out", out))
    if out is None:
        out = _empty(a.data, (a.rows, b.rows // groups), out_dtype)
    sa, sb, d = a._struct(), b._struct(), _matrix(out, "out")
    fn = _library().bfp8_gemm_1d2d_grouped_device_offsets if on_backend else _library().bfp8_gemm_1d2d_grouped
    _check(fn(_context_of(a.data)._handle, C.byref(sa), C.byref(sb), table, groups, C.byref(d)))
    return out


def gemm_1d1d_grouped(a, b, offsets, out=None, accumulate=False, out_dtype="f32"):
    """Mixture of experts, wgrad: D_g[N, K] (+)= A[:, tokens of g] . B[:, tokens of g]^T
    for every expert g, its tokens columns offsets[g]..offsets[g+1] (as for
    gemm_1d2d_grouped) of A (N x M) and B (K x M). D is G*N x K, expert g's
    gradient rows g*N..; an expert without tokens gets zeros (or keeps out)."""
    table, groups, on_backend = _group_offsets(offsets, a.data)
    if accumulate and out is None:
        raise ValueError("blockfp8: gemm_1d1d_grouped(accumulate=True) needs out")
    _same_place(("a", a.data), ("b", b.data), ("out", out))
    if out is None:
        out = _empty(a.data, (groups * a.rows, b.rows), out_dtype)
    sa, sb, d = a._struct(), b._struct(), _matrix(out, "out")
    fn = _library().bfp8_gemm_1d1d_grouped_device_offsets if on_backend else _library().bfp8_gemm_1d1d_grouped
    _check(fn(_context_of(a.data)._handle, C.byref(sa), C.byref(sb), table, groups,
              C.byref(d) if accumulate else None, C.byref(d)))
    return out


# --------------------------------------------------------------------------
# The library's linear layer

class Linear:
    """The C library's linear layer y = x W^T (W: out x in), forward and
    backward in one of the recipes "fp8-blockwise", "fp8-blockwise-bf16wgrad"
    or "bf16". It holds the quantized weight and what backward needs, for the
    LAST forward only. device: "cpu" (numpy or CPU tensors) or "cuda[:N]"."""

    def __init__(self, in_features, out_features, max_tokens, recipe="fp8-blockwise",
                 pow2_scales=False, device="cpu"):
        if recipe not in _ffi.RECIPES:
            raise ValueError("blockfp8: recipe %r (expected one of %s)" % (recipe, ", ".join(_ffi.RECIPES)))
        backend, _, index = str(device).partition(":")
        self.ctx = Context(backend, int(index or 0))
        self.in_features, self.out_features, self.max_tokens = in_features, out_features, max_tokens
        cfg = _ffi.LinearConfig(in_features, out_features, max_tokens, _ffi.RECIPES[recipe],
                                1 if pow2_scales else 0, None)
        self._handle = C.c_void_p()
        _check(_library().bfp8_linear_create(C.byref(self._handle), self.ctx._handle, C.byref(cfg)))
        self._kept = None

    def _prepare(self, x):
        place = ("cuda", self.ctx.device) if self.ctx.backend == "cuda" else ("cpu",)
        if _place(x) != place:
            raise ValueError("blockfp8: an array on %s given to a Linear on %s" % (
                ":".join(map(str, _place(x))), ":".join(map(str, place))))
        if _is_torch(x) and x.is_cuda:
            import torch
            self.ctx.set_stream(torch.cuda.current_stream(x.device).cuda_stream)

    @staticmethod
    def _contiguous(x, what, dtype_code, shape):
        """x as a contiguous matrix (its .data pointer, its .dtype code);
        dtype_code None: bf16 or f32, whichever x is."""
        if tuple(x.shape) != shape:
            raise ValueError("blockfp8: %s has shape %s, expected %s" % (what, tuple(x.shape), shape))
        m = _matrix(x, what)
        if (dtype_code is not None and m.dtype != dtype_code) or (m.rows > 1 and m.ld != m.cols):
            expected = {None: "bf16 or f32", _ffi.F32: "f32", _ffi.BF16: "bf16"}[dtype_code]
            raise ValueError("blockfp8: %s must be contiguous %s" % (what, expected))
        return m

    def set_weight(self, w):
        """The fp32 master weight (out x in, contiguous): quantized (or
        converted to bf16) for the next forward. Call after every update."""
        self._prepare(w)
        ptr = self._contiguous(w, "w", _ffi.F32, (self.out_features, self.in_features)).data
        _check(_library().bfp8_linear_set_weight(self._handle, C.c_void_p(ptr)))

    def forward(self, x):
        """y = x W^T for x: tokens x in (contiguous) -> tokens x out, of x's
        dtype: bf16, or f32 (fp8-blockwise only: quantized from f32 as it is,
        y written in f32, nothing rounded to bf16 on the way)."""
        self._prepare(x)
        tokens = int(x.shape[0])
        m = self._contiguous(x, "x", None, (tokens, self.in_features))
        ptr, f32 = m.data, m.dtype == _ffi.F32
        y = _empty(x, (tokens, self.out_features), "f32" if f32 else "bf16")
        forward = _library().bfp8_linear_forward_f32 if f32 else _library().bfp8_linear_forward
        _check(forward(self._handle, C.c_void_p(ptr), tokens, C.c_void_p(_pointer(y))))
        self._kept = x  # the bf16 recipes read x again in backward
        return y

    def backward(self, dy, dw=None, accumulate=False, need_dx=True):
        """Of the last forward: returns (dx, dw). dx = dy W (dy's dtype, bf16
        or f32 (fp8-blockwise only; forward and backward may differ), None
        unless need_dx); dw = dy^T x (f32, out x in): stored into dw, or added
        to it when accumulate, or a new array when dw is None."""
        self._prepare(dy)
        if self._kept is None:
            raise Error("BFP8_ERR_INVALID_VALUE", "backward without a forward")
        tokens = int(self._kept.shape[0])
        m = self._contiguous(dy, "dy", None, (tokens, self.out_features))
        ptr, f32 = m.data, m.dtype == _ffi.F32
        if dw is None:
            if accumulate:
                raise ValueError("blockfp8: backward(accumulate=True) needs dw")
            dw = _empty(dy, (self.out_features, self.in_features), "f32")
        dw_ptr = self._contiguous(dw, "dw", _ffi.F32, (self.out_features, self.in_features)).data
        dx = _empty(dy, (tokens, self.in_features), "f32" if f32 else "bf16") if need_dx else None
        backward = _library().bfp8_linear_backward_f32 if f32 else _library().bfp8_linear_backward
        _check(backward(self._handle, C.c_void_p(ptr), C.c_void_p(_pointer(dx)) if dx is not None else None,
                        C.c_void_p(dw_ptr), 1 if accumulate else 0))
        return dx, dw

    def __del__(self):
        if getattr(self, "_handle", None) and _lib is not None:
            _lib.bfp8_linear_destroy(self._handle)
            self._handle = None
