# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which GPUStack runner image serves a pinned vLLM version on a node, decided the way the worker decides.

GPUStack 2.2.3's worker (gpustack/worker/backends/base.py, `_resolve_image`) asks gpustack-runner for the
CUDA runners of `service=vllm, service_version=<pin>` and takes the newest CUDA version that is not newer
than the host's CUDA driver version; when every runner is newer it prefers one of the host's CUDA major.
`select_image` repeats that rule on the catalogue entries, so the collection pulls exactly the image the
worker will start, and can refuse a pin with no image *before* a replica is registered (GPUStack itself
only fails when the instance starts).
"""

from __future__ import annotations


class RunnerCatalogueError(ValueError):
    """A pin the installed gpustack-runner catalogue cannot serve; the message says what to do."""


def version_key(version):
    """'12.9' -> (12, 9); non-numeric parts sort low."""
    key = []
    for part in str(version).split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        key.append(int(digits) if digits else -1)
    return tuple(key)


def cuda_from_driver(value):
    """NVML's CUDA driver version (13000, '13000', '13.0') -> '13.0'."""
    text = str(value).strip()
    if "." in text:
        return ".".join(text.split(".")[:2])
    number = int(text)
    return "%d.%d" % (number // 1000, (number % 1000) // 10)


def select_image(entries, vllm_version, cuda_version, platform="linux/amd64"):
    """Pick the runner entry for (vllm_version, host CUDA) from gpustack-runner catalogue entries.

    `entries` are dicts with backend, backend_version, service, service_version, platform, docker_image,
    deprecated (the shape of gpustack_runner's runner.py.json). Returns the chosen entry.
    """
    cuda = cuda_from_driver(cuda_version)
    vllm = [e for e in entries if e.get("backend") == "cuda" and e.get("service") == "vllm"
            and e.get("platform") == platform and not e.get("backend_variant")]
    offered = sorted({e["service_version"] for e in vllm}, key=version_key)
    matching = [e for e in vllm if e.get("service_version") == vllm_version]
    if not matching:
        raise RunnerCatalogueError(
            "pairserve_vllm_version %s has no GPUStack runner image for %s in the installed gpustack-runner catalogue; "
            "this GPUStack release offers vLLM %s. Pin one of those, or upgrade pairserve_gpustack_version to a "
            "release whose runner catalogue has %s." % (vllm_version, platform, ", ".join(offered) or "none", vllm_version))
    matching.sort(key=lambda e: version_key(e["backend_version"]), reverse=True)
    for entry in matching:
        if version_key(entry["backend_version"]) <= version_key(cuda):
            return entry
    same_major = [e for e in matching if version_key(e["backend_version"])[0] == version_key(cuda)[0]]
    if same_major:
        return same_major[0]
    raise RunnerCatalogueError(
        "vLLM %s runner images need CUDA %s, but this node's driver supports CUDA %s. Upgrade the NVIDIA driver "
        "(the CUDA version is printed by nvidia-smi) or pin a vLLM version with an image for CUDA %s."
        % (vllm_version, " or ".join(e["backend_version"] for e in matching), cuda, cuda))


def split_reference(image):
    """'docker.io/gpustack/runner:tag@sha256:..' -> (name_with_tag, digest or None)."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, digest
    return image, None
