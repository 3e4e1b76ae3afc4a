"""plugins/module_utils/routes.py on the rules tests/unit/plugins/filter/test_routes.py leaves implicit: the largest
remainder of `proportional` on exact figures, the inputs `bounded_weights`, `reweigh`, `host_split` and
`weight_problems` must refuse or read leniently, a host's share, the static split naming a replica of no host, and the
targets by name (external providers left out).

The seed's weights, drains and restores, keep_unknown, carriers and the filters through Ansible are in
tests/unit/plugins/filter/test_routes.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import routes


@pytest.mark.parametrize("figures, total, expected", [
    ({"x": 1, "y": 2}, 7, {"x": 2, "y": 5}),             # 2.33 / 4.67: the larger remainder gets the spare unit
    ({"big": 1000, "tiny": 1}, 10, {"big": 9, "tiny": 1}),  # 9.99 / 0.01: tiny keeps 1, taken from the largest
    ({"a": -5, "b": 3, "c": None}, 100, {"a": 0, "b": 100, "c": 0}),  # negative and missing count as 0
    ({"a": "3", "b": "1"}, 100, {"a": 75, "b": 25}),     # numbers as text (inventory values)
    ({"a": 1, "b": 1, "c": 1}, 100, {"a": 34, "b": 33, "c": 33}),  # equal remainders: the first in order
])
def test_proportional_by_the_largest_remainder(figures, total, expected):
    got = routes.proportional(figures, total)
    assert got == expected and list(got) == list(figures)


def test_bounded_weights_refuses_a_nan_share_naming_the_shares():
    with pytest.raises(ValueError, match=r"negative or NaN weight share in \{'a': nan, 'b': 1\}"):
        routes.bounded_weights({"a": float("nan"), "b": 1}, ["a", "b"])
    with pytest.raises(ValueError, match="no warm target to route to"):
        routes.bounded_weights({"z": 1}, ["a", "b"])


def test_reweigh_reads_missing_weights_as_0_keeps_other_fields_and_never_parks_a_lone_target():
    route = [{"id": 11, "model": "a", "weight": None}, {"id": 12, "model": "b", "weight": 40, "fallback_status_codes": []}]
    got = routes.reweigh(route, {"a": "60"})
    assert got == [{"id": 11, "model": "a", "weight": 60, "fallback_status_codes": None},
                   {"id": 12, "model": "b", "weight": 40, "fallback_status_codes": None}]
    # A route of one target set to 0 has no other target to carry it: no fallback is made of it.
    assert routes.reweigh([{"model": "a", "weight": 100}], {"a": 0}) == [
        {"model": "a", "weight": 0, "fallback_status_codes": None}]


def test_host_split_defaults_to_50_and_orders_a_list_by_pair():
    assert routes.host_split(None, "node-a", [("q-node-a", 0)]) == {"q-node-a": 50}
    assert routes.host_split({"node-a": 7}, "node-a", [("q-node-a-p1", 1), ("q-node-a", None)]) == {
        "q-node-a": 4, "q-node-a-p1": 3}
    assert routes.host_split({"node-a": (10, 30)}, "node-a", [("q-node-a-p1", "1"), ("q-node-a", "0")]) == {
        "q-node-a": 10, "q-node-a-p1": 30}
    with pytest.raises(ValueError, match=r"node-a has 1 pair weight\(s\) \[5\] but 0 pair\(s\) now \(none\)"):
        routes.host_split({"node-a": [5]}, "node-a", [])


@pytest.mark.parametrize("weights, hosts, expected", [
    (None, ["node-a"], []),
    ({}, ["node-a", "node-b"], []),
    ([58, 42], ["node-a"], ["expected {host: weight} for the pooled route, got [58, 42]"]),
    ({"node-c": 10}, ["node-a"], ["node-c is not a host of gpu_nodes (node-a)"]),
    ({"node-a": True}, ["node-a"], ["node-a: True is not a whole number >= 0 (or a list of them, one per pair)",
                                    "no weight above 0 for node-a (a host left out gets 50): the route would send nothing"]),
    ({"node-a": 2.5, "node-b": 0}, ["node-a", "node-b"],
     ["node-a: 2.5 is not a whole number >= 0 (or a list of them, one per pair)",
      "no weight above 0 for node-a, node-b (a host left out gets 50): the route would send nothing"]),
    ({"node-a": 0}, [], ["node-a is not a host of gpu_nodes ()"]),
])
def test_weight_problems(weights, hosts, expected):
    assert routes.weight_problems(weights, hosts) == expected


def test_host_share_of_a_number_a_list_and_a_host_left_out():
    assert routes.host_share({"node-a": "42"}, "node-a") == 42
    assert routes.host_share({"node-a": [24, 32]}, "node-a") == 56
    assert routes.host_share({"node-a": 58}, "node-b") == 50 and routes.host_share(None, "node-b", default=7) == 7


def test_static_weights_take_a_given_host_and_refuse_a_replica_of_no_host():
    replicas = [{"name": "custom-name", "host": "node-b"}, {"name": "q-node-a"}]
    assert routes.static_weights_by_replica(replicas, {"node-a": 58, "node-b": 42}, "q", ["node-a", "node-b"]) == {
        "custom-name": 42, "q-node-a": 58}
    with pytest.raises(ValueError, match=r"replica other-node-z: no inventory host is named by it \(q-<host> for a host "
                                         r"of node-a, node-b\); give its host, e.g. \{name: other-node-z, host: node-b\}"):
        routes.static_weights_by_replica([{"name": "other-node-z"}], {}, "q", ["node-a", "node-b"])


def test_names_of_hosts_keeps_the_replicas_of_those_hosts_in_order():
    names = ["q-node-b-p1", "q-node-c", "x-node-a", "q-node-a", "q-node-bb"]
    assert routes.names_of_hosts(names, {"node-a": "x", "node-b": "q"}) == ["q-node-b-p1", "x-node-a"]
    assert routes.names_of_hosts(names, {}) == []


def test_named_targets_leave_out_providers_and_read_a_missing_weight_as_0():
    targets = [{"id": 1, "model_id": 7, "weight": 58, "fallback_status_codes": None},
               {"id": 2, "model_id": None, "provider_id": 3, "weight": 10},
               {"id": 3, "model_id": 9, "weight": None, "fallback_status_codes": ["5xx"]}]
    assert routes.named_targets(targets, {7: "q-node-a"}) == [
        {"id": 1, "model": "q-node-a", "weight": 58, "fallback_status_codes": None},
        {"id": 3, "model": "model-id:9", "weight": 0, "fallback_status_codes": ["5xx"]}]
