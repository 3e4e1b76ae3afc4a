"""The lab's stand-ins at the GPU edge, on their own: CUDA's enumeration (lab/stand_ins/cuda-uuids), the NVIDIA runtime behind
the lab's Docker engine (lab/stand_ins/nvidia-container-runtime) and the runc wrapper for this sandbox's root
(lab/stand_ins/runc-no-negative-oom). The lab suites run them for real (lab/scenarios/default/tests/test_gpus.py,
test_gpu_container_check.py); these pin their rules where a wrong rule would pass there unnoticed."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json

import pytest

from support.ansible_runner import REPO


def _load(path, name):
    loader = importlib.machinery.SourceFileLoader(name, str(REPO / path))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


cuda = _load("lab/stand_ins/cuda-uuids", "lab_cuda_uuids")
nvidia = _load("lab/stand_ins/nvidia-container-runtime", "lab_nvidia_runtime")
runc = _load("lab/stand_ins/runc-no-negative-oom", "lab_runc_wrapper")

A, B, C = "GPU-aaaa", "GPU-bbbb", "GPU-cccc"
# handed over with NVML indexes whose order is not the PCI order
ENV = {"PAIRSERVE_LAB_GPU_0": B, "PAIRSERVE_LAB_GPU_BUS_0": "00000000:02:00.0",
       "PAIRSERVE_LAB_GPU_1": A, "PAIRSERVE_LAB_GPU_BUS_1": "00000000:01:00.0",
       "PAIRSERVE_LAB_GPU_2": C, "PAIRSERVE_LAB_GPU_BUS_2": "00000000:03:00.0", "OTHER": "x"}


@pytest.mark.parametrize("order,visible,seen", [
    ("PCI_BUS_ID", None, [A, B, C]),
    ("PCI_BUS_ID", "1,0", [B, A]),
    ("FASTEST_FIRST", "0", [B]),
    ("PCI_BUS_ID", "GPU-cc", [C]),
    # CUDA stops at the first entry it cannot resolve
    ("PCI_BUS_ID", "2,7,0", [C]),
    ("PCI_BUS_ID", "", []),
])
def test_cuda_enumerates_handed_over_devices_in_its_order_and_keeps_the_visible_ones(order, visible, seen):
    devices = cuda.enumerate_like_cuda(cuda.handed_over(ENV), order, visible)
    assert [d["uuid"] for d in devices] == seen


RECORDED = [{"uuid": A, "index": 0, "bus": "00000000:01:00.0"}, {"uuid": B, "index": 1, "bus": "00000000:02:00.0"}]


@pytest.mark.parametrize("value,uuids", [(None, []), ("void", []), ("all", [A, B]), (B, [B]), ("1,0", [B, A]),
                                         ("%s,%s" % (A, A), [A])])
def test_the_nvidia_runtime_reads_nvidia_visible_devices_as_the_toolkit_does(value, uuids):
    assert [g["uuid"] for g in nvidia.requested(value, RECORDED)] == uuids


def test_an_unknown_device_stops_the_container():
    with pytest.raises(SystemExit, match="unknown device 'GPU-zzzz'"):
        nvidia.requested("GPU-zzzz", RECORDED)


def test_the_bundle_gets_the_named_gpus_and_the_stand_in_files(tmp_path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=" + B]}, "mounts": []}))
    monkeypatch.setenv("PAIRSERVE_LAB_NODE", "node-b")
    nvidia.edit(str(config), RECORDED, [("/host/cuda-uuids", "/usr/local/bin/pairserve-lab-cuda-uuids")])
    spec = json.loads(config.read_text())
    assert "PAIRSERVE_LAB_GPU_1=%s" % B in spec["process"]["env"] and "PAIRSERVE_LAB_NODE=node-b" in spec["process"]["env"]
    assert not [e for e in spec["process"]["env"] if e.startswith("PAIRSERVE_LAB_GPU_0=")]
    assert spec["mounts"] == [{"destination": "/usr/local/bin/pairserve-lab-cuda-uuids", "type": "bind",
                               "source": "/host/cuda-uuids", "options": ["rbind", "ro", "nosuid", "nodev"]}]
    # a container that asked for no GPU is left alone
    config.write_text(json.dumps({"process": {"env": []}}))
    nvidia.edit(str(config), RECORDED, [("/host/x", "/x")])
    assert json.loads(config.read_text()) == {"process": {"env": []}}


def test_the_runc_wrapper_keeps_only_what_this_root_may_grant(monkeypatch):
    monkeypatch.setattr(runc, "bounding_set", lambda: {"CAP_SYS_ADMIN", "CAP_CHOWN"})
    process = {"oomScoreAdj": -998, "capabilities": {"bounding": ["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"],
                                                     "effective": ["CAP_CHOWN"]}}
    assert runc.clamp(process) is True
    assert process == {"oomScoreAdj": 0, "capabilities": {"bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_CHOWN"]}}
    assert runc.clamp(process) is False
    # the bounding set is read from this process
    assert "CAP_CHOWN" in _load("lab/stand_ins/runc-no-negative-oom", "again").bounding_set()


def test_the_runc_wrapper_finds_exec_process_documents():
    assert runc.option(["exec", "--process", "/tmp/p.json", "id"], "--process", "-p") == "/tmp/p.json"
    assert runc.option(["exec", "--process=/tmp/q.json", "id"], "--process", "-p") == "/tmp/q.json"
    assert runc.option(["exec", "id"], "--process", "-p") is None
