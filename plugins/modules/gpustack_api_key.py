#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ensure a GPUStack API key exists with a fixed value and scope (or not)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_api_key
short_description: Manage a GPUStack API key with a fixed value, scope and description
version_added: 0.1.0
description:
  - Ensures an API key with the given name exists for the authenticated user (C(POST /v2/api-keys)), or is removed.
  - With O(value) the key's secret is fixed by you (GPUStack's C(custom) field), so reruns are idempotent and the
    value can live in a vault. The module checks that O(value) still authenticates; when it does not
    (the key was recreated by hand, or O(value) changed) the key is replaced, that is deleted and created again with the same name.
  - GPUStack 2.2.3 knows two scopes besides V(*) (all), enforced by the server on every request;
    V(management) reaches the C(/v2) management API only and V(inference) reaches the OpenAI-compatible
    C(/v1) API only. A service should hand its clients an inference key and keep a management key for automation.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  name:
    description:
      - Name of the API key, unique per user.
    type: str
    required: true
  alternate_name:
    description:
      - A second name the key may carry. M(pairserve.llm.gpustack_api_key_rotation) creates a rotated key under
        whichever of O(name) and O(alternate_name) is free, so after a rotation the key may live under either.
      - When only the key named O(alternate_name) exists, it is the key this module manages; when both exist a
        rotation is half done and the module fails, naming the play that finishes it. O(state=absent) removes both.
    type: str
  value:
    description:
      - The secret itself. GPUStack stores only a hash of it.
      - When omitted on creation GPUStack generates one and the module returns it once as RV(value).
      - When omitted for an existing key the secret is not managed.
    type: str
  description:
    description:
      - Free text shown in the GPUStack UI. Not managed when omitted.
    type: str
  scope:
    description:
      - What the key may call. V(management) is the C(/v2) API, V(inference) the C(/v1) OpenAI-compatible API, V(*) both.
    type: list
    elements: str
    choices: ['*', management, inference]
    default: ['*']
  allowed_model_names:
    description:
      - Restrict an inference key to these model or route names. Not managed when omitted; V([]) removes the restriction.
    type: list
    elements: str
  expires_in:
    description:
      - Lifetime in seconds, counted from creation. V(0) or omitted means the key never expires.
      - GPUStack sets the expiry only when it creates the key; a changed O(expires_in) does not touch an existing key.
    type: int
  state:
    description:
      - Whether the key should exist.
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
    details:
      - The secret never appears in the diff; a replaced secret shows as the word C(changed) under C(value).
"""

EXAMPLES = r"""
- name: Management key for the collection's own API calls
  pairserve.llm.gpustack_api_key:
    api_url: http://node-a:30080
    password: "{{ pairserve_gpustack_admin_password }}"
    name: pairserve-management
    value: "{{ pairserve_gpustack_management_key }}"
    scope: [management]

- name: Inference key handed to agents and Frigate, limited to the route
  pairserve.llm.gpustack_api_key:
    api_url: http://node-a:30080
    password: "{{ pairserve_gpustack_admin_password }}"
    name: pairserve-inference
    value: "{{ pairserve_gpustack_inference_key }}"
    scope: [inference]
    allowed_model_names: [qwen]
    description: OpenAI-compatible clients
"""

RETURN = r"""
api_key:
  description: The key as GPUStack reports it, without any secret. Empty after O(state=absent).
  returned: always
  type: dict
  contains:
    id:
      description: Key id.
      type: int
    name:
      description: Key name.
      type: str
    scope:
      description: Scopes.
      type: list
      elements: str
    description:
      description: Description.
      type: str
    allowed_model_names:
      description: Model restriction, V(null) for none.
      type: list
      elements: str
    expires_at:
      description: Expiry time, V(null) for never.
      type: str
    is_custom:
      description: Whether the value was fixed by the caller.
      type: bool
  sample: {"id": 3, "name": "pairserve-inference", "scope": ["inference"], "is_custom": true}
value:
  description:
    - The secret GPUStack generated, returned only on the run that created the key without O(value).
    - Set C(no_log) to V(true) on that task; GPUStack cannot show it again.
  returned: when the key was created without O(value)
  type: str
replaced:
  description: Whether the key was deleted and created again because O(value) no longer authenticated.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GPUSTACK_REQUIRED_ONE_OF,
    GpuStackClient,
    GpuStackError,
    absent_diff,
    ensure_absent,
    fail,
    field_diff,
    gpustack_argument_spec,
    path_id,
    present_diff,
    value_authenticates,
)

PUBLIC_KEYS = ("id", "name", "description", "scope", "allowed_model_names", "expires_at", "is_custom")
UPDATABLE = ("description", "scope", "allowed_model_names")


def _public(key):
    return {k: key.get(k) for k in PUBLIC_KEYS if k in key} if key else {}


def main():
    spec = gpustack_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        alternate_name={"type": "str"},
        value={"type": "str", "no_log": True},
        description={"type": "str"},
        scope={"type": "list", "elements": "str", "choices": ["*", "management", "inference"], "default": ["*"]},
        allowed_model_names={"type": "list", "elements": "str"},
        expires_in={"type": "int"},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF)
    p = module.params
    name = p["name"]
    result = {"changed": False, "api_key": {}, "replaced": False}
    if p["expires_in"] is not None and p["expires_in"] < 0:
        module.fail_json(msg="expires_in is %d: give the lifetime in seconds (> 0), or 0 for a key that never expires"
                             % p["expires_in"])
    if p["state"] == "present" and not p["scope"]:
        module.fail_json(msg="scope is empty: a key needs at least one of '*', 'management', 'inference'")

    alternate = p["alternate_name"]
    if alternate == name:
        module.fail_json(msg="alternate_name is %r, the same as name: give the rotation's second name" % name)
    try:
        client = GpuStackClient.from_module(module)
        existing = client.find("/v2/api-keys", name)
        other = client.find("/v2/api-keys", alternate) if alternate else None
    except GpuStackError as err:
        fail(module, err, "cannot read GPUStack API keys")

    if p["state"] == "absent":
        if other:
            result.update(changed=True, diff=absent_diff("API key %s" % alternate, _public(other)))
            if not module.check_mode:
                try:
                    client.delete(path_id("/v2/api-keys", other["id"]))
                except GpuStackError as err:
                    fail(module, err, "cannot delete GPUStack API key %r" % alternate)
        ensure_absent(module, client, result, "API key", "/v2/api-keys", name, existing,
                      _public(existing) if existing else None)

    # playbooks/rotate.yml moves a key between its two names: the one that exists is the key.
    if existing and other:
        module.fail_json(msg="GPUStack API keys %r (id %s) and %r (id %s) both exist: a rotation of this key is half done. "
                             "Finish it with playbooks/rotate.yml and the key's tag (docs/how-to/rotate-credentials.md), "
                             "then run this again." % (name, existing["id"], alternate, other["id"]))
    if other:
        existing, name = other, alternate

    desired = {"name": name, "description": p["description"], "scope": sorted(p["scope"]),
               "allowed_model_names": p["allowed_model_names"]}
    if existing and existing.get("scope"):
        existing = dict(existing, scope=sorted(existing["scope"]))
    replace = False
    if existing and p["value"] is not None:
        try:
            replace = not value_authenticates(client, p["value"])
        except GpuStackError as err:
            fail(module, err, "cannot check the value of GPUStack API key %r" % name)
    # An empty allowed_model_names means "no restriction"; GPUStack stores that as null.
    if desired["allowed_model_names"] == [] and existing and existing.get("allowed_model_names") is None:
        desired["allowed_model_names"] = None
    changed, before, after = field_diff(desired, None if replace else existing)
    if replace:
        before, after = dict(_public(existing), value="(does not authenticate)"), dict(after, value="changed")
    if not changed and not replace:
        result["api_key"] = _public(existing)
        module.exit_json(**result)

    result["changed"] = True
    result["replaced"] = replace
    result["diff"] = present_diff("api key %s" % name, changed, before, after, bool(existing))
    if module.check_mode:
        result["api_key"] = dict(_public(existing), **{k: v for k, v in desired.items() if v is not None})
        module.exit_json(**result)

    try:
        if existing and not replace:
            body = {k: desired[k] for k in UPDATABLE if desired[k] is not None}
            if p["allowed_model_names"] == []:
                body["allowed_model_names"] = None
            key = client.put(path_id("/v2/api-keys", existing["id"]), dict(body, scope=desired["scope"]))
        else:
            if replace:
                client.delete(path_id("/v2/api-keys", existing["id"]))
            body = {"name": name, "scope": desired["scope"]}
            for opt in ("description", "allowed_model_names", "expires_in"):
                if p[opt] is not None:
                    body[opt] = p[opt]
            if p["value"] is not None:
                body["custom"] = p["value"]
            key = client.post("/v2/api-keys", body)
            if p["value"] is None and key.get("value"):
                result["value"] = key["value"]
    except GpuStackError as err:
        fail(module, err, "cannot %s GPUStack API key %r" % ("update" if existing and not replace else "create", name))
    result["api_key"] = _public(key)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
