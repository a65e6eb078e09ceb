#!/usr/bin/env bash
# The no-op `pipe run -q` of the 100-stage command pipeline
# (gen_pipelines.py) inside a git repository with N tracked files, for two
# builds of pipe side by side in one hyperfine run: what the run record's
# git state costs as the user's repository grows (docs/performance.md,
# "No-op in a big repository"). A second hyperfine run times a recorded
# run in which one stage reruns (its input appended to before each run), so
# the git state's cost on a run that records is visible too, beside the
# same run of the after build in a copy of its project outside any
# repository ("outside"): what a recorded run pays beyond its stages is
# after minus outside.
#
# Usage: scripts/bench/big_repo_noop.sh BEFORE_PIPE AFTER_PIPE [FILES...]
#   FILES: tracked-file counts, 100000 and 1000000 by default.
#   RUNS: hyperfine runs per command (30).
#   KEEP=1 keeps the repositories (printed) instead of removing them.
# e.g. git worktree add /tmp/noop-base <commit> && (cd /tmp/noop-base &&
#      CARGO_TARGET_DIR=$PWD/../target-noop-base cargo build --release) &&
#      scripts/bench/big_repo_noop.sh target-noop-base/release/pipe \
#      target/release/pipe
#
# The repository is made without hashing or adding a million files one by
# one: every tracked file is the same empty blob, so the index is written
# by `git update-index --index-info` from generated lines, committed with
# `git write-tree`/`git commit-tree`, and checked out once by
# `git checkout-index`, which leaves a refreshed index (stat data filled
# in), as a user's clone has.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
before=$(realpath "$1")
after=$(realpath "$2")
shift 2
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100000 1000000)
command -v hyperfine >/dev/null || apt-get install -y -qq hyperfine >/dev/null
work=$(mktemp -d)
if [ "${KEEP:-0}" = 1 ]; then
    echo "repositories kept in $work"
else
    trap 'rm -rf "$work"' EXIT
fi

# make_repo DIR FILES: a git repository at DIR with FILES empty tracked
# files under tree/ (1,000 per directory), and the 100-stage pipeline twice,
# in before/ and after/, one project for each build (its own .pipe/, since
# the nearest directory holding one is a project's root) in the same
# repository; each has run twice, so that the next run is a no-op.
make_repo() {
    local dir=$1 files=$2 side
    mkdir -p "$dir"
    git -C "$dir" init -q
    git -C "$dir" config user.email bench@example.invalid
    git -C "$dir" config user.name bench
    # The inputs are not tracked: appending to one reruns its stage without
    # making the repository dirty, so that every run measured here finds a
    # clean work tree and its dirty flag compares every tracked file.
    printf '.pipe/\nouts/\ninputs/\n' >"$dir/.gitignore"
    for side in before after; do
        python3 "$repo/scripts/bench/gen_pipelines.py" --stages 100 --out "$dir/$side" >/dev/null
        rm -f "$dir/$side/dvc.yaml" "$dir/$side/Snakefile"
        mkdir -p "$dir/$side/.pipe"
    done
    local blob
    blob=$(git -C "$dir" hash-object -w --stdin </dev/null)
    python3 - "$blob" "$files" <<'PY' | git -C "$dir" update-index --add --index-info
import sys
blob, files = sys.argv[1], int(sys.argv[2])
out = sys.stdout
for i in range(files):
    out.write(f"100644 {blob}\ttree/d{i // 1000:04d}/f{i % 1000:03d}\n")
PY
    git -C "$dir" add .gitignore before/pipe.yaml after/pipe.yaml
    local tree commit
    tree=$(git -C "$dir" write-tree)
    commit=$(git -C "$dir" commit-tree -m "bench: $files files" "$tree")
    git -C "$dir" update-ref HEAD "$commit"
    git -C "$dir" checkout-index -a -f
    git -C "$dir" update-index -q --refresh
    test -z "$(git -C "$dir" status --porcelain --untracked-files=no)"
}

echo "$(nproc) cores; $(date -u +%F); $(git --version)"
for files in "${sizes[@]}"; do
    started=$(date +%s)
    dir="$work/$files"
    make_repo "$dir" "$files"
    (cd "$dir/before" && "$before" run -q -j 2 && "$before" run -q -j 2)
    (cd "$dir/after" && "$after" run -q -j 2 && "$after" run -q -j 2)
    outside="$work/outside-$files"
    cp -a "$dir/after" "$outside"
    (cd "$outside" && "$after" run -q -j 2)
    echo "$files tracked files: repository made in $(($(date +%s) - started)) s"
    # A recorded run leaves a settler working out its dirty flag after it
    # exits: each measured run starts once none is left, so that one run's
    # settler is not counted in the next run's time.
    settled="while pgrep -f [_]_settle-git-dirty >/dev/null; do sleep 0.05; done"
    eval "$settled"
    echo "== $files tracked files: the no-op"
    hyperfine --warmup 3 --runs "${RUNS:-30}" -N --export-json "$work/noop-$files.json" \
        --prepare "sh -c '$settled'" \
        -n before "$before -C $dir/before run -q" \
        -n after "$after -C $dir/after run -q"
    echo "== $files tracked files: one stage reruns (its input appended to)"
    # Only s0_0 is selected (it has no upstream stage): one stage that runs,
    # a recorded run, and the dirty flag waited for at its end.
    hyperfine --warmup 1 --runs "${RUNS:-30}" --export-json "$work/one-$files.json" \
        --prepare "$settled; echo x >> $dir/before/inputs/in0.txt; echo x >> $dir/after/inputs/in0.txt; echo x >> $outside/inputs/in0.txt" \
        -n before "$before -C $dir/before run -q s0_0" \
        -n after "$after -C $dir/after run -q s0_0" \
        -n outside "$after -C $outside run -q s0_0"
    for kind in noop one; do
        python3 - "$work/$kind-$files.json" "$kind" "$files" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
before, after = results["before"]["median"], results["after"]["median"]
print(f"{sys.argv[3]} files, {sys.argv[2]}: medians before {before * 1e3:.1f} ms, "
      f"after {after * 1e3:.1f} ms, after/before {after / before:.2f}")
if "outside" in results:
    outside = results["outside"]["median"]
    print(f"{sys.argv[3]} files, {sys.argv[2]}: outside a repository {outside * 1e3:.1f} ms, "
          f"so the recorded run's git state costs {(after - outside) * 1e3:.1f} ms (after - outside)")
PY
    done
    [ "${KEEP:-0}" = 1 ] || rm -rf "$dir" "$outside"
done
