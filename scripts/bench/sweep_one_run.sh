#!/usr/bin/env bash
# A sweep of COMBOS combinations whose stage sleeps SLEEP seconds, under
# `-j COMBOS`: run as one matrix run (each version writes its own path)
# against the same sweep whose stage writes one path, so the combinations
# cannot share the work tree (one run per combination until 2026-12-06;
# since, one run with a work tree per combination). Runs
# interleaved, each from an empty project; medians and their ratio. Also
# what merging costs: the dry run of 1000 combinations of a 2-stage
# pipeline.
# Usage: scripts/bench/sweep_one_run.sh [PIPE] (default target/release/pipe)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
pipe=$(realpath "${1:-$repo/target/release/pipe}")
combos=${COMBOS:-4}
sleep_s=${SLEEP:-0.5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
values=$(seq -s, 1 "$combos")
write() {
    mkdir -p "$work/$1"
    cat > "$work/$1/pipe.yaml" <<YAML
params: { lr: 1 }
stages:
  prep:
    run: echo prep > prep.txt
    outs: [prep.txt]
  train:
    run: sleep $sleep_s && echo \${params.lr} > $2
    deps: [prep.txt]
    outs: ["$2"]
YAML
}
write one 'model-${params.lr}.txt'
write apart 'model.txt'
echo "$combos combinations, stage sleeps ${sleep_s}s, -j $combos; $(nproc) cores; $(date -u +%F)"
python3 - "$pipe" "$work" "$values" "$combos" "${RUNS:-7}" <<'PY'
import shutil, statistics, subprocess, sys, time
pipe, work, values, combos, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
times = {"one": [], "apart": []}
for _ in range(runs):
    for side in ("one", "apart"):
        shutil.rmtree(f"{work}/{side}/.pipe", ignore_errors=True)
        start = time.perf_counter()
        subprocess.run([pipe, "run", "-q", "-m", "-S", f"lr={values}", "-j", combos],
                       cwd=f"{work}/{side}", check=True, capture_output=True)
        times[side].append(time.perf_counter() - start)
one, apart = statistics.median(times["one"]), statistics.median(times["apart"])
print(f"one run (side by side): median {one:.3f} s")
print(f"one run per combination: median {apart:.3f} s")
print(f"ratio apart/one: {apart / one:.2f}")
PY
mkdir -p "$work/merge"
cat > "$work/merge/pipe.yaml" <<'YAML'
params: { a: 1, b: 1, c: 1 }
stages:
  prep:
    run: echo ${params.a} > prep-${params.a}.txt
    outs: ["prep-${params.a}.txt"]
  train:
    run: cat prep-${params.a}.txt > t-${params.a}-${params.b}-${params.c}.txt
    deps: ["prep-${params.a}.txt"]
    outs: ["t-${params.a}-${params.b}-${params.c}.txt"]
YAML
for n in 5 10; do
    v=$(seq -s, 1 "$n")
    (cd "$work/merge" && hyperfine -N --warmup 1 --runs 5 --style basic \
        "$pipe run -m -S a=$v -S b=$v -S c=$v --dry-run" 2>/dev/null \
        | sed -n "s/^ *Time (mean ± σ): */$((n * n * n)) combinations merged (dry run): /p")
done
