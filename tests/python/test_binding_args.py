"""test_binding_args.py - a fuzz of the Python binding's argument checks
(python/blockfp8, CPU backend, numpy only: no torch, no ml_dtypes):

    BLOCKFP8_LIBRARY=build/libblockfp8.so python3 tests/python/test_binding_args.py [--iterations N] [--seed S]

1. every public call, one argument at a time replaced by each bad value of
   its kind (a list, None, a number, a string, an array of the wrong
   dtype / rank / strides / size, an empty (0, 128) array, an array where a
   QTensor goes, a QTensor of the other granularity, "f16" or "int8" for a
   dtype, True for a flag array, ...), the others good: the call raises the
   TypeError or ValueError expected for that value, whose message names the
   argument, and writes nothing into the arrays it was given;
2. N random calls (default 2000), each argument good, bad, or junk of any
   kind (nested lists, dicts, bytes, 0-d and 3-D arrays of every dtype, huge
   and negative ints, NaN): a call of good arguments returns; any other
   raises TypeError, ValueError or blockfp8.Error, never another exception
   (AttributeError, KeyError, IndexError, ctypes.ArgumentError, ...), and
   every message starts with "blockfp8".
Exit code: 0 passed, 1 a failure, 77 skipped (numpy missing, not CI).
"""
import inspect
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))

try:
    import numpy as np
except ImportError as e:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        print("FAIL: %s (CI needs numpy)" % e)
        sys.exit(1)
    print("SKIP: %s" % e)
    sys.exit(77)

import blockfp8 as bf  # noqa: E402
from checklist import Checklist  # noqa: E402

check = Checklist("test_binding_args")
BF16 = np.uint16  # bf16 as bit patterns: no ml_dtypes needed


def matrix(rows, cols, dtype=np.float32, seed=0):
    values = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    if dtype == BF16:
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(dtype)


def read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


# --------------------------------------------------------------------------
# Bad values by kind: (label, value factory, expected exception class)

def bad_matrices():
    x = matrix(8, 256)
    return [
        ("a list", lambda: [[1.0, 2.0], [3.0, 4.0]], TypeError),
        ("None", lambda: None, TypeError),
        ("a float", lambda: 3.0, TypeError),
        ("a string", lambda: "x", TypeError),
        ("a dict", lambda: {"data": x}, TypeError),
        ("float64", lambda: x.astype(np.float64), TypeError),
        ("int8", lambda: x.astype(np.int8), TypeError),
        ("float16", lambda: x.astype(np.float16), TypeError),
        ("bool", lambda: x > 0, TypeError),
        ("1-D", lambda: x[0], ValueError),
        ("3-D", lambda: x.reshape(2, 4, 256), ValueError),
        ("0-D", lambda: np.array(1.0, np.float32), ValueError),
        ("empty (0, 128)", lambda: np.zeros((0, 128), np.float32), ValueError),
        ("empty (4, 0)", lambda: np.zeros((4, 0), np.float32), ValueError),
        ("strided columns", lambda: x[:, ::2], ValueError),
        ("rows backwards", lambda: x[::-1], ValueError),
        ("transposed", lambda: x.T, ValueError),
    ]


def bad_qtensors(other_granularity):
    x = matrix(8, 256)
    return [
        ("an ndarray", lambda: x, TypeError),
        ("None", lambda: None, TypeError),
        ("a list", lambda: [x], TypeError),
        ("a (codes, scales) tuple", lambda: (np.zeros((8, 256), np.uint8), np.ones((2, 8), np.float32)), TypeError),
        ("a QTensor of the other granularity", other_granularity, ValueError),
        ("a QTensor with too small codes", lambda: bf.QTensor(np.zeros((2, 16), np.uint8), np.ones((2, 8), np.float32),
                                                              1, 8, 256, 256, 8), ValueError),
        ("a QTensor with float codes", lambda: bf.QTensor(np.zeros((8, 256), np.float32),
                                                          np.ones((2, 8), np.float32), 1, 8, 256, 256, 8), ValueError),
        ("a QTensor with a list as scales", lambda: bf.QTensor(np.zeros((8, 256), np.uint8), [1.0], 1, 8, 256, 256, 8),
         TypeError),
        ("a QTensor of granularity 3", lambda: bf.QTensor(np.zeros((8, 256), np.uint8), np.ones((2, 8), np.float32),
                                                          3, 8, 256, 256, 8), ValueError),
        ("a QTensor of 0 rows", lambda: bf.QTensor(np.zeros((8, 256), np.uint8), np.ones((2, 8), np.float32),
                                                   1, 0, 256, 256, 8), ValueError),
    ]


BAD_DTYPES = [("'f16'", lambda: "f16", ValueError), ("'int8'", lambda: "int8", ValueError),
              ("'float32'", lambda: "float32", ValueError), ("None", lambda: None, TypeError),
              ("np.float32", lambda: np.float32, TypeError), ("1", lambda: 1, TypeError)]
BAD_BOOLS = [("'yes'", lambda: "yes", TypeError), ("None", lambda: None, TypeError), ("2", lambda: 2, TypeError),
             ("0.5", lambda: 0.5, TypeError), ("[]", lambda: [], TypeError),
             ("an array", lambda: np.ones(1), TypeError)]
BAD_FLAGS = [("True", lambda: True, TypeError), ("0", lambda: 0, TypeError), ("[0]", lambda: [0], TypeError),
             ("float32", lambda: np.zeros(1, np.float32), ValueError),
             ("int64", lambda: np.zeros(1, np.int64), ValueError),
             ("empty", lambda: np.zeros(0, np.uint32), ValueError),
             ("read-only", lambda: read_only(np.zeros(1, np.uint32)), ValueError)]
BAD_OFFSETS = [("None", lambda: None, TypeError), ("a string", lambda: "0,128", TypeError),
               ("[0]", lambda: [0], ValueError), ("[]", lambda: [], ValueError),
               ("floats", lambda: [0, 128.0, 256], TypeError), ("bools", lambda: [False, True], TypeError),
               ("strings", lambda: ["0", "128"], TypeError),
               ("int32 array", lambda: np.array([0, 128, 256], np.int32), ValueError),
               ("2-D int64", lambda: np.zeros((2, 2), np.int64), ValueError),
               ("one int64", lambda: np.zeros(1, np.int64), ValueError),
               ("strided int64", lambda: np.arange(8, dtype=np.int64)[::2], ValueError),
               ("a dict", lambda: {0: 0}, TypeError)]
BAD_SIZES = [("0", lambda: 0, ValueError), ("-1", lambda: -1, ValueError), ("2**70", lambda: 2 ** 70, ValueError),
             ("1.5", lambda: 1.5, TypeError), ("'128'", lambda: "128", TypeError), ("True", lambda: True, TypeError),
             ("None", lambda: None, TypeError), ("NaN", lambda: float("nan"), TypeError)]
BAD_RECIPES = [("'fp4'", lambda: "fp4", ValueError), ("3", lambda: 3, TypeError), ("None", lambda: None, TypeError)]
BAD_DEVICES = [("'gpu'", lambda: "gpu", ValueError), ("'cuda:x'", lambda: "cuda:x", ValueError),
               ("'cpu:1'", lambda: "cpu:1", ValueError), ("'cuda:²'", lambda: "cuda:\u00b2", ValueError),
               ("0", lambda: 0, TypeError), ("None", lambda: None, TypeError)]


def bad_outs(shape, dtypes=("bf16", "f32")):
    wrong_dtype = np.float64 if "bf16" in dtypes else BF16
    return [("a list", lambda: [[0.0] * shape[1]] * shape[0], TypeError),
            ("the wrong shape", lambda: np.zeros((shape[0] + 1, shape[1]), np.float32), ValueError),
            ("transposed", lambda: np.zeros((shape[1], shape[0]), np.float32).T, ValueError if shape[1] > 1
             else ValueError),
            ("a wrong dtype", lambda: np.zeros(shape, wrong_dtype), TypeError if wrong_dtype == np.float64
             else ValueError),
            ("read-only", lambda: read_only(np.zeros(shape, np.float32)), ValueError)]


# --------------------------------------------------------------------------
# The calls: name -> (function, [(argument, good value factory, bad values)])

M, N, K = 200, 256, 300
OFFSETS = [0, 128, 128, 256]


def q_rows(rows=M, cols=K, seed=1):
    return bf.quantize_1x128(matrix(rows, cols, seed=seed))[0]


def q_cols(rows, cols, seed=1):
    return bf.quantize_1x128(matrix(rows, cols, seed=seed), rows=False, cols=True)[1]


def q_weight(rows=N, cols=K):
    return bf.quantize_128x128(matrix(rows, cols, seed=2))[0]


def calls():
    linear = bf.Linear(K, N, max_tokens=512)
    linear.set_weight(matrix(N, K))
    linear_fwd = bf.Linear(K, N, max_tokens=512)
    linear_fwd.set_weight(matrix(N, K))
    linear_fwd.forward(matrix(M, K, BF16))
    return {
        "quantize_1x128": (bf.quantize_1x128, [
            ("x", lambda: matrix(M, K, BF16), bad_matrices()),
            ("rows", lambda: True, BAD_BOOLS), ("cols", lambda: True, BAD_BOOLS),
            ("pow2", lambda: False, BAD_BOOLS), ("nonfinite_flag", lambda: np.zeros(1, np.uint32), BAD_FLAGS)]),
        "quantize_128x128": (bf.quantize_128x128, [
            ("w", lambda: matrix(N, K), bad_matrices()),
            ("transposed", lambda: True, BAD_BOOLS), ("pow2", lambda: True, BAD_BOOLS),
            ("nonfinite_flag", lambda: np.zeros(1, np.int32), BAD_FLAGS)]),
        "dequantize": (bf.dequantize, [
            ("q", q_rows, bad_qtensors(None)[:4]), ("dtype", lambda: "bf16", BAD_DTYPES)]),
        "gemm_1d2d": (bf.gemm_1d2d, [
            ("a", q_rows, bad_qtensors(q_weight)), ("b", q_weight, bad_qtensors(q_rows)),
            ("out", lambda: np.zeros((M, N), np.float32), bad_outs((M, N))),
            ("out_dtype", lambda: "f32", BAD_DTYPES)]),
        "gemm_1d1d": (bf.gemm_1d1d, [
            ("a", lambda: q_cols(M, N), bad_qtensors(lambda: q_weight(N, M))),
            ("b", lambda: q_cols(M, K, seed=3), bad_qtensors(lambda: q_weight(K, M))),
            ("out", lambda: np.zeros((N, K), np.float32), bad_outs((N, K), ("f32",))),
            ("accumulate", lambda: True, BAD_BOOLS)]),
        "gemm_1d2d_grouped": (bf.gemm_1d2d_grouped, [
            ("a", lambda: q_rows(384, K), bad_qtensors(lambda: q_weight(384, K))),
            ("b", lambda: q_weight(3 * 128, K), bad_qtensors(lambda: q_rows(384, K))),
            ("offsets", lambda: list(OFFSETS), BAD_OFFSETS),
            ("out", lambda: np.zeros((384, 128), BF16), bad_outs((384, 128))),
            ("out_dtype", lambda: "bf16", BAD_DTYPES)]),
        "gemm_1d1d_grouped": (bf.gemm_1d1d_grouped, [
            ("a", lambda: q_cols(384, 128), bad_qtensors(lambda: q_weight(128, 384))),
            ("b", lambda: q_cols(384, K, seed=3), bad_qtensors(lambda: q_weight(K, 384))),
            ("offsets", lambda: np.array(OFFSETS, np.int64), BAD_OFFSETS),
            ("out", lambda: np.zeros((3 * 128, K), np.float32), bad_outs((3 * 128, K))),
            ("accumulate", lambda: False, BAD_BOOLS)]),
        "Context": (bf.Context, [
            ("backend", lambda: "cpu", [("'tpu'", lambda: "tpu", ValueError), ("None", lambda: None, TypeError),
                                        ("0", lambda: 0, TypeError)]),
            ("device", lambda: 0, [("-1", lambda: -1, ValueError), ("'0'", lambda: "0", TypeError),
                                   ("2**40", lambda: 2 ** 40, ValueError), ("0.0", lambda: 0.0, TypeError)])]),
        "Linear": (bf.Linear, [
            ("in_features", lambda: K, BAD_SIZES), ("out_features", lambda: N, BAD_SIZES),
            ("max_tokens", lambda: 512, BAD_SIZES), ("recipe", lambda: "fp8-blockwise", BAD_RECIPES),
            ("pow2_scales", lambda: False, BAD_BOOLS), ("device", lambda: "cpu", BAD_DEVICES)]),
        "Linear.set_weight": (linear.set_weight, [
            ("w", lambda: matrix(N, K), bad_matrices() + [("bf16", lambda: matrix(N, K, BF16), ValueError),
                                                           ("padded rows", lambda: matrix(N, K + 16)[:, :K],
                                                            ValueError)])]),
        "Linear.forward": (linear.forward, [
            ("x", lambda: matrix(M, K, BF16), bad_matrices() + [("the wrong width", lambda: matrix(M, K + 1),
                                                                  ValueError)])]),
        "Linear.backward": (linear_fwd.backward, [
            ("dy", lambda: matrix(M, N, BF16), bad_matrices() + [("the wrong token count", lambda: matrix(M + 1, N),
                                                                   ValueError)]),
            ("dw", lambda: np.zeros((N, K), np.float32), bad_outs((N, K), ("f32",))),
            ("accumulate", lambda: True, BAD_BOOLS), ("need_dx", lambda: True, BAD_BOOLS)]),
        # a CPU context has no stream: good arguments reach the library, which refuses
        "Context.set_stream": (bf.Context("cpu").set_stream, [
            ("stream", lambda: None, [("'0'", lambda: "0", TypeError), ("1.5", lambda: 1.5, TypeError),
                                      ("-1", lambda: -1, ValueError), ("2**64", lambda: 2 ** 64, ValueError)])]),
    }


# calls whose good arguments end in the library's refusal, not a result
REFUSED_WHEN_GOOD = {"Context.set_stream"}


def snapshot(args):
    """Copies of the numpy arrays among the arguments (QTensors' too), to see that nothing was written."""
    arrays = []
    for value in args.values():
        for a in ((value.data, value.scales) if isinstance(value, bf.QTensor) else (value,)):
            if isinstance(a, np.ndarray):
                arrays.append((a, a.copy()))
    return arrays


def unchanged(arrays):
    return all(a.tobytes() == before.tobytes() for a, before in arrays)


def one_bad_argument(table):
    """Part 1: each bad value of each argument, the others good."""
    for name, (fn, params) in table.items():
        good = {p: make for p, make, _ in params}
        try:
            fn(**{p: make() for p, make in good.items()})
            check(name not in REFUSED_WHEN_GOOD, "%s with good arguments: no error" % name)
        except Exception as e:  # noqa: BLE001
            check(name in REFUSED_WHEN_GOOD and isinstance(e, bf.Error), "%s with good arguments raised %r" % (name, e))
        for param, _, bads in params:
            for label, make_bad, kind in bads:
                args = {p: make() for p, make in good.items()}
                args[param] = make_bad()
                arrays = snapshot(args)
                what = "%s(%s=%s)" % (name, param, label)
                try:
                    fn(**args)
                    check(False, "%s: no error" % what)
                except Exception as e:  # noqa: BLE001
                    right = type(e) is kind and param in str(e) and str(e).startswith("blockfp8")
                    check(right, "%s: raised %s %r, expected %s naming '%s'" % (what, type(e).__name__, str(e),
                                                                               kind.__name__, param))
                check(unchanged(arrays), "%s: wrote into an argument" % what)


def junk(rng):
    """Any kind of value."""
    kinds = [
        lambda: None, lambda: True, lambda: int(rng.integers(-5, 5)), lambda: 2 ** int(rng.integers(31, 80)),
        lambda: float(rng.standard_normal()), lambda: float("nan"), lambda: "f32", lambda: "bf16", lambda: "",
        lambda: b"bytes", lambda: [], lambda: [[1, 2], [3]], lambda: {"a": 1}, lambda: (1, 2), lambda: object(),
        lambda: np.float32(1.0), lambda: np.int64(7),
        lambda: np.zeros(tuple(int(v) for v in rng.integers(0, 5, size=int(rng.integers(0, 4)))),
                         dtype=rng.choice([np.float32, np.float64, np.uint16, np.uint8, np.int32, np.int64,
                                           np.uint32, np.bool_, np.complex64])),
        lambda: matrix(int(rng.integers(1, 300)), int(rng.integers(1, 300)), rng.choice([np.float32, BF16])),
        lambda: q_rows(int(rng.integers(1, 200)), int(rng.integers(1, 200))),
        lambda: q_weight(int(rng.integers(1, 200)), int(rng.integers(1, 200))),
    ]
    return kinds[int(rng.integers(len(kinds)))]()


def random_calls(table, iterations, rng):
    """Part 2: arguments good, bad or junk at random; only the documented exceptions."""
    names = sorted(table)
    allowed = (TypeError, ValueError, bf.Error)
    for _ in range(iterations):
        name = names[int(rng.integers(len(names)))]
        fn, params = table[name]
        args, all_good = {}, True
        for param, make, bads in params:
            r = rng.random()
            if r < 0.6:
                args[param] = make()
            else:
                all_good = False
                args[param] = bads[int(rng.integers(len(bads)))][1]() if r < 0.8 else junk(rng)
        optional = [p for p, parameter in inspect.signature(fn).parameters.items()
                    if parameter.default is not inspect.Parameter.empty and p in args]
        if optional and rng.random() < 0.1:  # an optional argument left out: its default (maybe not good here)
            args.pop(optional[int(rng.integers(len(optional)))])
            all_good = False
        try:
            fn(**args)
            check(True, "")
        except allowed as e:
            check(not all_good or (isinstance(e, bf.Error) and name in REFUSED_WHEN_GOOD),
                  "%s(good arguments %s) raised %r" % (name, sorted(args), e))
            check(str(e).startswith("blockfp8") or str(e).startswith("BFP8_"),
                  "%s: message %r does not say it is blockfp8's" % (name, str(e)))
        except Exception as e:  # noqa: BLE001
            check(False, "%s(%s): raised %s: %s" % (name, ", ".join("%s=%s" % (k, type(v).__name__)
                                                                     for k, v in args.items()), type(e).__name__, e))


def main():
    iterations, seed = 2000, 12
    argv = sys.argv[1:]
    if "--iterations" in argv:
        iterations = int(argv[argv.index("--iterations") + 1])
    if "--seed" in argv:
        seed = int(argv[argv.index("--seed") + 1])
    table = calls()
    one_bad_argument(table)
    random_calls(table, iterations, np.random.default_rng(seed))
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
