#!/usr/bin/env bash
# A fresh clone's restore of quickstart-shaped results from a `file://`
# remote, two builds of pipe side by side in one hyperfine run: what a
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
command -v hyperfine >/dev/null || apt-get install -y -qq hyperfine >/dev/null
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
    run: echo '{"accuracy": 0.806}' > metrics.json
    deps: [model, split]
    metrics: [metrics.json]
YAML
(cd "$work/seed" && "$before" run -q)
for side in before after; do
  mkdir -p "$work/$side"
  cp "$work/seed/pipe.yaml" "$work/$side/"
done
clean() { echo "rm -rf $work/$1/.pipe $work/$1/model $work/$1/dataset $work/$1/split $work/$1/metrics.json"; }
echo "$(du -sh "$work/remote" | cut -f1) in the remote; $(nproc) cores; $(date -u +%F)"
hyperfine --warmup 1 --runs "${RUNS:-10}" -N --export-json "$work/result.json" \
  --prepare "$(clean before)" -n before "$before -C $work/before run -q" \
  --prepare "$(clean after)" -n after "$after -C $work/after run -q"
python3 - "$work/result.json" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
before, after = results["before"]["median"], results["after"]["median"]
print(f"medians: before {before * 1e3:.0f} ms, after {after * 1e3:.0f} ms, after/before {after / before:.2f}")
PY
