"""The Prometheus scrape targets (module_utils/scrape_targets.py, filter pairserve.llm.scrape_targets): one group per
endpoint, running replicas of the collection's own models only, stable order, addresses and ports checked."""

from __future__ import annotations

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import scrape_targets as st
from support.ansible_runner import run_local_play

SERVER = {"host": "node-a", "address": "192.0.2.10"}
NODES = {"node-b": {"address": "192.0.2.11", "metrics_port": 10151},
         "node-a": {"address": "192.0.2.10", "metrics_port": 10151}}
INSTANCES = [
    {"model_name": "qwen-node-b", "worker_name": "node-b", "worker_ip": "192.0.2.11", "port": 40000, "state": "running"},
    {"model_name": "qwen-node-a", "worker_name": "node-a", "worker_ip": "192.0.2.10", "port": 40001, "state": "running"},
    {"model_name": "qwen-node-a", "worker_name": "node-a", "worker_ip": "192.0.2.10", "port": 40002, "state": "starting"},
    {"model_name": "someone-elses", "worker_name": "node-a", "worker_ip": "192.0.2.10", "port": 40003,
     "state": "running"},
]


def test_one_group_per_endpoint_in_a_stable_order():
    got = st.targets(SERVER, NODES, INSTANCES, ["qwen-node-a", "qwen-node-b"])
    assert got == [
        {"targets": ["192.0.2.10:10161"], "labels": {"job": "gpustack-server", "pairserve_host": "node-a"}},
        {"targets": ["192.0.2.10:10151"], "labels": {"job": "gpustack-worker", "pairserve_host": "node-a"}},
        {"targets": ["192.0.2.11:10151"], "labels": {"job": "gpustack-worker", "pairserve_host": "node-b"}},
        {"targets": ["192.0.2.10:40001"],
         "labels": {"job": "vllm", "pairserve_host": "node-a", "pairserve_replica": "qwen-node-a"}},
        {"targets": ["192.0.2.11:40000"],
         "labels": {"job": "vllm", "pairserve_host": "node-b", "pairserve_replica": "qwen-node-b"}},
    ]
    assert st.targets(SERVER, NODES, list(reversed(INSTANCES)), ["qwen-node-a", "qwen-node-b"]) == got
    # Without the model list, every running instance counts.
    assert len(st.targets(SERVER, NODES, INSTANCES)) == 6


def test_the_controller_is_listed_only_when_it_runs():
    with_ctl = st.targets(dict(SERVER, controller_metrics_port=10180), NODES, [], [])
    assert with_ctl[1] == {"targets": ["192.0.2.10:10180"],
                           "labels": {"job": "pairserve-controller", "pairserve_host": "node-a"}}
    assert [g["labels"]["job"] for g in st.targets(dict(SERVER, controller_metrics_port=0), NODES, [], [])] == [
        "gpustack-server", "gpustack-worker", "gpustack-worker"]
    with pytest.raises(st.TargetsError, match="controller metrics port"):
        st.targets(dict(SERVER, controller_metrics_port=70000), NODES, [], [])


def test_ipv6_addresses_are_bracketed():
    got = st.targets({"host": "a", "address": "2001:db8::10", "metrics_port": 10161}, {}, [])
    assert got[0]["targets"] == ["[2001:db8::10]:10161"]


@pytest.mark.parametrize("server,nodes,match", [
    ({"host": "a", "address": ""}, {}, "server address"),
    ({"host": "a", "address": "192.0.2.1", "metrics_port": 0}, {}, "server metrics port"),
    (SERVER, {"node-b": {"address": "192.0.2.11", "metrics_port": "x"}}, "node-b worker metrics port"),
])
def test_bad_addresses_and_ports_are_refused_naming_them(server, nodes, match):
    with pytest.raises(st.TargetsError, match=match):
        st.targets(server, nodes, [])


def test_the_filter_runs_in_a_play(tmp_path):
    by_task = run_local_play(tmp_path, "Targets", [
        {"name": "Targets", "ansible.builtin.set_fact": {
            "got": "{{ server | pairserve.llm.scrape_targets(nodes, instances, ['qwen-node-a']) }}"}},
        {"name": "Refused", "ansible.builtin.set_fact": {
            "bad": "{{ 'text' | pairserve.llm.scrape_targets(nodes, instances) }}"}, "ignore_errors": True},
    ], {"server": SERVER, "nodes": NODES, "instances": INSTANCES}).by_task
    assert [g["labels"]["job"] for g in by_task["Targets"]["ansible_facts"]["got"]] == [
        "gpustack-server", "gpustack-worker", "gpustack-worker", "vllm"]
    assert by_task["Refused"]["_status"] == "failed" and "expected the server" in by_task["Refused"]["msg"]
