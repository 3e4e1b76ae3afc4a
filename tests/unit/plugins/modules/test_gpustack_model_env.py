"""gpustack_model refuses a user env that changes the seed's environment, naming the variable, the seed's value
and why, before any request reaches GPUStack; an env that adds variables or repeats the seed's value goes on.

Every model's env also carries VLLM_CACHE_ROOT=<parent of local_path>/.vllm-cache, in the one directory GPUStack
mounts into the replica's container (its own default, the worker data dir, is not mounted when the worker runs on
the host). A VLLM_CACHE_ROOT in the user's env wins; the module warns when it lies outside the mounted directory.

The module runs through real Ansible (run_module) against a local HTTP server that records every request.
"""

from __future__ import annotations

import posixpath

import pytest

from lab import pins
from support.ansible_runner import run_module
from support.local_http import JsonStub, gpustack_page

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    SEED_ENV,
    replica_cache_dir,
    replica_env,
    replica_mount_dir,
    seed_env_conflicts,
    vllm_cache_root,
    vllm_cache_root_outside_mount,
)

CKPT = "/var/lib/pairserve/hf-cache/models--org--name/pairserve/export/0123456789abcdef0123456789abcdef01234567"
MOUNT = "/var/lib/pairserve/hf-cache/models--org--name/pairserve/export"


@pytest.fixture()
def recorder():
    """A GPUStack that answers every request with HTTP 500: (url, the requests that reached it)."""
    with JsonStub(lambda request: (500, {"message": "recorder"})) as stub:
        yield stub.url, stub.seen


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
    assert seen and seen[0].method == "GET", seen


def test_conflicts_name_each_changed_seed_variable_only():
    assert seed_env_conflicts({}) == [] and seed_env_conflicts(dict(SEED_ENV, OTHER="x")) == []
    both = seed_env_conflicts({"PYTORCH_ALLOC_CONF": "garbage", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert [c.split("=", 1)[0] for c in both] == ["CUDA_DEVICE_ORDER", "PYTORCH_ALLOC_CONF"]
    assert "fragmentation" in both[1]


@pytest.fixture()
def fake_gpustack():
    """GPUStack's model endpoints, enough for gpustack_model without a cluster or GPUs: ``models`` is what GET lists;
    every POST and PUT body is recorded and stored back."""
    state = {"models": [], "bodies": []}

    def answer(request):
        if request.method == "GET":
            return 200, gpustack_page(state["models"] if request.path == "/v2/models" else [])
        body = request.json()
        state["bodies"].append((request.method, request.target, body))
        state["models"] = [dict(body, id=7)]
        return 200, state["models"][0]

    with JsonStub(answer) as stub:
        yield stub.url, state


def _present(url, env, local_path=CKPT):
    return dict(_args(url, env), local_path=local_path)


def test_the_env_sent_carries_the_compile_cache_in_the_mounted_directory(fake_gpustack):
    url, state = fake_gpustack
    res = run_module("gpustack_model", _present(url, {"VLLM_LOGGING_LEVEL": "INFO"}))
    assert res.changed and not res.failed, res.result
    [(method, path, body)] = state["bodies"]
    assert (method, path) == ("POST", "/v2/models")
    assert body["local_path"] == CKPT
    assert body["env"] == dict(SEED_ENV, VLLM_CACHE_ROOT=MOUNT + "/.vllm-cache", VLLM_LOGGING_LEVEL="INFO")
    # GPUStack mounts dirname(local_path): the cache is under it, beside the checkpoint, not in it.
    assert posixpath.dirname(body["env"]["VLLM_CACHE_ROOT"]) == posixpath.dirname(body["local_path"])
    assert not res.get("warnings"), res.result
    # Converged: the same arguments change nothing.
    again = run_module("gpustack_model", _present(url, {"VLLM_LOGGING_LEVEL": "INFO"}))
    assert not again.changed and again["changed_fields"] == [], again.result
    assert len(state["bodies"]) == 1


def test_check_mode_shows_the_compile_cache_and_sends_nothing(fake_gpustack):
    url, state = fake_gpustack
    res = run_module("gpustack_model", _present(url, {}, local_path=CKPT + "/"), check=True, diff=True)
    assert res.changed and not res.failed, res.result
    # The worker resolves the path as pathlib does: a trailing slash names the same checkpoint and parent.
    assert res["model"]["env"]["VLLM_CACHE_ROOT"] == MOUNT + "/.vllm-cache"
    assert res["diff"]["after"]["env"]["VLLM_CACHE_ROOT"] == MOUNT + "/.vllm-cache"
    assert state["bodies"] == []


def test_a_model_registered_without_it_gets_it_and_is_rolled(fake_gpustack):
    url, state = fake_gpustack
    # What an earlier release registered: the seed's env alone.
    state["models"] = [{"id": 7, "name": "qwen-node-a", "source": "local_path", "local_path": CKPT, "cluster_id": None,
                        "replicas": 1, "backend": "vLLM", "backend_version": pins.VLLM, "backend_parameters": [],
                        "env": dict(SEED_ENV), "restart_on_error": True,
                        "distributed_inference_across_workers": False, "description": None}]
    res = run_module("gpustack_model", _present(url, {}))
    assert res.changed and res["changed_fields"] == ["env"], res.result
    [(method, path, body)] = state["bodies"]
    assert (method, path) == ("PUT", "/v2/models/7")
    assert body["env"] == dict(SEED_ENV, VLLM_CACHE_ROOT=MOUNT + "/.vllm-cache")


def test_a_users_cache_root_inside_the_mount_wins_without_a_warning(fake_gpustack):
    url, state = fake_gpustack
    mine = MOUNT + "/compile-cache"
    res = run_module("gpustack_model", _present(url, {"VLLM_CACHE_ROOT": mine}))
    assert res.changed and not res.failed and not res.get("warnings"), res.result
    assert state["bodies"][0][2]["env"] == dict(SEED_ENV, VLLM_CACHE_ROOT=mine)


@pytest.mark.parametrize("value", ["/data/vllm-cache", "~/.cache/vllm", "vllm-cache"])
def test_a_users_cache_root_outside_the_mount_wins_with_a_warning(fake_gpustack, value):
    url, state = fake_gpustack
    res = run_module("gpustack_model", _present(url, {"VLLM_CACHE_ROOT": value}))
    assert res.changed and not res.failed, res.result
    assert state["bodies"][0][2]["env"] == dict(SEED_ENV, VLLM_CACHE_ROOT=value)
    [warning] = res["warnings"]
    assert warning.startswith("model qwen-node-a: env sets VLLM_CACHE_ROOT=%s, outside %s" % (value, MOUNT)), warning
    assert "lost at every restart" in warning and MOUNT + "/.vllm-cache" in warning
    assert "pairserve_replica_env" in warning


def test_the_seed_refusal_still_comes_first_with_a_cache_root_set(recorder):
    url, seen = recorder
    res = run_module("gpustack_model", _args(url, {"PYTORCH_ALLOC_CONF": "garbage", "VLLM_CACHE_ROOT": "/elsewhere"}))
    assert res.failed and "PYTORCH_ALLOC_CONF=garbage would replace the seed's" in res["msg"], res.result
    assert "VLLM_CACHE_ROOT" not in res["msg"] and seen == []


def test_the_mounted_directory_is_the_parent_as_gpustacks_worker_resolves_it():
    assert replica_mount_dir(CKPT) == MOUNT
    # str(Path(p).absolute()): a trailing slash and a "." segment do not count.
    assert replica_mount_dir(CKPT + "/") == replica_mount_dir(MOUNT + "/./" + CKPT.rsplit("/", 1)[1]) == MOUNT
    assert replica_mount_dir("/srv/ckpt") == "/srv" and replica_mount_dir("/ckpt") == "/"
    # A relative path is resolved against the worker's working directory: not known here.
    assert replica_mount_dir("ckpt") is None and replica_mount_dir(None) is None and replica_mount_dir("") is None
    assert vllm_cache_root(CKPT) == MOUNT + "/.vllm-cache" and vllm_cache_root("/ckpt") == "/.vllm-cache"
    assert vllm_cache_root("ckpt") is None


def test_replica_env_layers_seed_cache_root_and_the_users():
    assert replica_env(CKPT, {}) == dict(SEED_ENV, VLLM_CACHE_ROOT=MOUNT + "/.vllm-cache")
    assert replica_env(CKPT, None) == replica_env(CKPT, {})
    assert replica_env(CKPT, {"VLLM_CACHE_ROOT": "/x", "A": "1"}) == dict(SEED_ENV, VLLM_CACHE_ROOT="/x", A="1")
    # No mounted directory known: GPUStack's own default applies.
    assert replica_env("ckpt", {"A": "1"}) == dict(SEED_ENV, A="1")
    # The seed itself is not changed by it.
    assert "VLLM_CACHE_ROOT" not in SEED_ENV


@pytest.mark.parametrize("env,outside,cache_dir", [
    ({}, False, MOUNT + "/.vllm-cache"),
    (None, False, MOUNT + "/.vllm-cache"),
    ({"OTHER": "1"}, False, MOUNT + "/.vllm-cache"),
    ({"VLLM_CACHE_ROOT": MOUNT + "/mine"}, False, MOUNT + "/mine"),
    ({"VLLM_CACHE_ROOT": MOUNT + "/a/../mine/"}, False, MOUNT + "/mine"),
    ({"VLLM_CACHE_ROOT": MOUNT}, False, MOUNT),
    ({"VLLM_CACHE_ROOT": MOUNT + "-other/cache"}, True, None),
    ({"VLLM_CACHE_ROOT": MOUNT + "/../cache"}, True, None),
    ({"VLLM_CACHE_ROOT": "/data/cache"}, True, None),
    ({"VLLM_CACHE_ROOT": "cache"}, True, None),
    ({"VLLM_CACHE_ROOT": "~/cache"}, True, None),
])
def test_a_users_cache_root_is_backed_on_the_node_only_inside_the_mount(env, outside, cache_dir):
    assert bool(vllm_cache_root_outside_mount(CKPT, env)) is outside
    assert replica_cache_dir(CKPT, env) == cache_dir


def test_without_a_known_mount_nothing_is_backed_or_warned():
    assert replica_cache_dir("ckpt") is None and replica_cache_dir("ckpt", {"VLLM_CACHE_ROOT": "/x"}) is None
    assert vllm_cache_root_outside_mount("ckpt", {"VLLM_CACHE_ROOT": "/x"}) is None
