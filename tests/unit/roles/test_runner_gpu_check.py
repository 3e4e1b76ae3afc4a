"""The runner image role's GPU container check (tasks/gpu_check.yml) and Docker's hand-over check (tasks/runtime.yml)
through Ansible, with a `docker` stand-in on PATH: what the container is asked to run and with which GPUs, and what
passes and fails for what the container reports seeing. (The lab runs the same check with podman, CDI and the lab's
nvidia-smi stand-in: molecule/default/tests/test_gpu_container_check.py.)"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lab.ansible_runner import run_local_play

A, B = "GPU-5080a000-0000-4000-8000-000000000001", "GPU-5080a000-0000-4000-8000-000000000002"
OTHER = "GPU-4070b000-0000-4000-8000-000000000009"
IMAGE = "docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:" + "1" * 64

# `docker run` as the NVIDIA runtime and nvidia-smi would answer: the GPUs named by NVIDIA_VISIBLE_DEVICES or by CDI
# (--device=nvidia.com/gpu=<UUID>), one per line; MODE changes what the container sees.
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
for a in "$@"; do
  case "$a" in
    --env=NVIDIA_VISIBLE_DEVICES=*) echo "${a#*=*=}" | tr ',' '\n' ;;
    --device=nvidia.com/gpu=*) echo "${a#*=*=}" ;;
  esac
done | case "$MODE" in
  first) head -n 1 ;;
  extra) cat; echo "GPU-4070b000-0000-4000-8000-000000000009" ;;
  *) cat ;;
esac
'''


def play(tmp_path: Path, tasks_from: str, mode="ok", info='{"DefaultRuntime": "nvidia"}', **more):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "docker"
    shim.write_text(SHIM)
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.log"
    calls.write_text("")
    variables = {"pairserve_runner_runtime": "docker", "pairserve_runner_image_ref": IMAGE,
                 "pairserve_gpu": {"pairs": [{"index": 0, "uuids": [A, B]}]}, **more}
    res = run_local_play(tmp_path, "GPU check", [{"name": "Check", "ansible.builtin.include_role": {
        "name": "pairserve.llm.runner_image", "tasks_from": tasks_from}}], variables,
        env={"PATH": "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]), "CALLS": str(calls), "MODE": mode,
             "INFO": info})
    return res, [line.split() for line in calls.read_text().splitlines()]


def failed_msg(res):
    """The message of the failed task (of its failed item, for a loop)."""
    failed = [r for r in res.results if r.get("_status") == "failed"]
    assert res.rc != 0 and failed, res.stdout[-3000:]
    items = [i for i in failed[-1].get("results") or [] if i.get("failed")]
    return " ".join(str((items[0] if items else failed[-1]).get("msg", "")).split())


def test_the_pair_is_handed_over_as_gpustack_does_and_seen_whole(tmp_path):
    res, calls = play(tmp_path, "gpu_check")
    assert res.rc == 0, res.stdout[-3000:]
    run, = [c for c in calls if c[0] == "run"]
    # Docker's default road: NVIDIA_VISIBLE_DEVICES by UUID, the pinned image by digest, never pulled, no network
    assert "--env=NVIDIA_VISIBLE_DEVICES=%s,%s" % (A, B) in run and "--pull=never" in run and "--rm" in run
    assert "--network=none" in run and run[run.index("--entrypoint") + 1] == "nvidia-smi"
    assert run[run.index(IMAGE) + 1:] == ["--query-gpu=uuid", "--format=csv,noheader"]


def test_the_cdi_policy_asks_for_each_gpu_by_its_cdi_name(tmp_path):
    res, calls = play(tmp_path, "gpu_check",
                      pairserve_gpustack_worker_env={"GPUSTACK_RUNTIME_DOCKER_RESOURCE_INJECTION_POLICY": "cdi"})
    assert res.rc == 0, res.stdout[-3000:]
    run, = [c for c in calls if c[0] == "run"]
    assert "--device=nvidia.com/gpu=%s" % A in run and "--device=nvidia.com/gpu=%s" % B in run
    assert not [a for a in run if "NVIDIA_VISIBLE_DEVICES" in a]


@pytest.mark.parametrize("mode,words", [
    ("first", ["the container saw %s; missing %s" % (A, B)]),
    ("extra", ["not asked for %s" % OTHER]),
    ("broken", ["failed (rc=125)", "could not select device driver", "--set-as-default"]),
])
def test_a_container_that_does_not_see_exactly_its_pair_fails_naming_what_differs(tmp_path, mode, words):
    res, _calls = play(tmp_path, "gpu_check", mode=mode)
    msg = failed_msg(res)
    assert "did not give pair 0 of localhost its GPUs" in msg and all(w in msg for w in words), msg


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
