#!/usr/bin/env python3
"""Fails when the engine's front door is open a crack (docs/ARCHITECTURE.md,
"The front door").

`engine/src/lib.rs` keeps every module private and re-exports, by role, the
names outside code uses, so that code outside the engine writes
`pipe_engine::Name` and a module can move without a caller noticing. This
check fails, naming file and line, on:

- a `pub mod` in `engine/src/lib.rs`, or a `pub use` there that hands out a
  whole module (`pub use exec;`, `pub use self::exec`) or everything of one
  (`pub use exec::*`);
- a Rust file outside `engine/src/` (the CLI, the other crates, every test,
  the engine's own integration tests) that names a path into a module of
  the engine, `pipe_engine::module::...`: two or more segments after the
  crate whose first is a module's (snake_case) name, in a `use` or written
  inline. `pipe_engine::ExitCode::InvalidInput` is a variant of an
  exported type, and passes;
- `pipe_engine` renamed (`use pipe_engine as engine;`), which would hide
  such paths from this check.

Comments are not code: a comment may name an engine file.

    scripts/check-engine-front-door.py          # the checkout it lives in
    scripts/check-engine-front-door.py DIR      # another copy of the tree
"""

import os
import re
import sys

LIB = os.path.join("engine", "src", "lib.rs")
ENGINE_SOURCES = os.path.join("engine", "src")
# Folders that hold no source of ours: build output and tools' own trees.
SKIPPED = {"target", "node_modules"}

USE = re.compile(r"(?m)^[ \t]*(?:pub(?:\([^)]*\))?[ \t]+)?use[ \t]+([^;]+);")
PUB_MOD = re.compile(r"(?m)^[ \t]*pub[ \t]+mod[ \t]+(\w+)")
PUB_USE = re.compile(r"(?m)^[ \t]*pub[ \t]+use[ \t]+([^;]+);")
MOD = re.compile(r"(?m)^[ \t]*(?:pub(?:\([^)]*\))?[ \t]+)?mod[ \t]+(\w+)[ \t]*;")
INLINE = re.compile(r"(?<![:\w])pipe_engine((?:[ \t]*::[ \t]*\w+)+)")
RENAMED = re.compile(r"(?<![:\w])pipe_engine[ \t]+as[ \t]+\w+")
SNAKE = re.compile(r"^[a-z_][a-z0-9_]*$")
LINE_COMMENT = re.compile(r"//[^\n]*")
BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def without_comments(text):
    """The code of `text`, each comment blanked to spaces of its own length
    (newlines kept), so that an offset still gives its line."""
    blank = lambda match: re.sub(r"[^\n]", " ", match.group(0))
    return LINE_COMMENT.sub(blank, BLOCK_COMMENT.sub(blank, text))


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [`a::b`, `a::c::d`, `a::c::e`]."""
    tree = re.sub(r"\s+", "", tree)
    match = re.match(r"^([\w:]*?)::\{(.*)\}$", tree)
    if not match:
        return [tree]
    prefix, inner = match.group(1), match.group(2)
    items, depth, current = [], 0, ""
    for ch in inner:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    paths = []
    for item in filter(None, items):
        for tail in expand_use(item):
            paths.append(prefix if tail == "self" else f"{prefix}::{tail}")
    return paths


def lib_problems(root):
    """What in `engine/src/lib.rs` hands out a module."""
    path = os.path.join(root, LIB)
    with open(path, encoding="utf-8") as handle:
        text = without_comments(handle.read())
    modules = set(MOD.findall(text))
    problems = []
    for match in PUB_MOD.finditer(text):
        problems.append(
            f"{LIB}:{line_of(text, match.start())}: `pub mod {match.group(1)}` opens the "
            f"module to every caller; declare it `mod {match.group(1)};` and `pub use` "
            "the names outside code needs, under their role"
        )
    for match in PUB_USE.finditer(text):
        for item in expand_use(match.group(1)):
            name = re.sub(r"\bas\b.*$", "", item).strip()
            segments = [s for s in name.split("::") if s not in ("self", "crate")]
            if name.endswith("*") or (segments and segments[-1] in modules):
                problems.append(
                    f"{LIB}:{line_of(text, match.start())}: `pub use {item}` hands out a "
                    "whole module; re-export the names outside code needs, one by one"
                )
    return problems


def rust_files_outside_engine(root):
    engine_sources = os.path.join(root, ENGINE_SOURCES)
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = sorted(
            name
            for name in subdirectories
            if not name.startswith(".")
            and name not in SKIPPED
            and os.path.join(directory, name) != engine_sources
        )
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(directory, name)


def path_problems(root):
    """Each `pipe_engine::module::...` outside the engine's sources."""
    problems = []
    for path in rust_files_outside_engine(root):
        with open(path, encoding="utf-8") as handle:
            text = without_comments(handle.read())
        shown = os.path.relpath(path, root)
        found = []
        for match in USE.finditer(text):
            for item in expand_use(match.group(1)):
                if item.startswith("pipe_engine::"):
                    found.append((match.start(), item))
        code = USE.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)
        for match in INLINE.finditer(code):
            found.append((match.start(), "pipe_engine" + re.sub(r"\s+", "", match.group(1))))
        for offset, item in found:
            segments = re.sub(r"\bas\b.*$", "", item).strip().split("::")[1:]
            if len(segments) >= 2 and SNAKE.match(segments[0]):
                problems.append(
                    f"{shown}:{line_of(text, offset)}: `{item}` reaches into the engine's "
                    f"module `{segments[0]}`; write `pipe_engine::{segments[-1]}` and, where "
                    f"{LIB} does not export it yet, re-export it there under its role"
                )
        for match in RENAMED.finditer(text):
            problems.append(
                f"{shown}:{line_of(text, match.start())}: `{match.group(0)}` renames the "
                "engine, which hides its paths from this check; write `pipe_engine::Name`"
            )
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = lib_problems(root) + path_problems(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(
            f"{len(problems)} crack(s) in the engine's front door (docs/ARCHITECTURE.md, "
            '"The front door")',
            file=sys.stderr,
        )
        return 1
    print(f"the engine has one front door: {LIB}, and no path outside goes around it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
