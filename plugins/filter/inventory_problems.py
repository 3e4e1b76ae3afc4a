# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.inventory_problems, inventory_report, inventory_check_vars, secret_state,
controller_problems and gpu_uuid_conflicts (documented in their .yml files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.template import AnsibleUndefined, accept_args_markers, get_first_marker_arg

from ansible_collections.pairserve.llm.plugins.module_utils.inventory_check import (
    SECRET_VARS,
    SERVER_VAULTED_VARS,
    VAULTED_VARS,
    VIEW_VARS,
    controller_problems as _controller_problems,
    verify_problems as _verify_problems,
    gpu_conflicts,
    problems,
    ready_worker_gpus,
    report,
)


def inventory_problems(views, groups, constraints_versions=None):
    if not isinstance(views, dict) or not isinstance(groups, dict):
        raise AnsibleFilterError("pairserve.llm.inventory_problems: expected views and groups as dicts")
    return problems(views, groups, constraints_versions)


def inventory_report(found):
    """The problems as the validation play prints them (documented in inventory_report.yml)."""
    if not isinstance(found, list) or not all(isinstance(p, dict) and {"host", "variable", "problem"} <= set(p)
                                              for p in found):
        raise AnsibleFilterError("pairserve.llm.inventory_report: expected a list of problems, each with host, "
                                 "variable and problem")
    return report(found)


@accept_args_markers
def secret_state(value):
    """set, unset or locked (vaulted, and no vault password in this run); documented in secret_state.yml.

    A vaulted value this run cannot decrypt reaches the filter as Ansible's marker instead of stopping the template,
    so the validation play lists it with the other problems; the value itself is never returned."""
    marker = get_first_marker_arg([value], {})
    if isinstance(marker, AnsibleUndefined):
        return "unset"
    if marker is not None:
        # ansible-core's marker of a vaulted value it has no secret for; any other error stays the error it is
        return "locked" if type(marker).__name__ == "VaultExceptionMarker" else marker
    return "set" if value is not None and len(str(value)) > 0 else "unset"


def controller_problems(view, host, nodes):
    """The controller's problems on ``host`` (documented in controller_problems.yml)."""
    if not isinstance(view, dict) or not isinstance(nodes, (list, tuple)):
        raise AnsibleFilterError("pairserve.llm.controller_problems: expected the controller's variables as a dict "
                                 "and the gpu_nodes hosts as a list")
    return list(_controller_problems(host, view, list(nodes)))


def verify_problems(view, host):
    """The verify role's timing problems on ``host`` (documented in verify_problems.yml)."""
    if not isinstance(view, dict):
        raise AnsibleFilterError("pairserve.llm.verify_problems: expected the verify role's variables as a dict, got %s"
                                 % type(view).__name__)
    return list(_verify_problems(host, view))


def inventory_check_vars(_input):
    """The names a host's view holds (documented in inventory_check_vars.yml)."""
    return {"vars": list(VIEW_VARS), "secrets": list(SECRET_VARS), "vaulted": list(VAULTED_VARS),
            "server_only": list(SERVER_VAULTED_VARS)}


def gpu_uuid_conflicts(pairs_by_host, others=None, gpustack=None, worker=""):
    """GPUs in the pairs of two hosts (documented in gpu_uuid_conflicts.yml)."""
    if not isinstance(pairs_by_host, dict) or not isinstance(others or {}, dict):
        raise AnsibleFilterError("pairserve.llm.gpu_uuid_conflicts: expected {host: pairs} and {worker: [uuid]} as "
                                 "dicts, got %s and %s" % (type(pairs_by_host).__name__, type(others).__name__))
    if not isinstance(gpustack or {}, dict):
        raise AnsibleFilterError("pairserve.llm.gpu_uuid_conflicts: gpustack is a gpustack_info result (a dict with "
                                 "workers and gpus), got %s" % type(gpustack).__name__)
    others = dict(others or {})
    for name, uuids in ready_worker_gpus(gpustack, str(worker or "")).items():
        others[name] = list(others.get(name) or []) + uuids
    for host, pairs in pairs_by_host.items():
        if pairs is not None and (not isinstance(pairs, list) or not all(isinstance(p, dict) for p in pairs)):
            raise AnsibleFilterError("pairserve.llm.gpu_uuid_conflicts: %s: expected the pairs of its pairserve_gpu "
                                     "fact (a list of dicts with uuids), got %r" % (host, pairs))
    return gpu_conflicts(pairs_by_host, others)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm inventory check filters."""

    def filters(self):
        return {"inventory_problems": inventory_problems, "inventory_check_vars": inventory_check_vars,
                "inventory_report": inventory_report, "secret_state": secret_state,
                "controller_problems": controller_problems, "gpu_uuid_conflicts": gpu_uuid_conflicts,
                "verify_problems": verify_problems}
