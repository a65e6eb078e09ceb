#!/usr/bin/env bash
# The quickstart's training, rerun, for two source checkouts side by side:
# what a change to the engine or the training worker costs the run a user
# meets first. Each side runs `pipe run pipelines/quickstart.yaml --force
# train` in its own checkout (its own .pipe/, its own workers, built on
# the first run and not timed), alternating, ROUNDS times.
# Usage: scripts/bench/quickstart_before_after.sh BEFORE_CHECKOUT AFTER_CHECKOUT
#   Each checkout needs target/release/pipe and libtorch (.venv/ or LIBTORCH).
set -euo pipefail
before=$(realpath "$1")
after=$(realpath "$2")
rounds=${ROUNDS:-2}
echo "quickstart --force train; $(nproc) cores; $(date -u +%F)"
for side in "$before" "$after"; do
    # First use: the workers are built, the data stages run; not timed.
    (cd "$side" && target/release/pipe run -q pipelines/quickstart.yaml) >/dev/null
done
python3 - "$before" "$after" "$rounds" <<'PY'
import statistics, subprocess, sys, time
before, after, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
times = {before: [], after: []}
for _ in range(rounds):
    for side in (before, after):
        start = time.perf_counter()
        subprocess.run(
            ["target/release/pipe", "run", "-q", "pipelines/quickstart.yaml", "--force", "train"],
            cwd=side, check=True, stdout=subprocess.DEVNULL,
        )
        times[side].append(time.perf_counter() - start)
b, a = statistics.median(times[before]), statistics.median(times[after])
print(f"before: {[round(t, 1) for t in times[before]]} s, median {b:.1f} s")
print(f"after:  {[round(t, 1) for t in times[after]]} s, median {a:.1f} s")
print(f"after/before: {a / b:.2f}")
PY
