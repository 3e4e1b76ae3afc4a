"""Tests of module_utils/cuda.py: where in an image reference the CUDA version is read (the last path component's
tag, cudaX.Y as a whole word), the override's format, and the CudaError each refusal raises. The filter
pairserve.llm.cuda_driver_floor and the preflight driver check are tested in tests/unit/plugins/filter/."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import cuda


@pytest.mark.parametrize("image,version", [
    ("localhost:5000/gpustack/runner:cuda12.4-vllm0.25.1", "12.4"),  # a registry port is not the tag
    ("runner:v0.25.1-cuda12.6", "12.6"),  # after a dash, at the end
    ("runner:cuda12.9.1-vllm0.25.1", "12.9"),  # a patch level: major.minor
    ("runner:cuda12.9_vllm", "12.9"),
    ("runner:cuda12", None),  # no minor
    ("runner:xcuda12.9", None),  # not a word of its own
    ("runner:cuda12.9x", None),
    ("runner:CUDA12.9", None),  # gpustack/runner tags are lower case
    ("cuda12.9/runner:v1", None),  # in the path, not the tag
    ("runner@sha256:cuda12.9", None),  # a digest is no tag
    ("", None), (None, None), (12.9, None),
])
def test_the_cuda_version_is_a_word_of_the_last_components_tag(image, version):
    assert cuda.cuda_of_image(image) == version


def test_a_known_cuda_gives_its_floor_and_says_where_it_came_from():
    assert cuda.driver_floor("docker.io/gpustack/runner:cuda12.8-vllm0.25.1") == {
        "cuda": "12.8", "driver": "570.26", "source": "CUDA 12.8 of docker.io/gpustack/runner:cuda12.8-vllm0.25.1"}


@pytest.mark.parametrize("override", ["575", "575.51.03.1", "v575.51", "575.51 ", "latest", "575.", ".51", "575.51.03\n"])
def test_an_override_that_is_not_a_two_or_three_part_version_is_refused(override):
    with pytest.raises(cuda.CudaError) as info:
        cuda.driver_floor("gpustack/runner:cuda12.9-vllm0.25.1", override)
    assert info.value.variable == "pairserve_preflight_driver_min_for_runner"
    assert info.value.problem == "%r is not a driver version such as 575.51.03" % (override,)
    assert str(info.value) == "pairserve_preflight_driver_min_for_runner: " + info.value.problem


def test_an_override_wins_over_the_tag_and_keeps_the_cuda_it_names():
    got = cuda.driver_floor("gpustack/runner:cuda13.0-vllm0.27.1", "580.95.05")
    assert got == {"cuda": "13.0", "driver": "580.95.05", "source": "pairserve_preflight_driver_min_for_runner"}
    # an empty or None override is no override
    assert cuda.driver_floor("gpustack/runner:cuda13.0-vllm0.27.1", None)["driver"] == "580.65.06"


def test_an_image_without_cuda_in_its_tag_is_refused_on_the_image_variable():
    with pytest.raises(cuda.CudaError) as info:
        cuda.driver_floor(None)
    assert info.value.variable == "pairserve_runner_image"
    assert info.value.problem.startswith("None names no CUDA version in its tag (cudaX.Y, as gpustack/runner tags do)")
    assert isinstance(info.value, ValueError)


def test_an_unknown_cuda_lists_the_known_ones_in_version_order():
    with pytest.raises(cuda.CudaError) as info:
        cuda.driver_floor("gpustack/runner:cuda12.7-vllm0.25.1")
    known = "12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6, 12.8, 12.9, 13.0"
    assert info.value.problem == (
        "gpustack/runner:cuda12.7-vllm0.25.1 is built on CUDA 12.7, whose driver floor the collection does not know "
        "(it knows %s): set pairserve_preflight_driver_min_for_runner" % known)
    assert info.value.variable == "pairserve_runner_image"


def test_every_floor_is_a_driver_version_the_override_rule_accepts():
    for version, driver in cuda.DRIVER_FLOOR.items():
        assert cuda.driver_floor("", driver)["driver"] == driver
        assert cuda.cuda_of_image("runner:cuda%s-vllm0.25.1" % version) == version
