"""The GPU identity cross-check: gpu_pairs' fact against the GPUs a GPUStack worker's record reports.

The worker records are built in the shape GPUStack 2.2.3 keeps in `/v2/workers` -> `status.gpu_devices`: the entry
its own collector (`DetectorFactory().detect_gpus()`) returned on the real H200 host
(tests/fixtures/gpu-proof/gpustack-py312-2026-12-02.json), with index, UUID, name and memory set per GPU. The facts
come from gpu_pairs' own code over recorded hosts. With one real GPU the orders cannot differ, so the multi-GPU
disagreements are built in the recordings' format.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import gpu_identity, nvml, nvml_replay
from support.ansible_runner import run_playbook
from support.local_http import JsonStub, gpustack_page
from support.nvml_recordings import four_h200_minors

REPO = Path(__file__).resolve().parents[4]
NVML = REPO / "tests" / "fixtures" / "nvml"
PROOF = REPO / "tests" / "fixtures" / "gpu-proof" / "gpustack-py312-2026-12-02.json"
IDENTITY = NVML / "h200-identity-2026-12-01.json"
MIB = 1 << 20


def collector_entry() -> dict:
    """One GPU as GPUStack 2.2.3's collector reported it on the real host: the template of a worker record GPU."""
    return json.loads(PROOF.read_text())["gpus"]["collector"][0]


def device(index: int, uuid: str, name: str, memory_mib: int) -> dict:
    dev = copy.deepcopy(collector_entry())
    dev.update(index=index, device_index=index, uuid=uuid, name=name)
    dev["memory"]["total"] = memory_mib * MIB
    return dev


def worker(name: str, devices: list) -> dict:
    return {"name": name, "state": "ready", "status": {"gpu_devices": devices}}


def gather(path, **options) -> dict:
    return nvml.gather({nvml_replay.ENV_VAR: str(path)}, **options)


def as_gpustack_detects(path, physical_index: bool = False) -> list:
    """The worker's GPUs for a recording, numbered as gpustack-runtime 0.2.1 does: the NVML index with the
    collection's GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0; with `physical_index` (the runtime's default,
    a worker without the collection's environment) the minor number, else the NVML index."""
    recording = json.loads(Path(path).read_text())
    result = []
    for dev in recording["devices"]:
        minor = dev.get("MinorNumber")
        index = minor if physical_index and isinstance(minor, int) else dev["Index"]
        result.append(device(index, dev["UUID"], dev["Name"], dev["MemoryInfo"]["total"] // MIB))
    return result


def assert_names(problem: dict, host: str, uuid: str, wanted: int, seen) -> None:
    """The text names the host, the UUID and both indexes."""
    text = problem["text"]
    assert text.startswith(host + ": "), text
    assert uuid in text, text
    assert problem["uuid"] == uuid and problem["host"] == host
    assert problem["gpu_pairs_index"] == wanted and problem["worker_index"] == seen, problem
    assert "index %s" % wanted in text, text
    if seen is not None:
        assert "index %s" % seen in text, text


# --- pass cases ------------------------------------------------------------------------------------------------

def test_the_real_h200_passes():
    """The real host's recording through gpu_pairs (one GPU, TP=1: group size 1), against what gpustack-runtime
    reported on that host, in the worker record's shape."""
    real = json.loads(IDENTITY.read_text())
    fact = gather(NVML / "h200-recording-2026-12-01.json", group_size=1, expected_pairs=1)
    # The recording and the identity run are the same host: gpu_pairs says now what it said there.
    mine = {g["uuid"]: g for g in real["gpu_pairs"]}
    for gpu in fact["gpus"]:
        assert (gpu["index"], gpu["minor_number"], gpu["bus_id"]) == (
            mine[gpu["uuid"]]["nvml_index"], mine[gpu["uuid"]]["minor_number"], mine[gpu["uuid"]]["bus_id"])
    assert fact["pairs"][0]["gpustack_gpu_indexes"] == [mine[u]["gpustack_index"] for u in fact["pairs"][0]["uuids"]]
    record = worker("vm", [device(d["index"], d["uuid"], d["name"], d["memory_mib"]) for d in real["runtime"]])
    assert gpu_identity.problems(fact, record["status"]["gpu_devices"], "vm") == []
    # The whole worker record is accepted as well.
    assert gpu_identity.problems(fact, record, "vm") == []


def test_the_collector_output_of_the_second_h200_host_passes():
    """GPUStack's own collector output, verbatim, against a fact made of gpu_pairs' entries from the same run."""
    gpus = json.loads(PROOF.read_text())["gpus"]
    fact = {
        "source": "nvml",
        "gpus": [{"index": g["nvml_index"], "minor_number": g["minor_number"], "uuid": g["uuid"],
                  "bus_id": g["bus_id"], "name": g["name"]} for g in gpus["gpu_pairs"]],
        "pairs": [{"index": 0, "uuids": [g["uuid"] for g in gpus["gpu_pairs"]],
                   "bus_ids": [g["bus_id"] for g in gpus["gpu_pairs"]],
                   "gpustack_gpu_indexes": [g["gpustack_index"] for g in gpus["gpu_pairs"]]}],
    }
    assert gpu_identity.problems(fact, gpus["collector"], "h200") == []


@pytest.mark.parametrize("host, recording", [("node-a", "node-a-2x5080.json"), ("node-b", "node-b-2x4070tis.json")])
def test_the_lab_hosts_pass(host, recording):
    fact = gather(NVML / recording, expected_pairs=1)
    assert gpu_identity.problems(fact, as_gpustack_detects(NVML / recording), host) == []


def test_minor_numbers_out_of_nvml_order_pass_with_the_collections_worker_environment(tmp_path):
    """Minor numbers 2, 0, 3, 1 on a host in PCI order: the worker (PHYSICAL_INDEX_PRIORITY=0) numbers by NVML
    index, and so do the pins, which are also the CUDA ordinals in the replicas."""
    path = four_h200_minors(tmp_path)
    fact = gather(path, expected_pairs=2)
    for pair in fact["pairs"]:
        assert pair["gpustack_gpu_indexes"] == pair["nvml_indices"] == pair["cuda_ordinals"], pair
    # The minor numbers are not the pins: the case is only meaningful because they differ.
    minors = {g["uuid"]: g["minor_number"] for g in fact["gpus"]}
    assert any(p["gpustack_gpu_indexes"] != [minors[u] for u in p["uuids"]] for p in fact["pairs"]), fact
    assert gpu_identity.problems(fact, as_gpustack_detects(path), "h200x4") == []
    assert gpu_identity.order_problems(fact, "h200x4") == []


# --- failing cases ---------------------------------------------------------------------------------------------

def test_swapped_uuids_between_two_indexes_fail_naming_both():
    fact = gather(NVML / "node-a-2x5080.json", expected_pairs=1)
    devices = as_gpustack_detects(NVML / "node-a-2x5080.json")
    first, second = devices[0]["uuid"], devices[1]["uuid"]
    devices[0]["uuid"], devices[1]["uuid"] = second, first
    found = gpu_identity.problems(fact, devices, "node-a")
    assert [p["kind"] for p in found] == ["index", "index"], found
    assert_names(found[0], "node-a", first, 0, 1)
    assert_names(found[1], "node-a", second, 1, 0)
    # It says which card the pin would really give, and what to do.
    assert "node-a:cuda:0 would give the replica GPU %s" % second in found[0]["text"]
    # The collection sets the worker's numbering itself: the user is told to keep it, not to change it.
    assert "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0" in found[0]["text"]
    assert "systemctl cat gpustack-worker" in found[0]["text"] and "remove" not in found[0]["text"]
    assert "restart the worker" in found[0]["text"]


def test_a_missing_uuid_fails_naming_it():
    """node-b's second card swapped: the worker reports another UUID at its index."""
    fact = gather(NVML / "node-b-2x4070tis.json", expected_pairs=1)
    devices = as_gpustack_detects(NVML / "node-b-2x4070tis.json")
    gone = devices[1]["uuid"]
    devices[1]["uuid"] = "GPU-4070b000-0000-4000-8000-0000000000ff"
    (problem,) = gpu_identity.problems(fact, devices, "node-b")
    assert problem["kind"] == "missing"
    assert_names(problem, "node-b", gone, 1, None)
    assert "node-b:cuda:1 would give the replica GPU GPU-4070b000-0000-4000-8000-0000000000ff" in problem["text"]
    assert "1 GPU-4070b000-0000-4000-8000-0000000000ff" in problem["text"]  # the worker's own list
    assert "nvidia-smi -L" in problem["text"] and "pairserve_expected_pairs" in problem["text"]


def test_a_worker_with_one_gpu_less_fails_for_the_one_it_lost():
    fact = gather(NVML / "node-b-2x4070tis.json", expected_pairs=1)
    devices = as_gpustack_detects(NVML / "node-b-2x4070tis.json")[:1]
    (problem,) = gpu_identity.problems(fact, devices, "node-b", "gpu-box-b")
    assert problem["kind"] == "missing"
    assert_names(problem, "node-b", fact["pairs"][0]["uuids"][1], 1, None)
    assert "gpu-box-b:cuda:1 would give the replica no GPU at all" in problem["text"]


def test_minor_numbers_out_of_nvml_order_fail_against_a_worker_numbering_by_minor_number(tmp_path):
    """The four-GPU host whose minor numbers are not NVML's order, with a worker that lost the collection's
    GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0 (gpustack-runtime's default: the minor number): every pinned
    index would name another card, and the text says to keep the variable."""
    path = four_h200_minors(tmp_path)
    fact = gather(path, expected_pairs=2)
    found = gpu_identity.problems(fact, as_gpustack_detects(path, physical_index=True), "h200x4")
    numbers = {g["uuid"]: (g["minor_number"], g["index"]) for g in fact["gpus"]}
    assert sorted(p["uuid"] for p in found) == sorted(numbers) and {p["kind"] for p in found} == {"index"}, found
    for problem in found:
        minor, nvml_index = numbers[problem["uuid"]]
        assert_names(problem, "h200x4", problem["uuid"], nvml_index, minor)
        assert "minor number %d" % minor in problem["text"] and "NVML index %d" % nvml_index in problem["text"]
        assert "keeps the collection's GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0" in problem["text"]


def test_without_the_pairs_indexes_the_nvml_index_is_wanted():
    """A fact whose pairs carry no gpustack_gpu_indexes (an older fact) is compared by NVML index, not minor."""
    fact = gather(NVML / "node-a-2x5080.json", expected_pairs=1)
    for gpu in fact["gpus"]:
        gpu["minor_number"] = 1 - gpu["index"]
    fact["pairs"][0].pop("gpustack_gpu_indexes")
    assert gpu_identity.problems(fact, as_gpustack_detects(NVML / "node-a-2x5080.json"), "node-a") == []


def test_a_name_mismatch_fails():
    fact = gather(NVML / "node-a-2x5080.json", expected_pairs=1)
    devices = as_gpustack_detects(NVML / "node-a-2x5080.json")
    devices[1]["name"] = "NVIDIA GeForce RTX 4090"
    (problem,) = gpu_identity.problems(fact, devices, "node-a")
    assert problem["kind"] == "name"
    assert_names(problem, "node-a", devices[1]["uuid"], 1, 1)
    assert "NVIDIA GeForce RTX 5080" in problem["text"] and "NVIDIA GeForce RTX 4090" in problem["text"]
    assert "driver" in problem["text"]


def test_gpus_without_uuids_do_not_pass():
    """Declared static resources carry no UUID: nothing can be compared, so it must not count as a match."""
    fact = gather(NVML / "node-a-2x5080.json", expected_pairs=1)
    devices = as_gpustack_detects(NVML / "node-a-2x5080.json")
    for dev in devices:
        dev.pop("uuid")
    found = gpu_identity.problems(fact, devices, "node-a")
    assert [p["kind"] for p in found] == ["no_uuid", "no_uuid"], found
    for problem, uuid, index in zip(found, fact["pairs"][0]["uuids"], [0, 1]):
        assert_names(problem, "node-a", uuid, index, None)


# --- the role's task, through real Ansible ---------------------------------------------------------------------

PLAY = """
- name: GPU identity task
  hosts: localhost
  gather_facts: false
  connection: local
  vars:
    pairserve_gpustack_server_host: localhost
    pairserve_gpustack_api_port: 1
    pairserve_gpustack_admin_password: not-used-here
    pairserve_gpustack_worker_name: node-a
    pairserve_gpu: %(fact)s
  tasks:
    - name: The worker reports the pair's cards where gpu_pairs put them
      ansible.builtin.include_role:
        name: pairserve.llm.gpustack_worker
        tasks_from: identity
      vars:
        _pairserve_gpustack_worker_info: {workers: [%(good)s]}
    - name: The worker reports them swapped
      block:
        - name: Swapped
          ansible.builtin.include_role:
            name: pairserve.llm.gpustack_worker
            tasks_from: identity
          vars:
            _pairserve_gpustack_worker_info: {workers: [%(swapped)s]}
      rescue:
        - name: Report the failure
          ansible.builtin.debug:
            msg: "{{ ansible_failed_result.msg }}"
"""


def node_a_good_and_swapped() -> tuple:
    """gpu_pairs' fact for node-a, the GPUs its worker reports, and the same GPUs with the two UUIDs swapped."""
    fact = gather(NVML / "node-a-2x5080.json", expected_pairs=1)
    good = as_gpustack_detects(NVML / "node-a-2x5080.json")
    swapped = copy.deepcopy(good)
    swapped[0]["uuid"], swapped[1]["uuid"] = good[1]["uuid"], good[0]["uuid"]
    return fact, good, swapped


def by_task(results: list) -> dict:
    """A play's task results, by task name, in the order they ran."""
    named = {}
    for record in results:
        named.setdefault(record["_task"], []).append(record)
    return named


def test_the_role_task_passes_fails_and_skips_in_check_mode(tmp_path):
    fact, good, swapped = node_a_good_and_swapped()
    book = tmp_path / "play.yml"
    book.write_text(PLAY % {"fact": json.dumps(fact), "good": json.dumps(worker("node-a", good)),
                            "swapped": json.dumps(worker("node-a", swapped))})
    result = run_playbook(book, inventory="localhost,")
    assert result.rc == 0, result.stdout + result.stderr
    by_name = by_task(result.results)
    (checked_good, checked_swapped) = by_name["Check that the worker's GPU indexes name the cards gpu_pairs paired"]
    assert checked_good["_status"] == "ok" and not checked_good.get("changed"), checked_good
    assert checked_swapped["_status"] == "failed" and not checked_swapped.get("changed"), checked_swapped
    (report,) = by_name["Report the failure"]
    assert "localhost: GPU %s" % good[0]["uuid"] in report["msg"] and "node-a:cuda:0" in report["msg"], report
    # Outside check mode the one-shot query is not made (the wait above has the record).
    assert all(r["_status"] == "skipped" for r in by_name["Ask the server which GPUs this worker reports now"])

    # Check mode: the one-shot query finds no server, so the check skips and nothing fails.
    checked = run_playbook(book, inventory="localhost,", check=True)
    assert checked.rc == 0, checked.stdout + checked.stderr
    names = by_task(checked.results)
    assert all(r["_status"] == "skipped" for r in names["Check that the worker's GPU indexes name the cards gpu_pairs paired"])
    assert not any(r.get("changed") for r in checked.results)


def workers_server(record) -> JsonStub:
    """A local server answering GET /v2/workers with one worker record, as GPUStack's paginated list does."""
    return JsonStub(lambda request: (200, gpustack_page([record])) if request.path.startswith("/v2/workers")
                    else (404, {}))


def test_check_mode_asks_the_server_and_fails_on_a_swap(tmp_path):
    """In check mode the ready wait does not run; a worker that already exists is still compared, read-only."""
    fact, good, swapped = node_a_good_and_swapped()
    book = tmp_path / "play.yml"
    # The variables the normal run would read are the good record: check mode must not look at them.
    book.write_text(PLAY % {"fact": json.dumps(fact), "good": json.dumps(worker("node-a", good)),
                            "swapped": json.dumps(worker("node-a", good))})
    for record, failed in ((worker("node-a", swapped), True), (worker("node-a", good), False)):
        with workers_server(record) as server:
            result = run_playbook(book, inventory="localhost,", check=True,
                                  extra_vars={"pairserve_gpustack_api_port": server.port})
        checks = [r for r in result.results
                  if r["_task"] == "Check that the worker's GPU indexes name the cards gpu_pairs paired"]
        # The first include is not in a block: a failure there ends the play.
        assert (result.rc != 0) == failed, result.stdout + result.stderr
        assert [r["_status"] for r in checks] == (["failed"] if failed else ["ok", "ok"]), checks
        assert not any(r.get("changed") for r in result.results)
        if failed:
            assert "node-a:cuda:0 would give the replica GPU %s" % good[1]["uuid"] in checks[0]["msg"], checks[0]
