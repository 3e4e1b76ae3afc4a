"""The runner image's own vLLM against the pin (roles/runner_image/tasks/version.yml), through Ansible with a `docker`
stand-in on PATH that holds images, pulls from a registry that may be stopped, and answers `vllm --version` as an image
would: the pinned version (a local suffix aside) passes, any other is refused naming both versions and the image, and
so is an image whose vllm cannot answer. Preflight's entry point (image_version) pulls the pinned image when it is
missing before asking it; an answer that matched is kept under the image's digest and read on the next run, which then
starts no container and needs neither the registry nor the image (the lab's idempotence proof converges with its
registry stopped)."""

from __future__ import annotations

import os
import stat
import time

import pytest
import yaml

from support.ansible_runner import REPO, run_playbook

DIGEST = "sha256:" + "1" * 64
NAME = "docker.io/gpustack/runner:cuda12.9-vllm0.25.1"
IMAGE = NAME + "@" + DIGEST
IMAGE_ID = "ab" * 32
# images: the references the runtime holds, one a line; registry: "up" or "down"; id: what `image inspect --format
# {{.Id}}` prints for a held image.
SHIM = r'''#!/bin/sh
echo "$*" >> "$STATE/calls"
case "$1 $2" in
  "image inspect")
    [ "$3" = --format ] && ref=$5 || ref=$3
    grep -qxF "$ref" "$STATE/images" || { echo "Error: No such image: $ref" >&2; exit 1; }
    [ "$3" = --format ] && echo "sha256:$IMAGE_ID" || echo '[{}]'
    exit 0 ;;
esac
case "$1" in
  pull) [ "$(cat "$STATE/registry")" = up ] || { echo "Error: dial tcp 127.0.0.1:5000: connection refused" >&2; exit 125; }
        echo "$2" >> "$STATE/images" ;;
  run) [ "$RC" = 0 ] || { echo "exec: \"vllm\": executable file not found in \$PATH" >&2; exit "$RC"; }
       printf '%b' "$ANSWER" ;;
  *) exit 1 ;;
esac
'''


class Node:
    """The check host: its docker stand-in's state and the directory the answers are kept in."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.state = tmp_path / "state"
        self.state.mkdir()
        (self.state / "images").write_text("")
        (self.state / "registry").write_text("up")
        self.kept = tmp_path / "kept"
        bindir = tmp_path / "bin"
        bindir.mkdir()
        shim = bindir / "docker"
        shim.write_text(SHIM)
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
        self.path = "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"])

    def hold(self, *refs):
        (self.state / "images").write_text("".join(r + "\n" for r in refs))

    def registry(self, state):
        (self.state / "registry").write_text(state)

    def play(self, answer="0.25.1\n", rc=0, pin="0.25.1", entry="version", check=False, **more):
        (self.state / "calls").write_text("")
        variables = {"pairserve_runner_runtime": "docker", "pairserve_vllm_version": pin,
                     "pairserve_runner_version_cache_dir": str(self.kept)}
        if entry == "version":
            variables["pairserve_runner_image_ref"] = IMAGE
        else:
            variables.update(pairserve_runner_image=NAME, pairserve_runner_image_digest=DIGEST)
        variables.update(more)
        playbook = self.tmp / "play.yml"
        playbook.write_text(yaml.safe_dump([{
            "name": "version", "hosts": "localhost", "gather_facts": False, "connection": "local", "vars": variables,
            "tasks": [{"name": "Check", "ansible.builtin.include_role": {
                "name": "pairserve.llm.runner_image", "tasks_from": entry}}]}]))
        res = run_playbook(playbook, check=check, timeout=300,
                           env={"PATH": self.path, "STATE": str(self.state), "ANSWER": answer, "RC": str(rc),
                                "IMAGE_ID": IMAGE_ID})
        return res, (self.state / "calls").read_text().splitlines()


@pytest.fixture()
def node(tmp_path):
    return Node(tmp_path)


def failed(res):
    found = [r for r in res.results if r.get("_status") == "failed"]
    assert res.rc != 0 and found, res.stdout[-3000:]
    return " ".join(found[-1]["msg"].split())


def runs(calls):
    return [c for c in calls if c.startswith("run ")]


def test_the_pinned_vllm_passes_is_kept_under_the_digest_and_read_on_the_next_runs(node):
    node.hold(IMAGE)
    first, calls = node.play("INFO 12-06 [__init__.py:1] loading\nv0.25.1+cu129\n")
    assert first.rc == 0, first.stdout[-3000:]
    # as GPUStack runs the image: its own vllm, no network, removed as it exits, never pulled here
    assert runs(calls) == ["run --rm --pull=never --network=none --entrypoint vllm %s --version" % IMAGE]
    assert any(r["changed"] for r in first.results if r["_task"] == "Keep the verified vLLM version of this image")
    kept = node.kept / ("sha256-" + "1" * 64)
    assert yaml.safe_load(kept.read_text()) == {"image": IMAGE, "command": ["vllm", "--version"], "vllm": "0.25.1"}
    # later in the same run (serve.yml's runner_image after preflight) the main entry point has nothing to ask
    remembered = first.by_task["Remember that this image's vLLM was checked in this run"]
    assert remembered["ansible_facts"] == {"pairserve_runner_version_verified": IMAGE}, remembered

    # The registry stopped and the image gone: the runtime is not even asked, and nothing changes.
    node.hold()
    node.registry("down")
    started = time.monotonic()
    again, calls = node.play()
    took = time.monotonic() - started
    assert again.rc == 0, again.stdout[-3000:]
    assert calls == [], calls
    assert not any(r["changed"] for r in again.results), [r["_task"] for r in again.results if r["changed"]]
    checked, = [r for r in again.results if r["_task"] == "Fail unless the runner image carries the pinned vLLM"]
    assert checked["_status"] == "ok"
    print("the run that read the kept answer took %.1f s" % took)

    # The pin moved to another vLLM with the same image: refused from the kept answer, naming where it was kept.
    res, calls = node.play(pin="0.27.1")
    msg = failed(res)
    assert calls == []
    assert ("the runner image %s carries vLLM 0.25.1 (its answer to `vllm --version`, kept in %s on localhost), but "
            "pairserve_vllm_version pins 0.27.1" % (IMAGE, kept)) in msg, msg

    # An answer kept for another command is not trusted: the image is asked again.
    node.hold(IMAGE)
    node.registry("up")
    res, calls = node.play(pairserve_runner_version_command=["python3", "-m", "vllm.entrypoints.cli.main", "--version"])
    assert res.rc == 0, res.stdout[-3000:]
    assert runs(calls) == ["run --rm --pull=never --network=none --entrypoint python3 %s -m vllm.entrypoints.cli.main "
                           "--version" % IMAGE]


def test_an_image_without_a_working_vllm_is_refused(node):
    node.hold(IMAGE)
    msg = failed(node.play("", rc=127)[0])
    assert "could not tell its vLLM version (`vllm --version` failed, rc=127" in msg
    assert "executable file not found" in msg
    assert msg.endswith("No replica was registered.")
    msg = failed(node.play("usage: vllm [-h]\n")[0])
    assert "printed no version for `vllm --version`: usage: vllm [-h]" in msg
    assert not node.kept.exists()


def test_preflight_pulls_the_pinned_image_and_refuses_another_vllm_naming_both(node):
    res, calls = node.play("0.24.0\n", entry="image_version")
    msg = failed(res)
    assert "pull %s" % IMAGE in calls and runs(calls), calls
    assert msg.startswith("localhost: pairserve_runner_image / pairserve_runner_image_digest: the runner image %s "
                          "carries vLLM 0.24.0, but pairserve_vllm_version pins 0.25.1" % IMAGE), msg
    assert msg.endswith("The run stopped before installing GPUStack or registering any replica.")
    assert not node.kept.exists()  # only an answer that matched the pin is kept


def test_preflight_offline_and_in_check_mode(node):
    node.registry("down")
    # Check mode on a node without the image: nothing pulled, nothing run, nothing to refuse yet.
    res, calls = node.play(entry="image_version", check=True)
    assert res.rc == 0, res.stdout[-3000:]
    assert runs(calls) == [] and not any(c.startswith("pull") for c in calls), calls
    # pairserve_runner_pull false and the image not loaded: refused naming the image, before anything is asked.
    res, calls = node.play(entry="image_version", pairserve_runner_pull=False)
    msg = failed(res)
    assert "image %s is not present on this node and pull=false" % IMAGE in msg, msg
    assert runs(calls) == [] and not any(c.startswith("pull") for c in calls)
    # Loaded by hand (docs/first-install.md, "Offline images"): asked, and kept.
    node.hold(IMAGE)
    res, calls = node.play(entry="image_version", pairserve_runner_pull=False)
    assert res.rc == 0, res.stdout[-3000:]
    assert len(runs(calls)) == 1
    # Check mode reads the kept answer, image or not.
    node.hold()
    res, calls = node.play(entry="image_version", check=True, pin="0.27.1")
    assert "carries vLLM 0.25.1 (its answer to" in failed(res)
    assert calls == []


def test_a_reference_without_a_digest_is_kept_under_its_image_id(node):
    local = "localhost/pairserve-vllm-cpu:0.25.1"
    node.hold(local)
    res, dummy = node.play(pairserve_runner_image_ref=local)
    assert res.rc == 0, res.stdout[-3000:]
    assert yaml.safe_load((node.kept / ("id-" + IMAGE_ID)).read_text())["image"] == local


def test_preflight_asks_the_image_in_a_play_before_gpustack_is_installed():
    """site.yml's order, read from the playbooks: the GPU checks of preflight (which include this check) run in a play
    that stops every host on one failure, before the play that installs GPUStack; serve.yml's runner_image role comes
    later and reads the kept answer."""
    plays = yaml.safe_load((REPO / "playbooks" / "control_plane.yml").read_text())

    def uses(play, role, entry=None):
        for task in play.get("tasks", []):
            for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                ref = task.get(key) or {}
                if ref.get("name") == role and (entry is None or ref.get("tasks_from") == entry):
                    return True
        return False

    install = next(i for i, play in enumerate(plays) if uses(play, "pairserve.llm.gpustack_install"))
    checks = [i for i, play in enumerate(plays) if uses(play, "pairserve.llm.preflight", "gpu")]
    assert checks and all(i < install for i in checks), (checks, install)
    assert all(plays[i].get("any_errors_fatal") is True for i in checks)
    gpu = yaml.safe_load((REPO / "roles" / "preflight" / "tasks" / "gpu.yml").read_text())
    assert any(uses({"tasks": [t]}, "pairserve.llm.runner_image", "image_version") for t in gpu), gpu
