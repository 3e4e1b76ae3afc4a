"""Recorded NVML hosts the tests build from the real ones (tests/fixtures/nvml/), in the recording's own format,
the replay of one for raw pynvml calls, and a module's cases over recordings as the tasks of one playbook."""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path

import pynvml
import yaml

from ansible_collections.pairserve.llm.plugins.module_utils import nvml_replay
from support.ansible_runner import run_playbook

NVML = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
H200_RECORDING = NVML / "h200-recording-2026-12-01.json"
FOUR_H200_MINORS = (2, 0, 3, 1)


# The PciInfo fields that say where a card sits on the bus (not what it is).
PCI_LOCATION = ("busId", "busIdLegacy", "domain", "bus", "device")


def four_h200_minors(directory: Path) -> Path:
    """Four copies of the real H200 whose minor numbers (2, 0, 3, 1) are not their NVML order, which is their PCI
    order: gpustack-runtime numbers GPUs by minor number unless GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0
    (the collection's worker environment), so every card would be another under the wrong rule."""
    recording = json.loads(H200_RECORDING.read_text())
    base = recording["devices"][0]
    devices = []
    for i, minor in enumerate(FOUR_H200_MINORS):
        dev = copy.deepcopy(base)
        dev["UUID"] = "GPU-16b0d5eb-0000-4000-8000-00000000000%d" % i
        dev["Index"], dev["MinorNumber"] = i, minor
        bus = "%02x" % (6 + i)
        dev["PciInfo"].update(busId="00000000:00:%s.0" % bus, busIdLegacy="0000:00:%s.0" % bus, device=6 + i)
        devices.append(dev)
    recording["devices"] = devices
    recording["pairs"] = {"%d-%d" % (i, j): {"TopologyCommonAncestor": 30, "P2PStatus": {
        "READ": 0, "WRITE": 0, "NVLINK": 0, "ATOMICS": 0, "PROP": 0}} for i in range(4) for j in range(4) if i != j}
    path = directory / "four-h200-minors.json"
    path.write_text(json.dumps(recording))
    return path


def swap_pci_location(recording: dict, first: int, second: int) -> dict:
    """Swap where NVML devices `first` and `second` sit on the bus: NVML then enumerates them out of PCI bus-id
    order (what a host whose firmware or driver probes the cards in another order shows). Returns the recording."""
    one, other = recording["devices"][first]["PciInfo"], recording["devices"][second]["PciInfo"]
    for key in PCI_LOCATION:
        one[key], other[key] = other[key], one[key]
    return recording


def set_minor_numbers(recording: dict, minors) -> dict:
    """Give the devices, in NVML order, the minor numbers `minors` (/dev/nvidia<N>). Returns the recording."""
    for dev, minor in zip(recording["devices"], minors):
        dev["MinorNumber"] = minor
    return recording


def derived_recording(source: Path, target: Path, note: str, change) -> str:
    """A copy of the recording `source` at `target`, changed in place by `change(recording)`; its provenance
    says so (`note`: what the test changed)."""
    recording = json.loads(source.read_text())
    recording["provenance"] += " Derived by the test: " + note
    change(recording)
    target.write_text(json.dumps(recording))
    return str(target)


@contextlib.contextmanager
def replaying():
    """Gives `install(path)`: the recording at `path` replaces libnvidia-ml.so.1 for raw pynvml calls and NVML is
    initialised (returns the replay's library). The binding always gets its real CDLL back."""
    def install(path):
        library = nvml_replay.install(str(path))
        pynvml.nvmlInit()
        return library
    try:
        yield install
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        nvml_replay.uninstall()


def play_over_recordings(directory: Path, module: str, cases: list) -> dict:
    """Each case (task name, module args, recording path, check mode, expect failure) as a task of one playbook
    (one ansible-playbook process) with PAIRSERVE_NVML_REPLAY set to its recording; expected failures are ignored
    so later cases still run. Returns each task's raw result by name."""
    tasks = []
    for name, args, recording, check, failing in cases:
        task = {"name": name, f"pairserve.llm.{module}": args,
                "environment": {"PAIRSERVE_NVML_REPLAY": str(recording)}, "check_mode": check}
        if failing:
            task["ignore_errors"] = True
        tasks.append(task)
    playbook = directory / "cases.yml"
    playbook.write_text(yaml.safe_dump([{"name": f"{module} cases", "hosts": "localhost", "connection": "local",
                                         "gather_facts": False, "tasks": tasks}], sort_keys=False))
    result = run_playbook(playbook, inventory="localhost,")
    by_name = {record["_task"]: record for record in result.results}
    assert set(by_name) == {case[0] for case in cases}, result.stdout + result.stderr
    return by_name
