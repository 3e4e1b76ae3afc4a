"""status.yml shows where each pair's cards hang (NUMA nodes, whether the pair spans CPU sockets) and gpu_pairs'
warning for a pair across sockets without a direct path: read from NVML on each GPU node (here a replay of the real
H200 host, changed where the case says), a warning in the table and never a problem."""

from __future__ import annotations

import copy
import json
import re

from ansible_collections.pairserve.llm.plugins.module_utils import nvml, nvml_replay, status
from support.ansible_runner import REPO, run_playbook
from support.nvml_recordings import derived_recording
from test_status import EXPECTED, NODES, PASSED, STATUS, FakeGpuStack, cluster, inventory  # noqa: E402  pylint: disable=import-error

H200 = REPO / "tests" / "fixtures" / "nvml" / "h200x2-2026-11-30.json"


def _across_sockets(tmp_path):
    def change(data):
        for dev, node in zip(data["devices"], (0, 1)):
            dev["NumaNodeId"] = node
        for pair in data["pairs"].values():
            pair["P2PStatus"] = {"READ": 5, "WRITE": 5, "NVLINK": 5, "ATOMICS": 5, "PROP": 5}
    return derived_recording(H200, tmp_path / "h200-across-sockets.json", "NUMA nodes 0 and 1, no P2P.", change)


def test_the_table_shows_each_pair_and_warns_without_a_problem(tmp_path):
    across = nvml.gather({nvml_replay.ENV_VAR: _across_sockets(tmp_path)})
    same = nvml.gather({nvml_replay.ENV_VAR: str(H200)})
    nodes = copy.deepcopy(NODES)
    nodes[0]["gpu"] = {"pairs": across["pairs"]}
    nodes[1]["gpu"] = {"pairs": same["pairs"]}
    got = status.cluster_status(cluster(), nodes, PASSED, EXPECTED)
    assert not got["problems"], got["problems"]
    assert [(t["host"], t["numa_nodes"], t["spans_sockets"]) for t in got["topology"]] == [
        ("node-a", [0, 1], True), ("node-b", [None, None], False)]
    text = got["text"]
    assert "GPU pair topology" in text
    assert "warning: node-a: pair 0 (00000000:00:06.0 + 00000000:00:07.0) spans CPU sockets" in text
    assert "node-b" not in [line for line in got["lines"] if line.startswith("  warning:")][0]
    # a node whose NVML could not be read says so
    nodes[1]["gpu"] = {"error": "no node venv"}
    got = status.cluster_status(cluster(), nodes, PASSED, EXPECTED)
    assert any("not read: no node venv" in line for line in got["lines"])


def test_the_play_reads_the_topology_on_each_node(tmp_path):
    server = FakeGpuStack(cluster())
    try:
        hosts = inventory(tmp_path, server.port)
        data = json.loads(hosts.read_text())
        gpu_nodes = data["all"]["children"]["gpu_nodes"]["hosts"]
        gpu_nodes["node-a"]["pairserve_nvml_replay"] = _across_sockets(tmp_path)
        gpu_nodes["node-b"]["pairserve_nvml_replay"] = str(H200)
        data["all"]["vars"]["pairserve_node_venv"] = str(REPO / ".venv")  # it has nvidia-ml-py, as a node venv does
        hosts.write_text(json.dumps(data))
        run = run_playbook(STATUS, inventory=hosts)
    finally:
        server.close()
    assert run.rc == 0, run.stdout[-4000:]
    assert "GPU pair topology" in run.stdout
    assert "warning: node-a: pair 0 (00000000:00:06.0 + 00000000:00:07.0) spans CPU sockets" in run.stdout
    # gpu_pairs' own warning too, once per node whose pair spans the sockets
    warned = re.findall(r"\[WARNING\]: pair 0 \(00000000:00:06.0 \+ 00000000:00:07.0\) spans", run.stdout + run.stderr)
    assert len(warned) == 1, (run.stdout + run.stderr)[-3000:]
