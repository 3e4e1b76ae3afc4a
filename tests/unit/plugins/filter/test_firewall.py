"""The host firewall's rules (module_utils/firewall.py, filter pairserve.llm.firewall_ruleset, the firewall role's
template), first as values, then for real: the rendered table is loaded by nft into a network namespace made for
the test, with listeners on the ports a server node serves and on ports nobody documented (GPUStack's proxy, a
replica's internal channel, a UDP port). An outsider reaches SSH and the HTTPS front alone, by IPv4 and IPv6; a
scrape source the metrics ports as well; a peer every port but the plain API behind the HTTPS front; the node
itself everything. The node's own connections get their answers, ping passes, and a table of someone else's
survives every load of ours.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ansible_collections.pairserve.llm.plugins.module_utils import firewall
from support.ansible_runner import REPO, run_local_play

TEMPLATE = REPO / "roles" / "firewall" / "templates" / "pairserve-firewall.nft.j2"


def test_sources_keep_loopback_drop_duplicates_and_nested_networks():
    extra = ["198.51.100.0/24", "198.51.100.7", "2001:db8::/32"]
    got = firewall.sources(["192.0.2.10", "", "192.0.2.10", "fe80::1"], extra)
    assert got == {"ipv4": ["127.0.0.0/8", "192.0.2.10", "198.51.100.0/24"],
                   "ipv6": ["::1", "2001:db8::/32", "fe80::1"]}


@pytest.mark.parametrize("value", ["192.0.2.1/24", "node-a", "", "300.1.1.1", True, 7])
def test_a_source_that_is_not_an_address_or_network_is_refused_naming_the_variable(value):
    with pytest.raises(firewall.FirewallError, match="^pairserve_firewall_allowed_sources: "):
        firewall.sources([], [value])


def test_a_derived_source_that_is_not_an_address_is_refused_naming_where_it_came_from():
    origin = "the Ansible controller (SSH_CLIENT on node-b; pairserve_firewall_allow_ansible_controller)"
    with pytest.raises(firewall.FirewallError, match=r"^the Ansible controller \(SSH_CLIENT on node-b; .*\): "
                                                     r"'controller.lan' is not an IP address"):
        firewall.sources([{"value": "192.0.2.10", "origin": "x"}, {"value": "controller.lan", "origin": origin}], [])
    # a link-local fact with its zone is matched by its address; an empty one is dropped
    got = firewall.sources([{"value": "192.0.2.10", "origin": origin}, {"value": "", "origin": origin},
                            {"value": "fe80::1%eth0", "origin": origin}], [])
    assert got == firewall.sources(["192.0.2.10", "fe80::1"], [])
    # a scoped address given by the user is refused: nftables cannot match a zone
    with pytest.raises(firewall.FirewallError, match="^pairserve_firewall_allowed_sources: 'fe80::1%eth0' is a scoped"):
        firewall.sources([], ["fe80::1%eth0"])


def test_the_sources_must_be_a_list():
    with pytest.raises(firewall.FirewallError, match="expected a list"):
        firewall.sources([], "192.0.2.1")


SERVER = {"table": "pairserve_test",
          "derived": [{"value": "10.213.0.2", "origin": "ansible_facts of node-b"}, "fd00:213::2"],
          "allowed_sources": [], "scrape_sources": ["10.213.0.4", "fd00:213::4"], "ssh_ports": [22, 2222],
          "server": True, "tls": True, "api_port": 30080, "tls_port": 30443, "worker": True,
          "worker_metrics_port": 10151, "controller_metrics_port": 10180}


def test_a_server_node_opens_ssh_and_the_https_front_and_keeps_the_plain_port_to_itself():
    got = firewall.node_rules(SERVER)
    assert got["ssh_ports"] == ["22", "2222"] and got["public_ports"] == ["30443"]
    assert got["local_ports"] == ["30080"] and got["metrics_ports"] == ["10151", "10161", "10180"]
    assert got["peers"] == {"ipv4": ["10.213.0.2", "127.0.0.0/8"], "ipv6": ["::1", "fd00:213::2"]}
    text = got["text"]
    # the plain port is refused before the peers are let in; the last word is the refusal
    assert text.index("tcp dport { 30080 } jump refused") < text.index("ip saddr @peers_ipv4 accept")
    assert text.rstrip().splitlines()[-1] == "}" and "\t\tjump refused\n\t}" in text


def test_without_https_the_plain_api_is_the_front_door_and_a_gpu_node_opens_ssh_alone():
    plain = firewall.node_rules(dict(SERVER, tls=False))
    assert plain["public_ports"] == ["30080"] and plain["local_ports"] == []
    gpu = firewall.node_rules(dict(SERVER, server=False, controller_metrics_port=0))
    assert gpu["public_ports"] == [] and gpu["local_ports"] == [] and gpu["metrics_ports"] == ["10151"]
    assert "tcp dport { 22, 2222 } accept" in gpu["text"]


def test_a_table_that_would_cut_the_ansible_controller_off_is_refused():
    """The run that loads the table must keep reaching the node: the controller's address has to pass at the SSH
    port its connection came to, as a peer or as an SSH source."""
    cut = dict(SERVER, controller="198.51.100.9", ssh_sources=["10.213.0.4"])
    with pytest.raises(firewall.FirewallError, match="^pairserve_firewall_ssh_sources: .*198.51.100.9"):
        firewall.node_rules(cut)
    firewall.node_rules(dict(cut, ssh_sources=["198.51.100.0/24"]))  # an SSH source
    firewall.node_rules(dict(cut, allowed_sources=["198.51.100.9"]))  # a peer
    firewall.node_rules(dict(cut, ssh_sources=[]))  # SSH from anyone


def test_each_bad_input_is_refused_naming_its_variable():
    for change, variable in (({"ssh_ports": []}, "pairserve_firewall_ssh_ports"),
                             ({"ssh_ports": [0]}, "pairserve_firewall_ssh_ports"),
                             ({"scrape_sources": ["10.0.0.1/8"]}, "pairserve_firewall_scrape_sources"),
                             ({"scrape_sources": "10.0.0.1"}, "pairserve_firewall_scrape_sources"),
                             ({"ssh_sources": ["lan"]}, "pairserve_firewall_ssh_sources"),
                             ({"interfaces": ["a-name-longer-than-15"]}, "pairserve_firewall_interfaces"),
                             ({"tls_port": 70000}, "pairserve_gpustack_tls_port"),
                             ({"table": "pair-serve"}, "pairserve_firewall_table"),
                             ({"allowed_sources": ["192.0.2.1/24"]}, "pairserve_firewall_allowed_sources")):
        with pytest.raises(firewall.FirewallError, match="^" + variable + ": "):
            firewall.node_rules(dict(SERVER, **change))


def test_problems_name_each_variable():
    assert firewall.problems({}) == []
    assert firewall.problems({"pairserve_firewall_table": "pairserve_node_a",
                              "pairserve_firewall_allowed_sources": ["192.0.2.0/24"]}) == []
    got = firewall.problems({"pairserve_firewall_table": "pair-serve", "pairserve_firewall_allowed_sources": ["x", 3],
                             "pairserve_gpustack_worker_ray_port_range": "9-8"})
    assert [pair[0] for pair in got] == [
        "pairserve_firewall_table", "pairserve_firewall_allowed_sources", "pairserve_firewall_allowed_sources",
        "pairserve_gpustack_worker_ray_port_range"]
    assert "'x' is not an IP address or network" in got[1][1]
    assert firewall.problems({"pairserve_firewall_allowed_sources": "192.0.2.1"})[0][1].startswith("expected a list")
    got = firewall.problems({"pairserve_firewall_scrape_sources": ["10.0.0.1/8"], "pairserve_firewall_ssh_sources": 3,
                             "pairserve_firewall_ssh_ports": [22, "ssh"], "pairserve_firewall_interfaces": ["eth 0"]})
    assert [pair[0] for pair in got] == ["pairserve_firewall_scrape_sources", "pairserve_firewall_ssh_sources",
                                         "pairserve_firewall_ssh_ports", "pairserve_firewall_interfaces"], got
    # Every bad entry of a list, not only the first: one pass over the inventory names them all.
    got = firewall.problems({"pairserve_firewall_scrape_sources": ["10.0.0.1/8", "192.0.2.9", "lan"],
                             "pairserve_firewall_ssh_sources": ["fe80::1%eth0", "x"],
                             "pairserve_firewall_ssh_ports": [0, 22, 70000]})
    assert [(variable, problem.split(" is ")[0]) for variable, problem in got] == [
        ("pairserve_firewall_scrape_sources", "'10.0.0.1/8'"), ("pairserve_firewall_scrape_sources", "'lan'"),
        ("pairserve_firewall_ssh_sources", "'fe80::1%eth0'"), ("pairserve_firewall_ssh_sources", "'x'"),
        ("pairserve_firewall_ssh_ports", "0"), ("pairserve_firewall_ssh_ports", "70000")], got


# -- the rendered table in the kernel -------------------------------------------------------------------------

def _rendered(tmp_path: Path, spec: dict, name: str = "firewall.nft") -> Path:
    """The role's template rendered by Ansible, through the filter, and checked by `nft -c` as the role does."""
    dest = tmp_path / name
    res = run_local_play(tmp_path, "Render the firewall table", [
        {"name": "Render", "ansible.builtin.template": {"src": str(TEMPLATE), "dest": str(dest), "mode": "0644",
                                                        "validate": "nft -c -f %s"}},
        {"name": "Refused", "ansible.builtin.set_fact": {
            "bad": "{{ spec | combine({'allowed_sources': ['192.0.2.1/24']}) | pairserve.llm.firewall_ruleset }}"},
         "ignore_errors": True},
    ], {"pairserve_firewall_table": spec["table"], "spec": spec,
        "pairserve_firewall": "{{ spec | pairserve.llm.firewall_ruleset }}"})
    by_task = res.by_task
    assert by_task["Render"].get("changed") is True, res.stdout[-3000:]
    assert by_task["Refused"]["_status"] == "failed"
    assert "pairserve_firewall_allowed_sources: '192.0.2.1/24' is not an IP address" in by_task["Refused"]["msg"]
    return dest


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _in(ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], check=check, capture_output=True, text=True, timeout=60)


LISTEN = """
import socket, sys, threading
socks = []
for spec in sys.argv[1:]:
    proto, port = spec.split("/")
    kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", int(port)))
    if proto != "udp":
        s.listen(16)
    socks.append((proto, s))
def echo(c):
    while True:
        data = c.recv(64)
        if not data:
            return
        c.sendall(data)
def serve(proto, s):
    while True:
        if proto == "echo":
            c, _ = s.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()
        elif proto == "tcp":
            c, _ = s.accept(); c.sendall(b"ok"); c.close()
        else:
            data, peer = s.recvfrom(64); s.sendto(b"ok", peer)
for proto, s in socks:
    threading.Thread(target=serve, args=(proto, s), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""

PROBE = """
import socket, struct, sys
proto, source, host, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
family = socket.AF_INET6 if ":" in host else socket.AF_INET
if proto == "icmp":
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); s.settimeout(3)
    body = struct.pack("!BBHHH", 8, 0, 0, 7, 1) + b"pairserv"  # an even length: the checksum sums 16-bit words
    total = sum(struct.unpack("!8H", body))
    total = (total >> 16) + (total & 0xFFFF); total += total >> 16
    body = body[:2] + struct.pack("!H", ~total & 0xFFFF) + body[4:]
    s.sendto(body, (host, 0))
    try:
        while True:
            data, peer = s.recvfrom(256)
            if peer[0] == host and data[20] == 0:
                print("ok"); break
    except socket.timeout:
        print("timeout")
    sys.exit(0)
s = socket.socket(family, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM); s.settimeout(3)
if source != "-":
    s.bind((source, 0))
try:
    s.connect((host, port))
    if proto == "udp":
        s.send(b"hi")
    print(s.recv(2).decode())
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
except OSError as exc:
    print("error %s" % exc.errno)
"""


@pytest.fixture
def namespaces():
    """A node namespace and a LAN namespace joined by a veth pair; removed, with their processes, after. The LAN
    holds a peer (10.213.0.2, fd00:213::2), an outsider (.3, ::3) and a scrape source (.4, ::4)."""
    if os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"):
        pytest.fail("this test loads nftables rules into network namespaces: it needs root, nft and ip "
                    "(scripts/bootstrap.sh installs nftables and iproute2)")
    tag = uuid.uuid4().hex[:6]
    node, lan = "ps-node-" + tag, "ps-lan-" + tag
    _ip("netns", "add", node)
    _ip("netns", "add", lan)
    procs = []
    try:
        _ip("link", "add", "psn" + tag, "type", "veth", "peer", "name", "pso" + tag)
        _ip("link", "set", "psn" + tag, "netns", node)
        _ip("link", "set", "pso" + tag, "netns", lan)
        _in(node, "ip", "addr", "add", "10.213.0.1/24", "dev", "psn" + tag)
        _in(node, "ip", "-6", "addr", "add", "fd00:213::1/64", "dev", "psn" + tag, "nodad")
        for last in (2, 3, 4):
            _in(lan, "ip", "addr", "add", "10.213.0.%d/24" % last, "dev", "pso" + tag)
            _in(lan, "ip", "-6", "addr", "add", "fd00:213::%d/64" % last, "dev", "pso" + tag, "nodad")
        for ns, dev in ((node, "psn" + tag), (lan, "pso" + tag)):
            _in(ns, "ip", "link", "set", dev, "up")
            _in(ns, "ip", "link", "set", "lo", "up")
        yield {"node": node, "lan": lan, "procs": procs, "node_if": "psn" + tag}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        for ns in (node, lan):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


# What a server node with HTTPS listens on: SSH, the HTTPS front, GPUStack's plain API, its proxy port (30079) and
# metrics, the worker API and metrics, the controller's metrics, a replica, Ray, and what nobody documented: a
# replica's internal channel on a random port and a UDP port.
TCP_PORTS = [22, 2222, 30443, 30080, 30079, 10161, 10150, 10151, 10180, 40000, 41000, 45678]
UDP_PORT = 5555
SEEN = {  # (source v4, source v6): the TCP ports that answer it; every other one is refused
    "outsider": (("10.213.0.3", "fd00:213::3"), {22, 2222, 30443}),
    "scrape": (("10.213.0.4", "fd00:213::4"), {22, 2222, 30443, 10151, 10161, 10180}),
    "peer": (("10.213.0.2", "fd00:213::2"), set(TCP_PORTS) - {30080}),
}


def test_the_table_denies_by_default_whatever_port_a_process_opens(tmp_path, namespaces):
    node, lan = namespaces["node"], namespaces["lan"]
    rules = _rendered(tmp_path, SERVER)
    # Someone else's table in the same ruleset: it must come through every load of ours untouched.
    _in(node, "nft", "add", "table", "inet", "theirs")
    _in(node, "nft", "add", "chain", "inet", "theirs", "input", "{ type filter hook input priority 10; }")
    _in(node, "nft", "-f", str(rules))
    _in(node, "nft", "-f", str(rules))  # loaded again: replaced in one transaction, not doubled
    listing = _in(node, "nft", "list", "ruleset").stdout
    assert listing.count("table inet pairserve_test") == 1 and "table inet theirs" in listing

    server = subprocess.Popen(["ip", "netns", "exec", node, sys.executable, "-c", LISTEN,
                               *["tcp/%d" % p for p in TCP_PORTS], "udp/%d" % UDP_PORT],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    namespaces["procs"].append(server)
    assert server.stdout.readline().strip() == "ready"

    def probe(ns, proto, source, host, port=0):
        return _in(ns, sys.executable, "-c", PROBE, proto, source, host, str(port)).stdout.strip()

    seen = {}
    for who, (addresses, _open) in SEEN.items():
        for source, host in zip(addresses, ("10.213.0.1", "fd00:213::1")):
            seen[(who, host)] = {port for port in TCP_PORTS if probe(lan, "tcp", source, host, port) == "ok"}
            refused = [port for port in TCP_PORTS if port not in seen[(who, host)]
                       and probe(lan, "tcp", source, host, port) != "refused"]
            assert not refused, (who, host, refused)  # a refusal is a reset, not a silent drop
    assert seen == {(who, host): ports for who, (_addresses, ports) in SEEN.items()
                    for host in ("10.213.0.1", "fd00:213::1")}, seen
    # the node reaches every port of its own, the plain API included
    for port in TCP_PORTS:
        assert probe(node, "tcp", "-", "127.0.0.1", port) == "ok", port
        assert probe(node, "tcp", "-", "10.213.0.1", port) == "ok", port
    # UDP: a peer is answered, an outsider refused by ICMP
    assert probe(lan, "udp", "10.213.0.2", "10.213.0.1", UDP_PORT) == "ok"
    assert probe(lan, "udp", "10.213.0.3", "10.213.0.1", UDP_PORT) != "ok"
    # ping passes (the ICMP the network needs); the node's own connection out gets its answer
    assert probe(lan, "icmp", "-", "10.213.0.1") == "ok"
    back = subprocess.Popen(["ip", "netns", "exec", lan, sys.executable, "-c", LISTEN, "tcp/8080"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    namespaces["procs"].append(back)
    assert back.stdout.readline().strip() == "ready"
    assert probe(node, "tcp", "-", "10.213.0.3", 8080) == "ok"
    counters = _in(node, "nft", "list", "chain", "inet", "pairserve_test", "refused").stdout
    assert "reject with tcp reset" in counters and "counter packets 0 bytes 0 reject with tcp reset" not in counters

    # SSH from the given sources alone: the outsider is refused there too, the scrape source (named) is not.
    _in(node, "nft", "-f", str(_rendered(tmp_path, dict(SERVER, ssh_sources=["10.213.0.4"]), "ssh.nft")))
    assert probe(lan, "tcp", "10.213.0.3", "10.213.0.1", 22) == "refused"
    assert probe(lan, "tcp", "10.213.0.4", "10.213.0.1", 22) == "ok"
    # A table that judges another interface leaves this one's traffic alone.
    _in(node, "nft", "-f", str(_rendered(tmp_path, dict(SERVER, interfaces=["mgmt0"]), "scoped.nft")))
    assert probe(lan, "tcp", "10.213.0.3", "10.213.0.1", 45678) == "ok"
    _in(node, "nft", "-f", str(_rendered(tmp_path, dict(SERVER, interfaces=[namespaces["node_if"]]), "own.nft")))
    assert probe(lan, "tcp", "10.213.0.3", "10.213.0.1", 45678) == "refused"

    # Removing ours (what the role's absent tasks do) leaves theirs, and the ports open again.
    _in(node, "nft", "delete", "table", "inet", "pairserve_test")
    assert "table inet theirs" in _in(node, "nft", "list", "ruleset").stdout
    assert probe(lan, "tcp", "10.213.0.3", "10.213.0.1", 45678) == "ok"
