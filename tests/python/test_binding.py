"""test_binding.py - the Python binding (python/blockfp8) on the CPU backend,
over numpy arrays:

    BLOCKFP8_LIBRARY=build/libblockfp8.so PYTHONPATH=python python3 tests/python/test_binding.py

- quantizers: codes, scale bits and the non-finite flag equal to the numpy
  oracle of tests/quantize (bit for bit), every layout, bf16 and f32, ragged;
- GEMMs: against fp64 products of the same fp8 data (SQNR >= 40 dB, and
  in every 128 x 128 output tile), accumulation; the grouped (mixture of
  experts) GEMMs expert by expert;
- the library's linear layer against fp64 products of the unquantized
  random-normal tensors: every fp8 GEMM >= 28 dB, RECIPE.md section 5's bar
  for random normal inputs (measured 28.6-28.8 dB; test_linear_cpu's fills
  reach 31 dB and hold the layer to 25 / 30 / 30 dB);
- the Python layout (canonical_layout) against the library's bfp8_qmatrix_layout;
- bad input: blockfp8.Error with the library's status, or ValueError / TypeError
  (test_binding_args.py fuzzes the argument checks).
Exit code: 0 passed, 1 a failure, 77 skipped (numpy / ml_dtypes missing, not CI).
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
sys.path.insert(0, os.path.join(here, "..", "quantize"))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
import bfp8_lib  # noqa: E402

bfp8_lib.require_modules()
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import blockfp8 as bf  # noqa: E402
from checklist import Checklist  # noqa: E402
from quantize_oracle import oracle_1x128, oracle_128x128  # noqa: E402

check = Checklist("test_binding")


def sqnr_db(ref, out):
    ref, out = np.asarray(ref, np.float64), np.asarray(out, np.float64)
    noise = np.linalg.norm(ref - out)
    return np.inf if noise == 0 else 20 * np.log10(np.linalg.norm(ref) / noise)


def worst_tile_db(ref, out):
    worst = np.inf
    for r in range(0, ref.shape[0], 128):
        for c in range(0, ref.shape[1], 128):
            t = ref[r:r + 128, c:c + 128]
            if np.any(t):
                worst = min(worst, sqnr_db(t, out[r:r + 128, c:c + 128]))
    return worst


def make(rows, cols, dtype, rng):
    """Random normal with a zero block, an outlier 1000x the rest, in dtype."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[: min(rows, 130), : min(cols, 128)] = 0.0
    x[rows // 2, cols // 2] *= 1000.0
    return x.astype(ml_dtypes.bfloat16) if dtype == "bf16" else x


def decode(q):
    """A QTensor's values (codes * scales) in fp64, from its numpy arrays."""
    codes = q.data[:, : q.cols].view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    if q.granularity == 1:
        scales = np.repeat(q.scales[:, : q.rows].T, 128, axis=1)[:, : q.cols]
    else:
        scales = np.repeat(np.repeat(q.scales, 128, axis=0), 128, axis=1)[: q.rows, : q.cols]
    return codes * scales


def scale_bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_quantizers(rng):
    for rows, cols in [(1, 1), (127, 129), (200, 300), (257, 1000)]:
        for dtype in ("bf16", "f32"):
            for pow2 in (False, True):
                x = make(rows, cols, dtype, rng)
                xf = x.astype(np.float32)
                label = "%dx%d %s pow2=%d" % (rows, cols, dtype, pow2)
                q_rows, q_cols = bf.quantize_1x128(x, rows=True, cols=True, pow2=pow2)
                for q, src, name in ((q_rows, xf, "rows"), (q_cols, xf.T, "cols")):
                    codes, scales, _ = oracle_1x128(np.ascontiguousarray(src), pow2)
                    check(q.shape == src.shape, "1x128 %s %s: shape %s" % (name, label, q.shape))
                    check(np.array_equal(q.data[:, : q.cols], codes), "1x128 %s %s: codes" % (name, label))
                    check(np.array_equal(scale_bits(q.scales[:, : q.rows].T), scale_bits(scales)),
                          "1x128 %s %s: scales" % (name, label))
                q, q_t = bf.quantize_128x128(x, transposed=True, pow2=pow2)
                codes, scales, _ = oracle_128x128(xf, pow2)
                check(np.array_equal(q.data[:, :cols], codes), "128x128 %s: codes" % label)
                check(np.array_equal(scale_bits(q.scales), scale_bits(scales)), "128x128 %s: scales" % label)
                check(np.array_equal(q_t.data[:, :rows], codes.T), "128x128 %s: W^T codes" % label)
                check(np.array_equal(scale_bits(q_t.scales), scale_bits(scales.T)), "128x128 %s: W^T scales" % label)
                deq = bf.dequantize(q_rows)
                check(np.array_equal(deq, decode(q_rows).astype(np.float32)), "dequantize %s" % label)


def test_nonfinite(rng):
    x = make(64, 300, "f32", rng)
    x[3, 200] = np.nan
    flag = np.zeros(1, np.uint32)
    q, _ = bf.quantize_1x128(x, nonfinite_flag=flag)
    check(flag[0] == 1, "non-finite flag not raised")
    check(np.all(q.data[3, 128:256] == 0x7F), "non-finite group not NaN codes")
    flag[0] = 0
    bf.quantize_1x128(make(64, 300, "f32", rng), nonfinite_flag=flag)
    check(flag[0] == 0, "non-finite flag raised on finite data")


def test_gemms(rng):
    for m, n, k in [(1, 128, 128), (129, 300, 520), (200, 2112 // 8, 1000)]:
        a = make(m, k, "bf16", rng)
        b = make(n, k, "f32", rng)
        qa, _ = bf.quantize_1x128(a)
        qb, _ = bf.quantize_128x128(b)
        ref = decode(qa) @ decode(qb).T
        for out_dtype in ("bf16", "f32"):
            d = bf.gemm_1d2d(qa, qb, out_dtype=out_dtype).astype(np.float64)
            label = "1d2d %dx%dx%d %s" % (m, n, k, out_dtype)
            check(d.shape == (m, n), "%s: shape %s" % (label, d.shape))
            check(sqnr_db(ref, d) >= 40 and worst_tile_db(ref, d) >= 40,
                  "%s: %.1f dB (worst tile %.1f)" % (label, sqnr_db(ref, d), worst_tile_db(ref, d)))
    # wgrad: dW[N, K] = dy^T x over M tokens, from the transposed layouts; accumulated twice
    tokens, n, k = 333, 200, 260
    dy, x = make(tokens, n, "bf16", rng), make(tokens, k, "bf16", rng)
    _, qdyt = bf.quantize_1x128(dy, rows=False, cols=True)
    _, qxt = bf.quantize_1x128(x, rows=False, cols=True)
    ref = decode(qdyt) @ decode(qxt).T
    dw = bf.gemm_1d1d(qdyt, qxt)
    check(sqnr_db(ref, dw) >= 40 and worst_tile_db(ref, dw) >= 40, "1d1d: %.1f dB" % sqnr_db(ref, dw))
    start = rng.standard_normal((n, k)).astype(np.float32)
    acc = start.copy()
    bf.gemm_1d1d(qdyt, qxt, out=acc, accumulate=True)
    bf.gemm_1d1d(qdyt, qxt, out=acc, accumulate=True)
    check(sqnr_db(start + 2 * ref, acc) >= 40, "1d1d accumulate: %.1f dB" % sqnr_db(start + 2 * ref, acc))


def test_linear(rng):
    tokens, k, n = 300, 384, 200
    for recipe, bars in (("fp8-blockwise", (28, 28, 28)), ("fp8-blockwise-bf16wgrad", (28, 28, 40)),
                         ("bf16", (40, 40, 40))):
        lin = bf.Linear(k, n, max_tokens=512, recipe=recipe)
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        x = rng.standard_normal((tokens, k)).astype(ml_dtypes.bfloat16)
        dy = rng.standard_normal((tokens, n)).astype(ml_dtypes.bfloat16)
        lin.set_weight(w)
        y = lin.forward(x)
        dx, dw = lin.backward(dy)
        xf, dyf = x.astype(np.float64), dy.astype(np.float64)
        got = [sqnr_db(xf @ w.T, y.astype(np.float64)), sqnr_db(dyf @ w, dx.astype(np.float64)),
               sqnr_db(dyf.T @ xf, dw)]
        check(all(g >= bar for g, bar in zip(got, bars)),
              "linear %s: forward / dgrad / wgrad %.1f / %.1f / %.1f dB (bars %s)" % ((recipe,) + tuple(got) + (bars,)))
        dw2 = dw.copy()
        lin.backward(dy, dw=dw2, accumulate=True, need_dx=False)
        check(sqnr_db(2 * dw, dw2) >= 60, "linear %s: accumulated dw" % recipe)


def test_linear_f32(rng):
    """The f32 forms (fp8-blockwise): on bf16 values, dw is the bf16 form's bit for bit and y, dx round to
    its outputs (include/blockfp8.h); the two forms mix; on f32 values, the accuracy bars of test_linear."""
    tokens, k, n = 300, 384, 200
    lin = bf.Linear(k, n, max_tokens=512)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    lin.set_weight(w)
    x16 = rng.standard_normal((tokens, k)).astype(ml_dtypes.bfloat16)
    dy16 = rng.standard_normal((tokens, n)).astype(ml_dtypes.bfloat16)
    x32, dy32 = x16.astype(np.float32), dy16.astype(np.float32)
    y16 = lin.forward(x16)
    dx16, dw16 = lin.backward(dy16)
    y32 = lin.forward(x32)
    dx32, dw32 = lin.backward(dy32)
    check(y32.dtype == np.float32 and dx32.dtype == np.float32 and dw32.dtype == np.float32,
          "linear f32: output dtypes %s %s %s" % (y32.dtype, dx32.dtype, dw32.dtype))
    check(np.array_equal(y32.astype(ml_dtypes.bfloat16).view(np.uint16), y16.view(np.uint16)),
          "linear f32: y does not round to the bf16 form's y")
    check(np.array_equal(dx32.astype(ml_dtypes.bfloat16).view(np.uint16), dx16.view(np.uint16)),
          "linear f32: dx does not round to the bf16 form's dx")
    check(np.array_equal(dw32.view(np.uint32), dw16.view(np.uint32)), "linear f32: dw differs from the bf16 form's")
    lin.forward(x32)  # forward in f32, backward in bf16
    dx_mixed, dw_mixed = lin.backward(dy16)
    check(dx_mixed.dtype == ml_dtypes.bfloat16 and np.array_equal(dx_mixed.view(np.uint16), dx16.view(np.uint16))
          and np.array_equal(dw_mixed.view(np.uint32), dw16.view(np.uint32)), "linear f32 forward, bf16 backward")
    acc = dw32.copy()
    lin.forward(x16)
    lin.backward(dy32, dw=acc, accumulate=True, need_dx=False)
    check(sqnr_db(2 * dw16.astype(np.float64), acc) >= 60, "linear f32: accumulated dw")
    xr = rng.standard_normal((tokens, k)).astype(np.float32)  # values bf16 cannot hold
    dyr = rng.standard_normal((tokens, n)).astype(np.float32)
    y = lin.forward(xr)
    dx, dw = lin.backward(dyr)
    xf, dyf = xr.astype(np.float64), dyr.astype(np.float64)
    got = (sqnr_db(xf @ w.T, y), sqnr_db(dyf @ w, dx), sqnr_db(dyf.T @ xf, dw))
    check(all(g >= 28 for g in got), "linear f32: forward / dgrad / wgrad %.1f / %.1f / %.1f dB (bar 28)" % got)
    for recipe in ("bf16", "fp8-blockwise-bf16wgrad"):
        other = bf.Linear(k, n, max_tokens=512, recipe=recipe)
        other.set_weight(w)
        expect_error(lambda: other.forward(x32), bf.Error, "f32 forward in the %s recipe" % recipe)
    expect_error(lambda: lin.forward(xr.astype(np.float64)), TypeError, "a float64 x")


def test_grouped_gemms(rng):
    """Mixture of experts: 3 experts of 256, 0 and 128 tokens (+ 128 spare rows)."""
    offsets, n, k = [0, 256, 256, 384], 256, 200
    x = make(512, k, "bf16", rng)
    w = make(3 * n, k, "f32", rng)
    qx, _ = bf.quantize_1x128(x)
    qw, _ = bf.quantize_128x128(w)
    d = bf.gemm_1d2d_grouped(qx, qw, offsets, out_dtype="f32")
    xd, wd = decode(qx), decode(qw)
    for g in range(3):
        lo, hi = offsets[g], offsets[g + 1]
        if hi > lo:
            ref = xd[lo:hi] @ wd[g * n:(g + 1) * n].T
            check(sqnr_db(ref, d[lo:hi]) >= 40, "1d2d grouped, expert %d: %.1f dB" % (g, sqnr_db(ref, d[lo:hi])))
    # wgrad over each expert's tokens; expert 1 has none: its rows keep `start`
    dy = make(512, n, "bf16", rng)
    _, qdyt = bf.quantize_1x128(dy, rows=False, cols=True)
    _, qxt = bf.quantize_1x128(x, rows=False, cols=True)
    start = rng.standard_normal((3 * n, k)).astype(np.float32)
    dw = start.copy()
    bf.gemm_1d1d_grouped(qdyt, qxt, offsets, out=dw, accumulate=True)
    dyd, xtd = decode(qdyt), decode(qxt)
    for g in range(3):
        lo, hi = offsets[g], offsets[g + 1]
        ref = start[g * n:(g + 1) * n] + dyd[:, lo:hi] @ xtd[:, lo:hi].T
        got = dw[g * n:(g + 1) * n]
        check(sqnr_db(ref, got) >= 40, "1d1d grouped, expert %d: %.1f dB" % (g, sqnr_db(ref, got)))
    check(np.array_equal(dw[n:2 * n], start[n:2 * n]), "1d1d grouped: the expert without tokens changed")
    # the same offsets as an int64 array (backend memory: the device-offsets entry points)
    d_arr = bf.gemm_1d2d_grouped(qx, qw, np.array(offsets, dtype=np.int64), out_dtype="f32")
    check(np.array_equal(d_arr[:384], d[:384]), "1d2d grouped: offsets as an array differ from a list")
    dw_arr = start.copy()
    bf.gemm_1d1d_grouped(qdyt, qxt, np.array(offsets, dtype=np.int64), out=dw_arr, accumulate=True)
    check(np.array_equal(dw_arr, dw), "1d1d grouped: offsets as an array differ from a list")
    expect_error(lambda: bf.gemm_1d2d_grouped(qx, qw, np.array(offsets, dtype=np.int32)), ValueError, "int32 offsets")
    expect_error(lambda: bf.gemm_1d2d_grouped(qx, qw, [0, 100, 256, 384]), bf.Error, "offsets not multiples of 128")
    expect_error(lambda: bf.gemm_1d2d_grouped(qx, qw, [0]), ValueError, "one offset")


def expect_error(fn, kind, what):
    try:
        fn()
    except kind as e:
        check(not isinstance(e, bf.Error) or e.status.startswith("BFP8_ERR_"), "%s: status %s" % (what, e))
        return
    except Exception as e:  # noqa: BLE001
        check(False, "%s: raised %r, expected %s" % (what, e, kind.__name__))
        return
    check(False, "%s: no error" % what)


def test_bad_input(rng):
    x = make(64, 256, "f32", rng)
    qx, _ = bf.quantize_1x128(x)
    qw, _ = bf.quantize_128x128(make(128, 200, "f32", rng))
    expect_error(lambda: bf.gemm_1d2d(qx, qw), ValueError, "gemm_1d2d with K 256 against K 200")
    expect_error(lambda: bf.gemm_1d2d(qx, qx), ValueError, "gemm_1d2d with a 1x128 B")
    expect_error(lambda: bf.quantize_1x128(x[:, ::2]), ValueError, "strided columns")
    expect_error(lambda: bf.quantize_1x128(x.reshape(4, 16, 256)), ValueError, "a 3-D array")
    expect_error(lambda: bf.quantize_1x128(x.astype(np.float64)), TypeError, "float64")
    expect_error(lambda: bf.quantize_1x128(x, rows=False, cols=False), ValueError, "no output")
    lin = bf.Linear(256, 128, max_tokens=64)
    lin.set_weight(np.zeros((128, 256), np.float32))
    expect_error(lambda: lin.forward(make(65, 256, "bf16", rng)), bf.Error, "more tokens than max_tokens")
    expect_error(lambda: lin.forward(make(8, 255, "bf16", rng)), ValueError, "wrong in_features")
    expect_error(lambda: bf.Linear(256, 128, 64).backward(make(8, 128, "bf16", rng)), bf.Error, "backward first")
    expect_error(lambda: bf.Linear(256, 128, 64, recipe="fp4"), ValueError, "unknown recipe")


def test_layout(rng):
    """canonical_layout (what the binding and the PyTorch ops allocate) is the library's."""
    import ctypes
    from blockfp8 import _ffi
    lib = bf._library()
    for rows in (1, 3, 4, 5, 127, 128, 129, 1000):
        for cols in (1, 15, 16, 17, 128, 129, 4097):
            for gran in (_ffi.GRAN_1X128, _ffi.GRAN_128X128):
                q = _ffi.QMatrix()
                data_bytes, scale_bytes = ctypes.c_size_t(), ctypes.c_size_t()
                lib.bfp8_qmatrix_layout(ctypes.byref(q), rows, cols, gran, ctypes.byref(data_bytes),
                                        ctypes.byref(scale_bytes))
                ld, scale_rows, scale_ld = bf.canonical_layout(rows, cols, gran)
                # the library counts the scales up to the last one used (the rectangle may be larger)
                last_row = rows if gran == _ffi.GRAN_1X128 else -(-cols // 128)
                check((ld, scale_ld) == (q.ld, q.scale_ld) and rows * ld == data_bytes.value
                      and ((scale_rows - 1) * scale_ld + last_row) * 4 == scale_bytes.value,
                      "canonical_layout(%d, %d, %d) = %s, the library's ld %d scale_ld %d bytes %d %d" % (
                          rows, cols, gran, (ld, scale_rows, scale_ld), q.ld, q.scale_ld, data_bytes.value,
                          scale_bytes.value))


def main():
    rng = np.random.default_rng(7)
    for test in (test_layout, test_quantizers, test_nonfinite, test_gemms, test_grouped_gemms, test_linear,
                 test_linear_f32,
                 test_bad_input):
        test(rng)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
