#!/usr/bin/env bash
# Time and peak memory of `pipe status` on one matrix stage that expands to
# 10,000, 100,000 and 1,000,000 stages (axes of 10 values each), never run:
# every stage is expanded, resolved, keyed and looked up in the cache and
# in the run history. Two histories: none (no .pipe/runs.db), and one run
# of one expansion recorded (each stage's last run is then asked of
# SQLite). Prints, per binary, size and history: wall time, CPU time, peak
# RSS (GNU time's "Maximum resident set size"), and both per stage
# (µs of wall time, bytes of peak RSS).
# Usage: scripts/bench/status_huge_matrix.sh PIPE [PIPE...]
#   SIZES="10000 100000" to choose sizes (powers of ten);
#   e.g. scripts/bench/status_huge_matrix.sh /tmp/before/pipe target/release/pipe
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 PIPE [PIPE...]" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)" >&2; exit 1; }
sizes=${SIZES:-10000 100000 1000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

write_pipeline() { # $1 = stages (a power of ten), $2 = file
  python3 - "$1" "$2" <<'PY'
import math, sys
n, path = int(sys.argv[1]), sys.argv[2]
keys = [f"k{i}" for i in range(round(math.log10(n)))]
assert 10 ** len(keys) == n, "sizes are powers of ten"
matrix = ", ".join(f"{key}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" for key in keys)
refs = "".join("${matrix.%s}-" % key for key in keys)
open(path, "w").write(
    "stages:\n  sweep:\n"
    f"    matrix: {{ {matrix} }}\n"
    f"    run: echo {refs} > ${{outs.out}}\n"
    f"    outs: {{ out: \"out/sweep/{refs}.txt\" }}\n")
PY
}

echo "$(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(date -u +%F)"
printf '%-28s %-9s %-8s %9s %9s %10s %9s %9s\n' binary stages history wall_s cpu_s peak_mb us/stage B/stage
for pipe in "$@"; do
  pipe=$(realpath "$pipe")
  for n in $sizes; do
    for history in none one-run; do
      dir="$work/$n-$history"
      rm -rf "$dir"
      mkdir -p "$dir/.pipe"
      write_pipeline "$n" "$dir/pipe.yaml"
      if [ "$history" = one-run ]; then
        first="sweep@$(python3 -c "import math; print(','.join(f'k{i}=0' for i in range(round(math.log10($n)))))")"
        (cd "$dir" && "$pipe" run -q "$first" >/dev/null)
      fi
      (cd "$dir" && /usr/bin/time -v "$pipe" status >"$dir/status.txt" 2>"$dir/time.txt") || {
        echo "$pipe status failed:" >&2; tail -5 "$dir/time.txt" >&2; exit 1; }
      tail -1 "$dir/status.txt" | grep -q "^$n stages" || { echo "unexpected output: $(tail -1 "$dir/status.txt")" >&2; exit 1; }
      rss_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time.txt")
      wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/time.txt")
      seconds=$(awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }' <<<"$wall")
      user=$(sed -n 's/.*User time (seconds): //p' "$dir/time.txt")
      system=$(sed -n 's/.*System time (seconds): //p' "$dir/time.txt")
      awk -v bin="$(basename "$(dirname "$pipe")")/$(basename "$pipe")" -v n="$n" -v h="$history" \
          -v wall="$seconds" -v cpu="$(awk "BEGIN { print $user + $system }")" -v rss="$rss_kb" 'BEGIN {
        printf "%-28s %-9d %-8s %9.2f %9.2f %10.1f %9.1f %9.0f\n", bin, n, h, wall, cpu, rss / 1024, wall * 1e6 / n, rss * 1024 / n }'
      rm -rf "$dir"
    done
  done
done
