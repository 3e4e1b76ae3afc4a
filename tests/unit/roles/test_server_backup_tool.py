"""pairserve-server-backup (roles/server_backup/files), the parts that need no database: an archive is checked member
by member against its manifest before a restore touches anything (a missing, truncated, altered, incomplete or
foreign archive is refused, naming the file and what is wrong), retention keeps the newest, a restore of another
GPUStack version is refused before the database is asked, and restored files are written atomically, 0600.
The dump and restore themselves run against real PostgreSQL and GPUStack in
tests/integration/gpustack/test_backup_restore.py."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import io
import json
import os
import stat
import tarfile

import pytest

from lab.ansible_runner import REPO

TOOL = REPO / "roles" / "server_backup" / "files" / "pairserve_server_backup.py"


def load_tool():
    loader = importlib.machinery.SourceFileLoader("pairserve_server_backup", str(TOOL))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


tool = load_tool()

MEMBERS = {"gpustack.dump": b"PGDMP fake custom-format dump", "data/jwt_secret_key": b"a" * 64,
           "secrets/inference-api-key": b"sk-pairserve-xyz\n"}


def archive(path, members=None, manifest_files=None, fmt=1, version="2.2.3"):
    """An archive in the tool's format; members and the manifest's file list can disagree on purpose."""
    members = MEMBERS if members is None else members
    files = {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in (manifest_files or members).items()}
    manifest = {"format": fmt, "created": "2026-12-06T03:15:00+00:00", "host": "node-a", "gpustack_version": version,
                "db_name": "gpustack", "files": files}
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode())] + list(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_sound_archive_gives_its_manifest(tmp_path):
    manifest = tool.read_manifest(str(archive(tmp_path / "a.tar.gz")))
    assert sorted(manifest["files"]) == sorted(MEMBERS) and manifest["gpustack_version"] == "2.2.3"


@pytest.mark.parametrize("damage, message", [
    ("missing", "no such backup file"),
    ("truncated", "not a readable pairserve server backup"),
    ("not a tar", "not a readable pairserve server backup"),
    ("altered", "gpustack.dump does not match its checksum (the archive is corrupt)"),
    ("incomplete", "secrets/inference-api-key missing from the archive (it is incomplete)"),
    ("foreign member", "unexpected member '../etc/passwd'"),
    ("no dump", "gpustack.dump missing from the archive"),
    ("other format", "backup format 2, this tool reads 1"),
    ("no manifest", "not a readable pairserve server backup"),
])
def test_a_bad_archive_is_refused_naming_the_file_and_the_fault(tmp_path, damage, message):
    path = tmp_path / "pairserve-server-backup-x.tar.gz"
    if damage == "truncated":
        whole = archive(tmp_path / "whole.tar.gz").read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
    elif damage == "not a tar":
        path.write_text("hello")
    elif damage == "altered":
        archive(path, members=dict(MEMBERS, **{"gpustack.dump": b"PGDMP other bytes"}), manifest_files=MEMBERS)
    elif damage == "incomplete":
        archive(path, members={k: v for k, v in MEMBERS.items() if not k.startswith("secrets/")}, manifest_files=MEMBERS)
    elif damage == "foreign member":
        archive(path, members=dict(MEMBERS, **{"../etc/passwd": b"root:x:0:0"}), manifest_files=MEMBERS)
    elif damage == "no dump":
        archive(path, members={k: v for k, v in MEMBERS.items() if k != "gpustack.dump"})
    elif damage == "other format":
        archive(path, fmt=2)
    elif damage == "no manifest":
        with tarfile.open(path, "w:gz") as tar:
            tar.add(__file__, "gpustack.dump")
    with pytest.raises(tool.Refused) as err:
        tool.read_manifest(str(path))
    assert str(path) in str(err.value) and message in str(err.value), str(err.value)


def test_the_command_line_exits_2_and_says_why(tmp_path, capsys):
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(archive(tmp_path / "whole.tar.gz").read_bytes()[:100])
    assert tool.main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pairserve-server-backup: ") and str(path) in err
    assert tool.main(["verify", str(tmp_path / "whole.tar.gz")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["manifest"]["host"] == "node-a" and len(out["sha256"]) == 64


def test_retention_keeps_the_newest(tmp_path):
    names = [f"pairserve-server-backup-2026120{d}T031500000000Z.tar.gz" for d in (1, 2, 3, 4)]
    for name in names + ["unrelated.tar.gz", ".work-abc"]:
        (tmp_path / name).write_text("x")
    assert tool.prune(str(tmp_path), 0) == []
    assert tool.prune(str(tmp_path), 2) == names[:2]
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:] + ["unrelated.tar.gz", ".work-abc"])
    assert tool.prune(str(tmp_path), 2) == []


def test_a_restore_of_another_version_is_refused_before_the_database_is_asked(tmp_path):
    cfg = {"backup_dir": str(tmp_path), "keep": 1, "db_name": "gpustack", "data_dir": str(tmp_path / "data"),
           "data_files": ["jwt_secret_key"], "secrets_dir": str(tmp_path / "secrets"), "gpustack_version": "2.3.0",
           # a client that cannot run: reaching the database would fail differently
           "pg_bin": str(tmp_path / "no-such-bin")}
    path = archive(tmp_path / "a.tar.gz", version="2.2.3")
    with pytest.raises(tool.Refused, match=r"taken from GPUStack 2\.2\.3, this node runs 2\.3\.0"):
        tool.restore(cfg, str(path))
    assert not (tmp_path / "data").exists() and not (tmp_path / "secrets").exists()


def test_restored_files_are_written_whole_and_root_only(tmp_path):
    dest = tmp_path / "jwt_secret_key"
    dest.write_text("old")
    dest.chmod(0o644)
    tool.write_atomic(str(dest), b"new", 0o600)
    assert dest.read_bytes() == b"new" and stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["jwt_secret_key"]


def test_the_configuration_names_what_it_lacks(tmp_path):
    cfg = tmp_path / "server-backup.json"
    cfg.write_text(json.dumps({"backup_dir": "/x", "keep": 1}))
    with pytest.raises(tool.Refused, match="lacks db_name, data_dir, data_files, secrets_dir"):
        tool.load_config(str(cfg))
