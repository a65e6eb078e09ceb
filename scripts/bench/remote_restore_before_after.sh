#!/usr/bin/env bash
# A fresh clone's restore of quickstart-shaped results from a `file://`
# remote, two builds of pipe side by side, runs interleaved: what a
# change to the pull, the checks of what is read back and the restore costs
# the CI job that only restores.
#
# The results: command stages shaped as the quickstart's outputs are (no
# libtorch needed): a model directory (an 87 MiB weights file, a tokenizer
# of 0.7 MiB, a config), a dataset of 14,000 JSON lines, its three splits,
# a metrics file. The first build runs the pipeline once and pushes it;
# each timed run then starts from a project with no `.pipe/` and no
# outputs, and `pipe run` restores every stage from the remote (objects
# pulled and hashed, then put in the workspace).
#
# Usage: scripts/bench/remote_restore_before_after.sh BEFORE_PIPE AFTER_PIPE
#   RUNS=10 (default)
set -euo pipefail
before=$(realpath "$1")
after=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/remote" "$work/seed"
cat > "$work/seed/pipe.yaml" <<YAML
cache:
  remote: file://$work/remote
stages:
  model:
    run: >-
      mkdir -p model && head -c 91226112 /dev/urandom > model/model.safetensors
      && head -c 711661 /dev/urandom > model/tokenizer.json
      && echo '{"hidden_size": 384}' > model/config.json
    outs: [model]
  dataset:
    run: >-
      mkdir -p dataset && python3 -c "import json;
      [print(json.dumps({'text': 'review %d ' % i * 8, 'label': i % 2})) for i in range(14000)]"
      > dataset/data.jsonl
    outs: [dataset]
  split:
    run: >-
      mkdir -p split && head -n 9800 dataset/data.jsonl > split/train.jsonl
      && sed -n 9801,11200p dataset/data.jsonl > split/val.jsonl
      && tail -n 2800 dataset/data.jsonl > split/test.jsonl
    deps: [dataset]
    outs: [split]
  score:
    run: >-
      echo '{"accuracy": 0.806}' > metrics.json
    deps: [model, split]
    metrics: [metrics.json]
YAML
(cd "$work/seed" && "$before" run -q)
for side in before after; do
  mkdir -p "$work/$side"
  cp "$work/seed/pipe.yaml" "$work/$side/"
done
echo "$(du -sh "$work/remote" | cut -f1) in the remote; $(nproc) cores; $(date -u +%F)"
# Interleaved, as scripts/bench/noop_before_after.sh is, for the same
# reason: two blocks of runs drift apart on a shared machine.
python3 - "$before" "$after" "$work" "${RUNS:-10}" <<'PY'
import shutil, statistics, subprocess, sys, time
from pathlib import Path
before, after, work, runs = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
sides = {"before": before, "after": after}
times = {"before": [], "after": []}
for index in range(runs + 1):
    order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
    for side in order:
        project = work / side
        for leftover in [".pipe", "model", "dataset", "split", "metrics.json"]:
            path = project / leftover
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        started = time.perf_counter()
        subprocess.run([sides[side], "-C", str(project), "run", "-q"], check=True)
        if index >= 1:
            times[side].append(time.perf_counter() - started)
        assert (project / "model" / "model.safetensors").stat().st_size == 91226112
b, a = statistics.median(times["before"]), statistics.median(times["after"])
print(f"{runs} interleaved restores each: medians before {b * 1e3:.0f} ms, after {a * 1e3:.0f} ms, after/before {a / b:.2f}")
PY
