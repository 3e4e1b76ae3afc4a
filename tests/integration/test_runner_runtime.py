"""The runner_image role's runtime checks (roles/runner_image/tasks/runtime.yml), which preflight runs before
anything changes: the real podman of this machine answers, and a CDI spec must name every GPU of the node's pairs
by UUID, as GPUStack's podman deployer asks for them; and the pinned runner image's own vLLM, pulled from a registry
like the lab's and asked before GPUStack is installed (entry point image_version). Run through ansible-playbook
against localhost."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from support.ansible_runner import REPO, run_playbook
from support.ports import free_port

from lab import host as lab_host
from lab import images as lab_images

PAIRS = {"pairs": [{"uuids": ["GPU-11111111-2222-3333-4444-555555555555",
                              "GPU-66666666-7777-8888-9999-000000000000"]}]}


def spec(*names):
    return {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": n, "containerEdits": {"env": [f"LAB_{i}=1"]}} for i, n in enumerate(names)]}


def play(tmp_path, **host_vars):
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "pairserve_gpu": PAIRS,
            "pairserve_runner_runtime": "podman", "pairserve_runner_cdi_dirs": [str(tmp_path / "cdi")]}
    base.update(host_vars)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node-x": base}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Runtime checks", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "The runtime checks", "ansible.builtin.include_role": {
            "name": "pairserve.llm.runner_image", "tasks_from": "runtime"}}]}]))
    return run_playbook(playbook, inventory=inventory, timeout=300)


def failure(res):
    failed = [r for r in res.results if r["_status"] == "failed"]
    assert len(failed) == 1, (res.stdout[-2000:], res.stderr[-2000:])
    return failed[0]


def test_a_spec_naming_both_gpus_by_uuid_passes_whatever_else_it_holds(tmp_path):
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "nvidia.yaml").write_text(yaml.safe_dump(spec("0", "1", "all", *PAIRS["pairs"][0]["uuids"])))
    (tmp_path / "cdi" / "other.json").write_text(json.dumps({"cdiVersion": "0.6.0", "kind": "example.com/nic",
                                                             "devices": [{"name": "eth9"}]}))
    res = play(tmp_path)
    assert res.rc == 0, (res.stdout[-3000:], res.stderr[-2000:])
    assert [r["_task"] for r in res.results if r["_status"] == "failed"] == []
    checked = [r for r in res.results if r["_task"].endswith("a CDI spec names every GPU of this node's pairs")]
    assert checked and checked[0]["_status"] == "ok"


def test_a_spec_by_index_only_is_refused_naming_the_missing_devices(tmp_path):
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "nvidia.yaml").write_text(yaml.safe_dump(spec("0", "1", "all",
                                                                      PAIRS["pairs"][0]["uuids"][0])))
    res = play(tmp_path)
    assert res.rc != 0
    msg = failure(res)["msg"]
    assert "nvidia.com/gpu=GPU-66666666-7777-8888-9999-000000000000" in msg
    assert "GPU-11111111" not in msg and "nvidia-ctk cdi generate" in msg and "node-x" in msg


def test_no_spec_at_all_is_refused(tmp_path):
    res = play(tmp_path)  # the directory does not even exist
    assert res.rc != 0
    msg = failure(res)["msg"]
    assert all(f"nvidia.com/gpu={u}" in msg for u in PAIRS["pairs"][0]["uuids"])


def test_a_runtime_that_does_not_answer_is_named(tmp_path):
    res = play(tmp_path, pairserve_runner_runtime_host="unix:///nonexistent/pairserve-test.sock")
    assert res.rc != 0
    msg = failure(res)["msg"]
    assert "podman" in msg and "does not answer" in msg and "unix:///nonexistent/pairserve-test.sock" in msg


def _podman(*args):
    """podman with the lab's settings for this machine (lab/host.py: a sandbox's limits)."""
    return subprocess.run(["podman", *args], cwd=REPO, env=lab_host.environ(), capture_output=True, text=True,
                          check=False, timeout=120)


def _node_image():
    return lab_images.node_image()


def test_the_uninstall_removes_the_workload_containers_the_worker_left_behind(tmp_path):
    """The absent entry point after the replicas went: a container still labelled as a workload of this node's
    worker (one it lost track of) is removed, another worker's is left alone, and a second run changes nothing."""
    prefix, other = f"pst-{uuid.uuid4().hex[:8]}.runtime.gpustack.ai", f"pst-{uuid.uuid4().hex[:8]}.runtime.gpustack.ai"
    image, names = _node_image(), {}
    try:
        for who in (prefix, other):
            names[who] = f"pairserve-test-{who.split('.', maxsplit=1)[0]}"
            started = _podman("run", "-d", "--name", names[who], "--label", f"{who}/workload=qwen-node-x-abcd",
                              "--network", "none", "--entrypoint", "sleep", image, "600")
            assert started.returncode == 0, started.stderr
        inventory = tmp_path / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node-x": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "pairserve_runner_runtime": "podman", "pairserve_runner_image": "",
            "pairserve_gpustack_worker_env": {"GPUSTACK_RUNTIME_DEPLOY_LABEL_PREFIX": prefix}}}}}))
        playbook = tmp_path / "play.yml"
        playbook.write_text(yaml.safe_dump([{
            "name": "Runner image absent", "hosts": "all", "gather_facts": False,
            "tasks": [{"name": "Absent", "ansible.builtin.include_role": {
                "name": "pairserve.llm.runner_image", "tasks_from": "absent"}}]}]))
        first = run_playbook(playbook, inventory=inventory, timeout=300)
        assert first.rc == 0, (first.stdout[-3000:], first.stderr[-2000:])
        removed = [r for r in first.results if r["_task"] == "Remove them (the worker no longer will)"]
        assert removed and removed[0]["_status"] == "ok" and removed[0]["changed"], first.stdout[-3000:]
        left = _podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
        assert names[prefix] not in left, (left, removed[0].get("cmd"), removed[0].get("stderr"))
        assert names[other] in left, "another worker's container was removed: %s" % left
        second = run_playbook(playbook, inventory=inventory, timeout=300)
        assert second.rc == 0 and not [r for r in second.results if r.get("changed")], second.stdout[-3000:]
    finally:
        for name in names.values():
            _podman("rm", "-f", "-t", "0", name)


# -- the runner image's own vLLM, read before GPUStack is installed (entry point image_version) -----------------------


@pytest.fixture()
def registry(tmp_path):
    """A registry on 127.0.0.1 as the lab runs one (Debian's docker-registry, plain HTTP on loopback, its storage in the
    test's tmp), with a registries.conf that lets podman reach it; stopped by its PID (also by the test, to show a run
    that needs none)."""
    port = free_port()
    address = "127.0.0.1:%d" % port
    config = tmp_path / "registry.yml"
    config.write_text(yaml.safe_dump({"version": 0.1, "log": {"level": "warn"}, "http": {"addr": address},
                                      "storage": {"filesystem": {"rootdirectory": str(tmp_path / "registry")}}}))
    conf = tmp_path / "registries.conf"
    conf.write_text('unqualified-search-registries = []\n[[registry]]\nlocation = "%s"\ninsecure = true\n' % address)
    proc = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "the test registry did not start"
            time.sleep(0.1)
    yield {"address": address, "conf": conf, "stop": lambda: (proc.terminate(), proc.wait(timeout=30))}
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=30)


def _runner_image(tmp_path, registry, repository, answer):
    """An image whose `vllm` prints ANSWER (this machine's dash and C library, FROM scratch: a few MB), pushed to the
    registry as REPOSITORY:0.25.1, its local copy removed: (reference without digest, digest)."""
    root = tmp_path / repository / "rootfs"
    for path in ("/usr/bin/dash", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"):
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(path), root / path.lstrip("/"))
    (root / "bin").mkdir()
    (root / "bin" / "sh").symlink_to("/usr/bin/dash")
    vllm = root / "usr" / "local" / "bin" / "vllm"
    vllm.parent.mkdir(parents=True)
    vllm.write_text("#!/bin/sh\n[ \"$1\" = --version ] || exit 2\nprintf '%s'\n" % answer)
    vllm.chmod(0o755)
    (tmp_path / repository / "Containerfile").write_text(
        "FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/local/bin:/usr/bin:/bin\n")
    local = "localhost/pairserve-test-%s:%s" % (repository, uuid.uuid4().hex[:8])
    built = _podman("build", "--quiet", "--network", "none", "-t", local, str(tmp_path / repository))
    assert built.returncode == 0, built.stderr
    name = "%s/test/%s:0.25.1" % (registry["address"], repository)
    digest_file = tmp_path / repository / "digest"
    pushed = _podman("push", "--quiet", "--tls-verify=false", "--digestfile", str(digest_file), local, "docker://" + name)
    assert pushed.returncode == 0, pushed.stderr
    assert _podman("rmi", local).returncode == 0
    return name, digest_file.read_text().strip()


def _image_version(tmp_path, registry, name, digest, check=False):
    inventory = tmp_path / "version-inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node-x": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "pairserve_runner_runtime": "podman", "pairserve_runner_module_python": sys.executable,
        "pairserve_runner_image": name, "pairserve_runner_image_digest": digest, "pairserve_vllm_version": "0.25.1",
        "pairserve_runner_version_cache_dir": str(tmp_path / "kept")}}}}))
    playbook = tmp_path / "version-play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "The runner image's vLLM", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "Check it", "ansible.builtin.include_role": {
            "name": "pairserve.llm.runner_image", "tasks_from": "image_version"}}]}]))
    env = {"CONTAINERS_CONF": str(REPO / ".cache" / "podman" / "containers.conf"),
           "CONTAINERS_REGISTRIES_CONF": str(registry["conf"])}
    return run_playbook(playbook, inventory=inventory, check=check, env=env, timeout=300)


def test_the_pinned_images_vllm_is_read_from_the_registry_before_the_install_and_kept_for_the_next_runs(
        tmp_path, registry):
    """Real podman and a registry: preflight's check pulls the pinned image by digest and asks its `vllm` in a
    throwaway container; an image whose tag names the pinned vLLM but that carries another is refused naming the host,
    the variables and both versions; the verified answer is kept, and with the registry stopped and the image gone a
    run and a check-mode run pass again with nothing changed (the lab's idempotence proof stops its registry)."""
    good = _runner_image(tmp_path, registry, "vllm", "INFO 12-06 loading the CPU platform\\n0.25.1+cpu\\n")
    other = _runner_image(tmp_path, registry, "vllm-other", "0.27.1\\n")
    pulled = ["%s@%s" % ref for ref in (good, other)]
    try:
        first = _image_version(tmp_path, registry, *good)
        assert first.rc == 0, first.stdout[-3000:]
        made = first.by_task["Make sure the runner image is present to ask it"]
        assert made["changed"] and made["pulled"], made
        asked = first.by_task["Ask the runner image which vLLM it carries"]
        assert asked["rc"] == 0 and "--network=none" in asked["cmd"], asked
        kept = tmp_path / "kept" / good[1].replace(":", "-")
        assert "vllm: 0.25.1" in kept.read_text().splitlines()

        refused = _image_version(tmp_path, registry, *other)
        assert refused.rc != 0
        msg = " ".join(failure(refused)["msg"].split())
        assert msg.startswith("node-x: pairserve_runner_image / pairserve_runner_image_digest: the runner image "
                              "%s carries vLLM 0.27.1, but pairserve_vllm_version pins 0.25.1" % pulled[1]), msg
        assert not (tmp_path / "kept" / other[1].replace(":", "-")).exists()

        registry["stop"]()
        for ref in pulled:
            _podman("rmi", ref)
        for check in (False, True):
            again = _image_version(tmp_path, registry, *good, check=check)
            assert again.rc == 0, again.stdout[-3000:]
            assert not [r["_task"] for r in again.results if r.get("changed")], again.stdout[-3000:]
            assert again.by_task["Make sure the runner image is present to ask it"]["_status"] == "skipped"
    finally:
        for ref in pulled:
            _podman("rmi", ref)
