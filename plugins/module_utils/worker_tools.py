# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUStack worker tools archive on the controller: where it is and whether the nodes can use it.

A GPUStack worker downloads gguf-parser and fastfetch from GitHub at every start and aborts when it cannot; the
collection stages them from an archive made once with ``gpustack download-tools --save-archive``
(docs/first-install.md, step 4). ``download-tools`` saves the tools of the machine it runs on unless told the
nodes' platform, so an archive made on a laptop holds the laptop's binaries and the workers abort on the nodes.

The one owner of two rules, used by the validation play (inventory_check, before anything is installed) and by
the gpustack_worker role (filter pairserve.llm.worker_tools_archive):

- ``resolve``: a relative ``pairserve_gpustack_tools_archive`` is relative to the inventory's directory, so it
  names the same file in a checkout and with the collection installed from Galaxy (never a path inside the
  installed collection).
- ``problems``: the archive exists, is a tar archive, and holds each tool as a Linux x86-64 executable (ELF
  x86-64, or a script, which runs anywhere).
"""

from __future__ import annotations

import os
import tarfile

VARIABLE = "pairserve_gpustack_tools_archive"
TOOLS = ("gguf-parser", "fastfetch")
# The nodes' platform, as download-tools spells it and as the archive's name in the docs says it.
SYSTEM, ARCH = "linux", "amd64"
# The gpustack_worker role's default (roles/gpustack_worker/defaults/main.yml holds the same template; a unit test
# keeps the two equal): beside the inventory, in its files/ directory.
DEFAULT = "files/gpustack-tools-%s-linux-amd64.tar.gz"
HOW = ("build it in a throwaway venv with `gpustack download-tools --system linux --arch amd64 --save-archive "
       "<inventory>/files/gpustack-tools-<version>-linux-amd64.tar.gz` (docs/first-install.md, step 4)")
_ELF_X86_64 = 62  # e_machine of x86-64
_MACHINES = {3: "x86 (32-bit)", 40: "ARM (32-bit)", 183: "arm64", 243: "RISC-V", 21: "PowerPC 64"}


def default_path(version):
    """The role's default archive path for GPUStack ``version`` (relative to the inventory's directory)."""
    return DEFAULT % version


def resolve(path, inventory_dir):
    """The absolute controller path of ``path``: as is when absolute, else under ``inventory_dir``.

    Returns None when ``path`` is relative and the inventory's directory is unknown."""
    path = os.path.expanduser(str(path))
    if os.path.isabs(path):
        return os.path.normpath(path)
    if not inventory_dir:
        return None
    return os.path.normpath(os.path.join(str(inventory_dir), path))


def _platform(head):
    """What the first bytes of an executable say about its platform: None when it runs on linux/amd64."""
    if head.startswith(b"#!"):
        return None
    if head.startswith(b"\x7fELF"):
        if len(head) < 20:
            return "a truncated ELF file"
        little = head[5:6] == b"\x01"
        machine = int.from_bytes(head[18:20], "little" if little else "big")
        if machine == _ELF_X86_64:
            return None
        return "a Linux %s executable" % _MACHINES.get(machine, "machine %d" % machine)
    if head[:4] in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe"):
        return "a macOS executable"
    if head.startswith(b"MZ"):
        return "a Windows executable"
    return "not an executable"


def problems(path, inventory_dir):
    """[problem, ...] of the archive ``path`` (the variable's value) for nodes running linux/amd64."""
    if not isinstance(path, str) or not path.strip():
        return ["is empty: name the worker tools archive; " + HOW]
    where = resolve(path, inventory_dir)
    if where is None:
        return ["%s is relative, and the inventory's directory is not known: give an absolute path" % path]
    if not os.path.isfile(where):
        return ["%s does not exist on the controller (a relative path is relative to the inventory's directory): %s"
                % (where, HOW)]
    try:
        with tarfile.open(where) as tar:
            found = {}
            for member in tar.getmembers():
                name = os.path.basename(member.name)
                if member.isfile() and name in TOOLS and name not in found:
                    handle = tar.extractfile(member)
                    found[name] = handle.read(64) if handle else b""
    except (tarfile.TarError, OSError, EOFError) as err:
        return ["%s is not a tar archive made by download-tools --save-archive (%s): %s" % (where, err, HOW)]
    out = []
    missing = [t for t in TOOLS if t not in found]
    if missing:
        out.append("%s holds no %s: %s" % (where, " or ".join(missing), HOW))
    for tool in TOOLS:
        if tool in found:
            wrong = _platform(found[tool])
            if wrong:
                out.append("%s: its %s is %s, and the nodes run %s/%s: the archive was made for the machine that "
                           "ran download-tools; %s" % (where, tool, wrong, SYSTEM, ARCH, HOW))
    return out
