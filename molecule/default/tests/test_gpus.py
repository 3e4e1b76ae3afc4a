"""The GPUs' road on the lab: each worker detects its recorded GPUs itself (GPUStack's runtime over the NVML
replay), and each replica container receives exactly its pair's GPUs by UUID, handed over by the container
runtime through the CDI spec (lab/cdi.py), as the NVIDIA toolkit's spec does on a real node.
"""

from __future__ import annotations

import json

import pytest

from lab.api import REPO, ROUTE, items, read_keys, replica_container


RECORDED = {"node-a": "node-a-2x5080.json", "node-b": "node-b-2x4070tis.json"}


def recorded_uuids(host):
    recording = json.loads((REPO / "tests" / "fixtures" / "nvml" / RECORDED[host]).read_text())
    return sorted(device["UUID"] for device in recording["devices"])


@pytest.fixture(scope="module")
def keys():
    return read_keys()


@pytest.mark.parametrize("host", sorted(RECORDED))
def test_the_worker_detected_its_recorded_gpus(keys, host):
    worker = [w for w in items("/v2/workers", keys["management"]) if w["name"] == host][0]
    gpus = worker["status"]["gpu_devices"]
    # Declared static resources carry no UUID: these come from gpustack-runtime's own NVML detection.
    assert sorted(g.get("uuid") or "" for g in gpus) == recorded_uuids(host), gpus
    assert all(g.get("vendor") == "nvidia" and g.get("type") == "cuda" for g in gpus), gpus


@pytest.mark.parametrize("host", sorted(RECORDED))
def test_the_replica_container_received_its_pairs_gpus(keys, host):
    instance = [i for i in items("/v2/model-instances", keys["management"]) if i["model_name"] == f"{ROUTE}-{host}"][0]
    container = replica_container(instance["name"])
    env = dict(e.split("=", 1) for e in container["Config"]["Env"])
    received = sorted(v for k, v in env.items() if k.startswith("PAIRSERVE_LAB_GPU_"))
    assert received == recorded_uuids(host), (received, container["Config"]["Env"])
    assert env.get("PAIRSERVE_LAB_NODE") == host, env
