# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.machine_id_problems (documented in its .yml file); the rule is module_utils/host_identity.py's,
whose address rule the validation play runs."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.host_identity import machine_id_problems as _problems


def machine_id_problems(ids_by_host):
    """[{host, variable, problem, text}] for each host that is another host's machine (same /etc/machine-id)."""
    if not isinstance(ids_by_host, dict):
        raise AnsibleFilterError("pairserve.llm.machine_id_problems: expected {host: machine id}")
    return [{"host": host, "variable": variable, "problem": problem, "text": "%s: %s: %s" % (host, variable, problem)}
            for host, variable, problem in _problems(ids_by_host)]


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm host identity filters."""

    def filters(self):
        return {"machine_id_problems": machine_id_problems}
