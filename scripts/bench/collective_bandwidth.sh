#!/usr/bin/env bash
# Benchmark: one 25 MiB all-reduce over 2 and 3 ranks on this machine,
# through libtorch's Gloo on loopback (what CPU ddp ranks do since
# 2026-12-02), side by side with the in-process LocalCollective it
# replaced, compiled from commit e50a857's train/src/ddp.rs into the same
# example binary. Ranks are threads of one process in both, so the
# difference is the collectives, not process start-up.
#
#   scripts/bench/collective_bandwidth.sh [RANKS] [ROUNDS]     (default 2,3 20)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
libtorch_env=$(scripts/bootstrap-libtorch.sh --print-env)
eval "$libtorch_env"
old="$repo/target/bench/local_collective_e50a857.rs"
mkdir -p "$(dirname "$old")"
# include!() takes items, not a module's inner doc comments.
git show e50a857:train/src/ddp.rs | grep -v '^//!' > "$old"
PIPE_OLD_DDP="$old" cargo rustc --quiet --release --locked -p pipe-train \
    --example collective_bandwidth -- --cfg pipe_bench_local >&2
date -u +%F
grep -m1 'model name' /proc/cpuinfo || true
echo "cores: $(nproc)"
"$repo/target/release/examples/collective_bandwidth" "${1:-2,3}" "${2:-20}"
