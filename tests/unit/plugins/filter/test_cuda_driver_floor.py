"""The driver floor of a runner image (module_utils/cuda.py, filter pairserve.llm.cuda_driver_floor): read from the
CUDA version its tag names, overridden by pairserve_preflight_driver_min_for_runner, refused when neither says."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import cuda
from support.ansible_runner import run_local_play


@pytest.mark.parametrize("image,version", [
    ("gpustack/runner:cuda12.9-vllm0.25.1", "12.9"),
    ("registry.example/mirror/gpustack/runner:cuda13.0-vllm0.27.1", "13.0"),
    ("gpustack/runner:cuda12.8-vllm0.25.1@sha256:" + "0" * 64, "12.8"),
    ("127.0.0.1:5000/lab/vllm-cpu:0.25.1", None),
    ("registry.cuda12.9.example/runner:v0.25.1", None),  # a CUDA-looking host is not the tag
    ("gpustack/runner", None),
])
def test_the_cuda_version_is_read_from_the_tag_only(image, version):
    assert cuda.cuda_of_image(image) == version


def test_each_known_cuda_has_its_toolkits_driver_and_newer_cuda_needs_a_newer_driver():
    assert cuda.driver_floor("gpustack/runner:cuda12.9-vllm0.25.1")["driver"] == "575.51.03"
    assert cuda.driver_floor("gpustack/runner:cuda13.0-vllm0.27.1")["driver"] == "580.65.06"
    ordered = sorted(cuda.DRIVER_FLOOR, key=lambda v: tuple(map(int, v.split("."))))
    drivers = [tuple(map(int, cuda.DRIVER_FLOOR[v].split("."))) for v in ordered]
    assert drivers == sorted(drivers) and len(set(drivers)) == len(drivers)


def test_an_override_wins_and_is_checked():
    got = cuda.driver_floor("127.0.0.1:5000/lab/vllm-cpu:0.25.1", "575.51")
    assert got == {"cuda": None, "driver": "575.51", "source": "pairserve_preflight_driver_min_for_runner"}
    with pytest.raises(cuda.CudaError, match="^pairserve_preflight_driver_min_for_runner: 'latest'"):
        cuda.driver_floor("gpustack/runner:cuda12.9-vllm0.25.1", "latest")


def test_no_cuda_in_the_tag_or_an_unknown_one_is_refused_naming_both_variables():
    with pytest.raises(cuda.CudaError, match="names no CUDA version.*pairserve_preflight_driver_min_for_runner"):
        cuda.driver_floor("registry.example/vllm:0.25.1")
    with pytest.raises(cuda.CudaError, match="CUDA 11.8, whose driver floor.*pairserve_preflight_driver_min_for_runner"):
        cuda.driver_floor("gpustack/runner:cuda11.8-vllm0.25.1")


def test_the_filter_runs_in_a_play(tmp_path):
    by_task = run_local_play(tmp_path, "Driver floor", [
        {"name": "Floor", "ansible.builtin.set_fact": {
            "got": "{{ 'gpustack/runner:cuda12.9-vllm0.25.1' | pairserve.llm.cuda_driver_floor }}"}},
        {"name": "Refused", "ansible.builtin.set_fact": {
            "bad": "{{ 'registry.example/vllm:0.25.1' | pairserve.llm.cuda_driver_floor('') }}"},
         "ignore_errors": True},
    ]).by_task
    assert by_task["Floor"]["ansible_facts"]["got"]["driver"] == "575.51.03"
    assert by_task["Refused"]["_status"] == "failed" and "names no CUDA version" in by_task["Refused"]["msg"]


def _driver_check(tmp_path, driver, image, override=""):
    return run_local_play(
        tmp_path, "Driver check",
        [{"name": "Check", "ansible.builtin.include_role": {"name": "pairserve.llm.preflight", "tasks_from": "driver"}}],
        {"pairserve_runner_image": image, "pairserve_preflight_driver_min_for_runner": override,
         "pairserve_gpu": {"driver_version": driver,
                           "pairs": [{"compute_capability": "8.9"}, {"compute_capability": "12.0"}]}})


def test_preflight_holds_the_driver_to_the_images_cuda(tmp_path):
    assert _driver_check(tmp_path, "575.51.03", "docker.io/gpustack/runner:cuda12.9-vllm0.25.1").rc == 0
    # The same driver is too old for a CUDA 13.0 runner: the message names both floors' source and the branch.
    res = _driver_check(tmp_path, "575.51.03", "docker.io/gpustack/runner:cuda13.0-vllm0.27.1")
    failed = [r for r in res.results if r.get("_status") == "failed"]
    assert res.rc != 0 and failed, res.stdout[-3000:]
    msg = " ".join(failed[0]["msg"].split())
    assert "runs NVIDIA driver 575.51.03" in msg and "need 580.65.06 or newer" in msg, msg
    assert "from CUDA 13.0 of docker.io/gpustack/runner:cuda13.0-vllm0.27.1" in msg and "R580" in msg, msg
    # An image whose tag names no CUDA: refused, naming the variable to set; with it set, that floor counts.
    res = _driver_check(tmp_path, "580.95.05", "registry.example/vllm:0.25.1")
    assert res.rc != 0 and "pairserve_preflight_driver_min_for_runner" in res.stdout, res.stdout[-3000:]
    assert _driver_check(tmp_path, "580.95.05", "registry.example/vllm:0.25.1", "580.65.06").rc == 0
    assert _driver_check(tmp_path, "580.95.05", "registry.example/vllm:0.25.1", "590.10").rc != 0
