"""sweep_converters.py - the fp32 -> e4m3 / e5m2 / bf16 converters of
blockfp8 (bfp8_convert_host, i.e. formats.h) against the independent oracle
ml_dtypes, on EVERY one of the 2^32 fp32 bit patterns, plus every e4m3, e5m2
and bf16 code decoded to fp32.

    python3 tests/formats/sweep_converters.py build/libblockfp8.so [--chunks N]

The oracle for the saturating fp8 conversions is ml_dtypes' cast of the value
clamped to +-max finite (docs/RECIPE.md section 2: a plain cast does not
saturate). Non-NaN inputs must match bit for bit; a NaN input must give our
canonical NaN (0x7f for both fp8 formats, 0x7fff for bf16, what the GPU's
cvt instructions give) where the oracle gives some NaN. The 2^32 inputs are
cut in chunks of 2^24 shared by two processes. --chunks N checks only the
first N chunks of a fixed shuffled order (for a quick look); the default is
all 256. Exit code: 0 all equal, 1 a difference, 77 skipped (modules
missing, not CI).
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import bfp8_lib as B  # noqa: E402

B.require_modules()
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

CHUNK_BITS = 24
CHUNKS = 1 << (32 - CHUNK_BITS)
E4M3_MAX = np.float32(448.0)
E5M2_MAX = np.float32(57344.0)

_lib = None
_buffers = None


def _init_worker(path):
    global _lib, _buffers
    _lib = B.Library(path)
    n = 1 << CHUNK_BITS
    _buffers = {"offsets": np.arange(n, dtype=np.uint32), "bits": np.empty(n, np.uint32),
                "u8": np.empty(n, np.uint8), "u16": np.empty(n, np.uint16),
                "clamped": np.empty(n, np.float32), "bad": np.empty(n, bool)}


def _report(what, x_bits, ours, ref, bad):
    i = int(np.flatnonzero(bad)[0])
    return "%s: %d inputs differ, first 0x%08x -> 0x%x, oracle 0x%x" % (
        what, int(bad.sum()), int(x_bits[i]), int(ours[i]), int(ref[i]))


def _compare(what, bits, ours, ref, is_nan, ours_nan_ok, ref_nan_ok, failures):
    """Bit-exact on non-NaN inputs; on NaN inputs both sides must be NaN as described."""
    bad = np.not_equal(ours, ref, out=_buffers["bad"])
    if is_nan is not None:
        bad &= ~is_nan
    if bad.any():
        failures.append(_report(what, bits, ours, ref, bad))
    if is_nan is not None:
        bad = is_nan & (~ours_nan_ok(ours) | ~ref_nan_ok(ref))
        if bad.any():
            failures.append(_report(what + " (NaN inputs)", bits, ours, ref, bad))


def check_chunk(index):
    """Check inputs [index * 2^24, (index + 1) * 2^24). Returns a list of failures."""
    bits = np.add(_buffers["offsets"], np.uint32(index << CHUNK_BITS), out=_buffers["bits"])
    x = bits.view(np.float32)
    is_nan = np.isnan(x)
    is_nan = is_nan if is_nan.any() else None  # only 2 of the 256 chunks hold NaNs
    failures = []
    for name, dtype, oracle_type, max_finite, ref_is_nan in (
            ("e4m3", B.E4M3, ml_dtypes.float8_e4m3fn, E4M3_MAX, lambda c: (c & 0x7F) == 0x7F),
            ("e5m2", B.E5M2, ml_dtypes.float8_e5m2, E5M2_MAX, lambda c: (c & 0x7F) > 0x7C)):
        ours = _buffers["u8"]
        _lib.convert_host(dtype, ours, B.F32, x)
        clamped = np.clip(x, -max_finite, max_finite, out=_buffers["clamped"])
        with np.errstate(invalid="ignore", over="ignore"):
            ref = clamped.astype(oracle_type).view(np.uint8)
        _compare("f32 -> " + name, bits, ours, ref, is_nan, lambda c: c == 0x7F, ref_is_nan, failures)
    ours = _buffers["u16"]
    _lib.convert_host(B.BF16, ours, B.F32, x)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    _compare("f32 -> bf16", bits, ours, ref, is_nan, lambda c: c == 0x7FFF,
             lambda c: (c & 0x7FFF) > 0x7F80, failures)
    return failures


def check_decoders(lib):
    """Every e4m3, e5m2 and bf16 code to fp32, against ml_dtypes (NaN: any NaN)."""
    failures = []
    for name, dtype, oracle_type, width in (("e4m3", B.E4M3, ml_dtypes.float8_e4m3fn, np.uint8),
                                            ("e5m2", B.E5M2, ml_dtypes.float8_e5m2, np.uint8),
                                            ("bf16", B.BF16, ml_dtypes.bfloat16, np.uint16)):
        codes = np.arange(np.iinfo(width).max + 1, dtype=np.uint64).astype(width)
        ours = np.empty(codes.size, np.float32)
        lib.convert_host(B.F32, ours, dtype, codes)
        ref = codes.view(oracle_type).astype(np.float32)
        both_nan = np.isnan(ours) & np.isnan(ref)
        bad = (ours.view(np.uint32) != ref.view(np.uint32)) & ~both_nan
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            failures.append("%s -> f32: %d codes differ, first 0x%x -> %r, oracle %r"
                            % (name, int(bad.sum()), int(codes[i]), ours[i], ref[i]))
    return failures


def main():
    args = sys.argv[1:]
    if not args:
        print("usage: sweep_converters.py path/to/libblockfp8.so [--chunks N]")
        return 2
    path = args[0]
    count = CHUNKS
    if "--chunks" in args:
        count = int(args[args.index("--chunks") + 1])
    order = np.random.default_rng(2).permutation(CHUNKS)[:count]
    # Two processes of one thread each: the library's own OpenMP would
    # oversubscribe the cores.
    os.environ["OMP_NUM_THREADS"] = "1"
    t0 = time.time()
    failures = check_decoders(B.Library(path))
    import multiprocessing as mp
    with mp.get_context("fork").Pool(2, initializer=_init_worker, initargs=(path,)) as pool:
        for chunk_failures in pool.imap_unordered(check_chunk, [int(i) for i in order]):
            failures.extend(chunk_failures)
    for f in failures:
        print("FAIL " + f)
    inputs = count << CHUNK_BITS
    print("sweep_converters: %d fp32 inputs x 3 formats + 3 decoders in %.0f s, %d failed"
          % (inputs, time.time() - t0, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
