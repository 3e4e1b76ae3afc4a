"""The GPU identity check of role gpustack_worker (tasks identity.yml) against a real GPUStack 2.2.3 worker record.

A GPUStack server and worker of this module's own, whose worker DETECTS its GPUs (gpustack-runtime over the NVML
replay of node-a's recording, as the lab's workers do; the tier's shared worker declares static GPUs, which GPUStack
records without UUIDs). gpu_pairs' fact comes from its own code (nvml.gather) over the same recording: read as it
is, each index names the same card on both sides and the check passes; read from a copy of the recording whose two
cards are swapped (the worker's record then holds each UUID at the other index), it fails, naming both UUIDs and
both indexes. Check mode, as after a card swap before anything changes: the role asks the server for the record.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import nvml, nvml_replay
from support.ansible_runner import REPO, run_playbook
from support.gpustack_server import ADMIN_PASSWORD, GpuStackServer

RECORDING = REPO / "tests" / "fixtures" / "nvml" / "node-a-2x5080.json"
RECORDED_UUIDS = [dev["UUID"] for dev in json.loads(RECORDING.read_text())["devices"]]


@pytest.fixture(scope="module")
def detecting_gpustack():
    root = Path(tempfile.mkdtemp(prefix="pairserve-gpustack-detect-"))
    server = GpuStackServer(root=root, nvml_recording=RECORDING)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def fact_of(recording):
    return nvml.gather({nvml_replay.ENV_VAR: str(recording)}, expected_pairs=1)


def identity_check(tmp_path, detecting_gpustack, fact):
    book = tmp_path / "identity.yml"
    book.write_text("""---
- name: The worker's GPU identity check, as the worker role runs it
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Compare the worker's record with gpu_pairs
      ansible.builtin.include_role:
        name: pairserve.llm.gpustack_worker
        tasks_from: identity
""")
    port = int(detecting_gpustack.api_url.rsplit(":", 1)[1])
    extra = {"pairserve_gpu": fact, "pairserve_gpustack_server_host": "localhost", "pairserve_gpustack_api_port": port,
             "pairserve_gpustack_admin_password": ADMIN_PASSWORD,
             "pairserve_gpustack_worker_name": detecting_gpustack.worker_name}
    return run_playbook(book, extra_vars=extra, check=True, timeout=300)


def test_the_worker_record_and_gpu_pairs_agree_on_every_index(tmp_path, detecting_gpustack):
    workers = [w for w in detecting_gpustack.items("/v2/workers") if w["name"] == detecting_gpustack.worker_name]
    assert [(d["index"], d["uuid"]) for d in workers[0]["status"]["gpu_devices"]] == list(enumerate(RECORDED_UUIDS)), workers
    res = identity_check(tmp_path, detecting_gpustack, fact_of(RECORDING))
    assert res.rc == 0, res.stdout[-3000:]
    checked = [r for r in res.results if r["_task"] == "Check that the worker's GPU indexes name the cards gpu_pairs paired"]
    assert checked and checked[-1]["_status"] == "ok", checked
    assert "every GPU of the 1 pair(s) is at the index gpu_pairs computed" in checked[-1]["msg"]


def test_swapped_uuids_fail_naming_both_cards_and_indexes(tmp_path, detecting_gpustack):
    recording = json.loads(RECORDING.read_text())
    first, second = recording["devices"][0]["UUID"], recording["devices"][1]["UUID"]
    recording["devices"][0]["UUID"], recording["devices"][1]["UUID"] = second, first
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(recording))
    res = identity_check(tmp_path, detecting_gpustack, fact_of(swapped))
    assert res.rc != 0
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert len(failed) == 1 and failed[0]["_task"] == "Check that the worker's GPU indexes name the cards gpu_pairs paired"
    msg = failed[0]["msg"]
    assert "disagree on which GPU an index means (2 problem(s))" in msg, msg
    for uuid in (first, second):
        assert uuid in msg, msg
    assert "index 0" in msg and "index 1" in msg, msg
