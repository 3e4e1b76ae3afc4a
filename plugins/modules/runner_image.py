#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make sure the GPUStack runner image for the pinned vLLM is present on a GPU node (or gone)."""

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
  - With O(state=absent) the reference O(image) (with O(digest)) is removed from the runtime instead
    (C(image rm) of C(repository@digest), or C(repository:tag) when not pinned); the image data goes when no other
    name holds it. The reference counts as present only where the image's C(RepoDigests) (C(RepoTags)) list it, since
    podman 4 also finds an image by its digest alone, under any name. Nothing is removed in check mode.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  vllm_version:
    description:
      - The pinned vLLM version (C(backend_version) of the replicas). Required with O(state=present) unless O(image)
        is given.
    type: str
  cuda_version:
    description:
      - The node's CUDA driver version, as NVML reports it (V(13000)) or dotted (V(13.0)); C(pairserve_gpu.cuda_driver_version).
      - Required with O(state=present) unless O(image) is given.
    type: str
  image:
    description:
      - Use this image instead of resolving it from the catalogue (a mirror, or the lab's locally built CPU image).
      - Any other image the worker needs on the node goes the same way, for example gpustack-runtime's pause and
        health images (role P(pairserve.llm.runner_image#role) pulls those pinned by digest).
      - Required with O(state=absent), which never reads the catalogue.
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
  state:
    description:
      - V(present) pulls the image when it is missing; V(absent) removes the reference from the runtime.
      - A runtime that still has a container of the image refuses the removal, and the module fails with its message.
    type: str
    choices: [present, absent]
    default: present
notes:
  - Run it with the Python of GPUStack's venv (C(ansible_python_interpreter)) unless O(image) is set, so that the
    catalogue is the one of the installed GPUStack release. O(state=absent) needs no catalogue, so any Python runs it.
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

- name: Remove the runner image the replicas ran
  pairserve.llm.runner_image:
    image: gpustack/runner:cuda13.0-vllm0.25.1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    state: absent
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
removed:
  description: Whether this run removed the image reference (or would have, in check mode).
  type: bool
  returned: always
"""

import json

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


def familiar(name):
    """A reference as Docker shows it: docker.io/library/x and docker.io/x are x (podman shows the full name)."""
    for prefix in ("docker.io/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name[len("library/"):] if name.startswith("library/") else name


def held_reference(name, digest):
    """(reference, inspect field listing it) of the name the runtime holds: repository@digest when pinned (a tag
    beside a digest is ignored, as the runtimes store it), else repository:tag."""
    repository, slash, last = name.rpartition("/")
    if ":" in last:
        last, dummy, tag = last.partition(":")
    else:
        tag = "latest"
    repository = repository + slash + last
    if digest:
        return "%s@%s" % (repository, digest), "RepoDigests"
    return "%s:%s" % (repository, tag), "RepoTags"


def remove(module, command, name, digest, env, result):
    """state=absent: remove the reference when the runtime holds it under that name, then exit.

    podman 4 finds an image by its digest alone, so an image whose name was removed (or that only another
    repository names) still answers `image inspect repo@digest`: the reference counts only where the image's
    RepoDigests (RepoTags) list it, and its removal then takes away that name (the image goes with its last one).
    """
    reference, field = held_reference(name, digest)
    rc, out, dummy = module.run_command(command + ["image", "inspect", reference], environ_update=env)
    held = []
    if rc == 0:
        try:
            held = [familiar(n) for image in json.loads(out) for n in (image.get(field) or [])]
        except (ValueError, TypeError, AttributeError):
            module.fail_json(msg="%s image inspect %s printed no image description: %s"
                                 % (module.params["runtime"], reference, out.strip()[:300]), **result)
    result["present"] = familiar(reference) in held
    if result["present"]:
        result.update(changed=True, removed=True, diff=dict(before="image %s\n" % reference, after=""))
        if not module.check_mode:
            rc, out, err = module.run_command(command + ["image", "rm", reference], environ_update=env)
            if rc != 0:
                module.fail_json(msg="removing runner image %s failed: %s" % (reference, (err or out).strip()),
                                 **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vllm_version=dict(type="str"),
            cuda_version=dict(type="str"),
            image=dict(type="str"),
            digest=dict(type="str"),
            runtime=dict(type="str", choices=["docker", "podman"], default="docker"),
            runtime_host=dict(type="str"),
            pull=dict(type="bool", default=True),
            platform=dict(type="str", default="linux/amd64"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        required_if=[("state", "absent", ["image"])],
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, pulled=False, removed=False)
    digest = params["digest"]
    if digest and not (digest.startswith("sha256:") and len(digest) == 71):
        module.fail_json(msg="digest=%r is not an image digest: expected sha256: followed by 64 hex digits "
                             "(docker buildx imagetools inspect IMAGE shows it)" % digest)

    name = params["image"]
    if not name and params["state"] == "present" and not (params["vllm_version"] and params["cuda_version"]):
        module.fail_json(msg="state is present and image is not given: vllm_version and cuda_version are required "
                             "to resolve the runner image from GPUStack's catalogue")
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

    # A node without the runtime holds no image to remove.
    binary = module.get_bin_path(params["runtime"], required=params["state"] == "present")
    if binary is None:
        result["present"] = False
        module.exit_json(**result)
    env = {}
    if params["runtime_host"]:
        env["DOCKER_HOST" if params["runtime"] == "docker" else "CONTAINER_HOST"] = params["runtime_host"]
    remote = ["--remote"] if params["runtime"] == "podman" and params["runtime_host"] else []
    if params["state"] == "absent":
        remove(module, [binary] + remote, name, digest, env, result)
    rc, _out, _err = module.run_command([binary] + remote + ["image", "inspect", reference], environ_update=env)
    result["present"] = rc == 0
    if not result["present"]:
        if not params["pull"]:
            module.fail_json(msg="image %s is not present on this node and pull=false; load it with "
                                 "`%s load` or allow the pull" % (reference, params["runtime"]), **result)
        result.update(changed=True, pulled=True, diff=dict(before="", after="image %s\n" % reference))
        if not module.check_mode:
            rc, out, err = module.run_command([binary] + remote + ["pull", reference], environ_update=env)
            if rc != 0:
                module.fail_json(msg="pulling image %s failed: %s" % (reference, (err or out).strip()),
                                 **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
