#!/usr/bin/env bash
# The README's first command from a fresh clone with cold caches, for one
# or more commits in turn: each side clones this repository at its commit
# into a new directory, with an empty CARGO_HOME (every crate downloaded)
# and an empty PIP_CACHE_DIR (torch and the data wheels downloaded), and
# times `./pipe run pipelines/quickstart.yaml` from outside, start to the
# test accuracy. What issue 49 asks to bring under 5 minutes on 2 cores.
#
#   scripts/bench/readme_cold.sh COMMIT [COMMIT ...]
#
# Prints per commit: the wall time, then pipe's own lines on the way
# (each build's crates and time, libtorch's install, the run's total).
# Needs the package registries; nothing else from the machine's caches.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
for commit in "$@"; do
    work=$(mktemp -d /tmp/readme-cold.XXXXXX)
    git clone -q "$repo" "$work/clone"
    git -C "$work/clone" checkout -q "$commit"
    mkdir "$work/cargo-home" "$work/pip-cache"
    start=$(date +%s.%N)
    status=0
    (cd "$work/clone" && CARGO_HOME="$work/cargo-home" PIP_CACHE_DIR="$work/pip-cache" \
        ./pipe run pipelines/quickstart.yaml) > "$work/out.log" 2>&1 || status=$?
    end=$(date +%s.%N)
    seconds=$(echo "$end - $start" | bc)
    printf '%s: %.1f s (%d min %04.1f s), exit %d, load %s\n' "$(git -C "$repo" rev-parse --short "$commit")" \
        "$seconds" "$(echo "$seconds / 60" | bc)" "$(echo "$seconds % 60" | bc)" "$status" "$(cut -d' ' -f1 /proc/loadavg)"
    grep -E '^(built|libtorch ready)|ran in|accuracy' "$work/out.log" | sed 's/^/  /' || true
    # The clone's target, venv and caches are several GB.
    rm -rf "$work"
done
