# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.firewall_rules (documented beside this file); the rules are module_utils/firewall.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import firewall


def firewall_rules(derived, extra, worker_port, metrics_port, service_range="", ray_range=""):
    if not isinstance(derived, (list, tuple)):
        raise AnsibleFilterError("pairserve.llm.firewall_rules: expected a list of derived sources, got %s"
                                 % type(derived).__name__)
    try:
        return {"sources": firewall.sources(list(derived), extra if extra is not None else []),
                "ports": firewall.guarded_ports(worker_port, metrics_port, service_range, ray_range)}
    except firewall.FirewallError as err:
        raise AnsibleFilterError("pairserve.llm.firewall_rules: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm host firewall filter."""

    def filters(self):
        return {"firewall_rules": firewall_rules}
