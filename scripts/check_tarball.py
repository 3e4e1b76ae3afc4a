#!/usr/bin/env python
"""Fail when the collection's tarball carries a file galaxy.yml's build_ignore keeps out (the one list of what does
not ship: caches and state, the lab, the development and CI tools, the GPU proofs, the benchmarks).

Usage: check_tarball.py GALAXY_YML TARBALL. Each entry of the tarball is checked against each pattern the way
ansible-galaxy applies them when it builds: a pattern matches the entry's path or the path of a folder above it.
"""

from __future__ import annotations

import fnmatch
import sys
import tarfile
from pathlib import PurePosixPath

import yaml


def kept_out(path: str, patterns: list[str]) -> str | None:
    """The pattern that keeps PATH out of the collection, if any (its own path or a folder above it)."""
    parts = PurePosixPath(path).parts
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        for pattern in patterns:
            if fnmatch.fnmatch(prefix, pattern):
                return pattern
    return None


def main(galaxy: str, tarball: str) -> int:
    with open(galaxy, encoding="utf-8") as handle:
        patterns = [str(p) for p in yaml.safe_load(handle).get("build_ignore") or []]
    if not patterns:
        print("%s has no build_ignore: nothing says what stays out of the collection" % galaxy, file=sys.stderr)
        return 1
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    leaked = [(name, pattern) for name in names for pattern in [kept_out(name, patterns)] if pattern]
    if leaked:
        print("the tarball carries what galaxy.yml's build_ignore keeps out:", file=sys.stderr)
        for name, pattern in leaked[:20]:
            print("  %s (build_ignore: %s)" % (name, pattern), file=sys.stderr)
        return 1
    print("%s: %d entries, none of the %d build_ignore patterns" % (tarball, len(names), len(patterns)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
