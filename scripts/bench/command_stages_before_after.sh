#!/usr/bin/env bash
# What running many short `run:` stages costs, for two `pipe` binaries side
# by side: N stages of one `echo` each, forced to run (`--force-all`), the
# two alternating ROUNDS times in one project each. Measures what the
# engine adds around a command: its log, its process group, and (since
# issue 34) the thread that follows its log to show its newest line.
# Usage: scripts/bench/command_stages_before_after.sh BEFORE_PIPE AFTER_PIPE
set -euo pipefail
before=$(realpath "$1")
after=$(realpath "$2")
stages=${STAGES:-200}
rounds=${ROUNDS:-7}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for side in before after; do
    mkdir -p "$work/$side"
    python3 - "$work/$side/pipe.yaml" "$stages" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as out:
    out.write("stages:\n")
    for i in range(n):
        out.write(f"  s{i}:\n    run: echo {i} > out/{i}.txt\n    outs: [out/{i}.txt]\n")
PY
done
echo "$stages one-echo run: stages, --force-all -j 2; $(nproc) cores; $(date -u +%F)"
python3 - "$before" "$after" "$work" "$rounds" <<'PY'
import statistics, subprocess, sys, time
before, after, work, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sides = {"before": before, "after": after}
times = {side: [] for side in sides}
for side, pipe in sides.items():  # first run: not timed
    subprocess.run([pipe, "run", "-q", "-j", "2"], cwd=f"{work}/{side}", check=True)
for _ in range(rounds):
    for side, pipe in sides.items():
        start = time.perf_counter()
        subprocess.run([pipe, "run", "-q", "-j", "2", "--force-all"], cwd=f"{work}/{side}", check=True)
        times[side].append(time.perf_counter() - start)
b, a = statistics.median(times["before"]), statistics.median(times["after"])
print(f"median before {b:.3f} s, after {a:.3f} s, after/before {a / b:.3f}")
print("before", " ".join(f"{t:.3f}" for t in times["before"]))
print("after ", " ".join(f"{t:.3f}" for t in times["after"]))
PY
