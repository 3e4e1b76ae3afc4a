"""The host firewall's rules (module_utils/firewall.py, filter pairserve.llm.firewall_rules, the worker role's
template), first as values, then for real: the rendered table is loaded by nft into a network namespace made for
the test, and an outsider in a namespace of its own is refused at every guarded port while an allowed source and
loopback get through, an unguarded port (the route's) stays open to all, and a table of someone else's survives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / ".cache" / "collections"))

from ansible_collections.pairserve.llm.plugins.module_utils import firewall  # noqa: E402
from lab.ansible_runner import REPO, run_local_play  # noqa: E402

TEMPLATE = REPO / "roles" / "gpustack_worker" / "templates" / "pairserve-firewall.nft.j2"


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


def test_guarded_ports_default_to_gpustacks_ranges_and_check_each_value():
    assert firewall.guarded_ports(10150, 10151) == ["10150", "10151", "40000-40063", "41000-41999"]
    assert firewall.guarded_ports(10170, "10171", "40100-40163", "42000-42999") == [
        "10170", "10171", "40100-40163", "42000-42999"]
    for args, variable in (((0, 10151), "pairserve_gpustack_worker_port"),
                           ((10150, True), "pairserve_gpustack_worker_metrics_port"),
                           ((10150, 10151, "40163-40100"), "pairserve_gpustack_worker_service_port_range"),
                           ((10150, 10151, "", "41000"), "pairserve_gpustack_worker_ray_port_range")):
        with pytest.raises(firewall.FirewallError, match="^" + variable + ": "):
            firewall.guarded_ports(*args)


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


# -- the rendered table in the kernel -------------------------------------------------------------------------

def _rendered(tmp_path: Path, table: str, allowed: list, derived: list) -> Path:
    """The role's template rendered by Ansible, through the filter, and checked by `nft -c` as the role does."""
    dest = tmp_path / "firewall.nft"
    res = run_local_play(tmp_path, "Render the firewall table", [
        {"name": "Render", "ansible.builtin.template": {"src": str(TEMPLATE), "dest": str(dest), "mode": "0644",
                                                        "validate": "nft -c -f %s"}},
        {"name": "Refused", "ansible.builtin.set_fact": {
            "bad": "{{ [] | pairserve.llm.firewall_rules(['192.0.2.1/24'], 10150, 10151) }}"},
         "ignore_errors": True},
    ], {"pairserve_firewall_table": table, "pairserve_firewall_allow_ansible_controller": True,
        "pairserve_firewall": "{{ %s | pairserve.llm.firewall_rules(%s, 10150, 10151, '40000-40001', "
                              "'41000-41001') }}" % (derived, allowed)})
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
for port in map(int, sys.argv[1:]):
    s = socket.socket(socket.AF_INET6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port)); s.listen(16); socks.append(s)
def serve(s):
    while True:
        c, _ = s.accept(); c.sendall(b"ok"); c.close()
for s in socks:
    threading.Thread(target=serve, args=(s,), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""

PROBE = """
import socket, sys
source, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
family = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(family); s.settimeout(5)
if source != "-":
    s.bind((source, 0))
try:
    s.connect((host, port)); print(s.recv(2).decode())
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
"""


@pytest.fixture
def namespaces():
    """A node namespace and an outsider namespace joined by a veth pair; removed, with their processes, after."""
    if os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"):
        pytest.fail("this test loads nftables rules into network namespaces: it needs root, nft and ip "
                    "(scripts/bootstrap.sh installs nftables and iproute2)")
    tag = uuid.uuid4().hex[:6]
    node, outsider = "ps-node-" + tag, "ps-out-" + tag
    _ip("netns", "add", node)
    _ip("netns", "add", outsider)
    procs = []
    try:
        _ip("link", "add", "psn" + tag, "type", "veth", "peer", "name", "pso" + tag)
        _ip("link", "set", "psn" + tag, "netns", node)
        _ip("link", "set", "pso" + tag, "netns", outsider)
        _in(node, "ip", "addr", "add", "10.213.0.1/24", "dev", "psn" + tag)
        _in(node, "ip", "-6", "addr", "add", "fd00:213::1/64", "dev", "psn" + tag, "nodad")
        for addr in ("10.213.0.2/24", "10.213.0.3/24"):
            _in(outsider, "ip", "addr", "add", addr, "dev", "pso" + tag)
        _in(outsider, "ip", "-6", "addr", "add", "fd00:213::3/64", "dev", "pso" + tag, "nodad")
        for ns, dev in ((node, "psn" + tag), (outsider, "pso" + tag)):
            _in(ns, "ip", "link", "set", dev, "up")
            _in(ns, "ip", "link", "set", "lo", "up")
        yield {"node": node, "outsider": outsider, "procs": procs}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        for ns in (node, outsider):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def test_the_table_refuses_an_outsider_at_every_guarded_port_and_nothing_else(tmp_path, namespaces):
    node, outsider = namespaces["node"], namespaces["outsider"]
    rules = _rendered(tmp_path, "pairserve_test", ["10.213.0.2"], ["10.213.0.200", "fd00:213::200"])
    text = rules.read_text()
    assert "tcp dport { 10150, 10151, 40000-40001, 41000-41001 } jump guarded" in text
    # Someone else's table in the same ruleset: it must come through every load of ours untouched.
    _in(node, "nft", "add", "table", "inet", "theirs")
    _in(node, "nft", "add", "chain", "inet", "theirs", "input", "{ type filter hook input priority 10; }")
    _in(node, "nft", "-f", str(rules))
    _in(node, "nft", "-f", str(rules))  # loaded again: replaced in one transaction, not doubled
    listing = _in(node, "nft", "list", "ruleset").stdout
    assert listing.count("table inet pairserve_test") == 1 and "table inet theirs" in listing

    ports = [10150, 10151, 40000, 40001, 41000, 30080]
    server = subprocess.Popen(["ip", "netns", "exec", node, sys.executable, "-c", LISTEN, *map(str, ports)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    namespaces["procs"].append(server)
    assert server.stdout.readline().strip() == "ready"

    def probe(ns, source, host, port):
        return _in(ns, sys.executable, "-c", PROBE, source, host, str(port)).stdout.strip()

    for port in ports[:-1]:
        assert probe(outsider, "10.213.0.3", "10.213.0.1", port) == "refused", port  # an outsider
        assert probe(outsider, "fd00:213::3", "fd00:213::1", port) == "refused", port  # by IPv6 too
        assert probe(outsider, "10.213.0.2", "10.213.0.1", port) == "ok", port  # an allowed source
        assert probe(node, "-", "127.0.0.1", port) == "ok", port  # loopback
        assert probe(node, "-", "10.213.0.1", port) == "ok", port  # the node to its own address (lo)
    # The route's port is not guarded: anyone reaches it (GPUStack's API keys guard it).
    assert probe(outsider, "10.213.0.3", "10.213.0.1", 30080) == "ok"
    counters = _in(node, "nft", "list", "chain", "inet", "pairserve_test", "guarded").stdout
    assert "reject with tcp reset" in counters and "packets 0 " not in counters

    # Removing ours (what the role's absent tasks do) leaves theirs, and the ports open again.
    _in(node, "nft", "delete", "table", "inet", "pairserve_test")
    assert "table inet theirs" in _in(node, "nft", "list", "ruleset").stdout
    assert probe(outsider, "10.213.0.3", "10.213.0.1", 40000) == "ok"
