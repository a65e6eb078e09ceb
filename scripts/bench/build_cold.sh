#!/usr/bin/env bash
# Cold release builds of `pipe` and then of its two workers, as the
# README's first command does them: `pipe` alone, then `pipe-stage` when a
# data stage first runs, then `pipe-stage-train` when training must run,
# each into the same target directory. Two commits side by side, each in
# its own worktree and its own empty target directory, in alternating
# order over ROUNDS rounds, so that a drift of the shared machine falls on
# both sides.
#
#   scripts/bench/build_cold.sh BEFORE [AFTER] [ROUNDS]
#
# AFTER defaults to HEAD, ROUNDS to 1. libtorch comes from the project's
# bootstrap (.venv/ of this checkout), installed once before timing: the
# download is not part of what this measures. cargo's registry must be warm
# (run once before) or the first round pays the downloads.
# Prints one line per build: round, commit, unit, seconds, crates compiled,
# CPU seconds of cargo and all it ran (user + system), load average.
#
# TIMINGS=DIR also passes --timings and keeps each build's report as
# DIR/ROUND-SIDE-UNIT.html, whose units' durations say where a difference
# went (scripts/bench/timings_units.py sums them per crate).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

before=${1:?usage: build_cold.sh BEFORE [AFTER] [ROUNDS]}
after=${2:-HEAD}
rounds=${3:-1}

eval "$(scripts/bootstrap-libtorch.sh --print-env)"

work=$(mktemp -d /tmp/pipe-build-cold.XXXXXX)
cleanup() {
  for side in before after; do
    git -C "$repo" worktree remove --force "$work/$side" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

git worktree add --quiet --detach "$work/before" "$before"
git worktree add --quiet --detach "$work/after" "$after"

# One cargo build, timed; prints seconds, the count of crates compiled,
# CPU seconds and the load average at its end. With TIMINGS, its report
# is kept as $TIMINGS/$report.html.
timed_build() {
  local dir=$1 target=$2 report=$3
  shift 3
  local start end log times timings=()
  log=$(mktemp)
  times=$(mktemp)
  [[ -z ${TIMINGS:-} ]] || timings=(--timings)
  start=$(date +%s.%N)
  (cd "$dir" && CARGO_TARGET_DIR=$target /usr/bin/time -f '%U %S' -o "$times" \
    cargo build --release --locked "${timings[@]}" "$@" 2>"$log")
  end=$(date +%s.%N)
  printf '%.1f %d %.1f %s' "$(echo "$end - $start" | bc)" "$(grep -c '^ *Compiling ' "$log" || true)" \
    "$(awk '{ print $1 + $2 }' "$times")" "$(cut -d' ' -f1 /proc/loadavg)"
  if [[ -n ${TIMINGS:-} ]]; then
    mkdir -p "$TIMINGS"
    cp "$(ls -t "$target"/cargo-timings/cargo-timing-*.html | head -n 1)" "$TIMINGS/$report.html"
  fi
  rm -f "$log" "$times"
}

measure() {
  local round=$1 side=$2
  local dir=$work/$side target=$work/target-$side commit
  commit=$(git -C "$dir" rev-parse --short HEAD)
  rm -rf "$target"
  echo "$round $side $commit pipe $(timed_build "$dir" "$target" "$round-$side-pipe" -p pipe)"
  echo "$round $side $commit pipe-stage $(timed_build "$dir" "$target" "$round-$side-pipe-stage" \
    -p pipe-stages --bin pipe-stage)"
  echo "$round $side $commit pipe-stage-train $(timed_build "$dir" "$target" "$round-$side-pipe-stage-train" \
    -p pipe-train --bin pipe-stage-train)"
  rm -rf "$target"
}

echo "round side commit unit seconds crates cpu_seconds load"
for round in $(seq 1 "$rounds"); do
  if (( round % 2 == 1 )); then
    measure "$round" before
    measure "$round" after
  else
    measure "$round" after
    measure "$round" before
  fi
done
