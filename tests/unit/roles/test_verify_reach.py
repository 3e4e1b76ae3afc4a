"""The verify role's step before its first request (tasks/reach.yml), through Ansible with real HTTP probes: every
instance of the routes' replicas is asked where GPUStack reaches it (its worker's /healthz, the replica's /health;
module_utils/reach.py); a node that does not answer fails the verify naming the node first, with the address asked,
and no request is sent. GPUStack's API is a local server answering its 2.2.3 records (workers, instances); node-a's
worker and replica answer at one local port; node-b's worker port has nothing listening, as after its worker died
(GPUStack still lists its instance as running).

The lab's faults scenario (molecule/faults) stops node-b's worker across verify.yml: through the weighted route
the requests passed or failed by chance, and a failure led with an HTTP 503 that named no node."""

from __future__ import annotations

import socket

from support.ansible_runner import run_local_play
from support.local_http import JsonStub, gpustack_page

REACH_TASK = {"name": "Ask where GPUStack reaches each replica", "ansible.builtin.include_role": {
    "name": "pairserve.llm.verify", "tasks_from": "reach"}}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on return: nothing listens there


def records(node_a_port: int, node_b_port: int):
    workers = [{"id": 1, "name": "node-a", "ip": "127.0.0.1", "port": node_a_port, "state": "ready"},
               {"id": 2, "name": "node-b", "ip": "127.0.0.1", "port": node_b_port, "state": "ready"}]
    instances = [
        {"id": 11, "name": "qwen-node-a-x", "model_name": "qwen-node-a", "state": "running", "worker_id": 1,
         "worker_name": "node-a", "worker_ip": "127.0.0.1", "port": node_a_port},
        {"id": 12, "name": "qwen-node-b-y", "model_name": "qwen-node-b", "state": "running", "worker_id": 2,
         "worker_name": "node-b", "worker_ip": "127.0.0.1", "port": node_b_port},
        # Another route's replica on node-b: not this verify's concern.
        {"id": 13, "name": "other-node-b-z", "model_name": "other-node-b", "state": "running", "worker_id": 2,
         "worker_name": "node-b", "worker_ip": "127.0.0.1", "port": node_b_port}]
    return workers, instances


def play(tmp_path, node_a_port: int, node_b_port: int, routes=None):
    workers, instances = records(node_a_port, node_b_port)

    def gpustack(request):
        if request.path == "/v2/workers":
            return 200, gpustack_page(workers)
        if request.path == "/v2/model-instances":
            return 200, gpustack_page(instances)
        return 404, {"detail": "not found"}

    with JsonStub(gpustack) as api:
        return run_local_play(tmp_path, "reach", [REACH_TASK], {
            "pairserve_verify_gpustack_api_url": api.url, "pairserve_verify_gpustack_api_key": "sk-test",
            "pairserve_verify_validate_certs": False, "pairserve_verify_server_host": "localhost",
            "pairserve_verify_reach_grace": 0,
            "pairserve_verify_routes": routes or [{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b"]}]})


def test_a_node_whose_worker_does_not_answer_fails_the_verify_named_first(tmp_path):
    dead = closed_port()
    with JsonStub(lambda r: (200, {"status": "ok"})) as node_a:
        res = play(tmp_path, node_a.port, dead)
        asked = sorted(r.path for r in node_a.seen)
    assert res.rc != 0, res.stdout[-3000:]
    lines = res.result["msg"].splitlines()
    assert lines[0].startswith("[node-b] the worker at http://127.0.0.1:%d does not answer (" % dead), lines
    assert "GPUStack reaches instance qwen-node-b-y only through it" in lines[0], lines
    assert "GPUStack still lists it as running" in lines[0], lines
    assert lines[1] == "No request was sent: GPUStack cannot reach every replica of qwen (asked from localhost).", lines
    assert not any("node-a" in line or "other-node-b" in line for line in lines), lines
    assert asked == ["/health", "/healthz"], asked  # node-a's worker and replica, once each (grace 0)


def test_every_replica_answers_so_the_verify_goes_on(tmp_path):
    with JsonStub(lambda r: (200, {"status": "ok"})) as node_a, JsonStub(lambda r: (200, {})) as node_b:
        res = play(tmp_path, node_a.port, node_b.port)
        seen_b = sorted(r.path for r in node_b.seen)
    assert res.rc == 0, res.stdout[-3000:]
    assert seen_b == ["/health", "/healthz"], seen_b  # other-node-b's replica was not asked


def test_a_replica_that_answers_503_is_named_with_its_address(tmp_path):
    # The worker answers, the replica behind it does not serve yet (vLLM answers /health 503 while it loads).
    def node_b_answers(request):
        return (200, {}) if request.path == "/healthz" else (503, {"detail": "loading"})

    with JsonStub(lambda r: (200, {})) as node_a, JsonStub(node_b_answers) as node_b:
        res = play(tmp_path, node_a.port, node_b.port)
    assert res.rc != 0, res.stdout[-3000:]
    lines = res.result["msg"].splitlines()
    assert lines[0].startswith("[node-b] instance qwen-node-b-y does not answer at http://127.0.0.1:%d/health ("
                               % node_b.port), lines


def test_the_wait_names_the_node_of_each_instance_that_does_not_run_first(tmp_path):
    # GPUStack marked node-b's worker unreachable (its syncer asks every 15 s) and its instance with it: the wait
    # for the replicas ends at its timeout naming node-b first, not with the generic sentence.
    instances = [
        {"id": 12, "name": "qwen-node-b-y", "model_name": "qwen-node-b", "state": "unreachable",
         "state_message": "Worker is unreachable from the server", "worker_name": "node-b"},
        {"id": 11, "name": "qwen-node-a-x", "model_name": "qwen-node-a", "state": "running", "worker_name": "node-a"}]
    with JsonStub(lambda r: (200, gpustack_page(instances))) as api:
        res = run_local_play(tmp_path, "wait", [{"name": "Wait", "ansible.builtin.include_role": {
            "name": "pairserve.llm.verify", "tasks_from": "wait"}}], {
            "pairserve_verify_gpustack_api_url": api.url, "pairserve_verify_gpustack_api_key": "sk-test",
            "pairserve_verify_validate_certs": False, "pairserve_verify_wait_timeout": 1,
            "pairserve_verify_poll_interval": 1,
            "pairserve_verify_routes": [{"name": "qwen", "models": ["qwen-node-a", "qwen-node-b"]}]})
    assert res.rc != 0, res.stdout[-3000:]
    msg = " ".join(res.result["msg"].split())
    assert msg.startswith("[node-b] instance qwen-node-b-y (qwen-node-b) is unreachable: Worker is unreachable from "
                          "the server. Not every replica is running after 1 s."), msg
    assert "Instance qwen-node-a-x (qwen-node-a) on node-a is running." in msg, msg
    assert "[node-a]" not in msg, msg


def test_a_negative_reach_grace_is_refused_before_any_request(tmp_path):
    res = run_local_play(tmp_path, "preflight", [{"name": "Preflight", "ansible.builtin.include_role": {
        "name": "pairserve.llm.verify", "tasks_from": "preflight"}}], {
        "pairserve_verify_api_url": "http://127.0.0.1:9", "pairserve_verify_reach_grace": -5,
        "pairserve_verify_routes": [{"name": "qwen", "models": ["qwen-node-a"], "max_model_len": 4096}]})
    assert res.rc != 0, res.stdout[-3000:]
    msg = res.result["msg"]
    assert msg == ("localhost: pairserve_verify_reach_grace: -5 is not a whole number of seconds, 0 or more (0 asks "
                   "each replica once)"), msg
