"""GPU identity: the index GPUStack's worker gives each GPU (what gpu_selector ids name) against gpu_pairs'.

The real evidence is one H200 host: scripts/gpu_proof/detect_identity.py ran gpustack-runtime 0.2.1's
`detect_devices()` (the 2.2.3 worker's detection) next to gpu_pairs on it, and tools/record_nvml.py recorded the
host. Replaying that recording through both here must give what they said on the real host. With one GPU the
orders cannot differ, so the multi-GPU case is built in the recording's format: four GPUs whose minor numbers are
not their NVML order, run through gpustack-runtime's own code with the collection's worker environment
(GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0: the NVML index) and without it (the runtime's default: the
minor number).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support.ansible_runner import REPO
from support.gpustack_server import ensure_venv
from support.nvml_recordings import four_h200_minors

pytestmark = pytest.mark.slow

NVML = REPO / "tests" / "fixtures" / "nvml"
REAL_IDENTITY = NVML / "h200-identity-2026-12-01.json"
REAL_RECORDING = NVML / "h200-recording-2026-12-01.json"


@pytest.fixture(scope="module")
def hook(tmp_path_factory):
    """The lab's NVML hook: sitecustomize installing the replay under the real nvidia-ml-py at interpreter start."""
    path = tmp_path_factory.mktemp("nvml-hook")
    (path / "sitecustomize.py").write_text((REPO / "lab" / "stand_ins" / "nvml_sitecustomize.py").read_text())
    (path / "nvml_replay.py").write_text((REPO / "plugins" / "module_utils" / "nvml_replay.py").read_text())
    return path


# What the collection puts in every worker's environment so that GPUStack numbers GPUs by NVML index.
COLLECTION_WORKER_ENV = {"GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY": "0"}


def detect(hook, recording, out, worker_env=None):
    """detect_identity.py in GPUStack's venv over a recording (gpustack-runtime + gpu_pairs, one process), with
    `worker_env` (default: the collection's) added to the environment."""
    python = ensure_venv() / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY"}
    env.update(PYTHONPATH="%s:%s" % (hook, REPO / ".cache" / "collections"),
               PAIRSERVE_NVML_REPLAY=str(recording), GPUSTACK_RUNTIME_DETECT="NVIDIA",
               # The replayed host has no NVIDIA PCI device in /sys: the one check the lab skips too.
               GPUSTACK_RUNTIME_DETECT_NO_PCI_CHECK="1", **(COLLECTION_WORKER_ENV if worker_env is None else worker_env))
    run = subprocess.run([str(python), str(REPO / "scripts" / "gpu_proof" / "detect_identity.py"), str(out)],
                         env=env, capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(out.read_text())


def by_uuid(items):
    return {item["uuid"]: item for item in items}


def test_the_replayed_h200_says_what_the_real_one_said(hook, tmp_path):
    real = json.loads(REAL_IDENTITY.read_text())
    replayed = detect(hook, REAL_RECORDING, tmp_path / "identity.json")
    assert real["runtime"] and len(real["runtime"]) == len(real["gpu_pairs"]) == 1
    assert replayed["runtime"] == real["runtime"], (replayed["runtime"], real["runtime"])
    assert replayed["gpu_pairs"] == real["gpu_pairs"], (replayed["gpu_pairs"], real["gpu_pairs"])
    # On the real host: GPUStack's index for the GPU is the one gpu_pairs pins by, and both name the same card.
    for uuid, dev in by_uuid(real["runtime"]).items():
        mine = by_uuid(real["gpu_pairs"])[uuid]
        assert dev["index"] == mine["gpustack_index"]
        assert dev["bdf"] == mine["bus_id"][4:] and dev["memory_mib"] == mine["memory_mib"]


def test_minor_numbers_out_of_nvml_order_follow_the_nvml_index_with_the_collections_env(hook, tmp_path):
    path = four_h200_minors(tmp_path)
    seen = detect(hook, path, tmp_path / "identity.json")
    runtime, mine = by_uuid(seen["runtime"]), by_uuid(seen["gpu_pairs"])
    assert sorted(runtime) == sorted(mine) and len(runtime) == 4
    for uuid, dev in runtime.items():
        assert dev["index"] == mine[uuid]["gpustack_index"] == mine[uuid]["nvml_index"], (dev, mine[uuid])
    # The minor number would have named another card for every one of them.
    assert sum(1 for uuid in runtime if runtime[uuid]["index"] != mine[uuid]["minor_number"]) == 4
    for pair in seen["pairs"]:
        assert pair["gpustack_gpu_indexes"] == [runtime[u]["index"] for u in pair["uuids"]]


def test_without_the_collections_env_gpustack_numbers_by_minor_number(hook, tmp_path):
    """Why the worker needs PHYSICAL_INDEX_PRIORITY=0: the runtime's default numbers by minor number, which is not
    gpu_pairs' index here (the worker identity check then refuses, see the unit tests)."""
    path = four_h200_minors(tmp_path)
    seen = detect(hook, path, tmp_path / "identity.json", worker_env={})
    runtime, mine = by_uuid(seen["runtime"]), by_uuid(seen["gpu_pairs"])
    for uuid, dev in runtime.items():
        assert dev["index"] == mine[uuid]["minor_number"] != mine[uuid]["gpustack_index"], (dev, mine[uuid])
