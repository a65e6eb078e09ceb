#!/usr/bin/env bash
# Where the no-op rerun of the 100-stage command pipeline goes, for one or
# two builds of pipe side by side (issue 49): wall time (interleaved
# medians), CPU time and page faults (`perf stat`), system calls by kind
# (`strace -c -f`), user-space instructions (callgrind), and beside them
# the floor a no-op cannot go under here: starting the process
# (`pipe --version`) and the `stat`s of every declared path.
#
#   scripts/bench/noop_breakdown.sh AFTER_PIPE [BEFORE_PIPE] [STAGES]
# Env: RUNS (interleaved runs per side, default 40).
# Needs perf, strace and valgrind for their columns; each missing tool
# leaves its column out.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
after=$(realpath "$1")
before=${2:+$(realpath "$2")}
stages=${3:-100}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sides=(after)
[[ -n "$before" ]] && sides=(before after)
declare -A binary=([after]="$after" [before]="$before")
for side in "${sides[@]}"; do
    python3 "$repo/scripts/bench/gen_pipelines.py" --stages "$stages" --out "$work/$side" >/dev/null
    # Run, then a no-op to settle the stat cache, as a user's rerun finds
    # it: files written less than a second before the stat cache looked at
    # them are hashed again until a later look finds them older (racy
    # timestamps, as git's index has), so the settling no-op comes after a
    # pause; without it every timed no-op hashed the 100 inputs.
    (cd "$work/$side" && "${binary[$side]}" run -q -j 2 && sleep 2 && "${binary[$side]}" run -q)
done
echo "$stages stages; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%F)"

python3 - "$work" "${RUNS:-40}" "${sides[@]}" <<PY
import statistics, subprocess, sys, time
work, runs, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
binary = {"after": "$after", "before": "$before"}
times = {side: [] for side in sides}
version = []
for index in range(runs + 3):
    order = sides if index % 2 == 0 else list(reversed(sides))
    for side in order:
        started = time.perf_counter()
        subprocess.run([binary[side], "-C", f"{work}/{side}", "run", "-q"], check=True)
        if index >= 3:
            times[side].append(time.perf_counter() - started)
    started = time.perf_counter()
    subprocess.run([binary["after"], "--version"], check=True, stdout=subprocess.DEVNULL)
    if index >= 3:
        version.append(time.perf_counter() - started)
for side in sides:
    print(f"{side}: no-op median {statistics.median(times[side]) * 1e3:.1f} ms over {runs} interleaved runs")
if len(sides) == 2:
    print(f"after/before {statistics.median(times['after']) / statistics.median(times['before']):.2f}")
print(f"floor: pipe --version median {statistics.median(version) * 1e3:.1f} ms")
PY

for side in "${sides[@]}"; do
    pipe=${binary[$side]}
    project="$work/$side"
    echo "--- $side"
    if command -v perf >/dev/null; then
        perf stat -r 20 -x, -e task-clock,page-faults,context-switches "$pipe" -C "$project" run -q 2>&1 >/dev/null |
            awk -F, '{printf "  %s: %s\n", $3, $1}'
    fi
    if command -v strace >/dev/null; then
        strace -f -c -o "$work/strace.txt" "$pipe" -C "$project" run -q
        awk '$NF == "total" {print "  system calls: " $(NF-2)} \
             $NF ~ /^(statx|newfstatat|openat|read|pread64|pwrite64|futex|mmap|madvise)$/ {print "    " $NF ": " $4}' \
            "$work/strace.txt"
    fi
    if command -v valgrind >/dev/null; then
        valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" "$pipe" -C "$project" run -q 2>&1 |
            sed -n 's/.*Collected : \([0-9]*\)/  instructions (user space): \1/p'
    fi
done
# The floor of the stat calls: every declared path of the pipeline once.
paths=$(grep -oE '(inputs|outs)/[^], ]+' "$work/after/pipe.yaml" | sort -u | wc -l)
echo "floor: $paths distinct declared paths, so $paths stat calls"
