#!/usr/bin/env python3
"""Checks that `pipe` and its workers build every dependency they share
with one feature set (shared-deps/Cargo.toml says why and how).

    scripts/check-shared-features.py

Asks `cargo tree` for three builds: `-p pipe` (what `./pipe`, the
README's first command, builds), `-p pipe-stages` (the data worker alone)
and `-p pipe-stages -p pipe-train` (both workers, as `pipe` builds them
for a pipeline that trains). A crate compiled for the target in two of
them must have the same features in both, and likewise a crate compiled
only for the host (build scripts, proc macros); otherwise the later build
compiles it, and all above it, again. Exits 1 naming each such crate.
"""
import subprocess
import sys

BUILDS = {
    "pipe": ["-p", "pipe"],
    "data worker": ["-p", "pipe-stages"],
    "training worker": ["-p", "pipe-train"],
    "both workers": ["-p", "pipe-stages", "-p", "pipe-train"],
    # `cargo test --workspace` (scripts/test.sh): dev-dependencies add
    # their features to what the binaries are built with.
    "the suite": ["--workspace"],
}
WITH_DEV = {"the suite"}


def features(packages, edges):
    """(name, version) -> the set of feature lists it is built with."""
    out = subprocess.run(
        ["cargo", "tree", "--locked", *packages, "-e", edges,
         "-f", "{p} {f}", "--prefix", "none"],
        check=True, capture_output=True, text=True,
    ).stdout
    found = {}
    for line in out.splitlines():
        words = line.replace(" (*)", "").replace(" (proc-macro)", "").split()
        if len(words) < 2 or not words[1].startswith("v"):
            continue
        listed = words[2] if len(words) > 2 and not words[2].startswith("(") else ""
        found.setdefault((words[0], words[1]), set()).add(listed)
    return found


def main():
    target, host = {}, {}
    for build, packages in BUILDS.items():
        # Normal edges without proc macros: what is compiled for the target.
        dev = ",dev" if build in WITH_DEV else ""
        target[build] = features(packages, "normal" + dev + ",no-proc-macro")
        everything = features(packages, "normal,build" + dev)
        host[build] = {
            crate: sets for crate, sets in everything.items() if crate not in target[build]
        }
    bad = False
    for context, by_build in (("target", target), ("host", host)):
        crates = set().union(*by_build.values())
        for crate in sorted(crates):
            seen = {build: sets[crate] for build, sets in by_build.items() if crate in sets}
            if len({frozenset(sets) for sets in seen.values()}) > 1:
                bad = True
                print(f"{crate[0]} {crate[1]} ({context}) has different features:", file=sys.stderr)
                for build, sets in seen.items():
                    print(f"  {build}: {' / '.join(sorted(sets))}", file=sys.stderr)
    if bad:
        print("add these to shared-deps/Cargo.toml with the union of their features", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
