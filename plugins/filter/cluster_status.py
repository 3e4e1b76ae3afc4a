# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.cluster_status (documented in cluster_status.yml); the rules are module_utils/status.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import status


def cluster_status(info, nodes=None, verify=None, expected_nodes=None, reach=None):
    if not isinstance(info, dict):
        raise AnsibleFilterError("pairserve.llm.cluster_status: expected the result of pairserve.llm.gpustack_info "
                                 "(a dict), got %s" % type(info).__name__)
    if nodes is not None and not isinstance(nodes, list):
        raise AnsibleFilterError("pairserve.llm.cluster_status: expected nodes as a list of disk reports, got %s"
                                 % type(nodes).__name__)
    if expected_nodes is not None and not isinstance(expected_nodes, dict):
        raise AnsibleFilterError("pairserve.llm.cluster_status: expected expected_nodes as {host: worker name}, "
                                 "got %s" % type(expected_nodes).__name__)
    if reach is not None and not isinstance(reach, dict):
        raise AnsibleFilterError("pairserve.llm.cluster_status: expected reach as {worker name: {url, ok, error}}, "
                                 "got %s" % type(reach).__name__)
    try:
        return status.cluster_status(info, nodes or [], verify or None, expected_nodes or {}, reach or {})
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise AnsibleFilterError("pairserve.llm.cluster_status: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm cluster status filter."""

    def filters(self):
        return {"cluster_status": cluster_status}
