#!/usr/bin/env bash
# The Python the tests' commands run: .venv/ (the venv that
# bootstrap-libtorch.sh makes for torch, made here when it is missing) with
# pinned PyYAML, which the tests of commands that read params.yaml by
# themselves import, as a DVC user's scripts do. Idempotent and quiet.
set -euo pipefail
cd "$(dirname "$0")/.."
PYYAML_VERSION=6.0.3
if [[ ! -x .venv/bin/python ]]; then
    "${PYTHON:-python3}" -m venv .venv
fi
installed="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("PyYAML"))' 2>/dev/null || true)"
if [[ "$installed" != "$PYYAML_VERSION" ]]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "pyyaml==$PYYAML_VERSION"
fi
