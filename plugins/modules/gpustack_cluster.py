#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ensure a GPUStack cluster exists (or not) and hand out its worker registration token."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_cluster
short_description: Manage a GPUStack cluster and read its worker registration token
version_added: 0.1.0
description:
  - Ensures a cluster with the given name exists in GPUStack (C(POST /v2/clusters)), or is removed.
  - Returns the cluster id and, when asked with O(return_registration_token), the token a worker needs to join it.
  - Written against GPUStack 2.2.3. Cluster names are unique within their organisation; the admin's default organisation is used.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  name:
    description:
      - Name of the cluster.
    type: str
    required: true
  provider:
    description:
      - Where GPUStack runs the cluster's workers. V(Docker) is a cluster of self-registered workers (how the nodes join).
      - Only used on creation; GPUStack cannot change the provider of an existing cluster, so a mismatch fails.
    type: str
    choices: [Docker, Kubernetes]
    default: Docker
  description:
    description:
      - Free text shown in the GPUStack UI. Not managed when omitted.
    type: str
  state:
    description:
      - V(present) creates the cluster when missing and updates O(description).
      - V(absent) deletes it. GPUStack refuses while the cluster still has workers or models; its message is quoted.
    type: str
    choices: [present, absent]
    default: present
  return_registration_token:
    description:
      - Return the worker registration token as RV(registration_token).
      - The token lets anyone register a worker into the cluster. It is returned only when asked for, and the task
        that asks for it should set C(no_log) to V(true) so that the token does not reach the output or the logs;
        the registered variable still holds it for the worker configuration.
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
- name: Ensure the cluster the GPU nodes join
  pairserve.llm.gpustack_cluster:
    api_url: http://node-a:30080
    password: "{{ pairserve_gpustack_admin_password }}"
    name: pairserve
    return_registration_token: true
  register: pairserve_cluster
  no_log: true

- name: Remove a cluster that has no workers and no models left
  pairserve.llm.gpustack_cluster:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: old-lab
    state: absent
"""

RETURN = r"""
cluster:
  description: The cluster as GPUStack reports it (subset). Empty after O(state=absent), and without an id in check mode before creation.
  returned: always
  type: dict
  contains:
    id:
      description: Cluster id, used as C(cluster_id) by other modules.
      type: int
      sample: 1
    name:
      description: Cluster name.
      type: str
      sample: pairserve
    provider:
      description: Cluster provider.
      type: str
      sample: Docker
    state:
      description: GPUStack's cluster state.
      type: str
      sample: ready
  sample: {"id": 1, "name": "pairserve", "provider": "Docker", "state": "ready"}
registration_token:
  description:
    - Token workers use to join (the C(token) setting of a GPUStack worker).
    - V(null) unless O(return_registration_token=true), and in check mode when the cluster does not exist yet.
  returned: always
  type: str
  sample: gpustack_0123abcd_0123456789abcdef0123456789abcdef
server_url:
  description: The URL GPUStack tells workers to register against (from C(/v2/clusters/{id}/registration-token)).
  returned: when O(return_registration_token=true) and the cluster exists
  type: str
  sample: http://node-a:30080
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GPUSTACK_REQUIRED_ONE_OF,
    GpuStackClient,
    GpuStackError,
    ensure_absent,
    fail,
    field_diff,
    gpustack_argument_spec,
    path_id,
    present_diff,
)

PUBLIC_KEYS = ("id", "name", "provider", "state", "description", "is_default")


def _public(cluster):
    return {k: cluster.get(k) for k in PUBLIC_KEYS if k in cluster} if cluster else {}


def main():
    spec = gpustack_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        provider={"type": "str", "choices": ["Docker", "Kubernetes"], "default": "Docker"},
        description={"type": "str"},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
        return_registration_token={"type": "bool", "default": False, "no_log": False},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF)
    p = module.params
    name = p["name"]
    result = {"changed": False, "cluster": {}, "registration_token": None}

    try:
        client = GpuStackClient.from_module(module)
        existing = client.cluster_by_name(name)
    except GpuStackError as err:
        fail(module, err, "cannot read GPUStack clusters")

    if p["state"] == "absent":
        ensure_absent(module, client, result, "cluster", "/v2/clusters", name, existing,
                      _public(existing) if existing else None)

    desired = {"name": name, "description": p["description"]}
    if existing and existing.get("provider") != p["provider"]:
        module.fail_json(msg="cluster %r exists with provider %r, not %r; GPUStack cannot change a cluster's "
                             "provider: set provider: %s or use another cluster name"
                             % (name, existing.get("provider"), p["provider"], existing.get("provider")))
    if not existing:
        desired["provider"] = p["provider"]
    changed, before, after = field_diff(desired, existing)
    cluster = existing
    if changed:
        result["changed"] = True
        result["diff"] = present_diff("cluster %s" % name, changed, before, after, bool(existing))
        if module.check_mode:
            cluster = dict(existing or {}, **{k: v for k, v in desired.items() if v is not None})
        else:
            try:
                if existing:
                    body = {"name": name, "description": p["description"]}
                    cluster = client.put(path_id("/v2/clusters", existing["id"]), body)
                else:
                    body = {k: v for k, v in desired.items() if v is not None}
                    cluster = client.post("/v2/clusters", body)
            except GpuStackError as err:
                fail(module, err, "cannot %s GPUStack cluster %r" % ("update" if existing else "create", name))
    result["cluster"] = _public(cluster)

    if p["return_registration_token"] and cluster and cluster.get("id") is not None:
        try:
            reg = client.get(path_id("/v2/clusters", cluster["id"]) + "/registration-token")
        except GpuStackError as err:
            fail(module, err, "cannot read the registration token of GPUStack cluster %r" % name)
        result["registration_token"] = reg.get("token")
        result["server_url"] = reg.get("server_url")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
