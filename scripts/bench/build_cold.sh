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
# Prints one line per build: round, commit, unit, seconds, crates compiled.
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

# One cargo build, timed; prints seconds and the count of crates compiled.
timed_build() {
  local dir=$1 target=$2
  shift 2
  local start end log
  log=$(mktemp)
  start=$(date +%s.%N)
  (cd "$dir" && CARGO_TARGET_DIR=$target cargo build --release --locked "$@" 2>"$log")
  end=$(date +%s.%N)
  printf '%.1f %d' "$(echo "$end - $start" | bc)" "$(grep -c '^ *Compiling ' "$log" || true)"
  rm -f "$log"
}

measure() {
  local round=$1 side=$2
  local dir=$work/$side target=$work/target-$side commit
  commit=$(git -C "$dir" rev-parse --short HEAD)
  rm -rf "$target"
  echo "$round $side $commit pipe $(timed_build "$dir" "$target" -p pipe)"
  echo "$round $side $commit pipe-stage $(timed_build "$dir" "$target" -p pipe-stages --bin pipe-stage)"
  echo "$round $side $commit pipe-stage-train $(timed_build "$dir" "$target" -p pipe-train --bin pipe-stage-train)"
  rm -rf "$target"
}

echo "round side commit unit seconds crates"
for round in $(seq 1 "$rounds"); do
  if (( round % 2 == 1 )); then
    measure "$round" before
    measure "$round" after
  else
    measure "$round" after
    measure "$round" before
  fi
done
