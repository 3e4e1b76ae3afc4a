"""GPUStack behind HTTPS (role gpustack_server, tasks/tls.yml) with the lab's own CA (lab/tls.py): the route answers
over HTTPS for a client that trusts that CA, and refuses a client with another CA and a plain-HTTP request on the
HTTPS port; the workers joined over HTTPS, trusting the CA through their nodes' trust store; the certificate the
front serves is the inventory's. The plain port from another machine: test_firewall.py."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request

import pytest
import testinfra

from lab.api import HTTPS_API, LAB_CA, NODE_A, ROUTE, items, read_keys
from lab.tls import write_other_ca

NODE_B = NODE_A.replace("node-a", "node-b")
BODY = json.dumps({"model": ROUTE, "max_tokens": 4, "temperature": 0,
                   "messages": [{"role": "user", "content": "Is the pair ready?"}]}).encode()


@pytest.fixture(scope="module")
def keys():
    return read_keys()


def _chat(key: str, context: ssl.SSLContext, url: str = HTTPS_API):
    req = urllib.request.Request(url + "/v1/chat/completions", data=BODY,
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120, context=context) as resp:
        return resp.status, json.loads(resp.read())


def test_the_route_answers_over_https_with_the_lab_ca(keys):
    status, body = _chat(keys["inference"], ssl.create_default_context(cafile=str(LAB_CA)))
    assert status == 200 and body["choices"][0]["message"], body


def test_a_client_with_another_ca_is_refused(keys, tmp_path):
    write_other_ca(tmp_path)
    with pytest.raises(urllib.error.URLError) as caught:
        _chat(keys["inference"], ssl.create_default_context(cafile=str(tmp_path / "ca.crt")))
    assert isinstance(caught.value.reason, ssl.SSLCertVerificationError), caught.value


def test_plain_http_on_the_https_port_is_refused(keys):
    with pytest.raises(urllib.error.HTTPError) as caught:
        _chat(keys["inference"], None, HTTPS_API.replace("https://", "http://"))
    assert caught.value.code == 400, caught.value


def test_the_front_serves_the_inventory_certificate():
    """The certificate on the wire is the one in the inventory (lab/tls.py's), and its key stays root's on node-a."""
    host, port = HTTPS_API.split("://")[1].split(":")
    context = ssl.create_default_context(cafile=str(LAB_CA))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            served = tls.getpeercert(binary_form=True)
    wanted = ssl.PEM_cert_to_DER_cert((LAB_CA.parent / "gpustack.crt").read_text())
    assert served == wanted
    key = testinfra.get_host(f"podman://{NODE_A}").file("/etc/pairserve/tls/gpustack.key")
    assert (key.mode, key.user, key.group) == (0o600, "root", "root")


@pytest.mark.parametrize("node", [NODE_A, NODE_B])
def test_the_workers_joined_over_https_trusting_the_lab_ca(node, keys):
    host = testinfra.get_host(f"podman://{node}")
    config = host.file("/etc/gpustack-worker/worker.yaml").content_string
    assert 'server_url: "https://' in config, config.splitlines()[:4]
    trusted = host.file("/usr/local/share/ca-certificates/pairserve-gpustack-ca.crt").content_string
    assert trusted.strip() == LAB_CA.read_text().strip()
    # The system bundle GPUStack's worker verifies against holds it (update-ca-certificates ran).
    bundle = host.file("/etc/ssl/certs/ca-certificates.crt").content_string
    assert LAB_CA.read_text().strip() in bundle
    worker = node.replace("pairserve-lab-", "")
    states = {w["name"]: w["state"] for w in items("/v2/workers", keys["management"])}
    assert states.get(worker) == "ready", states
