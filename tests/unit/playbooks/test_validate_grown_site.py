"""The validation rules over a grown site (issue 42, part 3): three GPU nodes, node-c holding two pairs weighed
per pair. The sound three-node views come from tests/support/inventory_views.py (grown_views)."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils.inventory_check import problems
from support.inventory_views import GROWN_GROUPS, grown_views


def found(views, groups=GROWN_GROUPS):
    return [p["text"] for p in problems(views, groups, ["2.2.3", "2.3.0"])]


VERIFY = [{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b", "qwen-node-c", "qwen-node-c-p1"],
           "max_model_len": 65536, "multimodal": True}]


def test_a_site_of_three_nodes_one_with_two_pairs_weighed_per_pair_has_no_problem():
    assert found(grown_views()) == []
    assert found(grown_views(node_a={"pairserve_verify_routes": VERIFY})) == []
    # node-c's count left to detection: its list is checked by the route role once the pairs are found.
    assert found(grown_views(node_c={"pairserve_expected_pairs": None})) == []


@pytest.mark.parametrize("weights, problem", [
    ({"node-a": 25, "node-b": 19, "node-c": [24, 32, 8]},
     "node-a: pairserve_route_weights: node-c: [24, 32, 8] gives 3 pair weight(s), but its pairserve_expected_pairs "
     "is 2: one weight per pair, pair 0 first"),
    ({"node-a": 25, "node-b": 19, "node-c": [24, -32]},
     "node-a: pairserve_route_weights: node-c: [24, -32] is not a list of whole numbers >= 0, one per pair "
     "(pair 0 first)"),
    ({"node-a": 25, "node-b": 19, "node-c": []},
     "node-a: pairserve_route_weights: node-c: [] is not a list of whole numbers >= 0, one per pair (pair 0 first)"),
    ({"node-a": 0, "node-b": 0, "node-c": [0, 0]},
     "node-a: pairserve_route_weights: no weight above 0 for node-a, node-b, node-c (a host left out gets 50): the "
     "route would send nothing"),
])
def test_pair_weights_that_cannot_hold_are_named_with_host_and_variable(weights, problem):
    views = grown_views(node_a={"pairserve_route_weights": weights})
    assert found(views) == [problem]


def test_a_host_named_like_another_hosts_second_pair_is_refused():
    """node-b's second pair is qwen-node-b-p1: a GPU node named node-b-p1 would share replica names with it."""
    groups = {"gpustack_server": ["node-a"], "gpu_nodes": ["node-a", "node-b", "node-b-p1"]}
    views = grown_views()
    views["node-b-p1"] = views.pop("node-c")
    views["node-b-p1"].pop("pairserve_expected_pairs")
    for view in views.values():
        view["pairserve_route_weights"] = {"node-a": 25, "node-b": 19, "node-b-p1": 56}
    assert found(views, groups) == [
        "node-b-p1: pairserve_model_name: replica names qwen-node-b-p1 and qwen-node-b-p1-p<N> (one per pair) can "
        "also be node-b's (qwen-node-b): rename one host or give it another pairserve_model_name"]
    # Another model name for that host keeps the names apart.
    views["node-b-p1"]["pairserve_model_name"] = "other"
    assert found(views, groups) == []


def test_every_pair_of_a_host_with_a_stated_pair_count_is_verified():
    """node-c states two pairs: its second replica, qwen-node-c-p1, must be in a verify route too."""
    short = [dict(VERIFY[0], models=["qwen-node-a", "qwen-node-b", "qwen-node-c"])]
    assert found(grown_views(node_a={"pairserve_verify_routes": short})) == [
        "node-a: pairserve_verify_routes: qwen-node-c-p1 (the replica of node-c's pair 1; its pairserve_expected_pairs "
        "is 2) is in no route verify checks: add it to the models of qwen"]
