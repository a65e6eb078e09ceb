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
# report tests need Chromium and the remote-cache tests a real S3 server
# (s3s-fs): both are installed once per machine first.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "--- libtorch" >&2
scripts/bootstrap-libtorch.sh >&2
if [[ -z "${LIBTORCH:-}" ]]; then
    export LIBTORCH_USE_PYTORCH=1 PATH="$PWD/.venv/bin:$PATH"
fi

scripts/install-chromium.sh
scripts/install-s3.sh

echo "--- tests (the whole workspace, target/)" >&2
cargo test --workspace --locked "$@"
