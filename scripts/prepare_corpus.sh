#!/usr/bin/env bash
# prepare_corpus.sh - assemble the default training corpus, data/corpus.txt,
# from English text that Debian ships as plain files:
#   fortunes             the fortune-cookie database (quotes, jokes, poems)
#   debian-reference-en  the Debian Reference manual (plain-text edition)
# Installs the two packages with apt-get when they are missing (needs root
# or sudo), then concatenates their text in a fixed order, so the corpus is
# byte-for-byte the same on every machine with the same package versions.
#
#   bash scripts/prepare_corpus.sh [OUTPUT]      (default: data/corpus.txt)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
output="${1:-$repo_root/data/corpus.txt}"
packages=(fortunes debian-reference-en)
fortune_dir=/usr/share/games/fortunes
reference_txt=/usr/share/debian-reference/debian-reference.en.txt.gz

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "prepare_corpus: installing ${missing[*]}" >&2
  if [[ $(id -u) -eq 0 ]]; then
    sudo_cmd=()
  elif command -v sudo >/dev/null; then
    sudo_cmd=(sudo)
  else
    echo "prepare_corpus: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  if ! "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; then
    "${sudo_cmd[@]}" apt-get update >/dev/null
    "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi
[[ -d $fortune_dir && -f $reference_txt ]] || {
  echo "prepare_corpus: expected $fortune_dir and $reference_txt after the install" >&2
  exit 1
}

mkdir -p "$(dirname "$output")"
tmp="$output.tmp.$$"
trap 'rm -f "$tmp"' EXIT
{
  # Every fortune file (not the .dat indexes, not the .u8 links), in byte
  # order of the names; the "%" separators become blank lines.
  find "$fortune_dir" -maxdepth 1 -type f ! -name '*.dat' -printf '%f\n' | LC_ALL=C sort |
    while read -r name; do
      sed 's/^%$//' "$fortune_dir/$name"
      printf '\n'
    done
  gzip -dc "$reference_txt"
} >"$tmp"
[[ -s $tmp ]] || { echo "prepare_corpus: the corpus came out empty" >&2; exit 1; }
mv "$tmp" "$output"
trap - EXIT
bytes=$(wc -c <"$output")
echo "prepare_corpus: wrote $output ($bytes bytes, sha256 $(sha256sum "$output" | cut -c1-16))"
