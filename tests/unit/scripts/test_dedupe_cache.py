"""scripts/dedupe_cache.py, which hardlinks identical files of the CPU vLLM venvs: equal bytes, mode and owner on one
filesystem become one inode, anything that differs stays its own file, small files and symlinks are left alone, the
bytes read back are unchanged, and a second run merges nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "dedupe_cache.py"

BIG = bytes(range(256)) * 64  # 16 KiB
OTHER = bytes(reversed(range(256))) * 64


def run(*roots: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, roots)], capture_output=True, text=True, check=False)


def write(path: Path, data: bytes, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_identical_files_become_one_inode_and_the_rest_stay_apart(tmp_path):
    a = write(tmp_path / "v1" / "site-packages" / "torch" / "lib.so", BIG)
    b = write(tmp_path / "v2" / "site-packages" / "torch" / "lib.so", BIG)
    c = write(tmp_path / "v3" / "lib.so", BIG)
    other = write(tmp_path / "v2" / "other.so", OTHER)
    exe = write(tmp_path / "v2" / "bin" / "tool", BIG, mode=0o755)  # same bytes, another mode
    small_a = write(tmp_path / "v1" / "small.py", b"x = 1\n")
    small_b = write(tmp_path / "v2" / "small.py", b"x = 1\n")
    link = tmp_path / "v3" / "link.so"
    link.symlink_to(a)

    res = run(tmp_path / "v1", tmp_path / "v2", tmp_path / "v3")
    assert res.returncode == 0, res.stderr
    assert "2 files hardlinked" in res.stdout, res.stdout
    assert a.stat().st_ino == b.stat().st_ino == c.stat().st_ino
    assert a.stat().st_nlink == 3
    assert other.stat().st_ino != a.stat().st_ino and other.read_bytes() == OTHER
    assert exe.stat().st_ino != a.stat().st_ino and exe.stat().st_mode & 0o777 == 0o755
    assert small_a.stat().st_ino != small_b.stat().st_ino
    assert link.is_symlink()
    assert b.read_bytes() == c.read_bytes() == BIG
    assert not list(tmp_path.rglob("*.dedupe-*"))

    again = run(tmp_path / "v1", tmp_path / "v2", tmp_path / "v3")
    assert again.returncode == 0 and "0 files hardlinked, 0.00 GiB freed" in again.stdout, again.stdout


def test_same_size_different_bytes_are_not_merged(tmp_path):
    a = write(tmp_path / "a.bin", BIG)
    b = write(tmp_path / "b.bin", OTHER)
    res = run(tmp_path)
    assert res.returncode == 0 and "0 files hardlinked" in res.stdout, res.stdout
    assert a.stat().st_ino != b.stat().st_ino
    assert a.read_bytes() == BIG and b.read_bytes() == OTHER


def test_a_missing_directory_is_refused_naming_it(tmp_path):
    res = run(tmp_path / "nope")
    assert res.returncode == 2
    assert "no such directory: %s" % (tmp_path / "nope") in res.stderr
