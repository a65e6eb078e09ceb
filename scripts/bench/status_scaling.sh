#!/usr/bin/env bash
# Benchmark (b): `pipe status` of matrix pipelines of 1k, 10k and 100k
# stages (never run, so every stage is looked up in the cache and the run
# history), and of 1k and 10k after a run (every output stat'ed).
# The cost must grow linearly: compare time per stage across sizes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
command -v hyperfine >/dev/null || apt-get install -y -qq hyperfine >/dev/null
cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
pipe="$repo/target/release/pipe"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

matrix_pipeline() { # $1 = a values, $2 = b values  -> a*b stages
  python3 - "$1" "$2" <<'PY'
import sys
a, b = int(sys.argv[1]), int(sys.argv[2])
print("params: { scale: 3 }")
print("stages:")
print("  cell:")
print(f"    matrix: {{ a: [{', '.join(map(str, range(a)))}], b: [{', '.join(map(str, range(b)))}] }}")
print("    run: echo ${matrix.a} ${matrix.b} ${params.scale} > out/${matrix.a}/${matrix.b}.txt")
print("    outs: { cell: \"out/${matrix.a}/${matrix.b}.txt\" }")
PY
}

commands=()
for size in 1000:10:100 10000:100:100 100000:1000:100; do
  IFS=: read -r stages a b <<<"$size"
  mkdir -p "$work/never-$stages"
  matrix_pipeline "$a" "$b" >"$work/never-$stages/pipe.yaml"
  commands+=(-n "status never-run $stages" "$pipe -C $work/never-$stages status")
done
for size in 1000:10:100 10000:100:100; do
  IFS=: read -r stages a b <<<"$size"
  mkdir -p "$work/ran-$stages"
  matrix_pipeline "$a" "$b" >"$work/ran-$stages/pipe.yaml"
  "$pipe" -C "$work/ran-$stages" run -q -j "$(nproc)"
  commands+=(-n "status after-run $stages" "$pipe -C $work/ran-$stages status")
done
echo "pipe $("$pipe" --version | cut -d' ' -f2); $(nproc) cores"
hyperfine --warmup 1 --runs "${RUNS:-5}" --export-json "$work/result.json" --output=null "${commands[@]}"
python3 - "$work/result.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    stages = int(r["command"].split()[-1])
    print(f"{r['command']:28s} median {r['median']*1000:9.1f} ms   {r['median']*1e6/stages:7.1f} us/stage")
PY
