"""Backup and restore of the GPUStack server (playbooks/backup.yml, playbooks/restore.yml) against the session's real
GPUStack 2.2.3 on PostgreSQL 15.

One test, in the order an operator meets it: a model, a route over it and an inference key exist on the session's
server (server A); backup.yml takes an archive with the real pg_dump and fetches it to the "controller"; restore.yml
refuses server A itself (a database with data), naming it, before anything changes; then it
restores the archive into a fresh PostgreSQL cluster and an empty data directory, and starts a second GPUStack
server (server B) on them through the play's stop/start commands (the fixture's servers are no systemd units). On B
the same route, model, API keys and worker records come back: the old inference key authenticates on /v1, the
session worker's own token authenticates (a worker needs nothing new), and B kept A's jwt_secret_key. A rerun of
restore.yml changes nothing and does not restart B.

A running replica survives the restore: a second model has an instance on the session worker when the backup is
taken. Server B runs with shorter grace periods (heartbeat 60 s, reschedule 150 s, GPUStack's defaults 150 s and
300 s) and the restore waits until the archive's worker heartbeat is older than both, as a real backup of hours ago
is; the worker's next heartbeat reaches B a full heartbeat interval (30 s) after the play returns, after the first
pass of B's worker instance cleaner. Without the restore holding the restored workers (pairserve_server_backup.py,
hold_restored_workers) B's worker syncer marks the worker not_ready on its stale heartbeat and the cleaner deletes
the instance; with it the instance keeps its id through two cleaner passes and the worker stays not_ready with the
restore's message until it reports its status (the heartbeats alone do not make it ready).

Cost: about 7.5 minutes on the session's server and worker (440-450 s in two runs on 2 shared cores): the replica's
instance scheduled on the session worker (about 150 s), five ansible-playbook runs and one GPUStack start (backup
8-21 s, check mode and refusal 13-35 s, a fresh PostgreSQL + restore + GPUStack start on the restored database
28-59 s, the rerun 8-25 s), the wait until the archive's heartbeat is 120 s old, and 75 s of server B's cleaner
passes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpustack_helpers import wait_for
from lab import pins
from support.ansible_runner import REPO, run_module, run_playbook
from support.gpustack_models import config_only_checkpoint, model_args
from support.ports import free_port
from support.gpustack_server import Postgres, ensure_venv
from support.recap import parse_recap

pytestmark = [pytest.mark.slow]

BACKUP = REPO / "playbooks" / "backup.yml"
RESTORE = REPO / "playbooks" / "restore.yml"
OLD_KEY = "sk-pairserve-restore-old-inference-0001"
# Server B's grace periods (GPUSTACK_WORKER_HEARTBEAT_GRACE_PERIOD, GPUSTACK_MODEL_INSTANCE_RESCHEDULE_GRACE_PERIOD)
# and how old the archive's heartbeats are when the restore begins: older than both once B's cleaner first runs.
HEARTBEAT_GRACE, RESCHEDULE_GRACE, ARCHIVE_AGE = 60, 150, 120
WORKER_HEARTBEAT_INTERVAL = 30  # GPUStack 2.2.3's GPUSTACK_WORKER_HEARTBEAT_INTERVAL

# Server B's service manager for the play's stop/start commands: by PID from a pid file, never by name.
CTL = r'''
import os, signal, subprocess, sys, time
gpustack, config, pidfile, log, action = sys.argv[1:6]
grace = sys.argv[6:8]
if action == "stop" and os.path.exists(pidfile):
    pid = int(open(pidfile).read())
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            os.killpg(pid, 0)
            time.sleep(0.2)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.unlink(pidfile)
if action == "start":
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "HOME": os.environ.get("HOME", "/root"), "GPUSTACK_SKIP_RESERVE_EPHEMERAL_PORTS": "1",
           "GPUSTACK_WORKER_HEARTBEAT_GRACE_PERIOD": grace[0], "GPUSTACK_MODEL_INSTANCE_RESCHEDULE_GRACE_PERIOD": grace[1]}
    with open(log, "ab") as out:
        proc = subprocess.Popen([gpustack, "start", "--config-file", config], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=os.path.dirname(config), env=env, start_new_session=True)
    open(pidfile, "w").write(str(proc.pid))
'''


def http(url, key=None, method="GET", body=None):
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
    if key:
        req.add_header("Authorization", "Bearer " + key)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - 127.0.0.1 only
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        return err.code, None


def items(api_url, key, path):
    status, body = http(f"{api_url}{path}?perPage=1000", key)
    assert status == 200, (path, status)
    return body["items"]


def content(server_url, key):
    """What must come back, as a client and an operator see it: routes with their targets' models and weights,
    models, API key names and scopes, worker records."""
    models = {m["id"]: m["name"] for m in items(server_url, key, "/v2/models")}
    routes = {r["id"]: r["name"] for r in items(server_url, key, "/v2/model-routes")}
    return {
        "routes": sorted(routes.items()),
        "targets": sorted((routes.get(t["route_id"]), models.get(t["model_id"]), t["weight"])
                          for t in items(server_url, key, "/v2/model-route-targets")),
        "models": sorted(models.items()),
        "keys": sorted((k["name"], tuple(k.get("scope") or [])) for k in items(server_url, key, "/v2/api-keys")),
        "workers": sorted((w["id"], w["name"]) for w in items(server_url, key, "/v2/workers")),
    }


def beat(url, token, stop, codes):
    """A worker's heartbeats to a server that has just come back: the first one heartbeat interval later."""
    if stop.wait(WORKER_HEARTBEAT_INTERVAL):
        return
    while True:
        codes.append(http(url, token, method="POST")[0])
        if stop.wait(10):
            return


def recap(result, host="gs"):
    return (parse_recap(result.stdout) or {}).get(host)


def inventory(path, host_vars):
    path.write_text(json.dumps({"all": {"children": {"gpustack_server": {"hosts": {"gs": host_vars}}}}}, indent=1))
    return path


def test_backup_restores_route_models_keys_and_workers(gpustack_server, tmp_path):  # pylint: disable=too-many-locals,too-many-statements
    server = gpustack_server
    started, steps = time.monotonic(), {}
    api_port = int(server.api_url.rsplit(":", 1)[1])
    pg_a = server._postgres  # pylint: disable=protected-access
    data_a = server.root / "server" / "data"

    # What clients and workers hold: a model and a route over it, an inference key, the session worker's token.
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    model = server.api("POST", "/v2/models", {"name": "restore-probe", "source": "local_path", "local_path": str(ckpt),
                                              "replicas": 0, "cluster_id": server.cluster_id, "backend": "vLLM"})
    route = run_module("gpustack_route", {**server.key_args, "name": "restore-route",
                                          "targets": [{"model": "restore-probe", "weight": 100}]})
    assert not route.failed, route.result
    key = run_module("gpustack_api_key", {**server.auth_args, "name": "restore-inference", "value": OLD_KEY,
                                          "scope": ["inference"]})
    assert not key.failed, key.result
    secrets_a = tmp_path / "secrets-a"
    secrets_a.mkdir(mode=0o700)
    (secrets_a / "inference-api-key").write_text(OLD_KEY + "\n")
    (secrets_a / "management-api-key").write_text(server.api_key + "\n")
    worker_token = (server.root / "worker" / "data" / "worker_token").read_text().strip()
    # A replica with an instance on the session worker when the backup is taken: it must keep its id on server B.
    (tmp_path / "ckpt-replica").mkdir()
    replica = run_module("gpustack_model", model_args(server, config_only_checkpoint(tmp_path / "ckpt-replica"),
                                                      "restore-replica"))
    assert not replica.failed, replica.result
    instance = wait_for(lambda: [i for i in server.items("/v2/model-instances")
                                 if i["model_name"] == "restore-replica" and i.get("worker_id")],
                        timeout=180, what="restore-replica's instance on the session worker")[0]

    common = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "pairserve_gpustack_version": pins.GPUSTACK, "pairserve_gpustack_db_name": "gpustack",
        "pairserve_gpustack_db_user": "", "pairserve_gpustack_server_user": "root",
        "pairserve_backup_db_host": "127.0.0.1", "pairserve_backup_schedule": "",
        "pairserve_backup_tool": str(tmp_path / "bin" / "pairserve-server-backup"),
    }
    inv_a = inventory(tmp_path / "a.json", dict(
        common, pairserve_gpustack_api_port=api_port, pairserve_gpustack_db_port=pg_a.port,
        pairserve_gpustack_server_data_dir=str(data_a), pairserve_gpustack_secrets_dir=str(secrets_a),
        pairserve_backup_dir=str(tmp_path / "backups-a" / "server"), pairserve_backup_keep=2,
        pairserve_backup_config=str(tmp_path / "etc-a" / "server-backup.json"),
        pairserve_backup_restore_record=str(tmp_path / "state-a" / "server-restore.json"),
        pairserve_backup_restore_install=False))

    # PostgreSQL runs as postgres, who cannot enter pytest's 0700 tmp_path: a directory of its own under /tmp.
    pg_root = Path(tempfile.mkdtemp(prefix="pairserve-restore-pg-"))
    pg_b = Postgres(pg_root / "pg")
    ctl = tmp_path / "ctl.py"
    ctl.write_text(CTL)
    server_b = tmp_path / "server-b"
    server_b.mkdir()
    url_b = f"http://127.0.0.1:{free_port()}"
    stop_beating = threading.Event()
    try:
        # -- backup: one archive, root only, fetched; check mode takes none --------------------------------
        fetched = tmp_path / "fetched"
        steps["setup"] = round(time.monotonic() - started, 1)
        taken = run_playbook(BACKUP, inventory=inv_a, extra_vars={"pairserve_backup_fetch_dir": str(fetched)}, timeout=300)
        assert taken.rc == 0, taken.stdout[-4000:] + taken.stderr[-2000:]
        archives = sorted((fetched / "gs").glob("pairserve-server-backup-*.tar.gz"))
        assert len(archives) == 1 and recap(taken)["changed"] >= 1, (archives, recap(taken))
        archive = archives[0]
        backed_up = time.monotonic()
        on_node = tmp_path / "backups-a" / "server" / archive.name
        assert stat.S_IMODE(on_node.stat().st_mode) == 0o600 and stat.S_IMODE(on_node.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(archive.stat().st_mode) == 0o600
        steps["backup"] = round(time.monotonic() - started - sum(steps.values()), 1)
        checked = run_playbook(BACKUP, inventory=inv_a, check=True, timeout=300)
        assert checked.rc == 0 and "Check mode: no backup taken" in checked.stdout, checked.stdout[-3000:]
        assert sorted(p.name for p in on_node.parent.glob("pairserve-server-backup-*")) == [archive.name]
        manifest = json.loads(subprocess.run(
            [sys.executable, str(REPO / "roles/server_backup/files/pairserve_server_backup.py"), "verify", str(archive)],
            check=True, capture_output=True, text=True).stdout)["manifest"]
        # data/token only where GPUStack wrote one (its default cluster's token; the fixture's cluster is another)
        assert manifest["files"] == sorted(["data/jwt_secret_key", "gpustack.dump", "secrets/inference-api-key",
                                            "secrets/management-api-key"]
                                           + (["data/token"] if (data_a / "token").exists() else [])
                                           + (["data/bootstrap_version"] if (data_a / "bootstrap_version").exists()
                                              else [])), manifest
        before = content(server.api_url, server.api_key)
        assert ("restore-route", "restore-probe", 100) in before["targets"], before["targets"]

        # -- refused before any change: server A has data (a missing or corrupt archive: the tool's unit tests) ------
        refused = run_playbook(RESTORE, inventory=inv_a, extra_vars={"pairserve_backup_restore_file": str(archive)},
                               timeout=300)
        assert refused.rc != 0 and "already holds" in refused.stdout and "pairserve_backup_restore_force" in refused.stdout, \
            refused.stdout[-3000:]
        assert content(server.api_url, server.api_key) == before

        steps["backup check mode + refusal"] = round(time.monotonic() - started - sum(steps.values()), 1)
        # -- restore into a fresh PostgreSQL and an empty data directory, then start server B on them ------------
        pg_b.start()
        cfg_b = {"data_dir": str(server_b / "data"), "log_dir": str(server_b / "log"), "api_port": int(url_b.rsplit(":", 1)[1]),
                 "port": free_port(), "tls_port": free_port(), "proxy_port": free_port(), "metrics_port": free_port(),
                 "disable_metrics": True, "disable_builtin_observability": True, "disable_update_check": True,
                 "gateway_mode": "disabled", "database_url": pg_b.url, "bootstrap_password": "another-Bootstrap-pw9",
                 "advertise_address": "127.0.0.1", "disable_worker": True}
        (server_b / "config.yaml").write_text(json.dumps(cfg_b))
        gpustack = str(ensure_venv(server.version) / "bin" / "gpustack")
        base = [sys.executable, str(ctl), gpustack, str(server_b / "config.yaml"), str(server_b / "pid"),
                str(server_b / "server.log")]
        secrets_b = tmp_path / "secrets-b"
        inv_b = inventory(tmp_path / "b.json", dict(
            common, pairserve_gpustack_api_port=cfg_b["api_port"], pairserve_gpustack_db_port=pg_b.port,
            pairserve_gpustack_server_data_dir=cfg_b["data_dir"], pairserve_gpustack_secrets_dir=str(secrets_b),
            pairserve_backup_dir=str(tmp_path / "backups-b" / "server"),
            pairserve_backup_config=str(tmp_path / "etc-b" / "server-backup.json"),
            pairserve_backup_restore_record=str(tmp_path / "state-b" / "server-restore.json"),
            pairserve_backup_restore_install=False, pairserve_backup_server_stop_command=base + ["stop"],
            pairserve_backup_server_start_command=base + ["start", str(HEARTBEAT_GRACE), str(RESCHEDULE_GRACE)],
            pairserve_backup_restore_ready_timeout=240))
        # The archive's heartbeats as old as a backup of hours ago is to server B's grace periods.
        time.sleep(max(0.0, ARCHIVE_AGE - (time.monotonic() - backed_up)))
        restored = run_playbook(RESTORE, inventory=inv_b, extra_vars={"pairserve_backup_restore_file": str(archive)},
                                timeout=600)
        assert restored.rc == 0, restored.stdout[-5000:] + restored.stderr[-2000:] + (server_b / "server.log").read_text()[-3000:]
        assert "accepts the old inference key" in restored.stdout, restored.stdout[-3000:]
        steps["fresh PostgreSQL + restore + start"] = round(time.monotonic() - started - sum(steps.values()), 1)
        # The session worker, as server B sees it: its next heartbeat one full interval after B answers (later than
        # B's cleaner's first pass), then every 10 s, with the token it already holds.
        back, beats = time.monotonic(), []
        worker_beating = threading.Thread(target=beat, daemon=True,
                                          args=(f"{url_b}/v2/worker-heartbeat", worker_token, stop_beating, beats))
        worker_beating.start()

        # The same route, models, keys and workers; the old inference key serves the route's name on /v1.
        assert content(url_b, server.api_key) == before
        # The old inference key authenticates on /v1, a key never issued is refused. (The route itself is compared
        # above: /v1 lists and serves only routes with a running instance, and none can run here.)
        assert http(f"{url_b}/v1/models", OLD_KEY)[0] == 200
        assert http(f"{url_b}/v1/models", "sk-pairserve-never-issued")[0] == 401
        ask = {"model": "restore-route", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        assert http(f"{url_b}/v1/chat/completions", OLD_KEY, method="POST", body=ask)[0] == 404  # no running instance
        assert http(f"{url_b}/v1/chat/completions", "sk-pairserve-never-issued", method="POST", body=ask)[0] == 401
        assert http(f"{url_b}/v2/worker-heartbeat", "gpustack_0000_not-a-worker", method="POST")[0] == 401
        assert (server_b / "data" / "jwt_secret_key").read_text() == (data_a / "jwt_secret_key").read_text()
        # The marker of a data directory GPUStack initialised (else B would run an embedded worker).
        assert (server_b / "data" / "bootstrap_version").is_file()
        assert (secrets_b / "inference-api-key").read_text().strip() == OLD_KEY
        assert stat.S_IMODE((secrets_b / "inference-api-key").stat().st_mode) == 0o600

        # A rerun with the same archive changes nothing and leaves server B running as it was.
        pid_b = (server_b / "pid").read_text()
        steps["checks"] = round(time.monotonic() - started - sum(steps.values()), 1)
        again = run_playbook(RESTORE, inventory=inv_b, extra_vars={"pairserve_backup_restore_file": str(archive)},
                             timeout=300)
        assert again.rc == 0 and recap(again)["changed"] == 0, again.stdout[-4000:]
        assert "nothing to do" in again.stdout and (server_b / "pid").read_text() == pid_b
        steps["rerun"] = round(time.monotonic() - started - sum(steps.values()), 1)

        # Two passes of B's worker instance cleaner (every 30 s from its start, before B answered), the second after
        # the worker's first heartbeat: the running replica's instance is the same one, on the same worker.
        time.sleep(max(0.0, WORKER_HEARTBEAT_INTERVAL + 45 - (time.monotonic() - back)))
        on_b = [i for i in items(url_b, server.api_key, "/v2/model-instances") if i["model_name"] == "restore-replica"]
        assert [(i["id"], i["worker_id"]) for i in on_b] == [(instance["id"], instance["worker_id"])], \
            (instance, on_b, (server_b / "server.log").read_text()[-3000:])
        # A worker re-attaches with the token it has: its heartbeats authenticate on the restored server. Until its
        # first status report it is held not_ready with the restore's message (heartbeats alone do not make it ready).
        assert beats and set(beats) == {204}, beats
        worker_b = [w for w in items(url_b, server.api_key, "/v2/workers") if w["id"] == instance["worker_id"]][0]
        assert worker_b["state"] == "not_ready" and "Restored from a backup" in (worker_b["state_message"] or ""), worker_b
        steps["cleaner passes"] = round(time.monotonic() - started - sum(steps.values()), 1)
        said = [r.get("msg") for r in restored.results if "after the restore began" in str(r.get("msg", ""))]
        print(f"restore: {said}; steps (s): {steps}")
    finally:
        stop_beating.set()
        if (server_b / "config.yaml").exists():
            subprocess.run([sys.executable, str(ctl), "-", str(server_b / "config.yaml"), str(server_b / "pid"),
                            os.devnull, "stop"], check=False, timeout=60)
        pg_b.stop()
        shutil.rmtree(pg_root, ignore_errors=True)
        run_module("gpustack_route", {**server.key_args, "name": "restore-route", "state": "absent"})
        server.api("DELETE", f"/v2/models/{model['id']}")
        run_module("gpustack_api_key", {**server.auth_args, "name": "restore-inference", "state": "absent"})
        run_module("gpustack_model", {**server.key_args, "name": "restore-replica", "state": "absent"})
