# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters pairserve.llm.bench_weights_file, bench_host_weights and bench_weights_kept (documented in their .yml
files); the rules are module_utils/bench_weights.py's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.pairserve.llm.plugins.module_utils import bench_weights


def bench_weights_file(value, inventory_dir=None):
    """pairserve_bench_weights_file -> {path, problem}."""
    path, problem = bench_weights.weights_file(value, inventory_dir)
    return {"path": path, "problem": problem}


def bench_host_weights(replica_weights, hosts, model_name, path="", inventory_weights=None, route=None):
    """Measured weights by replica -> the plan: per-host weights (or the problem), the YAML, the file."""
    if not isinstance(replica_weights, dict):
        raise AnsibleFilterError("pairserve.llm.bench_host_weights: expected {replica: weight}, got %s"
                                 % type(replica_weights).__name__)
    if inventory_weights is not None and not isinstance(inventory_weights, dict):
        raise AnsibleFilterError("pairserve.llm.bench_host_weights: pairserve_route_weights is not a dict: %r"
                                 % (inventory_weights,))
    return bench_weights.keep_plan(replica_weights, list(hosts or []), model_name, path or "",
                                   inventory_weights or {}, route)


def bench_weights_kept(plan, applied=False, written=None):
    """The plan, whether the run applied the weights, the file write's result -> {lines, yaml, temporary, ...}."""
    if not isinstance(plan, dict):
        raise AnsibleFilterError("pairserve.llm.bench_weights_kept: expected the plan of bench_host_weights")
    return bench_weights.kept(plan, bool(applied), written or None)


class FilterModule:  # pylint: disable=too-few-public-methods
    """pairserve.llm bench weights filters."""

    def filters(self):
        return {"bench_weights_file": bench_weights_file, "bench_host_weights": bench_host_weights,
                "bench_weights_kept": bench_weights_kept}
