"""_ffi.py - the C API of include/blockfp8.h as ctypes declarations.

The shared library is looked up, in order:
  1. the path in the environment variable BLOCKFP8_LIBRARY;
  2. build/libblockfp8.so of the source tree this package sits in;
  3. the system's library path (ctypes.util.find_library("blockfp8")).
"""
import ctypes as C
import ctypes.util
import os

# enums of blockfp8.h
F32, BF16, E4M3, E5M2 = 0, 1, 2, 3
GRAN_1X128, GRAN_128X128 = 1, 2
BACKEND_CPU, BACKEND_CUDA = 0, 1
RECIPES = {"bf16": 0, "fp8-blockwise": 1, "fp8-blockwise-bf16wgrad": 2}
OK = 0


class Matrix(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("rows", C.c_int64),
                ("cols", C.c_int64), ("ld", C.c_int64)]


class QMatrix(C.Structure):
    _fields_ = [("data", C.c_void_p), ("scales", C.c_void_p), ("dtype", C.c_int),
                ("granularity", C.c_int), ("rows", C.c_int64), ("cols", C.c_int64),
                ("ld", C.c_int64), ("scale_ld", C.c_int64)]


class QuantizeOptions(C.Structure):
    _fields_ = [("pow2_scales", C.c_int), ("nonfinite_flag", C.c_void_p)]


class LinearConfig(C.Structure):
    _fields_ = [("in_features", C.c_int64), ("out_features", C.c_int64),
                ("max_tokens", C.c_int64), ("recipe", C.c_int), ("pow2_scales", C.c_int),
                ("nonfinite_flags", C.c_void_p)]


_P = C.c_void_p
_SIGNATURES = {
    # name: (restype, argtypes)
    "bfp8_status_name": (C.c_char_p, [C.c_int]),
    "bfp8_last_error": (C.c_char_p, []),
    "bfp8_cuda_device_count": (C.c_int, []),
    "bfp8_context_create": (C.c_int, [C.POINTER(_P), C.c_int, C.c_int]),
    "bfp8_context_destroy": (None, [_P]),
    "bfp8_context_set_stream": (C.c_int, [_P, _P]),
    "bfp8_context_synchronize": (C.c_int, [_P]),
    "bfp8_qmatrix_layout": (C.c_int, [C.POINTER(QMatrix), C.c_int64, C.c_int64, C.c_int,
                                      C.POINTER(C.c_size_t), C.POINTER(C.c_size_t)]),
    "bfp8_quantize_1x128": (C.c_int, [_P, C.POINTER(Matrix), C.POINTER(QMatrix), C.POINTER(QMatrix),
                                      C.POINTER(QuantizeOptions)]),
    "bfp8_quantize_128x128": (C.c_int, [_P, C.POINTER(Matrix), C.POINTER(QMatrix), C.POINTER(QMatrix),
                                        C.POINTER(QuantizeOptions)]),
    "bfp8_dequantize": (C.c_int, [_P, C.POINTER(QMatrix), C.POINTER(Matrix)]),
    "bfp8_gemm_1d2d": (C.c_int, [_P, C.POINTER(QMatrix), C.POINTER(QMatrix), C.POINTER(Matrix)]),
    "bfp8_gemm_1d1d": (C.c_int, [_P, C.POINTER(QMatrix), C.POINTER(QMatrix), C.POINTER(Matrix),
                                 C.POINTER(Matrix)]),
    "bfp8_gemm_1d2d_grouped": (C.c_int, [_P, C.POINTER(QMatrix), C.POINTER(QMatrix), C.POINTER(C.c_int64),
                                         C.c_int, C.POINTER(Matrix)]),
    "bfp8_gemm_1d1d_grouped": (C.c_int, [_P, C.POINTER(QMatrix), C.POINTER(QMatrix), C.POINTER(C.c_int64),
                                         C.c_int, C.POINTER(Matrix), C.POINTER(Matrix)]),
    "bfp8_gemm_1d2d_grouped_device_offsets": (C.c_int, [_P, C.POINTER(QMatrix), C.POINTER(QMatrix), _P, C.c_int,
                                                        C.POINTER(Matrix)]),
    "bfp8_gemm_1d1d_grouped_device_offsets": (C.c_int, [_P, C.POINTER(QMatrix), C.POINTER(QMatrix), _P, C.c_int,
                                                        C.POINTER(Matrix), C.POINTER(Matrix)]),
    "bfp8_linear_create": (C.c_int, [C.POINTER(_P), _P, C.POINTER(LinearConfig)]),
    "bfp8_linear_destroy": (None, [_P]),
    "bfp8_linear_set_weight": (C.c_int, [_P, _P]),
    "bfp8_linear_forward": (C.c_int, [_P, _P, C.c_int64, _P]),
    "bfp8_linear_backward": (C.c_int, [_P, _P, _P, _P, C.c_int]),
    "bfp8_linear_forward_f32": (C.c_int, [_P, _P, C.c_int64, _P]),
    "bfp8_linear_backward_f32": (C.c_int, [_P, _P, _P, _P, C.c_int]),
}


def _find_library():
    path = os.environ.get("BLOCKFP8_LIBRARY")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    in_tree = os.path.join(here, "..", "..", "build", "libblockfp8.so")
    if os.path.exists(in_tree):
        return in_tree
    found = ctypes.util.find_library("blockfp8")
    if found:
        return found
    raise OSError("blockfp8: libblockfp8.so not found; build it (cmake --build build) "
                  "or set BLOCKFP8_LIBRARY to its path")


def load(path=None):
    lib = C.CDLL(os.path.abspath(path or _find_library()))
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib
