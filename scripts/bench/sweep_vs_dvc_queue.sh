#!/usr/bin/env bash
# An 8-combination sweep of a DVC "get started"-shaped project whose
# scripts read params.yaml themselves (prepare -> featurize -> train ->
# evaluate; train sleeps TRAIN_SLEEP seconds for the work a model does):
#   pipe:  pipe run -m -j 2 -S train.n_est=20,100 -S train.max_depth=4,12 -S featurize.k=6,20
#          (one run, a work tree per combination, in parallel)
#   dvc:   dvc exp run --queue -S ... x8, then dvc queue start -j 2, waited for
# both from an empty cache in a fresh clone of the same repository, and
# what a work tree per combination costs against the serial form (the 8
# combinations as 8 plain `pipe run -S` in turn, what the user had to do
# before), with a stage that does nothing (TRAIN_SLEEP=0). Rounds
# interleaved; medians and ratios.
# Usage: scripts/bench/sweep_vs_dvc_queue.sh [PIPE]   (default target/release/pipe)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
pipe=$(realpath "${1:-$repo/target/release/pipe}")
rounds=${ROUNDS:-3}
venv="${PIPE_BENCH_VENV:-$HOME/.cache/pipe-bench/venv}"
if [ ! -x "$venv/bin/dvc" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q dvc pyyaml
fi
"$venv/bin/python" -c 'import yaml' 2>/dev/null || "$venv/bin/pip" install -q pyyaml
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

project() { # DIR TRAIN_SLEEP
  local dir=$1 sleep_s=$2 python="$venv/bin/python"
  mkdir -p "$dir/src" "$dir/data"
  python3 - "$dir/data/data.csv" <<'PY'
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as out:
    out.write("f1,f2,f3,label\n")
    for _ in range(2000):
        row = [random.random() for _ in range(3)]
        out.write(",".join(f"{v:.4f}" for v in row) + f",{int(sum(row) > 1.5)}\n")
PY
  cat > "$dir/params.yaml" <<'YAML'
prepare:
  split: 0.2
featurize:
  k: 6
train:
  n_est: 50
  max_depth: 4
YAML
  cat > "$dir/src/prepare.py" <<'PY'
import csv, json, os, yaml
p = yaml.safe_load(open("params.yaml"))["prepare"]
rows = list(csv.reader(open("data/data.csv")))[1:]
n = int(len(rows) * p["split"])
os.makedirs("data/prepared", exist_ok=True)
json.dump(rows[n:], open("data/prepared/train.json", "w"))
json.dump(rows[:n], open("data/prepared/test.json", "w"))
PY
  cat > "$dir/src/featurize.py" <<'PY'
import json, os, yaml
k = yaml.safe_load(open("params.yaml"))["featurize"]["k"]
os.makedirs("data/features", exist_ok=True)
for part in ("train", "test"):
    rows = json.load(open(f"data/prepared/{part}.json"))
    json.dump([[round(float(v) * k) / k for v in row[:3]] + [int(row[3])] for row in rows], open(f"data/features/{part}.json", "w"))
PY
  cat > "$dir/src/train.py" <<PY
import json, time, yaml
p = yaml.safe_load(open("params.yaml"))["train"]
rows = json.load(open("data/features/train.json"))
time.sleep($sleep_s)
json.dump({"threshold": 1.5 + (p["n_est"] - 50) / 1000 + (p["max_depth"] - 8) / 100}, open("model.json", "w"))
PY
  cat > "$dir/src/evaluate.py" <<'PY'
import json, os
m = json.load(open("model.json"))
rows = json.load(open("data/features/test.json"))
acc = sum((sum(r[:3]) > m["threshold"]) == r[3] for r in rows) / len(rows)
os.makedirs("eval", exist_ok=True)
json.dump({"accuracy": acc}, open("eval/metrics.json", "w"))
PY
  cat > "$dir/dvc.yaml" <<YAML
stages:
  prepare:
    cmd: $python src/prepare.py
    deps: [src/prepare.py, data/data.csv]
    params: [prepare]
    outs: [data/prepared]
  featurize:
    cmd: $python src/featurize.py
    deps: [src/featurize.py, data/prepared]
    params: [featurize]
    outs: [data/features]
  train:
    cmd: $python src/train.py
    deps: [src/train.py, data/features]
    params: [train]
    outs: [model.json]
  evaluate:
    cmd: $python src/evaluate.py
    deps: [src/evaluate.py, model.json, data/features]
    metrics:
      - eval/metrics.json:
          cache: false
YAML
  sed -e 's/^    cmd:/    run:/' "$dir/dvc.yaml" > "$dir/pipe.yaml"
  (cd "$dir" && git init -q && git add -A &&
    git -c user.name=b -c user.email=b@example.invalid commit -qm init &&
    "$venv/bin/dvc" init -q && "$venv/bin/dvc" config core.analytics false &&
    git add -A && git -c user.name=b -c user.email=b@example.invalid commit -qm dvc)
}

axes=(-S train.n_est=20,100 -S train.max_depth=4,12 -S featurize.k=6,20)
combos=()
for n in 20 100; do for d in 4 12; do for k in 6 20; do
  combos+=("-S train.n_est=$n -S train.max_depth=$d -S featurize.k=$k")
done; done; done

project "$work/base" "${TRAIN_SLEEP:-0.5}"
project "$work/noop" 0
echo "pipe $("$pipe" --version | cut -d' ' -f2), $("$venv/bin/dvc" --version) (dvc); 8 combinations, -j 2; train sleeps ${TRAIN_SLEEP:-0.5}s; $(nproc) cores; $(date -u +%F)"

python3 - "$pipe" "$venv/bin/dvc" "$work" "$rounds" "${axes[@]}" -- "${combos[@]}" <<'PY'
import os, shutil, statistics, subprocess, sys, time
pipe, dvc, work, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
# DVC's queue starts its workers as `dvc` from PATH.
os.environ["PATH"] = os.path.dirname(dvc) + os.pathsep + os.environ["PATH"]
rest = sys.argv[5:]
cut = rest.index("--")
axes, combos = rest[:cut], rest[cut + 1:]

def fresh(name, base):
    dir = f"{work}/{name}"
    shutil.rmtree(dir, ignore_errors=True)
    # .dvc/ is committed in the base, so the clone is a DVC project with
    # an empty cache, as a teammate's fresh clone is.
    subprocess.run(["git", "clone", "-q", f"{work}/{base}", dir], check=True)
    return dir

def run(args, cwd):
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} in {cwd}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout

def timed(args, cwd):
    start = time.perf_counter()
    run(args, cwd)
    return time.perf_counter() - start

def dvc_queue(cwd):
    start = time.perf_counter()
    for combo in combos:
        run([dvc, "exp", "run", "--queue", *combo.split()], cwd)
    run([dvc, "queue", "start", "-j", "2"], cwd)
    while True:
        status = run([dvc, "queue", "status"], cwd)
        states = [line.split()[-1] for line in status.splitlines() if len(line.split()) >= 4 and line.split()[-1] in ("Queued", "Running", "Success", "Failed")]
        if states and not any(state in ("Queued", "Running") for state in states):
            break
        time.sleep(0.2)
    took = time.perf_counter() - start
    done = states.count("Success")
    if done != len(combos):
        sys.exit(f"dvc finished {done} of {len(combos)} experiments:\n{status}")
    subprocess.run([dvc, "queue", "stop"], cwd=cwd, capture_output=True)
    return took

times = {"pipe": [], "dvc": [], "trees": [], "serial": []}
for _ in range(rounds):
    times["pipe"].append(timed([pipe, "run", "-q", "-m", "-j", "2", *axes], fresh("pipe", "base")))
    times["dvc"].append(dvc_queue(fresh("dvc", "base")))
    times["trees"].append(timed([pipe, "run", "-q", "-m", "-j", "1", *axes], fresh("trees", "noop")))
    serial = fresh("serial", "noop")
    start = time.perf_counter()
    for combo in combos:
        run([pipe, "run", "-q", *combo.split()], serial)
    times["serial"].append(time.perf_counter() - start)
m = {side: statistics.median(values) for side, values in times.items()}
print(f"pipe run -m -j 2 (one run, work trees): median {m['pipe']:.2f} s  {times['pipe']}")
print(f"dvc exp run --queue x8 + queue start -j 2: median {m['dvc']:.2f} s  {times['dvc']}")
print(f"ratio dvc/pipe: {m['dvc'] / m['pipe']:.1f}x")
print(f"no-work stages, -j 1: one run in 8 work trees {m['trees']:.3f} s, 8 plain runs in turn {m['serial']:.3f} s, ratio {m['serial'] / m['trees']:.2f}")
PY
