"""The runner image role's GPU container check (tasks/gpu_check.yml) and Docker's hand-over check (tasks/runtime.yml)
through Ansible, with a `docker` stand-in on PATH: how the probe container is started (as GPUStack starts a replica:
privileged, every GPU of the node, CUDA_VISIBLE_DEVICES = the pair's GPUStack indexes, PCI bus order) and what
passes and fails for what CUDA inside reports. (The lab runs the same check with podman, CDI and the lab's stand-in
for CUDA's enumeration: lab/scenarios/default/tests/test_gpu_container_check.py.)"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from support.ansible_runner import run_local_play

A, B = "GPU-5080a000-0000-4000-8000-000000000001", "GPU-5080a000-0000-4000-8000-000000000002"
C, D = "GPU-5080a000-0000-4000-8000-000000000003", "GPU-5080a000-0000-4000-8000-000000000004"
OTHER = "GPU-4070b000-0000-4000-8000-000000000009"
IMAGE = "docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:" + "1" * 64
# A node with two pairs, listed in PCI bus order (which CUDA follows under CUDA_DEVICE_ORDER=PCI_BUS_ID).
GPUS = [{"uuid": u, "bus_id": "00000000:0%d:00.0" % n, "name": "NVIDIA GeForce RTX 5080", "index": n - 1}
        for n, u in enumerate((A, B, C, D), start=1)]
PAIRS = [{"index": 0, "uuids": [A, B], "gpustack_gpu_indexes": [0, 1]},
         {"index": 1, "uuids": [C, D], "gpustack_gpu_indexes": [2, 3]}]

# `docker run` as the NVIDIA runtime and CUDA would answer: the GPUs handed over (NVIDIA_VISIBLE_DEVICES or CDI
# --device=nvidia.com/gpu=<UUID>, in the order given, which the role gives in PCI order), then the ordinals of
# CUDA_VISIBLE_DEVICES picked from them, one UUID per line; MODE changes what the runtime hands over.
SHIM = r'''#!/bin/sh
echo "$@" >> "$CALLS"
case "$1" in
  # as the real CLI, only the JSON template gives JSON (a template that renders to a literal would print that)
  info) [ "$2" = --format ] && [ "$3" = "{{json .}}" ] || { echo "docker stand-in: info $2 $3 is not --format {{json .}}" >&2; exit 2; }
        echo "$INFO" ; exit 0 ;;
  run) ;;
  *) exit 1 ;;
esac
[ "$MODE" = broken ] && { echo "docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]]." >&2; exit 125; }
visible=
for a in "$@"; do
  case "$a" in
    --env=CUDA_VISIBLE_DEVICES=*) visible=${a#*=*=} ;;
  esac
done
for a in "$@"; do
  case "$a" in
    --env=NVIDIA_VISIBLE_DEVICES=*) echo "${a#*=*=}" | tr ',' '\n' ;;
    --device=nvidia.com/gpu=*) echo "${a#*=*=}" ;;
  esac
done | case "$MODE" in
  swapped) sed "s/$SWAP_FROM/$SWAP_TO/" ;;
  *) cat ;;
esac > "$CALLS.handed"
for i in $(echo "$visible" | tr ',' ' '); do sed -n "$((i + 1))p" "$CALLS.handed"; done
'''


def play(tmp_path: Path, tasks_from: str, mode="ok", info='{"DefaultRuntime": "nvidia"}', swap=("", ""), **more):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "docker"
    shim.write_text(SHIM)
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.log"
    calls.write_text("")
    variables = {"pairserve_runner_runtime": "docker", "pairserve_runner_image_ref": IMAGE,
                 "pairserve_gpu": {"gpus": GPUS, "pairs": PAIRS}, **more}
    res = run_local_play(tmp_path, "GPU check", [{"name": "Check", "ansible.builtin.include_role": {
        "name": "pairserve.llm.runner_image", "tasks_from": tasks_from}}], variables,
        env={"PATH": "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]), "CALLS": str(calls), "MODE": mode,
             "INFO": info, "SWAP_FROM": swap[0], "SWAP_TO": swap[1]})
    return res, [line.split() for line in calls.read_text().splitlines()]


def failed_msg(res):
    """The message of the failed task (of its failed item, for a loop)."""
    failed = [r for r in res.results if r.get("_status") == "failed"]
    assert res.rc != 0 and failed, res.stdout[-3000:]
    items = [i for i in failed[-1].get("results") or [] if i.get("failed")]
    return " ".join(str((items[0] if items else failed[-1]).get("msg", "")).split())


def test_each_pair_is_started_as_gpustack_starts_its_replica_and_cuda_sees_it_whole(tmp_path):
    res, calls = play(tmp_path, "gpu_check")
    assert res.rc == 0, res.stdout[-3000:]
    runs = [c for c in calls if c[0] == "run"]
    assert len(runs) == 2
    for run, visible in zip(runs, ("0,1", "2,3")):
        # privileged, every GPU of the node by UUID (Docker's default road), the pair by GPUStack's indexes
        assert "--privileged" in run and "--env=NVIDIA_VISIBLE_DEVICES=%s" % ",".join((A, B, C, D)) in run, run
        assert "--env=CUDA_VISIBLE_DEVICES=%s" % visible in run and "--env=CUDA_DEVICE_ORDER=PCI_BUS_ID" in run
        # the pinned image by digest, never pulled, no network; CUDA asked through torch
        assert "--pull=never" in run and "--rm" in run and "--network=none" in run
        assert run[run.index("--entrypoint") + 1] == "python3" and IMAGE in run
    assert "torch.cuda.device_count()" in " ".join(runs[0])


def test_the_cdi_policy_hands_every_gpu_over_by_its_cdi_name(tmp_path):
    res, calls = play(tmp_path, "gpu_check",
                      pairserve_gpustack_worker_env={"GPUSTACK_RUNTIME_DOCKER_RESOURCE_INJECTION_POLICY": "cdi"})
    assert res.rc == 0, res.stdout[-3000:]
    run = [c for c in calls if c[0] == "run"][0]
    assert all("--device=nvidia.com/gpu=%s" % u in run for u in (A, B, C, D)), run
    assert not [a for a in run if "NVIDIA_VISIBLE_DEVICES" in a]


def test_indexes_that_are_not_cudas_ordinals_fail_naming_both_orders(tmp_path):
    # GPUStack's indexes for pair 1 name the other pair's cards in CUDA's order
    pairs = [PAIRS[0], dict(PAIRS[1], gpustack_gpu_indexes=[0, 1])]
    res, _calls = play(tmp_path, "gpu_check", pairserve_gpu={"gpus": GPUS, "pairs": pairs})
    msg = failed_msg(res)
    assert "pair 1 (%s, %s)" % (C, D) in msg and "CUDA_VISIBLE_DEVICES=0,1" in msg, msg
    assert "CUDA saw %s, %s; missing %s, %s; not of the pair %s, %s" % (A, B, C, D, A, B) in msg, msg
    assert "0=%s" % A in msg and "3=%s" % D in msg and "bus 00000000:04:00.0" in msg, msg


@pytest.mark.parametrize("mode,swap,words", [
    ("swapped", (B, OTHER), ["CUDA saw %s, %s; missing %s; not of the pair %s" % (A, OTHER, B, OTHER)]),
    ("broken", ("", ""), ["failed (rc=125)", "could not select device driver", "--set-as-default"]),
])
def test_a_container_whose_cuda_does_not_see_exactly_its_pair_fails_naming_what_differs(tmp_path, mode, swap, words):
    res, _calls = play(tmp_path, "gpu_check", mode=mode, swap=swap)
    msg = failed_msg(res)
    assert "localhost: pair 0" in msg and "privileged" in msg and all(w in msg for w in words), msg


def test_docker_without_the_nvidia_runtime_as_its_default_is_refused_before_anything(tmp_path):
    # installed but not the default: GPUStack names no runtime, so its containers would get runc and no GPU
    res, calls = play(tmp_path, "runtime", info='{"DefaultRuntime": "runc", "Runtimes": {"runc": {}, "nvidia": {}}}')
    msg = failed_msg(res)
    assert "runs containers with the runc runtime (nvidia is installed but not the default)" in msg, msg
    assert "nvidia-ctk runtime configure --runtime=docker --set-as-default" in msg
    assert [c[0] for c in calls] == ["info"]
    res, _calls = play(tmp_path, "runtime", info='{"DefaultRuntime": "nvidia", "Runtimes": {"nvidia": {}}}')
    assert res.rc == 0, res.stdout[-3000:]
    # the CDI policy with a Docker that reads no CDI spec
    res, _calls = play(tmp_path, "runtime", info='{"DefaultRuntime": "runc", "CDISpecDirs": []}',
                       pairserve_gpustack_worker_env={"GPUSTACK_RUNTIME_DOCKER_RESOURCE_INJECTION_POLICY": "CDI"})
    assert "reads no CDI spec directory" in failed_msg(res)


def test_a_runtime_whose_socket_unit_is_missing_is_refused_before_anything(tmp_path):
    # a unit name no machine has: refused by the read-only runtime checks (preflight), naming the unit and the way out
    res, calls = play(tmp_path, "runtime", pairserve_runner_endpoint={
        "deployer": "Docker", "socket": "/var/run/docker.sock", "unit": "pairserve-test-absent.socket", "default": True,
        "cli_env": "DOCKER_HOST", "cli_host": "unix:///var/run/docker.sock", "worker_host": "http+unix:///var/run/docker.sock"})
    msg = failed_msg(res)
    assert "localhost: GPUStack's worker will deploy through Docker at /var/run/docker.sock" in msg, msg
    assert "pairserve-test-absent.socket" in msg and "pairserve_runner_runtime_host" in msg, msg
    assert [c[0] for c in calls] == ["info"]
