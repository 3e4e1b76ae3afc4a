"""plugins/module_utils/nvml_replay.py: a recording replayed under the real nvidia-ml-py at the ctypes boundary.

Small recordings written here pin each answer rule of the stand-in library: the recording checks of `load`, the error
names taken from the binding, a host without a driver, the system strings and the CUDA version fallback, a lost GPU
(UUID still answered from the driver's cache), answers the recording lacks (Unknown, never success), buffer sizes,
NVLink links, P2P pairs in either order, CPU affinity words, and the power series (cycle, hold, errors, the energy
counter). nvml.py's inventory over the repository's recordings is tested in test_nvml.py.
"""

from __future__ import annotations

import ctypes
import json

import pynvml
import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import nvml_replay
from support.nvml_recordings import replaying

NOT_SUPPORTED = {"error": "NotSupported"}


def device(index: int, **answers) -> dict:
    base = {"Name": "NVIDIA GeForce RTX 5080", "UUID": "GPU-test-%d" % index, "Index": index,
            "PciInfo": {"busId": "00000000:0%d:00.0" % (index + 1)}, "PowerUsage": 10000 + index}
    base.update(answers)
    return base


def write(tmp_path, devices, **top) -> str:
    system = {"DriverVersion": "580.95.05", "NVMLVersion": "13.580.95.05", "CudaDriverVersion": 13000}
    recording = {"format": nvml_replay.FORMAT, "system": system, "devices": devices}
    recording.update(top)
    path = tmp_path / "recording.json"
    path.write_text(json.dumps(recording))
    return str(path)


def error(name: str):
    """The binding's exception class for an NVML error name (nvidia-ml-py makes them when it is imported)."""
    return getattr(pynvml, "NVMLError_" + name)


@pytest.fixture(name="replay")
def replay_fixture():
    with replaying() as install:
        yield install


@pytest.mark.parametrize("data, message", [
    ([1, 2], "format is 'list', expected 'pairserve-nvml-recording/1'"),
    ({"devices": []}, "format is None, expected"),
    ({"format": nvml_replay.FORMAT, "devices": {}}, "'devices' must be a list and 'system' an object"),
    ({"format": nvml_replay.FORMAT, "devices": [], "system": []}, "'devices' must be a list and 'system' an object"),
])
def test_load_refuses_what_is_not_a_recording_naming_the_variable_and_file(tmp_path, data, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(nvml_replay.RecordingError) as info:
        nvml_replay.load(str(path))
    assert message in str(info.value)
    assert str(info.value).startswith("PAIRSERVE_NVML_REPLAY=%s: " % path)


def test_load_returns_the_recording_and_system_may_be_left_out(tmp_path):
    path = tmp_path / "minimal.json"
    path.write_text(json.dumps({"format": nvml_replay.FORMAT, "devices": []}))
    assert nvml_replay.load(str(path)) == {"format": nvml_replay.FORMAT, "devices": []}


def test_error_codes_are_the_bindings_own():
    codes = nvml_replay.error_codes()
    assert codes["NotSupported"] == pynvml.NVML_ERROR_NOT_SUPPORTED == 3
    assert codes["GpuIsLost"] == pynvml.NVML_ERROR_GPU_IS_LOST == 15
    assert codes["DriverNotLoaded"] == pynvml.NVML_ERROR_DRIVER_NOT_LOADED


def test_a_host_without_a_driver_fails_to_load_the_library(tmp_path, replay):
    path = write(tmp_path, [], library={"error": "LibraryNotFound"})
    with pytest.raises(error("LibraryNotFound")):
        replay(path)


def test_system_answers_and_the_v2_cuda_version_falls_back_to_the_plain_one(tmp_path, replay):
    library = replay(write(tmp_path, [device(0)]))
    assert pynvml.nvmlSystemGetDriverVersion() == "580.95.05"
    assert pynvml.nvmlSystemGetNVMLVersion() == "13.580.95.05"
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 13000
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 13000
    assert pynvml.nvmlDeviceGetCount() == 1
    assert library.calls[:2] == ["nvmlInitWithFlags", "nvmlSystemGetDriverVersion"]


def test_a_lost_gpu_still_answers_uuid_and_bus_id_but_nothing_else(tmp_path, replay):
    lost = device(1, Handle={"error": "GpuIsLost"})
    replay(write(tmp_path, [device(0), lost]))
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetUUID(handle) == "GPU-test-1"
    assert pynvml.nvmlDeviceGetPciInfo(handle).busId == "00000000:02:00.0"
    with pytest.raises(error("GpuIsLost")):
        pynvml.nvmlDeviceGetName(handle)
    with pytest.raises(error("GpuIsLost")):
        pynvml.nvmlDeviceGetPowerUsage(handle)
    assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) == "NVIDIA GeForce RTX 5080"


def test_a_gpu_lost_before_nvml_started_refuses_even_a_handle(tmp_path, replay):
    replay(write(tmp_path, [device(0, Handle={"error": "GpuIsLost"}, HandleFails=True)]))
    with pytest.raises(error("GpuIsLost")):
        pynvml.nvmlDeviceGetHandleByIndex(0)


def test_an_answer_the_recording_lacks_is_unknown_and_a_long_name_does_not_fit(tmp_path, replay):
    replay(write(tmp_path, [device(0, Name="N" * pynvml.NVML_DEVICE_NAME_V2_BUFFER_SIZE)]))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(error("Unknown")):
        pynvml.nvmlDeviceGetMemoryInfo(handle)  # no MemoryInfo recorded: never a zeroed success
    with pytest.raises(error("InsufficientSize")):
        pynvml.nvmlDeviceGetName(handle)


def test_nvlink_states_per_link_and_cpu_affinity_padded_with_zeros(tmp_path, replay):
    replay(write(tmp_path, [device(0, NvLinkState=[1, 0, NOT_SUPPORTED], CpuAffinity=[0xFF])]))
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert [pynvml.nvmlDeviceGetNvLinkState(handle, link) for link in (0, 1)] == [1, 0]
    with pytest.raises(error("NotSupported")):
        pynvml.nvmlDeviceGetNvLinkState(handle, 2)
    with pytest.raises(error("InvalidArgument")):
        pynvml.nvmlDeviceGetNvLinkState(handle, 3)
    assert list(pynvml.nvmlDeviceGetCpuAffinity(handle, 3)) == [255, 0, 0]


def test_a_pair_is_answered_in_either_order_and_a_p2p_index_past_prop_is_invalid(tmp_path, replay):
    caps = {"READ": 0, "WRITE": 2, "NVLINK": 5, "ATOMICS": NOT_SUPPORTED, "PROP": 0}
    replay(write(tmp_path, [device(0), device(1)], pairs={"0-1": {"TopologyCommonAncestor": 30, "P2PStatus": caps}}))
    first, second = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(second, first) == 30
    assert [pynvml.nvmlDeviceGetP2PStatus(second, first, i) for i in (0, 1, 2)] == [0, 2, 5]
    with pytest.raises(error("NotSupported")):
        pynvml.nvmlDeviceGetP2PStatus(first, second, 3)
    with pytest.raises(error("InvalidArgument")):
        pynvml.nvmlDeviceGetP2PStatus(first, second, len(nvml_replay.P2P_CAPS))


def test_power_series_cycle_by_default_and_hold_per_device_with_errors_in_order(tmp_path, replay):
    series = [100, NOT_SUPPORTED, 300]
    library = replay(write(tmp_path, [device(0, PowerUsageSeries=series),
                                      device(1, PowerUsageSeries=series, PowerSeriesMode="hold")]))
    answers = {}
    for index in (0, 1):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        got = []
        for _turn in range(5):
            try:
                got.append(pynvml.nvmlDeviceGetPowerUsage(handle))
            except pynvml.NVMLError as exc:
                got.append(type(exc).__name__)
        answers[index] = got
    refused = "NVMLError_NotSupported"
    assert answers == {0: [100, refused, 300, 100, refused], 1: [100, refused, 300, 300, 300]}
    assert library.series_position(0) == library.series_position(1) == 5
    assert library.series_position(0, "TotalEnergyConsumption") == 0


def test_the_energy_counter_never_runs_backwards_past_its_recording(tmp_path, replay):
    replay(write(tmp_path, [device(0, TotalEnergyConsumptionSeries=[1000, 1010, 1030]),
                            device(1, TotalEnergyConsumptionSeries=[5000])]))
    grown, flat = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    # past the end the recorded increments (+10, +20) go on being added in order
    assert [pynvml.nvmlDeviceGetTotalEnergyConsumption(grown) for _turn in range(7)] == [
        1000, 1010, 1030, 1040, 1060, 1070, 1090]
    assert [pynvml.nvmlDeviceGetTotalEnergyConsumption(flat) for _turn in range(3)] == [5000, 5000, 5000]


@pytest.mark.parametrize("changes, message", [
    ({"PowerSeriesMode": "loop"}, "power series mode 'loop' is not one of cycle, hold"),
    ({"PowerUsageSeries": 100}, "device 0: PowerUsageSeries must be a non-empty list"),
    ({"TotalEnergyConsumptionSeries": []}, "device 0: TotalEnergyConsumptionSeries must be a non-empty list"),
])
def test_a_bad_power_series_is_refused_when_installed(tmp_path, changes, message):
    path = write(tmp_path, [device(0, **changes)])
    try:
        with pytest.raises(nvml_replay.RecordingError, match=message):
            nvml_replay.install(path)
    finally:
        nvml_replay.uninstall()


@pytest.mark.parametrize("where", ["device", "init", "series"])
def test_an_unknown_error_name_is_named_when_installed_not_answered_as_unknown(tmp_path, where):
    if where == "device":
        path = write(tmp_path, [device(0, Name={"error": "Bogus"})])
    elif where == "init":
        path = write(tmp_path, [device(0)], init={"error": "Bogus"})
    else:
        path = write(tmp_path, [device(0, PowerUsageSeries=[100, {"error": "Bogus"}])])
    try:
        with pytest.raises(nvml_replay.RecordingError, match="recording.json: unknown NVML error name 'Bogus'"):
            nvml_replay.install(path)
    finally:
        nvml_replay.uninstall()


def test_uninstall_gives_the_binding_its_real_cdll_back(tmp_path):
    library = nvml_replay.install(write(tmp_path, [device(0)]))
    assert pynvml.CDLL == library.open  # pylint: disable=comparison-with-callable
    nvml_replay.uninstall()
    assert pynvml.CDLL is ctypes.CDLL and pynvml.nvmlLib is None
