#!/usr/bin/env python3
"""Per-crate seconds from cargo's --timings reports, side by side.

    scripts/bench/timings_units.py BEFORE.html AFTER.html [TOP]

Each report's units (a crate's library, its build script's compile and
run, a binary) are summed per crate `name version`; printed: the TOP
crates (20) by their largest difference, each side's seconds, and the
totals. A unit's duration is its wall time while it held a job slot, so
on a loaded machine read the differences, not the seconds.
scripts/bench/build_cold.sh (TIMINGS=DIR) writes the reports.
"""
import json
import re
import sys


def units(path):
    text = open(path, encoding="utf-8").read()
    found = re.search(r"const UNIT_DATA = (\[.*?\]);\n", text, re.S)
    if not found:
        sys.exit(f"{path}: no UNIT_DATA (not a cargo --timings report?)")
    per_crate = {}
    for unit in json.loads(found.group(1)):
        crate = f"{unit['name']} {unit['version']}"
        per_crate[crate] = per_crate.get(crate, 0.0) + float(unit["duration"])
    return per_crate


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    before, after = units(sys.argv[1]), units(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) == 4 else 20
    crates = sorted(
        set(before) | set(after),
        key=lambda crate: -abs(before.get(crate, 0.0) - after.get(crate, 0.0)),
    )
    print("| crate | before, s | after, s | after - before |")
    print("|---|---:|---:|---:|")
    for crate in crates[:top]:
        b, a = before.get(crate), after.get(crate)
        shown = lambda value: "-" if value is None else f"{value:.1f}"
        print(f"| {crate} | {shown(b)} | {shown(a)} | {(a or 0.0) - (b or 0.0):+.1f} |")
    total_before, total_after = sum(before.values()), sum(after.values())
    print(
        f"| all {len(before)} / {len(after)} crates | {total_before:.1f} | {total_after:.1f} "
        f"| {total_after - total_before:+.1f} |"
    )


if __name__ == "__main__":
    main()
