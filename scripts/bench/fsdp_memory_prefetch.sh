#!/usr/bin/env bash
# Benchmark: sharded training over a whole run, through `pipe` on the
# quickstart (MiniLM-L6, 128 tokens, fp32) with 2 and 3 CPU replicas (one
# process each over Gloo, sharing the cores):
#
# - the whole-run peak of parameter and gradient bytes per replica
#   (`memory.peak_params_grads_bytes`: the first step, and under fsdp its
#   validation and checkpoint too) for ddp, deepspeed_stage_2,
#   fsdp_shard_grad_op and fsdp;
# - fsdp with its prefetch off and on, interleaved, ROUNDS times: the
#   milliseconds per step by phase, `collective_ms` being the collective
#   time left exposed (the gathers a step waits for).
#
# One `pipe run` per configuration, then one table of the metrics (median
# over the rounds for the prefetch pairs).
#
#   scripts/bench/fsdp_memory_prefetch.sh
# Env: ROWS (training rows, default 384), ROUNDS (default 3).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
rows=${ROWS:-384}
rounds=${ROUNDS:-3}
cargo build --release --quiet -p pipe
pipe="${CARGO_TARGET_DIR:-$repo/target}/release/pipe"
date -u +%F
grep -m1 'model name' /proc/cpuinfo || true
echo "cores: $(nproc)"
results=$(mktemp)
# The quickstart with `fsdp_prefetch` as a param too (its data stages'
# keys are the quickstart's: their cached results are reused).
pipeline=pipelines/.fsdp-bench.yaml
trap 'rm -f "$results" "$pipeline"' EXIT
python3 - <<'PY'
text = open("pipelines/quickstart.yaml").read()
text = text.replace("    devices: 1\n", "    devices: 1\n    fsdp_prefetch: true\n", 1)
text = text.replace("      devices: ${params.train.devices}\n",
                    "      devices: ${params.train.devices}\n      fsdp_prefetch: ${params.train.fsdp_prefetch}\n", 1)
assert text.count("fsdp_prefetch") == 3, "the quickstart changed shape"
open("pipelines/.fsdp-bench.yaml", "w").write(text)
PY
train() {
    "$pipe" run "$pipeline" train --force train -S train.limit_train_samples="$rows" \
        -S train.strategy="$1" -S train.devices="$2" "${@:3}" >&2
    "$pipe" show --json | python3 -c '
import json, sys
run = json.load(sys.stdin)
m = next(s["metrics"] for s in run["stages"] if s["stage"] == "train")
print(json.dumps({k: m.get(k) for k in (
    "strategy", "memory.params_bytes", "memory.grads_bytes", "memory.optimizer_bytes",
    "memory.peak_params_grads_bytes", "communication.gathered_bytes_per_step",
    "throughput.forward_ms", "throughput.backward_ms", "throughput.collective_ms",
    "throughput.optimizer_ms", "throughput.other_ms", "samples_per_s", "val_acc")}))'
}
for devices in 2 3; do
    for strategy in ddp deepspeed_stage_2 fsdp_shard_grad_op fsdp; do
        echo "memory $devices $strategy $(train "$strategy" "$devices")" >>"$results"
    done
    for round in $(seq "$rounds"); do
        for prefetch in false true; do
            echo "prefetch-$prefetch $devices fsdp $(train fsdp "$devices" -S train.fsdp_prefetch="$prefetch")" >>"$results"
        done
    done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [line.split(" ", 3) for line in open(sys.argv[1])]
mb = lambda b: "%.1f MB" % (b / 1e6)
print("\n| replicas | strategy | params | gradients | AdamW state | whole-run peak params + grads | vs ddp |")
print("|--:|---|--:|--:|--:|--:|--:|")
for devices in ("2", "3"):
    group = [(kind, json.loads(m)) for kind, d, _, m in rows if d == devices]
    ddp = next(m for kind, m in group if m["strategy"] == "ddp")["memory.peak_params_grads_bytes"]
    seen = set()
    for kind, m in group:
        if m["strategy"] in seen: continue
        seen.add(m["strategy"])
        peak = m["memory.peak_params_grads_bytes"]
        print(f"| {devices} | {m['strategy']} | {mb(m['memory.params_bytes'])} | {mb(m['memory.grads_bytes'])} | "
              f"{mb(m['memory.optimizer_bytes'])} | {mb(peak)} | {peak / ddp:.2f} |")
print("\n| replicas | fsdp prefetch | forward ms | backward ms | collective ms (exposed) | optimizer ms | other ms | samples/s | rounds |")
print("|--:|---|--:|--:|--:|--:|--:|--:|--:|")
for devices in ("2", "3"):
    for kind in ("prefetch-false", "prefetch-true"):
        ms = [json.loads(m) for k, d, _, m in rows if k == kind and d == devices]
        med = lambda key: statistics.median(m[key] for m in ms)
        print(f"| {devices} | {kind.split('-')[1]} | {med('throughput.forward_ms'):.1f} | {med('throughput.backward_ms'):.1f} | "
              f"{med('throughput.collective_ms'):.1f} | {med('throughput.optimizer_ms'):.1f} | {med('throughput.other_ms'):.1f} | "
              f"{med('samples_per_s'):.1f} | {len(ms)} |")
PY
