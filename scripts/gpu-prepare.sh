#!/usr/bin/env bash
# Builds, on this (CPU) machine, what scripts/gpu-check.sh runs on a GPU
# machine that has no registry, and puts it in .gpu/:
#   bin/pipe, bin/pipe-stage, bin/pipe-stage-train   release, as users run them
#   bin/model_throughput, bin/fresh_model            release examples of pipe-train
#   bin/pipe-train-tests                             the pipe-train test binary (tests/it, dev profile)
#   bin/pipe-train-lib-tests                         pipe-train's unit tests (c10d::tests, dev profile)
#   build-root                                       this checkout's path (for the record:
#                                                    gpu-check.sh points the tests at its own
#                                                    copy with PIPE_CHECKOUT, wherever it is)
#   manifest                                         what the probe of gpu-check.sh compares
#                                                    with the GPU machine: the commit, the
#                                                    newest glibc, GLIBCXX and CXXABI symbol
#                                                    versions the binaries need (objdump -T),
#                                                    and the carried size
# Every binary is stripped of its debug info and symbol table (strip
# --strip-all; a release example is about 95 MB with line tables, the
# debug-profile test binary 60 MB): what travels must fit 64 MiB with the
# working tree, and a panic's message is what the check reads, not its
# backtrace. The dynamic symbols stay. The libtorch binaries keep a
# RUNPATH into this machine's .venv, which does not exist there:
# gpu-check.sh puts the GPU machine's own torch 2.11 first on
# LD_LIBRARY_PATH instead, after checking its version.
#
# The device tool carries the working tree and the paths named in `carry`,
# 64 MiB in all: this script measures .gpu/bin and the tree that travels
# (tracked and untracked, not ignored, files) and fails when they exceed it.
#
#   scripts/gpu-prepare.sh     then carry .gpu to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((64 << 20))
libtorch_env=$(scripts/bootstrap-libtorch.sh --print-env)
eval "$libtorch_env"
started=$(date +%s)
cargo build --release --locked -p pipe -p pipe-stages --bins
cargo build --release --locked -p pipe-train --bins --examples
tests=$(cargo test --locked -p pipe-train --lib --test it --no-run --message-format=json \
    | python3 -c 'import json, sys
for line in sys.stdin:
    event = json.loads(line)
    target = event.get("target") or {}
    if event.get("reason") == "compiler-artifact" and event.get("executable"):
        if target.get("name") == "it":
            print("it", event["executable"])
        elif "lib" in target.get("kind", []):
            print("lib", event["executable"])')
it_tests=$(awk '$1 == "it" {print $2}' <<<"$tests")
lib_tests=$(awk '$1 == "lib" {print $2}' <<<"$tests")
if [[ -z $it_tests || -z $lib_tests ]]; then
    echo "cargo named no test binary for tests/it or the library: $tests" >&2
    exit 1
fi
rm -rf .gpu
mkdir -p .gpu/bin
release=${CARGO_TARGET_DIR:-target}/release
cp "$release/pipe" "$release/pipe-stage" "$release/pipe-stage-train" .gpu/bin/
cp "$release/examples/model_throughput" "$release/examples/fresh_model" .gpu/bin/
cp "$it_tests" .gpu/bin/pipe-train-tests
cp "$lib_tests" .gpu/bin/pipe-train-lib-tests
strip --strip-all .gpu/bin/*
pwd > .gpu/build-root

# The newest symbol version of each library the binaries ask for: the GPU
# machine's glibc and libstdc++ must offer at least these.
newest() {
    objdump -T .gpu/bin/* 2>/dev/null | grep -oE "\b$1_[0-9]+(\.[0-9]+)*" \
        | sed "s/^$1_//" | sort -uV | tail -1
}
bin_bytes=$(find .gpu/bin -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
bin_files=$(find .gpu/bin -type f | wc -l)
tree_bytes=$(git ls-files -z --cached --others --exclude-standard \
    | xargs -0 -r stat -c '%s' 2>/dev/null | awk '{s += $1} END {print s + 0}')
commit=$(git rev-parse HEAD)
git diff --quiet HEAD 2>/dev/null || commit="$commit+uncommitted"
{
    echo "built=$(date -u +%FT%TZ)"
    echo "build_root=$PWD"
    echo "commit=$commit"
    echo "glibc=$(newest GLIBC)"
    echo "glibcxx=$(newest GLIBCXX)"
    echo "cxxabi=$(newest CXXABI)"
    echo "bin_files=$bin_files"
    echo "bin_bytes=$bin_bytes"
    echo "tree_bytes=$tree_bytes"
    echo "carry_limit_bytes=$limit"
} > .gpu/manifest
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "built in $(( $(date +%s) - started )) s; .gpu/ holds:" >&2
du -sh .gpu/bin/* >&2
sed 's/^/  /' .gpu/manifest >&2
total=$((bin_bytes + tree_bytes))
echo "carried: $(mib "$bin_bytes") of binaries + $(mib "$tree_bytes") of working tree = $(mib "$total") of the $(mib "$limit") limit" >&2
if (( total > limit )); then
    echo "too large to carry: the device tool refuses more than $(mib "$limit") in all" >&2
    exit 1
fi
