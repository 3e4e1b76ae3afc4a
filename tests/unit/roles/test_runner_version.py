"""The runner image's own vLLM against the pin (roles/runner_image/tasks/version.yml), through Ansible with a `docker`
stand-in on PATH that answers `vllm --version` as an image would: the pinned version (a local suffix aside) passes, any
other is refused naming both versions and the image, and so is an image whose vllm cannot answer."""

from __future__ import annotations

import os
import stat

import pytest

from lab.ansible_runner import run_local_play

IMAGE = "docker.io/gpustack/runner:cuda12.9-vllm0.25.1@sha256:" + "1" * 64
SHIM = r'''#!/bin/sh
echo "$@" >> "$CALLS"
[ "$1" = run ] || exit 1
[ "$RC" = 0 ] || { echo "exec: \"vllm\": executable file not found in \$PATH" >&2; exit "$RC"; }
printf '%b' "$ANSWER"
'''


def play(tmp_path, answer, rc=0, pin="0.25.1"):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "docker"
    shim.write_text(SHIM)
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.log"
    calls.write_text("")
    res = run_local_play(tmp_path, "version", [{"name": "Check", "ansible.builtin.include_role": {
        "name": "pairserve.llm.runner_image", "tasks_from": "version"}}],
        {"pairserve_runner_runtime": "docker", "pairserve_runner_image_ref": IMAGE, "pairserve_vllm_version": pin},
        env={"PATH": "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]), "CALLS": str(calls), "ANSWER": answer,
             "RC": str(rc)})
    return res, calls.read_text().split()


def failed(res):
    found = [r for r in res.results if r.get("_status") == "failed"]
    assert res.rc != 0 and found, res.stdout[-3000:]
    return " ".join(found[-1]["msg"].split())


@pytest.mark.parametrize("answer", ["0.25.1\n", "INFO 12-06 [__init__.py:1] loading\n0.25.1+cu129\n", "v0.25.1+cpu\n"])
def test_the_pinned_vllm_passes(tmp_path, answer):
    res, calls = play(tmp_path, answer)
    assert res.rc == 0, res.stdout[-3000:]
    # as GPUStack runs the image: its own vllm, no network, removed as it exits, never pulled here
    assert calls == ["run", "--rm", "--pull=never", "--network=none", "--entrypoint", "vllm", IMAGE, "--version"]


def test_another_vllm_is_refused_naming_both(tmp_path):
    msg = failed(play(tmp_path, "0.27.1\n")[0])
    assert msg.startswith("localhost: pairserve_runner_image / pairserve_runner_image_digest: the runner image %s "
                          "carries vLLM 0.27.1, but pairserve_vllm_version pins 0.25.1" % IMAGE), msg
    assert msg.endswith("Nothing was registered.")


def test_an_image_without_a_working_vllm_is_refused(tmp_path):
    msg = failed(play(tmp_path, "", rc=127)[0])
    assert "could not tell its vLLM version (`vllm --version` failed, rc=127" in msg
    assert "executable file not found" in msg
    msg = failed(play(tmp_path, "usage: vllm [-h]\n")[0])
    assert "printed no version for `vllm --version`: usage: vllm [-h]" in msg
