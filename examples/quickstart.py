"""quickstart.py - the Python binding in a few lines: y = x W^T with FP8
blockwise operands, on the CPU backend over numpy (CUDA tensors of PyTorch
take the same calls on the GPU).

    BLOCKFP8_LIBRARY=build/libblockfp8.so PYTHONPATH=python python3 examples/quickstart.py
"""
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is missing")
    sys.exit(77)

import blockfp8 as bf

rng = np.random.default_rng(0)
M, N, K = 256, 384, 512
x = rng.standard_normal((M, K), dtype=np.float32)  # activations (bf16 works too)
w = rng.standard_normal((N, K), dtype=np.float32)  # a weight, N x K

qx, _ = bf.quantize_1x128(x)    # e4m3 codes + one fp32 scale per 1 x 128 group along K
qw, _ = bf.quantize_128x128(w)  # one scale per 128 x 128 block
y = bf.gemm_1d2d(qx, qw, out_dtype="f32")  # every 128-wide k-block promoted into fp32

ref = x.astype(np.float64) @ w.T.astype(np.float64)
sqnr = 20 * np.log10(np.linalg.norm(ref) / np.linalg.norm(ref - y))
print("y = x W^T, %d x %d x %d, e4m3 blockwise: SQNR %.1f dB vs fp64" % (M, N, K, sqnr))
sys.exit(0 if sqnr >= 25 else 1)
