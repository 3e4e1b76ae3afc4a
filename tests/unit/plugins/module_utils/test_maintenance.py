"""Tests of module_utils/maintenance.py: GPUStack's view of one node (node_view, filter pairserve.llm.maintenance_view),
the drain steps' one reading of a gpustack_info result, with route targets named by model (routes.named_targets, the
join gpustack_route and the reweigh use too); and, on hand-made facts, the edges of host_problems and card_changes
that tests/unit/plugins/filter/test_maintenance.py (recorded hosts) does not reach."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils import maintenance, routes
from support.ansible_runner import run_local_play

PATTERN = "^qwen-node-b(-p[0-9]+)?$"


def info() -> dict:
    models = [
        {"id": 1, "name": "qwen-node-a", "gpu_selector": {"gpu_ids": ["node-a:cuda:0"]}, "backend_version": "v1",
         "backend_parameters": ["--x"], "local_path": "/m", "image_name": "img", "replicas": 1},
        {"id": 2, "name": "qwen-node-b", "gpu_selector": {"gpu_ids": ["node-b:cuda:0"]}, "backend_version": "v1",
         "backend_parameters": ["--x"], "local_path": "/m", "image_name": "img", "replicas": 1},
        {"id": 3, "name": "qwen-node-b-p1", "replicas": 1},
        # a name that starts like node-b's but is another node's: the pattern is anchored at both ends
        {"id": 4, "name": "qwen-node-bb", "replicas": 1},
    ]
    return {
        "workers": [{"id": 10, "name": "node-a"}, {"id": 11, "name": "node-b"}],
        "gpus": [{"worker_name": "node-b", "index": 1}, {"worker_name": "node-a", "index": 0},
                 {"worker_name": "node-b", "index": 0}],
        "models": models,
        "model_instances": [{"id": 21, "model_name": "qwen-node-a"}, {"id": 20, "model_name": "qwen-node-a"},
                            {"id": 22, "model_name": "qwen-node-b"}, {"id": 23, "model_name": "qwen-node-b-p1"}],
        "routes": [
            {"id": 5, "name": "qwen", "route_targets": [
                {"id": 50, "model_id": 1, "weight": 58, "fallback_status_codes": None},
                {"id": 51, "model_id": 2, "weight": 42},
                {"id": 52, "provider_id": 9, "model_id": None, "weight": 0},  # an external provider: left out
                {"id": 53, "model_id": 99, "weight": None}]},  # a model GPUStack no longer has
            {"id": 6, "name": "qwen-a-only", "route_targets": [{"id": 60, "model_id": 1, "weight": 100}]},
            {"id": 7, "name": "qwen-split", "route_targets": [{"id": 70, "model_id": 3, "weight": 1}]},
        ],
    }


def test_the_view_of_node_b():
    view = maintenance.node_view(info(), "node-b", PATTERN)
    assert view["workers"] == [{"id": 11, "name": "node-b"}]
    assert [g["index"] for g in view["gpus"]] == [0, 1]
    assert [m["name"] for m in view["models"]] == ["qwen-node-b", "qwen-node-b-p1"]
    assert [i["id"] for i in view["instances"]] == [22, 23]
    assert view["routes"] == [
        {"name": "qwen", "id": 5, "targets": [
            {"id": 50, "model": "qwen-node-a", "weight": 58, "fallback_status_codes": None},
            {"id": 51, "model": "qwen-node-b", "weight": 42, "fallback_status_codes": None},
            {"id": 53, "model": "model-id:99", "weight": 0, "fallback_status_codes": None}]},
        {"name": "qwen-split", "id": 7, "targets": [
            {"id": 70, "model": "qwen-node-b-p1", "weight": 1, "fallback_status_codes": None}]}]
    assert view["others"]["qwen-node-a"] == {
        "id": 1, "gpu_selector": {"gpu_ids": ["node-a:cuda:0"]}, "backend_version": "v1",
        "backend_parameters": ["--x"], "local_path": "/m", "image_name": "img", "instances": [20, 21]}
    assert sorted(view["others"]) == ["qwen-node-a", "qwen-node-bb"]


def test_a_node_gpustack_does_not_know_has_an_empty_view():
    view = maintenance.node_view(info(), "node-c", "^qwen-node-c(-p[0-9]+)?$")
    assert view["workers"] == [] and view["gpus"] == [] and view["models"] == [] and view["routes"] == []
    assert len(view["others"]) == 4
    assert maintenance.node_view({}, "node-b", PATTERN) == {
        "workers": [], "gpus": [], "models": [], "instances": [], "routes": [], "others": {}}


def test_target_names():
    names = {1: "qwen-node-a"}
    assert routes.target_model({"model_id": 1}, names) == "qwen-node-a"
    assert routes.target_model({"model_id": None, "provider_id": 9}, names) == "provider:9"
    assert routes.target_model({"model_id": 7}, names) == "model-id:7"
    assert routes.named_targets(None, names) == []


def test_through_ansible_and_a_bad_pattern_is_named(tmp_path):
    res = run_local_play(tmp_path, "view", [
        {"name": "View", "ansible.builtin.set_fact": {
            "view": "{{ info | pairserve.llm.maintenance_view('node-b', pattern) }}"}},
        {"name": "Bad", "ansible.builtin.debug": {"msg": "{{ info | pairserve.llm.maintenance_view('node-b', '(') }}"}}],
        {"info": info(), "pattern": PATTERN})
    assert [r["name"] for r in res.by_task["View"]["ansible_facts"]["view"]["routes"]] == ["qwen", "qwen-split"]
    assert res.rc != 0
    assert "pairserve.llm.maintenance_view: the model pattern '(' is not a regular expression" \
        in res.by_task["Bad"]["msg"]


def test_the_model_pattern_is_matched_at_the_start_only_as_jinjas_match():
    view = maintenance.node_view(info(), "node-b", "qwen-node-b")  # no anchors: qwen-node-bb matches too
    assert [m["name"] for m in view["models"]] == ["qwen-node-b", "qwen-node-b-p1", "qwen-node-bb"]
    assert maintenance.node_view(info(), "node-b", "node-b")["models"] == []  # not searched inside the name


def test_several_hosts_outside_gpu_nodes_and_an_empty_group_are_named():
    texts = maintenance.host_problems(["x", "y"], [], None, "none")
    assert texts == [
        "maintenance.yml takes one GPU node out of the route at a time, and this run has 2 host(s) (x, y): run it with "
        "--limit <node> (one of the group gpu_nodes, empty)",
        "x, y are not in the group gpu_nodes: only a GPU node has replicas to take out of the route"]
    assert maintenance.host_problems(None, None, None, None)[0] == (
        "pairserve_maintenance_action is None; it must be one of reboot, pause, none")


def gpu(index, uuid, **fields):
    return dict({"index": index, "uuid": uuid, "name": "NVIDIA L4", "memory_total_mib": 23034,
                 "compute_capability": "8.9", "bus_id": "00000000:0%d:00.0" % (index + 1)}, **fields)


def fact(gpus, pairs):
    return {"gpus": gpus, "pairs": [{"index": i, "uuids": [gpus[j]["uuid"] for j in p], "gpustack_gpu_indexes": list(p)}
                                    for i, p in enumerate(pairs)]}


def test_only_the_kept_fields_count_and_the_same_cards_paired_otherwise_are_a_change():
    cards = [gpu(i, "GPU-%d" % i) for i in range(4)]
    before = fact(cards, [(0, 1), (2, 3)])
    # a field the pairs record does not keep (the bus id) changes nothing
    moved = fact([dict(c, bus_id="0000:8%d:00.0" % c["index"]) for c in cards], [(0, 1), (2, 3)])
    assert maintenance.card_changes(before, moved, "node-c") == []
    assert maintenance.card_changes(before, fact(cards, [(0, 2), (1, 3)]), "node-c") == [
        "node-c: gpu_pairs pairs the cards otherwise now (0+2, 1+3, was 0+1, 2+3)"]


def test_a_card_without_a_fact_is_new_and_its_missing_fields_are_question_marks():
    assert maintenance.card_changes(None, {"gpus": [{"index": 0, "uuid": "GPU-x"}]}, "node-c") == [
        "node-c: GPU 0 (GPU-x ? ? MiB cc ?) is new"]
    assert maintenance.card_changes({}, {}, "node-c") == []
