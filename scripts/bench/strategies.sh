#!/usr/bin/env bash
# Benchmark: the training strategies side by side on the quickstart
# (MiniLM-L6, 128 tokens, fp32), through `pipe`: single on one device, and
# ddp, deepspeed_stage_2, fsdp_shard_grad_op and fsdp on 2 CPU replicas (two
# processes over Gloo sharing the 2 cores: they show the algorithms' memory
# and overheads, not a speed-up over one device). One `pipe run` per
# strategy in the project, then `pipe compare` of those runs: memory per replica (params,
# gradients, AdamW state), samples/s, MFU against the measured CPU peak,
# milliseconds per step by phase, test accuracy.
#
#   scripts/bench/strategies.sh
# Env: ROWS (training rows, default 1024), STRATEGIES (default all five).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
rows=${ROWS:-1024}
strategies=${STRATEGIES:-single ddp deepspeed_stage_2 fsdp_shard_grad_op fsdp}
cargo build --release --quiet -p pipe
pipe="${CARGO_TARGET_DIR:-$repo/target}/release/pipe"
date -u +%F
grep -m1 'model name' /proc/cpuinfo || true
echo "cores: $(nproc)"
count=0
for strategy in $strategies; do
    devices=2
    [[ $strategy == single ]] && devices=1
    "$pipe" run pipelines/quickstart.yaml evaluate --force train -S "train.strategy=$strategy" \
        -S "train.devices=$devices" -S "train.limit_train_samples=$rows" >&2
    count=$((count + 1))
done
"$pipe" compare --last "$count" --md
