#!/usr/bin/env bash
# The whole test suite: the README's second command, and what CI runs.
#
#   scripts/test.sh [TESTNAME-FILTER]
#
# libtorch first (scripts/bootstrap-libtorch.sh: torch==2.11.0 into .venv/,
# or LIBTORCH), then one `cargo test` over the whole workspace into
# target/: the libtorch crate pipe-train (models, training, precision, DDP)
# and the end-to-end tests, which drive the real `pipe` binary and through
# it the `pipe-stage-train` of the same build (docs/libtorch.md). The
# report tests need Chromium, the remote-cache tests a real S3 server
# (s3s-fs) and the Slurm tests a real Slurm (slurm-wlm and munge from
# Debian): each is installed once per machine first, and the single-node
# cluster runs only while the tests do.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "--- libtorch" >&2
libtorch_env=$(scripts/bootstrap-libtorch.sh --print-env)
eval "$libtorch_env"

scripts/test-python.sh
scripts/install-chromium.sh
scripts/install-s3.sh
scripts/install-slurm.sh >&2
slurm_dir="$PWD/target/slurm"
eval "$(scripts/slurm.sh start "$slurm_dir")"

# A test that never ends would hold the suite until CI's own limit cuts it
# off with no word of which one: past 40 minutes (the suite takes 10 to
# 20), every 5 minutes, name the processes that have lived over 10
# minutes, the stuck test's pipe among them, on stderr.
name_what_hangs() {
  # The sleeps hold no stream: killed with the watcher, none keeps the
  # output open for whoever reads it to its end.
  sleep "${PIPE_TEST_HANG_AFTER_S:-2400}" </dev/null >/dev/null 2>&1
  while true; do
    echo "--- tests still running: processes alive for over 10 minutes" >&2
    ps -eo pid,ppid,etimes,args --forest | awk 'NR == 1 || ($3 > 600 && $1 != 1 && $0 !~ /\[.*\]$/)' | cut -c1-300 >&2
    sleep 300 </dev/null >/dev/null 2>&1
  done
}
name_what_hangs &
hang_watcher=$!
trap 'kill "$hang_watcher" 2>/dev/null; scripts/slurm.sh stop "$slurm_dir"' EXIT

echo "--- tests (the whole workspace, target/)" >&2
cargo test --workspace --locked --no-fail-fast "$@"
