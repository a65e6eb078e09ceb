#!/usr/bin/env bash
# Makes a headless Chromium available to the tests that render HTML
# reports (pipe_test_support::chromium).
#
#   scripts/install-chromium.sh
#
# Idempotent: does nothing when `chromium` (or `chromium-browser`) is on
# PATH. Otherwise installs Debian's `chromium` package with apt-get, as
# root or through `sudo -n` (never prompting). Where neither works, says
# what to install and exits 1: the report tests fail without a browser
# rather than pass without checking anything.
set -euo pipefail

for name in chromium chromium-browser; do
    if command -v "$name" >/dev/null 2>&1; then
        echo "chromium: $(command -v "$name")" >&2
        exit 0
    fi
done

if [[ "$(id -u)" == 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    cat >&2 <<'MESSAGE'
error: chromium is not installed, and installing it needs root (or sudo
without a password). Install the `chromium` package yourself, e.g.
    sudo apt-get install --no-install-recommends chromium
(on Ubuntu: `chromium-browser`), or put a Chromium binary named
`chromium` on PATH, then run the tests again.
MESSAGE
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: chromium is not installed and this system has no apt-get: install Chromium with its package manager (a binary named \`chromium\` on PATH)" >&2
    exit 1
fi

echo "chromium: installing Debian's chromium package" >&2
export DEBIAN_FRONTEND=noninteractive
# The package lists may be missing or stale on a fresh machine.
"${as_root[@]}" apt-get update -qq >&2
"${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium >&2
command -v chromium >/dev/null 2>&1 || {
    echo "error: apt-get installed chromium, but no \`chromium\` is on PATH" >&2
    exit 1
}
echo "chromium: $(command -v chromium), installed in ${SECONDS} s" >&2
