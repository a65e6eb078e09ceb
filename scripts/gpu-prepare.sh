#!/usr/bin/env bash
# Builds, on this (CPU) machine, what scripts/gpu-check.sh runs on a GPU
# machine that has no compiler and no registry, and puts it in .gpu/:
#   bin/pipe, bin/pipe-stage, bin/pipe-stage-train   release, as users run them
#   bin/model_throughput, bin/fresh_model            release examples of pipe-train
#   bin/pipe-train-tests                             the pipe-train test binary (dev profile)
#   build-root                                       this checkout's path, which the
#                                                    tests' fixture paths were compiled with
# Every binary is stripped of debug info (a release example is about 95 MB
# with line tables and 1.4 MB without). The libtorch binaries keep a
# RUNPATH into this machine's .venv, which does not exist there:
# gpu-check.sh puts the GPU machine's own torch 2.11 first on
# LD_LIBRARY_PATH instead, after checking its version.
#
#   scripts/gpu-prepare.sh && du -sh .gpu     then carry .gpu to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap-libtorch.sh >&2
if [[ -z "${LIBTORCH:-}" ]]; then
    export LIBTORCH_USE_PYTORCH=1 PATH="$PWD/.venv/bin:$PATH"
fi
started=$(date +%s)
cargo build --release --locked -p pipe -p pipe-stages --bins
cargo build --release --locked -p pipe-train --bins --examples
tests=$(cargo test --locked -p pipe-train --test it --no-run --message-format=json \
    | python3 -c 'import json, sys
for line in sys.stdin:
    event = json.loads(line)
    if event.get("reason") == "compiler-artifact" and event.get("executable") and event["target"]["name"] == "it":
        print(event["executable"])')
rm -rf .gpu
mkdir -p .gpu/bin
cp target/release/pipe target/release/pipe-stage target/release/pipe-stage-train .gpu/bin/
cp target/release/examples/model_throughput target/release/examples/fresh_model .gpu/bin/
cp "$tests" .gpu/bin/pipe-train-tests
strip --strip-debug .gpu/bin/*
pwd > .gpu/build-root
echo "built in $(( $(date +%s) - started )) s; .gpu/ holds:" >&2
du -sh .gpu/bin/* >&2
du -sh .gpu | sed 's/^/in all: /' >&2
