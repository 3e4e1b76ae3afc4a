# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rules of a node's maintenance (playbooks/maintenance.yml, the maintenance role's entry point maintenance):
which runs it refuses before anything changes, and whether the cards a node reports after the operator's change
are the ones its replicas were registered for; and GPUStack's view of one node, which every drain reads.

Used by the filters pairserve.llm.maintenance_host_problems, pairserve.llm.maintenance_card_changes and
pairserve.llm.maintenance_view. Pure functions over plain values, so the rules are unit-tested without GPUStack.
"""

from __future__ import annotations

import re

from ansible_collections.pairserve.llm.plugins.module_utils import rebuild
from ansible_collections.pairserve.llm.plugins.module_utils.routes import named_targets

ACTIONS = ("reboot", "pause", "none")


def host_problems(play_hosts, gpu_nodes, server_hosts, action, allow_downtime=False):
    """Why this run may not start, as texts naming the hosts and variables (empty: it may).

    play_hosts: the play's hosts after --limit; gpu_nodes / server_hosts: the inventory's groups; action: the
    variable pairserve_maintenance_action."""
    play_hosts, gpu_nodes, server_hosts = list(play_hosts or []), list(gpu_nodes or []), list(server_hosts or [])
    out = []
    if action not in ACTIONS:
        out.append("pairserve_maintenance_action is %r; it must be one of %s" % (action, ", ".join(ACTIONS)))
    if len(play_hosts) != 1:
        out.append("maintenance.yml takes one GPU node out of the route at a time, and this run has %d host(s)%s: run "
                   "it with --limit <node> (one of %s)" % (len(play_hosts),
                                                           (" (%s)" % ", ".join(play_hosts)) if play_hosts else "",
                                                           ", ".join(gpu_nodes) or "the group gpu_nodes, empty"))
    outside = [h for h in play_hosts if h not in gpu_nodes]
    if outside:
        out.append("%s %s not in the group gpu_nodes: only a GPU node has replicas to take out of the route"
                   % (", ".join(outside), "is" if len(outside) == 1 else "are"))
    if action == "reboot" and not allow_downtime:
        servers = [h for h in play_hosts if h in server_hosts]
        if servers:
            out.append("%s is also the GPUStack server: rebooting it stops the server, and every route with it, "
                       "whatever the other node serves. Reboot it with the server-loss runbook "
                       "(docs/how-to/backup-restore.md), or accept the outage with "
                       "-e pairserve_maintenance_allow_downtime=true" % servers[0])
    return out


def _card(gpu):
    return "%s %s %s MiB cc %s" % (gpu.get("uuid", "?"), gpu.get("name", "?"), gpu.get("memory_total_mib", "?"),
                                   gpu.get("compute_capability", "?"))


def card_changes(before, after, host):
    """What the node's cards report now (``after``, gpu_pairs' pairserve_gpu) that they did not before the change
    (``before``), one text per card by index, naming the host: the fields the node's pairs record keeps
    (rebuild.GPU_KEYS: UUID, name, memory, compute capability) and the pairs gpu_pairs makes of them. Empty when
    both agree: the replicas' registration still means the same cards."""
    was, now = rebuild.detected(before or {}), rebuild.detected(after or {})
    was_by_index = {g["index"]: g for g in was["gpus"]}
    now_by_index = {g["index"]: g for g in now["gpus"]}
    out = []
    for index in sorted(set(was_by_index) | set(now_by_index)):
        old, new = was_by_index.get(index), now_by_index.get(index)
        if old == new:
            continue
        if new is None:
            out.append("%s: GPU %d (%s) is gone" % (host, index, _card(old)))
        elif old is None:
            out.append("%s: GPU %d (%s) is new" % (host, index, _card(new)))
        else:
            out.append("%s: GPU %d was %s, now reports %s" % (host, index, _card(old), _card(new)))
    if not out and was["pairs"] != now["pairs"]:
        out.append("%s: gpu_pairs pairs the cards otherwise now (%s, was %s)"
                   % (host, ", ".join("+".join(str(i) for i in p.get("gpustack_gpu_indexes", [])) for p in now["pairs"]),
                      ", ".join("+".join(str(i) for i in p.get("gpustack_gpu_indexes", [])) for p in was["pairs"])))
    return out


# Fields of another node's replica that a drain of this node must leave as they are (the proof that it did).
OTHERS_FIELDS = ("id", "gpu_selector", "backend_version", "backend_parameters", "local_path", "image_name")


def node_view(info, worker, model_pattern):
    """GPUStack's view of one node, from a ``gpustack_info`` result with workers, gpus, models, model_instances
    and routes: ``workers`` (the node's worker record by name), ``gpus`` (its devices by index), ``models`` (its
    replicas: names matching ``model_pattern``, a regular expression matched at the start, as Jinja's ``match``),
    ``instances`` (theirs), ``routes`` (every route with a target among its replicas: {name, id, targets} with
    targets by model name, routes.named_targets), ``others`` ({name: the OTHERS_FIELDS and sorted instance ids} of
    every other model)."""
    pattern = re.compile(model_pattern)
    models = info.get("models") or []
    instances = info.get("model_instances") or []
    mine = [m for m in models if pattern.match(str(m.get("name", "")))]
    mine_names = [m.get("name") for m in mine]
    names_by_id = dict((m.get("id"), m.get("name")) for m in models)
    routes = []
    for route in info.get("routes") or []:
        targets = named_targets(route.get("route_targets"), names_by_id)
        if any(t["model"] in mine_names for t in targets):
            routes.append({"name": route.get("name"), "id": route.get("id"), "targets": targets})
    others = {}
    for model in models:
        if model.get("name") not in mine_names:
            entry = dict((key, model.get(key)) for key in OTHERS_FIELDS)
            entry["instances"] = sorted(i.get("id") for i in instances if i.get("model_name") == model.get("name"))
            others[model.get("name")] = entry
    return {
        "workers": [w for w in info.get("workers") or [] if w.get("name") == worker],
        "gpus": sorted((g for g in info.get("gpus") or [] if g.get("worker_name") == worker),
                       key=lambda g: g.get("index")),
        "models": mine,
        "instances": [i for i in instances if i.get("model_name") in mine_names],
        "routes": routes,
        "others": others,
    }
