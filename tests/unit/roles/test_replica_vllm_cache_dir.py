"""The replica role makes the directory its replicas keep vLLM's compile cache in - the VLLM_CACHE_ROOT that
gpustack_model sends, beside the checkpoint in the directory GPUStack mounts - before it registers anything:
0755, idempotent, nothing made in check mode, and nothing when pairserve_replica_env points VLLM_CACHE_ROOT outside
that directory (nothing on the node backs it then).

ansible-playbook over two local hosts against a GPUStack stand-in that refuses every call (401): the role stops at
its first API call, the backend version's registration, after the directory.
"""

from __future__ import annotations

import json
import stat
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lab import pins
from support.ansible_runner import run_playbook

PAIR = {"index": 0, "uuids": ["GPU-a", "GPU-b"], "gpustack_gpu_indexes": [0, 1], "memory_total_mib": 16303,
        "compute_capability": "12.0"}
CHECKPOINT = {"architecture": "Qwen3_5ForConditionalGeneration", "hybrid": True, "vision": True, "mtp": True,
              "native_context": 262144, "quantization": "nvfp4"}
TASK = "Create the directory the replicas keep vLLM's compile cache in"
FIRST_API_CALL = "Register the runner image as a version of GPUStack's vLLM backend"

PLAY = """
- name: Register the replicas
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Run the replica role
      ansible.builtin.include_role:
        name: pairserve.llm.replica
"""


@pytest.fixture()
def refusing_gpustack():
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def _refuse(self):
            calls.append((self.command, self.path))
            body = json.dumps({"code": 401, "reason": "Unauthorized", "message": "refused"}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _refuse

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd.server_address[1], calls
    httpd.shutdown()
    httpd.server_close()


def _by_host(res):
    out = {}
    for record in res.results:
        out.setdefault(record["_host"], {})[record["_task"].split(" : ", 1)[-1]] = record
    return out


def test_the_cache_directory_is_made_before_the_replicas_are_registered(tmp_path, refusing_gpustack):
    port, calls = refusing_gpustack
    export = tmp_path / "export"
    (export / "ckpt-a").mkdir(parents=True)
    (export / "ckpt-b").mkdir()
    inventory = {"all": {
        "children": {
            "gpustack_server": {"hosts": {"gs": {"pairserve_gpustack_management_key": "unit-test-key-7f3a",
                                                 "pairserve_gpustack_api_port": port}}},
            "gpu_nodes": {"hosts": {
                "node-a": {"pairserve_replica_model_path": str(export / "ckpt-a")},
                # A user's cache root outside the mounted directory: the module sends it (and warns); the node has
                # nothing to make for it.
                "node-b": {"pairserve_replica_model_path": str(export / "ckpt-b"),
                           "pairserve_replica_env": {"VLLM_CACHE_ROOT": str(tmp_path / "elsewhere")}},
            }},
        },
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "pairserve_vllm_version": pins.VLLM, "pairserve_gpu": {"pairs": [PAIR]},
                 "pairserve_checkpoint": CHECKPOINT, "pairserve_runner_image_ref": "localhost/runner@sha256:" + "0" * 64},
    }}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    cache = export / ".vllm-cache"

    def run(check=False):
        res = run_playbook(tmp_path / "play.yml", inventory=tmp_path / "hosts.yml", check=check, timeout=300)
        by_host = _by_host(res)
        for host in ("node-a", "node-b"):
            # The role went on to its first API call, which the stand-in refused.
            assert by_host[host][FIRST_API_CALL]["_status"] == "failed", res.stdout[-3000:]
        return by_host

    checked = run(check=True)
    assert checked["node-a"][TASK]["_status"] == "ok" and checked["node-a"][TASK]["changed"] is True
    assert not cache.exists()
    assert checked["node-b"][TASK]["_status"] == "skipped"

    made = run()
    assert made["node-a"][TASK]["changed"] is True and made["node-a"][TASK]["path"] == str(cache)
    assert cache.is_dir() and stat.S_IMODE(cache.stat().st_mode) == 0o755
    assert made["node-b"][TASK]["_status"] == "skipped"
    assert not (tmp_path / "elsewhere").exists()
    # Only beside the checkpoints, never inside one (the export is kept identical to the snapshot).
    assert sorted(p.name for p in export.iterdir()) == [".vllm-cache", "ckpt-a", "ckpt-b"]
    assert [p for c in ("ckpt-a", "ckpt-b") for p in (export / c).iterdir()] == []

    again = run()
    assert again["node-a"][TASK]["_status"] == "ok" and again["node-a"][TASK]["changed"] is False
    assert calls, "the role never reached GPUStack"
