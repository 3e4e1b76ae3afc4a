#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make sure the GPUStack runner image for the pinned vLLM is present on a GPU node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: runner_image
short_description: Resolve and pull the GPUStack runner image for a pinned vLLM version
version_added: 0.1.0
description:
  - Resolves the container image GPUStack's worker will start for O(vllm_version) on this node, with the same
    rule as the GPUStack 2.2.3 worker - the newest CUDA runner of that vLLM version not newer than the node's CUDA
    driver version - reading the catalogue of the gpustack-runner package installed beside GPUStack.
  - Fails before anything is registered when the pinned vLLM has no runner image for the node's CUDA version
    (GPUStack itself only fails when the instance starts).
  - Makes sure the image is present in the node's container runtime, pinned by digest when O(digest) is given,
    pulling it when missing. Nothing is pulled in check mode.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  vllm_version:
    description: The pinned vLLM version (C(backend_version) of the replicas).
    type: str
    required: true
  cuda_version:
    description:
      - The node's CUDA driver version, as NVML reports it (V(13000)) or dotted (V(13.0)); C(pairserve_gpu.cuda_driver_version).
    type: str
    required: true
  image:
    description:
      - Use this image instead of resolving it from the catalogue (a mirror, or the lab's locally built CPU image).
    type: str
  digest:
    description:
      - The image digest to pin (V(sha256:...)). The image is used as C(name@digest) and a local image with
        another digest does not count as present.
    type: str
  runtime:
    description: The container runtime GPUStack's worker uses on this node.
    type: str
    choices: [docker, podman]
    default: docker
  runtime_host:
    description:
      - Talk to this runtime endpoint (C(DOCKER_HOST) / C(CONTAINER_HOST)), for example a podman service socket.
    type: str
  pull:
    description: Pull the image when it is missing. With V(false) a missing image fails.
    type: bool
    default: true
  platform:
    description: Platform of the runner image.
    type: str
    default: linux/amd64
notes:
  - Run it with the Python of GPUStack's venv (C(ansible_python_interpreter)) unless O(image) is set, so that the
    catalogue is the one of the installed GPUStack release.
extends_documentation_fragment:
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Pull the runner image of the pinned vLLM
  pairserve.llm.runner_image:
    vllm_version: "{{ pairserve_vllm_version }}"
    cuda_version: "{{ pairserve_gpu.cuda_driver_version }}"
    digest: "{{ pairserve_runner_image_digest | default(omit) }}"
  vars:
    ansible_python_interpreter: /opt/gpustack/current/venv/bin/python
"""

RETURN = r"""
image:
  description: The image reference the replicas run (with C(@digest) when pinned).
  type: str
  returned: always
  sample: gpustack/runner:cuda13.0-vllm0.25.1
cuda:
  description: The CUDA version of the chosen runner.
  type: str
  returned: when resolved from the catalogue
  sample: "13.0"
present:
  description: Whether the image was present before this run.
  type: bool
  returned: always
pulled:
  description: Whether this run pulled the image (or would have, in check mode).
  type: bool
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.runner_catalogue import (
    RunnerCatalogueError,
    select_image,
    split_reference,
)


def catalogue_entries(module):
    """The runner catalogue of the gpustack-runner package installed beside GPUStack."""
    try:
        from gpustack_runner import list_runners  # pylint: disable=import-outside-toplevel
    except ImportError:
        module.fail_json(msg="cannot import gpustack_runner: run this module with the Python of GPUStack's venv "
                             "(set ansible_python_interpreter), or give the image explicitly with image=")
    return list_runners(todict=True)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vllm_version=dict(type="str", required=True),
            cuda_version=dict(type="str", required=True),
            image=dict(type="str"),
            digest=dict(type="str"),
            runtime=dict(type="str", choices=["docker", "podman"], default="docker"),
            runtime_host=dict(type="str"),
            pull=dict(type="bool", default=True),
            platform=dict(type="str", default="linux/amd64"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, pulled=False)
    digest = params["digest"]
    if digest and not (digest.startswith("sha256:") and len(digest) == 71):
        module.fail_json(msg="digest=%r is not an image digest: expected sha256: followed by 64 hex digits "
                             "(docker buildx imagetools inspect IMAGE shows it)" % digest)

    name = params["image"]
    if not name:
        try:
            entry = select_image(catalogue_entries(module), params["vllm_version"], params["cuda_version"],
                                 params["platform"])
        except RunnerCatalogueError as err:
            module.fail_json(msg=str(err))
        name = entry["docker_image"]
        result["cuda"] = entry["backend_version"]
    name, embedded = split_reference(name)
    digest = digest or embedded
    reference = "%s@%s" % (name, digest) if digest else name
    result["image"] = reference

    binary = module.get_bin_path(params["runtime"], required=True)
    env = {}
    if params["runtime_host"]:
        env["DOCKER_HOST" if params["runtime"] == "docker" else "CONTAINER_HOST"] = params["runtime_host"]
    remote = ["--remote"] if params["runtime"] == "podman" and params["runtime_host"] else []
    rc, _out, _err = module.run_command([binary] + remote + ["image", "inspect", reference], environ_update=env)
    result["present"] = rc == 0
    if not result["present"]:
        if not params["pull"]:
            module.fail_json(msg="runner image %s is not present on this node and pull=false; load it with "
                                 "`%s load` or allow the pull" % (reference, params["runtime"]), **result)
        result.update(changed=True, pulled=True, diff=dict(before="", after="image %s\n" % reference))
        if not module.check_mode:
            rc, out, err = module.run_command([binary] + remote + ["pull", reference], environ_update=env)
            if rc != 0:
                module.fail_json(msg="pulling runner image %s failed: %s" % (reference, (err or out).strip()),
                                 **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
