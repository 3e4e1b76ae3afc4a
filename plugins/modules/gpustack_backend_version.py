#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Register a runner image as a user-defined version of a GPUStack built-in backend."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_backend_version
short_description: Run a chosen runner image with GPUStack's built-in vLLM backend, through a backend version
version_added: 0.1.0
description:
  - Registers O(image_name) as a user-defined version of a GPUStack built-in backend (C(vLLM) by default), named
    C(<backend_version>-<12 hex>-custom), and returns that name as RV(version). A model registered with
    M(pairserve.llm.gpustack_model) and that O(backend_version) runs exactly this image, while GPUStack still builds
    the C(vllm serve) command, its environment and its readiness check itself, as for its catalogue versions.
  - Why not the model's own C(image_name) - GPUStack 2.2.3 sets C(image_name) to null on every update of a model whose
    backend is not C(Custom) (its model update handler). A replica pinned that way falls back to GPUStack's catalogue
    image at its first change (a new argument, a replica count set by the controller). A backend version is not
    touched by model updates.
  - The 12 hex are the start of the image's sha256 digest when O(image_name) ends in C(@sha256:<64 hex>), otherwise of
    the sha256 of the reference. Another image is another version name, so a model moved to it is rolled out, and a
    model rolled back still finds its old version with its old image.
  - Only the user-defined versions of the backend are written; the backend's other fields are sent back as read.
    GPUStack has no compare-and-set for that list, so runs of this module on one host (the replica role delegates
    them all to the GPUStack server node) take turns through a host-local lock (C(flock) under C(/run/lock)), and a
    writer elsewhere is caught by reading the list again after writing; the write is repeated (up to O(retries)
    times) until the version is there.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  backend:
    description:
      - The built-in backend the version belongs to.
    type: str
    default: vLLM
  backend_version:
    description:
      - The upstream version the image serves, for example V(0.25.1) (the C(pairserve_vllm_version) pin). GPUStack
        compares the start of the version name with its version-gated arguments.
    type: str
    required: true
  image_name:
    description:
      - The runner image, best pinned by digest (C(registry/name@sha256:...) or C(registry/name:tag@sha256:...)). The
        worker's container runtime must be able to get it; the role runner_image makes it present first.
    type: str
    required: true
  framework:
    description:
      - The GPU type of the workers that may run this version (GPUStack's C(custom_framework)). The scheduler keeps only
        workers whose GPUs are of this type. V(cpu) admits every worker.
    type: str
    choices: [cuda, rocm, cann, cpu]
    default: cuda
  env:
    description:
      - Environment of every instance of this version, under the model's own C(env) (the model's wins). Not managed
        when omitted.
    type: dict
  state:
    description:
      - V(absent) removes the version named by O(backend_version) and O(image_name). GPUStack 2.2.3 does not refuse
        to remove a version that models still use, so this module does - it fails naming those models.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - pairserve.llm.gpustack
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - Needs an admin API key or the admin password (inference backends are a platform setting).
seealso:
  - module: pairserve.llm.gpustack_model
  - module: pairserve.llm.runner_image
"""

EXAMPLES = r"""
- name: Make the digest-pinned runner image a version of GPUStack's vLLM backend
  pairserve.llm.gpustack_backend_version:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    backend_version: 0.25.1
    image_name: docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  register: runner_version

- name: Register the replica on that version
  pairserve.llm.gpustack_model:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: qwen-node-a
    cluster: pairserve
    local_path: /var/lib/pairserve/models/qwen/snapshot
    backend: vLLM
    backend_version: "{{ runner_version.version }}"
    gpu_ids: [node-a:cuda:0, node-a:cuda:1]
"""

RETURN = r"""
version:
  description: The version name to give to M(pairserve.llm.gpustack_model) as O(pairserve.llm.gpustack_model#module:backend_version).
  returned: always
  type: str
  sample: 0.25.1-0123456789ab-custom
config:
  description: The version's configuration as GPUStack stores it (desired, in check mode). Empty after O(state=absent).
  returned: always
  type: dict
  sample: {"image_name": "docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:0123...", "custom_framework": "cuda"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.host_lock import HostLockTimeout, host_lock

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GPUSTACK_REQUIRED_ONE_OF,
    GpuStackClient,
    GpuStackError,
    backend_row,
    backend_versions,
    fail,
    field_diff,
    gpustack_argument_spec,
    pinned_backend_version,
    present_diff,
    absent_diff,
    put_backend_versions,
)


def models_using(client, backend, version):
    return sorted(m.get("name") for m in client.list("/v2/models")
                  if m.get("backend") == backend and m.get("backend_version") == version)


def main():
    spec = gpustack_argument_spec()
    spec.update(
        backend={"type": "str", "default": "vLLM"},
        backend_version={"type": "str", "required": True},
        image_name={"type": "str", "required": True},
        framework={"type": "str", "choices": ["cuda", "rocm", "cann", "cpu"], "default": "cuda"},
        env={"type": "dict"},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF)
    p = module.params
    try:
        version = pinned_backend_version(p["backend_version"], p["image_name"])
    except GpuStackError as err:
        module.fail_json(msg="%s (options backend_version and image_name)" % err)
    label = "%s backend version %s" % (p["backend"], version)
    result = {"changed": False, "version": version, "config": {}}

    desired = {"image_name": p["image_name"], "custom_framework": p["framework"]}
    if p["env"] is not None:
        desired["env"] = dict((k, str(v)) for k, v in p["env"].items())

    try:
        client = GpuStackClient.from_module(module)
        # One writer at a time on this host: GPUStack replaces the whole list with each PUT.
        lock_name = "gpustack-backend-versions %s %s" % (p["api_url"], p["backend"])
        with host_lock(lock_name, timeout=p["timeout"] * 4):
            for attempt in range(max(1, p["retries"]) + 1):
                row = backend_row(client, p["backend"])
                if not row.get("is_built_in"):
                    module.fail_json(msg="GPUStack backend %r is not a built-in backend; this module adds image "
                                         "versions to built-in backends (vLLM)" % p["backend"])
                versions = backend_versions(row)
                existing = versions.get(version)
                if p["state"] == "absent":
                    if not existing:
                        module.exit_json(**result)
                    users = models_using(client, p["backend"], version)
                    if users:
                        module.fail_json(msg="%s is used by model(s) %s: move or delete them first (GPUStack "
                                             "would let their next instance fall back to its catalogue image)"
                                             % (label, ", ".join(users)))
                    result.update(changed=True, diff=absent_diff(label, existing))
                    if module.check_mode:
                        module.exit_json(**result)
                    versions.pop(version)
                else:
                    changed, before, after = field_diff(desired, existing)
                    if not changed:
                        result["config"] = existing
                        module.exit_json(**result)
                    result.update(changed=True, diff=present_diff(label, changed, before, after, bool(existing)))
                    merged = dict(existing or {}, **desired)
                    if module.check_mode:
                        result["config"] = merged
                        module.exit_json(**result)
                    versions[version] = merged
                put_backend_versions(client, row, versions)
                # Read back: another writer may have replaced the list between our read and our write.
                stored = backend_versions(backend_row(client, p["backend"])).get(version)
                if p["state"] == "absent" and stored is None:
                    module.exit_json(**result)
                if p["state"] == "present" and stored and not field_diff(desired, stored)[0]:
                    result["config"] = stored
                    module.exit_json(**result)
            module.fail_json(msg="%s: another writer kept replacing the backend's versions; %d writes did not "
                                 "stick. Run the task for one host at a time (throttle: 1)" % (label, attempt + 1),
                             **result)
    except HostLockTimeout as err:
        module.fail_json(msg="%s: %s" % (label, err), **result)
    except GpuStackError as err:
        fail(module, err, "cannot manage GPUStack %s" % label)


if __name__ == "__main__":
    main()
