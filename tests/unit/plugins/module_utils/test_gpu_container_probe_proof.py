"""Can the lent GPU machine run the worker's container runtime? The probe's record of 2026-12-06 (issue 41 part 2;
docs/gpu-proof.md, "Part 2's probe: a container runtime on the lent machine (2026-12-06)").

tests/fixtures/gpu-proof/container-probe-2026-12-06.json holds scripts/gpu_proof/container_probe.py's two runs on the
lent H100: `static` (what the VM offers) and `docker` (Debian 12's docker.io, containerd and runc, from their .debs,
started as plain processes; a container; then one with the GPU handed over as nvidia-container-runtime does: the
device nodes and the driver's libraries). Every step keeps its command, rc and output; these tests (CI, no GPU) read
the answers out of those outputs, so a summary that disagrees with its own evidence fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
RECORD = REPO / "tests" / "fixtures" / "gpu-proof" / "container-probe-2026-12-06.json"


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text(encoding="utf-8"))


def _step(part, name):
    (step,) = [s for s in part["steps"] if s["name"] == name]
    return step


def test_the_vm_offers_what_a_container_engine_needs(record):
    static = record["static"]
    assert static["mode"] == "static"
    assert "Ubuntu 24.04" in _step(static, "kernel")["output"]
    # cgroup v2 with the controllers dockerd and runc use, and a child cgroup can be made.
    assert _step(static, "cgroup_fs")["output"].startswith("cgroup2fs")
    controllers = set(_step(static, "cgroup_controllers")["output"].split("---")[0].split())
    assert {"cpu", "memory", "pids", "io", "cpuset"} <= controllers
    assert _step(static, "cgroup_mkdir")["rc"] == 0
    # overlayfs mounts (overlay2 storage), and every namespace a container needs can be made.
    overlay = _step(static, "overlay_mount")
    assert overlay["rc"] == 0 and overlay["output"].startswith("lower\nupper\n")
    assert _step(static, "userns")["rc"] == 0 and "uid=0(root)" in _step(static, "userns")["output"]
    namespaces = _step(static, "namespaces")["output"]
    assert "FAILED" not in namespaces and namespaces.count(" ok") == 6
    config = _step(static, "kernel_config")["output"]
    for option in ("OVERLAY_FS", "USER_NS", "CGROUP_BPF", "CGROUP_DEVICE", "SECCOMP_FILTER", "VETH", "BRIDGE"):
        assert "CONFIG_%s=y" % option in config, option
    assert static["summary"] == {
        "cgroup_v2": True, "cgroup_mkdir": True, "cgroup_v1_devices": False, "overlay_mount": True, "dev_fuse": True,
        "userns": True, "systemd_pid1": False, "nvidia_device_nodes": True}


def test_what_the_vm_lacks_is_software_not_kernel(record):
    static = record["static"]
    # No systemd (PID 1 is the VM's process_api): the roles' units cannot run; processes start plainly.
    assert _step(static, "pid1")["output"].startswith("process_api")
    absent = _step(static, "runtimes_present")["output"]
    for binary in ("docker", "dockerd", "podman", "containerd", "runc", "nvidia-ctk", "nvidia-container-runtime"):
        assert "%s: absent" % binary in absent, binary
    packages = _step(static, "packages")["output"]
    assert "no packages found matching iptables" in packages
    assert "no packages found matching libdevmapper1.02.1" in packages
    assert "ip: command not found" in _step(static, "network")["output"]
    assert "cannot access '/etc/cdi'" in _step(static, "nvidia_cdi")["output"]


def test_the_driver_is_reachable_as_device_nodes_and_libraries(record):
    static = record["static"]
    nodes = _step(static, "nvidia_devices")["output"]
    for node in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        assert re.search(r"^crw-rw-rw- .* %s$" % re.escape(node), nodes, re.M), node
    assert "580.159.04" in nodes
    libraries = _step(static, "nvidia_libraries")["output"]
    assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib" in libraries
    assert "libnvidia-ml.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libnvidia-ml.so.1" in libraries


def test_debians_docker_runs_as_plain_processes_from_its_debs(record):
    docker = record["docker"]
    versions = _step(docker, "versions")["output"]
    packages = record["debs"]["packages"]
    assert "Docker version %s" % packages["docker.io"]["version"].split("-")[0] in versions
    assert packages["containerd"]["version"] in versions and "runc version 1.1.5+ds1" in versions
    # dockerd needs libdevmapper, which Ubuntu's image lacks: the .deb's own library was carried beside it.
    assert "libdevmapper.so.1.02.1 => not found" in _step(docker, "ldd_dockerd")["output"]
    assert "/tmp/dkb/lib/libdevmapper.so.1.02.1" in _step(docker, "ldd_with_carried_libs")["output"]
    daemon = _step(docker, "dockerd_overlay2")
    assert daemon["up"] is True and "API listen on" in daemon["output"]
    assert "--iptables=false" in daemon["command"] and "--bridge=none" in daemon["command"]
    info = _step(docker, "docker_info")["output"]
    assert "Cgroup Version: 2" in info and "Ubuntu 24.04.3 LTS (containerized)" in info
    run = _step(docker, "run_busybox")
    assert run["rc"] == 0 and "hello from a container" in run["output"]
    assert docker["summary"]["storage_driver"] == "overlay2" and docker["summary"]["container_runs"] is True


def test_the_gpu_is_handed_to_a_container_without_nvidias_toolkit(record):
    docker, static = record["docker"], record["static"]
    # What nvidia-container-runtime does, by hand: every NVIDIA character device, the driver's libraries (under
    # /usr, found through the host's LD_LIBRARY_PATH and ld.so.cache), the host's Python with torch, read-only.
    nodes = set(re.findall(r"(/dev/nvidia[a-z0-9-]*)$", _step(static, "nvidia_devices")["output"], re.M))
    given = set(re.findall(r"--device (\S+)", docker["gpu_run"]))
    assert given == nodes == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert "-v /usr:/usr:ro" in docker["gpu_run"] and "-e LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in docker["gpu_run"]
    smi = _step(docker, "gpu_nvidia_smi")
    assert smi["rc"] == 0 and re.match(r"GPU 0: NVIDIA H100 80GB HBM3 \(UUID: GPU-[0-9a-f-]{36}\)", smi["output"])
    torch = _step(docker, "gpu_torch")
    # torch on the GPU inside the container: the sum of 0 .. 2**20 - 1, computed in float64 on the device.
    expected = ["NVIDIA", "H100", "80GB", "HBM3", repr(float(sum(range(1 << 20)))), "True"]
    assert torch["rc"] == 0 and torch["output"].split() == expected
    # Without the device nodes the same image sees no GPU: the hand-over, not the image, gives it.
    hidden = _step(docker, "gpu_without_devices")
    assert hidden["rc"] != 0 and "Failed to initialize NVML" in hidden["output"]
    assert {k: docker["summary"][k] for k in ("gpu_nvidia_smi", "gpu_torch", "gpu_hidden_without_devices")} == {
        "gpu_nvidia_smi": True, "gpu_torch": True, "gpu_hidden_without_devices": True}


def test_the_trial_left_nothing_behind(record):
    # Mounts under the probe's directory and the cgroup parent's directories, counted after dockerd stopped.
    assert _step(record["docker"], "after_stop")["output"].split() == ["0", "0"]
