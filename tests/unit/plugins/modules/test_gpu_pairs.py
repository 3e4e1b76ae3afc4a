"""pairserve.llm.gpu_pairs through real Ansible, over every NVML fixture, and once over no driver at all.

All replay cases run as tasks of one generated playbook (one ansible-playbook process, ~10 s instead of ~4 s
per case); each task's raw result comes back by name through the test callback. Expected failures use
`ignore_errors` so later cases still run; their results are recorded with status "failed".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import gpu_identity
from support.ansible_runner import run_module
from support.nvml_recordings import derived_recording, play_over_recordings, set_minor_numbers, swap_pci_location

REPO = Path(__file__).resolve().parents[4]
FIXTURES = REPO / "tests" / "fixtures" / "nvml"

NODE_A_UUIDS = ["GPU-5080a000-0000-4000-8000-000000000001", "GPU-5080a000-0000-4000-8000-000000000002"]
MIXED_4070 = "GPU-4070c000-0000-4000-8000-000000000001"
MIXED_5080 = "GPU-5080c000-0000-4000-8000-000000000002"


def _old_driver_fixture(tmp: Path) -> str:
    return derived_recording(FIXTURES / "node-a-2x5080.json", tmp / "node-a-driver-560.json",
                             "driver 560.35.03, older than Blackwell's R570.",
                             lambda data: data["system"].update(DriverVersion="560.35.03"))


def _order_fixtures(tmp: Path) -> tuple:
    """The real 2x H200 recording with minor numbers 1, 0 (not PCI order), and with its two cards swapped on the
    bus (NVML order not PCI order)."""
    minors = derived_recording(FIXTURES / "h200x2-2026-11-30.json", tmp / "h200x2-minors-1-0.json",
                               "minor numbers 1, 0.", lambda data: set_minor_numbers(data, (1, 0)))
    swapped = derived_recording(FIXTURES / "h200x2-2026-11-30.json", tmp / "h200x2-out-of-pci-order.json",
                                "the two devices' PCI locations swapped.", lambda data: swap_pci_location(data, 0, 1))
    return minors, swapped


def _cases(tmp: Path) -> list:
    """(task name, module args, recording, check mode, expect failure)."""
    old = _old_driver_fixture(tmp)
    minors, swapped = _order_fixtures(tmp)
    return [
        ("h200 minors out of order", {"expected_pairs": 1}, minors, False, False),
        ("h200 out of pci order", {"expected_pairs": 1}, swapped, True, False),
        # The four steps of a state-changing module's test, for a read-only one: nothing changes, ever.
        ("node-a check", {"expected_pairs": 1}, "node-a-2x5080.json", True, False),
        ("node-a apply", {"expected_pairs": 1}, "node-a-2x5080.json", False, False),
        ("node-a check again", {"expected_pairs": 1}, "node-a-2x5080.json", True, False),
        ("node-a apply again", {"expected_pairs": 1}, "node-a-2x5080.json", False, False),
        ("node-b", {"expected_pairs": 1}, "node-b-2x4070tis.json", False, False),
        ("node-b swapped to 4090", {"expected_pairs": 1}, "node-b-2x4090.json", False, False),
        ("h200 recorded", {"expected_pairs": 1}, "h200x2-2026-11-30.json", False, False),
        ("mixed allowed", {"allow_mixed": True}, "mixed-4070tis-5080.json", False, False),
        ("mixed guarded", {"expected_pairs": 1}, "mixed-4070tis-5080.json", False, True),
        ("three", {"group_size": 2}, "three-gpus.json", False, False),
        ("four", {"expected_pairs": 2}, "four-gpus-two-models.json", False, False),
        ("four exclude uuid", {"exclude": ["GPU-4090e000-0000-4000-8000-000000000004"]},
         "four-gpus-two-models.json", False, False),
        ("exclude typo", {"exclude": ["GPU-does-not-exist"]}, "node-a-2x5080.json", False, True),
        ("lost", {"group_size": 2}, "lost-gpu.json", True, True),
        ("old driver", {"group_size": 2}, old, False, True),
        ("old driver allowed", {"min_driver": {"blackwell": "0"}}, old, False, False),
        ("group size not an int", {"group_size": "two"}, "node-a-2x5080.json", False, True),
    ]


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_pairs")
    cases = [(name, args, FIXTURES / recording if "/" not in recording else recording, check, failing)
             for name, args, recording, check, failing in _cases(tmp)]
    return play_over_recordings(tmp, "gpu_pairs", cases)


def fact(record: dict) -> dict:
    return record["ansible_facts"]["pairserve_gpu"]


def test_read_only_four_steps_same_facts(played):
    steps = ["node-a check", "node-a apply", "node-a check again", "node-a apply again"]
    for step in steps:
        assert played[step]["_status"] == "ok", played[step]
        assert played[step]["changed"] is False
    facts = [fact(played[step]) for step in steps]
    assert all(item == facts[0] for item in facts)  # check mode returns the same facts
    pair = facts[0]["pairs"][0]
    assert facts[0]["source"] == f"replay:{FIXTURES / 'node-a-2x5080.json'}"
    assert pair["uuids"] == NODE_A_UUIDS
    assert pair["cuda_visible_devices"] == ",".join(NODE_A_UUIDS)
    assert (pair["fp4_path"], pair["link"], pair["idle_power_w"]) == ("native", "pcie", 21.6)
    assert "pair 0: NVIDIA GeForce RTX 5080 x2" in played["node-a apply"]["msg"]


def test_node_b_and_its_swap(played):
    node_b = fact(played["node-b"])["pairs"][0]
    assert (node_b["fp4_path"], node_b["compute_capability"], node_b["idle_power_w"]) == ("marlin", "8.9", 102.8)
    swapped = fact(played["node-b swapped to 4090"])["pairs"][0]
    assert swapped["memory_total_mib"] == 24564 and swapped["architecture"] == "ada"


def test_h200_recording_one_pair_p2p_ok_over_nvlink(played):
    """The recording made on the 2x H200 host replays to what the module printed there (docs/gpu-detection.md)."""
    gpu = fact(played["h200 recorded"])
    (pair,) = gpu["pairs"]
    assert (pair["link"], pair["p2p_read"]) == ("nvlink", "ok")
    assert gpu["links"][0]["p2p"]["nvlink"] == "ok"
    assert gpu["source"] == f"replay:{FIXTURES / 'h200x2-2026-11-30.json'}"
    assert pair["uuids"] == ["GPU-4be1d14f-3910-7df3-9c07-b1322aeae564", "GPU-6b33c5dd-0b40-c25d-1b71-183571bef5b5"]


def test_gpustack_indexes_are_nvml_indexes_and_cuda_ordinals_pci_ranks(played):
    """Every pair gets its GPUStack indexes (NVML's: the workers run with PHYSICAL_INDEX_PRIORITY=0) and the CUDA
    ordinals a privileged replica reads them as (PCI bus-id ranks); on the recorded hosts they are equal."""
    for name in ("node-a apply", "node-b", "h200 recorded", "mixed allowed", "three", "four"):
        for pair in fact(played[name])["pairs"]:
            assert pair["gpustack_gpu_indexes"] == pair["nvml_indices"] == pair["cuda_ordinals"], (name, pair)
        assert gpu_identity.order_problems(fact(played[name]), name) == []
    # Minor numbers out of order change nothing: they are reported, not pinned by.
    minors = fact(played["h200 minors out of order"])
    assert [g["minor_number"] for g in minors["gpus"]] == [1, 0]
    assert minors["pairs"][0]["gpustack_gpu_indexes"] == minors["pairs"][0]["cuda_ordinals"] == [0, 1]
    assert gpu_identity.order_problems(minors, "h200") == []


def test_nvml_out_of_pci_order_returns_both_lists_and_the_check_refuses(played):
    record = played["h200 out of pci order"]
    assert record["_status"] == "ok" and record["changed"] is False  # the module reports; preflight refuses
    (pair,) = fact(record)["pairs"]
    assert pair["bus_ids"] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert pair["uuids"] == ["GPU-6b33c5dd-0b40-c25d-1b71-183571bef5b5", "GPU-4be1d14f-3910-7df3-9c07-b1322aeae564"]
    assert pair["nvml_indices"] == pair["gpustack_gpu_indexes"] == [1, 0] and pair["cuda_ordinals"] == [0, 1]
    found = gpu_identity.order_problems(fact(record), "h200")
    assert [(p["uuid"], p["gpustack_index"], p["cuda_ordinal"]) for p in found] == [
        (pair["uuids"][0], 1, 0), (pair["uuids"][1], 0, 1)]
    assert "NVML/GPUStack order (index: UUID, bus id): 0 %s (00000000:00:07.0), 1 %s (00000000:00:06.0)" % (
        pair["uuids"][1], pair["uuids"][0]) in found[0]["text"]


def test_mixed_host_without_allow_mixed_leaves_both_with_reason(played):
    gpu = fact(played["mixed guarded"])
    assert gpu["pairs"] == []
    reasons = {item["uuid"]: item["reason"] for item in gpu["leftover"]}
    assert set(reasons) == {MIXED_4070, MIXED_5080}
    assert "allow_mixed" in reasons[MIXED_4070] and "NVIDIA GeForce RTX 5080" in reasons[MIXED_4070]


def test_mixed_host_pairs_pinned_by_uuid(played):
    (pair,) = fact(played["mixed allowed"])["pairs"]
    # NVML (PCI) order puts the slower 4070 Ti SUPER first; CUDA's default fastest-first order would not.
    assert pair["nvml_indices"] == pair["gpustack_gpu_indexes"] == pair["cuda_ordinals"] == [0, 1]
    assert pair["cuda_visible_devices"] == f"{MIXED_4070},{MIXED_5080}"
    assert pair["mixed"] is True
    assert (pair["compute_capability"], pair["fp4_path"], pair["memory_total_mib"]) == ("8.9", "marlin", 16303)


def test_expected_pairs_guard_says_what_changed(played):
    record = played["mixed guarded"]
    assert record["_status"] == "failed"
    msg = record["msg"]
    assert "expected_pairs is 1 but this host now forms 0" in msg
    assert "NVIDIA GeForce RTX 4070 Ti SUPER" in msg and "NVIDIA GeForce RTX 5080" in msg
    assert "hardware changed" in msg
    assert fact(record)["leftover"]  # the facts come along for diagnosis


def test_three_and_four_gpus(played):
    three = fact(played["three"])
    assert three["pairs"][0]["bus_ids"] == ["00000000:21:00.0", "00000000:41:00.0"]
    assert [item["bus_id"] for item in three["leftover"]] == ["00000000:01:00.0"]
    four = fact(played["four"])
    assert [p["name"] for p in four["pairs"]] == ["NVIDIA RTX A6000", "NVIDIA GeForce RTX 4090"]
    excluded = fact(played["four exclude uuid"])
    assert [p["name"] for p in excluded["pairs"]] == ["NVIDIA RTX A6000"]
    assert {item["reason"] for item in excluded["leftover"]} >= {"excluded by the exclude option"}


def test_bad_input_fails_with_the_input_named(played):
    assert played["exclude typo"]["_status"] == "failed"
    assert "exclude names GPU-does-not-exist" in played["exclude typo"]["msg"]
    assert "GPU-5080a000-0000-4000-8000-000000000001" in played["exclude typo"]["msg"]
    assert played["group size not an int"]["_status"] == "failed"
    assert "group_size" in played["group size not an int"]["msg"]


def test_lost_gpu_names_it_and_what_to_do(played):
    record = played["lost"]
    assert record["_status"] == "failed"
    assert "00000000:02:00.0" in record["msg"] and "GPU-5080f000-0000-4000-8000-000000000002" in record["msg"]
    assert "GpuIsLost" in record["msg"] and "Xid" in record["msg"] and "reseat" in record["msg"]


def test_too_old_driver(played):
    record = played["old driver"]
    assert record["_status"] == "failed"
    assert "driver 560.35.03 is too old for blackwell" in record["msg"] and ">= 570" in record["msg"]
    assert played["old driver allowed"]["_status"] == "ok"


def test_no_fake_meets_library_not_found():
    """No PAIRSERVE_NVML_REPLAY: the module meets this machine's real missing libnvidia-ml.so.1."""
    result = run_module("gpu_pairs", {"group_size": 2}, env={"PAIRSERVE_NVML_REPLAY": ""})
    assert result.failed
    assert "NVMLError_LibraryNotFound" in result["msg"]
    assert "install the NVIDIA driver" in result["msg"] and "PAIRSERVE_NVML_REPLAY" in result["msg"]
    assert "ansible_facts" not in result.result
