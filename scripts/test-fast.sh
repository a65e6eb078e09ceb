#!/usr/bin/env bash
# The contributor's inner loop: every test that needs neither libtorch nor
# Chromium, an S3 server or Slurm, in the same target/ as the whole suite.
# Warm, about 2 minutes on 2 cores (118 s and 124 s on 2026-12-07, quiet); the whole suite is
# scripts/test.sh, which CI runs.
#
#   scripts/test-fast.sh [TESTNAME-FILTER]
#
# It runs the unit and integration tests of the library crates that build
# without libtorch (protocol, cache, engine, report), then the end-to-end
# tests of the `pipe` binary but those that train, render in Chromium, talk
# to S3 or submit to Slurm. `pipe-stage`, the data worker, is built on
# first use as in a run; the training worker never is. The commands of some
# tests are Python scripts that import PyYAML (scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/test-python.sh
cargo test --locked -p pipe-protocol -p pipe-cache -p pipe-engine -p pipe-report "$@"
# Each skip is a module or test that needs what this loop leaves out.
cargo test --locked -p pipe --test it -- \
    --skip quickstart:: --skip imdb_pipeline:: --skip speed_study:: \
    --skip install:: --skip slurm:: --skip slurm_ranks:: \
    --skip remote_cache:: --skip transfer_progress:: \
    --skip compare_page:: --skip compare::the_html_page \
    --skip resume:: --skip report_page:: \
    "$@"
