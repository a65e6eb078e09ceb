#!/usr/bin/env python3
"""Strips the line tables out of a wheel's binaries, in place, and keeps
them beside it (scripts/build-wheel.sh runs it on the release wheel).

    scripts/strip-wheel.py WHEEL

Each ELF member of WHEEL (`pipe` and the two workers) loses its debug
sections (`objcopy --strip-debug`) and gains a `.gnu_debuglink` to them;
the sections themselves go into `<wheel name>.debug.tar.gz` beside the
wheel, one `<binary>.debug` each (`objcopy --only-keep-debug`), and
RECORD is rewritten with the new digests and sizes.

Why not strip everything: the symbol table stays (about 4 MB of `pipe`'s
22), so that a user's `RUST_BACKTRACE=1` names the functions of a panic
without any other file. Its file and line numbers are what the `.debug`
files add: `gdb pipe` finds them through the debuglink when they lie
beside it, `addr2line -e pipe.debug` reads them directly, and their
GNU build id matches the shipped binary's.

The release wheel's binaries were two thirds line tables: 33 MB of
wheel against 13 MB stripped, and each install decompresses all of it
(docs/performance.md, "The wheel"). The build's own binaries in target/
keep theirs: only the wheel's copies are stripped.
"""

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile


def record_digest(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def objcopy():
    tool = shutil.which("objcopy")
    if tool is None:
        sys.exit(
            "error: `objcopy` is not on PATH, and the release wheel's binaries are stripped with it\n"
            "hint: install binutils (Debian: apt install binutils), or build with "
            "`scripts/build-wheel.sh --no-strip`"
        )
    return tool


def strip(tool, work, name, data):
    """The stripped binary's bytes and the path of its debug file."""
    binary = os.path.join(work, name)
    debug = binary + ".debug"
    with open(binary, "wb") as out:
        out.write(data)
    subprocess.run([tool, "--only-keep-debug", binary, debug], check=True)
    # --add-gnu-debuglink records the debug file's name and CRC: run from
    # its directory so that the name carries no path of this machine.
    subprocess.run(
        [tool, "--strip-debug", f"--add-gnu-debuglink={name}.debug", name, name + ".stripped"],
        check=True,
        cwd=work,
    )
    with open(binary + ".stripped", "rb") as stripped:
        return stripped.read(), debug


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/strip-wheel.py WHEEL")
    wheel = sys.argv[1]
    tool = objcopy()
    with tempfile.TemporaryDirectory() as work, zipfile.ZipFile(wheel) as source:
        members = [(info, source.read(info)) for info in source.infolist()]
        binaries = {info.filename for info, data in members if data[:4] == b"\x7fELF"}
        if not binaries:
            sys.exit(f"error: {wheel} holds no binary to strip")
        debug_files = []
        replaced = {}
        for info, data in members:
            if info.filename in binaries:
                name = os.path.basename(info.filename)
                replaced[info.filename], debug = strip(tool, work, name, data)
                debug_files.append(debug)
        record_name = next(info.filename for info, _ in members if info.filename.endswith(".dist-info/RECORD"))
        rewritten = wheel + ".partial"
        with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as out:
            record_lines = []
            for info, data in members:
                if info.filename == record_name:
                    continue
                data = replaced.get(info.filename, data)
                out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                record_lines.append(f"{info.filename},{record_digest(data)},{len(data)}")
            record_lines.append(f"{record_name},,")
            record = next(info for info, _ in members if info.filename == record_name)
            out.writestr(record, "\n".join(record_lines) + "\n", compress_type=zipfile.ZIP_DEFLATED)
        os.replace(rewritten, wheel)
        stem = os.path.basename(wheel)[: -len(".whl")]
        archive = os.path.join(os.path.dirname(wheel), stem + ".debug.tar.gz")
        with tarfile.open(archive + ".partial", "w:gz", compresslevel=6) as tar:
            for debug in debug_files:
                tar.add(debug, arcname=os.path.basename(debug))
        os.replace(archive + ".partial", archive)
    print(f"stripped {', '.join(sorted(os.path.basename(b) for b in binaries))}; their line tables in {archive}", file=sys.stderr)


if __name__ == "__main__":
    main()
