# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter pairserve.llm.worker_health_url (documented in its .yml file); the rule is module_utils/reach.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import reach


def worker_health_url(worker):
    if not isinstance(worker, dict):
        raise AnsibleFilterError("pairserve.llm.worker_health_url: expected a GPUStack worker record (a dict), got %s"
                                 % type(worker).__name__)
    return reach.worker_health_url(worker)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm reachability filter."""

    def filters(self):
        return {"worker_health_url": worker_health_url}
