"""The GPUs' road on the lab: each worker detects its recorded GPUs itself (GPUStack's runtime over the NVML
replay), and each replica container receives its node's GPUs, handed over by the container runtime as on a real
node: node-a through GPUStack's podman deployer and the CDI spec (lab/cdi.py, where the NVIDIA toolkit's spec
sits), node-b through GPUStack's Docker deployer and the NVIDIA runtime as Docker's default (its stand-in,
lab/stand_ins/nvidia-container-runtime, reads NVIDIA_VISIBLE_DEVICES from the bundle as the real one does). Each
replica is privileged and confined by CUDA_VISIBLE_DEVICES = its pair's GPUStack indexes, beside a pause container
of the pinned image.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from lab.api import ENGINES, REPO, ROUTE, items, lab_pins, read_keys, replica_container, runtime_of


RECORDED = {"node-a": "node-a-2x5080.json", "node-b": "node-b-2x4070tis.json"}


def recorded_uuids(host):
    recording = json.loads((REPO / "tests" / "fixtures" / "nvml" / RECORDED[host]).read_text())
    return sorted(device["UUID"] for device in recording["devices"])


def process_env(container):
    """The environment the container's first process runs with, as the runtime finally set it (the NVIDIA runtime
    and CDI edit the OCI bundle, which `inspect` does not show for Docker)."""
    out = subprocess.run(ENGINES[container["PairserveEngine"]] + ["exec", container["Id"], "cat", "/proc/1/environ"],
                         check=True, capture_output=True, text=True).stdout
    return dict(e.split("=", 1) for e in out.split("\0") if "=" in e)


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
    env = process_env(container)
    received = sorted(v for k, v in env.items() if k.startswith("PAIRSERVE_LAB_GPU_") and "_BUS_" not in k)
    assert received == recorded_uuids(host), (received, env)
    assert env.get("PAIRSERVE_LAB_NODE") == host, env


def _instance(keys, host):
    return [i for i in items("/v2/model-instances", keys["management"]) if i["model_name"] == f"{ROUTE}-{host}"][0]


def test_the_nodes_take_both_of_gpustacks_roads():
    assert {host: runtime_of(host) for host in RECORDED} == {"node-a": "podman", "node-b": "docker"}


@pytest.mark.parametrize("host", sorted(RECORDED))
def test_each_replica_runs_as_gpustack_starts_it_on_its_nodes_own_road(keys, host):
    instance = _instance(keys, host)
    container = replica_container(instance["name"])
    # started by the deployer of the node's runtime, in that engine
    assert container["PairserveEngine"] == runtime_of(host), container["PairserveEngine"]
    assert container["HostConfig"]["Privileged"] is True
    env = process_env(container)
    # GPUStack confines the privileged replica to its pair by index (NVML order: the collection's numbering)
    indexes = [str(g) for g in instance["gpu_indexes"]]
    assert env.get("CUDA_VISIBLE_DEVICES") == ",".join(indexes), env
    assert env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID", env
    # vLLM's compile cache on the directory GPUStack mounts (the checkpoint's parent), so it outlives the container
    cache = env.get("VLLM_CACHE_ROOT", "")
    mounts = [m.get("Destination") for m in container.get("Mounts") or []]
    assert cache.endswith("/.vllm-cache") and any(cache.startswith(m.rstrip("/") + "/") for m in mounts), \
        (cache, mounts)
    # what the replica writes there lands on the node, outside the container, so a new container finds it
    marker = "%s/pairserve-test-%s" % (cache, instance["name"])
    engine = ENGINES[container["PairserveEngine"]]
    subprocess.run(engine + ["exec", container["Id"], "sh", "-c", "mkdir -p '%s' && touch '%s'" % (cache, marker)],
                   check=True, capture_output=True, text=True)
    try:
        on_node = subprocess.run(["podman", "exec", "pairserve-lab-%s" % host, "test", "-f", marker], check=False)
        assert on_node.returncode == 0, "%s, written in the replica, is not on %s" % (marker, host)
    finally:
        subprocess.run(engine + ["exec", container["Id"], "rm", "-f", marker], check=False, capture_output=True)


@pytest.mark.parametrize("host", sorted(RECORDED))
def test_each_replica_has_a_pause_container_of_the_pinned_image(keys, host):
    pins = lab_pins()
    digest = pins["pairserve_runtime_pause_image_digest"]
    assert digest.startswith("sha256:"), pins
    pause = replica_container(_instance(keys, host)["name"], suffix="-pause")
    assert pause["PairserveEngine"] == runtime_of(host)
    assert pause["State"]["Running"] is True, pause["State"]
    # the very image the pin names, in that engine (compared by image id, as test_serving does for the runner)
    pinned = "%s@%s" % (pins["pairserve_runtime_pause_image"].rsplit(":", 1)[0], digest)
    image_id = subprocess.run(ENGINES[pause["PairserveEngine"]] + ["image", "inspect", "--format", "{{.Id}}", pinned],
                              check=True, capture_output=True, text=True).stdout.strip()
    assert pause["Image"] == image_id, (pause["Image"], pause.get("ImageName"), pinned, image_id)
