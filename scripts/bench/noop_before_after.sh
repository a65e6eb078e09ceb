#!/usr/bin/env bash
# The no-op rerun of the 100-stage command pipeline (benchmark (a)) for two
# builds of pipe side by side, runs interleaved, each in its own copy of
# the project: what a change to the engine costs the millisecond no-op.
# Usage: scripts/bench/noop_before_after.sh BEFORE_PIPE AFTER_PIPE [STAGES]
#   GEN_ARGS=--metrics: every stage also writes a metrics file.
#   e.g. git worktree add /tmp/base <commit> && (cd /tmp/base &&
#        cargo build --release) && scripts/bench/noop_before_after.sh \
#        /tmp/base/target/release/pipe target/release/pipe
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
before=$(realpath "$1")
after=$(realpath "$2")
stages=${3:-100}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for side in before after; do
    # shellcheck disable=SC2086
    python3 "$repo/scripts/bench/gen_pipelines.py" --stages "$stages" ${GEN_ARGS:-} --out "$work/$side" >/dev/null
done
(cd "$work/before" && "$before" run -q -j 2 && "$before" run -q -j 2)
(cd "$work/after" && "$after" run -q -j 2 && "$after" run -q -j 2)
# Past the stat cache's racy window (cache/src/stat.rs, RACY_WINDOW, 2 s):
# a file changed that recently is hashed again, so without the wait the
# side set up second spends more of its runs rehashing and reads slower.
sleep 3
echo "$stages stages; $(nproc) cores; $(date -u +%F)"
# Interleaved, not hyperfine's one block per command: on a shared 2-core
# machine the drift between two blocks of runs (30% seen) swamps the
# difference being measured; alternating puts both sides under the same
# load. Medians of RUNS each, after WARMUP alternations.
python3 - "$before" "$after" "$work" "${RUNS:-60}" <<'PY'
import statistics, subprocess, sys, time
before, after, work, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sides = {"before": (before, f"{work}/before"), "after": (after, f"{work}/after")}
times = {"before": [], "after": []}
for index in range(runs + 3):
    order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
    for side in order:
        pipe, project = sides[side]
        started = time.perf_counter()
        subprocess.run([pipe, "-C", project, "run", "-q"], check=True)
        if index >= 3:
            times[side].append(time.perf_counter() - started)
b, a = statistics.median(times["before"]), statistics.median(times["after"])
print(f"{runs} interleaved runs each: medians before {b * 1e3:.1f} ms, after {a * 1e3:.1f} ms, after/before {a / b:.2f}")
PY
