#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn GPUStack's maintenance mode of one worker on or off."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpustack_worker_maintenance
short_description: Turn GPUStack's maintenance mode of one worker on or off
version_added: 0.1.0
description:
  - Sets the C(maintenance) of one GPUStack worker record (C(PUT /v2/workers/<id>) with the record's own name and
    labels, so that nothing else of it changes).
  - A worker in maintenance shows the state C(maintenance). GPUStack 2.2.3's scheduler places new instances only on
    C(ready) workers, and its cleaner does not delete the instances of a worker in maintenance whose heartbeat is
    lost (without it, a worker silent for C(GPUSTACK_MODEL_INSTANCE_RESCHEDULE_GRACE_PERIOD), 300 s by default,
    loses its instances, which GPUStack then schedules again). A worker that registers again keeps the mode.
  - Turned off, GPUStack computes the worker's state again (C(ready) once its heartbeat and health check are fresh).
  - The collection's maintenance play (C(playbooks/maintenance.yml)) turns it on while a node is rebooted.
author:
  - pairserve.llm maintainers (@pairserve)
options:
  name:
    description:
      - The worker's name in GPUStack (the node's C(pairserve_gpustack_worker_name), the inventory hostname by default).
    type: str
    required: true
  enabled:
    description:
      - V(true) puts the worker in maintenance, V(false) takes it out.
    type: bool
    required: true
  reason:
    description:
      - The text GPUStack shows as the worker's state message while it is in maintenance (its C(maintenance.message)).
        A worker already in maintenance with another text gets this one.
    type: str
    default: ""
extends_documentation_fragment:
  - pairserve.llm.gpustack
  - pairserve.llm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the worker and reports whether its maintenance would change.
  diff_mode:
    support: full
    details:
      - The worker's C(maintenance) before and after.
"""

EXAMPLES = r"""
- name: Keep GPUStack from rescheduling node B's replicas while it reboots
  pairserve.llm.gpustack_worker_maintenance:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: node-b
    enabled: true
    reason: "pairserve maintenance: kernel update"

- name: Back in service
  pairserve.llm.gpustack_worker_maintenance:
    api_url: http://node-a:30080
    api_key: "{{ pairserve_gpustack_management_key }}"
    name: node-b
    enabled: false
"""

RETURN = r"""
worker:
  description: The worker after the change (in check mode, as it is), with C(id), C(name), C(state) and C(maintenance).
  returned: always
  type: dict
  sample: {"id": 2, "name": "node-b", "state": "maintenance", "maintenance": {"enabled": true, "message": "reboot"}}
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

WORKERS = "/v2/workers"


def wanted_maintenance(current, enabled, message):
    """The maintenance record to send, or None when ``current`` (the worker's, possibly None) is already it.
    Off is off whatever message the record keeps."""
    current = current or {}
    if not enabled:
        return None if not current.get("enabled") else {"enabled": False, "message": None}
    want = {"enabled": True, "message": message or None}
    have = {"enabled": bool(current.get("enabled")), "message": current.get("message") or None}
    return None if have == want else want


def public(worker):
    return {key: worker.get(key) for key in ("id", "name", "state", "state_message", "maintenance")}


def main():
    spec = gpustack_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        enabled={"type": "bool", "required": True},
        reason={"type": "str", "default": ""},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=GPUSTACK_REQUIRED_ONE_OF)
    name = module.params["name"]
    result = {"changed": False}
    try:
        client = GpuStackClient.from_module(module)
        worker = client.find(WORKERS, name)
        if worker is None:
            module.fail_json(msg="GPUStack has no worker named %r: check pairserve_gpustack_worker_name of that node "
                                 "and that its worker registered (gpustack_info gather=[workers])" % name)
        want = wanted_maintenance(worker.get("maintenance"), module.params["enabled"], module.params["reason"])
        if want is not None:
            result["changed"] = True
            if module._diff:  # pylint: disable=protected-access
                result["diff"] = {"before": {"maintenance": worker.get("maintenance")}, "after": {"maintenance": want},
                                  "before_header": "worker %s" % name, "after_header": "worker %s (desired)" % name}
            if not module.check_mode:
                # WorkerUpdate carries name, labels and maintenance; labels default to {} when left out.
                worker = client.put(path_id(WORKERS, worker["id"]),
                                    {"name": worker["name"], "labels": worker.get("labels") or {}, "maintenance": want})
    except GpuStackError as err:
        fail(module, err, "cannot set the maintenance of GPUStack worker %r" % name)
    result["worker"] = public(worker or {})
    module.exit_json(**result)


if __name__ == "__main__":
    main()
