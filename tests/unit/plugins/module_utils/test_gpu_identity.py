"""Tests of module_utils/gpu_identity.py on small hand-made facts: the shapes problems() takes the worker's GPUs in (the
list, or the whole worker record), which index a GPU is wanted at, the fields of each problem, and order_problems()
judging a pair's GPUStack indexes against the CUDA ordinals its bus ids give. Recorded hosts, the filters and the
roles' tasks are tested in tests/unit/plugins/filter/test_gpu_identity.py and test_gpu_order_problems.py."""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils import gpu_identity


def gpu(index, bus, **fields):
    return dict({"index": index, "uuid": "GPU-%d" % index, "name": "NVIDIA L4", "minor_number": index,
                 "bus_id": bus}, **fields)


def fact(gpus, *pairs):
    """A pairserve_gpu fact whose pairs name GPUs by NVML index (gpustack_gpu_indexes as gpu_pairs computes them)."""
    by_index = {g["index"]: g for g in gpus}
    return {"source": "nvml", "gpus": gpus,
            "pairs": [{"index": n, "uuids": [by_index[i]["uuid"] for i in pair], "gpustack_gpu_indexes": list(pair),
                       "bus_ids": [by_index[i]["bus_id"] for i in pair]} for n, pair in enumerate(pairs)]}


TWO = [gpu(0, "00000000:01:00.0"), gpu(1, "00000000:02:00.0")]


def devices(*uuids):
    return [{"index": i, "uuid": u, "name": "NVIDIA L4"} for i, u in enumerate(uuids)]


def test_the_worker_record_or_its_list_of_gpus_agree_and_entries_that_are_not_dicts_are_ignored():
    record = {"name": "node-a", "status": {"gpu_devices": devices("GPU-0", "GPU-1") + ["junk", None]}}
    assert gpu_identity.problems(fact(TWO, (0, 1)), record, "node-a") == []
    assert gpu_identity.problems(fact(TWO, (0, 1)), devices("GPU-0", "GPU-1"), "node-a") == []


def test_nothing_to_compare_without_pairs():
    assert gpu_identity.problems(None, devices("GPU-0"), "node-a") == []
    assert gpu_identity.problems({"gpus": TWO, "pairs": []}, [], "node-a") == []


def test_a_worker_without_gpus_misses_every_card_of_the_pairs_under_its_own_name():
    found = gpu_identity.problems(fact(TWO, (0, 1)), {"name": "w", "status": None}, "node-a", "gpu-box-a")
    assert [{k: p[k] for k in ("host", "uuid", "pair", "kind", "gpu_pairs_index", "worker_index")} for p in found] == [
        {"host": "node-a", "uuid": "GPU-0", "pair": 0, "kind": "missing", "gpu_pairs_index": 0, "worker_index": None},
        {"host": "node-a", "uuid": "GPU-1", "pair": 0, "kind": "missing", "gpu_pairs_index": 1, "worker_index": None}]
    text = found[0]["text"]
    assert text.startswith("node-a: GPU GPU-0 (pair 0, bus 00000000:01:00.0, NVML index 0, minor number 0), which "
                           "gpu_pairs computed as GPUStack index 0, is not among the GPUs GPUStack worker gpu-box-a "
                           "reports (index and UUID: no GPU); the pin gpu-box-a:cuda:0 would give the replica no GPU "
                           "at all."), text


def test_an_index_and_a_name_disagreement_are_two_problems_of_one_card():
    worker = [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA L4"}, {"index": 3, "uuid": "GPU-1", "name": "NVIDIA A2"}]
    found = gpu_identity.problems(fact(TWO, (0, 1)), worker, "node-a")
    assert [(p["uuid"], p["kind"], p["gpu_pairs_index"], p["worker_index"]) for p in found] == [
        ("GPU-1", "index", 1, 3), ("GPU-1", "name", 1, 3)]
    assert "the pin node-a:cuda:1 would give the replica no GPU at all instead" in found[0]["text"]
    assert "is a NVIDIA L4 to gpu_pairs but a NVIDIA A2 to GPUStack worker node-a" in found[1]["text"]
    assert "(source nvml)" in found[1]["text"]
    # a name only one side reports is no disagreement
    worker[1].update(index=1, name=None)
    assert gpu_identity.problems(fact(TWO, (0, 1)), worker, "node-a") == []


def test_without_the_pairs_indexes_the_nvml_index_is_wanted_and_an_unknown_card_has_none():
    pairs = fact(TWO, (0, 1))
    del pairs["pairs"][0]["gpustack_gpu_indexes"]
    pairs["pairs"][0]["uuids"].append("GPU-9")  # a card the fact's gpus do not list
    found = gpu_identity.problems(pairs, devices("GPU-0", "GPU-1"), "node-a")
    assert [(p["uuid"], p["kind"], p["gpu_pairs_index"]) for p in found] == [("GPU-9", "missing", None)]
    assert "bus unknown, NVML index unknown, minor number unknown" in found[0]["text"]


def test_gpus_in_pci_order_have_their_gpustack_index_as_cuda_ordinal():
    # bus ids in any of NVML's spellings: the order is the numbers', not the text's
    gpus = [gpu(0, "0000:01:00.0"), gpu(1, "00000000:02:00.0"), gpu(2, "0a:00.0"), gpu(3, "00000000:41:00.0")]
    assert gpu_identity.order_problems(fact(gpus, (0, 1), (2, 3)), "node-a") == []
    assert gpu_identity.order_problems(None, "node-a") == [] and gpu_identity.order_problems({}, "node-a") == []


def test_gpus_out_of_pci_order_are_named_with_both_orders():
    gpus = [gpu(0, "00000000:41:00.0"), gpu(1, "00000000:02:00.0")]
    found = gpu_identity.order_problems(fact(gpus, (0, 1)), "node-a")
    assert [(p["uuid"], p["pair"], p["gpustack_index"], p["cuda_ordinal"]) for p in found] == [
        ("GPU-0", 0, 0, 1), ("GPU-1", 0, 1, 0)]
    text = found[0]["text"]
    assert text.startswith("node-a: GPU GPU-0 (NVIDIA L4, bus 00000000:41:00.0) of pair 0 is GPUStack index 0 ")
    assert "CUDA inside the replica reads index 0 as the card of PCI rank 0, GPU GPU-1 (NVIDIA L4, bus " \
           "00000000:02:00.0), not this one (its PCI rank is 1)" in text
    assert "NVML/GPUStack order (index: UUID, bus id): 0 GPU-0 (00000000:41:00.0), 1 GPU-1 (00000000:02:00.0); " \
           "PCI/CUDA order (CUDA ordinal under CUDA_DEVICE_ORDER=PCI_BUS_ID: UUID, bus id): 0 GPU-1 " \
           "(00000000:02:00.0), 1 GPU-0 (00000000:41:00.0)" in text
    assert "pairserve_gpu_exclude" in text


def test_a_pair_gpu_whose_bus_is_none_of_the_hosts_has_no_ordinal():
    pairs = fact(TWO, (0, 1))
    pairs["pairs"][0]["uuids"][1] = "GPU-9"
    pairs["pairs"][0]["bus_ids"][1] = "00000000:09:00.0"
    found = gpu_identity.order_problems(pairs, "node-a")
    assert len(found) == 1
    problem = found[0]
    assert (problem["uuid"], problem["gpustack_index"], problem["cuda_ordinal"]) == ("GPU-9", 1, None)
    assert "its CUDA ordinal cannot be told: bus 00000000:09:00.0 is none of the host's GPUs in the fact" in problem["text"]
