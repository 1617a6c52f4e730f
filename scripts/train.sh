#!/usr/bin/env bash
# train.sh - the main job from a fresh checkout, in one command:
#   1. builds the `blockfp8` program: CPU backend only into build-cpu/, or,
#      when the options include `--device cuda`, with the CUDA backend into
#      build/ (needs nvcc; sm_90a),
#   2. makes the default corpus, data/corpus.txt, from Debian packages if it
#      is missing (scripts/prepare_corpus.sh; installs them with apt-get),
#   3. runs `blockfp8 train` with the given options; without any, the tiny
#      model, fp8-blockwise recipe, 300 steps, then a sample.
#
#   bash scripts/train.sh                          # the default run
#   bash scripts/train.sh --recipe bf16 --steps 100
#   bash scripts/train.sh --device cuda            # the same run on the GPU
#
# A fresh run replaces the checkpoint of an earlier run in the same
# --checkpoint-dir (runs/<model>-<recipe> by default); with --resume it
# continues it instead.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cuda=0
for ((i = 1; i <= $#; ++i)); do
  [[ ${!i} == --device ]] && { j=$((i + 1)); [[ ${!j:-} == cuda ]] && cuda=1; }
  [[ ${!i} == --device=cuda ]] && cuda=1
done
if ((cuda)); then
  build="${BFP8_BUILD_DIR:-$root/build}"
  backend=(-DBFP8_CUDA=ON)
  what="with the CUDA backend"
else
  build="${BFP8_BUILD_DIR:-$root/build-cpu}"
  backend=(-DBFP8_CUDA=OFF)
  what="CPU only"
fi

for tool in cmake cc; do
  command -v "$tool" >/dev/null || {
    echo "train.sh: '$tool' is missing; install it with: apt-get install -y cmake gcc make" >&2
    exit 1
  }
done
if [[ ! -f $build/CMakeCache.txt ]]; then
  echo "train.sh: configuring $build ($what)" >&2
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${backend[@]}" >/dev/null
fi
echo "train.sh: building blockfp8" >&2
cmake --build "$build" -j"$(nproc)" --target blockfp8_cli >/dev/null

cd "$root"
data=data/corpus.txt
for ((i = 1; i <= $#; ++i)); do # a --data FILE given by the user replaces the default corpus
  [[ ${!i} == --data ]] && { j=$((i + 1)); data="${!j:-}"; }
  [[ ${!i} == --data=* ]] && data="${!i#--data=}"
done
if [[ $data == data/corpus.txt && ! -s $data ]]; then
  bash scripts/prepare_corpus.sh
fi

extra=(--overwrite)
for arg in "$@"; do
  [[ $arg == --resume || $arg == --resume=* || $arg == --overwrite ]] && extra=()
done
exec "$build/tools/blockfp8" train "${extra[@]}" "$@"
