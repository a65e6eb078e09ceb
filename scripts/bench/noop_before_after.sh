#!/usr/bin/env bash
# The no-op rerun of the 100-stage command pipeline (benchmark (a)) for two
# builds of pipe side by side in one hyperfine run, each in its own copy of
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
command -v hyperfine >/dev/null || apt-get install -y -qq hyperfine >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for side in before after; do
    # shellcheck disable=SC2086
    python3 "$repo/scripts/bench/gen_pipelines.py" --stages "$stages" ${GEN_ARGS:-} --out "$work/$side" >/dev/null
done
(cd "$work/before" && "$before" run -q -j 2 && "$before" run -q -j 2)
(cd "$work/after" && "$after" run -q -j 2 && "$after" run -q -j 2)
echo "$stages stages; $(nproc) cores; $(date -u +%F)"
hyperfine --warmup 3 --runs "${RUNS:-30}" -N --export-json "$work/result.json" \
    -n before "$before -C $work/before run -q" \
    -n after "$after -C $work/after run -q"
python3 - "$work/result.json" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
before, after = results["before"]["median"], results["after"]["median"]
print(f"medians: before {before * 1e3:.1f} ms, after {after * 1e3:.1f} ms, after/before {after / before:.2f}")
PY
