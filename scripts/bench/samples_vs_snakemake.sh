#!/usr/bin/env bash
# A 200-sample workflow written as each tool's users write it, side by
# side in one run (issue 47): pipe's `matrix: { files: ... }` with
# `${stages.featurize@*.outs.feat}`, Snakemake's `glob_wildcards` with
# `expand`. Same shell commands in both (clean, featurize per sample;
# one aggregation). Rounds are interleaved; medians and ratios printed.
#
#   scripts/bench/samples_vs_snakemake.sh [ROUNDS]     (default 3)
#
# Needs target/release/pipe and snakemake (scripts/bench/venv.sh, or
# PIPE_BENCH_SNAKEMAKE=path).
set -euo pipefail
rounds=${1:-3}
here=$(cd "$(dirname "$0")/../.." && pwd)
pipe=${PIPE_BIN:-$here/target/release/pipe}
snakemake=${PIPE_BENCH_SNAKEMAKE:-$HOME/.cache/pipe-bench/venv/bin/snakemake}
samples=200
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make_data() {
  mkdir -p "$1/data/raw"
  for i in $(seq -w 0 $((samples - 1))); do echo "sample $i" > "$1/data/raw/S$i.txt"; done
}

make_pipe() {
  make_data "$1"
  cp "$here/examples/samples/pipe.yaml" "$1/"
  (cd "$1" && git init -q && git add -A && git -c user.email=b@b -c user.name=b commit -qm data)
}

make_snakemake() {
  make_data "$1"
  cp "$here/examples/samples/Snakefile" "$1/"
}

ms() { date +%s%N; }
declare -A times
timed() { # name dir command...
  local name=$1 dir=$2; shift 2
  local start end
  start=$(ms)
  (cd "$dir" && "$@" >/dev/null 2>&1)
  end=$(ms)
  times[$name]+="$(( (end - start) / 1000000 )) "
}

run_pipe() { timed "pipe $1" "$2" "$pipe" run -j 2; }
run_snake() { timed "snakemake $1" "$2" "$snakemake" -j 2 --quiet all; }

steps=(cold no-op edit add delete)
for round in $(seq "$rounds"); do
  for tool in pipe snake; do
    dir=$work/$tool-$round
    mkdir -p "$dir"
    if [ $tool = pipe ]; then make_pipe "$dir"; runner=run_pipe; else make_snakemake "$dir"; runner=run_snake; fi
    $runner cold "$dir"
    $runner no-op "$dir"
    echo "sample 42, edited" > "$dir/data/raw/S042.txt"
    $runner edit "$dir"
    echo "sample 200" > "$dir/data/raw/S200.txt"
    $runner add "$dir"
    rm "$dir/data/raw/S007.txt"
    $runner delete "$dir"
    grep -q S007 "$dir/results/summary.txt" && echo "warning: $tool's summary still names the deleted sample" >&2
    grep -q S200 "$dir/results/summary.txt" || echo "warning: $tool's summary misses the added sample" >&2
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '%-8s %12s %14s %8s\n' step pipe_ms snakemake_ms ratio
for step in "${steps[@]}"; do
  p=$(echo "${times[pipe $step]}" | median)
  s=$(echo "${times[snakemake $step]}" | median)
  printf '%-8s %12s %14s %7.1fx\n' "$step" "$p" "$s" "$(echo "$s / ($p + 0.0001)" | bc -l)"
done
echo "($samples samples, $((2 * samples + 1)) stages/jobs, -j 2, $rounds rounds interleaved; $(nproc) cores; $("$snakemake" --version | head -1) )"
