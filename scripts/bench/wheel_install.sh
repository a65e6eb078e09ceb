#!/usr/bin/env bash
# Installing wheels of pipe-ml side by side: each round makes one fresh
# venv per wheel (`python3 -m venv --without-pip`, not timed) and times
# `python3 -m pip --python VENV install --no-index --no-deps` of that
# wheel into it, no pip cache, the wheels in a rotating order so that a
# drift of the shared machine falls on all of them. What the release
# wheel's stripped binaries save at install (docs/performance.md, "The
# wheel: stripped binaries").
#
#   scripts/bench/wheel_install.sh WHEEL... [ROUNDS=7 in the environment]
#
# e.g. scripts/build-wheel.sh --no-strip --out /tmp/w-full and
#      scripts/build-wheel.sh --out /tmp/w-stripped, then
#      scripts/bench/wheel_install.sh /tmp/w-full/*.whl /tmp/w-stripped/*.whl
#
# Prints each install's seconds and the load average, then per wheel its
# size, the median and the ratio to the first wheel's median.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: scripts/bench/wheel_install.sh WHEEL..." >&2; exit 2; }
rounds=${ROUNDS:-7}
wheels=()
for wheel in "$@"; do
    wheels+=("$(realpath "$wheel")")
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv

echo "load at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
    count=${#wheels[@]}
    for offset in $(seq 0 $((count - 1))); do
        index=$(((round + offset) % count))
        wheel=${wheels[$index]}
        venv=$work/venv
        rm -rf "$venv"
        python3 -m venv --without-pip "$venv"
        start=$(date +%s.%N)
        PIP_NO_CACHE_DIR=1 python3 -m pip --python "$venv/bin/python" install --quiet \
            --no-index --no-deps --disable-pip-version-check "$wheel"
        end=$(date +%s.%N)
        seconds=$(echo "$end - $start" | bc)
        [[ -x $venv/bin/pipe ]] || { echo "error: $wheel installed no bin/pipe" >&2; exit 1; }
        printf '%s\t%s\t%s\n' "$index" "$round" "$seconds" >>"$results"
        printf 'round %s, wheel %s: %.3f s (load %s)\n' "$round" "$index" "$seconds" \
            "$(cut -d' ' -f1 /proc/loadavg)"
    done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$results" "${wheels[@]}" <<'EOF'
import os, statistics, sys
path, wheels = sys.argv[1], sys.argv[2:]
times = {}
for line in open(path):
    index, _, seconds = line.split("\t")
    times.setdefault(int(index), []).append(float(seconds))
first = statistics.median(times[0])
print("\n| wheel | size | install, median of %d | ratio |" % len(times[0]))
print("|---|---:|---:|---:|")
for index, wheel in enumerate(wheels):
    median = statistics.median(times[index])
    size = os.path.getsize(wheel) / 1e6
    print(f"| {wheel} | {size:.1f} MB | {median:.3f} s | {median / first:.2f} |")
EOF
