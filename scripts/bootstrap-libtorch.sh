#!/usr/bin/env bash
# Makes libtorch available to the `torch` feature of pipe-stages.
#
#   scripts/bootstrap-libtorch.sh [--with-transformers] [--print-env]
#
# tch 0.24 binds libtorch 2.11.0 exactly, and the simplest way to get that
# build on any machine is the PyPI torch wheel in a project-local venv
# (.venv/, gitignored): torch-sys then finds it with LIBTORCH_USE_PYTORCH=1
# and that venv's python first on PATH. A user with their own libtorch sets
# LIBTORCH instead and this script installs nothing.
#
# --with-transformers also installs pinned transformers and safetensors, which
# only the parity fixture script (scripts/fixtures/make_model_reference.py)
# needs; the Rust build never does.
#
# --print-env prints the environment a build needs on stdout, for a script
# to eval:  libtorch_env=$(scripts/bootstrap-libtorch.sh --print-env)
#           eval "$libtorch_env"
# Without it stdout stays empty: the export lines read like steps a person
# must take, and they need not (pipe and the scripts set them).
#
# Idempotent: a venv that already has the right torch is left alone, and
# pip's own cache makes a rebuilt venv cheap. What it does, pip's progress
# included (its bar on a terminal, its plain lines off one: 4.6 GB is too
# long a wait to spend silent), goes to stderr.
set -euo pipefail

TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=4.57.6
SAFETENSORS_VERSION=0.7.0

with_transformers=0
print_env=0
for arg in "$@"; do
    case "$arg" in
        --with-transformers) with_transformers=1 ;;
        --print-env) print_env=1 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "error: unknown option $arg" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"

if [[ -n "${LIBTORCH:-}" ]]; then
    if [[ ! -d "$LIBTORCH/lib" ]]; then
        echo "error: LIBTORCH=$LIBTORCH has no lib/ directory" >&2
        exit 1
    fi
    # The rpath baked into pipe-stage is this path; a relative one would
    # resolve against wherever the binary is run from.
    LIBTORCH="$(cd "$LIBTORCH" && pwd)"
    if [[ $with_transformers == 1 ]]; then
        echo "error: --with-transformers needs the venv; unset LIBTORCH for that run" >&2
        exit 1
    fi
    echo "using LIBTORCH=$LIBTORCH (nothing installed); libtorch must be $TORCH_VERSION for tch 0.24" >&2
    if [[ $print_env == 1 ]]; then
        printf 'export LIBTORCH=%q\n' "$LIBTORCH"
    fi
    exit 0
fi

# One install at a time into .venv/: `./pipe` may have started one in the
# background while it built pipe, and pipe's build of the training worker
# then waits for it here instead of racing it (the lock is on this script,
# held by pip too, as it inherits the descriptor).
if command -v flock >/dev/null; then
    exec 9<"$0"
    if ! flock -n 9; then
        echo "waiting for another install of libtorch into $venv to finish" >&2
        flock 9
    fi
fi

python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating $venv" >&2
    "$python" -m venv "$venv"
fi

# pip's stdout is this script's stderr. No version check: its notice ends
# with a command to upgrade pip that nobody needs to run.
pip_install() {
    "$venv/bin/python" -m pip install --disable-pip-version-check "$@" >&2
}

# Package metadata, not `import torch`: that takes seconds.
installed() {
    "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.stdout.write(m.version(sys.argv[1]))' "$1" 2>/dev/null || true
}

# The wheel's version may carry a local suffix (2.11.0+cu128), hence the prefix match.
case "$(installed torch)" in
    "$TORCH_VERSION"|"$TORCH_VERSION"+*) ;;
    *) pip_install "torch==$TORCH_VERSION" ;;
esac

if [[ $with_transformers == 1 ]]; then
    if [[ "$(installed transformers) $(installed safetensors)" != "$TRANSFORMERS_VERSION $SAFETENSORS_VERSION" ]]; then
        # torch is pinned again so that pip cannot move it while resolving.
        pip_install "torch==$TORCH_VERSION" \
            "transformers==$TRANSFORMERS_VERSION" "safetensors==$SAFETENSORS_VERSION"
    fi
fi

echo "torch $(installed torch) in $venv" >&2
if [[ $print_env == 1 ]]; then
    echo "export LIBTORCH_USE_PYTORCH=1"
    printf 'export PATH=%q:"$PATH"\n' "$venv/bin"
fi
