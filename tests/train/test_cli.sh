#!/usr/bin/env bash
# test_cli.sh - the `blockfp8` program as a user runs it, on a small corpus
# made from this repository's own sources:
#   resume   a run stopped at step 3 and resumed ends with a checkpoint and
#            losses bit-identical to one uninterrupted run
#   usage    a table of bad command lines of every subcommand (negative,
#            zero and huge numbers, unknown names, missing values, conflicting
#            options): each exits 2 with one line on stderr naming the option,
#            the value and the allowed range; --version
#   bad      missing / empty / binary data, corrupt, truncated, foreign and
#            mismatched checkpoints, NaN in a quantized weight (fp8) and in the
#            loss (bf16): each exits 1 with a clear one-line message, and the
#            checkpoint already on disk is byte-for-byte untouched
#   rundir   the run directory: a second run on it is refused while the first
#            holds its lock; SIGTERM / SIGINT end a run with a checkpoint of
#            the step reached (exit 143 / 130), and the resumed run ends
#            bit-identical to an uninterrupted one (also with 2 data-parallel
#            ranks); stale temporary files are removed; a resume never logs a
#            step twice in metrics.jsonl; a metrics or checkpoint write failure
#            stops the run with a message that says what is on disk; progress
#            and banner lines reach a file as they are printed
#   tools    plot writes a PNG, sample and tokenize work from a checkpoint;
#            --profile prints the table by kind of work and changes no loss
#   cuda     --device cuda (exit 77, skipped, without a GPU): a run stopped and
#            resumed on the GPU is bit-identical to an uninterrupted one, its
#            losses track the CPU's, a CPU checkpoint resumes on the GPU, and
#            a NaN weight is caught as on the CPU; --tf32; --flash-attention
#            (refused for head_dim 32, losses within 1% of fp32 attention,
#            stop + resume bit-identical; fp8-blockwise and bf16); --profile
#            (CUDA events, same losses)
#   dp       --data-parallel on the CPU: one rank is bit-identical to no data
#            parallelism; 2 ranks x batch 1 track 1 rank x batch 2; a 2-rank
#            run stopped and resumed (the ranks from the checkpoint) is
#            bit-identical to an uninterrupted one; a rank that dies stops
#            the others (no hang), a NaN stops every rank, bad values refused;
#            --profile on 2 ranks: the same losses, the all-reduce timed
#   moe      the moe-tiny preset (MoE blocks) on the CPU: 30 steps lower the loss, the expert load (of the
#            step, and over the steps since the last logged one) is
#            logged and printed; stop + resume bit-identical (fp8-blockwise; bf16 with accumulation);
#            a resume as another preset is refused; 2 data-parallel ranks track one rank
#   moe_cuda moe-tiny on the GPU (exit 77 without one): its losses within 2% of the CPU's in each
#            recipe; stop + resume bit-identical on the GPU
#   dp_cuda  --data-parallel --device cuda over NCCL (exit 77 without a GPU):
#            one rank bit-identical to the plain GPU run, with the
#            reductions overlapped with the backward or not, --zero 1 on one
#            rank with the same losses; with 2 GPUs, the checks of `dp` and
#            `zero` on the GPUs
#   zero     --zero 1 on CPU ranks: the losses of plain data parallelism (2
#            and 3 ranks), a stopped and resumed run bit-identical to an
#            uninterrupted one, refused without data parallelism
#   launch   ranks started as a launcher does (RANK, WORLD_SIZE, MASTER_ADDR,
#            MASTER_PORT on 127.0.0.1): bit-identical to --data-parallel 2,
#            also with --zero 1; a rank that exits stops the other with a
#            message naming it (either rank), no hang; bad settings refused
#
#   bash tests/train/test_cli.sh build/tools/blockfp8 [usage|resume|bad|rundir|tools|cuda|dp|dp_cuda|moe|moe_cuda|zero|launch]
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

# expect_exit CODE "what" "message substring" args...: exit code CODE, the substring on stderr,
# which holds one line (two for a failure after a progress line).
expect_exit() {
    local want="$1" what="$2" needle="$3"
    shift 3
    checks=$((checks + 1))
    "$bin" "$@" >out.txt 2>err.txt
    local rc=$?
    if [[ $rc -ne $want ]]; then
        fail "$what: exit $rc, expected $want: $(head -c 300 err.txt)"
    elif ! grep -qF -- "$needle" err.txt; then
        fail "$what: stderr lacks '$needle': $(cat err.txt)"
    elif [[ $(wc -l <err.txt) -gt 2 || ($want -eq 2 && $(wc -l <err.txt) -ne 1) ]]; then
        fail "$what: more than one line on stderr: $(cat err.txt)"
    else
        echo "ok   $what: rc $rc: $(tail -n 1 err.txt)"
    fi
}

# expect_fail "what" "message substring" args...: a failure of the run (exit 1), not of the command line.
expect_fail() { expect_exit 1 "$@"; }

# expect_usage "message substring" args...: a bad command line (exit 2), named by its arguments.
expect_usage() {
    local needle="$1"
    shift
    expect_exit 2 "${1:-(nothing)} ... ${*: -2}" "$needle" "$@"
}

check() { # check "what" command...: the command succeeds
    local what="$1"
    shift
    checks=$((checks + 1))
    if "$@"; then echo "ok   $what"; else fail "$what"; fi
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

# losses_close "what" ref.jsonl other.jsonl STEPS [TOLERANCE]: STEPS losses logged, each within TOLERANCE
# (relative, default 0.01) of the reference's.
losses_close() {
    local what="$1" ref="$2" other="$3" steps="$4" tolerance="${5:-0.01}" worst
    checks=$((checks + 1))
    worst=$(paste <(losses "$ref") <(losses "$other") |
            awk '{d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > m) m = r} END {printf "%.7f", m}')
    if [[ $(losses "$other" | wc -l) -eq $steps ]] && awk -v w="$worst" -v t="$tolerance" 'BEGIN {exit !(w <= t)}'; then
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

    expect_exit 2 "a fresh run over an existing checkpoint" "good/checkpoint.bin already holds a run (step 2 of 6)" \
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
    # A binary file as the corpus (this program: mostly control bytes and invalid UTF-8).
    expect_fail "binary data, no tokenizer yet" "does not look like text" \
        train "${common[@]}" --data "$bin" --tokenizer tok_binary.bin --checkpoint-dir fresh
    expect_fail "binary data, existing tokenizer" "does not look like text" \
        train "${common[@]}" --data "$bin" --checkpoint-dir fresh
    expect_fail "tokenize train on binary data" "does not look like text" \
        tokenize train --data "$bin" --vocab-size 300 --out tok_binary.bin
    check "no tokenizer was trained on the binary data" test ! -e tok_binary.bin
    # Text with a few percent of control bytes trains, with a warning.
    LC_ALL=C tr ';,' '\001\002' <corpus.txt >control.txt
    expect_ok "text with a few control bytes" train "${common[@]}" --data control.txt --tokenizer tok_control.bin \
        --steps 1 --checkpoint-dir control
    check "... is warned about" grep -qF "warning: data file 'control.txt':" err.txt
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

    expect_fail "plot of a missing file" "cannot open metrics file 'nope.jsonl'" plot --out x.png nope.jsonl
    expect_fail "sample from a corrupt checkpoint" "checksum mismatch" \
        sample --checkpoint payload.bin --tokenizer tok.bin
}

# ---------------------------------------------------------------------------
# Bad command lines: each exits 2 before anything is read or written, with one line on stderr.
test_usage() {
    local t=(train "${common[@]}" --checkpoint-dir refused)
    expect_usage "--steps must be between 1 and 1000000000 (got -5)" "${t[@]}" --steps -5
    expect_usage "--steps must be between 1 and 1000000000 (got 0)" "${t[@]}" --steps 0
    expect_usage "--batch must be between 1 and 4096 (got -1)" "${t[@]}" --batch -1
    expect_usage "--batch must be between 1 and 4096 (got 100000)" "${t[@]}" --batch 100000
    expect_usage "--seq must be between 1 and 65536 (got -3)" "${t[@]}" --seq -3
    expect_usage "--seq 129 exceeds the tiny model's 128" "${t[@]}" --seq 129
    expect_usage "--warmup must be between 0 and 1000000000 (got -1)" "${t[@]}" --warmup -1
    expect_usage "--eval-every must be between 0 and 1000000000 (got -2)" "${t[@]}" --eval-every -2
    expect_usage "--eval-batches must be between 1 and 1000000 (got 0)" "${t[@]}" --eval-batches 0
    expect_usage "--checkpoint-every must be between 0 and 1000000000 (got -1)" "${t[@]}" --checkpoint-every -1
    expect_usage "--vocab-size must be between 256 and 65536 (got -7)" "${t[@]}" --vocab-size -7
    expect_usage "--vocab-size must be between 256 and 65536 (got 100)" "${t[@]}" --vocab-size 100
    expect_usage "--grad-accum must be between 1 and 1024 (got 1000000000)" "${t[@]}" --grad-accum 1000000000
    expect_usage "--grad-accum must be between 1 and 1024 (got 0)" "${t[@]}" --grad-accum 0
    expect_usage "--threads must be between 0 and 1024 (got 100000)" "${t[@]}" --threads 100000
    expect_usage "--threads must be between 0 and 1024 (got -1)" "${t[@]}" --threads -1
    expect_usage "--log-every must be between 1 and 1000000000 (got 0)" "${t[@]}" --log-every 0
    expect_usage "--stop-at must be between 1 and 1000000000 (got -1)" "${t[@]}" --stop-at -1
    expect_usage "--data-parallel must be between 1 and 64 (got 65)" "${t[@]}" --data-parallel 65
    expect_usage "--sample-tokens must be between 0 and 1000000 (got -1)" "${t[@]}" --sample-tokens -1
    expect_usage "--top-k must be between 0 and 65536 (got -1)" "${t[@]}" --top-k -1
    expect_usage "--seed must be between 0 and 9223372036854775807 (got -1)" "${t[@]}" --seed -1
    expect_usage "--inject-nonfinite must be between 1 and 1000000000 (got 0)" "${t[@]}" --inject-nonfinite 0
    expect_usage "--lr must be > 0 and <= 10 (got 0)" "${t[@]}" --lr 0
    expect_usage "--lr must be > 0 and <= 10 (got -0.001)" "${t[@]}" --lr=-1e-3
    expect_usage "--min-lr must be between 0 and 10 (got -1)" "${t[@]}" --min-lr -1
    expect_usage "--weight-decay must be between 0 and 10 (got -0.1)" "${t[@]}" --weight-decay -0.1
    expect_usage "--clip must be between 0 and 1000000 (got -1)" "${t[@]}" --clip -1
    expect_usage "--temperature must be between 0 and 100 (got -1)" "${t[@]}" --temperature -1
    expect_usage "--steps expects an integer, got '99999999999999999999'" "${t[@]}" --steps 99999999999999999999
    expect_usage "--steps expects an integer, got '5x'" "${t[@]}" --steps 5x
    expect_usage "--steps expects an integer, got ''" "${t[@]}" --steps=
    expect_usage "--lr expects a finite number, got 'nan'" "${t[@]}" --lr nan
    expect_usage "--lr expects a finite number, got '1e999'" "${t[@]}" --lr 1e999
    expect_usage "--batch needs a value (N)" train --batch
    expect_usage "unknown option '--stpes'" "${t[@]}" --stpes 5
    expect_usage "unknown option '-x'" "${t[@]}" -x
    expect_usage "--overwrite takes no value" "${t[@]}" --overwrite=yes
    expect_usage "unexpected argument 'extra'" "${t[@]}" extra
    expect_usage "unknown --recipe 'fp4'" "${t[@]}" --recipe fp4
    expect_usage "unknown --model 'huge'" "${t[@]}" --model huge
    expect_usage "unknown --device 'tpu'" "${t[@]}" --device tpu
    expect_usage "--tf32 needs --device cuda" "${t[@]}" --tf32
    expect_usage "--flash-attention needs --device cuda" "${t[@]}" --flash-attention
    check "a refused command line creates no run directory" test ! -e refused

    expect_usage "missing command" # no arguments at all
    expect_usage "unknown command 'trian'" trian
    expect_usage "unknown command '--versoin'" --versoin
    checks=$((checks + 1))
    local version
    version=$(sed -n 's/^project(blockfp8 VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
    if [[ "$("$bin" --version 2>&1)" == "blockfp8 $version" ]]; then
        echo "ok   --version: blockfp8 $version"
    else
        fail "--version printed '$("$bin" --version 2>&1)', expected 'blockfp8 $version' (CMakeLists.txt)"
    fi

    expect_usage "--checkpoint FILE is required" sample
    expect_usage "--tokens must be between 0 and 1000000 (got -1)" sample --checkpoint x.bin --tokens -1
    expect_usage "--top-k must be between 0 and 65536 (got -1)" sample --checkpoint x.bin --top-k -1
    expect_usage "--temperature must be between 0 and 100 (got -1)" sample --checkpoint x.bin --temperature -1
    expect_usage "--seed must be between 0 and 9223372036854775807 (got -2)" sample --checkpoint x.bin --seed -2
    expect_usage "unknown --device 'tpu'" sample --checkpoint x.bin --device tpu
    expect_usage "unknown --recipe 'fp4'" sample --checkpoint x.bin --recipe fp4

    expect_ok "a tokenizer for the decode checks" tokenize train --data corpus.txt --vocab-size 320 --out tok.bin
    expect_usage "say train, encode or decode" tokenize
    expect_usage "unknown action 'frob'" tokenize frob
    expect_usage "--vocab-size must be between 256 and 65536 (got 100)" tokenize train --vocab-size 100
    expect_usage "train takes no positional arguments" tokenize train extra
    expect_usage "--tokenizer FILE is required" tokenize encode --text hi
    expect_usage "encode needs --text TEXT or one FILE" tokenize encode --tokenizer tok.bin
    expect_usage "'99999' is not a token id in [0, 320)" tokenize decode --tokenizer tok.bin 1 99999
    expect_usage "'x7' is not a token id in [0, 320)" tokenize decode --tokenizer tok.bin 1 x7

    expect_usage "give at least one metrics file" plot
    expect_usage "--width must be between 320 and 8192 (got 10)" plot --width 10 a.jsonl
    expect_usage "--height must be between 240 and 8192 (got 100000)" plot --height 100000 a.jsonl
    expect_usage "--smooth must be >= 0 and < 1 (got 1)" plot --smooth 1 a.jsonl
    expect_usage "--ymin expects a finite number, got 'inf'" plot --ymin inf a.jsonl
    expect_usage "unexpected argument 'g.jsonl'" plot a.jsonl b.jsonl c.jsonl d.jsonl e.jsonl f.jsonl g.jsonl
}

# ---------------------------------------------------------------------------
# The run directory: one run at a time, signals, stale files, metrics.

# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN (extended regex).
wait_for() {
    local deadline=$((SECONDS + $3))
    until grep -qE -- "$2" "$1" 2>/dev/null; do
        ((SECONDS < deadline)) || return 1
        sleep 0.05
    done
}

# each_step_once "what" metrics.jsonl: every train and val step is logged once, every line is a whole JSON object.
each_step_once() {
    checks=$((checks + 1))
    local dup bad
    dup=$(sed -n 's/.*"type":"\(train\|val\)","step":\([0-9]*\),.*/\1 \2/p' "$2" | sort | uniq -d | tr '\n' ' ')
    bad=$(grep -cvE '^\{.*\}$' "$2")
    if [[ -z $dup && $bad -eq 0 ]]; then
        echo "ok   $1"
    else
        fail "$1: steps logged twice: '$dup'; lines that are not a JSON object: $bad"
    fi
}

test_run_dir() {
    # Two runs on one directory: the second is refused while the first holds it. The first one also
    # shows that stdout going to a file gets the banner at once (line buffering), before step 1 ends
    # (64 micro-batches take a second or more).
    local slow=(train "${common[@]}" --threads 1 --grad-accum 64 --steps 100000 --log-every 1 --eval-every 0
                --checkpoint-every 2)
    "$bin" "${slow[@]}" --checkpoint-dir locked >a_out.txt 2>a_err.txt &
    local pid=$!
    checks=$((checks + 1))
    if wait_for a_out.txt '^run:' 60; then
        if grep -q '^step ' a_out.txt; then
            fail "the banner reached the file only with the first progress line: $(cat a_out.txt)"
        else
            echo "ok   the banner reaches a file before the first step ends"
        fi
    else
        fail "no banner from the first run after 60 s: $(cat a_out.txt a_err.txt)"
    fi
    local t0=$SECONDS
    until [[ -f locked/checkpoint.bin || $((SECONDS - t0)) -gt 120 ]]; do sleep 0.05; done
    [[ -f locked/checkpoint.bin ]] || fail "the first run wrote no checkpoint: $(cat a_out.txt a_err.txt)"
    expect_fail "a second run on a directory in use" "run directory 'locked' is in use by another run (pid $pid)" \
        train "${common[@]}" --steps 2 --overwrite --checkpoint-dir locked
    expect_fail "a resume on a directory in use" "run directory 'locked' is in use by another run" \
        train "${common[@]}" --steps 2 --resume --checkpoint-dir locked
    # SIGTERM: the step in progress ends, a checkpoint of it is written, exit 143.
    kill -TERM "$pid"
    wait "$pid"
    local rc=$? k
    k=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\);.*/\1/p' a_err.txt)
    checks=$((checks + 1))
    if [[ $rc -eq 143 && -n $k && -f locked/checkpoint.bin ]]; then
        echo "ok   SIGTERM: exit 143, checkpoint of step $k: $(cat a_err.txt)"
    else
        fail "SIGTERM: rc $rc (143 expected), stderr: $(cat a_err.txt); files: $(ls locked)"
        k=2
    fi
    expect_ok "resumed after SIGTERM, to step $((k + 2))" train "${common[@]}" --threads 1 --eval-every 0 \
        --checkpoint-every 2 --log-every 1 --resume --stop-at $((k + 2)) --checkpoint-dir locked
    expect_ok "the same steps uninterrupted" "${slow[@]}" --stop-at $((k + 2)) --checkpoint-dir unlocked
    same_file "stopped by SIGTERM + resumed is bit-identical to uninterrupted" unlocked/checkpoint.bin \
        locked/checkpoint.bin
    losses_same "... and logged the same losses" unlocked/metrics.jsonl locked/metrics.jsonl
    each_step_once "... each step once" locked/metrics.jsonl

    # SIGINT to a run of 2 data-parallel ranks (the supervisor takes the lock and passes the signal on). A
    # background job of a script ignores SIGINT unless job control is on.
    local dp=(train "${common[@]}" --batch 1 --data-parallel 2 --threads 1 --grad-accum 32 --steps 100000
              --log-every 1 --eval-every 0 --checkpoint-every 0)
    set -m
    "$bin" "${dp[@]}" --checkpoint-dir dpint >b_out.txt 2>b_err.txt &
    pid=$!
    set +m
    wait_for b_out.txt '^step +2/' 120 || fail "the 2-rank run did not reach step 2: $(cat b_out.txt b_err.txt)"
    expect_fail "a second run on a directory held by 2 ranks" "run directory 'dpint' is in use by another run" \
        train "${common[@]}" --steps 2 --overwrite --checkpoint-dir dpint
    kill -INT "$pid"
    wait "$pid"
    rc=$?
    k=$(sed -n 's/.*stopped by SIGINT after step \([0-9]*\);.*/\1/p' b_err.txt)
    checks=$((checks + 1))
    if [[ $rc -eq 130 && -n $k && -f dpint/checkpoint.bin ]]; then
        echo "ok   SIGINT to 2 ranks: exit 130, checkpoint of step $k: $(cat b_err.txt)"
    else
        fail "SIGINT to 2 ranks: rc $rc (130 expected), stderr: $(cat b_err.txt); files: $(ls dpint)"
        k=2
    fi
    expect_ok "2 ranks resumed after SIGINT" train "${common[@]}" --batch 1 --threads 1 --eval-every 0 \
        --checkpoint-every 0 --resume --stop-at $((k + 2)) --checkpoint-dir dpint
    expect_ok "2 ranks, the same steps uninterrupted" "${dp[@]}" --stop-at $((k + 2)) --checkpoint-dir dpref
    same_file "2 ranks: stopped by SIGINT + resumed is bit-identical to uninterrupted" dpref/checkpoint.bin \
        dpint/checkpoint.bin
    each_step_once "2 ranks: each step once" dpint/metrics.jsonl

    # A temporary file of a run that died while writing is removed by the next run on the directory.
    expect_ok "a run to step 2" train "${common[@]}" --steps 6 --stop-at 2 --checkpoint-dir stale || return
    printf 'half a checkpoint' >stale/checkpoint.bin.tmp.4194303
    printf 'a file of the user' >stale/notes.tmp.1
    expect_ok "resumed over a stale temporary file" train "${common[@]}" --resume --stop-at 3 --checkpoint-dir stale
    check "the stale temporary file is gone" test ! -e stale/checkpoint.bin.tmp.4194303
    check "... and nothing else" test -e stale/notes.tmp.1
    check "... and its removal is reported" grep -qF "removed stale/checkpoint.bin.tmp.4194303" out.txt

    # A run that fails between checkpoints (checkpoint at 2, steps 1-3 logged, a NaN at 4), resumed:
    # metrics.jsonl logs every step once (a half line at its end too is dropped), with the losses of a
    # run that never failed.
    expect_ok "uninterrupted, 6 steps, checkpoint every 2" train "${common[@]}" --steps 6 --checkpoint-every 2 \
        --checkpoint-dir nodup_ref || return
    expect_fail "the same run, a NaN at step 4" "non-finite value" train "${common[@]}" --steps 6 --checkpoint-every 2 \
        --inject-nonfinite 4 --checkpoint-dir nodup
    grep -q '"step":3,' nodup/metrics.jsonl || fail "the failed run did not log step 3"
    printf '{"type":"train","st' >>nodup/metrics.jsonl
    expect_ok "resumed from the checkpoint of step 2" train "${common[@]}" --resume --checkpoint-dir nodup
    each_step_once "resumed: each step once" nodup/metrics.jsonl
    losses_same "resumed: the losses of the run that never failed" nodup_ref/metrics.jsonl nodup/metrics.jsonl

    # Metrics that cannot be written stop the run (exit 1), like a checkpoint that cannot be written.
    if [[ -w /dev/full ]]; then
        expect_fail "metrics on a full disk" "cannot write metrics file '/dev/full': No space left on device" \
            train "${common[@]}" --steps 4 --metrics /dev/full --checkpoint-dir full
    fi
    # A checkpoint that cannot be written (a file size limit of 1 MB): the message says what is on disk.
    checks=$((checks + 1))
    (trap '' XFSZ; ulimit -f 1024; exec "$bin" train "${common[@]}" --steps 2 --checkpoint-dir fsize) >out.txt 2>err.txt
    rc=$?
    if [[ $rc -eq 1 ]] && grep -qF "cannot write 'fsize/checkpoint.bin': File too large (there was none before)" \
            err.txt &&
       ! grep -q untouched err.txt && [[ -z $(ls fsize | grep tmp) ]]; then
        echo "ok   a checkpoint that cannot be written, none before: $(cat err.txt)"
    else
        fail "a checkpoint that cannot be written, none before: rc $rc: $(cat err.txt); files: $(ls fsize)"
    fi
    expect_ok "a run to step 2" train "${common[@]}" --steps 4 --stop-at 2 --checkpoint-dir fsize2 || return
    cp fsize2/checkpoint.bin fsize2_step2.bin
    checks=$((checks + 1))
    (trap '' XFSZ; ulimit -f 1024; exec "$bin" train "${common[@]}" --resume --checkpoint-dir fsize2) >out.txt 2>err.txt
    rc=$?
    if [[ $rc -eq 1 ]] && grep -qF "File too large (the previous file is untouched)" err.txt &&
       cmp -s fsize2_step2.bin fsize2/checkpoint.bin; then
        echo "ok   a checkpoint that cannot be written over an earlier one: $(cat err.txt)"
    else
        fail "a checkpoint that cannot be written over an earlier one: rc $rc: $(cat err.txt)"
    fi
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
    # The bf16 recipe with flash attention (bf16 handed between the attention, the norms, SwiGLU and the
    # linear layers): the losses track its fp32 attention's; stop + resume bit-identical.
    expect_ok "GPU: bf16, small model, fp32 attention" train "${common[@]}" "${gpu[@]}" "${small[@]}" --recipe bf16 \
        --steps 6 --checkpoint-dir gsmall16 || return
    expect_ok "GPU: bf16, small model, flash attention" train "${common[@]}" "${gpu[@]}" "${small[@]}" --recipe bf16 \
        --steps 6 --flash-attention --checkpoint-dir gflash16 || return
    losses_close "GPU: bf16, flash attention losses within 1% of fp32 attention" gsmall16/metrics.jsonl \
        gflash16/metrics.jsonl 6
    expect_ok "GPU: bf16, flash attention stopped at step 3" train "${common[@]}" "${gpu[@]}" "${small[@]}" \
        --recipe bf16 --steps 6 --flash-attention --stop-at 3 --checkpoint-dir gflash16part || return
    expect_ok "GPU: bf16, flash attention resumed" train "${common[@]}" "${gpu[@]}" "${small[@]}" --recipe bf16 \
        --flash-attention --checkpoint-dir gflash16part --resume || return
    same_file "GPU: bf16, flash attention resumed bit-identical" gflash16/checkpoint.bin gflash16part/checkpoint.bin
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
    if [[ $kind == cuda ]]; then
        expect_ok "$tag: --data-parallel 1 --overlap-reduce 0, 4 steps" train "${common[@]}" "${dev[@]}" \
            --data-parallel 1 --overlap-reduce 0 --steps 4 --checkpoint-dir "${tag}dp1after" || return
        same_file "$tag: reductions overlapped with the backward = one after it" "${tag}dp1/checkpoint.bin" \
            "${tag}dp1after/checkpoint.bin"
    fi
    [[ $kind == cuda && ${gpus:-0} -lt 2 ]] && { echo "SKIP: 2-rank GPU checks: ${gpus:-0} GPU(s) here"; return; }
    local one=(--batch 2) two=(--batch 1 --data-parallel 2)
    expect_ok "$tag: 1 rank x batch 2, 6 steps" train "${common[@]}" "${dev[@]}" "${one[@]}" --steps 6 \
        --checkpoint-dir "${tag}b2" || return
    expect_ok "$tag: 2 ranks x batch 1, 6 steps" train "${common[@]}" "${dev[@]}" "${two[@]}" --steps 6 \
        --checkpoint-dir "${tag}r2" || return
    grep -qF "x 2 ranks" out.txt || fail "$tag: the run line does not say 2 ranks: $(grep '^run:' out.txt)"
    losses_close "$tag: 2 ranks x batch 1 track 1 rank x batch 2" "${tag}b2/metrics.jsonl" "${tag}r2/metrics.jsonl" 6
    if [[ $kind == cuda ]]; then
        expect_ok "$tag: 2 ranks, --overlap-reduce 0" train "${common[@]}" "${dev[@]}" "${two[@]}" --steps 6 \
            --overlap-reduce 0 --checkpoint-dir "${tag}r2after" || return
        losses_same "$tag: 2 ranks, overlapped reductions = one after the backward" "${tag}r2/metrics.jsonl" \
            "${tag}r2after/metrics.jsonl"
    fi
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
    expect_exit 2 "--data-parallel 0" "--data-parallel must be between 1 and 64 (got 0)" \
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
    zero_checks cuda
    if [[ $gpus -lt 8 ]]; then
        expect_fail "--data-parallel $((gpus + 1)) on $gpus GPU(s)" "ranks need $((gpus + 1)) CUDA devices, this machine has $gpus" \
            train "${common[@]}" --device cuda --data-parallel $((gpus + 1)) --checkpoint-dir dpbad
    fi
}

# ---------------------------------------------------------------------------
test_moe() {
    local moe=(--model moe-tiny)
    expect_ok "moe-tiny, 30 steps" train "${common[@]}" "${moe[@]}" --batch 4 --steps 30 --eval-every 0 \
        --log-every 10 --checkpoint-dir mtrain || return
    grep -qF "moe: blocks 1-3, 8 experts of 128 (top-2), shared expert 128" out.txt ||
        fail "no moe: banner line: $(head -n 3 out.txt)"
    grep -qE "step +30/30 \| loss .* \| load [0-9]+\.[0-9]{2} \(10 steps [0-9]+\.[0-9]{2}\) \| ETA" out.txt ||
        fail "the progress line has no expert load of the step and of the last 10: $(grep 'step ' out.txt | tail -n 1)"
    checks=$((checks + 1))
    local first last
    first=$(losses mtrain/metrics.jsonl | head -n 3 | awk '{s += $2} END {print s / NR}')
    last=$(losses mtrain/metrics.jsonl | tail -n 3 | awk '{s += $2} END {print s / NR}')
    if awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < 0.9 * a)}'; then
        echo "ok   moe-tiny lowers the loss: steps 1-3 $first, steps 28-30 $last"
    else
        fail "moe-tiny: the loss went from $first (steps 1-3) to $last (steps 28-30)"
    fi
    checks=$((checks + 1))
    local window='"moe_load_window":\[[0-9.]+,[0-9.]+,[0-9.]+\],"moe_window_steps":'
    if [[ $(grep -cE '"type":"train".*"moe_load":\[[0-9.]+,[0-9.]+,[0-9.]+\],"moe_dropped":0' \
            mtrain/metrics.jsonl) -eq 30 &&
          $(grep -cE "$window(1|9|10)}" mtrain/metrics.jsonl) -eq 4 &&
          $(grep -cE "\"step\":(1|10|20|30),.*$window" mtrain/metrics.jsonl) -eq 4 ]] &&
        ! grep -qE '"moe_load(_window)?":\[[^]]*(0\.[0-9]+|[0-9]+\.[0-9]+e)' mtrain/metrics.jsonl; then
        echo "ok   every train line holds the 3 MoE blocks' loads (>= 1) and no dropped pair; steps 1, 10, 20, 30" \
            "their loads over the steps since the last of them"
    else
        fail "moe fields of metrics.jsonl: $(grep -m1 '"train"' mtrain/metrics.jsonl)"
    fi
    expect_ok "moe-tiny, 6 steps" train "${common[@]}" "${moe[@]}" --steps 6 --checkpoint-dir mfull || return
    expect_ok "moe-tiny stopped at step 3" train "${common[@]}" "${moe[@]}" --steps 6 --stop-at 3 \
        --checkpoint-dir mpart || return
    expect_ok "moe-tiny resumed to step 6" train --data corpus.txt --tokenizer tok.bin --sample-tokens 0 \
        --eval-every 2 --eval-batches 1 --threads 2 --checkpoint-dir mpart --resume || return
    same_file "moe-tiny: resumed checkpoint bit-identical to the uninterrupted one" mfull/checkpoint.bin \
        mpart/checkpoint.bin
    losses_same "moe-tiny: losses of steps 1..6 identical" mfull/metrics.jsonl mpart/metrics.jsonl
    expect_ok "moe-tiny bf16, accum 2" train "${common[@]}" "${moe[@]}" --recipe bf16 --grad-accum 2 --steps 4 \
        --checkpoint-dir mfa || return
    expect_ok "moe-tiny bf16, accum 2, stopped at 2" train "${common[@]}" "${moe[@]}" --recipe bf16 --grad-accum 2 \
        --steps 4 --stop-at 2 --checkpoint-dir mpa || return
    expect_ok "moe-tiny bf16, accum 2, resumed" train "${common[@]}" --recipe bf16 --checkpoint-dir mpa --resume || return
    same_file "moe-tiny bf16 + accumulation: resumed bit-identical" mfa/checkpoint.bin mpa/checkpoint.bin
    expect_ok "moe-tiny fp8-blockwise-bf16wgrad" train "${common[@]}" "${moe[@]}" --recipe fp8-blockwise-bf16wgrad \
        --steps 2 --checkpoint-dir mwg || return
    cp mfull/checkpoint.bin mref.bin
    expect_fail "an moe-tiny checkpoint resumed as tiny" "is a 'moe-tiny' model, --model asks for 'tiny'" \
        train "${common[@]}" --model tiny --steps 8 --checkpoint-dir mfull --resume
    expect_ok "a tiny checkpoint" train "${common[@]}" --steps 1 --checkpoint-dir dense1 || return
    expect_fail "a tiny checkpoint resumed as moe-tiny" "is a 'tiny' model, --model asks for 'moe-tiny'" \
        train "${common[@]}" "${moe[@]}" --steps 2 --checkpoint-dir dense1 --resume
    same_file "the moe-tiny checkpoint is untouched by the refused resume" mref.bin mfull/checkpoint.bin
    # 2 ranks add their expert loads before each step, so they move the bias as one rank with both halves would
    expect_ok "moe-tiny, 1 rank x batch 2" train "${common[@]}" "${moe[@]}" --steps 4 --threads 1 \
        --checkpoint-dir mdp1 || return
    expect_ok "moe-tiny, 2 ranks x batch 1" train "${common[@]}" "${moe[@]}" --steps 4 --threads 1 --batch 1 \
        --data-parallel 2 --checkpoint-dir mdp2 || return
    losses_close "moe-tiny: 2 ranks x batch 1 track 1 rank x batch 2" mdp1/metrics.jsonl mdp2/metrics.jsonl 4
}

test_moe_cuda() {
    "$bin" train "${common[@]}" --device cuda --steps 1 --checkpoint-dir probe >out.txt 2>err.txt
    if grep -qF "no usable CUDA device" err.txt; then
        echo "SKIP: no CUDA device"
        exit 77
    fi
    local gpu=(--device cuda) moe=(--model moe-tiny --steps 6)
    for recipe in fp8-blockwise bf16 fp8-blockwise-bf16wgrad; do
        expect_ok "moe-tiny $recipe, CPU" train "${common[@]}" "${moe[@]}" --recipe $recipe --checkpoint-dir c$recipe ||
            return
        expect_ok "moe-tiny $recipe, GPU" train "${common[@]}" "${moe[@]}" "${gpu[@]}" --recipe $recipe \
            --checkpoint-dir g$recipe || return
        losses_close "moe-tiny $recipe: GPU losses within 2% of the CPU's" c$recipe/metrics.jsonl \
            g$recipe/metrics.jsonl 6 0.02
    done
    expect_ok "GPU: moe-tiny stopped at step 3" train "${common[@]}" "${moe[@]}" "${gpu[@]}" --stop-at 3 \
        --checkpoint-dir gmpart || return
    expect_ok "GPU: moe-tiny resumed" train "${common[@]}" "${gpu[@]}" --checkpoint-dir gmpart --resume || return
    same_file "GPU: moe-tiny resumed bit-identical to uninterrupted" gfp8-blockwise/checkpoint.bin \
        gmpart/checkpoint.bin
}

# ---------------------------------------------------------------------------
# ZeRO-1 on one device kind ($1 = cpu or cuda).
zero_checks() {
    local kind="$1" dev=(--device "$1") tag="${1}z"
    if [[ ! -f ${kind}dp1/metrics.jsonl ]]; then # (data_parallel_checks made it)
        expect_ok "$kind: --data-parallel 1, 4 steps" train "${common[@]}" "${dev[@]}" --data-parallel 1 --steps 4 \
            --checkpoint-dir "${kind}dp1" || return
    fi
    expect_ok "$kind: --data-parallel 1 --zero 1, 4 steps" train "${common[@]}" "${dev[@]}" --data-parallel 1 --zero 1 \
        --steps 4 --checkpoint-dir "${tag}1" || return
    grep -qF "ZeRO-1" out.txt || fail "$kind: the banner does not say ZeRO-1: $(head -n 1 out.txt)"
    losses_close "$kind: ZeRO-1 on one rank: the plain run's losses" "${kind}dp1/metrics.jsonl" "${tag}1/metrics.jsonl" 4 1e-5
    [[ $kind == cuda && ${gpus:-0} -lt 2 ]] && { echo "SKIP: 2-rank ZeRO-1 GPU checks: ${gpus:-0} GPU(s) here"; return; }
    local ranks
    for ranks in 2 3; do # 3: shards of unequal size
        [[ $kind == cuda && $ranks -gt ${gpus:-0} ]] && continue
        local r=(--batch 1 --steps 6 --data-parallel "$ranks")
        expect_ok "$kind: $ranks ranks, plain" train "${common[@]}" "${dev[@]}" "${r[@]}" --checkpoint-dir "${tag}p$ranks" || return
        expect_ok "$kind: $ranks ranks, ZeRO-1" train "${common[@]}" "${dev[@]}" "${r[@]}" --zero 1 \
            --checkpoint-dir "${tag}z$ranks" || return
        losses_close "$kind: ZeRO-1 on $ranks ranks: the losses of plain data parallelism" "${tag}p$ranks/metrics.jsonl" \
            "${tag}z$ranks/metrics.jsonl" 6 1e-5
    done
    local two=(--batch 1 --steps 6 --data-parallel 2 --zero 1)
    expect_ok "$kind: ZeRO-1 on 2 ranks stopped at step 3" train "${common[@]}" "${dev[@]}" "${two[@]}" --stop-at 3 \
        --checkpoint-dir "${tag}part" || return
    cp -r "${tag}part" "${tag}plainpart"
    expect_ok "$kind: ZeRO-1 resumed" train --data corpus.txt --tokenizer tok.bin --sample-tokens 0 --eval-every 2 \
        --eval-batches 1 --threads 2 "${dev[@]}" --zero 1 --checkpoint-dir "${tag}part" --resume || return
    same_file "$kind: ZeRO-1 stopped + resumed is bit-identical to uninterrupted" "${tag}z2/checkpoint.bin" \
        "${tag}part/checkpoint.bin"
    expect_ok "$kind: a ZeRO-1 checkpoint resumed without ZeRO" train --data corpus.txt --tokenizer tok.bin \
        --sample-tokens 0 --eval-every 2 --eval-batches 1 --threads 2 "${dev[@]}" --checkpoint-dir "${tag}plainpart" \
        --resume || return
    losses_close "$kind: the same file format: plain data parallelism continues a ZeRO-1 run" "${tag}z2/metrics.jsonl" \
        "${tag}plainpart/metrics.jsonl" 6 1e-5
}

test_zero() {
    zero_checks cpu
    # an MoE model: the selection biases stay out of the sharded AdamW and move after the gather, the loads
    # summed over the ranks, so the checkpoint is the plain run's byte for byte
    local moe=(--model moe-tiny --steps 4 --batch 2 --threads 1 --data-parallel 2)
    expect_ok "moe-tiny, 2 ranks" train "${common[@]}" "${moe[@]}" --checkpoint-dir zmoe0 || return
    expect_ok "moe-tiny, 2 ranks, --zero 1" train "${common[@]}" "${moe[@]}" --zero 1 --checkpoint-dir zmoe1 || return
    same_file "moe-tiny: ZeRO-1 bit-identical to plain data parallelism" zmoe0/checkpoint.bin zmoe1/checkpoint.bin
    expect_usage "--zero 1 shards the optimizer over data-parallel ranks" train "${common[@]}" --zero 1 \
        --checkpoint-dir zbad
    expect_usage "--zero must be between 0 and 1 (got 2)" train "${common[@]}" --zero 2 --data-parallel 2 \
        --checkpoint-dir zbad
}

# ---------------------------------------------------------------------------
# Ranks started as a launcher starts them.

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + RANDOM % 30000))
}

# launch_pair DIR args...: ranks 0 and 1 of 2 on 127.0.0.1, run directory DIR; their stdout and stderr in
# DIR.<rank>.out / .err, their exit codes in rc0 and rc1 (124: one hung).
launch_pair() {
    local dir="$1" port
    shift
    port=$(free_port)
    WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 LOCAL_RANK=1 timeout 120 "$bin" train "$@" \
        --checkpoint-dir "$dir" >"$dir.1.out" 2>"$dir.1.err" &
    local pid1=$!
    WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 LOCAL_RANK=0 timeout 120 "$bin" train "$@" \
        --checkpoint-dir "$dir" >"$dir.0.out" 2>"$dir.0.err"
    rc0=$?
    wait $pid1
    rc1=$?
}

launched_ok() { # launched_ok "what" DIR: both ranks ended well
    checks=$((checks + 1))
    if [[ $rc0 -eq 0 && $rc1 -eq 0 ]]; then
        echo "ok   $1"
    else
        fail "$1: exit codes $rc0 $rc1: $(cat "$2.0.err" "$2.1.err")"
        return 1
    fi
}

test_launch() {
    local two=(--batch 1 --steps 6)
    expect_ok "--data-parallel 2, 6 steps" train "${common[@]}" "${two[@]}" --data-parallel 2 --checkpoint-dir lref || return
    launch_pair lenv "${common[@]}" "${two[@]}"
    launched_ok "2 launched ranks, 6 steps" lenv || return
    grep -qF "data parallel over 2 launched cpu ranks (TCP)" lenv.0.out ||
        fail "the banner does not say launched ranks: $(head -n 1 lenv.0.out)"
    [[ -s lenv.1.out ]] && fail "rank 1 printed on stdout: $(head -n 3 lenv.1.out)"
    same_file "launched ranks are bit-identical to --data-parallel 2" lref/checkpoint.bin lenv/checkpoint.bin
    expect_ok "--data-parallel 2 --zero 1" train "${common[@]}" "${two[@]}" --data-parallel 2 --zero 1 \
        --checkpoint-dir lzref || return
    launch_pair lzenv "${common[@]}" "${two[@]}" --zero 1
    launched_ok "2 launched ranks, ZeRO-1" lzenv || return
    same_file "launched ZeRO-1 ranks are bit-identical to forked ones" lzref/checkpoint.bin lzenv/checkpoint.bin
    launch_pair lenv "${common[@]}" --batch 1 --steps 8 --resume
    launched_ok "2 launched ranks resumed" lenv
    grep -qF "resumed from lenv/checkpoint.bin at step 6" lenv.0.out || fail "no resume line: $(cat lenv.0.out)"

    # rank 1 exits abruptly: rank 0 stops at once, naming it
    local t0=$SECONDS
    launch_pair ldie "${common[@]}" --batch 1 --steps 8 --inject-rank-exit 5
    checks=$((checks + 1))
    if [[ $rc0 -eq 1 && $rc1 -eq 3 ]] && grep -qF "step 5: data parallel: rank 1 closed its connection" ldie.0.err; then
        echo "ok   launched rank 1 exits: rank 0 stops (rc 1 after $((SECONDS - t0)) s): $(cat ldie.0.err)"
    else
        fail "launched rank 1 exits: exit codes $rc0 $rc1 (124 = hung): $(cat ldie.0.err ldie.1.err)"
    fi
    # rank 0 is killed: rank 1 stops, naming it
    local port pid0 pid1
    port=$(free_port)
    local slow=(train "${common[@]}" --batch 1 --threads 1 --grad-accum 8 --steps 100000 --log-every 1 --eval-every 0
                --checkpoint-every 0 --checkpoint-dir lkill)
    WORLD_SIZE=2 MASTER_PORT=$port RANK=1 timeout 120 "$bin" "${slow[@]}" >lkill.1.out 2>lkill.1.err &
    pid1=$!
    WORLD_SIZE=2 MASTER_PORT=$port RANK=0 "$bin" "${slow[@]}" >lkill.0.out 2>lkill.0.err &
    pid0=$!
    wait_for lkill.0.out '^step +2/' 120 || fail "rank 0 did not reach step 2: $(cat lkill.0.out lkill.*.err)"
    kill -KILL $pid0
    { wait $pid0; } 2>/dev/null # (no "Killed" from the shell)
    wait $pid1
    rc1=$?
    checks=$((checks + 1))
    if [[ $rc1 -eq 1 ]] && grep -qF "rank 1: step" lkill.1.err && grep -qF "rank 0 closed its connection" lkill.1.err; then
        echo "ok   launched rank 0 killed: rank 1 stops: $(cat lkill.1.err)"
    else
        fail "launched rank 0 killed: rank 1 exit code $rc1 (124 = hung): $(cat lkill.1.err)"
    fi

    # one rank of one: the plain run
    expect_ok "plain run, 4 steps" train "${common[@]}" --steps 4 --checkpoint-dir lone || return
    RANK=0 WORLD_SIZE=1 "$bin" train "${common[@]}" --steps 4 --checkpoint-dir lone1 >out.txt 2>err.txt
    checks=$((checks + 1))
    [[ $? -eq 0 ]] && echo "ok   RANK=0 WORLD_SIZE=1" || fail "RANK=0 WORLD_SIZE=1: $(cat err.txt)"
    same_file "one launched rank is bit-identical to the plain run" lone/checkpoint.bin lone1/checkpoint.bin
    export RANK=0
    expect_usage "a launcher sets both RANK and WORLD_SIZE; only RANK is set" train "${common[@]}" --checkpoint-dir lbad
    export WORLD_SIZE=2
    expect_usage "each process is one rank: leave --data-parallel out" train "${common[@]}" --data-parallel 2 \
        --checkpoint-dir lbad
    export RANK=2
    expect_fail "RANK 2 of WORLD_SIZE 2" "a rank 0 <= RANK < WORLD_SIZE" train "${common[@]}" --checkpoint-dir lbad
    unset RANK WORLD_SIZE
}

case "$group" in
    zero) test_zero ;;
    launch) test_launch ;;
    cuda) test_cuda ;;
    dp) test_data_parallel ;;
    dp_cuda) test_data_parallel_cuda ;;
    moe) test_moe ;;
    moe_cuda) test_moe_cuda ;;
    usage) test_usage ;;
    resume) test_resume ;;
    bad) test_bad_input ;;
    rundir) test_run_dir ;;
    tools) test_tools ;;
    all) test_usage; test_resume; test_bad_input; test_run_dir; test_tools ;;
    *) echo "unknown group '$group'" >&2; exit 2 ;;
esac
echo "train_cli ($group): $checks checks, $failures failed"
[[ $failures -eq 0 && $checks -gt 0 ]]
