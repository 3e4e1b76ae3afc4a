"""pairserve-server-backup (roles/server_backup/files), the parts that need no database: an archive is checked member
by member against its manifest before a restore touches anything (a missing, truncated, altered, incomplete or
foreign archive is refused, naming the file and what is wrong), retention keeps the newest, a restore of another
GPUStack version is refused before the database is asked, restored files are written atomically, 0600, and the
restored workers are held (heartbeat at the restore's time, not_ready) right after pg_restore.
The role's install entry point runs through Ansible on localhost (tmp paths, no timer): root-only files, check mode,
a second run changed=0, bad settings refused before anything is written. The dump and restore themselves run
against real PostgreSQL and GPUStack in tests/integration/gpustack/test_backup_restore.py."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import io
import json
import os
import stat
import subprocess
import sys
import tarfile

import pytest

from support.ansible_runner import REPO, run_playbook

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


def test_a_restore_holds_the_restored_workers_until_they_report(tmp_path, monkeypatch):
    """Right after pg_restore, before the server starts: the workers GPUStack judges by heartbeat get the restore's
    time and not_ready with a message, so its instance cleaner does not delete the running replicas' instances on
    the backup's old heartbeats (docs/how-to/backup-restore.md, "The running replicas across a restore")."""
    cfg = {"backup_dir": str(tmp_path), "keep": 1, "db_name": "gpustack", "data_dir": str(tmp_path / "data"),
           "data_files": ["jwt_secret_key"], "secrets_dir": str(tmp_path / "secrets"), "gpustack_version": "2.2.3"}
    calls = []

    def fake_run(argv, stdout=None):
        calls.append(argv)
        sql = argv[-1]
        if "information_schema.tables" in sql:
            return "0\n"
        return "4\n7\n" if sql.startswith("UPDATE workers") else ""

    monkeypatch.setattr(tool, "run", fake_run)
    out = tool.restore(cfg, str(archive(tmp_path / "a.tar.gz")))
    assert [os.path.basename(c[0]) for c in calls] == ["psql", "pg_restore", "psql"]
    update = calls[2][-1]
    assert "heartbeat_time = date_trunc('second', now() AT TIME ZONE 'UTC')" in update
    assert "state = 'NOT_READY'" in update and "worker''s first status report" in update
    assert "WHERE state IN ('READY', 'NOT_READY', 'UNREACHABLE')" in update and "ON_ERROR_STOP=1" in calls[2]
    assert out["workers_held"] == 2
    assert (tmp_path / "data" / "jwt_secret_key").read_bytes() == MEMBERS["data/jwt_secret_key"]


def _restore_with_fake_database(tmp_path, monkeypatch, members):
    cfg = {"backup_dir": str(tmp_path), "keep": 1, "db_name": "gpustack", "data_dir": str(tmp_path / "data"),
           "data_files": ["jwt_secret_key", "bootstrap_version"], "secrets_dir": str(tmp_path / "secrets"),
           "gpustack_version": "2.2.3"}
    monkeypatch.setattr(tool, "run", lambda argv, stdout=None: "0\n" if "information_schema.tables" in argv[-1] else "")
    return tool.restore(cfg, str(archive(tmp_path / "a.tar.gz", members=members)))


def test_a_restore_marks_the_data_directory_as_gpustack_initialised_it(tmp_path, monkeypatch):
    """GPUStack writes bootstrap_version only when it creates its tables, which a restored database has: a data
    directory with files and no marker is taken for a 2.0.0 install, whose server runs an embedded worker (the lab's
    restore drill: on a node rebuilt bare it found no tools, died, and took the server down). An archive without the
    marker gets it, with the archive's GPUStack version."""
    out = _restore_with_fake_database(tmp_path, monkeypatch, MEMBERS)
    assert (tmp_path / "data" / "bootstrap_version").read_text() == "2.2.3"
    assert "data/bootstrap_version" in out["files"]


def test_a_restore_keeps_the_archives_own_marker(tmp_path, monkeypatch):
    out = _restore_with_fake_database(tmp_path, monkeypatch, dict(MEMBERS, **{"data/bootstrap_version": b"v2.2.1"}))
    assert (tmp_path / "data" / "bootstrap_version").read_bytes() == b"v2.2.1"
    assert out["files"].count("data/bootstrap_version") == 1


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


# -- the role's install entry point on localhost, with every path under tmp and no timer (no systemd here) ----------

def install(tmp_path, check=False, entry="main", **extra):
    play_vars = {"ansible_python_interpreter": sys.executable, "pairserve_gpustack_version": "2.2.3",
                 "pairserve_backup_schedule": "", "pairserve_backup_dir": str(tmp_path / "backups" / "server"),
                 "pairserve_backup_tool": str(tmp_path / "sbin" / "pairserve-server-backup"),
                 "pairserve_backup_config": str(tmp_path / "etc" / "server-backup.json"),
                 "pairserve_backup_restore_record": str(tmp_path / "state" / "server-restore.json"),
                 "pairserve_gpustack_server_data_dir": str(tmp_path / "data"),
                 "pairserve_gpustack_secrets_dir": str(tmp_path / "secrets"), **extra}
    playbook = tmp_path / "install.yml"
    playbook.write_text(json.dumps([{"name": "server_backup main", "hosts": "localhost", "gather_facts": False,
                                     "connection": "local", "vars": play_vars, "tasks": [
                                         {"name": "Install the backups",
                                          "ansible.builtin.include_role": {"name": "pairserve.llm.server_backup",
                                                                           "tasks_from": entry}}]}]))
    return run_playbook(playbook, check=check, timeout=300)


def changed(result):
    return [r["_task"] for r in result.results if r.get("changed")]


def test_install_writes_root_only_files_changes_nothing_the_second_time_and_absent_removes_them(tmp_path):
    planned = install(tmp_path, check=True)
    assert planned.rc == 0 and changed(planned) and not (tmp_path / "backups").exists(), planned.stdout[-3000:]
    first = install(tmp_path)
    assert first.rc == 0 and changed(first), first.stdout[-3000:]
    tool_file = tmp_path / "sbin" / "pairserve-server-backup"
    assert tool_file.read_text().startswith("#!/usr/bin/python3\n") and stat.S_IMODE(tool_file.stat().st_mode) == 0o755
    config = json.loads((tmp_path / "etc" / "server-backup.json").read_text())
    assert config["data_dir"] == str(tmp_path / "data") and config["db_name"] == "gpustack" and config["keep"] == 14
    assert config["data_files"] == ["jwt_secret_key", "token", "bootstrap_version"] and config["gpustack_version"] == "2.2.3"
    assert stat.S_IMODE((tmp_path / "etc" / "server-backup.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "backups" / "server").stat().st_mode) == 0o700
    again = install(tmp_path)
    assert again.rc == 0 and changed(again) == [], changed(again)
    # The installed tool is the collection's: it answers.
    out = subprocess.run([sys.executable, str(tool_file), "verify", str(tmp_path / "none.tar.gz")], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 2 and "no such backup file" in out.stderr

    # absent: the tool, its configuration and the restore record go; the archives stay unless asked.
    (tmp_path / "backups" / "server" / "pairserve-server-backup-20261206T031500000000Z.tar.gz").write_text("x")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "server-restore.json").write_text("{}")
    kept = install(tmp_path, entry="absent")
    assert kept.rc == 0 and changed(kept), kept.stdout[-3000:]
    # The record's directory went with its last file; the tool's and the configuration's (system directories on a
    # node, /etc/pairserve going with the server's secrets) stay empty.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name in ("backups", "sbin", "etc", "state")) == [
        "backups", "etc", "sbin"]
    assert not list((tmp_path / "sbin").iterdir()) and not list((tmp_path / "etc").iterdir())
    assert list((tmp_path / "backups" / "server").iterdir())
    purged = install(tmp_path, entry="absent", pairserve_backup_absent_archives=True)
    assert purged.rc == 0 and changed(purged) == ["Remove the archives"], changed(purged)
    assert not (tmp_path / "backups" / "server").exists()


@pytest.mark.parametrize("variable, value, message", [
    ("pairserve_backup_schedule", "every tuesday-ish", "is not a systemd calendar event"),
    ("pairserve_backup_dir", "/backups", "must be an absolute path at least two levels deep"),
])
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, variable, value, message):
    refused = install(tmp_path, **{variable: value})
    assert refused.rc != 0 and "localhost" in refused.stdout and variable in refused.stdout, refused.stdout[-3000:]
    assert message in refused.stdout, refused.stdout[-3000:]
    assert changed(refused) == [] and not (tmp_path / "sbin").exists() and not (tmp_path / "etc").exists()


@pytest.mark.parametrize("fault", ["corrupt", "another version"])
def test_restore_yml_refuses_a_bad_archive_on_the_controller_before_the_node_is_touched(tmp_path, fault):
    """playbooks/restore.yml judges the archive where it lies, before the first task on the server node."""
    path = tmp_path / "pairserve-server-backup-20261206T031500000000Z.tar.gz"
    if fault == "corrupt":
        whole = archive(tmp_path / "whole.tar.gz").read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
        said = f"node-a: pairserve_backup_restore_file cannot be restored: {path}: not a readable pairserve server backup"
    else:
        archive(path, version="2.1.0")
        said = f"node-a: {path} was taken from GPUStack 2.1.0, pairserve_gpustack_version is 2.2.3"
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpustack_server": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "pairserve_gpustack_version": "2.2.3",
        # every path the role could write under tmp, no timer: a regression of the order touches nothing here
        "pairserve_backup_schedule": "", "pairserve_backup_dir": str(tmp_path / "backups" / "server"),
        "pairserve_backup_tool": str(tmp_path / "sbin" / "pairserve-server-backup"),
        "pairserve_backup_config": str(tmp_path / "etc" / "server-backup.json"),
        "pairserve_backup_restore_record": str(tmp_path / "state" / "server-restore.json")}}}}}}))
    refused = run_playbook(REPO / "playbooks" / "restore.yml", inventory=inventory,
                           extra_vars={"pairserve_backup_restore_file": str(path)}, timeout=300)
    assert refused.rc != 0, refused.stdout[-3000:]
    assert said in " ".join(refused.stdout.split()), refused.stdout[-3000:]
    assert "Nothing was changed" in refused.stdout and changed(refused) == []
    assert not [p.name for p in tmp_path.iterdir() if p.name in ("backups", "sbin", "etc", "state")]
