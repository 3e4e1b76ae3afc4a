# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.worker_health_url, replica_reach_urls and replica_reach_problems (each documented in its .yml
file); the rules are module_utils/reach.py's and module_utils/_verify_diagnosis.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import _verify_diagnosis, reach


def worker_health_url(worker):
    if not isinstance(worker, dict):
        raise AnsibleFilterError("pairserve.llm.worker_health_url: expected a GPUStack worker record (a dict), got %s"
                                 % type(worker).__name__)
    return reach.worker_health_url(worker)


def _records(name, instances, workers):
    if not isinstance(instances, list) or not isinstance(workers, list):
        raise AnsibleFilterError("pairserve.llm.%s: expected GPUStack's instance records and worker records (two "
                                 "lists), got %s and %s" % (name, type(instances).__name__, type(workers).__name__))


def replica_reach_urls(instances, workers):
    _records("replica_reach_urls", instances, workers)
    return _verify_diagnosis.probes(instances, workers)


def replica_reach_problems(instances, workers, probes):
    _records("replica_reach_problems", instances, workers)
    return _verify_diagnosis.node_lines(_verify_diagnosis.with_reach(instances, workers, reach.answers(probes)))


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm reachability filter."""

    def filters(self):
        return {"worker_health_url": worker_health_url, "replica_reach_urls": replica_reach_urls,
                "replica_reach_problems": replica_reach_problems}
