"""bfp8_lib.py - the small part of include/blockfp8.h that the oracle tests call
through ctypes, over numpy arrays on the CPU backend.

The oracle scripts load the built libblockfp8.so (path given on their command
line) and compare what it returns with their own numpy + ml_dtypes code.
"""
import ctypes as C
import os
import sys

# the structs and enums of blockfp8.h, as the Python binding declares them
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from blockfp8._ffi import (BF16, E4M3, E5M2, F32, GRAN_1X128, GRAN_128X128, OK,  # noqa: E402
                           Matrix, QMatrix, QuantizeOptions)

__all__ = ["BF16", "E4M3", "E5M2", "F32", "GRAN_1X128", "GRAN_128X128", "OK", "Matrix", "QMatrix",
           "QuantizeOptions", "Library", "ptr", "require_modules"]


def ptr(a):
    return C.c_void_p(a.ctypes.data)


class Library:
    def __init__(self, path):
        self.lib = C.CDLL(os.path.abspath(path))
        L = self.lib
        L.bfp8_last_error.restype = C.c_char_p
        L.bfp8_status_name.restype = C.c_char_p
        L.bfp8_convert_host.argtypes = [C.c_int, C.c_void_p, C.c_int, C.c_void_p, C.c_size_t]
        L.bfp8_context_create.argtypes = [C.POINTER(C.c_void_p), C.c_int, C.c_int]
        L.bfp8_context_destroy.argtypes = [C.c_void_p]
        L.bfp8_quantize_1x128.argtypes = [C.c_void_p, C.POINTER(Matrix), C.POINTER(QMatrix),
                                          C.POINTER(QMatrix), C.POINTER(QuantizeOptions)]
        L.bfp8_quantize_128x128.argtypes = L.bfp8_quantize_1x128.argtypes
        self.ctx = C.c_void_p()
        self.check(L.bfp8_context_create(C.byref(self.ctx), 0, 0), "bfp8_context_create")

    def check(self, status, what):
        if status != OK:
            raise RuntimeError("%s: %s: %s" % (what, self.lib.bfp8_status_name(status).decode(),
                                               self.lib.bfp8_last_error().decode()))

    def convert_host(self, dst_dtype, dst, src_dtype, src):
        self.check(self.lib.bfp8_convert_host(dst_dtype, ptr(dst), src_dtype, ptr(src), src.size),
                   "bfp8_convert_host")

    def quantize_1x128(self, x, out_rows, out_cols, options):
        self.check(self.lib.bfp8_quantize_1x128(self.ctx, C.byref(x),
                                                C.byref(out_rows) if out_rows else None,
                                                C.byref(out_cols) if out_cols else None,
                                                C.byref(options)), "bfp8_quantize_1x128")

    def quantize_128x128(self, x, out, out_t, options):
        self.check(self.lib.bfp8_quantize_128x128(self.ctx, C.byref(x), C.byref(out),
                                                  C.byref(out_t) if out_t else None,
                                                  C.byref(options)), "bfp8_quantize_128x128")


def require_modules():
    """Import the oracle's modules. Missing ones skip the test (exit 77) on a
    developer's machine, but fail it in CI (CI=true), where they are installed."""
    try:
        import numpy  # noqa: F401
        import ml_dtypes  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI", "").lower() == "true":
            print("FAIL: %s (CI installs numpy and ml_dtypes)" % e)
            sys.exit(1)
        print("SKIP: %s (pip install numpy ml_dtypes)" % e)
        sys.exit(77)
