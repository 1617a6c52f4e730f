#!/usr/bin/env bash
# run_on_gpu.sh - the whole GPU pass of the CUDA quantizers, from
# binaries built elsewhere (never rebuilds):
#
#   1. compute-sanitizer memcheck: gpu_quantize --small, gpu_convert --small
#      racecheck + synccheck:      gpu_quantize --race
#   2. gpu_quantize, gpu_convert, gpu_quantize_formats (full)
#   3. bench_quantize --chain --json (alone on the GPU, after everything else;
#      chained calls, as in a training step: the figures the bar is read on)
#
# Steps 1 and 2 run as three parallel lanes (their time is mostly CPU-side
# reference work and checks); the benchmark runs alone afterwards. Every step
# has a hard limit (timeout -s KILL). Expected: about 3 minutes on an H200
# (16 cores), at most ~6.
#
#   bench/quantize/run_on_gpu.sh <build-dir> <out-dir>
#
# Takes <build-dir>/tests/quantize/{gpu_quantize,gpu_convert}, tests/formats/gpu_quantize_formats
# and <build-dir>/bench/quantize/bench_quantize. Writes at most 5 files into
# <out-dir>: summary.txt, bench_quantize.log, bench_quantize.json,
# logs.tar.gz (every step's full log), sanitizer_tail.txt.
# Exit code: 0 when every step passed, else 1. The summary is printed last.
set -u

usage="usage: $0 <build-dir> <out-dir>"
build=${1:?$usage}
out=${2:?$usage}
mkdir -p "$out"
logs=$(mktemp -d)
summary="$out/summary.txt"
: > "$summary"
t_start=$(date +%s)

tdir="$build/tests/quantize"
bdir="$build/bench/quantize"
for b in "$tdir/gpu_quantize" "$tdir/gpu_convert" "$build/tests/formats/gpu_quantize_formats" "$bdir/bench_quantize"; do
    if [ ! -x "$b" ]; then
        echo "MISSING BINARY: $b (build it first: cmake --build <build> --target gpu_quantize gpu_convert gpu_quantize_formats bench_quantize)" | tee -a "$summary"
        exit 1
    fi
done

# Binaries built on another machine: make sure the CUDA runtime and cuBLASLt resolve.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH

sanitizer=$(command -v compute-sanitizer || true)
for d in ${CUDA_HOME:-} /usr/local/cuda /usr/local/cuda-13.0 /opt/cuda; do
    [ -z "$sanitizer" ] && [ -n "$d" ] && [ -x "$d/bin/compute-sanitizer" ] && sanitizer="$d/bin/compute-sanitizer"
done

if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
        --format=csv,noheader >> "$summary" 2>&1
fi

# step NAME LIMIT_S COMMAND...: runs it with a hard limit, logs to $logs/NAME.log,
# writes its verdict to $logs/NAME.verdict.
step() {
    local name=$1 limit=$2
    shift 2
    local start end rc verdict
    start=$(date +%s)
    timeout -s KILL "$limit" "$@" > "$logs/$name.log" 2>&1
    rc=$?
    end=$(date +%s)
    verdict="ok"
    if [ "$rc" -eq 77 ]; then verdict="SKIPPED (no GPU)";
    elif [ "$rc" -eq 137 ] || [ "$rc" -eq 124 ]; then verdict="KILLED after ${limit}s";
    elif [ "$rc" -ne 0 ]; then verdict="FAILED (exit $rc)"; fi
    if [ "$rc" -ne 0 ] && grep -qE "Device not supported|Unable to find injection|Target application terminated before first instrumented API call" "$logs/$name.log"; then
        verdict="SANITIZER UNAVAILABLE here (exit $rc)"
    fi
    printf '%-20s %-34s %4ds\n' "$name" "$verdict" $((end - start)) > "$logs/$name.verdict"
}

san() { # san TOOL NAME LIMIT BINARY ARGS...
    local tool=$1 name=$2 limit=$3
    shift 3
    if [ -z "$sanitizer" ]; then
        printf '%-20s %-34s\n' "$name" "SKIPPED (no compute-sanitizer)" > "$logs/$name.verdict"
        return
    fi
    local extra=""
    [ "$tool" = racecheck ] && extra="--racecheck-report all"
    # shellcheck disable=SC2086
    step "$name" "$limit" "$sanitizer" --tool "$tool" $extra --error-exitcode 99 --print-limit 20 "$@"
}

# Three lanes in parallel.
(
    san memcheck memcheck_quantize 170 "$tdir/gpu_quantize" --small
) &
lane1=$!
(
    san memcheck memcheck_convert 80 "$tdir/gpu_convert" --small
    san racecheck racecheck_quantize 60 "$tdir/gpu_quantize" --race
    san synccheck synccheck_quantize 40 "$tdir/gpu_quantize" --race
) &
lane2=$!
(
    step gpu_quantize_formats 40 "$build/tests/formats/gpu_quantize_formats"
    step gpu_convert 70 "$tdir/gpu_convert"
    step gpu_quantize 120 "$tdir/gpu_quantize"
) &
lane3=$!
wait $lane1 $lane2 $lane3

# The benchmark, alone on the GPU.
step bench_quantize 300 "$bdir/bench_quantize" --chain --json "$out/bench_quantize.json"
cp "$logs/bench_quantize.log" "$out/bench_quantize.log"

# The ends of the sanitizer logs (their summaries), in one file.
{
    for n in memcheck_quantize memcheck_convert racecheck_quantize synccheck_quantize; do
        [ -f "$logs/$n.log" ] || continue
        echo "==== $n (last 15 lines)"
        tail -15 "$logs/$n.log"
    done
} > "$out/sanitizer_tail.txt"

failed=0
order="memcheck_quantize memcheck_convert racecheck_quantize synccheck_quantize gpu_quantize_formats gpu_convert gpu_quantize bench_quantize"
for n in $order; do
    if [ -f "$logs/$n.verdict" ]; then
        cat "$logs/$n.verdict" >> "$summary"
        grep -q "^$n *ok" "$logs/$n.verdict" || failed=1
    else
        printf '%-20s %s\n' "$n" "DID NOT RUN" >> "$summary"
        failed=1
    fi
done
echo "total $(( $(date +%s) - t_start ))s" >> "$summary"
tar -C "$logs" -czf "$out/logs.tar.gz" . 2>/dev/null

echo
for n in gpu_quantize_formats gpu_convert gpu_quantize gpu_quantize_v2; do
    echo "======== $n"
    grep -E "^FAIL|checks,|mismatches|compared" "$logs/$n.log" 2>/dev/null | head -8
done
for n in memcheck_quantize memcheck_convert racecheck_quantize synccheck_quantize racecheck_quantize_v2; do
    [ -f "$logs/$n.log" ] || continue
    echo "======== $n"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL|checks,|Device not supported" "$logs/$n.log" | head -6
done
echo "======== bench_quantize"
grep -E "^D2D|FATAL|CHECK FAILED|FAILED" "$logs/bench_quantize.log" | head -8
sed -n '/^==== Summary/,$p' "$logs/bench_quantize.log"
echo "======== steps"
cat "$summary"
rm -rf "$logs"
exit $failed
