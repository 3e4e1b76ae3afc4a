"""Only the route reaches the replicas: an outsider in a network namespace of its own (joined to the lab host by a
veth pair, routed to the nodes' addresses as any machine on the LAN is) is refused at every replica port, worker
API and worker metrics port of both nodes, and is served through the route with a key; the host itself (the
GPUStack server's node, the controller) still reaches the replicas directly.

Each refusal is counted by the node's own table (its guarded chain's counter grows by at least one packet per
refused port), so a port nobody listens on cannot pass for a refused one: every port probed is first shown to
answer from the host.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from lab.api import LAB_CA, ROUTE, items, read_keys

# GPUStack's plain port, the HTTPS front's port, and node-a's table that keeps the plain one for the node itself.
API_PORT, TLS_PORT, SERVER_TABLE = 30080, 30443, "pairserve_server"
NODES = {"node-a": {"table": "pairserve_node_a", "worker": 10150, "metrics": 10151},
         "node-b": {"table": "pairserve_node_b", "worker": 10170, "metrics": 10171}}

PROBE = """
import socket, sys
s = socket.socket(); s.settimeout(5)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except ConnectionRefusedError:
    print("refused")
except OSError as exc:
    print("error %s" % exc)
"""

CHAT = """
import json, ssl, sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[3].encode(),
                             headers={"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=120, context=ssl.create_default_context(cafile=sys.argv[4])) as resp:
        print(json.dumps({"status": resp.status, "body": json.loads(resp.read())}))
except urllib.error.HTTPError as err:
    print(json.dumps({"status": err.code, "body": None}))
"""


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=180)


def _probe(address: str, port: int, namespace: str | None = None) -> str:
    cmd = [sys.executable, "-c", PROBE, address, str(port)]
    if namespace:
        cmd = ["ip", "netns", "exec", namespace] + cmd
    return _run(*cmd).stdout.strip()


def _refused_packets(table: str) -> int:
    chain = _run("nft", "list", "chain", "inet", table, "guarded").stdout
    match = re.search(r"counter packets (\d+) bytes \d+ reject with tcp reset", chain)
    assert match, chain
    return int(match.group(1))


@pytest.fixture(scope="module")
def keys():
    return read_keys()


def _replica_ports(keys) -> dict:
    """{node: (worker IP, replica port)} of each running replica."""
    out = {}
    for inst in items("/v2/model-instances", keys["management"]):
        if inst["model_name"].startswith(ROUTE + "-") and inst["state"] == "running":
            out[inst["worker_name"]] = (inst["worker_ip"], inst["port"])
    assert sorted(out) == sorted(NODES), out
    return out


def test_each_node_has_its_table_loaded_by_its_unit():
    for node, ports in NODES.items():
        listing = _run("nft", "list", "table", "inet", ports["table"]).stdout
        assert "jump guarded" in listing and "reject with tcp reset" in listing, listing
        # nft shows the guarded ports merged into ranges (10150, 10151 -> 10150-10151).
        elements = re.search(r"tcp dport \{ ([^}]*) \} jump guarded", listing).group(1).split(", ")
        spans = [tuple(int(p) for p in (e.split("-") * 2)[:2]) for e in elements]
        for port in (ports["worker"], ports["metrics"]):
            assert any(lo <= port <= hi for lo, hi in spans), (node, port, elements)
        state = _run("podman", "exec", f"pairserve-lab-{node}", "systemctl", "is-active", "pairserve-firewall",
                     check=False).stdout.strip()
        assert state == "active", (node, state)


@pytest.mark.parametrize("node", sorted(NODES))
def test_an_outsider_is_refused_at_the_replica_and_the_worker_ports(keys, outsider, node):
    address, replica_port = _replica_ports(keys)[node]
    table = NODES[node]["table"]
    for port in (replica_port, NODES[node]["worker"], NODES[node]["metrics"]):
        assert _probe(address, port) == "open", f"{node}: nothing answers {address}:{port} from the host itself"
        before = _refused_packets(table)
        assert _probe(address, port, outsider) == "refused", f"{node}: the outsider reached {address}:{port}"
        assert _refused_packets(table) > before, f"{node}: {address}:{port} refused, but not by {table}"


def test_the_outsider_is_served_through_the_route_with_a_key(keys, outsider):
    address = _replica_ports(keys)["node-a"][0]
    body = json.dumps({"model": ROUTE, "max_tokens": 4, "temperature": 0,
                       "messages": [{"role": "user", "content": "Is the pair ready?"}]})
    url = f"https://{address}:{TLS_PORT}/v1/chat/completions"
    out = _run("ip", "netns", "exec", outsider, sys.executable, "-c", CHAT, url, keys["inference"], body, str(LAB_CA))
    answer = json.loads(out.stdout)
    assert answer["status"] == 200 and answer["body"]["choices"], answer
    # With a wrong key the route refuses it: GPUStack's keys are the only door left.
    out = _run("ip", "netns", "exec", outsider, sys.executable, "-c", CHAT, url, "sk-pairserve-not-a-key", body,
               str(LAB_CA))
    assert json.loads(out.stdout)["status"] == 401, out.stdout


def test_the_outsider_is_refused_at_the_plain_api_port(keys, outsider):
    """GPUStack itself listens on 0.0.0.0:30080 in plain HTTP; with HTTPS on, node-a's server table leaves that port
    to the node (the HTTPS front, the controller service, the day-2 plays on 127.0.0.1)."""
    address = _replica_ports(keys)["node-a"][0]
    assert _probe(address, API_PORT) == "open", "GPUStack's plain port does not answer the node itself"
    before = _server_refusals()
    assert _probe(address, API_PORT, outsider) == "refused", f"the outsider reached {address}:{API_PORT} in plain HTTP"
    assert _server_refusals() > before, f"{address}:{API_PORT} refused, but not by table {SERVER_TABLE}"


def _server_refusals() -> int:
    chain = _run("nft", "list", "chain", "inet", SERVER_TABLE, "input").stdout
    match = re.search(r"counter packets (\d+) bytes \d+ reject with tcp reset", chain)
    assert match, chain
    return int(match.group(1))
