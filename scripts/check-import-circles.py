#!/usr/bin/env python3
"""Fails when the Rust files of a crate import each other in a circle, or
when a module of the engine imports one above it in the layer list.

The import graph of the tree is kept a DAG at the level of files, not only
of crates (docs/ARCHITECTURE.md, "Layering"): a file never imports a file
that imports it back, a module's children never import their parent's
`mod.rs` (what they share lives in a sibling leaf), and `lib.rs` re-exports
only leaves. An arrow A -> B is any path A names that resolves to B:
`use crate::x::Y`, `super::y::Z`, a child module's name, or a path written
inline (`crate::x::f(..)`), visibility paths (`pub(in crate::x)`) included,
as a reader of the file sees them. A name a file only re-exports (`pub use
error::Error` in `lib.rs`, a facade `mod.rs`) is followed to the file that
defines it: a facade is no room of its own. Declaring a module (`mod x;`)
is not an arrow. Test files (`tests.rs`, `*_tests.rs`, `tests/`) are left out.

The engine's top-level modules are also held to the numbered list of
docs/ARCHITECTURE.md's "Layering" paragraph, read from the document itself
so that the list cannot go stale: each item is a band, and `then` splits a
band into steps. A module may import any module of a lower band and of an
earlier step of its own band; an arrow to a higher band, or to its own
band's step or a later one, fails, named with its file, as does a module
the list leaves out, names twice, or names but the crate lacks.

    scripts/check-import-circles.py            # every crate, and the layers
    scripts/check-import-circles.py engine/src # one source root (and its
        # layers, for engine/src)
    scripts/check-import-circles.py --layers engine/src
        # the root's top-level modules by floor (0 imports no other; n
        # imports one of floor n-1), folders that import each other as one
        # group: what the imports allow docs/ARCHITECTURE.md's list to say
"""

import os
import re
import sys

ROOTS = [
    "src",
    "engine/src",
    "cache/src",
    "protocol/src",
    "stages/src",
    "report/src",
    "train/src",
    "test-support/src",
    "shared-deps/zip-subset/src",
]

# clap_complete's dynamic completion needs the CLI definition, and the CLI
# definition names the completers: one pair, by design.
ALLOWED = {frozenset({"src/cli.rs", "src/complete.rs"})}

# A `use` item starts its line (rustfmt's layout); the word in prose or in
# a string does not, so it cannot swallow the code up to the next `;`.
USE = re.compile(r"(?m)^[ \t]*(?:pub(?:\([^)]*\))?[ \t]+)?use[ \t]+([^;]+);")
INLINE = re.compile(r"(?<![:\w])((?:crate|super|self|\w+)(?:::\w+)+)")
TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{.*", re.S)
LINE_COMMENT = re.compile(r"//[^\n]*")


module_path_of = {}


def module_path(root, path):
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def is_test_file(path):
    name = os.path.basename(path)
    return name == "tests.rs" or name.endswith("_tests.rs") or "/tests/" in path


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [`a::b`, `a::c::d`, `a::c::e`]."""
    tree = tree.strip()
    match = re.match(r"^([\w:]*?)::\{(.*)\}$", tree, re.S)
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
    for item in filter(None, (item.strip() for item in items)):
        for tail in expand_use(item):
            paths.append(prefix if tail == "self" else f"{prefix}::{tail}")
    return paths


DEFINITION = r"\b(?:struct|enum|union|trait|type|fn|const|static|mod)\s+{}\b|macro_rules!\s*{}\b"


def resolve(modules, current, path, imports=None, depth=0):
    """The file `path`, named in the module `current`, points at: the
    longest module prefix of it that is a file of the crate, or, when that
    file only imports the item named next, the file it imports it from."""
    segments = [segment for segment in path.split("::") if segment]
    if not segments:
        return None
    head = segments[0]
    if head == "crate":
        base, segments = [], segments[1:]
    elif head == "super":
        base = list(current)
        while segments and segments[0] == "super":
            base, segments = base[:-1], segments[1:]
    elif head == "self":
        base, segments = list(current), segments[1:]
    elif tuple(current) + (head,) in modules:
        base = list(current)
    else:
        return None
    found, rest = None, []
    for length in range(len(segments) + 1):
        candidate = tuple(base + segments[:length])
        if candidate in modules:
            found, rest = modules[candidate], segments[length:]
    if found and rest and imports is not None and depth < 8:
        item = rest[0]
        text, named = imports.get(found, ("", {}))
        if item in named and not re.search(DEFINITION.format(item, item), text):
            owner = module_path_of[found]
            followed = resolve(modules, owner, named[item], imports, depth + 1)
            if followed:
                return followed
    return found


def import_graph(root):
    files = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if name.endswith(".rs") and not is_test_file(path):
                with open(path, encoding="utf-8") as handle:
                    files[path] = handle.read()
    modules = {module_path(root, path): path for path in files}
    module_path_of.clear()
    module_path_of.update({path: module_path(root, path) for path in files})
    imports, uses = {}, {}
    for path, text in files.items():
        text = TEST_MODULE.sub("", LINE_COMMENT.sub("", text))
        used, named = [], {}
        for match in USE.finditer(text):
            for item in expand_use(re.sub(r"\s+", " ", match.group(1))):
                renamed = re.match(r"^(.*?)\s+as\s+(\w+)$", item)
                full = (renamed.group(1) if renamed else item).replace(" ", "")
                used.append(full)
                # What each imported name stands for, by the name it has here.
                if not full.endswith("*"):
                    named[renamed.group(2) if renamed else full.split("::")[-1]] = full
        imports[path] = (text, named)
        # Paths written in the code itself; a `use` was read above, whole.
        code = USE.sub("", text)
        uses[path] = used + [match.group(1) for match in INLINE.finditer(code)]
    graph = {}
    for path in files:
        current = module_path(root, path)
        for name in uses[path]:
            target = resolve(modules, current, name, imports)
            if target and target != path:
                graph.setdefault(path, set()).add(target)
    return graph


def circles(graph):
    """Strongly connected components of more than one file (Tarjan's,
    iterative so that a deep module tree cannot overflow the stack)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in list(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def top_module(root, path):
    """`engine/src/exec/slurm/queue.rs` -> `exec`; `lib.rs` -> `lib`."""
    first = os.path.relpath(path, root).split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def floors(root):
    """The root's top-level modules grouped by floor: a group is one module,
    or the modules whose files import each other's in a circle of folders
    (the files themselves import in no circle). The crate root (`lib.rs`,
    `main.rs`) is left out: its re-exports and aliases are not a layer."""
    graph = import_graph(root)
    modules = {
        top_module(root, os.path.join(directory, name))
        for directory, _, names in os.walk(root)
        for name in names
        if name.endswith(".rs") and not is_test_file(os.path.join(directory, name))
    } - {"lib", "main"}
    arrows = {module: set() for module in modules}
    for source, targets in graph.items():
        for target in targets:
            a, b = top_module(root, source), top_module(root, target)
            if a != b and a in modules and b in modules:
                arrows[a].add(b)
    group_of = {module: (module,) for module in modules}
    for component in circles(arrows):
        for module in component:
            group_of[module] = tuple(component)
    floor = {}

    def floor_of(group):
        if group not in floor:
            below = {group_of[m] for member in group for m in arrows[member]} - {group}
            floor[group] = max((floor_of(other) + 1 for other in below), default=0)
        return floor[group]

    for group in set(group_of.values()):
        floor_of(group)
    return floor


def print_layers(root):
    by_floor = {}
    for group, level in floors(root).items():
        name = group[0] if len(group) == 1 else "{" + " ".join(group) + "}"
        by_floor.setdefault(level, []).append(name)
    for level in sorted(by_floor):
        print(f"{level}: {' '.join(sorted(by_floor[level]))}")
    return 0


# The engine's layer list: where it is written, and the root it orders.
ARCHITECTURE = "docs/ARCHITECTURE.md"
LAYERED_ROOT = "engine/src"
CODE_OR_THEN = re.compile(r"`([^`]+)`|\bthen\b")
MODULE_NAME = re.compile(r"^[a-z_][a-z0-9_]*/?$")


def outside_parentheses(text):
    """`a (b (c)) d` -> `a  d`: what an item of the list says about its
    modules is in parentheses; only the names outside them are the list."""
    kept, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(ch)
    return "".join(kept)


def layer_list(path=ARCHITECTURE):
    """The numbered list of the "Layering" paragraph, read as (band, step,
    name as written) for each module it names, and the problems of the list
    itself: a band numbered out of turn, or a name outside parentheses that
    cannot be a module."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    _, found, rest = text.partition("**Layering.**")
    paragraph = rest.split("**Invariant:**")[0]
    if not found:
        return [], [f"{path} has no `**Layering.**` paragraph"]
    items = []
    for line in paragraph.splitlines():
        number = re.match(r"^(\d+)\.\s+(.*)$", line)
        if number:
            items.append([int(number.group(1)), number.group(2)])
        elif items and line[:1] in (" ", "\t") and line.strip():
            items[-1][1] += " " + line.strip()
        elif items:
            break
    entries, problems = [], []
    if not items:
        problems.append(f"{path}, \"Layering\", holds no numbered list of bands")
    for expected, (band, item) in enumerate(items, start=1):
        if band != expected:
            problems.append(f"{path}, \"Layering\": band {band} is numbered where {expected} is due")
        step = 1
        for match in CODE_OR_THEN.finditer(outside_parentheses(item)):
            name = match.group(1)
            if name is None:
                step += 1
            elif MODULE_NAME.match(name):
                entries.append((band, step, name))
            else:
                problems.append(
                    f"{path}, \"Layering\", band {band}: `{name}` is written outside parentheses "
                    "but is no module name (say what a module is in parentheses after it)"
                )
    return entries, problems


def top_modules(root):
    """The root's top-level modules, each with whether it is a folder (with
    a `mod.rs`, or beside its `x.rs`); the crate root (`lib.rs`, `main.rs`)
    is no layer."""
    modules = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if os.path.isdir(path):
            modules[entry] = True
        elif entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            if not is_test_file(path):
                modules.setdefault(entry[:-3], False)
    return modules


def bands_of(root, path=ARCHITECTURE):
    """{module: (band, step)} from the list, and every way the list and the
    root's modules disagree."""
    entries, problems = layer_list(path)
    modules = top_modules(root)
    bands = {}
    for band, step, written in entries:
        name = written.rstrip("/")
        if name not in modules:
            problems.append(
                f"{path}, \"Layering\", band {band}: `{written}` is no module of {root}"
            )
            continue
        if written.endswith("/") != modules[name]:
            shape = "a folder" if modules[name] else "a file"
            problems.append(
                f"{path}, \"Layering\", band {band}: `{written}` is {shape} in {root}; "
                f"write `{name + '/' if modules[name] else name}`"
            )
        if name in bands:
            problems.append(
                f"{path}, \"Layering\": `{name}` is in band {bands[name][0]} and again in band {band}"
            )
            continue
        bands[name] = (band, step)
    for name in sorted(set(modules) - set(bands)):
        problems.append(
            f"{path}, \"Layering\", puts `{name}` of {root} in no band: add it to the band "
            "above what it imports (`--layers` prints the floors its imports give)"
        )
    return bands, problems


def layer_violations(root, bands):
    """Each arrow that goes up the list: `file -> file: what it breaks`."""
    graph = import_graph(root)
    violations = []
    for source in sorted(graph):
        importer = top_module(root, source)
        for target in sorted(graph[source]):
            imported = top_module(root, target)
            if importer == imported or importer not in bands or imported not in bands:
                continue
            (band, step), (other_band, other_step) = bands[importer], bands[imported]
            if other_band > band:
                why = (
                    f"{importer} (band {band}) imports {imported} (band {other_band}), "
                    "a higher band"
                )
            elif other_band == band and other_step > step:
                why = (
                    f"{importer} (band {band}, step {step}) imports {imported} (band {band}, "
                    f"step {other_step}), a later step of its band"
                )
            elif other_band == band and other_step == step:
                why = (
                    f"{importer} (band {band}, step {step}) imports {imported} (band {band}, "
                    f"step {step}): the modules of one step import none of each other"
                )
            else:
                continue
            violations.append(f"{source} -> {target}: {why}")
    return violations


def check_layers(root):
    """Prints what goes up the list, or what is wrong with the list; true
    when something is."""
    bands, problems = bands_of(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return True
    violations = layer_violations(root, bands)
    if violations:
        print(
            f"{len(violations)} import(s) go up the layer list of {ARCHITECTURE} (\"Layering\"):",
            file=sys.stderr,
        )
        for violation in violations:
            print(f"  {violation}", file=sys.stderr)
        print(
            "hint: a module imports only modules of lower bands, or of earlier steps of its "
            "band (`then` starts a step); move what it needs down into a lower band, or, when "
            "the module it imports imports nothing at or above it, move that one down the list",
            file=sys.stderr,
        )
        return True
    return False


def main():
    if sys.argv[1:2] == ["--layers"]:
        return print_layers(sys.argv[2] if len(sys.argv) > 2 else "engine/src")
    roots = sys.argv[1:] or ROOTS
    failed = False
    for root in roots:
        graph = import_graph(root)
        for component in circles(graph):
            if frozenset(component) in ALLOWED:
                continue
            failed = True
            members = set(component)
            print(f"import circle in {root}: {len(component)} files", file=sys.stderr)
            for source in component:
                for target in sorted(graph.get(source, ())):
                    if target in members:
                        print(f"  {source} -> {target}", file=sys.stderr)
    if failed:
        print(
            "hint: move what both sides need into a leaf file that imports neither "
            "(docs/ARCHITECTURE.md, \"Layering\")",
            file=sys.stderr,
        )
    layered = LAYERED_ROOT in [root.rstrip("/") for root in roots]
    if layered and check_layers(LAYERED_ROOT):
        failed = True
    if failed:
        return 1
    print(f"no import circle in {len(roots)} source roots")
    if layered:
        print(f"no import goes up the layer list of {LAYERED_ROOT} ({ARCHITECTURE}, \"Layering\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
