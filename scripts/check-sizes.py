#!/usr/bin/env python3
"""Fails when a Rust source file passes 800 lines or a function 150, tests
left out: one concern a file, one step a function (docs/ARCHITECTURE.md,
"Layering"). The code is rustfmt's, so a function ends at the first line
that is `}` at its own indentation.

    scripts/check-sizes.py [DIR...]   # default: the workspace's crates
"""

import os
import re
import sys

ROOTS = ["src", "engine", "cache", "protocol", "stages", "report", "train", "test-support", "shared-deps"]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 150

FUNCTION = re.compile(
    r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern "C"\s+)?fn\s+(\w+)'
)
TEST_MODULE = re.compile(r"^\s*#\[cfg\(test\)\]\s*$")


def is_test_path(path):
    parts = path.split(os.sep)
    name = parts[-1]
    return "tests" in parts[:-1] or name == "tests.rs" or name.endswith("_tests.rs")


def problems_in(path):
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    found = []
    code_lines = len(lines)
    for index, line in enumerate(lines):
        if TEST_MODULE.match(line) and index + 1 < len(lines) and re.match(r"\s*mod\s", lines[index + 1]):
            code_lines = index
            break
    if code_lines > MAX_FILE_LINES:
        found.append(f"{path}: {code_lines} lines outside tests (at most {MAX_FILE_LINES})")
    for index in range(code_lines):
        match = FUNCTION.match(lines[index])
        if not match or lines[index].rstrip().endswith(";"):
            continue
        indent, name = match.group(1), match.group(2)
        for end in range(index, code_lines):
            if lines[end] == indent + "}":
                length = end - index + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(
                        f"{path}:{index + 1}: fn {name} is {length} lines (at most {MAX_FUNCTION_LINES})"
                    )
                break
    return found


def main():
    problems = []
    for root in sys.argv[1:] or ROOTS:
        for directory, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ("target", ".git", ".venv")]
            for name in sorted(names):
                path = os.path.join(directory, name)
                if name.endswith(".rs") and not is_test_path(path):
                    problems += problems_in(path)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("hint: split by meaning: a file per concern, a function per step", file=sys.stderr)
        return 1
    print("every source file and function is within its size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
