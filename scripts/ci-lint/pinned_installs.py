#!/usr/bin/env python3
"""Every install of pipe in the CI examples users copy is pinned by hash.

A job that holds the remote cache's write keys must run only bytes the
project pinned: each `pip install` / `pipx install` / `uv pip install`
line installs either a local file (`./...`) that the same file checks
with `sha256sum --check` before, or requirements with `--require-hashes`.
A name from a package index (`pipe-ml==0.1.0`) is refused: whoever
registers that name would run code with the keys. Run by run.sh.
"""
import pathlib
import re
import sys

INSTALL = re.compile(r"\b(?:pipx|pip3?|uv pip)\s+install\b(.*)")
root = pathlib.Path(__file__).resolve().parents[2]
problems = []
for example in sorted((root / "examples/ci").glob("*.yml")):
    lines = example.read_text().splitlines()
    checked = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("#"):
            continue
        code = line
        if "sha256sum --check" in code:
            checked = True
        found = INSTALL.search(code)
        if not found or "apt-get" in code:
            continue
        arguments = found.group(1)
        local = re.search(r"""["']?\./""", arguments) is not None
        hashed = "--require-hashes" in arguments
        if hashed or (local and checked):
            continue
        problems.append(
            f"{example.relative_to(root)}:{number}: `{line.strip()}` installs by name "
            "or an unchecked file: download the release and `sha256sum --check` it first, "
            "or install requirements with --require-hashes"
        )
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print("every install in examples/ci is pinned by hash")
