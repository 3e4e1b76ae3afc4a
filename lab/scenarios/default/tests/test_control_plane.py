"""pytest-testinfra checks of the lab's control plane (molecule/default, `python -m lab test`).

Runs on the controller against the lab's node containers through testinfra's podman backend, after site.yml
converged them with lab/inventory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import testinfra

# The node containers: the lab's (lab/nodes.py) unless the caller names others.
NODE_A = os.environ.get("PAIRSERVE_NODE_A", "pairserve-lab-node-a")
NODE_B = os.environ.get("PAIRSERVE_NODE_B", "pairserve-lab-node-b")
REPO = Path(__file__).resolve().parents[4]
LAB_VARS = REPO / "lab" / "inventory" / "group_vars" / "all" / "control_plane.yml"
# The lab hub's endpoint and commit are in its group_vars (lab/inventory/group_vars/all/lab_hub.yml,
# written by lab/services.py start_hub).
INVENTORY = REPO / "lab" / "inventory" / "hosts.yml"
API = "http://127.0.0.1:30080"
EXPECTED_GPUS = {"node-a": "NVIDIA GeForce RTX 5080", "node-b": "NVIDIA GeForce RTX 4070 Ti SUPER"}

# Runs inside node-a: one HTTP request, prints {"status": ..., "body": ...}. No curl in the image.
HTTP = r"""
import base64, json, sys, urllib.error, urllib.request
method, url, auth = sys.argv[1], sys.argv[2], sys.argv[3]
headers = {}
if auth.startswith("bearer:"):
    headers["Authorization"] = "Bearer " + auth[7:]
elif auth.startswith("basic:"):
    headers["Authorization"] = "Basic " + base64.b64encode(auth[6:].encode()).decode()
req = urllib.request.Request(url, headers=headers, method=method)
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(json.dumps({"status": r.status, "body": r.read().decode()}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "body": e.read().decode()}))
"""


def _lab_var(name: str) -> str:
    match = re.search(rf'^{name}: "([^"]+)"', LAB_VARS.read_text(), re.M)
    assert match, f"{name} not found in {LAB_VARS}"
    return match.group(1)


@pytest.fixture(scope="module")
def node_a():
    return testinfra.get_host(f"podman://{NODE_A}")


@pytest.fixture(scope="module")
def node_b():
    return testinfra.get_host(f"podman://{NODE_B}")


@pytest.fixture(scope="module")
def secrets(node_a):
    """Every secret the play handled, to look for in logs."""
    values = {
        "admin password": _lab_var("pairserve_gpustack_admin_password"),
        "database password": _lab_var("pairserve_gpustack_db_password"),
        "management key": node_a.file("/etc/pairserve/secrets/management-api-key").content_string.strip(),
        "inference key": node_a.file("/etc/pairserve/secrets/inference-api-key").content_string.strip(),
    }
    # The HTTPS key: its longest base64 line stands for it (the PEM's armour lines are no secret).
    values["TLS private key"] = max(node_a.file("/etc/pairserve/tls/gpustack.key").content_string.splitlines(), key=len)
    token = re.search(r'^token: "([^"]+)"', node_a.file("/etc/gpustack-worker/worker.yaml").content_string, re.M)
    assert token, "no token in node-a's worker.yaml"
    values["registration token"] = token.group(1)
    for name, value in values.items():
        assert len(value) >= 8, f"{name} is suspiciously short"
    return values


def http(host, method, path, auth=""):
    out = host.check_output("python3 -c %s %s %s %s", HTTP, method, API + path, auth or "none")
    result = json.loads(out)
    return result["status"], result["body"]


@pytest.mark.parametrize(
    ("node", "units"),
    [(NODE_A, ["postgresql", "gpustack-server", "gpustack-worker"]), (NODE_B, ["gpustack-worker"])],
)
def test_services_active_and_enabled(node, units):
    host = testinfra.get_host(f"podman://{node}")
    for unit in units:
        service = host.service(unit)
        assert service.is_running, f"{unit} is not running on {node}"
        assert service.is_enabled, f"{unit} is not enabled on {node}"


def test_server_runs_as_its_own_user(node_a):
    procs = node_a.process.filter(comm="gpustack")
    users = {p.user for p in procs if "server.yaml" in p.args}
    assert users == {"gpustack"}, f"server processes run as {users}"


def test_readyz_answers(node_a):
    status, _body = http(node_a, "GET", "/readyz")
    assert status == 200


def test_both_workers_ready_with_their_gpus(node_a, secrets):
    status, body = http(node_a, "GET", "/v2/workers?perPage=100", "bearer:" + secrets["management key"])
    assert status == 200, body
    workers = {w["name"]: w for w in json.loads(body)["items"]}
    assert set(workers) == set(EXPECTED_GPUS), f"workers: {sorted(workers)}"
    for name, gpu_name in EXPECTED_GPUS.items():
        worker = workers[name]
        assert worker["state"] == "ready", f"{name}: {worker['state']} {worker.get('state_message')}"
        gpus = worker["status"]["gpu_devices"]
        assert [g["name"] for g in gpus] == [gpu_name, gpu_name], f"{name}: {gpus}"


def test_api_keys_are_scoped(node_a, secrets):
    management, inference = "bearer:" + secrets["management key"], "bearer:" + secrets["inference key"]
    assert http(node_a, "GET", "/v2/workers", management)[0] == 200
    assert http(node_a, "GET", "/v1/models", inference)[0] == 200
    # An inference key cannot manage the cluster; a made-up key gets nothing.
    assert http(node_a, "GET", "/v2/workers", inference)[0] in (401, 403)
    assert http(node_a, "GET", "/v2/workers", "bearer:sk-pairserve-not-a-key")[0] == 401
    assert http(node_a, "GET", "/v1/models", "bearer:sk-pairserve-not-a-key")[0] == 401


@pytest.mark.parametrize(
    ("node", "path", "mode", "owner", "group"),
    [
        (NODE_A, "/etc/pairserve/secrets", 0o700, "root", "root"),
        (NODE_A, "/etc/pairserve/secrets/management-api-key", 0o600, "root", "root"),
        (NODE_A, "/etc/pairserve/secrets/inference-api-key", 0o600, "root", "root"),
        (NODE_A, "/etc/gpustack/server.yaml", 0o640, "root", "gpustack"),
        (NODE_A, "/etc/gpustack-worker/worker.yaml", 0o600, "root", "root"),
        (NODE_B, "/etc/gpustack-worker/worker.yaml", 0o600, "root", "root"),
        (NODE_A, "/etc/pairserve/firewall.nft", 0o600, "root", "root"),
        (NODE_B, "/etc/pairserve/firewall.nft", 0o600, "root", "root"),
        (NODE_A, "/etc/pairserve/tls/gpustack.key", 0o600, "root", "root"),
    ],
)
def test_secret_files_are_private(node, path, mode, owner, group):
    f = testinfra.get_host(f"podman://{node}").file(path)
    assert f.exists, path
    assert (f.mode, f.user, f.group) == (mode, owner, group), f"{path}: {oct(f.mode)} {f.user}:{f.group}"


@pytest.mark.parametrize("node", [NODE_A, NODE_B])
def test_no_secret_in_the_journal(node, secrets):
    journal = testinfra.get_host(f"podman://{node}").check_output("journalctl --no-pager -o cat")
    assert "GPUStack" in journal or "gpustack" in journal, "the journal is empty: nothing was checked"
    leaked = [name for name, value in secrets.items() if value in journal]
    assert not leaked, f"found in the journal of {node}: {leaked}"


def _ansible_env():
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")


def test_no_secret_in_verbose_check_mode_and_no_change(secrets):
    """site.yml in check mode at -vvv on the converged lab prints nothing secret and changes nothing.

    `python -m lab test` runs exactly this as its check-mode phase and names the log in PAIRSERVE_CHECK_LOG; run
    alone, the test runs it itself.
    """
    log = os.environ.get("PAIRSERVE_CHECK_LOG")
    if log:
        output = Path(log).read_text(encoding="utf-8", errors="replace")
    else:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-vvv", "--check", "-i", str(INVENTORY),
             str(REPO / "site.yml")],
            cwd=REPO, env=_ansible_env(), capture_output=True, text=True, timeout=1200, check=False)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-4000:]
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)
    assert "ESTABLISH" in output or "<node-a>" in output, "the log is not a -vvv run: nothing was checked"
    leaked = [name for name, value in secrets.items() if value in output]
    assert not leaked, f"-vvv output shows: {leaked}"
    recap = dict(re.findall(r"^(node-[ab]|localhost)\s*:.*?changed=(\d+)", output, re.M))
    assert {"node-a", "node-b"} <= set(recap), recap
    assert all(changed == "0" for changed in recap.values()), recap


def test_wrong_admin_password_names_the_cause():
    env = _ansible_env()
    args = {"api_url": API, "username": "admin", "password": "wrong-password-123", "name": "pairserve"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "node-a", "-i", str(INVENTORY),
         "-m", "pairserve.llm.gpustack_cluster", "-a", json.dumps(args)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert "401" in proc.stdout and re.search(r"password|credential|auth", proc.stdout, re.I), proc.stdout[-2000:]


def test_unreachable_server_names_the_cause():
    env = _ansible_env()
    # node-b asks node-a on a port nothing listens on.
    args = {"api_url": "http://127.0.0.1:1", "password": "whatever-123", "gather": ["workers"],
            "retries": 0, "timeout": 5}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "node-b", "-i", str(INVENTORY),
         "-m", "pairserve.llm.gpustack_info", "-a", json.dumps(args)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert re.search(r"refused|unreachable|cannot reach|connect", proc.stdout, re.I), proc.stdout[-2000:]
    assert "127.0.0.1:1" in proc.stdout, proc.stdout[-2000:]


def test_wrong_registration_token_names_the_cause(node_b):
    """A worker started with a wrong token stops with the server's rejection in its output."""
    cfg = node_b.file("/etc/gpustack-worker/worker.yaml").content_string
    bad = re.sub(r'^token: .*$', 'token: "gpustack_00000000_00000000000000000000000000000000"', cfg, flags=re.M)
    bad = re.sub(r'^worker_port: .*$', "worker_port: 10250", bad, flags=re.M)
    bad = re.sub(r'^worker_metrics_port: .*$', "worker_metrics_port: 10251", bad, flags=re.M)
    bad = re.sub(r'^worker_name: .*$', 'worker_name: "pairserve-wrong-token"', bad, flags=re.M)
    bad = re.sub(r'^data_dir: .*$', "data_dir: /tmp/pairserve-wrong-token", bad, flags=re.M)
    node_b.run("mkdir -p /tmp/pairserve-wrong-token && echo 3b241101-e2bb-4255-8caf-4136c566a962 > /tmp/pairserve-wrong-token/worker_uuid")
    node_b.run("cat > /tmp/pairserve-wrong-token.yaml <<'EOF'\n%s\nEOF" % bad)
    try:
        result = node_b.run("timeout 150 /opt/gpustack/current/venv/bin/gpustack start --config-file /tmp/pairserve-wrong-token.yaml")
    finally:
        node_b.run("rm -rf /tmp/pairserve-wrong-token /tmp/pairserve-wrong-token.yaml")
    output = result.stdout + result.stderr
    # GPUStack 2.2.3 logs the rejection and exits 0 ("Worker has shut down").
    assert result.rc != 124, f"the worker kept running with a wrong token: {output[-2000:]}"
    assert "Invalid authentication credentials" in output, output[-2000:]
