"""Backups of the GPUStack server node: GPUStack's PostgreSQL database, the files of its data directory that keys and
workers depend on, and the collection's secrets (the API keys' values), in one root-only archive.

    pairserve-server-backup [--config FILE] create        # one archive now, then retention; prints JSON
    pairserve-server-backup [--config FILE] verify FILE   # checks an archive; prints its manifest as JSON
    pairserve-server-backup [--config FILE] state         # what this node holds now (database tables, data files)
    pairserve-server-backup [--config FILE] restore FILE  # into an empty database and data directory; prints JSON

Installed by the pairserve.llm.server_backup role as /usr/local/sbin/pairserve-server-backup (the role adds the
shebang) with its JSON configuration; run by its systemd timer
and by playbooks/backup.yml and playbooks/restore.yml. Exit 0 on success, 2 on a refusal or a bad archive (the
message names the file and what is wrong), 1 on a failed command.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile

FORMAT = 1
PREFIX = "pairserve-server-backup-"
SUFFIX = ".tar.gz"
DUMP = "gpustack.dump"
MANIFEST = "manifest.json"
DEFAULT_CONFIG = "/etc/pairserve/server-backup.json"
CHUNK = 1 << 20


class Refused(Exception):
    """A bad archive or a refused restore: exit 2 with the message."""


def load_config(path):
    try:
        with open(path, encoding="utf-8") as handle:
            cfg = json.load(handle)
    except (OSError, ValueError) as exc:
        raise Refused(f"{path}: cannot read the backup configuration ({exc})") from exc
    missing = [k for k in ("backup_dir", "keep", "db_name", "data_dir", "data_files", "secrets_dir") if k not in cfg]
    if missing:
        raise Refused(f"{path}: the backup configuration lacks {', '.join(missing)}")
    return cfg


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def pg_argv(cfg, tool, *args):
    """A PostgreSQL client command, run as the database's OS superuser (peer authentication) when we are root."""
    binary = os.path.join(cfg["pg_bin"], tool) if cfg.get("pg_bin") else tool
    argv = [binary]
    if cfg.get("db_host"):
        argv += ["-h", cfg["db_host"]]
    if cfg.get("db_port"):
        argv += ["-p", str(cfg["db_port"])]
    argv += list(args)
    if cfg.get("db_os_user") and os.geteuid() == 0:
        argv = ["runuser", "-u", cfg["db_os_user"], "--"] + argv
    return argv


def run(argv, stdout=None):
    proc = subprocess.run(argv, stdout=stdout if stdout is not None else subprocess.PIPE, stderr=subprocess.PIPE,
                          check=False, cwd="/")
    if proc.returncode:
        tool = argv[4] if argv[0] == "runuser" else argv[0]
        raise RuntimeError(f"{os.path.basename(tool)} failed ({proc.returncode}): "
                           f"{proc.stderr.decode(errors='replace').strip()[-2000:]}")
    return proc.stdout.decode(errors="replace") if stdout is None else ""


def table_count(cfg):
    out = run(pg_argv(cfg, "psql", "-X", "-A", "-t", "-d", cfg["db_name"], "-c",
                      "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"))
    return int(out.strip() or 0)


def archive_names(backup_dir):
    try:
        names = os.listdir(backup_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(PREFIX) and n.endswith(SUFFIX))


def add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = int(datetime.datetime.now(datetime.timezone.utc).timestamp())
    tar.addfile(info, io.BytesIO(data))


def create(cfg):
    backup_dir = cfg["backup_dir"]
    os.makedirs(backup_dir, mode=0o700, exist_ok=True)
    os.chmod(backup_dir, 0o700)
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%S%fZ")
    final = os.path.join(backup_dir, f"{PREFIX}{stamp}{SUFFIX}")
    old_umask = os.umask(0o077)
    try:
        work = tempfile.mkdtemp(prefix=".work-", dir=backup_dir)
        try:
            dump = os.path.join(work, DUMP)
            # The dump goes to a file root opens: the database's OS user never needs the backup directory.
            with open(dump, "wb") as out:
                run(pg_argv(cfg, "pg_dump", "-Fc", "-d", cfg["db_name"]), stdout=out)
            files = {DUMP: {"sha256": sha256_file(dump), "size": os.path.getsize(dump)}}
            members = []
            for name in cfg["data_files"]:
                src = os.path.join(cfg["data_dir"], name)
                if os.path.exists(src):
                    members.append((src, "data/" + name))
            if os.path.isdir(cfg["secrets_dir"]):
                for name in sorted(os.listdir(cfg["secrets_dir"])):
                    src = os.path.join(cfg["secrets_dir"], name)
                    if os.path.isfile(src):
                        members.append((src, "secrets/" + name))
            for src, arc in members:
                files[arc] = {"sha256": sha256_file(src), "size": os.path.getsize(src)}
            manifest = {"format": FORMAT, "created": now.isoformat(timespec="seconds"),
                        "host": cfg.get("host") or socket.gethostname(),
                        "gpustack_version": cfg.get("gpustack_version", ""), "db_name": cfg["db_name"],
                        "files": files}
            partial = os.path.join(work, "archive" + SUFFIX)
            with tarfile.open(partial, "w:gz") as tar:
                add_bytes(tar, MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
                tar.add(dump, DUMP)
                for src, arc in members:
                    tar.add(src, arc)
            with open(partial, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(partial, final)  # atomic: a reader sees a whole archive or none
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        os.umask(old_umask)
    removed = prune(backup_dir, int(cfg["keep"]))
    return {"archive": final, "sha256": sha256_file(final), "size": os.path.getsize(final),
            "manifest": manifest_summary(manifest), "removed": removed, "kept": archive_names(backup_dir)}


def prune(backup_dir, keep):
    """Retention: remove all but the newest `keep` archives (names sort by their UTC time); 0 keeps every one."""
    names = archive_names(backup_dir)
    removed = names[:len(names) - keep] if 0 < keep < len(names) else []
    for name in removed:
        os.unlink(os.path.join(backup_dir, name))
    return removed


def manifest_summary(manifest):
    summary = {k: manifest[k] for k in ("format", "created", "host", "gpustack_version", "db_name")}
    summary["files"] = sorted(manifest["files"])
    return summary


def read_manifest(path):
    """The archive's manifest, after checking every member against it. Raises Refused naming what is wrong."""
    if not os.path.isfile(path):
        raise Refused(f"{path}: no such backup file")
    try:
        with tarfile.open(path, "r:gz") as tar:
            member = tar.getmember(MANIFEST)
            manifest = json.loads(tar.extractfile(member).read())
            if manifest.get("format") != FORMAT:
                raise Refused(f"{path}: backup format {manifest.get('format')!r}, this tool reads {FORMAT}")
            seen = set()
            for info in tar.getmembers():
                if info.name == MANIFEST:
                    continue
                want = manifest["files"].get(info.name)
                if want is None or not info.isfile() or info.name.startswith("/") or ".." in info.name.split("/"):
                    raise Refused(f"{path}: unexpected member {info.name!r} (not in its manifest)")
                digest = hashlib.sha256()
                handle = tar.extractfile(info)
                for block in iter(lambda: handle.read(CHUNK), b""):
                    digest.update(block)
                if digest.hexdigest() != want["sha256"]:
                    raise Refused(f"{path}: {info.name} does not match its checksum (the archive is corrupt)")
                seen.add(info.name)
            missing = sorted(set(manifest["files"]) - seen)
            if missing or DUMP not in manifest["files"]:
                raise Refused(f"{path}: {', '.join(missing or [DUMP])} missing from the archive (it is incomplete)")
    except Refused:
        raise
    except (tarfile.TarError, OSError, EOFError, KeyError, ValueError, AttributeError, TypeError) as exc:
        raise Refused(f"{path}: not a readable pairserve server backup ({type(exc).__name__}: {exc})") from exc
    return manifest


def state(cfg):
    data = {name: os.path.exists(os.path.join(cfg["data_dir"], name)) for name in cfg["data_files"]}
    record = None
    if cfg.get("restore_record") and os.path.exists(cfg["restore_record"]):
        with open(cfg["restore_record"], encoding="utf-8") as handle:
            record = json.load(handle)
    return {"tables": table_count(cfg), "data_files": data, "restored": record}


# GPUStack 2.2.3's server judges workers by the heartbeat time in its database: its worker syncer (every 15 s, the
# first 15 s after the start) marks a worker not_ready once that time is older than
# GPUSTACK_WORKER_HEARTBEAT_GRACE_PERIOD (150 s), and its worker instance cleaner (every 30 s, the first 30 s after
# the start) deletes every model instance of a not_ready worker whose heartbeat is older than
# GPUSTACK_MODEL_INSTANCE_RESCHEDULE_GRACE_PERIOD (300 s). A restored database holds the heartbeats of the backup's
# time, so a worker that kept serving while the server was gone would lose its running instances (a cold start)
# when its next heartbeat reaches the restored server after the cleaner's first pass. The restored workers that
# GPUStack judges by heartbeat therefore start from the restore's time, not_ready with a message, until each
# reports again: the next status report of a live worker makes it ready (and its heartbeats keep the cleaner off),
# while a worker that never comes back is rescheduled as GPUStack would after any server restart.
BOOTSTRAP_VERSION = "bootstrap_version"
RESTORED_WORKER_MESSAGE = ("Restored from a backup (pairserve-server-backup): waiting for this worker's first status "
                           "report to the restored server.")
HOLD_RESTORED_WORKERS = (
    "UPDATE workers SET heartbeat_time = date_trunc('second', now() AT TIME ZONE 'UTC'), state = 'NOT_READY', "
    "state_message = '" + RESTORED_WORKER_MESSAGE.replace("'", "''") + "' "
    "WHERE state IN ('READY', 'NOT_READY', 'UNREACHABLE') RETURNING id")


def hold_restored_workers(cfg):
    """Restart the heartbeat clock of the restored workers at the restore's time and keep them not_ready until they
    report (the comment above says why); returns how many were held."""
    out = run(pg_argv(cfg, "psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", cfg["db_name"], "-c",
                      HOLD_RESTORED_WORKERS))
    return len([line for line in out.splitlines() if line.strip().isdigit()])


def write_atomic(dest, data, mode, owner=None):
    directory = os.path.dirname(dest)
    fd, tmp = tempfile.mkstemp(prefix=".restore-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if owner:
            shutil.chown(tmp, owner, owner)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def restore(cfg, path, force=False):
    manifest = read_manifest(path)
    want = cfg.get("gpustack_version", "")
    if want and manifest.get("gpustack_version") and manifest["gpustack_version"] != want and not force:
        raise Refused(f"{path}: taken from GPUStack {manifest['gpustack_version']}, this node runs {want}: restore "
                      f"with the version the backup was taken from (pairserve_gpustack_version), then upgrade")
    tables = table_count(cfg)
    if tables and not force:
        raise Refused(f"database {cfg['db_name']} already has {tables} tables: restore refused onto a server with "
                      f"data (force it to drop them first)")
    sha = sha256_file(path)
    with tarfile.open(path, "r:gz") as tar:
        with tempfile.TemporaryDirectory(prefix="pairserve-restore-") as work:
            os.chmod(work, 0o700)
            dump = os.path.join(work, DUMP)
            with open(dump, "wb") as out:
                shutil.copyfileobj(tar.extractfile(DUMP), out, CHUNK)
            if cfg.get("db_os_user") and os.geteuid() == 0:
                shutil.chown(work, cfg["db_os_user"])
                shutil.chown(dump, cfg["db_os_user"])
            args = ["--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction", "-d", cfg["db_name"]]
            if cfg.get("db_user"):
                args += ["--role", cfg["db_user"]]
            if tables:
                # forced onto a database with data: empty its schema first, in one transaction with nothing else
                run(pg_argv(cfg, "psql", "-X", "-v", "ON_ERROR_STOP=1", "-d", cfg["db_name"], "-c",
                            "DROP SCHEMA public CASCADE; CREATE SCHEMA public"
                            + (f"; ALTER SCHEMA public OWNER TO \"{cfg['db_user']}\"" if cfg.get("db_user") else "")))
            run(pg_argv(cfg, "pg_restore", *args, dump))
        held = hold_restored_workers(cfg)
        os.makedirs(cfg["data_dir"], exist_ok=True)
        os.makedirs(cfg["secrets_dir"], mode=0o700, exist_ok=True)
        written = []
        for name in sorted(manifest["files"]):
            if name == DUMP:
                continue
            data = tar.extractfile(name).read()
            kind, base = name.split("/", 1)
            if kind == "data":
                write_atomic(os.path.join(cfg["data_dir"], base), data, 0o600, cfg.get("data_owner") or None)
            elif kind == "secrets":
                write_atomic(os.path.join(cfg["secrets_dir"], base), data, 0o600)
            written.append(name)
        # GPUStack writes bootstrap_version only when it creates its tables, which a restored database already has;
        # a data directory holding files but not it is taken for a 2.0.0 install, whose server runs an embedded
        # worker (GPUStack 2.2.3 config.py, _is_both_role): on a node rebuilt bare that worker found no tools, died,
        # and took the server down with it. An archive taken before the marker was one of its files gets it here.
        marker = os.path.join(cfg["data_dir"], BOOTSTRAP_VERSION)
        if "data/" + BOOTSTRAP_VERSION not in manifest["files"] and not os.path.exists(marker):
            write_atomic(marker, (manifest.get("gpustack_version") or cfg.get("gpustack_version") or "").encode(),
                         0o600, cfg.get("data_owner") or None)
            written.append("data/" + BOOTSTRAP_VERSION)
    record = {"archive": os.path.basename(path), "sha256": sha, "created": manifest["created"],
              "host": manifest["host"], "restored": datetime.datetime.now(datetime.timezone.utc).isoformat(
                  timespec="seconds")}
    if cfg.get("restore_record"):
        os.makedirs(os.path.dirname(cfg["restore_record"]), exist_ok=True)
        write_atomic(cfg["restore_record"], json.dumps(record, indent=1).encode() + b"\n", 0o600)
    return {"restored": record, "files": written, "manifest": manifest_summary(manifest), "workers_held": held}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("create")
    sub.add_parser("state")
    for name in ("verify", "restore"):
        one = sub.add_parser(name)
        one.add_argument("archive")
        if name == "restore":
            one.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "verify":
            manifest = read_manifest(args.archive)
            out = {"archive": args.archive, "sha256": sha256_file(args.archive), "manifest": manifest_summary(manifest)}
        else:
            cfg = load_config(args.config)
            if args.command == "create":
                out = create(cfg)
            elif args.command == "state":
                out = state(cfg)
            else:
                out = restore(cfg, args.archive, force=args.force)
    except Refused as exc:
        print(f"pairserve-server-backup: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as exc:
        print(f"pairserve-server-backup: {args.command} failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
