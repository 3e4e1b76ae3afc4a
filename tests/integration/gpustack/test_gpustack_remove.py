"""gpustack_remove and gpustack_info's worker_uuid against a real GPUStack 2.2.3: what the rebuild uses to find the
worker record an install owns, to remove stale worker records and to restart a replica's instances."""

from __future__ import annotations

import pytest

from gpustack_helpers import wait_for
from support.ansible_runner import run_module
from support.gpustack_models import config_only_checkpoint, model_args

pytestmark = pytest.mark.slow


def instances(server, model_name):
    return [i for i in server.items("/v2/model-instances") if i["model_name"] == model_name]


def test_info_finds_the_worker_record_by_its_uuid(gpustack_server):
    own = run_module("gpustack_info", {**gpustack_server.key_args, "gather": ["workers", "gpus"],
                                       "worker_uuid": gpustack_server.worker_uuid})
    assert not own.failed, own.result
    assert [w["name"] for w in own["workers"]] == [gpustack_server.worker_name]
    assert len(own["gpus"]) == gpustack_server.gpu_count  # the filter is the workers' only
    other = run_module("gpustack_info", {**gpustack_server.key_args, "gather": ["workers"],
                                         "worker_uuid": "00000000-0000-4000-8000-ffffffffffff"})
    assert other["workers"] == []


def test_removing_a_model_instance_restarts_it(gpustack_server, tmp_path):
    args = model_args(gpustack_server, config_only_checkpoint(tmp_path), "rm-inst", [0, 1])
    assert run_module("gpustack_model", args).changed
    try:
        old = [i["id"] for i in wait_for(lambda: instances(gpustack_server, "rm-inst"), what="the first instance")]
        remove = {**gpustack_server.key_args, "kind": "model_instance", "ids": old}

        check = run_module("gpustack_remove", remove, check=True, diff=True)
        assert check.changed and [r["id"] for r in check["removed"]] == old and check["absent"] == []
        assert check["diff"]["before"]["model_instance"] == [i["name"] for i in instances(gpustack_server, "rm-inst")]
        assert [i["id"] for i in instances(gpustack_server, "rm-inst")] == old  # check mode removed nothing

        done = run_module("gpustack_remove", remove)
        assert done.changed and [r["id"] for r in done["removed"]] == old
        fresh = wait_for(lambda: [i for i in instances(gpustack_server, "rm-inst") if i["id"] not in old],
                         what="GPUStack to create the instance again")
        assert len(fresh) == 1 and not [i for i in instances(gpustack_server, "rm-inst") if i["id"] in old]

        again = run_module("gpustack_remove", remove)
        assert not again.changed and again["removed"] == [] and again["absent"] == old
        assert [i["id"] for i in instances(gpustack_server, "rm-inst")] == [fresh[0]["id"]]
        # The key is an option the module keeps out of its reported arguments.
        assert gpustack_server.key_args["api_key"] not in str(again.result)
    finally:
        run_module("gpustack_model", {**gpustack_server.key_args, "name": "rm-inst", "state": "absent"})


def test_ids_gpustack_does_not_have_change_nothing(gpustack_server):
    workers = [w["id"] for w in gpustack_server.items("/v2/workers")]
    missing = max(workers) + 1000
    res = run_module("gpustack_remove", {**gpustack_server.key_args, "kind": "worker", "ids": [missing]}, diff=True)
    assert not res.failed and not res.changed and res["absent"] == [missing] and res["removed"] == []
    assert [w["id"] for w in gpustack_server.items("/v2/workers")] == workers
    assert not run_module("gpustack_remove", {**gpustack_server.key_args, "kind": "worker", "ids": []}).changed


def test_a_rejected_key_fails_with_the_server_status(gpustack_server):
    res = run_module("gpustack_remove", {"api_url": gpustack_server.api_url, "api_key": "wrong", "retries": 0,
                                         "kind": "model_instance", "ids": [1]})
    assert res.failed and res.result["status"] == 401, res.result
    assert "cannot remove GPUStack model instance records [1]" in res.result["msg"]
