"""gpustack_model and gpustack_route against a real GPUStack 2.2.3: upserts, rollouts, weights, split/pooled."""

from __future__ import annotations

import os

import pytest

from gpustack_helpers import four_steps, wait_for
from lab import pins
from support.ansible_runner import run_module
from support.gpustack_models import config_only_checkpoint, model_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return config_only_checkpoint(tmp_path_factory.mktemp("checkpoint"))


def instances(server, model_name):
    return [i for i in server.items("/v2/model-instances") if i["model_name"] == model_name]


def route_targets(server, route_name):
    route = [r for r in server.items("/v2/model-routes") if r["name"] == route_name]
    if not route:
        return None
    return {t["model_id"]: t for t in server.items(f"/v2/model-route-targets?route_id={route[0]['id']}")
            if t["route_id"] == route[0]["id"]}


def model_id(server, name):
    return [m["id"] for m in server.items("/v2/models") if m["name"] == name][0]


def test_model_four_steps_sends_the_pairserve_settings(gpustack_server, checkpoint):
    args = model_args(gpustack_server, checkpoint, "rep-four", [0, 1], env={"VLLM_LOGGING_LEVEL": "INFO"})
    check, apply, _idem, again = four_steps("gpustack_model", args)
    after = check["diff"]["after"]
    assert after["distributed_inference_across_workers"] is False
    assert after["gpu_selector"] == {"gpu_ids": [f"{gpustack_server.worker_name}:cuda:0",
                                                 f"{gpustack_server.worker_name}:cuda:1"], "gpus_per_replica": 2}
    stored = [m for m in gpustack_server.items("/v2/models") if m["name"] == "rep-four"][0]
    # vLLM's compile cache in the directory GPUStack mounts into the container (the checkpoint's parent).
    assert stored["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTORCH_ALLOC_CONF": "expandable_segments:True",
                             "VLLM_CACHE_ROOT": os.path.join(os.path.dirname(checkpoint), ".vllm-cache"),
                             "VLLM_LOGGING_LEVEL": "INFO"}
    assert stored["distributed_inference_across_workers"] is False and stored["restart_on_error"] is True
    assert stored["source"] == "local_path" and stored["backend"] == "vLLM" and stored["backend_version"] == pins.VLLM
    assert stored["cluster_id"] == gpustack_server.cluster_id and stored["replicas"] == 1
    assert again["changed_fields"] == [] and again["rolled_out"] == []

    gone = run_module("gpustack_model", {**gpustack_server.key_args, "name": "rep-four", "state": "absent"},
                      check=True, diff=True)
    assert gone.changed and gone["diff"]["before"]["name"] == "rep-four"
    assert run_module("gpustack_model", {**gpustack_server.key_args, "name": "rep-four", "state": "absent"}).changed
    assert not [m for m in gpustack_server.items("/v2/models") if m["name"] == "rep-four"]
    assert not instances(gpustack_server, "rep-four")
    assert not run_module("gpustack_model", {**gpustack_server.key_args, "name": "rep-four", "state": "absent"}).changed


def test_spec_change_is_a_per_field_diff_and_rolls_the_instance(gpustack_server, checkpoint):
    args = model_args(gpustack_server, checkpoint, "rep-roll", [0, 1])
    assert run_module("gpustack_model", args).changed
    first = wait_for(lambda: instances(gpustack_server, "rep-roll"), what="the first instance")
    old_ids = {i["id"] for i in first}

    new_args = dict(args, backend_parameters=["--max-model-len", "8192", "--gpu-memory-utilization", "0.92"])
    check = run_module("gpustack_model", new_args, check=True, diff=True)
    assert check.changed and check["changed_fields"] == ["backend_parameters"]
    assert check["diff"]["before"] == {"backend_parameters": args["backend_parameters"]}
    assert check["diff"]["after"] == {"backend_parameters": new_args["backend_parameters"]}
    assert check["rolled_out"] == [i["name"] for i in first]
    assert {i["id"] for i in instances(gpustack_server, "rep-roll")} == old_ids  # check mode touched nothing

    apply = run_module("gpustack_model", new_args, diff=True)
    assert apply.changed and apply["rolled_out"] == [i["name"] for i in first]
    fresh = wait_for(lambda: [i for i in instances(gpustack_server, "rep-roll") if i["id"] not in old_ids],
                     what="GPUStack to recreate the deleted instance")
    assert len(fresh) == 1 and not [i for i in instances(gpustack_server, "rep-roll") if i["id"] in old_ids]
    stored = [m for m in gpustack_server.items("/v2/models") if m["name"] == "rep-roll"][0]
    assert stored["backend_parameters"] == new_args["backend_parameters"]
    # The PUT kept the setting GPUStack would otherwise reset.
    assert stored["distributed_inference_across_workers"] is False

    again = run_module("gpustack_model", new_args)
    assert not again.changed and again["rolled_out"] == []
    assert {i["id"] for i in instances(gpustack_server, "rep-roll")} == {i["id"] for i in fresh}

    no_roll = run_module("gpustack_model", dict(args, rollout=False))
    assert no_roll.changed and no_roll["rolled_out"] == []
    assert {i["id"] for i in instances(gpustack_server, "rep-roll")} == {i["id"] for i in fresh}

    # A replica count change is a scale GPUStack does itself: nothing is rolled, the running instance stays.
    scale = run_module("gpustack_model", dict(args, rollout=True, replicas=2, gpus_per_replica=2), diff=True)
    assert scale.changed and scale["changed_fields"] == ["replicas"] and scale["rolled_out"] == []
    now = wait_for(lambda: len(instances(gpustack_server, "rep-roll")) == 2 and instances(gpustack_server, "rep-roll"),
                   what="GPUStack to add the second replica")
    assert {i["id"] for i in fresh} <= {i["id"] for i in now}
    run_module("gpustack_model", {**gpustack_server.key_args, "name": "rep-roll", "state": "absent"})


def test_restart_rolls_out_the_instances_of_an_unchanged_model(gpustack_server, checkpoint):
    """restart: the files under local_path changed (a patched tokenizer), the spec did not; GPUStack cannot see it,
    so the module rolls the instances out itself. Nothing to restart for a model created now."""
    args = model_args(gpustack_server, checkpoint, "rep-restart", [0, 1])
    created = run_module("gpustack_model", dict(args, restart=True))
    assert created.changed and not created["restarted"] and created["rolled_out"] == []
    first = wait_for(lambda: instances(gpustack_server, "rep-restart"), what="the first instance")
    old_ids = {i["id"] for i in first}

    check = run_module("gpustack_model", dict(args, restart=True), check=True, diff=True)
    assert check.changed and check["restarted"] and check["changed_fields"] == []
    assert check["rolled_out"] == [i["name"] for i in first] and "restarted" in check["diff"]["after"]
    assert {i["id"] for i in instances(gpustack_server, "rep-restart")} == old_ids  # check mode touched nothing

    done = run_module("gpustack_model", dict(args, restart=True))
    assert done.changed and done["restarted"] and done["rolled_out"] == [i["name"] for i in first]
    wait_for(lambda: [i for i in instances(gpustack_server, "rep-restart") if i["id"] not in old_ids],
             what="GPUStack to recreate the restarted instance")
    assert not [i for i in instances(gpustack_server, "rep-restart") if i["id"] in old_ids]

    plain = run_module("gpustack_model", args)
    assert not plain.changed and not plain["restarted"] and plain["rolled_out"] == []
    run_module("gpustack_model", {**gpustack_server.key_args, "name": "rep-restart", "state": "absent"})


def test_switch_between_custom_and_vllm_backends(gpustack_server, checkpoint):
    base = model_args(gpustack_server, checkpoint, "rep-custom", [0])
    custom = dict(base, backend="Custom", image_name="localhost/pairserve/vllm-cpu:test",
                  run_command="vllm serve {{ '{{model_path}}' }} --port {{ '{{port}}' }}")
    four_steps("gpustack_model", custom)
    stored = [m for m in gpustack_server.items("/v2/models") if m["name"] == "rep-custom"][0]
    assert stored["backend"] == "Custom" and stored["run_command"] == "vllm serve {{model_path}} --port {{port}}"
    back = run_module("gpustack_model", base, diff=True)
    assert back.changed and {"backend", "image_name", "run_command"} <= set(back["changed_fields"])
    stored = [m for m in gpustack_server.items("/v2/models") if m["name"] == "rep-custom"][0]
    assert stored["backend"] == "vLLM" and stored["image_name"] is None and stored["run_command"] is None
    assert not run_module("gpustack_model", base).changed
    run_module("gpustack_model", {**gpustack_server.key_args, "name": "rep-custom", "state": "absent"})


def test_pinning_to_a_missing_worker_or_gpu_fails_before_any_change(gpustack_server, checkpoint):
    ghost = model_args(gpustack_server, checkpoint, "rep-ghost", [0], gpu_ids=["node-ghost:cuda:0", "node-ghost:cuda:1"])
    for check in (True, False):
        res = run_module("gpustack_model", ghost, check=check)
        assert res.failed
        assert "pins worker 'node-ghost', which is not registered in cluster pytest" in res["msg"]
        assert gpustack_server.worker_name in res["msg"]  # names what does exist
    no_gpu = model_args(gpustack_server, checkpoint, "rep-ghost", [0, 7])
    res = run_module("gpustack_model", no_gpu)
    assert res.failed and "has no GPU with index 7 (it reports [0, 1])" in res["msg"]
    assert not [m for m in gpustack_server.items("/v2/models") if m["name"] == "rep-ghost"]


def test_server_reason_is_quoted_when_gpustack_refuses(gpustack_server, checkpoint):
    # A cluster id that does not exist is left to GPUStack to refuse; its own message must reach the user.
    res = run_module("gpustack_model", model_args(gpustack_server, checkpoint, "rep-nocluster", [0], cluster="9999",
                                                  gpu_ids=None))
    assert res.failed and res["status"] == 404
    assert "Cluster 9999 not found" in res["msg"]


def test_route_four_steps_ids_kept_and_weight_change_is_one_put(gpustack_server, checkpoint, counting_proxy):
    for name, gpu in (("pool-a", 0), ("pool-b", 1)):
        assert run_module("gpustack_model", model_args(gpustack_server, checkpoint, name, [gpu])).changed
    args = {**gpustack_server.key_args, "name": "qwen-pool",
            "targets": [{"model": "pool-a", "weight": 58}, {"model": "pool-b", "weight": 42}]}
    check = four_steps("gpustack_route", args)[0]
    assert check["diff"]["after"]["targets"] == [
        {"model": "pool-a", "weight": 58, "fallback_status_codes": None},
        {"model": "pool-b", "weight": 42, "fallback_status_codes": None}]
    ids = route_targets(gpustack_server, "qwen-pool")
    a, b = model_id(gpustack_server, "pool-a"), model_id(gpustack_server, "pool-b")
    assert {ids[a]["weight"], ids[b]["weight"]} == {58, 42}

    # Drain pool-b for its upgrade: one PUT, through a proxy that counts what reached GPUStack.
    drain = dict(args, api_url=counting_proxy.url,
                 targets=[{"model": "pool-a", "weight": 100}, {"model": "pool-b", "weight": 0}])
    res = run_module("gpustack_route", drain, diff=True)
    assert res.changed, res.result
    assert res["diff"]["before"]["targets"][1]["weight"] == 42 and res["diff"]["after"]["targets"][1]["weight"] == 0
    assert counting_proxy.writes() == [("PUT", f"/v2/model-routes/{ids[a]['route_id']}")]
    after = route_targets(gpustack_server, "qwen-pool")
    assert {k: v["id"] for k, v in after.items()} == {k: v["id"] for k, v in ids.items()}  # target ids kept
    assert after[a]["weight"] == 100 and after[b]["weight"] == 0
    assert not run_module("gpustack_route", drain).changed
    assert len(counting_proxy.writes()) == 1

    fallback = dict(args, fallback={"model": "pool-b", "status_codes": ["5xx"]})
    res = run_module("gpustack_route", fallback, diff=True)
    assert res.changed
    after = route_targets(gpustack_server, "qwen-pool")
    assert after[b]["fallback_status_codes"] == ["5xx"] and after[b]["id"] == ids[b]["id"]
    assert not run_module("gpustack_route", fallback).changed

    # Nothing left for the next test file: other suites on this server (test_day2) hold that no route target
    # carries fallback codes outside a drain.
    assert run_module("gpustack_route", {**gpustack_server.key_args, "name": "qwen-pool", "state": "absent"}).changed
    for name in ("pool-a", "pool-b"):
        assert run_module("gpustack_model", {**gpustack_server.key_args, "name": name, "state": "absent"}).changed
    assert route_targets(gpustack_server, "qwen-pool") is None


def test_route_input_errors_name_the_input(gpustack_server):
    base = {**gpustack_server.key_args, "name": "qwen-bad"}
    all_zero = run_module("gpustack_route", dict(base, targets=[{"model": "pool-a", "weight": 0}]))
    assert all_zero.failed and "every weight is 0" in all_zero["msg"]
    negative = run_module("gpustack_route", dict(base, targets=[{"model": "pool-a", "weight": -5}]))
    assert negative.failed and "weight of 'pool-a' is -5" in negative["msg"]
    missing = run_module("gpustack_route", dict(base, targets=[{"model": "no-such-model", "weight": 1}]))
    assert missing.failed and "no-such-model" in missing["msg"] and "do not exist" in missing["msg"]
    assert route_targets(gpustack_server, "qwen-bad") is None


def test_split_and_pooled_switch_and_absent_cleanup(gpustack_server, checkpoint):
    for name, gpu in (("sw-a", 0), ("sw-b", 1)):
        run_module("gpustack_model", model_args(gpustack_server, checkpoint, name, [gpu]))
    key = gpustack_server.key_args
    pooled = {**key, "name": "sw-qwen", "targets": [{"model": "sw-a", "weight": 58}, {"model": "sw-b", "weight": 42}]}
    split = [{**key, "name": "sw-multimodal", "targets": [{"model": "sw-a"}]},
             {**key, "name": "sw-text", "targets": [{"model": "sw-b"}]}]

    assert run_module("gpustack_route", pooled).changed
    # pooled -> split: the profile routes appear, the pooled one goes.
    for route in split:
        assert run_module("gpustack_route", route).changed
    assert run_module("gpustack_route", {**key, "name": "sw-qwen", "state": "absent"}).changed
    names = {r["name"] for r in gpustack_server.items("/v2/model-routes")}
    assert {"sw-multimodal", "sw-text"} <= names and "sw-qwen" not in names
    assert set(route_targets(gpustack_server, "sw-text")) == {model_id(gpustack_server, "sw-b")}

    # split -> pooled, and everything is idempotent afterwards.
    assert run_module("gpustack_route", pooled).changed
    for route in split:
        assert run_module("gpustack_route", dict(route, state="absent")).changed
        assert not run_module("gpustack_route", dict(route, state="absent")).changed
    assert not run_module("gpustack_route", pooled).changed
    assert len(route_targets(gpustack_server, "sw-qwen")) == 2

    # Removing a model removes it from routes too (GPUStack cascades the target).
    assert run_module("gpustack_route", {**key, "name": "sw-qwen", "state": "absent"}).changed
    assert route_targets(gpustack_server, "sw-qwen") is None
    for name in ("sw-a", "sw-b"):
        assert run_module("gpustack_model", {**key, "name": name, "state": "absent"}).changed
    assert not [m for m in gpustack_server.items("/v2/models") if m["name"].startswith("sw-")]
