"""Route weights, drains and restores (module_utils/routes.py), the one owner of these rules, and its filters
run through Ansible as the route role and the maintenance plays call them."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import routes
from support.ansible_runner import run_local_play

SEED = {"node-a": [{"name": "qwen-node-a", "profile": "text"}], "node-b": [{"name": "qwen-node-b", "profile": "text"}]}


def test_the_seeds_figures_give_58_42():
    assert routes.proportional({"a": 244.0, "b": 177.0}) == {"a": 58, "b": 42}


@pytest.mark.parametrize("figures", [{"a": 1, "b": 1, "c": 1}, {"a": 1000, "b": 1}, {"a": 0.001, "b": 5, "c": 0}])
def test_proportional_sums_to_the_total_and_keeps_every_positive_figure(figures):
    got = routes.proportional(figures)
    assert sum(got.values()) == 100
    assert all(got[n] >= 1 for n, v in figures.items() if v > 0)
    assert all(got[n] == 0 for n, v in figures.items() if v == 0)


def test_proportional_refuses_nothing_to_share():
    with pytest.raises(ValueError, match="every value is zero"):
        routes.proportional({"a": 0, "b": None})


# -- the controller's weights: bounds, then proportional's rounding ---------------------------------------

@pytest.mark.parametrize("raw, names, lo, hi, expect", [
    ({"a": 244, "b": 177}, ["a", "b"], 1, 100, {"a": 58, "b": 42}),
    ({"a": 1, "b": 0}, ["a", "b", "c"], 5, 95, {"a": 95, "b": 5, "c": 0}),
    ({"a": 0, "b": 0}, ["a", "b"], 5, 95, {"a": 50, "b": 50}),
    ({"a": 1, "b": 1, "c": 1}, ["a", "b", "c"], 5, 95, {"a": 34, "b": 33, "c": 33}),
    ({"b": 3}, ["a", "b"], 5, 95, {"a": 0, "b": 100}),
    ({"a": 1, "b": 1000, "c": 1000}, ["a", "b", "c"], 10, 80, {"a": 10, "b": 45, "c": 45}),
    ({"a": 1, "b": 1}, ["a", "b"], 60, 95, {"a": 50, "b": 50}),  # impossible bounds: relaxed
])
def test_bounded_weights_clamp_then_round_by_the_one_rule(raw, names, lo, hi, expect):
    got = routes.bounded_weights(raw, names, lo, hi)
    assert got == expect
    assert sum(got.values()) == 100


@pytest.mark.parametrize("raw", [{}, {"a": -1, "b": 1}])
def test_bounded_weights_refuses_no_warm_target_or_a_negative_share(raw):
    with pytest.raises(ValueError):
        routes.bounded_weights(raw, ["a", "b"])


def test_reweigh_parks_a_single_zero_and_unparks_it_when_its_weight_comes_back():
    route = [{"model": "a", "weight": 58, "fallback_status_codes": None},
             {"model": "b", "weight": 42, "fallback_status_codes": None}]
    drained = routes.reweigh(route, {"b": 0})
    got = [(t["model"], t["weight"], t["fallback_status_codes"]) for t in drained]
    assert got == [("a", 58, None), ("b", 0, ["5xx"])]
    assert routes.reweigh(drained, {"b": 0}) == drained  # a second drain changes nothing
    back = routes.reweigh(drained, {"b": 42})
    assert [(t["model"], t["weight"], t["fallback_status_codes"]) for t in back] == [("a", 58, None), ("b", 42, None)]
    assert route[1]["fallback_status_codes"] is None  # the input is not changed


def test_reweigh_keeps_a_users_fallback_and_leaves_two_zeros_plain():
    route = [{"model": "a", "weight": 100, "fallback_status_codes": ["4xx"]},
             {"model": "b", "weight": 50, "fallback_status_codes": None}]
    assert [t["fallback_status_codes"] for t in routes.reweigh(route, {"b": 0})] == [["4xx"], None]
    three = [{"model": m, "weight": 30} for m in "abc"]
    assert [t["fallback_status_codes"] for t in routes.reweigh(three, {"b": 0, "c": 0})] == [None, None, None]


@pytest.mark.parametrize("weights, match", [({"z": 0}, "no target for z"), ({"a": -1}, "0 .drained. or more")])
def test_reweigh_refuses_unknown_models_and_negative_weights(weights, match):
    with pytest.raises(ValueError, match=match):
        routes.reweigh([{"model": "a", "weight": 1}, {"model": "b", "weight": 1}], weights)


def test_a_share_splits_in_equal_parts_that_sum_to_it():
    assert routes.split_share(58, ["x"]) == {"x": 58}
    assert routes.split_share(42, ["x", "y"]) == {"x": 21, "y": 21}
    assert sum(routes.split_share(43, ["x", "y"]).values()) == 43
    assert routes.split_share(0, ["x", "y"]) == {"x": 0, "y": 0}
    assert routes.split_share(10, []) == {}


def test_pooled_routes_weigh_each_host_and_default_to_50():
    two_on_b = {**SEED, "node-b": [{"name": "b1", "profile": "text"}, {"name": "b2", "profile": "text"}]}
    assert routes.wanted_routes("pooled", SEED, {"node-a": 58, "node-b": 42}, "qwen") == [
        {"name": "qwen", "targets": [{"model": "qwen-node-a", "weight": 58}, {"model": "qwen-node-b", "weight": 42}]}]
    assert routes.wanted_routes("pooled", two_on_b, {"node-a": 58}, "qwen")[0]["targets"] == [
        {"model": "qwen-node-a", "weight": 58}, {"model": "b1", "weight": 25}, {"model": "b2", "weight": 25}]


def test_split_routes_one_per_profile_named_or_prefixed():
    mixed = {"node-a": [{"name": "a", "profile": "multimodal"}], "node-b": [{"name": "b", "profile": "text"}]}
    got = routes.wanted_routes("split", mixed, {}, "qwen", {"text": "qwen-fast"})
    assert got == [{"name": "qwen-multimodal", "targets": [{"model": "a", "weight": 100}]},
                   {"name": "qwen-fast", "targets": [{"model": "b", "weight": 100}]}]
    with pytest.raises(ValueError, match="neither pooled nor split"):
        routes.wanted_routes("both", mixed, {}, "qwen")


def route(*targets):
    return {"name": "qwen", "targets": [dict(model=m, weight=w, fallback_status_codes=f) for m, w, f in targets]}


def test_one_replica_is_drained_as_the_fallback_and_restored_with_its_share():
    plan = routes.drain_plan([route(("qwen-node-a", 58, None), ("qwen-node-b", 42, None))],
                             ["qwen-node-b"], ["qwen-node-b"], {"qwen": 42})
    assert plan == [{"name": "qwen", "drain": [{"model": "qwen-node-a", "weight": 58}],
                     "restore": [{"model": "qwen-node-a", "weight": 58}, {"model": "qwen-node-b", "weight": 42}],
                     "drainable": True, "fallback": None,
                     "drain_fallback": {"model": "qwen-node-b", "status_codes": ["5xx"]},
                     "models": ["qwen-node-b"]}]


def test_two_replicas_or_a_users_fallback_drain_by_weight_0():
    two = routes.drain_plan([route(("a", 58, None), ("b1", 21, None), ("b2", 21, None))], ["b1", "b2"], ["b3"], {})
    assert two[0]["drain"] == [{"model": "a", "weight": 58}, {"model": "b1", "weight": 0}, {"model": "b2", "weight": 0}]
    assert two[0]["restore"] == [{"model": "a", "weight": 58}, {"model": "b3", "weight": 42}]
    assert two[0]["drain_fallback"] is None
    users = routes.drain_plan([route(("a", 58, None), ("b", 42, None), ("spare", 0, ["5xx"]))], ["b"], ["b"], {})
    assert users[0]["fallback"] == {"model": "spare", "status_codes": ["5xx"]} == users[0]["drain_fallback"]
    assert {"model": "b", "weight": 0} in users[0]["drain"]


def test_a_route_left_drained_gets_the_inventory_share_back():
    left = routes.drain_plan([route(("a", 58, None), ("b", 0, ["5xx"]))], ["b"], ["b"], {"qwen": 42})
    assert left[0]["restore"] == [{"model": "a", "weight": 58}, {"model": "b", "weight": 42}]
    assert left[0]["fallback"] is None  # b's own fallback was the earlier drain, not the user's
    split = routes.drain_plan([{"name": "qwen-text", "targets": [{"model": "b", "weight": 0}]}], ["b"], ["b"], {})
    assert split[0]["restore"] == [{"model": "b", "weight": 100}] and split[0]["drainable"] is False


def test_a_host_of_two_pairs_of_other_cards_weighs_each_pair_by_its_list():
    """pairserve_route_weights: node-c: [24, 32] gives pair 0 and pair 1 each its weight (the bench writes it when
    the pairs measured differently); one number still splits evenly; a list of another length names host and
    variable."""
    grown = {"node-a": [{"name": "q-node-a", "pair": 0, "profile": "m"}],
             "node-c": [{"name": "q-node-c-p1", "pair": 1, "profile": "m"}, {"name": "q-node-c", "pair": 0, "profile": "m"}]}
    got = routes.wanted_routes("pooled", grown, {"node-a": 25, "node-c": [24, 32]}, "q")[0]["targets"]
    assert dict((t["model"], t["weight"]) for t in got) == {"q-node-a": 25, "q-node-c": 24, "q-node-c-p1": 32}
    even = routes.wanted_routes("pooled", grown, {"node-a": 25, "node-c": 56}, "q")[0]["targets"]
    assert dict((t["model"], t["weight"]) for t in even) == {"q-node-a": 25, "q-node-c": 28, "q-node-c-p1": 28}
    with pytest.raises(ValueError, match=r"pairserve_route_weights: node-c has 3 pair weight\(s\) \[1, 2, 3\] but 2 "
                                         r"pair\(s\) now \(q-node-c, q-node-c-p1\)"):
        routes.wanted_routes("pooled", grown, {"node-c": [1, 2, 3]}, "q")
    assert routes.host_share({"node-c": [24, 32]}, "node-c") == 56
    # The controller's static split is the route role's.
    assert routes.static_weights_by_replica([{"name": "q-node-c-p1"}, {"name": "q-node-c"}, {"name": "q-node-a"}],
                                            {"node-a": 25, "node-c": [24, 32]}, "q", ["node-a", "node-c"]) == {
        "q-node-c-p1": 32, "q-node-c": 24, "q-node-a": 25}


@pytest.mark.parametrize("weights, problem", [
    ({"node-c": [24, 32]}, None),
    ({"node-c": []}, "node-c: [] is not a list of whole numbers >= 0, one per pair (pair 0 first)"),
    ({"node-c": [24, -1]}, "node-c: [24, -1] is not a list of whole numbers >= 0, one per pair (pair 0 first)"),
    ({"node-c": [0, 0], "node-a": 0, "node-b": 0}, "no weight above 0 for node-a, node-b, node-c"),
    ({"node-c": "24,32"}, "node-c: '24,32' is not a whole number >= 0 (or a list of them, one per pair)"),
])
def test_the_weight_rule_takes_a_list_per_pair(weights, problem):
    got = routes.weight_problems(weights, ["node-a", "node-b", "node-c"])
    assert (got == []) if problem is None else any(g.startswith(problem) for g in got), got


def test_a_maintenance_gives_each_pair_its_own_weight_back():
    """A host whose pairs weigh differently gets each back at its weight, not the even split of their sum; a host
    left drained gets the inventory's list, pair by pair."""
    plan = routes.drain_plan([route(("a", 25, None), ("c", 24, None), ("c-p1", 32, None))], ["c", "c-p1"],
                             ["c", "c-p1"], {"qwen": [24, 32]})
    assert plan[0]["restore"] == [{"model": "a", "weight": 25}, {"model": "c", "weight": 24},
                                  {"model": "c-p1", "weight": 32}]
    left = routes.drain_plan([route(("a", 25, None), ("c", 0, None), ("c-p1", 0, None))], ["c", "c-p1"],
                             ["c", "c-p1"], {"qwen": [24, 32]})
    assert left[0]["restore"] == plan[0]["restore"]
    # The host has another number of pairs than its list now: their sum, split evenly.
    grown = routes.drain_plan([route(("a", 25, None), ("c", 0, None))], ["c"], ["c", "c-p1", "c-p2"], {"qwen": [24, 32]})
    assert grown[0]["restore"][1:] == [{"model": "c", "weight": 19}, {"model": "c-p1", "weight": 19},
                                       {"model": "c-p2", "weight": 18}]


def test_the_filters_run_in_a_play(tmp_path):
    facts = run_local_play(tmp_path, "Route filters", [
        {"name": "Wanted", "ansible.builtin.set_fact": {
            "wanted": "{{ by_host | pairserve.llm.route_wanted('pooled', {'node-a': 58, 'node-b': 42}, 'qwen') }}"}},
        {"name": "Plan", "ansible.builtin.set_fact": {
            "plan": "{{ now | pairserve.llm.route_drain_plan(['qwen-node-b'], ['qwen-node-b'], {'qwen': 42}) }}"}},
        {"name": "Refused", "ansible.builtin.set_fact": {
            "bad": "{{ by_host | pairserve.llm.route_wanted('both', {}, 'qwen') }}"}, "ignore_errors": True},
    ], {"by_host": SEED, "now": [route(("qwen-node-a", 58, None), ("qwen-node-b", 42, None))]}).by_task
    assert facts["Wanted"]["ansible_facts"]["wanted"][0]["targets"][1] == {"model": "qwen-node-b", "weight": 42}
    assert facts["Plan"]["ansible_facts"]["plan"][0]["drain_fallback"]["model"] == "qwen-node-b"
    assert facts["Refused"]["_status"] == "failed" and "neither pooled nor split" in facts["Refused"]["msg"]


# -- the route changed only from what the run knows (keep_unknown) -------------------------------------------------

MODELS = [{"id": 1, "name": "qwen-node-a"}, {"id": 2, "name": "qwen-node-b"}, {"id": 3, "name": "qwen-node-b-p1"},
          {"id": 4, "name": "qwen-node-bb"}, {"id": 5, "name": "other-node-b"}]


def gpustack_route(name, *targets):
    """A route as gpustack_info returns it: targets by model id."""
    return {"name": name, "route_targets": [{"model_id": mid, "weight": w} for mid, w in targets]}


@pytest.mark.parametrize("name, expect", [
    ("qwen-node-b", True), ("qwen-node-b-p1", True), ("qwen-node-b-p12", True),
    ("qwen-node-bb", False), ("qwen-node-b-px", False), ("other-node-b", False), ("qwen-node-a", False), ("", False),
])
def test_a_replica_belongs_to_its_host_by_the_replica_roles_naming(name, expect):
    assert routes.owned_by(name, "qwen", "node-b") is expect


def test_a_failed_node_keeps_its_targets_and_weights_as_gpustack_has_them():
    # node-b failed before the replica play: the run knows node-a only, with the inventory's 58
    wanted = routes.wanted_routes("pooled", {"node-a": SEED["node-a"]}, {"node-a": 58, "node-b": 42}, "qwen")
    now = [gpustack_route("qwen", (1, 50), (2, 30), (3, 12), (4, 8))]
    got = routes.keep_unknown(wanted, now, MODELS, {"node-b": "qwen"}, ["qwen"])
    assert got["routes"] == [{"name": "qwen", "targets": [
        {"model": "qwen-node-a", "weight": 58}, {"model": "qwen-node-b", "weight": 30},
        {"model": "qwen-node-b-p1", "weight": 12}]}]  # qwen-node-bb is another host's name: not kept
    assert [(k["host"], k["model"], k["weight"]) for k in got["kept"]] == [("node-b", "qwen-node-b", 30),
                                                                           ("node-b", "qwen-node-b-p1", 12)]
    assert got["untouched"] == []
    assert got["lines"] == ["node-b failed earlier in this run: its route target qwen-node-b is kept at 30; "
                            "its route target qwen-node-b-p1 is kept at 12"]


def test_the_seeds_line_and_a_limit_is_named_as_such():
    wanted = routes.wanted_routes("pooled", {"node-a": SEED["node-a"]}, {"node-a": 58, "node-b": 42}, "qwen")
    now = [gpustack_route("qwen", (1, 58), (2, 42))]
    got = routes.keep_unknown(wanted, now, MODELS, {"node-b": "qwen"}, ["qwen"])
    assert got["lines"] == ["node-b failed earlier in this run: its route target qwen-node-b is kept at 42"]
    got = routes.keep_unknown(wanted, now, MODELS, {"node-b": "qwen"}, ["qwen"],
                              {"node-b": "is not in this run (--limit)"})
    assert got["lines"][0].startswith("node-b is not in this run (--limit): its route target qwen-node-b is kept")


def test_a_node_new_to_gpustack_adds_nothing_and_says_so():
    wanted = routes.wanted_routes("pooled", {"node-a": SEED["node-a"]}, {}, "qwen")
    got = routes.keep_unknown(wanted, [], MODELS, {"node-b": "qwen"}, ["qwen"])
    assert got["routes"] == wanted and got["kept"] == [] and got["untouched"] == []
    assert got["lines"] == ["node-b failed earlier in this run: GPUStack's routes hold no target of it, so none is added"]


def test_a_split_route_only_the_failed_node_serves_is_left_alone_not_removed():
    by_host = {"node-a": [{"name": "qwen-node-a", "profile": "text"}]}
    wanted = routes.wanted_routes("split", by_host, {}, "qwen")
    now = [gpustack_route("qwen-text", (1, 100)), gpustack_route("qwen-multimodal", (2, 100)),
           gpustack_route("someone-elses", (2, 100))]
    got = routes.keep_unknown(wanted, now, MODELS, {"node-b": "qwen"}, ["qwen", "qwen-text", "qwen-multimodal"])
    assert got["routes"] == wanted  # qwen-text holds nothing of node-b
    assert got["untouched"] == ["qwen-multimodal"]  # a route of the collection; someone-elses is not ours to touch
    assert got["kept"] == [{"host": "node-b", "route": "qwen-multimodal", "model": "qwen-node-b", "weight": 100}]


def test_a_target_already_wanted_is_not_doubled_and_known_nodes_are_never_kept():
    wanted = routes.wanted_routes("pooled", SEED, {"node-a": 58, "node-b": 42}, "qwen")
    now = [gpustack_route("qwen", (1, 10), (2, 90))]
    got = routes.keep_unknown(wanted, now, MODELS, {}, ["qwen"])
    assert got["routes"] == wanted and got["kept"] == [] and got["lines"] == []


def test_the_keep_filters_run_in_a_play(tmp_path):
    facts = run_local_play(tmp_path, "Keep filters", [
        {"name": "Keep", "ansible.builtin.set_fact": {
            "keep": "{{ wanted | pairserve.llm.route_keep_unknown(now, models, {'node-b': 'qwen'}, ['qwen']) }}"}},
        {"name": "Names", "ansible.builtin.set_fact": {
            "names": "{{ ['qwen-node-a', 'qwen-node-b', 'qwen-node-b-p1', 'qwen-node-bb'] "
                     "| pairserve.llm.replica_names_of({'node-b': 'qwen'}) }}"}},
        {"name": "Refused", "ansible.builtin.set_fact": {
            "bad": "{{ wanted | pairserve.llm.route_keep_unknown(now, models, ['node-b'], ['qwen']) }}"},
         "ignore_errors": True},
    ], {"wanted": routes.wanted_routes("pooled", {"node-a": SEED["node-a"]}, {"node-a": 58}, "qwen"),
        "now": [gpustack_route("qwen", (1, 58), (2, 42))], "models": MODELS}).by_task
    assert facts["Keep"]["ansible_facts"]["keep"]["kept"] == [
        {"host": "node-b", "route": "qwen", "model": "qwen-node-b", "weight": 42}]
    assert facts["Names"]["ansible_facts"]["names"] == ["qwen-node-b", "qwen-node-b-p1"]
    assert facts["Refused"]["_status"] == "failed" and "{host: model name}" in facts["Refused"]["msg"]


# -- a drain never removes the last healthy replica (carriers, carrier_problems) ---------------------------------

def seed_plan(weights=(("qwen-node-a", 58), ("qwen-node-b", 42))):
    routes_now = [route(*[(m, w, None) for m, w in weights])]
    return routes.drain_plan(routes_now, ["qwen-node-a"], ["qwen-node-a"], {"qwen": 58})


INFO = {
    "workers": [{"id": 1, "name": "node-a", "ip": "10.0.0.1", "port": 10150},
                {"id": 2, "name": "node-b", "ip": "10.0.0.2", "port": 10170}],
    "model_instances": [
        {"name": "qwen-node-a-x", "model_name": "qwen-node-a", "state": "running", "worker_id": 1,
         "worker_name": "node-a", "worker_ip": "10.0.0.1", "port": 40000},
        {"name": "qwen-node-b-y", "model_name": "qwen-node-b", "state": "running", "worker_id": 2,
         "worker_name": "node-b", "worker_ip": "10.0.0.2", "port": 40100}],
}
B_WORKER, B_REPLICA = "http://10.0.0.2:10170/healthz", "http://10.0.0.2:40100/health"


def test_the_carriers_are_the_other_nodes_instances_with_where_the_server_reaches_them():
    found = routes.carriers(seed_plan(), INFO, ["qwen-node-a"])
    assert found["serving"] is True
    assert found["routes"] == [{"name": "qwen", "targets": [{
        "model": "qwen-node-b", "node": "node-b", "instance": "qwen-node-b-y", "state": "running",
        "worker_url": B_WORKER, "replica_url": B_REPLICA}]}]


def test_a_drain_is_refused_naming_the_node_whose_worker_does_not_answer():
    found = routes.carriers(seed_plan(), INFO, ["qwen-node-a"])
    assert routes.carrier_problems(found, {B_WORKER: (200, None), B_REPLICA: (200, None)}) == []
    problems = routes.carrier_problems(found, {B_WORKER: (None, "Connection refused"), B_REPLICA: (200, None)})
    assert problems == ["route qwen: no other target can serve it while this node is drained: [node-b] the worker at "
                        "http://10.0.0.2:10170 does not answer (Connection refused); GPUStack lists qwen-node-b-y as "
                        "running"]
    problems = routes.carrier_problems(found, {B_WORKER: (200, None), B_REPLICA: (503, None)})
    assert "[node-b] the replica qwen-node-b-y at http://10.0.0.2:40100 does not answer (HTTP 503)" in problems[0]


def test_an_instance_not_running_cannot_carry_and_a_node_serving_nothing_is_not_held():
    info = dict(INFO, model_instances=[dict(INFO["model_instances"][0]),
                                       dict(INFO["model_instances"][1], state="error")])
    found = routes.carriers(seed_plan(), info, ["qwen-node-a"])
    assert routes.carrier_problems(found, {})[0].endswith("[node-b] instance qwen-node-b-y is error")
    # this node's own instance does not run: the route loses nothing by the drain
    idle = dict(info, model_instances=[dict(INFO["model_instances"][0], state="error"), info["model_instances"][1]])
    assert routes.carrier_problems(routes.carriers(seed_plan(), idle, ["qwen-node-a"]), {}) == []


def test_one_healthy_carrier_is_enough_and_weight_0_targets_carry_nothing():
    now = [route(("qwen-node-a", 50, None), ("qwen-node-b", 30, None), ("qwen-node-c", 20, None))]
    plan = routes.drain_plan(now, ["qwen-node-a"], ["qwen-node-a"], {"qwen": 50})
    info = dict(INFO, model_instances=INFO["model_instances"] + [
        {"name": "qwen-node-c-z", "model_name": "qwen-node-c", "state": "running", "worker_id": 3,
         "worker_name": "node-c", "worker_ip": "10.0.0.3", "port": 40200}],
        workers=INFO["workers"] + [{"id": 3, "name": "node-c", "ip": "10.0.0.3", "port": 10150}])
    found = routes.carriers(plan, info, ["qwen-node-a"])
    answers = {B_WORKER: (None, "timed out"), "http://10.0.0.3:10150/healthz": (200, None),
               "http://10.0.0.3:40200/health": (200, None)}
    assert routes.carrier_problems(found, answers) == []
    parked = routes.drain_plan([route(("qwen-node-a", 100, None), ("qwen-node-b", 0, ["5xx"]))], ["qwen-node-a"],
                               ["qwen-node-a"], {})
    assert routes.carriers(parked, INFO, ["qwen-node-a"])["routes"] == []  # not drainable: plan.yml refuses it first
