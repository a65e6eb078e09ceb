#!/usr/bin/env bash
# Loading pipelines, for two builds of pipe side by side, runs interleaved:
# what a change to the pipeline loader (interpolation, the values rule)
# costs. Two pipelines: the quickstart (`pipe validate
# pipelines/quickstart.yaml`, from the repository root), and a sweep of
# STAGES expansions whose command holds four references (`pipe validate`
# in a scratch project), where interpolation is most of the load.
# Usage: scripts/bench/load_before_after.sh BEFORE_PIPE AFTER_PIPE [STAGES]
#   RUNS (default 40 for the quickstart, a quarter of it for the sweep).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
before=$(realpath "$1")
after=$(realpath "$2")
stages=${3:-100000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/.pipe"
python3 - "$stages" "$work/pipe.yaml" <<'PY'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
seeds = n // 100
lrs = ", ".join(f"0.{i:03d}" for i in range(1, 101))
open(path, "w").write(
    "params: { epochs: 3, data: data/train.csv }\n"
    "stages:\n"
    "  fit:\n"
    f"    matrix: {{ lr: [{lrs}], seed: [{', '.join(str(s) for s in range(seeds))}] }}\n"
    "    run: python train.py --lr ${matrix.lr} --seed ${matrix.seed} --epochs ${params.epochs} --data ${params.data} > ${outs.out}\n"
    "    outs: { out: \"out/${matrix.lr}-${matrix.seed}.txt\" }\n"
)
PY
echo "$(nproc) cores; $(date -u +%F)"
python3 - "$before" "$after" "$repo" "$work" "${RUNS:-40}" "$stages" <<'PY'
import statistics, subprocess, sys, time
before, after, repo, work, runs, stages = sys.argv[1:7]
runs = int(runs)
cases = [
    ("quickstart", ["validate", "pipelines/quickstart.yaml"], repo, runs),
    (f"sweep of {int(stages):,} stages", ["validate"], work, max(3, runs // 4)),
]
for label, args, cwd, count in cases:
    times = {"before": [], "after": []}
    for index in range(count + 2):
        order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
        for side in order:
            pipe = before if side == "before" else after
            started = time.perf_counter()
            subprocess.run([pipe, *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if index >= 2:
                times[side].append(time.perf_counter() - started)
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    print(f"{label}: {count} interleaved runs each: medians before {b * 1e3:.1f} ms, after {a * 1e3:.1f} ms, after/before {a / b:.2f}")
PY
