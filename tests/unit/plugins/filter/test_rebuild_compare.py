"""What a node rebuild must do (module_utils/rebuild.py, filter pairserve.llm.rebuild_compare): the cards detected
now against the node's record, GPUStack's view of the worker and the replicas' registration. The rebuild entry
point of the maintenance role decides with it, so each rule is pinned here without GPUStack."""

from __future__ import annotations

import copy

from ansible_collections.pairserve.llm.plugins.module_utils import rebuild
from support.ansible_runner import run_local_play

MIB = 1048576
GPUS = [{"index": 1, "uuid": "GPU-b", "name": "NVIDIA GeForce RTX 5080", "memory_total_mib": 16303,
         "compute_capability": "12.0", "bus_id": "0000:02:00.0"},
        {"index": 0, "uuid": "GPU-a", "name": "NVIDIA GeForce RTX 5080", "memory_total_mib": 16303,
         "compute_capability": "12.0", "bus_id": "0000:01:00.0"}]
FACT = {"gpus": GPUS, "pairs": [{"index": 0, "uuids": ["GPU-a", "GPU-b"], "name": "NVIDIA GeForce RTX 5080",
                                 "memory_total_mib": 16303, "compute_capability": "12.0",
                                 "gpustack_gpu_indexes": [0, 1], "bus_ids": ["0000:01:00.0", "0000:02:00.0"]}]}
SPECS = [{"name": "qwen-node-a", "gpu_ids": ["node-a:cuda:0", "node-a:cuda:1"], "argv": ["--max-model-len=65536"]}]
PATH = "/var/lib/pairserve/hf/export/qwen"


def _view():
    return {"workers": [{"id": 7, "name": "node-a", "state": "ready"}],
            "gpus": [{"index": i, "name": "NVIDIA GeForce RTX 5080", "memory": {"total": 16303 * MIB}} for i in (1, 0)],
            "models": [{"name": "qwen-node-a", "gpu_selector": {"gpu_ids": ["node-a:cuda:0", "node-a:cuda:1"]},
                        "backend_parameters": ["--max-model-len=65536"], "local_path": PATH}]}


def _record():
    return rebuild.detected(FACT)


def test_the_record_keeps_what_gpu_pairs_knows_in_its_order_without_bus_ids():
    got = rebuild.detected(FACT)
    assert [g["uuid"] for g in got["gpus"]] == ["GPU-b", "GPU-a"]
    assert "bus_id" not in got["gpus"][0] and "bus_ids" not in got["pairs"][0]
    assert got["pairs"][0]["gpustack_gpu_indexes"] == [0, 1]


def test_nothing_to_do_when_record_gpustack_and_registration_agree():
    got = rebuild.compare(_record(), FACT, _view(), [7], SPECS, PATH)
    assert got["work"] is False
    rows = [[0, "NVIDIA GeForce RTX 5080", 16303], [1, "NVIDIA GeForce RTX 5080", 16303]]
    assert got["detected_gpus"] == got["gpustack_gpus"] == rows
    assert not (got["cards_changed"] or got["gpustack_stale"] or got["stale_workers"] or got["replicas_differ"])


def test_no_record_is_not_a_card_change():
    got = rebuild.compare(None, FACT, _view(), [7], SPECS, PATH)
    assert got["cards_changed"] is False and got["recorded"] is None and got["work"] is False


def test_a_swapped_card_is_a_change_of_the_record_and_of_gpustacks_view():
    record = _record()
    fact = copy.deepcopy(FACT)
    fact["gpus"][0].update(uuid="GPU-c", name="NVIDIA GeForce RTX 4090", memory_total_mib=24564)
    got = rebuild.compare(record, fact, _view(), [7], SPECS, PATH)
    assert got["cards_changed"] is True and got["gpustack_stale"] is True and got["work"] is True
    assert got["detected_gpus"][1] == [1, "NVIDIA GeForce RTX 4090", 24564]


def test_gpustack_memory_is_compared_in_whole_mib():
    view = _view()
    view["gpus"][0]["memory"]["total"] = 16303 * MIB + MIB - 1  # a few bytes over: still the same card
    assert rebuild.compare(_record(), FACT, view, [7], SPECS, PATH)["gpustack_stale"] is False
    view["gpus"][0]["memory"] = None  # a worker that reports no memory yet
    assert rebuild.gpustack_rows(view["gpus"])[1] == [1, "NVIDIA GeForce RTX 5080", 0]


def test_worker_records_this_install_does_not_own_are_stale():
    view = _view()
    view["workers"].append({"id": 9, "name": "node-a", "state": "not_ready"})
    got = rebuild.compare(_record(), FACT, view, [7], SPECS, PATH)
    assert [w["id"] for w in got["stale_workers"]] == [9] and got["work"] is True
    # No worker_uuid on the node (its data directory is gone): every record under its name is stale.
    assert len(rebuild.compare(_record(), FACT, view, [], SPECS, PATH)["stale_workers"]) == 2


def test_the_registration_differs_by_gpu_ids_arguments_path_or_names():
    for change in ({"argv": ["--max-model-len=32768"]}, {"gpu_ids": ["node-a:cuda:1", "node-a:cuda:0"]},
                   {"name": "qwen-node-a-p1"}):
        specs = [dict(SPECS[0], **change)]
        assert rebuild.compare(_record(), FACT, _view(), [7], specs, PATH)["replicas_differ"] is True, change
    assert rebuild.compare(_record(), FACT, _view(), [7], SPECS, PATH + "-v2")["replicas_differ"] is True
    view = _view()
    view["models"][0]["gpu_selector"] = None  # registered without a selector
    assert rebuild.compare(_record(), FACT, view, [7], SPECS, PATH)["replicas_differ"] is True


def test_the_filters_run_in_a_play(tmp_path):
    facts = run_local_play(tmp_path, "Rebuild filters", [
        {"name": "Compare", "ansible.builtin.set_fact": {
            "got": "{{ fact | pairserve.llm.rebuild_compare(none, view, [7], specs, '%s') }}" % PATH}},
        {"name": "Rows", "ansible.builtin.set_fact": {"rows": "{{ view.gpus | pairserve.llm.gpustack_gpu_rows }}"}},
        {"name": "Refused", "ansible.builtin.set_fact": {
            "bad": "{{ 'text' | pairserve.llm.rebuild_compare(none, view, [], specs, '') }}"}, "ignore_errors": True},
    ], {"fact": FACT, "view": _view(), "specs": SPECS}).by_task
    assert facts["Compare"]["ansible_facts"]["got"]["work"] is False
    assert facts["Rows"]["ansible_facts"]["rows"][0] == [0, "NVIDIA GeForce RTX 5080", 16303]
    assert facts["Refused"]["_status"] == "failed" and "expected the pairserve_gpu fact" in facts["Refused"]["msg"]
