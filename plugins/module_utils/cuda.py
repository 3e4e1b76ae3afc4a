# -*- coding: utf-8 -*-
# Copyright: (c) 2026, pairserve
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA driver a runner image needs, one owner: read from the CUDA version its tag names.

GPUStack's runner images name the CUDA toolkit they are built on in their tag (``gpustack/runner:cuda12.9-vllm0.25.1``).
A container built on CUDA X.Y needs, on the host, at least the driver NVIDIA ships with that toolkit's GA release
(CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions", Linux x86_64). Older drivers may run
some of it through minor version compatibility, but not the kernels vLLM JIT-compiles for new architectures, so
the toolkit's own minimum is the floor.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# CUDA toolkit (major.minor) -> the lowest Linux x86_64 driver of its GA release.
DRIVER_FLOOR = {
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}
# The tag of a runner image: cuda12.9-vllm0.25.1 (a mirror keeps the tag; the registry path may differ).
CUDA_TAG = re.compile(r"(?:^|[:/@-])cuda(\d+)\.(\d+)(?=$|[-_.])")


class CudaError(ValueError):
    """The driver floor cannot be known: ``variable`` is the one to fix, the message names the others that decide."""

    def __init__(self, variable, problem):
        super().__init__("%s: %s" % (variable, problem))
        self.variable, self.problem = variable, problem


def cuda_of_image(image):
    """The CUDA major.minor an image reference's tag names, or None (the last path component's tag only)."""
    if not isinstance(image, str):
        return None
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    tag = name.split(":", 1)[1] if ":" in name else ""
    match = CUDA_TAG.search(tag)
    return "%s.%s" % (match.group(1), match.group(2)) if match else None


def driver_floor(image, override=""):
    """{"cuda", "driver", "source"}: the floor from ``override`` (pairserve_preflight_driver_min_for_runner) when set,
    else from the CUDA version the image's tag names; refused when neither says."""
    if override:
        if not re.match(r"^\d+(\.\d+){1,2}\Z", str(override)):
            raise CudaError("pairserve_preflight_driver_min_for_runner",
                            "%r is not a driver version such as 575.51.03" % (override,))
        return {"cuda": cuda_of_image(image), "driver": str(override),
                "source": "pairserve_preflight_driver_min_for_runner"}
    cuda = cuda_of_image(image)
    if cuda is None:
        raise CudaError("pairserve_runner_image", "%r names no CUDA version in its tag (cudaX.Y, as gpustack/runner "
                        "tags do), so the driver it needs is unknown: set pairserve_preflight_driver_min_for_runner "
                        "to the lowest driver of the CUDA it is built on" % (image,))
    if cuda not in DRIVER_FLOOR:
        raise CudaError("pairserve_runner_image", "%s is built on CUDA %s, whose driver floor the collection does not "
                        "know (it knows %s): set pairserve_preflight_driver_min_for_runner"
                        % (image, cuda, ", ".join(sorted(DRIVER_FLOOR, key=lambda v: tuple(map(int, v.split(".")))))))
    return {"cuda": cuda, "driver": DRIVER_FLOOR[cuda], "source": "CUDA %s of %s" % (cuda, image)}
