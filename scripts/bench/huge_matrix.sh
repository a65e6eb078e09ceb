#!/usr/bin/env bash
# Memory and time of `pipe validate` on a pipeline of a few lines whose
# matrix expands to N stages: the documented limit (1,000,000), just under
# it, and just over it, which must be refused before anything is expanded.
# Prints peak RSS (GNU time's "Maximum resident set size"), wall time and
# CPU time for each.
# Usage: scripts/bench/huge_matrix.sh [PIPE_BINARY] [N...]
#   PIPE_BINARY defaults to target/debug/pipe (set CARGO_TARGET_DIR to use
#   another target directory); N defaults to 1000000 999999 and 1000001.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
pipe=${1:-${CARGO_TARGET_DIR:-$repo/target}/debug/pipe}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000000 999999 1000001)
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# N stages from one matrix stage of small axes (N = 999,999 is
# 27 x 7 x 11 x 13 x 37), or, when N has a prime factor over 1000, six
# axes for the multiples of 100,000 and a second stage for the rest.
write_pipeline() {
  python3 - "$1" "$2" <<'PY'
import sys
n, path = int(sys.argv[1]), sys.argv[2]

def small_axes(n):
    if n == 1:
        return [1]
    primes, rest, factor = [], n, 2
    while factor * factor <= rest:
        while rest % factor == 0:
            primes.append(factor)
            rest //= factor
        factor += 1
    if rest > 1:
        primes.append(rest)
    if max(primes) > 1000:
        return None
    axes = []
    for prime in sorted(primes, reverse=True):
        for index, size in enumerate(axes):
            if size * prime <= 1000:
                axes[index] = size * prime
                break
        else:
            axes.append(prime)
    return axes

def values(count):
    return "[" + ", ".join(str(i) for i in range(count)) + "]"

def stage(name, axes):
    keys = [f"k{index}" for index in range(len(axes))]
    matrix = ", ".join(f"{key}: {values(size)}" for key, size in zip(keys, axes))
    refs = "".join("${matrix.%s}-" % key for key in keys)
    return (f"  {name}:\n"
            f"    matrix: {{ {matrix} }}\n"
            f"    run: echo {refs} > ${{outs.out}}\n"
            f"    outs: {{ out: \"out/{name}/{refs}.txt\" }}\n")

text = "stages:\n"
axes = small_axes(n)
if axes:
    text += stage("sweep", axes)
else:
    whole, rest = divmod(n, 100000)
    if whole:
        text += stage("sweep", [whole, 10, 10, 10, 10, 10])
    if rest:
        text += stage("extra", small_axes(rest) or [rest])
open(path, "w").write(text)
PY
}

printf '%-10s %-6s %12s %10s %12s\n' stages exit peak_rss_mb seconds cpu_seconds
for n in "${sizes[@]}"; do
  dir="$work/$n"
  mkdir -p "$dir/.pipe"
  write_pipeline "$n" "$dir/pipe.yaml"
  set +e
  (cd "$dir" && /usr/bin/time -v "$pipe" validate >"$dir/out" 2>"$dir/err")
  status=$?
  set -e
  rss_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/err")
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/err")
  seconds=$(awk -F: '{ if (NF == 3) print $1 * 3600 + $2 * 60 + $3; else print $1 * 60 + $2 }' <<<"$wall")
  # CPU time (user + system) says more than wall time on a busy machine.
  user=$(sed -n 's/.*User time (seconds): //p' "$dir/err")
  system=$(sed -n 's/.*System time (seconds): //p' "$dir/err")
  printf '%-10s %-6s %12.1f %10.2f %12.2f\n' "$n" "$status" "$(awk "BEGIN { print $rss_kb / 1024 }")" "$seconds" "$(awk "BEGIN { print $user + $system }")"
  if [ "$status" -ne 0 ]; then
    grep -m1 -A4 '^error' "$dir/err" | sed 's/^/    /' || true
  fi
done
