#!/usr/bin/env bash
# test_cli.sh - the `blockfp8` program as a user runs it, on a small corpus
# made from this repository's own sources:
#   resume   a run stopped at step 3 and resumed ends with a checkpoint and
#            losses bit-identical to one uninterrupted run
#   bad      unknown options and values, missing / empty data, corrupt,
#            truncated, foreign and mismatched checkpoints, NaN in a quantized
#            weight (fp8) and in the loss (bf16): each gives a non-zero exit
#            and a clear one-line message, and the checkpoint already on disk
#            is byte-for-byte untouched
#   tools    plot writes a PNG, sample and tokenize work from a checkpoint;
#            --profile prints the table by kind of work and changes no loss
#   cuda     --device cuda (exit 77, skipped, without a GPU): a run stopped and
#            resumed on the GPU is bit-identical to an uninterrupted one, its
#            losses track the CPU's, a CPU checkpoint resumes on the GPU, and
#            a NaN weight is caught as on the CPU; --tf32; --flash-attention
#            (refused for head_dim 32, losses within 1% of fp32 attention,
#            stop + resume bit-identical); --profile (CUDA events, same losses)
#   dp       --data-parallel on the CPU: one rank is bit-identical to no data
#            parallelism; 2 ranks x batch 1 track 1 rank x batch 2; a 2-rank
#            run stopped and resumed (the ranks from the checkpoint) is
#            bit-identical to an uninterrupted one; a rank that dies stops
#            the others (no hang), a NaN stops every rank, bad values refused;
#            --profile on 2 ranks: the same losses, the all-reduce timed
#   dp_cuda  --data-parallel --device cuda over NCCL (exit 77 without a GPU):
#            one rank bit-identical to the plain GPU run; with 2 GPUs, the
#            checks of `dp` on the GPUs
#
#   bash tests/train/test_cli.sh build/tools/blockfp8 [resume|bad|tools|cuda|dp|dp_cuda]
#   (ctest runs each group as train_cli_<group>)
set -uo pipefail

bin="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
group="${2:-all}"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/bfp8_cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

failures=0
checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# A corpus with enough text for a 320-token BPE, the same on every machine
# with the same checkout.
cat "$src"/src/model/*.c "$src"/src/train/*.c >corpus.txt
common=(--data corpus.txt --tokenizer tok.bin --vocab-size 320 --batch 2 --seq 32
        --eval-every 2 --eval-batches 1 --sample-tokens 0 --threads 2)

# expect_fail "what" "message substring" args...: non-zero exit, the substring on stderr.
expect_fail() {
    local what="$1" needle="$2"
    shift 2
    checks=$((checks + 1))
    "$bin" "$@" >out.txt 2>err.txt
    local rc=$?
    if [[ $rc -eq 0 ]]; then
        fail "$what: exit 0, expected a failure"
    elif [[ $rc -ge 126 ]]; then
        fail "$what: exit $rc (a crash?)"
    elif ! grep -qF -- "$needle" err.txt; then
        fail "$what: stderr lacks '$needle': $(cat err.txt)"
    elif [[ $(wc -l <err.txt) -gt 2 ]]; then
        fail "$what: more than a line or two on stderr: $(cat err.txt)"
    else
        echo "ok   $what: rc $rc: $(tail -n 1 err.txt)"
    fi
}

expect_ok() {
    local what="$1"
    shift
    checks=$((checks + 1))
    if ! "$bin" "$@" >out.txt 2>err.txt; then
        fail "$what: exit $?: $(cat err.txt)"
        return 1
    fi
    echo "ok   $what"
}

same_file() { # same_file "what" expected actual
    checks=$((checks + 1))
    if cmp -s "$2" "$3"; then echo "ok   $1"; else fail "$1: $3 differs from $2"; fi
}

# The train losses of a metrics file, one "step loss" per line.
losses() { sed -n 's/.*"type":"train","step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1"; }

# losses_same "what" a.jsonl b.jsonl: both runs logged the same losses, bit for bit, and at least one.
losses_same() {
    checks=$((checks + 1))
    if [[ "$(losses "$2")" == "$(losses "$3")" && -n "$(losses "$2")" ]]; then
        echo "ok   $1"
    else
        fail "$1: losses differ: $(losses "$2" | tr '\n' ' ') vs $(losses "$3" | tr '\n' ' ')"
    fi
}

# losses_close "what" reference.jsonl other.jsonl steps: the other run logged `steps` steps, each loss within 1%
# of the reference run's at the same step.
losses_close() {
    local what="$1" ref="$2" other="$3" steps="$4" worst
    checks=$((checks + 1))
    worst=$(paste <(losses "$ref") <(losses "$other") |
            awk '{d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > m) m = r} END {printf "%.5f", m}')
    if [[ $(losses "$other" | wc -l) -eq $steps ]] && awk -v w="$worst" 'BEGIN {exit !(w <= 0.01)}'; then
        echo "ok   $what (worst relative loss gap $worst)"
    else
        fail "$what: worst relative loss gap $worst over $(losses "$other" | wc -l) of $steps steps"
    fi
}

# ---------------------------------------------------------------------------
test_resume() {
    expect_ok "uninterrupted run, 6 steps" train "${common[@]}" --steps 6 --checkpoint-dir full || return
    expect_ok "same run stopped at step 3" train "${common[@]}" --steps 6 --stop-at 3 --checkpoint-dir part || return
    grep -q '"step":3' part/metrics.jsonl || fail "the stopped run has no step 3"
    # Resume with only --resume: steps, batch, seq, seed come from the checkpoint.
    expect_ok "resumed to step 6" train --data corpus.txt --tokenizer tok.bin --sample-tokens 0 \
        --eval-every 2 --eval-batches 1 --threads 2 --checkpoint-dir part --resume || return
    grep -q "resumed from part/checkpoint.bin at step 3" out.txt || fail "no 'resumed at step 3' line"
    same_file "resumed checkpoint is bit-identical to the uninterrupted one" full/checkpoint.bin part/checkpoint.bin
    losses_same "losses of steps 1..6 identical" full/metrics.jsonl part/metrics.jsonl
    # bf16 recipe with gradient accumulation, resumed from an explicit file.
    expect_ok "bf16, accum 2, uninterrupted" train "${common[@]}" --recipe bf16 --grad-accum 2 --steps 4 --checkpoint-dir fa || return
    expect_ok "bf16, accum 2, stopped at 2" train "${common[@]}" --recipe bf16 --grad-accum 2 --steps 4 --stop-at 2 --checkpoint-dir pa || return
    cp pa/checkpoint.bin step2.bin
    expect_ok "bf16, accum 2, resumed from a file" train "${common[@]}" --recipe bf16 --checkpoint-dir pa --resume step2.bin || return
    same_file "bf16 + accumulation: resumed checkpoint bit-identical" fa/checkpoint.bin pa/checkpoint.bin
}

# ---------------------------------------------------------------------------
test_bad_input() {
    expect_ok "a good run to step 2 (its checkpoint is the one to protect)" \
        train "${common[@]}" --steps 6 --stop-at 2 --checkpoint-dir good || return
    cp good/checkpoint.bin reference.bin

    expect_fail "unknown command" "unknown command 'trian'" trian
    expect_fail "unknown option" "unknown option '--stpes'" train "${common[@]}" --stpes 5 --checkpoint-dir good
    expect_fail "non-numeric value" "--steps expects an integer, got '5x'" train "${common[@]}" --steps 5x --checkpoint-dir good
    expect_fail "non-finite float" "--lr expects a finite number" train "${common[@]}" --lr nan --checkpoint-dir good
    expect_fail "missing value" "--batch needs a value" train --batch
    expect_fail "out-of-range value" "--steps must be >= 1" train "${common[@]}" --steps 0 --checkpoint-dir fresh
    expect_fail "unknown recipe" "unknown --recipe 'fp4'" train "${common[@]}" --recipe fp4 --checkpoint-dir good
    expect_fail "unknown model" "unknown --model 'huge'" train "${common[@]}" --model huge --checkpoint-dir good
    expect_fail "unknown device" "unknown --device 'tpu'" train "${common[@]}" --device tpu --checkpoint-dir good
    expect_fail "tf32 on the CPU" "--tf32 needs --device cuda" train "${common[@]}" --tf32 --checkpoint-dir good
    expect_fail "flash attention on the CPU" "--flash-attention needs --device cuda" train "${common[@]}" \
        --flash-attention --checkpoint-dir good
    expect_fail "seq above the preset" "exceeds the tiny model's 128" train "${common[@]}" --seq 129 --checkpoint-dir fresh

    expect_fail "a fresh run over an existing checkpoint" "good/checkpoint.bin already holds a run (step 2 of 6)" \
        train "${common[@]}" --steps 6 --checkpoint-dir good
    expect_fail "missing data" "cannot open 'no_such_corpus.txt'" \
        train "${common[@]}" --data no_such_corpus.txt --checkpoint-dir fresh
    expect_fail "missing data, no tokenizer yet" "cannot open 'no_such_corpus.txt'" \
        train "${common[@]}" --data no_such_corpus.txt --tokenizer tok_new.bin --checkpoint-dir fresh
    : >empty.txt
    expect_fail "empty data" "data file 'empty.txt' is empty" \
        train "${common[@]}" --data empty.txt --tokenizer tok_new.bin --checkpoint-dir fresh
    expect_fail "empty data, existing tokenizer" "data file 'empty.txt' is empty" \
        train "${common[@]}" --data empty.txt --checkpoint-dir fresh
    head -c 150 corpus.txt >short.txt
    expect_fail "too little data" "too few" train "${common[@]}" --data short.txt --checkpoint-dir fresh
    printf 'not a tokenizer' >bad_tok.bin
    expect_fail "corrupt tokenizer" "not a blockfp8 tokenizer" \
        train "${common[@]}" --tokenizer bad_tok.bin --checkpoint-dir fresh

    cp reference.bin payload.bin
    printf '\x55' | dd of=payload.bin bs=1 seek=50000 conv=notrunc 2>/dev/null
    expect_fail "corrupt checkpoint (weights)" "weights checksum mismatch" \
        train "${common[@]}" --checkpoint-dir good --resume payload.bin
    cp reference.bin header.bin
    printf '\x07' | dd of=header.bin bs=1 seek=60 conv=notrunc 2>/dev/null
    expect_fail "corrupt checkpoint (header)" "header checksum mismatch" \
        train "${common[@]}" --checkpoint-dir good --resume header.bin
    head -c 100000 reference.bin >truncated.bin
    expect_fail "truncated checkpoint" "truncated" train "${common[@]}" --checkpoint-dir good --resume truncated.bin
    expect_fail "not a checkpoint" "not a blockfp8 checkpoint" \
        train "${common[@]}" --checkpoint-dir good --resume corpus.txt
    expect_fail "missing checkpoint" "cannot open checkpoint 'nothing.bin'" \
        train "${common[@]}" --checkpoint-dir good --resume nothing.bin
    expect_fail "checkpoint of another model" "is a 'tiny' model, --model asks for 'small'" \
        train "${common[@]}" --model small --checkpoint-dir good --resume
    expect_fail "checkpoint of another tokenizer" "trained with another tokenizer" \
        train "${common[@]}" --tokenizer tok300.bin --vocab-size 300 --checkpoint-dir good --resume
    same_file "the checkpoint is untouched by the failed resumes" reference.bin good/checkpoint.bin

    expect_fail "NaN in a quantized weight (fp8-blockwise)" "non-finite value (NaN/Inf) in layer 0 attn.qkv: quantized tensor W" \
        train "${common[@]}" --checkpoint-dir good --resume --inject-nonfinite 3
    grep -qF "The last checkpoint, good/checkpoint.bin (step 2), is intact" err.txt ||
        fail "the NaN message does not name the intact checkpoint: $(cat err.txt)"
    same_file "the checkpoint is untouched after the NaN weight" reference.bin good/checkpoint.bin
    expect_fail "NaN in the loss (bf16)" "the loss is NaN" \
        train "${common[@]}" --recipe bf16 --checkpoint-dir good --resume --inject-nonfinite 3 --checkpoint-every 1
    same_file "the checkpoint is untouched after the NaN loss" reference.bin good/checkpoint.bin
    checks=$((checks + 1))
    if ls good | grep -q tmp; then fail "a temporary file was left in good/: $(ls good)"; else echo "ok   no temporary files left"; fi

    expect_fail "plot without files" "give at least one metrics file" plot --out x.png
    expect_fail "plot of a missing file" "cannot open metrics file 'nope.jsonl'" plot --out x.png nope.jsonl
    expect_fail "sample from a corrupt checkpoint" "checksum mismatch" \
        sample --checkpoint payload.bin --tokenizer tok.bin
    expect_fail "sample on an unknown device" "unknown --device 'tpu'" \
        sample --checkpoint reference.bin --tokenizer tok.bin --device tpu
}

# ---------------------------------------------------------------------------
test_tools() {
    expect_ok "train two short runs" train "${common[@]}" --steps 4 --checkpoint-dir a || return
    expect_ok "train two short runs (bf16)" train "${common[@]}" --steps 4 --recipe bf16 --checkpoint-dir b || return
    expect_ok "train with --profile" train "${common[@]}" --steps 4 --profile --checkpoint-dir p || return
    checks=$((checks + 1))
    if grep -qF "profile: 4 steps, wall-clock" out.txt && grep -qF "head + loss" out.txt; then
        echo "ok   --profile prints the table"
    else
        fail "--profile output: $(tail -n 9 out.txt)"
    fi
    losses_same "--profile changes no loss" a/metrics.jsonl p/metrics.jsonl
    expect_ok "plot two runs" plot --out curves.png --title "test" fp8=a/metrics.jsonl bf16=b/metrics.jsonl || return
    checks=$((checks + 1))
    if [[ "$(head -c 8 curves.png | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]]; then
        echo "ok   the plot is a PNG"
    else
        fail "curves.png is not a PNG"
    fi
    expect_ok "sample from a checkpoint" sample --checkpoint a/checkpoint.bin --tokenizer tok.bin --tokens 20 --prompt "int " || return
    checks=$((checks + 1))
    if [[ $(head -c 4 out.txt) == "int " || $(grep -c "int " out.txt) -ge 1 ]]; then echo "ok   the sample starts from the prompt"; else fail "sample output: $(cat out.txt)"; fi
    expect_ok "tokenize encode" tokenize encode --tokenizer tok.bin --text "static int x;" || return
    ids=$(tr -c '0-9 \n' ' ' <out.txt | tr -s ' \n' ' ')
    # shellcheck disable=SC2086
    expect_ok "tokenize decode" tokenize decode --tokenizer tok.bin $ids || return
    checks=$((checks + 1))
    if grep -qF "static int x;" out.txt; then echo "ok   encode then decode gives the text back"; else fail "decode gave: $(cat out.txt)"; fi
}

# ---------------------------------------------------------------------------
test_cuda() {
    "$bin" train "${common[@]}" --device cuda --steps 1 --checkpoint-dir probe >out.txt 2>err.txt
    if grep -qF "no usable CUDA device" err.txt; then
        echo "SKIP: no CUDA device"
        exit 77
    fi
    local gpu=(--device cuda)
    expect_ok "GPU: uninterrupted run, 6 steps" train "${common[@]}" "${gpu[@]}" --steps 6 --checkpoint-dir gfull || return
    grep -qF "cuda device 0" out.txt || fail "the banner does not say the run is on the GPU: $(head -n 3 out.txt)"
    expect_ok "GPU: same run stopped at step 3" train "${common[@]}" "${gpu[@]}" --steps 6 --stop-at 3 --checkpoint-dir gpart || return
    expect_ok "GPU: resumed to step 6" train --data corpus.txt --tokenizer tok.bin --sample-tokens 0 \
        --eval-every 2 --eval-batches 1 --threads 2 "${gpu[@]}" --checkpoint-dir gpart --resume || return
    same_file "GPU: resumed checkpoint is bit-identical to the uninterrupted one" gfull/checkpoint.bin gpart/checkpoint.bin
    losses_same "GPU: losses of steps 1..6 identical" gfull/metrics.jsonl gpart/metrics.jsonl
    expect_ok "GPU: --profile" train "${common[@]}" "${gpu[@]}" --steps 6 --profile --checkpoint-dir gprof || return
    grep -qF "profile: 6 steps, device (CUDA events)" out.txt || fail "GPU --profile output: $(tail -n 9 out.txt)"
    losses_same "GPU: --profile changes no loss" gfull/metrics.jsonl gprof/metrics.jsonl
    # The same run on the CPU: fp8 codes may round differently, the losses stay close.
    expect_ok "CPU: the same 6 steps" train "${common[@]}" --steps 6 --checkpoint-dir cfull || return
    losses_close "GPU losses within 1% of the CPU's" cfull/metrics.jsonl gfull/metrics.jsonl 6
    expect_ok "a CPU checkpoint resumes on the GPU" train --data corpus.txt --tokenizer tok.bin --sample-tokens 0 \
        --eval-every 2 --eval-batches 1 --threads 2 "${gpu[@]}" --steps 8 --checkpoint-dir cfull --resume || return
    grep -qF "resumed from cfull/checkpoint.bin at step 6" out.txt || fail "no 'resumed at step 6' line"
    cp gfull/checkpoint.bin greference.bin
    expect_fail "GPU: NaN in a quantized weight (fp8-blockwise)" \
        "non-finite value (NaN/Inf) in layer 0 attn.qkv: quantized tensor W" \
        train "${common[@]}" "${gpu[@]}" --steps 8 --checkpoint-dir gfull --resume --inject-nonfinite 7
    same_file "GPU: the checkpoint is untouched after the NaN weight" greference.bin gfull/checkpoint.bin
    expect_ok "GPU: --tf32 products" train "${common[@]}" "${gpu[@]}" --tf32 --steps 2 --checkpoint-dir gtf32 || return
    grep -qF "tf32 products" out.txt || fail "the banner does not say tf32: $(head -n 3 out.txt)"
    # Flash attention (head_dim 64: the small preset): refused for tiny's head_dim 32; stop + resume
    # bit-identical; the losses track the fp32 attention's.
    expect_fail "GPU: flash attention with head_dim 32" "flash attention runs on a CUDA device with head_dim 64 or 128" \
        train "${common[@]}" "${gpu[@]}" --flash-attention --steps 2 --checkpoint-dir gflash32
    local small=(--model small --seq 96)
    expect_ok "GPU: small model, fp32 attention, 6 steps" train "${common[@]}" "${gpu[@]}" "${small[@]}" --steps 6 \
        --checkpoint-dir gsmall || return
    expect_ok "GPU: small model, flash attention, 6 steps" train "${common[@]}" "${gpu[@]}" "${small[@]}" --steps 6 \
        --flash-attention --checkpoint-dir gflash || return
    grep -qF "flash attention" out.txt || fail "the banner does not say flash attention: $(head -n 3 out.txt)"
    losses_close "GPU: flash attention losses within 1% of fp32 attention" gsmall/metrics.jsonl gflash/metrics.jsonl 6
    expect_ok "GPU: flash attention stopped at step 3" train "${common[@]}" "${gpu[@]}" "${small[@]}" --steps 6 \
        --flash-attention --stop-at 3 --checkpoint-dir gflashpart || return
    expect_ok "GPU: flash attention resumed" train "${common[@]}" "${gpu[@]}" "${small[@]}" --flash-attention \
        --checkpoint-dir gflashpart --resume || return
    same_file "GPU: flash attention resumed bit-identical to uninterrupted" gflash/checkpoint.bin gflashpart/checkpoint.bin
    # Greedy sampling from one checkpoint: the GPU continues the prompt like the CPU.
    expect_ok "CPU: greedy sample" sample --checkpoint gfull/checkpoint.bin --tokenizer tok.bin --tokens 8 \
        --temperature 0 --prompt "int " || return
    cp out.txt sample_cpu.txt
    expect_ok "GPU: greedy sample" sample "${gpu[@]}" --checkpoint gfull/checkpoint.bin --tokenizer tok.bin \
        --tokens 8 --temperature 0 --prompt "int " || return
    checks=$((checks + 1))
    if [[ -s out.txt && "$(head -c 4 out.txt)" == "int " ]]; then
        echo "ok   GPU: the sample continues the prompt ($(tr '\n' ' ' <out.txt | head -c 60))"
    else
        fail "GPU sample output: $(cat out.txt)"
    fi
}

# ---------------------------------------------------------------------------
# The data-parallel checks on one device kind: $1 = cpu or cuda.
data_parallel_checks() {
    local kind="$1" dev=(--device "$1") tag="$1"
    expect_ok "$tag: plain run, 4 steps" train "${common[@]}" "${dev[@]}" --steps 4 --checkpoint-dir "${tag}plain" || return
    expect_ok "$tag: --data-parallel 1, 4 steps" train "${common[@]}" "${dev[@]}" --data-parallel 1 --steps 4 \
        --checkpoint-dir "${tag}dp1" || return
    grep -qF "data parallel over" out.txt || fail "$tag: the banner does not say data parallel: $(head -n 3 out.txt)"
    same_file "$tag: one rank is bit-identical to no data parallelism" "${tag}plain/checkpoint.bin" "${tag}dp1/checkpoint.bin"
    [[ $kind == cuda && ${gpus:-0} -lt 2 ]] && { echo "SKIP: 2-rank GPU checks: ${gpus:-0} GPU(s) here"; return; }
    local one=(--batch 2) two=(--batch 1 --data-parallel 2)
    expect_ok "$tag: 1 rank x batch 2, 6 steps" train "${common[@]}" "${dev[@]}" "${one[@]}" --steps 6 \
        --checkpoint-dir "${tag}b2" || return
    expect_ok "$tag: 2 ranks x batch 1, 6 steps" train "${common[@]}" "${dev[@]}" "${two[@]}" --steps 6 \
        --checkpoint-dir "${tag}r2" || return
    grep -qF "x 2 ranks" out.txt || fail "$tag: the run line does not say 2 ranks: $(grep '^run:' out.txt)"
    losses_close "$tag: 2 ranks x batch 1 track 1 rank x batch 2" "${tag}b2/metrics.jsonl" "${tag}r2/metrics.jsonl" 6
    expect_ok "$tag: 2 ranks stopped at step 3" train "${common[@]}" "${dev[@]}" "${two[@]}" --steps 6 --stop-at 3 \
        --checkpoint-dir "${tag}r2part" || return
    expect_ok "$tag: resumed (ranks from the checkpoint)" train --data corpus.txt --tokenizer tok.bin --sample-tokens 0 \
        --eval-every 2 --eval-batches 1 --threads 2 "${dev[@]}" --checkpoint-dir "${tag}r2part" --resume || return
    grep -qF "x 2 ranks" out.txt || fail "$tag: the resumed run is not on 2 ranks: $(grep '^run:' out.txt)"
    same_file "$tag: 2 ranks resumed bit-identical to uninterrupted" "${tag}r2/checkpoint.bin" "${tag}r2part/checkpoint.bin"
    expect_ok "$tag: 2 ranks with --profile" train "${common[@]}" "${dev[@]}" "${two[@]}" --steps 6 --profile \
        --checkpoint-dir "${tag}r2prof" || return
    losses_same "$tag: --profile changes no loss on 2 ranks" "${tag}r2/metrics.jsonl" "${tag}r2prof/metrics.jsonl"
    checks=$((checks + 1))
    if awk '$1 == "communication" && $2 > 0 {found = 1} END {exit !found}' out.txt; then
        echo "ok   $tag: --profile times the gradient all-reduce"
    else
        fail "$tag: no communication time: $(grep -A8 '^profile:' out.txt)"
    fi
    cp "${tag}r2/checkpoint.bin" "${tag}r2ref.bin"
    checks=$((checks + 1))
    local t0=$SECONDS
    timeout 60 "$bin" train "${common[@]}" "${dev[@]}" "${two[@]}" --steps 8 --checkpoint-dir "${tag}r2" --resume \
        --inject-rank-exit 7 >out.txt 2>err.txt
    local rc=$?
    if [[ $rc -eq 1 ]] && grep -qF "rank 1 failed (exit code 3); the other ranks were stopped" err.txt; then
        echo "ok   $tag: a rank that dies stops the others (rc 1 after $((SECONDS - t0)) s)"
    else
        fail "$tag: a dying rank: rc $rc (124 = hung), stderr: $(cat err.txt)"
    fi
    same_file "$tag: the checkpoint is untouched after a rank died" "${tag}r2ref.bin" "${tag}r2/checkpoint.bin"
    expect_fail "$tag: NaN weight on 2 ranks" "non-finite value (NaN/Inf) in layer 0 attn.qkv" \
        train "${common[@]}" "${dev[@]}" "${two[@]}" --steps 8 --checkpoint-dir "${tag}r2" --resume --inject-nonfinite 7
}

test_data_parallel() {
    data_parallel_checks cpu
    expect_fail "--data-parallel 0" "--data-parallel must be between 1 and 64 (got 0)" \
        train "${common[@]}" --data-parallel 0 --checkpoint-dir dpbad
    local have
    have=$("$bin" train "${common[@]}" --device cuda --steps 1 --checkpoint-dir probe 2>&1 >/dev/null |
           grep -c "no usable CUDA device")
    if [[ $have -gt 0 ]]; then
        expect_fail "--data-parallel 2 --device cuda without GPUs" "2 ranks need 2 CUDA devices, this machine has 0" \
            train "${common[@]}" --device cuda --data-parallel 2 --checkpoint-dir dpbad
    fi
}

test_data_parallel_cuda() {
    "$bin" train "${common[@]}" --device cuda --steps 1 --checkpoint-dir probe >out.txt 2>err.txt
    if grep -qF "no usable CUDA device" err.txt; then
        echo "SKIP: no CUDA device"
        exit 77
    fi
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    data_parallel_checks cuda
    if [[ $gpus -lt 8 ]]; then
        expect_fail "--data-parallel $((gpus + 1)) on $gpus GPU(s)" "ranks need $((gpus + 1)) CUDA devices, this machine has $gpus" \
            train "${common[@]}" --device cuda --data-parallel $((gpus + 1)) --checkpoint-dir dpbad
    fi
}

case "$group" in
    cuda) test_cuda ;;
    dp) test_data_parallel ;;
    dp_cuda) test_data_parallel_cuda ;;
    resume) test_resume ;;
    bad) test_bad_input ;;
    tools) test_tools ;;
    all) test_resume; test_bad_input; test_tools ;;
    *) echo "unknown group '$group'" >&2; exit 2 ;;
esac
echo "train_cli ($group): $checks checks, $failures failed"
[[ $failures -eq 0 && $checks -gt 0 ]]
