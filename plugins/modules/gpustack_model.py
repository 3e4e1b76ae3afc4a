#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Upsert one GPUStack model (a GPU-pinned replica) from its full desired spec, and roll changes out."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_model
short_description: Deploy a GPU-pinned model in GPUStack from a full desired spec and roll out changes
version_added: 0.1.0
description:
  - Creates or updates a GPUStack model by name (C(/v2/models)) so that it matches the given spec, field by field,
    and deletes it with O(state=absent).
  - Serves a checkpoint that is already on the worker (C(source=local_path)); GPUStack has no revision field,
    so the collection downloads the pinned revision itself and registers its path.
  - 'Always sends the settings the pairserve service depends on: C(distributed_inference_across_workers: false)
    (a replica never spans two machines), C(restart_on_error: true), and an environment with
    C(CUDA_DEVICE_ORDER=PCI_BUS_ID) (NVML and the pinning count GPUs in PCI bus order, CUDA by default fastest
    first, which puts a replica on the wrong cards of a mixed host) and C(PYTORCH_ALLOC_CONF=expandable_segments:True)
    (fragmentation cost the seed deployment its last MiB of headroom), merged with O(env), which may not change them.'
  - 'The environment also carries C(VLLM_CACHE_ROOT=<parent of local_path>/.vllm-cache), where vLLM keeps its compile
    cache (torch.compile artefacts, CUDA graph capture). GPUStack would point it at its worker data dir, which it does
    not mount into the replica container when the worker runs on the host: the cache was lost at every restart,
    rollout and wake, and each start compiled again. The parent of O(local_path) is the one directory GPUStack mounts
    (at the same path), so there the cache survives. O(env) may set C(VLLM_CACHE_ROOT) to another path; it wins.'
  - GPUStack applies an updated spec only to instances it creates afterwards. With O(rollout=true) the module deletes
    the model's instances, one at a time, when the spec changed, and GPUStack recreates them with the new spec.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  name:
    description:
      - Model name. Clients reach it through a route (see M(pairserve.llm.gpustack_route)).
    type: str
    required: true
  state:
    description:
      - Whether the model should exist. V(absent) deletes the model and its instances.
    type: str
    choices: [present, absent]
    default: present
  cluster:
    description:
      - Cluster id or name. Required when O(gpu_ids) pins GPUs, because worker names are per cluster.
    type: str
  local_path:
    description:
      - Path of the checkpoint on the worker (and inside the runner container). Required with O(state=present).
    type: path
  backend:
    description:
      - V(vLLM) runs GPUStack's vLLM runner image selected by O(backend_version).
      - V(Custom) runs O(image_name) with O(run_command) (for example the CPU build of vLLM in the lab).
    type: str
    choices: [vLLM, Custom]
    default: vLLM
  backend_version:
    description:
      - Backend version, for example V(0.25.1). GPUStack picks the runner image from it; an unknown version fails only when an instance starts.
      - A version ending in C(-custom) (made by M(pairserve.llm.gpustack_backend_version), carrying a runner image) must
        exist in GPUStack; the module checks that before it changes anything.
    type: str
  image_name:
    description:
      - Container image the instances run. Required for O(backend=Custom).
      - Not accepted with O(backend=vLLM) - GPUStack 2.2.3 sets a vLLM-backend model's C(image_name) to null on its
        every update, so a pinned image would be lost at the first change. Register the image as a backend version with
        M(pairserve.llm.gpustack_backend_version) and give its RV(pairserve.llm.gpustack_backend_version#module:version)
        as O(backend_version).
    type: str
  run_command:
    description:
      - Command line for O(backend=Custom); GPUStack expands C({{port}}), C({{model_path}}), C({{model_name}}) and C({{VAR}}) from O(env).
    type: str
  backend_parameters:
    description:
      - Backend arguments as an argv list, for example the output of the C(pairserve.llm.vllm_args) filter.
    type: list
    elements: str
    default: []
  gpu_ids:
    description:
      - GPUs to pin the model to, as C(<worker name>:cuda:<index>), for example V([node-a:cuda:0, node-a:cuda:1]).
      - The module checks that each worker exists in O(cluster) and has that GPU before it changes anything.
    type: list
    elements: str
  gpus_per_replica:
    description:
      - GPUs each replica uses (the tensor-parallel size). Defaults to the number of O(gpu_ids) divided by O(replicas).
    type: int
  replicas:
    description:
      - Number of replicas.
    type: int
    default: 1
  env:
    description:
      - Extra environment of the backend, merged with the defaults named in the description.
      - It may add variables and repeat a default with the same value, but not change a default
        (C(CUDA_DEVICE_ORDER), C(PYTORCH_ALLOC_CONF)); that is refused, naming the variable, before anything changes.
      - C(VLLM_CACHE_ROOT) is the exception - a location, not a setting that changes what the replica serves. Set
        here, it replaces C(<parent of local_path>/.vllm-cache); the module warns when the path lies outside the
        parent of O(local_path), the one directory the replica's container shares with the node, where the cache
        would not survive a restart.
    type: dict
    default: {}
  restart_on_error:
    description:
      - Let GPUStack restart an instance that failed.
    type: bool
    default: true
  description:
    description:
      - Free text shown in the GPUStack UI. Not managed when omitted.
    type: str
  rollout:
    description:
      - When the spec of an existing model changed, delete its instances so that GPUStack recreates them with the
        new spec. One instance at a time; before the next one is deleted, its replacement must be V(running).
      - A change of O(replicas) or O(description) alone rolls nothing; GPUStack scales the instances itself.
    type: bool
    default: true
  rollout_timeout:
    description:
      - Seconds to wait for each replacement instance to reach V(running) when more instances remain to roll.
    type: int
    default: 900
  restart:
    description:
      - Roll the model's instances out although its spec is unchanged, one at a time as O(rollout) does, because the files
        under O(local_path) changed (a patched tokenizer, a checkpoint exported again), which GPUStack cannot see,
        and vLLM reads its tokenizer and processor only when it starts.
      - A model that does not exist yet, or has no instance, has nothing to restart; a model whose spec changed is
        rolled out by O(rollout) anyway.
      - Drain the replica from its routes first (the route weights of role pairserve.llm.maintenance), since a deleted
        instance stops serving at once.
    type: bool
    default: false
extends_documentation_fragment:
  - pairserve.llm.gpustack
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Node A replica, TP=2 on the 5080 pair, multimodal profile
  pairserve.llm.gpustack_model:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: qwen-node-a
    cluster: pairserve
    local_path: /var/lib/pairserve/models/qwen/snapshot
    backend: vLLM
    # From pairserve.llm.gpustack_backend_version: the digest-pinned runner image as a version of the vLLM backend.
    backend_version: 0.25.1-0123456789ab-custom
    gpu_ids: [node-a:cuda:0, node-a:cuda:1]
    backend_parameters: "{{ pairserve_profile_multimodal | pairserve.llm.vllm_args(version='0.25.1') }}"

- name: Lab replica on the CPU build of vLLM
  pairserve.llm.gpustack_model:
    api_url: http://lab:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: tiny-node-a
    cluster: lab
    local_path: /srv/tiny
    backend: Custom
    image_name: localhost/pairserve/vllm-cpu:0.27.1
    run_command: python -m vllm.entrypoints.openai.api_server --model {{ '{{model_path}}' }} --port {{ '{{port}}' }}
    gpu_ids: [node-a:cuda:0]
    env:
      GPUSTACK_MODEL_HEALTH_CHECK_PATH: /v1/models
"""

RETURN = r"""
model:
  description: The model as GPUStack reports it after the change (in check mode, the desired spec). Empty after O(state=absent).
  returned: always
  type: dict
  sample: {"id": 7, "name": "qwen-node-a", "replicas": 1, "backend": "vLLM", "backend_version": "0.25.1"}
restarted:
  description: Whether the instances were rolled out for O(restart), the spec being unchanged (in check mode, would be).
  returned: always
  type: bool
  sample: false
changed_fields:
  description: Managed fields that differed from the server.
  returned: always
  type: list
  elements: str
  sample: [backend_parameters]
rolled_out:
  description: Names of the instances deleted so that GPUStack recreates them with the new spec (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [qwen-node-a-x7Tz]
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GPUSTACK_REQUIRED_ONE_OF,
    GpuStackClient,
    BACKEND_VERSION_SUFFIX,
    GpuStackError,
    backend_row,
    backend_versions,
    ensure_absent,
    fail,
    field_diff,
    gpustack_argument_spec,
    path_id,
    present_diff,
    replica_env,
    seed_env_conflicts,
    vllm_cache_root_outside_mount,
)

# Fields GPUStack applies without new instances: a replica count change is a scale, not a rollout.
NO_ROLLOUT_FIELDS = frozenset(("replicas", "description"))


def parse_gpu_id(gpu_id):
    """('node-a', 'cuda', 0) from 'node-a:cuda:0'; None when malformed. Worker names may contain ':'."""
    parts = gpu_id.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[1] or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])


def desired_spec(p, cluster_id):
    spec = {
        "name": p["name"],
        "source": "local_path",
        "local_path": p["local_path"],
        "cluster_id": cluster_id,
        "replicas": p["replicas"],
        "backend": p["backend"],
        "backend_version": p["backend_version"],
        "backend_parameters": list(p["backend_parameters"]),
        # The seed's env, VLLM_CACHE_ROOT in the directory GPUStack mounts (module_utils/gpustack.py says why), the user's.
        "env": replica_env(p["local_path"], p["env"]),
        "restart_on_error": p["restart_on_error"],
        # A replica never spans machines here; GPUStack must also not decide to do so on its own.
        "distributed_inference_across_workers": False,
        "description": p["description"],
    }
    if p["image_name"] or p["backend"] == "Custom":
        spec["image_name"] = p["image_name"]
    if p["backend"] == "Custom":
        spec["run_command"] = p["run_command"]
    if p["gpu_ids"]:
        per_replica = p["gpus_per_replica"] or max(1, len(p["gpu_ids"]) // max(1, p["replicas"]))
        spec["gpu_selector"] = {"gpu_ids": list(p["gpu_ids"]), "gpus_per_replica": per_replica}
    return spec


def precheck_backend_version(module, client, p):
    """Fail before any change when a user-defined version (one carrying an image) does not exist: GPUStack accepts
    the model and fails only when an instance starts."""
    version = p["backend_version"]
    if p["backend"] == "Custom" or not version or not version.endswith(BACKEND_VERSION_SUFFIX):
        return
    versions = backend_versions(backend_row(client, p["backend"]))
    if version not in versions:
        msg = ("backend_version %r is not a version of GPUStack's %s backend (its own versions: %s); register the "
               "runner image first with pairserve.llm.gpustack_backend_version"
               % (version, p["backend"], ", ".join(sorted(versions)) or "none"))
        if module.check_mode:
            # A check-mode run plans the version's registration in an earlier task without making it.
            module.warn(msg + " (check mode: assuming an earlier task registers it)")
            return
        module.fail_json(msg=msg)


def precheck_gpus(module, client, p, cluster_id):
    """Fail before any change when a pinned worker or GPU does not exist (GPUStack checks the worker only)."""
    workers = [w for w in client.list("/v2/workers") if w.get("cluster_id") == cluster_id]
    by_name = {w.get("name"): w for w in workers}
    for gpu_id in p["gpu_ids"]:
        parsed = parse_gpu_id(gpu_id)
        if not parsed:
            module.fail_json(msg="gpu_ids entry %r is not <worker name>:<device>:<index>, e.g. node-a:cuda:0" % gpu_id)
        worker_name, _device, index = parsed
        worker = by_name.get(worker_name)
        if worker is None:
            module.fail_json(msg="gpu_ids entry %r pins worker %r, which is not registered in cluster %s "
                                 "(registered: %s); start the GPUStack worker on that node first, or fix the "
                                 "worker name" % (gpu_id, worker_name, p["cluster"], ", ".join(sorted(by_name)) or "none"))
        gpus = ((worker.get("status") or {}).get("gpu_devices") or [])
        indexes = sorted(g.get("index") for g in gpus)
        if index not in indexes:
            module.fail_json(msg="gpu_ids entry %r: worker %r has no GPU with index %d (it reports %s)"
                                 % (gpu_id, worker_name, index, indexes or "no GPUs"))


def _instances(client, model_id):
    return [i for i in client.list("/v2/model-instances", {"model_id": model_id}) if i.get("model_id") == model_id]


def rollout(module, client, model_id, timeout):
    """Delete each instance; before deleting the next, wait until a replacement is running."""
    old = sorted(_instances(client, model_id), key=lambda i: i["id"])
    old_ids = set(i["id"] for i in old)
    rolled = []
    for pos, inst in enumerate(old):
        client.delete(path_id("/v2/model-instances", inst["id"]))
        rolled.append(inst.get("name"))
        if pos == len(old) - 1:
            break
        deadline = time.monotonic() + timeout
        while True:
            fresh = [i for i in _instances(client, model_id) if i["id"] not in old_ids]
            if any(i.get("state") == "running" for i in fresh):
                break
            if time.monotonic() > deadline:
                states = ", ".join("%s=%s" % (i.get("name"), i.get("state")) for i in fresh) or "none yet"
                module.fail_json(msg="rollout stopped: the replacement of instance %r did not reach 'running' within "
                                     "%d s (new instances: %s); the remaining old instances keep serving. Check the "
                                     "instance logs in GPUStack, then rerun." % (inst.get("name"), timeout, states),
                                 rolled_out=rolled, changed=True)
            time.sleep(3)
    return rolled


def restart(module, client, result, existing, timeout):
    """Roll out the instances of an unchanged model (its files changed); check mode names them only."""
    try:
        names = [i.get("name") for i in sorted(_instances(client, existing["id"]), key=lambda i: i["id"])]
    except GpuStackError as err:
        fail(module, err, "cannot list the instances of GPUStack model %r" % existing.get("name"))
    if not names:
        return
    result.update(changed=True, restarted=True, rolled_out=names)
    result["diff"] = {"before": "model %s: instances %s\n" % (existing.get("name"), ", ".join(names)),
                      "after": "model %s: instances restarted (the files under local_path changed)\n"
                               % existing.get("name")}
    if module.check_mode:
        return
    try:
        result["rolled_out"] = rollout(module, client, existing["id"], timeout)
    except GpuStackError as err:
        fail(module, err, "could not restart the instances of GPUStack model %r" % existing.get("name"))


def main():
    spec = gpustack_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
        cluster={"type": "str"},
        local_path={"type": "path"},
        backend={"type": "str", "choices": ["vLLM", "Custom"], "default": "vLLM"},
        backend_version={"type": "str"},
        image_name={"type": "str"},
        run_command={"type": "str"},
        backend_parameters={"type": "list", "elements": "str", "default": []},
        gpu_ids={"type": "list", "elements": "str"},
        gpus_per_replica={"type": "int"},
        replicas={"type": "int", "default": 1},
        env={"type": "dict", "default": {}},
        restart_on_error={"type": "bool", "default": True},
        description={"type": "str"},
        rollout={"type": "bool", "default": True},
        rollout_timeout={"type": "int", "default": 900},
        restart={"type": "bool", "default": False},
    )
    module = AnsibleModule(
        argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF,
        required_if=[("state", "present", ["local_path"]), ("backend", "Custom", ["image_name", "run_command"])],
        required_by={"gpu_ids": "cluster"},
    )
    p = module.params
    name = p["name"]
    result = {"changed": False, "model": {}, "changed_fields": [], "rolled_out": [], "restarted": False}
    if p["replicas"] < 0:
        module.fail_json(msg="replicas is %d: use 0 (stopped) or more" % p["replicas"])
    if p["gpu_ids"] is not None and p["gpus_per_replica"] and len(p["gpu_ids"]) < p["gpus_per_replica"]:
        module.fail_json(msg="gpus_per_replica is %d but gpu_ids names only %d GPU(s): list every GPU of the pair"
                             % (p["gpus_per_replica"], len(p["gpu_ids"])))
    if p["backend"] != "Custom" and p["image_name"]:
        module.fail_json(msg="image_name is set for backend %s: GPUStack 2.2.3 drops the image_name of a %s-backend "
                             "model at its every update, so the pinned image would be lost at the first change. "
                             "Register the image with pairserve.llm.gpustack_backend_version and pass its version "
                             "as backend_version instead" % (p["backend"], p["backend"]))
    for key in p["env"] or {}:
        p["env"][key] = str(p["env"][key])
    conflicts = seed_env_conflicts(p["env"]) if p["state"] == "present" else []
    if conflicts:
        # Before any API call: the merged env would otherwise silently carry the user's value.
        module.fail_json(msg="model %s: env %s. In the inventory the env comes from pairserve_replica_env."
                             % (name, "; ".join(conflicts)), changed=False)
    outside = vllm_cache_root_outside_mount(p["local_path"], p["env"]) if p["state"] == "present" else None
    if outside:
        module.warn("model %s: %s (in the inventory: pairserve_replica_env)." % (name, outside))

    try:
        client = GpuStackClient.from_module(module)
        existing = client.find("/v2/models", name)
        if p["state"] == "absent":
            ensure_absent(module, client, result, "model", "/v2/models", name, existing)
        cluster_id = client.resolve_cluster_id(p["cluster"])
        if p["gpu_ids"]:
            precheck_gpus(module, client, p, cluster_id)
        precheck_backend_version(module, client, p)
    except GpuStackError as err:
        fail(module, err, "cannot read GPUStack model %r" % name)

    desired = desired_spec(p, cluster_id)
    changed, before, after = field_diff(desired, existing, subset_keys=("gpu_selector",))
    if existing and p["backend"] != "Custom":
        # A leftover image/command (a former Custom model, or a model that named its image) must go, or GPUStack
        # keeps running them instead of the backend version's image.
        for key in ("image_name", "run_command"):
            if existing.get(key):
                changed.append(key)
                before[key], after[key] = existing[key], None
                desired[key] = None
    result["changed_fields"] = sorted(changed)
    if not changed:
        result["model"] = existing
        if p["restart"] and existing:
            restart(module, client, result, existing, p["rollout_timeout"])
        module.exit_json(**result)

    result["changed"] = True
    result["diff"] = present_diff("model %s" % name, changed, before, after, bool(existing))
    body = {k: v for k, v in desired.items() if v is not None or k in ("image_name", "run_command")}
    if not existing:
        body = {k: v for k, v in body.items() if v is not None}
    if module.check_mode:
        result["model"] = dict(existing or {}, **body)
        if existing and p["rollout"] and set(changed) - NO_ROLLOUT_FIELDS:
            try:
                result["rolled_out"] = [i.get("name") for i in _instances(client, existing["id"])]
            except GpuStackError as err:
                fail(module, err, "cannot list the instances of GPUStack model %r" % name)
        module.exit_json(**result)

    try:
        if existing:
            model = client.put(path_id("/v2/models", existing["id"]), body)
        else:
            model = client.post("/v2/models", body)
    except GpuStackError as err:
        fail(module, err, "cannot %s GPUStack model %r" % ("update" if existing else "create", name))
    result["model"] = model
    if existing and p["rollout"] and set(changed) - NO_ROLLOUT_FIELDS:
        try:
            result["rolled_out"] = rollout(module, client, existing["id"], p["rollout_timeout"])
        except GpuStackError as err:
            fail(module, err, "updated GPUStack model %r but could not roll its instances" % name)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
