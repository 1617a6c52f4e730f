#!/usr/bin/env bash
# prepare_tokens.sh - the token file of the end-to-end bench (llama_e2e.py):
# the trainer's default corpus (scripts/prepare_corpus.sh: fortunes and the
# Debian Reference, ~3.4 MB of English), a byte-level BPE tokenizer of the 1b
# preset's vocabulary trained on it (`blockfp8 tokenize train`, ~1-5 min on
# two cores), and the corpus encoded with it as raw little-endian uint16 ids
# (~840k tokens, ~1.7 MB). The C trainer reads the same corpus with the same
# tokenizer (--data, --tokenizer), so both train on the same text.
#
#   bench/e2e/prepare_tokens.sh <blockfp8-program> <out-dir> [vocab-size]
#
# Writes <out-dir>/corpus.txt, tokenizer-<vocab>.bin and corpus-<vocab>.u16;
# steps whose output exists are skipped.
set -euo pipefail
usage="usage: $0 <blockfp8-program> <out-dir> [vocab-size]"
cli=${1:?$usage}
out=${2:?$usage}
vocab=${3:-32768}
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
corpus="$out/corpus.txt"
tokenizer="$out/tokenizer-$vocab.bin"
tokens="$out/corpus-$vocab.u16"
[[ -s $corpus ]] || bash "$repo_root/scripts/prepare_corpus.sh" "$corpus"
[[ -s $tokenizer ]] || "$cli" tokenize train --data "$corpus" --vocab-size "$vocab" --out "$tokenizer"
if [[ ! -s $tokens ]]; then
    "$cli" tokenize encode --tokenizer "$tokenizer" "$corpus" |
        python3 -c 'import sys, array; a = array.array("H", map(int, sys.stdin.read().split()))
assert sys.byteorder == "little"
sys.stdout.buffer.write(a.tobytes())' > "$tokens.tmp"
    mv "$tokens.tmp" "$tokens"
fi
echo "prepare_tokens: $tokens ($(($(wc -c < "$tokens") / 2)) tokens of a $vocab-token vocabulary), $tokenizer"
