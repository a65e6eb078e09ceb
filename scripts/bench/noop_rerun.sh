#!/usr/bin/env bash
# Benchmark (a): a no-op rerun of a 100-stage command pipeline, pipe against
# `dvc repro` and Snakemake on the same work, side by side with hyperfine.
# Usage: scripts/bench/noop_rerun.sh [STAGES]   (default 100)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
stages=${1:-100}
command -v hyperfine >/dev/null || apt-get install -y -qq hyperfine >/dev/null
cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
pipe="$repo/target/release/pipe"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv="${PIPE_BENCH_VENV:-$HOME/.cache/pipe-bench/venv}"
if [ ! -x "$venv/bin/dvc" ] || [ ! -x "$venv/bin/snakemake" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q dvc snakemake
fi
dvc_version=$("$venv/bin/dvc" --version)
snakemake_version=$("$venv/bin/snakemake" --version)

python3 "$repo/scripts/bench/gen_pipelines.py" --stages "$stages" --out "$work"
cd "$work"
git init -q && git add -A && git -c user.name=b -c user.email=b@example.invalid commit -qm init
"$venv/bin/dvc" init -q
"$venv/bin/dvc" config core.analytics false

# First runs, so the timed runs are all no-ops.
"$pipe" run -q -j 2
rm -rf outs && mkdir outs && "$venv/bin/dvc" repro -q >/dev/null
rm -rf outs && mkdir outs && "$venv/bin/snakemake" -j 2 --quiet all >/dev/null 2>&1
# pipe must still be a no-op after the other tools rewrote the outputs.
"$pipe" run -q -j 2

echo "pipe $("$pipe" --version | cut -d' ' -f2), $dvc_version (dvc), snakemake $snakemake_version; $stages stages; $(nproc) cores"
hyperfine --warmup 3 --runs "${RUNS:-20}" --export-json "$work/result.json" \
  -n pipe "$pipe run -q" \
  -n dvc "$venv/bin/dvc repro -q" \
  -n snakemake "$venv/bin/snakemake -j 2 --quiet all"
python3 - "$work/result.json" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
pipe = results["pipe"]["median"]
for name, result in results.items():
    print(f"{name:10s} median {result['median']*1000:8.1f} ms   {result['median']/pipe:6.1f}x pipe")
PY
