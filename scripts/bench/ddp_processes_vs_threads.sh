#!/usr/bin/env bash
# Benchmark: ddp on 2 CPU replicas, the same invocation through two
# training workers side by side: this checkout's, whose replicas are two
# processes on libtorch's Gloo, and commit e50a857's, whose replicas were
# two threads of one process taking turns for the cores over the
# hand-written LocalCollective. Alternating runs; samples/s of the training
# steps (metrics' throughput.samples_per_s), medians and their ratio.
#
#   TOKENS=.pipe/out/quickstart/tokenize MODEL=data/quickstart/all-MiniLM-L6-v2 \
#     scripts/bench/ddp_processes_vs_threads.sh
#
# TOKENS and MODEL: the quickstart's tokenize output and model (the
# README's first command makes both). Env: ROWS (training rows, 512),
# RUNS (per worker, 3), NEW_WORKER and OLD_WORKER (built here when unset;
# the old one in target/bench-old from a worktree of e50a857).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
: "${TOKENS:?set TOKENS to the quickstart tokenize output}"
: "${MODEL:?set MODEL to the quickstart model directory}"
rows=${ROWS:-512}
runs=${RUNS:-3}
libtorch_env=$(scripts/bootstrap-libtorch.sh --print-env)
eval "$libtorch_env"
if [[ -z "${NEW_WORKER:-}" ]]; then
    cargo build --release --quiet --locked -p pipe-train --bin pipe-stage-train >&2
    NEW_WORKER="$repo/target/release/pipe-stage-train"
fi
if [[ -z "${OLD_WORKER:-}" ]]; then
    old_tree="$repo/target/bench-old/tree"
    [[ -d $old_tree ]] || git worktree add -f "$old_tree" e50a857 >&2
    (cd "$old_tree" && CARGO_TARGET_DIR="$repo/target/bench-old" \
        cargo build --release --quiet --locked -p pipe-train --bin pipe-stage-train >&2)
    OLD_WORKER="$repo/target/bench-old/release/pipe-stage-train"
fi
tokens=$(cd "$TOKENS" && pwd)
model=$(cd "$MODEL" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

run() { # WORKER NAME -> samples/s
    local dir="$scratch/$2"
    rm -rf "$dir"
    mkdir -p "$dir"
    python3 - "$dir" "$tokens" "$model" "$rows" >"$dir/invocation.json" <<'EOF'
import json, sys
dir, tokens, model, rows = sys.argv[1:]
print(json.dumps({
    "protocol": 1, "stage": "train", "uses": "train/classifier", "version": 1,
    "params": {"tokens": tokens, "model": model, "num_labels": 2, "epochs": 1,
               "batch_size": 16, "lr": 1e-4, "seed": 123, "limit_train_samples": int(rows),
               "precision": "32-true", "strategy": "ddp", "devices": 2},
    "output_dir": f"{dir}/out", "scratch_dir": f"{dir}/scratch", "project_root": dir,
    "devices": [], "threads": 2,
}))
EOF
    "$1" run --invocation "$dir/invocation.json" >"$dir/events" 2>"$dir/stderr"
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["throughput"]["samples_per_s"])' "$dir/out/metrics.json"
}

date -u +%F
grep -m1 'model name' /proc/cpuinfo || true
echo "cores: $(nproc); $rows rows, batch 16 per replica, 2 replicas, fp32"
new=()
old=()
for i in $(seq "$runs"); do
    new+=("$(run "$NEW_WORKER" "new-$i")")
    old+=("$(run "$OLD_WORKER" "old-$i")")
    echo "run $i: processes (Gloo) ${new[-1]} samples/s, threads (LocalCollective) ${old[-1]} samples/s"
done
python3 - "${new[*]}" "${old[*]}" <<'EOF'
import statistics, sys
new = [float(x) for x in sys.argv[1].split()]
old = [float(x) for x in sys.argv[2].split()]
n, o = statistics.median(new), statistics.median(old)
print(f"median: processes {n:.2f} samples/s, threads {o:.2f} samples/s, processes/threads {n / o:.2f}x")
EOF
