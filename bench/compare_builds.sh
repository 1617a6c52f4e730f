#!/usr/bin/env bash
# compare_builds.sh - two builds of blockfp8 on one GPU in one pass: the GPU
# tests of the candidate build, then the benchmarks of both builds, process
# by process in alternating order, and the ratio of every figure (baseline
# time over candidate time: above 1, the candidate is faster). cuBLASLt's own
# figures, which neither build changes, are compared the same way: their
# ratios show how far two runs of the same code drift.
#
#   bench/compare_builds.sh <baseline-build> <candidate-build> <out-dir> [rounds]
#
# rounds (default 2): runs of each benchmark per build; round r runs the
# baseline first when r is odd, the candidate first when even. About 7
# minutes on an H200 with 2 rounds.
#
# Binaries taken from both builds: bench/gemm/bench_gemm, bench/gemm/bench_grouped,
# bench/quantize/bench_quantize, bench/linear/bench_linear. From the candidate
# only: tests/gemm/test_gemm_gpu, tests/gemm/test_gemm_grouped_gpu,
# tests/quantize/{gpu_quantize,gpu_convert}, tests/formats/gpu_quantize_formats.
# Writes 2 files into <out-dir>: summary.txt (verdicts and ratios, printed
# last) and logs.tar.gz (every step's log and JSON). Exit code: 0 when every
# test passed and every benchmark ran, else 1.
#
# The binaries link the library statically (about 12 MB each, 1-2 MB
# gzipped): to run builds made on another machine, pack both sets of them
# with their paths (tar -czf) and unpack them there before the call.
set -u

usage="usage: $0 <baseline-build> <candidate-build> <out-dir> [rounds]"
base=${1:?$usage}
cand=${2:?$usage}
out=${3:?$usage}
rounds=${4:-2}
mkdir -p "$out"
logs=$(mktemp -d)
summary="$out/summary.txt"
: > "$summary"
t0=$(date +%s)
failed=0

for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH

benches="bench/gemm/bench_gemm bench/gemm/bench_grouped bench/quantize/bench_quantize bench/linear/bench_linear"
tests="tests/gemm/test_gemm_gpu tests/gemm/test_gemm_grouped_gpu tests/quantize/gpu_quantize
       tests/quantize/gpu_convert tests/formats/gpu_quantize_formats"
missing=0
for b in $benches; do
    for build in "$base" "$cand"; do
        [ -x "$build/$b" ] || { echo "MISSING: $build/$b" | tee -a "$summary"; missing=1; }
    done
done
for t in $tests; do [ -x "$cand/$t" ] || { echo "MISSING: $cand/$t" | tee -a "$summary"; missing=1; }; done
[ "$missing" -eq 0 ] || exit 1

if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
        --format=csv,noheader >> "$summary" 2>&1
fi

# step NAME LIMIT_S COMMAND...: run it with a hard limit, log to $logs/NAME.log, record the verdict.
step() {
    local name=$1 limit=$2
    shift 2
    local start rc verdict
    start=$(date +%s)
    timeout -s KILL "$limit" "$@" > "$logs/$name.log" 2>&1
    rc=$?
    verdict=ok
    if [ "$rc" -eq 77 ]; then verdict="SKIPPED (no GPU)"; failed=1
    elif [ "$rc" -eq 137 ]; then verdict="KILLED after ${limit}s"; failed=1
    elif [ "$rc" -ne 0 ]; then verdict="FAILED (exit $rc)"; failed=1; fi
    printf '[%4ds] %-28s %-20s %4ds  %s\n' $((start - t0)) "$name" "$verdict" $(($(date +%s) - start)) \
        "$(grep -E 'checks, [0-9]+ failed' "$logs/$name.log" | tail -1)" >> "$summary"
}

# --- the candidate's GPU tests ----------------------------------------------
step test_gemm_gpu 300 "$cand/tests/gemm/test_gemm_gpu"
step test_gemm_grouped_gpu 120 "$cand/tests/gemm/test_gemm_grouped_gpu" cuda
step gpu_quantize 120 "$cand/tests/quantize/gpu_quantize"
step gpu_convert 120 "$cand/tests/quantize/gpu_convert"
step gpu_quantize_formats 60 "$cand/tests/formats/gpu_quantize_formats"

# --- benchmarks, both builds interleaved ------------------------------------
# bench NAME BUILD-TAG ROUND: one run of benchmark NAME of one build.
bench() {
    local name=$1 tag=$2 r=$3 build
    [ "$tag" = base ] && build=$base || build=$cand
    local id="${name}_${tag}_$r"
    case $name in
    gemm) step "$id" 120 "$build/bench/gemm/bench_gemm" --json "$logs/$id.json" ;;
    grouped) step "$id" 90 "$build/bench/gemm/bench_grouped" ;;
    quantize) step "$id" 120 "$build/bench/quantize/bench_quantize" --chain --json "$logs/$id.json" ;;
    linear) step "$id" 90 "$build/bench/linear/bench_linear" --json "$logs/$id.json" ;;
    esac
}
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then order="base cand"; else order="cand base"; fi
    for name in gemm grouped quantize linear; do
        for tag in $order; do bench "$name" "$tag" "$r"; done
    done
done

# --- ratios ----------------------------------------------------------------
if command -v python3 > /dev/null; then
    python3 - "$logs" "$rounds" >> "$summary" 2>&1 << 'PY'
import glob, json, os, re, statistics, sys

logs, rounds = sys.argv[1], int(sys.argv[2])

def runs(name, tag, ext):
    paths = [os.path.join(logs, f"{name}_{tag}_{r}.{ext}") for r in range(1, rounds + 1)]
    return [p for p in paths if os.path.exists(p)]

def figures_gemm(path):
    out = {}
    for p in json.load(open(path)).get("problems", []):
        shape = f"{p['kind']} " + "x".join(str(p[k]) for k in ("M", "N", "K") if k in p)
        for v, f in p.get("variants", {}).items():
            if f.get("status") == "ok" and (v.startswith("bfp8") or v.startswith("lt-")):
                out[(shape, v)] = f["median_ms"]
    return out

def figures_quantize(path):
    d = json.load(open(path))
    out = {("copy 1 GiB", "cudaMemcpy"): d["copy"]["median_ms"]}
    for r in d.get("results", []):
        if r.get("ok"):
            out[(f"{r['dtype']} {r['rows']}x{r['cols']}", r["kernel"])] = r["median_ms"]
    return out

def figures_linear(path):
    out = {}
    for s in json.load(open(path)).get("shapes", []):
        shape = f"{s['M']}x{s['N']}x{s['K']}"
        for name, f in s.get("recipes", {}).items():
            if f.get("status") == "ok":
                out[(shape, name + " fwd+bwd")] = f["forward_backward_us"]
    return out

def figures_grouped(path):
    out, problem = {}, None
    for line in open(path):
        m = re.match(r"==== (.*?) ====", line)
        if m:
            problem = re.sub(r"\d+ experts, \d+ tokens, expert weight ", "", m.group(1))
        m = re.match(r"\s+(\S+)\s+([0-9.]+) us", line)
        if m and problem:
            out[(problem, m.group(1))] = float(m.group(2))
    return out

def compare(title, name, ext, read):
    per = {}
    for tag in ("base", "cand"):
        for path in runs(name, tag, ext):
            try:
                for k, v in read(path).items():
                    per.setdefault(k, {}).setdefault(tag, []).append(v)
            except Exception as e:  # a run that failed leaves no usable figures
                print(f"  ({os.path.basename(path)}: {e})")
    print(f"\n==== {title}: baseline time / candidate time (median of runs; > 1: candidate faster) ====")
    ours, ref = [], []
    for (shape, variant), v in sorted(per.items()):
        if "base" not in v or "cand" not in v:
            continue
        b, c = statistics.median(v["base"]), statistics.median(v["cand"])
        ratio = b / c if c > 0 else float("nan")
        mine = variant.startswith(("bfp8", "fp8-blockwise")) or name == "quantize" and variant != "cudaMemcpy"
        (ours if mine else ref).append(ratio)
        spread = "  runs " + " ".join(f"{x:.4g}" for x in v["base"]) + " | " + " ".join(f"{x:.4g}" for x in v["cand"])
        print(f"  {shape:<34} {variant:<24} {ratio:6.3f}{'' if mine else '  (reference)'}{spread}")
    for label, xs in (("blockfp8", ours), ("reference", ref)):
        if xs:
            print(f"  {label}: {len(xs)} figures, ratio min {min(xs):.3f} median {statistics.median(xs):.3f} "
                  f"max {max(xs):.3f}")

compare("bench_gemm", "gemm", "json", figures_gemm)
compare("bench_grouped", "grouped", "log", figures_grouped)
compare("bench_quantize --chain", "quantize", "json", figures_quantize)
compare("bench_linear", "linear", "json", figures_linear)
PY
else
    echo "no python3: ratios not computed (the logs are in logs.tar.gz)" >> "$summary"
fi

echo "total $(($(date +%s) - t0)) s" >> "$summary"
tar -czf "$out/logs.tar.gz" -C "$logs" . 2> /dev/null
rm -rf "$logs"
cat "$summary"
exit $failed
