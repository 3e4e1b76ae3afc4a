"""Recorded NVML hosts the tests build from the real ones (tests/fixtures/nvml/), in the recording's own format."""

from __future__ import annotations

import copy
import json
from pathlib import Path

NVML = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
H200_RECORDING = NVML / "h200-recording-2026-12-01.json"
FOUR_H200_MINORS = (2, 0, 3, 1)


def four_h200_minors(directory: Path) -> Path:
    """Four copies of the real H200 whose minor numbers (2, 0, 3, 1) are not their NVML order: gpustack-runtime
    numbers GPUs by minor number, NVML by PCI order, so every card would be another under the wrong rule."""
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
