"""gpustack-runtime's settings for a worker (module_utils/container_runtime.py) and the worker unit the role renders
from them (roles/gpustack_worker/templates/gpustack-worker.service.j2), through real Ansible."""

from __future__ import annotations

import pytest
import yaml

from support.ansible_runner import REPO, run_local_play

from ansible_collections.pairserve.llm.plugins.module_utils import container_runtime as cr

PAUSE = "docker.io/gpustack/runtime@sha256:" + "a" * 64
HEALTH = "docker.io/gpustack/runtime@sha256:" + "b" * 64


def test_docker_on_its_own_socket():
    point = cr.endpoint("docker")
    assert point["socket"] == "/var/run/docker.sock" and point["unit"] == "docker.service" and point["default"]
    assert point["worker_host"] == "http+unix:///var/run/docker.sock" and point["cli_env"] == "DOCKER_HOST"
    env = cr.worker_env("docker", "", PAUSE, HEALTH, 3600)
    assert env == {"GPUSTACK_RUNTIME_DEPLOY": "Docker", "GPUSTACK_RUNTIME_DOCKER_HOST": "http+unix:///var/run/docker.sock",
                   "GPUSTACK_RUNTIME_DOCKER_PAUSE_IMAGE": PAUSE,
                   "GPUSTACK_RUNTIME_DOCKER_UNHEALTHY_RESTART_IMAGE": HEALTH,
                   "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY": "0", "GPUSTACK_PROXY_TIMEOUT_SECONDS": "3600"}


def test_podman_needs_its_socket_unit_and_the_podman_names():
    point = cr.endpoint("podman")
    assert point["unit"] == "podman.socket" and point["socket"] == "/run/podman/podman.sock"
    env = cr.worker_env("podman", "", PAUSE, HEALTH, 60)
    assert env["GPUSTACK_RUNTIME_DEPLOY"] == "Podman"
    assert env["GPUSTACK_RUNTIME_PODMAN_HOST"] == "http+unix:///run/podman/podman.sock"
    assert env["GPUSTACK_RUNTIME_PODMAN_PAUSE_IMAGE"] == PAUSE
    assert env["GPUSTACK_RUNTIME_PODMAN_UNHEALTHY_RESTART_IMAGE"] == HEALTH
    assert not [k for k in env if "DOCKER" in k]


@pytest.mark.parametrize("host,socket", [
    ("unix:///run/pairserve-lab/podman.sock", "/run/pairserve-lab/podman.sock"),
    ("http+unix:///run/other.sock", "/run/other.sock"),
    ("/run/podman/podman.sock", "/run/podman/podman.sock"),
])
def test_another_socket_is_the_sites_to_run(host, socket):
    point = cr.endpoint("podman", host)
    assert point["socket"] == socket and point["cli_host"] == "unix://" + socket
    assert point["worker_host"] == "http+unix://" + socket
    # the runtime's own path, however written, is still its unit's
    assert (point["unit"] == "podman.socket") == (socket == "/run/podman/podman.sock")


def test_a_tcp_endpoint_passes_through_and_names_no_unit():
    point = cr.endpoint("docker", "tcp://10.0.0.5:2376")
    assert point["socket"] is None and point["unit"] is None and point["worker_host"] == "tcp://10.0.0.5:2376"


@pytest.mark.parametrize("runtime,host,variable", [
    ("containerd", "", "pairserve_runner_runtime"),
    ("docker", "run/docker.sock", "pairserve_runner_runtime_host"),
])
def test_what_cannot_be_used_is_refused_naming_the_variable(runtime, host, variable):
    with pytest.raises(cr.ContainerRuntimeError, match=variable):
        cr.endpoint(runtime, host)


def test_a_timeout_below_one_second_is_refused():
    with pytest.raises(cr.ContainerRuntimeError, match="pairserve_gpustack_request_timeout"):
        cr.worker_env("docker", request_timeout=0)


def test_a_tagged_pin_is_stored_by_digest():
    digest = "sha256:" + "c" * 64
    assert cr.image_reference("docker.io/gpustack/runtime:pause", digest) == "docker.io/gpustack/runtime@" + digest
    assert cr.image_reference("127.0.0.1:5000/lab/runtime:health", digest) == "127.0.0.1:5000/lab/runtime@" + digest
    assert cr.image_reference("127.0.0.1:5000/lab/runtime", "") == "127.0.0.1:5000/lab/runtime"


def test_every_name_the_collection_sets_is_refused_in_the_inventorys_worker_env():
    owned = cr.worker_env("docker", "", PAUSE, HEALTH, 10).keys() | cr.worker_env("podman", "", PAUSE, HEALTH, 10).keys()
    assert owned <= set(cr.OWNED_WORKER_ENV)
    assert cr.owned_env_problems({k: "x" for k in owned}) and len(cr.owned_env_problems({k: "x" for k in owned})) == len(owned)
    assert cr.owned_env_problems({"GPUSTACK_RUNTIME_DEPLOY_LABEL_PREFIX": "x"}) == []


@pytest.mark.parametrize("runtime,host,unit", [
    ("docker", "", "docker.service"), ("podman", "", "podman.socket"),
    ("podman", "unix:///run/pairserve-lab/podman.sock", None),
])
def test_the_worker_unit_starts_after_its_runtime_with_the_collections_settings(tmp_path, runtime, host, unit):
    out = tmp_path / "gpustack-worker.service"
    variables = {
        "pairserve_gpustack_version": "2.2.3", "pairserve_gpustack_install": {"gpustack": "/opt/gpustack/bin/gpustack"},
        "pairserve_gpustack_worker_config_dir": "/etc/gpustack-worker", "pairserve_runner_runtime": runtime,
        "pairserve_runner_runtime_host": host, "pairserve_gpustack_worker_env": {"LAB_ONLY": "1"},
        "pairserve_runtime_pause_image": "docker.io/gpustack/runtime:pause",
        "pairserve_runtime_pause_image_digest": "sha256:" + "a" * 64,
        "pairserve_runtime_health_image": "docker.io/gpustack/runtime:health",
        "pairserve_runtime_health_image_digest": "sha256:" + "b" * 64,
        "pairserve_gpustack_server_host": "localhost",
    }
    # the role's own derivations, as written in its defaults
    defaults = yaml.safe_load((REPO / "roles" / "gpustack_worker" / "defaults" / "main.yml").read_text())
    variables.update({k: defaults[k] for k in ("pairserve_gpustack_worker_runtime", "pairserve_gpustack_worker_runtime_env",
                                               "pairserve_gpustack_worker_request_timeout")})
    res = run_local_play(tmp_path, "worker unit", [
        {"name": "Render", "ansible.builtin.template": {
            "src": str(REPO / "roles" / "gpustack_worker" / "templates" / "gpustack-worker.service.j2"),
            "dest": str(out)}}], variables)
    assert res.rc == 0, res.stdout[-3000:]
    text = out.read_text()
    after = [line for line in text.splitlines() if line.startswith(("After=", "Wants="))]
    assert len(after) == 2 and all((unit in line) if unit else line.endswith("network-online.target") for line in after), after
    start = [line for line in text.splitlines() if line.startswith("ExecStart=")][0]
    deployer = "Docker" if runtime == "docker" else "Podman"
    assert "GPUSTACK_RUNTIME_DEPLOY=%s" % deployer in start and "GPUSTACK_PROXY_TIMEOUT_SECONDS=3600" in start
    assert "GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY=0" in start and "LAB_ONLY=1" in start
    assert "GPUSTACK_RUNTIME_%s_PAUSE_IMAGE=docker.io/gpustack/runtime@sha256:%s" % (deployer.upper(), "a" * 64) in start
    assert ("http+unix://" + (host[len("unix://"):] if host else cr.RUNTIMES[runtime]["socket"])) in start
