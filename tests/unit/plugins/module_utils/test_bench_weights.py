"""The bench's measured weights per replica as the inventory's per-host pairserve_route_weights: the sum over a
host's replicas, and back through the route role's own rule (routes.wanted_routes) to the measured weights; the
weights file's path rule; the sentences the report and the play print."""

from __future__ import annotations

import re

import pytest
import yaml

from ansible_collections.pairserve.llm.plugins.module_utils import bench_weights as bw
from ansible_collections.pairserve.llm.plugins.module_utils import routes

HOSTS = ["node-a", "node-b"]


def test_the_seed_weights_per_host_are_the_replicas_weights():
    assert bw.host_weights({"qwen-node-a": 58, "qwen-node-b": 42}, HOSTS, "qwen") == {"node-a": 58, "node-b": 42}


def test_a_host_with_two_pairs_gets_the_sum_and_the_route_role_splits_it_back():
    measured = {"qwen-node-a": 30, "qwen-node-a-p1": 30, "qwen-node-b": 40}
    per_host = bw.host_weights(measured, HOSTS, "qwen")
    assert per_host == {"node-a": 60, "node-b": 40} and list(per_host) == HOSTS
    replicas = {"node-a": [{"name": "qwen-node-a", "profile": "text"}, {"name": "qwen-node-a-p1", "profile": "text"}],
                "node-b": [{"name": "qwen-node-b", "profile": "text"}]}
    wanted = routes.wanted_routes("pooled", replicas, per_host, "qwen")[0]["targets"]
    assert dict((t["model"], t["weight"]) for t in wanted) == measured


def test_the_longer_host_name_is_not_taken_for_a_shorter_one():
    assert bw.host_weights({"m-node": 10, "m-node-p1": 20, "m-node-b": 70}, ["node", "node-b"], "m") == \
        {"node": 30, "node-b": 70}


@pytest.mark.parametrize("measured,needle", [
    ({"qwen-node-a": 58, "fast": 42}, "replica(s) fast are not named qwen-<host>[-p<N>]"),
    ({"qwen-node-a": 100}, "no replica of node-b was measured"),
    ({}, "no replica of node-a, node-b was measured"),
])
def test_weights_that_cannot_be_per_host_are_refused(measured, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        bw.host_weights(measured, HOSTS, "qwen")


def test_the_yaml_to_paste_loads_as_the_weights():
    text = bw.weights_yaml({"node-a": 61, "node-b": 39})
    assert text == "pairserve_route_weights:\n  node-a: 61\n  node-b: 39\n"
    assert yaml.safe_load(text) == {"pairserve_route_weights": {"node-a": 61, "node-b": 39}}


def test_the_weights_file_rule(tmp_path):
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    assert bw.weights_file("", str(inv)) == ("", None)
    assert bw.weights_file(None, str(inv)) == ("", None)
    assert bw.weights_file("group_vars/all/route_weights.yml", str(inv)) == \
        (str(inv / "group_vars" / "all" / "route_weights.yml"), None)
    assert bw.weights_file(str(inv / "w.yaml"))[1] is None
    (inv / "group_vars" / "all.yml").mkdir()
    assert "is a directory: name a .yml file in it" in bw.weights_file("group_vars/all.yml", str(inv))[1]
    assert "not a .yml or .yaml file" in bw.weights_file("weights.json", str(inv))[1]
    assert "not a .yml or .yaml file" in bw.weights_file("group_vars/all", str(inv))[1]
    assert "its directory does not exist" in bw.weights_file("group_vars/nope/w.yml", str(inv))[1]
    assert "no directory to resolve it from" in bw.weights_file("w.yml", None)[1]
    assert "is not a path" in bw.weights_file(["w.yml"], str(inv))[1]


def test_without_a_file_applied_weights_are_called_temporary_with_the_yaml_to_paste():
    plan = bw.keep_plan({"qwen-node-a": 61, "qwen-node-b": 39}, HOSTS, "qwen", "", {"node-a": 58, "node-b": 42}, "qwen")
    kept = bw.kept(plan, applied=True)
    text = " ".join(kept["lines"])
    assert kept["temporary"] is True
    assert text.startswith("TEMPORARY: these weights were applied to route qwen, but the next site.yml sets it back "
                           "from the inventory's pairserve_route_weights = {node-a: 58, node-b: 42}")
    assert "set pairserve_bench_weights_file" in text
    assert kept["yaml"] == "pairserve_route_weights:\n  node-a: 61\n  node-b: 39\n"
    not_applied = " ".join(bw.kept(plan, applied=False)["lines"])
    assert "Not kept anywhere" in not_applied and "TEMPORARY" not in not_applied


def test_with_a_file_the_lines_say_where_and_warn_about_another_source():
    plan = bw.keep_plan({"qwen-node-a": 61, "qwen-node-b": 39}, HOSTS, "qwen", "/inv/group_vars/all/w.yml",
                        {"node-a": 58, "node-b": 42}, "qwen")
    assert bw.kept(plan, True)["lines"] == ["A run writes pairserve_route_weights to /inv/group_vars/all/w.yml: the "
                                            "next site.yml keeps them."]
    written = {"changed": True, "action": "replaced", "previous": {"node-a": 58, "node-b": 42},
               "previous_present": True}
    kept = bw.kept(plan, True, written)
    assert kept["lines"] == ["Kept: pairserve_route_weights written to /inv/group_vars/all/w.yml (replaced); the "
                             "next site.yml applies the same weights."]
    assert kept["yaml"] == "" and kept["temporary"] is False
    elsewhere = bw.kept(plan, True, dict(written, previous={"node-a": 50, "node-b": 50}))["lines"]
    assert "another source sets it (host_vars, another group_vars file, -e)" in elsewhere[1]
    unchanged = bw.kept(plan, False, {"changed": False, "previous": {"node-a": 58, "node-b": 42},
                                      "previous_present": True})["lines"]
    assert unchanged == ["Kept: pairserve_route_weights in /inv/group_vars/all/w.yml already holds these weights; "
                         "the next site.yml applies the same weights."]


def test_weights_that_cannot_be_per_host_are_reported_not_pasted():
    plan = bw.keep_plan({"fast": 60, "slow": 40}, HOSTS, "qwen", "", {}, "qwen")
    kept = bw.kept(plan, True)
    assert kept["yaml"] == "" and "cannot be written as per-host weights: replica(s) fast, slow" in kept["lines"][1]


def test_pairs_of_one_host_that_measured_differently_are_kept_per_pair():
    """A host whose two pairs are other cards: the inventory keeps a list, one weight per pair (pair 0 first), and the
    route role gives each replica its own weight back (routes.wanted_routes), not the even split of their sum."""
    measured = {"qwen-node-a-p1": 21, "qwen-node-a": 40, "qwen-node-b": 39}
    plan = bw.keep_plan(measured, HOSTS, "qwen", "", {}, "qwen")
    assert plan["host_weights"] == {"node-a": [40, 21], "node-b": 39} and plan["uneven"] == []
    assert plan["yaml"] == "pairserve_route_weights:\n  node-a: [40, 21]\n  node-b: 39\n"
    replicas = {"node-a": [{"name": "qwen-node-a", "pair": 0, "profile": "m"},
                           {"name": "qwen-node-a-p1", "pair": 1, "profile": "m"}],
                "node-b": [{"name": "qwen-node-b", "pair": 0, "profile": "m"}]}
    route = routes.wanted_routes("pooled", replicas, plan["host_weights"], "qwen")[0]
    assert dict((t["model"], t["weight"]) for t in route["targets"]) == measured
    even = bw.keep_plan({"qwen-node-a": 31, "qwen-node-a-p1": 30, "qwen-node-b": 39}, HOSTS, "qwen", "", {}, "qwen")
    assert even["uneven"] == [] and even["host_weights"] == {"node-a": 61, "node-b": 39}


def test_pairs_measured_with_a_gap_are_summed_and_noted():
    plan = bw.keep_plan({"qwen-node-a": 40, "qwen-node-a-p2": 21, "qwen-node-b": 39}, HOSTS, "qwen", "", {}, "qwen")
    assert plan["host_weights"] == {"node-a": 61, "node-b": 39}
    assert bw.kept(plan, True)["lines"][-1] == (
        "Note: node-a's replicas measured qwen-node-a 40, qwen-node-a-p2 21, but not every pair of it from pair 0 on "
        "was measured, so the inventory keeps one weight for it: the route role splits its 61 evenly (qwen-node-a 31, "
        "qwen-node-a-p2 30).")
