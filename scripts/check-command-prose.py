#!/usr/bin/env python3
"""Fails when a command of the `pipe` binary writes prose itself
(docs/ARCHITECTURE.md, "`src/`: the `pipe` binary").

A command (`src/commands.rs`, every file under `src/commands/`, and the
leaves beside them that several commands share: `src/run_setup.rs`,
`src/remote_flags.rs`, `src/here.rs`) parses its arguments, makes one
call into the engine and hands what comes back to a renderer under
`src/views/`, which words it; the command only chooses the stream,
through `out!`, `err!` or `jsonln!`. So that no
sentence drifts back into a command, this check fails, naming file and
line, on:

- a string literal of prose: one that, with its `{...}` placeholders
  taken out and its escapes read, holds a space (or a tab or a newline)
  and a word of two or more lowercase letters. `"{}\\n"`, `"  {}"`,
  `"sh"`, `"BROWSER"` and `"[]"` pass; `"warning: {}"` and
  `" (uid {})"` do not;
- a call of `outln!`, `errln!`, `println!`, `eprintln!`, `print!`,
  `eprint!` or `dbg!`: a line a command writes is one a view returned.

Comments, doc comments and attributes (`#[arg(...)]`, `#[serde(...)]`)
are not looked at. A literal that has to stay in a command is named in
ALLOWED below with why; there is none now.

    scripts/check-command-prose.py          # the checkout it lives in
    scripts/check-command-prose.py DIR      # another copy of the tree
"""

import os
import re
import sys

COMMANDS_DIR = os.path.join("src", "commands")
DISPATCH = os.path.join("src", "commands.rs")
# What several commands share (docs/ARCHITECTURE.md): commands too.
SHARED_LEAVES = [os.path.join("src", name) for name in ("run_setup.rs", "remote_flags.rs", "here.rs")]
# (file, literal as written between its quotes): why it stays. Keep it
# short: each entry is prose a reader cannot find under src/views/.
ALLOWED = {}

PRINTING = re.compile(r"(?<![\w:])(?:std\s*::\s*)?(outln|errln|println|eprintln|print|eprint|dbg)\s*!")
PLACEHOLDER = re.compile(r"\{[^{}]*\}")
ESCAPE = re.compile(r"\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)", re.S)
LOWERCASE_WORD = re.compile(r"(?<![A-Za-z0-9_])[a-z]{2,}(?![A-Za-z0-9_])")
CHAR_LITERAL = re.compile(r"b?'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")
RAW_STRING = re.compile(r'b?r(#*)"')


def read_escapes(text):
    def one(match):
        escaped = match.group(1)
        if escaped in ("n", "t", "r"):
            return " "
        if escaped.startswith(("u", "x")) or escaped == "\n":
            return ""
        return escaped

    return ESCAPE.sub(one, text)


def is_prose(literal, raw):
    text = literal if raw else read_escapes(literal)
    text = PLACEHOLDER.sub("", text.replace("{{", "").replace("}}", ""))
    return bool(re.search(r"\s", text)) and bool(LOWERCASE_WORD.search(text))


def scan(text):
    """The code of `text` with every literal, comment and attribute
    blanked (newlines kept, so an offset still gives its line), and the
    string literals outside comments and attributes: (offset, literal,
    raw)."""
    code = list(text)
    literals = []
    attribute_depth = 0
    attribute_start = 0
    index = 0

    def blank(start, end):
        for position in range(start, end):
            if code[position] != "\n":
                code[position] = " "

    while index < len(text):
        rest = text[index:]
        previous = text[index - 1] if index else " "
        if rest.startswith("//"):
            end = text.find("\n", index)
            end = len(text) if end == -1 else end
            blank(index, end)
            index = end
            continue
        if rest.startswith("/*"):
            depth, end = 1, index + 2
            while end < len(text) and depth:
                depth += text.startswith("/*", end)
                depth -= text.startswith("*/", end)
                end += 2 if text.startswith(("/*", "*/"), end) else 1
            blank(index, end)
            index = end
            continue
        raw = RAW_STRING.match(rest) if not (previous.isalnum() or previous == "_") else None
        if raw or rest.startswith(('"', 'b"')):
            if raw:
                closing = '"' + raw.group(1)
                start = index + raw.end()
                end = text.find(closing, start)
                end = len(text) if end == -1 else end
                literal, after = text[start:end], end + len(closing)
            else:
                start = index + rest.index('"') + 1
                end = start
                while end < len(text) and text[end] != '"':
                    end += 2 if text[end] == "\\" else 1
                literal, after = text[start:end], end + 1
            if not attribute_depth:
                literals.append((index, literal, bool(raw)))
            blank(index, after)
            index = after
            continue
        char = CHAR_LITERAL.match(rest)
        if char and not (previous.isalnum() or previous == "_"):
            blank(index, index + char.end())
            index += char.end()
            continue
        if rest.startswith(("#[", "#![")) and not attribute_depth:
            attribute_depth = 1
            attribute_start = index
            index += rest.index("[") + 1
            continue
        if attribute_depth:
            attribute_depth += text[index] == "["
            attribute_depth -= text[index] == "]"
            index += 1
            if not attribute_depth:
                blank(attribute_start, index)
            continue
        index += 1
    return "".join(code), literals


def command_files(root):
    yield os.path.join(root, DISPATCH)
    for leaf in SHARED_LEAVES:
        yield os.path.join(root, leaf)
    for directory, subdirectories, names in os.walk(os.path.join(root, COMMANDS_DIR)):
        subdirectories.sort()
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(directory, name)


def problems_in(root, path):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    shown = os.path.relpath(path, root)
    code, literals = scan(text)
    line_of = lambda offset: text.count("\n", 0, offset) + 1
    problems = []
    for offset, literal, raw in literals:
        if is_prose(literal, raw) and (shown, literal) not in ALLOWED:
            quoted = literal if len(literal) <= 60 else literal[:57] + "..."
            problems.append((offset, f'prose in a command: "{quoted}"'))
    for match in PRINTING.finditer(code):
        problems.append(
            (
                match.start(),
                f"`{match.group(1)}!` in a command: write what a view returned with "
                "`out!`, `err!` or `jsonln!`",
            )
        )
    return [f"{shown}:{line_of(offset)}: {problem}" for offset, problem in sorted(problems)]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = []
    for path in command_files(root):
        if os.path.exists(path):
            problems += problems_in(root, path)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(
            "hint: a command parses, calls the engine once and renders: put the words in a "
            "function under src/views/ that returns them, and write its text with `out!`/`err!`",
            file=sys.stderr,
        )
        return 1
    print("no command (src/commands/ and the leaves they share) writes prose of its own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
