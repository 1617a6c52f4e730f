#!/usr/bin/env bash
# run_moe_on_gpu.sh - the mixture-of-experts pass on one GPU: the CUDA MoE
# tests (the kernels and the layer against the CPU reference), the C trainer
# on the moe-1b preset in fp8-blockwise and in bf16 (the load of the worst
# MoE block every 10 steps, tokens/s, the validation loss), then the same
# model in PyTorch bf16 compiled (moe_e2e.py: tokens/s, peak memory, load).
# ~10 minutes on an H200 at the default step counts, with the build given
# (each trainer run ~1 minute of start-up and final checkpoint, in /dev/shm).
#
#   bash bench/e2e/run_moe_on_gpu.sh [tests|train|torch|all]   from the repository root
#
# Environment:
#   OUT          where logs go (default ./out; the device tool's $OUT)
#   BUILD        a CUDA build folder holding tools/blockfp8 and
#                tests/moe/test_moe_gpu (default build-gpu); missing ones are
#                built there (cmake -DBFP8_CUDA=ON; needs nvcc, a few minutes)
#   DATA         the corpus (default .carry/e2e/corpus.txt)
#   TOKENIZER    its 32768-token tokenizer (default .carry/e2e/tokenizer-32768.bin)
#   TOKENS       the token file for moe_e2e.py (default .carry/e2e/corpus-32768.u16);
#                missing: synthetic tokens (throughput only)
#   STEPS        the trainer's steps per recipe (default 1000; warmup min(500, STEPS/10 + 1)),
#                validation every STEPS/10
#   E2E_STEPS    moe_e2e.py's steps (default 60, timed from step 21)
#   E2E_MODES    moe_e2e.py's modes (default bf16-compile)
# Writes to $OUT: summary.txt, gpu.txt, tests.log, train-fp8-blockwise.log,
# train-bf16.log, metrics-<recipe>.jsonl, e2e.log, e2e.json, build.log (when it built). Exit code 0
# when every step passed.
set -u
phase=${1:-all}
OUT=${OUT:-out}
BUILD=${BUILD:-build-gpu}
DATA=${DATA:-.carry/e2e/corpus.txt}
TOKENIZER=${TOKENIZER:-.carry/e2e/tokenizer-32768.bin}
TOKENS=${TOKENS:-.carry/e2e/corpus-32768.u16}
STEPS=${STEPS:-1000}
E2E_STEPS=${E2E_STEPS:-60}
E2E_MODES=${E2E_MODES:-bf16-compile}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
start=$(date +%s)
say() { printf '[%4ds] %s\n' "$(($(date +%s) - start))" "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' >> "$OUT/gpu.txt" 2>&1

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

# --- the build -------------------------------------------------------------------
cli=$BUILD/tools/blockfp8
test_gpu=$BUILD/tests/moe/test_moe_gpu
if [[ $phase != torch && ( ! -x $cli || ! -x $test_gpu ) ]]; then
    say "building blockfp8_cli and test_moe_gpu (CUDA) into $BUILD/"
    { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBFP8_CUDA=ON &&
      cmake --build "$BUILD" -j "$(nproc)" --target blockfp8_cli test_moe_gpu; } > "$OUT/build.log" 2>&1 ||
        { say "BUILD FAILED (build.log)"; exit 1; }
fi

# --- the CUDA MoE tests ----------------------------------------------------------
if [[ $phase == tests || $phase == all ]]; then
    log="$OUT/tests.log"
    : > "$log"
    step test_moe_gpu 240 "$log" "$test_gpu"
    grep -h "checks\|FAIL" "$log" | tail -5 | sed 's/^/    /' | tee -a "$summary"
fi

# --- the C trainer on moe-1b -----------------------------------------------------
if [[ $phase == train || $phase == all ]]; then
    for recipe in fp8-blockwise bf16; do
        log="$OUT/train-$recipe.log"
        : > "$log"
        # ~0.15 s a step, and a minute of start-up and final checkpoint
        step "train moe-1b $recipe" $((120 + STEPS / 4)) "$log" "$cli" train --model moe-1b --recipe "$recipe" \
            --device cuda --data "$DATA" --tokenizer "$TOKENIZER" --steps "$STEPS" --batch 4 --seq 2048 --tf32 \
            --flash-attention --eval-every $((STEPS >= 10 ? STEPS / 10 : 0)) --eval-batches 4 --log-every 10 \
            --sample-tokens 0 --checkpoint-every 0 --checkpoint-dir /dev/shm/moe-1b --overwrite \
            --metrics "$OUT/metrics-$recipe.jsonl"
        rm -rf /dev/shm/moe-1b  # the final checkpoint: 32 GB of weights and moments
        grep -h "^model\|^moe:\|^run:\|^step .*00/\|val_loss\|^done\|^device" "$log" | sed 's/^/    /' | tee -a "$summary"
    done
fi

# --- the same model in PyTorch ---------------------------------------------------
if [[ $phase == torch || $phase == all ]]; then
    data=(--tokens "$TOKENS")
    [[ -f $TOKENS ]] || { say "no $TOKENS: synthetic tokens (throughput only)"; data=(--synthetic); }
    step moe_e2e 300 "$OUT/e2e.log" python3 bench/e2e/moe_e2e.py "${data[@]}" --steps "$E2E_STEPS" \
        --modes "$E2E_MODES" --json "$OUT/e2e.json"
    grep -h "^bf16\|^step\|^mode\|^tokens/s" "$OUT/e2e.log" | sed 's/^/    /' | tee -a "$summary"
fi
say "done ($([[ $failed == 0 ]] && echo "all passed" || echo "FAILURES above"))"
exit $failed
