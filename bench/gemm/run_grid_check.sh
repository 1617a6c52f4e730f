#!/usr/bin/env bash
# run_grid_check.sh - the GPU pass for the FP8 GEMMs of every size: correctness
# (test_gemm_gpu, test_gemm_grid against fp64, compute-sanitizer memcheck on
# the grid's small corner), speed against cuBLASLt on the shape grid, and the
# TARGETS shapes (bench_gemm). Logs under <out-dir>, a summary printed last.
#
#   bench/gemm/run_grid_check.sh <build-dir> <out-dir> [--quick | --correctness | --speed | --latency]
#
# Run from the repository root, with the programs built in <build-dir>
# (targets test_gemm_gpu test_gemm_grid bench_gemm_grid bench_gemm).
# --quick: the grid bench on M {1, 8, 16, 64} x N, K {256, 4096} only;
# --correctness: steps (a) and (b) only; --speed: (c) and (d) only. The whole
# pass takes about 3 minutes on an H200 (test_gemm_gpu about 2 of them).
# --latency: the pass for the small kernel (gemm_fp8_small.cu) in under 5
# minutes on an H200: (a), (b), the grid's small corner timed with the default
# routing (its JSON under <out-dir>) and again with small=0 (the tensor-core
# kernels: the A/B of every routed cell), the 1D2D K = 7168 corner, small=1
# where the routing does not take it yet (1D2D M = 1 and 16 with a short K;
# 1D1D over 512 and 4096 tokens, more k-blocks a warp), and (d).
# Exit code: 0 when every step passed, else 1 (the summary says which).
set -u

usage="usage: $0 <build-dir> <out-dir> [--quick | --correctness | --speed | --latency]"
build=${1:?$usage}
out=${2:?$usage}
mode=${3:-}
quick=$([ "$mode" = "--quick" ] && echo --quick)
run_correctness=$([ "$mode" != "--speed" ] && echo 1)
run_speed=$([ "$mode" != "--correctness" ] && [ "$mode" != "--latency" ] && echo 1)
run_latency=$([ "$mode" = "--latency" ] && echo 1)
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"

for bin in tests/gemm/test_gemm_gpu tests/gemm/test_gemm_grid bench/gemm/bench_gemm_grid bench/gemm/bench_gemm; do
    [ -x "$build/$bin" ] || { echo "missing $build/$bin (build the four targets first)"; exit 1; }
done
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >> "$summary" 2>&1
fi

failed=0
# step NAME TIME_LIMIT_S COMMAND...: runs it, logs to $out/NAME.log, records the verdict.
step() {
    local name=$1 limit=$2
    shift 2
    local start end rc verdict=ok
    start=$(date +%s)
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    rc=$?
    end=$(date +%s)
    if [ "$rc" -eq 77 ]; then verdict="SKIPPED (no GPU)"
    elif [ "$rc" -eq 124 ]; then verdict="TIMED OUT after ${limit}s"; failed=1
    elif [ "$rc" -ne 0 ]; then verdict="FAILED (exit $rc)"; failed=1; fi
    printf '%-20s %-22s %4ds  log: %s\n' "$name" "$verdict" $((end - start)) "$out/$name.log" >> "$summary"
}

unset BFP8_GEMM_CONFIG BFP8_GEMM_TRACE
if [ -n "$run_correctness" ]; then
# (a) correctness
step test_gemm_gpu $([ -n "$run_latency" ] && echo 130 || echo 200) "$build/tests/gemm/test_gemm_gpu"
step test_gemm_grid $([ -n "$run_latency" ] && echo 45 || echo 250) "$build/tests/gemm/test_gemm_grid"
# (b) memcheck: the grid's corner (M <= 128, N, K <= 1024, and the ragged cells that fit)
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2> /dev/null | head -1)
if [ -n "$sanitizer" ]; then
    step memcheck_grid_small $([ -n "$run_latency" ] && echo 60 || echo 140) "$sanitizer" --tool memcheck --error-exitcode 9 \
        "$build/tests/gemm/test_gemm_grid" --small
else
    echo "memcheck_grid_small  SKIPPED (no compute-sanitizer found)" >> "$summary"
fi
fi
if [ -n "$run_speed" ]; then
# (c) speed on the whole grid (about 10 s), with and without programmatic dependent launches of the GEMMs
grid_args=()
[ "$quick" = "--quick" ] && grid_args=(--m 1,8,16,64 --nk 256,4096)
step bench_grid 120 "$build/bench/gemm/bench_gemm_grid" "${grid_args[@]}" --graph-us 300 --reps 5 \
    --json "$out/grid.json"
step bench_grid_no_pdl 120 "$build/bench/gemm/bench_gemm_grid" "${grid_args[@]}" --graph-us 300 --reps 5 \
    --no-gemm-pdl
# (d) the TARGETS shapes: no regression
step bench_gemm_targets 200 "$build/bench/gemm/bench_gemm" --json "$out/targets.json"
fi
if [ -n "$run_latency" ]; then
corner=(--m 1,8,64,512,4096 --nk 256,1024 --graph-us 300 --reps 5)
step bench_grid 60 "$build/bench/gemm/bench_gemm_grid" "${corner[@]}" --json "$out/grid.json"
step bench_grid_small_off 45 env BFP8_GEMM_CONFIG=small=0 "$build/bench/gemm/bench_gemm_grid" "${corner[@]}" \
    --json "$out/grid_small_off.json"
step bench_grid_1d2d_k7168 40 "$build/bench/gemm/bench_gemm_grid" --kinds 1d2d-bf16,1d2d-f32 --m 1,8 \
    --nk 256,1024,7168 --graph-us 300 --reps 5 --json "$out/grid_1d2d_k7168.json"
step bench_grid_1d2d_small_forced 25 env BFP8_GEMM_CONFIG=small=1 "$build/bench/gemm/bench_gemm_grid" \
    --kinds 1d2d-bf16 --m 1,16 --nk 256,1024 --graph-us 300 --reps 5
step bench_grid_1d1d_small_forced 25 env BFP8_GEMM_CONFIG=small=1 "$build/bench/gemm/bench_gemm_grid" \
    --kinds 1d1d --m 512,4096 --nk 256,1024 --graph-us 300 --reps 5
step bench_gemm_targets 40 "$build/bench/gemm/bench_gemm" --json "$out/targets.json"
fi

echo "---- summary ----"
cat "$summary"
for log in bench_grid bench_grid_no_pdl bench_grid_1d1d_small_forced bench_grid_small_off bench_grid_1d2d_k7168 \
    bench_grid_1d2d_small_forced; do
    [ -f "$out/$log.log" ] && { echo "---- $log (tables) ----"; grep -E "^(==|  M|      [0-9K]|  *[0-9]+ \||1d|cuBLASLt refused|output)" "$out/$log.log"; }
done
[ -f "$out/bench_gemm_targets.log" ] && { echo "---- bench_gemm_targets ----"; tail -20 "$out/bench_gemm_targets.log"; }
[ -f "$out/test_gemm_grid.log" ] && tail -3 "$out/test_gemm_grid.log"
[ -f "$out/test_gemm_gpu.log" ] && tail -3 "$out/test_gemm_gpu.log"
exit $failed
