# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.runtime_endpoint and pairserve.llm.worker_runtime_env (documented beside this file): how a
GPUStack worker reaches its container runtime, from plugins/module_utils/container_runtime.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import container_runtime


def runtime_endpoint(runtime, host=""):
    """The engine endpoint of pairserve_runner_runtime (and pairserve_runner_runtime_host)."""
    try:
        return container_runtime.endpoint(runtime, host)
    except container_runtime.ContainerRuntimeError as err:
        raise AnsibleFilterError("pairserve.llm.runtime_endpoint: %s" % err) from err


def worker_runtime_env(runtime, host="", pause_image="", health_image="", request_timeout=None):
    """The gpustack-runtime settings the collection gives every worker."""
    try:
        return container_runtime.worker_env(runtime, host, pause_image, health_image, request_timeout)
    except (container_runtime.ContainerRuntimeError, TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.worker_runtime_env: %s" % err) from err


def runtime_image_ref(image, digest=""):
    """name@digest of a pinned image."""
    return container_runtime.image_reference(image, digest)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm container runtime filters."""

    def filters(self):
        return {"runtime_endpoint": runtime_endpoint, "worker_runtime_env": worker_runtime_env,
                "runtime_image_ref": runtime_image_ref}
