"""Day-2 plays against a real GPUStack 2.2.3: playbooks/rebuild_node.yml and playbooks/upgrade.yml.

Two GPU nodes, both this machine (local connection): node-a is the session fixture's worker (node-test, two
static RTX 5080s), node-b a second GPUStack worker this module starts with static GPUs declared from a
recorded NVML host. gpu_pairs runs for real over the recordings (fake NVML library under the real
nvidia-ml-py). A hardware swap is a new recording plus the worker's new static GPU list; a reinstall is a
worker whose data directory is gone. The worker "restarts" through the play's restart command (the test's
worker is not a systemd unit); the container runtime the runner_image role asks is a `docker` stand-in on PATH
that has the 0.25.1 runner images and nothing else. No replica can really start here (no container runtime),
so the happy paths run with verification off and the rollback path uses verification's own timeout.

One GPUStack, one route and two replicas serve the whole module, but no test relies on what an earlier one left:
each states the GPUStack it starts from and establishes it first (`replicas_serving`, `node_b_runs_with`,
`route_as_inventory`, `set_checkpoint`). In file order these are cheap checks that find nothing to do; after a
failure (a node left drained, other cards, another checkpoint) they put the start back, through the API or
through rebuild_node.yml. Run one test alone with `-k` and it still sets up what it needs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
from pathlib import Path

import pytest

from gpustack_helpers import wait_for
from lab import pins
from support.ansible_runner import REPO, run_module, run_playbook
from support.ports import free_port
from support.gpustack_server import _clean_env, ensure_venv
from support.local_http import LocalServer, QuietHandler
from support.recap import parse_recap

pytestmark = [pytest.mark.slow, pytest.mark.day2]

NVML = REPO / "tests" / "fixtures" / "nvml"
NODE_PYTHON = REPO / ".cache" / "recorded-node-venv" / "bin" / "python"
REBUILD = REPO / "playbooks" / "rebuild_node.yml"
UPGRADE = REPO / "playbooks" / "upgrade.yml"
MAINTENANCE = REPO / "playbooks" / "maintenance.yml"
GIB = 1024 ** 3
# node-b's cards in the tests: the seed's 2x RTX 4070 Ti SUPER, and three RTX 3090s (the swap; gpu_pairs pairs
# the NVLinked two at indexes 1 and 2).
CARDS_4070TIS = (NVML / "node-b-2x4070tis.json").read_text()
CARDS_3090S = (NVML / "three-gpus.json").read_text()

# The worker's "service manager": stop/start a GPUStack worker by PID from a pid file (never by name).
RESTART_SCRIPT = r'''
import os, signal, subprocess, sys, time
gpustack, config, pidfile, log, counter, action = sys.argv[1:7]
if os.path.exists(pidfile):
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
if action in ("start", "restart"):
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "HOME": os.environ.get("HOME", "/root"), "GPUSTACK_SKIP_RESERVE_EPHEMERAL_PORTS": "1",
           "GPUSTACK_RUNTIME_DEPLOY": "Podman"}
    with open(log, "ab") as out:
        proc = subprocess.Popen([gpustack, "start", "--config-file", config], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=os.path.dirname(config), env=env, start_new_session=True)
    open(pidfile, "w").write(str(proc.pid))
if action == "restart":
    with open(counter, "a") as out:
        out.write("restart\n")
'''

# The node's container runtime, as far as runner_image asks it: the NVIDIA runtime as Docker's default, the runner
# images of the lab's pinned vLLM (lab/inventory/group_vars/all/pins.yml) and the pinned pause and health images
# present (nothing else, nothing pulled), a runner image whose `vllm --version` prints the pinned vLLM (the
# runner_image role's version check), and a GPU container whose CUDA sees, of the GPUs named in
# NVIDIA_VISIBLE_DEVICES (what the NVIDIA runtime gives it, in PCI order), those CUDA_VISIBLE_DEVICES picks.
DOCKER_SHIM = r'''#!/bin/sh
case "$1" in
  info) [ "$2" = --format ] && [ "$3" = "{{json .}}" ] || { echo "docker stand-in: info $2 $3 is not --format {{json .}}" >&2; exit 2; }
        echo '{"DefaultRuntime": "nvidia", "Runtimes": {"runc": {}, "nvidia": {}}, "CDISpecDirs": []}' ;;
  run) case " $* " in
         *" --entrypoint vllm "*vllmPINNED_VLLM*" --version "*) echo "PINNED_VLLM"; exit 0 ;;
         *" --entrypoint vllm "*) echo "docker stand-in: no vllm in that image: $*" >&2; exit 127 ;;
       esac
       handed=; visible=
       for a in "$@"; do case "$a" in
         --env=NVIDIA_VISIBLE_DEVICES=*) handed=${a#*=*=} ;;
         --env=CUDA_VISIBLE_DEVICES=*) visible=${a#*=*=} ;;
       esac; done
       for i in $(echo "$visible" | tr ',' ' '); do echo "$handed" | tr ',' '\n' | sed -n "$((i + 1))p"; done ;;
  image) case "$3" in *vllmPINNED_VLLM*|*/runtime@sha256:*) echo '[{}]' ;; *) echo "Error: No such image: $3" >&2; exit 1 ;; esac ;;
  *) echo "docker stand-in: $* is not available in the test" >&2; exit 1 ;;
esac
'''


def detect(recording: Path) -> dict:
    """pairserve_gpu of a recorded host, by the real gpu_pairs module over the fake NVML library."""
    res = run_module("gpu_pairs", {"group_size": 2},
                     env={"PAIRSERVE_NVML_REPLAY": str(recording), "ANSIBLE_PYTHON_INTERPRETER": str(NODE_PYTHON)})
    assert not res.failed, res.result
    return res["ansible_facts"]["pairserve_gpu"]


def derive_recording(source: Path, dest: Path, **device) -> Path:
    """A recorded host with every device's fields replaced (name, memory, compute capability, UUID prefix)."""
    data = json.loads(source.read_text())
    for i, dev in enumerate(data["devices"]):
        if "name" in device:
            dev["Name"] = device["name"]
        if "memory" in device:
            dev["MemoryInfo"] = {"total": device["memory"], "free": device["memory"] - 2 ** 29, "used": 2 ** 29}
        if "cc" in device:
            dev["CudaComputeCapability"] = list(device["cc"])
        if "uuid" in device:
            dev["UUID"] = "%s-%012d" % (device["uuid"], i + 1)
    dest.write_text(json.dumps(data))
    return dest


def static_resources(gpu: dict) -> dict:
    """Worker `resources:` declaring the detected GPUs (as the lab's worker template does)."""
    return {
        "cpu": {"total": 8}, "memory": {"total": 32 * GIB}, "swap": {"total": 0},
        "filesystem": [{"name": "root", "mount_point": "/", "mount_from": "/dev/vda1", "total": 200 * GIB}],
        "os": {"name": "Debian GNU/Linux", "version": "12"},
        "kernel": {"name": "Linux", "release": "6.1.0", "version": "#1 SMP", "architecture": "x86_64"},
        "uptime": {"uptime": 1000, "boot_time": "2026-11-30T00:00:00.000+0000"},
        "gpu_devices": [{"name": g["name"], "vendor": "nvidia", "type": "cuda", "index": g["index"],
                         "device_index": g["index"], "compute_capability": str(g["compute_capability"]),
                         "memory": {"total": g["memory_total_bytes"]}} for g in gpu["gpus"]],
    }


class FakeMetrics(LocalServer):
    """vLLM's /metrics for each node's replica: N polls with a request running, then idle. Each poll also
    records the route weights GPUStack has at that moment, so the test sees what the drain looked like."""

    def __init__(self, server):
        self.server = server
        self.busy = {}
        self.polls = []
        outer = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802 - http.server API
                node = self.path.strip("/").split("/")[0]
                running = 1 if outer.busy.get(node, 0) > 0 else 0
                outer.busy[node] = max(0, outer.busy.get(node, 0) - 1)
                outer.polls.append((node, running, weights(outer.server)))
                body = ("# TYPE vllm:num_requests_running gauge\n"
                        f'vllm:num_requests_running{{engine="0",model_name="qwen-{node}"}} {running}.0\n'
                        f'vllm:num_requests_waiting{{engine="0",model_name="qwen-{node}"}} 0.0\n').encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


def route_targets(server, name="qwen"):
    routes = [r for r in server.items("/v2/model-routes") if r["name"] == name]
    if not routes:
        return {}
    names = {m["id"]: m["name"] for m in server.items("/v2/models")}
    return {names.get(t["model_id"]): {"id": t["id"], "weight": t["weight"]}
            for t in server.items(f"/v2/model-route-targets?route_id={routes[0]['id']}")
            if t["route_id"] == routes[0]["id"]}


def weights(server):
    return {k: v["weight"] for k, v in route_targets(server).items()}


def model(server, name):
    found = [m for m in server.items("/v2/models") if m["name"] == name]
    return found[0] if found else None


def instance_ids(server, name):
    return sorted(i["id"] for i in server.items("/v2/model-instances") if i["model_name"] == name)


def workers(server, prefix="node-b"):
    return [w for w in server.items("/v2/workers") if w["name"] == prefix or w["name"].startswith(prefix + "-")]


def recap(result, host):
    """The PLAY RECAP counters of one host, e.g. {'ok': 12, 'changed': 0, 'failed': 0, ...}; None when the host
    never ran (or the play did not finish)."""
    return (parse_recap(result.stdout) or {}).get(host)


def snapshot(server):
    """What GPUStack holds that a day-2 play could change: worker records, GPU devices, models (whole records,
    updated_at included: any PUT shows), instances (which exist, of which model, on which worker), routes and
    their targets (ids, weights, fallbacks). Instance and target *states* are left out: the scheduler moves them
    on its own here (no instance can start)."""
    return {
        "workers": sorted((w["id"], w["name"], w["state"]) for w in server.items("/v2/workers")),
        "gpus": sorted((g["worker_name"], g["index"], g["name"]) for g in server.items("/v2/gpu-devices")),
        "models": {m["name"]: m for m in server.items("/v2/models")},
        "instances": sorted((i["id"], i["model_name"], i.get("worker_id"))
                            for i in server.items("/v2/model-instances")),
        "routes": {r["name"]: r for r in server.items("/v2/model-routes")},
        "targets": sorted(json.dumps({k: v for k, v in t.items() if k != "state"}, sort_keys=True)
                          for t in server.items("/v2/model-route-targets")),
    }


@pytest.fixture(scope="module")
def day2(gpustack_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("day2")
    venv = ensure_venv(gpustack_server.version)
    state = {"tmp": tmp, "server": gpustack_server}

    # node-a: the fixture's worker declares 16 GiB RTX 5080s; its recording says the same.
    node_a_rec = derive_recording(NVML / "node-a-2x5080.json", tmp / "node-a.json", memory=16 * GIB)
    state["node_a_gpu"] = detect(node_a_rec)
    node_b_rec = tmp / "node-b.json"
    node_b_rec.write_text(CARDS_4070TIS)
    state["node_b_rec"] = node_b_rec

    # node-b's worker, started and restarted only through restart.py (by PID).
    wdir = tmp / "worker-b"
    (wdir / "data").mkdir(parents=True)
    (wdir / "data" / "worker_uuid").write_text("00000000-0000-4000-8000-0000000000bb\n")
    config = {"server_url": gpustack_server.api_url, "token": gpustack_server._token,  # pylint: disable=protected-access
              "worker_name": "node-b", "data_dir": str(wdir / "data"), "log_dir": str(wdir / "log"),
              "worker_ip": "127.0.0.1", "worker_port": free_port(), "worker_metrics_port": free_port(),
              "disable_worker_metrics": True, "proxy_port": free_port()}
    state["worker_config"] = config

    def declare(gpu):
        (wdir / "config.yaml").write_text(json.dumps(dict(config, resources=static_resources(gpu)), indent=1))

    state["declare"] = declare
    script = tmp / "restart.py"
    script.write_text(RESTART_SCRIPT)
    counter = tmp / "restarts.txt"
    counter.write_text("")
    state["counter"] = counter
    base = [sys.executable, str(script), str(venv / "bin" / "gpustack"), str(wdir / "config.yaml"),
            str(wdir / "worker.pid"), str(wdir / "worker.log"), str(counter)]
    state["worker_cmd"] = lambda action: subprocess.run(base + [action], check=True, timeout=60)
    state["worker_log"] = wdir / "worker.log"
    state["worker_dir"] = wdir

    declare(detect(node_b_rec))
    state["worker_cmd"]("start")

    shim = tmp / "bin"
    shim.mkdir()
    (shim / "docker").write_text(DOCKER_SHIM.replace("PINNED_VLLM", pins.VLLM))
    (shim / "docker").chmod(0o755)
    state["env"] = {"PATH": f"{shim}{os.pathsep}{_clean_env({})['PATH']}"}

    for rev in ("ckpt-1", "ckpt-2"):
        (tmp / rev).mkdir()
        (tmp / rev / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"]}))
    state["checkpoint"] = {"path": str(tmp / "ckpt-1"), "architecture": "Qwen3_5ForConditionalGeneration",
                           "hybrid": True, "quantization": "nvfp4", "vision": True, "mtp": True,
                           "native_context": 262144}

    metrics = FakeMetrics(gpustack_server)
    state["metrics"] = metrics
    state["state_file"] = {h: tmp / f"pairs-{h}.json" for h in ("node-a", "node-b")}
    inventory = {
        "all": {
            "children": {
                "gpustack_server": {"hosts": {"gs": {
                    "pairserve_gpustack_api_port": int(gpustack_server.api_url.rsplit(":", 1)[1]),
                    "pairserve_gpustack_management_key": gpustack_server.api_key,
                    "pairserve_gpustack_inference_key": gpustack_server.api_key,
                    "pairserve_gpustack_server_url": gpustack_server.api_url,
                    "pairserve_gpustack_cluster_name": gpustack_server.cluster_name}}},
                "gpu_nodes": {"hosts": {
                    "node-a": {"pairserve_gpustack_worker_name": gpustack_server.worker_name,
                               "pairserve_gpustack_worker_port": gpustack_server.worker_port,
                               "pairserve_nvml_replay": str(node_a_rec),
                               "pairserve_gpustack_worker_data_dir": str(gpustack_server.root / "worker" / "data"),
                               "pairserve_rebuild_state_file": str(state["state_file"]["node-a"]),
                               "pairserve_maintenance_state_file": str(tmp / "maintenance-node-a.json"),
                               "pairserve_maintenance_metrics_url": f"{metrics.url}/node-a/metrics"},
                    "node-b": {"pairserve_nvml_replay": str(node_b_rec),
                               "pairserve_gpustack_worker_port": config["worker_port"],
                               "pairserve_gpustack_worker_data_dir": str(wdir / "data"),
                               "pairserve_rebuild_state_file": str(state["state_file"]["node-b"]),
                               "pairserve_rebuild_worker_restart_command": base + ["restart"],
                               "pairserve_maintenance_state_file": str(tmp / "maintenance-node-b.json"),
                               # node-b's worker declares static GPUs, which GPUStack records without UUIDs: there is
                               # nothing to compare by UUID (test_gpu_identity_check.py proves that check).
                               "pairserve_maintenance_identity_check": False,
                               "pairserve_maintenance_metrics_url": f"{metrics.url}/node-b/metrics"}}},
            },
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "pairserve_node_venv": str(NODE_PYTHON.parent.parent),
                "pairserve_node_venv_apt_packages": [],
                "pairserve_vllm_version": pins.VLLM,
                "pairserve_checkpoint": state["checkpoint"],
                "pairserve_replica_profile": "multimodal",
                "pairserve_route_name": "qwen",
                "pairserve_route_weights": {"node-a": 58, "node-b": 42},
                "pairserve_runner_catalogue_python": str(venv / "bin" / "python"),
                "pairserve_runtime_pause_image": "docker.io/gpustack/runtime:pause",
                "pairserve_runtime_pause_image_digest": "sha256:" + "5" * 64,
                "pairserve_runtime_health_image": "docker.io/gpustack/runtime:health",
                "pairserve_runtime_health_image_digest": "sha256:" + "6" * 64,
                # The runner image's vLLM, once verified, is kept on the check host (this machine): in the test's tmp.
                "pairserve_runner_version_cache_dir": str(tmp / "runner-image-versions"),
                "pairserve_rebuild_provision": False,
                "pairserve_rebuild_verify": False,
                "pairserve_upgrade_gpustack": False,
                "pairserve_upgrade_checkpoint": False,
                "pairserve_upgrade_verify": False,
                # The verify record would go to the GPUStack server host, here this machine's /var/lib/pairserve.
                "pairserve_verify_record_path": "",
                "pairserve_maintenance_drain_poll": 1,
                # The replicas here never serve, so the route answers nothing: the watch of each drained node is
                # started and read as on a site, and ends at once when told to (on a site it waits up to 30 s).
                "pairserve_maintenance_watch_stop_grace": 0,
            },
        }
    }
    state["inventory"] = tmp / "hosts.yml"
    state["inventory"].write_text(json.dumps(inventory, indent=1))
    wait_for(lambda: [w for w in workers(gpustack_server) if w["state"] == "ready"], timeout=120,
             what="worker node-b to be ready")
    yield state

    metrics.close()
    state["worker_cmd"]("stop")
    for name in ("qwen",):
        run_module("gpustack_route", {**gpustack_server.key_args, "name": name, "state": "absent"})
    for name in ("qwen-node-a", "qwen-node-b"):
        run_module("gpustack_model", {**gpustack_server.key_args, "name": name, "state": "absent"})
    for worker in workers(gpustack_server):
        gpustack_server.api("DELETE", f"/v2/workers/{worker['id']}")


def play(day2, playbook, limit=None, **extra):
    return run_playbook(playbook, inventory=day2["inventory"], limit=limit, extra_vars=extra or None,
                        env=day2["env"], timeout=900)


def restarts(day2):
    """How many times a play restarted node-b's worker (the restart command counts; the tests' own stop/start
    does not)."""
    return len(day2["counter"].read_text().splitlines())


# -- the start each test establishes ------------------------------------------------------------------

def node_b_gpus(server):
    return sorted((g["index"], g["name"]) for g in server.items("/v2/gpu-devices") if g["worker_name"] == "node-b")


def node_b_runs_with(day2, cards: str) -> dict:
    """node-b's recorded host is `cards`, its worker declares them, runs, and GPUStack shows exactly them on one
    ready record. Restarts the worker (outside the play's restart count) only when that is not so already."""
    server = day2["server"]
    day2["node_b_rec"].write_text(cards)
    gpu = detect(day2["node_b_rec"])
    day2["declare"](gpu)
    want = sorted((g["index"], g["name"]) for g in gpu["gpus"])

    def shown():
        found = workers(server)
        return len(found) == 1 and found[0]["state"] == "ready" and node_b_gpus(server) == want

    if not shown():
        day2["worker_cmd"]("stop")
        day2["worker_cmd"]("start")
        wait_for(shown, timeout=180, what=f"worker node-b ready with {want} (records: {workers(server)})")
    return gpu


def registered(day2, host: str, gpu: dict) -> bool:
    """Whether `host`'s replica is registered for `gpu`'s first pair and the inventory's checkpoint, with the pairs
    recorded on the node: what rebuild_node.yml leaves behind."""
    server = day2["server"]
    found = model(server, f"qwen-{host}")
    record_file = day2["state_file"][host]
    if found is None or not record_file.exists():
        return False
    worker = server.worker_name if host == "node-a" else "node-b"
    record = json.loads(record_file.read_text())
    return (found["gpu_selector"]["gpu_ids"] == [f"{worker}:cuda:{i}" for i in gpu["pairs"][0]["gpustack_gpu_indexes"]]
            and found["local_path"] == day2["checkpoint"]["path"]
            and [g["uuid"] for g in record["gpus"]] == [g["uuid"] for g in gpu["gpus"]])


def route_as_inventory(day2):
    """Route qwen as the inventory has it: node-a 58, node-b 42, no fallback (undoes a drain a failed run left)."""
    server = day2["server"]
    res = run_module("gpustack_route", {**server.key_args, "name": "qwen", "targets": [
        {"model": "qwen-node-a", "weight": 58}, {"model": "qwen-node-b", "weight": 42}]})
    assert not res.failed, res.result
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 42}
    assert not [t for t in server.items("/v2/model-route-targets") if t.get("fallback_status_codes")]


def replicas_serving(day2, cards: str) -> dict:
    """The start of every test after the first registration: node-b runs with `cards`, both replicas are registered
    for the cards their nodes have (rebuild_node.yml --limit <node> where they are not) and recorded, the route
    is as the inventory has it. Returns node-b's detected pairserve_gpu."""
    gpu_b = node_b_runs_with(day2, cards)
    for host, gpu in (("node-a", day2["node_a_gpu"]), ("node-b", gpu_b)):
        if not registered(day2, host, gpu):
            res = play(day2, REBUILD, limit=host)
            assert res.rc == 0 and registered(day2, host, gpu), res.stdout[-4000:] + res.stderr[-2000:]
    route_as_inventory(day2)
    return gpu_b


def set_checkpoint(day2, name: str) -> dict:
    """The inventory's checkpoint pin becomes the directory `name` (a new revision on disk); returns it."""
    path = day2["tmp"] / name
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"]}))
    day2["checkpoint"] = dict(day2["checkpoint"], path=str(path))
    inventory = json.loads(day2["inventory"].read_text())
    inventory["all"]["vars"]["pairserve_checkpoint"] = day2["checkpoint"]
    day2["inventory"].write_text(json.dumps(inventory, indent=1))
    return day2["checkpoint"]


# -- rebuild_node.yml ---------------------------------------------------------------------------------

def test_rebuild_registers_each_node_and_records_its_pairs(day2):
    server = day2["server"]
    # Start: no replica, no route, no pairs record; node-b runs with its 4070 Ti SUPERs.
    run_module("gpustack_route", {**server.key_args, "name": "qwen", "state": "absent"})
    for name in ("qwen-node-a", "qwen-node-b"):
        assert not run_module("gpustack_model", {**server.key_args, "name": name, "state": "absent"}).failed
    for record in day2["state_file"].values():
        record.unlink(missing_ok=True)
    node_b_runs_with(day2, CARDS_4070TIS)
    count = restarts(day2)

    refused = play(day2, REBUILD)
    assert refused.rc != 0 and "run it with --limit <node>" in refused.stdout

    for host in ("node-a", "node-b"):
        first = play(day2, REBUILD, limit=host)
        assert first.rc == 0, first.stdout[-4000:] + first.stderr[-2000:]
        assert "no record of the earlier pairs yet" in first.stdout
    record = json.loads(day2["state_file"]["node-b"].read_text())
    assert record["pairs"][0]["uuids"] == ["GPU-4070b000-0000-4000-8000-000000000001",
                                           "GPU-4070b000-0000-4000-8000-000000000002"]
    assert record["replicas"] == ["qwen-node-b"]
    assert model(server, "qwen-node-b")["gpu_selector"]["gpu_ids"] == ["node-b:cuda:0", "node-b:cuda:1"]
    assert model(server, "qwen-node-a")["gpu_selector"]["gpu_ids"] == [f"{server.worker_name}:cuda:0",
                                                                       f"{server.worker_name}:cuda:1"]
    assert restarts(day2) == count
    route = run_module("gpustack_route", {**server.key_args, "name": "qwen", "targets": [
        {"model": "qwen-node-a", "weight": 58}, {"model": "qwen-node-b", "weight": 42}]})
    assert route.changed, route.result

    again = play(day2, REBUILD, limit="node-b")
    assert again.rc == 0, again.stdout[-4000:]
    assert "Nothing to do." in again.stdout
    assert recap(again, "node-b")["changed"] == 0, again.stdout[-3000:]


def test_rebuild_after_a_card_swap_moves_only_that_replica(day2):
    server = day2["server"]
    # Start: both replicas registered and recorded, node-b on its 4070 Ti SUPERs, route 58/42.
    replicas_serving(day2, CARDS_4070TIS)
    count = restarts(day2)
    before_ids = {n: v["id"] for n, v in route_targets(server).items()}
    a_model, a_instances = model(server, "qwen-node-a"), instance_ids(server, "qwen-node-a")
    b_instances = wait_for(lambda: instance_ids(server, "qwen-node-b"), timeout=60, what="qwen-node-b's instance")

    # The swap: three RTX 3090s; gpu_pairs pairs the NVLinked two at indexes 1 and 2. The worker declares the new
    # cards but has not restarted, so GPUStack still shows the 4070 Ti SUPERs.
    day2["node_b_rec"].write_text(CARDS_3090S)
    day2["declare"](detect(day2["node_b_rec"]))
    day2["metrics"].busy["node-b"] = 2
    day2["metrics"].polls.clear()

    swap = play(day2, REBUILD, limit="node-b")
    assert swap.rc == 0, swap.stdout[-5000:] + swap.stderr[-2000:]
    assert "cards changed since the replicas were registered" in swap.stdout
    assert "(stale: the worker restarts)" in swap.stdout
    assert restarts(day2) == count + 1
    gpus = [g for g in server.items("/v2/gpu-devices") if g["worker_name"] == "node-b"]
    assert sorted(g["name"] for g in gpus) == ["NVIDIA GeForce RTX 3090"] * 3
    b = model(server, "qwen-node-b")
    assert b["gpu_selector"]["gpu_ids"] == ["node-b:cuda:1", "node-b:cuda:2"]
    assert not set(instance_ids(server, "qwen-node-b")) & set(b_instances)  # rolled out
    # Drained while it worked (two polls with a request running, then idle), node-a kept its weight.
    node_b_polls = [p for p in day2["metrics"].polls if p[0] == "node-b"]
    assert [p[1] for p in node_b_polls] == [1, 1, 0]
    assert all(p[2] == {"qwen-node-a": 58, "qwen-node-b": 0} for p in node_b_polls)
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 42}
    assert {n: v["id"] for n, v in route_targets(server).items()} == before_ids
    # node-a untouched.
    assert model(server, "qwen-node-a")["updated_at"] == a_model["updated_at"]
    assert instance_ids(server, "qwen-node-a") == a_instances
    assert "other replica(s) untouched (qwen-node-a)" in swap.stdout
    record = json.loads(day2["state_file"]["node-b"].read_text())
    assert record["pairs"][0]["gpustack_gpu_indexes"] == [1, 2] and len(record["gpus"]) == 3

    again = play(day2, REBUILD, limit="node-b")
    assert again.rc == 0 and recap(again, "node-b")["changed"] == 0, again.stdout[-3000:]
    assert restarts(day2) == count + 1


def test_rebuild_refuses_a_pair_that_no_longer_fits_before_touching_anything(day2):
    """A pair that no longer fits fails with the reason before anything is torn down."""
    server = day2["server"]
    # Start: both replicas registered and recorded, node-b on the 3090s, route 58/42.
    replicas_serving(day2, CARDS_3090S)
    count = restarts(day2)
    before = snapshot(server)
    record = day2["state_file"]["node-b"].read_text()
    # node-b now has two Turing cards (compute capability 7.5): no FP4 path for the NVFP4 checkpoint.
    derive_recording(NVML / "node-b-2x4090.json", day2["node_b_rec"], name="Tesla T4", memory=15 * GIB, cc=(7, 5),
                     uuid="GPU-7475a000-0000-4000-8000")
    day2["metrics"].polls.clear()
    try:
        res = play(day2, REBUILD, limit="node-b")
    finally:
        day2["node_b_rec"].write_text(CARDS_3090S)
    assert res.rc != 0
    assert "needs an FP4 path, and this pair (compute capability 7.5) has none" in res.stdout, res.stdout[-4000:]
    # Refused at the check, before the first task that changes anything.
    assert "TASK [Drain this node from its routes]" not in res.stdout
    assert recap(res, "node-b")["failed"] == 1
    # Nothing was torn down: no restart, no drain (vLLM's counters never polled), GPUStack exactly as before
    # (workers, GPUs, both models' records, instances, route and target ids and weights), the record unchanged.
    assert restarts(day2) == count and not day2["metrics"].polls
    assert snapshot(server) == before
    assert day2["state_file"]["node-b"].read_text() == record


def test_rebuild_of_a_reinstalled_node_removes_the_ghost_worker(day2):
    server = day2["server"]
    # Start: both replicas registered and recorded, node-b on the 3090s, route 58/42.
    replicas_serving(day2, CARDS_3090S)
    count = restarts(day2)
    old = workers(server)
    assert [w["name"] for w in old] == ["node-b"]

    # Reinstall: the worker's data directory is gone. GPUStack still holds the name, so the fresh worker is refused.
    day2["worker_cmd"]("stop")
    # On a real node the replica's instance runs on the old worker record. Here no instance can be scheduled (no
    # real model file, no container runtime: they stay pending), so bind it the way the scheduler would have.
    inst = [i for i in server.items("/v2/model-instances") if i["model_name"] == "qwen-node-b"][0]
    server.api("PUT", f"/v2/model-instances/{inst['id']}",
               dict(inst, worker_id=old[0]["id"], worker_name="node-b", worker_ip="127.0.0.1", state="running"))
    bound = [i for i in server.items("/v2/model-instances") if i.get("worker_id") == old[0]["id"]]
    assert [i["id"] for i in bound] == [inst["id"]]
    subprocess.run(["rm", "-rf", str(day2["worker_dir"] / "data")], check=True)
    (day2["worker_dir"] / "data").mkdir()
    log_size = day2["worker_log"].stat().st_size
    day2["worker_cmd"]("start")
    wait_for(lambda: "Worker with name 'node-b' already exists" in day2["worker_log"].read_text()[log_size:],
             timeout=120, what="GPUStack to refuse the reinstalled worker under the held name")
    # GPUStack 2.2.3's worker retries its registration 10 times, 3 s apart, then gives up and exits (a systemd
    # unit with Restart=on-failure stays down). Run the play once it has given up: while it still retries, it
    # registers on its own as soon as the play deletes the ghost record, and the outcome depends on timing (the
    # flake of the clean CI run: the play's restart can land in the middle of that registration).
    wait_for(lambda: "Worker has shut down." in day2["worker_log"].read_text()[log_size:], timeout=180,
             what="the refused worker to give up its registration")

    res = play(day2, REBUILD, limit="node-b")
    assert res.rc == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "1 stale worker record(s) to remove" in res.stdout
    now = workers(server)
    assert [w["name"] for w in now] == ["node-b"] and now[0]["id"] != old[0]["id"] and now[0]["state"] == "ready"
    # The orphaned instance went with the ghost record; GPUStack made the replica a new one (to be placed on the
    # new record; it stays pending here).
    assert not [i for i in server.items("/v2/model-instances") if i.get("worker_id") == old[0]["id"]]
    fresh = wait_for(lambda: instance_ids(server, "qwen-node-b"), timeout=60, what="the replica's new instance")
    assert inst["id"] not in fresh and len(fresh) == 1
    assert model(server, "qwen-node-b")["gpu_selector"]["gpu_ids"] == ["node-b:cuda:1", "node-b:cuda:2"]
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 42}
    assert restarts(day2) == count + 1


# -- upgrade.yml --------------------------------------------------------------------------------------

def test_upgrade_drains_one_replica_at_a_time_and_a_second_run_changes_nothing(day2):
    server = day2["server"]
    # Start: both replicas registered for the inventory's pins, route 58/42, no drain left over.
    replicas_serving(day2, CARDS_3090S)
    ids = {n: v["id"] for n, v in route_targets(server).items()}
    instances = {n: instance_ids(server, n) for n in ("qwen-node-a", "qwen-node-b")}
    day2["metrics"].polls.clear()
    day2["metrics"].busy.update({"node-a": 2, "node-b": 1})

    # The pin that moves: a new checkpoint revision (a directory no replica used yet). The runner image gets
    # pinned on the way (the pinned vLLM's runner for the nodes' CUDA 13.0) where the registration had none.
    new = set_checkpoint(day2, "ckpt-upgrade-%d" % time.monotonic_ns())
    res = play(day2, UPGRADE)
    assert res.rc == 0, res.stdout[-6000:] + res.stderr[-2000:]
    for name in ("qwen-node-a", "qwen-node-b"):
        assert model(server, name)["local_path"] == new["path"], model(server, name)
        version = model(server, name)["backend_version"]
        runner = server.api("GET", "/v2/inference-backends/backend_name/vLLM")["version_configs"][version]
        assert runner["image_name"].endswith("runner:cuda13.0-vllm" + pins.VLLM), runner
        assert not set(instance_ids(server, name)) & set(instances[name])  # rolled out
    polls = day2["metrics"].polls
    assert [(p[0], p[1]) for p in polls] == [("node-a", 1), ("node-a", 1), ("node-a", 0), ("node-b", 1), ("node-b", 0)]
    assert all(p[2] == {"qwen-node-a": 0, "qwen-node-b": 42} for p in polls if p[0] == "node-a")
    assert all(p[2] == {"qwen-node-a": 58, "qwen-node-b": 0} for p in polls if p[0] == "node-b")
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 42}
    assert {n: v["id"] for n, v in route_targets(server).items()} == ids
    assert not [t for t in server.items("/v2/model-route-targets") if t.get("fallback_status_codes")]

    polls.clear()
    again = play(day2, UPGRADE)
    assert again.rc == 0, again.stdout[-4000:]
    assert recap(again, "node-a")["changed"] == 0 and recap(again, "node-b")["changed"] == 0, again.stdout[-3000:]
    assert not polls and again.stdout.count("Nothing to do.") == 2


def test_upgrade_refuses_a_vllm_pin_without_runner_image_before_draining(day2):
    server = day2["server"]
    # Start: both replicas registered, route 58/42, no drain left over.
    replicas_serving(day2, CARDS_3090S)
    before = snapshot(server)
    day2["metrics"].polls.clear()
    res = play(day2, UPGRADE, pairserve_vllm_version="0.27.1")
    assert res.rc != 0
    msg = " ".join(res["msg"].split())
    assert msg.startswith('Upgrade of node-a failed at "Make sure the runner image is present": '
                          "pairserve_vllm_version 0.27.1 has no GPUStack runner image"), msg
    assert "Rolled back: no replica had changed yet; route weights untouched." in msg
    assert recap(res, "node-b") is None  # the play stopped at node-a
    assert not day2["metrics"].polls
    assert snapshot(server) == before


def test_upgrade_rolls_back_a_replica_that_fails_verification(day2):
    server = day2["server"]
    # Start: both replicas registered, route 58/42, no drain left over.
    replicas_serving(day2, CARDS_3090S)
    ids = {n: v["id"] for n, v in route_targets(server).items()}
    a_before, b_before = model(server, "qwen-node-a"), model(server, "qwen-node-b")
    b_instances = instance_ids(server, "qwen-node-b")
    day2["metrics"].polls.clear()

    # A new checkpoint revision; the new replica never runs here, so verification times out. The restored
    # registration cannot run either: the rollback's wait for it gives up after pairserve_upgrade_rollback_timeout
    # (900 s by default) and the weight comes back anyway, saying so.
    new = dict(day2["checkpoint"], path=str(day2["tmp"] / "ckpt-2"))
    res = play(day2, UPGRADE, pairserve_checkpoint=new, pairserve_upgrade_verify=True,
               pairserve_verify_wait_timeout=4, pairserve_verify_poll_interval=2, pairserve_upgrade_rollback_timeout=5)
    assert res.rc != 0
    msg = " ".join(res["msg"].split())
    assert msg.startswith("Upgrade of node-a failed at") and "Not every replica is running after 4 s" in msg, msg
    # The backend version registered before the upgrade (the pinned vLLM carrying its runner image) comes back.
    assert a_before["backend_version"].startswith(pins.VLLM + "-") and a_before["backend_version"].endswith("-custom")
    assert (f"Rolled back: qwen-node-a (re-registered with {a_before['backend_version']} and rolled out again, "
            "NOT running after 5 s: look at its instance in GPUStack); route weights restored.") in msg, msg
    assert recap(res, "node-b") is None
    a_after = model(server, "qwen-node-a")
    assert a_after["local_path"] == a_before["local_path"] == day2["checkpoint"]["path"]
    assert a_after["backend_parameters"] == a_before["backend_parameters"]
    assert a_after["backend_version"] == a_before["backend_version"]
    assert [p[2] for p in day2["metrics"].polls] == [{"qwen-node-a": 0, "qwen-node-b": 42}]  # drained during it
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 42}
    assert {n: v["id"] for n, v in route_targets(server).items()} == ids
    assert not [t for t in server.items("/v2/model-route-targets") if t.get("fallback_status_codes")]
    assert model(server, "qwen-node-b")["updated_at"] == b_before["updated_at"]
    assert instance_ids(server, "qwen-node-b") == b_instances


# -- maintenance.yml ----------------------------------------------------------------------------------

# The replicas here never serve: no verification, and a route that answers nothing does not stop the maintenance
# (its watch still runs and reports). The change itself is the test's: node-b's worker restarted by PID.
MAINTENANCE_VARS = {"pairserve_maintenance_verify": False, "pairserve_maintenance_watch_grace": 3600}


class NewInstanceRuns(threading.Thread):
    """Stands in for the scheduler and vLLM, which cannot place or start a replica here: the instance GPUStack makes
    for `name` while a play runs (any id not in `known`) is bound to node-b and runs at `port` on 127.0.0.1, as a
    replica brought back does on a site (GPUStack picks a new port). Kept so until stopped."""

    def __init__(self, server, name: str, known, port: int):
        super().__init__(daemon=True)
        self.server, self.name, self.known, self.port = server, name, set(known), port
        self.bound = set()
        self.halt = threading.Event()

    def run(self):
        while not self.halt.wait(0.5):
            try:
                for inst in self.server.items("/v2/model-instances"):
                    if inst["model_name"] != self.name or inst["id"] in self.known:
                        continue
                    if inst["state"] != "running" or inst.get("port") != self.port:
                        self.server.api("PUT", f"/v2/model-instances/{inst['id']}",
                                        dict(inst, worker_name="node-b", worker_ip="127.0.0.1", port=self.port,
                                             state="running"))
                    self.bound.add(inst["id"])
            except (urllib.error.URLError, OSError):  # an instance the play removed meanwhile: read again
                continue

    def stop(self):
        self.halt.set()
        self.join(timeout=30)


def scrape_groups(path: Path) -> dict:
    """The scrape targets file as {(job, pairserve_host, pairserve_replica or None): [targets]}."""
    return {(g["labels"]["job"], g["labels"]["pairserve_host"], g["labels"].get("pairserve_replica")): g["targets"]
            for g in json.loads(path.read_text())}


def test_maintenance_paused_for_a_change_and_finished_brings_node_b_back_at_its_weight(day2):
    server = day2["server"]
    # Start: both replicas registered and recorded, node-b on the 3090s, route 58/42, no maintenance left over.
    replicas_serving(day2, CARDS_3090S)
    record = day2["state_file"]["node-b"].parent / "maintenance-node-b.json"
    assert not record.exists()
    ids = {n: v["id"] for n, v in route_targets(server).items()}
    a_model, a_instances = model(server, "qwen-node-a"), instance_ids(server, "qwen-node-a")
    b_instances = wait_for(lambda: instance_ids(server, "qwen-node-b"), timeout=60, what="qwen-node-b's instance")
    before = snapshot(server)
    # The Prometheus scrape targets (pairserve_metrics_targets_file), written by the pause run and the run that
    # finishes, on this machine (the Ansible controller).
    targets = day2["tmp"] / "prometheus" / "maintenance-targets.json"
    targets.unlink(missing_ok=True)
    metrics_file = {"pairserve_metrics_targets_file": str(targets)}

    refused = play(day2, MAINTENANCE, **MAINTENANCE_VARS)
    assert refused.rc != 0 and "run it with --limit <node>" in refused.stdout, refused.stdout[-3000:]
    assert snapshot(server) == before

    # Check mode: what a run would do, nothing changed.
    checked = run_playbook(MAINTENANCE, inventory=day2["inventory"], limit="node-b", check=True, env=day2["env"],
                           extra_vars=MAINTENANCE_VARS, timeout=900)
    assert checked.rc == 0, checked.stdout[-4000:] + checked.stderr[-2000:]
    flat = " ".join(checked.stdout.split())
    assert "node-b: would drain qwen-node-b from qwen" in flat and "Check mode: nothing was changed." in flat, flat[-3000:]
    assert recap(checked, "node-b")["changed"] == 0
    assert snapshot(server) == before and not record.exists()

    # pause: drained while its request finishes, worker in maintenance mode, instance stopped; the run ends.
    day2["metrics"].polls.clear()
    day2["metrics"].busy["node-b"] = 1
    paused = play(day2, MAINTENANCE, limit="node-b", pairserve_maintenance_action="pause", **MAINTENANCE_VARS,
                  **metrics_file)
    assert paused.rc == 0, paused.stdout[-5000:] + paused.stderr[-2000:]
    flat = " ".join(paused.stdout.split())
    assert ("finish with: ansible-playbook playbooks/maintenance.yml --limit node-b -e pairserve_maintenance_action=none"
            in flat), flat[-3000:]
    assert "While node-b was drained, route qwen had no target that answered for" in flat  # the watch ran
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 0}
    node_b_polls = [p for p in day2["metrics"].polls if p[0] == "node-b"]
    assert [p[1] for p in node_b_polls] == [1, 0]
    assert all(p[2] == {"qwen-node-a": 58, "qwen-node-b": 0} for p in node_b_polls)
    [worker] = workers(server)
    assert worker["state"] == "maintenance" and worker["maintenance"]["enabled"], worker
    assert worker["maintenance"]["message"].startswith("pairserve.llm maintenance.yml (pause) since "), worker
    assert not set(instance_ids(server, "qwen-node-b")) & set(b_instances)  # stopped (GPUStack made a new one)
    drained = json.loads(record.read_text())
    assert drained["action"] == "pause" and drained["drained_at"] > 0
    assert [g["uuid"] for g in drained["gpu"]["gpus"]] == [g["uuid"] for g in detect(day2["node_b_rec"])["gpus"]]
    # The scrape targets, written from node-b's play (the server is no host of it): the server, both workers, and
    # no replica (node-b's is stopped; node-a's cannot run here).
    assert sorted(scrape_groups(targets)) == [("gpustack-server", "gs", None), ("gpustack-worker", "node-a", None),
                                              ("gpustack-worker", "node-b", None)]

    # The operator's change: node-b's worker goes down and comes back, as in a reboot.
    day2["worker_cmd"]("restart")
    started = time.time()

    # The run that finishes stops the instance GPUStack made meanwhile and brings the replica back as a new one,
    # at a new port.
    port = free_port()
    runs = NewInstanceRuns(server, "qwen-node-b", instance_ids(server, "qwen-node-b") + b_instances, port)
    runs.start()
    try:
        done = play(day2, MAINTENANCE, limit="node-b", pairserve_maintenance_action="none", **MAINTENANCE_VARS,
                    **metrics_file)
    finally:
        runs.stop()
    try:
        assert done.rc == 0, done.stdout[-6000:] + done.stderr[-2000:]
        [new] = [i for i in server.items("/v2/model-instances") if i["model_name"] == "qwen-node-b"]
        assert new["id"] in runs.bound and new["state"] == "running" and new["port"] == port, new
        # The file follows the replica to its new instance's port.
        groups = scrape_groups(targets)
        assert groups[("vllm", "node-b", "qwen-node-b")] == [f"127.0.0.1:{port}"], groups
        assert sorted(groups) == [("gpustack-server", "gs", None), ("gpustack-worker", "node-a", None),
                                  ("gpustack-worker", "node-b", None), ("vllm", "node-b", "qwen-node-b")]
    finally:
        # Back to the start the other tests expect: node-b's replica as an instance that does not run.
        for inst_id in runs.bound & set(instance_ids(server, "qwen-node-b")):
            server.api("DELETE", f"/v2/model-instances/{inst_id}")
        wait_for(lambda: (set(instance_ids(server, "qwen-node-b")) - runs.bound
                          and not model(server, "qwen-node-b").get("ready_replicas")),
                 timeout=60, what="qwen-node-b's instance made again, not running")
    flat = " ".join(done.stdout.split())
    assert "An earlier run drained it at" in flat and "this run finishes that maintenance" in flat, flat[-3000:]
    out = re.search(r"node-b was out of route\(s\) qwen for ([0-9.]+) s \(.*?\); its weights are back: qwen-node-b 42\.",
                    flat)
    assert out, flat[-3000:]
    # counted from the pause run's drain, across the operator's change
    assert float(out.group(1)) >= time.time() - started and float(out.group(1)) > 0
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 42}
    assert {n: v["id"] for n, v in route_targets(server).items()} == ids
    assert not [t for t in server.items("/v2/model-route-targets") if t.get("fallback_status_codes")]
    [worker] = workers(server)
    assert worker["state"] == "ready" and not (worker.get("maintenance") or {}).get("enabled"), worker
    assert not record.exists()
    # node-a untouched
    assert model(server, "qwen-node-a")["updated_at"] == a_model["updated_at"]
    assert instance_ids(server, "qwen-node-a") == a_instances


def test_maintenance_stops_when_the_cards_changed_and_leaves_node_b_drained(day2):
    server = day2["server"]
    # Start: both replicas registered and recorded, node-b on the 3090s, route 58/42, no maintenance left over.
    replicas_serving(day2, CARDS_3090S)
    record = day2["state_file"]["node-b"].parent / "maintenance-node-b.json"
    paused = play(day2, MAINTENANCE, limit="node-b", pairserve_maintenance_action="pause", **MAINTENANCE_VARS)
    assert paused.rc == 0, paused.stdout[-5000:]

    # A driver update changed what the cards report (here: their name); the worker comes back with them.
    derive_recording(NVML / "three-gpus.json", day2["node_b_rec"], name="NVIDIA GeForce RTX 3090 Ti")
    day2["declare"](detect(day2["node_b_rec"]))
    day2["worker_cmd"]("restart")
    try:
        res = play(day2, MAINTENANCE, limit="node-b", pairserve_maintenance_action="none", **MAINTENANCE_VARS)
    finally:
        day2["node_b_rec"].write_text(CARDS_3090S)
        day2["declare"](detect(day2["node_b_rec"]))
    assert res.rc != 0
    flat = " ".join(res.stdout.split())
    assert "The cards of node-b changed during the maintenance: node-b: GPU 0 was GPU-" in flat, flat[-4000:]
    assert "now reports GPU-" in flat and "NVIDIA GeForce RTX 3090 Ti" in flat
    assert "playbooks/rebuild_node.yml --limit node-b" in flat
    # Left drained, in maintenance mode, with its record of the cards before.
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 0}
    [worker] = workers(server)
    assert worker["maintenance"]["enabled"], worker
    assert record.exists()

    # The way out it names: rebuild_node.yml (here the cards are the recorded ones again, while GPUStack still shows
    # the renamed ones: the rebuild restarts the worker) takes the worker out of maintenance mode, gives node-b its
    # weight back and ends the maintenance's record.
    count = restarts(day2)
    rebuilt = play(day2, REBUILD, limit="node-b")
    assert rebuilt.rc == 0, rebuilt.stdout[-5000:] + rebuilt.stderr[-2000:]
    flat = " ".join(rebuilt.stdout.split())
    assert "(stale: the worker restarts)" in flat and "it comes out of it" in flat, flat[-3000:]
    assert restarts(day2) == count + 1
    assert weights(server) == {"qwen-node-a": 58, "qwen-node-b": 42}
    [worker] = workers(server)
    assert worker["state"] == "ready" and not (worker.get("maintenance") or {}).get("enabled"), worker
    assert not record.exists()
