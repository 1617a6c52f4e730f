#!/usr/bin/env bash
# check_isa.sh - the library must run on any x86-64 CPU: AVX/AVX2 (VEX or
# EVEX encoded) instructions may only appear in functions whose name ends in
# "_avx2", which the CPU reference calls only after
# __builtin_cpu_supports("avx2") (src/cpu/gemm_cpu.c, src/cpu/quantize_cpu.c).
# A stray -march flag or an unguarded intrinsic would put them elsewhere and
# crash a CI machine without AVX2 with SIGILL.
#
#   tests/api/check_isa.sh build/libblockfp8.so
set -euo pipefail
lib=${1:?usage: check_isa.sh path/to/libblockfp8.so}
if [[ $(uname -m) != x86_64 ]]; then echo "SKIP: not x86-64"; exit 77; fi
if ! command -v objdump > /dev/null; then
    if [[ ${CI:-} == true ]]; then echo "FAIL: objdump missing (binutils)"; exit 1; fi
    echo "SKIP: objdump missing (apt-get install binutils)"; exit 77
fi
# Per function: how many instructions use a ymm/zmm register or are VEX-only
# (mnemonics starting with v), outside the *_avx2 functions.
report=$(objdump -d --no-show-raw-insn "$lib" | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $2; next }
    NF >= 2 && ($2 ~ /^v[a-z]/ || $0 ~ /%[yz]mm/) { total++; if (fn !~ /_avx2>:$/) bad[fn]++ }
    END { for (f in bad) print "  " f, bad[f]; print "avx instructions:", total + 0 }')
echo "$report"
if grep -q '^  ' <<< "$report"; then
    echo "FAIL: AVX instructions outside the *_avx2 functions (listed above)"
    exit 1
fi
# Guard against a vacuous pass: the AVX2 paths must exist and be found.
if ! grep -q 'avx instructions: [1-9]' <<< "$report"; then
    echo "FAIL: no AVX2 path found in $lib (renamed? then update this check)"
    exit 1
fi
echo "check_isa: ok"
