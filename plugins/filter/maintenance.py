# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.maintenance_host_problems, pairserve.llm.maintenance_card_changes and
pairserve.llm.maintenance_view (documented beside this file); the rules are module_utils/maintenance.py's."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import maintenance


def maintenance_host_problems(play_hosts, gpu_nodes, server_hosts, action, allow_downtime=False):
    try:
        return maintenance.host_problems(list(play_hosts or []), list(gpu_nodes or []), list(server_hosts or []),
                                         str(action), bool(allow_downtime))
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.maintenance_host_problems: %s" % err) from err


def maintenance_card_changes(before, after, host):
    if not isinstance(before, dict) or not isinstance(after, dict):
        raise AnsibleFilterError("pairserve.llm.maintenance_card_changes: expected two pairserve_gpu facts (dicts), "
                                 "got %s and %s" % (type(before).__name__, type(after).__name__))
    try:
        return maintenance.card_changes(before, after, str(host))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise AnsibleFilterError("pairserve.llm.maintenance_card_changes: %s" % err) from err


def maintenance_view(info, worker, model_pattern):
    if not isinstance(info, dict):
        raise AnsibleFilterError("pairserve.llm.maintenance_view: expected a gpustack_info result (a dict), got %s"
                                 % type(info).__name__)
    try:
        return maintenance.node_view(info, str(worker), str(model_pattern))
    except re.error as err:
        raise AnsibleFilterError("pairserve.llm.maintenance_view: the model pattern %r is not a regular expression "
                                 "(%s)" % (model_pattern, err)) from err
    except (TypeError, AttributeError) as err:
        raise AnsibleFilterError("pairserve.llm.maintenance_view: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm node maintenance filters."""

    def filters(self):
        return {"maintenance_host_problems": maintenance_host_problems,
                "maintenance_card_changes": maintenance_card_changes,
                "maintenance_view": maintenance_view}
