#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read GPUStack's view of workers, GPUs, models, instances, routes and clusters."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_info
short_description: Read workers, GPUs, models, instances, routes, clusters and inference backends from GPUStack
version_added: 0.1.0
description:
  - Lists what GPUStack knows, for waiting and for assertions, for example until every worker is V(ready)
    with its expected GPU count, or until a model's instances are V(running).
  - Follows GPUStack's pagination, so the lists are complete.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  gather:
    description:
      - Which lists to read. Each one becomes a key of the result.
      - V(inference_backends) is read only when named (it is not in the default); it holds each backend's
        C(version_configs), where a version registered by M(pairserve.llm.gpustack_backend_version) names its image.
    type: list
    elements: str
    choices: [workers, gpus, models, model_instances, routes, clusters, inference_backends]
    default: [clusters, gpus, model_instances, models, routes, workers]
  names:
    description:
      - Keep only the items with one of these names (exact match), in every gathered list.
      - For V(gpus) the name is the worker's name, for V(model_instances) the model's name and for
        V(inference_backends) the backend's name (V(vLLM)), so O(names=[node-a]) gives node A's worker and its
        GPUs, and O(names=[qwen-node-a]) a model and its instances.
    type: list
    elements: str
  cluster:
    description:
      - Only items of this cluster, by id or by name. Inference backends belong to no cluster and are all kept.
    type: str
  worker_uuid:
    description:
      - Keep only the worker record registered with this worker UUID (what a worker writes to C(<data_dir>/worker_uuid)
        when it registers; GPUStack does not show it, its worker list filters by it). Applies to V(workers) only.
      - An install finds the worker record it owns this way, whatever name the record has.
    type: str
extends_documentation_fragment:
  - pairserve.llm.gpustack
  - pairserve.llm.attributes
  - pairserve.llm.attributes.INFO_MODULE
"""

EXAMPLES = r"""
- name: Wait until both workers are ready with two GPUs each
  pairserve.llm.gpustack_info:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    gather: [workers, gpus]
  register: pairserve_gs
  until: >-
    (pairserve_gs.workers | selectattr('state', 'equalto', 'ready') | list | length) == 2
    and (pairserve_gs.gpus | length) == 4
  retries: 60
  delay: 5

- name: Instances of the node A replica
  pairserve.llm.gpustack_info:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    gather: [model_instances]
    names: [qwen-node-a]
  register: pairserve_instances
"""

RETURN = r"""
workers:
  description: Workers (C(/v2/workers)); C(state) is V(ready) when the worker is up; C(status.gpu_devices) lists its GPUs.
  returned: when V(workers) is gathered
  type: list
  elements: dict
  sample: [{"id": 1, "name": "node-a", "state": "ready", "cluster_id": 1}]
gpus:
  description: GPU devices (C(/v2/gpu-devices)) with C(worker_name), C(index), C(name), C(memory).
  returned: when V(gpus) is gathered
  type: list
  elements: dict
  sample: [{"worker_name": "node-a", "index": 0, "name": "NVIDIA GeForce RTX 5080"}]
models:
  description: Models (C(/v2/models)).
  returned: when V(models) is gathered
  type: list
  elements: dict
model_instances:
  description: Model instances (C(/v2/model-instances)); C(state) is V(running) when serving.
  returned: when V(model_instances) is gathered
  type: list
  elements: dict
  sample: [{"id": 4, "model_name": "qwen-node-a", "state": "running", "worker_name": "node-a"}]
routes:
  description: Model routes (C(/v2/model-routes)), each with its C(route_targets) (model id, weight, fallback codes, target id).
  returned: when V(routes) is gathered
  type: list
  elements: dict
clusters:
  description: Clusters (C(/v2/clusters)).
  returned: when V(clusters) is gathered
  type: list
  elements: dict
inference_backends:
  description: Inference backends (C(/v2/inference-backends)), each with C(backend_name) and C(version_configs)
    (version name to its configuration, C(image_name) included).
  returned: when V(inference_backends) is gathered
  type: list
  elements: dict
  sample: [{"backend_name": "vLLM",
            "version_configs": {"0.25.1-0123456789ab-custom": {"image_name": "registry/runner@sha256:..."}}}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GPUSTACK_REQUIRED_ONE_OF,
    GpuStackClient,
    GpuStackError,
    fail,
    gpustack_argument_spec,
)

# list name -> (endpoint, key holding the name filtered by `names`)
SOURCES = {
    "workers": ("/v2/workers", "name"),
    "gpus": ("/v2/gpu-devices", "worker_name"),
    "models": ("/v2/models", "name"),
    "model_instances": ("/v2/model-instances", "model_name"),
    "routes": ("/v2/model-routes", "name"),
    "clusters": ("/v2/clusters", "name"),
    "inference_backends": ("/v2/inference-backends", "backend_name"),
}
# Read when asked only: listing the backends makes the server merge its runner catalogue into every row.
DEFAULT_GATHER = sorted(set(SOURCES) - {"inference_backends"})
# Platform settings, not a cluster's.
NO_CLUSTER = {"inference_backends"}


def main():
    spec = gpustack_argument_spec()
    spec.update(
        gather={"type": "list", "elements": "str", "choices": sorted(SOURCES), "default": DEFAULT_GATHER},
        names={"type": "list", "elements": "str"},
        cluster={"type": "str"},
        worker_uuid={"type": "str"},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF)
    p = module.params
    result = {"changed": False}
    try:
        client = GpuStackClient.from_module(module)
        cluster_id = client.resolve_cluster_id(p["cluster"])
        for what in p["gather"]:
            endpoint, name_key = SOURCES[what]
            query = {"uuid": p["worker_uuid"]} if what == "workers" and p["worker_uuid"] else None
            items = client.list(endpoint, query)
            items = [i for i in items if not i.get("deleted_at")]
            if cluster_id is not None and what not in NO_CLUSTER:
                own = "id" if what == "clusters" else "cluster_id"
                items = [i for i in items if i.get(own) == cluster_id]
            if p["names"]:
                items = [i for i in items if i.get(name_key) in p["names"]]
            if what == "routes":
                for route in items:
                    route["route_targets"] = client.list("/v2/model-route-targets", {"route_id": route["id"]})
            result[what] = items
    except GpuStackError as err:
        fail(module, err, "cannot read from GPUStack")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
