#!/usr/bin/env python
"""On a GPU host: GPUStack's own GPU detection next to gpu_pairs', per GPU, into one JSON file (docs/gpu-detection.md).

GPUStack 2.2.3's worker reports the GPUs that gpustack-runtime 0.2.1's `detect_devices()` finds, and its
`gpu_selector` ids name the index it gives them. The collection pins replicas through gpu_pairs'
`gpustack_gpu_indexes`. This script runs both on the same host, with the same NVML, and writes:

    {"host": ..., "runtime": [{index, uuid, name, memory_mib, bdf}], "gpu_pairs": [{nvml_index, minor_number,
     gpustack_index, uuid, bus_id, name, memory_mib}], "pairs": [...]}

Record the host beside it (tools/record_nvml.py): the test suite replays that recording through both detections
and compares with what they said on the real host (tests/integration/gpustack/test_gpu_identity.py).

    python detect_identity.py OUTPUT.json     (gpustack_runtime, nvidia-ml-py and the collection importable)
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pynvml


def runtime_devices():
    from gpustack_runtime.detector import detect_devices  # pylint: disable=import-outside-toplevel

    out = []
    for dev in detect_devices(fast=False):
        data = dev.to_dict() if hasattr(dev, "to_dict") else dict(vars(dev))
        appendix = data.get("appendix") or {}
        out.append({"index": data.get("index"), "uuid": data.get("uuid"), "name": data.get("name"),
                    "memory_mib": data.get("memory"), "bdf": appendix.get("bdf"),
                    "manufacturer": str(data.get("manufacturer"))})
    return out


def pairs_view():
    from ansible_collections.pairserve.llm.plugins.module_utils import nvml  # pylint: disable=import-outside-toplevel

    fact = nvml.gather({}, expected_pairs=None)
    pairs = fact.get("pairs") or []
    gpus = [{"nvml_index": g["index"], "minor_number": g.get("minor_number"), "gpustack_index": nvml.gpustack_index(g),
             "uuid": g["uuid"], "bus_id": g["bus_id"], "name": g["name"], "memory_mib": g["memory_total_mib"]}
            for g in fact["gpus"]]
    return gpus, [{k: p[k] for k in ("uuids", "bus_ids", "nvml_indices", "gpustack_gpu_indexes")} for p in pairs]


def main(argv):
    out = Path(argv[1])
    gpus, pairs = pairs_view()
    result = {"host": platform.node(), "python": platform.python_version(),
              "nvidia_ml_py": getattr(pynvml, "__version__", None) or "unknown",
              "runtime": runtime_devices(), "gpu_pairs": gpus, "pairs": pairs}
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    for dev, mine in zip(result["runtime"], gpus):
        print("runtime index %s uuid %s bdf %s | gpu_pairs nvml %s minor %s -> gpustack %s uuid %s bus %s"
              % (dev["index"], dev["uuid"], dev["bdf"], mine["nvml_index"], mine["minor_number"],
                 mine["gpustack_index"], mine["uuid"], mine["bus_id"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
