"""llm_verify names the node at fault first: when the route fails, each instance's worker (GPUStack reaches a
replica only through the worker of its node) and the replica itself are asked from here, and a node whose worker
does not answer leads the message, with the address tried, before the HTTP reason; its instance is not shown as
running. Run through Ansible against local HTTP servers: the route (503, as GPUStack answers when a target's
backend is unreachable), GPUStack's API (workers, instances' logs), node-a's worker and replica; node-b's worker
port has nothing listening."""

from __future__ import annotations

import socket

from support.ansible_runner import run_module
from support.local_http import JsonStub, gpustack_page


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on return: nothing listens there


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
