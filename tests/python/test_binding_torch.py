"""test_binding_torch.py - the Python binding over PyTorch CUDA tensors (GPU),
or over PyTorch CPU tensors (--cpu: the CPU backend, no GPU needed):

    BLOCKFP8_LIBRARY=build/libblockfp8.so python3 tests/python/test_binding_torch.py [--bench | --cpu]

- the quantizers on tensors bit for bit against the CPU backend over numpy
  on the same values, every layout, ragged shapes;
- the GEMMs against fp64 products of the same fp8 data (>= 40 dB,
  and in every 128 x 128 tile), accumulation in place;
- blockfp8.torch.Float8BlockwiseLinear forward and backward against fp64
  products of the unquantized tensors (>= 28 dB, RECIPE.md's bar for random
  normal inputs; the bf16 weight gradient >= 40 dB), bias, from_linear,
  (CUDA) the same bits on a side stream as on the default one, and the
  non-finite flags of input, weight and output gradient;
- blockfp8.torch.float8_blockwise_grouped_linear (mixture of experts, with
  an expert without tokens) forward and backward against fp64 per expert;
- blockfp8.Linear (the library's layer) on tensors against the same layer
  over numpy.
--bench: Float8BlockwiseLinear forward + backward against torch's bf16
nn.functional.linear on the TARGETS shapes (training steps back to back).
Needs torch and numpy (not ml_dtypes).
Exit code: 0 passed, 1 a failure, 77 skipped (no torch, numpy, or GPU).
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)
ON_CPU = "--cpu" in sys.argv[1:]
if not ON_CPU and not torch.cuda.is_available():
    print("SKIP: no CUDA device for torch")
    sys.exit(77)

import blockfp8 as bf  # noqa: E402
from checklist import Checklist  # noqa: E402
from blockfp8.torch import Float8BlockwiseLinear  # noqa: E402

if not ON_CPU and bf.cuda_device_count() < 1:
    print("SKIP: libblockfp8 sees no CUDA device (built without CUDA?)")
    sys.exit(77)

check = Checklist("test_binding_torch")
dev = torch.device("cpu") if ON_CPU else torch.device("cuda", 0)


def synchronize():
    if not ON_CPU:
        torch.cuda.synchronize()


def sqnr_db(ref, out):
    ref, out = ref.double(), out.double()
    noise = torch.linalg.norm(ref - out).item()
    return float("inf") if noise == 0 else 20 * np.log10(torch.linalg.norm(ref).item() / noise)


def worst_tile_db(ref, out):
    worst = float("inf")
    for r in range(0, ref.shape[0], 128):
        for c in range(0, ref.shape[1], 128):
            t = ref[r:r + 128, c:c + 128]
            if torch.any(t != 0):
                worst = min(worst, sqnr_db(t, out[r:r + 128, c:c + 128]))
    return worst


def make(rows, cols, dtype, gen):
    x = torch.randn(rows, cols, generator=gen, dtype=torch.float32)
    x[: min(rows, 130), : min(cols, 128)] = 0.0
    x[rows // 2, cols // 2] *= 1000.0
    return x.to(dtype)


def as_numpy(t):
    """A CPU tensor as numpy (bf16 as uint16 bit patterns, which the binding takes as bf16)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def from_numpy(a):
    """numpy (f32, or bf16 as ml_dtypes.bfloat16 or uint16 bits) as an f32 CPU tensor."""
    if a.dtype.itemsize == 2:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).float()
    return torch.from_numpy(np.asarray(a, np.float32))


E4M3 = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).double()


def decode(q):
    """A CUDA QTensor's values (codes * scales) in fp64, on the GPU."""
    codes = E4M3[q.data[:, : q.cols].cpu().long()]
    scales = q.scales.double().cpu()
    if q.granularity == 1:
        scales = scales[:, : q.rows].t().repeat_interleave(128, dim=1)[:, : q.cols]
    else:
        scales = scales.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[: q.rows, : q.cols]
    return (codes * scales).to(dev)


def same_q(gpu, cpu, label):
    check(np.array_equal(gpu.data.cpu().numpy()[:, : gpu.cols], cpu.data[:, : cpu.cols]), label + ": codes")
    rows = gpu.scales.shape[1] if gpu.granularity == 2 else gpu.rows
    check(np.array_equal(gpu.scales.cpu().numpy()[:, :rows].view(np.uint32), cpu.scales[:, :rows].view(np.uint32)),
          label + ": scales")


def test_quantizers(gen):
    for rows, cols in [(1, 1), (129, 127), (1000, 4160), (4096, 4096)]:
        for dtype in (torch.bfloat16, torch.float32):
            x = make(rows, cols, dtype, gen)
            label = "%dx%d %s" % (rows, cols, dtype)
            g_rows, g_cols = bf.quantize_1x128(x.to(dev), rows=True, cols=True)
            c_rows, c_cols = bf.quantize_1x128(as_numpy(x), rows=True, cols=True)
            same_q(g_rows, c_rows, "1x128 rows " + label)
            same_q(g_cols, c_cols, "1x128 cols " + label)
            g, g_t = bf.quantize_128x128(x.to(dev), transposed=True)
            c, c_t = bf.quantize_128x128(as_numpy(x), transposed=True)
            same_q(g, c, "128x128 " + label)
            same_q(g_t, c_t, "128x128 W^T " + label)
    x = make(256, 512, torch.bfloat16, gen).to(dev)
    x[7, 300] = float("inf")
    flag = torch.zeros(1, dtype=torch.int32, device=dev)
    bf.quantize_1x128(x, nonfinite_flag=flag)
    check(flag.item() == 1, "non-finite flag on CUDA")


def test_gemms(gen):
    for m, n, k in [(1, 128, 128), (1000, 7168 + 8, 512), (2048, 1024, 4096)]:
        qa, _ = bf.quantize_1x128(make(m, k, torch.bfloat16, gen).to(dev))
        qb, _ = bf.quantize_128x128(make(n, k, torch.float32, gen).to(dev))
        ref = decode(qa) @ decode(qb).t()
        d = bf.gemm_1d2d(qa, qb)
        label = "1d2d %dx%dx%d" % (m, n, k)
        check(tuple(d.shape) == (m, n) and d.dtype == torch.bfloat16, label + ": shape / dtype")
        got, tile = sqnr_db(ref, d), worst_tile_db(ref, d)
        check(got >= 40 and tile >= 40, "%s: %.1f dB (worst tile %.1f)" % (label, got, tile))
    tokens, n, k = 4097, 768, 1024
    _, qdyt = bf.quantize_1x128(make(tokens, n, torch.bfloat16, gen).to(dev), rows=False, cols=True)
    _, qxt = bf.quantize_1x128(make(tokens, k, torch.bfloat16, gen).to(dev), rows=False, cols=True)
    ref = decode(qdyt) @ decode(qxt).t()
    dw = bf.gemm_1d1d(qdyt, qxt)
    check(sqnr_db(ref, dw) >= 40 and worst_tile_db(ref, dw) >= 40, "1d1d: %.1f dB" % sqnr_db(ref, dw))
    acc = torch.randn(n, k, generator=gen).to(dev)
    start = acc.clone()
    bf.gemm_1d1d(qdyt, qxt, out=acc, accumulate=True)
    bf.gemm_1d1d(qdyt, qxt, out=acc, accumulate=True)
    check(sqnr_db(start.double() + 2 * ref, acc) >= 40, "1d1d accumulate in place")


def run_layer(layer, x, dy):
    x = x.clone().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    y = layer(x)
    y.backward(dy)
    synchronize()
    return y.detach(), x.grad, layer.weight.grad


def test_module(gen):
    tokens, k, n = 1000, 1024, 768
    x = torch.randn(2, tokens // 2, k, generator=gen).to(dev, torch.bfloat16)
    dy = torch.randn(2, tokens // 2, n, generator=gen).to(dev, torch.bfloat16)
    base = torch.nn.Linear(k, n, bias=True).to(dev)
    with torch.no_grad():
        base.bias.normal_()
    w = base.weight.detach().double()
    xf, dyf = x.double().reshape(tokens, k), dy.double().reshape(tokens, n)
    y_ref = (xf @ w.t() + base.bias.detach().double()).reshape(2, tokens // 2, n)
    dx_ref, dw_ref = (dyf @ w).reshape(x.shape), dyf.t() @ xf
    for recipe, wgrad_bar in (("fp8-blockwise", 28), ("fp8-blockwise-bf16wgrad", 40)):
        layer = Float8BlockwiseLinear.from_linear(base, recipe=recipe)
        y, dx, dw = run_layer(layer, x, dy)
        got = (sqnr_db(y_ref, y), sqnr_db(dx_ref, dx), sqnr_db(dw_ref, dw))
        check(got[0] >= 28 and got[1] >= 28 and got[2] >= wgrad_bar,
              "Float8BlockwiseLinear %s: forward / dgrad / wgrad %.1f / %.1f / %.1f dB" % ((recipe,) + got))
        check(y.dtype == torch.bfloat16 and dx.dtype == torch.bfloat16 and dw.dtype == torch.float32,
              "Float8BlockwiseLinear %s: dtypes" % recipe)
        if not ON_CPU:
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                y2, dx2, dw2 = run_layer(layer, x, dy)
            check(torch.equal(y, y2) and torch.equal(dx, dx2) and torch.equal(dw, dw2),
                  "Float8BlockwiseLinear %s: a side stream gives other bits" % recipe)
        print("Float8BlockwiseLinear %-24s forward %.2f dB, dgrad %.2f dB, wgrad %.2f dB" % ((recipe,) + got))
    test_nonfinite(layer, x, dy)


def test_module_f32_input(gen):
    """An f32 x reaches the quantizers as it is (no rounding to bf16 first) and, outside autocast, y and dx
    come out of the GEMMs in f32 (as nn.Linear's, of x's dtype): the layer's y, dx and dw are those of the
    ops on the f32 data, bit for bit. Inside autocast y is bf16."""
    tokens, k, n = 384, 512, 256
    x = torch.randn(tokens, k, generator=gen).to(dev)
    dy = torch.randn(tokens, n, generator=gen).to(dev, torch.bfloat16)
    layer = Float8BlockwiseLinear(k, n, device=dev)
    y, dx, dw = run_layer(layer, x, dy)
    qx, qxt = bf.quantize_1x128(x, rows=True, cols=True)
    qw, qwt = bf.quantize_128x128(layer.weight.detach().contiguous(), transposed=True)
    qdy, qdyt = bf.quantize_1x128(dy, rows=True, cols=True)
    check(y.dtype == torch.float32 and torch.equal(y, bf.gemm_1d2d(qx, qw, out_dtype="f32")),
          "Float8BlockwiseLinear f32 x: y")
    check(dx.dtype == torch.float32 and torch.equal(dx, bf.gemm_1d2d(qdy, qwt, out_dtype="f32")),
          "Float8BlockwiseLinear f32 x: dx")
    check(torch.equal(dw, bf.gemm_1d1d(qdyt, qxt)), "Float8BlockwiseLinear f32 x: dw")
    q16, _ = bf.quantize_1x128(x.to(torch.bfloat16))
    check(not torch.equal(q16.data, qx.data), "f32 x: its bf16 rounding quantizes the same (the test cannot tell)")
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        y16 = layer(x)
    check(y16.dtype == torch.bfloat16 and torch.equal(y16, bf.gemm_1d2d(qx, qw)), "Float8BlockwiseLinear autocast: y")


def test_nonfinite(layer, x, dy):
    """The layer's non-finite flags: raised by the tensor that held NaN/Inf, read by check_finite."""
    check(layer.nonfinite() == [], "non-finite flags raised by finite data: %s" % layer.nonfinite())
    cases = []
    x_bad = x.clone()
    x_bad[1, 3, 5] = float("nan")
    cases.append(("input", x_bad, dy, None))
    dy_bad = dy.clone()
    dy_bad[0, 7, 2] = float("inf")
    cases.append(("output gradient", x, dy_bad, None))
    cases.append(("weight", x, dy, (0, 0)))
    for name, xs, dys, w_at in cases:
        layer.reset_nonfinite()
        if w_at:
            kept = layer.weight.detach()[w_at].item()
            with torch.no_grad():
                layer.weight[w_at] = float("nan")
        run_layer(layer, xs, dys)
        if w_at:
            with torch.no_grad():
                layer.weight[w_at] = kept
        check(layer.nonfinite() == [name], "non-finite %s: flags say %s" % (name, layer.nonfinite()))
        try:
            layer.check_finite()
            check(False, "check_finite did not raise on a non-finite %s" % name)
        except FloatingPointError as e:
            check(name in str(e), "check_finite's message: %s" % e)
    layer.reset_nonfinite()
    check(layer.nonfinite() == [], "reset_nonfinite")


def test_grouped(gen):
    """float8_blockwise_grouped_linear: 3 experts (one without tokens), 128 spare rows."""
    from blockfp8.torch import float8_blockwise_grouped_linear
    offsets, n, k = [0, 256, 256, 640], 256, 384
    x = make(768, k, torch.bfloat16, gen).to(dev).requires_grad_(True)
    w = (torch.randn(3, n, k, generator=gen) * 0.05).to(dev).requires_grad_(True)
    dy = make(768, n, torch.bfloat16, gen).to(dev)
    y = float8_blockwise_grouped_linear(x, w, offsets)
    y.backward(dy)
    synchronize()
    xd, wd, dyd = x.detach().double(), w.detach().double(), dy.double()
    ref_y, ref_dx = torch.zeros(768, n, dtype=torch.float64, device=dev), torch.zeros(768, k, dtype=torch.float64, device=dev)
    ref_dw = torch.zeros(3, n, k, dtype=torch.float64, device=dev)
    for g in range(3):
        lo, hi = offsets[g], offsets[g + 1]
        ref_y[lo:hi] = xd[lo:hi] @ wd[g].t()
        ref_dx[lo:hi] = dyd[lo:hi] @ wd[g]
        ref_dw[g] = dyd[lo:hi].t() @ xd[lo:hi]
    got = (sqnr_db(ref_y, y), sqnr_db(ref_dx, x.grad), sqnr_db(ref_dw[[0, 2]], w.grad[[0, 2]]))
    check(all(v >= 28 for v in got), "grouped linear: forward / dgrad / wgrad %.1f / %.1f / %.1f dB" % got)
    check(bool((y[640:] == 0).all()) and bool((x.grad[640:] == 0).all()), "grouped linear: rows past the last expert")
    check(bool((w.grad[1] == 0).all()), "grouped linear: the expert without tokens has a zero gradient")
    print("float8_blockwise_grouped_linear: forward %.2f dB, dgrad %.2f dB, wgrad %.2f dB" % got)
    # offsets as a tensor beside x: the device-offsets GEMMs, the same bits
    x2 = x.detach().clone().requires_grad_(True)
    w2 = w.detach().clone().requires_grad_(True)
    y2 = float8_blockwise_grouped_linear(x2, w2, torch.tensor(offsets, dtype=torch.int64, device=dev))
    y2.backward(dy)
    synchronize()
    check(torch.equal(y2, y) and torch.equal(x2.grad, x.grad) and torch.equal(w2.grad, w.grad),
          "grouped linear: offsets as a tensor differ from a list")
    # the module: its weight, the same function
    from blockfp8.torch import Float8BlockwiseGroupedLinear
    experts = Float8BlockwiseGroupedLinear(3, k, n, device=dev)
    with torch.no_grad():
        experts.weight.copy_(w.detach())
    y3 = experts(x.detach(), offsets)
    y3.backward(dy)
    synchronize()
    check(torch.equal(y3, y) and torch.equal(experts.weight.grad, w.grad),
          "Float8BlockwiseGroupedLinear differs from float8_blockwise_grouped_linear")
    try:
        Float8BlockwiseGroupedLinear(2, 100, 128)
        check(False, "Float8BlockwiseGroupedLinear with 100 in_features: no error")
    except ValueError:
        check(True, "")


def test_library_linear(gen):
    tokens, k, n = 777, 1024, 640
    w = (torch.randn(n, k, generator=gen) / k ** 0.5).float()
    x = torch.randn(tokens, k, generator=gen).to(torch.bfloat16)
    dy = torch.randn(tokens, n, generator=gen).to(torch.bfloat16)
    outs = []
    for over_numpy in (True, False):
        lin = bf.Linear(k, n, max_tokens=1024, device="cpu" if ON_CPU or over_numpy else "cuda")
        if not over_numpy:
            lin.set_weight(w.to(dev))
            y = lin.forward(x.to(dev))
            dx, dw = lin.backward(dy.to(dev))
            synchronize()
            outs.append((y.cpu().float(), dx.cpu().float(), dw.cpu()))
        else:
            lin.set_weight(w.numpy())
            y = lin.forward(as_numpy(x))
            dx, dw = lin.backward(as_numpy(dy))
            outs.append(tuple(from_numpy(a) for a in (y, dx, dw)))
    got = [sqnr_db(c, g) for c, g in zip(outs[0], outs[1])]
    check(all(v >= 40 for v in got), "Linear on tensors vs over numpy: %.1f / %.1f / %.1f dB" % tuple(got))
    if not ON_CPU:  # the f32 forms on the GPU: on bf16 values, dw is the bf16 form's, y and dx round to its
        lin = bf.Linear(k, n, max_tokens=1024, device="cuda")
        lin.set_weight(w.to(dev))
        y16 = lin.forward(x.to(dev))
        dx16, dw16 = lin.backward(dy.to(dev))
        y32 = lin.forward(x.to(dev).float())
        dx32, dw32 = lin.backward(dy.to(dev).float())
        synchronize()
        check(y32.dtype == torch.float32 and dx32.dtype == torch.float32, "Linear f32 forms: output dtypes")
        check(torch.equal(y32.to(torch.bfloat16), y16) and torch.equal(dx32.to(torch.bfloat16), dx16)
              and torch.equal(dw32, dw16), "Linear f32 forms on the GPU against the bf16 form")
    if not ON_CPU:  # operands on the GPU and on the host, mixed: refused before the library sees them
        qa, _ = bf.quantize_1x128(x.to(dev))
        qb, _ = bf.quantize_128x128(as_numpy(w))
        for what, call in (("gemm_1d2d", lambda: bf.gemm_1d2d(qa, qb)),
                           ("Linear", lambda: bf.Linear(k, n, 1024, device="cpu").forward(x.to(dev)))):
            refused = False
            try:
                call()
            except ValueError:
                refused = True
            check(refused, "%s took device and host memory together" % what)


def bench():
    """Training steps as a trainer runs them: forward + backward of a bf16
    input, gradients set afresh each step (no accumulation kernels), 20 steps
    back to back between two CUDA events (Python enqueues ahead of the GPU)."""
    import torch.nn.functional as F

    def timed(step, params, steps=20):
        def run(count):
            for _ in range(count):
                for p in params:
                    p.grad = None
                step()
        run(3)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(3):
            a.record()
            run(steps)
            b.record()
            b.synchronize()
            best = min(best, a.elapsed_time(b) * 1e3 / steps)
        return best

    print("forward + backward, us per step (20 steps between events, best of 3), %s" % torch.cuda.get_device_name(0))
    for m, n, k in [(16384, 4096, 4096), (16384, 14336, 4096), (16384, 4096, 14336)]:
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        w16 = torch.randn(n, k, device=dev, dtype=torch.bfloat16, requires_grad=True)
        layer = Float8BlockwiseLinear(k, n, device=dev)
        t16 = timed(lambda: F.linear(x, w16).backward(dy), [x, w16])
        t8 = timed(lambda: layer(x).backward(dy), [x, layer.weight])
        print("  %dx%dx%d  torch bf16 %8.1f   Float8BlockwiseLinear %8.1f  (%.2fx)" % (m, n, k, t16, t8, t16 / t8))


def main():
    gen = torch.Generator().manual_seed(11)
    for test in (test_quantizers, test_gemms, test_module, test_module_f32_input, test_grouped, test_library_linear):
        test(gen)
    verdict = check.finish()
    if "--bench" in sys.argv[1:]:
        bench()
    return verdict


if __name__ == "__main__":
    sys.exit(main())
