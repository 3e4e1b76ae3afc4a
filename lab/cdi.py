#!/usr/bin/env python
"""Lab only: a CDI specification for `nvidia.com/gpu` made from a recorded NVML host.

On a real node the NVIDIA Container Toolkit writes this file (`nvidia-ctk cdi generate`), with device nodes and
driver libraries as its container edits. gpustack-runtime's podman deployer asks for `nvidia.com/gpu=<UUID>` for
each GPU of a replica, and podman resolves the names here. The lab's GPUs are recordings, so each device's
edits only set environment variables naming the device (PAIRSERVE_LAB_GPU_<index>=<UUID>, one key per device,
since podman merges the edits of every requested device): the tests read them in each replica container to
check it received its own pair's GPUs. No device node is created. Where the toolkit's spec mounts the host's
nvidia-smi, this one mounts the lab's stand-in (lab/stand_ins/nvidia-smi), which prints the UUIDs those variables
name; and it mounts lab/stand_ins/cuda-uuids, which enumerates the handed-over devices as CUDA would (PCI order from
PAIRSERVE_LAB_GPU_BUS_<index>, then CUDA_VISIBLE_DEVICES): the runner_image role's GPU container check runs it in
the runner image where a real node's runs torch.

    python -m lab.cdi [--nvidia-smi PATH] [--cuda-uuids PATH] RECORDING NODE OUTPUT    write OUTPUT atomically (podman reads
                                                                   /var/run/cdi/*.json)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# The newest version podman 4.3 reads (0.6.0 is ignored without a word: every name is then unresolvable).
CDI_VERSION = "0.5.0"


# Where each spec mounts the lab's stand-in for CUDA's enumeration (lab/stand_ins/cuda-uuids; the lab inventory's
# pairserve_runner_gpu_check_command runs it).
CUDA_UUIDS_PATH = "/usr/local/bin/pairserve-lab-cuda-uuids"


def _mount(host_path: str, container_path: str) -> dict:
    # the same options nvidia-ctk writes for the driver's files
    return {"hostPath": os.path.abspath(host_path), "containerPath": container_path,
            "options": ["ro", "nosuid", "nodev", "bind"]}


def spec(recording: dict, node: str, nvidia_smi: str = "", cuda_uuids: str = "") -> dict:
    devices = []
    for device in recording.get("devices", []):
        uuid, index = device.get("UUID"), device.get("Index")
        if not isinstance(uuid, str) or not uuid.startswith("GPU-") or not isinstance(index, int):
            raise ValueError("device %r of the recording has no GPU UUID or NVML index" % (device.get("Name"),))
        env = ["PAIRSERVE_LAB_GPU_%d=%s" % (index, uuid)]
        bus = (device.get("PciInfo") or {}).get("busId")
        if bus:
            # the device's PCI address: the order CUDA numbers handed-over devices in under PCI_BUS_ID
            env.append("PAIRSERVE_LAB_GPU_BUS_%d=%s" % (index, bus))
        devices.append({"name": uuid, "containerEdits": {"env": env}})
    if not devices:
        raise ValueError("the recording lists no device")
    edits = {"env": ["PAIRSERVE_LAB_NODE=%s" % node]}
    mounts = []
    if nvidia_smi:
        # where the NVIDIA toolkit's spec mounts the driver's nvidia-smi
        mounts.append(_mount(nvidia_smi, "/usr/bin/nvidia-smi"))
    if cuda_uuids:
        # where the toolkit's spec mounts the driver's CUDA library, the lab mounts what enumerates like it
        mounts.append(_mount(cuda_uuids, CUDA_UUIDS_PATH))
    if mounts:
        edits["mounts"] = mounts
    return {"cdiVersion": CDI_VERSION, "kind": "nvidia.com/gpu", "devices": devices, "containerEdits": edits}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvidia-smi", default="", help="the stand-in to mount at /usr/bin/nvidia-smi")
    parser.add_argument("--cuda-uuids", default="", help="the stand-in to mount at %s" % CUDA_UUIDS_PATH)
    parser.add_argument("recording")
    parser.add_argument("node")
    parser.add_argument("output")
    args = parser.parse_args(argv)
    try:
        with open(args.recording, encoding="utf-8") as handle:
            made = spec(json.load(handle), args.node, args.nvidia_smi, args.cuda_uuids)
    except (OSError, ValueError) as exc:
        print("lab_cdi: %s: %s" % (args.recording, exc), file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    tmp = "%s.%d.tmp" % (args.output, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(made, handle, indent=1)
        handle.write("\n")
    os.replace(tmp, args.output)
    print("lab: CDI spec %s: nvidia.com/gpu=%s" % (args.output, ", ".join(d["name"] for d in made["devices"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
