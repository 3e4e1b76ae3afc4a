"""The lab's GPUStack worker tools archive, in the layout of `gpustack download-tools --save-archive`.

Real nodes are given the archive a user made once on a machine that reaches GitHub (the worker role copies it and
loads it with `gpustack download-tools --load-archive`). The lab cannot reach GitHub, so it makes an archive of two
stub executables (lab/stand_ins/gpustack-tools/) and the `versions.json` the pinned release checks, and its inventory
names that archive: the worker role then takes the same road as on a real node. The bytes depend only on the inputs
(sorted entries, fixed owners and times, gzip without a timestamp), so a rebuilt archive is not a change.

    python3 -m lab.tools_archive <GPUStack version> <archive path>
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
import tarfile
from pathlib import Path

import yaml

TREE = Path(__file__).resolve().parent / "stand_ins" / "gpustack-tools"
TOOLS = ("fastfetch", "gguf-parser")


def tool_versions(gpustack_version: str) -> dict:
    table = yaml.safe_load((TREE / "tool-versions.yml").read_text())
    if gpustack_version not in table:
        raise SystemExit(
            f"lab: {TREE / 'tool-versions.yml'} has no tool versions for GPUStack {gpustack_version} (it knows "
            f"{', '.join(sorted(table))}); without them the worker downloads its tools from GitHub at start and "
            f"aborts offline. Add BUILTIN_GGUF_PARSER_VERSION and the version in download_fastfetch of "
            f"gpustack/worker/tools_manager.py from that release.")
    return table[gpustack_version]


def _info(name: str, size: int = 0, mode: int = 0o644, kind=tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type = size, mode, kind
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
    return info


def archive_bytes(gpustack_version: str) -> bytes:
    versions = json.dumps(tool_versions(gpustack_version), indent=4).encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for tool in TOOLS:
            tar.addfile(_info(tool, mode=0o755, kind=tarfile.DIRTYPE))
            data = (TREE / tool / tool).read_bytes()
            tar.addfile(_info(f"{tool}/{tool}", len(data), 0o755), io.BytesIO(data))
        tar.addfile(_info("versions.json", len(versions)), io.BytesIO(versions))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def write(gpustack_version: str, path: str) -> bool:
    """Write the archive atomically; False when the file already holds these bytes."""
    data = archive_bytes(gpustack_version)
    target = Path(path)
    if target.exists() and target.read_bytes() == data:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return True


def main(argv) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    changed = write(argv[0], argv[1])
    print(f"lab: {'wrote' if changed else 'kept'} {argv[1]} (GPUStack {argv[0]} worker tools, stubs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
