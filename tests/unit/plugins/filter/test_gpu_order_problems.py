"""The GPU order check: each GPU of a pair must have its GPUStack index (the NVML index, with the collection's
GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0) as its CUDA ordinal inside the replica (its rank in PCI bus-id
order among all the host's GPUs: GPUStack's replicas run privileged with every GPU and CUDA_DEVICE_ORDER=PCI_BUS_ID).

The facts come from gpu_pairs' own code over the recorded hosts (tests/fixtures/nvml/), and over recordings derived
from them: minor numbers out of order (must pass), cards swapped on the bus so that NVML enumerates them out of PCI
order (must be refused, naming both orders), a MIG-enabled card, a GPU without a bus id.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.filter.gpu_identity import FilterModule
from ansible_collections.pairserve.llm.plugins.module_utils import gpu_identity, nvml, nvml_replay
from support.ansible_runner import run_local_play
from support.nvml_recordings import derived_recording, four_h200_minors, swap_pci_location

REPO = Path(__file__).resolve().parents[4]
NVML = REPO / "tests" / "fixtures" / "nvml"
GPU_TASKS = REPO / "roles" / "preflight" / "tasks" / "gpu.yml"
ORDER_TASK = "Check that the pairs' GPUStack indexes are their CUDA ordinals in the replicas"
H200_A, H200_B = "GPU-4be1d14f-3910-7df3-9c07-b1322aeae564", "GPU-6b33c5dd-0b40-c25d-1b71-183571bef5b5"


def gather(path, **options) -> dict:
    return nvml.gather({nvml_replay.ENV_VAR: str(path)}, **options)


def h200_swapped(tmp_path) -> str:
    """The real 2x H200 recording with its two cards swapped on the bus: NVML index 0 is bus 07, index 1 bus 06."""
    return derived_recording(NVML / "h200x2-2026-11-30.json", tmp_path / "h200x2-out-of-pci-order.json",
                             "the two devices' PCI locations swapped (NVML order is not PCI order).",
                             lambda data: swap_pci_location(data, 0, 1))


def four_h200_last_two_swapped(tmp_path) -> str:
    """Four H200s in PCI order but for NVML devices 2 and 3, which sit on each other's bus."""
    source = four_h200_minors(tmp_path)
    return derived_recording(source, tmp_path / "four-h200-2-3-swapped.json", "devices 2 and 3 swapped on the bus.",
                             lambda data: swap_pci_location(data, 2, 3))


# --- pass cases ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("recording, options", [
    ("node-a-2x5080.json", {"expected_pairs": 1}), ("node-b-2x4070tis.json", {"expected_pairs": 1}),
    ("node-b-2x4090.json", {"expected_pairs": 1}), ("h200x2-2026-11-30.json", {"expected_pairs": 1}),
    ("h200x2.json", {"expected_pairs": 1}), ("mixed-4070tis-5080.json", {"allow_mixed": True}),
    ("three-gpus.json", {}), ("four-gpus-two-models.json", {"expected_pairs": 2}),
    ("h200-recording-2026-12-01.json", {"group_size": 1, "expected_pairs": 1}),
])
def test_every_recorded_host_passes(recording, options):
    fact = gather(NVML / recording, **options)
    for pair in fact["pairs"]:
        assert pair["cuda_ordinals"] == pair["gpustack_gpu_indexes"] == pair["nvml_indices"], pair
    assert gpu_identity.order_problems(fact, "host") == []


def test_minor_numbers_out_of_pci_order_pass_and_pin_by_nvml_index(tmp_path):
    """Minor numbers 2, 0, 3, 1 (what GPUStack would number by without PHYSICAL_INDEX_PRIORITY=0) do not matter."""
    fact = gather(four_h200_minors(tmp_path), expected_pairs=2)
    assert [g["minor_number"] for g in fact["gpus"]] == [2, 0, 3, 1]
    assert [p["gpustack_gpu_indexes"] for p in fact["pairs"]] == [[0, 1], [2, 3]]
    assert [p["cuda_ordinals"] for p in fact["pairs"]] == [[0, 1], [2, 3]]
    assert gpu_identity.order_problems(fact, "h200x4") == []


def test_a_mig_enabled_card_last_in_pci_order_changes_no_ordinal(tmp_path):
    def change(data):
        data["devices"][3]["MigMode"] = [1, 1]
    path = derived_recording(four_h200_minors(tmp_path), tmp_path / "mig-last.json", "device 3 MIG-enabled.", change)
    fact = gather(path)
    (pair,) = fact["pairs"]
    assert pair["gpustack_gpu_indexes"] == pair["cuda_ordinals"] == [0, 1]
    assert gpu_identity.order_problems(fact, "h200x4") == []


# --- refused cases ---------------------------------------------------------------------------------------------

def test_nvml_out_of_pci_order_is_refused_naming_both_orders(tmp_path):
    fact = gather(h200_swapped(tmp_path), expected_pairs=1)
    (pair,) = fact["pairs"]
    # The pair is ordered by bus id: bus 06 (NVML 1) first.
    assert pair["uuids"] == [H200_B, H200_A] and pair["bus_ids"] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert pair["gpustack_gpu_indexes"] == [1, 0] and pair["cuda_ordinals"] == [0, 1]
    found = gpu_identity.order_problems(fact, "h200x2")
    assert [(p["uuid"], p["pair"], p["gpustack_index"], p["cuda_ordinal"]) for p in found] == [
        (H200_B, 0, 1, 0), (H200_A, 0, 0, 1)], found
    nvml_order = ("NVML/GPUStack order (index: UUID, bus id): 0 %s (00000000:00:07.0), 1 %s (00000000:00:06.0)"
                  % (H200_A, H200_B))
    pci_order = ("PCI/CUDA order (CUDA ordinal under CUDA_DEVICE_ORDER=PCI_BUS_ID: UUID, bus id): "
                 "0 %s (00000000:00:06.0), 1 %s (00000000:00:07.0)" % (H200_B, H200_A))
    for problem in found:
        text = problem["text"]
        assert problem["host"] == "h200x2" and text.startswith("h200x2: GPU %s (NVIDIA H200, bus " % problem["uuid"])
        assert nvml_order in text and pci_order in text, text
        assert "GPUStack index %d" % problem["gpustack_index"] in text
        assert "CUDA ordinal %d in the replica" % problem["cuda_ordinal"] in text
        assert "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0" in text and "privileged" in text
        assert "out of PCI bus order" in text and "nvidia-smi -q | grep -E 'Bus Id|Minor'" in text
        assert "pairserve_gpu_exclude" in text and "Register no replica" in text
        assert "MIG" not in text
    # Which card the pin really gives.
    assert "reads index 1 as the card of PCI rank 1, GPU %s (NVIDIA H200, bus 00000000:00:07.0)" % H200_A in found[0]["text"]


def test_only_the_cards_out_of_order_are_named_and_excluding_them_passes(tmp_path):
    path = four_h200_last_two_swapped(tmp_path)
    fact = gather(path, expected_pairs=2)
    first, second = fact["pairs"]
    assert first["gpustack_gpu_indexes"] == first["cuda_ordinals"] == [0, 1]
    assert second["gpustack_gpu_indexes"] == [3, 2] and second["cuda_ordinals"] == [2, 3]
    found = gpu_identity.order_problems(fact, "h200x4")
    assert [(p["pair"], p["gpustack_index"], p["cuda_ordinal"]) for p in found] == [(1, 3, 2), (1, 2, 3)]
    assert {p["uuid"] for p in found} == set(second["uuids"])
    # The way out the text gives: exclude the two cards. The others keep their numbers and pass.
    kept = gather(path, expected_pairs=1, exclude=second["uuids"])
    assert kept["pairs"][0]["uuids"] == first["uuids"] and gpu_identity.order_problems(kept, "h200x4") == []


def test_a_mig_enabled_card_first_in_pci_order_is_refused_naming_it(tmp_path):
    """CUDA does not count a MIG-enabled card as one device, NVML does: the ordinals after it shift."""
    def change(data):
        data["devices"][0]["MigMode"] = [1, 1]
    path = derived_recording(four_h200_minors(tmp_path), tmp_path / "mig-first.json", "device 0 MIG-enabled.", change)
    fact = gather(path)
    (pair,) = fact["pairs"]
    assert pair["gpustack_gpu_indexes"] == [1, 2] and pair["cuda_ordinals"] == [0, 1]
    found = gpu_identity.order_problems(fact, "h200x4")
    assert [(p["gpustack_index"], p["cuda_ordinal"]) for p in found] == [(1, 0), (2, 1)]
    mig_uuid = fact["gpus"][0]["uuid"]
    for problem in found:
        assert "MIG-enabled, so no CUDA ordinal: %s (NVIDIA H200, bus 00000000:00:06.0)" % mig_uuid in problem["text"]
        assert "comes before this one in PCI order (%s (NVIDIA H200, bus 00000000:00:06.0); disable MIG on it: " \
            "`nvidia-smi -i <index> -mig 0`" % mig_uuid in problem["text"]


def test_a_gpu_without_a_bus_id_leaves_the_order_unknown():
    fact = gather(NVML / "node-a-2x5080.json", expected_pairs=1)
    broken = copy.deepcopy(fact)
    broken["gpus"][1]["bus_id"] = None
    found = gpu_identity.order_problems(broken, "node-a")
    assert [(p["gpustack_index"], p["cuda_ordinal"]) for p in found] == [(0, None), (1, None)]
    assert "NVML gave no PCI bus id for GPU-5080a000-0000-4000-8000-000000000002" in found[0]["text"]
    assert "CUDA ordinal unknown" in found[0]["text"] and "Register no replica" in found[0]["text"]
    # A fact without the host's GPUs cannot pass either.
    found = gpu_identity.order_problems({"pairs": fact["pairs"]}, "node-a")
    assert len(found) == 2 and "lists none of the host's GPUs" in found[0]["text"]


# --- the filter, and the preflight task through real Ansible -----------------------------------------------------

def test_the_filter_checks_its_input():
    order = FilterModule().filters()["gpu_order_problems"]
    assert order(gather(NVML / "node-a-2x5080.json"), "node-a") == []
    with pytest.raises(AnsibleFilterError, match="expected the pairserve_gpu fact"):
        order([], "node-a")
    with pytest.raises(AnsibleFilterError, match="gpu_order_problems: .*no PCI bus id"):
        order({"gpus": [{"bus_id": "slot 3"}], "pairs": []}, "node-a")


def order_task() -> dict:
    """The preflight role's task itself, as roles/preflight/tasks/gpu.yml has it."""
    (task,) = [t for t in yaml.safe_load(GPU_TASKS.read_text()) if t.get("name") == ORDER_TASK]
    return task


def test_the_preflight_task_passes_and_refuses(tmp_path):
    good = gather(NVML / "node-a-2x5080.json", expected_pairs=1)
    bad = gather(h200_swapped(tmp_path), expected_pairs=1)
    task = order_task()
    tasks = [dict(task, vars=dict(task["vars"], pairserve_gpu=good)),
             {"name": "Out of order", "block": [dict(task, vars=dict(task["vars"], pairserve_gpu=bad))],
              "rescue": [{"name": "Report", "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"}}]}]
    result = run_local_play(tmp_path, "GPU order", tasks)
    assert result.rc == 0, result.stdout + result.stderr
    checks = [r for r in result.results if r["_task"] == ORDER_TASK]
    assert [r["_status"] for r in checks] == ["ok", "failed"], checks
    assert not any(r.get("changed") for r in result.results)
    (report,) = [r for r in result.results if r["_task"] == "Report"]
    msg = report["msg"]
    assert msg.startswith("GPUStack's GPU indexes and CUDA's order inside the replicas disagree on localhost (2 GPU(s)")
    assert "localhost: GPU %s" % H200_B in msg and "localhost: GPU %s" % H200_A in msg
    assert "NVML/GPUStack order" in msg and "PCI/CUDA order" in msg


def test_the_gpu_entry_point_refuses_before_its_other_checks(tmp_path):
    """The role's gpu entry point stops at the order check, before the driver and runtime checks run."""
    bad = gather(h200_swapped(tmp_path), expected_pairs=1)
    result = run_local_play(tmp_path, "Preflight gpu", [
        {"name": "Preflight", "ansible.builtin.include_role": {"name": "pairserve.llm.preflight", "tasks_from": "gpu"}}],
        {"pairserve_gpu": json.loads(json.dumps(bad))})
    assert result.rc != 0
    ran = [r["_task"] for r in result.results if r["_task"] != "Preflight" and not r["_task"].startswith("Validating")]
    assert ran == ["Check that the GPU inventory ran", ORDER_TASK], ran
    assert result.results[-1]["_status"] == "failed" and H200_A in result.results[-1]["msg"]
