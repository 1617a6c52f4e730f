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

Matrices are 2-D, at least 1 x 1, and row-major with contiguous rows (a
padded row stride is fine). bf16 arrays are torch.bfloat16 tensors, or
numpy arrays of ml_dtypes.bfloat16 or of uint16 bit patterns.
Arguments are checked before the library sees them: a wrong type (a list
where an array goes, an array where a QTensor goes, a string for a flag)
raises TypeError, a wrong value (shape, dtype, strides, an unknown name,
GPU and host memory mixed) raises ValueError, each naming the argument and
what it takes. A call the library refuses raises blockfp8.Error with its
status and message. Either way nothing is written.
On CUDA, calls are asynchronous on the current stream, as PyTorch's own.

blockfp8.torch has the PyTorch layers (Float8BlockwiseLinear, the
mixture-of-experts Float8BlockwiseGroupedLinear), these operations as
PyTorch custom operators (torch.ops.blockfp8.*, traceable by torch.compile)
and convert_to_float8_blockwise_training.
"""
import ctypes as C
import numbers
import sys

from . import _ffi

__all__ = ["Error", "Context", "QTensor", "Linear", "cuda_device_count", "quantize_1x128", "quantize_128x128",
           "dequantize", "gemm_1d2d", "gemm_1d1d", "gemm_1d2d_grouped", "gemm_1d1d_grouped", "canonical_layout",
           "library_path"]
__version__ = "0.1.0"

_lib = None
_lib_path = None


def _library():
    global _lib, _lib_path
    if _lib is None:
        candidates = _ffi.library_candidates()
        _lib_path = candidates[0][1] if candidates else None
        _lib = _ffi.load(_lib_path)
    return _lib


def library_path():
    """The path of the libblockfp8.so this package loaded (loads it)."""
    _library()
    return _lib_path


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
# Argument checks: TypeError for a wrong kind of thing, ValueError for a
# wrong value, each naming the argument.

_DTYPES = {"f32": _ffi.F32, "bf16": _ffi.BF16}


def _type_name(x):
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else "%s.%s" % (t.__module__, t.__name__)


def _is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _is_numpy(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def _np():
    import numpy
    return numpy


def _numpy_bf16():
    try:
        import ml_dtypes
        return _np().dtype(ml_dtypes.bfloat16)
    except ImportError:
        return _np().dtype(_np().uint16)


def _require_array(x, name, what):
    if not (_is_numpy(x) or _is_torch(x)):
        raise TypeError("blockfp8: %s must be a numpy array or a torch tensor (%s), got %s"
                        % (name, what, _type_name(x)))
    if _is_torch(x) and x.device.type not in ("cpu", "cuda"):
        raise ValueError("blockfp8: %s is on a %s device (expected CPU or CUDA memory)" % (name, x.device.type))


def _bool(value, name):
    """A flag argument: bool (or numpy's bool, or the ints 0 and 1)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise TypeError("blockfp8: %s must be True or False, got %r" % (name, value))


def _count(value, name, minimum=1, maximum=(1 << 62)):
    """A size argument: an int in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("blockfp8: %s must be an int, got %s" % (name, _type_name(value)))
    if not minimum <= value <= maximum:
        raise ValueError("blockfp8: %s must be an int in [%d, %d], got %d" % (name, minimum, maximum, value))
    return int(value)


def _dtype_name(value, name):
    """An output dtype: "bf16" or "f32"."""
    if not isinstance(value, str):
        raise TypeError("blockfp8: %s must be 'bf16' or 'f32', got %s" % (name, _type_name(value)))
    if value not in _DTYPES:
        raise ValueError("blockfp8: %s must be 'bf16' or 'f32', got %r" % (name, value))
    return value


def _dtype_code(x, name="x"):
    if _is_torch(x):
        import torch
        codes = {torch.float32: _ffi.F32, torch.bfloat16: _ffi.BF16}
        if x.dtype not in codes:
            raise TypeError("blockfp8: %s has dtype %s (expected torch.float32 or torch.bfloat16)" % (name, x.dtype))
        return codes[x.dtype]
    dtype = x.dtype.name
    if dtype == "float32":
        return _ffi.F32
    if dtype in ("bfloat16", "uint16"):
        return _ffi.BF16
    raise TypeError("blockfp8: %s has dtype %s (expected float32, ml_dtypes.bfloat16 or uint16 bf16 bits)"
                    % (name, dtype))


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


def _writable(x, name):
    if _is_numpy(x) and not x.flags.writeable:
        raise ValueError("blockfp8: %s is a read-only array (the call writes it)" % name)


def _matrix(x, name):
    """The bfp8_matrix view of a 2-D bf16 / f32 array with contiguous rows."""
    _require_array(x, name, "2-D, float32 or bfloat16")
    if len(x.shape) != 2:
        raise ValueError("blockfp8: %s must be 2-D, got shape %s" % (name, tuple(x.shape)))
    rows, cols = int(x.shape[0]), int(x.shape[1])
    if rows < 1 or cols < 1:
        raise ValueError("blockfp8: %s is empty (shape %s): a matrix needs at least one row and one column"
                         % (name, (rows, cols)))
    code = _dtype_code(x, name)
    if _is_torch(x):
        row_step, col_step = x.stride(0), x.stride(1)
    else:
        size = x.itemsize
        if x.strides[0] % size or x.strides[1] % size:
            raise ValueError("blockfp8: %s has strides %s, not multiples of its element size %d"
                             % (name, x.strides, size))
        row_step, col_step = x.strides[0] // size, x.strides[1] // size
    if cols > 1 and col_step != 1:
        raise ValueError("blockfp8: %s must have contiguous rows (its column stride is %d elements)" % (name, col_step))
    if rows > 1 and row_step < cols:
        raise ValueError("blockfp8: %s has a row stride of %d elements, less than its %d columns (rows must not "
                         "overlap, nor run backwards)" % (name, row_step, cols))
    ld = row_step if rows > 1 else cols
    return _ffi.Matrix(_pointer(x), code, rows, cols, ld)


def _out_matrix(out, name, shape, dtypes=("bf16", "f32")):
    """An output array: the expected shape, a dtype of `dtypes`, writable."""
    m = _matrix(out, name)
    if (m.rows, m.cols) != tuple(shape):
        raise ValueError("blockfp8: %s has shape %s, expected %s" % (name, (m.rows, m.cols), tuple(shape)))
    allowed = [_DTYPES[d] for d in dtypes]
    if m.dtype not in allowed:
        raise ValueError("blockfp8: %s must be %s" % (name, " or ".join(dtypes)))
    _writable(out, name)
    return m


def _flag_array(flag, name):
    """A non-finite flag: None, or an array of at least one int32 / uint32
    (the library sets its first element to 1)."""
    if flag is None:
        return None
    _require_array(flag, name, "one int32 or uint32 element")
    dtype = str(flag.dtype).split(".")[-1]
    if dtype not in ("int32", "uint32"):
        raise ValueError("blockfp8: %s must hold int32 or uint32, got %s" % (name, dtype))
    numel = flag.numel() if _is_torch(flag) else flag.size
    if numel < 1:
        raise ValueError("blockfp8: %s is empty (it needs one element)" % name)
    _writable(flag, name)
    return flag


# --------------------------------------------------------------------------
# Arrays: numpy or torch, and the context (backend, device) they live on

def _empty(like, shape, kind, zero=False):
    """A new array beside `like` (same library, device): kind u8, f32 or bf16;
    zero: filled with zeros."""
    if _is_torch(like):
        import torch
        dtype = {"u8": torch.uint8, "f32": torch.float32, "bf16": torch.bfloat16}[kind]
        return (torch.zeros if zero else torch.empty)(shape, dtype=dtype, device=like.device)
    np = _np()
    dtype = {"u8": np.uint8, "f32": np.float32, "bf16": _numpy_bf16()}[kind]
    return (np.zeros if zero else np.empty)(shape, dtype=dtype)


class Context:
    """A libblockfp8 context: a backend and, on CUDA, a device and a stream."""

    def __init__(self, backend="cpu", device=0):
        if not isinstance(backend, str):
            raise TypeError("blockfp8: backend must be 'cpu' or 'cuda', got %s" % _type_name(backend))
        if backend not in ("cpu", "cuda"):
            raise ValueError("blockfp8: backend %r (expected 'cpu' or 'cuda')" % (backend,))
        device = _count(device, "device", minimum=0, maximum=(1 << 31) - 1)
        self.backend, self.device = backend, device
        self._handle = C.c_void_p()
        _check(_library().bfp8_context_create(
            C.byref(self._handle), _ffi.BACKEND_CUDA if backend == "cuda" else _ffi.BACKEND_CPU, device))

    def set_stream(self, stream):
        """CUDA: enqueue work on this cudaStream_t (an int; 0 or None = the legacy default stream)."""
        if stream is not None and (isinstance(stream, bool) or not isinstance(stream, numbers.Integral)):
            raise TypeError("blockfp8: stream must be a cudaStream_t as an int, or None; got %s" % _type_name(stream))
        if stream is not None and not 0 <= stream < 1 << 64:
            raise ValueError("blockfp8: stream %d is not a pointer value" % stream)
        _check(_library().bfp8_context_set_stream(self._handle, C.c_void_p(int(stream) if stream else None)))

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
        index = x.device.index if x.device.index is not None else torch.cuda.current_device()
        key = ("cuda", index)
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = _contexts[key] = Context("cuda", index)
        ctx.set_stream(torch.cuda.current_stream(x.device).cuda_stream)
        return ctx
    ctx = _contexts.get(("cpu", 0))
    if ctx is None:
        ctx = _contexts[("cpu", 0)] = Context("cpu")
    return ctx


# --------------------------------------------------------------------------
# Quantized matrices

def canonical_layout(rows, cols, granularity):
    """The canonical layout of a quantized rows x cols matrix (blockfp8.h):
    (ld, scale rows, scale_ld). Codes are rows x ld bytes, ld = cols rounded
    up to 16; scales are (scale rows) x scale_ld floats: for 1x128
    ceil(cols/128) x (rows rounded up to 4), for 128x128 ceil(rows/128) x
    ceil(cols/128). granularity: 1 (1x128) or 2 (128x128)."""
    ld = -(-cols // 16) * 16
    blocks = -(-cols // 128)
    if granularity == _ffi.GRAN_1X128:
        return ld, blocks, -(-rows // 4) * 4
    return ld, -(-rows // 128), blocks


class QTensor:
    """A quantized matrix in the layouts of include/blockfp8.h.

    data:   uint8 e4m3 codes, rows x ld (ld = cols rounded up to 16)
    scales: float32 dequantization factors (x ~ code * scale); 1x128:
            ceil(cols/128) x scale_ld, scales[kb, r] for row r (MN-major);
            128x128: ceil(rows/128) x ceil(cols/128)
    granularity: 1 (1x128) or 2 (128x128)
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
        """Room for a quantized rows x cols matrix beside `like`, canonical
        layout; the padding the quantizers skip (codes past cols, 1x128
        scales past rows) is zero, so every byte of the result is defined."""
        ld, scale_rows, scale_ld = canonical_layout(rows, cols, granularity)
        padded_scales = granularity == _ffi.GRAN_1X128 and scale_ld != rows
        return cls(_empty(like, (rows, ld), "u8", zero=ld != cols),
                   _empty(like, (scale_rows, scale_ld), "f32", zero=padded_scales),
                   granularity, rows, cols, ld, scale_ld)

    def _struct(self):
        return _ffi.QMatrix(_pointer(self.data), _pointer(self.scales), _ffi.E4M3, self.granularity,
                            self.rows, self.cols, self.ld, self.scale_ld)

    def __repr__(self):
        gran = "1x128" if self.granularity == _ffi.GRAN_1X128 else "128x128"
        return "QTensor(%d x %d, %s, %s)" % (self.rows, self.cols, gran, type(self.data).__module__)


_GRANULARITY_NAMES = {_ffi.GRAN_1X128: "1x128 (quantize_1x128)", _ffi.GRAN_128X128: "128x128 (quantize_128x128)"}


def _qtensor(q, name, granularity=None):
    """A QTensor argument, with the granularity asked for; its arrays checked."""
    if not isinstance(q, QTensor):
        raise TypeError("blockfp8: %s must be a QTensor (from quantize_1x128 or quantize_128x128), got %s"
                        % (name, _type_name(q)))
    _require_array(q.data, name + ".data", "uint8 codes")
    _require_array(q.scales, name + ".scales", "float32 scales")
    _same_place((name + ".data", q.data), (name + ".scales", q.scales))
    if granularity is not None and q.granularity != granularity:
        raise ValueError("blockfp8: %s must be quantized %s, got a %s QTensor" % (
            name, _GRANULARITY_NAMES[granularity], "1x128" if q.granularity == _ffi.GRAN_1X128 else "128x128"))
    for field in ("rows", "cols", "ld", "scale_ld"):
        _count(getattr(q, field), "%s.%s" % (name, field))
    if q.granularity not in _GRANULARITY_NAMES:
        raise ValueError("blockfp8: %s.granularity must be 1 (1x128) or 2 (128x128), got %r" % (name, q.granularity))
    blocks = -(-q.cols // 128)
    if q.granularity == _ffi.GRAN_1X128:
        scales_needed = (blocks - 1) * q.scale_ld + q.rows
    else:
        scales_needed = (-(-q.rows // 128) - 1) * q.scale_ld + blocks
    for part, dtype, needed in (("data", "uint8", (q.rows - 1) * q.ld + q.cols),
                                ("scales", "float32", scales_needed)):
        array = getattr(q, part)
        got = str(array.dtype).split(".")[-1]
        numel = array.numel() if _is_torch(array) else array.size
        contiguous = array.is_contiguous() if _is_torch(array) else array.flags.c_contiguous
        if got != dtype or not contiguous or numel < needed:
            raise ValueError("blockfp8: %s.%s must be a contiguous %s array of at least %d elements for a %d x %d "
                             "QTensor, got %s %s" % (name, part, dtype, needed, q.rows, q.cols, got,
                                                     tuple(array.shape)))
    return q


def _options(pow2, flag):
    return _ffi.QuantizeOptions(1 if pow2 else 0, _pointer(flag) if flag is not None else None)


def quantize_1x128(x, rows=True, cols=False, pow2=False, nonfinite_flag=None):
    """Activations and gradients, 1x128 groups, from one read of x (R x C, bf16 or f32).

    Returns (q_rows, q_cols): q_rows is x (R x C) grouped along C, q_cols is
    x^T (C x R) grouped along R; each None unless asked for. nonfinite_flag:
    an optional one-element uint32/int32 array beside x, set to 1 when a
    group holds NaN or Inf (that group's codes become NaN)."""
    m = _matrix(x, "x")
    rows, cols = _bool(rows, "rows"), _bool(cols, "cols")
    pow2 = _bool(pow2, "pow2")
    if not rows and not cols:
        raise ValueError("blockfp8: quantize_1x128 needs rows=True or cols=True")
    _flag_array(nonfinite_flag, "nonfinite_flag")
    _same_place(("x", x), ("nonfinite_flag", nonfinite_flag))
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
    m = _matrix(w, "w")
    transposed, pow2 = _bool(transposed, "transposed"), _bool(pow2, "pow2")
    _flag_array(nonfinite_flag, "nonfinite_flag")
    _same_place(("w", w), ("nonfinite_flag", nonfinite_flag))
    q = QTensor.empty(w, m.rows, m.cols, _ffi.GRAN_128X128)
    q_t = QTensor.empty(w, m.cols, m.rows, _ffi.GRAN_128X128) if transposed else None
    out, out_t = q._struct(), q_t._struct() if q_t else None
    _check(_library().bfp8_quantize_128x128(_context_of(w)._handle, C.byref(m), C.byref(out),
                                            C.byref(out_t) if out_t else None,
                                            C.byref(_options(pow2, nonfinite_flag))))
    return q, q_t


def dequantize(q, dtype="f32"):
    """codes * scales as a new rows x cols array, "f32" or "bf16"."""
    _qtensor(q, "q")
    dtype = _dtype_name(dtype, "dtype")
    out = _empty(q.data, (q.rows, q.cols), dtype)
    s, d = q._struct(), _matrix(out, "out")
    _check(_library().bfp8_dequantize(_context_of(q.data)._handle, C.byref(s), C.byref(d)))
    return out


def _gemm_out(out, like, shape, out_dtype, accumulate):
    """The output matrix of a GEMM: `out` checked, or a new array."""
    out_dtype = _dtype_name(out_dtype, "out_dtype")
    if out is None:
        out = _empty(like, shape, out_dtype)
    return out, _out_matrix(out, "out", shape, ("f32",) if accumulate else ("bf16", "f32"))


def gemm_1d2d(a, b, out=None, out_dtype="bf16"):
    """D[M, N] = A[M, K] . B[N, K]^T with A 1x128 (activations, gradients) and
    B 128x128 (a weight or its transpose): fprop and dgrad. Every 128-wide
    k-block is promoted into fp32. out: an M x N bf16/f32 array, or a new one
    of out_dtype ("bf16" or "f32")."""
    _qtensor(a, "a", _ffi.GRAN_1X128)
    _qtensor(b, "b", _ffi.GRAN_128X128)
    if a.cols != b.cols:
        raise ValueError("blockfp8: a is %d x %d and b %d x %d: their columns (K) differ" % (a.shape + b.shape))
    _same_place(("a", a.data), ("b", b.data), ("out", out))
    out, d = _gemm_out(out, a.data, (a.rows, b.rows), out_dtype, False)
    sa, sb = a._struct(), b._struct()
    _check(_library().bfp8_gemm_1d2d(_context_of(a.data)._handle, C.byref(sa), C.byref(sb), C.byref(d)))
    return out


def gemm_1d1d(a, b, out=None, accumulate=False, out_dtype="f32"):
    """D[N, K] = A[N, M] . B[K, M]^T with both 1x128 along M (the tokens):
    the weight gradient dy^T x from quantize_1x128(..., cols=True) of dy and x.
    accumulate: out += A.B^T (out f32, given), else out = A.B^T."""
    _qtensor(a, "a", _ffi.GRAN_1X128)
    _qtensor(b, "b", _ffi.GRAN_1X128)
    accumulate = _bool(accumulate, "accumulate")
    if accumulate and out is None:
        raise ValueError("blockfp8: gemm_1d1d(accumulate=True) needs out")
    if a.cols != b.cols:
        raise ValueError("blockfp8: a is %d x %d and b %d x %d: their columns (M) differ" % (a.shape + b.shape))
    _same_place(("a", a.data), ("b", b.data), ("out", out))
    out, d = _gemm_out(out, a.data, (a.rows, b.rows), out_dtype, accumulate)
    sa, sb = a._struct(), b._struct()
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
        for v in offsets:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError("blockfp8: offsets must hold ints, got a %s" % _type_name(v))
        values = [int(v) for v in offsets]
        if len(values) < 2:
            raise ValueError("blockfp8: offsets need at least two values (0 and the end of group 0)")
        return (C.c_int64 * len(values))(*values), len(values) - 1, False
    _require_array(offsets, "offsets", "a list of G + 1 ints, or a 1-D int64 array")
    if len(offsets.shape) != 1 or offsets.shape[0] < 2 or str(offsets.dtype).split(".")[-1] != "int64":
        raise ValueError("blockfp8: offsets as an array must be 1-D int64 with G + 1 >= 2 values, got %s %s"
                         % (str(offsets.dtype).split(".")[-1], tuple(offsets.shape)))
    contiguous = offsets.is_contiguous() if _is_torch(offsets) else offsets.flags.c_contiguous
    if not contiguous:
        raise ValueError("blockfp8: offsets must be contiguous")
    _same_place(("the operands", like), ("offsets", offsets))
    return C.c_void_p(_pointer(offsets)), int(offsets.shape[0]) - 1, True


def gemm_1d2d_grouped(a, b, offsets, out=None, out_dtype="bf16"):
    """Mixture of experts, fprop and dgrad: D[rows of g] = A[rows of g] . B_g^T
    for every expert g, whose tokens are rows offsets[g]..offsets[g+1] of A
    (multiples of 128; a list of host values, or an int64 array/tensor
    beside A, see _group_offsets). b stacks the G weights (G*N x K, 128x128,
    N a multiple of 128). D rows past the last group are not written."""
    _qtensor(a, "a", _ffi.GRAN_1X128)
    _qtensor(b, "b", _ffi.GRAN_128X128)
    table, groups, on_backend = _group_offsets(offsets, a.data)
    if b.rows % groups:
        raise ValueError("blockfp8: b has %d rows, not a multiple of the %d groups" % (b.rows, groups))
    _same_place(("a", a.data), ("b", b.data), ("out", out))
    out, d = _gemm_out(out, a.data, (a.rows, b.rows // groups), out_dtype, False)
    sa, sb = a._struct(), b._struct()
    fn = _library().bfp8_gemm_1d2d_grouped_device_offsets if on_backend else _library().bfp8_gemm_1d2d_grouped
    _check(fn(_context_of(a.data)._handle, C.byref(sa), C.byref(sb), table, groups, C.byref(d)))
    return out


def gemm_1d1d_grouped(a, b, offsets, out=None, accumulate=False, out_dtype="f32"):
    """Mixture of experts, wgrad: D_g[N, K] (+)= A[:, tokens of g] . B[:, tokens of g]^T
    for every expert g, its tokens columns offsets[g]..offsets[g+1] (as for
    gemm_1d2d_grouped) of A (N x M) and B (K x M). D is G*N x K, expert g's
    gradient rows g*N..; an expert without tokens gets zeros (or keeps out)."""
    _qtensor(a, "a", _ffi.GRAN_1X128)
    _qtensor(b, "b", _ffi.GRAN_1X128)
    accumulate = _bool(accumulate, "accumulate")
    table, groups, on_backend = _group_offsets(offsets, a.data)
    if accumulate and out is None:
        raise ValueError("blockfp8: gemm_1d1d_grouped(accumulate=True) needs out")
    _same_place(("a", a.data), ("b", b.data), ("out", out))
    out, d = _gemm_out(out, a.data, (groups * a.rows, b.rows), out_dtype, accumulate)
    sa, sb = a._struct(), b._struct()
    fn = _library().bfp8_gemm_1d1d_grouped_device_offsets if on_backend else _library().bfp8_gemm_1d1d_grouped
    _check(fn(_context_of(a.data)._handle, C.byref(sa), C.byref(sb), table, groups,
              C.byref(d) if accumulate else None, C.byref(d)))
    return out


# --------------------------------------------------------------------------
# The library's linear layer

def _device(device):
    """("cpu", 0) or ("cuda", N) from "cpu", "cuda", "cuda:N" or a torch.device."""
    text = str(device) if type(device).__name__ == "device" else device
    if not isinstance(text, str):
        raise TypeError("blockfp8: device must be 'cpu', 'cuda' or 'cuda:N', got %s" % _type_name(device))
    backend, _, index = text.partition(":")
    if backend not in ("cpu", "cuda") or (index and not (index.isascii() and index.isdigit())) or \
            (backend == "cpu" and index):
        raise ValueError("blockfp8: device %r (expected 'cpu', 'cuda' or 'cuda:N')" % (text,))
    return backend, int(index or 0)


class Linear:
    """The C library's linear layer y = x W^T (W: out x in), forward and
    backward in one of the recipes "fp8-blockwise", "fp8-blockwise-bf16wgrad"
    or "bf16". It holds the quantized weight and what backward needs, for the
    LAST forward only. device: "cpu" (numpy or CPU tensors) or "cuda[:N]"."""

    def __init__(self, in_features, out_features, max_tokens, recipe="fp8-blockwise",
                 pow2_scales=False, device="cpu"):
        in_features = _count(in_features, "in_features")
        out_features = _count(out_features, "out_features")
        max_tokens = _count(max_tokens, "max_tokens")
        if not isinstance(recipe, str):
            raise TypeError("blockfp8: recipe must be a string, got %s" % _type_name(recipe))
        if recipe not in _ffi.RECIPES:
            raise ValueError("blockfp8: recipe %r (expected one of %s)" % (recipe, ", ".join(_ffi.RECIPES)))
        pow2_scales = _bool(pow2_scales, "pow2_scales")
        backend, index = _device(device)
        self.ctx = Context(backend, index)
        self.in_features, self.out_features, self.max_tokens = in_features, out_features, max_tokens
        cfg = _ffi.LinearConfig(in_features, out_features, max_tokens, _ffi.RECIPES[recipe],
                                1 if pow2_scales else 0, None)
        self._handle = C.c_void_p()
        _check(_library().bfp8_linear_create(C.byref(self._handle), self.ctx._handle, C.byref(cfg)))
        self._kept = None

    def _prepare(self, x, name):
        _require_array(x, name, "2-D, float32 or bfloat16")
        place = ("cuda", self.ctx.device) if self.ctx.backend == "cuda" else ("cpu",)
        if _place(x) != place:
            raise ValueError("blockfp8: %s is on %s, this Linear on %s" % (
                name, ":".join(map(str, _place(x))), ":".join(map(str, place))))
        if _is_torch(x) and x.is_cuda:
            import torch
            self.ctx.set_stream(torch.cuda.current_stream(x.device).cuda_stream)

    @staticmethod
    def _contiguous(x, name, dtype_code, shape):
        """x as a contiguous matrix (its .data pointer, its .dtype code);
        dtype_code None: bf16 or f32, whichever x is."""
        m = _matrix(x, name)
        if (shape[0] is not None and m.rows != shape[0]) or m.cols != shape[1]:
            expected = "(tokens, %d)" % shape[1] if shape[0] is None else str(shape)
            raise ValueError("blockfp8: %s has shape %s, expected %s" % (name, tuple(x.shape), expected))
        if (dtype_code is not None and m.dtype != dtype_code) or (m.rows > 1 and m.ld != m.cols):
            expected = {None: "bf16 or f32", _ffi.F32: "f32", _ffi.BF16: "bf16"}[dtype_code]
            raise ValueError("blockfp8: %s must be contiguous %s" % (name, expected))
        return m

    def set_weight(self, w):
        """The fp32 master weight (out x in, contiguous): quantized (or
        converted to bf16) for the next forward. Call after every update."""
        self._prepare(w, "w")
        ptr = self._contiguous(w, "w", _ffi.F32, (self.out_features, self.in_features)).data
        _check(_library().bfp8_linear_set_weight(self._handle, C.c_void_p(ptr)))

    def forward(self, x):
        """y = x W^T for x: tokens x in (contiguous) -> tokens x out, of x's
        dtype: bf16, or f32 (fp8-blockwise only: quantized from f32 as it is,
        y written in f32, nothing rounded to bf16 on the way)."""
        self._prepare(x, "x")
        m = self._contiguous(x, "x", None, (None, self.in_features))
        tokens, ptr, f32 = m.rows, m.data, m.dtype == _ffi.F32
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
        self._prepare(dy, "dy")
        accumulate, need_dx = _bool(accumulate, "accumulate"), _bool(need_dx, "need_dx")
        if self._kept is None:
            raise Error("BFP8_ERR_INVALID_VALUE", "backward without a forward")
        tokens = int(self._kept.shape[0])
        m = self._contiguous(dy, "dy", None, (tokens, self.out_features))
        ptr, f32 = m.data, m.dtype == _ffi.F32
        if dw is None:
            if accumulate:
                raise ValueError("blockfp8: backward(accumulate=True) needs dw")
            dw = _empty(dy, (self.out_features, self.in_features), "f32")
        self._prepare(dw, "dw")
        dw_ptr = self._contiguous(dw, "dw", _ffi.F32, (self.out_features, self.in_features)).data
        _writable(dw, "dw")
        dx = _empty(dy, (tokens, self.in_features), "f32" if f32 else "bf16") if need_dx else None
        backward = _library().bfp8_linear_backward_f32 if f32 else _library().bfp8_linear_backward
        _check(backward(self._handle, C.c_void_p(ptr), C.c_void_p(_pointer(dx)) if dx is not None else None,
                        C.c_void_p(dw_ptr), 1 if accumulate else 0))
        return dx, dw

    def __del__(self):
        if getattr(self, "_handle", None) and _lib is not None:
            _lib.bfp8_linear_destroy(self._handle)
            self._handle = None
