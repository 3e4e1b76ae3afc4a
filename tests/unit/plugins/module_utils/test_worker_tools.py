"""The worker tools archive on the controller (module_utils/worker_tools.py): where a relative path resolves, and an
archive the nodes cannot use refused before anything is installed (the validation play and the worker role)."""

from __future__ import annotations

import io
import struct
import tarfile

import pytest
import yaml

from lab import tools_archive
from support.ansible_runner import REPO

from ansible_collections.pairserve.llm.plugins.module_utils import worker_tools  # noqa: E402


def _elf(machine):
    """The first bytes of a 64-bit little-endian ELF executable for ``machine`` (e_machine)."""
    return b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + struct.pack("<HH", 2, machine) + b"\x00" * 44


def _archive(path, tools):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in tools.items():
            info = tarfile.TarInfo("%s/%s" % (name, name))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("versions.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    return path


def test_a_relative_path_is_under_the_inventory_not_the_collection(tmp_path):
    assert worker_tools.resolve("files/t.tar.gz", "/srv/inv/mysite") == "/srv/inv/mysite/files/t.tar.gz"
    assert worker_tools.resolve("/abs/t.tar.gz", "/srv/inv/mysite") == "/abs/t.tar.gz"
    assert worker_tools.resolve("files/t.tar.gz", None) is None
    found = worker_tools.problems("files/t.tar.gz", None)
    assert len(found) == 1 and "absolute path" in found[0]


def test_linux_amd64_tools_and_scripts_pass(tmp_path):
    elf = _archive(tmp_path / "elf.tar.gz", {"gguf-parser": _elf(62), "fastfetch": _elf(62)})
    assert worker_tools.problems(str(elf), None) == []
    # the lab's stub archive (shell scripts run on any platform), by a path relative to the inventory
    (tmp_path / "files").mkdir()
    tools_archive.write("2.2.3", str(tmp_path / "files" / "gpustack-tools-2.2.3-linux-amd64.tar.gz"))
    assert worker_tools.problems(worker_tools.default_path("2.2.3"), str(tmp_path)) == []


@pytest.mark.parametrize("tools,expected", [
    ({"gguf-parser": b"\xcf\xfa\xed\xfe" + b"\x00" * 60, "fastfetch": _elf(62)}, "its gguf-parser is a macOS executable"),
    ({"gguf-parser": _elf(62), "fastfetch": _elf(183)}, "its fastfetch is a Linux arm64 executable"),
    ({"gguf-parser": _elf(62)}, "holds no fastfetch"),
    ({"gguf-parser": b"MZ" + b"\x00" * 62, "fastfetch": _elf(62)}, "its gguf-parser is a Windows executable"),
])
def test_an_archive_for_another_platform_is_refused_with_the_command(tmp_path, tools, expected):
    found = worker_tools.problems(str(_archive(tmp_path / "a.tar.gz", tools)), None)
    assert len(found) == 1 and expected in found[0], found
    assert "download-tools --system linux --arch amd64" in found[0] and "step 4" in found[0]


def test_missing_or_not_an_archive(tmp_path):
    missing = worker_tools.problems("files/none.tar.gz", str(tmp_path))
    assert missing and "%s/files/none.tar.gz does not exist" % tmp_path in missing[0]
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar")
    junk = worker_tools.problems(str(tmp_path / "junk.tar.gz"), None)
    assert junk and "is not a tar archive" in junk[0]
    assert "is empty" in worker_tools.problems("", None)[0]


def test_the_worker_roles_default_is_the_rules_default():
    defaults = yaml.safe_load((REPO / "roles" / "gpustack_worker" / "defaults" / "main.yml").read_text())
    assert defaults[worker_tools.VARIABLE].replace("{{ pairserve_gpustack_version }}", "%s") == worker_tools.DEFAULT
    preflight = (REPO / "roles" / "gpustack_worker" / "tasks" / "preflight.yml").read_text()
    # the role resolves and checks the archive by the same rule, never under its own role_path
    assert "pairserve.llm.worker_tools_archive(inventory_dir)" in preflight
    assert "pairserve.llm.worker_tools_problems(inventory_dir)" in preflight and "role_path" not in preflight
