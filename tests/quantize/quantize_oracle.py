"""quantize_oracle.py - a second, independent implementation of the blockwise
quantizers, written in numpy + ml_dtypes from the formulas of docs/RECIPE.md
section 3, compared bit for bit (codes, scale bits, the non-finite flag) with
the C reference, called through ctypes:

    python3 tests/quantize/quantize_oracle.py build/libblockfp8.so

Covers ragged shapes, bf16 and f32 inputs, pow2 on and off, zero blocks,
outliers, NaN/Inf, tiny and huge groups, padded leading dimensions (whose
padding must be neither read nor written), out_rows / out_cols alone and
together, and 128x128 with and without the transposed copy.
Exit code: 0 all equal, 1 a difference, 77 skipped (modules missing, not CI).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import bfp8_lib as B  # noqa: E402

B.require_modules()
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

FLT_MAX = np.finfo(np.float32).max
NAN_SCALE_BITS = 0x7FC00000
POISON_CODE = 0xA5
POISON_SCALE_BITS = 0x7F812345  # a NaN no quantizer writes

failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL " + msg)


# --------------------------------------------------------------------------
# The oracle: RECIPE.md section 3, for groups laid along the last axis of g.

def multipliers(amax, pow2):
    """mult = 448 / amax (fp32 division); amax == 0 -> 1; overflow -> FLT_MAX;
    pow2: 2^floor(log2(mult))."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        mult = np.float32(448.0) / amax
    mult = np.where(amax == 0, np.float32(1.0), mult)
    mult = np.where(np.isinf(mult), FLT_MAX, mult).astype(np.float32)
    if pow2:
        _, e = np.frexp(mult)  # mult = f * 2^e, 0.5 <= f < 1
        mult = np.ldexp(np.float32(1.0), e - 1).astype(np.float32)
    return mult


def encode_e4m3(v):
    """Saturating RNE cast: ml_dtypes' cast of the value clamped to +-448."""
    clamped = np.clip(v, np.float32(-448.0), np.float32(448.0))
    return clamped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def quantize_groups(g, axes, pow2):
    """g: float32 array, zero-padded; the group spans `axes`. Returns codes
    (shape of g), scales (g's shape without `axes`), any non-finite group."""
    finite = np.isfinite(g).all(axis=axes)
    with np.errstate(invalid="ignore"):
        amax = np.abs(g).max(axis=axes)
    mult = multipliers(np.where(finite, amax, np.float32(1.0)), pow2)
    mult_b = np.expand_dims(mult, axes)
    with np.errstate(over="ignore", invalid="ignore"):
        codes = encode_e4m3(g * mult_b).copy()
    codes[~np.broadcast_to(np.expand_dims(finite, axes), g.shape)] = 0x7F
    scales = (np.float32(1.0) / mult).astype(np.float32)
    scales.view(np.uint32)[~finite] = NAN_SCALE_BITS
    return codes, scales, bool((~finite).any())


def oracle_1x128(x, pow2):
    """x: R x C float32 -> codes R x C, scales R x ceil(C/128), flag."""
    rows, cols = x.shape
    nb = -(-cols // 128)
    padded = np.zeros((rows, nb * 128), np.float32)
    padded[:, :cols] = x
    codes, scales, nonfinite = quantize_groups(padded.reshape(rows, nb, 128), 2, pow2)
    return codes.reshape(rows, nb * 128)[:, :cols], scales, nonfinite


def oracle_128x128(x, pow2):
    """x: R x C float32 -> codes R x C, scales ceil(R/128) x ceil(C/128), flag."""
    rows, cols = x.shape
    rb, cb = -(-rows // 128), -(-cols // 128)
    padded = np.zeros((rb * 128, cb * 128), np.float32)
    padded[:rows, :cols] = x
    codes, scales, nonfinite = quantize_groups(padded.reshape(rb, 128, cb, 128), (1, 3), pow2)
    return codes.reshape(rb * 128, cb * 128)[:rows, :cols], scales, nonfinite


# --------------------------------------------------------------------------
# Inputs

def make_input(rows, cols, kind, rng):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    if kind in ("hard", "nonfinite", "extreme"):
        rb, cb = rng.integers(0, -(-rows // 128)), rng.integers(0, -(-cols // 128))
        x[rb * 128:(rb + 1) * 128, cb * 128:(cb + 1) * 128] = 0.0
        x[rng.integers(0, rows), :] = 0.0
        for _ in range(1 + rows * cols // 20000):
            x[rng.integers(0, rows), rng.integers(0, cols)] = rng.choice([-1000.0, 1000.0])
        x[rng.integers(0, rows), rng.integers(0, cols)] = -0.0
    if kind == "nonfinite":
        for v in (np.nan, np.inf, -np.inf):
            x[rng.integers(0, rows), rng.integers(0, cols)] = v
    if kind == "wide":
        x *= np.ldexp(np.float32(1.0), rng.integers(-60, 60, size=(rows, 1))).astype(np.float32)
    if kind == "extreme":
        # tiny groups (448 / amax overflows), huge groups, subnormal inputs
        x[rng.integers(0, rows), :] *= np.float32(1e-41)
        x[:, rng.integers(0, cols)] *= np.float32(1e-44)
        x[rng.integers(0, rows), :] = np.float32(3e38) * np.sign(x[0, 0] + 0.5)
        x[rng.integers(0, rows), :] *= np.float32(1e30)
    return x


class Buffers:
    """A C-side matrix or quantized matrix over numpy buffers, with poisoned
    padding that must survive the call."""

    @staticmethod
    def matrix(x, dtype, ld_pad):
        rows, cols = x.shape
        ld = cols + ld_pad
        if dtype == B.F32:
            buf = np.full((rows, ld), np.nan, np.float32)
            buf[:, :cols] = x
            as_f32 = x
        else:
            buf = np.full((rows, ld), 0x7FC0, np.uint16)  # bf16 NaN in the padding
            bits = x.astype(ml_dtypes.bfloat16).view(np.uint16)
            buf[:, :cols] = bits
            as_f32 = bits.view(ml_dtypes.bfloat16).astype(np.float32)
        m = B.Matrix(B.ptr(buf), dtype, rows, cols, ld)
        return m, buf, as_f32

    @staticmethod
    def qmatrix(rows, cols, gran, pad):
        ld = -(-cols // 16) * 16 + (16 if pad else 0)
        kb = -(-cols // 128)
        if gran == B.GRAN_1X128:
            scale_ld = -(-rows // 4) * 4 + (4 if pad else 0)
            scale_shape = (kb, scale_ld)
        else:
            scale_ld = kb + (3 if pad else 0)
            scale_shape = (-(-rows // 128), scale_ld)
        data = np.full((rows, ld), POISON_CODE, np.uint8)
        scales = np.full(scale_shape, POISON_SCALE_BITS, np.uint32)
        q = B.QMatrix(B.ptr(data), B.ptr(scales), B.E4M3, gran, rows, cols, ld, scale_ld)
        return q, data, scales


def compare(label, data, scales, codes_ref, scales_ref, scale_cols):
    rows, cols = codes_ref.shape
    got = data[:, :cols]
    if not np.array_equal(got, codes_ref):
        bad = np.argwhere(got != codes_ref)
        r, c = bad[0]
        fail("%s: %d codes differ, first [%d, %d]: 0x%02x vs oracle 0x%02x"
             % (label, len(bad), r, c, got[r, c], codes_ref[r, c]))
    if (data[:, cols:] != POISON_CODE).any():
        fail("%s: data padding written" % label)
    got_s = scales[:, :scale_cols]
    ref_s = scales_ref.view(np.uint32)
    if not np.array_equal(got_s, ref_s):
        bad = np.argwhere(got_s != ref_s)
        i, j = bad[0]
        fail("%s: %d scales differ, first [%d, %d]: 0x%08x vs oracle 0x%08x"
             % (label, len(bad), i, j, got_s[i, j], ref_s[i, j]))
    if (scales[:, scale_cols:] != POISON_SCALE_BITS).any():
        fail("%s: scale padding written" % label)


def run_case(lib, rows, cols, dtype, pow2, kind, which, pad, seed):
    rng = np.random.default_rng(seed)
    label = "%dx%d %s pow2=%d %s %s pad=%d" % (rows, cols, "f32" if dtype == B.F32 else "bf16",
                                               pow2, kind, which, pad)
    x = make_input(rows, cols, kind, rng)
    m, _keep, xf = Buffers.matrix(x, dtype, 3 if pad else 0)
    flag = np.zeros(1, np.uint32)
    opts = B.QuantizeOptions(pow2, B.ptr(flag))
    if which == "128x128":
        codes, scales, nonfinite = oracle_128x128(xf, pow2)
        q, qd, qs = Buffers.qmatrix(rows, cols, B.GRAN_128X128, pad)
        qt, qtd, qts = Buffers.qmatrix(cols, rows, B.GRAN_128X128, pad)
        lib.quantize_128x128(m, q, qt, opts)
        compare(label + " out", qd, qs, codes, scales, scales.shape[1])
        compare(label + " out_t", qtd, qts, codes.T, scales.T, scales.shape[0])
    elif which == "128x128-no-t":
        codes, scales, nonfinite = oracle_128x128(xf, pow2)
        q, qd, qs = Buffers.qmatrix(rows, cols, B.GRAN_128X128, pad)
        lib.quantize_128x128(m, q, None, opts)
        compare(label + " out", qd, qs, codes, scales, scales.shape[1])
    else:
        want_rows, want_cols = which in ("dual", "rows"), which in ("dual", "cols")
        nonfinite = False
        q = qc = None
        if want_rows:
            q, qd, qs = Buffers.qmatrix(rows, cols, B.GRAN_1X128, pad)
        if want_cols:
            qc, qcd, qcs = Buffers.qmatrix(cols, rows, B.GRAN_1X128, pad)
        lib.quantize_1x128(m, q, qc, opts)
        if want_rows:
            codes, scales, nf = oracle_1x128(xf, pow2)
            compare(label + " out_rows", qd, qs, codes, scales.T, rows)
            nonfinite |= nf
        if want_cols:
            codes, scales, nf = oracle_1x128(np.ascontiguousarray(xf.T), pow2)
            compare(label + " out_cols", qcd, qcs, codes, scales.T, cols)
            nonfinite |= nf
    if flag[0] != (1 if nonfinite else 0):
        fail("%s: non-finite flag %d, oracle says %d" % (label, flag[0], nonfinite))
    return label


def main():
    if len(sys.argv) != 2:
        print("usage: quantize_oracle.py path/to/libblockfp8.so")
        return 2
    lib = B.Library(sys.argv[1])
    shapes = [(1, 1), (1, 127), (127, 1), (128, 128), (129, 129), (1, 1000), (1000, 1),
              (127, 4160), (4160, 129), (1000, 1000), (256, 4160), (4160, 1000)]
    kinds = ["hard", "nonfinite", "wide", "extreme"]
    layouts = ["dual", "rows", "cols", "128x128", "128x128-no-t"]
    cases = 0
    seed = 1
    for rows, cols in shapes:
        for dtype in (B.F32, B.BF16):
            for pow2 in (0, 1):
                for layout_i, which in enumerate(layouts):
                    kind = kinds[(seed + layout_i) % len(kinds)]
                    run_case(lib, rows, cols, dtype, pow2, kind, which, pad=seed % 3 == 0, seed=seed)
                    seed += 1
                    cases += 1
    # The flag is never cleared by a quantizer.
    x = np.ones((3, 5), np.float32)
    m, _keep, _ = Buffers.matrix(x, B.F32, 0)
    flag = np.ones(1, np.uint32)
    q, _d, _s = Buffers.qmatrix(3, 5, B.GRAN_1X128, False)
    lib.quantize_1x128(m, q, None, B.QuantizeOptions(0, B.ptr(flag)))
    if flag[0] != 1:
        fail("a finite quantization cleared the non-finite flag")
    print("quantize_oracle: %d cases, %d failed" % (cases, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
