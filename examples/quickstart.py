"""quickstart.py - the Python binding in a few lines: y = x W^T with FP8
blockwise operands, on the CPU backend over numpy (CUDA tensors of PyTorch
take the same calls on the GPU); then, where PyTorch is installed, a model's
nn.Linear layers swapped for blockfp8's and trained a step under
torch.compile.

    pip install . && python3 examples/quickstart.py
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
ok = sqnr >= 25

try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    import blockfp8.torch as bft

    device = "cuda" if torch.cuda.is_available() and bf.cuda_device_count() > 0 else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(K, 4 * K), torch.nn.GELU(), torch.nn.Linear(4 * K, K)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # every nn.Linear becomes a Float8BlockwiseLinear holding the same parameters (the optimizer keeps them)
    bft.convert_to_float8_blockwise_training(model)
    step = torch.compile(lambda inputs: model(inputs).float().pow(2).mean(), fullgraph=True,
                         backend="inductor" if device == "cuda" else "aot_eager")
    inputs = torch.randn(M, K, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = step(inputs)
    loss.backward()
    optimizer.step()
    print("torch.compile(fullgraph=True), %s: %s, loss %.4f, weight gradient norm %.4f" % (
        device, type(model[0]).__name__, loss.item(), model[0].weight.grad.norm().item()))
    ok = ok and type(model[0]) is bft.Float8BlockwiseLinear and bool(torch.isfinite(loss))
sys.exit(0 if ok else 1)
