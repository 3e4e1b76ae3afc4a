"""GPUStack's view of one node (module_utils/maintenance.py node_view, filter pairserve.llm.maintenance_view): the
drain steps' one reading of a gpustack_info result, with route targets named by model (routes.named_targets, the
join gpustack_route and the reweigh use too)."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils import maintenance, routes
from lab.ansible_runner import run_local_play

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
