"""runner_image: the catalogue rule of GPUStack's worker, and the module through Ansible."""

from __future__ import annotations

import json
import os

import pytest

from lab import pins
from support.ansible_runner import run_module
from support.container_cli import fake_runtime

from ansible_collections.pairserve.llm.plugins.module_utils.runner_catalogue import (  # noqa: E402
    RunnerCatalogueError,
    cuda_from_driver,
    select_image,
)


def entry(vllm, cuda, deprecated=False):
    return {"backend": "cuda", "backend_version": cuda, "service": "vllm", "service_version": vllm,
            "platform": "linux/amd64", "docker_image": "gpustack/runner:cuda%s-vllm%s" % (cuda, vllm),
            "deprecated": deprecated}


CATALOGUE = [entry("0.25.1", "13.0"), entry("0.25.1", "12.9"), entry("0.24.0", "12.9"), entry("0.17.1", "12.8")]


@pytest.mark.parametrize("driver, expected", [("13000", "13.0"), (13000, "13.0"), ("12090", "12.9"), ("12.8", "12.8")])
def test_cuda_from_driver(driver, expected):
    assert cuda_from_driver(driver) == expected


@pytest.mark.parametrize("cuda, image", [
    ("13000", "gpustack/runner:cuda13.0-vllm0.25.1"),   # newest runner the driver supports
    ("12090", "gpustack/runner:cuda12.9-vllm0.25.1"),   # a 12.9 driver cannot run the 13.0 image
    ("13020", "gpustack/runner:cuda13.0-vllm0.25.1"),   # newer driver: still the newest image
])
def test_select_image_follows_the_worker_rule(cuda, image):
    assert select_image(CATALOGUE, "0.25.1", cuda)["docker_image"] == image


def test_unknown_vllm_pin_names_what_the_catalogue_offers():
    with pytest.raises(RunnerCatalogueError) as err:
        select_image(CATALOGUE, "0.27.1", "13000")
    assert "0.27.1" in str(err.value) and "0.17.1, 0.24.0, 0.25.1" in str(err.value)


def test_driver_too_old_for_every_runner():
    with pytest.raises(RunnerCatalogueError) as err:
        select_image(CATALOGUE, "0.25.1", "11080")
    assert "Upgrade the NVIDIA driver" in str(err.value)


def test_present_pinned_image_is_not_changed(tmp_path):
    bindir = fake_runtime(tmp_path, present=True)
    env = {"PATH": "%s:%s" % (bindir, os.environ["PATH"])}
    digest = "sha256:" + "ab" * 32
    res = run_module("runner_image", {"vllm_version": "0.25.1", "cuda_version": "13000",
                                      "image": "gpustack/runner:cuda13.0-vllm0.25.1", "digest": digest}, env=env)
    assert not res.failed and not res.changed
    assert res["image"] == "gpustack/runner:cuda13.0-vllm0.25.1@" + digest
    assert json.dumps(res["present"]) == "true"


def test_bad_digest_is_refused():
    res = run_module("runner_image", {"vllm_version": "0.25.1", "cuda_version": "13000", "image": "x", "digest": "abc"})
    assert res.failed and "not an image digest" in res["msg"]


def calls(tmp_path):
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def runtime_holding(tmp_path, images):
    """A `docker` on PATH whose `image inspect` describes `images` (exit 1 when there is none), recording its calls."""
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    (tmp_path / "inspect.json").write_text(json.dumps(images))
    script.write_text("#!/bin/sh\necho \"$@\" >> %s\ncase \"$1 $2\" in\n  'image inspect') cat %s; exit %d ;;\nesac\n"
                      "exit 0\n" % (tmp_path / "calls.log", tmp_path / "inspect.json", 0 if images else 1))
    script.chmod(0o755)
    return {"PATH": "%s:%s" % (script.parent, os.environ["PATH"])}


DIGEST = "sha256:" + "cd" * 32
PINNED = pins.RUNNER_IMAGE + "@" + DIGEST  # the lab's runner image (lab/inventory/group_vars/all/pins.yml)
LOCAL_TAG = "localhost/pairserve-vllm-cpu:" + pins.VLLM  # the lab's build of it before the push
HELD = "127.0.0.1:5000/lab/vllm-cpu@" + DIGEST


@pytest.mark.parametrize("check", [False, True])
def test_absent_removes_the_held_reference_and_check_mode_only_says_so(tmp_path, check):
    env = runtime_holding(tmp_path, [{"RepoTags": [LOCAL_TAG], "RepoDigests": [HELD]}])
    res = run_module("runner_image", {"image": PINNED, "state": "absent"}, check=check, env=env)
    assert not res.failed, res.stdout[-2000:]
    assert res.changed and res["removed"] and res["image"] == PINNED
    # The tag beside the digest is left out, as the runtimes store a pinned reference.
    assert calls(tmp_path) == ["image inspect " + HELD] + ([] if check else ["image rm " + HELD])


@pytest.mark.parametrize("images", [
    [],  # the runtime has no such image
    # podman 4 finds an image by its digest under any name: one that no longer holds this repository's name
    [{"RepoTags": [LOCAL_TAG], "RepoDigests": ["localhost/pairserve-vllm-cpu@" + DIGEST]}],
])
def test_absent_without_the_reference_changes_nothing(tmp_path, images):
    env = runtime_holding(tmp_path, images)
    res = run_module("runner_image", {"image": PINNED, "state": "absent"}, env=env)
    assert not res.failed and not res.changed and not res["removed"], res.stdout[-2000:]
    assert calls(tmp_path) == ["image inspect " + HELD]


@pytest.mark.parametrize("image, held, shown", [
    # Docker shows Docker Hub names short, podman in full: both are the same reference.
    ("gpustack/runner:cuda13.0-vllm0.25.1", "gpustack/runner:cuda13.0-vllm0.25.1",
     "docker.io/gpustack/runner:cuda13.0-vllm0.25.1"),
    ("registry.local:5000/runner", "registry.local:5000/runner:latest", "registry.local:5000/runner:latest"),
])
def test_absent_without_a_digest_removes_the_tag(tmp_path, image, held, shown):
    env = runtime_holding(tmp_path, [{"RepoTags": [shown], "RepoDigests": []}])
    res = run_module("runner_image", {"image": image, "state": "absent"}, env=env)
    assert not res.failed and res.changed, res.stdout[-2000:]
    assert calls(tmp_path) == ["image inspect " + held, "image rm " + held]


# Ansible looks for the binary in PATH and in the sbin directories: a PATH of the system's tools without any docker
# stands for a node without Docker (the lab's machine has Debian's docker.io, whose CLI is in /usr/bin).
SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


def tools_without_docker(directory):
    """A directory of links to every tool in /usr/bin and /bin but docker (Ansible's own steps need the rest)."""
    directory.mkdir()
    for source in ("/usr/bin", "/bin"):
        for name in os.listdir(source):
            link = directory / name
            if name != "docker" and not link.exists():
                link.symlink_to(os.path.join(source, name))
    return str(directory)


@pytest.mark.skipif(any(os.path.exists(os.path.join(d, "docker")) for d in SBIN),
                    reason="this machine has a docker CLI in an sbin directory, which Ansible always searches")
def test_absent_on_a_node_without_the_runtime_changes_nothing(tmp_path):
    res = run_module("runner_image", {"image": "gpustack/runner:cuda13.0-vllm0.25.1", "state": "absent"},
                     env={"PATH": tools_without_docker(tmp_path / "bin")})
    assert not res.failed and not res.changed and json.dumps(res["present"]) == "false"


def test_absent_needs_the_image_and_present_the_image_or_the_versions():
    res = run_module("runner_image", {"state": "absent"})
    assert res.failed and "image" in res["msg"]
    # present: the image (any image the worker needs: the runner, gpustack-runtime's pause and health), or the
    # versions the catalogue resolves the runner from
    res = run_module("runner_image", {"vllm_version": "0.25.1"})
    assert res.failed and "vllm_version and cuda_version are required" in res["msg"], res["msg"]
