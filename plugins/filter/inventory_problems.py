# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.inventory_problems, inventory_check_vars, controller_problems and gpu_uuid_conflicts
(documented in their .yml files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.inventory_check import (
    SECRET_VARS,
    VIEW_VARS,
    controller_problems as _controller_problems,
    gpu_conflicts,
    problems,
)


def inventory_problems(views, groups, constraints_versions=None):
    if not isinstance(views, dict) or not isinstance(groups, dict):
        raise AnsibleFilterError("pairserve.llm.inventory_problems: expected views and groups as dicts")
    return problems(views, groups, constraints_versions)


def controller_problems(view, host, nodes):
    """The controller's problems on ``host`` (documented in controller_problems.yml)."""
    if not isinstance(view, dict) or not isinstance(nodes, (list, tuple)):
        raise AnsibleFilterError("pairserve.llm.controller_problems: expected the controller's variables as a dict "
                                 "and the gpu_nodes hosts as a list")
    return list(_controller_problems(host, view, list(nodes)))


def inventory_check_vars(_input):
    """The names a host's view holds (documented in inventory_check_vars.yml)."""
    return {"vars": list(VIEW_VARS), "secrets": list(SECRET_VARS)}


def gpu_uuid_conflicts(pairs_by_host, others=None):
    """GPUs in the pairs of two hosts (documented in gpu_uuid_conflicts.yml)."""
    if not isinstance(pairs_by_host, dict) or not isinstance(others or {}, dict):
        raise AnsibleFilterError("pairserve.llm.gpu_uuid_conflicts: expected {host: pairs} and {worker: [uuid]} as "
                                 "dicts, got %s and %s" % (type(pairs_by_host).__name__, type(others).__name__))
    for host, pairs in pairs_by_host.items():
        if pairs is not None and (not isinstance(pairs, list) or not all(isinstance(p, dict) for p in pairs)):
            raise AnsibleFilterError("pairserve.llm.gpu_uuid_conflicts: %s: expected the pairs of its pairserve_gpu "
                                     "fact (a list of dicts with uuids), got %r" % (host, pairs))
    return gpu_conflicts(pairs_by_host, others)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm inventory check filters."""

    def filters(self):
        return {"inventory_problems": inventory_problems, "inventory_check_vars": inventory_check_vars,
                "controller_problems": controller_problems, "gpu_uuid_conflicts": gpu_uuid_conflicts}
