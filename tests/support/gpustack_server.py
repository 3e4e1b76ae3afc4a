"""A real GPUStack (the lab's pinned version, lab/pins.py) server on a real PostgreSQL 15, plus one worker with two static fake GPUs.

Use from a conftest:

    from support.gpustack_server import gpustack_server_fixture
    gpustack = gpustack_server_fixture()          # session-scoped pytest fixture

The fixture yields a `GpuStackServer` (api_url, admin credentials, an API key, cluster id/name,
worker name, the paths of every log) and stops everything it started, by PID, at session end.
`start_workers({name: recording})` adds GPU nodes to it for a module: workers that detect the GPUs of recorded
NVML hosts (tests/integration/gpustack/test_grown_site.py), stopped with `stop_workers`.

What runs, and why this way:
- The venv `.cache/gpustack/venv-<version>` is built once (stamp) from the offline wheelhouse of
  tools/build_wheelhouse.sh with the collection's constraints file (SQLAlchemy < 2.1, see that file).
- PostgreSQL: GPUStack 2.x has no SQLite. initdb/pg_ctl refuse root, so they run as `postgres`
  (runuser) on a private data dir, a private socket dir and a free port on 127.0.0.1.
- Server: `gpustack start --config-file` with gateway_mode disabled (no Higress in a pip install),
  no metrics, no builtin observability, no update check; every port it binds is a free one.
- Worker: its `resources:` declare the system and two NVIDIA GPUs, so GPUStack's scheduler sees GPUs
  on a machine without any. Because the resources include the system info, the worker never runs
  `fastfetch`; `gguf-parser` is only run for GGUF models. The worker still insists on downloading both
  from GitHub at start (unreachable here), so the venv gets GPUStack's own `download-tools
  --load-archive` with an archive of two placeholder executables that exit 127 saying what they are.
  TEST-ONLY: real nodes get the real tools archive (`gpustack download-tools --save-archive`).
- The worker starts with a clean environment (the worker's environment leaks into model containers)
  and a `<data_dir>/worker_uuid` (no DMI product UUID in containers/CI).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from base64 import b64encode
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lab import pins, tools_archive
from support.ports import address_in_use, free_port

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
DEFAULT_VERSION = pins.GPUSTACK  # the lab's pin (lab/inventory/group_vars/all/pins.yml)
ADMIN_PASSWORD = "pairserve-Test-pw1"
API_KEY_VALUE = "pairserve-test-management-key-0001"
CLUSTER_NAME = "pytest"
WORKER_NAME = "node-test"
# Tool versions each release's ToolsManager checks in third_party/bin/versions.json (a mismatch makes the worker
# download the tool at start, offline: abort): the lab's table, one source for the lab and the suite.
TOOL_VERSIONS_BY_GPUSTACK = yaml.safe_load((REPO / "lab" / "stand_ins" / "gpustack-tools" / "tool-versions.yml").read_text())
TOOL_VERSIONS = TOOL_VERSIONS_BY_GPUSTACK[DEFAULT_VERSION]
# Bump when ensure_venv() changes what goes into the venv, so cached venvs are rebuilt.
VENV_RECIPE = 1


def _log(msg: str) -> None:
    print(f"[gpustack-server] {msg}", flush=True)


# -- venv -----------------------------------------------------------------------------------------

def ensure_venv(version: str = DEFAULT_VERSION) -> Path:
    """The GPUStack venv, built once from the offline wheelhouse; returns its directory.

    Two pytest sessions run side by side (scripts/integration.sh) and both may ask for it: the first builds it
    under a lock on <venv>.lock, the other waits and then finds it ready.
    """
    lock_path = CACHE / "gpustack" / f"venv-{version}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_venv_locked(version)


def _ensure_venv_locked(version: str) -> Path:
    # The venv is made from the system python3 (3.11 on Debian 12, as on the lab's nodes): its constraints file.
    python = subprocess.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    constraints = REPO / "roles" / "gpustack_install" / "files" / f"py{python}" / f"gpustack-{version}.constraints.txt"
    subprocess.run(["bash", str(REPO / "tools" / "build_wheelhouse.sh"), version], check=True)
    wheelhouse = CACHE / "wheelhouse" / f"gpustack-{version}"
    venv = CACHE / "gpustack" / f"venv-{version}"
    stamp = venv.parent / f"venv-{version}.stamp"
    tools = TOOL_VERSIONS_BY_GPUSTACK.get(version, TOOL_VERSIONS)
    recipe = json.dumps({"recipe": VENV_RECIPE, "tools": tools}).encode()
    want = hashlib.sha256(constraints.read_bytes() + recipe
                          + (wheelhouse.parent / f"gpustack-{version}.stamp").read_bytes()).hexdigest()
    if (venv / "bin" / "gpustack").exists() and stamp.exists() and stamp.read_text() == want:
        return venv
    start = time.monotonic()
    _log(f"building {venv} from {wheelhouse} (once)")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", str(wheelhouse),
                    "-c", str(constraints), f"gpustack=={version}"], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "tools.tar.gz"
        tools_archive.write(version if version in TOOL_VERSIONS_BY_GPUSTACK else DEFAULT_VERSION, str(archive))
        subprocess.run([str(venv / "bin" / "gpustack"), "download-tools", "--load-archive", str(archive)],
                       check=True, env=_clean_env({}))
    stamp.write_text(want)
    _log(f"venv ready in {time.monotonic() - start:.0f} s")
    return venv


# -- processes ------------------------------------------------------------------------------------

def _clean_env(extra: dict) -> dict:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "HOME": os.environ.get("HOME", "/root"),
           # Never touch the host's net.ipv4.ip_local_reserved_ports from a test.
           "GPUSTACK_SKIP_RESERVE_EPHEMERAL_PORTS": "1"}
    env.update(extra)
    return env


def _get(url: str, auth: tuple | None = None, timeout: float = 5):
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - 127.0.0.1 only
        return resp.status, resp.read()


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}; log tail:\n{_tail(log)}")
        try:
            if _get(url, timeout=3)[0] == 200:
                return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready after {timeout:.0f} s; log tail:\n{_tail(log)}")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen | None, grace: float = 20) -> None:
    """SIGTERM the process group we created for it, then SIGKILL; by PID, never by name."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _stop_all(procs, grace: float = 20) -> None:
    """_stop for several processes at once: SIGTERM to every group first, so their shutdowns overlap."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for proc in running:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@dataclass
class Postgres:
    root: Path
    port: int = 0
    started: bool = False

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _as_postgres(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(["runuser", "-u", "postgres", "--", *args], check=False,
                              capture_output=True, text=True, cwd="/tmp")
        if check and proc.returncode:
            raise RuntimeError(f"{' '.join(args)} (as postgres) failed with {proc.returncode}:\n"
                               f"{proc.stdout}{proc.stderr}")
        return proc

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # mkdtemp makes 0700 directories; postgres must be able to reach its own below them.
        for parent in (self.root.parent,):
            parent.chmod(0o755)
        shutil.chown(self.root, "postgres", "postgres")
        self.port = free_port()
        self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                          "-E", "UTF8", "--no-sync")
        self._pg_ctl_start()
        self._as_postgres(str(PG_BIN / "psql") if (PG_BIN / "psql").exists() else "psql", "-h", "127.0.0.1",
                          "-p", str(self.port), "-U", "postgres", "-c", "CREATE DATABASE gpustack")

    def _pg_ctl_start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                          str(self.root / "postgres.log"), "-w", "start")
        self.started = True

    def start_again(self) -> None:
        """Start the cluster stop() stopped: same data directory, port and options (fault tests)."""
        if not self.started:
            self._pg_ctl_start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/gpustack?sslmode=disable"

    def stop(self) -> None:
        if self.started:
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)
            self.started = False


@dataclass
class GpuStackServer:
    """What tests get: where the server is and how to talk to it."""

    root: Path
    version: str = DEFAULT_VERSION
    api_url: str = ""
    admin_username: str = "admin"
    admin_password: str = ADMIN_PASSWORD
    api_key: str = API_KEY_VALUE
    cluster_name: str = CLUSTER_NAME
    cluster_id: int = 0
    worker_name: str = WORKER_NAME
    worker_port: int = 0
    gpu_count: int = 2
    # A recorded NVML host (tests/fixtures/nvml/*.json): the worker then DETECTS its GPUs through gpustack-runtime
    # over the NVML replay, as the lab's workers do, so its record carries the recording's UUIDs; without it the
    # worker declares gpu_count static GPUs, which GPUStack 2.2.3 records without UUIDs (config.get_gpu_devices).
    nvml_recording: Path | None = None
    server_log: Path = None
    worker_log: Path = None
    timings: dict = field(default_factory=dict)
    _postgres: Postgres = None
    _server: subprocess.Popen = None
    _server_cmd: list = None
    _worker: subprocess.Popen = None
    worker_uuid_file: Path = None
    _extra_workers: list = field(default_factory=list)

    @property
    def auth_args(self) -> dict:
        """Module arguments for an admin-authenticated call."""
        return {"api_url": self.api_url, "username": self.admin_username, "password": self.admin_password}

    @property
    def worker_uuid(self) -> str:
        """The worker's identity as GPUStack stored it: the server gives a new worker its UUID and the worker
        writes it over the one the file held before registration."""
        return self.worker_uuid_file.read_text().strip()

    @property
    def key_args(self) -> dict:
        return {"api_url": self.api_url, "api_key": self.api_key}

    def api(self, method: str, path: str, body=None):
        """Direct REST call as admin (for test setup and assertions outside the modules)."""
        req = urllib.request.Request(self.api_url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Authorization", "Bearer " + self.api_key)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - 127.0.0.1 only
            raw = resp.read()
        return json.loads(raw) if raw else None

    def items(self, path: str) -> list:
        sep = "&" if "?" in path else "?"
        return self.api("GET", f"{path}{sep}perPage=1000")["items"]

    def start(self) -> None:
        total = time.monotonic()
        venv = ensure_venv(self.version)
        self.timings["venv_s"] = round(time.monotonic() - total, 1)
        gpustack = str(venv / "bin" / "gpustack")
        started = time.monotonic()
        self._postgres = Postgres(self.root / "pg")
        self._postgres.start()
        self.timings["postgres_s"] = round(time.monotonic() - started, 1)

        server_dir = self.root / "server"
        server_dir.mkdir()
        self.server_log = server_dir / "server.log"
        started = time.monotonic()
        for attempt in (1, 2, 3):
            api_port = self._write_server_config(server_dir, gpustack)
            self._launch_server("wb" if attempt == 1 else "ab")
            try:
                ready = _wait_http(self.api_url + "/readyz", self._server, self.server_log, 300)
                break
            except RuntimeError:
                # A port drawn free was taken before the server bound it (another lane's process): new ports.
                if attempt == 3 or self._server.poll() is None or not address_in_use(_tail(self.server_log)):
                    raise
                _log(f"a port was taken before the server bound it; new ports (attempt {attempt + 1})")
        self.timings["server_readyz_s"] = round(ready, 1)
        _log(f"server {self.api_url} ready in {time.monotonic() - started:.0f} s")
        self._bootstrap()

        worker_dir = self.root / "worker"
        (worker_dir / "data").mkdir(parents=True)
        self.worker_uuid_file = worker_dir / "data" / "worker_uuid"
        self.worker_uuid_file.write_text("00000000-0000-4000-8000-%012d\n" % api_port)
        worker_port = self.worker_port = free_port()
        worker_cfg = {
            "server_url": self.api_url, "token": self._token, "worker_name": self.worker_name,
            "data_dir": str(worker_dir / "data"), "log_dir": str(worker_dir / "log"),
            "worker_ip": "127.0.0.1", "worker_port": worker_port, "worker_metrics_port": free_port(),
            "disable_worker_metrics": True, "proxy_port": free_port(),
            "resources": fake_resources(self.gpu_count, gpus=self.nvml_recording is None),
        }
        wcfg = worker_dir / "config.yaml"
        wcfg.write_text(json.dumps(worker_cfg, indent=1))
        self.worker_log = worker_dir / "worker.log"
        started = time.monotonic()
        with open(self.worker_log, "wb") as log:
            self._worker = subprocess.Popen([gpustack, "start", "--config-file", str(wcfg)], stdout=log,
                                            stderr=subprocess.STDOUT, cwd=worker_dir, start_new_session=True,
                                            env=_clean_env(dict({"GPUSTACK_RUNTIME_DEPLOY": "Podman"},
                                                                **self._replay_env(worker_dir))))
        self._wait_worker_ready(started)
        self.timings["total_s"] = round(time.monotonic() - total, 1)
        _log(f"ready: {self.timings}")

    def _replay_env(self, worker_dir: Path) -> dict:
        """The worker's environment for GPU detection over the NVML replay (none without a recording): the lab's
        sitecustomize.py and the collection's nvml_replay.py on its PYTHONPATH, the recording, and no PCI check
        (this machine has no NVIDIA device in /sys)."""
        if self.nvml_recording is None:
            return {}
        replay = worker_dir / "nvml"
        replay.mkdir()
        shutil.copy(REPO / "lab" / "stand_ins" / "nvml_sitecustomize.py", replay / "sitecustomize.py")
        shutil.copy(REPO / "plugins" / "module_utils" / "nvml_replay.py", replay / "nvml_replay.py")
        with open(self.nvml_recording, encoding="utf-8") as handle:
            self.gpu_count = len(json.load(handle)["devices"])
        return {"PYTHONPATH": str(replay), "PAIRSERVE_NVML_REPLAY": str(self.nvml_recording),
                "GPUSTACK_RUNTIME_DETECT_NO_PCI_CHECK": "1"}

    def start_workers(self, recordings: dict, timeout: float = 240) -> dict:
        """More GPU nodes for this server: one GPUStack worker per {worker name: recorded NVML host}, each detecting
        its GPUs over the NVML replay (as the lab's workers do), started side by side. Returns {name: RecordedWorker}
        once every one is ready with all its GPUs; ``stop_workers`` (or ``stop``) stops them by PID and removes
        their records."""
        gpustack = str(ensure_venv(self.version) / "bin" / "gpustack")
        started = time.monotonic()
        out = {}
        for name, recording in recordings.items():
            worker = RecordedWorker(name=name, root=self.root / ("worker-" + name), nvml_recording=Path(recording))
            worker.launch(gpustack, self.api_url, self._token)
            self._extra_workers.append(worker)
            out[name] = worker
        while time.monotonic() - started < timeout:
            ready = {w["name"]: w for w in self.items("/v2/workers") if w["name"] in out and w["state"] == "ready"}
            gpus = [g["worker_name"] for g in self.items("/v2/gpu-devices")]
            waiting = [n for n, w in out.items() if n not in ready or gpus.count(n) != w.gpu_count]
            if not waiting:
                self.timings["extra_workers_ready_s"] = round(time.monotonic() - started, 1)
                _log(f"workers {', '.join(out)} ready in {self.timings['extra_workers_ready_s']} s")
                return out
            for name in waiting:
                if out[name].proc.poll() is not None:
                    raise RuntimeError(f"worker {name} exited with {out[name].proc.returncode}:\n{_tail(out[name].log)}")
            time.sleep(1)
        raise RuntimeError(f"workers {waiting} not ready after {timeout} s:\n"
                           + "\n".join(_tail(out[n].log) for n in waiting))

    def stop_workers(self, workers) -> None:
        """Stop the workers ``start_workers`` gave (by PID) and remove their records (and so their GPUs)."""
        names = [w.name for w in workers]
        _stop_all([w.proc for w in workers])
        for worker in workers:
            if worker in self._extra_workers:
                self._extra_workers.remove(worker)
        for record in self.items("/v2/workers"):
            if record["name"] in names:
                self.api("DELETE", f"/v2/workers/{record['id']}")

    def _write_server_config(self, server_dir: Path, gpustack: str) -> int:
        """The server's config.yaml with new free ports; sets api_url and the command; returns the API port."""
        api_port = free_port()
        self.api_url = f"http://127.0.0.1:{api_port}"
        server_cfg = {
            "data_dir": str(server_dir / "data"), "log_dir": str(server_dir / "log"),
            "api_port": api_port, "port": free_port(), "tls_port": free_port(), "proxy_port": free_port(),
            "metrics_port": free_port(), "disable_metrics": True, "disable_builtin_observability": True,
            "disable_update_check": True, "gateway_mode": "disabled", "database_url": self._postgres.url,
            "bootstrap_password": self.admin_password, "advertise_address": "127.0.0.1",
            "disable_worker": True,
        }
        cfg_path = server_dir / "config.yaml"
        cfg_path.write_text(json.dumps(server_cfg, indent=1))  # JSON is YAML
        self._server_cmd = [gpustack, "start", "--config-file", str(cfg_path)]
        return api_port

    def _launch_server(self, log_mode: str) -> None:
        with open(self.server_log, log_mode) as log:
            self._server = subprocess.Popen(self._server_cmd, stdout=log, stderr=subprocess.STDOUT,
                                            env=_clean_env({}), cwd=self.server_log.parent, start_new_session=True)

    # -- faults (tests/integration/faults) ------------------------------------------------------------

    @property
    def server_pid(self) -> int | None:
        return self._server.pid if self._server is not None and self._server.poll() is None else None

    def kill_server(self) -> None:
        """SIGKILL the server's process group (its PID is the group id), as a crash or an OOM kill would."""
        if self._server is None or self._server.poll() is not None:
            return
        try:
            os.killpg(self._server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._server.wait(30)

    def restart_server(self, timeout: float = 300) -> float:
        """Start the server again with its config (same database, ports, data dir) after kill_server();
        returns the seconds until /readyz answered. The worker reconnects by itself."""
        if self._server is not None and self._server.poll() is None:
            raise RuntimeError("restart_server: the server is still running; kill_server() first")
        started = time.monotonic()
        self._launch_server("ab")
        ready = _wait_http(self.api_url + "/readyz", self._server, self.server_log, timeout)
        _log(f"server {self.api_url} restarted in {time.monotonic() - started:.0f} s")
        return ready

    def stop_postgres(self) -> None:
        """pg_ctl stop -m fast: the server loses its database while it keeps running."""
        self._postgres.stop()

    def start_postgres(self) -> None:
        self._postgres.start_again()

    def _bootstrap(self) -> None:
        """Admin -> management API key (fixed value) -> cluster -> registration token."""
        auth = (self.admin_username, self.admin_password)
        base = self.api_url

        def call(method, path, body=None):
            req = urllib.request.Request(base + path, method=method,
                                         data=None if body is None else json.dumps(body).encode())
            req.add_header("Authorization", "Basic " + b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
            req.add_header("Content-Type", "application/json")
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
                return json.loads(resp.read() or b"null")

        call("POST", "/v2/api-keys", {"name": "pytest-admin", "custom": self.api_key, "scope": ["*"]})
        cluster = call("POST", "/v2/clusters", {"name": self.cluster_name, "provider": "Docker"})
        self.cluster_id = cluster["id"]
        self._token = call("GET", f"/v2/clusters/{self.cluster_id}/registration-token")["token"]

    def _wait_worker_ready(self, started: float, timeout: float = 240) -> None:
        while time.monotonic() - started < timeout:
            if self._worker.poll() is not None:
                raise RuntimeError(f"worker exited with {self._worker.returncode}:\n{_tail(self.worker_log)}")
            workers = [w for w in self.items("/v2/workers") if w["name"] == self.worker_name]
            gpus = [g for g in self.items("/v2/gpu-devices") if g.get("worker_name") == self.worker_name]
            if workers and workers[0]["state"] == "ready" and len(gpus) == self.gpu_count:
                self.timings["worker_ready_s"] = round(time.monotonic() - started, 1)
                return
            time.sleep(1)
        raise RuntimeError(f"worker {self.worker_name} not ready with {self.gpu_count} GPUs after {timeout} s:\n"
                           f"{_tail(self.worker_log)}")

    def stop(self) -> None:
        _stop_all([w.proc for w in self._extra_workers])
        _stop(self._worker)
        _stop(self._server)
        if self._postgres:
            self._postgres.stop()


@dataclass
class RecordedWorker:
    """A further GPU node of the tier's server (GpuStackServer.start_workers): a GPUStack worker detecting the GPUs
    of a recorded NVML host through gpustack-runtime over the replay, with the collection's GPU numbering rule
    (GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0: the NVML index, the one gpu_pairs pins by)."""

    name: str
    root: Path
    nvml_recording: Path
    port: int = 0
    gpu_count: int = 0
    proc: subprocess.Popen = None
    log: Path = None

    def launch(self, gpustack: str, server_url: str, token: str) -> None:
        (self.root / "data").mkdir(parents=True)
        # No DMI product UUID in containers/CI: a worker identity of its own, as the tier's first worker has.
        (self.root / "data" / "worker_uuid").write_text(
            "00000000-0000-4000-8000-%012d\n" % (int(hashlib.sha256(self.name.encode()).hexdigest(), 16) % 10 ** 12))
        replay = self.root / "nvml"
        replay.mkdir()
        shutil.copy(REPO / "lab" / "stand_ins" / "nvml_sitecustomize.py", replay / "sitecustomize.py")
        shutil.copy(REPO / "plugins" / "module_utils" / "nvml_replay.py", replay / "nvml_replay.py")
        self.gpu_count = len(json.loads(self.nvml_recording.read_text())["devices"])
        self.port = free_port()
        config = {"server_url": server_url, "token": token, "worker_name": self.name,
                  "data_dir": str(self.root / "data"), "log_dir": str(self.root / "log"), "worker_ip": "127.0.0.1",
                  "worker_port": self.port, "worker_metrics_port": free_port(), "disable_worker_metrics": True,
                  "proxy_port": free_port(), "resources": fake_resources(0, gpus=False)}
        (self.root / "config.yaml").write_text(json.dumps(config, indent=1))
        self.log = self.root / "worker.log"
        env = {"GPUSTACK_RUNTIME_DEPLOY": "Podman", "PYTHONPATH": str(replay),
               "PAIRSERVE_NVML_REPLAY": str(self.nvml_recording), "GPUSTACK_RUNTIME_DETECT_NO_PCI_CHECK": "1",
               "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY": "0"}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([gpustack, "start", "--config-file", str(self.root / "config.yaml")],
                                         stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True,
                                         env=_clean_env(env))


def fake_resources(gpu_count: int = 2, gpus: bool = True) -> dict:
    """Static worker resources: the system plus (with ``gpus``) `gpu_count` RTX 5080-like GPUs (16 GiB, cc 12.0)."""
    gib = 1024 ** 3
    resources = {
        "cpu": {"total": 16},
        "memory": {"total": 64 * gib},
        "swap": {"total": 0},
        "filesystem": [{"name": "root", "mount_point": "/", "mount_from": "/dev/vda1", "total": 500 * gib}],
        "os": {"name": "Debian GNU/Linux", "version": "12"},
        "kernel": {"name": "Linux", "release": "6.1.0", "version": "#1 SMP Debian 6.1.0", "architecture": "x86_64"},
        "uptime": {"uptime": 1000, "boot_time": "2026-11-30T00:00:00.000+0000"},
        "gpu_devices": [
            {"name": "NVIDIA GeForce RTX 5080", "vendor": "nvidia", "index": i, "device_index": i,
             "compute_capability": "12.0", "arch_family": "blackwell", "memory": {"total": 16 * gib}}
            for i in range(gpu_count)
        ],
    }
    if not gpus:
        del resources["gpu_devices"]
    return resources


def gpustack_server_fixture(version: str = DEFAULT_VERSION, scope: str = "session"):
    """A pytest fixture function starting one `GpuStackServer` for the whole run (or for `scope`: the fault suite
    uses a module-scoped server of its own, stopped as soon as its tests are done)."""
    import pytest  # only needed where the fixture is used

    @pytest.fixture(scope=scope)
    def gpustack_server(request):
        if not (PG_BIN / "initdb").exists():
            pytest.fail(f"PostgreSQL 15 is missing ({PG_BIN}); run `make deps` (apt package postgresql)")
        root = Path(tempfile.mkdtemp(prefix="pairserve-gpustack-"))
        server = GpuStackServer(root=root, version=version)

        def finalize():
            server.stop()
            shutil.rmtree(root, ignore_errors=True)

        request.addfinalizer(finalize)
        server.start()
        return server

    return gpustack_server
