"""Tests of module_utils/inventory_check.py's own rules and output, on the sound two-node views of
tests/support/inventory_views.py with one change each: the groups, the ports of one host, the pins, the replica names
of two hosts, the controller settings as -e gives them, where each variable is fixed (fix_in) and the report's lines.
The validation play and the rules it shares with other modules are tested in tests/unit/playbooks/test_validate_play.py
and beside those modules."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import inventory_check
from support.inventory_views import CONSTRAINTS, GOOD_VIEW, GROUPS, views


def found(views_by_host, groups=None, constraints=None):
    return [(p["host"], p["variable"], p["problem"])
            for p in inventory_check.problems(views_by_host, groups or GROUPS, constraints or CONSTRAINTS)]


def test_the_sound_views_have_no_problem_and_each_problem_is_a_full_record():
    assert found(views()) == []
    (problem,) = inventory_check.problems(views(node_b={"pairserve_gpustack_worker_port": 0}), GROUPS, CONSTRAINTS)
    assert problem == {"host": "node-b", "variable": "pairserve_gpustack_worker_port",
                       "problem": "0 is not a TCP port (1-65535)", "fix": "group_vars/all/ or host_vars/<host>.yml",
                       "text": "node-b: pairserve_gpustack_worker_port: 0 is not a TCP port (1-65535)"}


def test_the_groups_need_one_server_and_a_gpu_node_and_their_problems_come_first():
    assert found({}, {"gpustack_server": [], "gpu_nodes": []}) == [
        ("all", "groups.gpu_nodes", "needs at least one GPU node"),
        ("all", "groups.gpustack_server", "needs exactly one host (has 0: none)")]
    two = found(views(), {"gpustack_server": ["node-a", "node-b"], "gpu_nodes": ["node-a", "node-b"]})
    assert two[0] == ("all", "groups.gpustack_server", "needs exactly one host (has 2: node-a, node-b)")


@pytest.mark.parametrize("changes,problem", [
    ({"pairserve_gpustack_worker_port": 30080}, ("pairserve_gpustack_worker_port",
                                                 "30080 is also pairserve_gpustack_api_port on this host")),
    ({"pairserve_gpustack_worker_metrics_port": True}, ("pairserve_gpustack_worker_metrics_port",
                                                        "True is not a TCP port (1-65535)")),
    ({"pairserve_gpustack_worker_metrics_port": "10151"}, ("pairserve_gpustack_worker_metrics_port",
                                                           "'10151' is not a TCP port (1-65535)")),
    ({"pairserve_gpustack_worker_port": 65536}, ("pairserve_gpustack_worker_port", "65536 is not a TCP port (1-65535)")),
])
def test_a_hosts_ports_are_whole_numbers_and_distinct(changes, problem):
    assert found(views(node_b=changes)) == [("node-b",) + problem]


def test_an_unset_port_is_not_judged():
    assert found(views(node_b={"pairserve_gpustack_worker_metrics_port": None})) == []


@pytest.mark.parametrize("changes,problem", [
    ({"pairserve_gpustack_version": "2.2"}, ("pairserve_gpustack_version", "'2.2' is not an exact version such as 2.2.3")),
    ({"pairserve_gpustack_version": "2.9.0"}, ("pairserve_gpustack_version",
                                               "2.9.0 has no constraints file in the collection (it has: 2.2.3)")),
    ({"pairserve_runner_image": "gpustack/runner:cuda12.9 vllm"}, ("pairserve_runner_image",
                                                                   "'gpustack/runner:cuda12.9 vllm' is not an image reference")),
])
def test_the_pins_of_every_host_are_exact_and_known(changes, problem):
    got = found(views(node_a=changes, node_b=changes))
    assert ("node-a",) + problem in got and ("node-b",) + problem in got


def test_a_runner_image_must_name_the_pinned_vllm_unless_it_is_a_local_build():
    image = "registry.lan/gpustack/runner:cuda12.9-vllm0.24.0"
    got = found(views(node_b={"pairserve_runner_image": image}))
    assert got == [("node-b", "pairserve_runner_image", "%s does not name the pinned vLLM %s: its replicas would run "
                    "another vLLM than the arguments are rendered for" % (image, GOOD_VIEW["pairserve_vllm_version"]))]
    local = {"pairserve_runner_image": "localhost/runner:cuda12.9-mine", "pairserve_lab_mode": True,
             "pairserve_runner_image_digest": None}
    assert found(views(node_b=local)) == []


def test_without_constraint_versions_the_gpustack_version_is_only_checked_to_be_exact():
    sound = views(node_a={"pairserve_gpustack_version": "2.9.0"}, node_b={"pairserve_gpustack_version": "2.9.0"})
    got = [p["variable"] for p in inventory_check.problems(sound, GROUPS)]
    assert "pairserve_gpustack_version" not in got


def test_two_hosts_whose_replica_names_meet_are_refused():
    def two(model_b, host_b):
        groups = {"gpustack_server": ["node-b"], "gpu_nodes": ["node-b", host_b]}
        sound = {h: dict(copy.deepcopy(GOOD_VIEW), pairserve_route_weights={}) for h in groups["gpu_nodes"]}
        sound[host_b]["pairserve_model_name"] = model_b
        return [p for p in found(sound, groups) if p[1] == "pairserve_model_name"]

    assert two("qwen-node", "b") == [("b", "pairserve_model_name", "replica name qwen-node-b is also node-b's")]
    assert two("qwen", "node-b-p1") == [(
        "node-b-p1", "pairserve_model_name", "replica names qwen-node-b-p1 and qwen-node-b-p1-p<N> (one per pair) can "
        "also be node-b's (qwen-node-b): rename one host or give it another pairserve_model_name")]
    assert two("Qwen_3", "c") == [("c", "pairserve_model_name",
                                   "replica name 'Qwen_3-c': use lower-case letters, digits and dashes")]


CONTROLLER = {"pairserve_controller_enabled": "yes", "pairserve_controller_mode": "weights",
              "pairserve_controller_interval": "5", "pairserve_controller_hold": 15.5, "pairserve_controller_horizon": 30,
              "pairserve_controller_min_weight": 0, "pairserve_controller_max_weight": 100,
              "pairserve_controller_min_change": 5, "pairserve_model_name": "qwen",
              "pairserve_route_weights": {"node-a": 58, "node-b": 42},
              "pairserve_controller_replicas": [{"name": "qwen-node-a", "prefill_tps": "2767", "decode_tps": 275},
                                                {"name": "qwen-node-b", "prefill_tps": 1823, "decode_tps": 220.5}]}


def test_controller_settings_may_come_as_text_from_the_command_line():
    assert inventory_check.controller_problems("node-a", CONTROLLER, ["node-a", "node-b"]) == []
    assert inventory_check.controller_problems("node-a", dict(CONTROLLER, pairserve_controller_enabled="off"), []) == []


@pytest.mark.parametrize("change,variable,problem", [
    ({"pairserve_controller_interval": True}, "pairserve_controller_interval", "True is not a number of seconds above 0"),
    ({"pairserve_controller_horizon": "-1"}, "pairserve_controller_horizon", "'-1' is not a number of seconds above 0"),
    ({"pairserve_controller_min_weight": True}, "pairserve_controller_min_weight",
     "needs whole numbers 0 <= pairserve_controller_min_weight (True) <= pairserve_controller_max_weight (100) <= 100"),
    ({"pairserve_controller_max_weight": 101}, "pairserve_controller_min_weight",
     "needs whole numbers 0 <= pairserve_controller_min_weight (0) <= pairserve_controller_max_weight (101) <= 100"),
    ({"pairserve_controller_min_change": 5.0}, "pairserve_controller_min_change",
     "5.0 is not a whole number of weight points 0-100"),
    ({"pairserve_controller_replicas": []}, "pairserve_controller_replicas",
     "expected a list of {name, prefill_tps, decode_tps} (one per target of the route), got []"),
    ({"pairserve_controller_mode": "sleep", "pairserve_controller_sleep_replica": "qwen-node-a",
      "pairserve_controller_replicas": CONTROLLER["pairserve_controller_replicas"][:1]}, "pairserve_controller_replicas",
     "mode sleep needs at least two replicas, so one serves while the other sleeps"),
])
def test_each_controller_rule_names_its_variable_and_the_value(change, variable, problem):
    got = inventory_check.controller_problems("node-a", dict(CONTROLLER, **change), ["node-a", "node-b"])
    assert [(p["host"], p["variable"], p["problem"]) for p in got] == [("node-a", variable, problem)]


def test_each_variable_is_fixed_where_the_example_inventory_sets_it():
    assert inventory_check.fix_in("pairserve_checkpoint_revision") == "group_vars/all/pins.yml"
    assert inventory_check.fix_in("pairserve_gpustack_admin_password") == \
        "group_vars/all/vault.yml (docs/first-install.md, step 3)"
    assert inventory_check.fix_in("groups.gpu_nodes") == "hosts.yml"
    assert inventory_check.fix_in("pairserve_gpustack_worker_port") == "group_vars/all/ or host_vars/<host>.yml"


def test_the_report_keeps_the_first_order_names_a_host_once_and_trims_the_problem():
    problems = [{"host": "node-b", "variable": "pairserve_serving_mode", "problem": "bad \n"},
                {"host": "all", "variable": "groups.gpu_nodes", "problem": "needs at least one GPU node"},
                {"host": "node-a", "variable": "pairserve_serving_mode", "problem": "bad \n"},
                {"host": "node-b", "variable": "pairserve_serving_mode", "problem": "bad \n"}]
    assert inventory_check.report(problems) == [
        "node-b, node-a: pairserve_serving_mode: bad [fix in: group_vars/all/serving.yml]",
        "all: groups.gpu_nodes: needs at least one GPU node [fix in: hosts.yml]"]
    assert inventory_check.report([]) == []
