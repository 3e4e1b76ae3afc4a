# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.firewall_ruleset (documented beside this file); the rules are module_utils/firewall.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import firewall


def firewall_ruleset(spec):
    if not isinstance(spec, dict):
        raise AnsibleFilterError("pairserve.llm.firewall_ruleset: expected a dict of the table's inputs, got %s"
                                 % type(spec).__name__)
    try:
        return firewall.node_rules(spec)
    except firewall.FirewallError as err:
        raise AnsibleFilterError("pairserve.llm.firewall_ruleset: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm host firewall filter."""

    def filters(self):
        return {"firewall_ruleset": firewall_ruleset}
