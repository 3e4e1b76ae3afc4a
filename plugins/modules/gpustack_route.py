#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Upsert a GPUStack model route: one client-facing model name over weighted replicas."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_route
short_description: Manage a GPUStack model route with weighted targets and an optional fallback
version_added: 0.1.0
description:
  - Creates or updates a model route by name (C(/v2/model-routes)). Clients call the OpenAI-compatible API with
    C(model) set to the route name; GPUStack spreads requests over the route's targets by weight.
  - Targets are given by model name and resolved to model ids. The list is authoritative, so targets not listed are removed.
  - GPUStack replaces a route's target list on every update and recreates (new ids) any target sent without its id.
    The module reads the current targets and sends their ids back, so a weight change is a single update that keeps
    every target id.
  - With GPUStack's gateway disabled (a pip install), the server picks a target by weighted random choice per request.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  name:
    description:
      - Route name, the C(model) clients ask for.
    type: str
    required: true
  state:
    description:
      - Whether the route should exist.
    type: str
    choices: [present, absent]
    default: present
  targets:
    description:
      - The models behind the route, each with a request weight. Required with O(state=present).
      - Weights are relative (58 and 42 send 58% and 42% of the requests).
      - A weight of V(0) keeps a target in the route without a share of the requests. GPUStack 2.2.3 accepts a mix of
        0 and positive weights; 2.3.0 refuses it (HTTP 422) and accepts only a weight-0 I(fallback) next to positive
        targets. To drain a node, plan with the filter P(pairserve.llm.route_drain_plan#filter), which drains a single
        replica as the route's fallback (both versions) and gives the restore; the maintenance plays use it. At least
        one target must keep a weight above 0.
      - Mutually exclusive with O(drain) and O(restore).
    type: list
    elements: dict
    suboptions:
      model:
        description: Name of the model (see M(pairserve.llm.gpustack_model)).
        type: str
        required: true
      weight:
        description: Request weight, 0 or more.
        type: int
        default: 100
  fallback:
    description:
      - A model that receives the requests that failed on the other targets with one of O(fallback.status_codes).
      - When the model is also one of O(targets) it keeps its weight; otherwise it is added with weight 0, serving only as fallback.
    type: dict
    suboptions:
      model:
        description: Name of the fallback model.
        type: str
        required: true
      status_codes:
        description: Which failures fall back.
        type: list
        elements: str
        choices: [4xx, 5xx]
        default: [5xx]
  drain:
    description:
      - Models to take out of the split of the existing route, every other target kept as it is (a day-2 change on one
        node while the others serve).
      - "The rule is the collection's one (C(module_utils/routes.py), also applied by the controller): when this leaves
        exactly one target at 0 and the route has no fallback of its own, that target becomes the route's weight-0
        fallback on 5xx, the form GPUStack 2.2.3 and 2.3.0 both accept (2.3.0 refuses a route that mixes 0 and positive
        weights); otherwise the drained targets get a plain weight of 0, which only 2.2.3 accepts."
      - Refused when no other target keeps a weight above 0. RV(weights_before) holds what to give back with O(restore).
      - Mutually exclusive with O(targets), O(fallback) and O(restore).
    type: list
    elements: str
    version_added: 0.1.0
  restore:
    description:
      - Weights to give back to targets of the existing route, by model name (for example RV(weights_before) of the
        drain), every other target kept as it is. A target that was parked as the route's weight-0 fallback by a
        drain leaves the fallback when its weight is above 0.
      - Mutually exclusive with O(targets), O(fallback) and O(drain).
    type: dict
    version_added: 0.1.0
  description:
    description:
      - Free text shown in the GPUStack UI. Not managed when omitted.
    type: str
  categories:
    description:
      - GPUStack categories of the route, for example V([llm]). Not managed when omitted.
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
"""

EXAMPLES = r"""
- name: Pooled mode, one route over both pairs weighted by measured throughput (244 vs 177 tok/s at concurrency 8)
  pairserve.llm.gpustack_route:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: qwen
    targets:
      - {model: qwen-node-a, weight: 58}
      - {model: qwen-node-b, weight: 42}

- name: Drain node B before its upgrade (node A keeps serving; B only takes A's 5xx), on GPUStack 2.2.3 and 2.3.0
  pairserve.llm.gpustack_route:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: qwen
    targets:
      - {model: qwen-node-a, weight: 58}
    fallback:
      model: qwen-node-b
      status_codes: [5xx]

- name: Drain node B for a change (its single replica becomes the route's weight-0 fallback)
  pairserve.llm.gpustack_route:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: qwen
    drain: [qwen-node-b]
  register: drained

- name: Give node B its weight back
  pairserve.llm.gpustack_route:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: qwen
    restore: "{{ drained.weights_before }}"

- name: Split mode, one route per profile, each falling back to the other pair on 5xx
  pairserve.llm.gpustack_route:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: qwen-text
    targets:
      - {model: qwen-node-b}
    fallback:
      model: qwen-node-a
"""

RETURN = r"""
route:
  description: The route as GPUStack reports it. Empty after O(state=absent).
  returned: always
  type: dict
  sample: {"id": 2, "name": "qwen", "targets": 2}
targets:
  description: The route's targets after the change, by model name, with their GPUStack target ids.
  returned: always
  type: list
  elements: dict
  sample: [{"id": 5, "model": "qwen-node-a", "model_id": 7, "weight": 58, "fallback_status_codes": null}]
weights_before:
  description: The weight of every target before this run, by model name (what O(restore) gives back after O(drain)).
  returned: when the route existed
  type: dict
  sample: {"qwen-node-a": 58, "qwen-node-b": 42}
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
    reweighed_route_targets,
)
from ansible_collections.pairserve.llm.plugins.module_utils.routes import target_model


def validate_targets(module, targets, fallback):
    """Input checks before anything is read or changed."""
    if not targets:
        module.fail_json(msg="targets is empty: a route needs at least one model, e.g. targets: [{model: qwen-node-a}]")
    seen = set()
    for target in targets:
        if target["weight"] < 0:
            module.fail_json(msg="targets: weight of %r is %d; weights are 0 (drained) or more"
                                 % (target["model"], target["weight"]))
        if target["model"] in seen:
            module.fail_json(msg="targets: model %r is listed twice; give each model once with its total weight"
                                 % target["model"])
        seen.add(target["model"])
    if not any(t["weight"] > 0 for t in targets):
        module.fail_json(msg="targets: every weight is 0, so the route would serve nothing; keep at least one "
                             "target above 0 (drain one replica at a time)")
    if fallback and not fallback["status_codes"]:
        module.fail_json(msg="fallback.status_codes is empty: use [5xx], [4xx] or both, or drop fallback")


def view(targets, names_by_id):
    """Comparable form of target lists: by model name, sorted, without server-only keys."""
    out = []
    for t in targets:
        codes = t.get("fallback_status_codes")
        out.append({"model": target_model(t, names_by_id),
                    "weight": t.get("weight", 0), "fallback_status_codes": sorted(codes) if codes else None})
    return sorted(out, key=lambda t: t["model"])


def main():
    spec = gpustack_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
        targets={"type": "list", "elements": "dict", "options": {
            "model": {"type": "str", "required": True},
            "weight": {"type": "int", "default": 100},
        }},
        fallback={"type": "dict", "options": {
            "model": {"type": "str", "required": True},
            "status_codes": {"type": "list", "elements": "str", "choices": ["4xx", "5xx"], "default": ["5xx"]},
        }},
        drain={"type": "list", "elements": "str"},
        restore={"type": "dict"},
        description={"type": "str"},
        categories={"type": "list", "elements": "str"},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF,
                           required_if=[("state", "present", ["targets", "drain", "restore"], True)],
                           mutually_exclusive=[("targets", "drain", "restore"), ("fallback", "drain"),
                                               ("fallback", "restore")])
    p = module.params
    name = p["name"]
    result = {"changed": False, "route": {}, "targets": []}
    reweighing = p["drain"] is not None or p["restore"] is not None
    if p["state"] == "present" and not reweighing:
        validate_targets(module, p["targets"], p["fallback"])
    if p["restore"] is not None:
        validate_restore(module, p["restore"])

    try:
        client = GpuStackClient.from_module(module)
        existing = client.find("/v2/model-routes", name)
        current = []
        if existing:
            current = [t for t in client.list("/v2/model-route-targets", {"route_id": existing["id"]})
                       if t.get("route_id") == existing["id"] and not t.get("deleted_at")]
        if p["state"] == "absent":
            ensure_absent(module, client, result, "route", "/v2/model-routes", name, existing,
                          dict(existing, route_targets=current) if existing else None)
        models = client.list("/v2/models")
    except GpuStackError as err:
        fail(module, err, "cannot read GPUStack route %r" % name)

    ids_by_name = dict((m["name"], m["id"]) for m in models if not m.get("deleted_at"))
    names_by_id = dict((v, k) for k, v in ids_by_name.items())
    if existing:
        result["weights_before"] = dict((t["model"], t["weight"]) for t in view(current, names_by_id))
    if reweighing:
        body_targets = reweighed_targets(module, name, existing, current, names_by_id)
    else:
        body_targets = wanted_targets(module, name, current, ids_by_name)
    changed_route(module, client, result, name, existing, current, body_targets, names_by_id)


def validate_restore(module, weights):
    """restore: {model: int >= 0} with one weight above 0."""
    for model, weight in weights.items():
        try:
            weights[model] = int(weight)
        except (TypeError, ValueError):
            module.fail_json(msg="restore: the weight of %r is %r, not a whole number" % (model, weight))
        if weights[model] < 0:
            module.fail_json(msg="restore: weight of %r is %d; weights are 0 (drained) or more" % (model, weight))
    if not weights:
        module.fail_json(msg="restore is empty: give {model: weight}, e.g. the weights_before of the drain")


def reweighed_targets(module, name, existing, current, names_by_id):
    """The route's targets with drain or restore applied by routes.reweigh, every target id kept."""
    p = module.params
    if not existing:
        module.fail_json(msg="route %r does not exist: %s works on an existing route; create it with targets first"
                             % (name, "drain" if p["drain"] is not None else "restore"))
    changes = dict((m, 0) for m in p["drain"]) if p["drain"] is not None else p["restore"]
    try:
        body_targets = reweighed_route_targets(current, names_by_id, changes)
    except ValueError as err:
        module.fail_json(msg="route %r: %s" % (name, err))
    if not any(t["weight"] > 0 for t in body_targets):
        module.fail_json(msg="route %r: draining %s would leave no target with a weight above 0, so the route would "
                             "serve nothing; drain one node at a time" % (name, ", ".join(sorted(changes))))
    return body_targets


def wanted_targets(module, name, current, ids_by_name):
    """The route's targets from O(targets) and O(fallback), every existing target id kept."""
    p = module.params
    wanted = [dict(t) for t in p["targets"]]
    fb = p["fallback"]
    if fb:
        codes = sorted(set(fb["status_codes"]))
        match = [t for t in wanted if t["model"] == fb["model"]]
        if match:
            match[0]["fallback_status_codes"] = codes
        else:
            wanted.append({"model": fb["model"], "weight": 0, "fallback_status_codes": codes})
    missing = [t["model"] for t in wanted if t["model"] not in ids_by_name]
    if missing:
        module.fail_json(msg="route %r: model(s) %s do not exist in GPUStack (existing: %s); create them with "
                             "pairserve.llm.gpustack_model first" % (name, ", ".join(sorted(missing)),
                                                                     ", ".join(sorted(ids_by_name)) or "none"))

    # Keep each target's id: GPUStack deletes and recreates every target sent without one.
    id_by_model_id = dict((t.get("model_id"), t["id"]) for t in current if t.get("model_id") is not None)
    body_targets = []
    for t in wanted:
        model_id = ids_by_name[t["model"]]
        item = {"model_id": model_id, "weight": t["weight"], "fallback_status_codes": t.get("fallback_status_codes")}
        if model_id in id_by_model_id:
            item["id"] = id_by_model_id[model_id]
        body_targets.append(item)
    return body_targets


def changed_route(module, client, result, name, existing, current, body_targets, names_by_id):
    """Compare, then create or update the route (check mode: only say so); exits the module."""
    p = module.params
    desired = {"name": name, "description": p["description"], "categories": p["categories"],
               "targets": view(body_targets, names_by_id)}
    have = dict(existing or {}, targets=view(current, names_by_id)) if existing else None
    changed, before, after = field_diff(desired, have)
    if not changed:
        result["route"] = existing
        result["targets"] = [dict(t, model=names_by_id.get(t.get("model_id"))) for t in current]
        module.exit_json(**result)

    result["changed"] = True
    result["diff"] = present_diff("route %s" % name, changed, before, after, bool(existing))
    body = {"name": name, "targets": body_targets}
    for key in ("description", "categories"):
        if p[key] is not None:
            body[key] = p[key]
    if module.check_mode:
        result["route"] = dict(existing or {}, name=name)
        result["targets"] = [dict(t, model=names_by_id.get(t["model_id"])) for t in body_targets]
        module.exit_json(**result)
    try:
        if existing:
            route = client.put(path_id("/v2/model-routes", existing["id"]), body)
        else:
            route = client.post("/v2/model-routes", body)
        after_targets = [t for t in client.list("/v2/model-route-targets", {"route_id": route["id"]})
                         if t.get("route_id") == route["id"] and not t.get("deleted_at")]
    except GpuStackError as err:
        fail(module, err, "cannot %s GPUStack route %r" % ("update" if existing else "create", name))
    result["route"] = route
    result["targets"] = [dict(t, model=names_by_id.get(t.get("model_id"))) for t in after_targets]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
