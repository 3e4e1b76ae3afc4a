"""What each node's GPUStack gets from the collection, not from the lab: gpustack-runtime's deployer and engine
endpoint from the node's pairserve_runner_runtime (Docker on node-b, podman on node-a), the pinned pause and health
images by digest, GPU numbering in NVML order, and one request timeout on the HTTPS front, the server and every
worker. Read on the nodes (testinfra's podman backend), from the units and files site.yml wrote."""

from __future__ import annotations

import re

import pytest
import testinfra

from lab.api import lab_pins, runtime_of

NODES = ("node-a", "node-b")
TIMEOUT = "3600"  # pairserve_gpustack_request_timeout's default: the lab does not set it


def worker_env(node):
    unit = testinfra.get_host(f"podman://pairserve-lab-{node}").check_output("systemctl cat gpustack-worker")
    start = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert len(start) == 1, unit
    return dict(re.findall(r"(?:^|\s)'?([A-Z][A-Z0-9_]*)=([^\s']*)'?", start[0]))


@pytest.mark.parametrize("node", NODES)
def test_the_worker_deploys_through_its_nodes_runtime_with_the_pinned_images(node):
    env, pins, runtime = worker_env(node), lab_pins(), runtime_of(node)
    deployer = {"docker": "Docker", "podman": "Podman"}[runtime]
    assert env["GPUSTACK_RUNTIME_DEPLOY"] == deployer, env
    assert env["GPUSTACK_RUNTIME_%s_HOST" % deployer.upper()] == "http+unix:///run/pairserve-lab/%s.sock" % runtime
    for role, variable in (("pause", "PAUSE_IMAGE"), ("health", "UNHEALTHY_RESTART_IMAGE")):
        pinned = "%s@%s" % (pins["pairserve_runtime_%s_image" % role].rsplit(":", 1)[0],
                            pins["pairserve_runtime_%s_image_digest" % role])
        assert env["GPUSTACK_RUNTIME_%s_%s" % (deployer.upper(), variable)] == pinned, env
    # the other deployer's settings are not there to mislead anyone
    other = "PODMAN" if deployer == "Docker" else "DOCKER"
    assert not [k for k in env if k.startswith("GPUSTACK_RUNTIME_%s_" % other)], env
    assert env["GPUSTACK_RUNTIME_DETECT_PHYSICAL_INDEX_PRIORITY"] == "0", env
    assert env["GPUSTACK_PROXY_TIMEOUT_SECONDS"] == TIMEOUT, env


def test_one_request_timeout_on_the_front_and_the_server():
    node_a = testinfra.get_host("podman://pairserve-lab-node-a")
    server = node_a.check_output("systemctl cat gpustack-server")
    assert "Environment=GPUSTACK_PROXY_TIMEOUT_SECONDS=%s" % TIMEOUT in server, server
    front = node_a.file("/etc/nginx/conf.d/pairserve-gpustack.conf").content_string
    assert "proxy_read_timeout %ss;" % TIMEOUT in front and "proxy_send_timeout %ss;" % TIMEOUT in front, front


@pytest.mark.parametrize("node", NODES)
def test_the_worker_starts_after_the_network_and_names_no_unit_for_the_hosts_engine(node):
    # The lab's engines are the host's (pairserve_runner_runtime_host): no unit of the node provides them, so the
    # worker is ordered after none; on a node's own socket it is ordered after docker.service / podman.socket
    # (tests/unit/plugins/module_utils/test_container_runtime.py renders both).
    unit = testinfra.get_host(f"podman://pairserve-lab-{node}").check_output("systemctl show gpustack-worker -p After")
    assert "network-online.target" in unit and "docker.service" not in unit and "podman.socket" not in unit, unit
