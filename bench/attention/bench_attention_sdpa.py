#!/usr/bin/env python3
"""bench_attention_sdpa.py - bfp8_attention_forward / _backward against torch's
scaled_dot_product_attention (cuDNN and FlashAttention backends), in one
process, on the same bf16 inputs, timed with CUDA events.

    BLOCKFP8_LIBRARY=build/libblockfp8.so python3 bench/attention/bench_attention_sdpa.py [--reps N] [--quick]

Layout: q, k, v, o, dO are [B, T, H, D] bf16 tensors (token-major, what the
library takes); torch gets the [B, H, T, D] views of the same memory. FLOPs
are counted as FlashAttention counts them: forward 4 B H T^2 D (halved when
causal), backward 2.5 times that. Each figure is the median of --reps timed
calls after warm-up; "ours/cudnn" > 1 means ours is faster. Our backward
includes its prepare and finish launches (it is deterministic); "time order"
(causal) is the backward's other variant (src/cuda/attention_common.cuh).
Before timing, each shape's outputs are compared with cuDNN's (max
|difference| / max |cuDNN|).
"""
import argparse
import ctypes
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


class Desc(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("seq", ctypes.c_int64), ("n_heads", ctypes.c_int64),
                ("n_kv_heads", ctypes.c_int64), ("head_dim", ctypes.c_int64), ("causal", ctypes.c_int),
                ("softmax_scale", ctypes.c_float), ("q_row_stride", ctypes.c_int64),
                ("k_row_stride", ctypes.c_int64), ("v_row_stride", ctypes.c_int64),
                ("o_row_stride", ctypes.c_int64), ("do_row_stride", ctypes.c_int64),
                ("dq_row_stride", ctypes.c_int64), ("dk_row_stride", ctypes.c_int64),
                ("dv_row_stride", ctypes.c_int64)]


def load_library():
    path = os.environ.get("BLOCKFP8_LIBRARY", "libblockfp8.so")
    lib = ctypes.CDLL(path)
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.bfp8_context_create.argtypes = [ctypes.POINTER(vp), ctypes.c_int, ctypes.c_int]
    lib.bfp8_context_set_stream.argtypes = [vp, vp]
    lib.bfp8_last_error.restype = ctypes.c_char_p
    lib.bfp8_attention_forward.argtypes = [vp, ctypes.POINTER(Desc), vp, vp, vp, vp, vp]
    lib.bfp8_attention_backward_workspace_size.argtypes = [vp, ctypes.POINTER(Desc), ctypes.POINTER(ctypes.c_size_t)]
    lib.bfp8_attention_backward.argtypes = [vp, ctypes.POINTER(Desc)] + [vp] * 10 + [ctypes.c_size_t]
    has_variant = hasattr(lib, "bfp8_cuda_attention_backward_variant")
    if has_variant:
        lib.bfp8_cuda_attention_backward_variant.argtypes = [vp, ctypes.POINTER(Desc)] + [vp] * 10 + [ctypes.c_int]
    del i64
    return lib, has_variant


def check(lib, status, what):
    if status != 0:
        raise RuntimeError(f"{what}: status {status}: {lib.bfp8_last_error().decode()}")


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def run_shape(lib, ctx, has_variant, B, H, T, D, causal, reps, out):
    torch.manual_seed(0)
    dev = "cuda"
    q = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    d_o = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    desc = Desc(batch=B, seq=T, n_heads=H, n_kv_heads=H, head_dim=D, causal=int(causal), softmax_scale=0.0)
    size = ctypes.c_size_t(0)
    check(lib, lib.bfp8_attention_backward_workspace_size(ctx, ctypes.byref(desc), ctypes.byref(size)), "workspace")
    ws = torch.empty(max(size.value, 256), device=dev, dtype=torch.uint8)
    p = lambda t: ctypes.c_void_p(t.data_ptr())

    def ours_fwd():
        check(lib, lib.bfp8_attention_forward(ctx, ctypes.byref(desc), p(q), p(k), p(v), p(o), p(lse)), "forward")

    full = Desc(batch=B, seq=T, n_heads=H, n_kv_heads=H, head_dim=D, causal=int(causal),
                softmax_scale=D ** -0.5, q_row_stride=H * D, k_row_stride=H * D, v_row_stride=H * D,
                o_row_stride=H * D, do_row_stride=H * D, dq_row_stride=H * D, dk_row_stride=H * D,
                dv_row_stride=H * D)

    def ours_bwd_variant(variant):
        return lambda: check(lib, lib.bfp8_cuda_attention_backward_variant(
            ctx, ctypes.byref(full), p(q), p(k), p(v), p(o), p(d_o), p(lse), p(dq), p(dk), p(dv), p(ws), variant),
            "backward variant")

    def ours_bwd():
        check(lib, lib.bfp8_attention_backward(ctx, ctypes.byref(desc), p(q), p(k), p(v), p(o), p(d_o), p(lse),
                                               p(dq), p(dk), p(dv), p(ws), size.value), "backward")

    qt, kt, vt, dot = (x.transpose(1, 2) for x in (q, k, v, d_o))
    qg, kg, vg = (x.detach().requires_grad_() for x in (qt, kt, vt))

    def torch_pair(backend):
        with sdpa_kernel(backend):
            ref = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

        def fwd():
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

        def bwd():
            torch.autograd.grad(ref, (qg, kg, vg), dot, retain_graph=True)
        return ref, fwd, bwd

    fwd_flop = 4.0 * B * H * T * T * D / (2 if causal else 1)
    tf = lambda ms, scale=1.0: fwd_flop * scale / (ms * 1e-3) / 1e12
    line = f"B{B} H{H} T{T} D{D} {'causal' if causal else 'full  '}"
    # correctness against cuDNN on this shape
    ref_c, fwd_c, bwd_c = torch_pair(SDPBackend.CUDNN_ATTENTION)
    ours_fwd()
    ours_bwd()
    g = torch.autograd.grad(ref_c, (qg, kg, vg), dot, retain_graph=True)
    errs = []
    for mine, theirs in ((o, ref_c.transpose(1, 2)), (dq, g[0].transpose(1, 2)), (dk, g[1].transpose(1, 2)),
                         (dv, g[2].transpose(1, 2))):
        errs.append(((mine.float() - theirs.float()).abs().max() / theirs.float().abs().max()).item())
    res = {}
    res["ours_fwd"] = time_ms(ours_fwd, reps)
    res["ours_bwd"] = time_ms(ours_bwd, reps)
    if has_variant and causal:
        res["ours_bwd_timeorder"] = time_ms(ours_bwd_variant(1), reps)
    res["cudnn_fwd"] = time_ms(fwd_c, reps)
    res["cudnn_bwd"] = time_ms(bwd_c, reps)
    del ref_c
    ref_f, fwd_f, bwd_f = torch_pair(SDPBackend.FLASH_ATTENTION)
    res["flash_fwd"] = time_ms(fwd_f, reps)
    res["flash_bwd"] = time_ms(bwd_f, reps)
    del ref_f
    msg = (f"{line}  fwd: ours {tf(res['ours_fwd']):6.1f} cudnn {tf(res['cudnn_fwd']):6.1f} "
           f"flash {tf(res['flash_fwd']):6.1f} TFLOP/s  ours/cudnn {res['cudnn_fwd'] / res['ours_fwd']:.3f}"
           f"  ours/flash {res['flash_fwd'] / res['ours_fwd']:.3f}")
    timeo = f"  (time order {tf(res['ours_bwd_timeorder'], 2.5):6.1f})" if has_variant and causal else ""
    msg += (f"\n{line}  bwd: ours {tf(res['ours_bwd'], 2.5):6.1f} cudnn {tf(res['cudnn_bwd'], 2.5):6.1f} "
            f"flash {tf(res['flash_bwd'], 2.5):6.1f} TFLOP/s  ours/cudnn {res['cudnn_bwd'] / res['ours_bwd']:.3f}"
            f"  ours/flash {res['flash_bwd'] / res['ours_bwd']:.3f}"
            f"{timeo}"
            f"\n{line}  vs cudnn: o {errs[0]:.1e} dq {errs[1]:.1e} dk {errs[2]:.1e} dv {errs[3]:.1e}"
            f"  (ms: fwd {res['ours_fwd']:.3f} / {res['cudnn_fwd']:.3f}, bwd {res['ours_bwd']:.3f} / "
            f"{res['cudnn_bwd']:.3f})")
    print(msg, flush=True)
    out.write(msg + "\n")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="the first shape only")
    ap.add_argument("--out", default=None, help="also write the table here")
    args = ap.parse_args()
    lib, has_variant = load_library()
    ctx = ctypes.c_void_p()
    check(lib, lib.bfp8_context_create(ctypes.byref(ctx), 1, 0), "context")
    check(lib, lib.bfp8_context_set_stream(ctx, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "stream")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}",
          flush=True)
    shapes = [(8, 16, 2048, 128), (8, 16, 4096, 128), (16, 16, 2048, 64), (4, 32, 8192, 128)]
    if args.quick:
        shapes = shapes[:1]
    out = open(args.out, "w") if args.out else open(os.devnull, "w")
    for B, H, T, D in shapes:
        for causal in (True, False):
            try:
                run_shape(lib, ctx, has_variant, B, H, T, D, causal, args.reps, out)
            except Exception as e:  # keep going: one failing shape must not hide the others
                print(f"B{B} H{H} T{T} D{D} causal={causal}: FAILED: {e}", flush=True)
            torch.cuda.empty_cache()
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
