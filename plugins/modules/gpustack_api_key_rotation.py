#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rotate a GPUStack API key without a moment in which the clients' key is refused."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_api_key_rotation
short_description: Rotate a GPUStack API key in steps, the new key live before the old one goes
version_added: 0.1.0
description:
  - GPUStack 2.2.3 cannot change the secret of an API key in place, nor rename a key, and a key's name is unique per
    user. A rotation that never refuses a client therefore needs two names. The new key is created under whichever
    of O(name) and O(alternate_name) is free (step V(stage)), the caller moves every client to it, and then the older
    key is deleted (step V(retire)). Between the two steps both keys authenticate.
  - Step V(inspect) changes nothing; it reports the keys under the two names and whether the newest of them was
    created before O(rotate_before), that is whether a rotation is due.
  - GPUStack checks a bearer key against its database on every request; deleting a key drops its cached lookup
    (C(server/services.py) C(APIKeyService.delete)), so the old key is refused as soon as V(retire) returns.
  - M(pairserve.llm.gpustack_api_key) with O(pairserve.llm.gpustack_api_key#module:alternate_name) manages the key
    under whichever name it carries after a rotation.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  name:
    description:
      - The key's name (the one M(pairserve.llm.gpustack_api_key) registers).
    type: str
    required: true
  alternate_name:
    description:
      - The second name. Default O(name) followed by C(-alt).
    type: str
  step:
    description:
      - V(inspect) reads; V(stage) makes sure a key whose secret is O(value) exists; V(retire) deletes the key that
        does not hold O(value) when both names exist.
    type: str
    choices: [inspect, stage, retire]
    required: true
  value:
    description:
      - For V(stage) the new secret, for V(retire) the secret the clients now use. Required by both.
    type: str
  rotate_before:
    description:
      - For V(inspect), an ISO 8601 date or time (UTC when no offset is given). A rotation is due when the newest key
        under the two names was created before it, or when no key exists under either name.
      - A time more than five minutes in the future is refused, since every run until then would rotate again.
    type: str
  scope:
    description:
      - Scopes of a key created by V(stage).
    type: list
    elements: str
    choices: ['*', management, inference]
    default: ['*']
  description:
    description:
      - Description of a key created by V(stage).
    type: str
  allowed_model_names:
    description:
      - Model restriction of a key created by V(stage).
    type: list
    elements: str
extends_documentation_fragment:
  - pairserve.llm.gpustack
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details:
      - The diff lists the names of the keys that exist before and after; secrets never appear.
notes:
  - V(retire) fails, deleting nothing, when O(value) does not authenticate, since the clients would be cut off.
  - When both names exist, V(retire) takes the key with the higher id as the one V(stage) created (GPUStack numbers
    keys in creation order) and checks afterwards that O(value) still authenticates.
"""

EXAMPLES = r"""
- name: Is a rotation of the inference key due?
  pairserve.llm.gpustack_api_key_rotation:
    api_url: http://127.0.0.1:30080
    password: "{{ pairserve_gpustack_admin_password }}"
    name: pairserve-inference
    step: inspect
    rotate_before: "2026-12-06T15:00:00Z"
  register: inspected

- name: The new key, live next to the old one
  pairserve.llm.gpustack_api_key_rotation:
    api_url: http://127.0.0.1:30080
    password: "{{ pairserve_gpustack_admin_password }}"
    name: pairserve-inference
    step: stage
    value: "{{ new_key }}"
    scope: [inference]
  no_log: true

# ... every client moved to new_key ...

- name: The old key removed
  pairserve.llm.gpustack_api_key_rotation:
    api_url: http://127.0.0.1:30080
    password: "{{ pairserve_gpustack_admin_password }}"
    name: pairserve-inference
    step: retire
    value: "{{ new_key }}"
  no_log: true
"""

RETURN = r"""
keys:
  description: The keys under the two names after the step (check mode, before it), without secrets, oldest first.
  returned: always
  type: list
  elements: dict
  sample: [{"id": 7, "name": "pairserve-inference-alt", "scope": ["inference"], "created_at": "2026-12-06T15:31:02Z"}]
due:
  description: Whether a rotation is due (step V(inspect) with O(rotate_before)).
  returned: when O(step=inspect)
  type: bool
name:
  description: The name of the key holding O(value) after V(stage), or of the key kept by V(retire).
  returned: when O(step) is V(stage) or V(retire)
  type: str
removed:
  description: The name of the key V(retire) deleted.
  returned: when O(step=retire) deleted a key
  type: str
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GPUSTACK_REQUIRED_ONE_OF,
    GpuStackClient,
    GpuStackError,
    fail,
    gpustack_argument_spec,
    path_id,
    value_authenticates,
)

# Clocks of the controller and the server may differ a little; a time further ahead is a mistake.
FUTURE_SLACK = 300
PUBLIC_KEYS = ("id", "name", "description", "scope", "allowed_model_names", "expires_at", "is_custom", "created_at")


def parse_time(text):
    """An aware datetime from ISO 8601 text (a date alone is its midnight; no offset means UTC), or None."""
    try:
        value = datetime.datetime.fromisoformat(str(text).strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        try:
            value = datetime.datetime.combine(datetime.date.fromisoformat(str(text).strip()), datetime.time())
        except ValueError:
            return None
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def rotation_due(keys, before):
    """Due when no key exists under either name, or the newest one was created before ``before``."""
    created = [parse_time(k.get("created_at")) for k in keys]
    if not created:
        return True
    if None in created:
        return True
    return max(created) < before


def free_name(names, keys):
    """The first of ``names`` no key carries, or None."""
    taken = {k["name"] for k in keys}
    return next((n for n in names if n not in taken), None)


def public(key):
    return {k: key.get(k) for k in PUBLIC_KEYS if k in key}


def main():  # pylint: disable=too-many-branches,too-many-statements
    spec = gpustack_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        alternate_name={"type": "str"},
        step={"type": "str", "choices": ["inspect", "stage", "retire"], "required": True},
        value={"type": "str", "no_log": True},
        rotate_before={"type": "str"},
        scope={"type": "list", "elements": "str", "choices": ["*", "management", "inference"], "default": ["*"]},
        description={"type": "str"},
        allowed_model_names={"type": "list", "elements": "str"},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF,
                           required_if=[("step", "stage", ["value"]), ("step", "retire", ["value"])])
    p = module.params
    names = (p["name"], p["alternate_name"] or p["name"] + "-alt")
    if names[0] == names[1]:
        module.fail_json(msg="alternate_name is %r, the same as name: give the rotation's second name" % names[0])
    before = None
    if p["step"] == "inspect" and p["rotate_before"] is not None:
        before = parse_time(p["rotate_before"])
        if before is None:
            module.fail_json(msg="rotate_before is %r: give an ISO 8601 date or time, for example 2026-12-06 or "
                                 "2026-12-06T15:00:00Z" % p["rotate_before"])
        if before > datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=FUTURE_SLACK):
            module.fail_json(msg="rotate_before is %r, in the future: every run until then would rotate the key again. "
                                 "Give the time the key leaked, or now (date -u +%%FT%%TZ)" % p["rotate_before"])

    try:
        client = GpuStackClient.from_module(module)
        keys = sorted((k for k in (client.find("/v2/api-keys", n) for n in names) if k), key=lambda k: k["id"])
    except GpuStackError as err:
        fail(module, err, "cannot read GPUStack API keys")
    result = {"changed": False, "keys": [public(k) for k in keys]}

    if p["step"] == "inspect":
        if before is not None:
            result["due"] = rotation_due(keys, before)
        module.exit_json(**result)

    try:
        live = value_authenticates(client, p["value"])
    except GpuStackError as err:
        fail(module, err, "cannot check a GPUStack API key's value")

    if p["step"] == "stage":
        if live and keys:
            result["name"] = keys[-1]["name"]
            module.exit_json(**result)
        name = free_name(names, keys)
        if name is None:
            module.fail_json(msg="GPUStack API keys %r and %r both exist and neither holds the new value: the rotation "
                                 "cannot tell which one the clients use. Delete the one no client uses "
                                 "(ids %s) and run the rotation again." % (names[0], names[1], [k["id"] for k in keys]))
        body = {"name": name, "scope": sorted(p["scope"]), "custom": p["value"]}
        for opt in ("description", "allowed_model_names"):
            if p[opt] is not None:
                body[opt] = p[opt]
        shown = {k: v for k, v in body.items() if k != "custom"}
        result.update(changed=True, name=name, diff={
            "before": {"keys": [k["name"] for k in keys]}, "after": {"keys": [k["name"] for k in keys] + [name]},
            "before_header": "api keys %s" % " / ".join(names), "after_header": "api keys (new key staged)"})
        if module.check_mode:
            result["keys"].append(shown)
            module.exit_json(**result)
        try:
            created = client.post("/v2/api-keys", body)
        except GpuStackError as err:
            fail(module, err, "cannot create GPUStack API key %r" % name)
        result["keys"].append(public(created))
        module.exit_json(**result)

    # retire
    if not live:
        module.fail_json(msg="the value the clients now use does not authenticate on %s: no key is removed, or the "
                             "clients would be cut off. Run the rotation again: its stage step makes the key."
                             % client.base_url)
    if len(keys) < 2:
        result["name"] = keys[0]["name"] if keys else None
        module.exit_json(**result)
    old, new = keys[0], keys[-1]
    result.update(changed=True, name=new["name"], removed=old["name"], keys=[public(new)], diff={
        "before": {"keys": [k["name"] for k in keys]}, "after": {"keys": [new["name"]]},
        "before_header": "api keys %s" % " / ".join(names), "after_header": "api keys (older one removed)"})
    if module.check_mode:
        module.exit_json(**result)
    try:
        client.delete(path_id("/v2/api-keys", old["id"]))
        still = value_authenticates(client, p["value"])
    except GpuStackError as err:
        fail(module, err, "cannot delete GPUStack API key %r" % old["name"])
    if not still:
        module.fail_json(msg="after deleting GPUStack API key %r (id %s) the clients' value no longer authenticates: "
                             "it was the key holding it. Run the rotation again: its stage step creates the key with "
                             "the same value under the freed name." % (old["name"], old["id"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
