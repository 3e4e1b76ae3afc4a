"""runner_image against the runner catalogue of the gpustack-runner package that GPUStack 2.2.3 installs.

In the integration tier, because it needs GPUStack's venv (built from the wheelhouse by `make caches`); the
unit tier runs before the caches exist.
"""

from __future__ import annotations

import os

import pytest

from lab import pins
from support.ansible_runner import run_module
from support.gpustack_server import ensure_venv
from support.container_cli import fake_runtime

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gpustack_site():
    """site-packages of GPUStack's venv (made from the wheelhouse once; the GPUStack server tests share it)."""
    found = sorted(ensure_venv().glob("lib/python3.*/site-packages"))
    assert found, "GPUStack's venv has no site-packages"
    return found[-1]


def test_module_resolves_from_the_installed_catalogue_and_pulls_once(tmp_path, gpustack_site):
    bindir = fake_runtime(tmp_path, present=False)
    env = {"PATH": "%s:%s" % (bindir, os.environ["PATH"]), "PYTHONPATH": str(gpustack_site)}
    args = {"vllm_version": pins.VLLM, "cuda_version": "13000"}  # the lab's pin, in the pinned GPUStack's catalogue
    check = run_module("runner_image", args, check=True, diff=True, env=env)
    assert not check.failed, check.stdout + check.stderr
    assert check.changed and check["pulled"] and check["image"] == "gpustack/runner:cuda13.0-vllm" + pins.VLLM
    assert "pull" not in (tmp_path / "calls.log").read_text()   # check mode pulls nothing
    applied = run_module("runner_image", args, env=env)
    assert applied.changed and "pull gpustack/runner:cuda13.0-vllm" + pins.VLLM in (tmp_path / "calls.log").read_text()


def test_module_refuses_a_pin_without_image_before_touching_the_runtime(tmp_path, gpustack_site):
    bindir = fake_runtime(tmp_path, present=True)
    env = {"PATH": "%s:%s" % (bindir, os.environ["PATH"]), "PYTHONPATH": str(gpustack_site)}
    res = run_module("runner_image", {"vllm_version": "0.99.0", "cuda_version": "13000"}, env=env)
    assert res.failed and "has no GPUStack runner image" in res["msg"]
    assert not (tmp_path / "calls.log").exists()
