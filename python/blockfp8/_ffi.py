"""_ffi.py - the C API of include/blockfp8.h as ctypes declarations.

The shared library is looked up, in order:
  1. libblockfp8.so inside this package (what `pip install .` puts there);
  2. the path in the environment variable BLOCKFP8_LIBRARY;
  3. build/libblockfp8.so of the source tree this package sits in;
  4. the system's library path (ctypes.util.find_library("blockfp8")).
A library built with CUDA needs the CUDA runtime and cuBLASLt: from its
run path, the system's library path, or the NVIDIA wheels that PyTorch
installs (nvidia/cu13/lib, nvidia/cuda_runtime/lib, nvidia/cublas/lib).
"""
import ctypes as C
import ctypes.util
import glob
import os
import sys

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

LIBRARY_NAME = "libblockfp8.so"


def library_candidates():
    """Where the library is looked for, in order: (where, path) pairs."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    packaged = os.path.join(here, LIBRARY_NAME)
    if os.path.exists(packaged):
        found.append(("the package", packaged))
    path = os.environ.get("BLOCKFP8_LIBRARY")
    if path:
        found.append(("BLOCKFP8_LIBRARY", path))
    in_tree = os.path.normpath(os.path.join(here, "..", "..", "build", LIBRARY_NAME))
    if os.path.exists(in_tree):
        found.append(("the source tree's build/", in_tree))
    system = ctypes.util.find_library("blockfp8")
    if system:
        found.append(("the system library path", system))
    return found


def _preload_cuda_libraries():
    """Load the CUDA runtime and cuBLASLt of NVIDIA's wheels (PyTorch's
    dependencies) into the global namespace, for a library whose run path
    does not reach a CUDA toolkit. Returns whether any was loaded."""
    loaded = False
    for base in sys.path:
        nvidia = os.path.join(base or ".", "nvidia")
        if not os.path.isdir(nvidia):
            continue
        for pattern in ("cu1*/lib/libcudart.so.*", "cuda_runtime/lib/libcudart.so.*",
                        "cu1*/lib/libcublasLt.so.*", "cublas/lib/libcublasLt.so.*"):
            for lib in sorted(glob.glob(os.path.join(nvidia, pattern))):
                try:
                    C.CDLL(lib, mode=C.RTLD_GLOBAL)
                    loaded = True
                except OSError:
                    pass
    return loaded


def load(path=None):
    if path is None:
        candidates = library_candidates()
        if not candidates:
            raise OSError("blockfp8: libblockfp8.so not found: install the package (pip install . from the "
                          "repository root), build it (cmake --build build) or set BLOCKFP8_LIBRARY to its path")
        path = candidates[0][1]
    path = os.path.abspath(path)
    try:
        lib = C.CDLL(path)
    except OSError as first:
        if "libcudart" not in str(first) and "libcublas" not in str(first):
            raise
        if not _preload_cuda_libraries():
            raise
        lib = C.CDLL(path)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib
