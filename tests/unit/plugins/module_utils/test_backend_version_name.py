"""The name of the backend version that carries a runner image (module_utils/gpustack.pinned_backend_version)."""

from __future__ import annotations

import hashlib

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GpuStackError,
    is_pinned_backend_version,
    pinned_backend_version,
)

DIGEST = "f" * 8 + "0123456789abcdef" * 3 + "01234567"


@pytest.mark.parametrize("image", [
    "docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:" + DIGEST,
    "docker.io/gpustack/runner@sha256:" + DIGEST,
])
def test_a_digest_names_the_version(image):
    assert pinned_backend_version("0.25.1", image) == "0.25.1-ffffffff0123-custom"


def test_a_tag_only_reference_is_hashed_and_each_tag_differs():
    one = pinned_backend_version("0.27.1", "localhost/pairserve-vllm-cpu:0.27.1")
    assert one == "0.27.1-%s-custom" % hashlib.sha256(b"localhost/pairserve-vllm-cpu:0.27.1").hexdigest()[:12]
    assert one != pinned_backend_version("0.27.1", "localhost/pairserve-vllm-cpu:0.27.2")
    assert is_pinned_backend_version(one) and not is_pinned_backend_version("0.25.1")


def test_another_upstream_version_is_another_name_for_the_same_image():
    image = "r/x@sha256:" + DIGEST
    assert pinned_backend_version("0.25.1", image) != pinned_backend_version("0.27.1", image)


@pytest.mark.parametrize("version,image,says", [
    ("", "r/x:1", "not a version"),
    ("latest", "r/x:1", "not a version"),
    ("0.25.1-0123456789ab-custom", "r/x:1", "already ends in"),
    ("0.25.1", "", "not an image reference"),
    ("0.25.1", "r/x :1", "not an image reference"),
])
def test_bad_input_says_what_is_wrong(version, image, says):
    with pytest.raises(GpuStackError, match=says):
        pinned_backend_version(version, image)
