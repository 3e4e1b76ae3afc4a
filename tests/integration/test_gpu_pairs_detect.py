"""playbooks/detect.yml on the recorded inventory: node_venv for real (a venv from a local wheelhouse),
then gpu_pairs over the replayed node A and node B; the second run changes nothing; bad pins fail first.

The wheelhouse holds the one pinned wheel the role installs here (nvidia-ml-py, no dependencies), fetched
with `pip download` from the package index the controller venv was built from.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.ansible_runner import REPO, run_playbook

# Builds a real venv (about 25 s of CPU): integration-tier cost, hence the marker.
pytestmark = pytest.mark.slow

PIN = "nvidia-ml-py==13.615.71"
INVENTORY = REPO / "inventory" / "recorded" / "hosts.yml"
PLAYBOOK = REPO / "playbooks" / "detect.yml"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("detect")
    wheelhouse = tmp / "wheelhouse"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(wheelhouse), PIN], check=True, timeout=300)
    # One venv per host, as on real nodes: both recorded hosts run on this machine, and two `python -m venv`
    # on one path at once race ("File exists").
    return {"pairserve_node_venv": str(tmp / "venv-{{ inventory_hostname }}"),
            "pairserve_node_wheelhouse": str(wheelhouse),
            "pairserve_node_python_packages": [PIN]}


def _by_task(result):
    out = {}
    for record in result.results:
        out.setdefault(record["_task"], {})[record["_host"]] = record
    return out


def test_detect_prints_the_pairs_and_is_idempotent(node):
    first = run_playbook(PLAYBOOK, inventory=INVENTORY, extra_vars=node)
    assert first.rc == 0, first.stdout + first.stderr
    tasks = _by_task(first)
    assert all(r["changed"] for r in tasks["Install the pinned packages into the node venv"].values())
    facts = {host: r["ansible_facts"]["pairserve_gpu"]
             for host, r in tasks["Inventory the GPUs and group them into pairs"].items()}
    assert facts["node-a"]["source"] == f"replay:{REPO / 'tests/fixtures/nvml/node-a-2x5080.json'}"
    assert facts["node-b"]["pairs"][0]["fp4_path"] == "marlin"
    printed = {host: r["msg"] for host, r in tasks["Print the pairs of this host"].items()}
    assert "pair 0: NVIDIA GeForce RTX 5080 x2" in printed["node-a"] and "fp4 native" in printed["node-a"]
    assert "idle 21.6 W" in printed["node-a"] and "idle 102.8 W" in printed["node-b"]
    assert ("CUDA_VISIBLE_DEVICES=GPU-4070b000-0000-4000-8000-000000000001,GPU-4070b000-0000-4000-8000-000000000002"
            in printed["node-b"])

    second = run_playbook(PLAYBOOK, inventory=INVENTORY, extra_vars=node)
    assert second.rc == 0, second.stdout + second.stderr
    changed = [(r["_host"], r["_task"]) for r in second.results if r.get("changed")]
    assert changed == [], changed
    assert "changed=0" in second.stdout


def test_unpinned_package_fails_before_anything(tmp_path):
    venv = tmp_path / "venv"
    result = run_playbook(PLAYBOOK, inventory=INVENTORY, limit="node-a",
                          extra_vars={"pairserve_node_venv": str(venv),
                                      "pairserve_node_python_packages": ["nvidia-ml-py>=13", "pynvml==12.0.0"]})
    assert result.rc != 0
    assert "must pin every package as NAME==VERSION" in result.stdout
    assert "nvidia-ml-py>=13" in result.stdout and "pynvml==12.0.0" in result.stdout
    assert not venv.exists()
