#!/usr/bin/env bash
# Makes a real S3 server available to the remote-cache tests
# (pipe_test_support::s3): `s3s-fs` 0.14.1, a small S3 implementation that
# stores objects as files, checks request signatures and honours
# conditional writes (If-None-Match -> 412 Precondition Failed).
#
#   scripts/install-s3.sh
#
# Idempotent: does nothing when `s3s-fs` 0.14.1 is already in
# $CARGO_HOME/bin (or on PATH). Otherwise builds it from the Rust crate
# registry with `cargo install --locked` (about 2.5 minutes on 2 cores).
# 0.14.1 is pinned: later releases need a newer rustc, and older sources
# ignore If-None-Match, which the tests would then catch.
set -euo pipefail

version=0.14.1
bin_dir="${CARGO_HOME:-$HOME/.cargo}/bin"

for candidate in "$bin_dir/s3s-fs" "$(command -v s3s-fs 2>/dev/null || true)"; do
    if [[ -n "$candidate" && -x "$candidate" ]] && "$candidate" --version 2>/dev/null | grep -q "$version"; then
        echo "s3s-fs: $candidate ($version)" >&2
        exit 0
    fi
done

echo "s3s-fs: building $version with cargo install (once per machine)" >&2
cargo install --locked --quiet "s3s-fs@$version" --features binary >&2
"$bin_dir/s3s-fs" --version >&2
echo "s3s-fs: $bin_dir/s3s-fs, installed in ${SECONDS} s" >&2
