# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUStack releases the collection has constraints for, and the node Pythons of each: read from the
gpustack_install role's files (``gpustack-<release>.constraints.txt``, the release's holds; ``py3.X/gpustack-
<release>.constraints.txt``, its pins for one node Python, written by tools/resolve_constraints.py).

Controller side only (lookup gpustack_constraints): the validation play and the preflight role ask here instead of
globbing another role's folder by a path relative to theirs.
"""

from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.pairserve.llm.plugins.plugin_utils.role_defaults import ROLES

FILES = ROLES / "gpustack_install" / "files"
_HOLDS = re.compile(r"^gpustack-(?P<release>\d+\.\d+\.\d+)\.constraints\.txt\Z")
_PYTHON = re.compile(r"^py(?P<minor>3\.\d+)\Z")


def _minor_key(minor: str):
    return tuple(int(part) for part in minor.split("."))


def releases(files: Path = FILES) -> dict:
    """{release: [node Python minors with a constraints file, in version order]} for every release with holds."""
    out = {}
    for path in sorted(files.glob("gpustack-*.constraints.txt")):
        found = _HOLDS.match(path.name)
        if found:
            out[found.group("release")] = []
    for folder in files.iterdir() if files.is_dir() else []:
        found = _PYTHON.match(folder.name)
        if not (found and folder.is_dir()):
            continue
        for release in out:
            if (folder / ("gpustack-%s.constraints.txt" % release)).is_file():
                out[release].append(found.group("minor"))
    for minors in out.values():
        minors.sort(key=_minor_key)
    return out
