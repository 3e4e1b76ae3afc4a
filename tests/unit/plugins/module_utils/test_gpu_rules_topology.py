"""Over hosts recorded on real hardware (tests/fixtures/nvml/, the real 2x H200 and the seed's cards) changed only
where the case says: a host left without a pair says which rule removed which GPU, and a pair whose cards hang off
different NUMA nodes or sockets without a direct path is warned about (not refused), saying what it costs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import nvml, nvml_replay
from support.ansible_runner import run_local_play
from support.nvml_recordings import derived_recording

REPO = Path(__file__).resolve().parents[4]
FIXTURES = REPO / "tests" / "fixtures" / "nvml"
H200 = FIXTURES / "h200x2-2026-11-30.json"
NO_P2P = {"READ": 5, "WRITE": 5, "NVLINK": 5, "ATOMICS": 5, "PROP": 5}


def _gather(path, **options):
    return nvml.gather({nvml_replay.ENV_VAR: str(path)}, **options)


def _derive(tmp_path, note, change):
    return derived_recording(H200, tmp_path / "h200-derived.json", note, change)


def _mig(data, which=(0, 1)):
    for i in which:
        data["devices"][i]["MigMode"] = [1, 1]


# -- class 3: the rule that removed each GPU -----------------------------------------------------------------------

def test_both_cards_in_mig_mode_name_mig_and_each_card(tmp_path):
    fact = _gather(_derive(tmp_path, "both H200 in MIG mode.", _mig))
    assert fact["pairs"] == [] and [i["rule"] for i in fact["leftover"]] == ["mig", "mig"]
    reason = fact["no_pairs_reason"]
    assert reason.startswith("no group of 2 is left: NVML sees 2 GPU(s), and the pairing rules removed every one.")
    assert "MIG mode removed 2:" in reason
    for gpu in fact["gpus"]:
        assert "%s (NVIDIA H200, %s)" % (gpu["bus_id"], gpu["uuid"]) in reason
    assert "nvidia-smi -i 0 -mig 0" in reason and "nvidia-smi -i 1 -mig 0" in reason


def test_mig_and_exclude_each_named_with_its_card(tmp_path):
    path = _derive(tmp_path, "the second H200 in MIG mode.", lambda data: _mig(data, (1,)))
    first = _gather(path)["gpus"][0]
    fact = _gather(path, exclude=[first["uuid"]])
    reason = fact["no_pairs_reason"]
    assert "the exclude option (pairserve_gpu_exclude) removed 1: %s" % first["bus_id"] in reason
    assert "MIG mode removed 1: 00000000:00:07.0" in reason


def test_an_odd_card_out_after_mig_says_both_causes(tmp_path):
    fact = _gather(_derive(tmp_path, "the first H200 in MIG mode.", lambda data: _mig(data, (0,))))
    rules = dict((i["bus_id"], i["rule"]) for i in fact["leftover"])
    assert rules == {"00000000:00:06.0": "mig", "00000000:00:07.0": "partner"}
    assert "MIG mode removed 1" in fact["no_pairs_reason"] and "whole pairs only removed 1" in fact["no_pairs_reason"]


def test_mixed_models_name_the_allow_mixed_variable():
    fact = _gather(FIXTURES / "mixed-4070tis-5080.json")
    assert fact["pairs"] == []
    assert "one model and memory size per pair (pairserve_gpu_allow_mixed) removed 2" in fact["no_pairs_reason"]
    assert _gather(FIXTURES / "mixed-4070tis-5080.json", allow_mixed=True)["no_pairs_reason"] is None


def test_no_gpu_at_all(tmp_path):
    def empty(data):
        data["devices"], data["pairs"] = [], {}
    fact = _gather(_derive(tmp_path, "no device.", empty))
    assert fact["no_pairs_reason"].startswith("NVML sees no GPU on this host")


def test_the_preflight_failure_is_the_rules_explanation(tmp_path):
    """The preflight role's check (before anything is installed) fails with gpu_pairs' reason, not a bare message."""
    fact = _gather(_derive(tmp_path, "both H200 in MIG mode.", _mig))
    res = run_local_play(tmp_path, "preflight gpu", [
        {"name": "Check", "ansible.builtin.include_tasks": str(REPO / "roles" / "preflight" / "tasks" / "gpu.yml")}],
        play_vars={"pairserve_gpu": fact})
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert failed and failed[0]["msg"].startswith("No GPU pair on localhost: no group of 2 is left"), failed
    assert "MIG mode removed 2" in failed[0]["msg"]


# -- class 4: NUMA and socket topology ------------------------------------------------------------------------------

def _numa(nodes, level=30, p2p=None):
    def change(data):
        for dev, node in zip(data["devices"], nodes):
            dev["NumaNodeId"] = node if node is not None else {"error": "NotSupported", "code": 3}
        for pair in data["pairs"].values():
            pair["TopologyCommonAncestor"] = level
            if p2p is not None:
                pair["P2PStatus"] = dict(p2p)
    return change


@pytest.mark.parametrize("nodes,level,p2p,spans,warned", [
    ((None, None), 30, None, False, False),      # the real H200 VM: NUMA not told, host bridge, NVLink
    ((0, 1), 30, None, True, False),             # two NUMA nodes, but NVLink: a direct path
    ((0, 1), 30, NO_P2P, True, True),            # two NUMA nodes, no direct path
    ((None, None), 50, NO_P2P, True, True),      # NUMA not told, PCIe path across the sockets
    ((0, 0), 40, NO_P2P, False, False),          # one NUMA node, across host bridges: no socket crossed
    ((0, None), 40, NO_P2P, False, False),       # one node unknown, the path stays in one node
    ((0, None), None, NO_P2P, None, False),      # nothing tells
])
def test_pair_topology(tmp_path, nodes, level, p2p, spans, warned):
    change = _numa(nodes, level if level is not None else {"error": "NotSupported", "code": 3}, p2p)
    fact = _gather(_derive(tmp_path, "NUMA %s, topology %s, P2P %s." % (nodes, level, p2p), change))
    pair = fact["pairs"][0]
    assert pair["numa_nodes"] == list(nodes)
    assert pair["spans_sockets"] is spans
    assert bool(pair["topology_warning"]) is warned
    assert fact["warnings"] == ([pair["topology_warning"]] if warned else [])
    if warned:
        text = pair["topology_warning"]
        assert text.startswith("pair 0 (00000000:00:06.0 + 00000000:00:07.0) spans CPU sockets")
        assert "all-reduce" in text and "slower" in text and "playbooks/bench.yml" in text
    # a warning never removes the pair
    assert len(fact["pairs"]) == 1 and fact["no_pairs_reason"] is None


def test_the_detection_report_shows_the_topology_and_the_warning(tmp_path):
    """playbooks/detect.yml's own report task, run over a fact with a pair that spans the sockets."""
    import yaml  # pylint: disable=import-outside-toplevel
    play = yaml.safe_load((REPO / "playbooks" / "detect.yml").read_text())[0]
    task = next(t for t in play["tasks"] if t["name"] == "Print the pairs of this host")
    fact = _gather(_derive(tmp_path, "NUMA 0 and 1, no P2P.", _numa((0, 1), 30, NO_P2P)))
    res = run_local_play(tmp_path, "report", [task], play_vars={"pairserve_gpu": fact})
    assert res.rc == 0, res.stdout[-2000:]
    text = res.by_task["Print the pairs of this host"]["msg"]
    assert "NUMA nodes: 0, 1 | spans sockets: yes" in text, text
    assert "WARNING: pair 0 (00000000:00:06.0 + 00000000:00:07.0) spans CPU sockets" in text
    fact = _gather(H200)
    res = run_local_play(tmp_path, "report", [task], play_vars={"pairserve_gpu": fact})
    text = res.by_task["Print the pairs of this host"]["msg"]
    assert "NUMA nodes: unknown, unknown | spans sockets: no" in text and "WARNING" not in text
