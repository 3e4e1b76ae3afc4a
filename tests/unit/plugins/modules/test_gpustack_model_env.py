"""gpustack_model refuses a user env that changes the seed's environment, naming the variable, the seed's value
and why, before any request reaches GPUStack; an env that adds variables or repeats the seed's value goes on.

The module runs through real Ansible (run_module) against a local HTTP server that records every request.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lab import pins
from lab.ansible_runner import run_module

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import SEED_ENV, seed_env_conflicts


@pytest.fixture()
def recorder():
    """A server that records each request and answers 500 (nothing past the first request matters here)."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            seen.append((self.command, self.path))
            body = json.dumps({"message": "recorder"}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1], seen
    httpd.shutdown()
    httpd.server_close()


def _args(url, env):
    # A key that appears in no message: Ansible masks every occurrence of a no_log value in the output.
    return {"api_url": url, "api_key": "unit-test-key-7f3a", "retries": 0, "name": "qwen-node-a", "local_path": "/srv/ckpt",
            "backend_version": pins.VLLM, "env": env}


@pytest.mark.parametrize("check", [False, True])
def test_changing_the_seed_device_order_is_refused_before_any_request(recorder, check):
    url, seen = recorder
    res = run_module("gpustack_model", _args(url, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST", "EXTRA": "1"}), check=check)
    assert res.failed and not res.changed, res.result
    msg = res["msg"]
    assert "model qwen-node-a" in msg and "CUDA_DEVICE_ORDER=FASTEST_FIRST would replace the seed's " \
        "CUDA_DEVICE_ORDER=PCI_BUS_ID" in msg, msg
    assert "keeps the replica on the cards it is pinned to" in msg and "pairserve_replica_env" in msg
    assert "PYTORCH_ALLOC_CONF" not in msg
    assert seen == []


def test_an_env_that_adds_or_repeats_the_seed_reaches_gpustack(recorder):
    url, seen = recorder
    res = run_module("gpustack_model", _args(url, dict(SEED_ENV, GPUSTACK_SKIP_GPU_COUNT_CHECK="1")))
    # Past the env check: the module asked GPUStack, and failed on the recorder's 500.
    assert res.failed and "would replace the seed" not in res["msg"], res.result
    assert seen and seen[0][0] == "GET", seen


def test_conflicts_name_each_changed_seed_variable_only():
    assert seed_env_conflicts({}) == [] and seed_env_conflicts(dict(SEED_ENV, OTHER="x")) == []
    both = seed_env_conflicts({"PYTORCH_ALLOC_CONF": "garbage", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert [c.split("=", 1)[0] for c in both] == ["CUDA_DEVICE_ORDER", "PYTORCH_ALLOC_CONF"]
    assert "fragmentation" in both[1]
