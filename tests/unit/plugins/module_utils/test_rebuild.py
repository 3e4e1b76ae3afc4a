"""plugins/module_utils/rebuild.py's helpers on the edges of their input: an empty or partial gpu fact, GPUStack's
memory totals as strings or missing, the registration of replicas without a selector, and a node with nothing yet.

The rebuild decision over a full node (a swapped card, stale workers, a changed registration) and the filter through
Ansible are in tests/unit/plugins/filter/test_rebuild_compare.py.
"""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils import rebuild

MIB = 1048576


def test_detected_keeps_only_the_record_keys_and_reads_a_missing_or_null_list_as_empty():
    fact = {"gpus": [{"index": 0, "uuid": "GPU-a", "bus_id": "00000000:01:00.0", "power_limit_w": 360.0}],
            "pairs": None, "leftover": [{"uuid": "GPU-z"}]}
    assert rebuild.detected(fact) == {"gpus": [{"index": 0, "uuid": "GPU-a"}], "pairs": []}
    assert rebuild.detected({}) == {"gpus": [], "pairs": []}


def test_rows_are_sorted_by_index_and_memory_is_whole_mib():
    fact = {"gpus": [{"index": 2, "name": "B", "memory_total_mib": 24564.0},
                     {"index": 0, "name": "A", "memory_total_mib": 16303}]}
    assert rebuild.detected_rows(fact) == [[0, "A", 16303], [2, "B", 24564]]
    assert rebuild.detected_rows({"gpus": None}) == []
    gpus = [{"index": 1, "name": "B", "memory": {"total": str(24564 * MIB)}},  # GPUStack may send a string
            {"index": 0, "name": "A", "memory": {"total": 16303 * MIB - 1}},  # a byte short: the MiB below
            {"index": 3, "name": "C"}]
    assert rebuild.gpustack_rows(gpus) == [[0, "A", 16302], [1, "B", 24564], [3, "C", 0]]
    assert rebuild.gpustack_rows(None) == []


def test_a_node_with_nothing_recorded_detected_or_registered_has_no_work():
    got = rebuild.compare(None, {}, {}, None, [], "/models/qwen")
    assert got == {"recorded": None, "cards_changed": False, "gpustack_stale": False, "gpustack_gpus": [],
                   "detected_gpus": [], "stale_workers": [], "replicas_differ": False, "pairs": [], "work": False}


def test_a_record_of_cards_against_no_cards_now_is_a_change():
    recorded = {"gpus": [{"index": 0, "uuid": "GPU-a"}], "pairs": []}
    got = rebuild.compare(recorded, {}, {}, [], [], "/models/qwen")
    assert got["cards_changed"] is True and got["work"] is True and got["recorded"] is recorded
    # An empty record against an empty node: nothing changed (None lists read as empty on both sides).
    assert rebuild.compare({"gpus": None, "pairs": None}, {}, {}, [], [], "/m")["cards_changed"] is False


def test_a_replica_registered_without_gpu_ids_or_one_too_many_differs():
    specs = [{"name": "qwen-node-a", "gpu_ids": ["node-a:cuda:0"], "argv": ["--seed=1"]}]
    model = {"name": "qwen-node-a", "gpu_selector": {"gpu_ids": ["node-a:cuda:0"]}, "backend_parameters": ["--seed=1"],
             "local_path": "/m"}
    assert rebuild.compare(None, {}, {"models": [model]}, [], specs, "/m")["replicas_differ"] is False
    bare = dict(model, gpu_selector={"gpu_ids": None})
    assert rebuild.compare(None, {}, {"models": [bare]}, [], specs, "/m")["replicas_differ"] is True
    extra = dict(model, name="qwen-node-a-p1")
    got = rebuild.compare(None, {}, {"models": [model, extra]}, [], specs, "/m")
    assert got["replicas_differ"] is True and got["work"] is True
    # No spec at all: every registered replica of the node is one too many.
    assert rebuild.compare(None, {}, {"models": [model]}, [], [], "/m")["replicas_differ"] is True


def test_a_worker_record_without_an_id_is_never_owned():
    view = {"workers": [{"name": "node-a"}, {"id": 7, "name": "node-a"}]}
    assert rebuild.compare(None, {}, view, [7], [], "/m")["stale_workers"] == [{"name": "node-a"}]
