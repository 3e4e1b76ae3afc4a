# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.held_ports_problems (documented in its .yml file); the rule is module_utils/node_ports.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils.node_ports import held_ports_problems as _problems


def held_ports_problems(sockets, wanted, host):
    """The ports the collection will bind that another program holds, one problem each."""
    if not isinstance(sockets, list) or not isinstance(wanted, list):
        raise AnsibleFilterError("pairserve.llm.held_ports_problems: expected the sockets of "
                                 "pairserve.llm.listening_ports and a list of {port, variable, owners}")
    return _problems(sockets, wanted, host)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm port filters."""

    def filters(self):
        return {"held_ports_problems": held_ports_problems}
