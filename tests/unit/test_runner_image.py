"""runner_image: the catalogue rule of GPUStack's worker, and the module through Ansible."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from support.ansible_runner import REPO, run_module

from ansible_collections.pairserve.llm.plugins.module_utils.runner_catalogue import (  # noqa: E402
    RunnerCatalogueError,
    cuda_from_driver,
    select_image,
)

GPUSTACK_SITE = sorted((REPO / ".cache" / "gpustack").glob("venv-*/lib/python3.11/site-packages"))


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


def fake_runtime(tmp_path: Path, present: bool) -> Path:
    """A `docker` executable on PATH that records its arguments; the module drives it like the real CLI."""
    log = tmp_path / "calls.log"
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho \"$@\" >> %s\ncase \"$1 $2\" in\n  'image inspect') exit %d ;;\n"
                      "  'pull '*) exit 0 ;;\nesac\nexit 0\n" % (log, 0 if present else 1))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script.parent


@pytest.mark.skipif(not GPUSTACK_SITE, reason="needs the GPUStack venv (scripts/build_wheelhouse.sh + tests/support/gpustack_server.py build it)")
def test_module_resolves_from_the_installed_catalogue_and_pulls_once(tmp_path):
    bindir = fake_runtime(tmp_path, present=False)
    env = {"PATH": "%s:%s" % (bindir, os.environ["PATH"]), "PYTHONPATH": str(GPUSTACK_SITE[-1])}
    args = {"vllm_version": "0.25.1", "cuda_version": "13000"}
    check = run_module("runner_image", args, check=True, diff=True, env=env)
    assert not check.failed, check.stdout + check.stderr
    assert check.changed and check["pulled"] and check["image"] == "gpustack/runner:cuda13.0-vllm0.25.1"
    assert "pull" not in (tmp_path / "calls.log").read_text()   # check mode pulls nothing
    applied = run_module("runner_image", args, env=env)
    assert applied.changed and "pull gpustack/runner:cuda13.0-vllm0.25.1" in (tmp_path / "calls.log").read_text()


@pytest.mark.skipif(not GPUSTACK_SITE, reason="needs the GPUStack venv")
def test_module_refuses_a_pin_without_image_before_touching_the_runtime(tmp_path):
    bindir = fake_runtime(tmp_path, present=True)
    env = {"PATH": "%s:%s" % (bindir, os.environ["PATH"]), "PYTHONPATH": str(GPUSTACK_SITE[-1])}
    res = run_module("runner_image", {"vllm_version": "0.99.0", "cuda_version": "13000"}, env=env)
    assert res.failed and "has no GPUStack runner image" in res["msg"]
    assert not (tmp_path / "calls.log").exists()


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
