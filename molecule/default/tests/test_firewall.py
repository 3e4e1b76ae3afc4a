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

from lab.api import ROUTE, items, read_keys

NODES = {"node-a": {"table": "pairserve_node_a", "worker": 10150, "metrics": 10151},
         "node-b": {"table": "pairserve_node_b", "worker": 10170, "metrics": 10171}}
NS, HOST_END, NS_END = "pairserve-lab-outsider", "psl-out-h", "psl-out-n"
HOST_ADDR, NS_ADDR = "10.214.0.1", "10.214.0.2"

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
import json, sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[3].encode(),
                             headers={"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=120) as resp:
        print(json.dumps({"status": resp.status, "body": json.loads(resp.read())}))
except urllib.error.HTTPError as err:
    print(json.dumps({"status": err.code, "body": None}))
"""


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def outsider():
    """The namespace, its veth pair and its default route through the lab host; all removed after."""
    _run("ip", "netns", "del", NS, check=False)
    _run("ip", "link", "del", HOST_END, check=False)
    _run("ip", "netns", "add", NS)
    try:
        _run("ip", "link", "add", HOST_END, "type", "veth", "peer", "name", NS_END)
        _run("ip", "link", "set", NS_END, "netns", NS)
        _run("ip", "addr", "add", HOST_ADDR + "/30", "dev", HOST_END)
        _run("ip", "link", "set", HOST_END, "up")
        for cmd in (("ip", "addr", "add", NS_ADDR + "/30", "dev", NS_END), ("ip", "link", "set", NS_END, "up"),
                    ("ip", "link", "set", "lo", "up"), ("ip", "route", "add", "default", "via", HOST_ADDR)):
            _run("ip", "netns", "exec", NS, *cmd)
        yield NS
    finally:
        _run("ip", "link", "del", HOST_END, check=False)
        _run("ip", "netns", "del", NS, check=False)


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
    out = _run("ip", "netns", "exec", outsider, sys.executable, "-c", CHAT,
               f"http://{address}:30080/v1/chat/completions", keys["inference"], body)
    answer = json.loads(out.stdout)
    assert answer["status"] == 200 and answer["body"]["choices"], answer
    # With a wrong key the route refuses it: GPUStack's keys are the only door left.
    out = _run("ip", "netns", "exec", outsider, sys.executable, "-c", CHAT,
               f"http://{address}:30080/v1/chat/completions", "sk-pairserve-not-a-key", body)
    assert json.loads(out.stdout)["status"] == 401, out.stdout
