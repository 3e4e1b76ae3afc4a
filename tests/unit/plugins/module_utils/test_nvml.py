"""nvml.py and nvml_replay.py in-process: the real nvidia-ml-py over recorded hosts, and over no driver at all.

Each test that replays a recording goes through pynvml's own loading, ctypes conversion, struct decoding and
error mapping; only libnvidia-ml.so.1 is replaced. The module-level behaviour (through Ansible) is in
test_gpu_pairs.py.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import nvml, nvml_replay
from support.nvml_recordings import derived_recording, replaying, set_minor_numbers, swap_pci_location
from support.scripts import load

REPO = Path(__file__).resolve().parents[4]
FIXTURES = REPO / "tests" / "fixtures" / "nvml"
SHARED_RAW = FIXTURES / "h200x2-raw-2026-11.json"


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def gather(name: str, **options) -> dict:
    return nvml.gather({nvml_replay.ENV_VAR: fixture(name)}, **options)


@pytest.fixture()
def replay():
    """Install a recording (by its name in the fixtures) for raw pynvml calls."""
    with replaying() as install:
        yield lambda name: install(fixture(name))


# --- the fake at the ctypes boundary ------------------------------------------------------------------

def test_p2p_caps_tuple_bug_is_reproduced(replay):
    """nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ is `(0,)`; libffi cannot convert it, as on real hardware."""
    replay("h200x2-2026-11-30.json")
    assert pynvml.NVML_P2P_CAPS_INDEX_READ == (0,)
    first, second = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ctypes.ArgumentError, match="Don't know how to convert parameter 3"):
        pynvml.nvmlDeviceGetP2PStatus(first, second, pynvml.NVML_P2P_CAPS_INDEX_READ)
    # The int nvml.py passes gets the recorded answer (NVLink-connected H200s: P2P read OK).
    assert pynvml.nvmlDeviceGetP2PStatus(first, second, nvml.P2P_CAPS_INDEX["read"]) == pynvml.NVML_P2P_STATUS_OK


def test_replay_decodes_structs_and_maps_errors(replay):
    library = replay("node-a-2x5080.json")
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    assert (pci.busId, pci.bus, pci.pciDeviceId) == ("00000000:02:00.0", 2, 0x2C0210DE)
    assert pynvml.nvmlDeviceGetMemoryInfo(handle).total == 17094934528
    assert pynvml.nvmlDeviceGetCudaComputeCapability(handle) == (12, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNvLinkState(handle, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(2)
    # Symbols the recording layer does not provide surface as the binding's FunctionNotFound.
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetFanSpeed(handle)
    assert "nvmlDeviceGetPciInfo_v3" in library.calls


def test_replay_refuses_calls_before_init():
    nvml_replay.install(fixture("node-a-2x5080.json"))
    try:
        pynvml._LoadNvmlLibrary()  # pylint: disable=protected-access
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
    finally:
        nvml_replay.uninstall()


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    (json.dumps({"format": "something-else/9", "devices": []}), "expected 'pairserve-nvml-recording/1'"),
])
def test_bad_recording_is_named(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(nvml.GpuInventoryError, match=message) as info:
        nvml.gather({nvml_replay.ENV_VAR: str(path)})
    assert str(path) in str(info.value)


def test_missing_recording_is_named(tmp_path):
    with pytest.raises(nvml.GpuInventoryError, match="cannot read the recording"):
        nvml.gather({nvml_replay.ENV_VAR: str(tmp_path / "nope.json")})


# --- no fake at all ------------------------------------------------------------------------------------

def test_no_driver_here_is_the_real_library_not_found():
    """This machine has no NVIDIA driver: the real binding meets the real dlopen failure."""
    script = ("from ansible_collections.pairserve.llm.plugins.module_utils import nvml\n"
              "try:\n    nvml.gather({})\nexcept nvml.GpuInventoryError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(REPO / ".cache" / "collections"), "PATH": "/usr/bin:/bin"})
    assert "NVMLError_LibraryNotFound" in proc.stdout
    assert "install the NVIDIA driver" in proc.stdout
    assert "PAIRSERVE_NVML_REPLAY" in proc.stdout


def test_driver_not_loaded_says_what_to_do(tmp_path):
    path = derived_recording(FIXTURES / "node-a-2x5080.json", tmp_path / "no-module.json",
                             "nvmlInit fails with DriverNotLoaded.",
                             lambda data: data.update(init={"error": "DriverNotLoaded"}))
    with pytest.raises(nvml.GpuInventoryError, match="kernel driver is not loaded.*install the NVIDIA driver"):
        nvml.gather({nvml_replay.ENV_VAR: path})


# --- inventory and pairing --------------------------------------------------------------------------------

def test_h200_recording_one_nvlink_pair():
    fact = gather("h200x2-2026-11-30.json", expected_pairs=1)
    assert fact["source"] == "replay:" + fixture("h200x2-2026-11-30.json")
    assert fact["driver_version"] == "580.159.04" and fact["cuda_driver_version"] == "13.0"
    assert [g["nvlink_active_links"] for g in fact["gpus"]] == [18, 18]
    (pair,) = fact["pairs"]
    assert (pair["link"], pair["p2p_read"], pair["topology"]) == ("nvlink", "ok", "host_bridge")
    assert (pair["architecture"], pair["compute_capability"], pair["fp4_path"]) == ("hopper", "9.0", "marlin")
    assert pair["memory_total_mib"] == 143771


def test_converted_shared_recording_matches_conversion():
    """tests/fixtures/nvml/h200x2.json is exactly what the documented conversion makes of the raw file."""
    record_nvml = load(REPO / "tools" / "record_nvml.py", "record_nvml")
    converted = record_nvml.convert(json.loads(SHARED_RAW.read_text()))
    committed = json.loads((FIXTURES / "h200x2.json").read_text())
    assert {k: committed[k] for k in ("system", "devices", "pairs")} == converted
    # The raw READ answer was the binding's ArgumentError; the converted one is the int-0 answer.
    assert converted["pairs"]["0-1"]["P2PStatus"]["READ"] == 0
    assert gather("h200x2.json")["pairs"][0]["link"] == "nvlink"


def test_node_a_matches_the_seed():
    fact = gather("node-a-2x5080.json")
    (pair,) = fact["pairs"]
    assert pair["name"] == "NVIDIA GeForce RTX 5080" and not pair["mixed"]
    assert (pair["compute_capability"], pair["architecture"], pair["fp4_path"]) == ("12.0", "blackwell", "native")
    assert (pair["link"], pair["p2p_read"]) == ("pcie", "gpu_not_supported")
    assert pair["idle_power_w"] == 21.6
    assert pair["memory_total_mib"] == 16303
    assert [g["pcie_max_gen"] for g in fact["gpus"]] == [5, 5]  # max, not the Gen1 idle link
    assert [g["nvlink_active_links"] for g in fact["gpus"]] == [0, 0]
    assert [g["numa_node"] for g in fact["gpus"]] == [None, None]


def test_node_b_matches_the_seed():
    (pair,) = gather("node-b-2x4070tis.json")["pairs"]
    assert (pair["compute_capability"], pair["architecture"], pair["fp4_path"]) == ("8.9", "ada", "marlin")
    assert pair["idle_power_w"] == 102.8


def test_swapped_node_b_has_24_gib_cards():
    (pair,) = gather("node-b-2x4090.json")["pairs"]
    assert pair["name"] == "NVIDIA GeForce RTX 4090" and pair["memory_total_mib"] == 24564


def test_three_gpus_pairs_the_nvlink_bridge_and_leaves_one():
    fact = gather("three-gpus.json")
    (pair,) = fact["pairs"]
    # Best link first: the bridged 21/41 pair wins over the lower bus ids 01/21.
    assert pair["bus_ids"] == ["00000000:21:00.0", "00000000:41:00.0"]
    assert pair["link"] == "nvlink"
    (left,) = fact["leftover"]
    assert left["bus_id"] == "00000000:01:00.0" and "no partner" in left["reason"]


def test_four_gpus_pair_by_model_not_by_bus_adjacency():
    fact = gather("four-gpus-two-models.json", expected_pairs=2)
    first, second = fact["pairs"]
    assert first["name"] == "NVIDIA RTX A6000" and first["bus_ids"] == ["00000000:01:00.0", "00000000:41:00.0"]
    assert (first["link"], first["topology"]) == ("p2p", "single_switch")
    assert second["name"] == "NVIDIA GeForce RTX 4090" and second["nvml_indices"] == [1, 3]
    assert second["gpustack_gpu_indexes"] == [1, 3]
    assert fact["leftover"] == []


def test_gpustack_indexes_are_the_nvml_indexes_whatever_the_minor_numbers(tmp_path):
    """The collection's workers run with GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0, so GPUStack numbers a GPU
    by its NVML index: minor numbers (/dev/nvidia<N>) out of order change no pin, and are still reported."""
    path = derived_recording(FIXTURES / "four-gpus-two-models.json", tmp_path / "minors.json",
                             "minor numbers 2, 0, 3, 1.", lambda data: set_minor_numbers(data, (2, 0, 3, 1)))
    fact = nvml.gather({nvml_replay.ENV_VAR: path}, expected_pairs=2)
    assert [g["minor_number"] for g in fact["gpus"]] == [2, 0, 3, 1]
    second = fact["pairs"][1]
    assert second["nvml_indices"] == second["gpustack_gpu_indexes"] == second["cuda_ordinals"] == [1, 3]
    # Without a minor number (NVML refuses it) nothing changes either.
    path = derived_recording(FIXTURES / "four-gpus-two-models.json", tmp_path / "no-minors.json", "no minor numbers.",
                             lambda data: set_minor_numbers(data, [{"error": "NotSupported", "code": 3}] * 4))
    fact = nvml.gather({nvml_replay.ENV_VAR: path}, expected_pairs=2)
    assert [g["minor_number"] for g in fact["gpus"]] == [None] * 4
    assert fact["pairs"][1]["gpustack_gpu_indexes"] == fact["pairs"][1]["cuda_ordinals"] == [1, 3]


def test_cuda_ordinals_are_the_pci_ranks_among_all_gpus(tmp_path):
    """NVML enumerating out of PCI bus-id order: the GPUStack index stays NVML's, the CUDA ordinal is the PCI rank
    among all the host's GPUs (pairs or not), so the two lists differ exactly for the cards out of order."""
    path = derived_recording(FIXTURES / "four-gpus-two-models.json", tmp_path / "out-of-order.json",
                             "NVML devices 1 and 2 swapped on the bus.", lambda data: swap_pci_location(data, 1, 2))
    fact = nvml.gather({nvml_replay.ENV_VAR: path}, expected_pairs=2)
    assert [g["bus_id"][9:11] for g in fact["gpus"]] == ["01", "41", "21", "61"]
    a6000, rtx4090 = fact["pairs"]
    assert a6000["name"] == "NVIDIA RTX A6000" and a6000["bus_ids"] == ["00000000:01:00.0", "00000000:21:00.0"]
    assert a6000["gpustack_gpu_indexes"] == [0, 2] and a6000["cuda_ordinals"] == [0, 1]
    assert rtx4090["gpustack_gpu_indexes"] == [1, 3] and rtx4090["cuda_ordinals"] == [2, 3]


def test_cuda_ordinals_rule():
    """PCI order is numeric over (domain, bus, device, function), whatever the spelling; a MIG-enabled card takes
    no ordinal; with a counted GPU of unknown bus id no ordinal can be told."""
    gpus = [{"bus_id": "00000001:01:00.0"}, {"bus_id": "0000:a0:00.0"}, {"bus_id": "00000000:0B:00.1"},
            {"bus_id": "00000000:0b:00.0"}, {"bus_id": "00000000:09:00.0", "mig_enabled": True}]
    assert nvml.cuda_ordinals(gpus) == {"00000000:0B:00.0": 0, "00000000:0B:00.1": 1, "00000000:A0:00.0": 2,
                                        "00000001:01:00.0": 3}
    assert nvml.cuda_ordinals(gpus + [{"bus_id": None}]) == {}
    assert nvml.cuda_ordinals(gpus + [{"bus_id": None, "mig_enabled": True}]) == nvml.cuda_ordinals(gpus)
    assert nvml.gpustack_index({"index": 3, "minor_number": 0}) == 3
    with pytest.raises(ValueError, match="no PCI bus id"):
        nvml.pci_sort_key("slot 3")


def test_mig_enabled_gpu_is_left_out_with_the_reason(tmp_path):
    """A MIG-enabled card is not one GPU: it is left out of the pairs, and expected_pairs then says so."""
    recording = json.loads(Path(fixture("h200x2.json")).read_text())
    recording["devices"][1]["MigMode"] = [1, 1]
    recording["devices"][0]["MigMode"] = [0, 0]
    path = tmp_path / "mig.json"
    path.write_text(json.dumps(recording))
    fact = nvml.gather({nvml_replay.ENV_VAR: str(path)})
    assert fact["pairs"] == []
    migged = [left for left in fact["leftover"] if "MIG mode is enabled" in left["reason"]]
    assert [left["uuid"] for left in migged] == [recording["devices"][1]["UUID"]], fact["leftover"]
    with pytest.raises(nvml.GpuInventoryError, match="MIG mode is enabled"):
        nvml.gather({nvml_replay.ENV_VAR: str(path)}, expected_pairs=1)
    # Recorded as not supported (GeForce) or disabled: paired as before.
    recording["devices"][1]["MigMode"] = {"error": "NotSupported", "code": 3}
    path.write_text(json.dumps(recording))
    assert len(nvml.gather({nvml_replay.ENV_VAR: str(path)}, expected_pairs=1)["pairs"]) == 1


def test_exclude_by_bus_id_in_any_spelling():
    fact = gather("four-gpus-two-models.json", exclude=["0000:21:00.0"])
    assert [p["name"] for p in fact["pairs"]] == ["NVIDIA RTX A6000"]
    reasons = {item["bus_id"]: item["reason"] for item in fact["leftover"]}
    assert reasons["00000000:21:00.0"] == "excluded by the exclude option"
    assert "no partner of the same model" in reasons["00000000:61:00.0"]


def test_group_size_one_and_four():
    assert len(gather("four-gpus-two-models.json", group_size=1)["pairs"]) == 4
    mixed = gather("four-gpus-two-models.json", group_size=4, allow_mixed=True)
    (group,) = mixed["pairs"]
    assert group["mixed"] and group["memory_total_mib"] == 24564 and group["link"] == "pcie"
    with pytest.raises(nvml.GpuInventoryError, match="group_size is 0"):
        gather("node-a-2x5080.json", group_size=0)


def test_normalise_bus_id():
    assert nvml.normalise_bus_id("0000:0a:00.0") == "00000000:0A:00.0"
    assert nvml.normalise_bus_id("01:00.0") == "00000000:01:00.0"
    assert nvml.normalise_bus_id("00000000:41:00.0") == "00000000:41:00.0"


@pytest.mark.parametrize("cc, path", [((12, 0), "native"), ((10, 0), "native"), ((9, 0), "marlin"),
                                      ((8, 9), "marlin"), ((8, 0), "marlin"), ((7, 5), "unsupported")])
def test_fp4_path(cc, path):
    assert nvml.fp4_path(*cc) == path


def test_lost_gpu_is_named_by_bus_id_and_uuid():
    with pytest.raises(nvml.GpuInventoryError) as info:
        gather("lost-gpu.json")
    message = str(info.value)
    assert "GPU 00000000:02:00.0 (GPU-5080f000-0000-4000-8000-000000000002) answers NVML with GpuIsLost" in message
    assert "dmesg" in message and "reseat" in message and "exclude" in message


def test_lost_gpu_without_even_a_handle_is_named_by_index(tmp_path):
    data = json.loads((FIXTURES / "lost-gpu.json").read_text())
    data["devices"][1]["HandleFails"] = True
    path = tmp_path / "lost-no-handle.json"
    path.write_text(json.dumps(data))
    with pytest.raises(nvml.GpuInventoryError, match="GPU NVML index 1 \\(UUID unreadable\\) answers NVML with GpuIsLost"):
        nvml.gather({nvml_replay.ENV_VAR: str(path)})
