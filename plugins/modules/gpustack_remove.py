#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Remove GPUStack worker records or model instances by id."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_remove
short_description: Remove GPUStack worker records or model instances by id
version_added: 0.1.0
description:
  - Deletes the GPUStack records of one kind named by id (C(DELETE /v2/workers/<id>) or
    C(DELETE /v2/model-instances/<id>)). An id that GPUStack does not have (already removed) changes nothing.
  - Removing a model instance restarts it. GPUStack's scheduler creates a new instance for the model, which a
    worker starts again from the model's current settings. Removing a worker record makes GPUStack remove that
    worker's instances too.
  - The API key goes through the module's C(no_log) option, never into a task's arguments or its result, which
    is why the collection's plays use this module instead of M(ansible.builtin.uri) with an C(Authorization) header.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  kind:
    description:
      - What the ids name.
    type: str
    choices: [worker, model_instance]
    required: true
  ids:
    description:
      - The ids to remove, as GPUStack lists them (M(pairserve.llm.gpustack_info)). V([]) changes nothing.
    type: list
    elements: int
    required: true
extends_documentation_fragment:
  - pairserve.llm.gpustack
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads each id and reports the ones that would be removed.
  diff_mode:
    support: full
    details:
      - Before holds the names of the records that exist, after is empty.
"""

EXAMPLES = r"""
- name: Read node B's model instances
  pairserve.llm.gpustack_info:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    gather: [model_instances]
    names: [qwen-node-b]
  register: node_b

- name: Restart them (GPUStack creates new instances)
  pairserve.llm.gpustack_remove:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    kind: model_instance
    ids: "{{ node_b.model_instances | map(attribute='id') | list }}"
"""

RETURN = r"""
removed:
  description: The records removed (in check mode, the ones that would be), each with C(id) and C(name).
  returned: always
  type: list
  elements: dict
  sample: [{"id": 7, "name": "qwen-node-b-x2kq-0"}]
absent:
  description: The ids GPUStack did not have (nothing to remove).
  returned: always
  type: list
  elements: int
  sample: [3]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GPUSTACK_REQUIRED_ONE_OF,
    GpuStackClient,
    GpuStackError,
    fail,
    gpustack_argument_spec,
    path_id,
)

ENDPOINTS = {"worker": "/v2/workers", "model_instance": "/v2/model-instances"}


def existing(client, endpoint, item_id):
    """GPUStack's record of ``item_id``, None when it has none (HTTP 404, or a soft-deleted row)."""
    try:
        item = client.get(path_id(endpoint, item_id))
    except GpuStackError as err:
        if err.status == 404:
            return None
        raise
    if not isinstance(item, dict) or item.get("deleted_at"):
        return None
    return item


def main():
    spec = gpustack_argument_spec()
    spec.update(
        kind={"type": "str", "required": True, "choices": sorted(ENDPOINTS)},
        ids={"type": "list", "elements": "int", "required": True},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF)
    kind = module.params["kind"]
    endpoint = ENDPOINTS[kind]
    ids = list(dict.fromkeys(module.params["ids"]))  # each once, in the given order
    removed, absent = [], []
    try:
        client = GpuStackClient.from_module(module)
        for item_id in ids:
            item = existing(client, endpoint, item_id)
            if item is None:
                absent.append(item_id)
                continue
            if not module.check_mode:
                try:
                    client.delete(path_id(endpoint, item_id))
                except GpuStackError as err:
                    if err.status != 404:  # removed meanwhile (a worker's instances go with it): nothing to do
                        raise
                    absent.append(item_id)
                    continue
            removed.append({"id": item_id, "name": item.get("name")})
    except GpuStackError as err:
        fail(module, err, "cannot remove GPUStack %s records %s" % (kind.replace("_", " "), ids))
    result = {"changed": bool(removed), "removed": removed, "absent": absent}
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = {"before": {kind: [r["name"] for r in removed]}, "after": {kind: []},
                          "before_header": "GPUStack %s records" % kind.replace("_", " "),
                          "after_header": "GPUStack %s records (removed)" % kind.replace("_", " ")}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
