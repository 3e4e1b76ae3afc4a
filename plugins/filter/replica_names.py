# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.replica_name and replica_name_pattern (documented in their .yml files); the rule is
module_utils/replica_names.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import replica_names


def replica_name(model_name, host, pair=0):
    if not model_name or not host:
        raise AnsibleFilterError("pairserve.llm.replica_name: needs the model name and the host")
    try:
        return replica_names.replica_name(model_name, host, pair)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError("pairserve.llm.replica_name: pair %r: %s" % (pair, err)) from err


def replica_name_pattern(model_name, host):
    if not model_name or not host:
        raise AnsibleFilterError("pairserve.llm.replica_name_pattern: needs the model name and the host")
    return replica_names.pattern(model_name, host)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm replica name filters."""

    def filters(self):
        return {"replica_name": replica_name, "replica_name_pattern": replica_name_pattern}
