#!/usr/bin/env bash
# The whole test suite: the README's second command, and what CI runs.
#
#   scripts/test.sh [TESTNAME-FILTER]
#
# Two builds, because a pipe-stages built with the `torch` feature links
# libtorch into every binary of the package (docs/libtorch.md):
#   1. libtorch (scripts/bootstrap-libtorch.sh: torch==2.11.0 into .venv/,
#      or LIBTORCH), then the libtorch tests of pipe-stages (models,
#      training, precision, DDP) in target-torch/;
#   2. the workspace without libtorch in target/, whose end-to-end tests
#      drive the real `pipe` binary, which runs the training stages in the
#      `pipe-stage-train` built in step 1.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "--- libtorch" >&2
scripts/bootstrap-libtorch.sh >&2

echo "--- libtorch tests (pipe-stages --features torch, target-torch/)" >&2
torch_targets=(--lib)
for file in stages/tests/*.rs; do
    if grep -q '^#!\[cfg(feature = "torch")\]' "$file"; then
        torch_targets+=(--test "$(basename "$file" .rs)")
    fi
done
(
    if [[ -z "${LIBTORCH:-}" ]]; then
        export LIBTORCH_USE_PYTORCH=1 PATH="$PWD/.venv/bin:$PATH"
    fi
    CARGO_TARGET_DIR="$PWD/target-torch" \
        cargo test --locked -p pipe-stages --features torch "${torch_targets[@]}" "$@"
)

echo "--- workspace tests (target/)" >&2
cargo test --workspace --locked "$@"
