"""plugins/module_utils/runner_catalogue.py: GPUStack's worker rule for the runner image of a pinned vLLM on a node's
CUDA driver, on the catalogue entries it must ignore (other platforms, backends, services, variants), the fallback to
the host's CUDA major when every image is newer, an empty catalogue, version ordering and image references.

The seed's catalogue (newest supported image, unknown pin, driver too old) and the runner_image module through
Ansible are in tests/unit/plugins/modules/test_runner_image.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import runner_catalogue as rc


def entry(vllm, cuda, **changes):
    item = {"backend": "cuda", "backend_version": cuda, "service": "vllm", "service_version": vllm,
            "platform": "linux/amd64", "docker_image": "gpustack/runner:cuda%s-vllm%s" % (cuda, vllm), "deprecated": False}
    item.update(changes)
    return item


def test_version_key_is_numeric_and_text_parts_sort_low():
    assert rc.version_key("12.9") == (12, 9) and rc.version_key(13) == (13,)
    assert rc.version_key("12.10") > rc.version_key("12.9")
    assert rc.version_key("12.x") == (12, -1) < rc.version_key("12.0")


@pytest.mark.parametrize("driver, cuda", [(12080, "12.8"), (" 12090 ", "12.9"), (11040, "11.4"), ("13.0.1", "13.0"),
                                          (12000, "12.0"), (12010, "12.1")])
def test_cuda_from_driver(driver, cuda):
    assert rc.cuda_from_driver(driver) == cuda


def test_cuda_from_driver_refuses_text_that_is_no_version():
    with pytest.raises(ValueError):
        rc.cuda_from_driver("unknown")


def test_entries_of_other_platforms_backends_services_and_variants_are_not_chosen():
    catalogue = [entry("0.25.1", "12.9", platform="linux/arm64"), entry("0.25.1", "12.8", backend="rocm"),
                 entry("0.25.1", "12.7", service="sglang"), entry("0.25.1", "12.6", backend_variant="blackwell"),
                 entry("0.25.1", "12.4")]
    assert rc.select_image(catalogue, "0.25.1", "12090")["docker_image"] == "gpustack/runner:cuda12.4-vllm0.25.1"
    arm = rc.select_image(catalogue, "0.25.1", "12090", platform="linux/arm64")
    assert arm["platform"] == "linux/arm64" and arm["backend_version"] == "12.9"


def test_the_newest_image_not_newer_than_the_driver_is_chosen_by_number_not_text():
    catalogue = [entry("0.25.1", "12.4"), entry("0.25.1", "12.10"), entry("0.25.1", "12.9")]
    assert rc.select_image(catalogue, "0.25.1", "12.10")["backend_version"] == "12.10"
    assert rc.select_image(catalogue, "0.25.1", "12.9")["backend_version"] == "12.9"
    assert rc.select_image(catalogue, "0.25.1", "12080")["backend_version"] == "12.4"


def test_every_image_newer_than_the_driver_falls_back_to_the_hosts_cuda_major():
    catalogue = [entry("0.27.1", "13.0"), entry("0.27.1", "12.9"), entry("0.27.1", "12.8")]
    # a 12.6 driver: no image is old enough; the newest one of CUDA 12 is what the worker starts
    assert rc.select_image(catalogue, "0.27.1", "12060")["backend_version"] == "12.9"
    with pytest.raises(rc.RunnerCatalogueError) as info:
        rc.select_image(catalogue, "0.27.1", "11080")
    assert str(info.value) == (
        "vLLM 0.27.1 runner images need CUDA 13.0 or 12.9 or 12.8, but this node's driver supports CUDA 11.8. "
        "Upgrade the NVIDIA driver (the CUDA version is printed by nvidia-smi) or pin a vLLM version with an image "
        "for CUDA 11.8.")


def test_an_empty_catalogue_offers_none_and_is_a_value_error():
    with pytest.raises(ValueError, match=r"this GPUStack release offers vLLM none\. Pin one of those, or upgrade "
                                         r"pairserve_gpustack_version to a release whose runner catalogue has 0\.25\.1"):
        rc.select_image([], "0.25.1", "13000")
    with pytest.raises(rc.RunnerCatalogueError, match="has no GPUStack runner image for linux/arm64"):
        rc.select_image([entry("0.25.1", "12.9")], "0.25.1", "13000", platform="linux/arm64")


@pytest.mark.parametrize("image, parts", [
    ("docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:" + "ab" * 32,
     ("docker.io/gpustack/runner:cuda12.9-vllm0.25.1", "sha256:" + "ab" * 32)),
    ("127.0.0.1:5000/lab/vllm-cpu:0.25.1", ("127.0.0.1:5000/lab/vllm-cpu:0.25.1", None)),
    ("runner@sha256:cd", ("runner", "sha256:cd")),
])
def test_split_reference(image, parts):
    assert rc.split_reference(image) == parts
