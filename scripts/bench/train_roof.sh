#!/usr/bin/env bash
# Benchmark: the quickstart's train stage against the machine's fp32 GEMM
# roof at the training's own shapes, and against eager PyTorch doing the
# same work, in one run, the three interleaved round by round.
#
#   scripts/bench/train_roof.sh [TOKENS MODEL_DIR]
#
# TOKENS and MODEL_DIR default to a quickstart run's
# (.pipe/out/quickstart/tokenize/tokens, data/quickstart/all-MiniLM-L6-v2):
# run `./pipe run pipelines/quickstart.yaml` once first.
#
# Each round, in turn:
# - the roof: `train_roof gemm` (train/examples/train_roof.rs) times every
#   matrix product of a training step, forward and backward, at the shapes
#   of every 5th batch of the stage's epoch, with libtorch's matmuls alone;
# - pipe: the train stage's worker, `pipe-stage-train run` on the
#   invocation the engine gives the quickstart's train stage (a resume
#   directory included), timed from outside, start to exit; its
#   metrics.json gives the steps' FLOP/s and the stage's parts;
# - eager: scripts/bench/train_stage_eager.py, transformers + PyTorch
#   eager on the same batches (`train_roof plan`), validation included,
#   its checkpoint written, timed from outside the same way.
# The FLOPs are counted alike on all three (SequenceClassifier::train_flops:
# the matmuls of forward and backward as three forwards, padding included).
# Printed: each round, then the medians and the ratios.
#
# Env: ROUNDS (default 3), ROWS (limit_train_samples, default 4000),
#      THREADS (default the cores: what the engine gives a stage),
#      WORKER (the pipe-stage-train to time, default this checkout's release
#      build), BEFORE (another pipe-stage-train, an earlier build, timed in
#      the same rounds as a fourth side), REF_PYTHON (a python with torch 2.11 and transformers 4.57.6;
#      default .venv/bin/python after `bootstrap-libtorch.sh --with-transformers`).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
rounds=${ROUNDS:-3}
rows=${ROWS:-4000}
threads=${THREADS:-$(nproc)}
tokens=$(realpath "${1:-.pipe/out/quickstart/tokenize/tokens}")
model=$(realpath "${2:-data/quickstart/all-MiniLM-L6-v2}")
for needed in "$tokens/train.safetensors" "$model/model.safetensors"; do
    if [[ ! -f $needed ]]; then
        echo "error: no $needed; run ./pipe run pipelines/quickstart.yaml first" >&2
        exit 1
    fi
done

if [[ -n ${REF_PYTHON:-} ]]; then
    libtorch_env=$(scripts/bootstrap-libtorch.sh --print-env)
    python=$REF_PYTHON
else
    libtorch_env=$(scripts/bootstrap-libtorch.sh --with-transformers --print-env)
    python=$repo/.venv/bin/python
fi
eval "$libtorch_env"
target=${CARGO_TARGET_DIR:-$repo/target}
cargo build --release --quiet -p pipe-train --bin pipe-stage-train --example train_roof
worker=${WORKER:-$target/release/pipe-stage-train}
roof=$target/release/examples/train_roof

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$roof" plan "$tokens" "$rows" 123 32 >"$work/plan.json"
# The quickstart's train stage as the engine invokes it (pipelines/quickstart.yaml).
"$python" - "$work" "$tokens" "$model" "$rows" "$threads" <<'EOF'
import json, sys
work, tokens, model, rows, threads = sys.argv[1:6]
params = {
    "tokens": tokens, "model": model, "num_labels": 2, "epochs": 1, "batch_size": 32,
    "lr": 1e-4, "weight_decay": 0.01, "warmup_ratio": 0.0, "accumulate_grad_batches": 1,
    "gradient_clip_val": None, "seed": 123, "limit_train_samples": int(rows),
    "early_stopping_patience": None, "log_every_n_steps": 10, "tf32": False,
    "precision": "32-true", "strategy": "single", "communication_dtype": "float32",
    "fsdp_prefetch": True, "devices": 1, "num_nodes": 1, "process_group_backend": "auto",
    "collective_timeout": 60,
}
invocation = {
    "protocol": 1, "stage": "train", "uses": "train/classifier", "version": 1,
    "params": params, "output_dir": f"{work}/out", "scratch_dir": f"{work}/scratch",
    "project_root": work, "devices": [], "threads": int(threads), "resume_dir": f"{work}/resume",
}
json.dump(invocation, open(f"{work}/invocation.json", "w"))
EOF

now() { date +%s.%N; }
giga() { awk -v v="$(tail -1 "$1")" 'BEGIN {printf "%.1f", v / 1e9}'; }
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- train stages || echo ' + changes'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "worker: $worker; $rows rows, $threads threads, $rounds rounds"
run_roof() {
    PIPE_THREADS=$threads "$roof" gemm "$model" "$work/plan.json" >"$work/roof.json"
    jq -r '.flops_per_s' "$work/roof.json" >>"$work/roof"
}
# One timed run of a worker binary ($1) into the files named $2.*.
time_worker() {
    rm -rf "$work/out" "$work/scratch" "$work/resume"
    mkdir -p "$work/out" "$work/scratch"
    local started ended
    started=$(now)
    "$1" run --invocation "$work/invocation.json" >"$work/$2.events"
    ended=$(now)
    local metrics=$work/out/metrics.json
    awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.3f\n", b - a}' >>"$work/$2.stage"
    jq -r '.throughput.flops_per_s' "$metrics" >>"$work/$2.flops"
    jq -r '.epochs."1".epoch_seconds' "$metrics" >>"$work/$2.steps"
    jq -r '.epochs."1".val_seconds' "$metrics" >>"$work/$2.val"
    jq -r '.val_acc' "$metrics" >>"$work/$2.acc"
    jq -c '.stage_seconds // {}' "$metrics" >>"$work/$2.parts"
}
run_pipe() { time_worker "$worker" pipe; }
run_before() { time_worker "$BEFORE" before; }
run_eager() {
    rm -rf "$work/eager"
    local started ended
    started=$(now)
    OMP_NUM_THREADS=$threads "$python" scripts/bench/train_stage_eager.py \
        "$tokens" "$model" "$work/plan.json" 1e-4 "$work/eager" >"$work/eager.json" 2>"$work/eager.log"
    ended=$(now)
    awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.3f\n", b - a}' >>"$work/eager.stage"
    jq -r '.flops_per_s' "$work/eager.json" >>"$work/eager.flops"
    jq -r '.steps_seconds' "$work/eager.json" >>"$work/eager.steps"
    jq -r '.val_seconds' "$work/eager.json" >>"$work/eager.val"
    jq -r '.val_acc' "$work/eager.json" >>"$work/eager.acc"
}
for round in $(seq "$rounds"); do
    # Each side leads a round in turn: a neighbour's burst, or a cold
    # page cache, falls on all of them alike over the rounds.
    sides=(roof pipe eager)
    [[ -n ${BEFORE:-} ]] && sides+=(before)
    shift_by=$(( (round - 1) % ${#sides[@]} ))
    order=("${sides[@]:shift_by}" "${sides[@]:0:shift_by}")
    for side in "${order[@]}"; do "run_$side"; done
    printf '  round %d: roof %s GFLOP/s; pipe stage %.1f s (steps %.1f s at %s GFLOP/s, validation %.1f s); eager stage %.1f s (steps %.1f s at %s GFLOP/s, validation %.1f s); load %s\n' \
        "$round" "$(giga "$work/roof")" \
        "$(tail -1 "$work/pipe.stage")" "$(tail -1 "$work/pipe.steps")" "$(giga "$work/pipe.flops")" "$(tail -1 "$work/pipe.val")" \
        "$(tail -1 "$work/eager.stage")" "$(tail -1 "$work/eager.steps")" "$(giga "$work/eager.flops")" "$(tail -1 "$work/eager.val")" \
        "$(cut -d' ' -f1 /proc/loadavg)" >&2
    echo "    pipe's parts: $(tail -1 "$work/pipe.parts")" >&2
    if [[ -n ${BEFORE:-} ]]; then
        printf '    before: stage %.1f s (steps %.1f s at %s GFLOP/s, validation %.1f s)\n' \
            "$(tail -1 "$work/before.stage")" "$(tail -1 "$work/before.steps")" \
            "$(giga "$work/before.flops")" "$(tail -1 "$work/before.val")" >&2
    fi
done
median() { sort -g "$1" | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
roof=$(median "$work/roof")
pipe_flops=$(median "$work/pipe.flops")
eager_flops=$(median "$work/eager.flops")
pipe_stage=$(median "$work/pipe.stage")
eager_stage=$(median "$work/eager.stage")
awk -v roof="$roof" -v pf="$pipe_flops" -v ef="$eager_flops" -v ps="$pipe_stage" -v es="$eager_stage" \
    -v pv="$(median "$work/pipe.val")" -v ev="$(median "$work/eager.val")" \
    -v pa="$(median "$work/pipe.acc")" -v ea="$(median "$work/eager.acc")" -v r="$rounds" 'BEGIN {
    printf "medians of %d rounds:\n", r
    printf "  fp32 GEMM roof at the training shapes: %.1f GFLOP/s\n", roof / 1e9
    printf "  steps: pipe %.1f GFLOP/s (%.0f%% of the roof), eager %.1f GFLOP/s (%.0f%%): %.2fx\n", pf / 1e9, 100 * pf / roof, ef / 1e9, 100 * ef / roof, pf / ef
    printf "  stage: pipe %.1f s, eager %.1f s: %.2fx (validation %.1f s and %.1f s; val accuracy %.4f and %.4f)\n", ps, es, es / ps, pv, ev, pa, ea
}'
if [[ -n ${BEFORE:-} ]]; then
    awk -v bs="$(median "$work/before.stage")" -v ps="$pipe_stage" -v bf="$(median "$work/before.flops")" -v pf="$pipe_flops" \
        -v bv="$(median "$work/before.val")" -v pv="$(median "$work/pipe.val")" -v ba="$(median "$work/before.acc")" -v es="$eager_stage" 'BEGIN {
        printf "  before (%s): stage %.1f s (%.2fx eager), steps %.1f GFLOP/s, validation %.1f s (val accuracy %.4f); after/before: stage %.2fx, steps %.2fx, validation %.2fx\n", ENVIRON["BEFORE"], bs, es / bs, bf / 1e9, bv, ba, bs / ps, pf / bf, bv / pv
    }'
fi
