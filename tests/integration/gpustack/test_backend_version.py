"""A digest-pinned runner image survives every update of a vLLM-backend replica (real GPUStack 2.2.3).

GPUStack 2.2.3's model update sets ``image_name`` to null on every PUT of a model whose backend is not Custom.
The first test shows that on the real server; the others show the collection's way around it: the image is a
user-defined version of the vLLM backend (gpustack_backend_version), the model names that version.
"""

from __future__ import annotations

import threading

import pytest

from gpustack_helpers import four_steps
from lab import pins
from support.ansible_runner import run_module
from support.gpustack_models import config_only_checkpoint
from support.gpustack_models import model_args as registration

pytestmark = pytest.mark.slow

DIGEST = "sha256:" + "0123456789abcdef" * 4
# The lab's pinned vLLM and runner image (lab/inventory/group_vars/all/pins.yml), by digest.
VLLM = pins.VLLM
IMAGE = pins.RUNNER_IMAGE + "@" + DIGEST
VERSION = VLLM + "-0123456789ab-custom"
UNKNOWN = VLLM + "-ffffffffffff-custom"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return config_only_checkpoint(tmp_path_factory.mktemp("checkpoint"))


def stored_model(server, name):
    found = [m for m in server.items("/v2/models") if m["name"] == name]
    return found[0] if found else None


def stored_versions(server):
    row = server.api("GET", "/v2/inference-backends/backend_name/vLLM")
    return {k: v for k, v in (row["version_configs"] or {}).items() if not v.get("built_in_frameworks")}


def version_args(server, image=IMAGE, **extra):
    return {**server.key_args, "backend_version": VLLM, "image_name": image, **extra}


def model_args(server, checkpoint, name, version=VERSION, **extra):
    return registration(server, checkpoint, name, gpus=(0, 1), **{
        "backend": "vLLM", "backend_version": version, "replicas": 0, "backend_parameters": ["--max-model-len", "4096"],
        **extra})


def test_gpustack_drops_the_image_of_a_vllm_model_on_update(gpustack_server, checkpoint):
    """The reason for the backend version: the server's own behaviour, without our modules."""
    server = gpustack_server
    body = {"name": "image-dropped", "source": "local_path", "local_path": checkpoint, "replicas": 0,
            "cluster_id": server.cluster_id, "backend": "vLLM", "backend_version": VLLM, "image_name": IMAGE,
            "backend_parameters": ["--max-model-len", "4096"]}
    created = server.api("POST", "/v2/models", body)
    try:
        assert created["image_name"] == IMAGE
        shorter = dict(body, backend_parameters=["--max-model-len", "2048"])
        updated = server.api("PUT", f"/v2/models/{created['id']}", shorter)
        assert updated["backend_parameters"] == ["--max-model-len", "2048"]
        assert updated["image_name"] is None, "GPUStack kept image_name: the workaround may no longer be needed"
    finally:
        server.api("DELETE", f"/v2/models/{created['id']}")


def test_backend_version_four_steps_and_naming(gpustack_server):
    check, apply, _idem, again = four_steps("gpustack_backend_version", version_args(gpustack_server))
    assert check["version"] == apply["version"] == again["version"] == VERSION
    assert check["diff"]["after"] == {"image_name": IMAGE, "custom_framework": "cuda"}
    stored = stored_versions(gpustack_server)[VERSION]
    assert stored["image_name"] == IMAGE and stored["custom_framework"] == "cuda"
    # The backend's own fields are sent back as read: still the built-in vLLM backend, no default version.
    row = gpustack_server.api("GET", "/v2/inference-backends/backend_name/vLLM")
    assert row["is_built_in"] is True and row["default_version"] is None
    # Without a digest the name hashes the reference: another tag is another version.
    tagged = run_module("gpustack_backend_version", version_args(gpustack_server, image="127.0.0.1:5000/lab/v:1"),
                        check=True)
    assert tagged.changed and tagged["version"].startswith(VLLM + "-") and tagged["version"] != VERSION


def test_model_keeps_the_pinned_image_across_updates(gpustack_server, checkpoint):
    server = gpustack_server
    assert not run_module("gpustack_backend_version", version_args(server)).failed
    args = model_args(server, checkpoint, "pinned-image")
    four_steps("gpustack_model", args)
    # Change the arguments (a profile edit), then the replica count (what the controller does): both are PUTs.
    for change in ({"backend_parameters": ["--max-model-len", "2048"]}, {"replicas": 1}):
        args = dict(args, **change)
        changed = run_module("gpustack_model", args, diff=True)
        assert changed.changed and not changed.failed, changed.result
        model = stored_model(server, "pinned-image")
        assert model["backend"] == "vLLM" and model["backend_version"] == VERSION
        assert model["image_name"] is None and model["run_command"] is None
        assert stored_versions(server)[VERSION]["image_name"] == IMAGE
        assert not run_module("gpustack_model", args).changed, "the run after a change must report no change"
    assert not run_module("gpustack_model", {**server.key_args, "name": "pinned-image", "state": "absent"}).failed


def test_a_model_that_named_its_image_is_moved_to_the_version(gpustack_server, checkpoint):
    """Models registered by earlier releases of the collection (image_name on a vLLM model) are cleaned up."""
    server = gpustack_server
    assert not run_module("gpustack_backend_version", version_args(server)).failed
    body = {"name": "legacy-image", "source": "local_path", "local_path": checkpoint, "replicas": 0,
            "cluster_id": server.cluster_id, "backend": "vLLM", "backend_version": VLLM, "image_name": IMAGE}
    server.api("POST", "/v2/models", body)
    moved = run_module("gpustack_model", model_args(server, checkpoint, "legacy-image"), diff=True)
    assert moved.changed and {"backend_version", "image_name"} <= set(moved["changed_fields"]), moved.result
    model = stored_model(server, "legacy-image")
    assert model["backend_version"] == VERSION and model["image_name"] is None
    assert not run_module("gpustack_model", model_args(server, checkpoint, "legacy-image")).changed
    assert not run_module("gpustack_model", {**server.key_args, "name": "legacy-image", "state": "absent"}).failed


def test_bad_input_is_refused_before_any_change(gpustack_server, checkpoint):
    server = gpustack_server
    with_image = run_module("gpustack_model", model_args(server, checkpoint, "refused", image_name=IMAGE))
    assert with_image.failed and "gpustack_backend_version" in with_image.result["msg"]
    unknown = run_module("gpustack_model", model_args(server, checkpoint, "refused",
                                                      version=UNKNOWN))
    assert unknown.failed and "'%s' is not a version" % UNKNOWN in unknown.result["msg"]
    # Check mode plans the registration of a version an earlier task would make: a warning, not a failure.
    planned = run_module("gpustack_model", model_args(server, checkpoint, "refused",
                                                      version=UNKNOWN), check=True)
    assert planned.changed and not planned.failed, planned.result
    assert any(UNKNOWN in w for w in planned.result.get("warnings", [])), planned.result
    assert stored_model(server, "refused") is None
    for bad in ({"backend_version": VLLM + "-abc-custom"}, {"backend_version": "latest"}, {"image_name": "a b"}):
        res = run_module("gpustack_backend_version", {**version_args(server), **bad})
        assert res.failed and ("backend_version" in res.result["msg"] or "image" in res.result["msg"]), res.result


def test_absent_is_refused_while_a_model_uses_the_version(gpustack_server, checkpoint):
    server = gpustack_server
    image = "127.0.0.1:5000/lab/vllm-cpu@sha256:" + "ab" * 32
    made = run_module("gpustack_backend_version", version_args(server, image=image))
    version = made["version"]
    assert not run_module("gpustack_model", model_args(server, checkpoint, "user", version=version)).failed
    refused = run_module("gpustack_backend_version", version_args(server, image=image, state="absent"))
    assert refused.failed and "user" in refused.result["msg"] and version in stored_versions(server)
    assert not run_module("gpustack_model", {**server.key_args, "name": "user", "state": "absent"}).failed
    check, apply, _idem, _again = four_steps("gpustack_backend_version", version_args(server, image=image,
                                                                                      state="absent"))
    assert check["diff"]["before"]["image_name"] == image
    assert version not in stored_versions(server) and VERSION in stored_versions(server)


def test_concurrent_writers_all_end_registered(gpustack_server):
    """Three runs registering three images at once on one host: the host lock makes them take turns, all stay."""
    server = gpustack_server
    images = [f"127.0.0.1:5000/lab/host{i}@sha256:" + ("%x" % (i + 1)) * 64 for i in range(3)]
    results = [None] * len(images)

    def register(i):
        results[i] = run_module("gpustack_backend_version", version_args(server, image=images[i]))

    threads = [threading.Thread(target=register, args=(i,)) for i in range(len(images))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    versions = stored_versions(server)
    for res, image in zip(results, images):
        assert not res.failed, res.result
        assert versions[res["version"]]["image_name"] == image


def test_the_controllers_replica_put_keeps_the_pinned_image(gpustack_server, checkpoint):
    """The controller puts a pair to sleep and wakes it by PUTting the model back with another replica count."""
    from pairserve_controller.gpustack_access import GpuStack  # pylint: disable=import-outside-toplevel
    server = gpustack_server
    assert not run_module("gpustack_backend_version", version_args(server)).failed
    args = model_args(server, checkpoint, "asleep-and-awake", replicas=1)
    assert not run_module("gpustack_model", args).failed
    model = stored_model(server, "asleep-and-awake")
    client = GpuStack(server.api_url, api_key=server.api_key)
    for replicas in (0, 1):
        client.set_replicas(model["id"], replicas)
        after = stored_model(server, "asleep-and-awake")
        assert after["replicas"] == replicas
        assert after["backend_version"] == VERSION and after["image_name"] is None
        assert stored_versions(server)[VERSION]["image_name"] == IMAGE
    # What the controller left is what the inventory says: the next site.yml run changes nothing.
    assert not run_module("gpustack_model", args).changed
    assert not run_module("gpustack_model", {**server.key_args, "name": "asleep-and-awake", "state": "absent"}).failed
