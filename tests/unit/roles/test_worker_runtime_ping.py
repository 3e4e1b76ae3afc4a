"""The gpustack_worker role's runtime step (tasks/runtime.yml) through Ansible: from the node, the engine's API must
answer its ping where the worker will call it (the unix socket, or a TCP endpoint), before the worker starts; a
silent endpoint fails naming the host, the deployer, the endpoint and what to do."""

from __future__ import annotations

import http.server
import socketserver
import threading

import pytest

from support.ansible_runner import run_local_play


class _Ping(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the stdlib's name)
        body = b"OK" if self.path == "/_ping" else b"no"
        self.send_response(200 if self.path == "/_ping" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request = super().get_request()[0]
        return request, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port) client address


@pytest.fixture()
def engine_socket(tmp_path):
    path = tmp_path / "engine.sock"
    server = _UnixHTTPServer(str(path), _Ping)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path
    server.shutdown()
    server.server_close()


def play(tmp_path, runtime, host):
    return run_local_play(tmp_path, "runtime step", [{"name": "The worker's runtime step", "ansible.builtin.include_role": {
        "name": "pairserve.llm.gpustack_worker", "tasks_from": "runtime"}}],
        {"pairserve_runner_runtime": runtime, "pairserve_runner_runtime_host": host})


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_an_engine_that_answers_on_its_socket_passes_and_changes_nothing(tmp_path, engine_socket, runtime):
    res = play(tmp_path, runtime, "unix://%s" % engine_socket)
    assert res.rc == 0, res.stdout[-3000:]
    pinged = [r for r in res.results if "API answers" in r["_task"]]
    assert pinged and pinged[0]["status"] == 200 and not pinged[0].get("changed"), pinged
    # another endpoint than the runtime's own socket: no unit is the collection's to start
    assert [r["_status"] for r in res.results if "runtime's own socket" in r["_task"]] == ["skipped"]


def test_a_silent_socket_fails_naming_the_host_the_deployer_and_the_endpoint(tmp_path):
    res = play(tmp_path, "docker", "unix://%s" % (tmp_path / "nothing.sock"))
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert res.rc != 0 and failed, res.stdout[-3000:]
    msg = " ".join(str(failed[-1]["msg"]).split())
    assert msg.startswith("localhost: GPUStack's worker deploys replicas through Docker at http+unix://"), msg
    assert "pairserve_runner_runtime_host" in msg and "Start the service that listens there" in msg, msg
