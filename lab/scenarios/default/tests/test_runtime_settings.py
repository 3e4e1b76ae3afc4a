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
# GET /_ping on an engine's unix socket (Docker's and podman's compatible API both answer "OK").
PING = """
import http.client, socket, sys
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sys.argv[1])
conn = Unix("localhost", timeout=10)
conn.request("GET", "/_ping")
resp = conn.getresponse()
print(resp.status, resp.read().decode())
"""


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
    # the runtime's own socket on the node (the product's default; the lab inventory names no endpoint for the node)
    socket = {"docker": "/var/run/docker.sock", "podman": "/run/podman/podman.sock"}[runtime]
    assert env["GPUSTACK_RUNTIME_%s_HOST" % deployer.upper()] == "http+unix://" + socket, env
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
def test_the_worker_starts_after_its_runtimes_unit_which_the_product_enabled(node):
    """The runtime's own unit (docker.service, podman.socket: in the lab a stand-in that forwards to the host's engine,
    lab/nodes.py runtime_units) is enabled and running, and the worker is ordered after it and wants it: at boot
    gpustack-runtime would otherwise find no deployer and cache that for 60 s."""
    host = testinfra.get_host(f"podman://pairserve-lab-{node}")
    unit = {"docker": "docker.service", "podman": "podman.socket"}[runtime_of(node)]
    assert host.service(unit).is_enabled and host.service(unit).is_running, unit
    after = host.check_output("systemctl show gpustack-worker -p After --value").split()
    wants = host.check_output("systemctl show gpustack-worker -p Wants --value").split()
    assert unit in after and unit in wants and "network-online.target" in after, (after, wants)
    # The other runtime's unit is not named: the node has one runtime.
    other = {"docker.service": "podman.socket", "podman.socket": "docker.service"}[unit]
    assert other not in after and other not in wants, (after, wants)
    # And the worker's deployer answers through that socket from the node itself (what the worker role pinged).
    socket = {"docker.service": "/var/run/docker.sock", "podman.socket": "/run/podman/podman.sock"}[unit]
    pong = host.run("python3 -c %s %s", PING, socket)
    assert pong.rc == 0 and pong.stdout.split() == ["200", "OK"], (pong.stdout, pong.stderr)
