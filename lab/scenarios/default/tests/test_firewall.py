"""Deny by default: an outsider in a network namespace of its own (joined to the lab host by a veth pair, routed to
the nodes' addresses as any machine on the LAN is) is refused at every port a process of the nodes listens on but
SSH and the HTTPS front, and is served through the route with a key; its second address, a scrape source, reaches
the metrics ports as well; the host itself (the GPUStack server's node, the controller) still reaches the replicas.

Each refusal is counted by node-a's table, which judges the outsider's veth (the lab's nodes share one network
namespace, so one table judges the LAN: lab/inventory/group_vars/all/control_plane.yml): its refused chain's
counter grows by at least one packet per refused port, so a port nobody listens on cannot pass for a refused one,
and every port probed is first shown to answer from the host.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from lab.api import ENGINES, LAB_CA, REPO, ROUTE, engine_containers, inspect, items, read_keys
from support.lab_outsider import SCRAPE_ADDR

# GPUStack's plain port, the HTTPS front's port, and the table that judges the outsider's LAN (node-a's).
API_PORT, TLS_PORT, LAN_TABLE = 30080, 30443, "pairserve_node_a"
NODES = {"node-a": {"table": "pairserve_node_a", "worker": 10150, "metrics": 10151, "ssh": 2222,
                    "interface": "psl-out-h"},
         "node-b": {"table": "pairserve_node_b", "worker": 10170, "metrics": 10171, "ssh": 2223,
                    "interface": "psl-lan-node-b"}}
SERVER_METRICS_PORT = 10161

PROBE = """
import socket, sys
s = socket.socket(); s.settimeout(5)
if len(sys.argv) > 3:
    s.bind((sys.argv[3], 0))
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


def _probe(address: str, port: int, namespace: str | None = None, source: str | None = None) -> str:
    cmd = [sys.executable, "-c", PROBE, address, str(port)] + ([source] if source else [])
    if namespace:
        cmd = ["ip", "netns", "exec", namespace] + cmd
    return _run(*cmd).stdout.strip()


def _refused_packets(table: str = LAN_TABLE) -> int:
    chain = _run("nft", "list", "chain", "inet", table, "refused").stdout
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
        # deny by default on the interface the node's table judges: the last word of its input chain is refusal
        assert f'iifname != "{ports["interface"]}" accept' in listing, listing
        assert re.search(r"jump refused\s*\}", listing) and "reject with tcp reset" in listing, listing
        state = _run("podman", "exec", f"pairserve-lab-{node}", "systemctl", "is-active", "pairserve-firewall",
                     check=False).stdout.strip()
        assert state == "active", (node, state)


@pytest.mark.parametrize("node", sorted(NODES))
def test_an_outsider_is_refused_at_the_replica_and_the_worker_ports(keys, outsider, node):
    address, replica_port = _replica_ports(keys)[node]
    for port in (replica_port, NODES[node]["worker"], NODES[node]["metrics"]):
        assert _probe(address, port) == "open", f"{node}: nothing answers {address}:{port} from the host itself"
        before = _refused_packets()
        assert _probe(address, port, outsider) == "refused", f"{node}: the outsider reached {address}:{port}"
        assert _refused_packets() > before, f"{node}: {address}:{port} refused, but not by {LAN_TABLE}"


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
    before = _refused_packets()
    for source in (None, SCRAPE_ADDR):
        assert _probe(address, API_PORT, outsider, source) == "refused", f"{source} reached {address}:{API_PORT}"
    assert _refused_packets() > before, f"{address}:{API_PORT} refused, but not by table {LAN_TABLE}"


# --- docs/network.md against what a LAN machine sees ------------------------------------------------------------

def _doc_rows() -> dict:
    """{first cell: last cell} of docs/network.md's port table."""
    text = (REPO / "docs" / "network.md").read_text(encoding="utf-8")
    table = text.split("## Ports", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| port ")]
    return {r[0]: r[-1] for r in rows}


def _listeners() -> list:
    """[(address, port, pids)] of every TCP socket that listens on this host (ss, not a list of known ports)."""
    found = []
    for line in _run("ss", "-Hltnp").stdout.splitlines():
        address, port = line.split()[3].rsplit(":", 1)
        found.append((address.strip("[]"), int(port), [int(p) for p in re.findall(r"pid=(\d+)", line)]))
    return found


def _lab_owners() -> dict:
    """{container id: owner} of both nodes and of every container the workers started (replicas, pause)."""
    owners = {}
    for engine in ENGINES:
        for name, _engine in engine_containers(engine):
            if not name.startswith("pairserve-lab-"):  # the podman service also lists the node containers
                owners[inspect(engine, name)["Id"]] = "replica " + name
    for node in NODES:
        owners[_run("podman", "inspect", "--format", "{{.Id}}", f"pairserve-lab-{node}").stdout.strip()] = node
    return owners


def _owner(pid: int, owners: dict) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            cgroup = handle.read()
    except OSError:
        return None
    return next((owner for cid, owner in owners.items() if cid in cgroup), None)


def _row(port: int, owner: str, replica_ports: set) -> str | None:
    """The row of network.md's table that documents a listener of the lab's nodes, by its port and owner."""
    if owner == "node-a":
        return {TLS_PORT: "`pairserve_gpustack_tls_port`", API_PORT: "`pairserve_gpustack_api_port`",
                SERVER_METRICS_PORT: "the server's metrics port", 30079: "GPUStack's proxy port",
                10180: "`pairserve_controller_metrics_port`", 5432: "`pairserve_gpustack_db_port`"}.get(port) or (
            _row(port, "node", replica_ports))
    if owner in NODES or owner == "node":
        for node in NODES.values():
            if port == node["worker"]:
                return "`pairserve_gpustack_worker_port`"
            if port == node["metrics"]:
                return "`pairserve_gpustack_worker_metrics_port`"
            if port == node["ssh"]:
                return "SSH"
        return None
    if owner.startswith("replica "):
        return ("`pairserve_gpustack_worker_service_port_range`" if port in replica_ports
                else "the replicas' vLLM worker processes")
    return None


def test_network_md_lists_every_port_a_lan_machine_reaches(keys, outsider):
    """Every TCP port that a process of the nodes (or of a replica they started) listens on, taken from `ss`, is
    probed from the outsider and from the scrape source: each one that answers must be a row of docs/network.md's
    table whose last column lets that source in ("anyone ...", "scrape sources ..."), every other port must be
    refused by the table, and each open row the lab runs must be seen answering: the page and the wire agree both
    ways, whatever port a process opened."""
    rows = _doc_rows()
    replicas = _replica_ports(keys)
    address = replicas["node-a"][0]
    owners = _lab_owners()
    answered, refused, undocumented, wrong = {}, [], [], []
    for bound, port, pids in _listeners():
        owner = next((o for o in (_owner(pid, owners) for pid in pids) if o), None)
        if owner is None:
            continue  # not the lab's nodes: this host's own services, the lab's stand-ins (registry, hub, engines)
        if bound.startswith("127.") or bound == "::1":
            continue  # loopback: no LAN machine reaches it
        for who, source in (("anyone", None), ("scrape sources", SCRAPE_ADDR)):
            if _probe(address, port, outsider, source) != "open":
                refused.append((port, owner, who))
                continue
            row = _row(port, owner, {p for _address, p in replicas.values()})
            key = next((k for k in rows if row and k.startswith(row)), None)
            if key is None:
                undocumented.append((port, owner, row))
                continue
            allowed = ("anyone",) if who == "anyone" else ("anyone", "scrape sources")
            if not rows[key].startswith(allowed):
                wrong.append((port, owner, who, rows[key]))
            answered.setdefault(row, set()).add(who)
    assert not undocumented, f"ports that answer a LAN machine and network.md does not list: {undocumented}"
    assert not wrong, f"ports that answer a LAN machine whom network.md does not let in: {wrong}"
    # What the page opens, seen open: the HTTPS front to anyone, the metrics ports to the scrape source.
    for row, who in (("`pairserve_gpustack_tls_port`", "anyone"), ("the server's metrics port", "scrape sources"),
                     ("`pairserve_gpustack_worker_metrics_port`", "scrape sources")):
        assert who in answered.get(row, set()), f"network.md opens {row} to {who}; the lab found it closed: {answered}"
    # ...and nothing else answers the outsider: whatever port a process opened (the replicas' internal channels,
    # GPUStack's proxy port) is refused. The lab's sshd listens on 127.0.0.1 alone, so SSH is not among what a LAN
    # machine reaches here; the table opens the port of the run's own SSH connection all the same (the kernel test
    # of the rendered table, tests/unit/plugins/filter/test_firewall.py, reaches SSH from the LAN).
    assert {row for row, whom in answered.items() if "anyone" in whom} == {"`pairserve_gpustack_tls_port`"}, answered
    listing = _run("nft", "list", "table", "inet", LAN_TABLE).stdout
    assert re.search(r"tcp dport \{ 22, %d \} accept" % NODES["node-a"]["ssh"], listing), listing
    assert any(owner.startswith("replica ") for _port, owner, _who in refused), refused
