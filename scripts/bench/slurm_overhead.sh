#!/usr/bin/env bash
# Per-stage overhead of the Slurm executor: 100 small stages run locally and
# as Slurm jobs, side by side in one script, alternating, every stage forced
# to run. Two shapes: a chain (each stage waits for the one before: the
# latency a stage pays) and a fan (100 independent stages: the throughput).
# From the Slurm runs' own log (PIPE_LOG=info), the median and 90th
# percentile of submission -> start and end -> result seen by pipe.
#
#   scripts/bench/slurm_overhead.sh [STAGES] [ROUNDS]   (default 100 3)
#
# Uses the cluster of SLURM_CONF, or starts one with scripts/slurm.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
stages=${1:-100}
rounds=${2:-3}
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p pipe
pipe="$repo/target/release/pipe"
work=$(mktemp -d)
cleanup() {
  [[ -n "${started_cluster:-}" ]] && "$repo/scripts/slurm.sh" stop "$work/cluster" >&2 || true
  rm -rf "$work"
}
trap cleanup EXIT
if [[ -z "${SLURM_CONF:-}" ]] || ! sinfo -h >/dev/null 2>&1; then
  eval "$("$repo/scripts/slurm.sh" start "$work/cluster")"
  started_cluster=1
fi

mkdir -p "$work/chain" "$work/fan"
python3 - "$work" "$stages" <<'PY'
import sys
work, n = sys.argv[1], int(sys.argv[2])
chain = ["stages:"]
fan = ["stages:"]
for i in range(n):
    dep = f"\n    deps: [o/{i-1}.txt]" if i else ""
    chain.append(f"  s{i}:\n    run: mkdir -p o && echo {i} > o/{i}.txt{dep}\n    outs: [o/{i}.txt]")
    fan.append(f"  s{i}:\n    run: mkdir -p o && echo {i} > o/{i}.txt\n    outs: [o/{i}.txt]")
open(f"{work}/chain/pipe.yaml", "w").write("\n".join(chain) + "\n")
open(f"{work}/fan/pipe.yaml", "w").write("\n".join(fan) + "\n")
PY

times="$work/times.txt"
: > "$times"
run() { # shape executor
  local start end
  cd "$work/$1"
  start=$(date +%s.%N)
  PIPE_LOG=info "$pipe" run -q --force-all --executor "$2" 2>>"$work/$1-$2.log" >/dev/null
  end=$(date +%s.%N)
  echo "$1 $2 $(echo "$end - $start" | bc)" >> "$times"
}
# Warm: the first run of each also fills the cache and the page cache.
for shape in chain fan; do for executor in local slurm; do
  (cd "$work/$shape" && "$pipe" run -q --executor "$executor" >/dev/null 2>&1)
done; done
: > "$work/chain-slurm.log"; : > "$work/fan-slurm.log"
for _ in $(seq "$rounds"); do
  for shape in chain fan; do
    run "$shape" local
    run "$shape" slurm
  done
done

echo "pipe $("$pipe" --version | cut -d' ' -f2), $(sbatch --version), $stages stages, $rounds rounds, $(nproc) cores, node declares $(sinfo -h -N -o %c | head -1) CPUs"
python3 - "$times" "$work" "$stages" <<'PY'
import re, statistics, sys
times, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
walls = {}
for line in open(times):
    shape, executor, seconds = line.split()
    walls.setdefault((shape, executor), []).append(float(seconds))
for shape in ("chain", "fan"):
    local = statistics.median(walls[(shape, "local")])
    slurm = statistics.median(walls[(shape, "slurm")])
    print(f"{shape:5s}  local median {local:7.2f} s   slurm median {slurm:7.2f} s   "
          f"ratio {slurm / local:5.1f}x   extra per stage {(slurm - local) / n * 1000:6.0f} ms")
    waits, seens = [], []
    for line in open(f"{work}/{shape}-slurm.log"):
        m = re.search(r"([\d.]+) s from submission to start, ran ([\d.]+) s, seen ([\d.]+) s after its end", line)
        if m:
            waits.append(float(m.group(1)))
            seens.append(float(m.group(3)))
    def pct(values, q):
        values = sorted(values)
        return values[min(len(values) - 1, int(q * len(values)))]
    print(f"       {len(waits)} jobs: submission -> start median {statistics.median(waits)*1000:5.0f} ms, p90 {pct(waits, .9)*1000:5.0f} ms;"
          f" end -> seen median {statistics.median(seens)*1000:4.0f} ms, p90 {pct(seens, .9)*1000:4.0f} ms")
PY
