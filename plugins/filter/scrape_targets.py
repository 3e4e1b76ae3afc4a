# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.scrape_targets (documented beside this file); the jobs are module_utils/scrape_targets.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import scrape_targets as st


def scrape_targets(server, nodes, instances, route_models=None):
    if not isinstance(server, dict) or not isinstance(nodes, dict):
        raise AnsibleFilterError("pairserve.llm.scrape_targets: expected the server and the nodes as dicts")
    try:
        return st.targets(server, nodes, list(instances or []), route_models)
    except st.TargetsError as err:
        raise AnsibleFilterError("pairserve.llm.scrape_targets: %s" % err) from err


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm Prometheus targets filter."""

    def filters(self):
        return {"scrape_targets": scrape_targets}
