#!/usr/bin/env bash
# run_on_gpu.sh - the GEMM / linear benchmark pass for the GPU machine: the
# bf16 GEMM GPU test, bench_gemm (with --json) and bench_linear; full logs
# under <out-dir>, a compact summary printed last. About a minute on an H200.
#
#   bench/gemm/run_on_gpu.sh <build-dir> <out-dir> [--quick]
#
# Run it from the repository root. When the programs are missing from
# <build-dir> it configures and builds them first (needs cmake and nvcc there).
# Exit code: 0 when every step passed, else 1 (the summary says which).
set -u

usage="usage: $0 <build-dir> <out-dir> [--quick]"
build=${1:?$usage}
out=${2:?$usage}
quick=${3:-}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"

test_bin="$build/tests/gemm/gpu_gemm_bf16"
gemm_bin="$build/bench/gemm/bench_gemm"
linear_bin="$build/bench/linear/bench_linear"

if [ ! -x "$test_bin" ] || [ ! -x "$gemm_bin" ]; then
    echo "building into $build ..."
    targets="gpu_gemm_bf16 bench_gemm"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 ||
        { echo "CONFIGURE FAILED (see $out/build.log)"; tail -20 "$out/build.log"; exit 1; }
    if cmake --build "$build" --target help 2>/dev/null | grep -q "bench_linear"; then
        targets="$targets bench_linear"
    fi
    cmake --build "$build" -j "$(nproc)" --target $targets >> "$out/build.log" 2>&1 ||
        { echo "BUILD FAILED (see $out/build.log)"; tail -20 "$out/build.log"; exit 1; }
fi

# At most 7 files land in <out-dir> (the device tool brings back 8).
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
        --format=csv >> "$summary" 2>&1
fi

failed=0
# step NAME TIME_LIMIT_S COMMAND...: runs it, logs to $out/NAME.log, records the verdict.
step() {
    local name=$1 limit=$2
    shift 2
    local start end rc
    start=$(date +%s)
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    end=$(date +%s)
    local verdict="ok"
    if [ "$rc" -eq 77 ]; then verdict="SKIPPED (no GPU)";
    elif [ "$rc" -eq 124 ]; then verdict="TIMED OUT after ${limit}s"; failed=1;
    elif [ "$rc" -ne 0 ]; then verdict="FAILED (exit $rc)"; failed=1; fi
    printf '%-14s %-22s %4ds  log: %s\n' "$name" "$verdict" $((end - start)) "$out/$name.log" >> "$summary"
}

step gpu_gemm_bf16 120 "$test_bin"
step bench_gemm 150 "$gemm_bin" --json "$out/bench_gemm.json" $quick
if [ -x "$linear_bin" ]; then
    step bench_linear 90 "$linear_bin" --json "$out/bench_linear.json" $quick
else
    echo "bench_linear   not built (src/nn does not define bfp8_linear_* yet)" >> "$summary"
fi

echo
echo "======== gpu_gemm_bf16 ========"
grep -E "^FAIL|declined|checks," "$out/gpu_gemm_bf16.log" | tail -12
echo "======== bench_gemm ========"
head -3 "$out/bench_gemm.log"
grep -E "FATAL|ABORTED|<< FAILED" "$out/bench_gemm.log" | head -10
sed -n '/^==== Summary/,$p' "$out/bench_gemm.log"
if [ -f "$out/bench_linear.log" ]; then
    echo "======== bench_linear ========"
    grep -E "FATAL|ABORTED|n/a" "$out/bench_linear.log" | head -8
    sed -n '/^==== Summary/,$p' "$out/bench_linear.log"
fi
echo "======== steps ========"
cat "$summary"
exit $failed
