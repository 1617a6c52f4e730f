#!/usr/bin/env bash
# run_on_gpu.sh - the PyTorch pass on a GPU machine: the blockfp8.torch tests
# on CUDA tensors (the binding and layers, torch.compile fullgraph with and
# without CUDA graphs, DDP and FSDP2 over a one-process NCCL group), then
# the end-to-end bench (llama_e2e.py: the 956M model, bf16 compiled,
# torchao's blockwise layer compiled, blockfp8 compiled). ~6-8 minutes on an
# H200 at the default step count, compile times included.
#
#   bash bench/e2e/run_on_gpu.sh [tests|bench|all]        from the repository root
#
# Environment:
#   OUT                where logs go (default ./out; the device tool's $OUT)
#   BLOCKFP8_LIBRARY   a CUDA build of libblockfp8.so; default: the first of
#                      build/, build-cuda/ holding one, else it builds the
#                      library target into build-gpu/ (needs nvcc; ~1-2 min)
#   TOKENS             the token file (default .carry/e2e/corpus-32768.u16,
#                      from bench/e2e/prepare_tokens.sh); missing: synthetic
#   STEPS              optimizer steps per mode (default 200)
#   MODES              default bf16-compile,torchao-compile,blockfp8-compile
#   WHEELS             wheels to install first (default .whl/*.whl: torchao),
#                      into /tmp/site, put on PYTHONPATH
# Writes to $OUT (at most 6 files): summary.txt, gpu.txt, tests.log,
# e2e.log, e2e.json, build.log (when it built). Exit code 0 when every step
# passed.
set -u
phase=${1:-all}
OUT=${OUT:-out}
STEPS=${STEPS:-200}
MODES=${MODES:-bf16-compile,torchao-compile,blockfp8-compile}
TOKENS=${TOKENS:-.carry/e2e/corpus-32768.u16}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
start=$(date +%s)
say() { printf '[%4ds] %s\n' "$(($(date +%s) - start))" "$*" | tee -a "$summary"; }
# Multi-GPU hosts of the device tool: keep NVLink multicast off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' >> "$OUT/gpu.txt" 2>&1

# --- wheels (torchao) ----------------------------------------------------------
shopt -s nullglob
wheels=(${WHEELS:-.whl/*.whl})
if ((${#wheels[@]})); then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "${wheels[@]}" >> "$OUT/gpu.txt" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    say "wheels: ${wheels[*]}"
fi
python3 -c 'import torchao; print("torchao", torchao.__version__)' >> "$OUT/gpu.txt" 2>&1

# --- the library ---------------------------------------------------------------
has_cuda() { BLOCKFP8_LIBRARY="$1" python3 -c 'import sys; sys.path.insert(0, "python"); import blockfp8 as bf
sys.exit(0 if bf.cuda_device_count() > 0 else 1)' 2> /dev/null; }
lib=${BLOCKFP8_LIBRARY:-}
if [[ -z $lib ]]; then
    for candidate in build/libblockfp8.so build-cuda/libblockfp8.so build-gpu/libblockfp8.so; do
        if [[ -f $candidate ]] && has_cuda "$candidate"; then lib=$candidate; break; fi
    done
fi
if [[ -z $lib ]]; then
    say "building libblockfp8 (CUDA) into build-gpu/"
    { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBFP8_CUDA=ON &&
      cmake --build build-gpu -j "$(nproc)" --target blockfp8; } > "$OUT/build.log" 2>&1 ||
        { say "BUILD FAILED (build.log)"; exit 1; }
    lib=build-gpu/libblockfp8.so
fi
case $lib in /*) ;; *) lib=$PWD/$lib ;; esac
export BLOCKFP8_LIBRARY=$lib
has_cuda "$BLOCKFP8_LIBRARY" || { say "$BLOCKFP8_LIBRARY sees no CUDA device"; exit 1; }
say "library: $BLOCKFP8_LIBRARY"

failed=0
# step NAME LIMIT_S LOG COMMAND...: runs it with a time limit, appends to LOG, records the verdict.
step() {
    local name=$1 limit=$2 log=$3
    shift 3
    local t0=$(date +%s) rc verdict
    echo "######## $name: $*" >> "$log"
    timeout "$limit" "$@" >> "$log" 2>&1
    rc=$?
    case $rc in
        0) verdict="ok" ;;
        77) verdict="SKIPPED" ;;
        124) verdict="TIMED OUT after ${limit}s"; failed=1 ;;
        *) verdict="FAILED (exit $rc)"; failed=1 ;;
    esac
    say "$(printf '%-26s %-20s %4ds' "$name" "$verdict" $(($(date +%s) - t0)))"
}

if [[ $phase == tests || $phase == all ]]; then
    log="$OUT/tests.log"
    : > "$log"
    step test_binding_torch 180 "$log" python3 tests/python/test_binding_torch.py
    step test_torch_compile 300 "$log" python3 tests/python/test_torch_compile.py --cuda
    step test_torch_distributed 240 "$log" python3 tests/python/test_torch_distributed.py --cuda
    grep -h "checks,\|explain\|FAIL\|losses\|reduce-overhead\|Float8Blockwise" "$log" | sed 's/^/    /' | tee -a "$summary"
fi

if [[ $phase == bench || $phase == all ]]; then
    data=(--tokens "$TOKENS")
    [[ -f $TOKENS ]] || { say "no $TOKENS: synthetic tokens (throughput only)"; data=(--synthetic); }
    step llama_e2e 560 "$OUT/e2e.log" python3 bench/e2e/llama_e2e.py "${data[@]}" --steps "$STEPS" \
        --modes "$MODES" --json "$OUT/e2e.json"
    sed -n '/^mode /,$p' "$OUT/e2e.log" | sed 's/^/    /' | tee -a "$summary"
fi
say "done ($([[ $failed == 0 ]] && echo "all passed" || echo "FAILURES above"))"
exit $failed
