"""An outsider for the lab suites: a network namespace of its own, joined to the lab host by a veth pair and routed to
the nodes' addresses as any machine on the LAN is (lab/scenarios/default/tests/test_firewall.py, and again after node-b's
reboot in lab/scenarios/maintenance/tests). Its second address is a scrape source of node-a's table
(lab/inventory/host_vars/node-a.yml)."""

from __future__ import annotations

import subprocess

import pytest

NS, HOST_END, NS_END = "pairserve-lab-outsider", "psl-out-h", "psl-out-n"
HOST_ADDR, NS_ADDR, SCRAPE_ADDR = "10.214.0.1", "10.214.0.2", "10.214.0.3"


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
        _run("ip", "addr", "add", HOST_ADDR + "/29", "dev", HOST_END)
        _run("ip", "link", "set", HOST_END, "up")
        for cmd in (("ip", "addr", "add", NS_ADDR + "/29", "dev", NS_END),
                    ("ip", "addr", "add", SCRAPE_ADDR + "/29", "dev", NS_END), ("ip", "link", "set", NS_END, "up"),
                    ("ip", "link", "set", "lo", "up"), ("ip", "route", "add", "default", "via", HOST_ADDR)):
            _run("ip", "netns", "exec", NS, *cmd)
        yield NS
    finally:
        _run("ip", "link", "del", HOST_END, check=False)
        _run("ip", "netns", "del", NS, check=False)
