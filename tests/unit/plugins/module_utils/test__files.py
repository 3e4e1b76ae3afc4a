"""Tests of module_utils/_files.py, the collection's one atomic write: the content is replaced whole, the mode
and owner are what the caller asked for (or the replaced file's), a failure leaves the target as it was and no temp
file, and a writer killed before the rename leaves only a temp file whose name (temp_prefix) the hub's sweep
recognises."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import _files, hub

# tests/conftest.py puts this on sys.path for pytest; the killed child below needs it on its own.
COLLECTIONS = Path(__file__).resolve().parents[4] / ".cache" / "collections"


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_bytes_and_text_replace_the_content_whole(tmp_path):
    target = tmp_path / "record.json"
    _files.atomic_write(str(target), b"{}\n")
    assert target.read_bytes() == b"{}\n"
    _files.atomic_write(str(target), "gr\u00fc\u00dfe\n")
    assert target.read_bytes() == "gr\u00fc\u00dfe\n".encode("utf-8")
    assert entries(tmp_path) == ["record.json"]


def test_a_new_file_gets_0644_less_the_umask_and_an_asked_mode_wins(tmp_path):
    old = os.umask(0o027)
    try:
        _files.atomic_write(str(tmp_path / "a"), b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o7777 == 0o640
    _files.atomic_write(str(tmp_path / "secret"), b"k", mode=0o600)
    assert (tmp_path / "secret").stat().st_mode & 0o7777 == 0o600


def test_the_replaced_files_mode_and_owner_are_kept(tmp_path):
    target = tmp_path / "hosts.yml"
    target.write_text("a: 1\n")
    target.chmod(0o640)
    os.chown(target, 1234, 4321)
    _files.atomic_write(str(target), "a: 2\n", like=os.stat(target))
    st = target.stat()
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o640, 1234, 4321)
    assert target.read_text() == "a: 2\n"


def test_a_symlink_is_replaced_by_a_file_and_its_target_is_not_written(tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(b"pristine")
    link = tmp_path / "tokenizer.json"
    link.symlink_to(blob)
    _files.atomic_write(str(link), b"patched")
    assert not link.is_symlink() and link.read_bytes() == b"patched"
    assert blob.read_bytes() == b"pristine"


def test_a_failed_write_leaves_the_target_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "weights.yml"
    target.write_text("before\n")

    def refuse(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        _files.atomic_write(str(target), "after\n")
    assert target.read_text() == "before\n"
    assert entries(tmp_path) == ["weights.yml"]


def test_a_writer_killed_before_the_rename_leaves_a_temp_file_the_sweep_recognises(tmp_path):
    target = tmp_path / "tokenizer.json"
    target.write_text("old")
    # A child that writes through _files and is killed (SIGKILL, no cleanup) between the fsync and the rename.
    child = textwrap.dedent("""
        import os, signal, sys
        sys.path.insert(0, sys.argv[2])
        from ansible_collections.pairserve.llm.plugins.module_utils import _files
        os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
        _files.atomic_write(sys.argv[1], b"new")
    """)
    proc = subprocess.run([sys.executable, "-c", child, str(target), str(COLLECTIONS)],
                          check=False)
    assert proc.returncode == -signal.SIGKILL
    assert target.read_text() == "old"
    debris = [n for n in entries(tmp_path) if n != "tokenizer.json"]
    assert len(debris) == 1 and debris[0].startswith(_files.temp_prefix(str(target))), debris
    assert hub.sweep_temp_files(str(tmp_path)) == [str(tmp_path / debris[0])]
    assert entries(tmp_path) == ["tokenizer.json"]


def test_the_temp_prefix_hides_the_file_and_names_its_target():
    assert _files.temp_prefix("/var/lib/x/tokenizer.json") == ".tokenizer.json.pairserve-"
    assert _files.temp_prefix("hosts.yml") == ".hosts.yml.pairserve-"


def test_an_asked_mode_wins_over_the_replaced_files_mode(tmp_path):
    target = tmp_path / "token"
    target.write_text("old")
    target.chmod(0o644)
    _files.atomic_write(str(target), "new", mode=0o600, like=os.stat(target))
    assert target.stat().st_mode & 0o7777 == 0o600 and target.read_text() == "new"


def test_a_missing_directory_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(FileNotFoundError):
        _files.atomic_write(str(tmp_path / "absent" / "file"), b"x")
    with pytest.raises(FileNotFoundError):
        _files.fsync_dir(str(tmp_path / "absent"))
    assert entries(tmp_path) == []
