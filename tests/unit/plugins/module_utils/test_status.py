"""plugins/module_utils/status.py on small hand-made GPUStack records: the table of a cluster with nothing registered,
GPUs found through GPUStack's device list or an instance's gpu_indexes, instances matched by model name, a replica
with fewer instances than it asks for, external-provider and dangling route targets, the verify line's variants,
df's output, and the printed sections with their continuation rows.

The lab's two-node cluster (everything up, each kind of outage, the play over a fake GPUStack) is in
tests/unit/playbooks/test_status.py; the topology section in tests/unit/playbooks/test_status_topology.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import status

GIB = 1 << 30


def test_nothing_registered_and_no_gpu_node_is_no_problem():
    got = status.cluster_status({})
    assert got["problems"] == [] and got["topology"] == [] and got["verify"] == {"record": None, "text": "not recorded"}
    assert got["lines"] == ["Workers", "  none registered", "Replicas", "  none registered", "Routes", "  none",
                            "Last verify", "  not recorded", "Checkpoint cache disk", "  no GPU node", "Problems",
                            "  none: every worker is ready, every instance runs, every route target has a running instance"]
    assert got["text"] == "\n".join(got["lines"])


@pytest.mark.parametrize("stdout, parsed", [
    ("   1B-blocks       Avail Mounted on\n%d %d /var/lib/pairserve\n" % (500 * GIB, 123 * GIB),
     {"size": 500 * GIB, "avail": 123 * GIB, "mount": "/var/lib/pairserve"}),
    ("1B-blocks Avail Mounted on\n10 0 /mnt/my disk\n\n", {"size": 10, "avail": 0, "mount": "/mnt/my disk"}),
])
def test_parse_df_reads_the_last_line_and_keeps_spaces_in_the_mount(stdout, parsed):
    assert status.parse_df(stdout) == parsed


@pytest.mark.parametrize("stdout, message", [
    (None, "df printed no figures: None"),
    ("1B-blocks Avail Mounted on\n10 -5 /\n", "df printed '10 -5 /', not <size> <available> <mount>"),
    ("1B-blocks Avail Mounted on\n10 5\n", "df printed '10 5', not <size> <available> <mount>"),
])
def test_parse_df_refusals(stdout, message):
    with pytest.raises(ValueError) as info:
        status.parse_df(stdout)
    assert str(info.value) == message


def cluster():
    """One ready worker whose GPUs only GPUStack's device list has, one replica without a selector asking for two
    instances and running one (linked to its model by name only), and a route with an external provider."""
    return {
        "workers": [{"id": 1, "name": "node-a", "state": "ready", "status": {}}],
        "gpus": [{"worker_name": "node-a", "index": 1, "uuid": "GPU-b", "name": "RTX"},
                 {"worker_name": "node-a", "index": 0, "uuid": "GPU-a", "name": "RTX"},
                 {"worker_name": "node-z", "index": 0, "uuid": "GPU-z", "name": "RTX"}],
        "models": [{"id": 7, "name": "qwen-node-a", "replicas": 2, "backend": "vLLM", "backend_version": "0.25.1"}],
        "model_instances": [{"name": "qwen-node-a-x1", "model_id": None, "model_name": "qwen-node-a", "state": "running",
                             "worker_name": "node-a", "gpu_indexes": [0, 1], "restart_count": 0}],
        "routes": [{"name": "qwen", "route_targets": [
            {"id": 2, "model_id": None, "provider_id": 4, "weight": 10, "fallback_status_codes": ["5xx", "429"]},
            {"id": 1, "model_id": 7, "weight": 90}]}],
    }


def test_gpus_come_from_the_device_list_and_the_instances_gpu_indexes():
    got = status.cluster_status(cluster())
    (worker,) = got["workers"]
    assert worker["gpu_count"] == 2 and [g["uuid"] for g in worker["gpus"]] == ["GPU-a", "GPU-b"]
    (replica,) = got["replicas"]
    assert replica["gpus"] == [{"id": "node-a:0", "worker": "node-a", "index": 0, "uuid": "GPU-a"},
                               {"id": "node-a:1", "worker": "node-a", "index": 1, "uuid": "GPU-b"}]
    assert replica["image"] == "GPUStack's vLLM 0.25.1 image"  # no backend record, not a pinned custom version
    # a continuation row for the second GPU of the worker and of the replica
    assert [line.split() for line in got["lines"][2:4]] == [["node-a", "ready", "2", "0", "GPU-a", "RTX"],
                                                            ["1", "GPU-b", "RTX"]]
    assert got["lines"][6].split()[:5] == ["qwen-node-a", "qwen-node-a-x1", "running", "node-a", "GPU-a"]
    assert got["lines"][7].split() == ["GPU-b"]


def test_fewer_instances_than_asked_and_the_provider_target_of_a_route():
    got = status.cluster_status(cluster())
    assert got["problems"] == ["replica qwen-node-a has 1 instance(s) of the 2 it asks for"]
    assert got["routes"] == [
        {"route": "qwen", "target": "qwen-node-a", "weight": 90, "running": 1, "fallback": None},
        {"route": "qwen", "target": "provider 4", "weight": 10, "running": None, "fallback": ["5xx", "429"]}]
    assert got["lines"][11].split() == ["qwen", "provider", "4", "10", "-", "5xx,429"]


def test_a_target_naming_a_model_gpustack_lacks_is_a_problem_and_the_provider_alone_keeps_the_route_up():
    info = cluster()
    info["routes"][0]["route_targets"][1]["model_id"] = 99
    problems = status.cluster_status(info)["problems"]
    assert problems[1:] == ["route qwen: target 1 names model id 99, which GPUStack does not have"]
    info["routes"][0]["route_targets"] = info["routes"][0]["route_targets"][1:]
    assert status.cluster_status(info)["problems"][-1] == "route qwen has no running target: every request to it fails"


def test_a_worker_in_no_state_and_an_expected_node_under_another_worker_name():
    info = cluster()
    info["workers"][0]["state"] = None
    problems = status.cluster_status(info, expected_nodes={"node-a": "", "gpu-7": "node-a", "gpu-8": "worker-8"})[
        "problems"]
    assert problems[0] == "worker node-a is in no state"
    assert "worker worker-8 (GPU node gpu-8) is not registered in GPUStack" in problems
    assert not [p for p in problems if "(GPU node gpu-7)" in p or "(GPU node node-a)" in p]


@pytest.mark.parametrize("record, text", [
    ({"result": "passed", "started_at": "T0", "routes": []}, "passed at T0: no route"),
    ({"result": "passed", "routes": [{"name": "qwen"}]}, "passed at ?: qwen (no replica listed)"),
    ({"result": "failed", "started_at": "T0", "routes": [{"name": "a", "models": ["m1", "m2"]}, {"name": "b"}]},
     "failed at T0 and never passed (it failed or was stopped; that run's output says why): a (m1, m2); "
     "b (no replica listed)"),
    ({"result": ""}, "not recorded"),
    ("passed", "not recorded"),
])
def test_the_verify_line(record, text):
    got = status.cluster_status({}, verify=record)["verify"]
    assert got["text"] == text and got["record"] == (record if isinstance(record, dict) else None)


def test_a_disk_report_failing_without_stderr_says_the_rc_and_a_bad_df_is_its_error():
    nodes = [{"host": "node-b", "path": "/c", "rc": 2, "stdout": "", "stderr": "  \n"},
             {"host": "node-a", "path": "/c", "rc": 0, "stdout": "1B-blocks Avail Mounted on\nx y /\n"}]
    disks = status.cluster_status({}, nodes)["disks"]
    assert [(d["host"], d["error"]) for d in disks] == [("node-a", "df printed 'x y /', not <size> <available> <mount>"),
                                                        ("node-b", "df failed (rc 2)")]
