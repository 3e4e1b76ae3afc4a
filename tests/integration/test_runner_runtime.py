"""The runner_image role's runtime checks (roles/runner_image/tasks/runtime.yml), which preflight runs before
anything changes: the real podman of this machine answers, and a CDI spec must name every GPU of the node's pairs
by UUID, as GPUStack's podman deployer asks for them. Run through ansible-playbook against localhost."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import yaml

from lab.ansible_runner import REPO, run_playbook

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
    """podman with the lab's settings for this machine (scripts/lib/podman-env.sh: a sandbox's limits)."""
    return subprocess.run(["bash", "-c", 'source scripts/lib/podman-env.sh && podman "$@"', "podman", *args], cwd=REPO,
                          capture_output=True, text=True, check=False, timeout=120)


def _node_image():
    return subprocess.run(["bash", "-c", "source scripts/lib/podman-env.sh && pairserve_build_node_image >&2 && "
                                         "echo $PAIRSERVE_NODE_IMAGE"], cwd=REPO, capture_output=True, text=True,
                          check=True, timeout=600).stdout.strip()


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
