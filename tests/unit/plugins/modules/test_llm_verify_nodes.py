"""llm_verify names the node at fault first: when the route fails, each instance's worker (GPUStack reaches a
replica only through the worker of its node) and the replica itself are asked from here, and a node whose worker
does not answer leads the message, with the address tried, before the HTTP reason; its instance is not shown as
running. Run through Ansible against local HTTP servers: the route (503, as GPUStack answers when a target's
backend is unreachable), GPUStack's API (workers, instances' logs), node-a's worker and replica; node-b's worker
port has nothing listening."""

from __future__ import annotations

import socket

from lab.ansible_runner import run_module
from support.local_http import JsonStub, gpustack_page

from ansible_collections.pairserve.llm.plugins.module_utils import openai_probe as probe


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on return: nothing listens there


def test_reach_urls_follow_gpustacks_own_rule():
    workers = [{"id": 7, "name": "node-b", "ip": "10.0.0.2", "advertise_address": None, "port": 10170}]
    inst = {"worker_id": 7, "worker_ip": "10.0.0.2", "port": 40100}
    assert probe.reach_urls(inst, workers) == {"worker": "http://10.0.0.2:10170/healthz",
                                               "replica": "http://10.0.0.2:40100/health"}
    workers[0]["advertise_address"] = "node-b.lan"
    assert probe.reach_urls(inst, workers)["worker"] == "http://node-b.lan:10170/healthz"
    assert probe.reach_urls({"worker_id": 8}, workers) == {"worker": None, "replica": None}


def test_the_node_whose_worker_does_not_answer_leads_the_diagnosis():
    down = {"url": "http://10.0.0.2:10170/healthz", "ok": False, "error": "unreachable: [Errno 111] Connection refused"}
    up = {"url": "http://10.0.0.1:10150/healthz", "ok": True, "error": "HTTP 200"}
    instances = [{"name": "qwen-node-a-1", "worker_name": "node-a", "state": "running", "reach": {"worker": up}},
                 {"name": "qwen-node-b-1", "worker_name": "node-b", "state": "running", "reach": {"worker": down}}]
    results = [{"check": "text", "ok": False, "status": 503, "class": "unavailable", "permanent": False,
                "message": "HTTP 503: a target has no running instance or its backend is unreachable"}]
    lines = probe.diagnosis("qwen", results, instances).splitlines()
    assert lines[0].startswith("[node-b] the worker at http://10.0.0.2:10170 does not answer (unreachable: "), lines
    assert "GPUStack still lists it as running" in lines[0] and "node-a" not in lines[0]
    assert lines[1].startswith("[qwen] check text failed (HTTP 503"), lines
    assert "instance qwen-node-a-1 on node-a: state running" in lines
    assert "instance qwen-node-b-1 on node-b: state unreachable (GPUStack lists it as running; its worker does not " \
           "answer)" in lines


def test_llm_verify_probes_the_workers_and_names_the_unreachable_node_first():
    dead_worker = closed_port()
    with JsonStub(lambda r: (200, {"status": "ok"})) as node_a, \
            JsonStub(lambda r: (503, {"error": {"message": "Service Unavailable"}})) as route:
        workers = [{"id": 1, "name": "node-a", "ip": "127.0.0.1", "port": node_a.port},
                   {"id": 2, "name": "node-b", "ip": "127.0.0.1", "port": dead_worker}]

        def gpustack(request):
            if request.path == "/v2/workers":
                return 200, gpustack_page(workers)
            return 200, b"INFO serving\n"  # an instance's log tail

        with JsonStub(gpustack) as api:
            instances = [
                {"id": 11, "name": "qwen-node-a-x", "state": "running", "worker_id": 1, "worker_name": "node-a",
                 "worker_ip": "127.0.0.1", "port": node_a.port},
                {"id": 12, "name": "qwen-node-b-y", "state": "running", "worker_id": 2, "worker_name": "node-b",
                 "worker_ip": "127.0.0.1", "port": dead_worker}]
            res = run_module("llm_verify", {"base_url": route.url, "model": "qwen", "checks": ["text"],
                                            "gpustack": {"api_url": api.url, "api_key": "sk-test"},
                                            "instances": instances})
    assert res.failed, res.result
    first = res.result["diagnosis"].splitlines()[0]
    assert first.startswith("[node-b] the worker at http://127.0.0.1:%d does not answer (unreachable" % dead_worker), \
        res.result["diagnosis"]
    assert "qwen-node-b-y" in first and "GPUStack still lists it as running" in first
    assert "[node-a]" not in res.result["diagnosis"], res.result["diagnosis"]  # node-a's worker and replica answer
    assert "instance qwen-node-b-y on node-b: state unreachable" in res.result["diagnosis"]
    # the worker list was read with the key, the healthz probes sent none
    assert [r.path for r in api.seen if r.path == "/v2/workers"] == ["/v2/workers"]
    assert all(r.headers.get("Authorization") is None for r in node_a.seen), [r.headers for r in node_a.seen]
    assert {r.path for r in node_a.seen} == {"/healthz", "/health"}
