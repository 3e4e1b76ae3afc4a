"""GPUStack 2.2.3 -> 2.3.0 on the same PostgreSQL database, the order playbooks/upgrade.yml uses.

One PostgreSQL and one server + worker, both started here by PID (not the session's `gpustack_server`):
2.2.3 creates the cluster, the worker registration, two replicas, the route `qwen` over both (58/42) and an
inference API key through our modules; the server stops, `pg_dump` takes the backup, 2.3.0 starts on the same
database (it migrates at start) while the 2.2.3 worker keeps running, then the worker moves to 2.3.0 too.
The tests then check that the data survived field by field, that the keys still authenticate, and that every
gpustack_* module reads and changes the migrated objects with changed=0 on the second call.

Not part of `make test` (two server starts, ~5 min on 2 cores): `make integration-upgrade`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from base64 import b64encode
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpustack_helpers import four_steps
from support import gpustack_server as gs
from lab import pins
from support.ports import free_port
from support.ansible_runner import run_module

pytestmark = [pytest.mark.slow, pytest.mark.upgrade]

# The upgrade scenario's pins (lab/inventory/upgrade/previous.yml -> next.yml): the GPUStack each server and worker
# runs and the vLLM each replica is registered with. The behaviour the tests below check (mixed weights refused,
# 404 -> 503) was recorded on 2.2.3 -> 2.3.0 and is named so.
OLD, NEW = pins.PREVIOUS["pairserve_gpustack_version"], pins.NEXT["pairserve_gpustack_version"]
VLLM_OLD, VLLM_NEW = pins.PREVIOUS["pairserve_vllm_version"], pins.NEXT["pairserve_vllm_version"]
ROUTE = "qwen"
INFERENCE_KEY = "pairserve-inference-upgrade-0001"
# Fields that move by themselves (heartbeats, scheduling) rather than being data the upgrade must keep.
VOLATILE = {"updated_at", "heartbeat_time", "status", "state", "state_message"}
LISTS = ("/v2/clusters", "/v2/workers", "/v2/gpu-devices", "/v2/models", "/v2/model-routes",
         "/v2/model-route-targets", "/v2/api-keys")


class UpgradeStack:
    """PostgreSQL plus one GPUStack server and one worker whose versions can change in place.

    The same configs and data dirs are reused across versions, as on a real node: only the venv changes.
    Built from tests/support/gpustack_server.py's pieces, which start server and database together.
    """

    def __init__(self, root: Path):
        self.root = root
        self.pg = gs.Postgres(root / "pg")
        self.server = self.worker = None
        self.server_started_at = None
        self.timings = {}
        self.api_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.server_dir = root / "server"
        self.worker_dir = root / "worker"
        self.token = None
        self.cluster_id = None

    def _config(self, directory: Path, cfg: dict) -> Path:
        path = directory / "config.yaml"
        if not path.exists():
            path.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        return path

    def start_server(self, version: str) -> None:
        venv = gs.ensure_venv(version)
        self.server_dir.mkdir(exist_ok=True)
        cfg = self._config(self.server_dir, {
            "data_dir": str(self.server_dir / "data"), "log_dir": str(self.server_dir / "log"),
            "api_port": self.api_port, "port": free_port(), "tls_port": free_port(),
            "proxy_port": free_port(), "metrics_port": free_port(), "disable_metrics": True,
            "disable_builtin_observability": True, "disable_update_check": True, "gateway_mode": "disabled",
            "database_url": self.pg.url, "bootstrap_password": gs.ADMIN_PASSWORD,
            "advertise_address": "127.0.0.1", "disable_worker": True})
        log = self.server_dir / f"server-{version}.log"
        self.server_started_at = datetime.now(timezone.utc)
        started = time.monotonic()
        with open(log, "wb") as out:
            self.server = subprocess.Popen([str(venv / "bin" / "gpustack"), "start", "--config-file", str(cfg)],
                                           stdout=out, stderr=subprocess.STDOUT, env=gs._clean_env({}),
                                           cwd=self.server_dir, start_new_session=True)
        gs._wait_http(self.api_url + "/readyz", self.server, log, 600)
        self.timings[f"server {version} /readyz"] = round(time.monotonic() - started, 1)

    def start_worker(self, version: str) -> None:
        venv = gs.ensure_venv(version)
        (self.worker_dir / "data").mkdir(parents=True, exist_ok=True)
        uuid_file = self.worker_dir / "data" / "worker_uuid"
        if not uuid_file.exists():
            uuid_file.write_text("00000000-0000-4000-8000-%012d\n" % self.api_port)
        cfg = self._config(self.worker_dir, {
            "server_url": self.api_url, "token": self.token, "worker_name": gs.WORKER_NAME,
            "data_dir": str(self.worker_dir / "data"), "log_dir": str(self.worker_dir / "log"),
            "worker_ip": "127.0.0.1", "worker_port": free_port(), "worker_metrics_port": free_port(),
            "disable_worker_metrics": True, "proxy_port": free_port(), "resources": gs.fake_resources(2)})
        with open(self.worker_dir / f"worker-{version}.log", "wb") as out:
            self.worker = subprocess.Popen([str(venv / "bin" / "gpustack"), "start", "--config-file", str(cfg)],
                                           stdout=out, stderr=subprocess.STDOUT, cwd=self.worker_dir,
                                           start_new_session=True,
                                           # Heartbeats every 5 s instead of 30: the waits below read them.
                                           env=gs._clean_env({"GPUSTACK_RUNTIME_DEPLOY": "Podman",
                                                              "GPUSTACK_WORKER_HEARTBEAT_INTERVAL": "5"}))

    def wait_worker(self, version: str, since: datetime, timeout: float = 300) -> dict:
        """The worker, once it reports `version` with a heartbeat after `since` (a stale DB row does not count)."""
        started = time.monotonic()
        last = None
        while time.monotonic() - started < timeout:
            if self.worker.poll() is not None:
                raise RuntimeError(f"worker exited with {self.worker.returncode}:\n"
                                   f"{gs._tail(self.worker_dir / f'worker-{version}.log')}")
            rows = [w for w in self.items("/v2/workers") if w["name"] == gs.WORKER_NAME]
            gpus = [g for g in self.items("/v2/gpu-devices") if g.get("worker_name") == gs.WORKER_NAME]
            last = rows
            if (len(rows) == 1 and rows[0]["state"] == "ready" and rows[0].get("worker_version") == f"v{version}"
                    and rows[0].get("heartbeat_time") and _ts(rows[0]["heartbeat_time"]) > since and len(gpus) == 2):
                return rows[0]
            time.sleep(1)
        raise RuntimeError(f"worker not back on {version} after {timeout} s: {last}\n"
                           f"{gs._tail(self.worker_dir / f'worker-{version}.log')}")

    def stop_server(self) -> None:
        gs._stop(self.server)
        self.server = None

    def stop_worker(self) -> None:
        gs._stop(self.worker)
        self.worker = None

    def stop(self) -> None:
        self.stop_worker()
        self.stop_server()
        self.pg.stop()

    # -- REST and SQL ----------------------------------------------------------------------------

    def call(self, method: str, path: str, body=None, key: str = gs.API_KEY_VALUE, basic: bool = False):
        """(status, decoded body) of one request; HTTP errors are answers here, not exceptions."""
        req = urllib.request.Request(self.api_url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        if basic:
            req.add_header("Authorization",
                           "Basic " + b64encode(f"admin:{gs.ADMIN_PASSWORD}".encode()).decode())
        else:
            req.add_header("Authorization", "Bearer " + key)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - 127.0.0.1 only
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def items(self, path: str) -> list:
        status, body = self.call("GET", f"{path}?perPage=1000")
        assert status == 200, f"GET {path}: HTTP {status}: {body}"
        return body["items"]

    def snapshot(self) -> dict:
        return {path: {item["id"]: item for item in self.items(path)} for path in LISTS}

    def bootstrap(self) -> None:
        """Management API key (fixed value), cluster and registration token, as the suite's server does."""
        self.call("POST", "/v2/api-keys", {"name": "pytest-admin", "custom": gs.API_KEY_VALUE, "scope": ["*"]},
                  basic=True)
        self.cluster_id = self.call("POST", "/v2/clusters", {"name": gs.CLUSTER_NAME, "provider": "Docker"},
                                    basic=True)[1]["id"]
        self.token = self.call("GET", f"/v2/clusters/{self.cluster_id}/registration-token", basic=True)[1]["token"]

    def sql(self, query: str, database: str = "gpustack") -> str:
        return self.pg._as_postgres(str(gs.PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.pg.port), "-U",
                                    "postgres", "-d", database, "-At", "-c", query).stdout.strip()

    def pg_tool(self, tool: str, *args: str) -> str:
        return self.pg._as_postgres(str(gs.PG_BIN / tool), "-h", "127.0.0.1", "-p", str(self.pg.port), "-U",
                                    "postgres", *args).stdout


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _migrations(version: str) -> set:
    """Alembic revision ids shipped by one GPUStack venv (the file names start with the date, then the id)."""
    site = next((gs.CACHE / "gpustack" / f"venv-{version}" / "lib").glob("python3*/site-packages"))
    return {p.name.split("-")[1].split("_")[0] for p in (site / "gpustack" / "migrations" / "versions").glob("*.py")
            if "-" in p.name}


def _chat_status(stack: UpgradeStack) -> int:
    return stack.call("POST", "/v1/chat/completions",
                      {"model": ROUTE, "messages": [{"role": "user", "content": "hi"}]}, key=INFERENCE_KEY)[0]


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory):
    """Runs the whole upgrade once; yields what the tests check. Stops every process it started, by PID."""
    if not (gs.PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 is missing ({gs.PG_BIN}); run `make deps` (apt package postgresql)")
    root = Path(tempfile.mkdtemp(prefix="pairserve-upgrade-"))
    checkpoint = tmp_path_factory.mktemp("checkpoint")
    (checkpoint / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}))
    stack = UpgradeStack(root)
    facts = {"stack": stack, "checkpoint": str(checkpoint)}
    try:
        stack.pg.start()
        stack.start_server(OLD)
        stack.bootstrap()
        since = datetime.now(timezone.utc)
        stack.start_worker(OLD)
        stack.wait_worker(OLD, since)

        key = {"api_url": stack.api_url, "api_key": gs.API_KEY_VALUE}
        admin = {"api_url": stack.api_url, "username": "admin", "password": gs.ADMIN_PASSWORD}
        args = {
            "cluster": {**admin, "name": gs.CLUSTER_NAME, "description": "made by 2.2.3"},
            "api_key": {**admin, "name": "clients", "value": INFERENCE_KEY, "scope": ["inference"],
                        "description": "clients of the route"},
            "route": {**key, "name": ROUTE, "targets": [{"model": "rep-a", "weight": 58},
                                                        {"model": "rep-b", "weight": 42}]},
        }
        for name, gpu in (("rep-a", 0), ("rep-b", 1)):
            args[name] = {**key, "name": name, "cluster": gs.CLUSTER_NAME, "local_path": str(checkpoint),
                          "backend_version": VLLM_OLD, "gpu_ids": [f"{gs.WORKER_NAME}:cuda:{gpu}"],
                          "backend_parameters": ["--max-model-len", "4096", "--gpu-memory-utilization", "0.92"]}
        for module, name in (("gpustack_cluster", "cluster"), ("gpustack_api_key", "api_key"),
                             ("gpustack_model", "rep-a"), ("gpustack_model", "rep-b"), ("gpustack_route", "route")):
            res = run_module(module, args[name])
            assert res.changed and not res.failed, f"{module} on {OLD}: {res.result}"
        # The drain upgrade.yml does (one weight to 0) is accepted by 2.2.3; put the weights back.
        drained = dict(args["route"], targets=[{"model": "rep-a", "weight": 100}, {"model": "rep-b", "weight": 0}])
        facts["old_drain"] = run_module("gpustack_route", drained)
        assert not run_module("gpustack_route", args["route"]).failed
        facts["old_chat_status"] = _chat_status(stack)
        facts["args"] = args
        facts["before"] = stack.snapshot()
        facts["old_version"] = stack.call("GET", "/version")[1]
        facts["old_revision"] = stack.sql("SELECT version_num FROM alembic_version")

        # Server first: stop it, back up, start the new version on the same database (the worker keeps running).
        stack.stop_server()
        dump = stack.pg.root / f"gpustack-{OLD}-before-{NEW}.dump"
        started = time.monotonic()
        stack.pg_tool("pg_dump", "-Fc", "-f", str(dump), "gpustack")
        stack.timings["pg_dump"] = round(time.monotonic() - started, 1)
        facts["dump"] = dump
        stack.start_server(NEW)
        facts["new_version"] = stack.call("GET", "/version")[1]
        facts["new_revision"] = stack.sql("SELECT version_num FROM alembic_version")
        # The old worker keeps heartbeating to the new server (rolling upgrade: server first, then each node).
        facts["old_worker_on_new_server"] = stack.wait_worker(OLD, stack.server_started_at, timeout=180)
        # Then the node: same worker name, data dir and uuid, the new venv.
        stack.stop_worker()
        since = datetime.now(timezone.utc)
        stack.start_worker(NEW)
        started = time.monotonic()
        facts["new_worker"] = stack.wait_worker(NEW, since)
        stack.timings[f"worker {NEW} back"] = round(time.monotonic() - started, 1)
        facts["after"] = stack.snapshot()
        yield facts
    finally:
        print(f"\nupgrade timings: {stack.timings}")
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_backup_restores_and_schema_migrates(upgrade):
    stack = upgrade["stack"]
    listing = stack.pg_tool("pg_restore", "--list", str(upgrade["dump"]))
    for table in ("alembic_version", "models", "model_routes", "model_route_targets", "api_keys", "workers"):
        assert f"TABLE public {table} " in listing, f"{table} missing from the dump"
    # The dump is the rollback: it restores into an empty database as the 2.2.3 schema with the 2.2.3 rows.
    stack.sql("CREATE DATABASE gpustack_before")
    stack.pg_tool("pg_restore", "-d", "gpustack_before", "--no-owner", str(upgrade["dump"]))
    assert stack.sql("SELECT version_num FROM alembic_version", "gpustack_before") == upgrade["old_revision"]
    assert stack.sql("SELECT count(*) FROM models WHERE deleted_at IS NULL", "gpustack_before") == "2"
    # 2.3.0 ran its own migrations at start: the head moved to a revision only 2.3.0 ships.
    assert upgrade["old_revision"] in _migrations(OLD)
    assert upgrade["new_revision"] != upgrade["old_revision"]
    assert upgrade["new_revision"] in _migrations(NEW) - _migrations(OLD)


def test_version_answers(upgrade):
    assert upgrade["old_version"]["version"] == f"v{OLD}"
    assert upgrade["new_version"]["version"] == f"v{NEW}"
    assert upgrade["new_version"]["git_commit"] != upgrade["old_version"]["git_commit"]


def test_every_object_survives_with_its_ids_and_values(upgrade):
    before, after = upgrade["before"], upgrade["after"]
    for path in LISTS:
        assert set(after[path]) == set(before[path]), f"{path}: ids {sorted(before[path])} -> {sorted(after[path])}"
        for item_id, old in before[path].items():
            new = after[path][item_id]
            lost = sorted(set(old) - set(new))
            assert not lost, f"{path} {item_id}: 2.3.0 no longer returns {lost}"
            moved = {k: (old[k], new[k]) for k in old if k not in VOLATILE | {"worker_version"} and old[k] != new[k]}
            assert not moved, f"{path} {item_id}: values changed by the upgrade: {moved}"
    models = {m["name"]: m for m in after["/v2/models"].values()}
    assert models["rep-b"]["backend_parameters"] == upgrade["args"]["rep-b"]["backend_parameters"]
    assert models["rep-b"]["distributed_inference_across_workers"] is False
    route = [r for r in after["/v2/model-routes"].values() if r["name"] == ROUTE][0]
    weights = {t["model_id"]: t["weight"] for t in after["/v2/model-route-targets"].values()
               if t["route_id"] == route["id"]}
    assert weights == {models["rep-a"]["id"]: 58, models["rep-b"]["id"]: 42}


def test_worker_reregisters_without_a_ghost(upgrade):
    old_on_new, new = upgrade["old_worker_on_new_server"], upgrade["new_worker"]
    before = [w for w in upgrade["before"]["/v2/workers"].values() if w["name"] == gs.WORKER_NAME][0]
    # The 2.2.3 worker kept talking to the 2.3.0 server, then the 2.3.0 worker took over the same row.
    assert old_on_new["id"] == new["id"] == before["id"]
    assert before["worker_version"] == f"v{OLD}" and old_on_new["worker_version"] == f"v{OLD}"
    assert new["worker_version"] == f"v{NEW}" and new["state"] == "ready"
    assert len(upgrade["after"]["/v2/workers"]) == 1
    assert sorted(upgrade["after"]["/v2/gpu-devices"]) == [f"{gs.WORKER_NAME}:cuda:0", f"{gs.WORKER_NAME}:cuda:1"]


def test_api_keys_and_password_still_authenticate(upgrade):
    stack = upgrade["stack"]
    assert stack.call("GET", "/v1/models", key=INFERENCE_KEY)[0] == 200
    assert stack.call("GET", "/v2/clusters", key=INFERENCE_KEY)[0] == 403  # the scope survived too
    assert stack.call("GET", "/v2/clusters")[0] == 200  # the management key
    assert stack.call("GET", "/v2/users/me", basic=True)[0] == 200
    assert stack.call("GET", "/v1/models", key="pairserve-not-a-key")[0] == 401


def test_route_without_a_running_instance_answers_503_instead_of_404(upgrade):
    # No backend runs here, so the route has no ready target: 2.2.3 said 404, 2.3.0 says 503 (404 only
    # when the route itself does not exist). verify/troubleshooting texts must expect either.
    assert upgrade["old_chat_status"] == 404
    assert _chat_status(upgrade["stack"]) == 503
    assert upgrade["stack"].call("POST", "/v1/chat/completions", {"model": "no-such-route", "messages": []},
                                 key=INFERENCE_KEY)[0] == 404


def test_modules_read_the_migrated_objects_without_a_change(upgrade):
    args = upgrade["args"]
    for module, name in (("gpustack_cluster", "cluster"), ("gpustack_api_key", "api_key"),
                         ("gpustack_model", "rep-a"), ("gpustack_model", "rep-b"), ("gpustack_route", "route")):
        for check in (True, False):
            res = run_module(module, args[name], check=check, diff=True)
            assert not res.failed, f"{module} check={check}: {res.result.get('msg')}"
            assert not res.changed, f"{module} check={check} wants to change the migrated {name}: {res.get('diff')}"
    stack = upgrade["stack"]
    info = run_module("gpustack_info", {"api_url": stack.api_url, "api_key": gs.API_KEY_VALUE,
                                        "gather": ["workers", "gpus", "clusters"], "cluster": gs.CLUSTER_NAME})
    assert not info.failed and not info.changed, info.result
    assert [w["name"] for w in info["workers"]] == [gs.WORKER_NAME]
    assert len(info["gpus"]) == 2


def test_modules_change_the_migrated_objects_idempotently(upgrade):
    stack, args = upgrade["stack"], upgrade["args"]
    targets_before = {t["model_id"]: t["id"] for t in stack.items("/v2/model-route-targets")}
    four_steps("gpustack_route", dict(args["route"], targets=[{"model": "rep-a", "weight": 60},
                                                              {"model": "rep-b", "weight": 40}]))
    targets = stack.items("/v2/model-route-targets")
    assert {t["model_id"]: t["id"] for t in targets} == targets_before  # ids kept across the upgrade and the PUT
    assert sorted(t["weight"] for t in targets) == [40, 60]

    old_instances = {i["id"] for i in stack.items("/v2/model-instances") if i["model_name"] == "rep-b"}
    four_steps("gpustack_model", dict(args["rep-b"], backend_version=VLLM_NEW))
    model = [m for m in stack.items("/v2/models") if m["name"] == "rep-b"][0]
    assert model["backend_version"] == VLLM_NEW and model["distributed_inference_across_workers"] is False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the module rolled the instance out: GPUStack recreates it
        fresh = {i["id"] for i in stack.items("/v2/model-instances") if i["model_name"] == "rep-b"}
        if fresh and not fresh & old_instances:
            break
        time.sleep(1)
    assert fresh and not fresh & old_instances, f"instances of rep-b: {old_instances} -> {fresh}"

    four_steps("gpustack_cluster", dict(args["cluster"], description="managed after the upgrade"))
    four_steps("gpustack_api_key", dict(args["api_key"], scope=["inference", "management"]))
    assert stack.call("GET", "/v2/clusters", key=INFERENCE_KEY)[0] == 200

    # A replica created on 2.3.0 joins the migrated route.
    four_steps("gpustack_model", dict(args["rep-a"], name="rep-c"))
    four_steps("gpustack_route", dict(args["route"], targets=[{"model": "rep-a", "weight": 50},
                                                              {"model": "rep-b", "weight": 30},
                                                              {"model": "rep-c", "weight": 20}]))
    route = [r for r in stack.items("/v2/model-routes") if r["name"] == ROUTE][0]
    assert route["targets"] == 3


def test_drain_by_zero_weight_is_refused_by_230(upgrade):
    """2.3.0 rejects a route whose targets mix positive and 0 weights (HTTP 422), so the drain of upgrade.yml
    and rebuild_node.yml (one replica's weight to 0) fails once the server runs 2.3.0. 2.2.3 accepted it.
    When the drain changes (e.g. to removing the target, or making it a weight-0 fallback target, which 2.3.0
    leaves out of the check), change this test with it."""
    assert upgrade["old_drain"].changed and not upgrade["old_drain"].failed
    args = upgrade["args"]["route"]
    res = run_module("gpustack_route", dict(args, targets=[{"model": "rep-a", "weight": 100},
                                                           {"model": "rep-b", "weight": 0}]))
    assert res.failed and res["status"] == 422, res.result
    assert "either every target of a route carries a positive weight or none may" in res["msg"]
    # A weight-0 target that is the route's fallback is allowed (fallback targets are not part of the split).
    fallback = dict(args, targets=[{"model": "rep-a", "weight": 100}],
                    fallback={"model": "rep-b", "status_codes": ["5xx"]})
    res = run_module("gpustack_route", fallback)
    assert res.changed and not res.failed, res.result
    assert not run_module("gpustack_route", fallback).changed
